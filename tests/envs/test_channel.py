"""The executor channel's framing over its two transports (a Unix socket accepted once, an authenticated
and sealed TCP stream), the handshake that opens the TCP one (a wrong secret on either side, a replayed
handshake and a peer that speaks before it all fail) and the seal after it (a byte changed, a record
replayed or reflected on the way fail the stream); timeouts and a dropped peer make the sandbox
unusable."""

from __future__ import annotations

import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envs.channel import ExecutorChannel, Stream, UnixListener
from envs.sandbox import SandboxError, SandboxUnusable
from envs.stream_auth import (
    MAGIC,
    NONCE_BYTES,
    HandshakeError,
    Sealed,
    Tampered,
    TcpDialer,
    mac,
    server_handshake,
)

SECRET = secrets.token_bytes(32)


def executor(sock: Stream, answer: bool = True) -> None:
    """A stand-in executor: says hello, then echoes each request's `n` doubled until the stream ends;
    with `answer=False` it reads and never answers."""
    sock.sendall(b'{"ok": true, "hello": 7}\n')
    buffered = b""
    while chunk := sock.recv(1 << 16):
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            if answer:
                sock.sendall(json.dumps({"ok": True, "n": 2 * json.loads(line)["n"]}).encode() + b"\n")
    sock.close()


def unix_pair(tmp_path: Path, answer: bool = True) -> ExecutorChannel:
    listener = UnixListener(tmp_path / "x")
    listener.check = lambda peer: None if peer.pid == os.getpid() else "not this process"
    channel = ExecutorChannel(listener)

    def connect() -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(tmp_path / "x" / "sock"))
        executor(sock, answer)

    threading.Thread(target=connect, daemon=True).start()
    assert channel.accept(5, lambda: True, lambda: "test") == 7
    return channel


@pytest.fixture
def tcp_server() -> Iterator[Callable[..., str]]:
    """Starts a one-connection server that checks the handshake with `secret` and then runs `executor`;
    what its handshake raised is in `errors`."""
    listeners: list[socket.socket] = []

    def start(secret: bytes = SECRET, answer: bool = True, errors: list[Exception] | None = None) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def serve() -> None:
            sock, _ = listener.accept()
            try:
                _, key = server_handshake(
                    sock, lambda name: secret if name == "sandbox:t" else None, timeout=5
                )
            except HandshakeError as e:
                (errors if errors is not None else []).append(e)
                sock.close()
                return
            sock.settimeout(None)
            executor(Sealed(sock, key, dialer=False), answer)

        threading.Thread(target=serve, daemon=True).start()
        return f"127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for listener in listeners:
        listener.close()


def test_the_unix_transport_carries_calls_and_is_accepted_once(tmp_path: Path) -> None:
    channel = unix_pair(tmp_path)
    assert [channel.call({"n": n}, 5)["n"] for n in range(3)] == [0, 2, 4]
    assert not (tmp_path / "x" / "sock").exists() or not _connects(tmp_path / "x" / "sock")
    channel.close()
    channel.close()
    assert not (tmp_path / "x").exists()


def test_the_unix_socket_is_in_a_private_folder_and_a_wrong_peer_is_hung_up_on(tmp_path: Path) -> None:
    """Red team (docs/reliability.md 5j): a host user who watched the state folder connected first and
    answered every command. The socket's folder is the harness's alone (0700), and a process that gets in
    all the same is refused unless the backend's check (SO_PEERCRED) names it the executor; the executor
    after it is accepted."""
    listener = UnixListener(tmp_path / "x")
    assert stat.S_IMODE((tmp_path / "x").stat().st_mode) == 0o700
    listener.check = lambda peer: None if peer.pid == os.getpid() else "not this process"
    impostor = subprocess.Popen([sys.executable, "-c", IMPOSTOR, str(listener.path)], stdout=subprocess.PIPE)
    assert impostor.stdout is not None and impostor.stdout.readline() == b"connected\n"
    channel = ExecutorChannel(listener)

    def connect() -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(listener.path))
        executor(sock)

    threading.Thread(target=connect, daemon=True).start()
    assert channel.accept(5, lambda: True, lambda: "test") == 7
    assert impostor.communicate(timeout=5)[0] == b"hung up on\n"  # never asked anything
    assert listener.refused == [f"pid {impostor.pid} uid {os.getuid()}: not this process"]
    assert channel.call({"n": 4}, 5)["n"] == 8
    channel.close()
    with pytest.raises(SandboxError, match="no check"):
        UnixListener(tmp_path / "y").open(1, lambda: True, str)


