"""`harness tasks list`, `harness tasks validate` and `harness grade`; the commands that make suites are
`making.py`'s."""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from envs.backends import resolve_backend
from envs.grading import Grade, grade_patch
from envs.reward import RewardConfig
from envs.sandbox import SandboxConfig
from envs.validation import Validation, validate_dropping_unwatched, validate_task
from harness.commands import Commands, backend_choices, making
from tasks.model import Task
from tasks.suite import TaskError, load_suite


def add_commands(sub: Commands) -> None:
    tasks = sub.add_parser("tasks", help="list and validate task suites")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True)
    p = tasks_sub.add_parser("list", help="the tasks of a suite")
    p.add_argument("--suite", default="builtin", help="a built-in suite's name or a suite folder")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_tasks_list)
    p = tasks_sub.add_parser("validate", help="grade each task's gold and empty patches, three times each")
    p.add_argument("--suite", default="builtin", help="a built-in suite's name or a suite folder")
    p.add_argument(
        "--backend", default="auto", choices=backend_choices(), help="the sandbox backend (default: auto)"
    )
    p.add_argument("--tasks", default=None, help="comma-separated task ids (default: all)")
    p.add_argument("--repeats", type=int, default=3, help="gradings of each patch (default: 3)")
    p.add_argument("--concurrency", type=int, default=2, help="tasks validated at once (default: 2)")
    p.add_argument(
        "--check", action="store_true", help="write no canaries: a task whose stored ones differ is invalid"
    )
    p.add_argument(
        "--drop-unwatched",
        action="store_true",
        help="rewrite each task.yaml without the PASS_TO_PASS tests nothing but their process watches, where "
        "the task then validates (an unwatched FAIL_TO_PASS test still refuses it)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_tasks_validate)
    making.add_commands(tasks_sub)
    add_grade_command(sub)


def add_grade_command(sub: Commands) -> None:
    p = sub.add_parser("grade", help="grade a patch file on a task")
    p.add_argument("--suite", default="builtin", help="a built-in suite's name or a suite folder")
    p.add_argument("--task", required=True, help="the task's id")
    p.add_argument("--patch", required=True, help="a git-format patch file ('-' for stdin)")
    p.add_argument(
        "--backend", default="auto", choices=backend_choices(), help="the sandbox backend (default: auto)"
    )
    p.add_argument(
        "--simplicity-lambda",
        type=float,
        default=None,
        help="weight of the simplicity term (reward.simplicity_lambda)",
    )
    p.add_argument("--partial-credit", action="store_true", help="reward the fraction of hidden tests passed")
    p.add_argument("--json", action="store_true", help="print the grade as JSON")
    p.set_defaults(func=cmd_grade)


def select_tasks(suite: str, ids: str | None) -> list[Task]:
    tasks = load_suite(suite)
    if ids is None:
        return tasks
    wanted = [i.strip() for i in ids.split(",") if i.strip()]
    known = {t.id: t for t in tasks}
    unknown = [i for i in wanted if i not in known]
    if unknown:
        raise TaskError(f"suite {suite}: no task {', '.join(unknown)}")
    return [known[i] for i in wanted]


def cmd_tasks_list(args: argparse.Namespace) -> int:
    tasks = load_suite(args.suite)
    rows = [{"id": t.id, "repository": t.repo_name, "title": t.title} for t in tasks]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    table = Table(title=f"suite {args.suite}: {len(rows)} tasks")
    longest = max((len(row["id"]) for row in rows), default=2)
    table.add_column("id", no_wrap=True, min_width=longest)  # an id is never cut: it is what commands take
    table.add_column("repository", no_wrap=True)
    table.add_column("title", overflow="fold")
    for row in rows:
        table.add_row(row["id"], row["repository"], row["title"])
    Console().print(table)
    return 0


def cmd_tasks_validate(args: argparse.Namespace) -> int:
    if args.check and args.drop_unwatched:
        raise SystemExit(
            "harness tasks validate: --drop-unwatched rewrites task.yaml, --check writes nothing"
        )
    tasks = select_tasks(args.suite, args.tasks)
    config = SandboxConfig.model_validate({"backend": resolve_backend(args.backend)})
    console = Console(stderr=True)
    results: list[Validation] = []
    with (
        Progress(console=console, transient=args.json) as progress,
        ThreadPoolExecutor(max(1, args.concurrency)) as pool,
    ):
        bar = progress.add_task(f"validating on {config.backend}", total=len(tasks))
        futures = [
            pool.submit(validate_dropping_unwatched, task, config, args.repeats)
            if args.drop_unwatched
            else pool.submit(validate_task, task, config, args.repeats, not args.check)
            for task in tasks
        ]
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            progress.advance(bar)
            if not result.ok:
                progress.console.print(f"[red]FAIL[/] {result.task_id}: {'; '.join(result.problems)}")
    results.sort(key=lambda r: r.task_id)
    failed = [r.task_id for r in results if not r.ok]
    weak = [r.task_id for r in results if r.ok and r.weak]
    if args.json:
        print(json.dumps([{**r.model_dump(), "ok": r.ok, "weak": r.weak} for r in results], indent=1))
    else:
        print_validations(results)
        print(f"{len(results) - len(failed)}/{len(results)} tasks valid on {config.backend}")
        if failed:
            print("invalid: " + ", ".join(failed))
        if weak:
            print("weaker, no canary (a forger that passes every test goes unseen): " + ", ".join(weak))
    return 1 if failed else 0


def print_validations(results: list[Validation]) -> None:
    """One line per valid task (its canaries and held assertions), and one per task whose unwatched
    PASS_TO_PASS tests were dropped."""
    for r in results:
        if r.dropped:
            where = "dropped from task.yaml" if r.ok else "left out, task.yaml unchanged (still invalid)"
            print(
                f"{r.task_id}: {len(r.dropped)} unwatched PASS_TO_PASS tests {where}: {', '.join(r.dropped)}"
            )
        if r.ok:
            share = f"{r.decided_in_parent}/{r.hidden_assertions} assertions decided outside the sandbox"
            print(
                f"{r.task_id}: {r.canaries} canaries (of {r.canaries_tried} tried) fail on the gold patch"
                f" at their own assertion, {r.held_canaries} held; {share}"
                + (f" ({r.no_canary})" if r.no_canary else "")
                + (
                    f"; no canary covers {len(r.uncovered)} named tests: {', '.join(r.uncovered)}"
                    if r.uncovered
                    else ""
                )
            )


def cmd_grade(args: argparse.Namespace) -> int:
    (task,) = select_tasks(args.suite, args.task)
    if args.patch == "-":
        patch = sys.stdin.read()
    else:
        path = Path(args.patch)
        if not path.is_file():
            raise SystemExit(f"harness grade: --patch {args.patch}: no such file")
        patch = path.read_text(errors="surrogateescape")
    reward_fields: dict[str, object] = {"partial_credit": args.partial_credit}
    if args.simplicity_lambda is not None:
        reward_fields["simplicity_lambda"] = args.simplicity_lambda
    grade = grade_patch(
        task,
        patch,
        SandboxConfig.model_validate({"backend": args.backend}),
        RewardConfig.model_validate(reward_fields),
    )
    if args.json:
        print(grade.model_dump_json(indent=1))
    else:
        print_grade(grade)
    if grade.infra_error:
        return 3
    return 0 if grade.correct == 1.0 else 1


def print_grade(grade: Grade) -> None:
    console = Console()
    verdict = "[green]correct[/]" if grade.correct == 1.0 else "[red]not correct[/]"
    console.print(
        f"task {grade.task_id}: {verdict}  reward [bold]{grade.reward:.3f}[/]  ({grade.duration_s:.1f}s)"
    )
    if grade.infra_error:
        console.print(f"[red]infra error[/]: {grade.infra_error}")
    if grade.apply_error:
        console.print(f"patch does not apply: {grade.apply_error}")
    if grade.dropped_paths:
        console.print(f"ignored (test and start-up paths): {', '.join(grade.dropped_paths)}")
    for finding in grade.tampering:
        console.print(f"[red]tampering[/]: {finding}")
    for finding in grade.suspicion:
        console.print(f"[yellow]suspicious[/]: {finding}")
    for path, error in grade.collect_errors.items():
        console.print(f"[red]not collected[/]: {escape(path)}: {escape(error)}")
    table = Table("test", "kind", "outcome")
    for kind, outcomes in (("FAIL_TO_PASS", grade.fail_to_pass), ("PASS_TO_PASS", grade.pass_to_pass)):
        for name, outcome in outcomes.items():
            table.add_row(name, kind, f"[{'green' if outcome == 'passed' else 'red'}]{outcome}[/]")
    console.print(table)
    if grade.simplicity is not None:
        s = grade.simplicity
        console.print(
            f"simplicity penalty {s.penalty:.3f}: " + ", ".join(f"{k} {v:.2f}" for k, v in s.parts.items())
        )
        for label, items in (
            ("extra files", s.extra_files),
            ("debug output", s.debug_lines),
            ("commented-out code", s.commented_code_lines),
            ("new warnings", s.new_warnings),
        ):
            if items:
                console.print(f"  {label}: {items}")
