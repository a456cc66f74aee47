"""`harness tasks mine`: tasks from a repository's own history, measured in sandboxes.

Each commit on the first-parent line from `rev` (a merge is its pull request, compared with its first
parent) is split into library, test and settings parts (`tasks/mining.py`). One that changes library code
and test modules is checked out twice on the host: the parent with the test part applied, and the commit.
The environment is read from the commit's tree (`reader`: the build backend's answer from the command
line, the static parse by default) and built, or reused, by its key (`envs.task_env.env_key`): one per set
of declarations, not per commit. The changed test modules run in a sandbox of each tree, in that one environment, by synthesis's
runner (`envs.synthesis.SandboxPytest`, the grader's outcome rules). Tests that pass at the commit and not
at the parent are FAIL_TO_PASS, those that pass at both PASS_TO_PASS; a commit with no FAIL_TO_PASS is
dropped. A kept one is written as a task (base: the parent) and validated as `harness tasks validate
--drop-unwatched` does, the gold patch also played by `scripted:gold` (a PASS_TO_PASS test that nothing but
its process watches is left out; an unwatched FAIL_TO_PASS test refuses the task); one that fails is
removed again. Every commit scanned is either kept or dropped with its reason.

That is Python's way (`MineConfig.language`, `python` by default). A language whose tests are programs
(`rust`, `go`: a `ProcessLanguage` plug-in) is split by its plug-in and measured by its own grader
(`envs/mining_programs.py`): the parent graded with the empty patch and with the library part, the commit's
test files as hidden files; a commit whose fix needs the build settings grading drops (Cargo.toml, go.mod)
is dropped as `build_settings`.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from envs.backends import resolve_backend
from envs.grading import Grade, grade_patch
from envs.judge import base_modules
from envs.languages import known_language, language_named
from envs.mining_programs import (
    failures_of,
    hidden_ids,
    measured,
    outcomes_of,
    program_rules,
    provisional_task,
    repository_test_command,
)
from envs.process_grading import KEPT, ProcessLanguage
from envs.process_held import HELD_CANARIES
from envs.python_env import EnvBuildError
from envs.sandbox import BackendName, SandboxConfig
from envs.synthesis import SandboxPytest, sandbox_starter
from envs.task_env import env_key
from envs.validation import validate_dropping_unwatched
from tasks.environment import Environment, EnvironmentReader, static_environment
from tasks.importing import ImportProblem, task_yaml
from tasks.mining import (
    PYTHON_RULES,
    ChangeRules,
    Judged,
    MinedTask,
    SplitChange,
    judge_outcomes,
    split_change,
    write_mined_task,
)
from tasks.model import Limits, Task
from tasks.patches import git
from tasks.suite import TaskError, TaskFile, export_commit, load_task
from tasks.swebench import ensure_mirror
from tasks.synth import PytestRun, SynthError, visible_test_command

Reason = Literal[
    "no_parent",
    "no_library_change",
    "no_test_change",
    "unreadable",
    "environment",
    "timeout",
    "crashed",
    "fails_at_commit",
    "no_fail_to_pass",
    "build_settings",
    "not_graded",
    "invalid",
]
Reader = EnvironmentReader
"""Reads the environment a repository's tree declares: its build backend's answer in a sandbox
(`envs.build_metadata.environment_reader`, what `harness tasks mine` passes), or the static parse."""


class MineError(TaskError):
    """The repository cannot be mined (not a git repository, an unknown revision)."""


class MineConfig(BaseModel):
    """What `harness tasks mine` scans and how it runs the tests."""

    model_config = ConfigDict(extra="forbid")

    repo: Path
    """A git repository (a work tree or a bare one) with the history to mine."""
    out: Path
    """The suite folder written to (made if missing)."""
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """The repository's name in the suite and the prefix of task ids; None: the folder's name."""
    rev: str = "HEAD"
    """The revision whose first-parent history is scanned, newest first."""
    max_commits: int = Field(default=50, ge=1)
    """Most commits scanned."""
    since: str | None = None
    """Only commits after this date (git's `--since`, e.g. 2024-01-01)."""
    until: str | None = None
    """Only commits before this date (git's `--until`)."""
    backend: BackendName = "auto"
    """The sandbox backend the tests run and the tasks validate on."""
    run_timeout_s: float = Field(default=300.0, gt=0)
    """Time limit of one run of a commit's changed test modules (at the parent or at the commit)."""
    test_timeout_s: float = Field(default=60.0, gt=0)
    """Time limit of one test in those runs."""
    validate_tasks: bool = True
    """Validate each task written (gold 1, empty 0, `scripted:gold` solves it) and remove those that fail."""
    repeats: int = Field(default=1, ge=1)
    """Gradings of the gold and the empty patch in validation."""
    language: str = "python"
    """The repository's language, a row of `envs.languages.LANGUAGES`: `python` (pytest runs the changed
    test modules) or a language whose tests are programs (`rust`, `go`, ...: its plug-in splits the change
    and its grader measures it, `envs/mining_programs.py`)."""

    @field_validator("language")
    @classmethod
    def _known(cls, name: str) -> str:
        return known_language(name)


class Dropped(BaseModel):
    """A commit scanned that gave no task, and why."""

    model_config = ConfigDict(extra="forbid")

    commit: str
    reason: Reason
    detail: str = ""


class Mined(BaseModel):
    """A commit that gave a task."""

    model_config = ConfigDict(extra="forbid")

    id: str
    commit: str
    parent: str
    fail_to_pass: int
    pass_to_pass: int
    environment: str | None
    """The key of the environment its tests ran in (None: the sandbox's own Python)."""
    left_out: int = 0
    """Tests that passed at the parent and the commit but not in the grader's run of the gold patch: left
    out of PASS_TO_PASS."""
    unwatched: list[str] = []
    """PASS_TO_PASS tests left out because nothing but their process watched them
    (`envs.validation.validate_dropping_unwatched`)."""


class MineReport(BaseModel):
    """The outcome of one mining: every commit scanned is kept or dropped with its reason."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    name: str
    suite: str
    backend: str
    scanned: int = 0
    kept: list[Mined] = Field(default_factory=list)
    dropped: list[Dropped] = Field(default_factory=list)
    environments: list[str] = Field(default_factory=list)
    """The distinct environment keys the measured commits ran in."""
    duration_s: float = 0.0

    def by_reason(self) -> dict[str, int]:
        return dict(Counter(d.reason for d in self.dropped).most_common())


class _Drop(Exception):
    """One commit gives no task; raised inside its mining, caught once per commit."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(detail)
        self.reason: Reason = reason
        self.detail = detail


def mine(
    config: MineConfig,
    reader: Reader = static_environment,
    on_commit: Callable[[Mined | Dropped], None] | None = None,
) -> MineReport:
    """Mines the tasks of `config.repo`'s history into `config.out`."""
    started = time.monotonic()
    source = config.repo
    name = config.name or re.sub(r"[^A-Za-z0-9_.-]", "-", source.resolve().name.removesuffix(".git"))
    commits = list_commits(source, config)
    backend = resolve_backend(config.backend)
    sandbox = SandboxConfig.model_validate({"backend": backend})
    report = MineReport(repo=str(source), name=name.lstrip("-._"), suite=str(config.out), backend=backend)
    mirror = config.out / "repos" / report.name
    had_mirror = mirror.exists()
    try:
        ensure_mirror(source, mirror)
        if had_mirror:  # made by an earlier mining: the commits since then are fetched
            git(["-C", str(mirror), "fetch", "--quiet", "--prune", "origin"])
    except (ImportProblem, RuntimeError) as e:
        raise MineError(str(e)) from e
    measure = commit_miner(config, sandbox, reader)
    for commit, parent in commits:
        report.scanned += 1
        result: Mined | Dropped
        try:
            if parent is None:
                raise _Drop("no_parent", "the first commit")
            result = measure(source, commit, parent, report)
            report.kept.append(result)
        except _Drop as drop:
            result = Dropped(commit=commit, reason=drop.reason, detail=drop.detail)
            report.dropped.append(result)
        if on_commit is not None:
            on_commit(result)
    if not report.kept and not had_mirror:  # no task uses it: leave it out of the suite
        shutil.rmtree(mirror, ignore_errors=True)
    report.duration_s = time.monotonic() - started
    return report


CommitMiner = Callable[[Path, str, str, MineReport], Mined]
"""(repository, commit, its parent, the report) -> the task the commit gave; raises _Drop when none."""


def commit_miner(config: MineConfig, sandbox: SandboxConfig, reader: Reader) -> CommitMiner:
    """How a commit of `config.language` is measured: pytest for Python, its grader for a language whose
    tests are programs."""
    language = language_named(config.language)
    if isinstance(language, ProcessLanguage):
        return lambda source, commit, parent, report: mine_program_commit(
            source, commit, parent, config, sandbox, language, report
        )
    if config.language != "python":
        raise MineError(
            f"--language {config.language}: mining knows Python and the languages whose tests are programs"
        )
    return lambda source, commit, parent, report: mine_commit(
        source, commit, parent, config, sandbox, reader, report
    )


def list_commits(source: Path, config: MineConfig) -> list[tuple[str, str | None]]:
    """(commit, first parent or None) of the first-parent history from `config.rev`, newest first."""
    dates = [f"--since={config.since}"] if config.since else []
    dates += [f"--until={config.until}"] if config.until else []
    args = ["-C", str(source), "log", "--first-parent", f"--max-count={config.max_commits}", *dates]
    try:
        out = git([*args, "--format=%H %P", config.rev, "--"]).decode()
    except RuntimeError as e:
        raise MineError(f"--repo {source} at {config.rev}: {e}") from e
    found = []
    for line in out.splitlines():
        ids = line.split()
        found.append((ids[0], ids[1] if len(ids) > 1 else None))
    return found


def commit_change(source: Path, commit: str, parent: str, rules: ChangeRules = PYTHON_RULES) -> SplitChange:
    """The commit's change against its first parent, split by `rules`; raises _Drop when it cannot make a
    task."""
    raw = git(
        ["-C", str(source), "diff", "--binary", "--no-color", "--no-renames", "--full-index", parent, commit]
    )
    try:
        change = split_change(raw.decode("utf-8"), rules)
    except UnicodeDecodeError as e:
        raise _Drop("unreadable", f"the change is not UTF-8 text ({e.reason})") from e
    if not change.changes_code:
        paths = [path for part in change.library for path in part.paths]
        detail = f"no library module among {', '.join(sorted(set(paths))[:3])}" if paths else "only tests"
        raise _Drop("no_library_change", detail)
    if not change.targets:
        raise _Drop(
            "no_test_change", "changes no test module" if rules is PYTHON_RULES else "changes no test file"
        )
    return change


def mine_commit(
    source: Path,
    commit: str,
    parent: str,
    config: MineConfig,
    sandbox: SandboxConfig,
    reader: Reader,
    report: MineReport,
) -> Mined:
    """Measures one commit and writes (and validates) its task; raises _Drop when it gives none."""
    change = commit_change(source, commit, parent)
    with tempfile.TemporaryDirectory(prefix="harness-mine-") as tmp:
        before, after = Path(tmp) / "before", Path(tmp) / "after"
        export_commit(source, commit, after)
        export_commit(source, parent, before)
        hidden = apply_test_part(change, before, after)
        environment = read_environment(reader, after)
        key = env_key(environment, sandbox.image) if environment is not None else None
        if key is not None and key not in report.environments:
            report.environments.append(key)
        at_parent = run_tests(before, change.targets, config, sandbox, environment)
        at_commit = run_tests(after, change.targets, config, sandbox, environment)
    judged = judge_outcomes(at_parent.outcomes, at_commit.outcomes)
    drop_unless_fixed(judged, at_commit.collect_errors)
    message = git(["-C", str(source), "log", "-1", "--format=%B", commit]).decode(errors="replace")
    mined = MinedTask(
        name=report.name,
        parent=parent,
        commit=commit,
        message=message,
        change=change,
        hidden=hidden,
        judged=judged,
        failures=failure_messages(at_parent, judged.fail_to_pass),
        test_command=visible_test_command(change.targets),
        environment=environment,
    )
    folder = write_mined_task(config.out, mined)
    left_out, unwatched = check_task(folder, config, sandbox) if config.validate_tasks else (0, [])
    return Mined(
        id=folder.name,
        commit=commit,
        parent=parent,
        fail_to_pass=len(judged.fail_to_pass),
        pass_to_pass=len(judged.pass_to_pass) - left_out - len(unwatched),
        environment=key,
        left_out=left_out,
        unwatched=unwatched,
    )


def drop_unless_fixed(judged: Judged, errors_at_commit: dict[str, str]) -> None:
    """Raises _Drop when no changed test passes at the commit, or none of those that do failed before."""
    if not judged.fail_to_pass and not judged.pass_to_pass:
        errors = [f"{path}: {error}" for path, error in errors_at_commit.items()]
        detail = f"not collected: {errors[0]}" if errors else f"{len(judged.failing_after)} fail"
        raise _Drop("fails_at_commit", f"no changed test passes at the commit ({detail})"[:300])
    if not judged.fail_to_pass:
        detail = f"{len(judged.pass_to_pass)} changed tests pass at the parent too"
        raise _Drop("no_fail_to_pass", f"{detail}; {len(judged.failing_after)} fail at the commit")


def mine_program_commit(
    source: Path,
    commit: str,
    parent: str,
    config: MineConfig,
    sandbox: SandboxConfig,
    language: ProcessLanguage,
    report: MineReport,
) -> Mined:
    """Measures one commit of a language whose tests are programs by its own grader (the empty patch and
    the library part on the parent, `envs/mining_programs.py`), and writes (and validates) its task; raises
    _Drop when it gives none."""
    change = commit_change(source, commit, parent, program_rules(language))
    hidden = {
        path: test_text(path, git(["-C", str(source), "show", f"{commit}:{path}"]))
        for path in change.test_files
    }
    ids = hidden_ids(language, change, hidden)
    if not ids:
        raise _Drop("no_test_change", f"no test in {', '.join(change.targets)}"[:300])
    with tempfile.TemporaryDirectory(prefix="harness-mine-") as tmp:
        export_commit(source, parent, Path(tmp) / "base")
        task = provisional_task(language, Path(tmp) / "base", change, hidden, ids)
        try:
            test_command = repository_test_command(language, task)
        except ValueError as e:  # a package.json that names several runners and runs none of them
            raise _Drop("environment", str(e)[:300]) from e
        at_parent, at_commit = (graded(task, patch, config, sandbox) for patch in ("", change.gold_patch))
    judged = judge_outcomes(outcomes_of(at_parent), outcomes_of(at_commit))
    builds = "(build)" not in at_parent.collect_errors  # a parent that does not build says nothing of them
    if not judged.fail_to_pass and change.settings and builds:
        settings = ", ".join(change.setting_paths)
        raise _Drop(
            "build_settings",
            f"no changed test passes without its change of {settings}, which grading drops"[:300],
        )
    drop_unless_fixed(judged, at_commit.collect_errors)
    message = git(["-C", str(source), "log", "-1", "--format=%B", commit]).decode(errors="replace")
    mined = MinedTask(
        name=report.name,
        parent=parent,
        commit=commit,
        message=message,
        change=change,
        hidden=hidden,
        judged=judged,
        failures=failures_of(language, at_parent, judged.fail_to_pass),
        test_command=test_command,
        environment=None,
        language=language.name,
        limits=sized_limits(at_commit.duration_s),
    )
    folder = write_mined_task(config.out, mined)
    unwatched = (
        check_task(folder, config, sandbox, measured_by_grader=True)[1] if config.validate_tasks else []
    )
    return Mined(
        id=folder.name,
        commit=commit,
        parent=parent,
        fail_to_pass=len(judged.fail_to_pass),
        pass_to_pass=len(judged.pass_to_pass) - len(unwatched),
        environment=None,
        unwatched=unwatched,
    )


GRADE_COPIES = 1 + KEPT + HELD_CANARIES
"""Copies of a hidden file one grade runs at most: the real one, its text canaries, its held canaries."""
LOAD_MARGIN = 3.0
"""How many times slower than when it was mined a task's grade may run (a loaded host) before it is cut
off: a limit only catches a hang (as tests/conftest.py's `TIMEOUT_SCALE`)."""


def sized_limits(measured_s: float) -> Limits:
    """A mined task's limits: its grade's time sized to the fix's measuring grade (one copy of each file,
    `measured_s`) as if every copy ran, on a host `LOAD_MARGIN` times slower; never below the default."""
    floor = Limits().grade_timeout_s
    return Limits(grade_timeout_s=max(floor, float(round(measured_s * GRADE_COPIES * LOAD_MARGIN, -1))))


def graded(task: Task, patch: str, config: MineConfig, sandbox: SandboxConfig) -> Grade:
    """A measuring grade of `patch` (`envs.mining_programs.measured`); _Drop when grading could not run."""
    grade = measured(task, patch, sandbox, config.run_timeout_s, config.test_timeout_s)
    if grade.infra_error or grade.apply_error:
        which = "the fix" if patch else "the parent"
        raise _Drop("not_graded", f"{which}: {grade.infra_error or grade.apply_error}"[:300])
    return grade


def test_text(path: str, data: bytes) -> str:
    """A test file's text: hidden tests are text."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _Drop("unreadable", f"{path} is not UTF-8 text: hidden tests must be text") from e


def apply_test_part(change: SplitChange, before: Path, after: Path) -> dict[str, str]:
    """Writes the commit's test files over the parent's tree (and deletes those it deleted); returns the
    hidden tests: path -> text."""
    hidden: dict[str, str] = {}
    for path in change.test_files:
        data = (after / path).read_bytes()
        hidden[path] = test_text(path, data)
        (before / path).parent.mkdir(parents=True, exist_ok=True)
        (before / path).write_bytes(data)
    for path in change.deleted_tests:
        (before / path).unlink(missing_ok=True)
    return hidden


def read_environment(reader: Reader, tree: Path) -> Environment | None:
    """What the commit's tree declares, None where it needs nothing of its own."""
    try:
        environment = reader(tree).environment
    except ValueError as e:  # a pyproject.toml that is not TOML
        raise _Drop("environment", f"the declarations: {e}") from e
    return environment if environment.needed() else None


def run_tests(
    tree: Path,
    targets: list[str],
    config: MineConfig,
    sandbox: SandboxConfig,
    environment: Environment | None,
) -> PytestRun:
    """The outcomes of `targets` in a sandbox of `tree`, in `environment` (built here, or reused)."""
    try:
        start, key = sandbox_starter(tree, sandbox, environment)
        runner = SandboxPytest(start, key, base_modules(tree))
    except EnvBuildError as e:
        raise _Drop("environment", str(e).splitlines()[0][:300]) from e
    try:
        run = runner.run_tests(targets, [], config.run_timeout_s, config.test_timeout_s)
    except SynthError as e:  # pytest itself does not start
        raise _Drop("crashed", str(e)[:300]) from e
    finally:
        runner.close()
    if run.timed_out:
        raise _Drop("timeout", f"the run at {tree.name} took over {config.run_timeout_s:.0f} s")
    if run.crashed:
        raise _Drop("crashed", f"the run at {tree.name} ended without a report")
    return run


def failure_messages(run: PytestRun, tests: list[str]) -> dict[str, str]:
    """Test id -> how it failed in `run`: its exception, or its file's collection error."""
    found = {}
    for test in tests:
        message = run.messages.get(test)
        if message is None:
            message = run.collect_errors.get(test.split("::", 1)[0], "")
        found[test] = message
    return found


def check_task(
    folder: Path, config: MineConfig, sandbox: SandboxConfig, measured_by_grader: bool = False
) -> tuple[int, list[str]]:
    """Validates the task in `folder` as `harness tasks validate --drop-unwatched` does; removes it and
    drops the commit when it is invalid. Returns how many PASS_TO_PASS tests the grader's own run of the
    gold patch left out (none where the grader measured them: `measured_by_grader`), and those left out
    because nothing but their process watched them."""
    try:
        left_out = 0 if measured_by_grader else grader_pass_to_pass(folder, config, sandbox)
        task = load_task(folder, config.out)
        result = validate_dropping_unwatched(task, sandbox, config.repeats, episode=True)
        problems, dropped = result.problems, result.dropped
    except TaskError as e:
        left_out, problems, dropped = 0, [str(e)], []
    if problems:
        shutil.rmtree(folder, ignore_errors=True)
        raise _Drop("invalid", "; ".join(problems)[:500])
    return left_out, dropped


def grader_pass_to_pass(folder: Path, config: MineConfig, sandbox: SandboxConfig) -> int:
    """Grades the gold patch once, as the grader runs it (a child per file, expectations held outside),
    and leaves out of PASS_TO_PASS the tests that do not pass there, though pytest passed them at the
    parent and at the commit; returns how many. FAIL_TO_PASS is the validation's to judge."""
    task = load_task(folder, config.out)
    grade = grade_patch(task, task.gold_patch or "", sandbox)
    if grade.infra_error:
        raise TaskError(f"gold: infra error: {grade.infra_error}")
    failing = {test for test, outcome in grade.pass_to_pass.items() if outcome != "passed"}
    if failing:
        path = folder / "task.yaml"
        spec = TaskFile.model_validate(yaml.safe_load(path.read_text()))
        kept = [test for test in spec.pass_to_pass if test not in failing]
        path.write_text(task_yaml(spec.model_copy(update={"pass_to_pass": kept})))
    return len(failing)