IMPOSTOR = """import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])
sock.sendall(b'{"ok": true, "hello": 666}\\n')
print("connected", flush=True)
try:
    asked = sock.recv(100)
except ConnectionResetError:  # closed with the hello unread
    asked = b""
print("asked" if asked else "hung up on")
"""
"""Connects to a socket first and says the executor's hello."""


def _connects(path: Path) -> bool:
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(str(path))
    except OSError:
        return False
    return True


def test_the_tcp_transport_carries_calls_after_the_handshake(tcp_server: Callable[..., str]) -> None:
    dialer = TcpDialer(tcp_server(), "sandbox:t", SECRET)
    channel = ExecutorChannel(dialer)
    assert channel.accept(5, lambda: True, lambda: "test") == 7
    assert len(dialer.session_key) == 32
    big = 10**30
    assert channel.call({"n": big}, 5)["n"] == 2 * big
    channel.close()


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_a_silent_executor_times_out_and_a_dropped_one_is_unusable(
    transport: str, tmp_path: Path, tcp_server: Callable[..., str]
) -> None:
    if transport == "unix":
        channel = unix_pair(tmp_path, answer=False)
    else:
        channel = ExecutorChannel(TcpDialer(tcp_server(answer=False), "sandbox:t", SECRET))
        channel.accept(5, lambda: True, lambda: "test")
    start = time.monotonic()
    with pytest.raises(SandboxUnusable, match=r"did not answer within 0\.3s"):
        channel.call({"n": 1}, 0.3)
    assert time.monotonic() - start < 2
    with pytest.raises(SandboxUnusable, match="closed"):
        channel.call({"n": 1}, 1)


def test_a_peer_that_goes_away_makes_the_call_fail_at_once() -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve_then_drop() -> None:
        sock, _ = listener.accept()
        _, key = server_handshake(sock, lambda name: SECRET, timeout=5)
        stream = Sealed(sock, key, dialer=False)
        stream.sendall(b'{"ok": true, "hello": 1}\n')
        stream.recv(100)
        sock.close()  # mid-call

    threading.Thread(target=serve_then_drop, daemon=True).start()
    channel = ExecutorChannel(TcpDialer(f"127.0.0.1:{listener.getsockname()[1]}", "sandbox:t", SECRET))
    channel.accept(5, lambda: True, lambda: "test")
    start = time.monotonic()
    with pytest.raises(SandboxUnusable, match="exited"):
        channel.call({"n": 1}, 30)
    assert time.monotonic() - start < 2
    listener.close()


def test_a_wrong_client_secret_is_refused_before_any_request(tcp_server: Callable[..., str]) -> None:
    errors: list[Exception] = []
    address = tcp_server(errors=errors)
    channel = ExecutorChannel(TcpDialer(address, "sandbox:t", secrets.token_bytes(32)))
    with pytest.raises(HandshakeError, match="closed the stream during the handshake"):
        channel.accept(5, lambda: True, lambda: "test")
    _wait_for(lambda: bool(errors))
    assert "failed the handshake" in str(errors[0])


def test_an_unknown_name_is_refused(tcp_server: Callable[..., str]) -> None:
    errors: list[Exception] = []
    channel = ExecutorChannel(TcpDialer(tcp_server(errors=errors), "sandbox:other", SECRET))
    with pytest.raises(HandshakeError):
        channel.accept(5, lambda: True, lambda: "test")
    _wait_for(lambda: bool(errors))


