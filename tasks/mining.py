"""Tasks mined from a repository's own history: the pure parts of `harness tasks mine`.

A commit (or a merged pull request, a merge commit compared with its first parent) that changes library
code and tests becomes a task when the tests it changes fail at its parent and pass at it: the base is the
parent, the gold patch the library part of the change, the hidden tests the test part (its files whole, as
the commit has them). This module splits a change into those parts, names the test modules to run, turns
measured outcomes into FAIL_TO_PASS and PASS_TO_PASS, writes the problem statement from the commit message
and the observed failures (never from the fix: a line that quotes the fix's code is left out), and writes
the task folder. `envs/mining.py` checks the commits out and runs their tests in sandboxes.

The paths are Python's by default (`PYTHON_RULES`); a language whose tests are programs splits a change by
its plug-in's rules (`ChangeRules`, made in `envs/mining_programs.py`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tasks.environment import Environment
from tasks.importing import write_task_folder
from tasks.model import Limits
from tasks.patches import FilePatch, changed_lines, is_graded_path, split_patch
from tasks.suite import TaskFile

TEST_MODULES = ("test_*.py", "*_test.py")
"""Names of test modules at any depth (pytest's default `python_files`)."""
TEST_DIRS = frozenset({"tests", "test", "testing"})
"""Folders whose every file belongs to the tests (helpers, data, conftest.py)."""
TOP_LEVEL_TESTS = frozenset({"test.py", "tests.py"})
"""Test modules that only count at the repository's root (python-slugify's test.py)."""
NO_CODE_DIRS = frozenset({"docs", "doc", "examples", "benchmarks", "bench", ".github", "scripts"})
"""Folders whose Python files are not library code."""
TRAILERS = re.compile(r"^(signed-off-by|co-authored-by|reviewed-by|acked-by|cc|change-id):", re.IGNORECASE)
RULER = re.compile(r"^\s*[-=_*]{3,}\s*$")
MERGE_SUBJECT = re.compile(r"^Merge (pull request|branch|remote-tracking branch) ")
STATEMENT_TESTS = 3
"""Failing tests whose messages the problem statement quotes; the rest are named in one line."""
SECRET_MIN = 8
"""Changed lines of the fix at least this long (stripped) must not appear in the problem statement."""


def is_test_path(path: str) -> bool:
    """Whether `path` belongs to the tests: a test module (test_*.py, *_test.py, a top-level test.py or
    tests.py), a conftest.py, or any file under a tests/, test/ or testing/ folder."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else path
    if any(part in TEST_DIRS for part in parts[:-1]) or name == "conftest.py":
        return True
    if len(parts) == 1 and name in TOP_LEVEL_TESTS:
        return True
    return any(fnmatch.fnmatch(name, pattern) for pattern in TEST_MODULES)


def is_test_module(path: str) -> bool:
    """Whether pytest should be pointed at `path`: a test module, not a helper, data or conftest.py."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else path
    top = len(parts) == 1 and name in TOP_LEVEL_TESTS
    return top or any(fnmatch.fnmatch(name, pattern) for pattern in TEST_MODULES)


def is_library_code(path: str) -> bool:
    """A Python module of the library: not a test, not setup.py, not under docs/, examples/ and the like."""
    parts = PurePosixPath(path).parts
    if not path.endswith((".py", ".pyi")) or is_test_path(path) or path == "setup.py":
        return False
    return not any(part in NO_CODE_DIRS for part in parts[:-1])


@dataclass(frozen=True)
class ChangeRules:
    """How a language's repository paths split a change: Python's by default (`PYTHON_RULES`); another
    language's come from its plug-in (`envs.mining_programs.program_rules`: tasks/ imports nothing of envs/)."""

    is_test: Callable[[str], bool]
    """A test file or one the tests own (helpers, data): the hidden part."""
    is_setting: Callable[[str], bool]
    """A file the grader drops from any patch (test settings, build settings): in neither part."""
    is_code: Callable[[str], bool]
    """A source file of the library: a change with none of these is not a fix."""
    is_target: Callable[[str], bool]
    """A test file whose tests are run and named (a pytest module; a Rust tests/NAME.rs)."""


PYTHON_RULES = ChangeRules(is_test_path, is_graded_path, is_library_code, is_test_module)
"""Python's paths: pytest's test modules, the grader's own test settings and start-up files."""


@dataclass(frozen=True)
class SplitChange:
    """One commit's change in three parts."""

    library: list[FilePatch] = field(default_factory=list)
    """Every file that is neither a test nor one the grader owns: the gold patch."""
    tests: list[FilePatch] = field(default_factory=list)
    """The test part: the hidden tests."""
    settings: list[FilePatch] = field(default_factory=list)
    """Test and build settings and start-up files the grader drops from any tree (setup.cfg, tox.ini,
    Cargo.toml, go.mod, ...): in neither."""
    rules: ChangeRules = PYTHON_RULES

    @property
    def gold_patch(self) -> str:
        return "".join(part.text for part in self.library)

    @property
    def changes_code(self) -> bool:
        return any(self.rules.is_code(path) for part in self.library for path in part.paths)

    @property
    def setting_paths(self) -> list[str]:
        return sorted({path for part in self.settings for path in part.paths})

    @property
    def test_files(self) -> list[str]:
        """The test files as the commit has them (a deleted one is left out: hidden tests only add or
        change files)."""
        return sorted({part.new_path for part in self.tests if part.new_path is not None})

    @property
    def deleted_tests(self) -> list[str]:
        return sorted({part.old_path for part in self.tests if part.new_path is None and part.old_path})

    @property
    def targets(self) -> list[str]:
        """The changed test files whose tests run at the parent and at the commit (pytest's modules)."""
        return [path for path in self.test_files if self.rules.is_target(path)]


def split_change(patch: str, rules: ChangeRules = PYTHON_RULES) -> SplitChange:
    """Splits a git-format patch into its library, test and settings parts by `rules`. A file whose old or
    new path is a test path is a test; a renamed file is judged by both its paths."""
    library: list[FilePatch] = []
    tests: list[FilePatch] = []
    settings: list[FilePatch] = []
    for part in split_patch(patch):
        if any(rules.is_test(path) for path in part.paths):
            tests.append(part)
        elif any(rules.is_setting(path) for path in part.paths):
            settings.append(part)
        else:
            library.append(part)
    return SplitChange(library, tests, settings, rules)


@dataclass(frozen=True)
class Judged:
    """What the measured outcomes make of a commit's changed tests."""

    fail_to_pass: list[str]
    pass_to_pass: list[str]
    failing_after: list[str]
    """Tests that do not pass at the commit itself: in neither list."""


def judge_outcomes(before: dict[str, str], after: dict[str, str]) -> Judged:
    """FAIL_TO_PASS: the tests that pass at the commit and did not pass (or were not collected) at the
    parent with the test part applied; PASS_TO_PASS: those that passed at both."""
    passed_after = [test for test, outcome in after.items() if outcome == "passed"]
    return Judged(
        fail_to_pass=sorted(t for t in passed_after if before.get(t) != "passed"),
        pass_to_pass=sorted(t for t in passed_after if before.get(t) == "passed"),
        failing_after=sorted(t for t, outcome in after.items() if outcome != "passed"),
    )


def secrets_of(gold_patch: str) -> list[str]:
    """The fix's changed lines long enough that quoting them would give it away."""
    added, removed = changed_lines(gold_patch)
    return [line.strip() for line in added + removed if len(line.strip()) >= SECRET_MIN]


def message_text(message: str) -> tuple[str, str]:
    """(title, body) of a commit message: a merge commit's title is its pull request's (the body's first
    line); trailers (Signed-off-by, Co-authored-by, ...) are left out."""
    lines = [line.rstrip() for line in message.strip().splitlines() if not TRAILERS.match(line.strip())]
    if lines and MERGE_SUBJECT.match(lines[0]):
        rest = [line for line in lines[1:] if line.strip()]
        lines = rest or lines
    title = lines[0].strip() if lines else "A change in the library"
    return title, "\n".join(lines[1:]).strip()


def _clean(text: str, secrets: list[str]) -> list[str]:
    """The lines of `text` that quote none of the fix's code, without object addresses and the rulers of
    squashed commit lists."""
    text = re.sub(r" at 0x[0-9a-f]+", "", text)
    return [
        line.rstrip()[:200]
        for line in text.splitlines()
        if not any(s in line for s in secrets) and not RULER.match(line)
    ]


def _base_name(test: str) -> str:
    return test.split("::")[-1].split("[")[0]


def problem_statement(
    message: str, fail_to_pass: list[str], failures: dict[str, str], secrets: list[str]
) -> str:
    """The task's statement: what the commit message says is wanted, and how the tests that describe it
    fail now (the exception each raised: its inputs, expected and actual values, as pytest reports them).
    A line that quotes the fix's code (`secrets`) is left out, from the message and the failures alike."""
    title, body = message_text(message)
    kept_body = "\n".join(_clean(body, secrets)).strip()
    parts = [title if not any(s in title for s in secrets) else "A change in the library", ""]
    if kept_body:
        parts += [kept_body, ""]
    count = "1 test fails" if len(fail_to_pass) == 1 else f"{len(fail_to_pass)} tests fail"
    parts.append(f"Hidden tests check this behaviour at grading; on the code as it is, {count}:\n")
    firsts = list({_base_name(t): t for t in reversed(fail_to_pass)}.values())[::-1]
    quoted = (firsts + [t for t in fail_to_pass if t not in firsts])[:STATEMENT_TESTS]
    for test in quoted:
        lines = _clean(failures.get(test, ""), secrets)[:8] or ["(the test fails without a message)"]
        parts.append(f"- `{test}`:\n\n" + "\n".join(f"    {line}" if line else "" for line in lines) + "\n")
    rest = [t for t in fail_to_pass if t not in quoted]
    if rest:
        names = list(dict.fromkeys(_base_name(t) for t in rest))
        parts.append(f"- and {len(rest)} more: " + ", ".join(f"`{n}`" for n in names) + "\n")
    parts.append(
        "Change the library's code so that it behaves as described; the tests that pass now must keep "
        "passing."
    )
    return "\n".join(parts).rstrip() + "\n"


def task_id(name: str, commit: str) -> str:
    return f"{name}-{commit[:10]}"


@dataclass(frozen=True)
class MinedTask:
    """Everything a mined task folder is written from."""

    name: str
    """The repository's folder under the suite's repos/ (a mirror of its history)."""
    parent: str
    commit: str
    message: str
    change: SplitChange
    hidden: dict[str, str]
    """Repository path -> the test file's text at the commit."""
    judged: Judged
    failures: dict[str, str]
    """Test id -> the exception it raised at the parent (its collection error where it was not collected)."""
    test_command: str
    environment: Environment | None
    language: str = "python"
    """The plug-in that grades it (`Task.language`)."""
    limits: Limits = field(default_factory=Limits)
    """Its task.yaml's limits (a process language's grade time sized to what mining measured)."""


def write_mined_task(suite: Path, task: MinedTask) -> Path:
    """Writes SUITE/NAME-COMMIT: task.yaml (base: the parent), gold.patch (the library part), hidden/
    (the test part's files, whole)."""
    secrets = secrets_of(task.change.gold_patch)
    title, _ = message_text(task.message)
    spec = TaskFile(
        title=title if not any(s in title for s in secrets) else f"commit {task.commit[:10]}",
        repo=task.name,
        base_commit=task.parent,
        problem_statement=problem_statement(task.message, task.judged.fail_to_pass, task.failures, secrets),
        environment=task.environment,
        language=task.language,
        test_command=task.test_command,
        fail_to_pass=task.judged.fail_to_pass,
        pass_to_pass=task.judged.pass_to_pass,
        gold_patch="gold.patch",
        limits=task.limits,
    )
    files: dict[str, str | bytes] = {f"hidden/{path}": text for path, text in task.hidden.items()}
    files["gold.patch"] = task.change.gold_patch
    return write_task_folder(suite, task_id(task.name, task.commit), spec, files)
