"""Runs a repository's tests inside a sandbox the way the grader does, and reports each test's outcome.

Standard library, pytest and `grade_runner.py` (copied next to it) only; started as
`python3 -I -B pytest_runner.py SPEC` where SPEC is a JSON file: {"report", "ini", "root", "targets",
"trace", "tracers", "ctracer", "test_timeout", "base_modules"}. Outcomes follow `grade_runner.Recorder`'s
rules; as there, pytest reads the grader's ini file, not the repository's, the repository's folders come
first on sys.path, and pytest's own copies of the packages the repository defines (`base_modules`: attrs, pluggy,
...) are taken out of sys.modules. The report (JSON) holds one outcome per node id, the crash message of
each failure (the exception, never the traceback, so it does not quote the code under test), collection
errors, and, when `trace` names files, the lines of those files that each test ran (setup, call and
teardown), recorded by the first of `tracers` this Python offers: `sys.monitoring` (3.12+), coverage.py's
C tracer (the extension module at `ctracer`), else `sys.settrace`; the report names it (`tracer`). With
`test_timeout` (seconds), a test that runs longer is stopped (`Deadline`) and named in the report's
`timed_out`, so one endless test no longer holds the whole run until its timeout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import Any, Protocol

# Isolated mode (-I) keeps the script's and the repository's folders off sys.path: this is the real pytest.
import pytest

# The grader's runner lies next to this file: outcomes are told apart by its rules, to the letter.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grade_runner

del sys.path[0]

READY = "harness-pytest-runner-ready"


class Recorder(grade_runner.Recorder):
    """The grader's recorder, plus crash messages and, optionally, the lines each test ran."""

    def __init__(self, root: str, trace: list[str], tracers: list[str], ctracer: str | None = None) -> None:
        super().__init__()
        self.messages: dict[str, str] = {}
        self.collect_failures: dict[str, str] = {}
        self.coverage: dict[str, dict[str, set[int]]] = {}
        self.tracer = pick_tracer(Traced(root, trace), tracers, ctracer) if trace else None
        self.durations: dict[str, float] = {}
        """Node id -> seconds of its setup, call and teardown."""

    def pytest_runtest_logreport(self, report: Any) -> None:
        super().pytest_runtest_logreport(report)
        if report.failed and report.nodeid not in self.messages:
            self.messages[report.nodeid] = _crash(report)
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + float(report.duration)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.collect_failures[report.nodeid] = grade_runner.collect_message(report)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Iterator[None]:
        if self.tracer is None:
            yield
            return
        lines: dict[str, set[int]] = {}
        self.coverage[item.nodeid] = lines
        self.tracer.start(lines)
        try:
            yield
        finally:
            self.tracer.stop()


class Traced:
    """Which files are traced: a code object's file name -> its path in the repository, or None."""

    def __init__(self, root: str, trace: list[str]) -> None:
        self.prefix = root.rstrip("/") + "/"
        self.traced = set(trace)
        self.known: dict[str, str | None] = {}

    def relative(self, filename: str) -> str | None:
        if filename not in self.known:
            relative = filename[len(self.prefix) :] if filename.startswith(self.prefix) else None
            self.known[filename] = relative if relative in self.traced else None
        return self.known[filename]


class Tracer(Protocol):
    """Records the lines of traced files that run between `start` and `stop` (all threads) into `lines`."""

    name: str

    def start(self, lines: dict[str, set[int]]) -> None: ...

    def stop(self) -> None: ...


def pick_tracer(traced: Traced, tracers: list[str], ctracer: str | None) -> Tracer:
    """The first of `tracers` this Python offers ("sys.monitoring": 3.12+; "ctracer": coverage.py's C
    tracer, the extension module at `ctracer`, loads), else "settrace" (a Python call per line)."""
    for name in tracers:
        if name == "sys.monitoring" and sys.version_info >= (3, 12):
            return Monitoring(traced, sys.monitoring)
        if name == "ctracer" and ctracer:
            module = _load_ctracer(ctracer)
            if module is not None:
                return CTracer(traced, module)
    return SetTrace(traced)


class SetTrace:
    """`sys.settrace`: a Python function call for every line run in a traced file, and for every call in
    any file (more-itertools' 736 tests traced in 152-201 s, against the C tracer's 58-77 s: 2026-12-06
    in docs/benchmarks.md)."""

    name = "settrace"

    def __init__(self, traced: Traced) -> None:
        self.traced = traced
        self.lines: dict[str, set[int]] = {}

    def start(self, lines: dict[str, set[int]]) -> None:
        self.lines = lines
        threading.settrace(self.trace)
        sys.settrace(self.trace)

    def stop(self) -> None:
        sys.settrace(None)
        threading.settrace(None)

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        relative = self.traced.relative(frame.f_code.co_filename)
        if relative is None:
            return None
        lines = self.lines.setdefault(relative, set())

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                lines.add(frame.f_lineno)
            return local

        return local


def _load_ctracer(path: str) -> Any:
    """coverage.py's C extension at `path`, loaded under its own name (its init function is
    `PyInit_tracer`) and kept out of sys.modules, so a repository's own `coverage` is not shadowed;
    None where it does not load (built for another Python)."""
    spec = importlib.util.spec_from_file_location("coverage.tracer", path)
    if spec is None or spec.loader is None:
        return None
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError:
        return None
    return module


