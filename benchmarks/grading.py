"""Time to grade one built-in task: this tree against an earlier commit, side by side in one run.

    .venv/bin/python benchmarks/grading.py [--before adf7c08] [--tasks 3 | --ids A,B] [--rounds 4] [--backend bwrap]

The earlier commit is checked out into a temporary git worktree; each round grades the gold patch of the
first `--tasks` built-in tasks once with each tree, in turn (each in a fresh process, the order swapped
every round), so load from outside weighs on both alike. Printed: the median seconds per grading of each
tree and their ratio, per task and over all, twice: until the grade is returned (what a rollout waits
for), and until the grading sandbox is closed as well (the grader now closes it after returning the
grade; the one before closed it first). The goal set for the grader that judges trees, runs each test
file in its own process and adds canaries (issue 15): at most 1.5x the grader before it (adf7c08, the
last commit before that work), until the grade is returned.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
GOAL = 1.5
TIME_ONE = """
import json, sys, threading, time
sys.path.insert(0, sys.argv[1])
from envs.grading import grade_patch
from envs.sandbox import SandboxConfig
from tasks.suite import load_suite
task = next(t for t in load_suite("builtin") if t.id == sys.argv[2])
began = time.monotonic()
grade = grade_patch(task, task.gold_patch, SandboxConfig(backend=sys.argv[3]))
returned = time.monotonic() - began
for thread in threading.enumerate():  # a sandbox still closing
    if thread is not threading.current_thread() and not thread.daemon:
        thread.join()
print(json.dumps({"seconds": returned, "gone": time.monotonic() - began, "reward": grade.reward}))
"""


def time_one(tree: Path, task_id: str, backend: str) -> tuple[float, float]:
    """Seconds until the grade was returned, and until its sandbox was closed too."""
    proc = subprocess.run(
        [sys.executable, "-c", TIME_ONE, str(tree), task_id, backend],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"grading {task_id} with {tree} failed:\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["reward"] < 0.9:
        raise SystemExit(f"{tree}: the gold patch of {task_id} scored {result['reward']}")
    return float(result["seconds"]), float(result["gone"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--before", default="adf7c08")
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--backend", default="bwrap")
    parser.add_argument("--ids", default="", help="comma-separated built-in task ids instead of --tasks")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tasks.suite import load_suite

    task_ids = args.ids.split(",") if args.ids else [t.id for t in load_suite("builtin")[: args.tasks]]
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as tmp:
        before = Path(tmp) / "before"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(before), args.before], cwd=REPO, check=True
        )
        try:
            times: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for round_ in range(args.rounds):
                for task_id in task_ids:
                    trees = [("before", before), ("now", REPO)]
                    for name, tree in trees if round_ % 2 == 0 else trees[::-1]:
                        times.setdefault((name, task_id), []).append(time_one(tree, task_id, args.backend))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=REPO, check=False)
    return report(times, task_ids, args.before)


def report(times: dict[tuple[str, str], list[tuple[float, float]]], task_ids: list[str], before: str) -> int:
    table = Table(
        "task",
        f"before ({before}), s",
        "now, s",
        "now / before",
        "now / before, sandbox closed too",
        title="seconds to grade the gold patch",
    )
    ratios, closed = [], []
    for task_id in task_ids:
        old, new = (
            [statistics.median(t[i] for t in times[(n, task_id)]) for i in (0, 1)] for n in ("before", "now")
        )
        ratios.append(new[0] / old[0])
        closed.append(new[1] / old[1])
        table.add_row(task_id, f"{old[0]:.2f}", f"{new[0]:.2f}", f"{ratios[-1]:.2f}", f"{closed[-1]:.2f}")
    overall = statistics.median(ratios)
    table.add_section()
    table.add_row(
        "median",
        "",
        "",
        f"{overall:.2f} (range {min(ratios):.2f}-{max(ratios):.2f})",
        f"{statistics.median(closed):.2f} (range {min(closed):.2f}-{max(closed):.2f})",
    )
    console = Console()
    console.print(table)
    console.print(
        f"goal: at most {GOAL}x until the grade is returned: {'met' if overall <= GOAL else 'MISSED'}"
    )
    return 0 if overall <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
