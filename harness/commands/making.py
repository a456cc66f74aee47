"""`harness tasks import` (SWE-bench, Harbor), `harness tasks synth` and `harness tasks mine`: the commands
that make task suites."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from envs.backends import resolve_backend
from envs.sandbox import SandboxConfig
from harness.commands import Commands, backend_choices
from harness.commands.sandbox import build_suite_envs
from tasks.importing import ImportReport


def add_commands(tasks_sub: Commands) -> None:
    add_import_commands(tasks_sub)
    add_synth_command(tasks_sub)
    add_mine_command(tasks_sub)


def add_import_commands(tasks_sub: Commands) -> None:
    importer = tasks_sub.add_parser(
        "import", help="turn SWE-bench instances or Harbor task folders into a suite"
    )
    formats = importer.add_subparsers(dest="import_format", required=True)
    p = formats.add_parser(
        "swebench", help="SWE-bench instances (JSON lines) with local clones of their repos"
    )
    p.add_argument("file", type=Path, help="a JSONL file of instances in SWE-bench's field layout")
    p.add_argument(
        "--repos",
        type=Path,
        required=True,
        help="a folder of git clones or mirrors: owner__name or owner/name",
    )
    p.add_argument("--out", type=Path, required=True, help="the suite folder to write")
    p.add_argument(
        "--image", default=None, help="Docker image of each task; {instance_id}, {repo}, {version} filled in"
    )
    p.add_argument(
        "--setup-command", action="append", default=None, help="run before the agent and grading (repeatable)"
    )
    p.add_argument("--test-command", default=None, help="the agent's run_tests command")
    p.add_argument(
        "--language",
        default=None,
        help="the code's language where a row names none (default: read off each gold patch's files)",
    )
    p.add_argument(
        "--no-env",
        action="store_true",
        help="neither read the environments the repositories declare nor build them",
    )
    p.add_argument(
        "--backend",
        default="auto",
        help="where environments are read (each repository's build backend, in a sandbox) and built: docker, "
        "bwrap or auto",
    )
    p.add_argument(
        "--environments",
        type=Path,
        default=None,
        help="YAML or JSON: instance id -> {image, setup_commands, test_command}, over the options above",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_tasks_import_swebench)
    p = formats.add_parser("harbor", help="Harbor task folders (needs Docker to build their environments)")
    p.add_argument("dir", type=Path, help="a Harbor task folder, or a folder of them")
    p.add_argument("--out", type=Path, required=True, help="the suite folder to write")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_tasks_import_harbor)


def cmd_tasks_import_swebench(args: argparse.Namespace) -> int:
    from envs.build_metadata import environment_reader
    from envs.languages.support import import_support
    from tasks.swebench import InstanceEnvironment, import_swebench, load_environments

    defaults = InstanceEnvironment(
        image=args.image,
        setup_commands=args.setup_command,
        test_command=args.test_command,
        language=args.language,
    )
    environments = load_environments(args.environments) if args.environments else {}
    reader = None
    if not args.no_env:  # the build backends run in sandboxes of this backend
        reader = environment_reader(SandboxConfig.model_validate({"backend": resolve_backend(args.backend)}))
    report = import_swebench(
        args.file, args.repos, args.out, defaults, environments, reader, import_support()
    )
    status = print_import(report, args.json)
    if args.no_env or not report.imported:
        return status
    return build_suite_envs(str(args.out), args.backend, quiet=True) or status


def cmd_tasks_import_harbor(args: argparse.Namespace) -> int:
    from envs.docker import DockerImages, daemon_answers
    from tasks.harbor import import_harbor

    return print_import(
        import_harbor(args.dir, args.out, DockerImages() if daemon_answers() else None), args.json
    )


def print_import(report: ImportReport, as_json: bool) -> int:
    """Prints what was imported and what was not, and why; fails only when nothing was imported."""
    if as_json:
        print(report.model_dump_json(indent=1))
    else:
        for task_id in report.imported:
            print(f"imported {task_id}")
        for skipped in report.skipped:
            name = f" ({skipped.task_id})" if skipped.task_id else ""
            print(f"skipped {skipped.source}{name}: {skipped.reason}")
        for warning in report.warnings:
            print(f"warning: {warning}")
        for task_id, how in report.environments.items():
            print(f"environment of {task_id}: {how}")
        print(f"{len(report.imported)} imported, {len(report.skipped)} skipped, into {report.suite}")
    return 0 if report.imported else 1


def add_synth_command(tasks_sub: Commands) -> None:
    p = tasks_sub.add_parser(
        "synth",
        help="make bug-fix tasks by mutation from a Python repository with a pytest suite (or --language)",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--repo", type=Path, help="the repository folder")
    source.add_argument("--pypi", metavar="NAME==VERSION", help="a source distribution from PyPI instead")
    p.add_argument("--out", type=Path, required=True, help="the suite folder to write (made if missing)")
    p.add_argument("--n", type=int, default=10, help="tasks wanted (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the order mutations are tried in")
    p.add_argument("--name", default=None, help="the repository's name in the suite (default: its folder's)")
    p.add_argument("--max-tries", type=int, default=None, help="most mutations tried (default 25 per task)")
    p.add_argument("--per-function", type=int, default=2, help="most tasks from one function (default 2)")
    p.add_argument(
        "--baseline-timeout",
        type=float,
        default=None,
        metavar="S",
        help="time limit of the first full test runs (default 600 s and 1 s more per test function)",
    )
    p.add_argument("--backend", default="auto")
    p.add_argument("--no-validate", action="store_true", help="skip validating each task (gold 1, empty 0)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=2,
        help="sandboxes side by side for tracing, trials and validation (default 2; the same tasks at any)",
    )
    p.add_argument(
        "--language",
        default=None,
        help="the repository's language: python (default; pytest) or one whose tests are programs and whose "
        "source synthesis can mutate (javascript: node:test files, TypeScript included; measured by its grader)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_tasks_synth)


def cmd_tasks_synth(args: argparse.Namespace) -> int:
    from envs.synthesis import synthesize_suite
    from tasks.synth import SynthConfig, Trial, fetch_sdist

    if args.language not in (None, "python"):
        return cmd_tasks_synth_programs(args)
    repo = args.repo if args.pypi is None else fetch_sdist(args.pypi)
    name = args.name or (args.pypi.split("==")[0] if args.pypi else None)
    config = SynthConfig.model_validate(
        {
            "repo": repo,
            "out": args.out,
            "n": args.n,
            "seed": args.seed,
            "name": name,
            "max_tries": args.max_tries,
            "per_function": args.per_function,
            "baseline_timeout_s": args.baseline_timeout,
        }
    )
    sandbox = SandboxConfig.model_validate({"backend": resolve_backend(args.backend)})

    def show(trial: Trial) -> None:
        if not args.json:
            where = f"{trial.path}:{trial.line} {trial.function}"
            print(f"{trial.operator:<18} {where}: {trial.verdict}", file=sys.stderr)

    if args.concurrency < 1:
        raise SystemExit("harness tasks synth: --concurrency must be at least 1")
    report = synthesize_suite(
        config, sandbox, validate=not args.no_validate, concurrency=args.concurrency, on_trial=show
    )
    if args.json:
        extra = {"tried": report.tried, "kept": report.kept, "tasks_per_minute": report.tasks_per_minute}
        print(json.dumps({**report.model_dump(mode="json"), **extra}, indent=1))
        return 0 if report.tasks else 1
    table = Table(title=f"{len(report.tasks)} tasks from {report.name} in {report.suite}")
    for column in ("id", "operator", "where", "FAIL_TO_PASS", "PASS_TO_PASS"):
        table.add_column(column)
    for task in report.tasks:
        where = f"{task.path}:{task.line} {task.function}"
        table.add_row(task.id, task.operator, where, str(task.fail_to_pass), str(task.pass_to_pass))
    Console(width=max(Console().width, 120)).print(table)
    verdicts = ", ".join(f"{v} {k}" for v, k in sorted(report.verdicts().items()))
    print(
        f"{report.tried} mutations tried of {report.candidates} ({verdicts}); {len(report.tasks)} tasks "
        f"in {report.duration_s:.0f} s on {sandbox.backend}: {report.tasks_per_minute:.1f} tasks/min"
    )
    for task_id, problems in report.rejected.items():
        print(f"removed {task_id}: {'; '.join(problems)}")
    print(f"environment: {report.environment_read}")
    return 0 if report.tasks else 1


def cmd_tasks_synth_programs(args: argparse.Namespace) -> int:
    """`harness tasks synth --language L` for a language whose tests are programs (`envs/synthesis_programs.py`)."""
    from envs.synthesis_programs import synthesize_programs
    from tasks.synth import SynthConfig
    from tasks.synth_programs import ProgramTrial

    if args.pypi is not None:
        raise SystemExit(
            f"harness tasks synth: --pypi is for Python; give --repo for --language {args.language}"
        )
    fields = {"repo": args.repo, "out": args.out, "n": args.n, "seed": args.seed, "name": args.name}
    fields |= {"max_tries": args.max_tries, "per_function": args.per_function}
    config = SynthConfig.model_validate({**fields, "baseline_timeout_s": args.baseline_timeout})
    sandbox = SandboxConfig.model_validate({"backend": resolve_backend(args.backend)})

    def show(trial: ProgramTrial) -> None:
        if not args.json:
            where = f"{trial.path}:{trial.line} {trial.function}"
            print(f"{trial.operator:<18} {where}: {trial.verdict}", file=sys.stderr)

    report = synthesize_programs(config, sandbox, args.language, not args.no_validate, show)
    if args.json:
        extra = {"tried": report.tried, "tasks_per_minute": report.tasks_per_minute}
        print(json.dumps({**report.model_dump(mode="json"), **extra}, indent=1))
        return 0 if report.tasks else 1
    for task in report.tasks:
        where = f"{task.path}:{task.line} {task.function}"
        print(
            f"{task.id}: {task.operator} at {where}, {task.fail_to_pass} FAIL_TO_PASS, {task.pass_to_pass} PASS_TO_PASS"
        )
    verdicts = ", ".join(f"{v} {k}" for k, v in sorted(report.verdicts().items()))
    print(
        f"{report.tried} mutations tried of {report.candidates} ({verdicts or 'none'}); {len(report.tasks)} tasks "
        f"in {report.suite} in {report.duration_s:.0f} s on {sandbox.backend}: {report.tasks_per_minute:.1f} tasks/min"
    )
    for task_id, problems in report.rejected.items():
        print(f"removed {task_id}: {'; '.join(problems)}")
    return 0 if report.tasks else 1


def add_mine_command(tasks_sub: Commands) -> None:
    p = tasks_sub.add_parser(
        "mine", help="make tasks from a repository's history: commits whose new tests fail at their parent"
    )
    p.add_argument("--repo", type=Path, required=True, help="a git repository (work tree or bare)")
    p.add_argument("--out", type=Path, required=True, help="the suite folder to write (made if missing)")
    p.add_argument("--name", default=None, help="the repository's name in the suite (default: its folder's)")
    p.add_argument("--rev", default="HEAD", help="whose first-parent history is scanned (default HEAD)")
    p.add_argument("--max-commits", type=int, default=50, help="most commits scanned (default 50)")
    p.add_argument("--since", default=None, help="only commits after this date (git's --since)")
    p.add_argument("--until", default=None, help="only commits before this date (git's --until)")
    p.add_argument(
        "--backend", default="auto", choices=backend_choices(), help="the sandbox backend (default: auto)"
    )
    p.add_argument("--run-timeout", type=float, default=300.0, metavar="S", help="one test run (default 300)")
    p.add_argument("--test-timeout", type=float, default=60.0, metavar="S", help="one test (default 60)")
    p.add_argument(
        "--no-validate",
        action="store_true",
        help="keep tasks without validating them (validation drops the PASS_TO_PASS tests nothing watches)",
    )
    p.add_argument(
        "--language",
        default="python",
        help="the repository's language: python (default; pytest runs the changed test modules) or one whose "
        "tests are programs (rust, go, ...: its plug-in splits each commit and its grader measures it)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_tasks_mine)


def cmd_tasks_mine(args: argparse.Namespace) -> int:
    from envs.mining import Dropped, MineConfig, Mined, mine

    config = MineConfig.model_validate(
        {
            "repo": args.repo,
            "out": args.out,
            "name": args.name,
            "rev": args.rev,
            "max_commits": args.max_commits,
            "since": args.since,
            "until": args.until,
            "backend": args.backend,
            "run_timeout_s": args.run_timeout,
            "test_timeout_s": args.test_timeout,
            "validate_tasks": not args.no_validate,
            "language": args.language,
        }
    )

    def show(result: Mined | Dropped) -> None:
        if args.json:
            return
        if isinstance(result, Mined):
            dropped = f"; unwatched, dropped: {', '.join(result.unwatched)}" if result.unwatched else ""
            print(
                f"{result.commit[:10]} kept {result.id}: {result.fail_to_pass} FAIL_TO_PASS{dropped}",
                file=sys.stderr,
            )
        else:
            print(f"{result.commit[:10]} {result.reason}: {result.detail}", file=sys.stderr)

    from envs.build_metadata import environment_reader

    reader = environment_reader(SandboxConfig.model_validate({"backend": resolve_backend(config.backend)}))
    report = mine(config, reader, on_commit=show)
    if args.json:
        print(json.dumps({**report.model_dump(mode="json"), "by_reason": report.by_reason()}, indent=1))
        return 0 if report.kept else 1
    reasons = ", ".join(f"{n} {reason}" for reason, n in report.by_reason().items()) or "none"
    print(
        f"{report.scanned} commits scanned, {len(report.kept)} tasks kept in {report.suite} "
        f"({len(report.environments)} environments) in {report.duration_s:.0f} s on {report.backend}; "
        f"dropped: {reasons}"
    )
    return 0 if report.kept else 1
