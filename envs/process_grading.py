"""Grading for languages whose tests are programs: each hidden test in a process of its own, decided by its
exit status (`envs/process_runner.py`), with text canaries beside the real copies.

`ProcessLanguage` is the family's plug-in (`envs/languages/`): one instance per language holds its commands
(build the repository, build one test file, run one test alone), how its test files are found and renamed,
its judge's rules, and where a failure says it happened. What it runs:

1. Every test file a task's id names, a visible one too (its text as the task stores it, never the agent's),
   runs rewritten under a fresh random name of the language's form (`run_path`), and so does each canary
   (`tasks/canaries.Canary`: the file with one literal of one assertion changed, or that assertion's
   condition negated: `text_canaries`); hidden files no id names are written at their own paths.
2. The runner builds the repository before any hidden file is on disk, then writes one copy at a time,
   builds it, runs each test alone, and puts the writable folders back: a test's process sees only its own
   copy, and a real copy and its canary differ in one literal or one condition. Go and Rust run the
   compiled copy with its text removed (`Commands.gone_once_built`).
3. Outcomes are mapped back to the task's ids here. A canary must fail where its changed assertion is
   (the failure's line in its own file); one that passes beside a real test that passed is tampering, and
   every test counts as failed.

The code under test runs in the process whose exit status decides, and reads the file of its own test:
it can make its own test pass (exit early, print what the runner looks for, answer the literal it reads).
Each of these passes the canaries alike, which a correct fix fails: a grade of this family records
integrity `process` (docs/reliability.md 5k).
"""

from __future__ import annotations

import json
import random
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from envs.languages import HiddenRequest, Integrity
from envs.languages.source_text import mask, skip_c_family
from envs.process_held import (
    HELD_CANARIES,
    Equality,
    Slot,
    class_only,
    held_canaries,
    held_outcome,
    held_verdict,
    holding,
    holds,
    probes_of,
    rewrite,
)
from envs.reward import SourceStyle
from envs.run_plan import source_of
from envs.sandbox import WORKDIR, SandboxConfig, SandboxError
from tasks.canaries import NEGATED, Canary, perturbed
from tasks.computed import Held, held_map
from tasks.model import Task

if TYPE_CHECKING:
    from envs.hidden_run import HiddenRun
    from envs.judge import Entry

RUNNER = Path(__file__).with_name("process_runner.py")
KIT = Path(__file__).with_name("grade_runner.py")
TRIALS = 24
"""Single-literal canaries tried per task at most (`tasks validate` keeps those the gold patch fails)."""
KEPT = 6
"""Canaries a task keeps at most: spread over its tests, one a test first."""


@dataclass(frozen=True)
class Commands:
    """A language's commands in the grading sandbox. `{grader}` is the grader's folder, `{stem}` a run
    file's name without its suffix, `{dir}` its folder, `{test}` a test's name."""

    prepare: list[str]
    """Builds the repository as it is, before any hidden file is written ([] for none)."""
    build: list[str]
    """Builds one test file (its tests) ([] for none)."""
    test: list[str]
    """Runs one test alone: exit status 0 and `passed` in its output when it passed."""
    passed: str
    """A regular expression the output of a passing run matches: exactly one test ran, and passed."""
    cwd: str = ""
    """Where a test runs, relative to the repository (`{dir}`: the copy's folder); '' the repository."""
    env: dict[str, str] = field(default_factory=dict)
    gone_once_built: bool = False
    """The copy's file and its helper removed once `build` has compiled them, before any of its tests
    runs: the code under test cannot read the text of the copy it runs in (a negated canary's condition
    reads unlike a test's own), only the compiled program."""
    program: str = ""
    """The program `build` makes, with `gone_once_built`: one that holds the copy's text (a `//go:embed`
    or an `include_str!` of test files compiled it in) is tampering, and none of its tests runs."""


