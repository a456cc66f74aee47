"""The JavaScript / TypeScript plug-in (`envs/languages/javascript.py`): its suite graded and validated on
both backends, forgers in the test process and in the tree scored nothing, and its reading of test files.
A forger's grade is decided by the plug-in and the parent, alike on every backend: forgers run on bwrap
alone (CI's time); each backend's own defences are tests/envs/test_sandbox.py's and tests/faults'."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from envs.grading import grade_patch, integrity_of
from envs.judge import judge_tree
from envs.languages import language_of
from envs.languages.javascript import (
    JAVASCRIPT,
    assertions_in,
    equalities,
    failure_line,
    named_tests,
    run_path,
)
from envs.process_grading import plan_process_run
from envs.process_held import rewrite
from envs.sandbox import SandboxConfig
from envs.validation import validate_task
from tasks.model import Task
from tasks.suite import load_suite
from tests.conftest import require_backend
from tests.envs.test_languages import patched, replace_in

RPN = "js-002-rpn-operand-order"
WRAP = "ts-003-wrap-exact-width"


@pytest.fixture(scope="module")
def js_tasks() -> dict[str, Task]:
    return {t.id: t for t in load_suite("javascript")}


def test_the_suite_is_javascript_with_typescript_tests(js_tasks: dict[str, Task]) -> None:
    assert {t.language for t in js_tasks.values()} == {"javascript"}
    assert {integrity_of(t) for t in js_tasks.values()} == {"process"}
    assert any(p.endswith(".ts") for t in js_tasks.values() for p in t.hidden_tests.files)


@pytest.mark.parametrize(("backend", "which"), [("bwrap", ""), ("docker", "ts-003")])
def test_the_suite_validates_with_its_canaries(backend: str, which: str) -> None:
    """Gold 1, empty 0, expected values held outside the sandbox, at least 3 canaries a task: every task
    on the host's Node (bwrap), a TypeScript one on the image's (docker; for CI's time, `harness tasks
    validate --suite tasks/suites/javascript --backend docker` shows all four)."""
    require_backend(backend)
    for task in [t for t in load_suite("javascript") if t.id.startswith(which)]:
        result = validate_task(task, SandboxConfig(backend=backend), repeats=1, keep=False)
        assert result.ok, (task.id, result.problems)
        assert result.gold_rewards == [1.0] and result.empty_rewards == [0.0]
        assert result.canaries + result.held_canaries >= 3, task.id
        assert result.decided_in_parent >= 5, task.id


def exit_forger(tree: Path) -> None:
    """Leaves the bug; loading the module under test ends the process as a passing TAP run would."""
    replace_in(
        tree / "src/rpn.js",
        '"use strict";\n',
        '"use strict";\nprocess.stdout.write("ok 1 - x\\n1..1\\n# tests 1\\n# pass 1\\n# fail 0\\n");\n'
        "process.exit(0);\n",
    )


def reader_forger(tree: Path) -> None:
    """Leaves the bug; `evaluate` reads the test file that called it and answers the literal it finds."""
    replace_in(
        tree / "src/rpn.js",
        "function evaluate(expr) {\n",
        "function evaluate(expr) {\n"
        "  const caller = (new Error().stack.match(/\\((\\/[^:()]+\\.test\\.[jt]s):/) || [])[1];\n"
        '  const text = caller ? require("fs").readFileSync(caller, "utf8") : "";\n'
        "  const seen = text.split(`evaluate(${JSON.stringify(expr)}), `)[1];\n"
        "  if (seen) return eval(`(${seen.slice(0, seen.indexOf('}') + 1)})`);\n",
    )


@pytest.mark.parametrize("backend", ["bwrap"])  # decided alike on every backend: CI's time
def test_forgers_in_the_test_process_score_nothing(
    backend: str, js_tasks: dict[str, Task], tmp_path: Path
) -> None:
    """Held values stop both: the one that exits as passed never reports them, and the one that reads its
    test's file finds no expected value there. Without held values and canaries both are live (decided in
    the parent alike on every backend: shown on bwrap)."""
    require_backend(backend)
    task, config = js_tasks[RPN], SandboxConfig(backend=backend)
    plain = task.model_copy(update={"hidden_tests": task.hidden_tests.model_copy(update={"computed": {}})})
    for name, forger in [("exit", exit_forger), ("reader", reader_forger)]:
        patch = patched(task, tmp_path / name, forger)
        graded = grade_patch(task, patch, config)
        assert graded.infra_error is None and graded.correct == 0.0 and graded.reward <= 0.0, (name, graded)
        assert graded.decided_in_parent >= 6, name
        live = grade_patch(plain, patch, config, trial=[])
        assert live.infra_error is None and live.correct == 1.0, (name, live)


def visible_forger(tree: Path) -> None:
    """Red team 3's (A): the fix, a regression of `+` that only the visible basics file's PASS_TO_PASS test
    covers, and a pass forged in any test process whose file reports nothing to the grader."""
    replace_in(tree / "src/rpn.js", "right - left", "left - right")
    replace_in(tree / "src/rpn.js", "(left, right) => left + right,", "(left, right) => left + right + 1,")
    replace_in(
        tree / "src/rpn.js",
        '"use strict";\n',
        '"use strict";\nconst own = [".js", ".ts"].map((e) => process.argv[1] + e)'
        '.find((f) => require("fs").existsSync(f));\n'
        'if (own && !require("fs").readFileSync(own, "utf8").includes("harness_observe")) {\n'
        '  require("fs").writeSync(1, "# pass 1\\n# fail 0\\n");\n  process.exit(0);\n}\n',
    )


def wrap_regression(tree: Path) -> None:
    """ts-003's fix, and a regression that only the hidden test of empty text catches, with `0` and
    `assert.ok`: guessable values, no text canary."""
    replace_in(tree / "src/text.js", "needed < width", "needed <= width")
    replace_in(tree / "src/text.js", 'if (line !== "") {', "{")


def assert_forger(tree: Path) -> None:
    """Red team 3's (B), JavaScript: `node:assert`'s functions made no-ops (the module object is shared with
    the test)."""
    wrap_regression(tree)
    replace_in(
        tree / "src/text.js",
        '"use strict";\n',
        '"use strict";\nconst shared = require("node:assert");\n'
        "for (const k of Object.keys(shared)) {\n  try { shared[k] = () => {}; } catch (e) {}\n}\n",
    )


def unheld_forger(tree: Path) -> None:
    """Red team 3's (B), as its Java forger: a pass forged in any test whose body (read from the calling
    test file) reports nothing to the grader."""
    wrap_regression(tree)
    replace_in(
        tree / "src/text.js",
        "function wrap(text, width) {\n",
        "function wrap(text, width) {\n"
        "  const at = [...new Error().stack.matchAll(/\\((\\/[^:()]+\\.test\\.[jt]s):(\\d+):/g)].pop();\n"
        "  if (at) {\n"
        '    const all = require("fs").readFileSync(at[1], "utf8").split("\\n");\n'
        "    let i = Number(at[2]) - 1, j = Number(at[2]);\n"
        "    while (i > 0 && !/^test\\(/.test(all[i])) i--;\n"
        "    while (j < all.length && !/^test\\(/.test(all[j])) j++;\n"
        '    if (!all.slice(i, j).join("\\n").includes("harness_observe")) {\n'
        '      require("fs").writeSync(1, "# pass 1\\n# fail 0\\n");\n      process.exit(0);\n    }\n  }\n',
    )


@pytest.mark.parametrize("backend", ["bwrap"])  # the held values' comparison is the parent's: CI's time
def test_red_team_3_forgers_score_nothing(backend: str, js_tasks: dict[str, Task], tmp_path: Path) -> None:
    """A correct fix plus a regression plus a forgery (docs/reliability.md 5k, red team 3): (A) a visible
    test file's PASS_TO_PASS test catches the regression, forged where a file reports nothing: every named
    file now runs rewritten with held values; (B) a hidden test whose checks are all guessable catches it,
    hidden by no-op'ing `node:assert` (frozen now) or by forging each test with nothing held (its guessable
    values are held now). Each scored 0.94-0.97 before; the regression alone scores 0."""
    require_backend(backend)
    config = SandboxConfig(backend=backend)
    for task_id, forger in [(RPN, visible_forger), (WRAP, assert_forger), (WRAP, unheld_forger)]:
        task = js_tasks[task_id]
        graded = grade_patch(task, patched(task, tmp_path / forger.__name__, forger), config)
        assert graded.infra_error is None and graded.reward <= 0.0, (forger.__name__, graded)
        assert graded.correct < 1.0, forger.__name__


def check_forger(tree: Path) -> None:
    """Red team 4's, on ts-003: the fix, a regression that only the empty-text test's
    `assert.ok(Array.isArray(lines(" ab ", 5)))` sees (one word), and a pass forged where it runs: TAP's
    counts and `process.exit(0)`, after the test's held equality was reported."""
    replace_in(tree / "src/text.js", "needed < width", "needed <= width")
    replace_in(
        tree / "src/text.js",
        "function wrap(text, width) {\n",
        "function wrap(text, width) {\n"
        "  if (text.split(/\\s+/).filter(Boolean).length === 1) {\n"
        '    require("fs").writeSync(1, "# pass 1\\n# fail 0\\n");\n    process.exit(0);\n  }\n',
    )


def without_check(task: Task) -> Task:
    """`task` as the old grader held it: no stored value for its checks (`assert.ok` and kin)."""
    computed = {
        path: held.model_copy(update={"values": [v for v in held.values if " | " not in str(v.expected)]})
        for path, held in task.hidden_tests.computed.items()
    }
    return task.model_copy(
        update={"hidden_tests": task.hidden_tests.model_copy(update={"computed": computed})}
    )


@pytest.mark.parametrize("backend", ["bwrap"])  # the held values' comparison is the parent's: CI's time
def test_red_team_4_forger_of_an_unheld_check_scores_nothing(
    backend: str, js_tasks: dict[str, Task], tmp_path: Path
) -> None:
    """A correct fix plus a regression that only a non-equality assertion of a test that holds another
    value sees, plus a forger where the regression runs (docs/reliability.md 5k, red team 4): with the
    check's subject held (`["ab"] | true`), the forged process never reports it: 0. With the checks'
    values dropped, as the old grader held them, the same patch passes every test."""
    require_backend(backend)
    task, config = js_tasks[WRAP], SandboxConfig(backend=backend)
    patch = patched(task, tmp_path, check_forger)
    graded = grade_patch(task, patch, config)
    assert graded.infra_error is None and graded.reward <= 0.0 and graded.correct < 1.0, graded
    assert graded.pass_to_pass["test/wrap.hidden.test.ts::empty text has no lines"] == "failed"
    live = grade_patch(without_check(task), patch, config)
    assert live.infra_error is None and live.correct == 1.0 and live.reward > 0.9, live


TREE_FORGERS: dict[str, tuple[str, str]] = {
    "package.json": ("package.json", '{"type": "module", "scripts": {"test": "true"}}\n'),
    "package-lock.json": ("package-lock.json", '{"lockfileVersion": 3}\n'),
    ".mocharc.json": (".mocharc.json", '{"require": "src/pass.js"}\n'),
    "jest.config.js": ("jest.config.js", "module.exports = {setupFiles: ['./src/pass.js']};\n"),
    "tsconfig.json": ("tsconfig.json", '{"compilerOptions": {"module": "esnext"}}\n'),
    ".npmrc": (".npmrc", "node-options=--require ./src/pass.js\n"),
    "node_modules/assert/index.js": ("node_modules/assert/index.js", "module.exports = () => {};\n"),
    "test/setup.js": ("test/setup.js", "process.exit(0);\n"),
    "test/rpn.hidden.test.js": ("test/rpn.hidden.test.js", "require('node:test')('nested subtraction', () => {});\n"),
    "dist/rpn.js": ("dist/rpn.js", "module.exports = {};\n"),
    "src/rpn.js.map": ("src/rpn.js.map", '{"version": 3}\n'),
}  # fmt: skip
"""Path -> (path, text) of what each tree forger adds: runner settings, installed packages, test files,
compiled outputs."""


def add_file(tree: Path, path: str, text: str) -> None:
    (tree / path).parent.mkdir(parents=True, exist_ok=True)
    (tree / path).write_text(text)


def test_the_judge_applies_javascript_rules(js_tasks: dict[str, Task], tmp_path: Path) -> None:
    task = js_tasks[RPN]
    tree = tmp_path / "tree"
    shutil.copytree(task.repo, tree)
    replace_in(tree / "src/rpn.js", "right - left", "left - right")
    for path, text in TREE_FORGERS.values():
        add_file(tree, path, text)
    add_file(tree, "src/pass.js", "process.exit(0);\n")
    judged = judge_tree(task.repo, tree, set(task.hidden_tests.files), language_of(task).dropped)
    assert set(judged.kept) == {"src/rpn.js", "src/pass.js"}
    assert set(judged.dropped) == set(TREE_FORGERS)
    for path in ("package.json", ".mocharc.json", "jest.config.js", "tsconfig.json", ".npmrc"):
        assert judged.dropped[path].startswith("a package or test runner setting"), path
    assert judged.dropped["node_modules/assert/index.js"].startswith("an installed package")
    assert judged.dropped["test/rpn.hidden.test.js"] == "a hidden test path"
    assert judged.dropped["test/setup.js"] == "a test path or test setting"
    assert (
        judged.dropped["dist/rpn.js"]
        == judged.dropped["src/rpn.js.map"]
        == "a compiled or generated artefact"
    )
    assert JAVASCRIPT.is_test_file("src/__tests__/x.js") and JAVASCRIPT.is_test_file("lib/a.spec.ts")
    assert not JAVASCRIPT.is_test_file("src/latest.js") and not JAVASCRIPT.is_test_file("src/contest/x.js")


@pytest.mark.parametrize("backend", ["bwrap"])  # decided alike on every backend: CI's time
def test_tree_forgers_are_dropped(backend: str, js_tasks: dict[str, Task], tmp_path: Path) -> None:
    """One patch leaves the bug and adds each of these (what would change how the tests load or run):
    every path is dropped with its reason, and the grade is the unfixed tree's (0). One grade for all of
    them: a forger not dropped is named by `dropped_why` whatever the others do."""
    require_backend(backend)
    task, config = js_tasks[RPN], SandboxConfig(backend=backend)
    names = ("package.json", "node_modules/assert/index.js", "test/rpn.hidden.test.js", ".npmrc")

    def edit(tree: Path) -> None:
        for name in names:
            add_file(tree, *TREE_FORGERS[name])

    graded = grade_patch(task, patched(task, tmp_path, edit), config)
    assert graded.infra_error is None, graded.infra_error
    assert set(names) <= set(graded.dropped_why), graded.dropped_why
    assert graded.correct == 0.0 and graded.reward <= 0.0


SOURCE = """const { describe, it, test } = require("node:test");
// test("commented out", () => {});
test('adds (two) numbers.', () => {
  assert.strictEqual(add(1, 2), 3, "a message, with a comma");
  assert.ok(`a ) paren` !== ")");
});
describe("outer", () => {
  describe(`inner`, () => {
    it("deep", async () => {
      expect(f({ a: [1, 2] })).toEqual({ b: "}" });
      expect(g()).not.toBe(2);
      assert.deepStrictEqual(
        h(),
        [1]
      );
    });
  });
  it("adds", () => {});
});
"""


def test_tests_and_assertions_are_read_from_source() -> None:
    assert named_tests(SOURCE) == ["adds (two) numbers.", "outer > inner > deep", "outer > adds"]
    spans = assertions_in(SOURCE, "adds (two) numbers.")
    assert [line for _, _, line in spans] == [4, 5]
    assert SOURCE[spans[1][0] : spans[1][1]] == 'assert.ok(`a ) paren` !== ")")'
    found = [e for e in equalities(SOURCE, "outer > inner > deep") if not e.check]
    assert [(e.line, e.actual, e.expected) for e in found] == [
        (10, "f({ a: [1, 2] })", '{ b: "}" }'),
        (12, "h()", "[1]"),
    ]  # `.not.toBe` is no equality: a check (of `g()`)
    assert [e.line for e in equalities(SOURCE, "outer > inner > deep") if e.check] == [11]
    assert len(assertions_in(SOURCE, "outer > inner > deep")) == 3
    ((_, _, line, actual, expected),) = [
        (e.start, e.end, e.line, e.actual, e.expected) for e in equalities(SOURCE, "adds (two) numbers.")
    ]  # `assert.ok(LITERAL !== ")")` states its value in the text: no check
    assert (line, actual, expected) == (4, "add(1, 2)", "3")
    assert assertions_in(SOURCE, "outer > missing") == []


RUNNABLE = """const { describe, it, test } = require("node:test");
const assert = require("node:assert");
test('adds (two) numbers.', () => {
  assert.ok(true);
  assert.strictEqual(1 + 2, 4);
});
test("adds (two) numbers", () => {});
test("add", () => {});
describe("outer", () => {
  describe(`inner`, () => {
    it("deep", () => assert.deepStrictEqual([1], [2]));
  });
  it("adds", () => {});
});
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="no node on PATH")
def test_the_filter_runs_exactly_the_named_test(tmp_path: Path) -> None:
    """Names with regex characters, a name that prefixes another, nested ones: each command runs one
    test (TAP's `# pass 1`, or its failure), and a failure is placed at its assertion's line."""
    import re

    (tmp_path / "t").mkdir()
    (tmp_path / "t/h1.test.js").write_text(RUNNABLE)
    outcomes = {}
    for name in named_tests(RUNNABLE):
        argv = [
            a.replace("{dir}/{stem}", "t/h1.test").replace("{test}", name) for a in JAVASCRIPT.commands.test
        ]
        run = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        outcomes[name] = run.returncode == 0 and re.search(JAVASCRIPT.commands.passed, run.stdout) is not None
        assert re.search(r"(?m)^# (pass|fail) 1$", run.stdout), (name, run.stdout)
        if name == "adds (two) numbers.":
            assert failure_line(run.stdout, "t/h1.test.js") == [5], run.stdout
    assert outcomes == {
        "adds (two) numbers.": False, "adds (two) numbers": True, "add": True, "outer > inner > deep": False,
        "outer > adds": True,
    }  # fmt: skip


