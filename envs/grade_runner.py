"""Runs the hidden tests inside the grading sandbox and writes one outcome per test id to a report file.

Standard library and pytest only; started as `python3 -I -B grade_runner.py REPORT INI ROOT ID...` so
the environment and the repository's folder on sys.path have no say over how Python starts. pytest is
pointed at the grader's own ini file (`-c`), so the repository's pytest.ini / pyproject / setup.cfg test
settings have no effect. The outcome of every test comes from pytest's own reports, not from stdout.
"""

from __future__ import annotations

import json
import os
import sys

READY = "harness-grader-ready"


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


def main() -> None:
    report_path, ini, root, *ids = sys.argv[1:]
    files = sorted({i.split("::", 1)[0] for i in ids})
    present = [f for f in files if os.path.isfile(os.path.join(root, f))]
    import pytest  # before the repository is on sys.path: a pytest.py of the agent's is never this one

    # Everything before this line is the grader's own; a run whose output lacks it never got to the
    # code under test, so its failure is the harness's (an infra error), not the patch's.
    print(READY, flush=True)
    os.chdir(root)
    sys.path.insert(0, root)
    recorder = Recorder()
    exit_code = None
    if present:
        args = ["-c", ini, "--rootdir", root, "-p", "no:cacheprovider", "-q", "--no-header", *present]
        exit_code = int(pytest.main(args, plugins=[recorder]))
    report = {
        "outcomes": recorder.outcomes,
        "collect_errors": recorder.collect_errors,
        "missing_files": sorted(set(files) - set(present)),
        "exit_code": exit_code,
    }
    # Whatever the code under test planted at the report's path goes; nothing of it runs after us
    # (no atexit handler, no thread): os._exit.
    try:
        os.unlink(report_path)
    except FileNotFoundError:
        pass
    fd = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, json.dumps(report).encode())
    os.close(fd)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
