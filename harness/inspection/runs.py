"""Reading a finished or growing run directory: its trajectories, a selection of them, what its
config.yaml says about how they were made, and (training runs) the advantage of each trained segment.

Shared by `harness runs`, `harness replay` (views and re-execution) and `harness export`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envs.reward import RewardConfig
from envs.sandbox import SandboxConfig
from harness.agent.loop import LoopConfig
from harness.agent.trajectory import Status, Trajectory
from harness.rollouts.config import tools_from_loop
from harness.rollouts.store import (
    LEARNER_FILE,
    RunFileError,
    RunStore,
    SegmentAdvantage,
    line_problem,
    parse_trajectory,
    read_lines,
    torn_tail,
)
from tasks.model import Task
from tasks.suite import TaskError, load_suite
from tools import ToolsConfig


class RunError(ValueError):
    """A run, trajectory or task that is not there; the message is one line for the user."""


class RunSetup(BaseModel):
    """How a run's trajectories were made, from its config.yaml (a rollout's or a training run's)."""

    model_config = ConfigDict(extra="forbid")

    suite: str
    loop: LoopConfig
    sandbox: SandboxConfig
    reward: RewardConfig
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    """The tools' settings (runs written before they had a section: the defaults, and `loop.bash_enabled`)."""


class Selection(BaseModel):
    """Which trajectories of a run a command works on; every field left out matches all."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    task: str | None = None
    group: str | None = None
    status: list[Status] | None = None
    min_reward: float | None = None
    max_reward: float | None = None

    def matches(self, t: Trajectory) -> bool:
        return (
            (self.id is None or t.id == self.id)
            and (self.task is None or t.task_id == self.task)
            and (self.group is None or t.group_id == self.group)
            and (self.status is None or t.status in self.status)
            and (self.min_reward is None or t.reward >= self.min_reward)
            and (self.max_reward is None or t.reward <= self.max_reward)
        )


def is_run(path: Path) -> bool:
    """Whether `path` is a run folder: it holds trajectories.jsonl or config.yaml."""
    return (path / "trajectories.jsonl").exists() or (path / "config.yaml").exists()


def open_run(path: Path) -> RunStore:
    if not path.is_dir():
        raise RunError(f"no run directory at {path}")
    if not is_run(path):
        raise RunError(f"{path} is not a run directory: it has no trajectories.jsonl or config.yaml")
    return RunStore(path)


def summary_line(run: RunRead) -> tuple[str, str, str, str]:
    """A run in one line: its trajectories, how many solved their task, the mean reward, the policies."""
    found = run.trajectories
    solved = sum(1 for t in found if t.grade is not None and t.grade.correct == 1.0)
    mean = sum(t.reward for t in found) / len(found) if found else 0.0
    policies = ", ".join(sorted({t.policy for t in found})) or "-"
    return str(len(found)), str(solved), f"{mean:.3f}", policies


@dataclass(frozen=True)
class RunRead:
    """A run's trajectories.jsonl as a reader finds it: every trajectory, and what it had to skip."""

    root: Path
    trajectories: list[Trajectory]
    """In the order the run wrote them."""
    skipped: list[str]
    """`FILE:LINE: why` of each line that is not a trajectory (another tool's line, a hand edit)."""
    torn_bytes: int
    """Size of a torn last line (a crash mid-write, or a line being written), skipped; 0: none."""

    def notes(self) -> list[str]:
        """What a reader tells the user about the lines it did not read."""
        skipped = [f"{line}: skipped" for line in self.skipped]
        if self.torn_bytes:
            path = self.root / "trajectories.jsonl"
            skipped.append(
                f"{path}: its last line is torn ({self.torn_bytes} bytes without a newline: a crash "
                "mid-write, or a line being written): skipped"
            )
        return skipped


