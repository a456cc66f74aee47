"""The remote backend behind `envs.backends.Backend`: sandboxes served by `harness sandbox-server` on other hosts.

`sandbox.remote` lists the servers; a start asks them in turn, from a different first one each time, and
takes the first that answers and has room (one that does not answer within `CONNECT_TIMEOUT_S`, or is
full, is skipped). The sandbox is an `ExecutorSandbox` like any other: its channel is the relayed executor
stream (`envs.stream_auth.TcpDialer`), its isolation asks the server over the control stream, which also
carries a heartbeat every few seconds.

A start sends what the sandbox is made of (`Recipe`): besides the source tree, the task's image, the build
context of an image built from its Dockerfile (a tar, as the source is), and the task's own environment
(`tasks.environment.Environment`). The server builds what it does not hold yet with its own backend, by
the key that backend caches it under, once however many clients ask at the same time, and starts the
sandbox in it; this backend builds nothing on its own host.
"""

from __future__ import annotations

import base64
import io
import itertools
import tarfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envs.channel import ExecutorChannel
from envs.lifecycle import closing, track
from envs.npm_env import needs_npm
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig, SandboxError
from envs.stream_auth import TcpDialer, derive, read_secret
from tasks.environment import Environment
from tasks.model import Task

CONTROL = "control"
"""The name a control stream authenticates under (with the fleet's secret)."""
CLIENT_SETTINGS = (
    "memory_mb",
    "pids_limit",
    "open_files",
    "cpus",
    "disk_mb",
    "tmp_mb",
    "command_timeout_s",
    "kill_grace_s",
    "max_output_bytes",
    "start_timeout_s",
    "expiry_s",
)
"""The settings a client chooses for its sandbox; the rest (backend, state folder, users) are the server's."""
CONNECT_TIMEOUT_S = 5.0
"""Longest wait for a server to accept and finish the handshake before the next one is tried."""
CONTROL_TIMEOUT_S = 10.0
"""Longest wait for a server's answer about a sandbox (alive, limits, describe, destroy)."""
START_MARGIN_S = 30.0
"""Slack over the sandbox's own start timeout for shipping its source and the server's work."""
BUILD_TIMEOUT_S = 1800.0
"""Longest wait, over a start's own, for a server to build the sandbox's image or environment (its package
downloads included)."""
IN_ENVIRONMENT = "served-environment:"
"""How the image that `RemoteBackend.in_environment` gives starts: what follows is the environment (an
`InEnvironment`) that the servers build when a sandbox first needs it."""
DOWN_S = 30.0
"""How long a server that did not answer is tried only after the others (a host gone costs each start
`CONNECT_TIMEOUT_S` otherwise)."""
_down: dict[str, float] = {}
"""Servers that did not answer, and until when (`time.monotonic`) they come last."""


class Recipe(BaseModel):
    """What a server makes a sandbox of, besides its source tree; the server's own settings fill the rest."""

    model_config = ConfigDict(extra="forbid")

    image: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")
    """The image (None: the server's `sandbox.image`); a name, never an option to an engine's command. One the
    server must hold already (it never pulls): no registry host, none of the server's own names."""
    image_build: str | None = None
    """The build context that makes the image: a tar, base64. The server names what it builds by the
    context's hash (`sandbox_server.TASK_IMAGES`), never `image`, and starts the sandbox in it."""
    environment: Environment | None = None
    """The task's own environment, built on `image` (`envs/task_env.py`) where the server has not yet."""

    def builds(self) -> bool:
        """Whether the server may have to build something before the sandbox starts."""
        return self.image_build is not None or self.environment is not None


class InEnvironment(BaseModel):
    """An environment for the servers to build (`RemoteBackend.build_environment`)."""

    model_config = ConfigDict(extra="forbid")

    environment: Environment
    image: str
    """The image it is built on."""
    image_build: Path | None = None
    """The build context of `image`, packed when a sandbox starts."""


class ServerDown(SandboxError):
    """A sandbox server did not answer, or did not prove the fleet's secret."""


