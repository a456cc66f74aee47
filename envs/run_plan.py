"""What a grading run writes and runs: hidden test files, and canaries under names drawn like theirs.

Every test file the task's ids name runs under a fresh random name (`test_<hex>.py`, in its own folder),
and so does each canary, each file whole in a child of its own; all are written as `ast.unparse` renders
them, so that layout, comments and names tell a canary from the real file no more than the one
expectation that differs. Node ids are mapped
back to the task's ids outside the sandbox. Hidden files no id names are written at their own paths.
"""

from __future__ import annotations

import ast
import secrets
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tasks.canaries import Canary
from tasks.model import Task


@dataclass
class RunPlan:
    files: dict[str, str] = field(default_factory=dict)
    """Repository path -> source written for the run: the hidden files that have no canaries."""
    held: dict[str, str] = field(default_factory=dict)
    """Run name -> source of the real copies and canaries, which the runner holds and writes for the
    one child that runs it alone (envs/grade_runner.py)."""
    ids: dict[str, str] = field(default_factory=dict)
    """The task's test id -> the id it runs under."""
    canaries: dict[str, Canary] = field(default_factory=dict)
    """Run id of each canary's test (`test_<hex>.py::test`) -> the canary."""
    watched: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    """Run id of each canary's test -> the exact run ids its verdict reads in the canary's file, and the
    same cases' run ids in the real copy: the task's ids of that test, as the score reads them."""

    def targets(self) -> list[str]:
        """What the runner runs, one child each: every hidden file, real copy and canary, whole. A child
        learns nothing of the others (envs/grade_runner.py), so a real copy and its canaries run alike."""
        files = [i.split("::", 1)[0] for i in self.ids.values()]
        return list(dict.fromkeys([*files, *(i.split("::", 1)[0] for i in self.canaries)]))


def fresh_name(original: str, taken: set[str]) -> str:
    folder = PurePosixPath(original).parent
    while True:
        name = (folder / f"test_{secrets.token_hex(6)}.py").as_posix()
        if name not in taken:
            taken.add(name)
            return name


def normalized(source: str) -> str:
    """`source` as `ast.unparse` writes it (how canaries are written); unchanged if it does not parse."""
    try:
        return ast.unparse(ast.parse(source)) + "\n"
    except (SyntaxError, ValueError):
        return source


def plan_run(task: Task, canaries: list[Canary]) -> RunPlan:
    """Files and ids of one grading run of `task`'s hidden tests with `canaries` beside them.

    Every test file an id names runs renamed, as the runner's held copy, whether it has canaries or not:
    a file left at its own name, or with its own layout, would tell a forger that no canary is made from
    it. Hidden files no id names (helpers) are written at their own paths."""
    hidden = task.hidden_tests
    ids = [*hidden.fail_to_pass, *hidden.pass_to_pass]
    canaries = [c for c in canaries if c.file in hidden.files]
    sources = {path: _source(task, path) for path in dict.fromkeys(i.partition("::")[0] for i in ids)}
    plan = RunPlan(files={p: s for p, s in hidden.files.items() if p not in sources})
    taken = set(hidden.files) | {p.relative_to(task.repo).as_posix() for p in Path(task.repo).rglob("*.py")}
    renamed = {
        path: fresh_name(path, taken) for path, source in sorted(sources.items()) if source is not None
    }
    for path, name in renamed.items():
        plan.held[name] = normalized(sources[path] or "")
    for test_id in ids:
        path, sep, rest = test_id.partition("::")
        plan.ids[test_id] = f"{renamed[path]}{sep}{rest}" if path in renamed else test_id
    for canary in canaries:
        name = fresh_name(canary.file, taken)
        run_id = f"{name}::{canary.test}"
        plan.held[name] = canary.source
        plan.canaries[run_id] = canary
        cases = [i.partition("::")[2] for i in ids if _of(i, canary)]
        plan.watched[run_id] = (
            [f"{name}::{c}" for c in cases],
            [f"{renamed[canary.file]}::{c}" for c in cases],
        )
    return plan


def _source(task: Task, path: str) -> str | None:
    """A test file as the grading sandbox has it: the hidden version, else the base's; None if neither."""
    if path in task.hidden_tests.files:
        return task.hidden_tests.files[path]
    file = Path(task.repo) / path
    try:
        return file.read_text() if file.is_file() and not file.is_symlink() else None
    except (OSError, UnicodeDecodeError):
        return None


def _of(test_id: str, canary: Canary) -> bool:
    """Whether the task's `test_id` is the canary's test or one of its parametrized cases."""
    path, _, rest = test_id.partition("::")
    return path == canary.file and (rest == canary.test or rest.startswith(f"{canary.test}["))


def verdict(ids: list[str], outcomes: dict[str, str]) -> str:
    """`passed` when each of `ids` passed, `missing` when one was not reported, else `failed`.

    Read exactly as the score reads a test (one outcome per id), never by prefix: with a prefix, a
    forger that reports a failing "case" `ID[x]` beside each test made every canary look failed while
    the score read the real tests as passed (0.94 on a built-in task)."""
    if not ids or any(i not in outcomes for i in ids):
        return "missing"
    return "passed" if all(outcomes[i] == "passed" for i in ids) else "failed"
