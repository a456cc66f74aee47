"""The bubblewrap backend: a sandbox made of namespaces and a control group, for hosts with no daemon.

The host's system folders are bound read-only, the repository lives on a size-capped tmpfs at /repo
(filled from a read-only bind of the start state), there is no network, every capability is dropped,
no user namespace can be made inside, and the in-sandbox executor is PID 1. Limits come from a control
group when the host lets us make one (root, or a delegated cgroup v2 subtree), else from rlimits, which
are weaker.
"""

from __future__ import annotations

import functools
import os
import queue
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from envs import cgroups
from envs.channel import ExecutorChannel
from envs.lifecycle import current_owner, track
from envs.remote import ExecutorSandbox
from envs.sandbox import WORKDIR, SandboxConfig, SandboxError

EXECUTOR = Path(__file__).with_name("executor.py")
SANDBOX_UID = 1000
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "nsswitch.conf",
    "ssl",
    "ca-certificates",
    "gitconfig",
    "mime.types",
)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def can_disable_userns(bwrap: str) -> bool:
    """bwrap 0.8 and later can stop the sandbox from making user namespaces of its own."""
    usage = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    return "--disable-userns" in usage.stdout


class Spawner:
    """Starts processes from one thread that lives as long as the process.

    bwrap's --die-with-parent is the kernel's parent-death signal, and the kernel sends it when the
    *thread* that started bwrap exits, not the process: a sandbox started from a worker thread (a
    thread pool's, a rollout's) would be killed when that thread ends, in the middle of its episode.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._jobs: queue.Queue[tuple[Future[Any], Callable[[], Any]]] = queue.Queue()

    def call(self, job: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # first use, or a forked child
                self._jobs = queue.Queue()
                self._thread = threading.Thread(target=self._serve, args=(self._jobs,), daemon=True)
                self._thread.start()
            done: Future[Any] = Future()
            self._jobs.put((done, job))
        return done.result()

    @staticmethod
    def _serve(jobs: queue.Queue[tuple[Future[Any], Callable[[], Any]]]) -> None:
        while True:
            done, job = jobs.get()
            try:
                done.set_result(job())
            except BaseException as e:
                done.set_exception(e)


SPAWNER = Spawner()


def python_dirs() -> list[str]:
    """Folders that hold the harness's Python, so the sandbox can run it (and pytest) read-only."""
    dirs = []
    for prefix in {
        sys.base_prefix,
        sys.prefix,
        os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
    }:
        if not any(prefix == d or prefix.startswith(d + "/") for d in SYSTEM_DIRS):
            dirs.append(prefix)
    return sorted(set(dirs))


