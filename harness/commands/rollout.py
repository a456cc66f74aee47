"""`harness rollout`: G graded episodes of each task of a suite, its flags made from `RolloutConfig`."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness.agent.trajectory import Trajectory
from harness.commands import Commands
from harness.commands.settings import printed_config, resolved
from harness.rollouts.config import RolloutConfig, RolloutSummary
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore
from policies.spec import check_spec


def add_commands(sub: Commands) -> None:
    p = sub.add_parser(
        "rollout",
        help="run G rollouts of each task of a suite with a policy, graded",
        settings="harness.rollouts.config:RolloutConfig",
        flags={"backend": "sandbox.backend"},
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--keep-failed",
        action="store_true",
        help="continuing a run: episodes that ended in infra_error count as done (default: run them again)",
    )
    p.set_defaults(func=cmd_rollout)


def cmd_rollout(args: argparse.Namespace) -> int:
    config = resolved(args, RolloutConfig)
    if args.print_config:
        return printed_config(config)
    check_spec(config.policy)
    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]rollout"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
    ) as progress:
        bar = progress.add_task("", total=None)

        def on_progress(done: int, total: int, trajectory: Trajectory | None) -> None:
            last = ""
            if trajectory is not None:
                last = f"{trajectory.task_id} #{trajectory.sample_index}: {trajectory.status} reward {trajectory.reward:.2f}"
            progress.update(bar, completed=done, total=total, description=last)

        try:
            summary = rollout(config, on_progress=on_progress, retry_infra_errors=not args.keep_failed)
        except KeyboardInterrupt:
            progress.stop()
            saved = len(list(RunStore(config.out).trajectories()))
            console.print(
                f"interrupted: {saved} finished trajectories are saved in {config.out}; run again to go on"
            )
            return 130
    if args.json:
        print(summary.model_dump_json(indent=1))
    else:
        print_rollout_summary(summary, config.out)
    return _infra_exit(summary, console)


def _infra_exit(summary: RolloutSummary, console: Console) -> int:
    """1 when every episode ended in `infra_error` (nothing was graded: the policy's server, the sandboxes
    or the daemon failed), with the most common cause and where to read more; else 0."""
    if not summary.trajectories or set(summary.statuses) != {"infra_error"}:
        return 0
    cause, count = max(summary.failures.items(), key=lambda kv: kv[1]) if summary.failures else ("?", 0)
    said = summary.failure_examples.get(cause, "")
    console.print(
        f"harness rollout: every episode ended in infra_error ({count} of {summary.trajectories}: {cause}"
        f"{': ' + said if said else ''}); nothing was graded. Fix the cause and run the same command again: "
        "episodes that ended in infra_error are run again (--keep-failed: not)"
    )
    return 1


def print_rollout_summary(summary: RolloutSummary, out: Path) -> None:
    table = Table(title=f"rollout {out}", show_header=False)
    rows = [
        ("tasks", str(summary.tasks)),
        ("trajectories", str(summary.trajectories)),
        ("pass@1", f"{summary.pass_at_1:.3f}"),
        ("pass@G", f"{summary.pass_at_g:.3f}"),
        ("mean reward", f"{summary.mean_reward:.3f}"),
        ("mean turns", f"{summary.mean_turns:.1f}"),
        ("mean summaries", f"{summary.mean_summaries:.2f}"),
        ("mean tokens", f"{summary.mean_tokens:.0f}"),
        ("status", ", ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items()))),
        ("failures", ", ".join(f"{k} {v}" for k, v in sorted(summary.failures.items())) or "none"),
        *[(f"  {cause}", example) for cause, example in sorted(summary.failure_examples.items())],
    ]
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)
