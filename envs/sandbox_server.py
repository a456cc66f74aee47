"""`harness sandbox-server`: serves sandboxes of this host's backend to rollout processes on other hosts.

A client (`envs/remote_backend.py`) opens a control stream with the fleet's secret (`envs/stream_auth.py`)
and asks for one sandbox within the server's maxima (`ServerMaxima`), shipping its source tree as a tar
and what the sandbox is made of (`envs.remote_backend.Recipe`: image, image build context, the task's own
environment). The server builds the image or environment where it does not hold it yet (`envs/task_env.py`,
from the package index of this host; once per key, however many clients ask at the same time), starts the
sandbox on its own backend, with that backend's guarantees (no network, limits, labels, expiry, reaping),
takes over the executor's Unix socket, and relays its bytes to the client's data stream, which opens with
the handshake on the sandbox's own secret (derived from the control session, never sent), is sealed record
by record like the control stream, and is accepted once. The control stream then answers the client's isolation (alive, limit events, describe, destroy) and carries
its heartbeats: when it closes, or stays silent past the heartbeat timeout, or the sandbox outlives its
expiry, the sandbox is destroyed. Beyond its capacity a server refuses, and the client tries the next one.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shutil
import socket
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, Field

from envs.backends import backend, resolved
from envs.channel import ExecutorChannel, Stream
from envs.lifecycle import current_owner, install_signal_handlers, track
from envs.remote import ExecutorSandbox
from envs.remote_backend import CLIENT_SETTINGS, CONTROL, Recipe, stream_name
from envs.sandbox import SandboxConfig, SandboxError, SandboxUnusable
from envs.stream_auth import HandshakeError, Sealed, derive, parse_address, read_secret, server_handshake
from envs.task_env import build_deadline, build_time_left, env_key
from tasks.environment import Environment


class ServerMaxima(BaseModel):
    """The most a client may ask for one sandbox, by the name of its setting (`SandboxConfig`); a start
    that asks more is refused, naming the setting, never served with less than it asked."""

    model_config = ConfigDict(extra="forbid")

    memory_mb: int = Field(default=8192, ge=64)
    """Most memory (`memory_mb`, tmpfs included)."""
    cpus: float = Field(default=4.0, gt=0)
    """Most CPU quota, in cores (`cpus`)."""
    pids_limit: int = Field(default=1024, ge=16)
    """Most processes and threads at once (`pids_limit`)."""
    open_files: int = Field(default=8192, ge=64)
    """Most open files per process (`open_files`); with `pids_limit`, what one sandbox may take of the
    host's file table."""
    disk_mb: int = Field(default=8192, ge=16)
    """Largest writable repository area (`disk_mb`)."""
    tmp_mb: int = Field(default=2048, ge=16)
    """Largest /tmp (`tmp_mb`)."""
    expiry_s: float = Field(default=24 * 3600.0, gt=0)
    """Longest wall time of one sandbox (`expiry_s`): the server destroys it then, whatever runs in it."""
    start_timeout_s: float = Field(default=600.0, gt=0)
    """Longest a client may let its sandbox's start take (`start_timeout_s`); 1e300 ended the control
    stream with an OverflowError (red team 2, 2l)."""
    build_s: float = Field(default=1800.0, gt=0)
    """Longest a start may spend building its image and environment (pip's downloads included), or waiting
    for another start's build of the same one: each build step is stopped then, and the start refused."""

    def refuse_above(self, config: SandboxConfig) -> None:
        """Raises ValueError naming each setting of `config` above its maximum."""
        asked = config.model_dump()
        over = [
            f"sandbox.{name}={asked[name]} is above this server's maxima.{name}={most}"
            for name, most in self.model_dump().items()
            if name in asked and asked[name] > most
        ]
        if over:
            raise ValueError(f"asked for more than this server serves: {'; '.join(over)}")


