"""`tasks validate` computes and stores the expected sides a task's hidden assertions build with code
(`envs/validation.py`, `tasks/computed.py`), on a copy of a built-in task, on a real sandbox."""

from __future__ import annotations

import shutil
from pathlib import Path

from envs.grading import grade_patch
from envs.run_plan import plan_run
from envs.sandbox import SandboxConfig
from envs.validation import validate_task
from tasks.computed import COMPUTED_FILE
from tasks.suite import load_suite, suite_path
from tests.conftest import require_backend
from tests.harness.test_cli import harness

TASK = "schedule-001-merge-touching"
HIDDEN = "tests/test_hidden_merge_touching.py"


def copied_suite(tmp_path: Path) -> Path:
    """The built-in suite's schedule repository and TASK, without its stored values and canaries."""
    builtin = suite_path("builtin")
    suite = tmp_path / "suite"
    shutil.copytree(builtin / "repos" / "schedule", suite / "repos" / "schedule")
    shutil.copytree(builtin / TASK, suite / TASK)
    (suite / TASK / COMPUTED_FILE).unlink()
    (suite / TASK / "canaries.json").unlink(missing_ok=True)
    return suite


def test_validate_stores_the_expected_sides_the_gold_tree_computes(tmp_path: Path) -> None:
    require_backend("bwrap")
    suite = copied_suite(tmp_path)
    config = SandboxConfig(backend="bwrap")
    before = load_suite(str(suite))[0]
    assert not before.hidden_tests.computed
    validation = validate_task(before, config, repeats=1)
    assert validation.ok, validation.problems
    task = load_suite(str(suite))[0]
    stored = task.hidden_tests.computed[HIDDEN]
    assert {(v.test, v.line) for v in stored.values} == {
        ("test_touching_intervals_are_joined", 14),
        ("test_chain_of_touching_and_overlapping", 19),
        ("test_touching_at_midnight", 25),
        ("test_no_two_merged_intervals_touch", 31),
        ("test_separate_intervals_stay_apart", 37),
    }
    held = sum(len(f.values) for f in task.hidden_tests.computed.values())  # the base's test file's too
    assert held > 5 and validation.decided_in_parent == plan_run(before, []).decided + held
    assert grade_patch(task, task.gold_patch or "", config).reward == 1.0
    assert grade_patch(task, "", config).reward == 0.0
    # the hidden file changed since: `--check` says the stored values are stale, and grading ignores them
    hidden = suite / TASK / "hidden" / HIDDEN
    hidden.write_text(hidden.read_text() + "\n\ndef test_more() -> None:\n    assert True\n")
    out = harness(
        "tasks",
        "validate",
        "--suite",
        str(suite),
        "--backend",
        "bwrap",
        "--check",
        "--repeats",
        "1",
        timeout=300,
    )
    said = " ".join((out.stdout + out.stderr).split())  # as one line, however the terminal wrapped it
    assert out.returncode != 0, said
    assert f"values of {HIDDEN} were made from another text: run it without --check" in said
