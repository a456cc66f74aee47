"""The pure parts of mining a repository's history: which files are tests, a commit's change split into
its library and test parts, outcomes made into FAIL_TO_PASS / PASS_TO_PASS, and a problem statement that
tells what the commit message and the failures say, never the fix."""

from __future__ import annotations

import pytest

from tasks.mining import (
    is_library_code,
    is_test_module,
    is_test_path,
    judge_outcomes,
    message_text,
    problem_statement,
    secrets_of,
    split_change,
)


@pytest.mark.parametrize(
    ("path", "test", "module"),
    [
        ("tests/test_parse.py", True, True),
        ("test_parse.py", True, True),
        ("pkg/parse_test.py", True, True),
        ("test.py", True, True),
        ("pkg/test.py", False, False),
        ("testing/conftest.py", True, False),
        ("conftest.py", True, False),
        ("tests/data/valid/array.toml", True, False),
        ("tests/helpers.py", True, False),
        ("src/tomli/_parser.py", False, False),
        ("docs/testing.rst", False, False),
    ],
)
def test_test_files_and_test_modules_are_told_apart(path: str, test: bool, module: bool) -> None:
    assert (is_test_path(path), is_test_module(path)) == (test, module)


def test_library_code_is_python_outside_tests_docs_and_setup() -> None:
    assert is_library_code("src/attr/_make.py") and is_library_code("more_itertools/more.pyi")
    assert not any(
        is_library_code(p)
        for p in ("setup.py", "docs/conf.py", "tests/test_x.py", "README.rst", "bench/b.py")
    )


def _part(path: str, old: str = "a\n", new: str = "b\n", deleted: bool = False) -> str:
    header = f"diff --git a/{path} b/{path}\n"
    if deleted:
        return f"{header}deleted file mode 100644\n--- a/{path}\n+++ /dev/null\n@@ -1 +0,0 @@\n-{old}"
    return f"{header}--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}+{new}"


def test_a_change_splits_into_library_tests_and_settings() -> None:
    patch = "".join(
        [
            _part("parse.py", "    return a - b\n", "    return a + b\n"),
            _part("README.rst"),
            _part("tests/test_parse.py"),
            _part("tests/data/case.txt"),
            _part("tests/test_old.py", deleted=True),
            _part("setup.cfg"),
        ]
    )
    change = split_change(patch)
    assert [p.new_path for p in change.library] == ["parse.py", "README.rst"]
    assert change.test_files == ["tests/data/case.txt", "tests/test_parse.py"]
    assert change.deleted_tests == ["tests/test_old.py"]
    assert change.targets == ["tests/test_parse.py"]
    assert [p.old_path for p in change.settings] == ["setup.cfg"]
    assert change.changes_code
    assert "tests/" not in change.gold_patch and "setup.cfg" not in change.gold_patch
    assert secrets_of(change.gold_patch) == ["return a + b", "return a - b"]


def test_a_change_of_docs_and_tests_changes_no_library_code() -> None:
    change = split_change(_part("docs/index.rst") + _part("setup.py") + _part("tests/test_x.py"))
    assert not change.changes_code and change.targets == ["tests/test_x.py"]


def test_outcomes_make_fail_to_pass_and_pass_to_pass() -> None:
    before = {"t.py::a": "passed", "t.py::b": "failed", "t.py::d": "passed"}
    after = {"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "passed", "t.py::d": "failed"}
    judged = judge_outcomes(before, after)
    assert judged.fail_to_pass == ["t.py::b", "t.py::c"]  # c was not even collected at the parent
    assert judged.pass_to_pass == ["t.py::a"]
    assert judged.failing_after == ["t.py::d"]


def test_a_merge_commit_is_titled_by_its_pull_request_and_trailers_are_left_out() -> None:
    message = (
        "Merge pull request #184 from someone/hyphen\n\nallow hyphen in field name. closes #86\n\n"
        "More words.\n\nSigned-off-by: Someone <s@example.com>\n"
    )
    assert message_text(message) == ("allow hyphen in field name. closes #86", "More words.")


def test_the_statement_quotes_the_message_and_the_failures_but_never_the_fix() -> None:
    secrets = ["return a + b"]
    message = (
        "Fix add for negative numbers\n\nadd(-1, 2) gave -3.\n"
        "The fix: return a + b instead.\n---------\nCo-authored-by: X <x@example.com>\n"
    )
    failures = {
        "tests/test_calc.py::test_add": "AssertionError: assert -3 == 1\n +  where -3 = add(-1, 2)",
        "tests/test_calc.py::test_leak": "AssertionError: got return a + b at 0x7f00",
    }
    text = problem_statement(message, sorted(failures), failures, secrets)
    assert text.startswith("Fix add for negative numbers\n\nadd(-1, 2) gave -3.\n")
    assert "assert -3 == 1" in text and "where -3 = add(-1, 2)" in text  # input, expected and actual
    assert "return a + b" not in text and "Co-authored-by" not in text and "-----" not in text
    assert "2 tests fail" in text and "(the test fails without a message)" in text
