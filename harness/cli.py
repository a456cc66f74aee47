"""The `harness` command line: the command groups of `harness/commands/` wired into one parser, and how
each kind of error ends the process. The commands that run settings (`rollout`, `train`, `sft`, `demo`)
take their flags from the settings models (`harness/commands/settings.py`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from envs.lifecycle import install_signal_handlers
from envs.sandbox import SandboxError
from harness.commands import rollout, runs, sandbox, tasks, training
from harness.commands.settings import CommandParser
from harness.config import ConfigError
from harness.inspection.runs import RunError
from harness.rollouts.store import RunFileError
from policies.spec import PolicySpecError
from tasks.suite import TaskError

GROUPS = (sandbox, tasks, rollout, training, runs)
"""The command groups, in the order `harness --help` lists their commands."""


def installed_version() -> str:
    """The installed package's version (`pip install -e .` included), or `unknown` when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("coding-harness")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> CommandParser:
    parser = CommandParser(prog="harness", description="RL harness for coding agents.")
    parser.add_argument("--version", action="version", version=f"harness {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    for group in GROUPS:
        group.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    install_signal_handlers()
    args = build_parser().parse_args(argv)
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


def complete_parser() -> argparse.ArgumentParser:
    """`build_parser()` with every command's settings flags made (their models imported): for checks
    that read every flag without parsing, such as the READMEs' commands in the tests."""
    parser = build_parser()
    todo: list[argparse.ArgumentParser] = [parser]
    while todo:
        found = todo.pop()
        if isinstance(found, CommandParser):
            found.fill()
        for action in found._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += action.choices.values()
    return parser


if __name__ == "__main__":
    sys.exit(main())