def stream_name(sandbox_id: str) -> str:
    """The name a sandbox's data stream authenticates under (with the sandbox's secret)."""
    return f"sandbox:{sandbox_id}"


class RemoteIsolation:
    """A served sandbox's `envs.remote.Isolation`: asks its server. When the server is lost, the sandbox
    counts as dead (`alive` is False) and its last known limit events stand."""

    name = "remote"

    def __init__(self, address: str, sandbox_id: str, control: ExecutorChannel) -> None:
        self.address, self.sandbox_id, self.control = address, sandbox_id, control
        self.lost: str | None = None
        self._lock = threading.Lock()
        self._events = (0, 0)

    def _ask(self, op: str, timeout: float = CONTROL_TIMEOUT_S, wait: bool = True) -> dict[str, Any] | None:
        """The server's answer to `op`; None when it refused, is lost, or (`wait` False) another call is
        under way on the stream."""
        if not self._lock.acquire(timeout=timeout if wait else 0):
            return None
        try:
            if self.lost is not None:
                return None
            reply = self.control.call({"op": op}, timeout)
        except SandboxError as e:
            self.lost = f"sandbox server {self.address} lost: {e}"
            return None
        finally:
            self._lock.release()
        return reply if reply.get("ok") else None

    def alive(self) -> bool:
        reply = self._ask("alive")
        return reply is not None and bool(reply["alive"])

    def limit_events(self) -> tuple[int, int]:
        reply = self._ask("limits")
        if reply is not None:
            self._events = (int(reply["pids"]), int(reply["ooms"]))
        return self._events

    def describe(self) -> str:
        reply = self._ask("describe")
        if reply is None:
            return self.lost or f"sandbox server {self.address} does not answer"
        return f"{reply['describe']} on sandbox server {self.address}"

    def ping(self, timeout: float) -> None:
        """A heartbeat; skipped while another call is under way, which the server counts as one."""
        self._ask("ping", timeout, wait=False)

    def destroy(self) -> None:
        HEARTBEATS.discard(self)
        self._ask("destroy")  # closing the control stream alone destroys it too, but later
        self.control.close()


class Heartbeats:
    """One thread per process that pings every live served sandbox's server, so that the server keeps it.
    The pings go out side by side: a server slow to answer holds up none of the others' heartbeats."""

    def __init__(self) -> None:
        self._live: weakref.WeakSet[RemoteIsolation] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._every = 5.0
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sandbox-heartbeat")

    def add(self, isolation: RemoteIsolation, every: float) -> None:
        with self._lock:
            self._live.add(isolation)
            self._every = min(self._every, every)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sandbox-heartbeats", daemon=True)
                self._thread.start()

    def discard(self, isolation: RemoteIsolation) -> None:
        with self._lock:
            self._live.discard(isolation)

    def _run(self) -> None:
        while True:
            time.sleep(self._every)
            with self._lock:
                live = list(self._live)
            for isolation in live:
                self._pool.submit(isolation.ping, 2 * self._every)  # the server waits 3 intervals


HEARTBEATS = Heartbeats()
_turn = itertools.count()


