"""Hostile sandboxes at scale: 32 Docker (64 bubblewrap) sandboxes at once, four of them attacking.

The attackers run fork bombs, memory bombs, disk fills and output floods without pause, each behind the
harness's `ReplacingSandbox` (a bombed sandbox is replaced, as in a rollout). The others do honest work:
cheap steps (`cat`, `python3 -c`) with a pause between them, as an agent waiting for its model does; then,
still under attack, the sample repository's tests and a real grading of a built-in task. Measured in one
process, in windows taken in turns (so that load from outside weighs on all alike): the fleet alone; the
would-be attackers spinning on the CPU within their caps (the reference: neighbours that use what they are
given and nothing more); under attack. A round of them is taken again, up to 3 in all, while other
processes keep the machine busy, and the quietest is measured:

- the honest steps' median latency under attack over their latency beside spinning neighbours: under
  1.5, on any host; under attack over alone: under 2, where the machine was otherwise quiet;
- the host's available memory, free disk and process count, sampled all along: never down by more than
  the sandboxes' configured limits; no container log grows;
- the kernel's OOM kills: every one inside a sandbox's memory group, none of the harness;
- the honest sandboxes' results and grades: all correct, none replaced.

CPU is the limit that needs sizing: each sandbox is capped at `cpus`, so the attackers together can take
`attackers x cpus` cores. The attackers get `cpus` = a quarter of the machine's cores over the number of
attackers (docs/reliability.md, section 3, has the figures for more); the honest sandboxes keep the
default cap of one core (`HONEST_CPUS`). `-s` prints the figures.

The last tests pin what this test found: a full repository's copy-out took quadratic time, a bubblewrap
sandbox died with the thread that started it, and bombed sandboxes were replaced as fast as they broke.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from envs import cgroups, replacing
from envs.bwrap import BwrapIsolation, start_bwrap
from envs.docker import DockerIsolation, start_docker
from envs.grading import Grade, grade_patch
from envs.remote import ExecutorSandbox
from envs.replacing import ReplacingSandbox
from envs.sandbox import CommandResult, SandboxConfig
from tasks.model import Task
from tasks.suite import load_suite

FLEET = {"docker": 32, "bwrap": 64}
ATTACKERS = 4
"""One of each kind of attack."""
LIMITS = {"memory_mb": 256, "pids_limit": 64, "disk_mb": 64, "tmp_mb": 32, "kill_grace_s": 0.5}
ATTACK_CPU_SHARE = 0.25
"""The share of the machine's cores that all attackers together may take (their `cpus` caps summed)."""
HONEST_CPUS = 1.0
"""The honest sandboxes' cap, the default. Under the attackers' tiny cap (12.5 ms of CPU per 100 ms
period on 2 cores) a step's latency is quantized by the period: a `python3 -c` that needs 13 ms of CPU
waits a whole period more than one that needs 12. On a slower CPU the median then flips between modes
from window to window (147 ms alone, 76 ms beside spinners, 143 ms under attack, in one CI run), which
measures the honest sandbox's own cap, not its neighbours."""
HONEST_STEPS_PER_S = 25.0
"""Steps per second of the whole honest fleet: each honest sandbox pauses between steps accordingly."""
CYCLES = 3
ALONE_S, ATTACK_S, RAMP_S = 3.0, 4.0, 0.5
"""Seconds of each window: alone, beside spinning neighbours, under attack, `CYCLES` times, then alone
once more (the neighbours' windows last ATTACK_S, each after RAMP_S of warm-up)."""
ATTACK_TIMEOUT_S = 2.0
MEMORY_BOMB_CPU_S = 1.5
"""CPU seconds the memory bomb is given to reach its limit: its timeout is this over its sandbox's cap.
Filling 256 MiB took 0.35-0.45 s of CPU (python3's start, the kernel zeroing each page), 2.7-3.1 s under
the attackers' cap of 0.125 cores: over ATTACK_TIMEOUT_S, so on slower CPUs no bomb reached its limit
(0 of 10 on both backends in one CI run, every one timed out first)."""
LATENCY_RATIO_LIMIT = 2.0
"""Under attack over alone, checked on a quiet machine."""
ATTACK_OVER_SPIN_LIMIT = 1.5
"""Under attack over beside spinning neighbours, checked on any machine: outside load weighs on both
windows alike (docs/reliability.md, section 3, has the figures measured on loaded and idle hosts)."""
BUSY_ATTACK_OVER_SPIN_LIMIT = 2.5
"""The same where processes outside the fleet keep the machine busy (over QUIET_SHARE of its cores in
every round). Replacing a bombed sandbox costs the daemon and the runtime CPU that no cap covers, which
spinning neighbours never cause; when outside work leaves the fleet little of the machine, that weighs:
with two busy loops beside the whole CI run (1.74-1.78 of 2 cores outside the fleet) `cat` measured 1.84
on Docker. An attack that escaped its caps measured 5-9 times (docs/reliability.md, section 3)."""
QUIET_SHARE = 0.25
"""The ratio to the fleet alone is checked when processes outside the fleet took less than this share of
the cores while the fleet was alone."""
MEASUREMENTS = 3
"""Rounds of alternating windows at most: another is taken while processes outside the fleet keep the
machine busy (a burst of other work), and the quietest round is the one measured."""
GRADINGS = 1
"""Gradings of a built-in task's gold patch run under attack, each in a fresh sandbox."""
TESTED_SHARE = 16
"""One honest sandbox in this many runs the sample repository's tests under attack."""

