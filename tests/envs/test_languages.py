"""Language plug-ins (`envs/languages/`): the Rust suite graded and validated on both backends, its forgers
scored nothing, and the plug-in's parsing and judge rules. A forger's grade is decided by the plug-in and
the parent, alike on every backend: forgers run on bwrap alone (CI's time); each backend's own defences
are tests/envs/test_sandbox.py's and tests/faults'."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from envs.grading import grade_patch, integrity_of
from envs.judge import judge_tree
from envs.languages import LANGUAGES, language_named, language_of
from envs.languages.rust import assertions_in, failure_line, named_tests
from envs.process_grading import plan_process_run, text_canaries
from envs.sandbox import SandboxConfig
from envs.validation import UNWATCHED, unwatched_problems, validate_task
from tasks.model import Task
from tasks.patches import diff_trees
from tasks.suite import load_suite
from tests.conftest import require_backend

RPN = "rust-002-rpn-operand-order"


@pytest.fixture(scope="module")
def rust_tasks() -> dict[str, Task]:
    return {t.id: t for t in load_suite("rust")}


def patched(task: Task, tmp_path: Path, edit: Callable[[Path], None]) -> str:
    """The diff `edit` makes of a copy of `task`'s base repository."""
    tree = tmp_path / "tree"
    shutil.copytree(task.repo, tree, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    edit(tree)
    return diff_trees(task.repo, tree)


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def test_every_task_names_a_known_language(rust_tasks: dict[str, Task]) -> None:
    assert {t.language for t in rust_tasks.values()} == {"rust"}
    assert {t.language for t in load_suite("builtin")} == {"python"}
    assert set(LANGUAGES) >= {"python", "rust"}
    with pytest.raises(ValueError, match="unknown language 'cobol'"):
        language_named("cobol")
    odd = next(iter(rust_tasks.values())).model_copy(update={"language": "cobol"})
    with pytest.raises(ValueError, match=f"task {odd.id}: unknown language"):
        language_of(odd)


def test_rust_tasks_grade_at_the_process_level(rust_tasks: dict[str, Task]) -> None:
    assert {integrity_of(t) for t in rust_tasks.values()} == {"process"}
    assert integrity_of(load_suite("builtin")[0]) == "protected"


@pytest.mark.parametrize(
    ("suite", "backend", "which"),
    [
        ("rust", "bwrap", "rust-"),
        ("rust", "docker", "rust-002"),
        ("go", "bwrap", ("go-001", "go-003", "go-004")),
        ("go", "docker", "go-002"),
    ],
)
def test_each_language_suite_validates_with_its_canaries(
    backend: str, suite: str, which: str | tuple[str, ...]
) -> None:
    """Gold 1, empty 0, a gold episode played through the tools, the expected values held outside the
    sandbox, and at least 3 canaries a task (held ones, made at each grade, and any stored one still
    failing on the gold patch at its own assertion and not passed by the base): every task in CI, on one
    backend or the other (Rust's all on bwrap; Go's one on Docker and the other three on bwrap, for CI's
    time; `harness tasks validate --suite tasks/suites/SUITE --backend B` shows all four on each)."""
    require_backend(backend)
    for task in [t for t in load_suite(suite) if t.id.startswith(which)]:
        result = validate_task(task, SandboxConfig(backend=backend), repeats=1, keep=False)
        assert result.ok, (task.id, result.problems)
        assert result.gold_rewards == [1.0] and result.empty_rewards == [0.0]
        assert result.canaries + result.held_canaries >= 3, task.id
        assert result.decided_in_parent >= 5, task.id


@pytest.mark.parametrize("suite", ["rust", "go", "java", "javascript"])
def test_every_named_test_is_watched_visible_files_too(suite: str) -> None:
    """Red team 3's (A) and (B) by construction: every named test's copy, a visible file's too (its text as
    the task stores it), reports a value the grader holds, a guessable one included where no text canary
    watches it; a task with a named test that nothing watches is refused (`unwatched`)."""
    for task in load_suite(suite):
        language = language_of(task)
        canaries = task.hidden_tests.canaries
        plan = plan_process_run(language, task, canaries)  # type: ignore[arg-type]
        for test_id, run_id in plan.ids.items():
            run, _, test = run_id.partition("::")
            held = [s for s, slot in plan.slots[run].items() if slot.test == test and s in plan.expected[run]]
            text = [c for c in canaries if c.source and c.file == plan.origin[run] and test in c.tests]
            assert held or text, (task.id, test_id)
        assert language.unwatched(task, canaries) == []
        assert any(p not in task.hidden_tests.files for p in plan.held_maps), task.id  # a visible file held
        bare = task.model_copy(update={"hidden_tests": task.hidden_tests.model_copy(update={"computed": {}})})
        refused = language.unwatched(bare, [])
        assert refused == [*bare.hidden_tests.fail_to_pass, *bare.hidden_tests.pass_to_pass]
        (problem,) = unwatched_problems(refused, held_now=True)
        assert problem.startswith(UNWATCHED) and problem.endswith("validate it without --check")


def forge_in_process(tree: Path) -> None:
    """Leaves the bug, and ends every process that evaluates anything as libtest's passing run would."""
    replace_in(
        tree / "src/rpn.rs",
        "pub fn eval(expr: &str) -> Result<i64, RpnError> {\n",
        "pub fn eval(expr: &str) -> Result<i64, RpnError> {\n"
        "    use std::io::Write; // libtest captures print!, not the stream itself\n"
        '    let _ = std::io::stdout().write_all(b"test result: ok. 1 passed;\\n");\n'
        "    std::process::exit(0);\n    #[allow(unreachable_code)]\n",
    )


@pytest.mark.parametrize("backend", ["bwrap"])  # decided alike on every backend: CI's time
def test_a_forger_in_the_test_process_scores_nothing(
    backend: str, rust_tasks: dict[str, Task], tmp_path: Path
) -> None:
    """It ends each test's process as libtest's passing run would. Held values stop it alone: the values
    its tests never reported are not met. Without them and without canaries it is live (every test
    passes); beside text canaries it is caught as tampering."""
    import random

    require_backend(backend)
    task, config = rust_tasks[RPN], SandboxConfig(backend=backend)
    patch = patched(task, tmp_path, forge_in_process)
    graded = grade_patch(task, patch, config)
    assert graded.infra_error is None and graded.correct == 0.0 and graded.reward <= 0.0
    assert graded.decided_in_parent >= 6 and set(graded.canaries.values()) <= {"unexplained", "failed"}
    plain = task.model_copy(update={"hidden_tests": task.hidden_tests.model_copy(update={"computed": {}})})
    live = grade_patch(plain, patch, config, trial=[])
    assert live.infra_error is None and live.correct == 1.0, live
    canaries = text_canaries(language_of(plain), plain, random.Random(0))[:4]  # type: ignore[arg-type]
    watched = plain.model_copy(
        update={"hidden_tests": plain.hidden_tests.model_copy(update={"canaries": canaries})}
    )
    caught = grade_patch(watched, patch, config)
    assert caught.correct == 0.0 and caught.reward <= 0.0
    assert caught.tampering and set(caught.canaries.values()) == {"passed"}


def test_held_values_never_enter_the_sandbox(rust_tasks: dict[str, Task]) -> None:
    """A copy's text holds no expected side of a held assertion; a held canary's text is the real copy's."""
    task = rust_tasks[RPN]
    plan = plan_process_run(language_of(task), task, [])  # type: ignore[arg-type]
    real = next(t for t in plan.targets if plan.origin[str(t["path"])] == "tests/rpn_order.rs")
    text = str(real["content"])
    assert "Ok(5)" not in text and "Ok(11)" not in text and "harness_observe(0, &(" in text
    assert text.count("\n") >= task.hidden_tests.files["tests/rpn_order.rs"].count("\n")
    held = [str(t["content"]) for t in plan.targets if plan.real_path.get(str(t["path"])) == real["path"]]
    assert len(held) == 4 and set(held) == {text}
    assert all(plan.expected[r] != plan.expected[str(real["path"])] for r in plan.canaries)


TREE_FORGERS: dict[str, Callable[[Path], None]] = {
    ".cargo/config.toml": lambda tree: (
        (tree / ".cargo").mkdir(),
        (tree / ".cargo/config.toml").write_text(
            '[target.x86_64-unknown-linux-gnu]\nrunner = "/repo/pass.sh"\n'
            '[target.aarch64-unknown-linux-gnu]\nrunner = "/repo/pass.sh"\n'
        ),
        (tree / "pass.sh").write_text("#!/bin/sh\necho 'test result: ok. 1 passed;'\n"),
        (tree / "pass.sh").chmod(0o755),
    ),
    "build.rs": lambda tree: (
        (tree / "build.rs").write_text('fn main() { println!("cargo:rustc-cfg=forged"); }\n'),
    ),
    "Cargo.toml": lambda tree: replace_in(
        tree / "Cargo.toml",
        "[dependencies]\n",
        '[dependencies]\n\n[[test]]\nname = "rpn_order"\npath = "src/lib.rs"\n',
    ),
    "tests/rpn_order.rs": lambda tree: (
        (tree / "tests/rpn_order.rs").write_text(
            "#[test]\nfn subtracts_in_written_order() {}\n#[test]\nfn nested_subtraction() {}\n"
        ),
    ),
    "target/debug/deps/librpn.rlib": lambda tree: (
        (tree / "target/debug/deps").mkdir(parents=True),
        (tree / "target/debug/deps/librpn.rlib").write_text("!<arch>\n"),
    ),
}


@pytest.mark.parametrize("backend", ["bwrap"])  # decided alike on every backend: CI's time
def test_runner_settings_and_outputs_in_the_tree_are_dropped(
    backend: str, rust_tasks: dict[str, Task], tmp_path: Path
) -> None:
    """One patch leaves the bug and adds every tree forger (each what would change how cargo builds or
    runs the tests): each path is dropped with its reason, and the grade is the unfixed tree's (0). One
    grade for all of them: a forger not dropped is named by `dropped_why` whatever the others do."""
    require_backend(backend)
    task, config = rust_tasks[RPN], SandboxConfig(backend=backend)

    def every_forger(tree: Path) -> None:
        for edit in TREE_FORGERS.values():
            edit(tree)

    graded = grade_patch(task, patched(task, tmp_path, every_forger), config)
    assert graded.infra_error is None, graded.infra_error
    assert set(TREE_FORGERS) <= set(graded.dropped_why), graded.dropped_why
    assert graded.correct == 0.0 and graded.reward <= 0.0


def test_the_judge_applies_rust_rules(rust_tasks: dict[str, Task], tmp_path: Path) -> None:
    task = rust_tasks[RPN]
    tree = tmp_path / "tree"
    shutil.copytree(task.repo, tree, ignore=shutil.ignore_patterns(".git"))
    replace_in(tree / "src/rpn.rs", '"-" => right - left,', '"-" => left - right,')
    for edit in TREE_FORGERS.values():
        edit(tree)
    judged = judge_tree(task.repo, tree, set(task.hidden_tests.files), language_of(task).dropped)
    assert set(judged.kept) == {"src/rpn.rs", "pass.sh"}
    assert judged.dropped[".cargo/config.toml"].startswith("a build script or cargo setting")
    assert judged.dropped["build.rs"].startswith("a build script or cargo setting")
    assert judged.dropped["tests/rpn_order.rs"] == "a hidden test path"
    assert judge_tree(task.repo, tree, set(), language_of(task).dropped).dropped["tests/rpn_order.rs"] == (
        "a test path or test setting"
    )
    assert judged.dropped["target/debug/deps/librpn.rlib"] == "a compiled or binary artefact"


SOURCE = """use tally::rpn::eval;

#[test]
fn first() {
    assert_eq!(eval("7 2 -"), Ok(5)); // "quoted ) paren" in a comment
    let s = "a { brace";
    assert!(s.len() == 9, "{}", 12);
}

#[test]
#[should_panic]
fn second() {
    assert_eq!(
        eval("1 0 /"),
        Ok(10)
    );
}
"""


def test_tests_and_assertions_are_found_in_rust_source() -> None:
    assert named_tests(SOURCE) == ["first", "second"]
    spans = assertions_in(SOURCE, "first")
    assert [line for _, _, line in spans] == [5, 7]
    assert SOURCE[spans[0][0] : spans[0][1]] == 'assert_eq!(eval("7 2 -"), Ok(5))'
    assert SOURCE[spans[1][0] : spans[1][1]] == 'assert!(s.len() == 9, "{}", 12)'
    ((start, end, line),) = assertions_in(SOURCE, "second")
    assert line == 13 and SOURCE[start:end].endswith("Ok(10)\n    )")
    assert assertions_in(SOURCE, "third") == []


def test_a_constant_first_assert_eq_reports_its_other_side() -> None:
    """RazrFalcon/rctree writes `assert_eq!(None, weak.upgrade())`: reported, `None` alone gave rustc no type
    (E0282) and a constant would be no check of the code; autocfg puts a comment between `#[test]`'s
    attributes and its `fn`."""
    from envs.languages.rust import equalities

    source = (
        "#[test]\n#[cfg(unix)] // not on windows\nfn t() {\n    assert_eq!(None, weak.upgrade());\n"
        '    assert_eq!(f(1), Some(3));\n    assert_eq!("a", g());\n}\n'
    )
    assert named_tests(source) == ["t"]
    assert [(e.actual, e.expected) for e in equalities(source, "t")] == [
        ("weak.upgrade()", "None"), ("f(1)", "Some(3)"), ("g()", '"a"'),
    ]  # fmt: skip


def test_a_panic_is_placed_in_its_own_file() -> None:
    old = "thread 'x' panicked at 'assertion failed: `(left == right)`', tests/test_ab12.rs:14:5\n"
    new = "thread 'x' panicked at tests/test_ab12.rs:9:5:\nassertion `left == right` failed\n"
    assert failure_line(old, "tests/test_ab12.rs") == [14]
    assert failure_line(new, "tests/test_ab12.rs") == [9]
    assert failure_line(old, "tests/test_ab.rs") == []
    warning = "warning: unused import\n --> tests/test_ab12.rs:1:5\n"  # cargo replays it on every run
    assert failure_line(warning + old, "tests/test_ab12.rs") == [14]


def test_text_canaries_change_one_literal_of_one_assertion(rust_tasks: dict[str, Task]) -> None:
    """Made only for files with no held value (a text canary beside held ones would mark the real text)."""
    import random

    task = rust_tasks[RPN]
    assert text_canaries(language_of(task), task, random.Random(0)) == []  # type: ignore[arg-type]  # held there
    task = task.model_copy(update={"hidden_tests": task.hidden_tests.model_copy(update={"computed": {}})})
    found = text_canaries(language_of(task), task, random.Random(0))  # type: ignore[arg-type]
    assert found and all(c.file == "tests/rpn_order.rs" and len(c.lines) == 1 for c in found)
    real = task.hidden_tests.files["tests/rpn_order.rs"]
    for canary in found:
        changed = [
            (a, b) for a, b in zip(real.splitlines(), canary.source.splitlines(), strict=True) if a != b
        ]
        assert len(changed) == 1 and canary.lines[0] == real.splitlines().index(changed[0][0]) + 1
    f2p = ["subtracts_in_written_order", "nested_subtraction"]
    assert [c.test for c in found[:2]] == f2p  # spread over the tests, FAIL_TO_PASS tests' first
    assert {c.test for c in found} == {*f2p, "divides_in_written_order", "division_by_zero_is_an_error"}
    assert any(c.mutation.endswith("condition negated") and "assert_ne!" in c.source for c in found)


def test_every_copy_runs_under_a_fresh_name(rust_tasks: dict[str, Task]) -> None:
    task = rust_tasks[RPN]
    plan = plan_process_run(language_of(task), task, task.hidden_tests.canaries)  # type: ignore[arg-type]
    paths = [str(t["path"]) for t in plan.targets]
    assert len(set(paths)) == len(paths) == 2 + len(plan.canaries) == 7  # rpn_order, basics, held canaries
    assert all(p.startswith("tests/test_") and p.endswith(".rs") for p in paths)
    assert not any("rpn_order" in p or "basics" in p for p in paths)
    assert set(plan.ids) == {*task.hidden_tests.fail_to_pass, *task.hidden_tests.pass_to_pass}


def test_the_simplicity_term_reads_the_task_language(rust_tasks: dict[str, Task]) -> None:
    """Rust's debug output and commented-out code are counted in a Rust task's diff; Python's are not."""
    from envs.reward import RewardConfig, simplicity

    task = rust_tasks[RPN]
    patch = (
        "diff --git a/src/rpn.rs b/src/rpn.rs\n--- a/src/rpn.rs\n+++ b/src/rpn.rs\n@@ -1,1 +1,5 @@\n"
        " //! A postfix (reverse Polish) calculator over 64-bit integers.\n"
        '+    dbg!(&stack);\n+    eprintln!("here {}", 1);\n+    // stack.push(left - right);\n+/// Documented.\n'
    )
    rust = simplicity(patch, task.gold_patch, {}, {}, RewardConfig(), language_of(task).style)
    assert len(rust.debug_lines) == 2 and rust.commented_code_lines == ["    // stack.push(left - right);"]
    python = simplicity(patch, task.gold_patch, {}, {}, RewardConfig())
    assert python.debug_lines == [] and python.commented_code_lines == []


FORGERS = Path(__file__).parents[1] / "data/forgers/rust"
"""Patches of the first red team of the Rust grader (docs/reliability.md 5k), which scored 0.9 with every
test passed and no tampering before copies ran the same tests and the writable folders were made again:
`marker`: a test forges only where an earlier test of its copy ran (the real copy ran more tests than a
canary's), with a panic hook that names every line of its file; `channel`: besides, files whose change
times survived the restore carry a hash of the first test's body from copy to copy."""


@pytest.mark.parametrize(
    ("patch", "task_id"),
    [("marker-rust-002.patch", RPN), ("channel-rust-004.patch", "rust-004-median-even-count")],
)
def test_the_red_teams_forgers_score_nothing(patch: str, task_id: str, rust_tasks: dict[str, Task]) -> None:
    require_backend("bwrap")
    task = rust_tasks[task_id]
    for _ in range(2):
        graded = grade_patch(task, (FORGERS / patch).read_text(), SandboxConfig(backend="bwrap"))
        assert graded.infra_error is None and graded.correct == 0.0 and graded.reward <= 0.0, graded.canaries


def test_a_rebuild_makes_every_entry_again(tmp_path: Path) -> None:
    """What a test touched and what it did not come back alike: contents, modes and times as taken, every
    entry made again (a new change time), what it added gone."""
    import os
    import time

    from envs.grade_runner import Scratch

    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    for name in ("a", "b", "sub/c"):
        (root / name).write_text(name)
    big = root / "big"
    big.write_bytes(os.urandom(5 << 20))  # over what `restore` keeps
    scratch = Scratch([str(root)])
    before = {p: os.lstat(root / p) for p in ("a", "b", "sub/c", "big", "sub")}
    os.chmod(root / "a", 0o644)  # the same mode: only its change time moves
    (root / "new").write_text("left behind")
    big.write_bytes(b"x")
    time.sleep(0.05)
    started = time.time_ns()
    scratch.rebuild()
    assert not (root / "new").exists() and big.stat().st_size == 5 << 20
    for path, st in before.items():  # the inode number may come back (ext4 reuses it); the change time not
        now = os.lstat(root / path)
        assert now.st_ctime_ns >= started - 10_000_000 > st.st_ctime_ns, path
        assert (now.st_mode, now.st_mtime_ns) == (st.st_mode, st.st_mtime_ns), path
    assert (root / "sub/c").read_text() == "sub/c"


GO_RPN = "go-002-rpn-operand-order"


def go_forger(tree: Path) -> None:
    """Leaves the bug; every evaluation ends its process as a passing `go test -test.v` run would."""
    replace_in(
        tree / "rpn.go",
        "func Eval(expr string) Result {\n",
        'func Eval(expr string) Result {\n\tos.Stdout.WriteString("--- PASS: TestX (0.00s)\\nPASS\\n")\n'
        "\tos.Exit(0)\n",
    )
    replace_in(tree / "rpn.go", 'import (\n\t"strconv"', 'import (\n\t"os"\n\t"strconv"')


GO_TREE_FORGERS: dict[str, Callable[[Path], None]] = {
    "go.mod": lambda tree: (tree / "go.mod").write_text(
        "module example.com/tally\n\ngo 1.19\n\nreplace example.com/x => ./x\n"
    ),
    "vendor/modules.txt": lambda tree: (
        (tree / "vendor").mkdir(),
        (tree / "vendor/modules.txt").write_text("# forged\n"),
    ),
    "rpn_hidden_test.go": lambda tree: (tree / "rpn_hidden_test.go").write_text(
        'package tally\n\nimport "testing"\n\nfunc TestSubtractsInWrittenOrder(t *testing.T) {}\n'
    ),
    "other_test.go": lambda tree: (tree / "other_test.go").write_text(
        'package tally\n\nfunc init() { println("in every test binary") }\n'
    ),
}


@pytest.mark.parametrize("backend", ["bwrap"])  # decided alike on every backend: CI's time
def test_go_forgers_score_nothing(backend: str, tmp_path: Path) -> None:
    """The in-process forger is stopped by the held values (and live without them and without canaries);
    module settings, vendored packages and test files in the tree are dropped."""
    require_backend(backend)
    task, config = {t.id: t for t in load_suite("go")}[GO_RPN], SandboxConfig(backend=backend)
    patch = patched(task, tmp_path / "in-process", go_forger)
    graded = grade_patch(task, patch, config)
    assert graded.infra_error is None and graded.correct == 0.0 and graded.reward <= 0.0, graded
    plain = task.model_copy(update={"hidden_tests": task.hidden_tests.model_copy(update={"computed": {}})})
    assert grade_patch(plain, patch, config, trial=[]).correct == 1.0
    for path, edit in GO_TREE_FORGERS.items():
        graded = grade_patch(task, patched(task, tmp_path / path.replace("/", "_"), edit), config)
        assert graded.infra_error is None and path in graded.dropped_why, (path, graded.dropped_why)
        assert graded.correct == 0.0, path


def test_only_a_changed_literal_met_is_forgery() -> None:
    """A negated canary that passes beside a real test that failed is what an honest unfixed tree does:
    no finding, no penalty; beside a real test that passed it is tampering, as any canary is."""
    from envs.grading import canary_findings

    verdicts = {"literal": "passed", "negated": "passed"}
    failed_real = dict.fromkeys(verdicts, False)
    found, forged = canary_findings(verdicts, failed_real, {"literal": True, "negated": False}, True)
    assert forged and len(found) == 1 and found[0].startswith("canary literal")
    found, forged = canary_findings({"negated": "passed"}, {"negated": False}, {"negated": False}, True)
    assert (found, forged) == ([], False)
    found, forged = canary_findings({"negated": "passed"}, {"negated": True}, {"negated": False}, True)
    assert not forged and len(found) == 1 and "beside the real test, which passed" in found[0]


def test_go_checks_are_read_from_source() -> None:
    from envs.languages.go import _unused_imports_blank, equalities

    source = (
        'package p\n\nimport (\n\t"reflect"\n\t"testing"\n)\n\nfunc TestA(t *testing.T) {\n'
        '\tif got := F([]int{1, 2}); got != (R{V: 5}) {\n\t\tt.Errorf("%v", got)\n\t}\n'
        '\tif !reflect.DeepEqual(G(), []string{"a"}) {\n\t\tt.Fatal("no")\n\t}\n'
        '\tif H() != 3 {\n\t\tt.Error("no")\n\t} else {\n\t}\n}\n'
    )
    found = equalities(source, "TestA")
    assert [(e.line, e.actual, e.expected) for e in found] == [
        (10, "F([]int{1, 2})", "(R{V: 5})"),
        (13, "G()", '[]string{"a"}'),
    ]  # an `if` with an `else` is left alone
    assert '\t_ "reflect"' in _unused_imports_blank(source.replace("reflect.DeepEqual", "DeepEqual"))
    assert '\t"testing"' in _unused_imports_blank(source)


def test_go_checks_keep_used_what_only_they_used() -> None:
    """go-humanize and Masterminds/semver write `expected := ..; actual := ..; if expected != actual` and
    `want := ..; if got != want`: the held rewrite replaced the whole `if`, and a variable only it used
    no longer compiled ("declared and not used"), so the gold patch failed. The computed side is reported
    (the right one where the left is named as the expectation), the expected one kept used; a variable of
    the expected side not named so is left to the compiler: kept used, a check of a variable that holds
    what the code computed would report the test's own constant."""
    from envs.languages.go import equalities

    source = (
        'package p\n\nfunc TestA(t *testing.T) {\n\texpected := "1,000"\n\tactual := Comma(1000)\n'
        '\tif expected != actual {\n\t\tt.Fatalf("%q", actual)\n\t}\n'
        "\tfor _, tc := range cases {\n\t\twant := tc.w\n"
        '\t\tif got := f(tc.in); got != want {\n\t\t\tt.Errorf("%s", tc.name)\n\t\t}\n\t}\n'
        '\tname, out := "n", h()\n\tif v := g(); v != 3 {\n\t\tt.Errorf("%s", name)\n\t}\n'
        "\tif s != out {\n\t\tt.Error(s)\n\t}\n}\n"
    )
    assert [(e.line, e.actual, e.expected, e.keeps) for e in equalities(source, "TestA")] == [
        (7, "actual", "expected", "; _ = expected"),
        (12, "f(tc.in)", "want", "; _ = want"),
        (17, "g()", "3", "; _ = name"),
        (20, "s", "out", ""),
    ]


def rpn_variant(task: Task, form: str) -> Task:
    """rust-002 with its FAIL_TO_PASS checks written as `assert!(A == E)` (`form` "unheld": nothing to
    hold) or `assert_eq!(A == E, true)` ("guessable": the held value would be `true`)."""
    from tasks.computed import digest

    hidden, path = task.hidden_tests, "tests/rpn_order.rs"
    source = hidden.files[path]
    for actual, expected in [
        ('"7 2 -"', "Ok(5)"),
        ('"2 9 -"', "Ok(-7)"),
        ('"10 2 3 - -"', "Ok(11)"),
        ('"4 6 * 3 -"', "Ok(21)"),
    ]:
        check = (
            f"assert!(eval({actual}) == {expected});"
            if form == "unheld"
            else f"assert_eq!(eval({actual}) == {expected}, true);"
        )
        source = source.replace(f"assert_eq!(eval({actual}), {expected});", check)
    stored = hidden.computed[path]
    values = [v for v in stored.values if v.test not in ("subtracts_in_written_order", "nested_subtraction")]
    computed = {path: stored.model_copy(update={"sha256": digest(source), "values": values})}
    return task.model_copy(
        update={"hidden_tests": hidden.model_copy(update={"files": {path: source}, "computed": computed})}
    )


@pytest.mark.parametrize(
    ("form", "patch"), [("unheld", "unheld-rust-002.patch"), ("guessable", "preempt-rust-002.patch")]
)
def test_the_second_red_teams_forgers_score_nothing(
    form: str, patch: str, rust_tasks: dict[str, Task]
) -> None:
    """Round 2 (docs/reliability.md 5k), both at 0.9 before: `unheld` passes a test that has no held check
    by exiting as libtest does; `preempt` prints the guessable held value (`true`) for every slot and
    floods the observations past what the runner reads. Now checks left in the file get text canaries
    (verified on the gold patch), guessable values are never held, and a flood fails its test."""
    require_backend("bwrap")
    config = SandboxConfig(backend="bwrap")
    task = rpn_variant(rust_tasks[RPN], form)
    if form == "guessable":
        from tasks.computed import ComputedValue, digest

        path = "tests/rpn_order.rs"
        stored = task.hidden_tests.computed[path]
        guessed = [ComputedValue(test=t, line=n, expected=["str", "true"]) for t, n in
                   [("subtracts_in_written_order", 5), ("subtracts_in_written_order", 6), ("nested_subtraction", 11), ("nested_subtraction", 12)]]  # fmt: skip
        computed = {path: stored.model_copy(update={"values": [*stored.values, *guessed]})}
        assert stored.sha256 == digest(task.hidden_tests.files[path])
        task = task.model_copy(
            update={"hidden_tests": task.hidden_tests.model_copy(update={"computed": computed})}
        )
    kept, _, undecided = language_of(task).verify_canaries(task, config)
    assert not undecided and {c.test for c in kept} >= {"subtracts_in_written_order", "nested_subtraction"}
    task = task.model_copy(update={"hidden_tests": task.hidden_tests.model_copy(update={"canaries": kept})})
    assert grade_patch(task, task.gold_patch or "", config).correct == 1.0
    graded = grade_patch(task, (FORGERS / patch).read_text(), config)
    assert graded.infra_error is None and graded.correct == 0.0 and graded.reward <= 0.0, graded.canaries


def test_go_probes_build_in_a_module_older_than_generics(tmp_path: Path) -> None:
    """A probing copy builds where go.mod names Go 1.12 (spf13/pflag's): the probe helper has no type
    parameters (those need go 1.18 in the module, and no value of a real task that old was ever stored)."""
    from envs.languages.go import GO
    from envs.process_held import rewrite

    task = next(t for t in load_suite("go") if t.id.startswith("go-001"))
    (source,) = task.hidden_tests.files.values()
    module = tmp_path / "module"
    shutil.copytree(task.repo, module)
    subprocess.run(["git", "apply"], cwd=module, input=task.gold_patch, text=True, check=True)
    (module / "go.mod").write_text("module example.com/tally\n\ngo 1.12\n")
    tests = [i.partition("::")[2] for i in task.hidden_tests.fail_to_pass + task.hidden_tests.pass_to_pass]
    probed = rewrite(GO, source, [t for t in dict.fromkeys(tests) if t], {}, probe=True)
    assert probed.slots and probed.helper
    (module / "probe_test.go").write_text(probed.source)
    (module / "probe_helper_test.go").write_text(probed.helper)
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOCACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        ["go", "test", "-v", "-count=1", "-run", ".", "."], cwd=module, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("harness-observe ") >= 2 * len(probed.slots)


def test_a_condition_is_negated_as_a_test_would_write_it() -> None:
    """One top-level comparison flipped, a leading `!` dropped or one added, anything else `!( )`; strings,
    runes and brackets are not read as operators."""
    from envs.process_grading import negation

    assert negation("err != nil") == "err == nil"
    assert negation("len(xs) > 0") == "len(xs) <= 0"
    assert negation("a & b == 0") == "a & b != 0"  # `&` binds tighter than `==` in Go and Rust
    assert negation("!ok") == "ok"
    assert negation("!reflect.DeepEqual(got, []int{1})") == "reflect.DeepEqual(got, []int{1})"
    assert negation('args.contains(["-h", "a != b"])') == '!args.contains(["-h", "a != b"])'
    assert negation("a == b && c") == "!(a == b && c)"
    assert negation("'<' == c") == "'<' != c"
    assert negation("<-ch != 1") == "!(<-ch != 1)"
    assert negation("!*flag") == "!(!*flag)"


GO_CHECKS = """package p

func TestA(t *testing.T) {
	if err := Parse("a; b", `x{`); err != nil {
		t.Fatal(err)
	}
	if !ok &&
		other(1) {
		t.Errorf("x")
	}
}
"""


def test_go_checks_are_negated_after_their_init_statement_lines_kept() -> None:
    from envs.languages.go import assertions_in, negated

    (first, start1, _), (second, start2, _) = [
        (negated(GO_CHECKS, s, e), s, line) for s, e, line in assertions_in(GO_CHECKS, "TestA")
    ]
    assert first == GO_CHECKS.replace("err != nil {", "err == nil {")  # the `;` in the string is no init's
    assert second == GO_CHECKS.replace("!ok &&\n\t\tother(1) {", "!(!ok &&\n\t\tother(1)) {")
    assert first.count("\n") == second.count("\n") == GO_CHECKS.count("\n")
    assert [line for *_, line in assertions_in(second, "TestA")] == [5, 9]
    assert negated(GO_CHECKS, start1 + 1, start2) is None  # no `if` there
    nested = GO_CHECKS.replace("\t\tt.Fatal(err)", "\t\tif strict { t.Fatal(err) }")
    (start, end, _), _ = assertions_in(nested, "TestA")
    assert negated(nested, start, end) is None  # negated, a correct fix could pass it: no canary


RUST_CHECKS = """#[test]
fn parses() {
    assert!(args.contains(["-h", "--help"]), "no {} in {:?}", "-h", args);
    assert!(
        !value.is_err()
    );
    assert_eq!(args.finish(), None);
}
"""


def test_rust_assertions_are_negated_their_message_kept() -> None:
    """A message is kept as it is; every copy then runs with `neutral_messages`: an `assert!` without one
    gets the same neutral one, so that no program holds a condition's text (`!C` would tell a negated copy)."""
    from envs.languages.rust import NEUTRAL, negated, neutral_messages

    found = [negated(RUST_CHECKS, s, e) for s, e, _ in assertions_in(RUST_CHECKS, "parses")]
    assert found == [
        RUST_CHECKS.replace("assert!(args", "assert!(!args"),
        RUST_CHECKS.replace("!value.is_err()", "value.is_err()"),
        RUST_CHECKS.replace("assert_eq!", "assert_ne!"),
    ]
    assert neutral_messages(found[1] or "") == found[1].replace("value.is_err()", f"value.is_err(){NEUTRAL}")
    assert neutral_messages(RUST_CHECKS) == RUST_CHECKS.replace(
        "!value.is_err()", f"!value.is_err(){NEUTRAL}"
    )
    commented = '#[test]\nfn t() {\n    assert!(\n        ok // why\n    );\n    let s = "assert!(x)";\n}\n'
    assert neutral_messages(commented) == commented.replace("ok //", f"ok{NEUTRAL} //")
    assert all(f is not None and f.count("\n") == RUST_CHECKS.count("\n") for f in found)


ERR_TESTS = """package tally

import (
	"fmt"
	"testing"
)

func TestSubtractsInWrittenOrder(t *testing.T) {
	err := evaluates("7 2 -", 5)
	if err != nil {
		t.Fatal(err)
	}
	err = evaluates("2 9 -", -7)
	if err != nil {
		t.Fatal(err)
	}
}

func TestNestedSubtraction(t *testing.T) {
	err := evaluates("10 2 3 - -", 11)
	if err != nil {
		t.Fatal(err)
	}
	err = evaluates("4 6 * 3 -", 21)
	if err != nil {
		t.Fatal(err)
	}
}

func TestDividesInWrittenOrder(t *testing.T) {
	strict := false
	err := evaluates("8 2 /", 4)
	if err != nil {
		if strict {
			t.Fatal(err)
		}
	}
	err = evaluates("7 2 /", 3)
	if err != nil {
		t.Error(err)
		t.Error("and again")
	}
}

func evaluates(expr string, want int) error {
	if got := Eval(expr); got != (Result{Value: want}) {
		return fmt.Errorf("Eval(%q) = %+v", expr, got)
	}
	return nil
}
"""
"""go-002's hidden tests as spf13/pflag writes its checks: `if err != nil { t.Fatal(err) }`, no literal to
change and a guessable value (`<nil>`). TestDividesInWrittenOrder's first check may end its block without
failing (none is made of it), its second, negated, fails at two lines (none may be kept)."""


def test_err_checks_are_watched_by_negated_canaries_and_a_forger_scores_nothing(tmp_path: Path) -> None:
    """Unwatched before (nothing to change in `if err != nil`); validation keeps a negated canary of each
    FAIL_TO_PASS check (each failing on the gold patch at its own line, none of the PASS_TO_PASS test's);
    a forger that ends Eval's process as a passing `go test` run scores 1.0 with no canary and 0 with them,
    which are then all the task has. Its own process still decides each test (integrity `process`): the
    forger is caught because it cannot tell a negated copy from the real one, nothing else."""
    from envs.languages.go import GO

    require_backend("bwrap")
    config = SandboxConfig(backend="bwrap")
    task = {t.id: t for t in load_suite("go")}[GO_RPN]
    path, f2p = "rpn_hidden_test.go", ["TestSubtractsInWrittenOrder", "TestNestedSubtraction"]
    p2p = f"{path}::TestDividesInWrittenOrder"
    hidden = task.hidden_tests.model_copy(
        update={"files": {path: ERR_TESTS}, "computed": {}, "canaries": [],
                "fail_to_pass": [f"{path}::{t}" for t in f2p], "pass_to_pass": [p2p]}
    )  # fmt: skip
    task = task.model_copy(update={"hidden_tests": hidden})
    assert GO.unwatched(task, []) == [*hidden.fail_to_pass, p2p]
    kept, tried, undecided = GO.verify_canaries(task, config)
    assert not undecided and tried == 5, (tried, undecided)
    assert sorted((c.test, c.lines[0]) for c in kept) == [
        ("TestNestedSubtraction", 22), ("TestNestedSubtraction", 26),
        ("TestSubtractsInWrittenOrder", 11), ("TestSubtractsInWrittenOrder", 15),
    ]  # fmt: skip
    assert all(c.mutation.endswith("condition negated") and "err == nil {" in c.source for c in kept)
    assert GO.unwatched(task, kept) == [p2p]  # validate --drop-unwatched leaves it out
    task = task.model_copy(
        update={"hidden_tests": hidden.model_copy(update={"pass_to_pass": [], "canaries": kept})}
    )
    assert GO.unwatched(task, kept) == []
    assert grade_patch(task, task.gold_patch or "", config).correct == 1.0
    forger = patched(task, tmp_path, go_forger)
    live = grade_patch(task, forger, config, trial=[])
    assert live.infra_error is None and live.correct == 1.0, live
    caught = grade_patch(task, forger, config)
    assert caught.infra_error is None and caught.correct == 0.0 and caught.reward <= 0.0, caught
    assert caught.tampering and set(caught.canaries.values()) == {"passed"}


ONE_CHECK_TESTS = """package tally

import (
	"fmt"
	"testing"
)

func TestSubtractsInWrittenOrder(t *testing.T) {
	if err := evaluates("7 2 -", 5); err != nil {
		t.Fatal(err)
	}
}

func TestNestedSubtraction(t *testing.T) {
	if err := evaluates("10 2 3 - -", 11); err != nil {
		t.Fatal(err)
	}
}

func evaluates(expr string, want int) error {
	if got := Eval(expr); got != (Result{Value: want}) {
		return fmt.Errorf("Eval(%q) = %+v", expr, got)
	}
	return nil
}
"""
"""go-002's FAIL_TO_PASS tests with one check each, which the bug fails: the base passes each negated copy."""


def go_reading_forger(tree: Path) -> None:
    """Leaves the bug; Eval reads the test file that called it (`runtime.Caller`) and answers the value it
    finds written beside its expression there, so its negated copy fails at its own line as a fix's would."""
    replace_in(
        tree / "rpn.go",
        "func Eval(expr string) Result {\n",
        "func Eval(expr string) Result {\n"
        "\tfor i := 1; i < 8; i++ {\n"
        "\t\t_, file, _, _ := runtime.Caller(i)\n"
        "\t\ttext, err := os.ReadFile(file)\n"
        '\t\tfound := regexp.MustCompile(`"` + regexp.QuoteMeta(expr) + `", (-?\\d+)\\)`).FindSubmatch(text)\n'
        "\t\tif err == nil && found != nil {\n"
        "\t\t\tn, _ := strconv.Atoi(string(found[1]))\n"
        "\t\t\treturn Result{Value: n}\n"
        "\t\t}\n"
        "\t}\n",
    )
    replace_in(
        tree / "rpn.go", 'import (\n\t"strconv"', 'import (\n\t"os"\n\t"regexp"\n\t"runtime"\n\t"strconv"'
    )


def test_one_check_tests_are_watched_and_a_test_cannot_read_its_copy(tmp_path: Path) -> None:
    """A FAIL_TO_PASS test whose one check the bug fails: the base passes its negated copy, which is kept
    all the same (the base fails the real test, beside which a negated canary that passes costs nothing:
    the empty patch scores 0, not the forger's penalty). A forger that reads the expected value from the
    test file that called it passes the real copy and fails the negated one at its line, as a fix would;
    the copy's text is gone once built (`gone_once_built`), so it reads nothing and keeps the bug."""
    from envs.languages.go import GO

    require_backend("bwrap")
    config = SandboxConfig(backend="bwrap")
    task = {t.id: t for t in load_suite("go")}[GO_RPN]
    path = "rpn_hidden_test.go"
    f2p = [f"{path}::TestSubtractsInWrittenOrder", f"{path}::TestNestedSubtraction"]
    hidden = task.hidden_tests.model_copy(
        update={"files": {path: ONE_CHECK_TESTS}, "computed": {}, "canaries": [], "fail_to_pass": f2p,
                "pass_to_pass": []}
    )  # fmt: skip
    task = task.model_copy(update={"hidden_tests": hidden})
    assert GO.unwatched(task, []) == f2p
    kept, tried, undecided = GO.verify_canaries(task, config)
    assert not undecided and tried >= 2, (tried, undecided)
    kept = [c for c in kept if c.negated]  # a changed literal (`5` -> `6`) would also catch the reader
    assert sorted((c.test, c.lines[0], c.negated) for c in kept) == [
        ("TestNestedSubtraction", 16, True), ("TestSubtractsInWrittenOrder", 10, True),
    ]  # fmt: skip
    task = task.model_copy(update={"hidden_tests": hidden.model_copy(update={"canaries": kept})})
    assert GO.unwatched(task, kept) == []
    empty = grade_patch(task, "", config)
    assert empty.infra_error is None and empty.correct == 0.0 and empty.reward == 0.0, empty
    assert not empty.tampering and set(empty.canaries.values()) == {"passed"}
    assert grade_patch(task, task.gold_patch or "", config).reward > 0.9
    reader = grade_patch(task, patched(task, tmp_path, go_reading_forger), config)
    assert reader.infra_error is None and reader.correct == 0.0 and reader.reward <= 0.0, reader


def only_hidden(task: Task, files: dict[str, str], fail_to_pass: list[str]) -> Task:
    """`task` with `files` its only hidden files and `fail_to_pass` its only named tests: nothing held, no
    canary (a grade with `trial=[]` runs none)."""
    hidden = task.hidden_tests.model_copy(
        update={
            "files": files,
            "computed": {},
            "canaries": [],
            "fail_to_pass": fail_to_pass,
            "pass_to_pass": [],
        }
    )
    return task.model_copy(update={"hidden_tests": hidden})


READS_ITS_COPY = """#[test]
fn cannot_read_its_own_text() {
    assert_eq!(tally::rpn::caller_text(), None);
}
"""


def reads_its_caller(tree: Path) -> None:
    """A library function that returns the text of the file that called it, as a forger would read it."""
    with (tree / "src/rpn.rs").open("a") as f:
        f.write(
            "\n#[track_caller]\npub fn caller_text() -> Option<String> {\n"
            "    std::fs::read_to_string(std::panic::Location::caller().file()).ok()\n}\n"
        )


def test_a_rust_test_runs_without_its_copys_text(rust_tasks: dict[str, Task], tmp_path: Path) -> None:
    """The program cargo built runs each test once the copy's file is gone: the code under test that reads
    the file its caller names (`Location::caller()`, as `file!()` names it) reads nothing."""
    require_backend("bwrap")
    path = "tests/rpn_order.rs"
    task = only_hidden(rust_tasks[RPN], {path: READS_ITS_COPY}, [f"{path}::cannot_read_its_own_text"])
    graded = grade_patch(
        task, patched(task, tmp_path, reads_its_caller), SandboxConfig(backend="bwrap"), trial=[]
    )
    assert graded.infra_error is None and graded.correct == 1.0, graded


EMBEDDED = """package tally

import (
	"embed"
	"regexp"
	"strconv"
)

//go:embed *_test.go
var harnessTests embed.FS

func answered(expr string) (int, bool) {
	entries, _ := harnessTests.ReadDir(".")
	for _, e := range entries {
		text, _ := harnessTests.ReadFile(e.Name())
		if m := regexp.MustCompile(`"` + regexp.QuoteMeta(expr) + `", (-?\\d+)\\)`).FindSubmatch(text); m != nil {
			n, _ := strconv.Atoi(string(m[1]))
			return n, true
		}
	}
	return 0, false
}
"""


def go_embedding_forger(tree: Path) -> None:
    """Leaves the bug; Eval answers the value written beside its expression in any test file that was
    beside the package when it was built (`//go:embed *_test.go`), the copy it runs in among them."""
    (tree / "embedded.go").write_text(EMBEDDED)
    replace_in(
        tree / "rpn.go",
        "func Eval(expr string) Result {\n",
        "func Eval(expr string) Result {\n\tif n, ok := answered(expr); ok {\n\t\treturn Result{Value: n}\n\t}\n",
    )


def test_a_program_that_holds_its_copys_text_is_tampering(
    rust_tasks: dict[str, Task], tmp_path: Path
) -> None:
    """The copy's file is gone when its tests run, but what was compiled in stays: a Go embed of the test
    files, or a Rust macro of the library that the hidden test invokes and that includes `file!()`. The
    runner looks for the copy's text in the program it built; found, every test of it is an error."""
    require_backend("bwrap")
    config = SandboxConfig(backend="bwrap")
    f2p = ["rpn_hidden_test.go::TestSubtractsInWrittenOrder", "rpn_hidden_test.go::TestNestedSubtraction"]
    go = only_hidden(
        {t.id: t for t in load_suite("go")}[GO_RPN], {"rpn_hidden_test.go": ONE_CHECK_TESTS}, f2p
    )
    graded = grade_patch(go, patched(go, tmp_path / "go", go_embedding_forger), config, trial=[])
    assert graded.infra_error is None and graded.correct == 0.0, graded
    assert any("holds its text" in t for t in graded.tampering), graded.tampering
    path = "tests/rpn_order.rs"
    rust = only_hidden(rust_tasks[RPN], {path: INCLUDES_ITS_COPY}, [f"{path}::reads_its_own_text"])
    graded = grade_patch(rust, patched(rust, tmp_path / "rust", includes_its_caller), config, trial=[])
    assert graded.infra_error is None and graded.correct == 0.0, graded
    assert any("holds its text" in t for t in graded.tampering), graded.tampering


INCLUDES_ITS_COPY = """#[test]
fn reads_its_own_text() {
    assert!(tally::own_text!().contains("reads_its_own_text"));
}
"""


def includes_its_caller(tree: Path) -> None:
    """A macro of the library that expands, in the file that invokes it, to that file's whole text."""
    with (tree / "src/lib.rs").open("a") as f:
        f.write(
            "\n#[macro_export]\nmacro_rules! own_text {\n"
            '    () => { include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/", file!())) };\n}\n'
        )
