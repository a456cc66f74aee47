"""`harness tasks synth` for the languages whose tests are programs (`envs/process_grading.py`) and whose
source synthesis can mutate (`tasks.synth_programs.MUTATORS`: JavaScript and TypeScript), measured by the
grader itself, as `envs/mining_programs.py` measures a commit.

1. The repository is copied to SUITE/repos/NAME without its test files (the plug-in's `is_test_file`):
   they are every task's hidden files, whole. The ids are `FILE::NAME` of each test its `tests_in` finds in
   the test files it can run under its own names (`run_path`).
2. A provisional task (that base, every id FAIL_TO_PASS, no canaries) is graded twice with the empty patch:
   the tests that pass both times are the suite.
3. Every mutation of the source files (not tests, not docs/ or examples/) is a candidate; distinct results
   only, shuffled with the seed, round-robin over the operators.
4. A candidate's patch is graded on the suite: kept when some tests fail; graded again with only those (each
   test runs alone in its own process in every grade), the ones that fail again are FAIL_TO_PASS, the tests
   that passed with the mutation PASS_TO_PASS. The failing tests then run once more with the plug-in's own
   commands in a sandbox of the mutated tree, for their messages (the problem statement's, and a load error
   such as a syntax error drops the candidate). A second candidate in the same function that fails the same
   tests is a duplicate.
5. Each task is written (base: the copy with the `bug` edit; gold: its inverse) and validated as `harness
   tasks validate` does (gold 1, empty 0, canaries made); an invalid one is removed again. A test nothing
   but its process would decide is left out: up front where its assertions hold no literal and no equality
   (`watchable`), and from PASS_TO_PASS where validation finds no canary of its literals fails on the gold
   patch (then validated again).
"""

from __future__ import annotations

import importlib
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from envs.factory import start_sandbox
from envs.grading import grade_patch
from envs.languages import language_named
from envs.mining_programs import outcomes_of
from envs.process_grading import LITERAL, ProcessLanguage
from envs.sandbox import SandboxConfig, SandboxError
from envs.validation import validate_dropping_unwatched
from tasks.mining import NO_CODE_DIRS
from tasks.model import HiddenTests, Limits, Task
from tasks.mutations_js import OPERATORS, JsMutation
from tasks.patches import diff_trees
from tasks.suite import TaskFile, load_task
from tasks.synth import SKIPPED_DIRS, SynthConfig, SynthError, copy_repository, round_robin
from tasks.synth_programs import (
    BROKE_BUILD,
    MUTATORS,
    ProgramReport,
    ProgramTask,
    ProgramTrial,
    ProgramVerdict,
    bug_edit,
    called_functions,
    next_task_id,
    problem_statement,
    secrets_of,
    write_program_task,
)

TEST_TIMEOUT_S = 20.0
"""One test's time limit in a measuring grade: a mutation that loops forever fails its tests after it."""
MESSAGE_TESTS = 5
"""Failing tests of a candidate run again for their messages."""


def program_language(name: str) -> ProcessLanguage:
    """The plug-in of `name`, if synthesis can mutate its source; SynthError naming the ones it can."""
    language = language_named(name) if name in MUTATORS else None
    if not isinstance(language, ProcessLanguage):
        can = ", ".join(["python", *MUTATORS])
        raise SynthError(
            f"--language {name}: synthesis has no mutation operators for {name} yet (it has: {can})"
        )
    return language


def find_mutations(language: ProcessLanguage, path: str, text: str) -> list[JsMutation]:
    found: list[JsMutation] = importlib.import_module(MUTATORS[language.name]).find_mutations(path, text)
    return found


def _files(repo: Path) -> list[str]:
    return sorted(
        p.relative_to(repo).as_posix()
        for p in repo.rglob("*")
        if p.is_file() and not any(part in SKIPPED_DIRS for part in p.relative_to(repo).parts)
    )


