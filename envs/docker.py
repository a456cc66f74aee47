"""The Docker backend: one container per sandbox, through the Docker SDK, closed by default.

No network, every capability dropped, no new privileges, pids / memory / CPU limits, a read-only root
with size-capped tmpfs for /repo and /tmp, and labels naming the owner run and an expiry. The executor
is the container's entrypoint (PID 1) and connects back over a bound socket file, so a command costs a
socket round trip, not a `docker exec`.

Every call to the daemon is bounded (`docker_timeout_s`). A sandbox start waits for a daemon that does not
answer (stopped, restarting) up to `start_timeout_s`, so a daemon restart costs no rollout, and only then
fails as an infra error. A container that a cut-off call may have left (created after the client gave up,
or not removed) is removed as soon as the daemon answers again, and at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions

from envs import cgroups
from envs.channel import ExecutorChannel, Peer, UnixListener
from envs.host_paths import readable_source
from envs.lifecycle import LABEL, Owner, current_owner, dead_run, log_reaped, track
from envs.remote import ExecutorSandbox
from envs.sandbox import WORKDIR, SandboxConfig, SandboxError

EXECUTOR = Path(__file__).with_name("executor.py")
ENTRYPOINT = ["python3", "-I", "-S", "/opt/harness/executor.py"]
"""The executor needs the standard library alone: without `site` (-S) no path file of a task's environment
puts the repository on its sys.path, where a module it imports late would find a file the agent wrote."""
API_TIMEOUT_S = 30.0
"""Every call to the daemon is bounded: a stopped daemon is an infra error, not a hang."""
STRAY_TIMEOUT_S = 5.0
BUILD_TIMEOUT_S = 1800.0
_BUILD_LOCK = threading.Lock()
_strays: set[str] = set()
"""Names of containers that cut-off calls may have left behind, to remove when the daemon answers."""
_strays_lock = threading.Lock()


@functools.cache
def client(timeout: float = API_TIMEOUT_S) -> docker.DockerClient:
    return docker.from_env(timeout=timeout)


class _Unanswered(SandboxError):
    """The daemon did not answer (down, restarting, stopped): worth waiting for, unlike a refusal."""


def _unanswered(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
            return True
        error = error.__cause__ or error.__context__
    return False


def _add_stray(name: str) -> None:
    with _strays_lock:
        _strays.add(name)


@atexit.register
def remove_strays() -> None:
    """Removes the stray containers; those the daemon still does not answer for stay listed."""
    with _strays_lock:
        names = sorted(_strays)
    for name in names:
        try:
            client(STRAY_TIMEOUT_S).api.remove_container(name, force=True)
        except docker.errors.NotFound:
            pass
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return  # tried again at the next start and at exit; after a crash, the reaper removes them
        with _strays_lock:
            _strays.discard(name)


def daemon_answers() -> bool:
    try:
        return bool(docker.from_env(timeout=3).ping())
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return False


class DockerIsolation:
    name = "docker"

    def __init__(self, container: Any) -> None:
        self.container = container
        self.group = _container_cgroup(container.id)

    def not_executor(self, peer: Peer) -> str | None:
        """Why the process that connected to the socket is not this container's executor (its PID 1)."""
        try:
            self.container.reload()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
            return f"the container's process is not known: {e}"
        pid = self.container.attrs["State"]["Pid"]
        return None if peer.pid == pid else f"not the container's process {pid}"

    def alive(self) -> bool:
        try:
            self.container.reload()
        except requests.exceptions.RequestException:
            return True  # the daemon does not answer, so no news: the caller's own deadline bounds the wait
        except docker.errors.DockerException:
            return False
        return bool(self.container.status in ("created", "running"))

    def limit_events(self) -> tuple[int, int]:
        return self.group.events() if self.group is not None else (0, 0)

    def describe(self) -> str:
        try:
            self.container.reload()
            state = self.container.attrs["State"]
            logs = self.container.logs(tail=20).decode(errors="replace").strip()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
            return f"container {self.container.short_id}: {e}"
        return (
            f"container {self.container.short_id} {state['Status']} exit={state['ExitCode']} "
            f"oom_killed={state['OOMKilled']} {logs}"
        )

    def destroy(self) -> None:
        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            _add_stray(self.container.name)


