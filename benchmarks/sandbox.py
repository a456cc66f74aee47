"""Sandbox latency on both backends, side by side: start, reset, step overhead, and 32 Docker sandboxes.

    .venv/bin/python benchmarks/sandbox.py [--quick] [--json PATH]

Every sandbox starts from the same generated repository of 1,000 small files; resets are measured on one
of 10,000 files too (a real repository's size). Backends alternate within each measurement, so background
load on the host weighs on both alike. The issues' targets are printed as PASS / FAIL next to the numbers,
and the exit status is 1 when one fails.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import psutil
from rich.console import Console
from rich.table import Table

from envs import cgroups
from envs.bwrap import BwrapIsolation, bwrap_path, start_bwrap
from envs.docker import DockerIsolation, client, daemon_answers, start_docker
from envs.lifecycle import LABEL, current_owner, install_signal_handlers
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig, SandboxError

Backend = Literal["docker", "bwrap"]
BACKENDS: tuple[Backend, ...] = ("docker", "bwrap")
REPO_FILES = 1000
LARGE_REPO_FILES = 10_000
"""A real repository's size (5,000-50,000 files): resets are measured on it too."""
CONCURRENT = 32
STEP_TARGET_MS = 5.0
RESET_TARGET_MS: dict[Backend, float] = {"docker": 500.0, "bwrap": 100.0}
LARGE_RESET_TARGET_MS: dict[Backend, float] = {"docker": 100.0, "bwrap": 100.0}
"""Issue 16: a reset puts back only what changed, so 10,000 files cost little more than 1,000 (Docker's
150 ms then; issue 36: 100 ms on both, benchmarks/reset.py measures it against the executor before)."""
FINGERPRINT = "find . -type f -print0 | sort -z | xargs -0 cksum | cksum"
"""One checksum of every file's path and content: what a reset must give back."""
WORK = ["python3", "-c", "print(sum(i * i for i in range(100000)))"]
WORK_OUTPUT = "333328333350000"

console = Console(width=max(Console().width, 110))


@dataclass(frozen=True)
class Plan:
    """How many timed samples each measurement takes (warm-up samples come on top)."""

    starts: int
    resets: int
    steps: int
    rounds: int
    """Commands per sandbox while all 32 run at once."""


FULL = Plan(starts=10, resets=30, steps=200, rounds=5)
QUICK = Plan(starts=3, resets=8, steps=40, rounds=2)


@dataclass
class Stat:
    n: int
    p50_ms: float
    p95_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Stat:
        if len(seconds) < 2:  # everything failed: the targets say so, the table shows nan
            return cls(n=len(seconds), p50_ms=math.nan, p95_ms=math.nan)
        q = statistics.quantiles([s * 1e3 for s in seconds], n=100, method="inclusive")
        return cls(n=len(seconds), p50_ms=q[49], p95_ms=q[94])

    def cell(self) -> str:
        return f"{_ms(self.p50_ms)} / {_ms(self.p95_ms)}"


@dataclass
class BackendResult:
    start: Stat
    close: Stat
    reset: Stat
    reset_mismatches: int
    """Resets after which the repository differed from its start state."""
    large_reset: Stat
    """Resets of the repository of LARGE_REPO_FILES files."""
    large_reset_mismatches: int
    step: Stat
    """`true` through our executor."""


@dataclass
class ConcurrencyResult:
    sandboxes: int
    start_wall_s: float
    failures: int
    """Sandboxes that did not start, plus commands that failed or printed the wrong answer."""
    work_step: Stat
    true_step: Stat
    close_wall_s: float
    leftovers: int
    """Containers with this run's label still there after closing."""


@dataclass
class Target:
    name: str
    measured: str
    limit: str
    passed: bool


@dataclass
class Results:
    date: str
    machine: dict[str, str]
    plan: Plan
    repo_files: int
    repo_bytes: int
    backends: dict[Backend, BackendResult]
    docker_exec_sdk: Stat
    docker_exec_cli: Stat
    concurrency: ConcurrencyResult
    targets: list[Target]


# ---- the repository --------------------------------------------------------------------------------


