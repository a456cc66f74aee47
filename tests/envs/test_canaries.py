"""Outcomes decided where the agent's code never ran, and canaries a forger cannot tell from real tests
(issue 15, items 2 and 3).

- The grader's runner runs each test file in a child of its own; a child's answer counts for its own
  file only, whatever it claims.
- Canaries (hidden tests with one wrong expectation, verified to fail on the gold patch) run beside the
  real tests under random names; a forger that passes tests wholesale passes them too, and the grade is
  then `tampering`, reward 0 (each class of forger: tests/faults/test_forgers.py).
- A child sees its own target only: no other real copy or canary is on disk while it runs, and what it
  leaves in the folders it can write is put back before the next one.
"""

from __future__ import annotations

import ast
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import tasks.canaries
from envs.grading import grade_patch
from envs.run_plan import plan_run, scored
from envs.sandbox import SandboxConfig
from tasks import expectations
from tasks.canaries import TOKEN, Canary, _places, candidates, joined, spread, square, task_candidates
from tasks.expectations import rewrite
from tasks.model import HiddenTests, Task
from tasks.plain import encode
from tasks.suite import load_suite
from tests.conftest import require_backend
from tests.envs.test_grade_runner import run_runner
from tests.faults.hacker import PIPE_ANSWER

HIDDEN = """\
import unittest

import pytest

from calc import add


def test_add():
    # a comment, lost in the copies
    assert add(2, 3) == 5
    assert add(2, 3)


@pytest.mark.parametrize("a, b, total", [(1, 1, 2), (2, 2, 4)])
def test_cases(a, b, total):
    assert add(a, b) == total


class TestCalc(unittest.TestCase):
    def test_method(self):
        self.assertEqual(add(1, 2), 3)
"""


def test_candidates_change_one_constant_each_and_are_made_the_same_way_every_time() -> None:
    tests = {"test_add", "test_cases[1-1-2]", "TestCalc::test_method"}
    assert (
        candidates("tests/test_calc.py", HIDDEN, tests) == []
    )  # every number is used again: none stands out
    hidden = HIDDEN.replace("add(2, 3) == 5", "add(20, 31) == 51").replace("add(1, 2), 3", "add(17, 26), 43")
    found = candidates("tests/test_calc.py", hidden, tests)
    again = candidates("tests/test_calc.py", hidden, tests)
    assert found == again
    kinds = {c.mutation.split(": ", 1)[1] for c in found}
    assert kinds and not any("became !=" in k or "negated" in k or "assertNotEqual" in k for k in kinds)
    counts = sorted(Counter(re.findall(TOKEN, rewrite(hidden).source)).values())
    for canary in found:  # a value used once replaced by one the file never uses: the same counts
        assert sorted(Counter(re.findall(TOKEN, canary.source)).values()) == counts, canary.mutation
    normal = ast.dump(ast.parse(hidden))
    for canary in found:
        assert canary.source == ast.unparse(ast.parse(canary.source)) + "\n"  # written as the real copy is
        assert ast.dump(ast.parse(canary.source)) != normal
        assert "# a comment" not in canary.source
    assert {c.test for c in found} == {"test_add", "TestCalc::test_method"}  # not in parametrize cases
    chosen = spread(found, 2)
    assert {c.test for c in chosen} == {"test_add", "TestCalc::test_method"}


def _many_tests(n: int) -> str:
    """A hidden file of `n` tests, each with its own values (so that each has canaries)."""
    cases = [f"def test_{i}():\n    assert add({1000 + 7 * i}, 1) == {1001 + 7 * i}\n" for i in range(n)]
    return "from calc import add\n\n\n" + "\n\n".join(cases)


