"""Task suites load, and a broken task file is refused with the file and the field named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tasks.patches import diff_trees, patch_as_edits
from tasks.suite import TaskError, load_suite

MINI = Path(__file__).parents[1] / "data" / "suites" / "mini"


def test_builtin_suite_has_24_tasks_over_4_repositories() -> None:
    tasks = load_suite("builtin")
    assert len(tasks) >= 24
    assert len({t.repo_name for t in tasks}) >= 4
    for task in tasks:
        assert task.gold_patch, task.id
        assert task.hidden_tests.fail_to_pass, task.id
        assert task.problem_statement.strip(), task.id
        for path in task.hidden_tests.files:
            assert not (task.repo / path).exists(), f"{task.id}: hidden test {path} is in the agent's copy"
        for node in task.hidden_tests.fail_to_pass + task.hidden_tests.pass_to_pass:
            file = node.split("::")[0]
            assert file in task.hidden_tests.files or (task.repo / file).is_file(), f"{task.id}: {node}"


def test_gold_patches_are_expressible_as_edits() -> None:
    for task in load_suite("builtin"):
        edits = patch_as_edits(task.gold_patch or "")
        assert edits, task.id
        for edit in edits:
            if edit.old:
                text = (task.repo / edit.path).read_text()
                assert text.count(edit.old) == 1, f"{task.id}: {edit.path}: hunk not unique"


def test_materialized_base_is_a_single_commit_and_stable() -> None:
    first = load_suite(str(MINI))[0]
    again = load_suite(str(MINI))[0]
    assert first.repo == again.repo and first.base_commit == again.base_commit
    assert (first.repo / ".git").is_dir()
    assert "return x\n    return x" in (first.repo / "mini" / "__init__.py").read_text()


def broken_suite(tmp_path: Path, yaml_text: str) -> Path:
    suite = tmp_path / "suite"
    shutil.copytree(MINI, suite)
    (suite / "mini-001" / "task.yaml").write_text(yaml_text)
    return suite


GOOD = (MINI / "mini-001" / "task.yaml").read_text()


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        (GOOD.replace("title:", "titel:"), "title: Field required"),
        (GOOD + "timeout: 3\n", "timeout: Extra inputs are not permitted"),
        (
            GOOD.replace("fail_to_pass: [tests/test_hidden_clamp.py::test_high]", "fail_to_pass: []"),
            "fail_to_pass",
        ),
        (GOOD.replace("repo: mini", "repo: nowhere"), "repo: no folder 'nowhere'"),
        (GOOD.replace('old: "return hi"', 'old: "return never"'), "bug.0.old: found 0 times"),
        (GOOD.replace("path: mini/__init__.py", "path: mini/missing.py"), "bug.0.path: no file"),
        ("title: [unclosed\n", "not valid YAML"),
        (GOOD + "limits: {max_turns: 0}\n", "limits.max_turns"),
    ],
)
def test_broken_task_files_name_the_file_and_field(tmp_path: Path, yaml_text: str, expected: str) -> None:
    suite = broken_suite(tmp_path, yaml_text)
    with pytest.raises(TaskError) as error:
        load_suite(str(suite))
    assert str(suite / "mini-001" / "task.yaml") in str(error.value)
    assert expected in str(error.value)


def test_unknown_suite_is_refused() -> None:
    with pytest.raises(TaskError, match="not a built-in suite"):
        load_suite("no-such-suite")


def test_trees_given_by_relative_paths_are_diffed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git resolved a relative --work-tree again from the folder it ran in: `tasks synth --out REL` and
    `tasks list --suite REL` failed with "Invalid path" (issue 16)."""
    for name, text in (("old", "a\n"), ("new", "b\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.txt").write_text(text)
    monkeypatch.chdir(tmp_path)
    patch = diff_trees(Path("old"), Path("new"))
    assert "-a\n+b\n" in patch and "f.txt" in patch
