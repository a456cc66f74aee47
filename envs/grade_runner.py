"""Runs the hidden tests inside the grading sandbox and writes one outcome per test id to a report file.

Standard library and pytest only; started as `python3 -I -B grade_runner.py REPORT INI ROOT PLAN`, so the
environment and the repository's folder on sys.path have no say over how Python starts. PLAN is a JSON
file: `targets` (a test file, or one test's node id, each run alone) and `held` (the real copies and
canaries, by run name, which this runner writes itself), `child_timeout_s` and `base_modules` (the
top-level modules the task's base tree defines, read by the host from the pristine repository). pytest is
pointed at the grader's own ini file (`-c`), so the repository's test settings have no effect. Outcomes
come from pytest's own reports. In a child the repository's folders come first on sys.path, and what
pytest loaded of a package the base defines (attrs, pluggy, iniconfig, packaging) is taken out of
`sys.modules`: the tests import the repository's code, never the grader's copy of it.

Outcomes are decided where the agent's code never ran. This process (the parent) makes itself undumpable
(no process of the sandbox's user may ptrace it or open its memory or file descriptors) and forks a
`Zygote` before it reads the plan: the zygote imports pytest and the environment's plugins, never the
repository (`RepositoryBlock`), fingerprints them, and forks one child per target, in a random order the
parent picks. The parent then reads the plan and deletes it. For each target it writes that target's
file if it holds it, has the zygote fork a child, and sends the child its one target through a pipe; the
child answers with its outcomes and findings on another pipe and ends. The parent keeps only outcomes of
that child's own target, kills every process the child left, and puts the folders a child can write back
as they were (`Scratch`) before the next one starts. So a child learns nothing of the other targets: not
from a command line, not from memory it inherited, not from files on disk or left by earlier children.
Code under test can forge at most the outcomes of its own target, without knowing whether it is a real
test or a canary: a forger that passes tests wholesale also passes the canaries, which fail on a correct
fix.

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

# First of all, with only what Python's start-up imported (sys, os): a task environment's path file puts the
# repository (or its src/) on sys.path, where the standard library's optional imports while pytest loads
# (`org` in copy, `msvcrt` in subprocess) would find and run a file the agent wrote, in this process, before
# anything is guarded. Children get the full path back (`RepositoryBlock.lift`).
import os
import sys


def _inside(path: str, root: str) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(root).rstrip("/") + "/")


def _environment_path() -> list[str]:
    """The tests' sys.path. Started with `-S` (as the grader starts it), Python ran no `site` and no
    `.pth` file: the path is worked out here as `site` would make it, its site folders and the folders
    their `.pth` files name, without running the `import` lines of any `.pth` file (but one that only
    adds a site folder, `import site; site.addsitedir('FOLDER')`, as a task environment's does, is read
    as that folder). Without `-S`: as Python's start-up made it."""
    if not sys.flags.no_site:
        return list(sys.path)
    import site

    found = list(sys.path)
    venv, system = _prefixes()
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    libs = dict.fromkeys([getattr(sys, "platlibdir", "lib"), "lib"])
    own = [os.path.join(venv, lib, version, "site-packages") for lib in libs] if venv else []
    for folder in [*own, *(site.getsitepackages(system) if system else [])]:
        _add_site_folder(folder, found, 0)
    return found


def _add_site_folder(folder: str, found: list[str], depth: int) -> None:
    """`folder` and the entries its `.pth` files name, into `found` (what `site.addsitedir` adds)."""
    if depth > 4 or not os.path.isdir(folder) or folder in found:
        return
    found.append(folder)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".pth") and not n.startswith("."))
    except OSError:
        return
    for name in names:
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.rstrip()
            added = ADDSITEDIR.match(line)
            if added is not None:
                _add_site_folder(added.group(2), found, depth + 1)
            elif line and not line.startswith(("#", "import ", "import\t")):
                entry = os.path.abspath(os.path.join(folder, line))
                if os.path.exists(entry) and entry not in found:
                    found.append(entry)


def _prefixes() -> tuple[str, list[str]]:
    """(a virtual environment's folder or '', the system prefixes whose site folders count): the
    environment's `pyvenv.cfg` read as `site.venv` reads it (which would also run its `.pth` files). A
    virtual environment's own site folder is laid out as venv makes it, whatever the system's `site` says
    of its own (Debian's dist-packages). User site folders never (the runner is also started with -I)."""
    bin_dir = os.path.dirname(os.path.abspath(sys.executable))
    system = [sys.prefix, sys.exec_prefix]
    for conf in (os.path.join(bin_dir, "pyvenv.cfg"), os.path.join(os.path.dirname(bin_dir), "pyvenv.cfg")):
        if os.path.isfile(conf):
            include = "true"
            with open(conf, encoding="utf-8") as f:
                for line in f:
                    key, sep, value = line.partition("=")
                    if sep and key.strip().lower() == "include-system-site-packages":
                        include = value.strip().lower()
            return os.path.dirname(bin_dir), system if include == "true" else []
    return "", system


ADDSITEDIR = __import__("re").compile(r"""^import site; site\.addsitedir\((['"])([^'"]+)\1\)$""")
"""A `.pth` line that only adds a site folder (a task environment's in a Docker image)."""
FULL_PATH = _environment_path()
"""The sys.path the tests run with (children get it back; this process never holds the repository's)."""
if __name__ == "__main__" and len(sys.argv) > 3:  # run as the grader's runner, not imported by the harness
    sys.path[:] = [p for p in FULL_PATH if not _inside(os.path.join(p or ".", "x"), sys.argv[3])]

import hashlib
import importlib
import inspect
import itertools
import json
import operator
import random
import re
import resource
import select
import signal
import stat
import time
import types
from typing import Any

# Isolated mode (-I) keeps the script's and the repository's folders off sys.path: this is the real pytest.
import pytest

