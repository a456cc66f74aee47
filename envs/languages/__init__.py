"""Language plug-ins: how a task's tree is judged, its hidden tests run and its canaries made, per language.

A task names its language (`Task.language`, `python` by default); `language_of` loads the plug-in from
`LANGUAGES`, a table of dotted paths imported on first use. Adding a language is a module of its own and a
row here; nothing else branches on a language's name.

- `python`: pytest under the grader's own runner (`envs/grade_runner.py`): a child per test file, expected
  values held outside the sandbox, held and text canaries. Integrity `protected`.
- `rust` (`cargo test`) and `go` (`go test`), offline, each hidden test in a process of its own
  (`envs/process_grading.py`), equality assertions' expected values held outside the sandbox
  (`envs/process_held.py`). Integrity `process`: the code under test runs in the process whose exit
  status decides its test, so it can end that process as passed; what it cannot do is report a held
  value it did not compute, and held canaries are the real copy's very text; checks with no value worth
  holding (`if err != nil`, `assert!(x.is_err())`) are watched by text canaries that negate them
  (`ProcessLanguage.negated`) (docs/reliability.md 5k).
- `java` (JUnit 5, or 4 through Vintage, on a Maven-layout repository, built with `javac` offline): the
  same process-level grading, each test alone in its own JVM under JUnit's console launcher.
- `javascript` (Node's `node:test`; `.js`, and by suffix TypeScript's `.ts`, transpiled in the test's
  process): the same process-level grading, each test alone under an anchored `--test-name-pattern`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from envs.hidden_run import HiddenRun
    from envs.judge import Entry
    from envs.reward import SourceStyle
    from envs.sandbox import Sandbox, SandboxConfig
    from tasks.canaries import Canary
    from tasks.model import Task

Integrity = Literal["protected", "process", "unprotected"]
"""How far a grade can be trusted: `protected` (outcomes decided where the agent's code never ran,
expected values held outside the sandbox), `process` (each test in a process of its own, decided by its
exit status, which the code under test can set; text canaries only), `unprotected` (a verifier script that
runs as the user that writes the reward)."""

LANGUAGES: dict[str, str] = {
    "python": "envs.languages.python:PYTHON",
    "rust": "envs.languages.rust:RUST",
    "go": "envs.languages.go:GO",
    "java": "envs.languages.java:JAVA",
    "javascript": "envs.languages.javascript:JAVASCRIPT",
}
"""Language name -> the dotted path of its plug-in (a `Language`), imported on first use."""


@dataclass(frozen=True)
class HiddenRequest:
    """What a grading run hands a language: the sandbox with the kept tree and the task's setup done."""

    sandbox: Sandbox
    task: Task
    canaries: list[Canary]
    """The task's stored canaries, or those on trial (`trusted` False)."""
    grader_dir: str
    """A fresh folder outside /repo for the runner's files."""
    timeout: float
    trusted: bool
    """False while canaries are on trial (`tasks validate`): their outcomes are reported, never held
    against the patch."""
    probe: bool


class Language(Protocol):
    """One language family's grading: the judge's rules for its files, its hidden test run, its canaries."""

    name: str
    integrity: Integrity
    suffixes: tuple[str, ...]
    """Source files of the language (`.rs`): what the simplicity term and `search` count as code."""
    test_command: str
    """The repository's own test command, the agent's `run_tests` default."""
    holds_expected: bool
    style: SourceStyle
    """How its source shows debug output and commented-out code (the simplicity term)."""
    """Whether `tasks validate` computes expected values on the gold tree, for the grader to hold
    outside the sandbox (`tasks/computed.py`)."""

    def dropped(
        self, path: str, content: bytes | None, tree: dict[str, Entry], base: dict[str, Entry]
    ) -> str | None:
        """Why the change of `path` (new `content`, None when deleted) in `tree` is not graded; None: kept."""
        ...

    def run_hidden(self, request: HiddenRequest) -> HiddenRun:
        """Runs the task's hidden tests and canaries in `request.sandbox`; outcomes decided host-side."""
        ...

    def task_problems(self, task: Task) -> list[str]:
        """What makes `task` unfit for this language's grading, beyond what grading its patches shows."""
        ...

    def unwatched(self, task: Task, canaries: list[Canary]) -> list[str]:
        """The named tests (`FILE::NAME` ids) of `task`, with `canaries` stored, that nothing but the process
        of the code under test would decide ([] for none): `tasks validate` refuses the task."""
        ...

    def planned(self, task: Task, canaries: list[Canary]) -> tuple[list[Canary], int, int]:
        """What a grade of `task` with `canaries` runs: every canary (those made at grading included), the
        hidden assertions whose expected value the grader holds outside the sandbox, and all of them."""
        ...

    def verify_canaries(self, task: Task, sandbox_config: SandboxConfig) -> tuple[list[Canary], int, str]:
        """`tasks validate`'s canaries: (those that fail on the gold patch at their own assertion, how many
        were tried, why some could not be decided ('' when all were))."""
        ...


def known_language(name: str) -> str:
    """`name` if it is a row of `LANGUAGES`."""
    if name not in LANGUAGES:
        raise ValueError(f"unknown language {name!r}: expected one of {', '.join(sorted(LANGUAGES))}")
    return name


def language_named(name: str) -> Language:
    """The plug-in of `name` (ValueError naming the known ones for another)."""
    module, _, attr = LANGUAGES[known_language(name)].partition(":")
    language: Language = getattr(importlib.import_module(module), attr)
    return language


def language_of(task: Task) -> Language:
    """The plug-in of `task`'s language."""
    try:
        return language_named(task.language)
    except ValueError as e:
        raise ValueError(f"task {task.id}: {e}") from None


def source_suffixes() -> tuple[str, ...]:
    """Every plug-in's source suffixes (imports each one)."""
    return tuple(s for name in LANGUAGES for s in language_named(name).suffixes)


def is_source(path: str | Path, language: Language) -> bool:
    """Whether `path` is a source file of `language`."""
    return str(path).endswith(language.suffixes)
