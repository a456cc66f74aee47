"""The Task: a repository at a base commit, a problem, hidden tests and a gold patch."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    """When an episode on this task is cut off."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=50, ge=1)
    """Most model turns in one episode."""
    max_tokens: int = Field(default=65_536, ge=256)
    """Most tokens processed in one episode, summaries included."""
    wall_time_s: float = Field(default=1800.0, gt=0)
    """Wall-clock budget of one episode."""
    command_timeout_s: float = Field(default=60.0, gt=0)
    """Hard timeout of one command of the agent."""
    grade_timeout_s: float = Field(default=300.0, gt=0)
    """Hard timeout of the hidden test run at grading."""


class HiddenTests(BaseModel):
    """Tests the agent never sees; written over its repository at grading."""

    model_config = ConfigDict(extra="forbid")

    files: dict[str, str] = Field(default_factory=dict)
    """Repository path -> content of each hidden test file."""
    fail_to_pass: list[str] = Field(min_length=1)
    """pytest node ids that fail at the base commit and must pass after the fix."""
    pass_to_pass: list[str] = Field(default_factory=list)
    """pytest node ids that pass at the base commit and must keep passing."""


class Task(BaseModel):
    """One task, fully resolved: `repo` is a folder holding the repository at its base commit."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    title: str
    repo: Path
    """The repository at the base commit (a git work tree whose history ends there, or a plain folder)."""
    repo_name: str = ""
    """A short name of the repository, for listings."""
    base_commit: str | None = None
    problem_statement: str
    setup_commands: list[str] = Field(default_factory=list)
    """Shell commands run in the sandbox before the agent starts (and before grading)."""
    test_command: str = "python3 -m pytest -q"
    """The visible test command the agent's run_tests tool runs."""
    hidden_tests: HiddenTests
    gold_patch: str | None = None
    """A unified diff (git format) from the base commit to a correct fix."""
    image: str | None = None
    """Docker image of the sandbox; None means the configured default."""
    limits: Limits = Field(default_factory=Limits)
    tools: list[str] | None = None
    """Tools the agent may use; None means all."""

    def prompt(self) -> str:
        """The task as the agent first sees it."""
        return (
            f"# {self.title}\n\n{self.problem_statement.strip()}\n\n"
            f"The repository is checked out at /repo. Its tests run with `{self.test_command}`. "
            "Fix the problem with the tools, then call submit."
        )