def _container_cgroup(container_id: str) -> cgroups.Cgroup | None:
    """The container's control group on the host, to read its limit counters (cgroupfs or systemd)."""
    for path in (f"docker/{container_id}", f"system.slice/docker-{container_id}.scope"):
        group = cgroups.Cgroup(path)
        if all(d.is_dir() for d in group.dirs.values()):
            return group
    return None


def start_docker(config: SandboxConfig, source_dir: Path | None, image: str | None = None) -> ExecutorSandbox:
    """Starts a container from `image` (default: the config's) whose /repo starts as `source_dir`."""
    owner = current_owner(config.state_dir, config.expiry_s, reap_containers)
    source = None
    if source_dir is not None:
        source = readable_source(Path(source_dir).resolve(), config.state_dir / owner.run_id)
    began = time.monotonic()
    pause = 0.5
    while True:
        try:
            return _start_container(config, owner, source, image)
        except _Unanswered as e:
            waited = time.monotonic() - began
            if waited + pause > config.start_timeout_s:
                raise SandboxError(f"the Docker daemon did not answer for {waited:.0f} s: {e}") from e
            time.sleep(pause)
            pause = min(2 * pause, 5.0)


def _create_and_start(docker_client: docker.DockerClient, image: str, **settings: Any) -> Any:
    """A started container of `image`, which the daemon must hold: `containers.run` would pull a missing
    image from a registry (the red team's `127.0.0.1:PORT/x` reached the host's loopback that way)."""
    container = docker_client.containers.create(image, **settings)
    try:
        container.start()
    except BaseException:
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            container.remove(force=True)
        raise
    return container


def _start_container(
    config: SandboxConfig, owner: Owner, source: Path | None, image: str | None
) -> ExecutorSandbox:
    sandbox_id = uuid.uuid4().hex[:12]
    name = f"harness-{owner.run_id}-{sandbox_id}"
    listener = UnixListener(config.state_dir / owner.run_id / sandbox_id)
    volumes, command = _mounts(listener.path, source, f"{owner.run_id}/{sandbox_id}")
    try:
        container = _create_and_start(
            client(config.docker_timeout_s),
            image or config.image,
            entrypoint=ENTRYPOINT,
            command=command,
            name=name,
            labels={**owner.labels(), "harness.sandbox": sandbox_id},
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=config.pids_limit,
            mem_limit=config.memory_mb << 20,
            memswap_limit=config.memory_mb << 20,
            nano_cpus=int(config.cpus * 1e9),
            read_only=True,
            tmpfs={  # Docker mounts a tmpfs noexec unless told: the repository's scripts must run
                WORKDIR: f"size={config.disk_mb}m,uid=1000,gid=1000,mode=0755,exec",
                "/tmp": f"size={config.tmp_mb}m,mode=1777,exec",
            },
            volumes=volumes,
            user="1000:1000",
            working_dir=WORKDIR,
            ulimits=[
                docker.types.Ulimit(name="fsize", soft=config.disk_mb << 20, hard=config.disk_mb << 20),
                docker.types.Ulimit(name="nofile", soft=config.open_files, hard=config.open_files),
            ],
        )
    except docker.errors.ImageNotFound as e:
        listener.close()
        raise SandboxError(f"image {image or config.image!r} not found: build it with `make image`") from e
    except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
        listener.close()
        if _unanswered(e):
            _add_stray(name)  # the daemon may still make it once it answers again
            raise _Unanswered(str(e)) from e
        raise SandboxError(f"docker could not start a sandbox: {e}") from e
    isolation = DockerIsolation(container)
    listener.check = isolation.not_executor
    sandbox = ExecutorSandbox(sandbox_id, isolation, ExecutorChannel(listener), config)
    track(sandbox)
    if _strays:  # the daemon answers again
        remove_strays()
    sandbox.start()
    return sandbox