class RemoteBackend:
    name = "remote"

    def unavailable(self) -> str | None:
        return "chosen by name (sandbox.backend=remote, with sandbox.remote), never by auto"

    def start(
        self, config: SandboxConfig, source_dir: Path | None, image: str | None, image_build: Path | None
    ) -> ExecutorSandbox:
        environment = None
        if image is not None and image.startswith(IN_ENVIRONMENT):
            served = InEnvironment.model_validate_json(image.removeprefix(IN_ENVIRONMENT))
            environment, image, image_build = served.environment, served.image, served.image_build
        recipe = Recipe(image=image, image_build=_pack(image_build), environment=environment)
        return self._start(config, source_dir, recipe)

    def start_task(self, task: Task, config: SandboxConfig) -> ExecutorSandbox:
        if needs_npm(task):  # a sandbox without them would fail every test: the agent's fault, wrongly
            raise SandboxError(
                f"task {task.id}: sandbox servers do not build npm packages yet (envs/npm_env.py)"
            )
        recipe = Recipe(image=task.image, image_build=_pack(task.image_build), environment=task.environment)
        return self._start(config, task.repo, recipe)

    def build_environment(
        self, environment: Environment, base_image: str, base_build: Path | None, quiet: bool
    ) -> str:
        """Builds nothing here: each server builds the environment when a sandbox first needs it."""
        built = InEnvironment(environment=environment, image=base_image, image_build=base_build)
        return IN_ENVIRONMENT + built.model_dump_json()

    def in_environment(self, built: str, config: SandboxConfig) -> tuple[SandboxConfig, str | None]:
        return config, built

    def _start(self, config: SandboxConfig, source_dir: Path | None, recipe: Recipe) -> ExecutorSandbox:
        if not config.remote or config.remote_secret is None:
            raise SandboxError(
                "sandbox.backend=remote needs sandbox.remote (host:port, ...) and sandbox.remote_secret"
            )
        secret = read_secret(config.remote_secret)
        source = _pack(source_dir)
        first = next(_turn) % len(config.remote)
        order = config.remote[first:] + config.remote[:first]
        order.sort(key=lambda address: _down.get(address, 0.0) > time.monotonic())  # the answering first
        reasons = []
        for address in order:
            try:
                return _start_on(address, secret, config, source, recipe)
            except SandboxError as e:
                if closing.is_set():
                    raise
                if isinstance(e, ServerDown):
                    _down[address] = time.monotonic() + DOWN_S
                reasons.append(f"{address}: {e}")
        raise SandboxError(f"no sandbox server started a sandbox ({'; '.join(reasons)})")

    def reap_strays(self, me: str | None, state_dir: Path) -> int:
        return 0  # a server destroys what its vanished clients left


def _start_on(
    address: str, secret: bytes, config: SandboxConfig, source: str | None, recipe: Recipe
) -> ExecutorSandbox:
    """A sandbox served by `address`; `SandboxError` when it does not answer, is full or fails to start one."""
    dialer = TcpDialer(address, CONTROL, secret)
    control = ExecutorChannel(dialer)
    try:
        try:
            control.accept(CONNECT_TIMEOUT_S, lambda: True, lambda: address)
        except SandboxError as e:
            raise ServerDown(str(e)) from e
        _down.pop(address, None)
        settings = {name: getattr(config, name) for name in CLIENT_SETTINGS}
        request = {"op": "start", "settings": settings, "source": source, "recipe": recipe.model_dump()}
        building = BUILD_TIMEOUT_S if recipe.builds() else 0.0
        reply = control.call(request, config.start_timeout_s + START_MARGIN_S + building)
    except BaseException:
        control.close()
        raise
    if not reply["ok"]:
        control.close()
        raise SandboxError(reply["error"])
    sandbox_id = str(reply["id"])
    name = stream_name(sandbox_id)
    isolation = RemoteIsolation(address, sandbox_id, control)
    channel = ExecutorChannel(TcpDialer(address, name, derive(dialer.session_key, name)))
    sandbox = ExecutorSandbox(sandbox_id, isolation, channel, config)
    HEARTBEATS.add(isolation, float(reply["heartbeat_s"]))
    track(sandbox)
    sandbox.start()
    return sandbox


def _pack(folder: Path | None) -> str | None:
    """A tar of `folder`'s contents (links kept as links), base64; None for None."""
    if folder is None:
        return None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for child in sorted(Path(folder).iterdir()):
            tar.add(child, arcname=child.name)
    return base64.b64encode(buf.getvalue()).decode()


def ping(address: str, secret: bytes, timeout: float = CONNECT_TIMEOUT_S) -> int:
    """How many more sandboxes the server at `address` would start now; `SandboxError` when it does not
    answer or refuses the secret (the health check)."""
    control = ExecutorChannel(TcpDialer(address, CONTROL, secret))
    try:
        control.accept(timeout, lambda: True, lambda: address)
        return int(control.call({"op": "ping"}, timeout)["free"])
    finally:
        control.close()
