"""The run directory: append-only, fsynced trajectory lines that survive `kill -9` (DESIGN.md, contract 7).

    runs/NAME/config.yaml          the full resolved config
    runs/NAME/trajectories.jsonl   one trajectory a line, schema_version first
    runs/NAME/metrics.jsonl        one line per training step or rollout batch
    runs/NAME/learner.jsonl        training runs: one `SegmentAdvantage` line per trained segment

A line is written whole with one `write` and fsynced before the next is started. A reader skips a torn
last line (a crash mid-write); a writer cuts that torn tail off before it appends, so a restarted run
continues where it stopped with every finished trajectory read exactly once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from harness.trajectory import Trajectory

LEARNER_FILE = "learner.jsonl"


class SegmentAdvantage(BaseModel):
    """One line of a training run's learner.jsonl: a trained segment's advantage and the learner's log-prob
    of each model-produced token, in order (the sampler's are in the trajectory)."""

    model_config = ConfigDict(extra="forbid")

    step: int
    trajectory_id: str
    segment: int
    advantage: float
    learner_logprobs: list[float]


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.trajectories_path = root / "trajectories.jsonl"
        self.metrics_path = root / "metrics.jsonl"
        self.learner_path = root / LEARNER_FILE

    def create(self, config: BaseModel | dict[str, Any]) -> None:
        """Makes the folder and writes the resolved config (atomically)."""
        self.root.mkdir(parents=True, exist_ok=True)
        data = config.model_dump(mode="json") if isinstance(config, BaseModel) else config
        write_atomic(self.root / "config.yaml", yaml.safe_dump(data, sort_keys=False).encode())
        for path in (self.trajectories_path, self.metrics_path):
            cut_torn_tail(path)

    def append_trajectory(self, trajectory: Trajectory) -> int:
        """Appends one trajectory line and fsyncs it; returns the bytes written."""
        return append_line(self.trajectories_path, trajectory.model_dump_json())

    def append_metrics(self, metrics: dict[str, Any]) -> None:
        append_line(self.metrics_path, json.dumps(metrics))

    def trajectories(self) -> Iterator[Trajectory]:
        """Every complete trajectory line; a torn last line is skipped; a foreign line is an error."""
        for number, line in read_lines(self.trajectories_path):
            try:
                yield Trajectory.model_validate_json(line)
            except ValueError as e:
                raise ValueError(f"{self.trajectories_path}:{number}: not a trajectory: {e}") from e

    def done(self) -> set[tuple[str, int]]:
        """(task id, sample index) of every finished trajectory, to skip on restart."""
        done = set()
        for _, line in read_lines(self.trajectories_path):
            head = json.loads(line)
            done.add((head["task_id"], head["sample_index"]))
        return done


def append_line(path: Path, text: str) -> int:
    data = text.encode() + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        while written < len(data):  # a short write on a full disk; finish it or fail loudly
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(data)


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every complete line; the last one is skipped when torn."""
    if not path.exists():
        return
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.endswith(b"\n"):
                return  # torn by a crash mid-write
            text = raw.decode()
            if text.strip():
                yield number, text


def cut_torn_tail(path: Path) -> None:
    """Truncates a file to its last newline, so appends start on a fresh line."""
    if not path.exists():
        return
    with path.open("rb+") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1
        if end != len(data):
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())


def write_atomic(path: Path, data: bytes) -> None:
    """Writes to a temporary name, fsyncs, and renames over `path`."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