def make_repo(root: Path, files: int = REPO_FILES) -> int:
    """Writes `files` small Python files in 8 x 5 x 5 folders three levels deep; returns the bytes."""
    rng = random.Random(0)
    total = 0
    for i in range(files):
        folder = root / f"pkg{i % 8}" / f"sub{i // 8 % 5}" / f"leaf{i // 40 % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        body = "".join(
            f"def f{j}(x):\n    return x * {rng.randint(0, 999)}\n" for j in range(rng.randint(3, 14))
        )
        (folder / f"mod{i}.py").write_text(body)
        total += len(body)
    # The Docker sandbox reads the bind-mounted repository as uid 1000; mkdtemp makes it 0700.
    for path in [root, *root.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    return total


def mutate_script(files: list[str], rng: random.Random) -> str:
    """A shell line that edits, deletes and creates files, as an agent's episode would."""
    picked = rng.sample(files, 20)
    edits = [f"echo '# edited' >> {f}" for f in picked[:10]]
    deletes = [f"rm {f}" for f in picked[10:]]
    creates = ["mkdir -p new/deep/dir", *(f"echo 'x = {i}' > new/deep/dir/n{i}.py" for i in range(10))]
    return " && ".join([*edits, *deletes, *creates, "rm -r pkg7/sub4"])


# ---- measurements ----------------------------------------------------------------------------------


def start(backend: Backend, repo: Path) -> ExecutorSandbox:
    config = SandboxConfig(backend=backend)
    return start_docker(config, repo) if backend == "docker" else start_bwrap(config, repo)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def measure_starts(repo: Path, n: int) -> dict[Backend, tuple[list[float], list[float]]]:
    """(start times, close times) per backend; the first start of each only warms caches."""
    out: dict[Backend, tuple[list[float], list[float]]] = {b: ([], []) for b in BACKENDS}
    for i in range(n + 1):
        for backend in BACKENDS:
            start_s, sandbox = timed(functools.partial(start, backend, repo))
            close_s, _ = timed(sandbox.close)
            if i > 0:
                out[backend][0].append(start_s)
                out[backend][1].append(close_s)
    return out


def measure_resets(
    sandboxes: dict[Backend, ExecutorSandbox], repo: Path, n: int
) -> dict[Backend, tuple[list[float], int]]:
    """(reset times, resets that did not restore the repository) per backend."""
    files = sorted(str(p.relative_to(repo)) for p in repo.rglob("*.py"))
    rng = random.Random(1)
    expected = {b: sb.run(["sh", "-c", FINGERPRINT]).output for b, sb in sandboxes.items()}
    out: dict[Backend, tuple[list[float], int]] = {b: ([], 0) for b in BACKENDS}
    for i in range(n + 1):
        script = mutate_script(files, rng)
        for backend, sandbox in sandboxes.items():
            changed = sandbox.run(["sh", "-c", script])
            if not changed.ok:
                raise SystemExit(f"{backend}: changing the repository failed: {changed.output}")
            reset_s, _ = timed(sandbox.reset)
            restored = sandbox.run(["sh", "-c", FINGERPRINT]).output == expected[backend]
            if i > 0:
                times, mismatches = out[backend]
                out[backend] = ([*times, reset_s], mismatches + (not restored))
    return out


def measure_large_resets(n: int) -> dict[Backend, tuple[list[float], int]]:
    """`measure_resets` on a repository of LARGE_REPO_FILES files, in sandboxes of its own."""
    with tempfile.TemporaryDirectory(prefix="bench-large-repo-") as tmp:
        repo = Path(tmp)
        make_repo(repo, LARGE_REPO_FILES)
        console.print(f"[dim]{n}+1 resets per backend of {LARGE_REPO_FILES:,} files")
        sandboxes = {b: start(b, repo) for b in BACKENDS}
        try:
            return measure_resets(sandboxes, repo, n)
        finally:
            for sandbox in sandboxes.values():
                sandbox.close()


def measure_steps(sandboxes: dict[Backend, ExecutorSandbox], n: int) -> dict[str, list[float]]:
    """`true` through our executor on each backend and through `docker exec`, interleaved."""
    isolation = sandboxes["docker"].isolation
    if not isinstance(isolation, DockerIsolation):
        raise TypeError("the docker sandbox has no container")
    container = isolation.container
    probes: dict[str, Callable[[], bool]] = {
        "docker": lambda: sandboxes["docker"].run(["true"]).ok,
        "bwrap": lambda: sandboxes["bwrap"].run(["true"]).ok,
        "sdk": lambda: container.exec_run(["true"]).exit_code == 0,
        "cli": lambda: (
            subprocess.run(["docker", "exec", container.id, "true"], capture_output=True).returncode == 0
        ),
    }
    names = list(probes)
    out: dict[str, list[float]] = {name: [] for name in names}
    warmup = 10
    for i in range(warmup + n):
        for name in names[i % 4 :] + names[: i % 4]:  # rotate, so no probe always follows the same one
            step_s, ok = timed(probes[name])
            if not ok:
                raise SystemExit(f"`true` failed through {name}")
            if i >= warmup:
                out[name].append(step_s)
    return out


def run_checked(sandbox: ExecutorSandbox, cmd: list[str], expect: str) -> float | None:
    """The command's time, or None when it failed or printed something else."""
    try:
        step_s, result = timed(lambda: sandbox.run(cmd))
    except SandboxError as e:
        console.print(f"[red]{sandbox.id}: {e}")
        return None
    return step_s if result.ok and result.output.strip() == expect else None


def measure_concurrency(repo: Path, rounds: int, run_id: str) -> ConcurrencyResult:
    """CONCURRENT Docker sandboxes started at once, all running commands at once, then closed."""
    config = SandboxConfig(backend="docker")
    sandboxes: list[ExecutorSandbox] = []
    failures = 0
    work: list[float] = []
    trues: list[float] = []
    with ThreadPoolExecutor(CONCURRENT) as pool:
        t0 = time.perf_counter()
        futures = [pool.submit(start_docker, config, repo) for _ in range(CONCURRENT)]
        for future in futures:
            try:
                sandboxes.append(future.result())
            except SandboxError as e:
                console.print(f"[red]start failed: {e}")
                failures += 1
        start_wall_s = time.perf_counter() - t0
        for _ in range(rounds):
            for cmd, expect, times in ((WORK, WORK_OUTPUT, work), (["true"], "", trues)):
                for step_s in pool.map(lambda sb, c=cmd, e=expect: run_checked(sb, c, e), sandboxes):
                    if step_s is None:
                        failures += 1
                    else:
                        times.append(step_s)
        close_wall_s, _ = timed(lambda: list(pool.map(lambda sb: sb.close(), sandboxes)))
    left = client().containers.list(all=True, filters={"label": f"{LABEL}={run_id}"})
    return ConcurrencyResult(
        sandboxes=CONCURRENT,
        start_wall_s=start_wall_s,
        failures=failures,
        work_step=Stat.of(work),
        true_step=Stat.of(trues),
        close_wall_s=close_wall_s,
        leftovers=len(left),
    )


# ---- report ----------------------------------------------------------------------------------------


def machine(bwrap_sandbox: ExecutorSandbox) -> dict[str, str]:
    info = client().info()
    isolation = bwrap_sandbox.isolation
    limits = "cgroup" if isinstance(isolation, BwrapIsolation) and isolation.group is not None else "rlimits"
    bwrap = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "cpus": str(os.cpu_count()),
        "memory": f"{psutil.virtual_memory().total / 2**30:.0f} GiB",
        "kernel": platform.release(),
        "cgroup": "v2" if cgroups.is_v2() else "v1",
        "docker": f"{info['ServerVersion']} {info['Driver']}",
        "bwrap": f"{bwrap}, limits from {limits}",
        "python": platform.python_version(),
    }


