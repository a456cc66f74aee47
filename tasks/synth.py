"""Task synthesis: bug-fix tasks made from any Python repository with a pytest suite.

1. The repository is copied (without .git and caches) to SUITE/repos/NAME: the correct state.
2. Its tests run twice; the ones that pass both times are the suite. The first run records, per test,
   the lines of the repository's own code it ran (`sys.monitoring`, coverage.py's C tracer or
   `sys.settrace` in the sandbox: `envs/pytest_runner.py`).
3. Every mutation of `tasks.mutations` on a covered line is a candidate. Candidates are shuffled
   (seeded), taken round-robin over the operators, and those giving an identical file are tried once.
4. A candidate is written into the sandbox and the test files that cover its line run. It is kept
   when some tests that passed now fail, nothing else broke (collection, time-out), each failing test
   fails again on its own, and passes on its own once the original is back (the inverse patch).
   A second candidate in the same function that fails the same tests is a duplicate.
5. A kept candidate becomes a task: its `bug` edit, FAIL_TO_PASS (the tests it fails), PASS_TO_PASS
   (the tests of those files that still pass), and a problem statement of what a user would see go
   wrong: the repository's functions the failing tests call, and the failures' messages (values given
   beside the intended ones, exceptions raised); it never names a test nor quotes the mutated code.

The sandbox is behind `PytestRunner`, so this module needs no sandbox code (`envs.synthesis` runs it).
With several runners (each a sandbox of its own), the traced run is split over them by test file, and
trials run side by side; their verdicts are still decided in the candidates' order, so the tasks made
are the same at any concurrency. A test that runs far longer than the slowest one did in the baseline
is stopped on its own (a mutation that loops forever), and its trial counts as a time-out.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from queue import Queue
from typing import Literal, Protocol, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field

from tasks.environment import Environment
from tasks.model import Limits
from tasks.mutations import OPERATORS, Mutation, Operator, Source, find_mutations
from tasks.parsing import parse_python
from tasks.patches import NOISE, is_graded_path
from tasks.pytest_config import pytest_collection
from tasks.suite import BugEdit, TaskError, TaskFile, cache_root

Verdict = Literal["kept", "survived", "timeout", "crashed", "broke_collection", "duplicate", "unconfirmed"]
SKIPPED_DIRS = (".git", ".hg", ".tox", ".nox", ".venv", "venv", "build", "dist", "node_modules")
STATEMENT_TESTS = 3
"""Distinct failure messages the problem statement quotes."""


class SynthError(TaskError):
    """The repository cannot be synthesized from (no tests, none passing, nothing covered, ...)."""


class PytestRun(BaseModel):
    """What one pytest run in the sandbox reported."""

    model_config = ConfigDict(extra="forbid")

    outcomes: dict[str, str] = Field(default_factory=dict)
    """Node id -> passed, failed, error or skipped."""
    messages: dict[str, str] = Field(default_factory=dict)
    """Node id -> the exception of a failing test (`AssertionError: assert 2 == 3`), no traceback."""
    collect_errors: dict[str, str] = Field(default_factory=dict)
    coverage: dict[str, dict[str, list[int]]] = Field(default_factory=dict)
    """Node id -> repository path -> lines it ran (only when the run traced)."""
    durations: dict[str, float] = Field(default_factory=dict)
    """Node id -> seconds of its setup, call and teardown."""
    timed_out_tests: list[str] = Field(default_factory=list)
    """Tests stopped for running past the run's per-test time limit."""
    tracer: str | None = None
    """What recorded `coverage` (sys.monitoring, ctracer, settrace); None: the run did not trace."""
    timed_out: bool = False
    crashed: bool = False
    """The run ended without a report (the process died)."""
    duration_s: float


class PytestRunner(Protocol):
    """A repository in a sandbox whose files can be overwritten and whose tests can be run."""

    key: str
    """What runs the tests (backend, image, Python environment): a cached baseline is one of these."""

    def write_file(self, path: str, text: str) -> None:
        """Overwrites a file of the repository (a path relative to its root)."""
        ...

    def run_tests(
        self, targets: list[str], trace: list[str], timeout: float, test_timeout: float | None = None
    ) -> PytestRun:
        """Runs pytest on test files or node ids; records the lines of `trace` files each test ran.
        `timeout` bounds the whole run, `test_timeout` each test."""
        ...


class SynthConfig(BaseModel):
    """What `harness tasks synth` makes."""

    model_config = ConfigDict(extra="forbid")

    repo: Path
    """The repository: a folder with Python code and pytest tests."""
    out: Path
    """The suite folder written to (made if missing)."""
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """The repository's name in the suite and the prefix of task ids; None: the folder's name."""
    n: int = Field(default=10, ge=1)
    """Tasks wanted."""
    seed: int = 0
    """Seed of the order in which mutations are tried."""
    max_tries: int | None = Field(default=None, ge=1)
    """Most mutations tried; None: 25 per task wanted."""
    per_function: int = Field(default=2, ge=1)
    """Most tasks from one function."""
    baseline_timeout_s: float | None = Field(default=None, gt=0)
    """Time limit of the first full test runs (the traced one and the plain one); None: 600 s and 1 s
    more per test function (`baseline_limit`)."""