def take_tests(repo: Path, language: ProcessLanguage) -> dict[str, str]:
    """The repository's test files (path -> text), removed from its copy `repo`: the hidden files."""
    hidden = {}
    for path in _files(repo):
        if language.is_test_file(path):
            try:
                hidden[path] = (repo / path).read_text(encoding="utf-8")
            except UnicodeDecodeError as e:
                raise SynthError(f"{path}: not UTF-8 text: hidden test files must be") from e
            (repo / path).unlink()
    for folder in sorted(
        (p for p in repo.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
    ):
        if not any(folder.iterdir()):  # a test folder left empty
            folder.rmdir()
    return hidden


def hidden_ids(language: ProcessLanguage, hidden: dict[str, str]) -> list[str]:
    """`FILE::NAME` of every test in the test files the grader can run under names of their own."""
    ids = []
    for path, text in hidden.items():
        if not path.endswith(language.suffixes):
            continue
        try:
            language.run_path(path, "0" * 12)
        except ValueError:
            continue
        ids += [
            f"{path}::{name}"
            for name in dict.fromkeys(language.tests_in(text))
            if watchable(language, text, name)
        ]
    return ids


def watchable(language: ProcessLanguage, source: str, test: str) -> bool:
    """Whether grading can watch `test` beyond its process's exit status: an equality whose expected side
    it may hold, or a literal in an assertion that a text canary may change (`text_canaries`). One with
    neither (`assert.throws(() => f(), RangeError)` alone) would make `tasks validate` refuse the task."""
    if language.equalities(source, test):
        return True
    return any(LITERAL.search(source, start, end) for start, end, _ in language.assertions_in(source, test))


def source_files(repo: Path, language: ProcessLanguage) -> list[str]:
    """The files tasks may break: the language's source outside docs/, examples/ and the like."""
    return [
        p
        for p in _files(repo)
        if p.endswith(language.suffixes)
        and not p.endswith((".d.ts", ".min.js"))
        and not any(part in NO_CODE_DIRS for part in PurePosixPath(p).parts[:-1])
        and language.own_rule(p, None) is None
    ]


def candidates(repo: Path, language: ProcessLanguage, seed: int) -> list[JsMutation]:
    """The distinct mutations of the source files, shuffled with `seed`, round-robin over operators."""
    by_operator: dict[str, list[JsMutation]] = {op: [] for op in OPERATORS}
    seen: set[tuple[str, str]] = set()
    for path in source_files(repo, language):
        try:
            text = (repo / path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for mutation in find_mutations(language, path, text):
            result = (path, mutation.apply(text))
            if result not in seen:
                seen.add(result)
                by_operator[mutation.operator].append(mutation)
    return round_robin(by_operator, OPERATORS, seed)


class Measure:
    """The grader's verdicts on patches of the repository's copy: a provisional task per set of ids."""

    def __init__(
        self,
        language: ProcessLanguage,
        repo: Path,
        hidden: dict[str, str],
        sandbox: SandboxConfig,
        timeout_s: float,
    ) -> None:
        self.language, self.repo, self.hidden, self.sandbox = language, repo, hidden, sandbox
        self.limits = Limits(grade_timeout_s=timeout_s, test_file_timeout_s=TEST_TIMEOUT_S)

    def task(self, ids: list[str]) -> Task:
        return Task(
            id="synthesis-provisional",
            title="measuring a mutation",
            repo=self.repo,
            problem_statement="",
            language=self.language.name,
            test_command=self.language.test_command,
            hidden_tests=HiddenTests(files=self.hidden, fail_to_pass=ids),
            limits=self.limits,
        )

    def outcomes(self, ids: list[str], patch: str) -> dict[str, str] | None:
        """Each id's outcome with `patch`; None where the patch did not apply."""
        grade = grade_patch(self.task(ids), patch, self.sandbox)
        if grade.infra_error:
            raise SandboxError(f"grading a {'mutation' if patch else 'baseline'}: {grade.infra_error}")
        return None if grade.apply_error else outcomes_of(grade)

    def passing(self, ids: list[str]) -> list[str]:
        """The tests that pass twice on the copy as it is."""
        runs = [self.outcomes(ids, "") or {} for _ in range(2)]
        return [t for t in ids if all(run.get(t) == "passed" for run in runs)]


def one_file_patch(path: str, old: str, new: str) -> str:
    """A git-format patch that changes `path` from `old` to `new`."""
    with tempfile.TemporaryDirectory(prefix="harness-synth-") as tmp:
        for side, text in (("a", old), ("b", new)):
            (Path(tmp) / side / path).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / side / path).write_text(text)
        return diff_trees(Path(tmp) / "a", Path(tmp) / "b")


def failure_messages(
    language: ProcessLanguage, tree: Path, tests: list[str], sandbox_config: SandboxConfig
) -> dict[str, str]:
    """Test id -> its failure's message, each test run alone with the plug-in's own commands in a sandbox
    of `tree` (the mutated copy with the test files at their paths): for the problem statement only,
    never for an outcome."""
    commands = language.commands
    found = {}
    sandbox = start_sandbox(sandbox_config, tree)
    try:
        for test in tests[:MESSAGE_TESTS]:
            path, _, name = test.partition("::")
            run = PurePosixPath(path)
            values = {"{dir}": run.parent.as_posix(), "{stem}": run.stem, "{test}": name}

            def fill(arg: str, values: dict[str, str] = values) -> str:
                return re.sub(r"\{(dir|stem|test)\}", lambda m: values[m.group()], arg)

            output = ""
            for argv in ([commands.build] if commands.build else []) + [commands.test]:
                result = sandbox.run([fill(a) for a in argv], timeout=TEST_TIMEOUT_S, env=commands.env)
                output += result.output
            found[test] = tap_failure(output)
    finally:
        sandbox.close()
    return found


def tap_failure(output: str) -> str:
    """The message of the first failure a TAP report shows (`error:`, after its `name:` when that is not
    an AssertionError), else the output's last lines."""
    block = re.search(r"(?m)^\s*not ok \d+ .*\n((?:\s+.*\n?)*)", output)
    if block is None:
        return "\n".join(output.strip().splitlines()[-5:])
    yaml_lines = block.group(1).splitlines()
    message, kind = "", ""
    for i, line in enumerate(yaml_lines):
        stripped = line.strip()
        if stripped.startswith("error: |"):
            indent = len(line) - len(line.lstrip()) + 1
            message = "\n".join(_until_dedent(yaml_lines[i + 1 :], indent)).strip()
        elif stripped.startswith("error: ") and not message:
            message = stripped[len("error: ") :].strip("'\"")
        elif stripped.startswith("name: ") and not kind:
            kind = stripped[len("name: ") :].strip("'\"")
    if kind and kind != "AssertionError":
        message = f"{kind}: {message}"
    return message or "\n".join(output.strip().splitlines()[-5:])


def _until_dedent(lines: list[str], indent: int) -> list[str]:
    """The lines of a YAML block scalar indented deeper than `indent` - 1, dedented."""
    kept = []
    for line in lines:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        kept.append(line[indent + 1 :] if line.strip() else "")
    return kept


class ProgramSearch:
    """Candidates tried in order, each measured by the grader, until the tasks wanted are written."""

    def __init__(
        self, config: SynthConfig, language: ProcessLanguage, repo: Path, name: str, measure: Measure
    ) -> None:
        self.config, self.language, self.repo, self.name, self.measure = config, language, repo, name, measure
        self.per_function: dict[tuple[str, str], int] = {}
        self.seen: set[tuple[str, ...]] = set()

    def trial(self, mutation: JsMutation, passing: list[str]) -> tuple[ProgramTrial, Path | None]:
        """Tries one mutation; the task folder it made, if any (not yet validated)."""
        started = time.monotonic()
        text = (self.repo / mutation.path).read_text(encoding="utf-8")
        patch = one_file_patch(mutation.path, text, mutation.apply(text))
        verdict, failing, folder = self._verdict(mutation, text, patch, passing)
        trial = ProgramTrial(
            operator=mutation.operator,
            path=mutation.path,
            function=mutation.function,
            line=mutation.line,
            verdict=verdict,
            failing=failing,
            duration_s=time.monotonic() - started,
        )
        return trial, folder

    def _verdict(
        self, mutation: JsMutation, text: str, patch: str, passing: list[str]
    ) -> tuple[ProgramVerdict, int, Path | None]:
        outcomes = self.measure.outcomes(passing, patch)
        if outcomes is None:
            return "not_graded", 0, None
        failing = [t for t in passing if outcomes.get(t) != "passed"]
        if not failing:
            return "survived", 0, None
        key = (mutation.path, mutation.function, *failing)
        if key in self.seen:
            return "duplicate", len(failing), None
        self.seen.add(key)
        again = self.measure.outcomes(failing, patch) or {}
        still = [t for t in failing if again.get(t) != "passed"]
        if not still:
            return "unconfirmed", len(failing), None
        messages = self._messages(mutation, text, still)
        if any(BROKE_BUILD.search(m) for m in messages.values()):
            return "broke_build", len(failing), None
        kept_p2p = [t for t in passing if outcomes.get(t) == "passed"]
        return "kept", len(failing), self._write(mutation, text, still, kept_p2p, messages)

    def _messages(self, mutation: JsMutation, text: str, tests: list[str]) -> dict[str, str]:
        with tempfile.TemporaryDirectory(prefix="harness-synth-") as tmp:
            tree = Path(tmp) / "repo"
            shutil.copytree(self.repo, tree)
            for path, source in self.measure.hidden.items():
                (tree / path).parent.mkdir(parents=True, exist_ok=True)
                (tree / path).write_text(source)
            (tree / mutation.path).write_text(mutation.apply(text))
            return failure_messages(self.language, tree, tests, self.measure.sandbox)

    def _write(
        self, mutation: JsMutation, text: str, f2p: list[str], p2p: list[str], messages: dict[str, str]
    ) -> Path:
        edit = bug_edit(mutation.path, text, mutation)
        hidden = self.measure.hidden
        spans: dict[str, list[tuple[int, int]]] = {}
        for test in f2p:
            path, _, name = test.partition("::")
            spans.setdefault(path, []).extend(
                (s, e) for s, e, _ in self.language.assertions_in(hidden[path], name)
            )
        functions = called_functions(hidden, spans)
        tests = {t.partition("::")[2].split(" > ")[-1] for t in [*f2p, *p2p]}
        statement = problem_statement(functions, [messages.get(t, "") for t in f2p], secrets_of(edit), tests)
        spec = TaskFile(
            title=statement.splitlines()[0].rstrip("."),
            repo=self.name,
            bug=[edit],
            problem_statement=statement,
            language=self.language.name,
            test_command=self.language.test_command,
            fail_to_pass=f2p,
            pass_to_pass=p2p,
        )
        task_id = next_task_id(self.config.out, self.name)
        made = ProgramTask(
            id=task_id,
            operator=mutation.operator,
            path=mutation.path,
            function=mutation.function,
            line=mutation.line,
            fail_to_pass=len(f2p),
            pass_to_pass=len(p2p),
        )
        self.per_function[(mutation.path, mutation.function)] = (
            self.per_function.get((mutation.path, mutation.function), 0) + 1
        )
        return write_program_task(self.config.out, task_id, spec, hidden, made)

    def at_limit(self, mutation: JsMutation) -> bool:
        return self.per_function.get((mutation.path, mutation.function), 0) >= self.config.per_function


def synthesize_programs(
    config: SynthConfig,
    sandbox: SandboxConfig,
    language_name: str,
    validate: bool = True,
    on_trial: Callable[[ProgramTrial], None] | None = None,
) -> ProgramReport:
    """Synthesizes up to `config.n` tasks from `config.repo` into `config.out` (module docstring)."""
    started = time.monotonic()
    language = program_language(language_name)
    name, repo = copy_repository(config)
    report = None
    try:
        report = _synthesize(config, sandbox, language, name, repo, validate, on_trial)
    finally:
        if report is None or not report.tasks:  # no task uses it: leave it out of the suite
            shutil.rmtree(repo, ignore_errors=True)
    report.duration_s = time.monotonic() - started
    return report


def _synthesize(
    config: SynthConfig,
    sandbox: SandboxConfig,
    language: ProcessLanguage,
    name: str,
    repo: Path,
    validate: bool,
    on_trial: Callable[[ProgramTrial], None] | None,
) -> ProgramReport:
    hidden = take_tests(repo, language)
    ids = hidden_ids(language, hidden)
    if not ids:
        raise SynthError(f"{config.repo}: no {language.name} tests found in its test files ({len(hidden)})")
    t0 = time.monotonic()
    measure = Measure(language, repo, hidden, sandbox, config.baseline_timeout_s or 600.0)
    passing = measure.passing(ids)
    if not passing:
        raise SynthError(f"{config.repo}: none of its {len(ids)} tests passes twice on the unchanged code")
    order = candidates(repo, language, config.seed)
    report = ProgramReport(
        repo=str(config.repo), name=name, suite=str(config.out), language=language.name,
        test_files=len({i.partition("::")[0] for i in ids}), passing_tests=len(passing),
        candidates=len(order), baseline_s=time.monotonic() - t0,
    )  # fmt: skip
    search = ProgramSearch(config, language, repo, name, measure)
    budget = config.max_tries or 25 * config.n
    for mutation in order:
        if len(report.tasks) >= config.n or report.tried >= budget:
            break
        if search.at_limit(mutation):
            continue
        trial, folder = search.trial(mutation, passing)
        report.trials.append(trial)
        if on_trial is not None:
            on_trial(trial)
        if folder is None:
            continue
        made = ProgramTask.model_validate_json((folder / "synth.json").read_text())
        if validate:
            result = validate_dropping_unwatched(load_task(folder, config.out), sandbox, 1, episode=False)
            if result.problems:
                where = f"{trial.operator} at {trial.path}:{trial.line}"
                report.rejected[f"{folder.name} ({where})"] = result.problems
                shutil.rmtree(folder)
                continue
            made.canaries = result.canaries + result.held_canaries
            made.pass_to_pass = len(load_task(folder, config.out).hidden_tests.pass_to_pass)
        report.tasks.append(made)
    return report