@dataclass(frozen=True)
class ProcessLanguage:
    """A language whose tests are programs, run one test a process (see the module docstring)."""

    name: str
    suffixes: tuple[str, ...]
    test_command: str
    commands: Commands
    tests_in: Callable[[str], list[str]]
    """A test file's source -> the names its tests run under."""
    assertions_in: Callable[[str, str], list[tuple[int, int, int]]]
    """(source, test name) -> (start, end, line) of each assertion of that test: the span of its text in
    `source`, and the 1-based line a failure of it is reported at."""
    run_path: Callable[[str, str], str]
    """(a hidden test file's path, a fresh hex token) -> the path its copy runs under."""
    is_test_file: Callable[[str], bool]
    """Whether a repository path is one of the language's test files (which the judge drops)."""
    own_rule: Callable[[str, bytes | None], str | None]
    """The language's own judge rule: why a change of `path` is not graded (build scripts, runner
    settings, compiled outputs); None: it is, as far as the language goes."""
    failure_line: Callable[[str, str], list[int]]
    """(a failing test's output, its run path) -> the lines of its own file the failure names."""
    style: SourceStyle
    """How its source shows debug output and commented-out code (the simplicity term)."""
    equalities: Callable[[str, str], list[Equality]]
    """(source, test name) -> the test's equality assertions, whose expected side can be held outside."""
    observe: Callable[[int, str, str | None], str]
    """(slot, actual side's text, expected side's text or None) -> the code that replaces an equality
    assertion: it reports the actual side (and, probing, the expected one) as `harness-observe SLOT VALUE`
    on a line of its own, and, probing, compares the two as the assertion did."""
    decorate: Callable[[str, bool], tuple[str, str]]
    """(a rewritten file's text, probing) -> (the text with what its rewritten assertions call, on its
    first line or after its last: no line moves; the text of a helper file beside it, '' for none)."""
    helper_path: Callable[[str], str]
    """A copy's run path -> where its helper file goes."""
    integrity: Integrity = "process"
    holds_expected: bool = True
    renamed: Callable[[str, str], str] = lambda text, run: text
    """(a copy's text, its run path) -> the text it runs with: Java names its class as its file; as it is
    by default."""
    runner_for: Callable[[Task], ProcessLanguage | None] = lambda task: None
    """A task -> the language as it runs that task's tests, where its repository picks a runner of its own
    (JavaScript's mocha, jest or vitest); None: this one."""
    negated: Callable[[str, int, int], str | None] = lambda source, start, end: None
    """(source, an assertion's span as `assertions_in` gives it) -> `source` with that assertion's condition
    negated, no line added or removed (a negated text canary, `text_canaries`); None where the language
    has no such rewrite or the assertion no condition."""

    def dropped(
        self, path: str, content: bytes | None, tree: dict[str, Entry], base: dict[str, Entry]
    ) -> str | None:
        """The Python judge's rules (the grader's runner is Python), the test files, then the language's own."""
        from envs.languages.python import PYTHON

        if self.is_test_file(path):
            return "a test path or test setting"
        return PYTHON.dropped(path, content, tree, base) or self.own_rule(path, content)

    def run_hidden(self, request: HiddenRequest) -> HiddenRun:
        language = self.runner_for(request.task) or self
        plan = plan_process_run(language, request.task, request.canaries, probe=request.probe)
        return run_process_plan(language, plan, request)

    def task_problems(self, task: Task) -> list[str]:
        """A FAIL_TO_PASS test in a file the agent saw (not one of the hidden files): its process decides it,
        and a forger that knows the file's text answers only it, where no canary or held value watches."""
        hidden = task.hidden_tests
        seen = sorted({i for i in hidden.fail_to_pass if i.partition("::")[0] not in hidden.files})
        return (
            [f"FAIL_TO_PASS tests in files the agent sees (make them hidden files): {', '.join(seen)}"]
            if seen
            else []
        )

    def unwatched(self, task: Task, canaries: list[Canary]) -> list[str]:
        """Named tests with an assertion that neither holds a value the grader keeps (not guessable) nor is
        changed by a text canary among `canaries`, or with no assertion: their process alone decides it,
        and code under test that ends the process as passed where only that assertion would fail hides
        what it catches (docs/reliability.md 5k, red team 4)."""
        plan = plan_process_run(self, task, canaries)
        changed = {(c.file, t, line) for c in canaries if c.source for t in c.tests for line in c.lines}
        hidden = task.hidden_tests
        found = []
        for test_id in [*hidden.fail_to_pass, *hidden.pass_to_pass]:
            path, _, test = test_id.partition("::")
            held = plan.held_maps.get(path, {})
            lines = [line for _, _, line in self.assertions_in(source_of(task, path) or "", test)]
            if not lines or any(not holds(held, test, n) and (path, test, n) not in changed for n in lines):
                found.append(test_id)
        return found

    def planned(self, task: Task, canaries: list[Canary]) -> tuple[list[Canary], int, int]:
        hidden = task.hidden_tests
        named = {i.partition("::")[::2] for i in [*hidden.fail_to_pass, *hidden.pass_to_pass]}
        assertions = sum(len(self.assertions_in(source_of(task, p) or "", t)) for p, t in named)
        plan = plan_process_run(self, task, canaries)
        decided = sum(len(e) for r, e in plan.expected.items() if r not in plan.canaries)
        return [*plan.canaries.values()], decided, assertions

    def verify_canaries(self, task: Task, sandbox_config: SandboxConfig) -> tuple[list[Canary], int, str]:
        from envs.validation import _failing_on_gold

        if task.hidden_tests.verifier is not None or not task.gold_patch:
            return [], 0, ""
        trial = text_canaries(self, task, random.SystemRandom())
        failing, undecided = _failing_on_gold(task, trial, sandbox_config)
        return fail_to_pass_first(task, one_an_assertion(failing), KEPT), len(trial), undecided


