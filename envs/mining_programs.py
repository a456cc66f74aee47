"""`harness tasks mine` for the languages whose tests are programs (`envs/process_grading.py`: Rust, Go and
whichever plug-in is a `ProcessLanguage`): how a commit is split and how its tests are measured.

The split is the plug-in's own: test files are what its `is_test_file` says (they become the hidden
files), build settings what its judge rule drops (`own_rule`: Cargo.toml, Cargo.lock, build.rs, go.mod,
go.sum, ...) beside the grader's own test settings, library code its source files outside docs/ and
examples/. The outcomes are measured by the grader itself, no second runner: a provisional task whose
base is the parent, whose hidden files are the commit's test files and whose ids are every test the
plug-in's `tests_in` finds in those it can run under its own names (`run_path`), graded with the empty
patch (the parent) and with the library part (the commit as grading sees it: its settings part dropped,
as the judge drops it from any patch). No canaries run in these gradings: the provisional task has none.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from envs.grading import Grade, grade_patch
from envs.process_grading import ProcessLanguage
from envs.sandbox import SandboxConfig
from tasks.mining import NO_CODE_DIRS, ChangeRules, SplitChange
from tasks.model import HiddenTests, Limits, Task
from tasks.patches import is_graded_path

TOKEN = "0" * 12
"""A run path's token as the process runner draws it (`secrets.token_hex(6)`), to tell its form."""


def program_rules(language: ProcessLanguage) -> ChangeRules:
    """The paths of `language`'s repositories as its plug-in (and the grader) sees them."""

    def is_setting(path: str) -> bool:
        return is_graded_path(path) or language.own_rule(path, b"") is not None

    def is_code(path: str) -> bool:
        parts = PurePosixPath(path).parts
        in_docs = any(part in NO_CODE_DIRS for part in parts[:-1])
        return path.endswith(language.suffixes) and not language.is_test_file(path) and not in_docs

    def is_target(path: str) -> bool:
        if not language.is_test_file(path) or not path.endswith(language.suffixes):
            return False
        try:
            language.run_path(path, TOKEN)
        except ValueError:  # a test file the grader cannot run under a name of its own (Rust's src/ tests)
            return False
        return True

    return ChangeRules(language.is_test_file, is_setting, is_code, is_target)


def hidden_ids(language: ProcessLanguage, change: SplitChange, hidden: dict[str, str]) -> list[str]:
    """`FILE::NAME` of every test the plug-in finds in the commit's runnable test files."""
    ids = []
    for path in change.targets:
        ids += [f"{path}::{name}" for name in dict.fromkeys(language.tests_in(hidden[path]))]
    return ids


def provisional_task(
    language: ProcessLanguage, base: Path, change: SplitChange, hidden: dict[str, str], ids: list[str]
) -> Task:
    """A task to measure a commit with: the parent's tree, every found test named FAIL_TO_PASS."""
    return Task(
        id="mining-provisional",
        title="measuring a commit",
        repo=base,
        problem_statement="",
        language=language.name,
        test_command=language.test_command,
        hidden_tests=HiddenTests(files=hidden, fail_to_pass=ids),
        gold_patch=change.gold_patch,
    )


def repository_test_command(language: ProcessLanguage, task: Task) -> str:
    """The command `task`'s repository runs its tests with, what its statement names: its own runner's where
    its plug-in picks one from the repository (JavaScript's mocha, jest or vitest), else the language's."""
    return (language.runner_for(task) or language).test_command


def measured(
    task: Task, patch: str, sandbox: SandboxConfig, run_timeout_s: float, test_timeout_s: float
) -> Grade:
    """The grade of `patch` on the provisional `task`, in the mining's time limits."""
    limits = Limits(grade_timeout_s=run_timeout_s, test_file_timeout_s=test_timeout_s)
    return grade_patch(task.model_copy(update={"limits": limits}), patch, sandbox)


def outcomes_of(grade: Grade) -> dict[str, str]:
    """Each named test's outcome in a measuring grade."""
    return {**grade.fail_to_pass, **grade.pass_to_pass}


FAILED = "it fails on the code as it is"
"""What the problem statement says of a test that failed at the parent with its file built."""


def failures_of(language: ProcessLanguage, grade: Grade, tests: list[str]) -> dict[str, str]:
    """Test id -> why it failed at the parent, as far as grading tells: the build error of its file (a
    copy's random name put back to the file's own), else that it failed."""
    found = {}
    for test in tests:
        path = test.partition("::")[0]
        error = grade.collect_errors.get(path) or grade.collect_errors.get("(build)", "")
        found[test] = _own_names(language, path, error) if error else FAILED
    return found


def _own_names(language: ProcessLanguage, path: str, text: str) -> str:
    """`text` with the names the grader ran `path`'s copies under put back to its own name."""
    try:
        form = PurePosixPath(language.run_path(path, TOKEN)).name
    except ValueError:
        return text
    pattern = re.escape(form).replace(TOKEN, "[0-9a-f]{12}")
    return re.sub(pattern, PurePosixPath(path).name, text)
