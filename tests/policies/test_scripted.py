"""`scripted:gold` plays every gold patch through the tools, and `tasks validate` plays it the same way:
a hunk whose text occurs twice in its file (the edit tool refuses it) becomes a write of the whole file."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from envs.sandbox import SandboxConfig
from envs.validation import gold_episode_problems, validate_task
from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore
from policies.scripted import ScriptedPolicy, gold_calls
from tasks.model import Task
from tasks.patches import FilePatch, patched_text, split_patch
from tasks.suite import load_suite
from tests.conftest import require_backend

CLAMP = '''\
def clamp_{name}(x, lo, hi):
    """Clamp x into [lo, hi]."""
    if x < lo:
        return lo
    return {last}
    # the end
'''
BODY = CLAMP.format(name="low", last="x") + "\n\n" + CLAMP.format(name="both", last="min(x, hi)")


def twin_suite(root: Path) -> Path:
    """A task whose fix is in the second of two functions that end alike, so that the gold hunk's text
    (three lines of context each side, as git writes it) occurs twice in the buggy file."""
    repo = root / "repos" / "twin"
    (repo / "twin").mkdir(parents=True)
    (repo / "twin" / "__init__.py").write_text(BODY)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_low.py").write_text("from twin import clamp_low\n\n\ndef test_low():\n"
                                                "    assert clamp_low(-1, 0, 9) == 0\n")  # fmt: skip
    task = root / "twin-001"
    (task / "hidden" / "tests").mkdir(parents=True)
    (task / "hidden" / "tests" / "test_hidden_both.py").write_text(
        "from twin import clamp_both\n\n\ndef test_high():\n    assert clamp_both(50, 0, 10) == 10\n"
    )
    (task / "task.yaml").write_text(
        textwrap.dedent("""\
            title: clamp_both ignores the upper bound
            repo: twin
            bug:
              - path: twin/__init__.py
                old: "return min(x, hi)"
                new: "return x"
            problem_statement: clamp_both(50, 0, 10) returns 50, expected 10.
            fail_to_pass: [tests/test_hidden_both.py::test_high]
            pass_to_pass: [tests/test_low.py::test_low]
            """)
    )
    return root


def twin(tmp_path: Path) -> Task:
    (task,) = load_suite(str(twin_suite(tmp_path / "suite")))
    (hunk_text,) = [p for p in split_patch(task.gold_patch or "") if p.new_path == "twin/__init__.py"]
    old = "".join(line[1:] for line in hunk_text.text.splitlines(keepends=True)[4:] if line[:1] in " -")
    assert (task.repo / "twin" / "__init__.py").read_text().count(old) == 2  # the case this file is about
    return task


def test_a_hunk_whose_text_occurs_twice_is_written_whole(tmp_path: Path) -> None:
    task = twin(tmp_path)
    for explore in (True, False):
        writes = [c for c in gold_calls(task, explore) if c.name == "write_file"]
        assert [c.arguments for c in writes] == [{"path": "twin/__init__.py", "content": BODY}]
        assert not [c for c in gold_calls(task, explore) if c.name == "edit"]
    decoy = ScriptedPolicy("decoy").calls(task)  # the decoy does not write the fix
    assert all(c.arguments["content"] != BODY for c in decoy if c.name == "write_file")


def test_patched_text_applies_hunks_at_their_lines(tmp_path: Path) -> None:
    """Against git apply, on the twin file and on a patch of several hunks with repeated contexts."""
    before = "".join(f"line {i % 3}\n" for i in range(40))
    after = before.replace("line 1\n", "line one\n", 1)
    lines = after.splitlines(keepends=True)
    lines[30] = "changed\n"
    after = "".join(lines) + "tail\n"
    for old, new in ((before, after), (CLAMP.format(name="a", last="x") * 2, BODY)):
        (tmp_path / "f.txt").write_text(old)
        (tmp_path / "g.txt").write_text(new)
        diff = subprocess.run(
            ["git", "diff", "--no-index", "--", "f.txt", "g.txt"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        ).stdout
        (part,) = split_patch(diff)
        assert patched_text(old, FilePatch("f.txt", "f.txt", part.text)) == new
    with pytest.raises(ValueError, match="does not match"):
        patched_text("something else\n" * 5, FilePatch("f.txt", "f.txt", part.text))


@pytest.mark.parametrize("backend", ["bwrap"])
def test_scripted_gold_solves_a_twin_context_task_and_validate_plays_it(tmp_path: Path, backend: str) -> None:
    """Before, scripted:gold's edit was refused ("old_str appears 2 times") and the episode scored 0,
    while `tasks validate` wrote the gold files directly and said the task was fine."""
    require_backend(backend)
    task = twin(tmp_path)
    config = SandboxConfig(backend=backend)
    validation = validate_task(task, config, repeats=1, keep=False)
    assert validation.ok, validation.problems
    out = tmp_path / "run"
    rollout(
        RolloutConfig.model_validate(
            {"suite": str(tmp_path / "suite"), "policy": "scripted:gold", "out": str(out),
             "sandbox": {"backend": backend}}
        )
    )  # fmt: skip
    (trajectory,) = RunStore(out).trajectories()
    assert trajectory.reward == 1.0 and trajectory.grade is not None and trajectory.grade.correct == 1.0


def test_validate_reports_a_gold_the_tools_refuse(tmp_path: Path) -> None:
    """The twin task with write_file not among its tools: the whole-file write is refused, and validate
    says so instead of writing the files itself."""
    require_backend("bwrap")
    task = twin(tmp_path).model_copy(
        update={"tools": ["read_file", "list_dir", "edit", "run_tests", "submit"]}
    )
    (problem,) = gold_episode_problems(task, SandboxConfig(backend="bwrap"))
    assert problem.startswith(
        "the tools refuse the gold patch's calls (scripted:gold): write_file twin/__init__.py"
    )


def test_the_exploring_decoy_runs_the_tests_around_its_wrong_fix() -> None:
    """`scripted:decoy-explore` (the demo's `explore_demos` warm start) plays `gold`'s calls, tests run
    before and after, with `decoy`'s wrong fix: each edit of gold's places made `pass`."""
    task = next(t for t in load_suite("demo") if t.id == "demo-double")
    gold = gold_calls(task, explore=True)
    explored = ScriptedPolicy("decoy-explore").calls(task)
    assert [c.name for c in explored] == [c.name for c in gold]
    assert [c.name for c in explored].count("run_tests") == 2
    edits = [(c, g) for c, g in zip(explored, gold, strict=True) if c.name == "edit"]
    assert edits and all(c.arguments["old_str"] == g.arguments["old_str"] for c, g in edits)
    assert all(c.arguments["new_str"].strip() == "pass" != g.arguments["new_str"].strip() for c, g in edits)