class BwrapIsolation:
    name = "bwrap"

    def __init__(self, proc: subprocess.Popen[bytes], group: cgroups.Cgroup | None, stderr: Path) -> None:
        self.proc = proc
        self.group = group
        self.stderr = stderr

    def alive(self) -> bool:
        return self.proc.poll() is None

    def limit_events(self) -> tuple[int, int]:
        return self.group.events() if self.group is not None else (0, 0)

    def describe(self) -> str:
        code = self.proc.poll()
        if code is None:
            return f"bwrap pid {self.proc.pid} running"
        err = self.stderr.read_text(errors="replace")[-2000:] if self.stderr.exists() else ""
        return f"bwrap exited with {code}: {err.strip()}"

    def destroy(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.group is not None:
            self.group.destroy()
        self.stderr.unlink(missing_ok=True)


def start_bwrap(config: SandboxConfig, source_dir: Path | None) -> ExecutorSandbox:
    """Starts a bubblewrap sandbox whose /repo starts as a copy of `source_dir`."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxError("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    owner = current_owner(config.state_dir, config.expiry_s)
    run_dir = config.state_dir / owner.run_id
    sandbox_id = uuid.uuid4().hex[:12]
    sock_path = run_dir / f"{sandbox_id}.sock"
    channel = ExecutorChannel(sock_path)

    group: cgroups.Cgroup | None = cgroups.Cgroup(f"{cgroups.PARENT}/{owner.run_id}--{sandbox_id}")
    try:
        group.create(config.pids_limit, config.memory_mb << 20, config.cpus)  # type: ignore[union-attr]
    except OSError:
        group = None  # no writable cgroups here: rlimits below are all we have

    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL"]
    if can_disable_userns(bwrap):  # else the agent makes a user namespace, with every capability in it
        args += ["--unshare-user", "--disable-userns"]
    args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for name in ETC_FILES:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    identity = run_dir / "etc"
    identity.mkdir(exist_ok=True)
    for name, text in (
        ("passwd", f"root:x:0:0::/root:/bin/sh\nagent:x:{SANDBOX_UID}:{SANDBOX_UID}::/tmp:/bin/sh\n"),
        ("group", f"root:x:0:\nagent:x:{SANDBOX_UID}:\n"),
    ):
        if not (identity / name).exists():  # threads start sandboxes at once: write, then rename
            tmp = identity / f".{name}.{sandbox_id}"
            tmp.write_text(text)
            tmp.rename(identity / name)
    args += [
        "--ro-bind",
        str(identity / "passwd"),
        "/etc/passwd",
        "--ro-bind",
        str(identity / "group"),
        "/etc/group",
    ]
    # Run as root, bwrap maps the sandbox's user to the host's root (without capabilities): files that
    # only root may write are the sandbox's to write, so the kernel's settings in /proc/sys (the host's
    # own: core_pattern runs a program as root) are bound read-only, and /dev is read-only but for a
    # size-capped /dev/shm that reset empties.
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    args += ["--size", str(config.tmp_mb << 20), "--perms", "1777", "--tmpfs", "/dev/shm"]
    args += ["--remount-ro", "/dev"]
    args += ["--size", str(config.tmp_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
    args += ["--size", str(config.disk_mb << 20), "--perms", "0755", "--tmpfs", WORKDIR]
    for d in python_dirs():  # after the tmpfs mounts: a Python under /tmp must not be hidden by them
        args += ["--ro-bind", d, d]
    pristine = []
    if source_dir is not None:
        args += ["--ro-bind", str(Path(source_dir).resolve()), "/opt/pristine"]
        pristine = ["--pristine", "/opt/pristine"]
    args += ["--ro-bind", str(EXECUTOR), "/opt/harness/executor.py"]
    args += ["--bind", str(sock_path), "/run/harness.sock", "--chdir", WORKDIR]
    args += ["--remount-ro", "/"]  # bwrap's root is a tmpfs: files put there would outlive a reset
    python = os.path.realpath(sys.executable)
    args += [python, "-I", "/opt/harness/executor.py", "--connect", "/run/harness.sock", "--workdir", WORKDIR]
    args += [*pristine, "--label", f"{owner.run_id}/{sandbox_id}"]

    # A shell puts itself into the control group and sets rlimits before it becomes bwrap, so not even
    # bwrap's first fork escapes the limits.
    setup = [f"echo $$ > {f}" for f in (group.procs_files() if group else [])]
    setup += [f"ulimit -f {config.disk_mb * 1024 * 2}"]  # largest file, in 512-byte blocks
    if group is None:
        setup += [f"ulimit -u {config.pids_limit}", f"ulimit -v {(config.memory_mb + 512) * 1024}"]
    script = "; ".join(setup) + '; exec "$@"'
    path_dirs = [os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]
    env = {"PATH": ":".join(dict.fromkeys(path_dirs)), "HOME": "/tmp", "LANG": "C.UTF-8"}
    stderr_path = run_dir / f"{sandbox_id}.stderr"
    with stderr_path.open("wb") as stderr:
        proc: subprocess.Popen[bytes] = SPAWNER.call(
            lambda: subprocess.Popen(
                ["/bin/sh", "-c", script, "sh", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
                close_fds=True,
            )
        )
    sandbox = ExecutorSandbox(sandbox_id, BwrapIsolation(proc, group, stderr_path), channel, config)
    track(sandbox)
    sandbox.start()
    return sandbox