class Trial(BaseModel):
    """One mutation tried."""

    model_config = ConfigDict(extra="forbid")

    operator: Operator
    path: str
    function: str
    line: int
    verdict: Verdict
    failing: int = 0
    """Tests that failed with the mutation in place."""
    duration_s: float


class SynthesizedTask(BaseModel):
    """What a task was made from (written next to its task.yaml as synth.json)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    operator: Operator
    path: str
    function: str
    line: int
    fail_to_pass: int
    pass_to_pass: int


class SynthReport(BaseModel):
    """The outcome of one synthesis."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    name: str
    suite: str
    test_files: int
    passing_tests: int
    covered_lines: int
    candidates: int
    """Distinct mutations on covered lines."""
    trials: list[Trial] = Field(default_factory=list)
    tasks: list[SynthesizedTask] = Field(default_factory=list)
    """The tasks written (and, when checked, valid)."""
    rejected: dict[str, list[str]] = Field(default_factory=dict)
    """Task id -> problems: tasks the check refused, removed again."""
    baseline_s: float = 0.0
    baseline_cached: bool = False
    """The baseline came from the cache: this repository, at this content, was traced before."""
    environment_read: str = ""
    """How the repository's environment was read: its build backend, or the static parse (and why)."""
    tracer: str | None = None
    """What recorded the baseline's lines per test (`PytestRun.tracer`)."""
    trials_s: float = 0.0
    check_s: float = 0.0
    duration_s: float = 0.0

    @property
    def tried(self) -> int:
        return len(self.trials)

    @property
    def kept(self) -> int:
        return sum(t.verdict == "kept" for t in self.trials)

    @property
    def tasks_per_minute(self) -> float:
        return 60.0 * len(self.tasks) / self.duration_s if self.duration_s else 0.0

    def verdicts(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for trial in self.trials:
            counts[trial.verdict] += 1
        return dict(counts)


Check = Callable[[list[Path]], dict[str, list[str]]]
"""Given new task folders, the problems of each task id (an empty list: valid)."""


# ---- the repository --------------------------------------------------------------------------------


def copy_repository(config: SynthConfig) -> tuple[str, Path]:
    """The repository's name and its clean copy under SUITE/repos/NAME."""
    if not config.repo.is_dir():
        raise SynthError(f"--repo {config.repo}: not a directory")
    name = config.name or re.sub(r"[^A-Za-z0-9_.-]", "-", config.repo.resolve().name).lstrip("-._")
    if not name:
        raise SynthError(f"--repo {config.repo}: give the repository a name with --name")
    target = config.out / "repos" / name
    if target.exists():
        raise SynthError(f"{target} exists: the suite has a repository {name!r} already (use --name)")
    noise = shutil.ignore_patterns(*SKIPPED_DIRS, *(pattern.rstrip("/") for pattern in NOISE))
    out = config.out.resolve()

    def ignore(folder: str, names: list[str]) -> set[str]:  # the suite may live inside the repository
        return set(noise(folder, names)) | {n for n in names if Path(folder, n).resolve() == out}

    shutil.copytree(config.repo, target, ignore=ignore, symlinks=True)
    return name, target


def _walk_python(repo: Path) -> Iterator[str]:
    for path in sorted(repo.rglob("*.py")):
        relative = path.relative_to(repo)
        if not any(part.startswith(".") for part in relative.parts) and path.is_file():
            yield relative.as_posix()


def find_test_files(repo: Path) -> list[str]:
    """The files the repository's pytest collects: its `python_files` patterns under its `testpaths`, as
    its configuration sets them (`tasks/pytest_config.py`; by default test_*.py and *_test.py anywhere)."""
    collection = pytest_collection(repo)
    found = [p for p in _walk_python(repo) if collection.collects(p)]
    if not found:
        where = f" under {' '.join(collection.testpaths)}" if collection.testpaths else ""
        said = f", as {collection.source} sets them" if collection.source else ""
        raise SynthError(
            f"{repo}: no test files ({' or '.join(collection.python_files)}{where}{said}); synthesis needs"
            " a pytest suite"
        )
    return found


def baseline_limit(repo: Path, tests: list[str], setting: float | None) -> float:
    """The time limit of the baseline's test runs: `setting`, or 600 s and 1 s more per test function
    the test files define (a suite of 1,000 tests gets 1,600 s: the traced run costs several times the
    plain one)."""
    if setting is not None:
        return setting
    defined = sum(len(TEST_DEF.findall((repo / t).read_text(errors="replace"))) for t in tests)
    return 600.0 + defined


TEST_DEF = re.compile(r"^\s*(?:async\s+)?def\s+test", re.MULTILINE)


def find_source_files(repo: Path) -> list[str]:
    """Python files the tasks may break: not tests, test settings or setup scripts."""
    return [
        p
        for p in _walk_python(repo)
        if not is_graded_path(p) and p != "setup.py" and not p.startswith(("docs/", "doc/"))
    ]


# ---- the baseline ----------------------------------------------------------------------------------


class Baseline(BaseModel):
    """The tests that pass twice on the correct repository, and who covers what."""

    model_config = ConfigDict(extra="forbid")

    passing: list[str]
    by_line: dict[str, dict[int, list[str]]]
    """Repository path -> line -> the passing tests that ran it."""
    duration_s: float
    """Wall time of one untraced run of the whole suite."""
    slowest_s: float = 0.0
    """The longest a passing test took in that run (setup, call and teardown)."""
    tracer: str | None = None
    """What recorded the lines of the traced run (`PytestRun.tracer`)."""

    def tests_of(self, mutation: Mutation) -> set[str]:
        lines = self.by_line.get(mutation.path, {})
        return {test for line in mutation.lines for test in lines.get(line, [])}

    def covered_lines(self) -> int:
        return sum(len(lines) for lines in self.by_line.values())


def run_baseline(
    runners: Sequence[PytestRunner], tests: list[str], sources: list[str], timeout: float
) -> Baseline:
    """The traced run, split by test file over the runners, then one untraced run of the whole suite
    alone (its duration sets the time limits of the trials and of the agent's test command)."""
    traced = traced_run(runners, tests, sources, timeout)
    plain = runners[0].run_tests(tests, [], timeout)
    if traced.timed_out or plain.timed_out:
        raise SynthError(f"the test suite did not finish in {timeout:.0f} s")
    passing = sorted(
        t
        for t, outcome in plain.outcomes.items()
        if outcome == "passed" and traced.outcomes.get(t) == "passed"
    )
    if not passing:
        raise SynthError(f"no test passes on the unchanged repository: {_why_none_pass(plain)}")
    by_line: dict[str, dict[int, list[str]]] = {}
    for test in passing:
        for path, lines in traced.coverage.get(test, {}).items():
            for line in lines:
                by_line.setdefault(path, {}).setdefault(line, []).append(test)
    if not by_line:
        raise SynthError(f"the {len(passing)} passing tests run no line of the repository's own code")
    slowest = max((plain.durations.get(t, 0.0) for t in passing), default=0.0)
    return Baseline(
        passing=passing, by_line=by_line, duration_s=plain.duration_s, slowest_s=slowest, tracer=traced.tracer
    )


def traced_run(
    runners: Sequence[PytestRunner], tests: list[str], sources: list[str], timeout: float
) -> PytestRun:
    """The traced run of `tests`, as many shards as runners (every n-th test file), side by side, merged."""
    shards = [shard for k in range(len(runners)) if (shard := tests[k :: len(runners)])]
    if len(shards) <= 1:
        return runners[0].run_tests(tests, sources, timeout)
    with ThreadPoolExecutor(len(shards), thread_name_prefix="synth-trace") as pool:
        runs = list(pool.map(lambda k: runners[k].run_tests(shards[k], sources, timeout), range(len(shards))))
    merged = PytestRun(duration_s=max(r.duration_s for r in runs), tracer=runs[0].tracer)
    for run in runs:
        merged.outcomes |= run.outcomes
        merged.messages |= run.messages
        merged.collect_errors |= run.collect_errors
        merged.coverage |= run.coverage
        merged.durations |= run.durations
        merged.timed_out = merged.timed_out or run.timed_out
        merged.crashed = merged.crashed or run.crashed
    return merged


BASELINE_FORMAT = 2
"""Raised when what a baseline holds, or how it is measured, changes: older cached ones are not read."""


def baseline_key(repo: Path, tests: list[str], sources: list[str], runner: str) -> str:
    """The repository's every file (path and content), the files run and traced, and the runner."""
    digest = hashlib.sha256(json.dumps([BASELINE_FORMAT, tests, sources, runner]).encode())
    for path in sorted(
        str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file() and not p.is_symlink()
    ):
        digest.update(f"{path}\0".encode() + hashlib.sha256((repo / path).read_bytes()).digest())
    return digest.hexdigest()[:24]


def cached_baseline(
    runners: Sequence[PytestRunner], repo: Path, tests: list[str], sources: list[str], timeout: float
) -> tuple[Baseline, bool]:
    """The baseline of `repo`, measured once per repository content and runner, then read from the cache
    (tracing a repository of 700 tests took 9 minutes); whether it came from the cache."""
    path = cache_root().parent / "baselines" / f"{baseline_key(repo, tests, sources, runners[0].key)}.json"
    try:
        return Baseline.model_validate_json(path.read_text()), True
    except (OSError, ValueError):
        pass
    baseline = run_baseline(runners, tests, sources, timeout)
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_suffix(f".{os.getpid()}.tmp")
    staged.write_text(baseline.model_dump_json())
    staged.replace(path)
    return baseline, False


def _why_none_pass(run: PytestRun) -> str:
    if run.crashed:
        return "pytest died without a report"
    if run.collect_errors:
        where, message = next(iter(run.collect_errors.items()))
        hint = (
            " (a src/ layout? only the repository root is on sys.path)" if "ModuleNotFound" in message else ""
        )
        return f"{len(run.collect_errors)} collection errors, e.g. {where}: {_first_line(message)}{hint}"
    if not run.outcomes:
        return "pytest collected no tests"
    failed = [t for t, o in run.outcomes.items() if o != "passed"]
    return f"{len(failed)} of {len(run.outcomes)} tests fail or skip, e.g. {failed[0]}"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"


# ---- candidates ------------------------------------------------------------------------------------


def candidates(repo: Path, baseline: Baseline, seed: int) -> list[Mutation]:
    """The distinct mutations on covered lines, shuffled with `seed`, round-robin over operators."""
    by_operator: dict[Operator, list[Mutation]] = {op: [] for op in OPERATORS}
    seen: set[str] = set()
    for path in sorted(baseline.by_line):
        try:
            text = (repo / path).read_text(encoding="utf-8")
            found = find_mutations(path, text)
        except (SyntaxError, ValueError):  # not UTF-8, or not Python this interpreter parses
            continue
        for mutation in found:
            if not baseline.tests_of(mutation):
                continue
            digest = hashlib.sha256(f"{path}\0{mutation.apply(text)}".encode()).hexdigest()
            if digest not in seen:
                seen.add(digest)
                by_operator[mutation.operator].append(mutation)
    return round_robin(by_operator, OPERATORS, seed)


K = TypeVar("K")
M = TypeVar("M")


def round_robin(by_operator: Mapping[K, list[M]], operators: Sequence[K], seed: int) -> list[M]:
    """Each operator's candidates shuffled with `seed` (in `operators`' order, one generator), then taken
    one from each operator in turn, so that no operator's many sites crowd out the others'."""
    rng = random.Random(seed)
    queues = []
    for op in operators:
        rng.shuffle(by_operator[op])
        queues.append(by_operator[op])
    order: list[M] = []
    for i in range(max((len(q) for q in queues), default=0)):
        order.extend(q[i] for q in queues if i < len(q))
    return order


# ---- one trial -------------------------------------------------------------------------------------


class Kept(BaseModel):
    """A mutation that makes a task."""

    model_config = ConfigDict(extra="forbid")

    fail_to_pass: list[str]
    pass_to_pass: list[str]
    messages: dict[str, str]


TEST_TIMEOUT_FLOOR_S = 10.0
TEST_TIMEOUT_FACTOR = 5.0
"""A test of a trial is stopped after the floor plus this many times the slowest baseline test."""


class Outcome(BaseModel):
    """What a trial's runs found, before its verdict is decided in the candidates' order."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    failing: int = 0
    key: tuple[str, ...] | None = None
    """The mutation's function and failing tests: a second with the same key is a duplicate."""
    kept: Kept | None = None
    duration_s: float = 0.0


def try_mutation(
    runner: PytestRunner, repo: Path, mutation: Mutation, baseline: Baseline, seen: frozenset[tuple[str, ...]]
) -> Outcome:
    """Runs the covering test files with the mutation in place, and confirms each failing test alone and
    fixed. `seen`: the keys decided so far (a mutation already known to be a duplicate runs no more)."""
    started = time.monotonic()
    original = (repo / mutation.path).read_text()
    covering = baseline.tests_of(mutation)
    files = sorted({test.split("::", 1)[0] for test in covering})
    expected = [t for t in baseline.passing if t.split("::", 1)[0] in files]
    timeout = 10.0 + 3.0 * baseline.duration_s
    per_test = TEST_TIMEOUT_FLOOR_S + TEST_TIMEOUT_FACTOR * baseline.slowest_s
    runner.write_file(mutation.path, mutation.apply(original))
    try:
        run = runner.run_tests(files, [], timeout, per_test)
        early = _early_verdict(run, expected)
        if early is not None:
            return Outcome(verdict=early, duration_s=time.monotonic() - started)
        failing = [t for t in expected if run.outcomes[t] != "passed"]
        key = (mutation.path, mutation.function, *failing)
        if key in seen:
            return Outcome(
                verdict="duplicate", failing=len(failing), key=key, duration_s=time.monotonic() - started
            )
        alone = runner.run_tests(failing, [], timeout, per_test)
        still = [t for t in failing if alone.outcomes.get(t) in ("failed", "error")]
    finally:
        runner.write_file(mutation.path, original)
    fixed = runner.run_tests(still, [], timeout, per_test) if still else None
    f2p = [t for t in still if fixed is not None and fixed.outcomes.get(t) == "passed"]
    done = time.monotonic() - started
    if not f2p:
        return Outcome(verdict="unconfirmed", failing=len(failing), key=key, duration_s=done)
    p2p = [t for t in expected if run.outcomes[t] == "passed"]
    messages = {t: run.messages.get(t, "") for t in f2p}
    kept = Kept(fail_to_pass=f2p, pass_to_pass=p2p, messages=messages)
    return Outcome(verdict="kept", failing=len(failing), key=key, kept=kept, duration_s=done)


def _early_verdict(run: PytestRun, expected: list[str]) -> Verdict | None:
    """The verdict of a mutated run that needs no more runs: it timed out (as a whole, or a test of it),
    crashed, broke collection, or failed nothing."""
    if run.timed_out or run.timed_out_tests:
        return "timeout"
    if run.crashed:
        return "crashed"
    if run.collect_errors or any(t not in run.outcomes for t in expected):
        return "broke_collection"
    if all(run.outcomes[t] == "passed" for t in expected):
        return "survived"
    return None


# ---- the task --------------------------------------------------------------------------------------


def bug_edit(path: str, text: str, mutation: Mutation) -> BugEdit:
    """The mutation as an exact replacement of whole lines, with just enough context to be unique."""
    source_lines = Source(text).lines  # split at "\n" only, as the line numbers count
    mutated_lines = Source(mutation.apply(text)).lines
    first = text.count("\n", 0, mutation.start)
    last = text.count("\n", 0, max(mutation.start, mutation.end - 1))
    tail = len(source_lines) - 1 - last  # lines after the change: the same in both texts
    lo, hi = first, last
    while True:
        old = "".join(source_lines[lo : hi + 1])
        new = "".join(mutated_lines[lo : len(mutated_lines) - tail + (hi - last)])
        if old.strip() and text.count(old) == 1:
            return BugEdit(path=path, old=old, new=new)
        if lo == 0 and hi == len(source_lines) - 1:
            raise SynthError(f"{path}: no unique context for a mutation at line {first + 1}")
        lo, hi = max(lo - 1, 0), min(hi + 1, len(source_lines) - 1)


def text_line(repo: Path, mutation: Mutation) -> int:
    """The 1-based line where the mutation starts."""
    return (repo / mutation.path).read_text().count("\n", 0, mutation.start) + 1


def _code_lines(edit: BugEdit) -> list[str]:
    """Lines of the edit (before and after) long enough that quoting them would give the fix away."""
    return [line.strip() for line in (edit.old + edit.new).splitlines() if len(line.strip()) >= 8]


def _quote(message: str, secrets: list[str]) -> str:
    message = re.sub(r" at 0x[0-9a-f]+", "", message)  # object addresses differ from run to run
    lines = [line.rstrip()[:200] for line in message.strip().splitlines()[:8]]  # no trailing spaces: YAML `|`
    if not lines or any(code in line for line in lines for code in secrets):
        return "(the test fails without a message)"
    return "\n".join(lines)


def _base_name(test: str) -> str:
    return test.split("::")[-1].split("[")[0]


def called_functions(repo: Path, tests: list[str]) -> list[str]:
    """The repository's functions and classes that `tests` call by a name imported from its modules
    (`from parse import search`, `import more_itertools as mi`: `parse.search`, `more_itertools.chunked`),
    in the order first called; not what they reach through objects, which would need the types."""
    found: dict[str, None] = {}
    for test in tests:
        path, *names = test.split("[")[0].split("::")
        try:
            tree = parse_python((repo / path).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        imported = _repository_imports(repo, tree, Path(path))
        body = _test_function(tree, names)
        for node in ast.walk(body) if body is not None else []:
            name = _called_name(node.func, imported) if isinstance(node, ast.Call) else None
            if name is not None:
                found[name] = None
    return list(found)


def _repository_imports(repo: Path, tree: ast.Module, path: Path, follow: bool = True) -> dict[str, str]:
    """Local name -> dotted name, for the names a test file (`path`) imports from the repository's own
    modules (not from its test folder), and, once removed, through a module beside it (tomli's tests:
    `from . import tomllib`, where their `__init__.py` says `import tomli as tomllib`)."""

    def own(module: str) -> bool:
        top = module.split(".")[0]
        return top != path.parts[0] and any(
            (base / f"{top}.py").is_file() or (base / top / "__init__.py").is_file()
            for base in (repo, repo / "src")
        )

    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level and own(node.module):
            names |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names if a.name != "*"}
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and follow:
            beside = path.parent / (f"{node.module.replace('.', '/')}.py" if node.module else "__init__.py")
            try:
                there = _repository_imports(repo, parse_python((repo / beside).read_text()), beside, False)
            except (OSError, SyntaxError, ValueError):
                continue
            names |= {a.asname or a.name: there[a.name] for a in node.names if a.name in there}
        elif isinstance(node, ast.Import):
            for alias in (a for a in node.names if own(a.name)):
                top = alias.name.split(".")[0]  # `import a.b` binds `a`; `import a.b as c` binds c to a.b
                names[alias.asname or top] = alias.name if alias.asname else top
    return names


def _test_function(tree: ast.Module, names: list[str]) -> ast.AST | None:
    """The definition of a test (`test_f`, or `TestBox::test_put` in its class) in a parsed test file."""
    body: list[ast.stmt] = tree.body
    found: ast.AST | None = None
    for name in names:
        defined = (n for n in body if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef))
        found = next((n for n in defined if n.name == name), None)
        if found is None:
            return None
        body = found.body if isinstance(found, ast.ClassDef) else []
    return found


