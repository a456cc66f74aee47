"""What a task's setup commands leave in /repo is the episode's start, never the agent's work: the agent's
diff, the graded diff and the simplicity term see only what the agent changed (issue 16, item 3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envs import validation
from envs.grading import Grade, collect_patch, grade_patch
from envs.sandbox import SandboxConfig
from envs.start_tree import start_tree
from envs.validation import gold_episode_problems, validate_task
from harness.gym import CodingEnv
from tasks.model import HiddenTests, Task
from tests.envs.test_grading import ADD_FIX
from tools import Toolbox, ToolsConfig

SETUP = [
    "printf 'VERSION = \"1.0\"\\n' > pkg/_version.py",  # what a packaging backend's version hook writes
    "sed -i 's/version: unknown/version: 1.0/' README.md",  # a file of the base, changed
    "mkdir -p /tmp/made-by-setup",  # outside /repo: made again in every sandbox
]
HIDDEN = """\
import os

from pkg import VERSION
from pkg.calc import add


def test_add():
    assert add(2, 3) == 5


def test_setup_ran_here_too():
    assert VERSION == "1.0" and os.path.isdir("/tmp/made-by-setup")
"""


def versioned_task(root: Path, setup: list[str]) -> Task:
    """A package that imports a version file its setup commands generate, with `add` subtracting."""
    repo = root / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("from pkg._version import VERSION\n")
    (repo / "pkg" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "README.md").write_text("# pkg\n\nversion: unknown\n")
    hidden = HiddenTests(
        files={"tests/test_hidden.py": HIDDEN},
        fail_to_pass=["tests/test_hidden.py::test_add"],
        pass_to_pass=["tests/test_hidden.py::test_setup_ran_here_too"],
    )
    return Task(
        id="versioned", title="add", repo=repo, problem_statement="add subtracts", hidden_tests=hidden,
        setup_commands=setup, gold_patch=ADD_FIX,
    )  # fmt: skip


def test_an_episode_that_fixes_the_bug_has_only_the_fix_in_its_diff(backend: str, tmp_path: Path) -> None:
    task = versioned_task(tmp_path, SETUP)
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    env = CodingEnv([task], lambda t: Toolbox(ToolsConfig(test_command=t.test_command)), config)
    env.reset(options={"task": task.id})
    assert env.sandbox is not None
    assert collect_patch(env.sandbox, task, config) == ""  # setup ran, the agent did nothing yet
    edit = {"path": "pkg/calc.py", "old_str": "return a - b", "new_str": "return a + b"}
    obs, _, _, _, info = env.step(json.dumps({"name": "edit", "arguments": edit}))
    assert not info["is_error"], obs
    _, reward, terminated, _, info = env.step({"name": "submit", "arguments": {}})
    env.close()

    grade = info["grade"]
    assert terminated and grade["correct"] == 1.0 and reward > 0, grade
    assert grade["dropped_paths"] == [] and grade["infra_error"] is None
    graded = grade["graded_patch"]
    assert "pkg/calc.py" in graded and "_version" not in graded and "README" not in graded, graded
    direct = grade_patch(task, ADD_FIX, config)  # the gold patch, applied to the same start tree
    assert direct.correct == 1.0 and direct.graded_patch == graded
    assert direct.simplicity == Grade.model_validate(grade).simplicity


def test_the_start_tree_is_made_once_and_leaves_the_repository_alone(tmp_path: Path) -> None:
    task = versioned_task(tmp_path, SETUP)
    config = SandboxConfig(backend="bwrap")
    tree = start_tree(task, config)
    assert (tree / "pkg" / "_version.py").read_text() == 'VERSION = "1.0"\n'
    assert "version: 1.0" in (tree / "README.md").read_text()
    assert not (task.repo / "pkg" / "_version.py").exists()
    assert start_tree(task, config) == tree
    assert start_tree(task.model_copy(update={"setup_commands": []}), config) == task.repo


def test_a_failing_setup_command_is_an_infra_error_not_a_zero(tmp_path: Path) -> None:
    task = versioned_task(tmp_path, [*SETUP, "false"])
    grade = grade_patch(task, ADD_FIX, SandboxConfig(backend="bwrap"))
    assert grade.infra_error is not None and "setup command 'false' failed" in grade.infra_error


def test_validation_plays_the_gold_patch_through_an_episode(tmp_path: Path) -> None:
    folder = tmp_path / "task"
    folder.mkdir()
    task = versioned_task(tmp_path, SETUP).model_copy(update={"folder": folder})
    config = SandboxConfig(backend="bwrap")
    assert gold_episode_problems(task, config) == []
    validation = validate_task(task, config, repeats=1)
    assert validation.problems == [] and validation.canaries >= 1
    # A setup command that fails is a problem of the task, named, not a crash of validation.
    broken = task.model_copy(update={"setup_commands": [*SETUP, "exit 3"]})
    assert any("setup command 'exit 3' failed" in p for p in validate_task(broken, config, 1, False).problems)


def test_an_episode_that_collects_the_gold_tree_is_not_graded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation grades the gold patch, then plays it through an episode: a collected diff the judge keeps
    exactly as it keeps the gold patch is the tree just graded (no third grade); a setup command whose
    output differs between the start tree and the episode's sandbox makes another tree, which is graded."""
    graded: list[str] = []

    def counted(task: Task, patch: str, *args: Any, **kwargs: Any) -> Grade:
        graded.append(patch)
        return grade_patch(task, patch, *args, **kwargs)

    monkeypatch.setattr(validation, "grade_patch", counted)
    config = SandboxConfig(backend="bwrap")
    task = versioned_task(tmp_path / "same", SETUP)
    assert validate_task(task, config, repeats=1, keep=False).problems == []
    assert graded == [task.gold_patch, ""]
    graded.clear()
    stamped = versioned_task(tmp_path / "stamped", [*SETUP, "od -An -tx1 -N8 /dev/urandom > stamp.txt"])
    assert validate_task(stamped, config, repeats=1, keep=False).problems == []
    assert len(graded) == 3 and graded[0] == stamped.gold_patch and graded[2] == ""
    assert "stamp.txt" in graded[1] and "return a + b" in graded[1]  # the episode's own diff
