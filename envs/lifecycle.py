"""Who owns a sandbox, closing them all on SIGINT / SIGTERM, and the reaper of dead runs' leftovers.

A run holds an exclusive `flock` on its lock file (`STATE/RUN.lock`, made and locked before its folder
`STATE/RUN`) for as long as its process lives: the kernel drops the lock at any death, `kill -9`
included, and at no other time. Every sandbox carries its owner: run id, host, lock file, runner pid and
that pid's start in clock ticks since boot, and an expiry. A reaper removes a run's folder, control
groups and containers only when it can take that lock itself (a run on this host), or, for a run on
another host, which no lock here tells of, after its expiry. A run whose lock file is gone (someone
removed the state folder) is alive while its pid runs with the same start ticks. No decision rests on
the wall clock of this host, which can be stepped; each is logged with the run id and the reason
(`STATE/reaper.log` and the `harness.reaper` logger).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import logging
import os
import shutil
import signal
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Protocol

import psutil
from pydantic import BaseModel, ConfigDict

from envs import cgroups
from envs.sandbox import SandboxUnusable

LABEL = "harness.run"


LOG = logging.getLogger("harness.reaper")
REAPER_LOG = "reaper.log"
"""Each state folder's record of what its reapers removed and why."""


class Owner(BaseModel):
    """The runner process that made a sandbox."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    host: str
    pid: int
    pid_start: float
    """The pid's start in wall-clock seconds, for the reader; liveness reads `pid_ticks`."""
    expires: float
    lock: str = ""
    """The run's lock file: held while the run lives."""
    pid_ticks: int = 0
    """The pid's start in clock ticks since boot (`/proc/PID/stat`), which no clock step moves."""

    def labels(self) -> dict[str, str]:
        return {
            LABEL: self.run_id,
            "harness.host": self.host,
            "harness.pid": str(self.pid),
            "harness.pid_start": repr(self.pid_start),
            "harness.expires": repr(self.expires),
            "harness.lock": self.lock,
            "harness.pid_ticks": str(self.pid_ticks),
        }

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> Owner:
        return cls(
            run_id=labels[LABEL],
            host=labels["harness.host"],
            pid=int(labels["harness.pid"]),
            pid_start=float(labels["harness.pid_start"]),
            expires=float(labels["harness.expires"]),
            lock=labels.get("harness.lock", ""),
            pid_ticks=int(labels.get("harness.pid_ticks", "0")),
        )


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot; None when no such process runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return int(stat.rpartition(")")[2].split()[19])  # field 22, after the command's name


# ---- the run's lock --------------------------------------------------------------------------------


_owner: Owner | None = None
_owner_lock = threading.Lock()
_held: dict[Path, int] = {}
"""Lock file -> the descriptor this process holds its lock through."""


def _forget_inherited_locks() -> None:
    """In a forked child: its parent's locks are the parent's; the child closes its copies (the lock
    stays with the parent), and becomes a run of its own when it starts a sandbox."""
    for fd in _held.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_forget_inherited_locks)


def _hold(lock: Path) -> None:
    """Takes `lock` for this process's life, unless it already holds that very file."""
    fd = _held.get(lock)
    if fd is not None:
        try:
            if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                return
        except FileNotFoundError:
            pass  # removed under us (the state folder was deleted): lock a new one
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held[lock] = fd  # a replaced one stays open and locked: a reaper that opened it finds it held


StrayReaper = Callable[[str | None, Path], int]
"""A backend's `reap_strays(me, state_dir)`: removes dead runs' sandboxes outside the state folder."""


