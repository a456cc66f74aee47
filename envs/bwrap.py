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
import resource
import shlex
import shutil
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import psutil

from envs import cgroups
from envs.channel import ExecutorChannel, Peer, UnixListener
from envs.host_paths import reachable, readable_source
from envs.lifecycle import current_owner, track
from envs.python_env import sandbox_env
from envs.remote import ExecutorSandbox
from envs.sandbox import WORKDIR, SandboxConfig, SandboxError
from envs.seccomp import keyring_filter

EXECUTOR = Path(__file__).with_name("executor.py")
SANDBOX_UID = 1000
BRIDGE_ROOT = Path("/tmp/.harness-bridges")
"""Empty folders that host folders the sandbox's user cannot reach are bound on, in its own mount namespace."""
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
"""PATH in the sandbox after the Python environment's own bin folder."""
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
    "java-17-openjdk",  # a Debian JDK's conf/ links here: no JVM starts without its java.security
    "java-21-openjdk",
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

    def __init__(
        self, proc: subprocess.Popen[bytes], group: cgroups.Cgroup | None, stderr: Path, uid: int
    ) -> None:
        self.proc = proc
        self.group = group
        self.stderr = stderr
        self.uid = uid
        """The host user the sandbox's processes run as."""

    def not_executor(self, peer: Peer) -> str | None:
        """Why the process that connected to the socket is not this sandbox's executor: that is bwrap's
        child (PID 1 of the sandbox, `--as-pid-1`), of the sandbox's host user."""
        try:
            parent = psutil.Process(peer.pid).ppid()
        except psutil.Error:
            return "no such process"
        if parent != self.proc.pid or peer.uid != self.uid:
            return f"not bwrap {self.proc.pid}'s child of uid {self.uid} (parent {parent})"
        return None

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


def sandbox_host_user(config: SandboxConfig) -> int | None:
    """The host uid to drop to before bwrap: `config.host_uid` when the harness runs as root, else None.

    Started by root, bwrap would map the sandbox's user to the host's root (without capabilities, but
    the owner of every root file it can reach, and free of the process rlimit, which the kernel does not
    apply to root). Started by another user, it maps to that user, who is unprivileged already.
    """
    return config.host_uid if os.geteuid() == 0 else None


def _run_files(run_dir: Path, uid: int | None) -> tuple[Path, Path]:
    """The run's copies of the executor and of the sandbox's passwd / group / hosts files, readable by `uid`.

    Sandboxes of a run start from threads at once: each file is written under a private name, then
    renamed into place.
    """
    if uid is not None:  # the sandbox's user finds the run's sockets and files in it
        run_dir.chmod(run_dir.stat().st_mode | 0o111)
    etc = run_dir / "etc"
    etc.mkdir(exist_ok=True)
    etc.chmod(0o755)
    files = {
        etc / "passwd": f"root:x:0:0::/root:/bin/sh\nagent:x:{SANDBOX_UID}:{SANDBOX_UID}::/tmp:/bin/sh\n",
        etc / "group": f"root:x:0:\nagent:x:{SANDBOX_UID}:\n",
        etc / "hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost\n",  # as Docker's: vite looks localhost up
        run_dir / "executor.py": EXECUTOR.read_text(),
    }
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
            tmp.write_text(text)
            tmp.chmod(0o644)
            tmp.rename(path)
    return etc, run_dir / "executor.py"


class Bridges:
    """Host folders the sandbox's user cannot find by name, each with the folder it is reached through.

    bwrap looks up what it binds as the sandbox's host user, so a folder under a parent only root may
    search (a checkout or a state folder in /root, or in a private temporary folder) cannot be bound as
    it is. Root binds each such folder onto an empty folder of `BRIDGE_ROOT`, in a mount namespace made
    for this one sandbox (the host's mounts do not change), and bwrap binds from there.
    """

    def __init__(self, folders: list[Path], uid: int | None) -> None:
        far = [] if uid is None else [f for f in dict.fromkeys(folders) if not reachable(f, uid, uid)]
        self.points: dict[Path, Path] = {}
        if far:
            _make_bridge_root()
        for i, folder in enumerate(far):
            point = BRIDGE_ROOT / str(i)
            point.mkdir(mode=0o755, exist_ok=True)
            self.points[folder] = point

    def __call__(self, path: Path | str) -> str:
        """`path` as the sandbox's host user reaches it."""
        path = Path(path)
        for folder, point in self.points.items():
            if path == folder or folder in path.parents:
                return str(point / path.relative_to(folder))
        return str(path)

    def launcher(self) -> list[str]:
        """The command prefix that makes the mount namespace with the bridges, or nothing when none."""
        if not self.points:
            return []
        mounts = [f"mount --bind {shlex.quote(str(f))} {shlex.quote(str(p))}" for f, p in self.points.items()]
        script = " && ".join(mounts) + ' && exec "$@"'
        return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh"]


