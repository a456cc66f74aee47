"""Hard limits on both backends: timeouts kill whole process trees, output is capped while it streams,
fork and memory bombs stay inside and break only their own sandbox, and there is no network."""

from __future__ import annotations

import re
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from envs import remote
from envs.bwrap import BwrapIsolation
from envs.docker import DockerIsolation
from envs.remote import ExecutorSandbox
from envs.replacing import ReplacingSandbox
from envs.sandbox import SandboxUnusable
from tools.commands import command_observation

MakeSandbox = Callable[..., ExecutorSandbox]

OBSERVATION_LIMIT = 16 * 1024
HARNESS_GROWTH_LIMIT = 64 << 20
HANG_MARGIN_S = 8.0
"""Slack over the expected time of a kill: the failure it tells apart is a hang of 30 s or more, and a host
that other work keeps busy delays a sandbox command by seconds, not tens of them."""


def processes(sandbox: ExecutorSandbox) -> list[str]:
    """`pid args` of every process in the sandbox, the `ps` that lists them included."""
    result = sandbox.run(["ps", "-e", "-o", "pid=,args="])
    assert result.exit_code == 0, result.output
    return [line.strip() for line in result.output.splitlines() if line.strip()]


def assert_only_the_executor_left(sandbox: ExecutorSandbox) -> None:
    listed = processes(sandbox)
    assert len(listed) == 2, f"stray processes: {listed}"
    assert listed[0].startswith("1 ") and "executor.py" in listed[0]


class Peak:
    """Samples a number in a thread while a block runs; `max` is the highest value seen."""

    def __init__(self, sample: Callable[[], int]) -> None:
        self.sample = sample
        self.start = self.max = sample()
        self._stop = threading.Event()

    @contextmanager
    def watching(self) -> Iterator[Peak]:
        def loop() -> None:
            while not self._stop.wait(0.005):
                self.max = max(self.max, self.sample())

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
            self.max = max(self.max, self.sample())


# ---- timeouts -------------------------------------------------------------------------------------

DAEMON = (
    "python3 -c 'import os, signal, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "        time.sleep(1000)\n"
    "    os._exit(0)\n"
    "os.wait()'"
)
HUNG = {
    "ignores-term": "echo before; trap '' TERM; sleep 1000",
    "detached-children": (
        "setsid sh -c 'trap \"\" TERM; sleep 1000' & nohup sleep 1000 >/dev/null 2>&1 & trap '' TERM; sleep 1000"
    ),
    "double-fork-daemon": f"{DAEMON}; echo parent waits; sleep 1000",
}


@pytest.mark.parametrize("command", list(HUNG.values()), ids=list(HUNG))
def test_a_timed_out_command_dies_with_its_whole_tree(make_sandbox: MakeSandbox, command: str) -> None:
    timeout, grace = 1.0, 1.0
    sandbox = make_sandbox(kill_grace_s=grace)

    began = time.monotonic()
    result = sandbox.run(command, timeout=timeout)
    wall = time.monotonic() - began

    assert result.timed_out
    assert result.exit_code is None
    assert wall <= timeout + grace + HANG_MARGIN_S, f"took {wall:.2f}s"
    assert result.failure is None  # a timeout is the command's doing, not a broken sandbox
    assert_only_the_executor_left(sandbox)
    if command.startswith("echo before"):
        assert result.output == "before\n"


@pytest.mark.parametrize(
    "redirect", ["", " >/dev/null 2>&1"], ids=["holding-the-output-pipe", "detached-output"]
)
def test_a_detached_child_of_a_finished_command_is_killed_at_once(
    make_sandbox: MakeSandbox, redirect: str
) -> None:
    sandbox = make_sandbox(kill_grace_s=1.0)

    began = time.monotonic()
    result = sandbox.run(
        f"setsid sh -c 'trap \"\" TERM; sleep 1000'{redirect} & {DAEMON}{redirect}; echo started", timeout=30
    )
    wall = time.monotonic() - began

    assert result.exit_code == 0
    assert result.output == "started\n"
    assert not result.timed_out
    assert wall < HANG_MARGIN_S, f"took {wall:.2f}s"  # not held until the 30 s timeout
    assert_only_the_executor_left(sandbox)


# ---- output ---------------------------------------------------------------------------------------


def rss() -> int:
    return int(psutil.Process().memory_info().rss)


def max_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10  # KiB on Linux


