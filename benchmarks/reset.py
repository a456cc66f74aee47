"""Reset of a 10,000-file repository: this tree's executor against an earlier one, side by side in one run.

    .venv/bin/python benchmarks/reset.py [--before HEAD] [--rounds 30] [--json PATH]

The earlier executor (`git show REV:envs/executor.py`) is written to a file of its own, and each backend
starts one sandbox running it beside one running this tree's `envs/executor.py`, all four from the same
generated repository (benchmarks/sandbox.py's, 10,000 files). Each round makes the same edits, deletions
and creations in all four (an agent's episode: 10 files edited, 10 deleted, 10 created in new folders, a
folder of 250 files removed) and times their resets, the order rotated every round, so load from outside
weighs on all alike; after every reset the repository is checked against its start. Printed: per backend
and executor the p50 and the spread (p10-p90), the ratio of the p50s, and the host's load averages
(`os.getloadavg()`) at the start and the end. The goal (issue 36): this tree's p50 at most 100 ms on each
backend, with no reset that left the repository different; the exit status is 1 when it is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sandbox import (  # benchmarks/sandbox.py
    BACKENDS,
    FINGERPRINT,
    LARGE_REPO_FILES,
    Backend,
    make_repo,
    mutate_script,
)

import envs.bwrap
import envs.docker
from envs.bwrap import bwrap_path, start_bwrap
from envs.docker import daemon_answers, start_docker
from envs.lifecycle import install_signal_handlers
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig

REPO = Path(__file__).resolve().parents[1]
GOAL_MS = 100.0
EXECUTORS = ("before", "now")

console = Console(width=max(Console().width, 110))


@dataclass
class Spread:
    n: int
    p50_ms: float
    p10_ms: float
    p90_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Spread:
        deciles = statistics.quantiles([s * 1e3 for s in seconds], n=10, method="inclusive")
        return cls(n=len(seconds), p50_ms=deciles[4], p10_ms=deciles[0], p90_ms=deciles[8])


@dataclass
class BackendResult:
    before: Spread
    now: Spread
    unrestored_before: int
    """Resets after which the repository differed from its start."""
    unrestored_now: int

    @property
    def ratio(self) -> float:
        return self.before.p50_ms / self.now.p50_ms


@dataclass
class Results:
    date: str
    before: str
    rounds: int
    files: int
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]
    backends: dict[Backend, BackendResult]


@contextmanager
def executor_file(path: Path) -> Iterator[None]:
    """Sandboxes started inside run the executor at `path`: both backends read the file at each start."""
    saved = envs.bwrap.EXECUTOR, envs.docker.EXECUTOR
    envs.bwrap.EXECUTOR = envs.docker.EXECUTOR = path
    try:
        yield
    finally:
        envs.bwrap.EXECUTOR, envs.docker.EXECUTOR = saved


def start_all(repo: Path, before: Path) -> dict[tuple[Backend, str], ExecutorSandbox]:
    """A sandbox per backend and executor, keyed by (backend, executor)."""
    sandboxes = {}
    for executor, path in (("before", before), ("now", REPO / "envs" / "executor.py")):
        with executor_file(path):
            for backend in BACKENDS:
                config = SandboxConfig(backend=backend)
                start = start_docker if backend == "docker" else start_bwrap
                sandboxes[backend, executor] = start(config, repo)
    return sandboxes


def measure(
    sandboxes: dict[tuple[Backend, str], ExecutorSandbox], repo: Path, rounds: int
) -> tuple[dict[tuple[Backend, str], list[float]], dict[tuple[Backend, str], int]]:
    """Reset seconds and unrestored resets per sandbox; the first round only warms caches."""
    files = sorted(str(p.relative_to(repo)) for p in repo.rglob("*.py"))
    rng = random.Random(1)
    expected = {key: sb.run(["sh", "-c", FINGERPRINT]).output for key, sb in sandboxes.items()}
    times: dict[tuple[Backend, str], list[float]] = {key: [] for key in sandboxes}
    unrestored = dict.fromkeys(sandboxes, 0)
    keys = list(sandboxes)
    for i in range(rounds + 1):
        script = mutate_script(files, rng)
        for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
            changed = sandboxes[key].run(["sh", "-c", script])
            if not changed.ok:
                raise SystemExit(f"{key}: changing the repository failed: {changed.output}")
            began = time.perf_counter()
            sandboxes[key].reset()
            seconds = time.perf_counter() - began
            restored = sandboxes[key].run(["sh", "-c", FINGERPRINT]).output == expected[key]
            if i > 0:
                times[key].append(seconds)
                unrestored[key] += not restored
    return times, unrestored


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def print_report(res: Results) -> None:
    console.print(
        f"\n[bold]Reset of {res.files:,} files[/] {res.date}: this tree against {res.before}, "
        f"{res.rounds} rounds; load average {_load(res.load_start)} at the start, {_load(res.load_end)} at the end"
    )
    table = Table(title="Reset in ms, p50 (p10-p90)")
    for col in (
        "backend",
        f"before ({res.before})",
        "now",
        "before / now",
        "unrestored before / now",
        "goal",
    ):
        table.add_column(col, justify="left" if col == "backend" else "right")
    for backend, r in res.backends.items():
        met = r.now.p50_ms <= GOAL_MS and r.unrestored_now == 0
        table.add_row(
            backend,
            _cell(r.before),
            _cell(r.now),
            f"{r.ratio:.2f}x",
            f"{r.unrestored_before} / {r.unrestored_now}",
            f"≤ {GOAL_MS:g} ms: " + ("[green]met" if met else "[red]MISSED"),
        )
    console.print(table)


def _cell(s: Spread) -> str:
    return f"{s.p50_ms:.1f} ({s.p10_ms:.1f}-{s.p90_ms:.1f})"


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in load)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--before", default="HEAD", help="the commit whose executor is measured against")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    if not daemon_answers() or bwrap_path() is None:
        console.print("[red]both backends are needed: a Docker daemon that answers, and bwrap")
        return 2
    install_signal_handlers()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-reset-") as tmp:
        before = Path(tmp) / "executor_before.py"
        before.write_text(git("show", f"{args.before}:envs/executor.py"))
        before.chmod(0o644)  # the Docker sandbox reads it as its own user
        if before.read_text() == (REPO / "envs" / "executor.py").read_text():
            console.print(
                f"[yellow]the executor at {args.before} is this tree's: both sides measure the same code"
            )
        repo = Path(tmp) / "repo"
        repo.mkdir()
        make_repo(repo, LARGE_REPO_FILES)
        console.print(f"[dim]{args.rounds}+1 rounds of resets in 4 sandboxes of {LARGE_REPO_FILES:,} files")
        sandboxes = start_all(repo, before)
        try:
            times, unrestored = measure(sandboxes, repo, args.rounds)
        finally:
            for sandbox in sandboxes.values():
                sandbox.close()
    backends = {
        b: BackendResult(
            before=Spread.of(times[b, "before"]),
            now=Spread.of(times[b, "now"]),
            unrestored_before=unrestored[b, "before"],
            unrestored_now=unrestored[b, "now"],
        )
        for b in BACKENDS
    }
    results = Results(
        date=datetime.now().isoformat(timespec="seconds"),
        before=git("rev-parse", "--short", args.before).strip(),
        rounds=args.rounds,
        files=LARGE_REPO_FILES,
        load_start=load_start,
        load_end=os.getloadavg(),
        backends=backends,
    )
    print_report(results)
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(results), indent=2) + "\n")
    met = all(r.now.p50_ms <= GOAL_MS and r.unrestored_now == 0 for r in backends.values())
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