def _called_name(func: ast.expr, imported: dict[str, str]) -> str | None:
    """`search` or `mi.chunked` as the dotted name of what it was imported as, if it was."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.insert(0, func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or func.id not in imported:
        return None
    return ".".join([imported[func.id], *parts])


def _symptom(messages: list[str], plural: bool) -> str:
    """What goes wrong, as a verb phrase: raises, does not raise, or gives wrong results."""
    for message in messages:
        missing = re.match(r"Failed: DID NOT RAISE <class '(?:\w+\.)*(\w+)'>", message)
        if missing:
            return f"{'do' if plural else 'does'} not raise `{missing.group(1)}`"
    for message in messages:
        kind = re.match(r"(\w+(?:Error|Exception|Warning)|StopIteration|KeyboardInterrupt): ", message)
        if kind and kind.group(1) != "AssertionError":
            return f"{'raise' if plural else 'raises'} `{kind.group(1)}`"
    return "give wrong results" if plural else "gives a wrong result"


def _subject(functions: list[str], name: str) -> tuple[str, bool]:
    """Who misbehaves: the functions called (two named at most), else the repository; plural or not."""
    if not functions:
        return f"`{name}`", False
    if len(functions) == 1:
        return f"`{functions[0]}`", False
    if len(functions) == 2:
        return f"`{functions[0]}` and `{functions[1]}`", True
    return f"`{functions[0]}`, `{functions[1]}` and {len(functions) - 2} more", True


def _observed(kept: Kept, secrets: list[str]) -> list[str]:
    """The distinct failure messages, the first few, without the mutated code or a test's name."""
    tests = {_base_name(t) for t in kept.fail_to_pass}
    seen: dict[str, None] = {}
    for test in kept.fail_to_pass:
        quoted = _quote(kept.messages.get(test, ""), secrets)
        lines = [line for line in quoted.splitlines() if not any(name in line for name in tests)]
        if lines and "\n".join(lines) != "(the test fails without a message)":
            seen["\n".join(lines)] = None
    return list(seen)[:STATEMENT_TESTS]