STEPS = {
    "cat": (["cat", "README.md"], "# sample\n"),
    "python": (["python3", "-c", "import pkg.calc; print(pkg.calc.add(2, 3))"], "5\n"),
}
ATTACKS = {  # the fork bomb forks until its command times out: it surely meets the process limit
    "fork-bomb": "python3 -c 'import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass'",
    "memory-bomb": "python3 -c 'chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))'",
    "disk-fill": (
        "head -c 1000000000 /dev/zero > /repo/fill; head -c 1000000000 /dev/zero > /tmp/fill;"
        " rm -f /repo/fill /tmp/fill"
    ),
    "output-flood": "cat /dev/urandom",
}
SPIN = "python3 -c 'while True:\n    pass'"
"""What a neighbour that uses its whole CPU cap, and nothing else, runs: the reference for the attacks."""
DISK_FULL = ("No space left on device", "File too large", "File size limit exceeded")
OOM_LINE = re.compile(r"^\[\s*(?P<at>[\d.]+)\] oom-kill:(?P<fields>\S+)")


def attack_outcome(kind: str, result: CommandResult) -> str:
    """`limit`: the attack reached its sandbox's limit and the harness saw it the way it should (a bombed
    sandbox replaced, a full disk, a capped output). `contained`: it ended first (its timeout, or killed
    with its command), under a tight CPU cap. Anything else is `unexpected`."""
    if kind == "fork-bomb" and result.replaced and "process limit" in (result.failure or ""):
        return "limit"
    if kind == "memory-bomb" and result.replaced and "memory" in (result.failure or ""):
        return "limit"
    if kind == "memory-bomb" and result.replaced and "died or was killed" in (result.failure or ""):
        return "limit"  # the OOM killer took the executor first (seen on Docker on a loaded host)
    if kind == "disk-fill" and result.failure is None and any(e in result.output for e in DISK_FULL):
        return "limit"
    if kind == "output-flood" and result.failure is None and result.truncated and result.output_bytes > 1e6:
        return "limit"
    return "contained" if result.failure is None and not result.replaced else "unexpected"


# ---- what the host sees -----------------------------------------------------------------------------


def filesystems(paths: list[Path]) -> dict[str, Path]:
    """One path per filesystem among `paths` (the root, Docker's data, /tmp, the state folder)."""
    found: dict[int, Path] = {}
    for path in paths:
        if path.exists():
            found.setdefault(path.stat().st_dev, path)
    return {str(p): p for p in found.values()}


