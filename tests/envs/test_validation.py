"""`tasks validate` computes and stores the expected sides a task's hidden assertions build with code
(`envs/validation.py`, `tasks/computed.py`), on a copy of a built-in task, on a real sandbox."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import envs.validation as validation_module
from envs.grading import Grade, grade_patch
from envs.run_plan import plan_run
from envs.sandbox import SandboxConfig
from envs.validation import TRIAL_ATTEMPTS, uncovered_tests, validate_task
from tasks.canaries import Canary
from tasks.computed import COMPUTED_FILE
from tasks.model import Task
from tasks.suite import load_suite, suite_path
from tests.conftest import require_backend
from tests.harness.test_cli import harness

TASK = "schedule-001-merge-touching"
HIDDEN = "tests/test_hidden_merge_touching.py"


def copied_suite(tmp_path: Path, task: str = TASK) -> Path:
    """The built-in suite's schedule repository and `task`, without its stored values and canaries."""
    builtin = suite_path("builtin")
    suite = tmp_path / "suite"
    shutil.copytree(builtin / "repos" / "schedule", suite / "repos" / "schedule")
    shutil.copytree(builtin / task, suite / task)
    (suite / task / COMPUTED_FILE).unlink()
    (suite / task / "canaries.json").unlink(missing_ok=True)
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


class FailingTrials:
    """`grade_patch` whose first `failures` grades with trial canaries come back as an infra error (a
    sandbox that timed out on a loaded host): a fault that cannot be had on demand from a real host."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.trials = 0

    def __call__(self, task: Task, patch: str, config: SandboxConfig, **kwargs: Any) -> Grade:
        graded = grade_patch(task, patch, config, **kwargs)
        if kwargs.get("trial"):
            self.trials += 1
            if self.trials <= self.failures:
                return graded.model_copy(update={"infra_error": "sandbox timed out", "correct": 0.0})
        return graded


def test_canaries_survive_a_failing_first_trial_and_zero_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One failed trial grade used to leave the task without canaries, silently; it is now tried again,
    and a task left with none says the trial grades decided nothing."""
    require_backend("bwrap")
    config = SandboxConfig(backend="bwrap")
    task = load_suite(str(copied_suite(tmp_path, "schedule-005-every-weekday")))[0]  # it has text canaries
    once = FailingTrials(1)
    monkeypatch.setattr(validation_module, "grade_patch", once)
    validation = validate_task(task, config, repeats=1, episode=False)
    assert validation.ok, validation.problems
    assert validation.canaries > 0 and once.trials > 1
    always = FailingTrials(10**6)
    monkeypatch.setattr(validation_module, "grade_patch", always)
    validation = validate_task(task, config, repeats=1, episode=False)
    assert validation.canaries == 0 and always.trials == TRIAL_ATTEMPTS
    assert (
        f"decided nothing in {TRIAL_ATTEMPTS} tries (infra error: sandbox timed out)" in validation.no_canary
    )


def test_validation_names_the_tests_no_canary_covers(tmp_path: Path) -> None:
    """Red team of issue 36 (docs/reliability.md 5h): a forger that passes only the tests no canary
    changes goes unseen; validation names them (a parametrized case counts as its function)."""
    task = load_suite(str(copied_suite(tmp_path, "schedule-005-every-weekday")))[0]
    named = [*task.hidden_tests.fail_to_pass, *task.hidden_tests.pass_to_pass]
    assert uncovered_tests(task, []) == named
    first = named[0]
    file, test = first.split("::", 1)
    canary = Canary(file=file, test=test.split("[", 1)[0], mutation="line 1: 1 became 2", source="")
    assert uncovered_tests(task, [canary]) == [
        t for t in named if t.split("[", 1)[0] != first.split("[", 1)[0]
    ]


def test_the_check_of_stored_canaries_reads_the_gold_and_empty_grades(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`tasks validate --check` (keep=False) grades the gold patch and the empty patch, the stored canaries
    running beside the hidden tests in each: their verdicts there are the check's, so it makes two grades
    where it made four (two more with the canaries on trial)."""
    require_backend("bwrap")
    graded: list[str] = []

    def counted(task: Task, patch: str, *args: Any, **kwargs: Any) -> Grade:
        graded.append(patch)
        return grade_patch(task, patch, *args, **kwargs)

    monkeypatch.setattr(validation_module, "grade_patch", counted)
    task = next(t for t in load_suite("builtin") if t.id == "kvstore-001-expire-boundary")
    assert len(task.hidden_tests.canaries) == 3
    validation = validate_task(task, SandboxConfig(backend="bwrap"), repeats=1, keep=False)
    assert validation.ok and validation.canaries == 3, validation.problems
    assert graded == [task.gold_patch, ""]


def verdicts(task_id: str, canaries: dict[str, str], **fields: Any) -> Grade:
    """A grade of `task_id` that reports `canaries`' verdicts, with `fields` (`correct`, `infra_error`)."""
    return Grade.ungraded(task_id).model_copy(update={"canaries": canaries, **fields})


def test_stored_canaries_are_judged_by_the_verdicts_of_the_grades_made(tmp_path: Path) -> None:
    """The check keeps a stored canary that failed beside the gold patch and that the base did not pass, as
    trial grades would decide; it reads only a gold grade that passed every test and an empty grade that
    decided, and grades with the canaries on trial otherwise (`_failing_on_gold` without `graded`)."""
    task = load_suite(str(copied_suite(tmp_path, "schedule-005-every-weekday")))[0]
    file, test = task.hidden_tests.fail_to_pass[0].split("::", 1)
    kept = Canary(file=file, test=test, mutation="line 3: 1 became 2", source="x", slots=[1])
    met = Canary(file=file, test=test, mutation="line 4: 5 became 6", source="x", slots=[2])
    negated = Canary(
        file=file, test=test, mutation="line 5: == became !=", source="x", negated=True, slots=[3]
    )
    both = {c.label: "failed" for c in (kept, met, negated)}
    gold = verdicts(task.id, both, correct=1.0)
    empty = verdicts(task.id, {kept.label: "failed", met.label: "passed", negated.label: "passed"})
    still, why = validation_module._failing_on_gold(
        task, [kept, met, negated], SandboxConfig(backend="bwrap"), (gold, empty)
    )
    assert (still, why) == ([kept, negated], "")  # the negated canary of a FAIL_TO_PASS test is exempt
    unsure = verdicts(task.id, {kept.label: "unexplained"}, correct=1.0)
    assert validation_module._failing_on_gold(task, [kept], SandboxConfig(), (unsure, empty)) == ([], "")
    failed = verdicts(task.id, both, correct=0.5)
    broken = verdicts(task.id, both, infra_error="sandbox timed out")
    pick = validation_module._stored_canaries_graded
    assert pick([gold, failed], [empty, broken]) == (gold, empty)
    assert pick([failed, broken], [broken]) == (None, None)
