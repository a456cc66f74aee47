"""Runs a repository's tests inside a sandbox the way the grader does, and reports each test's outcome.

Standard library, pytest and `grade_runner.py` (copied next to it) only; started as
`python3 -I -B pytest_runner.py SPEC` where SPEC is a JSON file: {"report", "ini", "root", "targets",
"trace", "test_timeout"}. Outcomes follow `grade_runner.Recorder`'s rules; as there, pytest reads the grader's
ini file, not the repository's, and only the repository root is put on sys.path. The report (JSON) holds
one outcome per node id, the crash message of each failure (the exception, never the traceback, so it
does not quote the code under test), collection errors, and, when `trace` names files, the lines of
those files that each test ran (setup, call and teardown), from `sys.settrace`. With `test_timeout`
(seconds), a test that runs longer is stopped (`Deadline`) and named in the report's `timed_out`, so one
endless test no longer holds the whole run until its timeout.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

# Isolated mode (-I) keeps the script's and the repository's folders off sys.path: this is the real pytest.
import pytest

# The grader's runner lies next to this file: outcomes are told apart by its rules, to the letter.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grade_runner

del sys.path[0]

READY = "harness-pytest-runner-ready"


class Recorder(grade_runner.Recorder):
    """The grader's recorder, plus crash messages and, optionally, the lines each test ran."""

    def __init__(self, root: str, trace: list[str]) -> None:
        super().__init__()
        self.messages: dict[str, str] = {}
        self.collect_failures: dict[str, str] = {}
        self.coverage: dict[str, dict[str, set[int]]] = {}
        self.prefix = root.rstrip("/") + "/"
        self.traced = set(trace)
        self.keep: dict[str, str | None] = {}
        self.lines: dict[str, set[int]] = {}
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
        if not self.traced:
            yield
            return
        self.lines = {}
        self.coverage[item.nodeid] = self.lines
        threading.settrace(self.trace)
        sys.settrace(self.trace)
        try:
            yield
        finally:
            sys.settrace(None)
            threading.settrace(None)

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        filename = frame.f_code.co_filename
        if filename not in self.keep:
            relative = filename[len(self.prefix) :] if filename.startswith(self.prefix) else None
            self.keep[filename] = relative if relative in self.traced else None
        relative = self.keep[filename]
        if relative is None:
            return None
        lines = self.lines.setdefault(relative, set())

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                lines.add(frame.f_lineno)
            return local

        return local


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
    sys.path.insert(0, root)
    recorder = Recorder(root, spec["trace"])
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
        "exit_code": exit_code,
    }
    with open(spec["report"], "w") as f:
        json.dump(report, f)
    sys.stdout.flush()
    os._exit(0)  # nothing the code under test left behind (atexit handlers, threads) runs after us


if __name__ == "__main__":
    main()
