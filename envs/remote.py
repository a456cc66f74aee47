"""The Sandbox implementation shared by all backends: every operation goes through the executor.

A backend only supplies an `Isolation`: how to tell whether the sandbox is alive, how many times it hit
its process and memory limits, and how to destroy it.
"""

from __future__ import annotations

import base64
import io
import tarfile
import threading
from pathlib import Path
from typing import Any, Protocol

from envs.channel import ExecutorChannel
from envs.sandbox import WORKDIR, CommandResult, SandboxConfig, SandboxError, SandboxUnusable

CALL_MARGIN_S = 10.0
"""Slack on top of a command's own timeout before the executor itself counts as hung."""
SCRATCH = ["/tmp", "/dev/shm", "/dev/mqueue"]
"""The writable folders besides the repository, emptied by reset."""
DIED_OUT_OF_MEMORY = "the sandbox died: out of memory"
HIT_PROCESS_LIMIT = "the sandbox hit its process limit (fork bomb?)"


class Isolation(Protocol):
    """The backend-specific part of a sandbox."""

    name: str

    def alive(self) -> bool: ...

    def limit_events(self) -> tuple[int, int]:
        """(times the pids limit refused a fork, OOM kills) since the sandbox started."""
        ...

    def describe(self) -> str: ...

    def destroy(self) -> None: ...


