"""In-sandbox executor: the long-lived process that runs the agent's commands inside a sandbox.

It is PID 1 of the sandbox's PID namespace (Docker's entrypoint, or bwrap with --as-pid-1), so every
process of the sandbox is its descendant and `kill(-1, ...)` reaches all of them, detached or not. It
connects back to the harness over a Unix socket bound into the sandbox and answers JSON-line requests
one at a time. Python standard library only: it runs on whatever python3 the sandbox has.

Requests (one JSON object a line) and their answers:
  {"op": "ping"}                                   -> {"ok": true, "pid": 1}
  {"op": "exec", "cmd": "...", "timeout": s, ...}  -> {"ok": true, "exit_code": .., "output": .., ...}
  {"op": "read", "path": p, "max_bytes": n}        -> {"ok": true, "data": base64, "size": n}
  {"op": "write", "path": p, "data": base64}       -> {"ok": true}
  {"op": "tar_out", "path": p}                     -> {"ok": true, "data": base64 tar}
  {"op": "tar_in", "path": p, "data": base64 tar}  -> {"ok": true}
  {"op": "reset"}                                  -> {"ok": true}  (kill everything, restore the workdir)
Errors come back as {"ok": false, "error": "..."}; the executor itself never exits on a bad request.
"""

from __future__ import annotations

import argparse
import base64
import errno
import hashlib
import io
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import stat
import struct
import sys
import tarfile
import time

CHUNK = 65536
PROC_POLL_S = 0.02
UNDECODABLE = re.compile("[\udc80-\udcff]")