@dataclass
class ProcessPlan:
    files: dict[str, str] = field(default_factory=dict)
    """Hidden files no id names, written at their own paths before the run."""
    targets: list[dict[str, object]] = field(default_factory=list)
    """The runner's targets: each copy's run path, its text and its tests."""
    ids: dict[str, str] = field(default_factory=dict)
    """The task's id -> its run id (`RUN_PATH::test`)."""
    canaries: dict[str, Canary] = field(default_factory=dict)
    """Each canary's run path -> the canary."""
    real_path: dict[str, str] = field(default_factory=dict)
    """Each canary's run path -> the run path of its real copy."""
    slots: dict[str, dict[int, Slot]] = field(default_factory=dict)
    """Each copy's run path -> its rewritten assertions (`envs/process_held.py`)."""
    expected: dict[str, dict[int, str]] = field(default_factory=dict)
    """Each copy's run path -> the values its held assertions are compared with (a held canary's: one
    changed)."""
    origin: dict[str, str] = field(default_factory=dict)
    """Each copy's run path -> the hidden file it copies."""
    helpers: dict[str, str] = field(default_factory=dict)
    """Each real copy's run path -> the text of its helper file ('' for none)."""
    held_maps: dict[str, Held] = field(default_factory=dict)
    """Each named hidden file -> its stored expected values (what its canaries are rewritten with)."""
    probe: bool = False


def plan_process_run(
    language: ProcessLanguage, task: Task, canaries: list[Canary], probe: bool = False
) -> ProcessPlan:
    """The copies, canaries and ids of one run of `task`'s hidden tests (module docstring, 1): each named
    file, a visible one too (its text as the task stores it), rewritten where it has held values (or,
    probing, every equality), so that no test's process can tell a copy by having nothing to report; its
    stored text canaries, and held canaries where it has held values."""
    hidden = task.hidden_tests
    ids = [*hidden.fail_to_pass, *hidden.pass_to_pass]
    plan = ProcessPlan(
        files={p: s for p, s in hidden.files.items() if p not in {i.partition("::")[0] for i in ids}}
    )
    plan.probe = probe
    taken: set[str] = set(hidden.files)
    runs: dict[str, str] = {}
    for path in dict.fromkeys(i.partition("::")[0] for i in ids):
        tests = sorted({i.partition("::")[2] for i in ids if i.partition("::")[0] == path})
        source = source_of(task, path) or ""  # a visible file as the task stores it, not the agent's
        held = holding(held_map(hidden.computed, path, source), [c for c in canaries if c.file == path])
        held = class_only(
            held, {i.partition("::")[2] for i in hidden.fail_to_pass if i.startswith(f"{path}::")}
        )
        plan.held_maps[path] = held
        written = rewrite(language, source, tests, held, probe)
        runs[path] = _copy(plan, language, path, written.source, tests, taken, written.helper)
        plan.helpers[runs[path]] = written.helper
        plan.slots[runs[path]] = written.slots
        plan.expected[runs[path]] = {
            s: v.expected for s, v in written.slots.items() if v.expected is not None
        }
    for test_id in ids:
        path, _, test = test_id.partition("::")
        plan.ids[test_id] = f"{runs[path]}::{test}"
    if not probe:
        _add_canaries(plan, language, canaries, runs, taken)
    return plan