class ExecutorSandbox:
    """A sandbox driven through its in-sandbox executor. Matches `envs.sandbox.Sandbox`."""

    def __init__(
        self, sandbox_id: str, isolation: Isolation, channel: ExecutorChannel, config: SandboxConfig
    ):
        self.id = sandbox_id
        self.backend = isolation.name
        self.isolation = isolation
        self.channel = channel
        self.config = config
        self.failure: str | None = None
        self.limit_hit = False
        """The failure is the sandbox's own limits (pids, memory) at work: the agent's doing, not the host's."""
        self._closed = False
        self._lock = threading.RLock()  # re-entered by a signal handler that closes the sandbox mid-call
        self._events = (0, 0)

    def start(self) -> None:
        """Waits for the executor to connect; destroys the sandbox if it does not."""
        try:
            self.channel.accept(self.config.start_timeout_s, self.isolation.alive, self.isolation.describe)
        except BaseException:
            self.close()
            raise
        self._events = self.isolation.limit_events()

    # ---- the protocol -------------------------------------------------------------------------
    def run(
        self,
        cmd: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        timeout = self.config.command_timeout_s if timeout is None else timeout
        request = {
            "op": "exec",
            "cmd": cmd,
            "timeout": timeout,
            "grace": self.config.kill_grace_s,
            "max_output": self.config.max_output_bytes,
            "cwd": cwd,
            "env": env or {},
            "stdin": stdin,
        }
        reply = self._call(request, timeout + self.config.kill_grace_s + CALL_MARGIN_S, check=False)
        if not reply["ok"]:
            if reply.get("cannot_fork"):
                self._mark_failed("the sandbox can no longer fork (process limit reached)", limit=True)
                return self._failed_result(0.0)
            raise SandboxError(f"executor refused the command: {reply['error']}")
        result = CommandResult(
            exit_code=reply["exit_code"],
            output=reply["output"],
            timed_out=reply["timed_out"],
            truncated=reply["truncated"],
            duration_s=reply["duration_s"],
            output_bytes=reply["output_bytes"],
        )
        failure = self._check_limits(reply)
        if failure is not None:
            self._mark_failed(failure, limit=True)
            result.failure = failure
        return result

    def read_file(self, path: str, max_bytes: int = 1 << 24) -> bytes:
        reply = self._call({"op": "read", "path": path, "max_bytes": max_bytes})
        return base64.b64decode(reply["data"])

    def write_file(self, path: str, data: bytes) -> None:
        self._call({"op": "write", "path": path, "data": base64.b64encode(data).decode()})

    def copy_in(self, src: Path, dest: str = WORKDIR) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for child in sorted(Path(src).iterdir()):
                tar.add(child, arcname=child.name)
        self._call({"op": "tar_in", "path": dest, "data": base64.b64encode(buf.getvalue()).decode()})

    def copy_out(self, src: str, dest: Path) -> None:
        reply = self._call({"op": "tar_out", "path": src}, timeout=120.0)
        _extract(reply["data"], dest)

    def salvage(self, dest: Path) -> bool:
        """Copies the repository out of a sandbox that failed but whose executor still answers."""
        if self._closed:
            return False
        try:
            reply = self.channel.call({"op": "tar_out", "path": WORKDIR}, timeout=30.0)
        except SandboxError:
            return False
        if not reply["ok"]:
            return False
        _extract(reply["data"], dest)
        return True

    def reset(self) -> None:
        # Everything writable goes: what one episode leaves in /dev/shm must not reach the next one.
        self._call({"op": "reset", "grace": 0.2, "clear": SCRATCH}, timeout=120.0)
        self._events = self.isolation.limit_events()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.channel.interrupt()  # a call in flight in another thread fails at once ...
        with self._lock:  # ... and lets go of the connection before it is closed
            self.channel.close()
        self.isolation.destroy()

    # ---- internals ----------------------------------------------------------------------------
    def _call(self, request: dict[str, Any], timeout: float = 60.0, check: bool = True) -> dict[str, Any]:
        if self._closed:
            raise SandboxUnusable(f"sandbox {self.id} is closed")
        if self.failure is not None:
            raise SandboxUnusable(f"sandbox {self.id} is unusable: {self.failure}")
        with self._lock:
            try:
                reply = self.channel.call(request, timeout)
            except SandboxUnusable as e:
                self._mark_failed(*self._death_reason(str(e)))
                raise SandboxUnusable(self.failure or str(e)) from e
        if check and not reply["ok"]:
            raise SandboxError(reply["error"])
        return reply

    def _death_reason(self, fallback: str) -> tuple[str, bool]:
        """Why the executor stopped answering. A fork bomb under a tight CPU cap can keep the executor
        off the CPU for seconds (the cap's periods go to the bomb's processes, measured up to 5 s on a
        2-core host at 0.125 cpus), past the host's margin: the limit counter still tells what happened.
        Also whether a limit was hit (the sandbox broke itself, rather than the harness failing)."""
        pids, ooms = self.isolation.limit_events()
        if not self.isolation.alive():
            if ooms > self._events[1]:
                return DIED_OUT_OF_MEMORY, True
            return f"the sandbox died ({self.isolation.describe()})", False
        if pids > self._events[0]:
            return f"{HIT_PROCESS_LIMIT}; {fallback}", True
        return fallback, False

    def _check_limits(self, reply: dict[str, Any]) -> str | None:
        pids, ooms = self.isolation.limit_events()
        before_pids, before_ooms = self._events
        self._events = (pids, ooms)
        if pids > before_pids or reply["peak_procs"] >= self.config.pids_limit - 2:
            return HIT_PROCESS_LIMIT
        if ooms > before_ooms:
            return "the sandbox ran out of memory"
        if not reply.get("clean", True):
            return "processes of the command survived SIGKILL"
        return None

    def _failed_result(self, duration: float) -> CommandResult:
        return CommandResult(
            exit_code=None,
            output="",
            timed_out=False,
            truncated=False,
            duration_s=duration,
            failure=self.failure,
        )

    def _mark_failed(self, reason: str, limit: bool = False) -> None:
        if self.failure is None:
            self.failure = reason
            self.limit_hit = limit


def _extract(data: str, dest: Path) -> None:
    """Unpacks the executor's base64 tar into a host folder, nothing outside it (`host_safe`)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(data)), mode="r") as tar:
        tar.extractall(dest, filter=host_safe)


def host_safe(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, except that what it refuses is left out rather than failing the copy,
    and a symlink is kept wherever it points.

    Whatever the agent leaves in its repository must not turn its episode into an infra error: a symlink
    to an absolute path (a virtualenv's bin/python) or a FIFO would make the plain `data` filter raise.
    Host code records a symlink (git stores its target as text) and never follows it; an entry that
    would be written outside `dest`, through a link or not, is still refused.
    """
    try:
        if member.issym():
            return tarfile.tar_filter(member, dest)
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None