ARCHIVE = re.compile(r"\.(whl|zip|tar|tgz|tbz|txz|tlz|egg|tar\.gz|tar\.bz2|tar\.xz|tar\.lz|tar\.lzma)$", re.I)
"""What pip reads as a file to install from, found in its working folder, rather than a project's name."""


def requirement_of_index(line: str) -> None:
    """Refuses `line` unless it is a requirement of the package index (PEP 508): a name with extras,
    versions and a marker, never a URL, a path, an archive or a pip option."""
    try:
        requirement = Requirement(line)
    except InvalidRequirement as e:
        raise ValueError(f"environment: {line!r} is not a requirement of the package index ({e})") from None
    if requirement.url is not None or ARCHIVE.search(requirement.name) or line.lstrip().startswith("-"):
        raise ValueError(f"environment: {line!r} is not a requirement of the package index")


NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
"""A project's name (PEP 508)."""
VERSION = re.compile(r"[A-Za-z0-9.+!_-]+")
"""A version: the characters of PEP 440 and its local labels."""


def buildable(environment: Environment) -> Environment:
    """`environment` where a server may build it. A server builds on its host, as root where it runs so:
    a requirement is fetched from the package index (no URL, path or option to pip); the project's name
    and version name a folder of this host's environment, and its package root is a line of a path file,
    which Python runs where it starts with `import`, so each must be what its field says it is."""
    for requirement in environment.requirements:
        requirement_of_index(requirement)
    if environment.project is not None and not NAME.fullmatch(environment.project):
        raise ValueError(f"environment: {environment.project!r} is not a project's name")
    if not VERSION.fullmatch(environment.version):
        raise ValueError(f"environment: {environment.version!r} is not a version")
    if environment.package_root not in ("", "src"):
        raise ValueError(f"environment: package_root {environment.package_root!r} is neither '' nor 'src'")
    return environment


