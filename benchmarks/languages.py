"""Step and grading times per language, on each backend, side by side in one run.

    .venv/bin/python benchmarks/languages.py [--rounds N] [--json PATH]

For each language's built-in suite (Python's `builtin`, `rust`, `go`, `java`, `javascript`) the first task is taken. Each round
visits every (language, backend) in turn, so load weighs on all alike, and measures what a user waits for:
a step (the task's own test command, `run_tests`, in a started sandbox, after one warm-up run) and a
grade of the gold patch (the hidden tests, held values and canaries, from a fresh sandbox). Medians and
the spread (min-max) are printed; nothing is a target here, so the exit status is 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from envs.factory import start_task_sandbox
from envs.grading import grade_patch
from envs.lifecycle import install_signal_handlers
from envs.sandbox import SandboxConfig
from tasks.model import Task
from tasks.suite import load_suite

SUITES = {"python": "builtin", "rust": "rust", "go": "go", "java": "java", "javascript": "javascript"}


def step_seconds(task: Task, config: SandboxConfig) -> float:
    """One run of the task's test command in a started sandbox (the second: builds are warm)."""
    sandbox = start_task_sandbox(task, config)
    try:
        sandbox.run(["sh", "-c", task.test_command], timeout=600)
        started = time.perf_counter()
        sandbox.run(["sh", "-c", task.test_command], timeout=600)
        return time.perf_counter() - started
    finally:
        sandbox.close()


def grade_seconds(task: Task, config: SandboxConfig) -> float:
    grade = grade_patch(task, task.gold_patch or "", config)
    if grade.infra_error or grade.correct != 1.0:
        raise SystemExit(
            f"{task.id} on {config.backend}: the gold patch did not grade 1: {grade.infra_error}"
        )
    return grade.duration_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default="bwrap,docker")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    install_signal_handlers()
    tasks = {language: load_suite(suite)[0] for language, suite in SUITES.items()}
    backends = args.backends.split(",")
    seen: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.rounds):
        for language, task in tasks.items():
            for backend in backends:
                config = SandboxConfig(backend=backend)
                times = seen.setdefault(f"{language}/{backend}", {"step": [], "grade": []})
                times["step"].append(step_seconds(task, config))
                times["grade"].append(grade_seconds(task, config))
    print(f"{'language/backend':<18} {'step s (min-max)':>22} {'grade s (min-max)':>22}")
    for key, times in seen.items():
        cells = [f"{statistics.median(v):6.2f} ({min(v):.2f}-{max(v):.2f})" for v in times.values()]
        print(f"{key:<18} {cells[0]:>22} {cells[1]:>22}")
    if args.json:
        args.json.write_text(json.dumps(seen, indent=1))


if __name__ == "__main__":
    main()
