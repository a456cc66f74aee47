"""Nothing outlives its owner: close removes a sandbox, SIGTERM / SIGINT close a runner's sandboxes,
and after a `kill -9` the next start reaps what the dead run left, never a live run's sandboxes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest

import envs.docker
from envs.docker import client, reap_containers
from envs.factory import start_sandbox
from envs.lifecycle import LABEL, REAPER_LOG, Owner, current_owner, reap, start_ticks
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig
from tests.conftest import require_backend

CGROUP_ROOT = Path("/sys/fs/cgroup")

RUNNER = """
import json, sys
from pathlib import Path

from envs.factory import start_sandbox
from envs.lifecycle import current_owner, install_signal_handlers
from envs.sandbox import SandboxConfig

install_signal_handlers()
state_dir, backend, count, source = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
config = SandboxConfig(backend=backend, state_dir=state_dir)
sandboxes = [start_sandbox(config, source) for _ in range(count)]
run_id = current_owner(state_dir, config.expiry_s).run_id
print(json.dumps({"run": run_id, "sandboxes": [s.id for s in sandboxes]}), flush=True)
for line in sys.stdin:
    print(json.dumps([s.run(line).output for s in sandboxes]), flush=True)
"""


class Runner:
    """A harness run in its own process: starts sandboxes, runs a command in all of them per stdin line."""

    def __init__(self, state_dir: Path, backend: str, count: int, source: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(state_dir), backend, str(count), str(source)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready = self._line()
        self.run_id: str = ready["run"]
        self.sandboxes: list[str] = ready["sandboxes"]

    def _line(self) -> Any:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=10)
            pytest.fail(f"runner exited with {self.proc.returncode}: {self.proc.stderr.read()}")
        return json.loads(line)

    def ask(self, command: str) -> list[str]:
        """Runs `command` in each of the runner's sandboxes; their outputs."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer: list[str] = self._line()
        return answer

    def stop(self, signum: int) -> int:
        self.proc.send_signal(signum)
        return self.proc.wait(timeout=60)


@pytest.fixture
def runners() -> Iterator[list[Runner]]:
    started: list[Runner] = []
    yield started
    for runner in started:
        if runner.proc.poll() is None:
            runner.stop(signal.SIGTERM)


CAUGHT_ELSEWHERE = """
import signal, sys, threading, time

from envs.lifecycle import install_signal_handlers

install_signal_handlers()
signum = signal.Signals[sys.argv[1]]


def catch_it_here():
    time.sleep(0.5)  # the main thread waits on its stdin by now
    signal.pthread_kill(threading.get_ident(), signum)


threading.Thread(target=catch_it_here, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_caught_outside_the_main_thread_still_stops_a_runner_that_waits_on_its_stdin(
    signum: signal.Signals,
) -> None:
    """Python runs a signal's handler in the main thread only, between two bytecodes: a SIGTERM caught by
    another thread, or by the main thread just before it blocked reading its stdin, left the handler
    pending until a line came (a runner of the test below outlived its 60 s in CI, once). Here another
    thread catches it, every time."""
    proc = subprocess.Popen([sys.executable, "-c", CAUGHT_ELSEWHERE, signum.name], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        assert proc.wait(timeout=30) == -signum
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- what a run leaves on the host ----------------------------------------------------------------


def leftovers(state_dir: Path, run_id: str, sandbox_id: str | None = None) -> dict[str, list[object]]:
    """What the host holds of a run's sandboxes (or of one of them)."""
    labels = [f"{LABEL}={run_id}"] + ([f"harness.sandbox={sandbox_id}"] if sandbox_id else [])
    label_arg = f"{run_id}/{sandbox_id or ''}"  # bwrap and every executor carry `--label RUN/SANDBOX`
    return {
        "containers": [c.name for c in client().containers.list(all=True, filters={"label": labels})],
        "processes": [
            proc.pid
            for proc in psutil.process_iter(["cmdline"])
            if any(arg.startswith(label_arg) for arg in proc.info["cmdline"] or [])
        ],
        "control groups": sorted(CGROUP_ROOT.glob(f"*/harness/{run_id}--{sandbox_id or '*'}")),
        "sockets": sorted((state_dir / run_id).glob(f"{sandbox_id or '*'}/sock")),
    }


NOTHING: dict[str, list[object]] = {"containers": [], "processes": [], "control groups": [], "sockets": []}


