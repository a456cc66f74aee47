"""A TCP stream opened by mutual authentication on a shared secret: the transport of remote sandboxes.

The handshake, before any byte of the protocol it carries (the listening side is S, the dialing side C):

    S -> C   MAGIC, nonce_s (32 random bytes)
    C -> S   nonce_c (32 random bytes), len(name) (1 byte), name, HMAC(secret, "client" | nonce_s | nonce_c | name)
    S -> C   HMAC(secret, "server" | nonce_s | nonce_c | name)

Each side checks the other's proof in constant time (`hmac.compare_digest`) and closes the stream on a
wrong one; the server sends nothing after a wrong proof. `name` says which secret the server checks
against (the fleet's, or one sandbox's). Both nonces are fresh, so a recorded handshake does not
authenticate again, and the two labels keep one side's proof from being reflected as the other's. Both
sides then hold a session key, HMAC(secret, "session" | nonce_s | nonce_c), that neither sent: a server
derives a sandbox's secret from the session that asked for the sandbox (`derive`), so no secret ever
crosses the network.

After the handshake both directions are sealed (`Sealed`): records, each with an HMAC-SHA256 tag under
the direction's key (derived from the session key) over its sequence number and its bytes, so that a byte
changed, a record dropped, replayed, reordered, reflected or injected on the way fails the stream. The
streams are not encrypted: what the sandboxes run and print can be read on the network, not changed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

from envs.sandbox import SandboxError

MAGIC = b"HSB2"
NONCE_BYTES = 32
MAC_BYTES = 32
HANDSHAKE_TIMEOUT_S = 10.0
"""Longest wait for a peer's part of the handshake."""
RECORD_MAX = 1 << 20
"""Most bytes of data in one sealed record."""
HEADER = struct.Struct(">I")
"""A record's length, before its tag."""
SEQUENCE = struct.Struct(">Q")


class HandshakeError(SandboxError):
    """The peer did not prove it knows the secret, or went away during the handshake."""


class Tampered(ConnectionError):
    """A sealed record's tag does not match: its bytes were changed, or records dropped, replayed,
    reordered or injected on the way."""


def mac(secret: bytes, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, label + b"|" + b"|".join(parts), hashlib.sha256).digest()


def derive(key: bytes, name: str) -> bytes:
    """The secret of `name` (a sandbox's stream) under a session key."""
    return mac(key, b"derive", name.encode())


def read_secret(path: Path) -> bytes:
    """A fleet secret from its file: at least 32 bytes, kept from other users."""
    try:
        mode, secret = path.stat().st_mode, path.read_bytes().strip()
    except OSError as e:
        raise SandboxError(f"the fleet's secret: {e}") from e
    if mode & 0o077:
        raise SandboxError(f"{path}: the secret file must not be readable by others (chmod 600)")
    if len(secret) < 32:
        raise SandboxError(f"{path}: a secret has at least 32 bytes (e.g. `openssl rand -hex 32`)")
    return secret


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise SandboxError(f"a sandbox server is host:port, not {address!r}")
    return host.strip("[]"), int(port)


def _read_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    data = bytearray()
    while len(data) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HandshakeError("the peer did not finish the handshake in time")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(n - len(data))
        except TimeoutError:
            continue
        except OSError as e:
            raise HandshakeError(f"the handshake failed: {e}") from e
        if not chunk:
            raise HandshakeError("the peer closed the stream during the handshake (a wrong secret?)")
        data += chunk
    return bytes(data)


def client_handshake(
    sock: socket.socket, name: str, secret: bytes, timeout: float = HANDSHAKE_TIMEOUT_S
) -> bytes:
    """Proves `secret` under `name` to the server and checks the server's proof; returns the session key."""
    deadline = time.monotonic() + timeout
    greeting = _read_exact(sock, len(MAGIC) + NONCE_BYTES, deadline)
    if greeting[: len(MAGIC)] != MAGIC:
        raise HandshakeError("the peer is not a sandbox server")
    nonce_s, nonce_c, raw = greeting[len(MAGIC) :], secrets.token_bytes(NONCE_BYTES), name.encode()
    if not 0 < len(raw) < 256:
        raise HandshakeError(f"a stream's name has 1 to 255 bytes, not {len(raw)}")
    try:
        sock.sendall(nonce_c + bytes([len(raw)]) + raw + mac(secret, b"client", nonce_s, nonce_c, raw))
    except OSError as e:
        raise HandshakeError(f"the handshake failed: {e}") from e
    proof = _read_exact(sock, MAC_BYTES, deadline)
    if not hmac.compare_digest(proof, mac(secret, b"server", nonce_s, nonce_c, raw)):
        raise HandshakeError("the server does not know the secret")
    return mac(secret, b"session", nonce_s, nonce_c)


