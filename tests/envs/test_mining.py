"""`harness tasks mine` on a small git history built here: a fix with its test becomes a task that
validates and `scripted:gold` solves; a docs-only commit, a commit whose new test already passes at its
parent, one whose new test cannot even run at the commit, and the root commit are dropped, each with its
reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.mining import MineConfig, mine
from envs.sandbox import SandboxConfig
from envs.validation import validate_task
from harness.cli import main
from tasks.environment import Declared
from tasks.patches import git
from tasks.suite import load_suite
from tests.conftest import require_backend
from tests.tasks.test_swebench import commit

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TEST_SUB = "from calc import add, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
TEST_ADD = TEST_SUB + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"
TEST_MUL = (
    "import not_installed_anywhere\nfrom calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
)
TEST_MORE = TEST_ADD + "\n\ndef test_sub_negative():\n    assert sub(1, 3) == -2\n"


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    repo = tmp_path / "calc"
    repo.mkdir()
    git(["init", "-q", str(repo)])
    commits = {
        "root": commit(repo, {"calc.py": BUGGY, "tests/test_calc.py": TEST_SUB}, "Start calc"),
        "fix": commit(
            repo,
            {"calc.py": FIXED, "tests/test_calc.py": TEST_ADD},
            "Fix add\n\nadd(2, 3) gave the wrong sum.\n",
        ),
        "docs": commit(repo, {"README.md": "# calc\n"}, "Write a README"),
        "passes": commit(
            repo,
            {"calc.py": FIXED.replace("def sub", "# Subtraction.\ndef sub"), "tests/test_calc.py": TEST_MORE},
            "Test sub with a negative result",
        ),
        "broken": commit(
            repo,
            {"calc.py": FIXED + "\n\ndef mul(a, b):\n    return a * b\n", "tests/test_mul.py": TEST_MUL},
            "Add mul",
        ),
    }
    return repo, commits


@pytest.mark.timeout(300)
def test_mining_keeps_the_fix_and_drops_the_others_with_their_reasons(
    backend: str, history: tuple[Path, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, commits = history
    out = tmp_path / "suite"
    code = main(["tasks", "mine", "--repo", str(repo), "--out", str(out), "--backend", backend, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["scanned"] == 5
    assert [k["commit"] for k in report["kept"]] == [commits["fix"]]
    reasons = {d["commit"]: d["reason"] for d in report["dropped"]}
    assert reasons == {
        commits["broken"]: "fails_at_commit",
        commits["passes"]: "no_fail_to_pass",
        commits["docs"]: "no_library_change",
        commits["root"]: "no_parent",
    }
    broken = next(d["detail"] for d in report["dropped"] if d["commit"] == commits["broken"])
    assert "No module named 'not_installed_anywhere'" in broken
    (task,) = load_suite(str(out))
    assert task.id == f"calc-{commits['fix'][:10]}" and task.base_commit is not None
    assert task.hidden_tests.fail_to_pass == ["tests/test_calc.py::test_add"]
    assert task.hidden_tests.pass_to_pass == ["tests/test_calc.py::test_sub"]
    assert task.hidden_tests.files == {"tests/test_calc.py": TEST_ADD}
    assert "return a + b" in (task.gold_patch or "") and "tests/" not in (task.gold_patch or "")
    statement = task.problem_statement
    assert statement.startswith("Fix add\n\nadd(2, 3) gave the wrong sum.")
    assert "assert -1 == 5" in statement and "return a + b" not in statement  # the failure, not the fix
    # The base is the parent, with none of the fix: the task's own repository does not have the test.
    assert (task.repo / "calc.py").read_text() == BUGGY
    # Valid once more with the canaries it stored, its gold patch played by `scripted:gold` too.
    validation = validate_task(
        task, SandboxConfig.model_validate({"backend": backend}), repeats=1, keep=False
    )
    assert validation.ok, validation.problems


def test_the_environment_reader_is_a_parameter(history: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """A reader that refuses the commit's declarations drops the commits that reach it, before any test
    runs; the others keep their own reasons."""
    repo, commits = history

    def refuses(tree: Path) -> Declared:
        raise ValueError(f"pyproject.toml: not valid TOML ({(tree / 'calc.py').is_file()})")

    config = MineConfig(repo=repo, out=tmp_path / "suite", max_commits=3, rev="HEAD~1", backend="bwrap")
    report = mine(config, reader=refuses)
    assert report.scanned == 3 and not report.kept
    assert {d.commit: d.reason for d in report.dropped} == {
        commits["fix"]: "environment",
        commits["docs"]: "no_library_change",
        commits["passes"]: "environment",
    }
    assert "not valid TOML (True)" in report.dropped[0].detail
    assert not (tmp_path / "suite" / "repos" / "calc").exists()  # no task uses the mirror


def test_a_revision_that_does_not_exist_is_refused(
    history: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    repo, _ = history
    assert main(["tasks", "mine", "--repo", str(repo), "--out", str(tmp_path / "s"), "--rev", "nowhere"]) == 2


SHARED = 'import sys\n\n\ndef test_shared():\n    assert {"test_a", "tests.test_a"} & set(sys.modules)\n'


@pytest.mark.timeout(300)
def test_a_test_that_passes_only_beside_another_file_is_left_out_of_pass_to_pass(tmp_path: Path) -> None:
    """pytest runs a commit's changed test files in one process, the grader each in a child of its own: a
    test that passes only once another file was imported passes at the parent and the commit, fails in
    the grader's run of the gold patch, and is left out of PASS_TO_PASS rather than costing the task."""
    require_backend("bwrap")
    repo = tmp_path / "calc"
    repo.mkdir()
    git(["init", "-q", str(repo)])
    commit(repo, {"calc.py": BUGGY, "tests/test_a.py": TEST_SUB, "tests/test_b.py": "# b\n"}, "Start")
    fix = commit(repo, {"calc.py": FIXED, "tests/test_a.py": TEST_ADD, "tests/test_b.py": SHARED}, "Fix add")
    report = mine(MineConfig(repo=repo, out=tmp_path / "suite", max_commits=1, backend="bwrap"))
    assert [(k.commit, k.fail_to_pass, k.pass_to_pass, k.left_out) for k in report.kept] == [(fix, 1, 1, 1)]
    (task,) = load_suite(str(tmp_path / "suite"))
    assert task.hidden_tests.pass_to_pass == ["tests/test_a.py::test_sub"]