def problem_statement(
    kept: Kept, test_command: str, secrets: list[str], functions: list[str], name: str
) -> str:
    """What a user of the library sees go wrong: the functions involved and the failure messages (the
    values the code gives beside the intended ones, the exceptions raised); never a test's name, and
    never the mutated code."""
    subject, plural = _subject(functions, name)
    observed = _observed(kept, secrets)
    parts = [f"{subject} {_symptom(list(kept.messages.values()), plural)}."]
    if observed:
        parts.append("What the code does now, as the checks that catch it report it:")
        parts += ["\n".join(f"    {line}" if line else "" for line in text.splitlines()) for text in observed]
    parts.append(
        "The messages show the values the code gives now beside the intended ones. Find the cause in the "
        f"repository's code and fix it there. `{test_command}` runs the test suite: it must pass without "
        "changes to the tests, and what works now must keep working."
    )
    return "\n\n".join(parts) + "\n"


def title(kept: Kept, functions: list[str], name: str) -> str:
    """One line of what goes wrong, naming the functions involved, never a test."""
    subject, plural = _subject(functions, name)
    return f"{subject} {_symptom(list(kept.messages.values()), plural)}"


def visible_test_command(tests: list[str]) -> str:
    roots = sorted({Path(t).parts[0] for t in tests})
    return "python3 -m pytest -q " + " ".join(roots)