def server_handshake(
    sock: socket.socket, secret_of: Callable[[str], bytes | None], timeout: float = HANDSHAKE_TIMEOUT_S
) -> tuple[str, bytes]:
    """Checks the client's proof against `secret_of(name)` (None: no such name) and proves the secret back;
    returns the name and the session key. The caller closes the stream on `HandshakeError`."""
    deadline = time.monotonic() + timeout
    nonce_s = secrets.token_bytes(NONCE_BYTES)
    try:
        sock.sendall(MAGIC + nonce_s)
    except OSError as e:
        raise HandshakeError(f"the handshake failed: {e}") from e
    head = _read_exact(sock, NONCE_BYTES + 1, deadline)
    nonce_c, size = head[:NONCE_BYTES], head[NONCE_BYTES]
    raw = _read_exact(sock, size, deadline) if size else b""
    proof = _read_exact(sock, MAC_BYTES, deadline)
    name = raw.decode(errors="replace")
    known = secret_of(name)
    secret = known if known is not None else secrets.token_bytes(32)  # the same work for an unknown name
    if not hmac.compare_digest(proof, mac(secret, b"client", nonce_s, nonce_c, raw)) or known is None:
        raise HandshakeError(f"a client failed the handshake for {name!r}")
    try:
        sock.sendall(mac(secret, b"server", nonce_s, nonce_c, raw))
    except OSError as e:
        raise HandshakeError(f"the handshake failed: {e}") from e
    return name, mac(secret, b"session", nonce_s, nonce_c)


class Sealed:
    """A stream over `sock` in records `length (4 bytes) | tag (32) | data`, the tag an HMAC-SHA256 under
    this direction's key over the record's sequence number, length and data. A socket to its users
    (`envs.channel.Stream`): a read that times out keeps what it had of a record for the next."""

    def __init__(self, sock: socket.socket, key: bytes, dialer: bool) -> None:
        self.sock = sock
        ours, theirs = ("dialer", "listener") if dialer else ("listener", "dialer")
        self._out_key, self._in_key = derive(key, f"from {ours}"), derive(key, f"from {theirs}")
        self._out_seq = self._in_seq = 0
        self._raw = bytearray()  # received, not yet a whole record
        self._plain = bytearray()  # checked, not yet read

    def sendall(self, data: bytes, /) -> None:
        view = memoryview(data)
        for start in range(0, len(view), RECORD_MAX):
            piece = view[start : start + RECORD_MAX]
            header = HEADER.pack(len(piece))
            tag = hmac.new(self._out_key, SEQUENCE.pack(self._out_seq) + header, hashlib.sha256)
            tag.update(piece)
            self._out_seq += 1
            self.sock.sendall(header + tag.digest() + piece)

    def recv(self, size: int, /) -> bytes:
        while not self._plain:
            if not self._next_record():
                return b""
        data = bytes(self._plain[:size])
        del self._plain[:size]
        return data

    def _next_record(self) -> bool:
        """Reads one whole record and checks it; False at the end of the stream."""
        start = HEADER.size + MAC_BYTES
        while len(self._raw) < start or len(self._raw) < start + HEADER.unpack_from(self._raw)[0]:
            if len(self._raw) >= HEADER.size and HEADER.unpack_from(self._raw)[0] > RECORD_MAX:
                raise Tampered("a sealed record is longer than any the peer sends")
            chunk = self.sock.recv(1 << 20)  # a timeout here leaves the part read in `_raw`
            if not chunk:
                if self._raw:
                    raise Tampered("the stream ended inside a sealed record")
                return False
            self._raw += chunk
        end = start + HEADER.unpack_from(self._raw)[0]
        tag = hmac.new(self._in_key, SEQUENCE.pack(self._in_seq) + self._raw[: HEADER.size], hashlib.sha256)
        data = self._raw[start:end]
        tag.update(data)
        if not hmac.compare_digest(tag.digest(), bytes(self._raw[HEADER.size : start])):
            raise Tampered("a sealed record's tag does not match (changed, replayed or injected on the way)")
        self._in_seq += 1
        self._plain += data
        del self._raw[:end]
        return True

    def settimeout(self, timeout: float | None, /) -> None:
        self.sock.settimeout(timeout)

    def shutdown(self, how: int, /) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()


def dial(address: str, timeout: float) -> socket.socket:
    host, port = parse_address(address)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        raise SandboxError(f"sandbox server {address} does not answer: {e}") from e
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class TcpDialer:
    """An `envs.channel.Transport`: a TCP stream to a sandbox server, opened by the handshake on `secret`
    under `name` and sealed with its session key (`session_key`, once open)."""

    def __init__(self, address: str, name: str, secret: bytes) -> None:
        self.address, self.name, self._secret = address, name, secret
        self.session_key = b""
        self._sock: socket.socket | None = None

    def open(self, timeout: float, alive: Callable[[], bool], describe: Callable[[], str]) -> Sealed:
        sock = self._sock = dial(self.address, timeout)
        try:
            self.session_key = client_handshake(
                sock, self.name, self._secret, min(timeout, HANDSHAKE_TIMEOUT_S)
            )
        except HandshakeError as e:
            sock.close()
            self._sock = None
            raise HandshakeError(f"sandbox server {self.address}: {e}") from None
        self._sock = None  # the channel owns it now
        return Sealed(sock, self.session_key, dialer=True)

    def interrupt(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        pass  # nothing is left behind: the stream is the channel's
