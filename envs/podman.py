"""The Podman backend: one container per sandbox through the `podman` command line, with no daemon.

The closed defaults and labels are Docker's (`envs/docker.py`): no network, every capability dropped, no new
privileges, pids / memory / CPU limits, a read-only root with size-capped tmpfs for /repo and /tmp and no
other writable folder (podman's `--read-only` alone would add tmpfs on /run and /var/tmp), the executor as
PID 1 connecting back over a bound socket file, and labels naming the owner run and an expiry. Podman's
default seccomp profile allows what Docker's refuses a process without capabilities (a sandbox made
itself a user namespace with `unshare -Ur`): each run's containers get that profile with new namespaces,
mounts and key rings refused (`closed_profile`). Open files are capped by the settings (`open_files`) and
processes at the harness's own limit, as a Docker container inherits its daemon's (`process_limits`).

Run by root, podman is rootful and still daemonless: each container's only parent is its monitor (conmon),
and nothing listens for requests. Run by another user it is rootless, which enforces the limits only where
the cgroup v2 controllers are delegated to that user; where they are not (cgroup v1 here), `unavailable` says
so rather than start sandboxes without limits. On a host without systemd podman keeps its control groups
itself (cgroupfs) and writes its events to a file, by its own defaults.

Images live in podman's own storage. An image podman lacks and Docker has (the sandbox image `make image`
builds) is loaded from Docker's once; task images and environments are built by podman, offline
(`--network none --pull=never`).

Every podman command is bounded (a start by `start_timeout_s`, a sandbox's other commands by
`docker_timeout_s`, the rest by `PODMAN_TIMEOUT_S`). A container that a cut-off or failed command may have
left is removed at the next start, and at exit; a dead run's, by the reaper (`reap_containers`).
"""

from __future__ import annotations

import atexit
import errno
import functools
import json
import os
import resource
import shutil
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import docker.errors
import requests.exceptions

from envs import cgroups
from envs.channel import ExecutorChannel, Peer, UnixListener
from envs.docker import ENTRYPOINT, EXECUTOR, client, daemon_answers
from envs.host_paths import readable_source
from envs.lifecycle import LABEL, Owner, current_owner, dead_run, log_reaped, track
from envs.remote import ExecutorSandbox
from envs.sandbox import WORKDIR, SandboxConfig, SandboxError

PODMAN_TIMEOUT_S = 30.0
"""Longest wait for one podman command that is not a start, a build or a load."""
STRAY_TIMEOUT_S = 10.0
BUILD_TIMEOUT_S = 1800.0
NPROC_CEILING = 32768
"""Podman 4.3 lowers its own process limit to this before it starts a container, which cannot have more."""
DEFAULT_PROFILES = (Path("/etc/containers/seccomp.json"), Path("/usr/share/containers/seccomp.json"))
"""Where podman's default seccomp profile lives (the first of them that exists)."""
REFUSED = {
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "keyctl", "add_key", "request_key",
}  # fmt: skip
"""System calls that podman's default profile allows and Docker's refuses a process without CAP_SYS_ADMIN:
new namespaces (a user namespace needs no privilege, and gives its maker every capability inside it),
mounts, and the kernel's key rings (which outlive a process: `envs/seccomp.py`)."""
NAMESPACE_FLAGS = 0x7E020000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET: a clone with any of them is refused."""
LIMITS = {"pids", "memory", "cpu"}
"""The control group controllers the sandbox's limits need."""
_images_lock = threading.Lock()
_ready: set[str] = set()
"""Images this process found or put in podman's storage: each is looked for once per process."""
_profile_lock = threading.Lock()
_strays: set[str] = set()
"""Names of containers that cut-off or failed commands may have left behind."""
_strays_lock = threading.Lock()


def podman_path() -> str | None:
    return shutil.which("podman")


