"""Who owns a sandbox, closing them all on SIGINT / SIGTERM, and the reaper of dead runs' leftovers.

Every sandbox carries its owner: run id, host, runner pid and that pid's start time (so a reused pid is
not mistaken for the runner), and an expiry. At start-up the reaper removes the sandboxes whose owner is
dead, or, when the owner is on another host and cannot be checked, whose expiry has passed. A live
run's sandboxes are never touched.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import threading
import time
import uuid
import weakref
from pathlib import Path
from types import FrameType
from typing import Protocol

import psutil
from pydantic import BaseModel, ConfigDict

from envs import cgroups
from envs.sandbox import SandboxUnusable

LABEL = "harness.run"


class Owner(BaseModel):
    """The runner process that made a sandbox."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    host: str
    pid: int
    pid_start: float
    expires: float

    def labels(self) -> dict[str, str]:
        return {
            LABEL: self.run_id,
            "harness.host": self.host,
            "harness.pid": str(self.pid),
            "harness.pid_start": repr(self.pid_start),
            "harness.expires": repr(self.expires),
        }

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> Owner:
        return cls(
            run_id=labels[LABEL],
            host=labels["harness.host"],
            pid=int(labels["harness.pid"]),
            pid_start=float(labels["harness.pid_start"]),
            expires=float(labels["harness.expires"]),
        )

    def is_dead(self, now: float | None = None) -> bool:
        """True when the owner is gone for sure: dead here, or expired elsewhere."""
        if self.host != socket.gethostname():
            return (now or time.time()) > self.expires
        try:
            return abs(psutil.Process(self.pid).create_time() - self.pid_start) > 0.5
        except psutil.NoSuchProcess:
            return True


_owner: Owner | None = None
_owner_lock = threading.Lock()


def current_owner(state_dir: Path, expiry_s: float) -> Owner:
    """This process's owner record, written once to `state_dir/RUN/owner.json` of each state folder."""
    global _owner
    with _owner_lock:
        if _owner is None or _owner.pid != os.getpid():  # a forked child is a run of its own
            pid = os.getpid()
            _owner = Owner(
                run_id=f"r{pid}-{uuid.uuid4().hex[:8]}",
                host=socket.gethostname(),
                pid=pid,
                pid_start=psutil.Process(pid).create_time(),
                expires=time.time() + expiry_s,
            )
        run_dir = state_dir / _owner.run_id
        if not (run_dir / "owner.json").exists():  # a process may use several state folders (tests, configs)
            run_dir.mkdir(parents=True, exist_ok=True)
            tmp = run_dir / f".owner.json.{_owner.pid}"
            tmp.write_text(_owner.model_dump_json())
            tmp.rename(run_dir / "owner.json")  # a reaper never sees it half-written
            reap(state_dir, _docker_client())  # a run's first sandbox clears what dead runs left
        return _owner


def _docker_client() -> object | None:
    import docker
    import docker.errors
    import requests.exceptions

    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return None
    return client


# ---- closing on exit and on signals ---------------------------------------------------------------


class Closable(Protocol):
    def close(self) -> None: ...


_open: weakref.WeakSet[Closable] = weakref.WeakSet()
closing = threading.Event()
"""Set when SIGINT / SIGTERM closes every sandbox: what fails after it is the interrupt's doing."""


def track(sandbox: Closable) -> None:
    """Registers a sandbox to be closed at exit, SIGINT or SIGTERM; refuses it once they closed the rest."""
    if closing.is_set():
        sandbox.close()
        raise SandboxUnusable("the harness is stopping (SIGINT / SIGTERM): no new sandbox")
    _open.add(sandbox)


def close_later(sandbox: Closable) -> None:
    """Closes `sandbox` in a thread of its own, for a caller that needs nothing more of it (grading, once
    the report is read: a Docker container's stop is about 50 ms of the daemon's that the grade need not
    wait for). The thread is not a daemon: the interpreter waits for it at exit, and SIGINT / SIGTERM
    close the sandbox with the rest."""
    threading.Thread(target=sandbox.close, name=f"close-{id(sandbox):x}", daemon=False).start()


def close_all() -> None:
    for sandbox in list(_open):
        try:
            sandbox.close()
        except Exception:  # closing everything matters more than one failure
            pass


def _on_signal(signum: int, frame: FrameType | None) -> None:
    closing.set()
    close_all()
    signal.signal(signum, signal.SIG_DFL)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    os.kill(os.getpid(), signum)


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM close every sandbox of this process, then act as usual."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)


atexit.register(close_all)


# ---- the reaper ---------------------------------------------------------------------------------


class ReapReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    containers: int = 0
    groups: int = 0
    run_dirs: int = 0


def reap(state_dir: Path, docker_client: object | None = None) -> ReapReport:
    """Removes every sandbox, control group and state folder whose owner run is dead."""
    report = ReapReport()
    me = _owner.run_id if _owner is not None else None
    if state_dir.is_dir():
        for run_dir in state_dir.iterdir():
            if run_dir.name == me:
                continue
            try:
                owner = Owner.model_validate_json((run_dir / "owner.json").read_text())
            except (OSError, ValueError):
                owner = None
            if owner is None and _may_be_starting(run_dir):
                continue  # a run starting right now has not written its owner record yet
            if owner is not None and not owner.is_dead():
                continue
            for group in cgroups.run_groups(run_dir.name):
                group.destroy()
                report.groups += 1
            shutil.rmtree(run_dir, ignore_errors=True)
            report.run_dirs += 1
    if docker_client is not None:
        report.containers = _reap_containers(docker_client, me)
    return report


def _may_be_starting(run_dir: Path) -> bool:
    """A folder without an owner record: a run that is writing it (young, its pid alive), or one that a
    `kill -9` stopped before it could. A folder that another run's reaper removed meanwhile is left to it."""
    try:
        if time.time() - run_dir.stat().st_mtime >= 60:
            return False
    except FileNotFoundError:
        return True
    pid = run_dir.name[1:].partition("-")[0]  # run ids are rPID-HEX
    return not pid.isdigit() or psutil.pid_exists(int(pid))


def _reap_containers(client: object, me: str | None) -> int:
    import docker.errors

    removed = 0
    # Runs that start together reap the same leftovers: a container may vanish under our feet.
    listed = client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)  # type: ignore[attr-defined]
    for container in listed:
        try:
            owner = Owner.from_labels(container.labels)
        except (KeyError, ValueError):
            continue
        if owner.run_id == me or not owner.is_dead():
            continue
        try:
            container.remove(force=True)
            removed += 1
        except docker.errors.APIError:  # already gone, or another run's reaper is removing it (409)
            pass
    return removed