class _Dumper(yaml.SafeDumper):
    pass


def _block_strings(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _block_strings)


RUN_TESTS_MARGIN = 4.0
"""How many times its measured duration the agent's full test run may take before it is cut off: a
loaded host (CI beside two busy processes) ran sandboxed tests 3-4 times slower than an idle one."""


def run_tests_timeout(duration_s: float) -> float:
    """The agent's command timeout for a repository whose whole untraced test run took `duration_s`:
    never below the default, so that a healthy run of the visible tests does not time out under load;
    whole minutes, so that two syntheses of one repository mostly write the same task.yaml (it is the one
    field that comes from a measurement)."""
    minutes = math.ceil((RUN_TESTS_MARGIN * duration_s + 10) / 60)
    return max(Limits().command_timeout_s, 60.0 * minutes)


def write_task(
    task_dir: Path,
    name: str,
    repo: Path,
    mutation: Mutation,
    kept: Kept,
    command: str,
    duration_s: float = 0.0,
    environment: Environment | None = None,
) -> SynthesizedTask:
    text = (repo / mutation.path).read_text()
    edit = bug_edit(mutation.path, text, mutation)
    if text.replace(edit.old, edit.new) != mutation.apply(text):
        raise SynthError(f"{mutation.path}: the edit of a mutation at line {mutation.lines[0]} is not exact")
    functions = called_functions(repo, kept.fail_to_pass)
    spec = TaskFile(
        title=title(kept, functions, name),
        repo=name,
        bug=[edit],
        problem_statement=problem_statement(kept, command, _code_lines(edit), functions, name),
        test_command=command,
        fail_to_pass=kept.fail_to_pass,
        pass_to_pass=kept.pass_to_pass,
        limits=Limits(command_timeout_s=run_tests_timeout(duration_s)),
        environment=environment,
    )
    task_dir.mkdir(parents=True)
    raw = spec.model_dump(mode="json", exclude_defaults=True)
    raw["bug"] = [e.model_dump(exclude_defaults=True) for e in spec.bug]
    (task_dir / "task.yaml").write_text(
        yaml.dump(raw, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1000)
    )
    made = SynthesizedTask(
        id=task_dir.name,
        operator=mutation.operator,
        path=mutation.path,
        function=mutation.function,
        line=text_line(repo, mutation),
        fail_to_pass=len(kept.fail_to_pass),
        pass_to_pass=len(kept.pass_to_pass),
    )
    (task_dir / "synth.json").write_text(made.model_dump_json(indent=1) + "\n")
    return made