@dataclass
class HostWatch:
    """Samples the host's available memory, free disk, process count and this process's memory."""

    disks: dict[str, Path]
    memory: list[int] = field(default_factory=list)
    disk: dict[str, list[int]] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        self.memory.append(psutil.virtual_memory().available)
        for name, path in self.disks.items():
            self.disk.setdefault(name, []).append(shutil.disk_usage(path).free)
        self.pids.append(len(psutil.pids()))
        self.rss.append(psutil.Process().memory_info().rss)

    @contextmanager
    def watching(self) -> Iterator[HostWatch]:
        def loop() -> None:
            while not self._stop.wait(0.1):
                self.sample()

        self.sample()
        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
            self.sample()


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def oom_kills_since(since: float) -> list[dict[str, str]] | None:
    """The kernel's OOM kills logged after `since` (seconds of uptime); None when dmesg is not readable."""
    proc = subprocess.run(["dmesg"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    kills = []
    for line in proc.stdout.splitlines():
        match = OOM_LINE.match(line)
        if match and float(match["at"]) >= since:
            kills.append(dict(f.split("=", 1) for f in match["fields"].split(",") if "=" in f))
    return kills


# ---- the fleet ----------------------------------------------------------------------------------------


@dataclass
class Step:
    kind: str
    began: float
    ended: float


@dataclass
class Fleet:
    honest: list[ReplacingSandbox]
    attackers: list[ReplacingSandbox]
    pause_s: float
    attacker_cpus: float
    steps: list[Step] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    """Honest steps whose result was not the expected one."""
    odd: list[str] = field(default_factory=list)
    """Attacks that did not end the way their kind does."""
    attacks: dict[str, list[str]] = field(default_factory=dict)
    attacking: threading.Event = field(default_factory=threading.Event)
    """The would-be attackers run: the attacks, or SPIN while `spinning`."""
    spinning: bool = False
    stop: threading.Event = field(default_factory=threading.Event)
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def honest_loop(self, index: int, sandbox: ReplacingSandbox) -> None:
        kinds = list(STEPS)
        turn = index  # half the fleet starts with each kind
        self.stop.wait(self.pause_s * index / len(self.honest))  # spread the fleet's steps out in time
        while not self.stop.is_set():
            kind = kinds[turn % len(kinds)]
            turn += 1
            argv, expected = STEPS[kind]
            began = time.monotonic()
            result = sandbox.run(argv, timeout=30)
            ended = time.monotonic()
            if result.output != expected or result.exit_code != 0 or result.failure or result.replaced:
                self.wrong.append(f"{kind}: {result.model_dump()}")
            with self.lock:
                self.steps.append(Step(kind, began, ended))
            self.stop.wait(self.pause_s)

    def attack_loop(self, index: int, sandbox: ReplacingSandbox) -> None:
        kind = list(ATTACKS)[index % len(ATTACKS)]
        while not self.stop.is_set():
            if not self.attacking.wait(0.05):
                continue
            spinning = self.spinning
            with self.lock:
                self.in_flight += 1
            try:
                result = sandbox.run(
                    SPIN if spinning else ATTACKS[kind], timeout=self.timeout(kind, spinning)
                )
            finally:
                with self.lock:
                    self.in_flight -= 1
            if spinning:
                if not result.timed_out or result.failure or result.replaced:
                    self.odd.append(f"spin: {result.model_dump(exclude={'output'})}")
                continue
            outcome = attack_outcome(kind, result)
            self.attacks.setdefault(kind, []).append(outcome)
            if outcome == "unexpected":
                self.odd.append(f"{kind}: {result.model_dump(exclude={'output'})} {result.output[-200:]!r}")

    def timeout(self, kind: str, spinning: bool) -> float:
        if kind == "memory-bomb" and not spinning:
            return max(ATTACK_TIMEOUT_S, MEMORY_BOMB_CPU_S / self.attacker_cpus)
        return ATTACK_TIMEOUT_S

    def latencies(self, kind: str, windows: list[tuple[float, float]]) -> list[float]:
        return [
            s.ended - s.began
            for s in self.steps
            if s.kind == kind and any(a <= s.began and s.ended <= b for a, b in windows)
        ]


def start_fleet(backend: str, configs: list[SandboxConfig], source: Path) -> list[ReplacingSandbox]:
    """One sandbox per config, in that order."""
    start: Callable[[SandboxConfig, Path], ExecutorSandbox] = (
        start_docker if backend == "docker" else start_bwrap
    )

    def replacing(config: SandboxConfig) -> ReplacingSandbox:
        return ReplacingSandbox(lambda: start(config, source))

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(replacing, configs))


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the attackers did not stop"
        time.sleep(0.02)


def cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot."""
    now = psutil.cpu_times()
    return float(now.user + now.system + now.nice)


def docker_log_bytes(sandboxes: list[ReplacingSandbox]) -> int:
    """The largest container log on the host: whatever a sandbox could write there lands on the disk."""
    sizes = [0]
    for sandbox in sandboxes:
        isolation = sandbox.inner.isolation
        if isinstance(isolation, DockerIsolation):
            isolation.container.reload()
            log = Path(isolation.container.attrs["LogPath"])
            sizes.append(log.stat().st_size if log.exists() else 0)
    return max(sizes)


# ---- the test -----------------------------------------------------------------------------------------


def fleet_cpu_seconds(fleet: Fleet) -> float:
    """CPU seconds the fleet has used so far: this process (the harness) and its sandboxes, alive ones
    (a replaced attacker's count goes with it)."""
    return sum(psutil.Process().cpu_times()[:2]) + sum(
        sandbox_cpu_seconds(s.inner.isolation) for s in [*fleet.honest, *fleet.attackers]
    )


def sandbox_cpu_seconds(isolation: object) -> float:
    """A container's from its control group; a bubblewrap sandbox's from its processes, each with its
    reaped children (the executor, PID 1, reaps every command)."""
    if isinstance(isolation, BwrapIsolation):
        try:
            top = psutil.Process(isolation.proc.pid)
            tree = [top, *top.children(recursive=True)]
        except psutil.Error:
            return 0.0
        used = 0.0
        for process in tree:
            try:
                used += sum(process.cpu_times()[:4])
            except psutil.Error:
                pass
        return used
    group = isolation.group if isinstance(isolation, DockerIsolation) else None
    if group is None:
        return 0.0
    try:
        if group.v2:
            stat = (group.dirs["all"] / "cpu.stat").read_text().split()
            return int(stat[stat.index("usage_usec") + 1]) / 1e6
        return int((cgroups.ROOT / "cpuacct" / group.path / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return 0.0


KINDS = ("alone", "spin", "attack")
"""The kinds of measuring window."""


@dataclass
class Windows:
    """When the fleet was alone and when it was under attack; the machine's busy cores in each, and the
    cores that processes outside the fleet took (other work on a shared machine)."""

    spans: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: {k: [] for k in KINDS})
    busy: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    outside: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})

    def record(self, kind: str, seconds: float, fleet: Fleet) -> None:
        cpu, ours, began = cpu_seconds(), fleet_cpu_seconds(fleet), time.monotonic()
        time.sleep(seconds)
        took = time.monotonic() - began
        self.spans[kind].append((began, time.monotonic()))
        busy = (cpu_seconds() - cpu) / took
        self.busy[kind].append(busy)
        self.outside[kind].append(max(0.0, busy - (fleet_cpu_seconds(fleet) - ours) / took))


def alternate(fleet: Fleet) -> Windows:
    """Alone, beside spinning neighbours and under attack in turns, starting and ending alone, so that the
    load the rest of the machine carries weighs on all alike."""
    windows = Windows()
    for cycle in range(CYCLES + 1):
        wait_for(lambda: fleet.in_flight == 0, timeout=60)  # a bombed sandbox may still be replaced
        windows.record("alone", ALONE_S, fleet)
        if cycle == CYCLES:
            break
        for kind in ("spin", "attack"):
            fleet.spinning = kind == "spin"
            fleet.attacking.set()
            time.sleep(RAMP_S)
            windows.record(kind, ATTACK_S, fleet)
            fleet.attacking.clear()
            wait_for(lambda: fleet.in_flight == 0, timeout=60)
    return windows


def outside_load(windows: Windows) -> float:
    """Cores that processes outside the fleet took while it was alone."""
    return statistics.mean(windows.outside["alone"])


def measure(fleet: Fleet, cores: int) -> tuple[Windows, list[float]]:
    """The quietest of up to `MEASUREMENTS` rounds of `alternate`, and each round's outside load."""
    rounds = []
    for _ in range(MEASUREMENTS):
        rounds.append(alternate(fleet))
        if outside_load(rounds[-1]) < QUIET_SHARE * cores:
            break
    return min(rounds, key=outside_load), [outside_load(w) for w in rounds]


def grade_under_attack(
    fleet: Fleet, task: Task, config: SandboxConfig
) -> tuple[list[Grade], list[CommandResult]]:
    """Honest work that is not a cheap step, under attack: the sample repository's tests in every
    sixteenth honest sandbox, and gradings of the task's gold patch in fresh sandboxes."""
    fleet.attacking.set()
    try:
        with ThreadPoolExecutor(GRADINGS + len(fleet.honest[::TESTED_SHARE])) as pool:
            grades = [pool.submit(grade_patch, task, task.gold_patch or "", config) for _ in range(GRADINGS)]
            tests = [
                pool.submit(s.run, "python3 -m pytest -q -p no:cacheprovider tests", timeout=120)
                for s in fleet.honest[::TESTED_SHARE]
            ]
            return [g.result() for g in grades], [t.result() for t in tests]
    finally:
        fleet.attacking.clear()
        wait_for(lambda: fleet.in_flight == 0, timeout=60)


def test_honest_sandboxes_are_unharmed_by_hostile_neighbours(backend: str, sample_repo: Path) -> None:
    count = FLEET[backend]
    attackers = ATTACKERS
    cores = psutil.cpu_count() or 1
    cpus = round(ATTACK_CPU_SHARE * cores / attackers, 4)  # the attackers' caps sum to a quarter of the cores
    state_dir = Path(tempfile.mkdtemp(prefix="hs-", dir="/tmp"))  # a socket path has at most 107 bytes
    config = SandboxConfig(backend=backend, cpus=HONEST_CPUS, state_dir=state_dir, **LIMITS)
    attacker = config.model_copy(update={"cpus": cpus})
    task = load_suite("builtin")[0]
    since = uptime() - 1.0
    host = HostWatch(filesystems([Path("/"), Path("/var/lib/docker"), Path("/tmp"), state_dir]))
    began = time.monotonic()

    with host.watching():
        boxes = start_fleet(backend, [attacker] * attackers + [config] * (count - attackers), sample_repo)
        started_s = time.monotonic() - began
        host.sample()
        idle_memory = host.memory[-1]
        fleet = Fleet(
            boxes[attackers:],
            boxes[:attackers],
            pause_s=(count - attackers) / HONEST_STEPS_PER_S,
            attacker_cpus=cpus,
        )
        threads = [
            threading.Thread(target=fleet.honest_loop, args=(i, s)) for i, s in enumerate(fleet.honest)
        ]
        threads += [
            threading.Thread(target=fleet.attack_loop, args=(i, s)) for i, s in enumerate(fleet.attackers)
        ]
        try:
            for thread in threads:
                thread.start()
            windows, loads = measure(fleet, cores)
            measured_s = time.monotonic() - began - started_s
            graded, tested = grade_under_attack(fleet, task, config)
            graded_s = time.monotonic() - began - started_s - measured_s
            log_bytes = docker_log_bytes(boxes)
        finally:
            fleet.stop.set()
            fleet.attacking.clear()
            for thread in threads:
                thread.join()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda s: s.close(), boxes))
    shutil.rmtree(state_dir, ignore_errors=True)
    wall_s = time.monotonic() - began
    kills = oom_kills_since(since)

    quiet = outside_load(windows) < QUIET_SHARE * cores
    medians: dict[str, dict[str, float]] = {}
    for kind in STEPS:
        latencies = {w: fleet.latencies(kind, windows.spans[w]) for w in KINDS}
        assert all(len(v) >= 20 for v in latencies.values()), (
            kind,
            {w: len(v) for w, v in latencies.items()},
        )
        medians[kind] = {w: statistics.median(v) for w, v in latencies.items()}
    limit_memory = (count + GRADINGS) * (config.memory_mb << 20)
    limit_disk = (count + GRADINGS) * ((config.disk_mb + config.tmp_mb) << 20)
    memory_drop = host.memory[0] - min(host.memory)
    attack_drop = idle_memory - min(host.memory)
    disk_drop = {name: free[0] - min(free) for name, free in host.disk.items()}
    pids_peak = max(host.pids) - host.pids[0]
    rss_growth = max(host.rss) - host.rss[0]
    kinds = list(ATTACKS)
    replaced = {
        k: sum(s.replacements for i, s in enumerate(fleet.attackers) if kinds[i % len(kinds)] == k)
        for k in kinds
    }
    print(
        f"\n[{backend}] {count} sandboxes ({attackers} attackers, cpus={cpus} each, the others {config.cpus},"
        f" on {cores} cores), "
        f"started in {started_s:.1f} s, measured for {measured_s:.0f} s, graded under attack in"
        f" {graded_s:.0f} s, whole test {wall_s:.0f} s\n"
        + "".join(
            f"  {kind}: median {m['alone'] * 1e3:.1f} ms alone, {m['spin'] * 1e3:.1f} ms beside spinning"
            f" neighbours, {m['attack'] * 1e3:.1f} ms under attack; attack / alone {m['attack'] / m['alone']:.2f},"
            f" attack / spin {m['attack'] / m['spin']:.2f}\n"
            for kind, m in medians.items()
        )
        + "  machine busy (cores): "
        + ", ".join(f"{w} {statistics.mean(b):.2f}" for w, b in windows.busy.items())
        + f", of which other processes {outside_load(windows):.2f} alone"
        + (
            ""
            if len(loads) == 1
            else f" (the quietest of {len(loads)} rounds: {', '.join(f'{x:.2f}' for x in loads)})"
        )
        + ("" if quiet else " (a shared machine: attack / alone not checked)")
        + "\n  attacks (reached the limit / run): "
        + ", ".join(
            f"{k} {v.count('limit')}/{len(v)} (replaced {replaced[k]})" for k, v in fleet.attacks.items()
        )
        + f"\n  memory: available fell {memory_drop >> 20} MiB at most ({attack_drop >> 20} MiB below the idle"
        f" fleet), limits sum to {limit_memory >> 20} MiB; harness RSS grew {rss_growth >> 20} MiB\n"
        f"  disk: free fell {', '.join(f'{n} {d >> 20} MiB' for n, d in disk_drop.items())}, limits sum to"
        f" {limit_disk >> 20} MiB; largest container log {log_bytes} bytes\n"
        f"  host processes: +{pids_peak} at the peak, pids limits sum to {count * config.pids_limit}\n"
        f"  OOM kills: {'dmesg unreadable' if kills is None else len(kills)}"
        f" ({sorted({k.get('constraint', '?') for k in kills or []})})"
        + "".join(f"\n  unexpected: {line}" for line in fleet.odd)
    )

    assert not fleet.wrong, fleet.wrong[:3]
    assert all(s.replacements == 0 for s in fleet.honest)
    assert all(g.infra_error is None and g.correct == 1.0 for g in graded), [g.model_dump() for g in graded]
    assert all(t.exit_code == 0 and "1 passed" in t.output for t in tested), [t.output for t in tested]
    assert fleet.odd == []
    for kind in ATTACKS:
        assert "limit" in fleet.attacks.get(kind, []), (
            f"no {kind} reached its limit: {fleet.attacks.get(kind)}"
        )
    # Spinning neighbours are the reference: they take what their caps allow, as the attackers may, so
    # load from outside the fleet weighs on both windows alike; an attack that costs the host more than its
    # cap (kernel work, output, memory reclaim) shows as a ratio above 1. The ratio to the fleet alone also
    # counts the caps' own share of a machine that other work keeps busy, so it is checked on a quiet one.
    loads_text = ", ".join(f"{x:.2f}" for x in loads)
    spin_limit = ATTACK_OVER_SPIN_LIMIT if quiet else BUSY_ATTACK_OVER_SPIN_LIMIT
    for kind, m in medians.items():
        assert m["attack"] / m["spin"] < spin_limit, (
            f"{kind}: {m['attack'] * 1e3:.1f} ms under attack, {m['spin'] * 1e3:.1f} ms beside spinning"
            f" neighbours; processes outside the fleet took {loads_text} of {cores} cores"
        )
        if quiet:
            assert m["attack"] / m["alone"] < LATENCY_RATIO_LIMIT, (
                f"{kind}: {m['attack'] * 1e3:.1f} ms under attack, {m['alone'] * 1e3:.1f} ms alone; processes"
                f" outside the fleet took {loads_text} of {cores} cores in the measured rounds"
            )
    assert memory_drop <= limit_memory
    assert all(d <= limit_disk for d in disk_drop.values()), disk_drop
    assert log_bytes < 64 << 10
    assert pids_peak <= count * (config.pids_limit + 8)
    assert rss_growth < 256 << 20
    if kills is not None:
        assert all(k.get("constraint") == "CONSTRAINT_MEMCG" for k in kills), kills
        assert all(k.get("task_memcg", "").startswith(("/docker/", "/harness/")) for k in kills), kills
        assert all(k.get("pid") != str(os.getpid()) for k in kills), kills