TASK_IMAGES = "harness-served/"
"""How the name of each image a server builds from a client's context starts; the context's sha256 ends
it. A client names none of these, nor an environment's image (`task_env.docker_env_image`)."""
SERVER_IMAGES = (TASK_IMAGES, "harness-env:")
REGISTRY = re.compile(r"[^/]*[.:][^/]*|localhost")
"""The first part of an image's name that is a registry's host (`127.0.0.1:5000/x`, `ghcr.io/x`)."""
COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(rf"{COMPONENT}(?:/{COMPONENT})*(?::\w[\w.-]{{0,127}})?(?:@sha256:[0-9a-f]{{64}})?")
"""An image's name as Docker reads one, with no registry: never a transport of podman's (`dir:/path`,
`docker-daemon:x`), which would read the host's files."""
HELD = re.compile(rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{REFERENCE.pattern}")
"""An image's name, its registry's too: how a Dockerfile names the image it starts from."""


def client_image(name: str) -> str:
    """`name`, an image a client asks for, refused where it names a registry (the server never pulls) or
    an image only the server names."""
    first, slash, _ = name.partition("/")
    if slash and REGISTRY.fullmatch(first):
        raise ValueError(
            f"image {name!r} names a registry or a transport ({first}): a server runs only its own"
        )
    if not REFERENCE.fullmatch(name):
        raise ValueError(f"image {name!r} is not an image's name")
    if name.startswith(SERVER_IMAGES):
        raise ValueError(f"image {name!r}: names starting {' or '.join(SERVER_IMAGES)} are the server's own")
    return name


FETCHING = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://|git@")
"""A source of ADD that the engine fetches itself (from the host's network, not the build's)."""
DIRECTIVE = re.compile(r"#\s*(syntax|escape)\s*=", re.IGNORECASE)


def instructions(dockerfile: str) -> list[tuple[str, list[str]]]:
    """The instructions of `dockerfile` (continuation lines joined, comments dropped): (INSTRUCTION, its
    arguments); ONBUILD's own instruction in its place. Refuses a parser directive (`# syntax=` would
    have the engine fetch a frontend; `# escape=` would change how lines continue)."""
    lines: list[tuple[str, list[str]]] = []
    logical = ""
    for raw in dockerfile.splitlines():
        line = raw.strip()
        if DIRECTIVE.match(line):
            raise ValueError(f"the Dockerfile's parser directive {line!r} is refused by this server")
        if line.startswith("#") or (not line and logical):
            continue
        logical += " " + line
        if logical.endswith("\\"):
            logical = logical[:-1]
            continue
        words, logical = logical.split(), ""
        while words and words[0].upper() == "ONBUILD":
            words = words[1:]
        if words:
            lines.append((words[0].upper(), words[1:]))
    return lines


def buildable_context(context: Path, has_image: Callable[[str], bool]) -> None:
    """Refuses a client's build context whose Dockerfile has the engine fetch anything (an ADD of a URL or
    a git repository) or start from an image this host does not hold (the engine would pull it)."""
    dockerfile = context / "Dockerfile"
    if not dockerfile.is_file():
        raise ValueError("the build context has no Dockerfile")
    stages: set[str] = set()
    for instruction, args in instructions(dockerfile.read_text(errors="replace")):
        sources = [a.strip('[]",') for a in args if not a.startswith("--")]
        if instruction in ("ADD", "COPY") and any(FETCHING.match(a) for a in sources[:-1]):
            raise ValueError(f"the Dockerfile's {instruction} of a URL or git repository is refused: {args}")
        bases = [a.split("=", 1)[1] for a in args if a.startswith("--from=")] if instruction != "FROM" else []
        if instruction == "FROM":
            bases = sources[:1]
            if len(sources) >= 3 and sources[1].upper() == "AS":
                stages.add(sources[2].lower())
        for base in bases:
            if not HELD.fullmatch(base):  # `$ARG`, or a transport of podman's onto the host's files
                raise ValueError(
                    f"the Dockerfile's {instruction} {base!r}: a server builds from named images"
                )
            if (
                base.lower() not in stages
                and base != "scratch"
                and not base.isdigit()
                and not has_image(base)
            ):
                raise ValueError(
                    f"the Dockerfile starts from {base!r}, which is not on this server (it never pulls)"
                )


class ServerConfig(BaseModel):
    """How a sandbox server listens and what it serves."""

    model_config = ConfigDict(extra="forbid")

    listen: str = "127.0.0.1:7420"
    """host:port to listen on (port 0: any free port, printed at start)."""
    secret_file: Path
    """The fleet's secret (32 bytes or more, mode 600): clients prove they know it."""
    capacity: int = Field(default=4, ge=1)
    """Most sandboxes served at once; a start beyond it is refused (the client tries its next server)."""
    heartbeat_timeout_s: float = Field(default=15.0, gt=0)
    """A sandbox whose client sent nothing for this long is destroyed; clients send a heartbeat every third."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """This host's backend (`auto`: the first local one it can run) and its settings. A client chooses only
    the limits (`envs.remote_backend.CLIENT_SETTINGS`)."""
    maxima: ServerMaxima = Field(default_factory=ServerMaxima)
    """The most a client may ask for one sandbox."""
    max_build_context_mb: int = Field(default=256, ge=1)
    """Largest image build context a client may send (its tar, in MB); a larger one is refused."""
    max_source_mb: int = Field(default=512, ge=1)
    """Largest source tree a client may send (its tar, in MB); a larger one is refused before it is decoded."""
    build_sdists: bool = False
    """Whether a task environment's requirements may be built from source distributions, which runs their
    build code on this host (as root where the server runs so). Off: wheels only (pip's `--only-binary
    :all:`), and a requirement that has none fails its build."""


@dataclass(eq=False)  # one per sandbox, hashed by identity (`envs.lifecycle.track`)
class Served:
    """One sandbox of a client: the local sandbox, whose executor stream the server relays."""

    local: ExecutorSandbox
    executor: Stream
    unread: bytes
    """What the local channel had read past the executor's hello."""
    secret: bytes
    folder: Path
    """The folder of the copy of the client's source tree the sandbox started from."""
    expires: float
    release: Callable[[Served], None]
    data: Stream | None = None
    gone: bool = False
    timer: threading.Timer | None = None
    """Destroys it at `expires`, whatever its control stream does."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self) -> None:
        self.destroy()

    def destroy(self) -> None:
        """Destroys the sandbox once; a second caller waits until it is gone."""
        with self._lock:
            if self.gone:
                return
            self.gone = True
            if self.timer is not None and self.timer is not threading.current_thread():
                self.timer.cancel()
            try:
                for sock in (self.data, self.executor):
                    if sock is not None:
                        _shutdown(sock)
                        sock.close()
                self.local.close()
            finally:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.release(self)  # its place is free even when closing failed


class _Opened:
    """A transport over a stream the server accepted already."""

    def __init__(self, sock: Stream) -> None:
        self.sock = sock

    def open(self, timeout: float, alive: Any, describe: Any) -> Stream:
        return self.sock

    def interrupt(self) -> None:
        _shutdown(self.sock)

    def close(self) -> None:
        pass


class SandboxServer:
    """Listens on `config.listen`; each connection is a thread that opens with the handshake, then serves
    a control stream (`_control`) or relays a data stream (`_relay`)."""

    def __init__(self, config: ServerConfig, secret: bytes) -> None:
        self.config = config = config.model_copy(update={"sandbox": resolved(config.sandbox)})
        self._secret = secret
        self._backend = backend(config.sandbox.backend)
        if self._backend.name == "remote":
            raise SandboxError("a sandbox server serves a local backend, not remote")
        host, port = parse_address(config.listen)
        self._listener = socket.create_server((host, port), backlog=64)
        self.address = f"{host}:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._live: set[int] = set()  # ids of the sandboxes served now
        self._starting = 0  # starts under way, which hold a place too
        self._pending: dict[str, Served] = {}  # stream name -> sandbox whose data stream is not open yet
        self._building: dict[str, threading.Lock] = {}  # environment key -> held while it is built
        self._ready: set[str] = set()  # keys of the environments made ready since the server started

    def serve_forever(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError as e:  # out of descriptors, say: the server waits rather than dies
                log(f"accept failed: {e}")
                time.sleep(0.5)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                threading.Thread(target=self._connection, args=(sock,), daemon=True).start()
            except RuntimeError as e:  # no thread to be had (a flood of connections): this one is dropped
                log(f"connection dropped: {e}")
                sock.close()
                time.sleep(0.1)

    def close(self) -> None:
        self._listener.close()

    def _secret_of(self, name: str) -> bytes | None:
        if name == CONTROL:
            return self._secret
        with self._lock:
            served = self._pending.get(name)
        return served.secret if served is not None else None

    def max_request(self) -> int:
        """Longest request line a client may send, in bytes: a source and a build context at their caps,
        base64-encoded (4/3), and 1 MB for the rest of the request."""
        tars = (self.config.max_source_mb + self.config.max_build_context_mb) << 20
        return tars * 4 // 3 + (1 << 20)

    def _connection(self, sock: socket.socket) -> None:
        try:
            name, key = server_handshake(sock, self._secret_of)
        except HandshakeError as e:
            log(f"refused a connection: {e}")
            sock.close()
            return
        stream = Sealed(sock, key, dialer=False)
        if name == CONTROL:
            self._control(ExecutorChannel(_Opened(stream), self.max_request()), key)
        else:
            self._relay(stream, name)

    # ---- control ------------------------------------------------------------------------------
    def _control(self, channel: ExecutorChannel, key: bytes) -> None:
        """Answers one client's requests about its one sandbox, until it closes, falls silent or destroys."""
        served: Served | None = None
        try:
            channel.open(0, lambda: True, lambda: "")
            channel.send({"ok": True, "hello": os.getpid()}, self.config.heartbeat_timeout_s)
            while True:
                wait = self.config.heartbeat_timeout_s
                if served is not None:  # checked on every turn: a stream of requests never idles it
                    wait = min(wait, served.expires - time.monotonic())
                    if wait <= 0 or served.gone:
                        raise SandboxUnusable("its expiry_s is past")
                request = channel.receive(wait)
                if request.get("op") == "start" and served is None:
                    reply, served = self._start(request, key)
                else:
                    reply = self._answer_safely(request, served)
                channel.send(reply, self.config.heartbeat_timeout_s)
                if request.get("op") == "destroy":
                    break
        except SandboxUnusable as e:
            if served is not None:
                log(f"sandbox {served.local.id}: its client is gone or its time is up ({e}); destroying it")
        except Exception as e:  # a malformed request ends this client's stream, never the server
            log(f"a control stream failed: {e!r}")
        finally:
            if served is not None:
                served.destroy()
            channel.close()

    def _answer_safely(self, request: dict[str, Any], served: Served | None) -> dict[str, Any]:
        try:
            return self._answer(request, served)
        except OSError as e:  # the sandbox went away under the question (its cgroup removed)
            return {"ok": False, "error": f"{e}"}

    def _answer(self, request: dict[str, Any], served: Served | None) -> dict[str, Any]:
        op = request.get("op")
        if op == "ping":
            with self._lock:
                free = self.config.capacity - len(self._live) - self._starting
            return {"ok": True, "free": free}
        if op == "destroy" and served is not None:
            served.destroy()  # waits for a destruction under way (its data stream closed first)
            return {"ok": True}
        if served is None or served.gone:
            return {"ok": False, "error": f"no live sandbox on this stream for {op!r}"}
        isolation = served.local.isolation
        if op == "alive":
            return {"ok": True, "alive": isolation.alive()}
        if op == "limits":
            pids, ooms = isolation.limit_events()
            return {"ok": True, "pids": pids, "ooms": ooms}
        if op == "describe":
            return {"ok": True, "describe": isolation.describe()}
        return {"ok": False, "error": f"unknown request {op!r}"}

    def _start(self, request: dict[str, Any], key: bytes) -> tuple[dict[str, Any], Served | None]:
        with self._lock:
            if len(self._live) + self._starting >= self.config.capacity:
                return {"ok": False, "full": True, "error": f"full ({self.config.capacity} sandboxes)"}, None
            self._starting += 1
        try:
            served = self._start_sandbox(request, key)
        except (SandboxError, ValueError, tarfile.TarError, OSError) as e:
            log(f"a start failed: {e}")
            return {"ok": False, "error": f"the server could not start a sandbox: {e}"}, None
        finally:
            with self._lock:
                self._starting -= 1
        log(f"sandbox {served.local.id} started ({len(self._live)}/{self.config.capacity})")
        return {"ok": True, "id": served.local.id, "heartbeat_s": self.config.heartbeat_timeout_s / 3}, served

    def _start_sandbox(self, request: dict[str, Any], key: bytes) -> Served:
        config = self._client_config(request.get("settings") or {})
        recipe = Recipe.model_validate(request.get("recipe") or {})
        # in the run's folder, which the reaper removes after a crash
        run_dir = config.state_dir / current_owner(config.state_dir, config.expiry_s).run_id
        folder = Path(tempfile.mkdtemp(prefix="served-", dir=run_dir))
        try:
            source = None
            if request.get("source") is not None:
                source = _unpack(
                    request["source"], folder / "repo", self.config.max_source_mb, "max_source_mb"
                )
            # each build step stops by then; pip takes wheels only unless build_sdists
            with build_deadline(self.config.maxima.build_s, wheels_only=not self.config.build_sdists):
                local = self._make(config, source, recipe, folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        executor, unread = local.channel.detach()
        name = stream_name(local.id)
        served = Served(
            local,
            executor,
            unread,
            derive(key, name),
            folder,
            time.monotonic() + config.expiry_s,
            self._release,
        )
        served.timer = threading.Timer(config.expiry_s, served.destroy)
        served.timer.daemon = True
        with self._lock:
            self._live.add(id(served))
            self._pending[name] = served
        track(served)
        served.timer.start()  # SIGINT / SIGTERM destroy it, its source folder too
        return served

    def _client_config(self, settings: object) -> SandboxConfig:
        """The server's sandbox settings with the client's limits, which must be within the maxima."""
        if not isinstance(settings, dict) or set(settings) - set(CLIENT_SETTINGS):
            raise ValueError(f"a client sets only {', '.join(CLIENT_SETTINGS)}")
        config = SandboxConfig.model_validate({**self.config.sandbox.model_dump(), **settings})
        self.config.maxima.refuse_above(config)
        return config

    def _make(
        self, config: SandboxConfig, source: Path | None, recipe: Recipe, folder: Path
    ) -> ExecutorSandbox:
        """A local sandbox as `recipe` says, its image or environment built first where needed. As the
        local backends' `start_task`: a task's environment on its image (the server's where it names none),
        and where the environment is no image (bwrap's folder), the task's image and build as without one.
        An image built from a client's context is named by the context's hash (`TASK_IMAGES`), never by
        the client; an image named without one must be on this host already: the server never pulls."""
        image = None if recipe.image is None else client_image(recipe.image)
        build = None
        if recipe.image_build is not None:
            build = _unpack(recipe.image_build, folder / "build", self.config.max_build_context_mb)
            image = TASK_IMAGES + hashlib.sha256(recipe.image_build.encode()).hexdigest()
        try:
            has_image: Callable[[str], bool] | None = getattr(self._backend, "has_image", None)
            if has_image is not None:
                if build is not None:
                    buildable_context(build, has_image)
                elif not has_image(image or config.image):
                    raise SandboxError(
                        f"image {image or config.image!r} is not on this server (it never pulls)"
                    )
            if recipe.environment is not None:
                base_build = build if image is not None else None
                environment = buildable(recipe.environment)
                built = self._environment(environment, image or config.image, base_build)
                config, environment_image = self._backend.in_environment(built, config)
                if environment_image is not None:
                    image, build = environment_image, None
            return self._backend.start(config, source, image, build)
        finally:
            if build is not None:
                shutil.rmtree(build, ignore_errors=True)  # an image is built: its context is of no more use

    def _environment(self, environment: Environment, image: str, build: Path | None) -> str:
        """`environment` on `image` built by this host's backend, or found where it was built before (its
        own cache, by the same key as a local run's); two requests for one environment build it once."""
        key = env_key(environment, image)
        with self._lock:
            lock = self._building.setdefault(key, threading.Lock())
        if not lock.acquire(timeout=build_time_left(self.config.maxima.build_s)):
            raise SandboxError(f"environment {key}: another start's build of it outlasted maxima.build_s")
        try:
            began = time.monotonic()
            built = self._backend.build_environment(environment, image, build, True)
            if key not in self._ready:
                self._ready.add(key)
                log(f"environment {key} ready in {time.monotonic() - began:.1f}s: {environment.requirements}")
        finally:
            lock.release()
        return built

    def _release(self, served: Served) -> None:
        with self._lock:
            self._live.discard(id(served))
            self._pending.pop(stream_name(served.local.id), None)

    # ---- data ---------------------------------------------------------------------------------
    def _relay(self, sock: Stream, name: str) -> None:
        """Joins an authenticated data stream to its sandbox's executor, both ways, until either ends."""
        with self._lock:
            served = self._pending.pop(name, None)  # accepted once
        if served is None or served.gone:
            sock.close()
            return
        served.data = sock
        for stream in (sock, served.executor):
            stream.settimeout(None)  # the handshake's and the hello's timeouts must not end an idle relay
        try:
            sock.sendall(b'{"ok": true, "hello": 0}\n' + served.unread)
        except OSError:
            pass
        else:
            back = threading.Thread(target=_pump, args=(served.executor, sock), daemon=True)
            back.start()
            _pump(sock, served.executor)
            back.join()
        served.destroy()  # a stream is opened once: without it the sandbox is of no more use
        sock.close()


def _pump(source: Stream, sink: Stream) -> None:
    """Copies `source` into `sink` until either ends, then shuts both, so that the other direction ends too."""
    try:
        while chunk := source.recv(1 << 20):
            sink.sendall(chunk)
    except OSError:
        pass
    _shutdown(source)
    _shutdown(sink)


def _shutdown(sock: Stream) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _unpack(
    data: object, dest: Path, most_mb: int | None = None, setting: str = "max_build_context_mb"
) -> Path:
    """Unpacks a client's tar (base64) into the new folder `dest`, which it returns; refuses one larger than
    `most_mb` (this server's `setting`) before decoding it, a compressed one (a client packs none: a small
    bomb could fill the disk), and any entry past the `data` filter or through a link (`through_links`)."""
    if not isinstance(data, str):
        raise ValueError("a tar is sent as base64 text")
    if most_mb is not None and len(data) * 3 // 4 > most_mb << 20:
        raise ValueError(f"the tar is larger than this server's {setting}={most_mb}")
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(data)), mode="r:") as tar:
        through_links(tar.getmembers())
        tar.extractall(dest, filter="data")
    return dest


def through_links(members: list[tarfile.TarInfo]) -> None:
    """Refuses an archive that a tar of a folder never is: an entry whose name is absolute or has a `..`
    part, or whose path goes through one of the archive's links; a link whose target is absolute, leaves
    the folder, or goes through a link. Chains of links, and `..` parts that step around a check of
    literal prefixes, are how an archive escapes the `data` filter of Pythons without the fix of
    CVE-2025-4517 (the red team wrote files outside the folder both ways)."""
    members = [m for m in members if not (m.isdir() and not PurePosixPath(m.name).parts)]  # "./"
    links = {_inside(m.name, m.name).as_posix() for m in members if m.issym() or m.islnk()}
    for member in members:
        name = _inside(member.name, member.name)
        _not_through(name.parts[:-1], links, member.name)
        if member.issym() or member.islnk():
            # a symbolic link's target is read from its folder, a hard link's from the archive's root
            base = name.parent.parts if member.issym() else ()
            if PurePosixPath(member.linkname).is_absolute():
                raise tarfile.TarError(f"{member.name}: its link target {member.linkname!r} is absolute")
            walked: list[str] = list(base)
            parts = PurePosixPath(member.linkname).parts
            for i, part in enumerate(parts):
                if part == "..":
                    if not walked:
                        raise tarfile.TarError(
                            f"{member.name}: its link target {member.linkname!r} leaves the folder"
                        )
                    walked.pop()
                elif part != ".":
                    walked.append(part)
                    if i < len(parts) - 1 and "/".join(walked) in links:  # on disk, `link/..` is not here
                        raise tarfile.TarError(
                            f"{member.name}: its link target goes through the link {'/'.join(walked)}"
                        )


def _inside(name: str, member: str) -> PurePosixPath:
    """`name` of an entry, refused where absolute or with a `..` part."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise tarfile.TarError(f"{member}: an entry's name is empty, absolute or has a '..' part")
    return path


def _not_through(parts: tuple[str, ...], links: set[str], member: str) -> None:
    """Refuses the folders `parts` where one of them is one of the archive's `links`."""
    for depth in range(1, len(parts) + 1):
        if PurePosixPath(*parts[:depth]).as_posix() in links:
            raise tarfile.TarError(
                f"{member}: its path goes through the link {PurePosixPath(*parts[:depth])}"
            )


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} sandbox-server: {message}", file=sys.stderr, flush=True)


def serve(config: ServerConfig) -> int:
    """Serves sandboxes until SIGINT / SIGTERM, which destroy them all (`harness sandbox-server`)."""
    server = SandboxServer(config, read_secret(config.secret_file))
    install_signal_handlers()
    log(f"serving {server.config.sandbox.backend} sandboxes, at most {config.capacity} at once")
    print(f"listening on {server.address}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.close()
    return 0