# ---- the whole synthesis ---------------------------------------------------------------------------


def synthesize(
    config: SynthConfig,
    repo: Path,
    name: str,
    runners: Sequence[PytestRunner],
    check: Check | None = None,
    on_trial: Callable[[Trial], None] | None = None,
    environment: Environment | None = None,
) -> SynthReport:
    """Tries mutations until `config.n` tasks are written (and pass `check`), or none are left; as many
    at a time as there are runners, which run in `environment` (written into each task)."""
    started = time.monotonic()
    tests = find_test_files(repo)
    limit = baseline_limit(repo, tests, config.baseline_timeout_s)
    baseline, cached = cached_baseline(runners, repo, tests, find_source_files(repo), limit)
    order = candidates(repo, baseline, config.seed)
    if not order:
        raise SynthError(f"{repo}: no mutation possible on the lines the tests cover")
    report = SynthReport(
        repo=str(config.repo),
        name=name,
        suite=str(config.out),
        test_files=len(tests),
        passing_tests=len(baseline.passing),
        covered_lines=baseline.covered_lines(),
        candidates=len(order),
        baseline_s=time.monotonic() - started,
        baseline_cached=cached,
        tracer=baseline.tracer,
    )
    search = Search(config, repo, name, runners, baseline, order, visible_test_command(tests), environment)
    budget = config.max_tries or 25 * config.n
    while len(report.tasks) < config.n and report.tried < budget:
        t0 = time.monotonic()
        batch = search.next_batch(config.n - len(report.tasks), budget - report.tried, report, on_trial)
        report.trials_s += time.monotonic() - t0
        if not batch:
            break
        t0 = time.monotonic()
        problems = check([d for d, _ in batch]) if check is not None else {}
        report.check_s += time.monotonic() - t0
        for task_dir, made in batch:
            if problems.get(made.id):
                report.rejected[made.id] = problems[made.id]
                shutil.rmtree(task_dir)
            else:
                report.tasks.append(made)
    report.duration_s = time.monotonic() - started
    return report