THROWING = """const { test } = require("node:test");
const assert = require("node:assert");
const { parse, ParseError } = require("../src/parse");
test("named", () => {
  assert.throws(() => parse(""), Error);
});
test("exported", () => {
  assert.throws(() => parse(""), ParseError);
});
test("matched", () => {
  assert.throws(() => parse(""), /empty/);
});
"""
PARSE = {
    "gold": "class ParseError extends RangeError {}\n"
    'exports.parse = (s) => { if (!s) throw new ParseError("empty input"); return s; };\n'
    "exports.ParseError = ParseError;\n",
    "fix": "exports.ParseError = class extends TypeError {};\n"
    'exports.parse = (s) => { if (!s) throw new exports.ParseError("empty text"); return s; };\n',
    "wrapper": "exports.ParseError = class ParseError extends Error {};\n"
    "exports.parse = (s) => s;\n"
    "const real = globalThis.harness_thrown;\n"
    "globalThis.harness_thrown = (s, p, f, named, written) => real(s, p, () => { throw new named('x'); },"
    " named, written);\n",
}
"""The gold fix; another that throws an anonymous class exported under the same name; the bug left, with
the check's reporter wrapped so that it sees the named class thrown."""


@pytest.mark.skipif(shutil.which("node") is None, reason="no node on PATH")
def test_a_throw_is_reported_as_the_class_its_check_names(tmp_path: Path) -> None:
    """Red team 7: `threw` reported the thrown value's own class, so a held `assert.throws(f, Error)` of a
    gold fix that throws a RangeError failed a fix that throws a TypeError, which the test passes. Where
    the check names a class the throw is of, the name the test writes is reported (JUnit's `assertThrows` is
    reported so; red team 8: not the class's own `name`, which an anonymous class has empty): the gold tree
    and the other fix report the same class; a check naming no class (a pattern) still reports the thrown
    class, which tells the two apart. The reporters are read-only: code under test that wraps one to see
    the named class thrown (red team 8) changes nothing, and the bug fails its checks."""
    (tmp_path / "t").mkdir()
    (tmp_path / "src").mkdir()
    tests = named_tests(THROWING)
    written = rewrite(JAVASCRIPT, THROWING, tests, {}, probe=True).source
    (tmp_path / "t/h1.test.js").write_text(written)
    reported: dict[str, dict[str, list[str]]] = {}
    for tree, code in PARSE.items():
        (tmp_path / "src/parse.js").write_text(code)
        for name in tests:
            argv = [
                a.replace("{dir}/{stem}", "t/h1.test").replace("{test}", name)
                for a in JAVASCRIPT.commands.test
            ]
            run = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
            assert (run.returncode == 0) == (tree != "wrapper"), (tree, run.stdout + run.stderr)
            reported.setdefault(name, {})[tree] = re.findall(r"(?m)^harness-observe \d+ (.*)$", run.stdout)
    assert reported["named"] == {
        "gold": ['threw Error: "empty input"'], "fix": ['threw Error: "empty text"'], "wrapper": ['returned ""'],
    }  # fmt: skip
    assert reported["exported"] == {
        "gold": ['threw ParseError: "empty input"'], "fix": ['threw ParseError: "empty text"'],
        "wrapper": ['returned ""'],
    }  # fmt: skip
    assert reported["matched"]["gold"] == ['threw ParseError: "empty input"']
    assert reported["matched"]["fix"] == ['threw : "empty text"']


