"""`harness demo`: the most complete end-to-end job so far.

A built-in task runs as a `CodingEnv` episode in a fresh sandbox: a scripted agent looks around, runs
the failing tests, applies the task's gold fix through the edit tool, runs the tests again and submits;
the repository is then graded in another fresh sandbox with the hidden tests and the simplicity term.
Every step prints what a model would see.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from envs.backends import resolve_backend
from envs.sandbox import SandboxConfig
from harness.gym import CodingEnv
from policies.scripted import ScriptedCall, gold_calls
from tasks.model import Task
from tasks.suite import load_suite
from tools import Toolbox

DEMO_TASK = "kvstore-001-expire-boundary"


def scripted_actions(task: Task) -> list[ScriptedCall]:
    """What a competent agent does on this task: `scripted:gold`'s calls (explore, reproduce, fix through
    the edit tool, verify), then submit."""
    return [*gold_calls(task), ScriptedCall(name="submit")]


def run_demo(backend: str = "auto", task_id: str = DEMO_TASK) -> int:
    console = Console()
    tasks = {t.id: t for t in load_suite("builtin")}
    task = tasks[task_id]
    backend = resolve_backend(backend)
    env = CodingEnv(
        [task],
        Toolbox.for_task,
        SandboxConfig.model_validate({"backend": backend}),
    )
    started = time.perf_counter()
    prompt, _ = env.reset(options={"task": task.id})
    console.print(Panel(Text(prompt), title=f"task {task.id} on {backend}", border_style="blue"))
    console.print(f"sandbox started in {time.perf_counter() - started:.2f}s (no network, no capabilities)")
    reward, terminated = 0.0, False
    info: dict[str, Any] = {}
    try:
        for turn, action in enumerate(scripted_actions(task), 1):
            started = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(action.model_dump())
            took = (time.perf_counter() - started) * 1000
            args = ", ".join(f"{k}={str(v)[:40]!r}" for k, v in action.arguments.items())
            console.print(
                Panel(
                    Text(obs.rstrip()[-1500:] or "(empty)"),  # Text: brackets in code are not markup
                    title=f"turn {turn}: {action.name}({args})",
                    subtitle=f"{took:.0f} ms",
                    border_style="red" if info.get("is_error") else "green",
                )
            )
            if terminated or truncated:
                break
    finally:
        env.close()
    grade = info.get("grade", {})
    table = Table("hidden test", "outcome")
    for name, outcome in {**grade.get("fail_to_pass", {}), **grade.get("pass_to_pass", {})}.items():
        table.add_row(name, outcome)
    console.print(table)
    ok = terminated and grade.get("correct") == 1.0
    console.print(
        f"[bold]{'PASS' if ok else 'FAIL'}[/]: reward {reward:.3f} "
        f"(correct {grade.get('correct')}, simplicity penalty {(grade.get('simplicity') or {}).get('penalty')})"
    )
    return 0 if ok else 1
