"""Runs the hidden tests inside the grading sandbox and writes one outcome per test id to a report file.

Standard library and pytest only; started as `python3 -I -B grade_runner.py REPORT INI ROOT TARGET...` (a TARGET is a test file, or one
test's node id) so
the environment and the repository's folder on sys.path have no say over how Python starts. pytest is
pointed at the grader's own ini file (`-c`), so the repository's pytest.ini / pyproject / setup.cfg test
settings have no effect. The outcome of every test comes from pytest's own reports, not from stdout.

Outcomes are decided where the agent's code never ran. This process (the parent) imports pytest and its
plugins and nothing of the repository; it makes itself undumpable (no process of the sandbox's user may
ptrace it or open its memory or file descriptors), then runs each target (a test file, or one test) in a child of its own,
forked from it, in a random order. A child closes every descriptor it inherited but the pipe it answers
on, sends its file's outcomes and findings through that pipe, and ends; the parent takes from it only
outcomes of that child's own target, records them as soon as the child is gone, and kills every process
the child left before the next one starts. Code under test can so forge at most the outcomes of its own
target: a forger that passes tests wholesale also passes the grader's canaries, which fail on a correct fix.

Within a child, before any code of the repository runs, it fingerprints what decides an outcome
(`Fingerprint`) and a `Guard` watches the session. Found: a function, method or code object of pytest,
pluggy, unittest, os, json or this file replaced (or a class attribute added); a hook implemented outside
pytest's and its plugins' files other than by a conftest.py; a method replaced on a test item; a test
function whose code is not what its file compiles to. The parent itself checks that no test file was
rewritten. Each finding goes into the report's `tampering`, and the grader then counts every test as
failed. Last, the report is written under a fresh name and renamed into place, and its digest is the last
line printed: a report that does not match it is not believed.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import pathlib
import random
import select
import signal
import sys
import types
from typing import Any

# Isolated mode (-I) keeps the script's and the repository's folders off sys.path: this is the real pytest.
import pytest

READY = "harness-grader-ready"
DONE = "harness-grader-done"
WATCHED = ("pytest", "_pytest", "pluggy", "unittest", "os", "posix", "json", "__main__")
"""Top-level names of the modules whose namespaces and classes are fingerprinted."""
MAX_FINDINGS = 5
"""Findings of each kind reported; the rest are counted."""
PYTEST_SETS = {"_pytest.doctest.RUNNER_CLASS", "_pytest.doctest.CHECKER_CLASS"}
"""Names pytest itself binds during a run (lazily made classes)."""
PYTEST_ADDS = {"_pytest_diamond_inheritance_warning_shown"}
"""A class attribute pytest itself adds (a warning shown once)."""
QUIET = ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
"""The plugins the parent imported cannot be rewritten in a child, and pytest would say so every time."""


class Recorder:
    """A pytest plugin object: one outcome per node id (passed, failed, error, skipped)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.collect_errors: list[str] = []

    def pytest_runtest_logreport(self, report) -> None:  # type: ignore[no-untyped-def]
        if report.when == "call":
            outcome = report.outcome
        elif report.failed:
            outcome = "error"
        elif report.skipped:
            outcome = "skipped"
        else:
            return
        if self.outcomes.get(report.nodeid) in ("failed", "error") and outcome == "passed":
            return
        if report.when == "teardown" and outcome == "skipped":
            return
        self.outcomes[report.nodeid] = outcome

    def pytest_collectreport(self, report) -> None:  # type: ignore[no-untyped-def]
        if report.failed:
            self.collect_errors.append(report.nodeid)


def _parts(value: object) -> tuple[object, ...]:
    """The value and, for a function (or a property, static or class method), its code and defaults."""
    functions: list[object]
    if isinstance(value, property):
        functions = [value.fget, value.fset, value.fdel]
    elif isinstance(value, (staticmethod, classmethod)):  # the sandbox's Python may be older than 3.10
        functions = [value.__func__]
    else:
        functions = [value]
    parts: list[object] = [value]
    for f in functions:
        if isinstance(f, types.FunctionType):
            parts += [f.__code__, f.__defaults__, f.__kwdefaults__]
    return tuple(parts)


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(a[i] is b[i] for i in range(len(a)))


