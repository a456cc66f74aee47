"""The kernel's key rings are refused in bubblewrap sandboxes, as in Docker's (issue 32, item 2): nothing a
grading child puts there can reach the next child."""

from __future__ import annotations

import struct

import pytest

from envs.factory import start_sandbox
from envs.sandbox import SandboxConfig
from envs.seccomp import KEYRING_CALLS, RET_ALLOW, RET_EPERM, X32_BIT, keyring_filter
from tests.conftest import require_backend


def run_filter(program: bytes, arch: int, nr: int) -> int:
    """What classic BPF returns for `struct seccomp_data` {nr, arch}: the instructions the filter uses."""
    ops = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    data = {0: nr, 4: arch}
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        if code == 0x20:
            acc = data[k]
        elif code == 0x54:
            acc &= k
        elif code == 0x15:
            pc += jt if acc == k else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
        pc += 1


@pytest.mark.parametrize("machine", list(KEYRING_CALLS))
def test_the_filter_refuses_exactly_the_key_ring_calls_of_every_abi(machine: str) -> None:
    program = keyring_filter(machine)
    assert program is not None and len(program) % 8 == 0
    for arch, numbers in KEYRING_CALLS[machine].items():
        for nr in range(0, 460):
            expected = RET_EPERM if nr in numbers else RET_ALLOW
            assert run_filter(program, arch, nr) == expected, (machine, hex(arch), nr)
        if arch == 0xC000003E:  # the x32 ABI: the same numbers with the x32 bit
            assert all(run_filter(program, arch, nr | X32_BIT) == RET_EPERM for nr in numbers)
            assert run_filter(program, arch, 0 | X32_BIT) == RET_ALLOW
    assert (
        run_filter(program, 0x12345678, KEYRING_CALLS[machine][next(iter(KEYRING_CALLS[machine]))][0])
        == RET_ALLOW
    )
    assert keyring_filter("sparc64") is None


def test_a_bwrap_sandbox_runs_under_the_filter_and_cannot_keep_a_key() -> None:
    require_backend("bwrap")
    assert keyring_filter() is not None, "add this machine's key ring system calls to KEYRING_CALLS"
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "nr = {'x86_64': 248, 'aarch64': 217}[os.uname().machine]\n"
        "r = libc.syscall(nr, b'user', b'probe', b'seen', 4, ctypes.c_int(-4))\n"
        "print(r, ctypes.get_errno())\n"
    )
    sandbox = start_sandbox(SandboxConfig(backend="bwrap"), None)
    try:
        status = sandbox.run("grep Seccomp_filters /proc/self/status").output
        added = sandbox.run(["python3", "-c", probe]).output.split()
    finally:
        sandbox.close()
    with open("/proc/self/status") as f:
        host = next(line for line in f if line.startswith("Seccomp_filters"))
    assert int(status.split()[-1]) > int(host.split()[-1]), (status, host)
    assert added == ["-1", "1"], added  # EPERM