class OutputCap:
    """Keeps the first and last `limit // 2` bytes of a stream and counts what lies between."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data[-self.tail_limit :] if self.tail_limit else b""
            excess = len(self.tail) - self.tail_limit
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        if not self.truncated:
            return decode(bytes(self.head) + bytes(self.tail))
        elided = self.total - len(self.head) - len(self.tail)
        marker = f"\n[... {elided} bytes of output elided ...]\n"
        return decode(self.head) + marker + decode(self.tail)


def decode(data: bytes | bytearray) -> str:
    """UTF-8 with each undecodable byte shown as one '?' (U+FFFD takes three), so the text of binary
    output is no bigger than the bytes kept."""
    return UNDECODABLE.sub("?", data.decode("utf-8", "surrogateescape"))


def other_pids() -> list[int]:
    """Every process in this PID namespace except the executor itself."""
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            pids.append(int(name))
    return pids


CHILD_WAKEUP: tuple[int, int] = (-1, -1)
"""A pipe that SIGCHLD writes to (signal.set_wakeup_fd), so select() wakes the moment a child exits."""


def watch_children() -> None:
    global CHILD_WAKEUP
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    CHILD_WAKEUP = (r, w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)


def drain_wakeups() -> None:
    try:
        while os.read(CHILD_WAKEUP[0], 4096):
            pass
    except BlockingIOError:
        pass


def reap() -> dict[int, int]:
    """Collects every exited child (we are PID 1, orphans land here too); returns pid -> wait status."""
    statuses = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        statuses[pid] = status
    return statuses


def kill_all(grace_s: float) -> bool:
    """TERM every other process, KILL what is left after the grace period. True when none survive."""
    try:
        os.kill(-1, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        reap()
        if not other_pids():
            return True
        time.sleep(0.01)
    for _ in range(200):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        time.sleep(0.005)
        reap()
        if not other_pids():
            return True
    return not other_pids()


def child_setup() -> None:  # runs in the forked child before exec
    signal.set_wakeup_fd(-1)
    os.setsid()
    # The executor shares its sandbox's CPU cap with the command: at the lowest priority, a command
    # of many processes (a fork bomb) cannot take the executor's share of that cap, so the executor still
    # sees its deadline and kills it.
    os.nice(19)
    try:  # the agent's processes, not the executor, are what the OOM killer should pick
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    for signum in (signal.SIGPIPE, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)  # ignored signals would stay ignored across exec


def spawn(argv: list, cwd: str, env: dict, stdin_data: str | None) -> tuple[int, int] | dict:
    """Forks and execs the command (`child_setup` first) with stdin from `stdin_data` and stdout and
    stderr into one pipe; returns its pid and the pipe's read end, or the error reply when it cannot
    fork."""
    read_fd, write_fd = os.pipe()
    in_read, in_write = os.pipe()
    try:
        pid = os.fork()
    except OSError as e:
        for fd in (read_fd, write_fd, in_read, in_write):
            os.close(fd)
        return {"ok": False, "error": f"cannot fork: {e}", "cannot_fork": True}
    if pid == 0:  # child
        try:
            child_setup()
            os.dup2(in_read, 0)
            os.dup2(write_fd, 1)
            os.dup2(write_fd, 2)
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except BaseException as e:  # report exec failures through the pipe
            try:
                os.write(2, f"exec failed: {e}\n".encode())
            finally:
                os._exit(127)
    os.close(write_fd)
    os.close(in_read)
    if stdin_data:
        try:
            os.write(in_write, stdin_data.encode()[:CHUNK])
        except OSError:
            pass
    os.close(in_write)
    return pid, read_fd


def watch(pid: int, read_fd: int, deadline: float, cap: OutputCap) -> tuple[int | None, bool, int]:
    """Reads the command's output into `cap` until it ends or `deadline` passes: its wait status (None if
    not seen), whether it timed out, and the most processes seen beside the executor."""
    status: int | None = None
    peak_procs = 1
    last_poll = 0.0
    pipe_open = True
    while True:
        now = time.monotonic()
        if now >= deadline:
            return status, True, peak_procs
        watched = [read_fd, CHILD_WAKEUP[0]] if pipe_open else [CHILD_WAKEUP[0]]
        ready, _, _ = select.select(watched, [], [], min(0.05, deadline - now))
        if CHILD_WAKEUP[0] in ready:
            drain_wakeups()
        if read_fd in ready:
            data = os.read(read_fd, CHUNK)
            if data:
                cap.feed(data)
            else:
                pipe_open = False
        statuses = reap()
        if pid in statuses:
            status = statuses[pid]
        if now - last_poll > PROC_POLL_S:
            last_poll = now
            peak_procs = max(peak_procs, len(other_pids()))
        if status is not None:
            # A last count as the command ends: on a busy host it can fork to its limit and end between two
            # polls, and what it forked is still there until the leftovers are killed.
            peak_procs = max(peak_procs, len(other_pids()))
            if pipe_open:
                drain_written(read_fd, cap)
            return status, False, peak_procs


def drain_written(read_fd: int, cap: OutputCap) -> None:
    """What the ended command already wrote, for at most 50 ms: never waits on a detached child that
    keeps the pipe open."""
    drain_until = time.monotonic() + 0.05
    while time.monotonic() < drain_until:
        ready, _, _ = select.select([read_fd], [], [], 0.01)
        if not ready:
            return
        data = os.read(read_fd, CHUNK)
        if not data:
            return
        cap.feed(data)


def exit_of(status: int | None) -> tuple[int | None, int | None]:
    """The exit code (128 + N when killed by signal N) and the signal, of a wait status."""
    if status is None:
        return None, None
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status), os.WTERMSIG(status)
    return None, None


class Executor:
    def __init__(self, workdir: str, pristine: str | None, shell: str, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.pristine = pristine
        self.shell = shell
        self.env = env
        self.marks: Marks | None = None
        """Each entry of the workdir as the last populate left it equal to the pristine copy."""
        self.opened = Opened()
        self.originals = Originals(pristine or "")
        self.starts = {p: os.lstat(p) for p in (workdir, *SCRATCH) if os.path.isdir(p)}
        """The workdir's and the scratch folders' own mode and times as the sandbox started."""
        self.scheduling = scheduling()
        self.differing: dict[str, set[str]] | None = {}
        """Opened files found to differ from their pristine copies after the commands that opened them
        (None: any file may), by folder, for the next reset to put back."""

    # ---- exec ---------------------------------------------------------------------------------
    def run(self, req: dict) -> dict:
        cmd = req["cmd"]
        timeout = float(req.get("timeout", 60.0))
        grace = float(req.get("grace", 2.0))
        cap = OutputCap(int(req.get("max_output", 10_000)))
        env = dict(self.env)
        env.update(req.get("env") or {})
        argv = cmd if isinstance(cmd, list) else [self.shell, "-c", cmd]

        start = time.monotonic()
        spawned = spawn(argv, req.get("cwd") or self.workdir, env, req.get("stdin"))
        if isinstance(spawned, dict):
            return spawned
        pid, read_fd = spawned
        status, timed_out, peak_procs = watch(pid, read_fd, start + timeout, cap)

        leftovers = bool(other_pids())
        clean = kill_all(grace if timed_out else 0.2) if (timed_out or leftovers) else True
        statuses = reap()
        if status is None and pid in statuses and not timed_out:
            status = statuses[pid]
        os.close(read_fd)
        exit_code, signal_num = exit_of(status) if not timed_out else (None, None)
        return {
            "ok": True,
            "exit_code": exit_code,
            "signal": signal_num,
            "timed_out": timed_out,
            "truncated": cap.truncated,
            "output": cap.text(),
            "output_bytes": cap.total,
            "duration_s": time.monotonic() - start,
            "peak_procs": peak_procs,
            "killed_leftovers": leftovers or timed_out,
            "clean": clean,
        }

    # ---- files --------------------------------------------------------------------------------
    def resolve(self, path: str) -> str:
        return path if os.path.isabs(path) else os.path.join(self.workdir, path)

    def read(self, req: dict) -> dict:
        path = self.resolve(req["path"])
        max_bytes = int(req.get("max_bytes", 1 << 24))
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or device would block the executor
            return {"ok": False, "error": f"{req['path']}: not a regular file"}
        size = os.path.getsize(path)
        if size > max_bytes:
            return {"ok": False, "error": f"{req['path']}: {size} bytes, over the limit of {max_bytes}"}
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
        return {"ok": True, "data": base64.b64encode(data).decode(), "size": len(data)}

    def write(self, req: dict) -> dict:
        path = self.resolve(req["path"])
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        if os.path.lexists(path) and not stat.S_ISREG(os.stat(path).st_mode):
            return {"ok": False, "error": f"{req['path']}: not a regular file"}
        with open(path, "wb") as f:
            f.write(base64.b64decode(req["data"]))
        if "mode" in req:
            os.chmod(path, int(req["mode"]))
        return {"ok": True}

    def tar_out(self, req: dict) -> dict:
        path = self.resolve(req["path"])
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name in sorted(os.listdir(path)):
                tar.add(os.path.join(path, name), arcname=name)
        return {"ok": True, "data": base64.b64encode(buf.getvalue()).decode()}

    def tar_in(self, req: dict) -> dict:
        path = self.resolve(req["path"])
        os.makedirs(path, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(req["data"])), mode="r") as tar:
            if hasattr(tarfile, "data_filter"):  # extraction filters came in 3.11.4; Debian 12 has 3.11.2
                tar.extractall(path, filter="tar")
            else:
                tar.extractall(path)
        return {"ok": True}

    # ---- reset --------------------------------------------------------------------------------
    def populate(self) -> None:
        """Makes the workdir equal to the pristine copy: whole the first time, then only the entries
        changed since (`restore_changed`), so that a reset costs a walk of the tree, not a copy of it."""
        pristine = self.pristine if self.pristine and os.path.isdir(self.pristine) else None
        pristine_st = os.lstat(pristine) if pristine else None
        if self.workdir not in self.starts:  # the first populate, before any command ran
            os.makedirs(self.workdir, exist_ok=True)
            self.starts[self.workdir] = os.lstat(self.workdir)
        restore_meta(self.workdir, self.starts[self.workdir], pristine)
        marks, self.marks = self.marks, None
        newest = 0
        opened, differing, self.differing = self.opened.take(), self.differing, {}
        if opened is not None and differing is not None:
            for rel, names in differing.items():
                opened.setdefault(rel, set()).update(names)
        if marks is not None and pristine is not None:
            try:
                newest = restore_changed(
                    self.workdir, pristine, marks, None if differing is None else opened, self.originals
                )
                self.marks = marks
            except OSError:  # the workdir itself made unreadable, a name too long: copy it whole
                self.marks = None
        if self.marks is None:
            clear_dir(self.workdir)
            if pristine:
                copy_tree(pristine, self.workdir)
                self.marks = {}
                newest = walk_marks(self.workdir, "", self.marks)
        if newest:  # 0 when nothing was restored: every mark is then older than the last settle
            settle(self.workdir, newest)
        restore_times(self.workdir, pristine_st or self.starts[self.workdir])
        if self.marks is not None:
            self.opened.watch(self.workdir, self.marks)
        self.opened.take()  # the reset's own copies: no other process runs

    def compare_opened(self) -> None:
        """Compares the files the last command opened with their pristine copies while the harness waits
        on its model (no process is left to write to them), so that a reset reads only those that differ."""
        if self.marks is None or not self.pristine or self.differing is None or other_pids():
            return
        opened = self.opened.take()
        if opened is None:
            self.differing = None
            return
        try:
            for rel, names in opened.items():
                if rel in self.marks:  # a folder the last reset did not mark is put back whole
                    found = self.originals.differing_in(self.workdir, rel, names)
                    self.differing.setdefault(rel, set()).update(found)
        except (OSError, MemoryError):
            self.differing = None  # the reset compares every file
        finally:
            self.opened.forget()  # the compare's own opens

    def reset(self, req: dict) -> dict:
        clean = kill_all(float(req.get("grace", 0.5)))
        reap()
        restore_scheduling(self.scheduling)
        for extra in req.get("clear", []):  # before the workdir: a link here to it is never followed
            if os.path.isdir(extra):
                restore_meta(extra, self.starts.get(extra), None)
                clear_dir(extra)
                restore_times(extra, self.starts.get(extra))
        self.populate()
        remove_ipc()
        return {"ok": True, "clean": clean}

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        self.opened.collect()  # what the agent's processes opened stays counted
        try:
            if op == "ping":
                return {"ok": True, "pid": os.getpid(), "procs": len(other_pids())}
            if op == "exec":
                return self.run(req)
            if op == "read":
                return self.read(req)
            if op == "write":
                return self.write(req)
            if op == "tar_out":
                return self.tar_out(req)
            if op == "tar_in":
                return self.tar_in(req)
            if op == "reset":
                return self.reset(req)
            return {"ok": False, "error": f"unknown op {op!r}"}
        except (OSError, KeyError, ValueError, tarfile.TarError, RecursionError, MemoryError) as e:
            # RecursionError: a tree deeper than a walk's recursion (the red team's 1,500 nested folders)
            # must fail the request, not end the executor and with it the sandbox, as an infra error.
            return {"ok": False, "error": f"{type(e).__name__}: {e}"}
        finally:
            if op != "exec":  # the executor's own opens (a copy-out reads every file) need no compare
                self.opened.forget()


IOPRIO_CALLS = {"x86_64": (251, 252), "aarch64": (30, 31)}
"""Machine -> the numbers of ioprio_set and ioprio_get (the standard library has neither)."""
IOPRIO_WHO_PROCESS = 1


def _ioprio(value: int | None = None) -> int | None:
    """The executor's I/O priority, set to `value` first where one is given; None where not to be had."""
    calls = IOPRIO_CALLS.get(os.uname().machine)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if calls is None:
        return None
    if value is not None and libc.syscall(calls[0], IOPRIO_WHO_PROCESS, 0, value) < 0:
        return None
    got = libc.syscall(calls[1], IOPRIO_WHO_PROCESS, 0)
    return None if got < 0 else got