class Fingerprint:
    """Every name of the watched modules, and every attribute of the classes they define, as objects
    (held, so that no id is reused): what the code under test would change to fake an outcome."""

    def __init__(self) -> None:
        self.spaces: list[tuple[str, object, dict[str, tuple[object, ...]]]] = []
        for name, module in sorted(sys.modules.items()):
            if name.split(".")[0] not in WATCHED or not isinstance(module, types.ModuleType):
                continue
            self.spaces.append((name, module, {k: _parts(v) for k, v in vars(module).items()}))
            for value in list(vars(module).values()):
                if isinstance(value, type) and value.__module__ == name:
                    prints = {k: _parts(v) for k, v in vars(value).items()}
                    self.spaces.append((f"{name}.{value.__qualname__}", value, prints))

    def changes(self) -> list[str]:
        found = []
        for label, owner, prints in self.spaces:
            now = dict(vars(owner))
            for key, before in prints.items():
                if key not in now:
                    found.append(f"{label}.{key} was deleted")
                elif not _same(_parts(now[key]), before) and f"{label}.{key}" not in PYTEST_SETS:
                    found.append(f"{label}.{key} was replaced")
            if isinstance(owner, type):
                found += [
                    f"{label}.{key} was added" for key in now if key not in prints and key not in PYTEST_ADDS
                ]
        return found


def _capped(findings: list[str]) -> list[str]:
    if len(findings) <= MAX_FINDINGS:
        return findings
    return [*findings[:MAX_FINDINGS], f"... and {len(findings) - MAX_FINDINGS} more like it"]


def _digest(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return "unreadable"


def _inside(path: str, root: str) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(root).rstrip("/") + "/")


