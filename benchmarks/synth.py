"""Task synthesis yield and speed on real libraries: mutations tried and kept, tasks per minute.

    .venv/bin/python benchmarks/synth.py [--n N] [--backend docker|bwrap] [--concurrency K ...] [--json PATH]

For each pinned library (its source distribution from PyPI, cached under ~/.cache/harness/sdists) and
each backend, `harness tasks synth` is run as a user runs it: N tasks wanted, seed 0, every task
validated once (gold patch 1, empty patch 0) before it counts. Printed per run: the passing tests,
the distinct mutations on covered lines, the mutations tried and what became of them, the time of the
baseline (two runs of the suite, one traced), of the trials and of the validation, and the valid tasks
per minute of the whole synthesis. There is no target: a library with fewer distinct bugs on its
covered lines than N gives fewer tasks, and the table says how many.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from envs.bwrap import bwrap_path
from envs.docker import daemon_answers
from envs.lifecycle import install_signal_handlers
from envs.sandbox import SandboxConfig
from envs.synthesis import synthesize_suite
from tasks.mutations import OPERATORS
from tasks.suite import cache_root
from tasks.synth import SynthConfig, SynthReport, fetch_sdist

LIBRARIES = {
    "inflection==0.5.1": "flat, no dependencies",
    "parse==1.20.2": "flat, no dependencies",
    "cachetools==5.3.2": "src/, no dependencies",
    "humanize==4.9.0": "src/, test dependencies (freezegun, pytest-cov)",
}
"""Small pure-Python libraries whose sdists ship pytest suites, of the shapes real repositories have: the
environment each declares is built before synthesis (`tasks/environment.py`). Not pluggy: pytest depends
on it, so the sandbox's own pluggy (pytest's) is the one its tests import, not the repository's."""

console = Console(width=max(Console().width, 150))


def run_one(requirement: str, backend: str, n: int, root: Path, concurrency: int) -> SynthReport:
    """One synthesis as `harness tasks synth` runs it, its baseline measured afresh (not cached)."""
    name = requirement.split("==")[0]
    shutil.rmtree(cache_root().parent / "baselines", ignore_errors=True)
    out = root / f"{name}-{backend}-{concurrency}"
    config = SynthConfig(repo=fetch_sdist(requirement), out=out, name=name, n=n)
    return synthesize_suite(
        config, SandboxConfig.model_validate({"backend": backend}), concurrency=concurrency
    )


@dataclass
class Run:
    library: str
    backend: str
    concurrency: int
    passing_tests: int
    covered_lines: int
    candidates: int
    """Distinct mutations on covered lines."""
    tried: int
    kept: int
    tasks: int
    """Kept tasks that passed validation."""
    baseline_s: float
    tracer: str | None
    """What recorded the baseline's lines per test (sys.monitoring, ctracer, settrace)."""
    trials_s: float
    s_per_trial: float
    validation_s: float
    total_s: float
    tasks_per_minute: float
    verdicts: dict[str, int]
    by_operator: dict[str, str]
    """Operator -> kept/tried."""


def summary(requirement: str, backend: str, concurrency: int, report: SynthReport) -> Run:
    tried = Counter(t.operator for t in report.trials)
    kept = Counter(t.operator for t in report.trials if t.verdict == "kept")
    return Run(
        library=requirement,
        backend=backend,
        concurrency=concurrency,
        passing_tests=report.passing_tests,
        covered_lines=report.covered_lines,
        candidates=report.candidates,
        tried=report.tried,
        kept=report.kept,
        tasks=len(report.tasks),
        baseline_s=round(report.baseline_s, 1),
        tracer=report.tracer,
        trials_s=round(report.trials_s, 1),
        s_per_trial=round(report.trials_s / max(report.tried, 1), 2),
        validation_s=round(report.check_s, 1),
        total_s=round(report.duration_s, 1),
        tasks_per_minute=round(report.tasks_per_minute, 1),
        verdicts=report.verdicts(),
        by_operator={op: f"{kept[op]}/{tried[op]}" for op in OPERATORS},
    )


COLUMNS = {
    "library": "library",
    "backend": "backend",
    "concurrency": "sandboxes",
    "passing_tests": "tests",
    "candidates": "mutants",
    "tried": "tried",
    "kept": "kept",
    "tasks": "tasks",
    "baseline_s": "base s",
    "tracer": "tracer",
    "trials_s": "trials s",
    "s_per_trial": "s/trial",
    "validation_s": "valid. s",
    "total_s": "total s",
    "tasks_per_minute": "tasks/min",
}


def show(runs: list[Run]) -> None:
    table = Table(title="task synthesis, seed 0, every task validated once")
    for key, label in COLUMNS.items():
        table.add_column(
            label, justify="left" if key in ("library", "backend", "tracer") else "right", no_wrap=True
        )
    for run in runs:
        table.add_row(*(str(asdict(run)[key]) for key in COLUMNS))
    console.print(table)
    ops = Table(title="kept / tried, by operator")
    ops.add_column("library", no_wrap=True)
    ops.add_column("backend")
    ops.add_column("sandboxes")
    for op in OPERATORS:
        ops.add_column(op.replace("_", " "), justify="right")
    for run in runs:
        ops.add_row(
            run.library, run.backend, str(run.concurrency), *(run.by_operator[op] for op in OPERATORS)
        )
    console.print(ops)
    for run in runs:
        console.print(f"{run.library} on {run.backend}, {run.concurrency} sandboxes: {run.verdicts}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="tasks wanted from each library (default 20)")
    parser.add_argument("--backend", choices=("docker", "bwrap"), action="append", help="default: both")
    parser.add_argument(
        "--concurrency", type=int, action="append", help="sandboxes side by side (default: 1 and 2, in turn)"
    )
    parser.add_argument("--library", action="append", help=f"default: {', '.join(LIBRARIES)}")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    install_signal_handlers()
    backends = args.backend or [
        b for b in ("docker", "bwrap") if (daemon_answers() if b == "docker" else bwrap_path())
    ]
    if not backends:
        console.print("[red]no sandbox backend: neither a Docker daemon nor bwrap")
        return 2
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-synth-") as tmp:
        for requirement in args.library or list(LIBRARIES):
            for backend in backends:
                for k in args.concurrency or [1, 2]:
                    console.print(
                        f"[dim]{requirement} ({LIBRARIES.get(requirement, '?')}) on {backend}, {k} sandboxes"
                    )
                    report = run_one(requirement, backend, args.n, Path(tmp), k)
                    runs.append(summary(requirement, backend, k, report))
    show(runs)
    if args.json:
        machine = {
            "cpus": str(os.cpu_count()),
            "python": platform.python_version(),
            "kernel": platform.release(),
        }
        results = {"date": datetime.now().isoformat(), "machine": machine, "runs": [asdict(r) for r in runs]}
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
