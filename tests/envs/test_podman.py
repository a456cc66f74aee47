"""What the podman backend decides without starting a container: where it refuses to run, the seccomp profile
it gives every container, and the limits it asks podman for. Its sandboxes are tested with the others'
(tests/envs/test_sandbox.py, test_grading.py, tests/faults/test_escapes.py)."""

from __future__ import annotations

import errno
import json
import resource
import subprocess

import pytest

from envs import podman

DEFAULT = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": errno.ENOSYS,
    "syscalls": [
        {"names": ["read", "clone", "clone3", "unshare", "keyctl", "mount"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["setns"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
        {"names": ["userfaultfd"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
    ],
}
"""A default profile shaped as podman's: an allow list, rules for capabilities, refusals."""


def info(rootless: bool, controllers: list[str] | None, version: str = "v1") -> str:
    host = {"security": {"rootless": rootless}, "cgroupControllers": controllers, "cgroupVersion": version}
    return json.dumps({"host": host})


@pytest.mark.parametrize(
    ("rootless", "controllers", "refused"),
    [
        (False, [], False),  # rootful: podman makes the groups itself
        (True, None, True),  # rootless on cgroup v1: no limit would hold
        (True, ["cpu", "pids"], True),  # cgroup v2 with the memory controller not delegated
        (True, ["cpu", "io", "memory", "pids"], False),
    ],
)
def test_rootless_podman_is_refused_where_it_cannot_enforce_the_limits(
    monkeypatch: pytest.MonkeyPatch, rootless: bool, controllers: list[str] | None, refused: bool
) -> None:
    answer = info(rootless, controllers)
    monkeypatch.setattr(podman, "podman_path", lambda: "/usr/bin/podman")
    monkeypatch.setattr(podman, "default_profile", lambda: DEFAULT)
    monkeypatch.setattr(
        podman, "podman", lambda args, timeout: subprocess.CompletedProcess(args, 0, answer, "")
    )
    why = podman.podman_unavailable.__wrapped__()
    assert (why is not None) == refused, why
    if refused:
        assert why is not None and why.startswith("rootless podman cannot enforce the sandbox's pids, memory")


def test_the_profile_refuses_new_namespaces_mounts_and_key_rings_and_keeps_the_rest() -> None:
    profile = podman.closed_profile(DEFAULT)
    rules = profile["syscalls"]
    allowed = {
        name
        for rule in rules
        if rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("args")
        for name in rule["names"]
    }
    refused = {name for rule in rules if rule.get("errnoRet") == errno.EPERM for name in rule["names"]}
    clone = [rule for rule in rules if rule["names"] == ["clone"]]
    clone3 = [rule for rule in rules if rule["names"] == ["clone3"]]

    assert allowed == {"read"}
    assert {"unshare", "keyctl", "mount", "setns", "userfaultfd"} <= refused
    assert clone == [{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [
        {"index": 0, "value": podman.NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}
    ]}]  # fmt: skip
    assert clone3 == [{"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS}]
    assert profile["defaultAction"] == DEFAULT["defaultAction"]


def test_the_limits_asked_for_are_never_above_the_harness_own() -> None:
    """A root without CAP_SYS_RESOURCE cannot raise a limit: podman's defaults (1048576) failed to start."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    options = podman.process_limits(4096)
    asked = dict(option.split("=") for option in options[1::2])
    assert asked["nofile"] == f"{min(4096, hard)}:{min(4096, hard)}"
    above = dict(option.split("=") for option in podman.process_limits(1 << 30)[1::2])
    assert above["nofile"] == f"{hard}:{hard}" or hard == resource.RLIM_INFINITY
    nproc = int(asked["nproc"].split(":")[0])
    own = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    assert nproc <= podman.NPROC_CEILING and (own == resource.RLIM_INFINITY or nproc <= own)