def current_owner(state_dir: Path, expiry_s: float, strays: StrayReaper | None = None) -> Owner:
    """This process's owner record, written once to `state_dir/RUN/owner.json` of each state folder,
    after the run's lock `state_dir/RUN.lock` is taken; the first time, dead runs are reaped, with what
    `strays` (the backend's `reap_strays`) removes outside the folder (a Docker run's containers)."""
    global _owner
    with _owner_lock:
        if _owner is None or _owner.pid != os.getpid():  # a forked child is a run of its own
            pid = os.getpid()
            run_id = f"r{pid}-{uuid.uuid4().hex[:8]}"
            _owner = Owner(
                run_id=run_id,
                host=socket.gethostname(),
                pid=pid,
                pid_start=psutil.Process(pid).create_time(),
                expires=time.time() + expiry_s,
                pid_ticks=start_ticks(pid) or 0,
            )
        lock = state_dir / f"{_owner.run_id}.lock"
        _hold(lock)
        owner = _owner.model_copy(update={"lock": str(lock.absolute())})
        run_dir = state_dir / owner.run_id
        if not (run_dir / "owner.json").exists():  # a process may use several state folders (tests, configs)
            run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # its sockets are no other user's business
            tmp = run_dir / f".owner.json.{owner.pid}"
            tmp.write_text(owner.model_dump_json())
            tmp.rename(run_dir / "owner.json")  # a reaper never sees it half-written
            reap(state_dir, strays)  # what dead runs left
        return owner


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