class Search:
    """Mutations in their order, tried side by side on the runners (one trial each at a time) and
    decided one by one in that order: what each function and failing set gave so far decides whether a
    result counts, is a duplicate, or is dropped (its function already gave its tasks). Results past the
    point a batch is full are dropped, and their mutations tried again in the next batch, so the tasks
    and trials are those of one runner, trial after trial."""

    def __init__(
        self,
        config: SynthConfig,
        repo: Path,
        name: str,
        runners: Sequence[PytestRunner],
        baseline: Baseline,
        order: list[Mutation],
        command: str,
        environment: Environment | None = None,
    ) -> None:
        self.config, self.repo, self.name = config, repo, name
        self.baseline, self.command = baseline, command
        self.free: Queue[PytestRunner] = Queue()
        for runner in runners:
            self.free.put(runner)
        self.width = len(runners)
        self.pending: deque[Mutation] = deque(order)
        self.per_function: dict[tuple[str, str], int] = defaultdict(int)
        self.seen: set[tuple[str, ...]] = set()
        self.environment = environment
        """The environment the runners run in, written into each task."""

    def next_batch(
        self, wanted: int, tries: int, report: SynthReport, on_trial: Callable[[Trial], None] | None
    ) -> list[tuple[Path, SynthesizedTask]]:
        """Up to `wanted` new task folders, trying at most `tries` mutations (each added to `report`)."""
        batch: list[tuple[Path, SynthesizedTask]] = []
        flight: deque[tuple[Mutation, Future[Outcome]]] = deque()
        with ThreadPoolExecutor(self.width, thread_name_prefix="synth-trial") as pool:
            while len(batch) < wanted and tries > 0:
                while len(flight) < self.width and self.pending:
                    mutation = self.pending.popleft()
                    if not self._at_limit(mutation):
                        flight.append((mutation, pool.submit(self._run, mutation, frozenset(self.seen))))
                if not flight:
                    break
                mutation, future = flight.popleft()
                if self._at_limit(mutation):
                    continue  # a task of its function was decided while it ran
                trial, kept = self._decide(mutation, future.result())
                report.trials.append(trial)
                if on_trial is not None:
                    on_trial(trial)
                if kept is not None:
                    batch.append(self._write(mutation, kept))
                tries -= 1
            for mutation, future in reversed(flight):  # undecided: tried again in the next batch
                future.cancel()
                self.pending.appendleft(mutation)
        return batch

    def _at_limit(self, mutation: Mutation) -> bool:
        return self.per_function[(mutation.path, mutation.function)] >= self.config.per_function

    def _run(self, mutation: Mutation, seen: frozenset[tuple[str, ...]]) -> Outcome:
        runner = self.free.get()
        try:
            return try_mutation(runner, self.repo, mutation, self.baseline, seen)
        finally:
            self.free.put(runner)

    def _decide(self, mutation: Mutation, outcome: Outcome) -> tuple[Trial, Kept | None]:
        verdict, kept = outcome.verdict, outcome.kept
        if outcome.key is not None:
            if outcome.key in self.seen:
                verdict, kept = "duplicate", None
            else:
                self.seen.add(outcome.key)
        if kept is not None:
            self.per_function[(mutation.path, mutation.function)] += 1
        trial = Trial(
            operator=mutation.operator,
            path=mutation.path,
            function=mutation.function,
            line=text_line(self.repo, mutation),
            verdict=verdict,
            failing=outcome.failing,
            duration_s=outcome.duration_s,
        )
        return trial, kept

    def _write(self, mutation: Mutation, kept: Kept) -> tuple[Path, SynthesizedTask]:
        task_dir = _next_task_dir(self.config.out, self.name)
        made = write_task(
            task_dir,
            self.name,
            self.repo,
            mutation,
            kept,
            self.command,
            self.baseline.duration_s,
            self.environment,
        )
        return task_dir, made


