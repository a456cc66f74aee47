"""The host end of the executor connection: JSON lines over a byte stream that a transport opens once.

Two transports: `UnixListener`, a socket file the in-sandbox executor connects back to (local backends: in
a folder only the harness's side may enter, the peer checked by SO_PEERCRED), and
`envs.stream_auth.TcpDialer`, a TCP stream to a sandbox server, opened by a mutual handshake on a
per-sandbox secret and sealed record by record (`harness sandbox-server`, `envs/remote_backend.py`). The
framing, its timeouts and its buffer are the same over both.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from envs.sandbox import SandboxError, SandboxUnusable


class Stream(Protocol):
    """What the channel uses of a connected socket (`socket.socket`, `envs.stream_auth.Sealed`)."""

    def recv(self, size: int, /) -> bytes: ...

    def sendall(self, data: bytes, /) -> None: ...

    def settimeout(self, timeout: float | None, /) -> None: ...

    def shutdown(self, how: int, /) -> None: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """Opens the one byte stream of a channel."""

    def open(self, timeout: float, alive: Callable[[], bool], describe: Callable[[], str]) -> Stream:
        """The connected stream within `timeout` seconds; `SandboxError` when the sandbox is gone (`alive`)
        or the time is up."""
        ...

    def interrupt(self) -> None:
        """Makes an `open` that another thread is waiting in fail at once."""
        ...

    def close(self) -> None:
        """Frees what `open` left behind (a listener, a socket file). Safe to call twice."""
        ...


class Peer(NamedTuple):
    """The process at the other end of a Unix socket, as the kernel saw it connect (SO_PEERCRED): its pid and
    ids as the listener's namespaces see them (a bwrap sandbox's uid 1000 is its host user)."""

    pid: int
    uid: int
    gid: int


PeerCheck = Callable[[Peer], str | None]
"""Why a process that connected is not the sandbox's executor; None when it is."""


class UnixListener:
    """A socket file that accepts the sandbox's executor once; the listener is closed right after, so a
    process of the agent cannot connect in its place later.

    The socket lives in a folder of its own (`folder/sock`) that only `owner` may enter: the harness's user,
    or the host user a bwrap sandbox binds it as. A host user who watches the state folder cannot reach it,
    and a process that reaches it all the same is accepted only when `check` (set by the backend once the
    sandbox's process is known, before `open`) says it is the executor; any other is hung up on."""

    def __init__(self, folder: Path, owner: int | None = None) -> None:
        folder.mkdir(mode=0o700)
        if owner is not None and owner != os.geteuid():
            os.chown(folder, owner, -1)
        self.folder = folder
        self.path = folder / "sock"
        self.check: PeerCheck | None = None
        self.refused: list[str] = []
        """The last connections hung up on, for the error when the executor never came."""
        self._listener: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        os.chmod(self.path, 0o666)  # the executor runs as an unprivileged uid inside the sandbox
        self._listener.listen(1)

    def open(self, timeout: float, alive: Callable[[], bool], describe: Callable[[], str]) -> socket.socket:
        if self._listener is None:
            raise SandboxError("the executor's socket is accepted once")
        if self.check is None:
            raise SandboxError("the executor's socket has no check of its peer")
        deadline = time.monotonic() + timeout
        self._listener.settimeout(0.05)
        while True:
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                if not alive():
                    raise SandboxError(f"sandbox exited before its executor started: {describe()}") from None
                if time.monotonic() > deadline:
                    refused = f"; refused: {'; '.join(self.refused)}" if self.refused else ""
                    raise SandboxError(
                        f"executor did not start within {timeout:.0f}s: {describe()}{refused}"
                    ) from None
                continue
            peer = peer_of(sock)
            why = self.check(peer)
            if why is None:
                break
            sock.close()
            self.refused = [*self.refused[-4:], f"pid {peer.pid} uid {peer.uid}: {why}"]
        self._listener.close()
        self._listener = None
        return sock

    def interrupt(self) -> None:
        _shutdown(self._listener)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self.path.unlink(missing_ok=True)
        try:
            self.folder.rmdir()
        except OSError:
            pass  # gone already; a run's folder, with whatever is left in it, goes with the run