def test_only_the_chosen_canaries_are_written_and_they_are_the_full_searchs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A copy is written (the whole file parsed and printed) for each canary tried, not for each constant
    of the file: a file of thousands of constants took hours. What is chosen is what the full search
    would give for the same draws."""
    hidden = _many_tests(120)
    tests = [f"tests/test_many.py::test_{i}" for i in range(120)]
    every = task_candidates({"tests/test_many.py": hidden}, tests, rng=random.Random(3))
    assert len(every) == 120  # the input 1000 + 7i of each (the expected value is held out, 1 is shared)
    written = 0
    real_edited = tasks.canaries._edited

    def counted(text: str, edits: list[tuple[int, int, object]]) -> str:
        nonlocal written
        written += 1
        return real_edited(text, edits)

    monkeypatch.setattr(tasks.canaries, "_edited", counted)
    chosen = task_candidates({"tests/test_many.py": hidden}, tests, rng=random.Random(3), most=12)
    assert len(chosen) == 12 and written == 12
    full = {c.mutation: c.source for c in every}
    for canary in chosen:
        assert canary.source == full[canary.mutation]


def test_which_tests_get_canaries_is_drawn_not_the_files_first() -> None:
    """Where the trial cannot watch every test, the watched ones are drawn: a forger that reads the
    grader cannot count on the last tests of a long file going unwatched."""
    hidden = _many_tests(60)
    tests = [f"tests/test_many.py::test_{i}" for i in range(60)]
    picks = [
        {c.test for c in task_candidates({"tests/test_many.py": hidden}, tests, rng=random.Random(s), most=9)}
        for s in range(4)
    ]
    assert all(len(p) == 9 for p in picks)  # one canary in each test
    assert len(set().union(*picks)) > 18
    assert any(int(t.split("_")[1]) >= 30 for p in picks for t in p)


SWAPS = """\
from calc import add


def test_one():
    assert add(11, 3) == 14


def test_two():
    assert add(11, 4) == 15


def test_three():
    assert add(12, 6) == 18
"""


def _eleven_to_twelve(test: str) -> Canary:
    """The single that makes `test`'s 11 a 12: alone it keeps the file's counts (11 twice and 12 once
    become once and twice)."""
    written = rewrite(SWAPS).source
    function = next(f for _, f in expectations.test_functions(ast.parse(written)) if f.name == test)
    index = next(i for i, (c, _, _) in enumerate(_places(function)) if c.value == 11)
    canary = Canary(file="tests/test_add.py", test=test, mutation=f"{test}: 11 became 12", source="")
    canary._edits = [(function.lineno, index, 12)]
    return canary


def test_a_square_joins_only_changes_that_keep_the_counts_together() -> None:
    """Two singles that each keep the file's counts can break them together (11 -> 12 twice: 12 three
    times and 11 never): a square leaves out the second rather than store a copy that stands out."""
    one, two = _eleven_to_twelve("test_one"), _eleven_to_twelve("test_two")
    real = sorted(Counter(re.findall(TOKEN, rewrite(SWAPS).source)).values())
    for single in (one, two):
        assert sorted(Counter(re.findall(TOKEN, joined([single], SWAPS).source)).values()) == real
    assert sorted(Counter(re.findall(TOKEN, joined([one, two], SWAPS).source)).values()) != real
    made = square([one, two], [], SWAPS)
    assert [c.tests for c in made] == [["test_one"]]
    made = square([one], [two], SWAPS)  # B alone keeps them, AB does not: no B
    assert [c.tests for c in made] == [["test_one"]]
    for copy in made:
        assert sorted(Counter(re.findall(TOKEN, copy.source)).values()) == real


def test_a_child_decides_the_outcomes_of_its_own_file_only(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "forger.py").write_text(PIPE_ANSWER)  # forges every test it finds on disk, audit record and all
    (root / "tests" / "test_a.py").write_text("import forger\n\n\ndef test_a():\n    assert False\n")
    (root / "tests" / "test_b.py").write_text("def test_b():\n    assert False\n")
    ids = ["tests/test_a.py::test_a", "tests/test_b.py::test_b"]
    report, _ = run_runner(Path(sys.executable), tmp_path, ids)
    outcomes = report["outcomes"]
    assert isinstance(outcomes, dict)
    assert outcomes.get("tests/test_a.py::test_a") == "passed"  # its own: forged, which canaries are for
    assert outcomes.get("tests/test_b.py::test_b") == "failed"  # another file's: not the forger's to say
    (root / "forger.py").write_text(PIPE_ANSWER.replace(', "audit": []', ""))  # without the hook's record
    report, _ = run_runner(Path(sys.executable), tmp_path / "again", ids, repo=root)
    assert report["outcomes"] == {"tests/test_b.py::test_b": "failed"}, report
    assert (
        "tests/test_a.py: the child's answer lacks the audit hook's record: not believed"
        in report["tampering"]
    )


def test_a_process_a_test_leaves_holding_the_answer_pipe_does_not_hold_up_the_grader(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    lingering = "import os, time\n\n\ndef test_a():\n    if os.fork() == 0:\n        time.sleep(30)\n        os._exit(0)\n"
    (root / "tests" / "test_a.py").write_text(lingering)
    began = time.monotonic()
    report, _ = run_runner(Path(sys.executable), tmp_path, ["tests/test_a.py::test_a"])
    assert time.monotonic() - began < 20, "the runner waited for the pipe's end of file"
    assert report["outcomes"] == {"tests/test_a.py::test_a": "passed"}


@pytest.fixture(scope="module")
def task() -> Task:
    found = next(t for t in load_suite("demo") if t.id == "demo-add")
    assert len(found.hidden_tests.canaries) >= 2, "run `harness tasks validate --suite demo` to keep canaries"
    return found


def test_the_gold_patch_fails_every_canary_and_scores_one(task: Task) -> None:
    require_backend("bwrap")
    grade = grade_patch(task, task.gold_patch or "", SandboxConfig(backend="bwrap"))
    assert grade.reward == 1.0 and grade.tampering == [], grade.tampering
    assert set(grade.canaries.values()) == {"failed"}
    held = [c for c in plan_run(task, task.hidden_tests.canaries).canaries.values() if c.held is not None]
    assert len(grade.canaries) == len(task.hidden_tests.canaries) + len(held)  # stored and held


TABLE = """\
import pytest