def _mounts(sock: Path, source: Path | None, label: str) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The container's bind mounts (the executor's socket and file, the start tree) and the executor's
    arguments."""
    volumes = {
        str(sock): {"bind": "/run/harness.sock", "mode": "rw"},
        str(EXECUTOR): {"bind": "/opt/harness/executor.py", "mode": "ro"},
    }
    if source is not None:
        volumes[str(source)] = {"bind": "/opt/pristine", "mode": "ro"}
    return volumes, [
        "--connect",
        "/run/harness.sock",
        "--workdir",
        WORKDIR,
        "--label",
        label,
        "--pristine",
        "/opt/pristine",
    ]


def image_exists(tag: str) -> bool:
    try:
        client().images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
        raise SandboxError(f"docker could not look up image {tag!r}: {e}") from e
    return True


def ensure_image(tag: str, context: Path, timeout_s: float = BUILD_TIMEOUT_S) -> None:
    """Builds `tag` from `context`/Dockerfile unless the daemon has it; offline: no network, no pulls."""
    deadline = time.monotonic() + timeout_s
    if not _BUILD_LOCK.acquire(timeout=timeout_s):  # two sandboxes of one task must not build it twice
        raise SandboxError(f"building image {tag}: another build held Docker's builds for {timeout_s:.0f}s")
    try:
        if image_exists(tag):
            return
        log: list[str] = []
        try:
            stream = client().api.build(
                path=str(context),
                tag=tag,
                network_mode="none",
                pull=False,
                rm=True,
                forcerm=True,
                decode=True,
                timeout=timeout_s,
            )
            for chunk in stream:  # the SDK's timeout is per read: a build that keeps printing needs this
                if time.monotonic() > deadline:
                    raise SandboxError(f"building image {tag} outlasted its {timeout_s:.0f}s")
                log.append(str(chunk.get("stream", "")))
                if "error" in chunk:
                    tail = "".join(log).strip()[-1500:]
                    raise SandboxError(
                        f"building image {tag} from {context}/Dockerfile failed: {chunk['error'].strip()}\n{tail}"
                    )
        except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
            raise SandboxError(f"building image {tag} from {context}/Dockerfile failed: {e}") from e
    finally:
        _BUILD_LOCK.release()


def export_folder(tag: str, path: str, dest: Path) -> None:
    """Copies folder `path` of image `tag` to the new host folder `dest` (no container is started)."""
    try:
        container = client().containers.create(tag, network_disabled=True)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
        raise SandboxError(f"docker could not read image {tag}: {e}") from e
    try:
        with tempfile.TemporaryDirectory(prefix="harness-export-", dir=dest.parent) as tmp:
            archive = Path(tmp) / "folder.tar"
            with archive.open("wb") as f:
                stream, _ = container.get_archive(path)
                for chunk in stream:
                    f.write(chunk)
            with tarfile.open(archive) as tar:
                tar.extractall(Path(tmp) / "out", filter="data")
            (Path(tmp) / "out" / Path(path).name).rename(dest)
    except (docker.errors.DockerException, requests.exceptions.RequestException, tarfile.TarError) as e:
        raise SandboxError(f"docker could not copy {path} out of image {tag}: {e}") from e
    finally:
        container.remove(force=True)


def remove_image(tag: str) -> None:
    try:
        client().images.remove(tag, force=True)
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        pass  # an image left behind costs disk, not correctness


class DockerImages:
    """Builds and reads task images; matches `tasks.harbor.Images`."""

    def build(self, tag: str, context: Path, timeout_s: float) -> None:
        ensure_image(tag, context, timeout_s)

    def export(self, tag: str, path: str, dest: Path) -> None:
        export_folder(tag, path, dest)

    def remove(self, tag: str) -> None:
        remove_image(tag)


def reap_containers(me: str | None, state_dir: Path) -> int:
    """Removes the containers of dead runs other than `me` (a `StrayReaper`, `envs.lifecycle.reap`)."""
    removed = 0
    # Runs that start together reap the same leftovers: a container may vanish under our feet.
    listed = client().containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)
    for container in listed:
        try:
            owner = Owner.from_labels(container.labels)
        except (KeyError, ValueError):
            continue  # not a run's as this harness labels them: never decided on a label it cannot read
        if owner.run_id == me:
            continue
        with dead_run(owner, Path(owner.lock) if owner.lock else None) as reason:
            if reason is None:
                continue
            try:
                container.remove(force=True)
                removed += 1
                log_reaped(state_dir, owner.run_id, f"container {container.name} removed: {reason}")
            except docker.errors.APIError:  # already gone, or another run's reaper is removing it (409)
                pass
    return removed
