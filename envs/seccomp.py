"""The seccomp filter of bubblewrap sandboxes: the kernel's key rings refused, as Docker's default profile
refuses them.

A key ring outlives the process that filled it (a session or user key ring, or a key any later process of
the same user can search for), so that one grading child could leave what it saw for the next one: the
line-by-line majority of the copies it saw would name the real test among its canaries (issue 32). With
`add_key`, `request_key` and `keyctl` failing with EPERM, nothing is kept there.

The filter is classic BPF (`struct sock_filter`, linux/filter.h), made here for the host's architecture
and its compat ABIs (an i386 process on x86_64, x32), and handed to `bwrap --seccomp FD`.
"""

from __future__ import annotations

import errno
import platform
import struct

LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
RET_K = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
RET_EPERM = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO
NR, ARCH = 0, 4
"""Offsets in `struct seccomp_data`."""
X32_BIT = 0x40000000
KEYRING_CALLS: dict[str, dict[int, list[int]]] = {
    "x86_64": {0xC000003E: [248, 249, 250], 0x40000003: [286, 287, 288]},  # x86_64 (and x32), i386
    "aarch64": {0xC00000B7: [217, 218, 219]},
}
"""Machine -> AUDIT_ARCH_* -> the numbers of add_key, request_key and keyctl in that ABI."""


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def keyring_filter(machine: str | None = None) -> bytes | None:
    """The compiled filter for `machine` (the host's by default); None where its numbers are not known."""
    arches = KEYRING_CALLS.get(machine or platform.machine())
    if arches is None:
        return None
    program: list[bytes] = []
    for arch, numbers in arches.items():
        body = [_op(LD_ABS_W, NR)]
        if arch == 0xC000003E:  # x32 calls are the same numbers with X32_BIT set
            body.append(_op(AND_K, 0xFFFFFFFF & ~X32_BIT))
        for index, number in enumerate(numbers):
            left = len(numbers) - index - 1  # comparisons after this one, then the allow
            body.append(_op(JEQ_K, number, jt=left + 1))  # to the refusal just past the allow
        body += [_op(RET_K, RET_ALLOW), _op(RET_K, RET_EPERM)]
        program += [_op(LD_ABS_W, ARCH), _op(JEQ_K, arch, jf=len(body))]  # another ABI: the next block
        program += body
    program.append(_op(RET_K, RET_ALLOW))
    return b"".join(program)