from calc import add


@pytest.mark.parametrize("a, b, total", [(1, 2, 3), (2, 2, 4)])
def test_cases(a, b, total):
    assert add(a, b) == total
"""


def table_task(tmp_path: Path, ids: list[str]) -> Task:
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    hidden = HiddenTests(files={"tests/test_t.py": TABLE}, fail_to_pass=ids)
    return Task(id="t", title="t", repo=tmp_path, problem_statement="p", hidden_tests=hidden)


def test_each_case_of_a_table_is_decided_by_its_own_held_value(tmp_path: Path) -> None:
    """The task's ids (pytest's, which spell the values) run under ids that do not; a case passes on its
    own slot's value only, and another case's slot is not its to answer."""
    task = table_task(tmp_path, ["tests/test_t.py::test_cases[1-2-3]", "tests/test_t.py::test_cases[2-2-4]"])
    plan = plan_run(task, [])
    first, second = (plan.ids[i] for i in task.hidden_tests.fail_to_pass)
    assert first.endswith("::test_cases[0]") and second.endswith("::test_cases[1]")
    source = plan.held[first.split("::")[0]]
    assert "(1, 2, 3)" not in source and "_harness_observe(0 + _harness_case, add(a, b))" in source
    outcomes = {first: "passed", second: "passed"}
    right = {first: [[0, encode(3)]], second: [[1, encode(4)]]}
    assert [scored(i, plan, outcomes, right) for i in (first, second)] == ["passed", "passed"]
    swapped = {first: [[1, encode(4)]], second: [[0, encode(3)]]}  # each right for the other case
    assert [scored(i, plan, outcomes, swapped) for i in (first, second)] == ["failed", "failed"]
    wrong = {first: [[0, encode(4)]], second: [[1, encode(4)]]}
    assert [scored(i, plan, outcomes, wrong) for i in (first, second)] == ["failed", "passed"]
    held = [c for c in plan.canaries.values() if c.held is not None]
    assert held and all("[" in c.test for c in held)  # a held canary changes one case's value


def test_ids_that_pytest_would_not_make_leave_the_table_as_it_was(tmp_path: Path) -> None:
    """A hook can name cases its own way: where the task's ids do not match pytest's rules, the table
    stays in the file (its assertion runs there) and the ids are kept."""
    task = table_task(tmp_path, ["tests/test_t.py::test_cases[one]"])
    plan = plan_run(task, [])
    run_id = plan.ids["tests/test_t.py::test_cases[one]"]
    assert run_id.endswith("::test_cases[one]")
    assert "assert add(a, b) == total" in plan.held[run_id.split("::")[0]]
