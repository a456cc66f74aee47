"""Multilingual SWE-bench layouts (`tasks/multilingual.py`): ids placed in the files that hold them, rows
rewritten, and Go and Rust instances imported by `harness tasks import swebench` and validated."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envs.languages.support import import_support
from envs.sandbox import SandboxConfig
from envs.validation import validate_task
from tasks.model import Task
from tasks.multilingual import (
    candidate_names,
    dataset_language,
    language_of_paths,
    multi_swe_bench_row,
    place_ids,
)
from tasks.patches import git
from tasks.suite import load_suite
from tests.harness.test_cli import harness

GO_FILES = {
    "roman_hidden_test.go": ["TestNineHundredIsCM", "TestYear1994"],
    "basics_test.go": ["TestRomanSmallNumbers", "TestYear1994"],
    "sub/basics_test.go": ["TestRomanSmallNumbers"],
}
FIXED = {"run": "PASS", "test": "FAIL", "fix": "PASS"}
KEPT = {"run": "PASS", "test": "PASS", "fix": "PASS"}


def test_ids_are_placed_in_the_file_that_holds_them_hidden_files_first() -> None:
    placed = place_ids(
        ["TestNineHundredIsCM/canonical", "TestNineHundredIsCM/long", "TestYear1994"],
        ["TestNineHundredIsCM/other", "TestRomanSmallNumbers", "TestGone", "basics_test.go::TestYear1994"],
        GO_FILES,
    )
    # subtests fold into their test; a test named both ways is FAIL_TO_PASS; hidden files come first
    assert placed.fail_to_pass == [
        "roman_hidden_test.go::TestNineHundredIsCM",
        "roman_hidden_test.go::TestYear1994",
    ]
    assert placed.pass_to_pass == ["basics_test.go::TestRomanSmallNumbers", "basics_test.go::TestYear1994"]
    assert placed.unplaced == ["TestGone"]
    assert placed.ambiguous == ["TestYear1994", "TestRomanSmallNumbers"]


def test_a_java_or_rust_id_prefers_the_file_of_its_class() -> None:
    files = {"src/test/java/a/ParserTest.java": ["parses"], "src/test/java/b/LexerTest.java": ["parses"]}
    placed = place_ids(["org.acme.LexerTest#parses"], ["parses(org.acme.ParserTest)"], files)
    assert placed.fail_to_pass == ["src/test/java/b/LexerTest.java::parses"]
    assert placed.pass_to_pass == ["src/test/java/a/ParserTest.java::parses"]
    assert candidate_names("parser::tests::empty_input")[:2] == ["parser::tests::empty_input", "empty_input"]
    assert "adds two numbers" in candidate_names("test/calc.test.js > calc > adds two numbers")


def test_the_language_is_the_rows_else_the_gold_patchs() -> None:
    suffixes = import_support().suffixes
    assert language_of_paths(["src/lib.rs", "src/x.rs", "build.py"], suffixes) == "rust"
    assert language_of_paths(["README.md"], suffixes) is None
    assert dataset_language("TS") == "javascript" and dataset_language("js") == "javascript"
    support = import_support()
    assert support.language("go", ["a.py"]) == "go" and support.language(None, ["a.py"]) == "python"
    with pytest.raises(ValueError, match="language 'cobol': no plug-in grades it"):
        support.language("cobol", [])


def test_a_multi_swe_bench_row_is_read_in_swe_benchs_fields() -> None:
    row = {
        "org": "acme",
        "repo": "tally",
        "number": 7,
        "base": {"label": "acme:main", "ref": "main", "sha": "a" * 40},
        "title": "Fix roman numerals",
        "body": "This changes roman.go to use CM.",  # the fix's own words: not the statement
        "resolved_issues": [{"number": 3, "title": "900 is DCCCC", "body": "ToRoman(900) gives DCCCC."}],
        "fix_patch": "diff --git a/x b/x\n",
        "test_patch": "diff --git a/y b/y\n",
        "f2p_tests": {"TestA": {"run": "PASS", "test": "FAIL", "fix": "PASS"}},
        "s2p_tests": {"TestB": {"run": "SKIP", "test": "SKIP", "fix": "PASS"}},
        "n2p_tests": {"TestC": {"run": "NONE", "test": "NONE", "fix": "PASS"}},
        "p2p_tests": {"TestD": {"run": "PASS", "test": "PASS", "fix": "PASS"}},
        "language": "go",
    }
    read = multi_swe_bench_row(row)
    assert read["instance_id"] == "acme__tally-7" and read["repo"] == "acme/tally"
    assert read["base_commit"] == "a" * 40 and read["patch"] == row["fix_patch"]
    assert read["FAIL_TO_PASS"] == ["TestA", "TestB", "TestC"] and read["PASS_TO_PASS"] == ["TestD"]
    assert (
        read["problem_statement"] == "900 is DCCCC\n\nToRoman(900) gives DCCCC." and read["language"] == "go"
    )
    assert multi_swe_bench_row({"instance_id": "x"}) == {"instance_id": "x"}


def history(task: Task, clone: Path) -> tuple[str, str, str]:
    """A git repository whose first commit is `task`'s base and whose second fixes it and adds its hidden
    tests: (base commit, library patch, test patch)."""
    shutil.copytree(task.repo, clone, ignore=shutil.ignore_patterns(".git"))
    git(["init", "-q", str(clone)])
    git(["add", "-A", "."], cwd=clone)
    git(["commit", "-q", "-m", "base"], cwd=clone)
    base = git(["rev-parse", "HEAD"], cwd=clone).decode().strip()
    (clone / "fix.patch").write_text(task.gold_patch or "")
    git(["apply", "fix.patch"], cwd=clone)
    (clone / "fix.patch").unlink()
    for path, text in task.hidden_tests.files.items():
        (clone / path).parent.mkdir(parents=True, exist_ok=True)
        (clone / path).write_text(text)
    git(["add", "-A", "."], cwd=clone)
    git(["commit", "-q", "-m", "fix"], cwd=clone)
    hidden = list(task.hidden_tests.files)
    library = git(["diff", base, "HEAD", "--", ".", *[f":!{p}" for p in hidden]], cwd=clone).decode()
    tests = git(["diff", base, "HEAD", "--", *hidden], cwd=clone).decode()
    return base, library, tests


def test_go_and_rust_instances_import_with_their_ids_placed_and_validate(tmp_path: Path) -> None:
    go = next(t for t in load_suite("go") if t.id.startswith("go-001"))
    rust = next(t for t in load_suite("rust") if t.id.startswith("rust-001"))
    go_base, go_fix, go_tests = history(go, tmp_path / "clones" / "acme__tally-go")
    rust_base, rust_fix, rust_tests = history(rust, tmp_path / "clones" / "acme__tally-rs")
    multilingual = {  # SWE-bench Multilingual: no language field, ids as go test's log names them
        "instance_id": "acme__tally-go-1",
        "repo": "acme/tally-go",
        "base_commit": go_base,
        "patch": go_fix,
        "test_patch": go_tests,
        "problem_statement": go.problem_statement,
        "FAIL_TO_PASS": json.dumps(["TestNineHundredIsCM", "TestYear1994/1994", "TestReadsBack1994"]),
        "PASS_TO_PASS": json.dumps(["TestFourHundreds", "TestRomanSmallNumbers", "TestNotThere"]),
    }
    multi = {  # Multi-SWE-bench's own layout
        "org": "acme",
        "repo": "tally-rs",
        "number": 2,
        "base": {"label": "acme:main", "ref": "main", "sha": rust_base},
        "resolved_issues": [{"number": 1, "title": "900", "body": rust.problem_statement}],
        "fix_patch": rust_fix,
        "test_patch": rust_tests,
        "f2p_tests": {n: FIXED for n in ("nine_hundred_is_cm", "year_1994", "reads_back_1994")},
        "p2p_tests": {n: KEPT for n in ("four_hundreds", "roman_small_numbers")},
    }
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(multilingual) + "\n" + json.dumps(multi) + "\n")
    suite = tmp_path / "suite"
    proc = harness("tasks", "import", "swebench", str(rows), "--repos", str(tmp_path / "clones"),
                   "--out", str(suite), "--no-env", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["imported"] == ["acme__tally-go-1", "acme__tally-rs-2"], report
    assert any("TestNotThere" in w for w in report["warnings"]), report["warnings"]
    tasks = {t.id: t for t in load_suite(str(suite))}
    go_task, rust_task = tasks["acme__tally-go-1"], tasks["acme__tally-rs-2"]
    assert (go_task.language, rust_task.language) == ("go", "rust")
    assert go_task.hidden_tests.fail_to_pass == [f"roman_hidden_test.go::{n}" for n in
        ("TestNineHundredIsCM", "TestYear1994", "TestReadsBack1994")]  # fmt: skip
    assert go_task.hidden_tests.pass_to_pass == [
        "roman_hidden_test.go::TestFourHundreds", "basics_test.go::TestRomanSmallNumbers"]  # fmt: skip
    assert sorted(rust_task.hidden_tests.fail_to_pass) == sorted(rust.hidden_tests.fail_to_pass)
    assert rust_task.hidden_tests.pass_to_pass == rust.hidden_tests.pass_to_pass
    assert go_task.test_command == "go test ./..." and rust_task.test_command.startswith("cargo test")
    for task, backend in ((go_task, "bwrap"), (rust_task, "docker")):
        # keep: an imported task has no held values yet (a check of its stored ones alone is refused)
        result = validate_task(task, SandboxConfig(backend=backend), repeats=1, keep=True)
        assert result.ok and result.gold_rewards == [1.0] and result.empty_rewards == [0.0], result