def test_a_server_without_the_secret_is_detected_by_the_client(tcp_server: Callable[..., str]) -> None:
    """A server that does not know the secret cannot make the proof the client checks, even one that
    answers whatever it is sent (here: a server that accepts any proof and signs with its own secret)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def impostor() -> None:
        sock, _ = listener.accept()
        sock.sendall(MAGIC + secrets.token_bytes(NONCE_BYTES))
        sock.recv(NONCE_BYTES + 1 + len("sandbox:t") + 32)
        sock.sendall(secrets.token_bytes(32))
        time.sleep(1)
        sock.close()

    threading.Thread(target=impostor, daemon=True).start()
    channel = ExecutorChannel(TcpDialer(f"127.0.0.1:{listener.getsockname()[1]}", "sandbox:t", SECRET))
    with pytest.raises(HandshakeError, match="does not know the secret"):
        channel.accept(5, lambda: True, lambda: "test")
    listener.close()
    with pytest.raises(SandboxError):  # a wrong server secret, with the real handshake on the server side
        ExecutorChannel(TcpDialer(tcp_server(secret=secrets.token_bytes(32)), "sandbox:t", SECRET)).accept(
            5, lambda: True, lambda: "test"
        )


def test_a_recorded_handshake_does_not_open_a_new_stream(tcp_server: Callable[..., str]) -> None:
    """The client's proof covers the server's fresh nonce: sent again to a new connection, it is refused
    and the server sends nothing more (no proof, no hello)."""
    errors: list[Exception] = []
    recorded = _client_part(tcp_server(), SECRET)
    address = tcp_server(errors=errors)
    host, port = address.split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    greeting = _recv_exact(sock, len(MAGIC) + NONCE_BYTES)
    assert greeting[len(MAGIC) :] != recorded[1]
    sock.sendall(recorded[0])
    assert closed_without_a_word(sock)
    _wait_for(lambda: bool(errors))


def test_bytes_of_the_protocol_before_the_handshake_are_refused(tcp_server: Callable[..., str]) -> None:
    errors: list[Exception] = []
    host, port = tcp_server(errors=errors).split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    _recv_exact(sock, len(MAGIC) + NONCE_BYTES)
    sock.sendall(json.dumps({"op": "exec", "cmd": "id", "n": 1}).encode().ljust(200) + b"\n")
    assert closed_without_a_word(sock)
    _wait_for(lambda: bool(errors))


def _client_part(address: str, secret: bytes) -> tuple[bytes, bytes]:
    """Plays the client's side of a good handshake by hand; returns its message and the server's nonce."""
    host, port = address.split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    nonce_s = _recv_exact(sock, len(MAGIC) + NONCE_BYTES)[len(MAGIC) :]
    nonce_c, name = secrets.token_bytes(NONCE_BYTES), b"sandbox:t"
    message = nonce_c + bytes([len(name)]) + name + mac(secret, b"client", nonce_s, nonce_c, name)
    sock.sendall(message)
    assert _recv_exact(sock, 32) == mac(secret, b"server", nonce_s, nonce_c, name)
    sock.close()
    return message, nonce_s


def closed_without_a_word(sock: socket.socket) -> bool:
    """The peer closed the stream (a reset, where it left bytes unread) and sent nothing before."""
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "closed early"
        data += chunk
    return data


def _wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_byte_changed_on_the_way_fails_the_stream(tcp_server: Callable[..., str]) -> None:
    """A relay on the path that passes the handshake untouched and then flips one bit of the first record
    the server sends (the hello): the client's read fails, and the channel is unusable."""
    upstream = tcp_server()
    proxy = socket.create_server(("127.0.0.1", 0))

    def relay() -> None:
        client, _ = proxy.accept()
        host, port = upstream.split(":")
        server = socket.create_connection((host, int(port)))
        threading.Thread(target=_copy, args=(client, server, None), daemon=True).start()
        _copy(server, client, len(MAGIC) + NONCE_BYTES + 32 + 40)  # greeting, proof, then into the record

    threading.Thread(target=relay, daemon=True).start()
    channel = ExecutorChannel(TcpDialer(f"127.0.0.1:{proxy.getsockname()[1]}", "sandbox:t", SECRET))
    with pytest.raises(SandboxUnusable, match="tag does not match"):
        channel.accept(5, lambda: True, lambda: "test")
    proxy.close()


def _copy(source: socket.socket, sink: socket.socket, flip_at: int | None) -> None:
    seen = 0
    while chunk := source.recv(1 << 16):
        if flip_at is not None and seen <= flip_at < seen + len(chunk):
            chunk = chunk[: flip_at - seen] + bytes([chunk[flip_at - seen] ^ 1]) + chunk[flip_at - seen + 1 :]
        seen += len(chunk)
        sink.sendall(chunk)


def test_a_replayed_or_reflected_record_fails_the_stream() -> None:
    one, two = socket.socketpair()
    dialer, listener = Sealed(one, SECRET, dialer=True), Sealed(two, SECRET, dialer=False)
    dialer.sendall(b"first")
    record = two.recv(100)  # the record as it travels, read past the seal
    one.sendall(record)
    one.sendall(record)  # the same record again
    assert listener.recv(100) == b"first"
    with pytest.raises(Tampered):
        listener.recv(100)
    two.sendall(record)  # back to its sender
    with pytest.raises(Tampered):
        dialer.recv(100)
    big = secrets.token_bytes(3 << 20)  # several records, read in pieces
    listener = Sealed(two, SECRET, dialer=False)
    dialer = Sealed(one, SECRET, dialer=True)
    threading.Thread(target=dialer.sendall, args=(big,), daemon=True).start()
    got = bytearray()
    while len(got) < len(big):
        got += listener.recv(1 << 16)
    assert got == big
