"""`harness runs`, `harness replay`, `harness export` and `harness view`: a run read back."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from harness.commands import Commands
from harness.inspection.replay import SORT_KEYS
from harness.inspection.runs import RunError, RunRead, Selection
from harness.rollouts.local import last_tries
from harness.rollouts.store import RunStore


def add_selection(p: argparse.ArgumentParser, with_id: bool = False) -> None:
    """The flags that pick trajectories of a run (harness.inspection.runs.Selection)."""
    if with_id:
        p.add_argument(
            "--id", default=None, help="one trajectory, e.g. TASK/0 (`harness runs RUN` lists them)"
        )
    p.add_argument("--task", default=None, help="the trajectories of one task")
    p.add_argument("--group", default=None, help="the trajectories of one group (TASK@vN)")
    p.add_argument("--status", default=None, help="comma-separated statuses: ok, limit, infra_error")
    p.add_argument("--min-reward", type=float, default=None)
    p.add_argument("--max-reward", type=float, default=None)


def selection(args: argparse.Namespace) -> Selection:
    statuses = [s.strip() for s in args.status.split(",") if s.strip()] if args.status else None
    fields = {
        "id": getattr(args, "id", None),
        "task": args.task,
        "group": args.group,
        "status": statuses,
        "min_reward": args.min_reward,
        "max_reward": args.max_reward,
    }
    try:
        return Selection.model_validate(fields)
    except ValidationError as e:
        error = e.errors()[0]
        raise RunError(f"--{str(error['loc'][0]).replace('_', '-')}: {error['msg']}") from e


def add_commands(sub: Commands) -> None:
    p = sub.add_parser("runs", help="a run's trajectories as a table, filtered and sorted")
    p.add_argument("run", type=Path, help="a run directory")
    add_selection(p)
    p.add_argument("--sort", default="order", choices=["order", *SORT_KEYS], help="default: run order")
    p.add_argument("--desc", action="store_true", help="sort in descending order")
    p.add_argument("--limit", type=int, default=None, help="show at most this many")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("replay", help="show a run's trajectories turn by turn, or re-execute them")
    p.add_argument("run", type=Path, help="a run directory")
    add_selection(p, with_id=True)
    p.add_argument("--follow", action="store_true", help="show each new trajectory as the run writes it")
    p.add_argument("--full", action="store_true", help="do not fold long observations")
    p.add_argument(
        "--reexecute",
        action="store_true",
        help="play the recorded tool calls again in a fresh sandbox and check observations and grade",
    )
    p.add_argument("--backend", default=None, help="--reexecute: auto, docker or bwrap (default: the run's)")
    p.add_argument("--suite", default=None, help="the run's task suite, if it moved since the run")
    p.add_argument("--json", action="store_true", help="--reexecute: print the reports as JSON")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("export", help="a run's trajectories as JSONL, Parquet or SFT conversations")
    p.add_argument("run", type=Path, help="a run directory")
    p.add_argument(
        "--format",
        default="jsonl",
        choices=["jsonl", "parquet", "sft", "sft-tools"],
        help="jsonl / parquet: a row per trajectory; sft: chat conversations, tool calls in the text; "
        "sft-tools: conversations with native tool calls and a tools column (TRL's tool-calling SFT)",
    )
    p.add_argument("--out", type=Path, default=None, help="the file to write (default: RUN/export/...)")
    add_selection(p)
    p.add_argument("--suite", default=None, help="the run's task suite, if it moved since the run")
    p.add_argument(
        "--refined", action="store_true", help="also the refined rollouts of credit.critique (jsonl, parquet)"
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "view", help="a local web viewer of a run: trajectories, tokens, groups, training plots"
    )
    p.add_argument("run", type=Path, help="a run directory (runs/NAME)")
    p.add_argument(
        "--port", type=int, default=8600, help="port on 127.0.0.1 (default 8600; 0: any free port)"
    )
    p.set_defaults(func=cmd_view)


def report_unread(run: RunRead) -> int:
    """Tells on stderr what of the run was not read; 1 when a line was not a trajectory, else 0 (a torn
    last line is what a crash or a running writer leaves, not an error)."""
    for note in run.notes():
        print(f"harness: {note}", file=sys.stderr)
    return 1 if run.skipped else 0


def cmd_runs(args: argparse.Namespace) -> int:
    from harness.inspection.replay import run_row, runs_caption, runs_table, sort_trajectories
    from harness.inspection.runs import advantages, is_run, open_run, read_run, select

    if args.run.is_dir() and not is_run(args.run):
        return list_runs(args.run)
    run = read_run(open_run(args.run))
    trained = advantages(args.run, run.skipped)
    chosen = sort_trajectories(select(run, selection(args)), args.sort, args.desc)[: args.limit]
    last = last_tries(run.trajectories)  # an episode run again: its last line is its last try
    rows = [
        run_row(t, trained.get(t.id, []), run_again=last[(t.task_id, t.sample_index)] is not t)
        for t in chosen
    ]
    if args.json:
        print(json.dumps([r.model_dump() for r in rows], indent=1))
        return report_unread(run)
    total = len(run.trajectories)
    table = runs_table(f"{args.run}: {len(rows)} of {total} trajectories", rows, training=bool(trained))
    table.caption = runs_caption(rows)
    console = Console()
    if not console.is_terminal:  # piped or redirected: whole rows, however wide
        wide = console.options.update_width(10_000)
        console.width = max(console.width, console.measure(table, options=wide).maximum)
    console.print(table)
    return report_unread(run)


def list_runs(folder: Path) -> int:
    """`harness runs FOLDER` on a folder of runs: one line per run in it."""
    from harness.inspection.runs import is_run, read_run, summary_line

    runs = sorted(p for p in folder.iterdir() if p.is_dir() and is_run(p))
    if not runs:
        raise RunError(
            f"{folder} is not a run directory and holds none (no trajectories.jsonl or config.yaml)"
        )
    table = Table("run", "trajectories", "solved", "mean reward", "policy", title=f"runs in {folder}")
    for path in runs:
        table.add_row(path.name, *summary_line(read_run(RunStore(path))))
    Console().print(table)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from harness.inspection.replay import Folding, RunContext, show
    from harness.inspection.runs import follow, open_run, read_run, select

    store = open_run(args.run)
    chosen = selection(args)
    if args.reexecute:
        if args.follow:
            raise RunError("--reexecute replays finished trajectories; leave out --follow")
        return reexecute_selected(args, chosen)
    console = Console()
    context = RunContext(args.run, args.suite)
    folding = Folding(full=args.full)
    if not args.follow:
        run = read_run(store)
        run.skipped.extend(context.skipped)
        trajectories = select(run, chosen)
        if not trajectories:
            raise RunError(f"no trajectory of {args.run} matches the filters")
        if console.is_terminal and len(trajectories) > 1:  # many screens: through $PAGER (less)
            with console.pager(styles=True):
                show(console, trajectories, context, folding)
        else:
            show(console, trajectories, context, folding)
        return report_unread(run)
    Console(stderr=True).print(f"following {store.trajectories_path}; Ctrl-C stops", style="dim")
    skipped: list[str] = []

    def skip(line: str) -> None:
        skipped.append(line)
        print(f"harness: {line}: skipped", file=sys.stderr, flush=True)

    for line in context.skipped:
        skip(line)
    try:
        for trajectory in follow(store, on_skip=skip):
            if chosen.matches(trajectory):
                show(console, [trajectory], context, folding)
                if chosen.id is not None:
                    break
    except KeyboardInterrupt:
        pass
    return 1 if skipped else 0


def reexecute_selected(args: argparse.Namespace, chosen: Selection) -> int:
    """Re-executes every chosen trajectory; 0 when all reproduce, 1 on a divergence, 3 on an infra error."""
    from harness.inspection.reexecute import reexecute, report_view
    from harness.inspection.runs import load_setup, load_tasks, open_run, read_run, select

    run = read_run(open_run(args.run))
    trajectories = select(run, chosen)
    if not trajectories:
        raise RunError(f"no trajectory of {args.run} matches the filters")
    setup = load_setup(args.run, args.suite)
    tasks = load_tasks(setup)
    console = Console()
    reports = []
    for trajectory in trajectories:
        task = tasks.get(trajectory.task_id)
        if task is None:
            raise RunError(
                f"task {trajectory.task_id} is not in suite {setup.suite}; give the run's suite with --suite"
            )
        report = reexecute(trajectory, task, setup, args.backend)
        reports.append(report)
        if not args.json:
            for part in report_view(report):
                console.print(part)
    if args.json:
        print(json.dumps([{**r.model_dump(), "reproduced": r.reproduced} for r in reports], indent=1))
    unread = report_unread(run)
    if any(r.infra_error for r in reports):
        return 3
    return 0 if all(r.reproduced for r in reports) and not unread else 1


def cmd_export(args: argparse.Namespace) -> int:
    from harness.inspection.export import export

    result = export(args.run, args.format, selection(args), args.out, args.suite, args.refined)
    print(f"wrote {result.rows} rows ({result.trajectories} trajectories) to {result.path}")
    for note in result.notes:
        print(f"harness: {note}", file=sys.stderr)
    return 1 if result.skipped else 0


def cmd_view(args: argparse.Namespace) -> int:
    from harness.inspection.viewer import ViewerError, serve_viewer

    def ready(url: str) -> None:
        print(f"harness view: {url}  (Ctrl-C to stop)", flush=True)

    try:
        serve_viewer(args.run, args.port, ready)
    except ViewerError as e:
        print(f"harness view: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # uvicorn has shut down and passes Ctrl-C on: a normal stop
        pass
    return 0