def _add_canaries(
    plan: ProcessPlan,
    language: ProcessLanguage,
    canaries: list[Canary],
    runs: dict[str, str],
    taken: set[str],
) -> None:
    """Stored text canaries (in a file with held values, rewritten as the real copy is: they change an
    assertion that stays in the file), then held canaries."""
    rng = random.SystemRandom()
    for canary in canaries:
        if canary.file not in runs:
            continue
        real = runs[canary.file]
        tests = _tests_of(plan, real)
        written = rewrite(language, canary.source, tests, plan.held_maps.get(canary.file, {}), False)
        run = _copy(plan, language, canary.file, written.source, tests, taken, written.helper)
        plan.canaries[run], plan.real_path[run] = canary, real
        plan.slots[run] = written.slots
        plan.expected[run] = {s: v.expected for s, v in written.slots.items() if v.expected is not None}
    budget = HELD_CANARIES
    held_files = [p for p, run in runs.items() if plan.expected[run]]
    for path in rng.sample(held_files, len(held_files)):
        real = runs[path]
        for canary, expected in held_canaries(path, plan.slots[real], rng, budget):
            text = next(str(t["content"]) for t in plan.targets if t["path"] == real)
            run = _copy(plan, language, path, text, _tests_of(plan, real), taken, plan.helpers[real])
            plan.canaries[run], plan.real_path[run] = canary, real
            plan.slots[run], plan.expected[run] = plan.slots[real], expected
            budget -= 1


def _tests_of(plan: ProcessPlan, run: str) -> list[str]:
    target = next(t for t in plan.targets if t["path"] == run)
    return [str(t["name"]) for t in target["tests"]]  # type: ignore[attr-defined]


def _copy(
    plan: ProcessPlan,
    language: ProcessLanguage,
    path: str,
    text: str,
    tests: list[str],
    taken: set[str],
    helper: str = "",
) -> str:
    """Adds a copy of `path` with `text` (and its helper file), running `tests`, under a fresh name, with
    `path` itself removed while it runs (a test file of the base that the hidden one replaces); returns
    the copy's name."""
    run = _fresh(language, path, taken)
    target = _target(language, run, language.renamed(text, run), tests)
    target["remove"] = [path]
    target["extra"] = {language.helper_path(run): helper} if helper else {}
    plan.targets.append(target)
    plan.origin[run] = path
    return run


def _fresh(language: ProcessLanguage, path: str, taken: set[str]) -> str:
    while True:
        name = language.run_path(path, secrets.token_hex(6))
        if name not in taken:
            taken.add(name)
            return name


def _target(language: ProcessLanguage, run: str, source: str, tests: list[str]) -> dict[str, object]:
    stem, folder = PurePosixPath(run).stem, PurePosixPath(run).parent.as_posix()
    values = {"stem": stem, "dir": folder}
    return {
        "path": run,
        "content": source,
        "build": [_fill(a, **values) for a in language.commands.build],
        "gone_once_built": language.commands.gone_once_built,
        "program": _fill(language.commands.program, **values),
        "tests": [
            {
                "name": t,
                "argv": [_fill(a, **values, test=t) for a in language.commands.test],
                "cwd": _fill(language.commands.cwd, **values),
            }
            for t in tests
        ],
    }


def _fill(arg: str, **values: str) -> str:
    for key, value in values.items():
        arg = arg.replace("{" + key + "}", value)
    return arg


