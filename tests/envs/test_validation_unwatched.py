"""`harness tasks validate --drop-unwatched` (`envs.validation.validate_dropping_unwatched`) on copies of the
built-in Go task go-001 on bwrap: a PASS_TO_PASS test that no held value and no text canary watches is
dropped from task.yaml and the task validates; an unwatched FAIL_TO_PASS test refuses the task and nothing
is dropped. `--check`'s advice to validate without it is given only where values computed now would watch
a refused test."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from envs.sandbox import SandboxConfig
from envs.validation import UNWATCHED, validate_task
from harness.cli import main
from tasks.computed import COMPUTED_FILE
from tasks.suite import load_suite, suite_path
from tests.conftest import require_backend

TASK = "go-001-roman-nine-hundred"
HIDDEN = "roman_hidden_test.go"
# Neither is held (only `!=` and `!reflect.DeepEqual` checks are), neither condition has a literal for a
# text canary to change, and neither gets a negated canary (its block may end without failing: a correct
# fix need not fail it negated): nothing but the test's process decides them.
UNWATCHED_P2P = """
func TestRomanIsNoLongerThanItsValue(t *testing.T) {
\tn := len(t.Name())
\tif len(ToRoman(n)) > n {
\t\tif n > 0 {
\t\t\tt.Errorf("ToRoman(%d) = %q", n, ToRoman(n))
\t\t}
\t}
}
"""
UNWATCHED_F2P = """
func TestNineHundredIsNoLongerThanFourHundred(t *testing.T) {
\tn, m := 900, 400
\tif len(ToRoman(n)) > len(ToRoman(m)) {
\t\tif n > m {
\t\t\tt.Errorf("ToRoman(%d) = %q", n, ToRoman(n))
\t\t}
\t}
}
"""
P2P_ID = f"{HIDDEN}::TestRomanIsNoLongerThanItsValue"
F2P_ID = f"{HIDDEN}::TestNineHundredIsNoLongerThanFourHundred"


def go_suite(
    tmp_path: Path, tests: str, fail_to_pass: list[str], pass_to_pass: list[str], own: bool = True
) -> Path:
    """A copy of go-001 whose hidden file has `tests` (after its own, with `own`), naming `fail_to_pass`
    and `pass_to_pass`, without its stored values."""
    builtin = suite_path("go")
    suite = tmp_path / "suite"
    shutil.copytree(builtin / "repos" / "tally", suite / "repos" / "tally")
    shutil.copytree(builtin / TASK, suite / TASK)
    (suite / TASK / COMPUTED_FILE).unlink()
    hidden = suite / TASK / "hidden" / HIDDEN
    hidden.write_text((hidden.read_text() if own else 'package tally\n\nimport "testing"\n') + tests)
    spec = yaml.safe_load((suite / TASK / "task.yaml").read_text())
    spec.update(fail_to_pass=fail_to_pass, pass_to_pass=pass_to_pass)
    (suite / TASK / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return suite


def validate(suite: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["tasks", "validate", "--suite", str(suite), "--backend", "bwrap", "--repeats", "1",
                 "--drop-unwatched", "--json"])  # fmt: skip
    (result,) = json.loads(capsys.readouterr().out)
    return code, result


@pytest.mark.timeout(900)
def test_an_unwatched_pass_to_pass_test_is_dropped_and_the_task_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_backend("bwrap")
    own = yaml.safe_load((suite_path("go") / TASK / "task.yaml").read_text())
    suite = go_suite(tmp_path, UNWATCHED_P2P, own["fail_to_pass"], [*own["pass_to_pass"], P2P_ID])
    code, result = validate(suite, capsys)
    assert code == 0 and result["ok"], result["problems"]
    assert result["dropped"] == [P2P_ID] and result["unwatched"] == []
    assert result["gold_rewards"] == [1.0] and result["empty_rewards"] == [0.0]
    assert result["canaries"] + result["held_canaries"] > 0
    (task,) = load_suite(str(suite))
    assert task.hidden_tests.pass_to_pass == own["pass_to_pass"]
    assert task.hidden_tests.fail_to_pass == own["fail_to_pass"]
    assert task.hidden_tests.computed  # stored with the task that validated


@pytest.mark.timeout(900)
def test_an_unwatched_fail_to_pass_test_refuses_the_task_and_nothing_is_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing of its tests can be held, so no held values are stored: that is no reason to validate it
    without --check, which it was not, nor under --check, where values computed now hold nothing either."""
    require_backend("bwrap")
    suite = go_suite(tmp_path, UNWATCHED_F2P + UNWATCHED_P2P, [F2P_ID], [P2P_ID], own=False)
    before = (suite / TASK / "task.yaml").read_text()
    code, result = validate(suite, capsys)
    assert code == 1 and not result["ok"] and result["dropped"] == []
    assert result["unwatched"] == [F2P_ID, P2P_ID]
    (problem,) = result["problems"]
    assert problem.startswith(UNWATCHED) and "--check" not in problem
    assert (suite / TASK / "task.yaml").read_text() == before
    assert not (suite / TASK / COMPUTED_FILE).exists()
    (task,) = load_suite(str(suite))
    checked = validate_task(task, SandboxConfig(backend="bwrap"), repeats=1, keep=False)
    assert checked.unwatched == [F2P_ID, P2P_ID]
    assert not any("--check" in p for p in checked.problems), checked.problems


@pytest.mark.timeout(900)
def test_check_advises_validating_without_it_where_values_would_be_held(tmp_path: Path) -> None:
    """go-001 without its stored values: under --check every named test is unwatched, and the values the
    gold tree computes now would watch them."""
    require_backend("bwrap")
    own = yaml.safe_load((suite_path("go") / TASK / "task.yaml").read_text())
    suite = go_suite(tmp_path, "", own["fail_to_pass"], own["pass_to_pass"])
    (task,) = load_suite(str(suite))
    checked = validate_task(task, SandboxConfig(backend="bwrap"), repeats=1, keep=False)
    assert checked.unwatched == [*own["fail_to_pass"], *own["pass_to_pass"]]
    (problem,) = checked.problems
    assert problem.startswith(UNWATCHED) and problem.endswith("validate it without --check")
