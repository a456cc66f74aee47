"""The `harness` command line."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from envs.backends import reap_strays_everywhere, resolve_backend
from envs.factory import build_task_env, start_sandbox
from envs.grading import Grade, grade_patch
from envs.lifecycle import install_signal_handlers, reap
from envs.python_env import REQUIREMENTS, build_env, default_env_dir, is_built
from envs.reward import RewardConfig
from envs.sandbox import BACKENDS as SANDBOX_BACKENDS
from envs.sandbox import SandboxConfig, SandboxError
from envs.sandbox_server import add_arguments as add_server_arguments
from envs.sandbox_server import serve as serve_sandboxes
from envs.validation import Validation, validate_task
from harness.agent.trajectory import Trajectory
from harness.config import ConfigError, commented_yaml, load_config
from harness.inspection.replay import SORT_KEYS
from harness.inspection.runs import RunError, RunRead, Selection
from harness.rollouts.config import RolloutConfig, RolloutSummary
from harness.rollouts.local import last_tries, rollout
from harness.rollouts.store import RunFileError, RunStore
from policies.spec import PolicySpecError, check_spec
from tasks.importing import ImportReport
from tasks.model import Task
from tasks.suite import TaskError, load_suite


def sandbox_config(args: argparse.Namespace) -> SandboxConfig:
    fields = {"backend": args.backend}
    if getattr(args, "timeout", None) is not None:
        fields["command_timeout_s"] = args.timeout
    if getattr(args, "image", None):
        fields["image"] = args.image
    return SandboxConfig.model_validate(fields)


def source_dir(args: argparse.Namespace) -> Path | None:
    if args.dir is None:
        return None
    path = Path(args.dir)
    if not path.is_dir():
        raise SystemExit(f"harness: --dir {args.dir}: not a directory")
    return path


def cmd_sandbox_run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise SystemExit("harness sandbox run: give a command after --")
    config = sandbox_config(args)
    sandbox = start_sandbox(config, source_dir(args))
    try:
        result = sandbox.run(command[0] if len(command) == 1 else command)
    finally:
        sandbox.close()
    print(
        json.dumps(result.model_dump(include={"exit_code", "output", "timed_out", "truncated", "duration_s"}))
    )
    return 0 if result.exit_code == 0 else 1


CWD_MARK = "\x1e__harness_cwd__="


def cmd_sandbox_shell(args: argparse.Namespace) -> int:
    """A line-by-line shell: each line runs in the sandbox; `cd` is carried from line to line."""
    config = sandbox_config(args)
    sandbox = start_sandbox(config, source_dir(args))
    backend = resolve_backend(config.backend)
    cwd = "/repo"
    print(
        f"sandbox {sandbox.id} on {backend}; no network. Type exit or press Ctrl-D to leave.", file=sys.stderr
    )
    try:
        while True:
            try:
                line = input(f"sandbox:{cwd}$ ")
            except EOFError:
                print(file=sys.stderr)
                break
            if line.strip() in ("exit", "logout"):
                break
            if not line.strip():
                continue
            script = f'cd {shlex.quote(cwd)} && {{ {line}\n}}; s=$?; printf "{CWD_MARK}%s" "$PWD"; exit $s'
            result = sandbox.run(script)
            output, _, new_cwd = result.output.rpartition(CWD_MARK)
            if not _:  # the marker was cut off or never printed
                output = result.output
            else:
                cwd = new_cwd or cwd
            sys.stdout.write(output)
            if result.timed_out:
                print(f"[timed out after {config.command_timeout_s:.0f}s; all its processes were killed]")
            elif result.exit_code:
                print(f"[exit {result.exit_code}]")
    finally:
        sandbox.close()
    return 0


def cmd_sandbox_reap(args: argparse.Namespace) -> int:
    config = SandboxConfig()
    report = reap(config.state_dir, reap_strays_everywhere)
    print(report.model_dump_json())
    return 0


def add_env_parser(sub: Any) -> None:
    env = sub.add_parser("env", help="the Python environments of sandboxes: the default one, and tasks' own")
    env_sub = env.add_subparsers(dest="env_command", required=True)
    p = env_sub.add_parser(
        "build", help="make it once, from the package index (the sandboxes have no network)"
    )
    p.add_argument("--quiet", action="store_true", help="print only the folder")
    p.add_argument("--suite", help="also build the environment of every task of this suite that has one")
    p.add_argument(
        "--backend", default="auto", help="docker, bwrap, or auto; with --suite: whose environments to build"
    )
    p.set_defaults(func=cmd_env_build)


def cmd_env_build(args: argparse.Namespace) -> int:
    """Builds the sandbox environment (a kept one is reused) and prints its folder; with --suite, each
    task environment too (one per distinct environment), a line each: task ids, then the folder or image."""
    folder = default_env_dir()
    if not is_built(folder) and not args.quiet:
        print(f"building {folder}: {', '.join(REQUIREMENTS)}", file=sys.stderr)
    print(build_env(folder, quiet=args.quiet))
    return 0 if args.suite is None else build_suite_envs(args.suite, args.backend, args.quiet)


def build_suite_envs(suite: str, backend: str, quiet: bool) -> int:
    """Builds the environment of every task of `suite` that has one, once per distinct environment; a line
    each: the task ids, then the folder or image. 1 when one fails (its error on stderr)."""
    config = SandboxConfig(backend=resolve_backend(backend))
    by_environment: dict[str, list[Task]] = {}
    for task in load_suite(suite):
        if task.environment is not None:
            by_environment.setdefault(task.environment.model_dump_json(), []).append(task)
    for tasks in by_environment.values():
        environment, ids = tasks[0].environment, ", ".join(t.id for t in tasks)
        assert environment is not None
        if not quiet:
            print(f"{ids}: {', '.join(environment.requirements) or 'no requirements'}", file=sys.stderr)
        try:
            print(
                f"{ids}: {build_task_env(tasks[0], config, quiet=quiet)}",
                file=sys.stderr if quiet else sys.stdout,
            )
        except SandboxError as e:
            print(f"error: {ids}: {e}", file=sys.stderr)
            return 1
    return 0


def installed_version() -> str:
    """The installed package's version (`pip install -e .` included), or `unknown` when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("coding-harness")
    except PackageNotFoundError:
        return "unknown (not installed)"