def assert_running(runner: Runner, backend: str, state_dir: Path) -> None:
    """The runner's sandboxes exist on the host and answer."""
    count = len(runner.sandboxes)
    left = leftovers(state_dir, runner.run_id)
    assert len(left["sockets"]) == count
    assert len(left["processes"]) >= count
    if backend == "docker":
        assert len(left["containers"]) == count
    else:
        assert len(left["control groups"]) == 3 * count  # pids, memory and cpu on cgroup v1
    assert runner.ask("echo alive") == ["alive\n"] * count


# ---- tests ----------------------------------------------------------------------------------------


def test_close_leaves_nothing_behind(sandbox: ExecutorSandbox, backend: str) -> None:
    state_dir = sandbox.config.state_dir
    run_id = current_owner(state_dir, sandbox.config.expiry_s).run_id
    before = leftovers(state_dir, run_id, sandbox.id)
    assert len(before["sockets"]) == 1 and before["processes"]
    assert before["containers" if backend == "docker" else "control groups"]

    sandbox.close()

    assert leftovers(state_dir, run_id, sandbox.id) == NOTHING


def test_kill_9_then_a_new_start_reaps_the_dead_run_only(
    backend: str, sample_repo: Path, tmp_path: Path, runners: list[Runner]
) -> None:
    state_dir = tmp_path / "state"
    dead = Runner(state_dir, backend, 2, sample_repo)
    live = Runner(state_dir, backend, 2, sample_repo)
    runners += [dead, live]
    assert_running(dead, backend, state_dir)
    assert_running(live, backend, state_dir)

    assert dead.stop(signal.SIGKILL) == -signal.SIGKILL
    assert (state_dir / dead.run_id).is_dir()  # nothing cleaned up after a kill -9 ...
    assert leftovers(state_dir, dead.run_id)["containers" if backend == "docker" else "control groups"]

    newcomer = Runner(state_dir, backend, 1, sample_repo)  # ... until the next run starts
    runners.append(newcomer)

    assert leftovers(state_dir, dead.run_id) == NOTHING
    assert not (state_dir / dead.run_id).exists()
    assert_running(live, backend, state_dir)
    assert_running(newcomer, backend, state_dir)
    # Reaping again, from the test process this time, still leaves the live runs alone.
    assert reap(state_dir, reap_containers).run_dirs == 0
    assert_running(live, backend, state_dir)

    # SIGTERM and SIGINT close a runner's sandboxes before it dies of the signal.
    assert live.stop(signal.SIGTERM) == -signal.SIGTERM
    assert newcomer.stop(signal.SIGINT) == -signal.SIGINT
    for runner in (live, newcomer):
        assert leftovers(state_dir, runner.run_id) == NOTHING
    report = reap(state_dir, reap_containers)  # only their ownership records were left
    assert (report.run_dirs, report.groups) == (2, 0)
    assert [p.name for p in state_dir.iterdir()] == [REAPER_LOG]  # why each was reaped


def test_runs_starting_together_reap_the_same_leftovers_without_failing(
    backend: str, sample_repo: Path, tmp_path: Path, runners: list[Runner]
) -> None:
    state_dir = tmp_path / "state"
    dead = Runner(state_dir, backend, 4, sample_repo)
    runners.append(dead)
    dead.stop(signal.SIGKILL)

    with ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(lambda _: reap(state_dir, reap_containers), range(4)))

    assert sum(report.containers for report in reports) >= (4 if backend == "docker" else 0)
    assert leftovers(state_dir, dead.run_id) == NOTHING
    assert not (state_dir / dead.run_id).exists()


REAPER = """
import sys
from pathlib import Path

from envs.lifecycle import reap

sys.stdin.readline()  # every reaper starts at once
print(reap(Path(sys.argv[1])).run_dirs, flush=True)
"""


