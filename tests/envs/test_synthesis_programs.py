"""`harness tasks synth --language javascript` (`envs/synthesis_programs.py`) on a small `node:test`
repository built here: a mutation the grader measures becomes a task that validates (gold 1, empty 0,
canaries made), whose hidden files are the test files; a language with no mutation operators is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.synthesis_programs import tap_failure
from harness.cli import main
from tasks.suite import load_suite
from tests.conftest import backend_missing

RANGE = """"use strict";

/** The whole numbers from lo up to hi, both included. */
function span(lo, hi) {
  if (hi < lo) return [];
  const out = [];
  for (let n = lo; n <= hi; n++) out.push(n);
  return out;
}

/** n kept inside lo..hi. */
function clamp(n, lo, hi) {
  if (n < lo) {
    return lo;
  } else if (n > hi) {
    return hi;
  }
  return n;
}

module.exports = { span, clamp };
"""
SPAN_TEST = """"use strict";
const test = require("node:test");
const assert = require("node:assert");
const { span } = require("../src/range");

test("span counts up", () => {
  assert.deepStrictEqual(span(2, 5), [2, 3, 4, 5]);
});
test("span of one", () => {
  assert.deepStrictEqual(span(3, 3), [3]);
});
test("span of nothing is a list", () => {
  assert.ok(Array.isArray(span(Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER)));
});
"""
CLAMP_TEST = """"use strict";
const test = require("node:test");
const assert = require("node:assert");
const { clamp } = require("../src/range");

test("clamp keeps inside", () => {
  assert.strictEqual(clamp(5, 1, 9), 5);
});
test("clamp raises to the floor", () => {
  assert.strictEqual(clamp(-4, 1, 9), 1);
});
test("clamp lowers to the ceiling", () => {
  assert.strictEqual(clamp(12, 1, 9), 9);
});
"""


UNWATCHED_TEST = """
test("clamp gives a whole number", () => {
  assert.ok(clamp(4, 1, 9) < 100);
});
"""
"""A test whose only assertion states a range (no check is held of it) and whose literals' canaries pass on
the fixed code too, however they are drawn (a canary keeps a number's digits and roundness: 100 becomes 110 to
190, each of 4, 1 and 9 another digit, and `clamp(4, lo, hi)` stays at most 9): nothing but its process
decides it. With `<= 9` a canary drew `<= 1`, `2` or `3` three times in seven, failed on the gold tree, and watched it."""


def node_repo(root: Path, clamp_test: str = CLAMP_TEST) -> Path:
    repo = root / "ranges"
    for path, text in {
        "src/range.js": RANGE,
        "test/span.test.js": SPAN_TEST,
        "test/clamp.test.js": clamp_test,
    }.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    return repo


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("backend", ["bwrap"])
def test_synthesis_makes_a_valid_javascript_task(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On bwrap only, for CI's time: synthesis grades through the sandbox like any grade, and Docker's
    JavaScript grading is tested in test_javascript.py (this test with `docker` passed, 90-100 s, 2026-12-06)."""
    why = backend_missing(backend)
    if why is not None:
        pytest.fail(f"{backend} is needed: {why}")
    out = tmp_path / "suite"
    unwatched = backend == "bwrap"  # left out of PASS_TO_PASS by validation (once: it costs a validation)
    repo = node_repo(tmp_path, CLAMP_TEST + UNWATCHED_TEST if unwatched else CLAMP_TEST)
    argv = ["tasks", "synth", "--language", "javascript", "--repo", str(repo), "--out", str(out)]
    code = main([*argv, "--n", "1", "--max-tries", "3", "--backend", backend, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, (report["trials"], report["rejected"])
    assert report["passing_tests"] == 6 + unwatched  # every test holds a value or a literal
    (made,) = report["tasks"]
    (task,) = load_suite(str(out))
    assert task.language == "javascript" and task.id == made["id"]
    assert sorted(task.hidden_tests.files) == ["test/clamp.test.js", "test/span.test.js"]
    assert not (task.repo / "test").exists()  # the agent sees no test file: they are hidden
    ids = task.hidden_tests.fail_to_pass + task.hidden_tests.pass_to_pass
    assert not any("whole number" in i for i in ids)
    assert made["pass_to_pass"] == len(task.hidden_tests.pass_to_pass)
    assert len(task.hidden_tests.fail_to_pass) == made["fail_to_pass"] >= 1 and len(ids) == 5
    mutated = (task.repo / made["path"]).read_text()
    assert mutated != RANGE and task.gold_patch and len(task.gold_patch.splitlines()) < 14
    statement = task.problem_statement
    assert "`span`" in statement or "`clamp`" in statement
    assert not any(i.partition("::")[2] in statement for i in ids)
    changed = [line for line in mutated.splitlines() if line not in RANGE.splitlines()]
    assert not any(line.strip() in statement for line in changed if line.strip())
    assert made["canaries"] >= 1


def test_a_language_without_mutation_operators_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "tasks",
        "synth",
        "--language",
        "go",
        "--repo",
        str(node_repo(tmp_path)),
        "--out",
        str(tmp_path / "s"),
    ]
    assert main(argv) == 2
    assert "--language go: synthesis has no mutation operators for go yet" in capsys.readouterr().err
    assert not (tmp_path / "s" / "repos" / "ranges").exists()


def test_a_failure_message_is_read_off_tap() -> None:
    output = (
        "TAP version 13\n# Subtest: a\nnot ok 1 - a\n  ---\n  duration_ms: 0.4\n  error: |-\n"
        "    Expected values to be strictly equal:\n    \n    2 !== 3\n    \n  code: 'ERR_ASSERTION'\n"
        '  ...\n# Subtest: b\nnot ok 2 - b\n  ---\n  error: "Cannot read properties of null"\n'
        "  name: 'TypeError'\n  ...\n"
    )
    assert tap_failure(output) == "Expected values to be strictly equal:\n\n2 !== 3"
    assert tap_failure(output.split("# Subtest: b\n")[1]) == "TypeError: Cannot read properties of null"