class Guard:
    """A pytest plugin object that checks what the code under test could have done to the session:
    before each test is called, the test item and its function; at the end, the hooks."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.config: Any = None
        self.compiled: dict[str, set[types.CodeType]] = {}
        self.items: list[str] = []
        """Test items whose method or code was replaced."""
        self.hooks: list[str] = []
        """Hooks implemented outside pytest's and its plugins' files."""

    def pytest_configure(self, config) -> None:  # type: ignore[no-untyped-def]
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item) -> None:  # type: ignore[no-untyped-def]
        for key in vars(item):
            if any(isinstance(vars(c).get(key), types.FunctionType) for c in type(item).__mro__):
                self.items.append(f"{item.nodeid}: its method {key} was replaced")
        function = getattr(item, "function", None)
        try:
            inner = inspect.unwrap(function) if function is not None else None
        except ValueError:  # a __wrapped__ cycle
            inner = None
        if not isinstance(inner, types.FunctionType) or not _inside(inner.__code__.co_filename, self.root):
            return  # the test's code comes from pytest, a plugin or the standard library
        if inner.__code__ not in self.code_of(inner.__code__.co_filename):
            self.items.append(f"{item.nodeid}: its code is not what {inner.__code__.co_filename} says")

    def code_of(self, path: str) -> set[types.CodeType]:
        """Every code object of a file of the repository, compiled as it is and as pytest rewrites it."""
        if path not in self.compiled:
            found: set[types.CodeType] = set()
            try:
                with open(path, "rb") as f:
                    source = f.read()
                tops = [compile(source, path, "exec", dont_inherit=True)]
            except (OSError, SyntaxError, ValueError):
                tops = []
            try:
                from _pytest.assertion.rewrite import _rewrite_test

                tops.append(_rewrite_test(pathlib.Path(path), self.config)[1])
            except Exception:  # not a file pytest rewrites, or another pytest version's internals
                pass
            while tops:
                code = tops.pop()
                found.add(code)
                tops += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            self.compiled[path] = found
        return self.compiled[path]

    def pytest_sessionfinish(self, session) -> None:  # type: ignore[no-untyped-def]
        """Hooks implemented outside pytest's and its plugins' files, other than by a conftest.py."""
        for name, caller in vars(session.config.pluginmanager.hook).items():
            for impl in caller.get_hookimpls() if hasattr(caller, "get_hookimpls") else []:
                code = getattr(impl.function, "__code__", None)
                where = code.co_filename if code is not None else repr(impl.function)
                trusted = os.path.isfile(where) and (
                    not _inside(where, self.root) or os.path.basename(where) == "conftest.py"
                )
                if not trusted:
                    self.hooks.append(f"hook {name} implemented in {where}")


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) of every process this one can see."""
    found: dict[int, tuple[int, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[int(entry)] = (int(fields[1]), fields[0])
    return found


def stop_the_others() -> None:
    """Kills every process of the sandbox except this one and its ancestors (the executor and what
    started us), so that nothing the code under test started can touch the report once it is written."""
    processes = _processes()
    keep = {os.getpid()}
    pid = os.getpid()
    while pid in processes and processes[pid][0] not in keep and processes[pid][0] > 0:
        pid = processes[pid][0]
        keep.add(pid)
    for _ in range(50):  # a forking process is killed child by child
        others = [p for p, (_, state) in _processes().items() if p not in keep and state != "Z"]
        if not others:
            return
        for p in others:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def write_report(path: str, report: dict[str, Any]) -> None:
    """Writes under a fresh name, renames over whatever is at `path`, and prints the digest last."""
    data = json.dumps(report).encode()
    fresh = f"{path}.{os.getpid()}-{hashlib.sha256(os.urandom(16)).hexdigest()[:16]}"
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, data)
    os.close(fd)
    os.replace(fresh, path)
    sys.stdout.write(f"\n{DONE} {hashlib.sha256(data).hexdigest()}\n")
    sys.stdout.flush()


def undumpable() -> None:
    """PR_SET_DUMPABLE 0: processes of our own user can no longer ptrace this one, nor open its
    /proc/PID/mem or /proc/PID/fd. Where prctl cannot be called (not Linux), nothing changes."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def run_child(target: str, ini: str, root: str, before: Fingerprint, log: str) -> dict[str, Any]:
    """Runs one target (a test file or a test) in a forked child and returns what it sent: its outcomes
    and findings, or an empty answer when it died without one."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of the parent's but the answer pipe stays open
        try:
            _child(target, ini, root, before, log, write_end)
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = _answer_of(pid, read_end)
    os.close(read_end)
    try:
        answer = json.loads(b"".join(chunks))
        return answer if isinstance(answer, dict) else {}
    except ValueError:
        return {}


def _answer_of(pid: int, read_end: int) -> list[bytes]:
    """What the child sent until it ended. A process it left behind may hold the pipe open: reading stops
    when the child is gone, not at end of file."""
    chunks: list[bytes] = []
    ended = False
    reads_after_end = 0
    while reads_after_end < 64:  # a process left behind that floods the pipe spoils only this answer
        ready, _, _ = select.select([read_end], [], [], 0.05)
        if ready:
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            reads_after_end += ended
        elif ended:
            break
        if not ended:
            ended = os.waitpid(pid, os.WNOHANG)[0] != 0
    if not ended:
        os.waitpid(pid, 0)
    return chunks


def _child(target: str, ini: str, root: str, before: Fingerprint, log: str, answer_fd: int) -> None:
    for block in [f for f in sys.meta_path if isinstance(f, RepositoryBlock)]:
        block.lift()
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    keep = os.dup2(answer_fd, 3) if answer_fd != 3 else 3
    os.closerange(4, 1 << 16)
    sys.stdout = os.fdopen(1, "w", closefd=False)
    sys.stderr = os.fdopen(2, "w", closefd=False)
    os.chdir(root)
    sys.path.insert(0, root)
    recorder = Recorder()
    guard = Guard(root)
    args = ["-c", ini, "--rootdir", root, "-p", "no:cacheprovider", "-q", "--no-header", *QUIET, target]
    exit_code = int(pytest.main(args, plugins=[recorder, guard]))
    answer = {
        "outcomes": recorder.outcomes,
        "collect_errors": recorder.collect_errors,
        "exit_code": exit_code,
        "tampering": [*_capped(before.changes()), *_capped(guard.hooks), *_capped(guard.items)],
    }
    data = json.dumps(answer).encode()
    while data:
        data = data[os.write(keep, data) :]


def _own(answer: dict[str, Any], target: str) -> dict[str, str]:
    """The outcomes a child may decide: those of its own target (a file's tests, or one test and its
    parametrized cases), with outcome names we know."""
    outcomes = answer.get("outcomes")
    if not isinstance(outcomes, dict):
        return {}
    known = ("passed", "failed", "error", "skipped")
    return {str(k): str(v) for k, v in outcomes.items() if _within(str(k), target) and v in known}


def _within(test_id: str, target: str) -> bool:
    if "::" not in target:
        return test_id.split("::", 1)[0] == target
    return test_id == target or test_id.startswith(f"{target}[")


class RepositoryBlock:
    """A finder first on `sys.meta_path` of the parent that refuses every module found inside the
    repository. The parent imports pytest's and the environment's plugins, and an editable install's
    `.pth` may put the repository (or its `src/`) on `sys.path`, where an optional import of a plugin
    would find a file the agent wrote; no such import gets through. Children take it off first."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.path = list(sys.path)

    def install(self) -> None:
        """Puts the block first and takes the repository's folders off `sys.path`."""
        sys.path[:] = [p for p in self.path if not _inside(os.path.join(p or ".", "x"), self.root)]
        sys.meta_path.insert(0, self)

    def lift(self) -> None:
        """What a child does before it runs the tests: the finder goes, `sys.path` is as it was."""
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        sys.path[:] = self.path

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            places = [spec.origin or "", *(spec.submodule_search_locations or [])]
            if any(p and _inside(p, self.root) for p in places):
                raise ImportError(f"the grader's runner does not import {name} from the repository")
            return spec
        return None


def warm_up(root: str) -> None:
    """Imports pytest's own plugins and the environment's (`pytest11` entry points) in the parent, with
    every module of the repository refused (`RepositoryBlock`): they are fingerprinted before any code
    under test runs, so a plugin that patches pytest when imported is not taken for tampering, and every
    child starts warm instead of importing them again (anyio's plugin alone, with trio, took half a
    second a child). Then the heap is frozen, so that a child's collections skip what it inherited."""
    RepositoryBlock(root).install()
    from _pytest.config import default_plugins

    modules = [f"_pytest.{plugin}" for plugin in default_plugins] + ["unittest"]
    if not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        from importlib.metadata import entry_points

        try:
            found: Any = entry_points(group="pytest11")
        except TypeError:  # Python before 3.10: a dict of groups
            found = entry_points().get("pytest11", [])
        modules += [ep.value.split(":", 1)[0] for ep in found]
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # a plugin that fails here fails again in the child, where pytest reports it
            pass
    import gc

    gc.collect()
    gc.freeze()


def main() -> None:
    report_path, ini, root, *targets = sys.argv[1:]
    files = sorted({t.split("::", 1)[0] for t in targets})
    present = [f for f in files if os.path.isfile(os.path.join(root, f))]
    warm_up(os.path.realpath(root))
    before = Fingerprint()
    tests_before = {f: _digest(os.path.join(root, f)) for f in present}
    undumpable()
    in_sandbox = os.environ.get("HARNESS_GRADER_SANDBOX") == "1"

    # Everything before this line is the grader's own; a run whose output lacks it never got to the
    # code under test, so its failure is the harness's (an infra error), not the patch's.
    print(READY, flush=True)
    outcomes: dict[str, str] = {}
    collect_errors: list[str] = []
    tampering: list[str] = []
    log = os.path.join(os.path.dirname(os.path.abspath(report_path)), "children.log")
    order = [t for t in dict.fromkeys(targets) if t.split("::", 1)[0] in present]
    random.SystemRandom().shuffle(order)
    for target in order:
        answer = run_child(target, ini, root, before, log)
        if in_sandbox:  # what the child left running must not see the next child, nor the report
            stop_the_others()
        outcomes.update(_own(answer, target))
        found = answer.get("tampering")
        tampering += [str(t) for t in found] if isinstance(found, list) else []
        errors = answer.get("collect_errors")
        collect_errors += [str(e) for e in errors] if isinstance(errors, list) else []
    rewritten = [f"{f} was rewritten" for f in present if _digest(os.path.join(root, f)) != tests_before[f]]
    report = {
        "outcomes": outcomes,
        "collect_errors": collect_errors,
        "missing_files": sorted(set(files) - set(present)),
        "tampering": [*dict.fromkeys(tampering), *_capped(rewritten)],  # each child capped its own
    }
    write_report(report_path, report)
    # Nothing of the code under test ran here; os._exit all the same, as a child does.
    os._exit(0)


if __name__ == "__main__":
    main()
