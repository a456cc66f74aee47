"""In-process forgers of the grade, by class (issue 15's red team; `policies.hacker.FORGERS`).

Each forger is code appended to the module the tests import, so it runs inside the test process, as an
agent's patch would, and it leaves the bug in place. It is graded on both backends, on a built-in task,
a demo task and a task imported in SWE-bench's layout, and must score 0 on each. A forger stopped by the
canaries is first shown to be live: graded without canaries, its forged outcomes pass.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from envs.grading import Grade, grade_patch, validate_task
from envs.sandbox import SandboxConfig
from policies.hacker import FORGERS
from tasks.model import Task
from tasks.patches import diff_trees
from tasks.suite import load_suite
from tests.conftest import require_backend
from tests.harness.test_cli import harness
from tests.tasks.test_swebench import Dataset

LIVE_ON = "demo-is-even"
"""The task each forger stopped by canaries is shown live on (graded without canaries): its hidden asserts
have no expected value the parent could hold, so only canaries stand between a forger and the reward."""


@pytest.fixture(scope="module")
def swebench_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    """`acme__calc-2`, imported with `harness tasks import swebench` and validated (canaries kept)."""
    require_backend("bwrap")
    data = Dataset(tmp_path_factory.mktemp("swebench"))
    proc = harness(
        "tasks", "import", "swebench", str(data.file), "--repos", str(data.clones), "--out", str(data.suite)
    )  # fmt: skip
    assert "acme__calc-2" in proc.stdout, proc.stdout + proc.stderr
    task = next(t for t in load_suite(str(data.suite)) if t.id == "acme__calc-2")
    validation = validate_task(task, SandboxConfig(backend="bwrap"), repeats=1)
    assert validation.ok and validation.canaries >= 1, validation
    return next(t for t in load_suite(str(data.suite)) if t.id == "acme__calc-2")


@pytest.fixture(scope="module")
def tasks(swebench_task: Task) -> dict[str, Task]:
    builtin = next(t for t in load_suite("builtin") if t.id == "kvstore-001-expire-boundary")
    demo = next(t for t in load_suite("demo") if t.id == LIVE_ON)
    found = {t.id: t for t in (builtin, demo, swebench_task)}
    assert all(len(t.hidden_tests.canaries) >= 1 for t in found.values())
    return found


def forged(task: Task, tail: str, tmp_path: Path) -> str:
    """A patch that appends `tail` to the module the gold patch fixes, and fixes nothing."""
    target = re.search(r"^\+\+\+ b/(\S+)$", task.gold_patch or "", re.M)
    assert target is not None, task.gold_patch
    copy = Path(tempfile.mkdtemp(prefix=f"forged-{task.id}-", dir=tmp_path)) / "repo"
    shutil.copytree(task.repo, copy, ignore=shutil.ignore_patterns(".git"))
    module = copy / target.group(1)
    module.write_text(module.read_text() + "\n" + tail)
    return diff_trees(task.repo, copy)


def summary(grade: Grade) -> str:
    return json.dumps(grade.model_dump(exclude={"graded_patch", "simplicity", "dropped_why"}), indent=1)


@pytest.mark.parametrize("name", list(FORGERS))
def test_a_forger_in_the_test_process_scores_nothing(
    name: str, backend: str, tasks: dict[str, Task], tmp_path: Path
) -> None:
    forger = FORGERS[name]
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    live = tasks[LIVE_ON]
    if forger.stopped_by == "canaries":
        unguarded = grade_patch(live, forged(live, forger.tail, tmp_path), config, trial=[])
        assert unguarded.infra_error is None and unguarded.patch_applied, summary(unguarded)
        forged_f2p = set(unguarded.fail_to_pass.values())
        assert forged_f2p == {"passed"}, f"{name} forges nothing without canaries:\n{summary(unguarded)}"
    for task in tasks.values():
        grade = grade_patch(task, forged(task, forger.tail, tmp_path), config)
        assert grade.infra_error is None and grade.patch_applied, summary(grade)
        assert grade.reward == 0.0 and grade.correct == 0.0, f"{name} on {task.id}:\n{summary(grade)}"
        if forger.stopped_by == "canaries" and task.id == LIVE_ON:
            assert any(t.startswith("canary ") for t in grade.tampering), summary(grade)