def run_process_plan(language: ProcessLanguage, plan: ProcessPlan, request: HiddenRequest) -> HiddenRun:
    """Runs `plan` with the process runner in the request's sandbox and scores it host-side."""
    from envs.grading import READY, _read_report

    sandbox, grader = request.sandbox, request.grader_dir
    for path, content in plan.files.items():
        sandbox.write_file(path, content.encode())
    sandbox.write_file(f"{grader}/run.py", RUNNER.read_bytes())
    sandbox.write_file(f"{grader}/grader_kit.py", KIT.read_bytes())
    report, held = (
        f"{grader}/report-{secrets.token_hex(8)}.json",
        f"{grader}/plan-{secrets.token_hex(8)}.json",
    )
    commands = language.commands
    runner_plan = {
        "root": WORKDIR,
        "env": {k: _fill(v, grader=grader) for k, v in commands.env.items()},
        "prepare": [_fill(a, grader=grader) for a in commands.prepare],
        "targets": [_with_grader(t, grader) for t in plan.targets],
        "passed": commands.passed,
        "child_timeout_s": min(request.task.limits.test_file_timeout_s, request.timeout),
    }
    sandbox.write_file(held, json.dumps(runner_plan).encode())
    run = sandbox.run(
        ["python3", "-I", "-B", f"{grader}/run.py", report, held],
        timeout=request.timeout,
        env={"HARNESS_GRADER_SANDBOX": "1"},
    )
    if READY not in run.output and not run.timed_out:
        raise SandboxError(f"the grader's test runner did not start: {run.output.strip()[-1000:]}")
    read = _read_report(sandbox, report, run.output)
    observed = as_written(plan, read.observed)
    outcomes = held_outcomes(plan, read.outcomes, observed)
    return score_process_run(
        language, plan, request, Observed(outcomes, read.crashes, observed), read.tampering,
        read.collect_errors, run.timed_out,
    )  # fmt: skip


def as_written(plan: ProcessPlan, observed: dict[str, list[list[Any]]]) -> dict[str, list[list[Any]]]:
    """`observed` with each copy's own name (its run path's stem, new in every grade) read as the hidden
    file's it copies: a value that names the test class (Java's `H<hex>Test$Instantiable`, a message that
    quotes it) comes back as the gold tree's probe reported it (`TypeHandlerTest$Instantiable`), and is
    held like any other value rather than differing in every run."""
    found: dict[str, list[list[Any]]] = {}
    for run_id, values in observed.items():
        run = run_id.partition("::")[0]
        origin = plan.origin.get(run)
        own, stem = PurePosixPath(run).stem, PurePosixPath(origin).stem if origin else ""
        found[run_id] = [
            [v[0], v[1].replace(own, stem), *v[2:]]
            if stem and isinstance(v, list) and len(v) > 1 and isinstance(v[1], str)
            else v
            for v in values
        ]
    return found


def _with_grader(target: dict[str, Any], grader: str) -> dict[str, Any]:
    """`target` with `{grader}` filled in its commands."""
    tests = [{**t, "argv": [_fill(str(a), grader=grader) for a in t["argv"]]} for t in target["tests"]]
    build = [_fill(str(a), grader=grader) for a in target["build"]]
    return {**target, "build": build, "program": _fill(str(target["program"]), grader=grader), "tests": tests}


@dataclass(frozen=True)
class Observed:
    """What a run reported, by run id: outcomes (held assertions compared), failures' output, values."""

    outcomes: dict[str, str]
    crashes: dict[str, Any]
    values: dict[str, list[list[Any]]]


def held_outcomes(
    plan: ProcessPlan, outcomes: dict[str, str], observed: dict[str, list[list[Any]]]
) -> dict[str, str]:
    """Each run id's outcome, its held assertions compared with the values its copy is held to."""
    found = {}
    for run_id, outcome in outcomes.items():
        run, _, test = run_id.partition("::")
        slots, expected = plan.slots.get(run, {}), plan.expected.get(run, {})
        found[run_id] = held_outcome(outcome, test, slots, expected, observed.get(run_id, []))
    return found


def canary_verdict(
    language: ProcessLanguage, run: str, canary: Canary, seen: Observed, expected: dict[int, str]
) -> str:
    """A held canary: `held_verdict`. A text canary: `failed` when every test it changed failed at one of
    its changed lines, its output naming no other line of its file; `passed` when every one passed; else
    `unexplained` (an error, a timeout, a failure elsewhere, or output that names several lines: the code
    under test writes that output, and one that names every line of its file would claim any canary's)."""
    tests = [canary.test, *canary.also]
    if canary.slots:
        run_id = f"{run}::{canary.test}"
        slot = canary.slots[0]
        return held_verdict(
            seen.outcomes.get(run_id, "missing"), seen.values.get(run_id, []), slot, expected[slot]
        )
    if all(seen.outcomes.get(f"{run}::{t}") == "passed" for t in tests):
        return "passed"
    for test in tests:
        run_id = f"{run}::{test}"
        lines = set(language.failure_line(str(seen.crashes.get(run_id, "")), run))
        if seen.outcomes.get(run_id) != "failed" or len(lines) != 1 or not lines <= set(canary.lines):
            return "unexplained"  # a failure that names one line of its file, a changed one, and no other
    return "failed"


