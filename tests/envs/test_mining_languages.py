"""`harness tasks mine --language go|rust` on histories built here from the built-in suites' `tally`
repositories: a fix with a new test file becomes a task (its F2P and P2P measured by the language's own
grader) that validates; a tests-only commit, a commit whose new test already passes at its parent and
a fix that needs its change of go.mod / Cargo.toml (which grading drops) are dropped with their reasons."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envs.languages import language_named
from envs.mining import MineConfig, mine
from envs.mining_programs import program_rules
from envs.process_grading import ProcessLanguage
from envs.sandbox import SandboxConfig
from envs.validation import validate_task
from harness.cli import main
from tasks.mining import split_change
from tasks.patches import git
from tasks.suite import BUILTIN_SUITES, load_suite
from tests.conftest import require_backend
from tests.tasks.test_swebench import commit

GO_TALLY = BUILTIN_SUITES / "go" / "repos" / "tally"
RUST_TALLY = BUILTIN_SUITES / "rust" / "repos" / "tally"

GO_ROMAN_TEST = """package tally

import "testing"

func TestNineHundred(t *testing.T) {
\tif got := ToRoman(900); got != "CM" {
\t\tt.Errorf("ToRoman(900) = %q", got)
\t}
}

func TestFour(t *testing.T) {
\tif got := ToRoman(4); got != "IV" {
\t\tt.Errorf("ToRoman(4) = %q", got)
\t}
}
"""
GO_STATS_TEST = """package tally

import "testing"

func TestMedianOfOne(t *testing.T) {
\tif got := MedianOr([]int{7}, -1); got != 7 {
\t\tt.Errorf("Median = %v", got)
\t}
}
"""
GO_GENERIC = """package tally

// Larger is the larger of a and b.
func Larger[T int | float64](a, b T) T {
\tif a > b {
\t\treturn a
\t}
\treturn b
}
"""
GO_GENERIC_TEST = """package tally

import "testing"

func TestLarger(t *testing.T) {
\tif got := Larger(2, 3); got != 3 {
\t\tt.Errorf("Larger = %v", got)
\t}
}
"""


def copy_repo(source: Path, repo: Path, bug: tuple[str, str, str]) -> None:
    """`source`'s files in the new git repository `repo`, with `bug` (path, old, new) put in."""
    shutil.copytree(source, repo)
    path, old, new = bug
    text = (repo / path).read_text()
    assert old in text
    (repo / path).write_text(text.replace(old, new))
    git(["init", "-q", str(repo)])


@pytest.fixture
def go_history(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    repo = tmp_path / "tally"
    copy_repo(GO_TALLY, repo, ("roman.go", '{900, "CM"}', '{900, "DCCCC"}'))
    (repo / "go.mod").write_text("module example.com/tally\n\ngo 1.17\n")
    roman = (repo / "roman.go").read_text()
    commits = {"root": commit(repo, {}, "Start tally")}
    commits["fix"] = commit(
        repo,
        {"roman.go": roman.replace('"DCCCC"', '"CM"'), "roman_test.go": GO_ROMAN_TEST},
        "Write 900 as CM\n\nToRoman(900) gave DCCCC.\n",
    )
    commits["tests"] = commit(repo, {"stats_test.go": GO_STATS_TEST}, "Test the median of one value")
    commits["passes"] = commit(
        repo,
        {"README.md": "# tally\n", "text.go": "// Text helpers.\n" + (repo / "text.go").read_text(),
         "stats_extra_test.go": GO_STATS_TEST.replace("TestMedianOfOne", "TestMedianOfOneAgain")},
        "Document the text helpers",
    )  # fmt: skip
    commits["settings"] = commit(
        repo,
        {"go.mod": "module example.com/tally\n\ngo 1.18\n", "larger.go": GO_GENERIC,
         "larger_test.go": GO_GENERIC_TEST},
        "Add Larger (generic: go 1.18)",
    )  # fmt: skip
    return repo, commits


def test_the_split_is_the_plug_ins_own() -> None:
    """Go's test files are hidden, go.mod is a setting the judge drops, a .go file is library code;
    Rust's tests/NAME.rs is a target, a helper under tests/ is hidden but not run by name."""
    go, rust = language_named("go"), language_named("rust")
    assert isinstance(go, ProcessLanguage) and isinstance(rust, ProcessLanguage)
    patch = "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
        for p in ("go.mod", "roman.go", "roman_test.go", "testdata/x.txt", "docs/x.go")
    )
    change = split_change(patch, program_rules(go))
    assert [p.new_path for p in change.library] == ["roman.go", "docs/x.go"]
    assert change.setting_paths == ["go.mod"]
    assert change.test_files == ["roman_test.go", "testdata/x.txt"] and change.targets == ["roman_test.go"]
    assert change.changes_code
    rules = program_rules(rust)
    assert rules.is_target("tests/roman.rs") and not rules.is_target("tests/common/mod.rs")
    assert rules.is_test("tests/common/mod.rs") and rules.is_setting("Cargo.toml")
    assert rules.is_code("src/roman.rs") and not rules.is_code("examples/demo.rs")