def scheduling() -> tuple:
    """The executor's nice value, CPU affinity, scheduling policy and I/O priority."""
    return (
        os.getpriority(os.PRIO_PROCESS, 0),
        frozenset(os.sched_getaffinity(0)),
        os.sched_getscheduler(0),
        _ioprio(),
    )


def restore_scheduling(start: tuple) -> None:
    """Puts back the executor's scheduling as it started, and raises where it cannot (a reset that fails
    replaces the sandbox). The agent's processes have the executor's uid: the red team (docs/reliability.md
    5j, B8) raised PID 1's nice value, pinned it to one CPU, gave it the idle policy and I/O class, and the
    next episode's commands inherited them. Without privileges a process can widen its affinity and set its
    I/O priority again, but not lower its nice value nor leave the idle policy."""
    nice, cpus, policy, ioprio = start
    if scheduling() == start:
        return
    for put_back in (
        lambda: os.sched_setaffinity(0, cpus),
        lambda: os.sched_setscheduler(0, policy, os.sched_param(0)),
        lambda: os.setpriority(os.PRIO_PROCESS, 0, nice),
        lambda: ioprio is not None and _ioprio(ioprio),
    ):
        try:
            put_back()
        except OSError:
            pass
    if (now := scheduling()) != start:
        raise OSError(
            errno.EPERM, f"the executor's scheduling {now} was changed from {start}: a fresh sandbox"
        )