def check_targets(backends: dict[Backend, BackendResult], conc: ConcurrencyResult) -> list[Target]:
    targets = []
    for backend, r in backends.items():
        targets.append(
            Target(
                f"step `true` p50 ({backend})",
                f"{_ms(r.step.p50_ms)} ms",
                f"≤ {STEP_TARGET_MS:g} ms",
                r.step.p50_ms <= STEP_TARGET_MS,
            )
        )
    for backend, r in backends.items():
        for files, stat, mismatches, limit in (
            (REPO_FILES, r.reset, r.reset_mismatches, RESET_TARGET_MS[backend]),
            (LARGE_REPO_FILES, r.large_reset, r.large_reset_mismatches, LARGE_RESET_TARGET_MS[backend]),
        ):
            targets.append(
                Target(
                    f"reset p50 ({backend}, {files:,} files), repository restored",
                    f"{_ms(stat.p50_ms)} ms, {mismatches} unrestored",
                    f"≤ {limit:g} ms, 0 unrestored",
                    stat.p50_ms <= limit and mismatches == 0,
                )
            )
    targets.append(
        Target(
            f"{CONCURRENT} docker sandboxes at once",
            f"{conc.failures} failures, {conc.leftovers} left over",
            "0 failures, 0 left over",
            conc.failures == 0 and conc.leftovers == 0,
        )
    )
    return targets