EXPECT = "harness_expect"
"""The module rewritten hidden tests report actual values to (`tasks/plain.py`, shipped beside this file)."""
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
PYTEST_FIXTURES = ("_UnitTestCase__pytest_class_setup", "_UnitTestCase__pytest_method_setup")
"""Fixtures pytest 7's unittest plugin sets on every TestCase class it collects: on `unittest.TestCase`
itself when a test module imports that by name. Taken as pytest's only when they are functions of
pytest's own unittest module."""
SCRATCH = ("/tmp", "/dev/shm", "/dev/mqueue")
"""The folders a sandbox's user may write besides the repository (envs/remote.py's reset clears them)."""
MAX_ANSWER = 16 << 20
"""Bytes of a child's answer read at most."""
PLAIN = ["--assert=plain", "--tb=native"]
"""Asserts are not rewritten and failures are told in Python's own traceback: an outcome does not depend
on how a failure explains itself. Rewriting (done again by `Guard` to compare code) was half the time of a
child, and pytest's own traceback of a failure (source, locals, every frame's file resolved) a tenth of a
failing child's; plain asserts also keep pytest from warning that the plugins imported by the zygote
cannot be rewritten."""


OFF = ("cacheprovider", "pastebin", "stepwise", "setuponly", "setupplan")
"""pytest's plugins a grading run leaves out: they act only on options it never sets (the cache would
also carry what one run saw into the next) and define no fixture a test could ask for. Each one left in
costs every child its options and hooks."""


class Recorder:
    """A pytest plugin object: one outcome per node id (passed, failed, error, skipped)."""

    def __init__(self, expect: Any = None) -> None:
        self.outcomes: dict[str, str] = {}
        self.collect_errors: dict[str, str] = {}
        self.crashes: dict[str, list[object]] = {}
        """Node id -> [exception type, line in the test file] of a test whose call failed: a canary
        must fail at its own assertion."""
        self.expect = expect

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item) -> None:  # type: ignore[no-untyped-def]
        if self.expect is not None:  # the observations of a rewritten assertion are this test's
            self.expect.CURRENT[0] = item.nodeid

    def pytest_runtest_logreport(self, report) -> None:  # type: ignore[no-untyped-def]
        if report.when == "call":
            outcome = report.outcome
            if report.failed:
                self.crashes[report.nodeid] = crash_site(report)
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
            self.collect_errors[report.nodeid] = collect_message(report)


def _functions(value: object) -> list[object]:
    """The functions a value runs: a property's, a static or class method's, or itself."""
    if isinstance(value, property):
        return [value.fget, value.fset, value.fdel]
    if isinstance(value, (staticmethod, classmethod)):  # the sandbox's Python may be older than 3.10
        return [value.__func__]
    return [value]