def test_a_failure_is_placed_by_its_stack_not_its_location() -> None:
    tap = (
        "not ok 1 - adds\n  ---\n  location: '/repo/test/h1a2.test.ts:5:5'\n  stack: |-\n"
        "    TestContext.<anonymous> (/repo/test/h1a2.test.ts:8:10)\n    at Object.<anonymous> (/repo/test/h1a2.test.ts:9:3)\n"
    )
    assert failure_line(tap, "test/h1a2.test.ts") == [8, 9]
    assert failure_line(tap, "test/h1a.test.ts") == []


def test_every_copy_runs_under_a_fresh_name_with_its_suffix(js_tasks: dict[str, Task]) -> None:
    task = js_tasks[WRAP]
    plan = plan_process_run(language_of(task), task, task.hidden_tests.canaries)  # type: ignore[arg-type]
    paths = [str(t["path"]) for t in plan.targets]
    assert len(set(paths)) == len(paths) and all(p.startswith("test/h") for p in paths)
    assert {Path(p).suffix for p in paths} == {".ts", ".js"}
    real = next(t for t in plan.targets if plan.origin[str(t["path"])] == "test/wrap.hidden.test.ts")
    assert '["aaa bbb", "ccc"]' not in str(real["content"]) and "harness_observe(" in str(real["content"])
    assert run_path("a/b.spec.mjs", "ab12") == "a/hab12.test.mjs"
    with pytest.raises(ValueError, match="end with one of"):
        run_path("test/x.coffee", "ab12")