SCRATCH = ("/tmp", "/dev/shm", "/dev/mqueue")
"""The scratch folders a reset may be asked to clear (envs/remote.py's SCRATCH), whose start is recorded."""


def restore_meta(path: str, start: os.stat_result | None, pristine: str | None) -> None:
    """Puts back a folder's own mode (as `start` had it; 1777 for a scratch folder not seen at the start)
    and removes the extended attributes `pristine` has not (all of them without one). First, so that a
    folder made read-only is emptied again; `restore_times`, last, sets its times. The red team
    (docs/reliability.md 5j) changed /repo's and /tmp's mode, times and attributes, which each reset left
    for the next episode. A folder of another owner (root's /tmp on Docker) the agent cannot change."""
    if os.lstat(path).st_uid != os.geteuid():
        return
    mode = stat.S_IMODE(start.st_mode) if start else 0o1777
    keep = set(_xattrs(pristine)) if pristine else set()
    for name in _xattrs(path):
        if name not in keep:
            os.chmod(path, mode | stat.S_IWUSR)  # writing an attribute needs the folder writable
            os.removexattr(path, name, follow_symlinks=False)
    if stat.S_IMODE(os.lstat(path).st_mode) != mode:  # after the attributes: an ACL's removal sets it
        os.chmod(path, mode)