# ---- what the scale test found --------------------------------------------------------------------


def test_a_repository_filled_to_its_limit_is_collected_in_linear_time(
    backend: str, sample_repo: Path
) -> None:
    """A disk fill is followed by the end of the episode: the harness copies the whole repository out to
    diff it. The executor's answer is one line of 4/3 the repository's size; reading it used to cost
    quadratic time (96 s for 200 MB, holding the GIL of every rollout thread)."""
    state_dir = Path(tempfile.mkdtemp(prefix="hs-", dir="/tmp"))
    config = SandboxConfig(backend=backend, state_dir=state_dir, disk_mb=256, memory_mb=2048)
    sandbox = (start_docker if backend == "docker" else start_bwrap)(config, sample_repo)
    try:
        filled = sandbox.run("head -c 200000000 /dev/urandom > /repo/blob && echo filled", timeout=120)
        assert filled.output == "filled\n", filled.output
        rss = psutil.Process().memory_info().rss
        began = time.monotonic()
        with tempfile.TemporaryDirectory(dir=state_dir) as out:
            sandbox.copy_out("/repo", Path(out) / "repo")
            copied = (Path(out) / "repo" / "blob").stat().st_size
        took = time.monotonic() - began
    finally:
        sandbox.close()
        shutil.rmtree(state_dir, ignore_errors=True)
    print(f"\n[{backend}] 200 MB repository copied out in {took:.1f} s")
    assert copied == 200_000_000
    assert took < 20
    assert psutil.Process().memory_info().rss - rss < 1 << 30