def test_a_gigabyte_of_output_is_capped_while_it_streams(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    sandbox.run("true")
    gigabyte = 1_000_000_000

    peak_before = max_rss()
    with Peak(rss).watching() as memory:
        result = sandbox.run(
            f"echo START; head -c {gigabyte} /dev/zero | tr '\\0' x; echo; echo END", timeout=120
        )

    assert result.exit_code == 0
    assert result.failure is None
    assert result.truncated
    assert result.output_bytes == len("START\n") + gigabyte + len("\nEND\n")
    assert len(result.output.encode()) < OBSERVATION_LIMIT
    assert result.output.startswith("START\nxxxx")
    assert result.output.endswith("xxxx\nEND\n")
    kept = sandbox.config.max_output_bytes
    assert f"\n[... {result.output_bytes - kept} bytes of output elided ...]\n" in result.output
    assert memory.max - memory.start < HARNESS_GROWTH_LIMIT
    assert max_rss() - peak_before < HARNESS_GROWTH_LIMIT


def test_endless_binary_output_is_capped_too(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(kill_grace_s=0.5)

    with Peak(rss).watching() as memory:
        endless = sandbox.run("cat /dev/urandom", timeout=2)
    assert endless.timed_out
    assert endless.truncated
    assert endless.output_bytes > 10_000_000
    assert len(endless.output.encode()) < OBSERVATION_LIMIT
    assert memory.max - memory.start < HARNESS_GROWTH_LIMIT

    # A multi-byte character cut in two at the head's end is still valid text.
    cut = sandbox.run("python3 -c \"print('\u20ac' * 100000)\"")
    assert cut.truncated
    assert cut.output.startswith("\u20ac\u20ac")
    assert len(cut.output.encode()) < OBSERVATION_LIMIT


# ---- bombs ----------------------------------------------------------------------------------------

FORK_BOMBS = {
    # The shell's own process waits a second: it ends at once otherwise, and on a busy host its leftovers
    # were killed (0.03 s in) before they had forked up to the limit (CI under two busy loops).
    "shell": "bash -c ':(){ :|:& };:; sleep 1'",
    "python": "python3 -c 'import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass'",
}
MEMORY_BOMB = "python3 -c 'chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))'"
SMALL = {"pids_limit": 64, "memory_mb": 256, "kill_grace_s": 0.5}


HOST_WIDE = pytest.mark.serial
"""The bomb tests count the whole host's processes and memory: `make test` runs them alone (with another
test beside them, a pytest-xdist worker's rollouts added 127 processes where the limit is 64)."""


@HOST_WIDE
@pytest.mark.parametrize("bomb", list(FORK_BOMBS.values()), ids=list(FORK_BOMBS))
def test_a_fork_bomb_stays_inside_and_breaks_only_its_sandbox(make_sandbox: MakeSandbox, bomb: str) -> None:
    sandbox = make_sandbox(**SMALL)
    neighbour = make_sandbox()
    host_pids = Peak(lambda: len(psutil.pids()))

    with host_pids.watching():
        result = sandbox.run(bomb, timeout=2)

    assert result.failure is not None and "process limit" in result.failure
    assert sandbox.failure == result.failure
    with pytest.raises(SandboxUnusable, match="process limit"):
        sandbox.run("true")
    with pytest.raises(SandboxUnusable):
        sandbox.read_file("README.md")
    # The host never held more than the sandbox's share, and gets it all back.
    assert host_pids.max - host_pids.start < SMALL["pids_limit"] + 40
    sandbox.close()
    assert len(psutil.pids()) - host_pids.start < 30
    assert neighbour.run("echo unharmed").output == "unharmed\n"


@pytest.mark.parametrize("command", [FORK_BOMBS["python"], "sleep 30"], ids=["fork-bomb", "sleep"])
def test_an_executor_that_does_not_answer_in_time_is_told_apart_by_the_limit_counters(
    make_sandbox: MakeSandbox, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork bomb under a tight CPU cap can keep the executor off the CPU past the host's margin (a
    CI run: 12.5 s for a 2 s command). The host then tells the process limit from a hang by the
    sandbox's own counters. Here the host gives up a second into the command, while it still runs."""
    sandbox = make_sandbox(**SMALL)
    monkeypatch.setattr(remote, "CALL_MARGIN_S", -(SMALL["kill_grace_s"] + 2.0))

    with pytest.raises(SandboxUnusable) as raised:
        sandbox.run(command, timeout=3)  # the host waits 1 s

    failure = sandbox.failure
    assert failure is not None and str(raised.value) == failure
    counted = sandbox.isolation.limit_events()[0] > 0  # no counter where bwrap has rlimits only
    if command == "sleep 30" or not counted:
        assert failure.startswith("executor did not answer"), failure
        assert not sandbox.limit_hit
    else:
        assert failure.startswith(remote.HIT_PROCESS_LIMIT), failure
        assert sandbox.limit_hit
    with pytest.raises(SandboxUnusable, match=re.escape(failure)):
        sandbox.run("true")


@HOST_WIDE
def test_a_memory_bomb_stays_inside_and_breaks_only_its_sandbox(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(**SMALL)
    neighbour = make_sandbox()
    host_used = Peak(lambda: psutil.virtual_memory().used)

    with host_used.watching():
        result = sandbox.run(MEMORY_BOMB, timeout=20)

    assert result.failure is not None and "out of memory" in result.failure
    assert result.exit_code in (None, 128 + 9)
    assert sandbox.failure == result.failure
    with pytest.raises(SandboxUnusable, match="out of memory"):
        sandbox.run("true")
    assert host_used.max - host_used.start < (SMALL["memory_mb"] + 256) << 20  # its limit, and some slack
    assert neighbour.run("echo unharmed").output == "unharmed\n"


# The Python bomb forks until its command times out, so it surely meets the process limit; the shell one
# can be ended by the timeout first on a busy machine.
@pytest.mark.parametrize("bomb", [FORK_BOMBS["python"], MEMORY_BOMB], ids=["fork-bomb", "memory-bomb"])
def test_a_bombed_sandbox_is_replaced_with_the_edits_carried_over(
    make_sandbox: MakeSandbox, sample_repo: Path, tmp_path: Path, bomb: str
) -> None:
    sandbox = ReplacingSandbox(lambda: make_sandbox(**SMALL))
    first = sandbox.id
    sandbox.write_file("pkg/calc.py", b"def add(a, b):\n    return b + a\n")
    sandbox.write_file("notes/plan.txt", b"step 1\n")
    assert sandbox.run("rm README.md").ok

    result = sandbox.run(bomb, timeout=5)

    assert result.failure is not None
    assert result.replaced and result.carried_over
    assert "files were kept" in command_observation(result).text
    assert sandbox.replacements == 1 and sandbox.last_failure == result.failure
    assert sandbox.id != first
    assert sandbox.run("echo fresh").output == "fresh\n"
    carried = tmp_path / "carried"
    sandbox.copy_out("/repo", carried)
    assert sorted(str(p.relative_to(carried)) for p in carried.rglob("*")) == [
        "notes",
        "notes/plan.txt",
        "pkg",
        "pkg/__init__.py",
        "pkg/calc.py",
        "tests",
        "tests/test_calc.py",
    ]
    assert (carried / "pkg" / "calc.py").read_bytes() == b"def add(a, b):\n    return b + a\n"
    assert (carried / "notes" / "plan.txt").read_bytes() == b"step 1\n"

    sandbox.reset()  # still the task's start state, not the carried-over edits
    assert sandbox.read_file("README.md") == (sample_repo / "README.md").read_bytes()
    assert sandbox.run("test -e notes").exit_code == 1


def kill_from_outside(sandbox: ExecutorSandbox) -> None:
    """What a crash, an OOM kill of the whole sandbox or an operator's `kill` does."""
    isolation = sandbox.isolation
    if isinstance(isolation, DockerIsolation):
        isolation.container.kill()
        isolation.container.wait(timeout=30)
    else:
        assert isinstance(isolation, BwrapIsolation)
        inside = psutil.Process(isolation.proc.pid).children(recursive=True)
        isolation.proc.kill()
        # The sandbox's processes die with bwrap, a moment later: until then the executor still answers.
        _, alive = psutil.wait_procs(inside, timeout=30)
        assert not alive, f"still alive after the kill: {alive}"


def test_a_sandbox_killed_from_outside_is_replaced(make_sandbox: MakeSandbox) -> None:
    sandbox = ReplacingSandbox(lambda: make_sandbox())
    sandbox.write_file("lost.txt", b"the executor is gone: nothing can be salvaged")
    kill_from_outside(sandbox.inner)

    result = sandbox.run("echo hello")

    assert result.failure is not None
    assert result.replaced and not result.carried_over
    assert "back at the task's start state" in command_observation(result).text
    assert sandbox.run("echo hello").output == "hello\n"
    assert sandbox.run("cat README.md").output == "# sample\n"
    assert sandbox.run("test -e lost.txt").exit_code == 1


# ---- network --------------------------------------------------------------------------------------

CONNECT = """
import socket, sys, time
for host, port in [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in sys.argv[1:])]:
    began = time.monotonic()
    try:
        socket.create_connection((host, port), timeout=3).close()
        print(host, "connected")
    except OSError as e:
        print(host, "failed", type(e).__name__, round(time.monotonic() - began, 2))
try:
    socket.getaddrinfo("example.com", 80)
    print("dns resolved")
except OSError as e:
    print("dns failed", type(e).__name__)
"""


def host_addresses() -> list[str]:
    """The host's own IPv4 addresses: loopback, the Docker bridge, the outward interface."""
    found = {
        address.address
        for addresses in psutil.net_if_addrs().values()
        for address in addresses
        if address.family == socket.AF_INET
    }
    return sorted(found | {"127.0.0.1"})


def test_the_network_is_unreachable(sandbox: ExecutorSandbox) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("0.0.0.0", 0))
    listener.listen(16)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    targets = [f"{address}:{port}" for address in host_addresses()] + ["1.1.1.1:80", "8.8.8.8:53"]

    try:
        result = sandbox.run(["python3", "-c", CONNECT, *targets], timeout=60)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()

    lines = result.output.splitlines()
    assert len(lines) == len(targets) + 1, result.output
    assert not any("connected" in line for line in lines), result.output
    assert lines[-1].startswith("dns failed")
    assert all(float(line.split()[-1]) < 3 for line in lines[:-1]), result.output  # refused, not timed out


def test_the_executor_socket_cannot_be_taken_over(sandbox: ExecutorSandbox) -> None:
    probe = (
        "import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/harness.sock'); print('connected')"
    )
    result = sandbox.run(["python3", "-c", probe])
    assert result.exit_code != 0
    assert "ConnectionRefusedError" in result.output
    assert sandbox.run("echo still mine").output == "still mine\n"
