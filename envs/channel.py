"""Host side of the executor connection: a Unix socket that the in-sandbox executor connects back to."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envs.sandbox import SandboxError, SandboxUnusable


class ExecutorChannel:
    """Listens on a socket file, accepts the executor once, then sends requests and reads answers.

    Only the first connection is accepted; the listener is closed right after, so a process of the
    agent cannot connect in its place later.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._listener: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        os.chmod(path, 0o666)  # the executor runs as an unprivileged uid inside the sandbox
        self._listener.listen(1)
        self._sock: socket.socket | None = None
        self._buffer = bytearray()  # grows in place: a reply of a copy-out can be hundreds of megabytes

    def accept(self, timeout: float, alive: Callable[[], bool], describe: Callable[[], str]) -> int:
        """Waits for the executor's hello; fails fast when the sandbox process is gone."""
        assert self._listener is not None, "accept() is called once"
        deadline = time.monotonic() + timeout
        self._listener.settimeout(0.05)
        while True:
            try:
                sock, _ = self._listener.accept()
                break
            except TimeoutError:
                if not alive():
                    raise SandboxError(f"sandbox exited before its executor started: {describe()}") from None
                if time.monotonic() > deadline:
                    raise SandboxError(
                        f"executor did not start within {timeout:.0f}s: {describe()}"
                    ) from None
        self._listener.close()
        self._listener = None
        self._sock = sock
        hello = self._read_line(deadline - time.monotonic())
        return int(hello["hello"])

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Sends one request and waits for its answer at most `timeout` seconds."""
        if self._sock is None:
            raise SandboxUnusable("the executor connection is closed")
        try:
            self._sock.sendall(json.dumps(request).encode() + b"\n")
        except OSError as e:
            self.close()
            raise SandboxUnusable(f"executor connection lost: {e}") from e
        return self._read_line(timeout)

    def _read_line(self, timeout: float) -> dict[str, Any]:
        assert self._sock is not None
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
        line = self._buffer[:end]
        del self._buffer[: end + 1]
        reply: dict[str, Any] = json.loads(line)
        return reply

    def interrupt(self) -> None:
        """Makes a call that another thread is waiting in fail at once. Closing would not wake it, and would
        free the descriptor under it: a socket opened next could take the number, and the call wait on it."""
        for s in (self._sock, self._listener):
            if s is not None:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # not connected, or already closed

    def close(self) -> None:
        for s in (self._sock, self._listener):
            if s is not None:
                s.close()
        self._sock = self._listener = None
        self.path.unlink(missing_ok=True)