def _make_bridge_root() -> None:
    BRIDGE_ROOT.mkdir(mode=0o755, exist_ok=True)
    st = BRIDGE_ROOT.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise SandboxError(f"{BRIDGE_ROOT} must be a folder of root's that only root may write")


def _bwrap_args(
    bwrap: str, config: SandboxConfig, run_dir: Path, uid: int | None, source: Path | None, env: Path | None
) -> tuple[list[str], Bridges]:
    """bwrap's arguments up to the executor's command, and the bridges they need."""
    etc, executor = _run_files(run_dir, uid)
    env = sandbox_env(config.python_env)
    modules = [config.node_modules] if config.node_modules is not None else []
    binds = (
        [Path(d) for d in python_dirs()] + ([env] if env else []) + ([source] if source is not None else [])
    ) + modules
    bridge = Bridges([*binds, run_dir], uid)
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL"]
    if _seccomp_file(run_dir) is not None:  # read from SECCOMP_FD, which the launcher opens
        args += ["--seccomp", str(SECCOMP_FD)]
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
    args += [
        "--ro-bind",
        bridge(etc / "passwd"),
        "/etc/passwd",
        "--ro-bind",
        bridge(etc / "group"),
        "/etc/group",
        "--ro-bind",
        bridge(etc / "hosts"),
        "/etc/hosts",
    ]
    # The kernel's settings in /proc/sys are the host's own (core_pattern runs a program as root), and
    # /dev is read-only but for a size-capped /dev/shm and the sandbox's own POSIX message queues in
    # /dev/mqueue, which reset empties (without that mount a queue outlived the reset: the red team's
    # `mq_open("/leak")`, docs/reliability.md 5j).
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    args += ["--size", str(config.tmp_mb << 20), "--perms", "1777", "--tmpfs", "/dev/shm"]
    args += ["--mqueue", "/dev/mqueue"]
    args += ["--remount-ro", "/dev"]
    args += ["--size", str(config.tmp_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
    args += ["--size", str(config.disk_mb << 20), "--perms", "0755", "--tmpfs", WORKDIR]
    for d in [*python_dirs(), *([str(env)] if env else [])]:  # after the tmpfs mounts: a Python under
        args += ["--ro-bind", bridge(d), d]  # /tmp must not be hidden by them
    if source is not None:
        args += ["--ro-bind", bridge(source), "/opt/pristine"]
    for folder in modules:  # envs/npm_env.py: where Node's resolution ends, outside /repo
        args += ["--ro-bind", bridge(folder), "/node_modules"]
    args += ["--ro-bind", bridge(executor), "/opt/harness/executor.py"]
    return args, bridge


SECCOMP_FD = 9
"""The descriptor bwrap reads its seccomp filter from (`envs/seccomp.py`)."""


def _seccomp_file(run_dir: Path) -> Path | None:
    """The run's compiled filter that refuses the kernel's key rings (written once); None where this
    machine's system call numbers are not known."""
    program = keyring_filter()
    if program is None:
        return None
    path = run_dir / "keyrings.bpf"
    if not path.is_file() or path.read_bytes() != program:  # sandboxes start from many threads at once
        fresh = run_dir / f"keyrings.bpf.{uuid.uuid4().hex}"
        fresh.write_bytes(program)
        os.replace(fresh, path)
    return path


def _launcher(
    group: cgroups.Cgroup | None, config: SandboxConfig, uid: int | None, bridge: Bridges, run_dir: Path
) -> list[str]:
    """The command that puts itself into the control group, sets the rlimits a shell can, becomes the
    sandbox's host user and then bwrap, so that not even bwrap's first fork escapes the limits."""
    setup = [f"echo $$ > {f}" for f in (group.procs_files() if group else [])]
    seccomp = _seccomp_file(run_dir)
    setup += [f"exec {SECCOMP_FD}< {shlex.quote(str(seccomp))}"] if seccomp is not None else []
    setup += [f"ulimit -f {config.disk_mb * 1024 * 2}"]  # largest file, in 512-byte blocks
    own = resource.getrlimit(resource.RLIMIT_NOFILE)[1]  # a shell cannot raise it past its own hard limit
    setup += [
        f"ulimit -n {config.open_files if own == resource.RLIM_INFINITY else min(config.open_files, own)}"
    ]
    if group is None:  # the process limit is the executor's own rlimit (--max-processes)
        setup += [f"ulimit -v {(config.memory_mb + 512) * 1024}"]
    command = ["/bin/sh", "-c", "; ".join(setup) + '; exec "$@"', "sh"]
    if uid is None:
        return command
    if shutil.which("setpriv") is None:
        raise SandboxError(
            "setpriv (util-linux) is needed to run bubblewrap sandboxes as an unprivileged user"
        )
    return [
        *command,
        *bridge.launcher(),
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--",
    ]


def start_bwrap(config: SandboxConfig, source_dir: Path | None) -> ExecutorSandbox:
    """Starts a bubblewrap sandbox whose /repo starts as a copy of `source_dir`."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxError("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    env = sandbox_env(config.python_env)
    owner = current_owner(config.state_dir, config.expiry_s)
    run_dir = config.state_dir / owner.run_id
    uid = sandbox_host_user(config)
    source = None
    if source_dir is not None:
        source = Path(source_dir).resolve()
        source = readable_source(source, run_dir) if uid is not None else source
    sandbox_id = uuid.uuid4().hex[:12]
    listener = UnixListener(run_dir / sandbox_id, uid)  # bwrap, as `uid`, binds it into the sandbox

    group: cgroups.Cgroup | None = cgroups.Cgroup(f"{cgroups.PARENT}/{owner.run_id}--{sandbox_id}")
    try:
        group.create(config.pids_limit, config.memory_mb << 20, config.cpus)  # type: ignore[union-attr]
    except OSError:
        group = None  # no writable cgroups here: rlimits are all we have

    args, bridge = _bwrap_args(bwrap, config, run_dir, uid, source, env)
    args += ["--bind", bridge(listener.path), "/run/harness.sock", "--chdir", WORKDIR]
    args += ["--remount-ro", "/"]  # bwrap's root is a tmpfs: files put there would outlive a reset
    python = os.path.realpath(sys.executable)
    args += [
        python,
        "-I",
        "-S",
        "/opt/harness/executor.py",
        "--connect",
        "/run/harness.sock",
        "--workdir",
        WORKDIR,
    ]
    args += ["--pristine", "/opt/pristine"] if source is not None else []
    args += ["--label", f"{owner.run_id}/{sandbox_id}"]
    if group is None:  # with a cgroup, its pids.max alone refuses forks, and counts them (limit_events)
        args += ["--max-processes", str(config.pids_limit)]
    command = _launcher(group, config, uid, bridge, run_dir) + args
    path_dirs = [str(env / "bin") if env else os.path.dirname(sys.executable), *SYSTEM_PATH]
    variables = {"PATH": ":".join(dict.fromkeys(path_dirs)), "HOME": "/tmp", "LANG": "C.UTF-8"}
    stderr_path = run_dir / f"{sandbox_id}.stderr"
    with stderr_path.open("wb") as stderr:
        proc: subprocess.Popen[bytes] = SPAWNER.call(
            lambda: subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=variables,
                close_fds=True,
            )
        )
    isolation = BwrapIsolation(proc, group, stderr_path, os.geteuid() if uid is None else uid)
    listener.check = isolation.not_executor
    sandbox = ExecutorSandbox(sandbox_id, isolation, ExecutorChannel(listener), config)
    track(sandbox)
    sandbox.start()
    return sandbox
