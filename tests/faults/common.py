"""What the fault tests share: the harness as a process with a probe in it, a run file watched as it grows,
and what a run left on the host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from harness.rollouts.store import read_lines

INJECT = [sys.executable, "-m", "tests.faults.inject"]
MINI = Path(__file__).parents[1] / "data" / "suites" / "mini"
CGROUP_ROOT = Path("/sys/fs/cgroup")


def short_dir(prefix: str) -> Path:
    """A folder with a short path: executor sockets live in it, and a socket path has at most 107 bytes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def wait_until(condition: Callable[[], bool], timeout: float, what: str, poll_s: float = 0.05) -> float:
    """Waits for `condition`; returns the seconds it took."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(poll_s)
    return time.monotonic() - began


@dataclass
class Arrival:
    at: float
    """time.monotonic() when the test first saw the line."""
    trajectory: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.trajectory["status"])


class RunFile:
    """A run's trajectories.jsonl, read as it grows; each line with the time it was first seen."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "trajectories.jsonl"
        self.arrivals: list[Arrival] = []

    def poll(self) -> list[Arrival]:
        lines = [json.loads(line) for _, line in read_lines(self.path)]
        now = time.monotonic()
        self.arrivals += [Arrival(now, t) for t in lines[len(self.arrivals) :]]
        return self.arrivals

    def after(self, moment: float, status: str | None = None) -> list[Arrival]:
        return [a for a in self.poll() if a.at > moment and (status is None or a.status == status)]


def leftovers(state_dir: Path, docker_client: Any | None = None) -> dict[str, list[str]]:
    """Everything the harness runs of `state_dir` left on the host: executor and bwrap processes, control
    groups, executor sockets, containers (on `docker_client`'s daemon) and the run folders of dead runs."""
    runs = [p.name for p in state_dir.iterdir()] if state_dir.is_dir() else []
    found: dict[str, list[str]] = {"processes": [], "control groups": [], "sockets": [], "containers": []}
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(arg.startswith(f"{run}/") for arg in cmdline for run in runs):
            found["processes"].append(" ".join(cmdline))
    for run in runs:
        found["control groups"] += [str(p) for p in CGROUP_ROOT.glob(f"*/harness/{run}--*")]
        found["sockets"] += [str(p) for p in (state_dir / run).glob("*/sock")]
    if docker_client is not None:
        for container in docker_client.containers.list(all=True, filters={"label": "harness.run"}):
            found["containers"].append(f"{container.name} {container.status}")
    return found


NOTHING: dict[str, list[str]] = {"processes": [], "control groups": [], "sockets": [], "containers": []}


class Forked:
    """A process of the fork server; matches the part of `subprocess.Popen` the kill loops use."""

    def __init__(self, pid: int, exit_file: Path) -> None:
        self.pid = pid
        self.exit_file = exit_file

    def poll(self) -> int | None:
        return int(self.exit_file.read_text()) if self.exit_file.exists() else None

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # ended, not reaped yet

    def wait(self, timeout: float = 600) -> int:
        wait_until(lambda: self.poll() is not None, timeout, f"process {self.pid} to end", poll_s=0.01)
        code = self.poll()
        assert code is not None
        return code


class ForkServer:
    """`python -m tests.faults.inject --fork-server`: harness processes forked from a warm interpreter."""

    def __init__(self, folder: Path) -> None:
        self.exits = folder / "exits"
        self.proc = subprocess.Popen(
            [*INJECT, "--fork-server", str(self.exits)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def spawn(self, argv: list[str], log: Path) -> Forked:
        """Starts `python -m tests.faults.inject ARGV` (forked), its output appended to `log`."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"argv": argv, "log": str(log)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the fork server exited with {self.proc.wait()}"
        return Forked(int(line), self.exits / line.strip())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