def restore_times(path: str, start: os.stat_result | None) -> None:
    """Puts back a folder's times as `start` had them: last, as what a reset changes in it sets them."""
    if start is not None and os.lstat(path).st_uid == os.geteuid():
        os.utime(path, ns=(start.st_atime_ns, start.st_mtime_ns), follow_symlinks=False)


def _xattrs(path: str) -> list[str]:
    try:
        return os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.ENOSYS):  # a file system without them
            return []
        raise


IPC_RMID = 0


def remove_ipc() -> None:
    """Removes the System V message queues, shared memory segments and semaphore sets of the sandbox's IPC
    namespace (its own on every backend): they outlive the processes that made them, so what one episode
    left there the next would find (the red team's message survived a reset, docs/reliability.md 5j)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    for kind in ("msg", "shm", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            ident = int(row.split()[1])
            if kind == "sem":
                libc.semctl(ident, 0, IPC_RMID)
            else:
                getattr(libc, f"{kind}ctl")(ident, IPC_RMID, None)


def mount_points() -> set[str]:
    points = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            points.add(line.split()[4].replace("\\040", " "))
    return points


def clear_dir(path: str, mounts: set[str] | None = None) -> None:
    """Empties a folder, leaving alone what the sandbox mounted into it (the harness's Python may
    live under /tmp on the host, bound read-only at the same path). Raises when anything else is left:
    a reset that fails replaces the sandbox, one that leaves files leaks them to the next episode."""
    if not os.path.isdir(path):
        os.makedirs(path, exist_ok=True)
        return
    mounts = mount_points() if mounts is None else mounts
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if full in mounts:
            continue
        if any(m.startswith(full + "/") for m in mounts):
            clear_dir(full, mounts)
            continue
        _remove(full)
    left = [n for n in os.listdir(path) if not any(f"{m}/".startswith(f"{path}/{n}/") for m in mounts)]
    if left:
        raise OSError(errno.ENOTEMPTY, f"could not clear {path}: {sorted(left)[:5]} left")


Mark = tuple[int, int, bool]
"""An entry's inode, change time (ns) and whether it is a folder. A process without privileges cannot set
a change time: any write, chmod, rename, link or time change of the entry gives it a new one."""

Marks = dict[str, dict[str, Mark]]
"""The marks of a tree, by folder (relative to the tree's root, "" for the root) and then by name: a reset
looks each entry up by its name and rewrites only the folders it repaired."""


IN_OPEN, IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x20, 0x4000, 0x8000, 0x40000000
INOTIFY_EVENT = struct.Struct("iIII")
"""struct inotify_event: watch, mask, cookie, length of the name that follows."""


class Opened:
    """The files of the workdir that any process opened since the last reset, told by inotify.

    A write through a shared mapping (mmap) of a file on tmpfs changes neither its inode nor, once a read
    has mapped the page, its change time: a reset that went by the marks alone left the file as the agent
    made it (the red team, docs/reliability.md 5j). Such a write needs the file opened for writing, and
    the open of a file in a watched folder is queued as an event before `open` returns, so a reset
    compares each opened file with its pristine copy. Where inotify is not to be had (no ctypes, the
    user's instances or watches used up) or its queue overflowed, a reset compares every file."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.folders: dict[int, str] = {}
        """Watch -> the folder it watches, relative to the workdir."""
        self.watched: dict[str, int] = {}
        """Folder -> the inode its watch is on (a folder a reset copied back is a new inode)."""
        self.names: dict[str, set[str]] = {}
        self.everything = False
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return
        if fd >= 0:
            self.fd, self._add_watch = fd, libc.inotify_add_watch

    def watch(self, root: str, marks: Marks) -> None:
        """Watches each folder of `marks` that is not watched yet."""
        self.collect()  # a watch whose folder is gone is forgotten, even if a new one got its inode number
        if self.fd is None:
            return
        watched = {}
        for rel in marks:
            parent, _, name = rel.rpartition("/")
            inode = marks[parent][name][0] if rel else os.lstat(root).st_ino
            if self.watched.get(rel) != inode:
                wd = self._add_watch(self.fd, os.path.join(root, rel).encode(), IN_OPEN)
                if wd < 0:  # no watches left: from now on every file is compared
                    os.close(self.fd)
                    self.fd = None
                    return
                self.folders[wd] = rel
            watched[rel] = inode
        self.watched = watched

    def collect(self) -> None:
        """Adds the queued events to `names`."""
        while self.fd is not None:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            at = 0
            while at < len(data):
                wd, mask, _, size = INOTIFY_EVENT.unpack_from(data, at)
                name = data[at + INOTIFY_EVENT.size : at + INOTIFY_EVENT.size + size].rstrip(b"\0")
                at += INOTIFY_EVENT.size + size
                if mask & IN_Q_OVERFLOW:
                    self.everything = True
                elif mask & IN_IGNORED:  # the folder is gone: the next `watch` watches its new one
                    self.watched.pop(self.folders.pop(wd, "\0"), None)
                elif mask & IN_OPEN and not mask & IN_ISDIR and name and wd in self.folders:
                    self.names.setdefault(self.folders[wd], set()).add(os.fsdecode(name))

    def take(self) -> dict[str, set[str]] | None:
        """The names opened since the last `take`, by folder; None when any file may have been."""
        self.collect()
        names, everything = self.names, self.everything or self.fd is None
        self.names, self.everything = {}, False
        return None if everything else names

    def forget(self) -> None:
        """Drops the events queued since the last `collect` when no process but the executor runs: they
        are the executor's own opens."""
        if other_pids():
            self.collect()
            return
        kept, everything = self.names, self.everything
        self.names = {}
        self.collect()
        self.names, self.everything = kept, everything


def _mark(st: os.stat_result) -> Mark:
    return (st.st_ino, st.st_ctime_ns, stat.S_ISDIR(st.st_mode))


def walk_marks(root: str, rel: str, marks: Marks) -> int:
    """Adds the mark of every entry under `root`/`rel` to `marks`; returns the newest change time among
    them (0 when there are none)."""
    newest = 0
    stack = [rel]
    while stack:
        folder = stack.pop()
        names: dict[str, Mark] = {}
        with os.scandir(os.path.join(root, folder)) as entries:
            for entry in entries:
                names[entry.name] = mark = _mark(entry.stat(follow_symlinks=False))
                newest = max(newest, mark[1])
                if mark[2]:
                    stack.append(f"{folder}/{entry.name}" if folder else entry.name)
        marks[folder] = names
    return newest


def _scan(
    root: str, rel: str, known: dict[str, Mark], compare: set[str] | None, originals: Originals
) -> tuple[list[str], list[str], list[str], list[str]]:
    """The entries of folder `rel` against their marks: (names to remove: new or changed; names gone;
    folders to walk into; those of them that changed, opened up (u+rwx) to be walked and repaired). Each
    entry is read once, by an lstat relative to the folder's descriptor; a file in `compare` (None: every
    file) whose mark holds is also compared with its pristine copy."""
    stale: list[str] = []
    walk: list[str] = []
    opened: list[str] = []
    check: list[tuple[str, int]] = []
    seen = 0
    fd = os.open(os.path.join(root, rel), os.O_RDONLY | os.O_DIRECTORY)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                mark = known.get(entry.name)
                if mark is None:
                    stale.append(entry.name)
                    continue
                seen += 1
                if mark[1] == st.st_ctime_ns and mark[0] == st.st_ino:
                    if mark[2]:
                        walk.append(entry.name)
                    elif stat.S_ISREG(st.st_mode) and (compare is None or entry.name in compare):
                        check.append((entry.name, st.st_size))
                elif mark[2] and stat.S_ISDIR(st.st_mode):  # the same folder, changed: its mode, or entries
                    os.chmod(entry.name, 0o700, dir_fd=fd)
                    walk.append(entry.name)
                    opened.append(entry.name)
                else:
                    stale.append(entry.name)
        stale += originals.differing(fd, rel, check)
        if seen == len(known):  # every marked name is still there: nothing is gone
            return stale, [], walk, opened
        present = set(os.listdir(fd))
    finally:
        os.close(fd)
    return stale, [name for name in known if name not in present], walk, opened


def restore_changed(
    root: str,
    pristine: str,
    marks: Marks,
    opened: dict[str, set[str]] | None = None,
    originals: Originals | None = None,
) -> int:
    """Puts back, from `pristine`, what changed under `root` since `marks` were taken (each change gives a
    new change time, but for a write through a shared mapping: the files in `opened`, by folder, are
    compared with their pristine copies, by `originals`; None compares every file) and removes what is
    new, in one walk of the tree; updates `marks` to the result and returns the newest change time it
    gave (0 when nothing had changed)."""
    originals = Originals(pristine) if originals is None else originals
    newest = 0
    opened_up: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        known = marks[rel]
        compare = None if opened is None else opened.get(rel, set())
        stale, gone, walk, changed = _scan(root, rel, known, compare, originals)
        for name in stale:
            _remove(os.path.join(root, rel, name))
        for name in [*(n for n in stale if n in known), *gone]:
            newest = max(newest, _restore(root, pristine, f"{rel}/{name}" if rel else name, marks))
        stack.extend(f"{rel}/{name}" if rel else name for name in walk)
        opened_up.extend(f"{rel}/{name}" if rel else name for name in changed)
    for path in reversed(opened_up):  # a folder after what it holds: its own mode may be read-only
        shutil.copystat(os.path.join(pristine, path), os.path.join(root, path), follow_symlinks=False)
        parent, _, name = path.rpartition("/")
        marks[parent][name] = mark = _mark(os.lstat(os.path.join(root, path)))
        newest = max(newest, mark[1])
    return newest


class Originals:
    """The digests of the pristine files, each file read once: a reset compares an opened file by reading
    it alone (a third less of a reset's time where every file was opened)."""

    def __init__(self, pristine: str) -> None:
        self.pristine = pristine
        self.digests: dict[str, bytes] = {}

    def differing_in(self, root: str, rel: str, names: set[str]) -> set[str]:
        """The regular files among `names` of folder `rel` under `root` that differ from their pristine
        copies; all of `names` where the folder cannot be opened (the reset's walk sees to them)."""
        try:
            fd = os.open(os.path.join(root, rel), os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return names
        try:
            files = []
            for name in names:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # gone: the reset's walk puts it back
                if stat.S_ISREG(st.st_mode):
                    files.append((name, st.st_size))
            return set(self.differing(fd, rel, files))
        finally:
            os.close(fd)

    def differing(self, folder_fd: int, rel: str, files: list[tuple[str, int]]) -> list[str]:
        """The names among `files` (name, size) of folder `rel` whose bytes differ from their pristine
        copies' (or that cannot be read)."""
        differing = []
        for name, size in files:
            path = f"{rel}/{name}" if rel else name
            try:
                if (original := self.digests.get(path)) is None:
                    original = self.digests[path] = digest(os.path.join(self.pristine, path), size)
                if digest(name, size, folder_fd) != original:
                    differing.append(name)
            except OSError:
                differing.append(name)
        return differing


def digest(path: str, size: int, folder_fd: int | None = None) -> bytes:
    """SHA-256 of a file's bytes: one read where it is `size` bytes long (up to 1 MiB), as nearly every
    source file is."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
    try:
        want = min(size, 1 << 20) + 1
        data = os.read(fd, want)
        if len(data) < want:  # the end of the file
            return hashlib.sha256(data).digest()
        summed = hashlib.sha256(data)
        while data := os.read(fd, 1 << 20):
            summed.update(data)
        return summed.digest()
    finally:
        os.close(fd)


def _restore(root: str, pristine: str, path: str, marks: Marks) -> int:
    """Copies `path` back from `pristine` (a folder whole) and marks what it copied; returns the newest
    change time among those marks."""
    parent, _, name = path.rpartition("/")
    if marks[parent][name][2]:  # the marks of what the folder held go, the copy's come
        stack = [path]
        while stack:
            folder = stack.pop()
            stack.extend(f"{folder}/{n}" for n, m in marks.pop(folder).items() if m[2])
    target = os.path.join(root, path)
    copy_entry(os.path.join(pristine, path), target)
    marks[parent][name] = mark = _mark(os.lstat(target))
    return max(mark[1], walk_marks(root, path, marks)) if mark[2] else mark[1]


def _remove(path: str) -> None:
    """Removes a file, a link (never what it points to) or a folder with all it holds."""
    if stat.S_ISDIR(os.lstat(path).st_mode):
        remove_tree(path)
    else:
        os.unlink(path)


def remove_tree(path: str) -> None:
    """Removes a folder (not a link to one) and all it holds, however deep, without recursion, and opens
    up (u+rwx) each folder the agent closed (mode 000) before it reads it. Every folder a folder holds is
    first moved beside `path` under a free name, so no path grows past one name under `path`'s parent (the
    red team's 3,000 nested folders, docs/reliability.md 5j). A folder is told from a link by lstat and
    only folders are chmod-ed: no process of the agent is left to swap one for a link meanwhile."""
    parent, base = os.path.split(path)
    parent_fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.chmod(base, 0o700, dir_fd=parent_fd)
        pending, count = [base], 0
        while pending:
            folder = pending.pop()
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
            try:
                with os.scandir(fd) as entries:
                    found = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
                for name, is_dir in found:
                    if not is_dir:
                        os.unlink(name, dir_fd=fd)
                        continue
                    os.chmod(name, 0o700, dir_fd=fd)  # moving a folder writes its `..`
                    while True:
                        count += 1
                        moved = f".harness-removing-{count}"
                        if not os.path.lexists(os.path.join(parent, moved)):
                            break
                    os.rename(name, moved, src_dir_fd=fd, dst_dir_fd=parent_fd)
                    pending.append(moved)
            finally:
                os.close(fd)
            os.rmdir(folder, dir_fd=parent_fd)
    finally:
        os.close(parent_fd)


def settle(root: str, newest: int) -> None:
    """Waits until a file written now gets a change time after `newest`. Change times come from a coarse
    clock (a few ms a tick): without the wait, a write in the same tick as the reset would keep the mark
    it had, and the next reset would leave it in place."""
    probe = os.path.join(root, ".harness-reset-probe")
    try:
        while True:
            with open(probe, "w") as f:
                f.write("x")
            if os.lstat(probe).st_ctime_ns > newest:
                return
            time.sleep(0.001)
    finally:
        os.unlink(probe)


def copy_tree(src: str, dst: str) -> None:
    for name in os.listdir(src):
        copy_entry(os.path.join(src, name), os.path.join(dst, name))


def copy_entry(src: str, dst: str) -> None:
    """A folder (whole), a link (as a link) or a regular file, with its mode; a folder's and a link's
    times too. Leaner than shutil's copies, a third of their time: a reset copies hundreds of files."""
    if os.path.islink(src):
        _copy_link(src, dst)
    elif os.path.isdir(src):
        _copy_folder(src, dst)
    else:
        _copy_file(src, dst)


def _copy_folder(src: str, dst: str) -> None:
    os.mkdir(dst, 0o700)
    with os.scandir(src) as entries:
        for entry in entries:
            target = os.path.join(dst, entry.name)
            if entry.is_symlink():
                _copy_link(entry.path, target)
            elif entry.is_dir(follow_symlinks=False):
                _copy_folder(entry.path, target)
            else:
                _copy_file(entry.path, target)
    shutil.copystat(src, dst, follow_symlinks=False)  # last: the folder's own mode may be read-only


def _copy_link(src: str, dst: str) -> None:
    os.symlink(os.readlink(src), dst)
    shutil.copystat(src, dst, follow_symlinks=False)


def _copy_file(src: str, dst: str) -> None:
    """A regular file's bytes and mode; anything else is refused (opened without blocking: a FIFO)."""
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd_in)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file or folder", src)
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            _copy_bytes(fd_in, fd_out)
            os.fchmod(fd_out, stat.S_IMODE(st.st_mode))
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


def _copy_bytes(fd_in: int, fd_out: int) -> None:
    try:
        while os.sendfile(fd_out, fd_in, None, 1 << 30):
            pass
        return
    except OSError as e:  # a file system that cannot send its files: read and write them
        if e.errno not in (errno.EINVAL, errno.ENOSYS) or os.lseek(fd_in, 0, os.SEEK_CUR):
            raise
    while data := os.read(fd_in, CHUNK):
        while data:
            data = data[os.write(fd_out, data) :]


def serve(sock: socket.socket, executor: Executor) -> None:
    reader = sock.makefile("rb")
    while True:
        line = reader.readline()
        if not line:
            return
        ran = False
        try:
            req = json.loads(line)
        except ValueError as e:
            reply: dict = {"ok": False, "error": f"bad request: {e}"}
        else:
            reply = executor.handle(req)
            ran = req.get("op") == "exec"
            if "id" in req:
                reply["id"] = req["id"]
        sock.sendall(json.dumps(reply).encode() + b"\n")
        if ran:  # after the answer: the harness waits on its model meanwhile
            executor.compare_opened()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connect", required=True, help="Unix socket of the harness")
    parser.add_argument("--workdir", default="/repo")
    parser.add_argument("--pristine", default=None, help="read-only start state copied into workdir")
    parser.add_argument("--shell", default="/bin/sh")
    parser.add_argument("--label", default="", help="run and sandbox id, for ps and the reaper")
    parser.add_argument("--max-processes", type=int, default=None, help="the sandbox's process rlimit")
    args = parser.parse_args()
    if args.max_processes is not None:  # counted per user namespace: this sandbox's processes only
        resource.setrlimit(resource.RLIMIT_NPROC, (args.max_processes, args.max_processes))

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:  # a process of the agent with our uid must not be able to ptrace the executor
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TERM": "dumb",
    }
    watch_children()
    executor = Executor(args.workdir, args.pristine, args.shell, env)
    executor.populate()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(100):
        try:
            sock.connect(args.connect)
            break
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ECONNREFUSED):
                raise
            time.sleep(0.02)
    sock.sendall(json.dumps({"ok": True, "hello": os.getpid()}).encode() + b"\n")
    serve(sock, executor)
    kill_all(0.2)
    sys.exit(0)


if __name__ == "__main__":
    main()
