"""The Task: a repository at a base commit, a problem, hidden tests and a gold patch."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tasks.canaries import Canary
from tasks.computed import ComputedFile
from tasks.environment import Environment

TASK_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
"""What a task id may look like: it names a folder and an image."""
LANGUAGE = r"^[a-z][a-z0-9_+-]*$"
"""What a language's name may look like (the plug-ins are named in `envs.languages.LANGUAGES`)."""
HINT_SUFFIX = ".hint"
"""Ends the id of a hint task: a task with its privileged context in its statement, whose rollouts train
as learnable successes (harness/training/hints.py) and never leave the run in an export."""
CRITIQUE_SUFFIX = ".critique"
"""Ends the id of a refined task: a task with a critique of a failed rollout in its statement
(harness/training/critique.py); exports leave its rollouts out unless asked."""


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
    test_file_timeout_s: float = Field(default=120.0, gt=0)
    """Time one hidden test file (or canary) may run at grading, in its child; past it the child is
    stopped and its tests count as failed (a canary's as unexplained), and the other files still run."""


class Verifier(BaseModel):
    """A script that judges the repository once the agent is done (a Harbor task's tests/test.sh)."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1)
    """Shell command run from the repository in the grading sandbox, after `files` are written."""
    files: dict[str, str] = Field(default_factory=dict)
    """Absolute sandbox path -> content of each file it needs; written at grading only."""
    reward_dir: str | None = "/logs/verifier"
    """Where it writes reward.json ({"reward": x}) or reward.txt (x), x in [0, 1]; None: exit status 0 is 1."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of the command."""


class HiddenTests(BaseModel):
    """Tests the agent never sees; written over its repository at grading."""

    model_config = ConfigDict(extra="forbid")

    files: dict[str, str] = Field(default_factory=dict)
    """Repository path -> content of each hidden test file."""
    fail_to_pass: list[str] = Field(default_factory=list)
    """pytest node ids that fail at the base commit and must pass after the fix."""
    pass_to_pass: list[str] = Field(default_factory=list)
    """pytest node ids that pass at the base commit and must keep passing."""
    verifier: Verifier | None = None
    """Instead of test ids: a script whose reward decides the grade."""
    canaries: list[Canary] = Field(default_factory=list)
    """Copies of hidden test files with one wrong expectation, which the gold patch fails; graded beside
    the real tests, one that passes marks the grade as tampered (`tasks/canaries.py`)."""
    computed: dict[str, ComputedFile] = Field(default_factory=dict)
    """Hidden file path -> expected sides of its assertions that code builds, as the gold tree computed
    them when the task was validated; held by the grader, never written into the sandbox
    (`tasks/computed.py`)."""

    @model_validator(mode="after")
    def _one_judge(self) -> HiddenTests:
        check_judge(self.fail_to_pass, self.pass_to_pass, self.verifier is not None)
        return self


def check_judge(fail_to_pass: list[str], pass_to_pass: list[str], has_verifier: bool) -> None:
    """A task is judged by pytest ids or by a verifier: exactly one of them."""
    if has_verifier and (fail_to_pass or pass_to_pass):
        raise ValueError("fail_to_pass / pass_to_pass and a verifier: give one of them, not both")
    if not has_verifier and not fail_to_pass:
        raise ValueError("fail_to_pass: give at least one test id (or a verifier)")


class Task(BaseModel):
    """One task, fully resolved: `repo` is a folder holding the repository at its base commit."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=TASK_ID)
    title: str
    repo: Path
    """The repository at the base commit (a git work tree whose history ends there, or a plain folder)."""
    repo_name: str = ""
    """A short name of the repository, for listings."""
    base_commit: str | None = None
    problem_statement: str
    setup_commands: list[str] = Field(default_factory=list)
    """Shell commands run in the sandbox before the agent starts (and before grading)."""
    environment: Environment | None = None
    """The packages its code and tests need, built outside /repo by `harness env build`; None: the
    sandbox's own Python and pytest."""
    language: str = Field(default="python", pattern=LANGUAGE)
    """The language of its code and tests: the plug-in that judges its tree and runs its hidden tests
    (a row of `envs.languages.LANGUAGES`: python, rust)."""
    test_command: str = "python3 -m pytest -q"
    """The visible test command the agent's run_tests tool runs."""
    hidden_tests: HiddenTests
    gold_patch: str | None = None
    """A unified diff (git format) from the base commit to a correct fix."""
    image: str | None = None
    """Docker image of the sandbox; None means the configured default."""
    image_build: Path | None = None
    """A Docker build context (a folder with a Dockerfile) that makes `image`; built offline when missing."""
    limits: Limits = Field(default_factory=Limits)
    tools: list[str] | None = None
    """Tools the agent may use; None means all."""
    folder: Path | None = None
    """The task's folder in its suite, where `tasks validate` keeps the canaries it verified."""

    @model_validator(mode="after")
    def _built_image_has_a_name(self) -> Task:
        if self.image_build is not None and self.image is None:
            raise ValueError("image_build: give the image's name too (image)")
        return self

    def setup(self) -> list[str]:
        """Every command run before the agent starts: what the environment makes in /repo (a version
        file), then the task's own setup commands."""
        made = self.environment.setup_commands() if self.environment is not None else []
        return [*made, *self.setup_commands]

    def prompt(self) -> str:
        """The task as the agent first sees it."""
        return (
            f"# {self.title}\n\n{self.problem_statement.strip()}\n\n"
            f"The repository is checked out at /repo. Its tests run with `{self.test_command}`. "
            "Fix the problem with the tools, then call submit."
        )