def collect_message(report: Any) -> str:
    """A collection error's last line (`ModuleNotFoundError: No module named 'x'`): pytest's crash line
    where the report has one, else the last `E` line of its text."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and crash.message:
        return str(crash.message)[:300]
    lines = str(report.longrepr).strip().splitlines()
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (errors or lines or ["(no message)"])[-1][:300]


def crash_site(report: Any) -> list[object]:
    """[the exception's type name, its line] of a failed call, when it was raised in the test's own file
    (the innermost frame); the line is 0 when it came from anywhere else."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = str(getattr(crash, "message", "") or "")
    kind = message.split(":", 1)[0].strip() if message else ""
    path = report.nodeid.split("::", 1)[0]
    frames = re.findall(r'File "([^"]+)", line (\d+)', str(report.longrepr))
    innermost = frames[-1] if frames else ("", "0")
    here = innermost[0] == path or innermost[0].endswith("/" + path)
    return [kind[:200], int(innermost[1]) if here else 0]


def _parts(value: object) -> tuple[object, ...]:
    """The value and, for a function (or a property, static or class method), its code and defaults."""
    parts: list[object] = [value]
    for f in _functions(value):
        if isinstance(f, types.FunctionType):
            parts += [f.__code__, f.__defaults__, f.__kwdefaults__]
    return tuple(parts)


_GONE = object()
"""What a fingerprinted name that is no longer there is looked up as."""


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(a[i] is b[i] for i in range(len(a)))


def _unchanged(value: object, parts: tuple[object, ...]) -> bool:
    """`_same(_parts(value), parts)`, quicker for a plain function (most of what is compared)."""
    if type(value) is types.FunctionType and len(parts) == 4:
        return (
            value is parts[0]
            and value.__code__ is parts[1]
            and value.__defaults__ is parts[2]
            and value.__kwdefaults__ is parts[3]
        )
    return _same(_parts(value), parts)


class Space:
    """One module's or class's names as the fingerprint took them: objects, and functions (properties,
    static and class methods too) with their code and defaults (`_parts`)."""

    def __init__(self, label: str, owner: object) -> None:
        self.label, self.owner = label, owner
        self.plain: dict[str, object] = {}
        self.functions: dict[str, tuple[object, ...]] = {}
        for key, value in vars(owner).items():
            parts = _parts(value)
            if len(parts) == 1:
                self.plain[key] = value
            else:
                self.functions[key] = parts
        self.known = self.plain.keys() | self.functions.keys() | PYTEST_ADDS

    def changes(self) -> list[str]:
        now = vars(self.owner)
        found = []
        changed = [key for key, value in self.plain.items() if now.get(key, _GONE) is not value]
        changed += [k for k, parts in self.functions.items() if not _unchanged(now.get(k, _GONE), parts)]
        for key in changed:
            if key not in now:
                found.append(f"{self.label}.{key} was deleted")
            elif f"{self.label}.{key}" not in PYTEST_SETS:
                found.append(f"{self.label}.{key} was replaced")
        if isinstance(self.owner, type):
            added = [k for k in sorted(now.keys() - self.known) if not _pytests_fixture(k, now[k])]
            found += [f"{self.label}.{key} was added" for key in added]
        return found


class Fingerprint:
    """Every name of the watched modules, and every attribute of the classes they define, as objects
    (held, so that no id is reused): what the code under test would change to fake an outcome.

    `changes` first compares everything in one pass at C speed (each name's object by identity, each
    plain function's code and defaults, each class's count of names); only where that finds a difference
    does it go space by space to name what changed."""

    def __init__(self) -> None:
        self.spaces: list[Space] = []
        for name, module in sorted(sys.modules.items()):
            if name.split(".")[0] not in WATCHED or not isinstance(module, types.ModuleType):
                continue
            self.spaces.append(Space(name, module))
            for value in list(vars(module).values()):
                if isinstance(value, type) and value.__module__ == name:
                    self.spaces.append(Space(f"{name}.{value.__qualname__}", value))
        views, keys, values = [], [], []
        for space in self.spaces:
            view = vars(space.owner)  # a module's dict, or a live view of a class's
            for key, parts in [*((k, (v,)) for k, v in space.plain.items()), *space.functions.items()]:
                views.append(view.get)
                keys.append(key)
                values.append(parts[0])
        self.lookups, self.keys, self.values = tuple(views), tuple(keys), tuple(values)
        # A property's functions and a static or class method's cannot be swapped (read-only): the
        # object's identity and each function's code and defaults are all there is to compare.
        self.functions = tuple(f for v in values for f in _functions(v) if isinstance(f, types.FunctionType))
        self.code = tuple(tuple(map(get, self.functions)) for get in PARTS)
        self.classes = tuple(vars(s.owner) for s in self.spaces if isinstance(s.owner, type))
        self.sizes = tuple(map(len, self.classes))

    def unchanged(self) -> bool:
        is_ = operator.is_
        now = map(_call, self.lookups, self.keys, itertools.repeat(_GONE))
        return (
            all(map(is_, now, self.values))
            and all(
                all(map(is_, map(get, self.functions), was))
                for get, was in zip(PARTS, self.code, strict=True)
            )
            and all(map(operator.eq, map(len, self.classes), self.sizes))
        )

    def changes(self) -> list[str]:
        if self.unchanged():
            return []
        return [finding for space in self.spaces for finding in space.changes()]


_call: Any = getattr(operator, "call", None) or (lambda f, *args: f(*args))
"""`operator.call` (Python 3.11), or what it does, where the sandbox's Python is older."""
PARTS = tuple(operator.attrgetter(a) for a in ("__code__", "__defaults__", "__kwdefaults__"))
"""What a plain function is compared by, besides itself."""


def _pytests_fixture(key: str, value: object) -> bool:
    """A fixture pytest's unittest plugin set (PYTEST_FIXTURES), defined in its own file: pytest 7 wraps
    it in a function of its fixtures module that holds the original."""
    if key not in PYTEST_FIXTURES or not isinstance(value, types.FunctionType):
        return False
    import _pytest.fixtures
    import _pytest.unittest

    wrapped = getattr(getattr(value, "__pytest_wrapped__", None), "obj", None)
    files = [value.__code__.co_filename, getattr(getattr(wrapped, "__code__", None), "co_filename", "")]
    where = [_pytest.fixtures.__file__, _pytest.unittest.__file__]
    return [os.path.realpath(f) for f in files] == [os.path.realpath(f) for f in where]


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


class Guard:
    """A pytest plugin object that checks what the code under test could have done to the session:
    before each test is called, the test item and its function; at the end, the hooks."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.compiled: dict[str, set[types.CodeType]] = {}
        self.items: list[str] = []
        """Test items whose method or code was replaced."""
        self.hooks: list[str] = []
        """Hooks implemented outside pytest's and its plugins' files."""

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
        """Every code object of a file of the repository, compiled as it is (asserts are not rewritten)."""
        if path not in self.compiled:
            found: set[types.CodeType] = set()
            try:
                with open(path, "rb") as f:
                    source = f.read()
                tops = [compile(source, path, "exec", dont_inherit=True)]
            except (OSError, SyntaxError, ValueError):
                tops = []
            while tops:
                code = tops.pop()
                found.add(code)
                tops += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            self.compiled[path] = found
        return self.compiled[path]

    def pytest_sessionfinish(self, session) -> None:  # type: ignore[no-untyped-def]
        """Hooks implemented outside pytest's and its plugins' files, other than by a conftest.py."""
        trusted: dict[str, bool] = {}  # a few files implement every hook
        for name, caller in vars(session.config.pluginmanager.hook).items():
            for impl in caller.get_hookimpls() if hasattr(caller, "get_hookimpls") else []:
                code = getattr(impl.function, "__code__", None)
                where = code.co_filename if code is not None else repr(impl.function)
                if where not in trusted:
                    trusted[where] = os.path.isfile(where) and (
                        not _inside(where, self.root) or os.path.basename(where) == "conftest.py"
                    )
                if not trusted[where]:
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


def stop_the_others(spare: set[int]) -> None:
    """Kills every process of the sandbox except this one, its ancestors (the executor and what started
    us) and `spare`, so that nothing the code under test started can touch a later child or the report."""
    processes = _processes()
    keep = {os.getpid(), *spare}
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


def _send(fd: int, data: bytes) -> None:
    """One message: its length in 4 bytes, then the bytes."""
    data = len(data).to_bytes(4, "big") + data
    while data:
        data = data[os.write(fd, data) :]


def _receive(fd: int, limit: int = MAX_ANSWER) -> bytes:
    """One message sent by `_send`; b"" at end of file or when it claims more than `limit` bytes."""
    head = _read_exactly(fd, 4)
    size = int.from_bytes(head, "big") if len(head) == 4 else limit + 1
    return _read_exactly(fd, size) if size <= limit else b""


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = os.read(fd, min(size - got, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _drain(fd: int) -> bytes:
    """Whatever is in the pipe now (what a child left there, or its answer), up to MAX_ANSWER."""
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_ANSWER and select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class Zygote:
    """The process every child is forked from: forked from the parent before the parent reads the plan,
    it imports pytest and the plugins and fingerprints them (`warm_up`), and never learns what any
    child runs. A child reads its one target from a pipe the parent writes, so neither the zygote's
    memory, nor a child's copy of it, nor the command line holds the list of targets or the test files."""

    def __init__(self, ini: str, root: str) -> None:
        self.control = os.pipe()  # parent -> zygote: b"r" (fork a child) or end of file
        self.events = os.pipe()  # zygote -> parent: b"w" (warm) and b"e" (a child ended)
        self.targets = os.pipe()  # parent -> the child of the moment
        self.answers = os.pipe()  # the child of the moment -> parent
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self._serve(ini, root)
            finally:
                os._exit(0)
        for fd in (self.control[0], self.events[1], self.answers[1]):
            os.close(fd)
        self.alive = os.read(self.events[0], 1) == b"w"

    def _serve(self, ini: str, root: str) -> None:
        os.close(self.control[1])
        os.close(self.events[0])
        os.close(self.targets[1])
        os.close(self.answers[0])
        warm_up(root)
        load_expect(os.path.dirname(os.path.abspath(__file__)))
        os.chdir(root)
        config = premade(session_args(ini, root))
        before = Fingerprint()
        os.write(self.events[1], b"w")
        while os.read(self.control[0], 1) == b"r":
            pid = os.fork()
            if pid != 0:
                os.write(self.events[1], b"p" + pid.to_bytes(4, "big"))
            if pid == 0:
                os.close(self.control[0])
                os.close(self.events[1])
                target, _, names = _receive(self.targets[0]).decode().partition("\0")
                os.close(self.targets[0])
                try:
                    provided = set(filter(None, names.split(",")))
                    _child(target, ini, root, before, self.answers[1], config, provided)
                except BaseException:  # into the child's log: the runner reports its last line
                    import traceback

                    traceback.print_exc()
                    sys.stderr.flush()
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            os.write(self.events[1], b"e")

    def run(
        self, target: str, limit: float | None = None, provided: tuple[str, ...] = ()
    ) -> tuple[dict[str, Any], bool]:
        """Runs `target` in a new child and returns its answer (empty when it died without one) and
        whether it ran past `limit` seconds (then it is killed, with what it started). `provided`: the
        top-level modules the repository's base defines (`evict_shadowed`). Reading stops when the child
        is gone, not at end of file: a process it left may hold the pipe open."""
        _drain(self.targets[0])  # what an earlier child wrote there is no one's target
        _drain(self.answers[0])
        try:
            os.write(self.control[1], b"r")
            _send(self.targets[1], f"{target}\0{','.join(provided)}".encode())
        except OSError:  # the zygote is gone (killed by code under test): nothing more runs
            self.alive = False
            return {}, False
        chunks: list[bytes] = []
        child, expired = 0, False
        deadline = None if limit is None else time.monotonic() + limit
        while self.alive:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.answers[0], self.events[0]], [], [], wait)
            if not ready and not expired:  # past its limit: the child goes, and its answer with it
                expired = True
                self._kill(child)
                deadline = None
                continue
            if self.answers[0] in ready:
                chunks.append(_drain(self.answers[0]))
            if self.events[0] in ready:
                event = os.read(self.events[0], 1)
                if event == b"p":
                    child = int.from_bytes(_read_exactly(self.events[0], 4), "big")
                    continue
                self.alive = event == b"e"
                break
        if expired:
            return {}, True
        chunks.append(_drain(self.answers[0]))
        message = b"".join(chunks)
        size = int.from_bytes(message[:4], "big") if len(message) >= 4 else -1
        try:
            answer = json.loads(message[4 : 4 + size]) if 0 <= size <= len(message) - 4 else {}
            return (answer if isinstance(answer, dict) else {}), False
        except ValueError:
            return {}, False

    def _kill(self, child: int) -> None:
        """Kills a child past its limit; in a sandbox, every process but this one's line and the zygote
        (what the child started goes too), on the host the child alone."""
        if IN_SANDBOX[0]:
            stop_the_others(spare={self.pid})
        elif child > 0:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        os.close(self.control[1])
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