def backend_choices() -> list[str]:
    """`auto` and the rows of the backend table, read when the parser is built."""
    return ["auto", *SANDBOX_BACKENDS]


"""The sandbox backends a `--backend` flag takes (`auto`: Docker when its daemon answers, else bubblewrap)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description="RL harness for coding agents.")
    parser.add_argument("--version", action="version", version=f"harness {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_sandbox_commands(sub)
    add_env_parser(sub)
    add_tasks_commands(sub)
    add_grade_command(sub)
    add_rollout_command(sub)
    add_serve_and_view_commands(sub)
    add_training_commands(sub)
    add_model_command(sub)
    add_run_commands(sub)
    add_demo_command(sub)
    return parser


def add_sandbox_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sandbox = sub.add_parser("sandbox", help="run commands in a sandbox")
    sandbox_sub = sandbox.add_subparsers(dest="sandbox_command", required=True)
    for name, func, help_text in (
        ("run", cmd_sandbox_run, "run one command in a fresh sandbox and print a JSON result"),
        ("shell", cmd_sandbox_shell, "an interactive shell in a fresh sandbox"),
    ):
        p = sandbox_sub.add_parser(name, help=help_text)
        p.add_argument(
            "--backend", default="auto", choices=backend_choices(), help="the sandbox backend (default: auto)"
        )
        p.add_argument("--dir", default=None, help="folder copied into the sandbox's /repo")
        p.add_argument("--timeout", type=float, default=None, help="hard timeout of a command, seconds")
        p.add_argument("--image", default=None, help="Docker image of the sandbox")
        if name == "run":
            p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...")
        p.set_defaults(func=func)
    p = sandbox_sub.add_parser("reap", help="remove sandboxes left behind by dead runs")
    p.set_defaults(func=cmd_sandbox_reap)
    p = sub.add_parser("sandbox-server", help="serve this host's sandboxes to rollouts on other hosts")
    add_server_arguments(p)
    p.set_defaults(func=serve_sandboxes)


def add_tasks_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_tasks_validate)
    add_import_commands(tasks_sub)
    add_synth_command(tasks_sub)
    add_mine_command(tasks_sub)


def add_grade_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def add_rollout_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("rollout", help="run G rollouts of each task of a suite with a policy, graded")
    p.add_argument("--config", type=Path, default=None, help="a YAML rollout config")
    p.add_argument("--suite", default=None, help="a built-in suite's name or a suite folder")
    p.add_argument(
        "--policy", default=None, help="hf:PATH, tito:MODEL@URL, openai:MODEL@URL, scripted:gold, ..."
    )
    p.add_argument("--tasks", default=None, help="comma-separated task ids")
    p.add_argument("--group-size", type=int, default=None, help="rollouts per task (G)")
    p.add_argument("--concurrency", type=int, default=None, help="episodes at once (C)")
    p.add_argument(
        "--backend", default=None, choices=backend_choices(), help="the sandbox backend (default: auto)"
    )
    p.add_argument("--out", default=None, help="the run directory (runs/NAME)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--keep-failed",
        action="store_true",
        help="continuing a run: episodes that ended in infra_error count as done (default: run them again)",
    )
    p.add_argument("overrides", nargs="*", help="key=value settings, e.g. summary.trigger_tokens=2048")
    add_print_config(p)
    p.set_defaults(func=cmd_rollout)


def add_serve_and_view_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve", help="serve a Hugging Face model over an OpenAI-compatible API (token ids in and out)"
    )
    p.add_argument("--model", required=True, help="a Hugging Face model folder")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser(
        "view", help="a local web viewer of a run: trajectories, tokens, groups, training plots"
    )
    p.add_argument("run", type=Path, help="a run directory (runs/NAME)")
    p.add_argument(
        "--port", type=int, default=8600, help="port on 127.0.0.1 (default 8600; 0: any free port)"
    )
    p.set_defaults(func=cmd_view)


def add_training_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, help_text in (
        ("train", "GRPO: roll out groups with the current policy, grade, update, repeat"),
        ("sft", "supervised warm start on gold trajectories of a suite"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--config", type=Path, default=None, help="a YAML config")
        p.add_argument("overrides", nargs="*", help="key=value settings, e.g. learner.lr=1e-5 model=PATH")
        if name == "train":
            p.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
            p.add_argument(
                "--allow-changes",
                action="store_true",
                help="resume with settings other than the run's, on purpose (recorded in RUN/changes.jsonl)",
            )
        add_print_config(p)
        p.set_defaults(func=cmd_train if name == "train" else cmd_sft)


def add_model_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    model = sub.add_parser("model", help="make a model folder to serve, roll out or train")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    p = model_sub.add_parser(
        "tiny",
        help="a tiny Qwen2-shaped model from random weights and a tokenizer trained here (no download): "
        "for trying serve, tito:, rollouts and training on a CPU",
    )
    p.add_argument("--out", type=Path, required=True, help="the model folder to write")
    p.add_argument(
        "--seed", type=int, default=0, help="the weights' seed; the same seed gives the same files"
    )
    p.add_argument("--hidden-size", type=int, default=64, help="width of the model (default: 64)")
    p.add_argument("--layers", type=int, default=2, help="transformer layers (default: 2)")
    p.set_defaults(func=cmd_model_tiny)


def cmd_model_tiny(args: argparse.Namespace) -> int:
    from policies.tiny import build_tiny_model

    if args.out.exists() and any(args.out.iterdir()):
        raise ConfigError(f"--out {args.out}: not empty; a model is written only into a new or empty folder")
    try:
        path = build_tiny_model(args.out, seed=args.seed, hidden_size=args.hidden_size, layers=args.layers)
    except ValueError as e:
        raise ConfigError(f"harness model tiny: {e}") from e
    print(f"{path}: a tiny model (random weights, {args.layers} layers, width {args.hidden_size}). Try:")
    print(f"  harness serve --model {path} --port 8000")
    print(f"  harness rollout --policy hf:{path} --suite demo --out runs/tiny-rollout")
    print(f"  harness train --config examples/train.yaml model={path}")
    return 0


def add_demo_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo",
        help="the main job on built-in defaults: build a tiny model, warm-start it, train it with GRPO",
    )
    demo.add_argument(
        "--backend", default="auto", choices=backend_choices(), help="the sandbox backend (default: auto)"
    )
    demo.add_argument(
        "--out", type=Path, default=Path("runs/demo"), help="the run directory (default: runs/demo)"
    )
    demo.add_argument(
        "--episode",
        action="store_true",
        help="instead: one scripted episode of a built-in task, every tool call and observation shown",
    )
    demo.add_argument(
        "overrides", nargs="*", help="key=value settings of the training demo (e.g. grpo_steps=6)"
    )
    demo.set_defaults(func=cmd_demo)


def add_import_commands(tasks_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    from tasks.swebench import InstanceEnvironment, import_swebench, load_environments

    defaults = InstanceEnvironment(
        image=args.image, setup_commands=args.setup_command, test_command=args.test_command
    )
    environments = load_environments(args.environments) if args.environments else {}
    reader = None
    if not args.no_env:  # the build backends run in sandboxes of this backend
        reader = environment_reader(SandboxConfig.model_validate({"backend": resolve_backend(args.backend)}))
    report = import_swebench(args.file, args.repos, args.out, defaults, environments, reader)
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


def add_synth_command(tasks_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = tasks_sub.add_parser(
        "synth", help="make bug-fix tasks from a Python repository with a pytest suite, by mutation"
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
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_tasks_synth)


def cmd_tasks_synth(args: argparse.Namespace) -> int:
    from envs.synthesis import synthesize_suite
    from tasks.synth import SynthConfig, Trial, fetch_sdist

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


def add_mine_command(tasks_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.add_argument("--no-validate", action="store_true", help="keep tasks without validating them")
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
        }
    )

    def show(result: Mined | Dropped) -> None:
        if args.json:
            return
        if isinstance(result, Mined):
            print(
                f"{result.commit[:10]} kept {result.id}: {result.fail_to_pass} FAIL_TO_PASS", file=sys.stderr
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
    tasks = select_tasks(args.suite, args.tasks)
    config = SandboxConfig.model_validate({"backend": resolve_backend(args.backend)})
    console = Console(stderr=True)
    results: list[Validation] = []
    with (
        Progress(console=console, transient=args.json) as progress,
        ThreadPoolExecutor(max(1, args.concurrency)) as pool,
    ):
        bar = progress.add_task(f"validating on {config.backend}", total=len(tasks))
        futures = [pool.submit(validate_task, task, config, args.repeats, not args.check) for task in tasks]
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
        for r in results:
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
        print(f"{len(results) - len(failed)}/{len(results)} tasks valid on {config.backend}")
        if failed:
            print("invalid: " + ", ".join(failed))
        if weak:
            print("weaker, no canary (a forger that passes every test goes unseen): " + ", ".join(weak))
    return 1 if failed else 0


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


def add_print_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved settings (defaults, file, flags, overrides) as YAML, each with what it "
        "does as a comment, and stop",
    )


def printed_config(config: BaseModel) -> int:
    """The resolved settings as a YAML file a user can start from (`--config`), each setting's docstring
    as its comment."""
    print(commented_yaml(config), end="")
    return 0


def cmd_rollout(args: argparse.Namespace) -> int:
    base: dict[str, object] = {}
    for flag, key in (
        ("suite", "suite"),
        ("policy", "policy"),
        ("group_size", "group_size"),
        ("concurrency", "concurrency"),
        ("out", "out"),
    ):
        if getattr(args, flag) is not None:
            base[key] = getattr(args, flag)
    if args.tasks is not None:
        base["tasks"] = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if args.backend is not None:
        base["sandbox"] = {"backend": args.backend}
    config = load_config(RolloutConfig, args.config, args.overrides, base)
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


def cmd_serve(args: argparse.Namespace) -> int:
    from harness.serve import serve

    if not Path(args.model).is_dir():
        raise SystemExit(f"harness serve: --model {args.model}: not a model folder")
    serve(args.model, host=args.host, port=args.port)
    return 0


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


def check_model_folder(model: Path, config: Path | None) -> None:
    if not model.is_dir():
        where = f"config {config}" if config else "config"
        raise ConfigError(f"{where}: model: {model} is not a folder (a Hugging Face model folder is needed)")


def cmd_train(args: argparse.Namespace) -> int:
    from harness.training.checkpoint import latest_checkpoint
    from harness.training.continuation import check_continues, resume_command
    from harness.training.train import TrainConfig, train

    config = load_config(TrainConfig, args.config, args.overrides)
    if args.print_config:
        return printed_config(config)
    check_model_folder(config.model, args.config)
    console = Console(stderr=True)
    for change in check_continues(config, config.rollout.out, args.resume, args.allow_changes):
        console.print(f"changed on purpose (recorded in {config.rollout.out / 'changes.jsonl'}): {change}")

    def show(step: int, metrics: dict[str, float]) -> None:
        console.print(
            f"step {step + 1}/{config.steps}: reward {metrics['reward_mean']:.3f} pass {metrics['pass_rate']:.3f} "
            f"loss {metrics.get('loss', 0.0):+.4f} grad {metrics.get('grad_norm', 0.0):.3f} "
            f"rollout {metrics['time_rollout_s']:.1f}s learn {metrics['time_learn_s']:.1f}s"
        )

    out = config.rollout.out
    try:
        train(config, resume=args.resume, on_step=show)
    except KeyboardInterrupt:
        saved = latest_checkpoint(out / "checkpoints")
        where = f"its last checkpoint is {saved}" if saved else "it has no checkpoint yet"
        go_on = resume_command(sys.argv[1:])
        print(f"interrupted: {out} keeps what was done, and {where}; go on with: {go_on}", file=sys.stderr)
        return 130
    console.print(f"metrics: {out / 'metrics.jsonl'}; checkpoints: {out / 'checkpoints'}")
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from harness.training.continuation import check_fresh
    from harness.training.sft import SFTConfig, run_sft

    config = load_config(SFTConfig, args.config, args.overrides)
    if args.print_config:
        return printed_config(config)
    check_model_folder(config.model, args.config)
    check_fresh(
        config.out, ["model"], "a warm-started model (model/)",
        "choose another out (its demonstrations are reused from the same folder only while model/ is not there)",
    )  # fmt: skip
    console = Console(stderr=True)
    model = run_sft(
        config, on_step=lambda step, m: console.print(f"sft step {step + 1}: loss {m['loss']:.4f}")
    )
    console.print(f"warm-started model: {model}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.episode:
        from harness.demo import run_demo

        return run_demo(args.backend)
    from harness.training.continuation import check_fresh
    from harness.training.train_demo import DemoConfig, run_training_demo

    config = load_config(DemoConfig, None, args.overrides, {"backend": args.backend, "out": str(args.out)})
    check_fresh(
        config.out, ["*"], "a run",
        f"pass --out {config.out}-2 (or another new folder); warm_start_from={config.out} reuses its warm start",
    )  # fmt: skip
    result = run_training_demo(config)
    if result.final_pass_rate > result.baseline_pass_rate:
        return 0
    Console(stderr=True).print(
        f"The pass rate did not rise ({result.baseline_pass_rate:.3f} after the warm start, "
        f"{result.final_pass_rate:.3f} after GRPO), so the demo exits 1. With few steps and samples a run "
        "can miss: the defaults (`harness demo`) rose on 10 of 10 seeds; more `grpo_steps` or "
        "`group_size` help. The run folder above holds every rollout to look at."
    )
    return 1


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


def add_run_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.set_defaults(func=cmd_export)


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

    result = export(args.run, args.format, selection(args), args.out, args.suite)
    print(f"wrote {result.rows} rows ({result.trajectories} trajectories) to {result.path}")
    for note in result.notes:
        print(f"harness: {note}", file=sys.stderr)
    return 1 if result.skipped else 0


def main(argv: Sequence[str] | None = None) -> int:
    install_signal_handlers()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except ValidationError as e:
        print(f"harness: invalid setting: {e}", file=sys.stderr)
        return 2
    except SandboxError as e:
        print(f"harness: sandbox error: {e}", file=sys.stderr)
        return 3
    except (TaskError, ConfigError, PolicySpecError, RunError, RunFileError) as e:
        print(f"harness: {e}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