class CTracer:
    """coverage.py's C tracer (`CTracer`), fed as coverage's collector feeds it: a disposition per file
    (`should_trace`, asked once per file name), and a dict it fills, file -> lines. One tracer per test,
    and one per thread started during it."""

    name = "ctracer"

    def __init__(self, traced: Traced, module: Any) -> None:
        self.traced = traced
        self.module = module
        self.cache: dict[str, Any] = {}
        self.data: dict[str, Any] = {}
        self.running: list[Any] = []
        self.lock = threading.Lock()

    def should_trace(self, filename: str, frame: FrameType) -> Any:
        disposition = self.module.CFileDisposition()
        disposition.original_filename = disposition.canonical_filename = filename
        disposition.source_filename = self.traced.relative(filename)
        disposition.trace = disposition.source_filename is not None
        disposition.reason = ""
        disposition.file_tracer = None
        disposition.has_dynamic_filename = False
        return disposition

    def _started(self) -> Any:
        tracer = self.module.CTracer()
        tracer.data, tracer.should_trace_cache, tracer.should_trace = self.data, self.cache, self.should_trace
        tracer.trace_arcs = False
        tracer.lock_data, tracer.unlock_data = self.lock.acquire, self.lock.release
        tracer.warn = lambda message, slug=None: print(f"ctracer: {message}", file=sys.stderr)
        tracer.file_tracers = {}
        tracer.check_include = tracer.should_start_context = tracer.switch_context = None
        tracer.disable_plugin = tracer.concur_id_func = None
        self.running.append(tracer)
        return tracer.start()

    def _in_thread(self, frame: FrameType, event: str, arg: Any) -> Any:
        sys.settrace(None)
        return self._started()(frame, event, arg)

    def start(self, lines: dict[str, set[int]]) -> None:
        self.data = {}
        self.lines = lines
        threading.settrace(self._in_thread)
        self._started()

    def stop(self) -> None:
        threading.settrace(None)
        for tracer in self.running:
            tracer.stop()
        self.running = []
        for path, numbers in self.data.items():  # a set of lines, or a dict keyed by them (coverage < 7.5)
            self.lines.setdefault(path, set()).update(numbers)


class Monitoring:
    """PEP 669's `sys.monitoring` (Python 3.12+): LINE events only in the code objects of traced files
    (switched on at their first PY_START), each line reported once per test (DISABLE), all switched on
    again for the next test (`restart_events`). Code of other files costs one PY_START each per test."""

    name = "sys.monitoring"

    def __init__(self, traced: Traced, api: Any) -> None:
        self.api = api
        """`sys.monitoring` (typed loosely: the type checker reads this file as Python 3.11's)."""
        self.traced = traced
        self.lines: dict[str, set[int]] = {}
        self.tool = next(t for t in range(6) if self.api.get_tool(t) is None)
        self.api.use_tool_id(self.tool, "harness-synthesis")
        self.api.register_callback(self.tool, self.api.events.PY_START, self._started)
        self.api.register_callback(self.tool, self.api.events.LINE, self._line)

    def _started(self, code: CodeType, offset: int) -> Any:
        if self.traced.relative(code.co_filename) is not None:
            self.api.set_local_events(self.tool, code, self.api.events.LINE)
        return self.api.DISABLE

    def _line(self, code: CodeType, line: int) -> Any:
        relative = self.traced.relative(code.co_filename)
        if relative is not None:
            self.lines.setdefault(relative, set()).add(line)
        return self.api.DISABLE

    def start(self, lines: dict[str, set[int]]) -> None:
        self.lines = lines
        self.api.restart_events()
        self.api.set_events(self.tool, self.api.events.PY_START)

    def stop(self) -> None:
        self.api.set_events(self.tool, 0)
        self.lines = {}  # traced code run between tests (a module fixture's teardown) is nobody's


class TestTimeout(BaseException):
    """Raised in a test that ran past its time: not an `Exception`, so a test's own `except Exception`
    does not swallow it, and pytest reports the test as failed."""


class Deadline:
    """Stops each test (setup, call and teardown) after `seconds` with SIGALRM, and names it."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.timed_out: list[str] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Iterator[None]:
        if not self.seconds or threading.current_thread() is not threading.main_thread():
            yield
            return
        seconds = self.seconds

        def expire(signum: int, frame: FrameType | None) -> None:
            self.timed_out.append(item.nodeid)
            raise TestTimeout(f"{item.nodeid} ran past {seconds:.0f} s")

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _crash(report: Any) -> str:
    """The exception a report ends with (`AssertionError: assert 2 == 3`), without its traceback."""
    crash = getattr(report.longrepr, "reprcrash", None)
    return crash.message if crash is not None else ""


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    print(READY, flush=True)
    root = spec["root"]
    os.chdir(root)
    grade_runner.load_plugins()  # before the repository's folders come first
    sys.path[:] = grade_runner.repository_first(root, [root, *sys.path])
    grade_runner.evict_shadowed(set(spec.get("base_modules", [])))
    recorder = Recorder(root, spec["trace"], spec["tracers"], spec["ctracer"])
    deadline = Deadline(spec.get("test_timeout"))
    args = ["-c", spec["ini"], "--rootdir", root, "-p", "no:cacheprovider", "-q", "--no-header"]
    exit_code = int(pytest.main([*args, *spec["targets"]], plugins=[recorder, deadline]))
    report = {
        "outcomes": recorder.outcomes,
        "durations": recorder.durations,
        "timed_out_tests": sorted(set(deadline.timed_out)),
        "messages": recorder.messages,
        "collect_errors": recorder.collect_failures,
        "coverage": {
            test: {path: sorted(lines) for path, lines in files.items()}
            for test, files in recorder.coverage.items()
        },
        "tracer": recorder.tracer.name if recorder.tracer is not None else None,
        "exit_code": exit_code,
    }
    with open(spec["report"], "w") as f:
        json.dump(report, f)
    sys.stdout.flush()
    os._exit(0)  # nothing the code under test left behind (atexit handlers, threads) runs after us


if __name__ == "__main__":
    main()