def podman(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`podman ARGS`, killed after `timeout` seconds: a command that hangs is an infra error."""
    command = [podman_path() or "podman", *args]
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as e:
        raise SandboxError(f"`podman {args[0]}` did not end within {timeout:.0f} s") from e
    except OSError as e:
        raise SandboxError(f"podman could not run: {e}") from e


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return (done.stderr.strip() or done.stdout.strip())[-1500:]


@functools.cache
def podman_unavailable() -> str | None:
    """Why podman cannot run sandboxes here (not installed, broken, no limits), or None; asked once."""
    if podman_path() is None:
        return "podman is not installed"
    try:
        done = podman(["info", "--format", "json"], PODMAN_TIMEOUT_S)
    except SandboxError as e:
        return str(e)
    if done.returncode != 0:
        return f"podman does not work here: {_said(done)}"
    try:
        default_profile()
    except SandboxError as e:
        return str(e)
    host = json.loads(done.stdout)["host"]
    if host["security"]["rootless"] and not set(host["cgroupControllers"] or []) >= LIMITS:
        return (
            f"rootless podman cannot enforce the sandbox's pids, memory and CPU limits here (cgroup "
            f"{host['cgroupVersion']}, controllers delegated: {', '.join(host['cgroupControllers'] or []) or 'none'})"
        )
    return None


@functools.cache
def default_profile() -> dict[str, Any]:
    for path in DEFAULT_PROFILES:
        if path.is_file():
            profile: dict[str, Any] = json.loads(path.read_text())
            return profile
    raise SandboxError(
        f"podman's default seccomp profile is in none of {', '.join(map(str, DEFAULT_PROFILES))}"
    )


def closed_profile(default: dict[str, Any]) -> dict[str, Any]:
    """`default` with `REFUSED` failing with EPERM and clone refused new namespaces, as in Docker's default
    profile; clone3, whose flags a filter cannot read, says ENOSYS, so that the C library uses clone."""
    rules = []
    for rule in default["syscalls"]:
        if rule["action"] == "SCMP_ACT_ALLOW":
            rule = {**rule, "names": [n for n in rule["names"] if n not in {*REFUSED, "clone", "clone3"}]}
        if rule["names"]:
            rules.append(rule)
    no_namespaces = {"index": 0, "value": NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}
    rules += [
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [no_namespaces]},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
        {"names": sorted(REFUSED), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
    ]
    return {**default, "syscalls": rules}


def profile_file(run_dir: Path) -> Path:
    """The run's seccomp profile (`closed_profile`), written once into its folder."""
    path = run_dir / "seccomp.json"
    with _profile_lock:
        if not path.is_file():
            tmp = run_dir / f".seccomp.json.{os.getpid()}"
            tmp.write_text(json.dumps(closed_profile(default_profile())))
            tmp.rename(path)  # a podman started meanwhile never reads it half-written
    return path


def _add_stray(name: str) -> None:
    with _strays_lock:
        _strays.add(name)


def _remove(name: str, timeout: float) -> bool:
    """Removes container `name`, its processes killed at once; whether it is gone (False: it may stay)."""
    try:
        done = podman(["rm", "--force", "--time", "0", name], timeout)
    except SandboxError:
        return False
    return done.returncode == 0 or "no such container" in done.stderr.lower()


@atexit.register
def remove_strays() -> None:
    """Removes the stray containers; those podman still cannot remove stay listed."""
    with _strays_lock:
        names = sorted(_strays)
    for name in names:
        if not _remove(name, STRAY_TIMEOUT_S):
            return  # tried again at the next start and at exit; after a crash, the reaper removes them
        with _strays_lock:
            _strays.discard(name)


def _process(pid: int) -> tuple[str, int] | None:
    """(state, start in clock ticks since boot) of `pid`, or None when no such process runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return fields[0], int(fields[19])


def _cgroup_of(pid: int) -> cgroups.Cgroup | None:
    """The control group of process `pid` (a container's PID 1), to read its limit counters."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    paths: dict[str, str] = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        paths.update(dict.fromkeys(controllers.split(","), path))
    own = paths.get("" if cgroups.is_v2() else "pids")
    if own is None:
        return None
    group = cgroups.Cgroup(own.lstrip("/"))
    return group if all(d.is_dir() for d in group.dirs.values()) else None


class PodmanIsolation:
    """A container known by its name and its PID 1: alive while that process runs, so that the checks of a
    busy sandbox cost no podman command."""

    name = "podman"

    def __init__(self, container: str, pid: int, timeout: float) -> None:
        self.container = container
        self.pid = pid
        self.timeout = timeout
        found = _process(pid) if pid > 0 else None
        self.ticks = found[1] if found is not None else None
        self.group = _cgroup_of(pid) if found is not None else None

    def alive(self) -> bool:
        found = _process(self.pid) if self.ticks is not None else None
        return found is not None and found[0] != "Z" and found[1] == self.ticks

    def not_executor(self, peer: Peer) -> str | None:
        """Why the process that connected to the socket is not this container's executor (its PID 1)."""
        return None if peer.pid == self.pid > 0 else f"not the container's process {self.pid}"

    def limit_events(self) -> tuple[int, int]:
        return self.group.events() if self.group is not None else (0, 0)

    def describe(self) -> str:
        state = "{{.State.Status}} exit={{.State.ExitCode}} oom_killed={{.State.OOMKilled}}"
        try:
            inspected = podman(["inspect", "--format", state, self.container], self.timeout)
            logs = podman(["logs", "--tail", "20", self.container], self.timeout)
        except SandboxError as e:
            return f"container {self.container}: {e}"
        return f"container {self.container} {_said(inspected)} {(logs.stdout + logs.stderr).strip()}"

    def destroy(self) -> None:
        if not _remove(self.container, self.timeout):
            _add_stray(self.container)


def container_name(owner: Owner, sandbox_id: str) -> str:
    return f"harness-{owner.run_id}-{sandbox_id}"


def _bind(source: Path, target: str, mode: str) -> list[str]:
    if ":" in str(source):  # podman's --volume splits at colons
        raise SandboxError(f"podman cannot mount {source}: its path holds a colon")
    return ["--volume", f"{source}:{target}:{mode}"]


def process_limits(open_files: int) -> list[str]:
    """The open files limit of the settings, and the processes limit a Docker container inherits from its
    daemon, here the harness's own. Left alone, rootful podman asks for 1048576 of each, which a root
    without CAP_SYS_RESOURCE (this kind of VM) cannot grant, and podman 4.3 lowers its own process limit to
    `NPROC_CEILING` before it starts a container."""
    nproc = min(
        NPROC_CEILING, *(n for n in resource.getrlimit(resource.RLIMIT_NPROC) if n != resource.RLIM_INFINITY)
    )
    own = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = open_files if own == resource.RLIM_INFINITY else min(open_files, own)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def run_options(
    config: SandboxConfig, owner: Owner, sandbox_id: str, sock: Path, source: Path | None
) -> list[str]:
    """`podman run`'s options of a sandbox: Docker's closed defaults (`envs.docker._start_container`)."""
    memory, fsize = f"{config.memory_mb}m", config.disk_mb << 20
    options = [
        "--detach", "--pull=never", "--name", container_name(owner, sandbox_id),
        "--network", "none", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--security-opt", f"seccomp={profile_file(config.state_dir / owner.run_id)}",
        "--pids-limit", str(config.pids_limit), "--memory", memory, "--memory-swap", memory,
        "--cpus", str(config.cpus), "--read-only", "--read-only-tmpfs=false",
        # Podman mounts a tmpfs noexec unless told: the repository's scripts must run. U: owned by the user.
        "--tmpfs", f"{WORKDIR}:rw,size={config.disk_mb}m,mode=0755,exec,U",
        "--tmpfs", f"/tmp:rw,size={config.tmp_mb}m,mode=1777,exec",
        "--user", "1000:1000", "--workdir", WORKDIR, "--ulimit", f"fsize={fsize}:{fsize}", *process_limits(config.open_files),
        "--entrypoint", json.dumps(ENTRYPOINT),
        *_bind(sock, "/run/harness.sock", "rw"), *_bind(EXECUTOR, "/opt/harness/executor.py", "ro"),
    ]  # fmt: skip
    if source is not None:
        options += _bind(source, "/opt/pristine", "ro")
    for key, value in {**owner.labels(), "harness.sandbox": sandbox_id}.items():
        options += ["--label", f"{key}={value}"]
    return options


def start_podman(config: SandboxConfig, source_dir: Path | None, image: str | None = None) -> ExecutorSandbox:
    """Starts a container from `image` (default: the config's, which podman must hold: `ensure_image`)
    whose /repo starts as `source_dir`."""
    owner = current_owner(config.state_dir, config.expiry_s, reap_containers)
    source = None
    if source_dir is not None:
        source = readable_source(Path(source_dir).resolve(), config.state_dir / owner.run_id)
    sandbox_id = uuid.uuid4().hex[:12]
    name = container_name(owner, sandbox_id)
    listener = UnixListener(config.state_dir / owner.run_id / sandbox_id)
    channel = ExecutorChannel(listener)
    label = f"{owner.run_id}/{sandbox_id}"
    command = ["--connect", "/run/harness.sock", "--workdir", WORKDIR, "--label", label]
    command += ["--pristine", "/opt/pristine"]
    try:
        options = run_options(config, owner, sandbox_id, listener.path, source)
        done = podman(["run", *options, image or config.image, *command], config.start_timeout_s)
        if done.returncode != 0:
            raise SandboxError(f"podman could not start a sandbox: {_said(done)}")
        pid = podman(["inspect", "--format", "{{.State.Pid}}", name], config.docker_timeout_s).stdout.strip()
    except SandboxError:
        channel.close()
        if not _remove(name, config.docker_timeout_s):  # a failed or cut-off start may have made it
            _add_stray(name)
        raise
    isolation = PodmanIsolation(name, int(pid) if pid.isdigit() else 0, config.docker_timeout_s)
    listener.check = isolation.not_executor
    sandbox = ExecutorSandbox(sandbox_id, isolation, channel, config)
    track(sandbox)
    if _strays:
        remove_strays()
    sandbox.start()
    return sandbox


# ---- images --------------------------------------------------------------------------------------


def image_exists(tag: str) -> bool:
    return podman(["image", "exists", tag], PODMAN_TIMEOUT_S).returncode == 0


def ensure_image(tag: str, context: Path | None, timeout_s: float = BUILD_TIMEOUT_S) -> None:
    """Makes sure podman holds `tag`, once per process: built offline from `context`/Dockerfile when given,
    else loaded from Docker's storage (where `make image` builds the sandbox image)."""
    with _images_lock:  # two sandboxes of one task must not build its image twice at once
        if tag in _ready or image_exists(tag):
            _ready.add(tag)
            return
        if context is not None:
            build_image(tag, context, timeout_s)
        else:
            load_from_docker(tag, timeout_s)
        _ready.add(tag)


def build_image(tag: str, context: Path, timeout_s: float) -> None:
    """Builds `tag` from `context`/Dockerfile with no network and no pulls: its base must be in podman's
    storage already."""
    args = ["build", "--network", "none", "--pull=never", "--quiet", "--tag", tag, str(context)]
    done = podman(args, timeout_s)
    if done.returncode != 0:
        raise SandboxError(f"podman could not build image {tag} from {context}/Dockerfile: {_said(done)}")


def load_from_docker(tag: str, timeout_s: float) -> None:
    """Copies image `tag` from Docker's storage into podman's (`docker save | podman load`)."""
    missing = f"image {tag!r} is not in podman's storage, nor in Docker's to load it from: build it with `make image`"
    if not daemon_answers():
        raise SandboxError(f"{missing} (no Docker daemon answers)")
    with tempfile.TemporaryDirectory(prefix="harness-podman-load-", dir="/var/tmp") as tmp:
        archive = Path(tmp) / "image.tar"
        try:
            with archive.open("wb") as f:
                for chunk in client().images.get(tag).save(named=tag):
                    f.write(chunk)
        except docker.errors.ImageNotFound as e:
            raise SandboxError(missing) from e
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as e:
            raise SandboxError(f"docker could not save image {tag}: {e}") from e
        os.chmod(tmp, 0o755)  # rootless podman reads it as its own user too
        done = podman(["load", "--quiet", "--input", str(archive)], timeout_s)
    if done.returncode != 0:
        raise SandboxError(f"podman could not load image {tag} from Docker's: {_said(done)}")


# ---- the reaper ----------------------------------------------------------------------------------


def reap_containers(me: str | None, state_dir: Path) -> int:
    """Removes the containers of dead runs other than `me` (a `StrayReaper`, `envs.lifecycle.reap`)."""
    listed = podman(["ps", "--all", "--filter", f"label={LABEL}", "--format", "json"], PODMAN_TIMEOUT_S)
    if listed.returncode != 0:
        raise SandboxError(f"podman could not list containers: {_said(listed)}")
    removed = 0
    for container in json.loads(listed.stdout or "[]"):
        try:
            owner = Owner.from_labels(container["Labels"] or {})
        except (KeyError, ValueError):
            continue  # not a run's as this harness labels them: never decided on a label it cannot read
        if owner.run_id == me:
            continue
        with dead_run(owner, Path(owner.lock) if owner.lock else None) as reason:
            name = container["Names"][0]
            # Runs that start together reap the same leftovers: a container may vanish under our feet.
            if reason is not None and _remove(name, PODMAN_TIMEOUT_S):
                removed += 1
                log_reaped(state_dir, owner.run_id, f"podman container {name} removed: {reason}")
    return removed
