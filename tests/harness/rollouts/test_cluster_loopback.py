"""A local Ray cluster (`cluster.address=local`) keeps its traffic on loopback: while a rollout runs on two
Ray workers, every socket that this process or any process it started listens on is bound to 127.0.0.0/8.
"""

from __future__ import annotations

import ipaddress
import threading
from pathlib import Path

import psutil
import pytest

from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import rollout
from tests.conftest import require_backend


def listening(root: psutil.Process) -> set[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket and bound UDP socket of `root`'s tree."""
    found: set[tuple[str, int, str]] = set()
    for process in [root, *root.children(recursive=True)]:
        try:
            name = process.name()
            connections = process.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # ended between the listing and the look
            continue
        for c in connections:
            if c.status == psutil.CONN_LISTEN or (c.status == psutil.CONN_NONE and c.laddr):
                found.add((c.laddr.ip, c.laddr.port, name))
    return found


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


@pytest.mark.timeout(300)
def test_every_socket_of_a_local_ray_run_listens_on_loopback(tmp_path: Path) -> None:
    require_backend("bwrap")
    config = RolloutConfig.model_validate(
        {
            "suite": "demo", "tasks": ["demo-add", "demo-area"], "policy": "scripted:gold", "group_size": 2,
            "out": str(tmp_path / "run"), "sandbox": {"backend": "bwrap"},
            "cluster": {"address": "local", "workers": 2},
        }
    )  # fmt: skip
    seen: set[tuple[str, int, str]] = set()
    done = threading.Event()

    def watch() -> None:
        me = psutil.Process()
        while not done.wait(0.2):
            seen.update(listening(me))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        summary = rollout(config)
    finally:
        done.set()
        watcher.join()
    assert summary.trajectories == 4 and summary.statuses.get("ok") == 4, summary
    names = {name for _, _, name in seen}
    assert {"gcs_server", "raylet"} <= names, seen  # Ray's own servers were seen: the check is not empty
    outside = sorted(s for s in seen if not is_loopback(s[0]))
    assert not outside, f"sockets off loopback: {outside}"