def peer_of(sock: socket.socket) -> Peer:
    """Who is at the other end of a connected Unix socket."""
    return Peer(*struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)))


class ExecutorChannel:
    """Sends requests to the executor and reads its answers, one JSON line each, over a `Transport`."""

    def __init__(self, transport: Transport, max_line: int | None = None) -> None:
        self.transport = transport
        self.max_line = max_line
        """Longest line the peer may send, in bytes (None: any; a copy-out's reply can be hundreds of MB).
        A sandbox server bounds its clients' requests with it."""
        self._sock: Stream | None = None
        self._buffer = bytearray()  # grows in place: a reply of a copy-out can be hundreds of megabytes

    def accept(self, timeout: float, alive: Callable[[], bool], describe: Callable[[], str]) -> int:
        """Opens the stream and waits for the executor's hello; fails fast when the sandbox process is gone."""
        deadline = time.monotonic() + timeout
        self.open(timeout, alive, describe)
        hello = self.receive(deadline - time.monotonic())
        return int(hello["hello"])

    def open(self, timeout: float, alive: Callable[[], bool], describe: Callable[[], str]) -> None:
        """Opens the stream, for a peer that speaks first (`accept` waits for the executor's hello)."""
        self._sock = self.transport.open(timeout, alive, describe)

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Sends one request and waits for its answer at most `timeout` seconds."""
        self.send(request, timeout)
        return self.receive(timeout)

    def send(self, message: dict[str, Any], timeout: float | None = None) -> None:
        """Sends one line, within `timeout` seconds (None: however long the peer takes to read it)."""
        if self._sock is None:
            raise SandboxUnusable("the executor connection is closed")
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError as e:
            self.close()
            raise SandboxUnusable(f"executor connection lost: {e}") from e

    def receive(self, timeout: float) -> dict[str, Any]:
        """The next line, waited for at most `timeout` seconds; after a timeout the channel is closed."""
        if self._sock is None:
            raise SandboxUnusable("the executor connection is closed")
        deadline = time.monotonic() + max(timeout, 0.01)
        scanned = 0  # only new bytes are searched for the end of the line, so a long reply costs linear time
        while (end := self._buffer.find(b"\n", scanned)) < 0:
            scanned = len(self._buffer)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise SandboxUnusable(f"executor did not answer within {timeout:.1f}s")
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError as e:
                self.close()
                raise SandboxUnusable(f"executor connection lost: {e}") from e
            if not chunk:
                self.close()
                raise SandboxUnusable("the executor exited (the sandbox died or was killed)")
            self._buffer += chunk
            if self.max_line is not None and len(self._buffer) > self.max_line:
                self.close()
                raise SandboxUnusable(f"a line longer than {self.max_line} bytes")
        line = self._buffer[:end]
        del self._buffer[: end + 1]
        reply: dict[str, Any] = json.loads(line)
        return reply

    def detach(self) -> tuple[Stream, bytes]:
        """The open stream and the bytes read past the last line, for a caller that relays it further
        (`envs/sandbox_server.py`); the channel is closed without closing the stream."""
        if self._sock is None:
            raise SandboxUnusable("the executor connection is closed")
        sock, rest = self._sock, bytes(self._buffer)
        self._sock = None
        self._buffer.clear()
        self.close()
        return sock, rest

    def interrupt(self) -> None:
        """Makes a call that another thread is waiting in fail at once. Closing would not wake it, and would
        free the descriptor under it: a socket opened next could take the number, and the call wait on it."""
        _shutdown(self._sock)
        self.transport.interrupt()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self.transport.close()


def _shutdown(sock: Stream | socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected, or already closed