def test_reapers_racing_over_folders_without_owner_records_never_fail(tmp_path: Path) -> None:
    """Runs killed before they wrote an owner record leave bare folders; reapers of runs that start
    together find each one gone under their feet (once a Ray worker died of it at start-up)."""
    state_dir = tmp_path / "state"
    for i in range(3000):  # pid 0 is no run's: every folder is a dead run's
        (state_dir / f"r0-{i:08x}").mkdir(parents=True)
    reapers = [
        subprocess.Popen(
            [sys.executable, "-c", REAPER, str(state_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for reaper in reapers:
        assert reaper.stdin is not None
        reaper.stdin.write("go\n")
        reaper.stdin.flush()
    results = [reaper.communicate(timeout=120) for reaper in reapers]

    assert [reaper.returncode for reaper in reapers] == [0] * 4, [err for _, err in results]
    assert sum(int(out) for out, _ in results) >= 3000  # a folder two reapers removed counts twice
    assert [p.name for p in state_dir.iterdir()] == [REAPER_LOG]  # why each was reaped


# ---- liveness that cannot be mistaken (issue 33, item 1) --------------------------------------------

HOLDER = """
import sys
from pathlib import Path

from envs.lifecycle import current_owner

owner = current_owner(Path(sys.argv[1]), 3600.0)
print(owner.model_dump_json(), flush=True)
sys.stdin.readline()
"""


def holder(state_dir: Path) -> tuple[subprocess.Popen[str], Owner]:
    """A run in its own process that holds its lock until its stdin closes."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(state_dir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    return proc, Owner.model_validate_json(proc.stdout.readline())


def test_a_live_run_survives_clock_steps_and_a_dead_one_is_reaped_whatever_the_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Liveness is the run's lock, which the kernel drops at death only: a wall clock stepped by hours
    either way (and the start time psutil derives from it) changes nothing."""
    state_dir = tmp_path / "state"
    live, live_owner = holder(state_dir)
    dead, dead_owner = holder(state_dir)
    dead.kill()
    dead.wait()
    real_time, real_create = time.time, psutil.Process.create_time
    try:
        for step in (-7200.0, 0.7, 7200.0):
            monkeypatch.setattr(time, "time", lambda step=step: real_time() + step)
            monkeypatch.setattr(psutil.Process, "create_time", lambda self, s=step: real_create(self) + s)
            reap(state_dir)
            assert (state_dir / live_owner.run_id / "owner.json").is_file(), step
            assert not (state_dir / dead_owner.run_id).exists() and not Path(dead_owner.lock).exists()
    finally:
        live.communicate("")
    reap(state_dir)
    assert [p.name for p in state_dir.iterdir()] == [REAPER_LOG]
    log = (state_dir / REAPER_LOG).read_text()
    assert f"reaped {dead_owner.run_id}: its folder and control groups removed: its lock was free" in log


def test_a_reused_pid_keeps_no_dead_run_alive_and_a_removed_state_folder_kills_no_live_one(
    tmp_path: Path,
) -> None:
    """Without its lock file, a run is alive only while its pid runs with the start ticks it recorded:
    a record naming a pid that now belongs to another process (here, the test's own) is a dead run's;
    a live run whose state folder someone removed is not reaped, and locks a new file at its next
    sandbox."""
    state_dir = tmp_path / "state"
    reused = Owner(run_id="r1-reused", host=socket.gethostname(), pid=os.getpid(), pid_start=0.0,
                   expires=time.time() + 3600, pid_ticks=(start_ticks(os.getpid()) or 0) + 1)  # fmt: skip
    (state_dir / reused.run_id).mkdir(parents=True)
    (state_dir / reused.run_id / "owner.json").write_text(reused.model_dump_json())
    live, owner = holder(state_dir)
    try:
        shutil.rmtree(state_dir)  # the live run's folder and lock file with it
        (state_dir / owner.run_id).mkdir(parents=True)
        (state_dir / owner.run_id / "owner.json").write_text(owner.model_dump_json())
        (state_dir / reused.run_id).mkdir(parents=True)
        (state_dir / reused.run_id / "owner.json").write_text(reused.model_dump_json())
        reap(state_dir)
        assert (state_dir / owner.run_id).is_dir()
        assert not (state_dir / reused.run_id).exists()
        assert f"pid {os.getpid()} is another process now" in (state_dir / REAPER_LOG).read_text()
    finally:
        live.communicate("")
    reap(state_dir)
    assert not (state_dir / owner.run_id).exists()  # dead now: its pid is gone


def test_a_run_on_bubblewrap_never_asks_the_docker_daemon(
    sample_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34, item 9: its first sandbox reaps dead runs' folders and control groups, not containers
    (a bwrap-only host may have no daemon: each start waited for one)."""
    require_backend("bwrap")

    def no_daemon() -> None:
        raise AssertionError("a bwrap run asked the Docker daemon")

    monkeypatch.setattr(envs.docker, "client", no_daemon)
    monkeypatch.setattr(envs.docker, "daemon_answers", no_daemon)
    sandbox = start_sandbox(SandboxConfig(backend="bwrap", state_dir=tmp_path / "state"), sample_repo)
    try:
        assert sandbox.run("echo alive").output == "alive\n"
    finally:
        sandbox.close()