def print_report(res: Results) -> None:
    console.print(
        f"\n[bold]Sandbox benchmark[/] {res.date}, repository of {res.repo_files:,} files, {res.repo_bytes / 1e3:.0f} kB"
    )
    console.print(", ".join(f"{k} {v}" for k, v in res.machine.items()))
    docker, bwrap = res.backends["docker"], res.backends["bwrap"]
    table = Table(title="Latency in ms, p50 / p95")
    for col in ("", "docker", "bwrap", "n"):
        table.add_column(col, justify="left" if not col else "right")
    table.add_row("start", docker.start.cell(), bwrap.start.cell(), str(docker.start.n))
    table.add_row("close", docker.close.cell(), bwrap.close.cell(), str(docker.close.n))
    table.add_row("reset after edits", docker.reset.cell(), bwrap.reset.cell(), str(docker.reset.n))
    table.add_row(
        f"reset after edits, {LARGE_REPO_FILES:,} files",
        docker.large_reset.cell(),
        bwrap.large_reset.cell(),
        str(docker.large_reset.n),
    )
    table.add_row("step `true`, our executor", docker.step.cell(), bwrap.step.cell(), str(docker.step.n))
    for label, stat in (("SDK exec_run", res.docker_exec_sdk), ("`docker exec` CLI", res.docker_exec_cli)):
        ratio = stat.p50_ms / docker.step.p50_ms
        table.add_row(f"step `true`, {label}", f"{stat.cell()} ({ratio:.0f}x ours)", "-", str(stat.n))
    console.print(table)

    conc = res.concurrency
    table = Table(title=f"{conc.sandboxes} Docker sandboxes at once")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("start all (wall)", f"{conc.start_wall_s:.1f} s")
    table.add_row("failures", str(conc.failures))
    table.add_row("step python sum, p50 / p95", f"{conc.work_step.cell()} ms (n={conc.work_step.n})")
    table.add_row("step `true`, p50 / p95", f"{conc.true_step.cell()} ms (n={conc.true_step.n})")
    table.add_row("close all (wall)", f"{conc.close_wall_s:.1f} s")
    table.add_row("containers left", str(conc.leftovers))
    console.print(table)

    table = Table(title="Targets")
    for col in ("target", "measured", "limit", ""):
        table.add_column(col)
    for t in res.targets:
        table.add_row(t.name, t.measured, t.limit, "[green]PASS" if t.passed else "[red]FAIL")
    console.print(table)


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples: a smoke run of about a minute")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    if not daemon_answers() or bwrap_path() is None:
        console.print("[red]both backends are needed: a Docker daemon that answers, and bwrap")
        return 2
    install_signal_handlers()
    defaults = SandboxConfig()
    owner = current_owner(defaults.state_dir, defaults.expiry_s)

    with tempfile.TemporaryDirectory(prefix="bench-repo-") as tmp:
        repo = Path(tmp)
        repo_bytes = make_repo(repo)
        console.print(f"[dim]starting {plan.starts}+1 sandboxes per backend")
        starts = measure_starts(repo, plan.starts)
        sandboxes = {b: start(b, repo) for b in BACKENDS}
        try:
            console.print(f"[dim]{plan.resets}+1 resets per backend")
            resets = measure_resets(sandboxes, repo, plan.resets)
            console.print(f"[dim]{plan.steps}+10 steps through each of four paths")
            steps = measure_steps(sandboxes, plan.steps)
            host = machine(sandboxes["bwrap"])
        finally:
            for sandbox in sandboxes.values():
                sandbox.close()
        large_resets = measure_large_resets(plan.resets)
        console.print(f"[dim]{CONCURRENT} docker sandboxes at once, {plan.rounds} rounds of commands")
        conc = measure_concurrency(repo, plan.rounds, owner.run_id)

    backends = {
        b: BackendResult(
            start=Stat.of(starts[b][0]),
            close=Stat.of(starts[b][1]),
            reset=Stat.of(resets[b][0]),
            reset_mismatches=resets[b][1],
            large_reset=Stat.of(large_resets[b][0]),
            large_reset_mismatches=large_resets[b][1],
            step=Stat.of(steps[b]),
        )
        for b in BACKENDS
    }
    results = Results(
        date=datetime.now().isoformat(timespec="seconds"),
        machine=host,
        plan=plan,
        repo_files=REPO_FILES,
        repo_bytes=repo_bytes,
        backends=backends,
        docker_exec_sdk=Stat.of(steps["sdk"]),
        docker_exec_cli=Stat.of(steps["cli"]),
        concurrency=conc,
        targets=check_targets(backends, conc),
    )
    print_report(results)
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(results), indent=2) + "\n")
    return 0 if all(t.passed for t in results.targets) else 1


if __name__ == "__main__":
    sys.exit(main())