def score_process_run(
    language: ProcessLanguage,
    plan: ProcessPlan,
    request: HiddenRequest,
    seen: Observed,
    tampering: list[str],
    errors: dict[str, str],
    timed_out: bool,
) -> HiddenRun:
    """The grade's outcomes by the task's ids, canary verdicts and findings (`canary_findings`), and, in
    a probe run, both sides of every rewritten assertion."""
    from envs.grading import _outcome, canary_findings
    from envs.hidden_run import HiddenRun, Probe

    hidden, outcomes = request.task.hidden_tests, seen.outcomes
    verdicts = {
        c.label: canary_verdict(language, r, c, seen, plan.expected[r]) for r, c in plan.canaries.items()
    }
    real_passed = {
        c.label: any(outcomes.get(f"{plan.real_path[run]}::{t}") == "passed" for t in [c.test, *c.also])
        for run, c in plan.canaries.items()
    }
    text = {c.label: not (c.slots or c.negated) for c in plan.canaries.values()}  # met by forgers only
    found, forged = canary_findings(verdicts, real_passed, text, request.trusted)
    tampering = [*tampering, *found]
    f2p = {name: _outcome(plan.ids[name], outcomes) for name in hidden.fail_to_pass}
    p2p = {name: _outcome(plan.ids[name], outcomes) for name in hidden.pass_to_pass}
    if tampering:
        f2p, p2p = dict.fromkeys(f2p, "error"), dict.fromkeys(p2p, "error")
    passed = sum(o == "passed" for o in (*f2p.values(), *p2p.values()))
    shown = {plan.origin.get(p, p): m[-300:] for p, m in errors.items() if p not in plan.canaries}
    probes = [
        Probe(path=path, test=test, line=line, node=test, actual=actual, expected=expected)
        for run, slots in plan.slots.items() if plan.probe
        for path, test, line, actual, expected in probes_of(plan.origin[run], slots, _values_of(seen, run))
    ]  # fmt: skip
    held = sum(len(e) for r, e in plan.expected.items() if r not in plan.canaries)
    return HiddenRun(
        f2p, p2p, passed / (len(f2p) + len(p2p)), timed_out, tampering, verdicts, shown, forged=forged,
        probes=probes, decided_in_parent=held, hidden_assertions=language.planned(request.task, [])[2],
    )  # fmt: skip


def _values_of(seen: Observed, run: str) -> list[list[Any]]:
    """Every value the copy `run` reported, whichever of its tests reported it."""
    return [v for run_id, values in seen.values.items() if run_id.partition("::")[0] == run for v in values]


LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"|(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])')
"""A string literal (no raw strings) or a decimal number, in C-family source."""


def text_canaries(language: ProcessLanguage, task: Task, rng: random.Random) -> list[Canary]:
    """Canaries of the named tests' assertions that no non-guessable held value decides, at most `TRIALS`,
    spread over the tests and, within a test, over its assertions (each must be watched: `unwatched`)."""
    hidden = task.hidden_tests
    found: list[Canary] = []
    for test_id in [*hidden.fail_to_pass, *hidden.pass_to_pass]:
        path, _, test = test_id.partition("::")
        source = hidden.files.get(path)  # a file the base also has would tell a canary from the real copy
        if source is None:
            continue
        held = held_map(hidden.computed, path, source)
        by_assertion = [
            _assertion_canaries(language, path, test, source, (start, end, line), rng)
            for start, end, line in language.assertions_in(source, test)
            if not any(e.line == line and holds(held, test, line) for e in language.equalities(source, test))
        ]  # a held one is changed by its held canaries
        rounds = max((len(c) for c in by_assertion), default=0)
        found += [c[i] for i in range(rounds) for c in by_assertion if i < len(c)]
    return fail_to_pass_first(task, found, TRIALS)


