"""Test files found the way the repository's pytest finds them (`tasks/pytest_config.py`), and the
baseline's time limit scaled with the suite (issue 36, item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.pytest_config import DEFAULT_FILES, pytest_collection
from tasks.synth import SynthError, baseline_limit, find_test_files

TREE = ("test.py", "tests/test_a.py", "tests/b_test.py", "tests/check_c.py", "other/test_d.py", "lib.py")


def repo(root: Path, config: dict[str, str]) -> Path:
    for path in TREE:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("def test_one():\n    pass\n\n\nasync def test_two():\n    pass\n")
    for name, text in config.items():
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("config", "found"),
    [
        ({}, ["other/test_d.py", "tests/b_test.py", "tests/test_a.py"]),
        ({"pytest.ini": "[pytest]\npython_files = test.py\n"}, ["test.py"]),
        ({"pytest.ini": "# configures pytest, with no section\n"}, ["other/test_d.py", "tests/b_test.py", "tests/test_a.py"]),
        ({"pyproject.toml": "[tool.pytest.ini_options]\npython_files = ['check_*.py', 'test_*.py']\ntestpaths = ['tests']\n"},
         ["tests/check_c.py", "tests/test_a.py"]),
        ({"tox.ini": "[pytest]\ntestpaths = tests\n"}, ["tests/b_test.py", "tests/test_a.py"]),
        ({"setup.cfg": "[tool:pytest]\npython_files = check_*.py\n"}, ["tests/check_c.py"]),
        # the first file that configures pytest wins, as pytest decides
        ({"pytest.ini": "[pytest]\npython_files = test.py\n", "setup.cfg": "[tool:pytest]\npython_files = check_*.py\n"},
         ["test.py"]),
        ({"tox.ini": "[tox]\nenvlist = py3\n", "setup.cfg": "[tool:pytest]\ntestpaths = other\n"}, ["other/test_d.py"]),
    ],
)  # fmt: skip
def test_test_files_follow_the_repositorys_pytest_configuration(
    tmp_path: Path, config: dict[str, str], found: list[str]
) -> None:
    assert sorted(find_test_files(repo(tmp_path, config))) == found


def test_no_test_file_says_where_it_looked(tmp_path: Path) -> None:
    root = repo(tmp_path, {"setup.cfg": "[tool:pytest]\npython_files = spec_*.py\ntestpaths = tests\n"})
    with pytest.raises(
        SynthError, match=r"no test files \(spec_\*\.py under tests, as setup\.cfg sets them\)"
    ):
        find_test_files(root)
    assert pytest_collection(tmp_path / "nothing").python_files == DEFAULT_FILES


def test_the_baseline_limit_is_a_setting_or_grows_with_the_tests(tmp_path: Path) -> None:
    root = repo(tmp_path, {})
    tests = find_test_files(root)
    assert baseline_limit(root, tests, None) == 600.0 + 2 * len(tests)  # two test functions a file
    assert baseline_limit(root, tests, 42.0) == 42.0