_handling = False
"""The main thread is in `_on_signal`: another signal meanwhile leaves the closing to it."""
_wakeup: tuple[int, int] | None = None
"""The pipe the interpreter writes each caught signal's number to (`signal.set_wakeup_fd`), if ours."""
NUDGE_S = 0.05
NUDGE = signal.SIGRTMIN + 4
"""What `_nudger` interrupts the main thread with: a real-time signal whose handler does nothing. Never the
caught signal itself, whose handler `_on_signal` resets to the default: a nudge that came after would
kill the process instead of letting KeyboardInterrupt unwind (a run's Ctrl-C ended -2, not 130)."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _handling
    if _handling:  # closing already, further up this thread's stack
        return
    _handling = True
    try:
        closing.set()
        close_all()
        signal.signal(signum, signal.SIG_DFL)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        os.kill(os.getpid(), signum)
    finally:
        _handling = False


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM close every sandbox of this process, then act as usual.

    Python runs a handler in the main thread only, between two bytecodes: a signal that another thread
    took, or that the main thread took just before it blocked in a system call (reading its stdin, say),
    left the handler pending until that call returned, which may be never (a runner given SIGTERM did not
    exit in 60 s). The interpreter also writes each caught signal to a pipe (`signal.set_wakeup_fd`),
    whatever the thread: a thread of ours reads it and interrupts the main thread until the handler runs.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(NUDGE, _nudged)
    _watch_signals()


def _nudged(signum: int, frame: FrameType | None) -> None:
    """Nothing: the nudge only ends the main thread's blocking call, so that Python runs the handler
    of the signal pending behind it."""


def _watch_signals() -> None:
    """Points the interpreter's wakeup fd at a pipe of ours, read by `_nudger`, unless it is taken
    already (an asyncio loop's signal handlers: left as they are)."""
    global _wakeup
    if _wakeup is not None:
        return
    read_fd, write_fd = os.pipe()  # close-on-exec
    os.set_blocking(write_fd, False)  # the interpreter's signal handler must never block on it
    theirs = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    if theirs != -1:
        signal.set_wakeup_fd(theirs)
        os.close(read_fd)
        os.close(write_fd)
        return
    _wakeup = (read_fd, write_fd)
    threading.Thread(target=_nudger, args=(read_fd,), name="signal-nudger", daemon=True).start()


def _nudger(read_fd: int) -> None:
    """Interrupts the main thread (`NUDGE`) for each SIGINT / SIGTERM the interpreter caught, every
    `NUDGE_S`, until `_on_signal` has started closing (a blocking call fails with EINTR, and Python runs
    the pending handler before it retries)."""
    main = threading.main_thread().ident
    while True:
        try:
            caught = os.read(read_fd, 512)
        except OSError:
            return
        if not caught or main is None:
            return
        ours = [s for s in (signal.SIGINT, signal.SIGTERM) if s in caught]
        while any(signal.getsignal(s) is _on_signal for s in ours) and not closing.wait(NUDGE_S):
            signal.pthread_kill(main, NUDGE)


def _forget_signal_pipe() -> None:
    """In a forked child: the parent's thread reads the pipe, and would take the child's signals for
    its own; the child closes its copies and handles its signals as Python does."""
    global _wakeup
    if _wakeup is None:
        return
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # not the main thread
        pass
    for fd in _wakeup:
        try:
            os.close(fd)
        except OSError:
            pass
    _wakeup = None


os.register_at_fork(after_in_child=_forget_signal_pipe)


atexit.register(close_all)


# ---- the reaper ---------------------------------------------------------------------------------


class ReapReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    containers: int = 0
    """Sandboxes removed outside the state folder (a backend's `reap_strays`: Docker's containers)."""
    groups: int = 0
    run_dirs: int = 0


def reap(state_dir: Path, strays: StrayReaper | None = None) -> ReapReport:
    """Removes every sandbox, control group and state folder whose owner run is dead (see the module's
    docstring for how that is known), and logs why."""
    report = ReapReport()
    me = _owner.run_id if _owner is not None else None
    if strays is not None:  # first: a run's containers, while its lock file still tells of it
        report.containers = strays(me, state_dir)
    for run_id in _runs_in(state_dir):
        if run_id != me:
            _reap_run(state_dir, run_id, report)
    return report


def _runs_in(state_dir: Path) -> list[str]:
    """The run ids a state folder holds a folder or a lock file of."""
    try:
        names = [entry.name for entry in state_dir.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    runs = {n.removesuffix(".lock") for n in names if not n.startswith(".") and n != REAPER_LOG}
    return sorted(runs)


def _reap_run(state_dir: Path, run_id: str, report: ReapReport) -> None:
    run_dir = state_dir / run_id
    try:
        owner: Owner | None = Owner.model_validate_json((run_dir / "owner.json").read_text())
    except (OSError, ValueError):
        owner = None
    with dead_run(owner, state_dir / f"{run_id}.lock") as reason:
        if reason is None:
            return
        for group in cgroups.run_groups(run_id):
            group.destroy()
            report.groups += 1
        shutil.rmtree(run_dir, ignore_errors=True)
        (state_dir / f"{run_id}.lock").unlink(missing_ok=True)
        report.run_dirs += 1
        log_reaped(state_dir, run_id, f"its folder and control groups removed: {reason}")


@contextmanager
def dead_run(owner: Owner | None, lock: Path | None) -> Iterator[str | None]:
    """Why the run is dead for sure, else None; the run's lock, when it could be taken, is held until
    the caller has removed what the run left (a run cannot come back to life meanwhile)."""
    if owner is not None and owner.host != socket.gethostname():
        expired = time.time() > owner.expires
        yield f"a run of host {owner.host}, expired at {owner.expires:.0f}" if expired else None
        return
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC) if lock is not None else None
    except FileNotFoundError:
        fd = None
    if fd is None:
        yield _dead_without_lock(owner)
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            yield None  # held: the run lives
            return
        yield "its lock was free: the process that held it is gone"
    finally:
        os.close(fd)


def _dead_without_lock(owner: Owner | None) -> str | None:
    """A run whose lock file is not there: never locked (a run locks before it makes its folder, so a
    folder with no owner record is a dead run's), or removed with the state folder under a live run,
    which then lives while its pid runs with the start ticks it recorded."""
    if owner is None:
        return "no lock file and no owner record: no live run's (a run locks before it makes its folder)"
    ticks = start_ticks(owner.pid)
    if ticks is None:
        return f"no lock file, and pid {owner.pid} no longer runs"
    if owner.pid_ticks and ticks != owner.pid_ticks:
        return f"no lock file, and pid {owner.pid} is another process now (started at tick {ticks})"
    return None  # an owner of old, without start ticks, is alive while its pid is


def log_reaped(state_dir: Path, run_id: str, what: str) -> None:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()} reaped {run_id}: {what}"
    LOG.info(line)
    try:
        with open(state_dir / REAPER_LOG, "a") as log:
            log.write(line + "\n")
    except OSError:
        pass