def _next_task_dir(out: Path, name: str) -> Path:
    k = 1
    while (out / f"{name}-{k:03d}").exists():
        k += 1
    return out / f"{name}-{k:03d}"


# ---- source distributions --------------------------------------------------------------------------


def fetch_sdist(requirement: str, cache: Path | None = None) -> Path:
    """The unpacked source distribution of `NAME==VERSION` from PyPI (downloaded once, then cached)."""
    match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.!+_-]+)", requirement.strip())
    if match is None:
        raise SynthError(f"{requirement!r}: give an exact version, NAME==VERSION")
    folder = (cache or cache_root().parent / "sdists") / f"{match[1].lower()}-{match[2]}"
    unpacked = folder / "src"
    if not (folder / "done").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps"]
        proc = subprocess.run([*command, "-d", str(folder), requirement], capture_output=True, text=True)
        archives = [p for p in folder.iterdir() if p.name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".zip"))]
        if proc.returncode != 0 or len(archives) != 1:
            raise SynthError(f"pip download {requirement} failed: {proc.stderr.strip()[-500:]}")
        _unpack(archives[0], unpacked)
        (folder / "done").write_text("")
    roots = [p for p in unpacked.iterdir() if p.is_dir()]
    return roots[0] if len(roots) == 1 else unpacked


def _unpack(archive: Path, dest: Path) -> None:
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            z.extractall(dest)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")


def load_synth_info(task_dir: Path) -> SynthesizedTask:
    return SynthesizedTask.model_validate(json.loads((task_dir / "synth.json").read_text()))