def read_run(store: RunStore) -> RunRead:
    """Every trajectory of the run; a line that is not one is skipped and named, so that the rest stays
    readable."""
    trajectories, skipped = [], []
    for number, line in read_lines(store.trajectories_path):
        try:
            trajectories.append(parse_trajectory(store.trajectories_path, number, line))
        except RunFileError as e:
            skipped.append(str(e))
    return RunRead(store.root, trajectories, skipped, torn_tail(store.trajectories_path))


def select(run: RunRead, selection: Selection) -> list[Trajectory]:
    """The matching trajectories in the order the run wrote them; an unknown --id or --task is an error."""
    everything = run.trajectories
    chosen = [t for t in everything if selection.matches(t)]
    if selection.id is not None and not any(t.id == selection.id for t in everything):
        raise RunError(f"no trajectory {selection.id!r} in {run.root}; `harness runs {run.root}` lists them")
    if selection.task is not None and not any(t.task_id == selection.task for t in everything):
        known = sorted({t.task_id for t in everything})
        raise RunError(f"no trajectory of task {selection.task!r} in {run.root} (tasks: {', '.join(known)})")
    return chosen


def follow(
    store: RunStore, poll_s: float = 0.3, on_skip: Callable[[str], None] | None = None
) -> Iterator[Trajectory]:
    """Every trajectory of the run, then each new one as it is written; runs until interrupted. A line that
    is not a trajectory is skipped, and `on_skip` gets `FILE:LINE: why`."""
    offset, number = 0, 0
    while True:
        if store.trajectories_path.exists():
            with store.trajectories_path.open("rb") as f:
                f.seek(offset)
                data = f.read()
            complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for its newline
            offset += len(complete)
            for raw in complete.splitlines():
                number += 1
                if not raw.strip():
                    continue
                try:
                    yield parse_trajectory(
                        store.trajectories_path, number, raw.decode("utf-8", "surrogateescape")
                    )
                except RunFileError as e:
                    if on_skip is not None:
                        on_skip(str(e))
        time.sleep(poll_s)


def load_setup(root: Path, suite: str | None = None) -> RunSetup:
    """The run's suite (or `suite` instead), loop, sandbox and reward settings.

    A rollout config holds these four parts at its top level, a training config in its `rollout` section
    (at the top level too in runs written before that); only they are read (each strictly), so a training
    run's config is read without importing the trainer.
    """
    path = root / "config.yaml"
    if not path.is_file():
        raise RunError(f"{root} has no config.yaml: cannot tell how its trajectories were made")
    try:
        data = yaml.safe_load(path.read_bytes().decode())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise RunError(f"{path}: not a readable YAML file: {' '.join(str(e).split())}") from e
    if not isinstance(data, dict):
        raise RunError(f"{path}: not a run config")
    nested = data.get("rollout")  # a training run's rollout settings (since they moved into `rollout`)
    source = nested if isinstance(nested, dict) else data
    parts = tools_from_loop({name: source[name] for name in RunSetup.model_fields if name in source})
    if suite is not None:
        parts["suite"] = suite
    try:
        return RunSetup.model_validate(parts)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise RunError(f"{path}: not a rollout or training config: {problems}") from e


def load_tasks(setup: RunSetup) -> dict[str, Task]:
    try:
        return {task.id: task for task in load_suite(setup.suite)}
    except TaskError as e:
        raise RunError(f"{e}; give the run's suite with --suite") from e


def advantages(root: Path, skipped: list[str] | None = None) -> dict[str, list[SegmentAdvantage]]:
    """Trajectory id -> its trained segments (training runs; empty for rollout runs). A line that is not a
    learner line is skipped, so that the rest stays readable; `FILE:LINE: why` of each goes to `skipped`."""
    found: dict[str, list[SegmentAdvantage]] = {}
    for number, line in read_lines(root / LEARNER_FILE):
        try:
            entry = SegmentAdvantage.model_validate_json(line)
        except ValidationError as e:
            if skipped is not None:
                skipped.append(f"{root / LEARNER_FILE}:{number}: {line_problem(e, 'learner line')}")
            continue
        found.setdefault(entry.trajectory_id, []).append(entry)
    return found
