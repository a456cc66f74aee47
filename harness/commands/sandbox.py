"""`harness sandbox` (run, shell, reap), `harness sandbox-server` and `harness env build`."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from envs.backends import reap_strays_everywhere, resolve_backend
from envs.factory import build_task_env, start_sandbox
from envs.lifecycle import reap
from envs.npm_env import needs_npm
from envs.python_env import REQUIREMENTS, build_env, default_env_dir, is_built
from envs.sandbox import SandboxConfig, SandboxError
from harness.commands import Commands, backend_choices
from harness.commands.settings import printed_config, resolved
from tasks.model import Task
from tasks.suite import load_suite


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


def add_env_command(sub: Commands) -> None:
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
        elif needs_npm(task):  # envs/npm_env.py: one node_modules per lock file
            by_environment.setdefault(f"npm {task.repo}", []).append(task)
    for tasks in by_environment.values():
        environment, ids = tasks[0].environment, ", ".join(t.id for t in tasks)
        if not quiet:
            wanted = environment.requirements if environment else ["npm ci (package-lock.json)"]
            print(f"{ids}: {', '.join(wanted) or 'no requirements'}", file=sys.stderr)
        try:
            print(
                f"{ids}: {build_task_env(tasks[0], config, quiet=quiet)}",
                file=sys.stderr if quiet else sys.stdout,
            )
        except SandboxError as e:
            print(f"error: {ids}: {e}", file=sys.stderr)
            return 1
    return 0


SERVER_FLAGS = {"backend": "sandbox.backend", "state-dir": "sandbox.state_dir"}
"""Flags of `harness sandbox-server` for nested settings of `ServerConfig`; its own are made from it."""


def cmd_sandbox_server(args: argparse.Namespace) -> int:
    from envs.sandbox_server import ServerConfig, serve

    config = resolved(args, ServerConfig)
    return printed_config(config) if args.print_config else serve(config)


def add_commands(sub: Commands) -> None:
    add_sandbox_command(sub)
    p = sub.add_parser(
        "sandbox-server",
        help="serve this host's sandboxes to rollouts on other hosts",
        settings="envs.sandbox_server:ServerConfig",
        flags=SERVER_FLAGS,
    )
    p.set_defaults(func=cmd_sandbox_server)
    add_env_command(sub)


def add_sandbox_command(sub: Commands) -> None:
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
