"""Failures the agent's tree causes while it is read, diffed or applied are the agent's (issue 32, item 5):
the rollout is graded, reward 0 or the grade of what could be judged, never `infra_error`, which GRPO
would leave out (a policy would learn to hide a bad attempt behind one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore
from tests.conftest import require_backend

TASK = "kvstore-001-expire-boundary"
CAUSES = {
    "attributes": r"printf 'x.txt working-tree-encoding=UTF-16\n*.py filter=evil diff=evil\n' > .gitattributes"
    r" && printf '\xff\xfe\xff' > x.txt",
    "encoding": r"printf 'caf\xe9 = 1\n' > latin.py && printf '\xef\xbb\xbfbom = 1\n' > bom.py",
    "odd names": r"touch \"$(printf 'new\nline.py')\" \"$(printf 'bad\xffname.py')\" ' lead.py' -- '-dash.py'",
    "unreadable file": "echo 'x = 1' > secret.py && chmod 000 secret.py",
    "unreadable folder": "mkdir -p shut && echo 'y = 2' > shut/mod.py && chmod 000 shut",
    "huge file": "head -c 150000000 /dev/urandom > big.bin",
    "links": "ln -s /proc/self/root root && ln -s loop1 loop2 && ln -s loop2 loop1 && mkfifo pipe",
    "a folder turned into a file": "rm -rf kvstore && echo 'not a package any more' > kvstore",
}
"""What the agent leaves in its repository, by cause: one bash command each, run from /repo."""


@pytest.mark.parametrize("cause", list(CAUSES))
@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_what_the_agents_tree_breaks_is_graded_not_an_infra_error(
    backend: str, cause: str, tmp_path: Path
) -> None:
    require_backend(backend)
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump([{"name": "bash", "arguments": {"command": CAUSES[cause]}}]))
    config = RolloutConfig.model_validate(
        {
            "suite": "builtin",
            "tasks": [TASK],
            "policy": f"scripted:{script}",
            "out": str(tmp_path / "run"),
            "sandbox": {"backend": backend},
        }
    )
    rollout(config)
    (trajectory,) = RunStore(tmp_path / "run").trajectories()
    assert trajectory.status != "infra_error", trajectory.status_reason
    assert trajectory.grade is not None and trajectory.grade.infra_error is None, trajectory.grade
    assert trajectory.reward == 0.0  # the bug is still there, whatever could be read
