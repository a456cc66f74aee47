"""Control groups for sandboxes that no daemon manages (bubblewrap), on cgroup v1 and v2.

A group holds every process of one sandbox: it caps pids, memory and CPU, counts the times those caps
bit, and lets the reaper kill whatever is left in it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "harness"


def is_v2(root: Path = ROOT) -> bool:
    return (root / "cgroup.controllers").exists()


class Cgroup:
    """One sandbox's control group: a folder per controller on v1, one folder on v2."""

    def __init__(self, path: str, root: Path = ROOT) -> None:
        """`path` is relative to the hierarchy's root, e.g. `harness/RUN--SANDBOX` or `docker/ID`."""
        self.path = path
        if is_v2(root):
            self.dirs = {"all": root / path}
        else:
            self.dirs = {ctrl: root / ctrl / path for ctrl in ("pids", "memory", "cpu")}

    @property
    def v2(self) -> bool:
        return "all" in self.dirs

    def create(self, pids: int, memory_bytes: int, cpus: float) -> None:
        """Makes the group and sets its limits. Raises OSError when cgroups are not writable here."""
        period = 100_000
        quota = int(cpus * period)
        if self.v2:
            parent = self.dirs["all"].parent
            parent.mkdir(exist_ok=True)
            (parent / "cgroup.subtree_control").write_text("+pids +memory +cpu")
            d = self.dirs["all"]
            d.mkdir(exist_ok=True)
            (d / "pids.max").write_text(str(pids))
            (d / "memory.max").write_text(str(memory_bytes))
            (d / "memory.swap.max").write_text("0")
            (d / "cpu.max").write_text(f"{quota} {period}")
            return
        for d in self.dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        (self.dirs["pids"] / "pids.max").write_text(str(pids))
        (self.dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory_bytes))
        swap = self.dirs["memory"] / "memory.memsw.limit_in_bytes"
        if swap.exists():
            swap.write_text(str(memory_bytes))
        (self.dirs["cpu"] / "cpu.cfs_period_us").write_text(str(period))
        (self.dirs["cpu"] / "cpu.cfs_quota_us").write_text(str(quota))

    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs.values()]

    def events(self) -> tuple[int, int]:
        """(forks refused by pids.max, OOM kills) so far."""
        if self.v2:
            d = self.dirs["all"]
            return _field(d / "pids.events", "max"), _field(d / "memory.events", "oom_kill")
        return _field(self.dirs["pids"] / "pids.events", "max"), _field(
            self.dirs["memory"] / "memory.oom_control", "oom_kill"
        )

    def pids(self) -> list[int]:
        found: set[int] = set()
        for f in self.procs_files():
            try:
                found.update(int(x) for x in f.read_text().split())
            except OSError:
                pass
        return sorted(found)

    def destroy(self, timeout: float = 5.0) -> None:
        """Kills every process still in the group, then removes the group's folders."""
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)
        for d in self.dirs.values():
            for _ in range(40):  # the kernel frees a group a moment after its last process is reaped
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def _field(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def run_groups(run_id: str, root: Path = ROOT) -> list[Cgroup]:
    """The groups of one run's sandboxes, for the reaper (named `<run_id>--<sandbox>`)."""
    base = root / PARENT if is_v2(root) else root / "pids" / PARENT
    if not base.is_dir():
        return []
    return [
        Cgroup(f"{PARENT}/{d.name}", root)
        for d in base.iterdir()
        if d.is_dir() and d.name.startswith(f"{run_id}--")
    ]