def test_the_simplicity_term_reads_javascript(js_tasks: dict[str, Task]) -> None:
    from envs.reward import RewardConfig, simplicity

    task = js_tasks[RPN]
    patch = (
        "diff --git a/src/rpn.js b/src/rpn.js\n--- a/src/rpn.js\n+++ b/src/rpn.js\n@@ -1,1 +1,5 @@\n"
        ' "use strict";\n+  console.log(stack);\n+  debugger;\n+  // stack.push(left - right);\n+// Says why.\n'
    )
    found = simplicity(patch, task.gold_patch, {}, {}, RewardConfig(), language_of(task).style)
    assert len(found.debug_lines) == 2 and found.commented_code_lines == ["  // stack.push(left - right);"]


def test_runner_settings_the_red_team_found_are_dropped() -> None:
    """Red team 4: vitest 1.6 reads `vitest.workspace.*` (and `vitest.projects.*`) even with `config:
    false`, in its main process, which then decides the summary; jest loads a root `__mocks__/` file in
    place of the package it names. Both are dropped from the agent's tree; its own code is not."""
    from envs.languages.javascript import own_rule

    for path in ("vitest.workspace.js", "vitest.workspace.json", "vitest.projects.ts", "__mocks__/fs.js",
                 "src/__mocks__/calc.js"):  # fmt: skip
        assert own_rule(path, b"") is not None, path
    for path in ("src/calc.js", "src/workspace.js", "test/vitest.js"):
        assert own_rule(path, b"") is None, path


RED_TEAM_5 = Path(__file__).parents[1] / "data" / "forgers" / "red_team_5"


@pytest.mark.parametrize(
    ("patch", "task_id"),
    [("B_extraprop.patch", "ts-003-wrap-exact-width"), ("F_inspect.patch", "ts-004-median-even-count")],
)
def test_red_team_5_values_of_another_shape_are_told_apart(patch: str, task_id: str) -> None:
    """Red team 5 (docs/reliability.md 5k): the correct fix, but `wrap` returns arrays with an extra own
    property (B), or `medianOr` an object whose custom inspection prints the number (F). The tests'
    deepStrictEqual/strictEqual fail such values; the held renderings now tell them apart too (the array's
    own keys and prototype, objects inspected without their custom inspection). Was 1.0 and 0.94."""
    require_backend("bwrap")
    task = {t.id: t for t in load_suite("javascript")}[task_id]
    graded = grade_patch(task, (RED_TEAM_5 / patch).read_text(), SandboxConfig(backend="bwrap"))
    assert graded.infra_error is None and graded.correct < 1.0 and graded.reward < 0.5, graded
