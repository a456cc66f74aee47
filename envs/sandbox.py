"""The Sandbox protocol, its config, and the result of a command. Backends match the protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

WORKDIR = "/repo"
"""Where the repository lives inside every sandbox, on every backend."""
BACKENDS: dict[str, str] = {
    "docker": "envs.docker_backend:DockerBackend",
    "bwrap": "envs.bwrap_backend:BwrapBackend",
    "podman": "envs.podman_backend:PodmanBackend",
    "remote": "envs.remote_backend:RemoteBackend",
}
"""The sandbox backends by name: the dotted path of each one's class (`envs.backends.Backend`), imported
on first use. `auto` takes the first of them, in this order, that the host can run. Adding a backend is a
module of its own and a row here."""


def known_backend(name: str) -> str:
    """`name` if it is `auto` or a row of `BACKENDS` (read when settings are, so a row added later counts)."""
    if name != "auto" and name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r}: expected auto or one of {', '.join(BACKENDS)}")
    return name


BackendName = Annotated[str, AfterValidator(known_backend)]
"""A setting naming a sandbox backend."""


class SandboxError(RuntimeError):
    """The sandbox failed for the harness's own reasons (daemon down, executor gone): an infra error."""


class SandboxUnusable(SandboxError):
    """The sandbox can no longer be trusted (it died, cannot fork, ran out of memory); replace it."""


class SandboxConfig(BaseModel):
    """How sandboxes are made. The defaults are closed: no network, small limits."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendName = "auto"
    """A name of `BACKENDS` (`docker`, `bwrap`, `podman`), or `auto`: the first of them the host can run
    (Docker when a daemon answers, else bubblewrap, else Podman), worked out once per process
    (`envs.backends.resolve_backend`)."""
    image: str = "harness-sandbox:latest"
    """Docker image of the sandbox (built from the project's Dockerfile)."""
    memory_mb: int = Field(default=2048, ge=64)
    """Memory limit of the whole sandbox, tmpfs included."""
    pids_limit: int = Field(default=256, ge=16)
    """Most processes and threads alive at once in the sandbox."""
    open_files: int = Field(default=4096, ge=64)
    """Most files one process of the sandbox may hold open (RLIMIT_NOFILE, soft and hard). With
    `pids_limit` it bounds what one sandbox can take of the host's file table: 256 x 4,096 is about 1 M of
    a host's usual 2-9 M; the red team filled a fifth of this host's with 20,000 a process
    (docs/reliability.md 5j)."""
    cpus: float = Field(default=1.0, ge=0.01)
    """CPU quota, in cores; at least 0.01 (Docker's least, and 1 ms of cgroups' 100 ms period): a smaller
    one rounded to a quota of 0, which cgroups and Docker read as no limit at all."""
    disk_mb: int = Field(default=1024, ge=16)
    """Size of the writable repository area (a tmpfs)."""
    tmp_mb: int = Field(default=256, ge=16)
    """Size of /tmp in the sandbox (a tmpfs)."""
    command_timeout_s: float = Field(default=60.0, gt=0)
    """Default hard timeout of one command."""
    kill_grace_s: float = Field(default=2.0, ge=0)
    """Time between SIGTERM and SIGKILL when a command times out."""
    max_output_bytes: int = Field(default=10_000, ge=256)
    """Output kept per command: the first and last halves; the middle is elided with a marker."""
    start_timeout_s: float = Field(default=60.0, gt=0)
    """How long a sandbox may take to start before it counts as an infra error; a Docker daemon that does
    not answer (restarting, stopped) is waited for this long."""
    docker_timeout_s: float = Field(default=30.0, gt=0)
    """Longest wait for one answer of the Docker daemon: a stopped daemon is an infra error, not a hang."""
    expiry_s: float = Field(default=6 * 3600.0, gt=0)
    """A sandbox older than this whose owner cannot be checked is removed by the reaper."""
    state_dir: Path = Path("/tmp/harness-sandboxes")
    """Host folder for executor sockets and run ownership records."""
    python_env: Path | None = None
    """bwrap: the virtual environment whose Python runs task code and tests (bound read-only, first on
    PATH). None: the one `harness env build` made, with the sandbox image's pytest (`envs/python_env.py`);
    where none is built, the harness's own environment, with a warning."""
    node_modules: Path | None = None
    """bwrap: a JavaScript task's npm packages (`envs/npm_env.py`), bound read-only at /node_modules; None:
    none. Set for a task's sandbox from its lock file, not by hand."""
    host_uid: int = Field(default=61000, ge=1)
    """Host user id a bubblewrap sandbox's processes run as when the harness runs as root: an account that
    owns nothing (the sandbox's own user, uid 1000 inside, maps to it). A harness run by another user maps
    the sandbox to that user. Docker sandboxes run as the image's user, host uid 1000."""
    remote: list[str] = Field(default_factory=list)
    """remote: the sandbox servers (`harness sandbox-server`) as host:port; each start asks them in turn,
    from a different first one each time, and skips one that does not answer or is full."""
    remote_secret: Path | None = None
    """remote: the file of the fleet's secret the servers were started with (32 bytes or more, mode 600)."""


class CommandResult(BaseModel):
    """What one command did. `exit_code` is None when it timed out."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int | None
    output: str
    timed_out: bool
    truncated: bool
    duration_s: float
    output_bytes: int = 0
    """Bytes the command wrote in all, before capping."""
    failure: str | None = None
    """Why the sandbox became unusable during this command (pids or memory exhausted, died), if it did."""
    replaced: bool = False
    """The sandbox was replaced by a fresh one after this command."""
    carried_over: bool = False
    """The replaced sandbox's repository was copied into the fresh one (else it is at the task's start)."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class Sandbox(Protocol):
    """A repository in an isolated machine: run commands, move files, go back to the start state."""

    @property
    def id(self) -> str:
        """Unique among the sandboxes of this run."""
        ...

    def run(
        self,
        cmd: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """Runs a shell command (a string) or an argv (a list) in the repository, with a hard timeout."""
        ...

    def read_file(self, path: str, max_bytes: int = 1 << 24) -> bytes:
        """Reads a file; relative paths are relative to the repository."""
        ...

    def write_file(self, path: str, data: bytes) -> None:
        """Writes a file, making its folders."""
        ...

    def copy_in(self, src: Path, dest: str = WORKDIR) -> None:
        """Copies the contents of a host folder into a sandbox folder."""
        ...

    def copy_out(self, src: str, dest: Path) -> None:
        """Copies the contents of a sandbox folder into a host folder."""
        ...

    def reset(self) -> None:
        """Kills every process and puts the repository back to its start state."""
        ...

    def close(self) -> None:
        """Removes the sandbox. Safe to call twice."""
        ...