def test_a_sandbox_outlives_the_thread_that_started_it(backend: str, sample_repo: Path) -> None:
    """bwrap's --die-with-parent follows the starting *thread*: a fleet started from a thread pool died
    as soon as the pool's threads ended."""
    config = SandboxConfig(backend=backend)
    start: Callable[[SandboxConfig, Path], ExecutorSandbox] = (
        start_docker if backend == "docker" else start_bwrap
    )
    with ThreadPoolExecutor(2) as pool:
        sandboxes = list(pool.map(lambda _: start(config, sample_repo), range(2)))
    try:
        time.sleep(0.5)
        assert [s.run("echo alive").output for s in sandboxes] == ["alive\n", "alive\n"]
    finally:
        for sandbox in sandboxes:
            sandbox.close()


def test_replacements_back_off_for_an_agent_that_keeps_breaking_its_sandbox(
    backend: str, sample_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start costs the host CPU outside every sandbox's limits (4 bombing sandboxes replaced as fast
    as they broke made their honest neighbours' steps 8 times slower on 2 cores): from the second
    replacement on, the bombing agent waits, in its own episode's time."""
    waits: list[float] = []
    monkeypatch.setattr(replacing, "time", SimpleNamespace(sleep=waits.append))
    config = SandboxConfig(backend=backend, pids_limit=64, kill_grace_s=0.5)
    start = start_docker if backend == "docker" else start_bwrap
    sandbox = ReplacingSandbox(lambda: start(config, sample_repo))
    try:
        for _ in range(4):
            assert sandbox.run(ATTACKS["fork-bomb"], timeout=2).replaced
        sandbox.reset()  # the next episode starts with a clean slate
        assert sandbox.run(ATTACKS["fork-bomb"], timeout=2).replaced
    finally:
        sandbox.close()
    assert waits == [replacing.BACKOFF_S, 2 * replacing.BACKOFF_S, 4 * replacing.BACKOFF_S]