@pytest.mark.timeout(900)
def test_mining_go_keeps_the_fix_and_drops_the_others(
    go_history: tuple[Path, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On bwrap (the measuring is the grader's own, the same on every backend; Docker's run took 100 s)."""
    backend = "bwrap"
    require_backend(backend)
    repo, commits = go_history
    out = tmp_path / "suite"
    argv = ["tasks", "mine", "--language", "go", "--repo", str(repo), "--out", str(out), "--backend", backend]
    code = main([*argv, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [k["commit"] for k in report["kept"]] == [commits["fix"]]
    assert {d["commit"]: d["reason"] for d in report["dropped"]} == {
        commits["settings"]: "build_settings",
        commits["passes"]: "no_fail_to_pass",
        commits["tests"]: "no_library_change",
        commits["root"]: "no_parent",
    }
    settings = next(d["detail"] for d in report["dropped"] if d["commit"] == commits["settings"])
    assert "go.mod" in settings
    (task,) = load_suite(str(out))
    assert task.language == "go" and task.test_command == "go test ./..."
    assert task.hidden_tests.fail_to_pass == ["roman_test.go::TestNineHundred"]
    assert task.hidden_tests.pass_to_pass == ["roman_test.go::TestFour"]
    assert task.hidden_tests.files == {"roman_test.go": GO_ROMAN_TEST}
    assert '"CM"' in (task.gold_patch or "") and "_test.go" not in (task.gold_patch or "")
    assert task.problem_statement.startswith("Write 900 as CM\n\nToRoman(900) gave DCCCC.")
    assert '{900, "DCCCC"}' in (task.repo / "roman.go").read_text()  # the base is the parent
    validation = validate_task(
        task, SandboxConfig.model_validate({"backend": backend}), repeats=1, keep=False
    )
    assert validation.ok, validation.problems
    assert validation.gold_rewards == [1.0] and validation.empty_rewards == [0.0]


RUST_ROMAN_TEST = """use tally::roman::to_roman;

#[test]
fn nine_hundred() {
    assert_eq!(to_roman(900).as_deref(), Some("CM"));
}

#[test]
fn four() {
    assert_eq!(to_roman(4).as_deref(), Some("IV"));
}
"""
RUST_FIT = """//! Numbers that do not fit (`TryFrom` is in the prelude of edition 2021 only).

/// `n` doubled, or None when it does not fit a u8.
pub fn double_u8(n: u32) -> Option<u8> {
    u8::try_from(n.checked_mul(2)?).ok()
}
"""
RUST_DOUBLE_TEST = """#[test]
fn doubles_small_numbers() {
    assert_eq!(tally::fit::double_u8(100), Some(200));
}
"""


@pytest.mark.timeout(900)
def test_mining_rust_keeps_the_fix_and_drops_a_fix_that_needs_cargo_toml(tmp_path: Path) -> None:
    """On bwrap: the fix of to_roman(900) is kept; a new module that compiles only in edition 2021 (its
    Cargo.toml change, which grading drops) is dropped."""
    require_backend("bwrap")
    repo = tmp_path / "tally"
    copy_repo(RUST_TALLY, repo, ("src/roman.rs", '(900, "CM"),', '(900, "DCCCC"),'))
    manifest = (repo / "Cargo.toml").read_text()
    (repo / "Cargo.toml").write_text(manifest.replace('edition = "2021"', 'edition = "2018"'))
    commit(repo, {}, "Start tally")
    roman = (repo / "src/roman.rs").read_text().replace('"DCCCC"', '"CM"')
    fix = commit(repo, {"src/roman.rs": roman, "tests/roman.rs": RUST_ROMAN_TEST}, "Write 900 as CM")
    lib = (repo / "src/lib.rs").read_text() + "pub mod fit;\n"
    settings = commit(
        repo,
        {"Cargo.toml": manifest, "src/lib.rs": lib, "src/fit.rs": RUST_FIT,
         "tests/fit.rs": RUST_DOUBLE_TEST},
        "Add double_u8 (edition 2021: TryFrom in the prelude)",
    )  # fmt: skip
    config = MineConfig(repo=repo, out=tmp_path / "suite", language="rust", max_commits=2, backend="bwrap")
    report = mine(config)
    assert [(k.commit, k.fail_to_pass, k.pass_to_pass) for k in report.kept] == [(fix, 1, 1)]
    assert [(d.commit, d.reason) for d in report.dropped] == [(settings, "build_settings")]
    assert "Cargo.toml" in report.dropped[0].detail
    (task,) = load_suite(str(tmp_path / "suite"))
    assert task.language == "rust"
    assert task.hidden_tests.fail_to_pass == ["tests/roman.rs::nine_hundred"]
    assert task.hidden_tests.pass_to_pass == ["tests/roman.rs::four"]


def test_a_mined_tasks_grade_time_is_sized_to_what_mining_measured() -> None:
    """pico-args' tasks took 143 s a grade on a loaded host, past the 300 s default once canaries ran:
    a grade runs up to 13 copies of a file (the real one, 6 text and 6 held canaries), on a host up to 3
    times slower than when the fix's one-copy grade was measured."""
    from envs.mining import sized_limits

    assert sized_limits(1.5).grade_timeout_s == 300.0
    assert sized_limits(20.0).grade_timeout_s == 780.0
    assert sized_limits(20.0).test_file_timeout_s == 120.0


def test_a_language_that_is_not_known_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown language 'cobol'"):
        MineConfig(repo=tmp_path, out=tmp_path / "suite", language="cobol")