class Scratch:
    """The folders a child can write, as they were before the first child, every file's content kept:
    made again whole after each child (`rebuild`), so that no child leaves anything for a later one (a
    forger that compares the files it saw could tell a canary from the real copy), not even which entries
    it touched.

    A mount point under a root (another file system: the read-only binds that give a bubblewrap sandbox
    the harness's Python when it lives under /tmp) is neither read nor put back: nothing in the sandbox can
    make, remove or write one, and reading a bound virtual environment cost every grade gigabytes."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = [os.path.realpath(r) for r in roots if os.path.isdir(r) and not os.path.islink(r)]
        self.entries: dict[str, tuple[tuple[int, ...], bytes | None]] = {}
        """path -> (its lstat key, its content for a file or its target for a link)"""
        self.times: dict[str, tuple[int, int]] = {}
        """path -> (atime, mtime) in ns, as they were: a folder's times are put back after every child"""
        self.xattrs: dict[str, dict[str, bytes]] = {}
        """path -> its extended attributes, as they were: put back after every child"""
        self.children: dict[str, list[str]] = {}
        self.mounts: set[str] = set()
        """Mount points under the roots, left as they are."""
        for root in self.roots:
            self._scan(root, os.lstat(root).st_dev)

    def _scan(self, path: str, device: int) -> None:
        st = os.lstat(path)
        if st.st_dev != device:
            self.mounts.add(path)
            return
        payload = None
        if stat.S_ISLNK(st.st_mode):
            payload = os.fsencode(os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            try:
                with open(path, "rb") as f:
                    payload = f.read()
            except OSError:
                pass
        self.entries[path] = (_key(st), payload)
        self.times[path] = (st.st_atime_ns, st.st_mtime_ns)
        self.xattrs[path] = _xattrs(path) if not stat.S_ISLNK(st.st_mode) else {}
        if stat.S_ISDIR(st.st_mode):
            try:
                names = sorted(os.listdir(path))
            except OSError:
                names = []
            self.children[path] = names
            for name in names:
                self._scan(os.path.join(path, name), device)

    def _on_disk(self, folder: str) -> list[str]:
        """The entries of `folder` as they are now, mount points left out."""
        try:
            names = os.listdir(folder)
        except OSError:
            names = []
        return [p for p in (os.path.join(folder, name) for name in names) if p not in self.mounts]

    def rebuild(self) -> None:
        """Every entry under the roots removed and made again from what was taken, in one order: what a
        child changed and what it did not come back alike, with new inodes and change times for all, so
        that which entries a child touched (`restore` makes only those again) is no mark for a later one.
        Mount points, and the folders that hold them, stay."""
        for root in self.roots:
            self._clear(root)
            for name in self.children.get(root, []):
                self._recreate(os.path.join(root, name))
            _chmod(root, self.entries[root][0][0])
            self._put_back(root)
            self._rekey(root)

    def _clear(self, folder: str) -> None:
        _chmod(folder, 0o700)
        for path in self._on_disk(folder):
            if any(m.startswith(path + "/") for m in self.mounts):
                self._clear(path)  # it stays, and so does its place in the folder
            else:
                _remove(path)

    def _put_back(self, path: str) -> None:
        """The entry's extended attributes and times as they were (a child can set both on its own files:
        a mailbox for the next child that the entry's content does not show)."""
        _set_xattrs(path, self.xattrs.get(path, {}))
        try:
            os.utime(path, ns=self.times[path], follow_symlinks=False)
        except (OSError, KeyError, NotImplementedError):
            pass

    def _recreate(self, path: str) -> None:
        if path in self.mounts:
            return
        key, payload = self.entries[path]
        mode = key[0]
        try:
            if stat.S_ISDIR(mode):
                if not os.path.isdir(path):  # one that holds a mount point was never removed
                    os.mkdir(path, 0o700)
                for name in self.children.get(path, []):
                    self._recreate(os.path.join(path, name))
                _chmod(path, mode)
            elif stat.S_ISLNK(mode) and payload is not None:
                os.symlink(payload, path)
            elif stat.S_ISREG(mode) and payload is not None:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(payload)
                _chmod(path, mode)
            if not stat.S_ISLNK(mode):
                self._put_back(path)
            self._rekey(path)
        except OSError:
            pass

    def _rekey(self, path: str) -> None:
        try:
            self.entries[path] = (_key(os.lstat(path)), self.entries[path][1])
        except OSError:
            pass


def _xattrs(path: str) -> dict[str, bytes]:
    """An entry's extended attributes; none where the file system has none."""
    try:
        return {
            name: os.getxattr(path, name, follow_symlinks=False)
            for name in os.listxattr(path, follow_symlinks=False)
        }
    except (OSError, AttributeError):
        return {}


def _set_xattrs(path: str, wanted: dict[str, bytes]) -> None:
    """Makes an entry's extended attributes exactly `wanted` (those it may set: the user.* namespace)."""
    now = _xattrs(path)
    for name in now.keys() - wanted.keys():
        try:
            os.removexattr(path, name, follow_symlinks=False)
        except OSError:
            pass
    for name, value in wanted.items():
        if now.get(name) != value:
            try:
                os.setxattr(path, name, value, follow_symlinks=False)
            except OSError:
                pass


def _key(st: os.stat_result) -> tuple[int, ...]:
    """What changes with any write to an entry: the change time cannot be set back by its owner."""
    return (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _chmod(path: str, mode: int) -> None:
    try:
        os.chmod(path, stat.S_IMODE(mode))
    except OSError:
        pass


def _remove(path: str) -> None:
    """Removes a file, link or whole folder, whatever modes a child left on it."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            _chmod(path, 0o700)
            for name in os.listdir(path):
                _remove(os.path.join(path, name))
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass


def remove_ipc(known: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """Removes System V shared memory, semaphores and message queues not in `known` (what a child
    made lives on after it); returns what there is. Where they cannot be listed, nothing."""
    found = set()
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                found |= {(kind, int(line.split()[1])) for line in f.read().splitlines()[1:] if line.strip()}
        except (OSError, ValueError, IndexError):
            continue
    extra = found - known
    if extra:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            for kind, ident in extra:  # IPC_RMID = 0
                if kind == "sem":
                    libc.semctl(ident, 0, 0)
                else:
                    getattr(libc, f"{kind}ctl")(ident, 0, None)
        except (OSError, AttributeError):
            pass
    return found - extra


def session_args(ini: str, root: str) -> list[str]:
    """pytest's arguments for a child, but its target."""
    off = [arg for plugin in OFF for arg in ("-p", f"no:{plugin}")]
    return ["-c", ini, "--rootdir", root, *off, "-q", "--no-header", *PLAIN]


def premade(args: list[str]) -> Any:
    """A pytest configuration with pytest's own plugins registered, made once in the zygote, so that a
    child does not register them all again (that was a third of a child's time); None where this
    pytest's internals differ, and a child then runs `pytest.main` as it is."""
    try:
        from _pytest.config import get_config

        config = get_config(list(args))
    except Exception:
        return None
    _reuse_option_parsers(config)
    return config


def _reuse_option_parsers(config: Any) -> None:
    """pytest builds its argparse parser from scratch each time it parses (five times in a child's
    configuration: 5 of a child's 12 ms to configure, pytest 7.2 in the sandbox image). The parser made
    for one set of options is kept and handed out again while no option is added (a plugin or conftest
    that adds one gets a fresh parser); built once here, so that every child starts with it."""
    parser_type: Any = type(getattr(config, "_parser", None))
    build = getattr(parser_type, "_getparser", None)
    if build is None or not hasattr(config._parser, "_groups") or not hasattr(config._parser, "_anonymous"):
        return  # another pytest: every child builds its own, as pytest does

    def reused(parser: Any) -> Any:
        groups = [*parser._groups, parser._anonymous]
        key = (
            tuple(map(id, groups)),
            tuple(len(g.options) for g in groups),
            parser.prog,
            id(parser.extra_info),
        )
        kept = vars(parser).get("_harness_parser")
        if kept is None or kept[0] != key:
            kept = (key, build(parser))
            parser._harness_parser = kept
        return kept[1]

    parser_type._getparser = reused
    try:
        reused(config._parser)
    except Exception:
        parser_type._getparser = build


def _mark_items_checked() -> None:
    """pytest marks each Item class the first time it makes one, after checking its bases
    (`_check_item_and_collector_diamond_inheritance`). Marked here for pytest's own item classes, whose
    bases pass that check, so that a child does not add the mark to them itself: a class that gained a
    name sends the fingerprint's check down its slow path, name by name (3 of a child's 5 ms in it)."""
    from _pytest.nodes import Collector, Item

    mark = "_pytest_diamond_inheritance_warning_shown"
    found, todo = [], [Item]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    for cls in found:
        ours = cls.__module__.split(".")[0] in ("_pytest", "pytest") and mark not in vars(cls)
        if ours and not any(issubclass(base, Collector) for base in cls.__bases__):
            setattr(cls, mark, True)


def run_pytest(config: Any, args: list[str], plugins: list[object]) -> int:
    """`pytest.main(args, plugins)` on a premade configuration: what `_prepareconfig` and `main` do."""
    if config is None:
        return int(pytest.main(args, plugins=plugins))
    manager = config.pluginmanager
    try:
        for plugin in plugins:
            manager.register(plugin)
        config = manager.hook.pytest_cmdline_parse(pluginmanager=manager, args=args)
        try:
            return int(config.hook.pytest_cmdline_main(config=config))
        finally:
            config._ensure_unconfigure()
    except pytest.UsageError as e:
        sys.stderr.write(f"ERROR: {e}\n")
        return int(pytest.ExitCode.USAGE_ERROR)


AUDITED = frozenset(
    {
        "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "sys.addaudithook",
        "gc.get_referrers", "gc.get_referents", "gc.get_objects", "object.__getattr__", "ctypes.dlopen",
        "ctypes.dlsym", "ctypes.cdata", "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at", "open",
    }
)  # fmt: skip
"""Audit events (PEP 578) a fix has no business raising from the repository's own code: frame and
traceback introspection, tracing and profiling hooks, heap walks, ctypes, and `open` of the test file or
the grader's files."""
PASS_THROUGH = ("logging", "warnings", "unittest", "doctest")
"""Standard library packages whose own use of frames is theirs (a logger finding its caller)."""
CODE_READS = frozenset({"__code__", "__defaults__", "__kwdefaults__", "__globals__"})
"""A function's parts the standard library reads to make signatures and type hints (`inspect.signature`,
which `@dataclass` calls; `typing.get_type_hints`): its own reads, not the caller's. Read by the
repository's own frame they are still recorded."""
MAX_AUDIT = 20
"""Audit findings a child reports at most."""


class Audit:
    """An audit hook (PEP 578: code cannot remove it), added in each child before any code of the
    repository runs. It records the audited events raised by the repository's own code (not its tests):
    the frame that raised one, after any frames of the standard library between (so `inspect.stack()`
    counts as its caller's), is a file under the repository that is no test file. Its record goes into
    the child's answer, and a child's answer without it is not believed."""

    def __init__(self, root: str, watched: list[str]) -> None:
        self.root = os.path.realpath(root)
        self.watched = {os.path.realpath(p) for p in watched}
        self.names = {os.path.basename(p) for p in watched}
        self.stdlib = os.path.dirname(os.path.realpath(os.__file__))
        self.kinds: dict[str, str] = {}
        self.found: list[str] = []
        self.busy = False

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in AUDITED or self.busy or len(self.found) >= MAX_AUDIT:
            return
        if event == "open" and not (args and isinstance(args[0], str) and self._watched(args[0])):
            return
        self.busy = True  # sys._getframe below raises an audit event of its own
        try:
            code_read = event == "object.__getattr__" and len(args) > 1 and args[1] in CODE_READS
            where = self._raised_by(through_stdlib=not code_read)
            if where is not None:
                what = f"opened {os.path.basename(str(args[0]))}" if event == "open" else event
                self.found.append(f"{where}: {what}")
        except Exception:
            pass
        finally:
            self.busy = False

    def _watched(self, path: str) -> bool:
        return os.path.basename(path) in self.names and os.path.realpath(path) in self.watched

    def _raised_by(self, through_stdlib: bool = True) -> str | None:
        """`PATH:LINE` of the repository's non-test code that raised the event, else None. Each file's
        kind is worked out once (`kinds`): a hook that walked and resolved paths on every event tripled
        a grade's time. Without `through_stdlib`, an event the standard library raised is its own."""
        frame: types.FrameType | None = sys._getframe(2)
        while frame is not None:
            kind = self.kinds.get(frame.f_code.co_filename)
            if kind is None:
                kind = self.kinds[frame.f_code.co_filename] = self._kind(frame.f_code.co_filename)
            if kind == "through" and not through_stdlib and not frame.f_code.co_filename.startswith("<"):
                return None
            if kind == "through":
                frame = frame.f_back
                continue
            if kind == "repository":
                name = os.path.realpath(frame.f_code.co_filename)
                return f"{name[len(self.root) + 1 :]}:{frame.f_lineno}"
            return None
        return None

    def _kind(self, name: str) -> str:
        """`through` (the standard library, the import system: look at its caller), `stop` (its own use:
        logging, unittest, pytest, plugins, tests), or `repository` (the repository's own code)."""
        if name.startswith("<"):
            return "through"
        if name.startswith(self.stdlib + "/") and "-packages/" not in name:
            if any(f"/{package}/" in name or name.endswith(f"/{package}.py") for package in PASS_THROUGH):
                return "stop"
            return "through"
        real = os.path.realpath(name)
        if real.startswith(self.root + "/") and not _is_test_file(real[len(self.root) + 1 :]):
            return "repository"
        return "stop"


def _is_test_file(relative: str) -> bool:
    parts = relative.lower().split("/")
    name = parts[-1]
    tests = name.startswith("test_") or name.endswith("_test.py") or name in ("conftest.py", "tests.py")
    return tests or any(part in ("tests", "test", "testing") for part in parts[:-1])


def repository_first(root: str, path: list[str]) -> list[str]:
    """`path` with the repository's folders first (its root, then the others in their order, `src/`
    among them): the repository's code comes before the grader's own packages wherever both define a
    module (a task on attrs, whose copy pytest's environment also holds)."""
    inside = [p for p in path if _inside(os.path.join(p or ".", "x"), root)]
    return [root, *[p for p in inside if p != root], *[p for p in path if p not in inside]]


KEPT_LOADED = frozenset({"pytest", "_pytest", EXPECT})
"""Loaded modules a repository's own never replace in a child: the session that runs is this pytest."""


def evict_shadowed(names: set[str]) -> None:
    """Takes the modules pytest loaded (attrs, pluggy, iniconfig, packaging, ...) out of `sys.modules`
    where the repository's base defines a top-level module of that name: a test's import then loads the
    repository's. pytest goes on with the objects it holds; the standard library is never taken out."""
    gone = {n for n in names if n not in KEPT_LOADED and n not in sys.stdlib_module_names}
    for name in [n for n in sys.modules if n.split(".", 1)[0] in gone]:
        del sys.modules[name]


def _child(
    target: str, ini: str, root: str, before: Fingerprint, answer_fd: int, config: Any, provided: set[str]
) -> None:
    for block in [f for f in sys.meta_path if isinstance(f, RepositoryBlock)]:
        block.lift()
    try:  # no POSIX message queue can carry anything to a later child
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
    except (ValueError, OSError, AttributeError):
        pass
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(
        os.path.join(os.path.dirname(ini), "child.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600
    )
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    keep = os.dup2(answer_fd, 3) if answer_fd != 3 else 3
    os.closerange(4, 1 << 16)
    sys.stdout = os.fdopen(1, "w", closefd=False)
    sys.stderr = os.fdopen(2, "w", closefd=False)
    os.chdir(root)
    sys.path[:] = repository_first(root, sys.path)
    evict_shadowed(provided)
    expect = sys.modules.get(EXPECT)
    grader = os.path.dirname(os.path.abspath(__file__))
    audit = Audit(
        root,
        [
            os.path.join(root, target.split("::", 1)[0]),
            *(os.path.join(grader, n) for n in os.listdir(grader)),
        ],
    )
    sys.addaudithook(audit)
    recorder = Recorder(expect)
    guard = Guard(root)
    exit_code = run_pytest(config, [*session_args(ini, root), target], [recorder, guard])
    answer = {
        "outcomes": recorder.outcomes,
        "collect_errors": recorder.collect_errors,
        "crashes": recorder.crashes,
        "observed": list(expect.OBSERVED) if expect is not None else [],
        "audit": list(audit.found),
        "exit_code": exit_code,
        "tampering": [*_capped(before.changes()), *_capped(guard.hooks), *_capped(guard.items)],
    }
    _send(keep, json.dumps(answer).encode())


def _own_observations(answer: dict[str, Any], target: str) -> dict[str, list[list[Any]]]:
    """The child's observations of rewritten assertions, for its own target's tests: node id ->
    [[slot, encoding], ...] in the order they were made. Their values are compared outside the sandbox."""
    found: dict[str, list[list[Any]]] = {}
    observed = answer.get("observed")
    for entry in observed if isinstance(observed, list) else []:
        if (
            isinstance(entry, list)
            and len(entry) == 3
            and isinstance(entry[0], str)
            and _within(entry[0], target)
        ):
            found.setdefault(entry[0], []).append([entry[1], entry[2]])
    return found


def _own_crashes(answer: dict[str, Any], target: str) -> dict[str, Any]:
    crashes = answer.get("crashes")
    if not isinstance(crashes, dict):
        return {}
    return {str(k): v for k, v in crashes.items() if _within(str(k), target)}


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
        self.path = FULL_PATH

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


def load_expect(folder: str) -> None:
    """Makes `harness_expect` (the grader's `tasks/plain.py`, beside this file) importable by name, before
    any code of the repository runs: rewritten hidden tests import their `observe` from it."""
    path = os.path.join(folder, f"{EXPECT}.py")
    if not os.path.isfile(path):
        return
    import importlib.util

    spec = importlib.util.spec_from_file_location(EXPECT, path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[EXPECT] = module
    spec.loader.exec_module(module)


def load_plugins() -> None:
    """Imports pytest's own plugins and the environment's (`pytest11` entry points): with them, what
    they import of attrs, pluggy or packaging is loaded before the repository's copy may come first."""
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


def warm_up(root: str) -> None:
    """Imports pytest's own plugins and the environment's (`pytest11` entry points) in the parent, with
    every module of the repository refused (`RepositoryBlock`): they are fingerprinted before any code
    under test runs, so a plugin that patches pytest when imported is not taken for tampering, and every
    child starts warm instead of importing them again (anyio's plugin alone, with trio, took half a
    second a child). inspect's map of module files is made for them. Then the heap is frozen, so that a
    child's collections skip what it inherited."""
    RepositoryBlock(root).install()
    load_plugins()
    # inspect's map of files to modules, which pytest's report of a failure fills by resolving the path
    # of every module loaded (a third of a failing child's time): made here once, for what is loaded now.
    inspect.getmodule(compile("", "<harness-grader>", "exec"))
    try:
        _mark_items_checked()
    except (ImportError, AttributeError):  # another pytest
        pass
    import gc

    gc.freeze()  # not collected first: that took 11 ms, for garbage that a child then never visits


IN_SANDBOX = [False]
"""Whether the runner runs in a grading sandbox (HARNESS_GRADER_SANDBOX=1, which `main` takes out of the
environment before the zygote forks: the code under test is not told that the grader runs it)."""


def main() -> None:
    report_path, ini, root, plan_path = sys.argv[1:5]
    root = os.path.realpath(root)
    in_sandbox = IN_SANDBOX[0] = os.environ.pop("HARNESS_GRADER_SANDBOX", None) == "1"  # before any fork
    undumpable()
    zygote = Zygote(ini, root)  # before the plan is read: it and its children never hold it
    with open(plan_path) as f:
        plan = json.load(f)
    os.unlink(plan_path)
    if not zygote.alive:
        print("the grader's zygote did not start", flush=True)
        os._exit(1)
    # Everything before this line is the grader's own; a run whose output lacks it never got to the
    # code under test, so its failure is the harness's (an infra error), not the patch's.
    print(READY, flush=True)
    held = {str(k): str(v) for k, v in plan["held"].items()}
    targets = [str(t) for t in plan["targets"]]
    files = sorted({t.split("::", 1)[0] for t in targets})
    present = [f for f in files if f in held or os.path.isfile(os.path.join(root, f))]
    on_disk = {f: _digest(os.path.join(root, f)) for f in present if f not in held}
    scratch = Scratch([root, *(SCRATCH if in_sandbox else [])])
    ipc = remove_ipc(set()) if in_sandbox else set()
    limit = plan.get("child_timeout_s")
    limit = float(limit) if isinstance(limit, (int, float)) and limit > 0 else None
    provided = tuple(str(m) for m in plan.get("base_modules", []) if str(m).isidentifier())
    outcomes: dict[str, str] = {}
    observed: dict[str, list[list[Any]]] = {}
    crashes: dict[str, Any] = {}
    suspect: list[str] = []
    not_collected: dict[str, str] = {}
    findings: list[str] = []
    logs: list[str] = []
    order = [t for t in dict.fromkeys(targets) if t.split("::", 1)[0] in present]
    random.SystemRandom().shuffle(order)
    for target in order:
        file = target.split("::", 1)[0]
        expected = {**on_disk, **({file: _write_held(root, file, held[file])} if file in held else {})}
        answer, expired = zygote.run(target, limit, provided)
        if in_sandbox:  # what the child left running must not see the next child, nor the report
            stop_the_others(spare={zygote.pid})
        findings += [f"{f} was rewritten" for f, d in expected.items() if _digest(os.path.join(root, f)) != d]
        logs.append(f"==== {target}\n{_tail(os.path.join(os.path.dirname(ini), 'child.log'))}")
        scratch.rebuild()  # every entry made again: which ones a child touched is no mark for the next
        ipc = remove_ipc(ipc) if in_sandbox else ipc
        audit = answer.get("audit")
        if answer and not isinstance(audit, list):  # not the answer the child's own code made
            findings.append(f"{file}: the child's answer lacks the audit hook's record: not believed")
            answer = {}
        suspect += [f"{file}: at run time: {str(a)[:200]}" for a in (audit or [])[:MAX_AUDIT]]
        outcomes.update(_own(answer, target))
        observed.update(_own_observations(answer, target))
        crashes.update(_own_crashes(answer, target))
        if expired:
            not_collected.setdefault(file, f"the test file ran past its limit of {limit:g} s and was stopped")
        elif not answer:  # the child ended without a report (pytest itself failed, or it was killed)
            not_collected.setdefault(file, f"the test run ended without a report: {_why_no_report(logs[-1])}")
        errors = answer.get("collect_errors")
        if isinstance(errors, dict):  # told by the code under test: shown, never scored
            not_collected |= {
                str(k): str(v)[:300] for k, v in list(errors.items())[:5] if _within(str(k), file)
            }
        found = answer.get("tampering")
        findings += [str(t) for t in found] if isinstance(found, list) else []
    zygote.close()
    with open(os.path.join(os.path.dirname(ini), "children.log"), "w") as f:
        f.write("\n".join(logs))
    report = {
        "outcomes": outcomes,
        "missing_files": sorted(set(files) - set(present)),
        "tampering": [*dict.fromkeys(findings)],  # each child capped its own
        "collect_errors": not_collected,
        "observed": observed,
        "crashes": crashes,
        "suspicion": [*dict.fromkeys(suspect)],
    }
    write_report(report_path, report)
    # Nothing of the code under test ran here; os._exit all the same, as a child does.
    os._exit(0)


def _why_no_report(log: str) -> str:
    """The exceptions a child's log ends with (`TypeError: ...; PluginImportFailure: ...`), or its last
    line: what a grade shows of a test run that died before reporting."""
    lines = [line.rstrip() for line in log.splitlines()[1:] if line.strip()]
    raised = [line for line in lines if EXCEPTION_LINE.match(line)]
    return "; ".join(dict.fromkeys(raised[-3:] or lines[-1:] or ["no output"]))[:300]


EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failure|Exit|Interrupt)\b(: |$)")


def _write_held(root: str, file: str, content: str) -> str:
    """Writes a file the runner held for this child alone; returns its digest."""
    path = os.path.join(root, file)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = content.encode()
    with open(path, "wb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def _tail(path: str, size: int = 20000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


if __name__ == "__main__":
    main()
