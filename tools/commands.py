"""The tools that run commands: run_tests and bash."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from envs.sandbox import CommandResult, Sandbox
from tools.base import Observation, ToolError
from tools.paths import resolve

# The command runs under bash where the sandbox has it (the model writes bash), else under sh. The
# command is an argument of the script, never part of it.
BASH = 'if command -v bash >/dev/null; then exec bash -c "$1"; fi; exec sh -c "$1"'


def command_observation(result: CommandResult) -> Observation:
    """The output, then how the command ended. A timeout or a failed sandbox is an error; an exit code is not."""
    parts = [result.output.rstrip("\n") or "(no output)"]
    if result.timed_out:
        parts.append(f"timed out after {result.duration_s:.1f} s; the command was killed")
    elif result.exit_code is not None:
        parts.append(f"exit code {result.exit_code}")
    if result.failure is not None:
        parts.append(f"the sandbox failed: {result.failure}")
    if result.replaced and result.carried_over:
        parts.append("the sandbox was replaced by a fresh one: files were kept, running processes were not")
    elif result.replaced:
        parts.append(
            "the sandbox was replaced by a fresh one: its files could not be copied out, so the repository "
            "is back at the task's start state; running processes were not kept"
        )
    return Observation(text="\n\n".join(parts), is_error=result.timed_out or result.failure is not None)


class RunTestsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    paths: list[str] = Field(default_factory=list)
    """Test files, folders or node ids (tests/test_x.py::test_y) to run, relative to the repository root; all the task's visible tests when left out."""


@dataclass(frozen=True)
class RunTests:
    test_command: str
    """The task's visible test command; the paths are appended to it."""
    timeout_s: float | None
    """Timeout of the test run; None uses the sandbox's default."""

    name = "run_tests"
    description = (
        "Run the task's tests, or only the given test files, folders or node ids, and show their "
        "output and exit code."
    )
    Args = RunTestsArgs

    def run(self, sandbox: Sandbox, args: RunTestsArgs) -> Observation:
        for path in args.paths:
            if path.startswith("-"):
                raise ToolError(
                    f"{path!r} is an option, not a path; paths are test files, folders or node ids"
                )
            resolve(sandbox, path)
        command = " ".join([self.test_command, *map(shlex.quote, args.paths)])
        return command_observation(sandbox.run(command, timeout=self.timeout_s))


class BashArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    command: str = Field(min_length=1)
    """Shell command, run with bash in the repository root."""


@dataclass(frozen=True)
class Bash:
    timeout_s: float | None
    """Timeout of one command; None uses the sandbox's default."""

    name = "bash"
    description = (
        "Run a shell command in the repository root and show its output (stdout and stderr together) "
        "and exit code. No network. Every command has a timeout; processes it leaves behind are killed."
    )
    Args = BashArgs

    def run(self, sandbox: Sandbox, args: BashArgs) -> Observation:
        return command_observation(
            sandbox.run(["sh", "-c", BASH, "sh", args.command], timeout=self.timeout_s)
        )