def _assertion_canaries(
    language: ProcessLanguage,
    path: str,
    test: str,
    source: str,
    span: tuple[int, int, int],
    rng: random.Random,
) -> list[Canary]:
    """One assertion's canaries: each literal of it changed, then its condition negated
    (`ProcessLanguage.negated`): `if err != nil { t.Fatal(err) }` or `assert!(x.is_err())` has no literal
    to change and a guessable value, and a correct fix fails it negated at its own line."""
    start, end, line = span
    found = []
    for literal in LITERAL.finditer(source, start, end):
        changed = _changed_literal(literal.group(), rng)
        if changed is not None:
            text = source[: literal.start()] + changed + source[literal.end() :]
            mutation = f"line {line}: {literal.group()} became {changed}"
            found.append(Canary(file=path, test=test, mutation=mutation, source=text, lines=[line]))
    negated = language.negated(source, start, end)
    if negated is not None and negated != source and negated.count("\n") == source.count("\n"):
        mutation = f"line {line}: {NEGATED}"
        found.append(
            Canary(file=path, test=test, mutation=mutation, source=negated, lines=[line], negated=True)
        )
    return found


def _changed_literal(text: str, rng: random.Random) -> str | None:
    if text.startswith('"'):
        inner = text[1:-1]
        changed = perturbed(inner, rng=rng) if not re.search(r"\\", inner) else inner
        return None if changed == inner else f'"{changed}"'
    value: int | float = float(text) if "." in text else int(text)
    changed_value = perturbed(value, rng=rng)
    return None if changed_value == value else str(changed_value)


def one_an_assertion(canaries: list[Canary]) -> list[Canary]:
    """`canaries` with the first of each assertion (file, test and lines) before any second one: kept
    canaries spread over more assertions, which each must be watched (`ProcessLanguage.unwatched`)."""
    seen: set[tuple[str, str, tuple[int, ...]]] = set()
    first: list[Canary] = []
    again: list[Canary] = []
    for canary in canaries:
        key = (canary.file, canary.test, tuple(canary.lines))
        (again if key in seen else first).append(canary)
        seen.add(key)
    return [*first, *again]


COMPARISONS = re.compile(r"==|!=|<=|>=|<<|>>|<-|->|=>|&&|\|\||[<>=|]")
"""Top-level operators of a masked condition that decide how it is negated (`negation`)."""
FLIPPED = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
OPERATORS = re.compile(r"[-+*/%&|^<>=]|\bas\b")
"""What an operand (`x.is_err()`, `!ok`, `reflect.DeepEqual(a, b)`) has none of, brackets masked."""


def negation(condition: str) -> str:
    """A Go or Rust boolean expression (stripped) negated as a test would write it, so that the canary reads
    like a check of its own: its one top-level comparison flipped (`err != nil` -> `err == nil`), an
    operand's leading `!` dropped (`!ok` -> `ok`) or one added (`x.is_err()` -> `!x.is_err()`); anything
    else `!(condition)`. Comparisons bind looser than arithmetic and bit operators in both languages."""
    masked = mask(condition, skip_c_family)
    ops = list(COMPARISONS.finditer(masked))
    if len(ops) == 1 and ops[0].group() in FLIPPED:
        op = ops[0]
        return condition[: op.start()] + FLIPPED[op.group()] + condition[op.end() :]
    if not ops and masked.startswith("!") and not OPERATORS.search(masked[1:]):
        return condition[1:].lstrip(" \t")
    if not ops and not OPERATORS.search(masked) and not masked.startswith("!"):
        return "!" + condition
    return f"!({condition})"


def fail_to_pass_first(task: Task, canaries: list[Canary], most: int) -> list[Canary]:
    """Up to `most` of `canaries`, spread over the tests, FAIL_TO_PASS tests' before any other's: an unwatched
    FAIL_TO_PASS test refuses its task, where an unwatched PASS_TO_PASS test can be left out."""
    named = set(task.hidden_tests.fail_to_pass)
    first = [c for c in canaries if f"{c.file}::{c.test}" in named]
    rest = [c for c in canaries if f"{c.file}::{c.test}" not in named]
    return [*spread_over_tests(first, most), *spread_over_tests(rest, most)][:most]


def spread_over_tests(canaries: list[Canary], most: int) -> list[Canary]:
    """Up to `most` of `canaries`, taking each test's first before any test's second."""
    by_test: dict[tuple[str, str], list[Canary]] = {}
    for canary in canaries:
        by_test.setdefault((canary.file, canary.test), []).append(canary)
    rounds = max((len(g) for g in by_test.values()), default=0)
    order = [g[i] for i in range(rounds) for g in by_test.values() if i < len(g)]
    return order[:most]
