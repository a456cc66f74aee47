"""The run store: append-only, torn lines skipped and cut, foreign lines named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.agent.trajectory import Trajectory
from harness.rollouts.store import RunStore, write_atomic


def trajectory(task: str, sample: int) -> Trajectory:
    return Trajectory(
        id=f"{task}/{sample}", run="r", task_id=task, group_id=f"{task}@v0", sample_index=sample,
        policy="scripted:gold", seed=sample, trainable=False,
    )  # fmt: skip


def test_lines_start_with_the_schema_version_and_round_trip(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.create({"suite": "builtin"})
    store.append_trajectory(trajectory("a", 0))
    store.append_trajectory(trajectory("a", 1))
    lines = store.trajectories_path.read_text().splitlines()
    assert all(line.startswith('{"schema_version":1,') for line in lines)
    assert [t.id for t in store.trajectories()] == ["a/0", "a/1"]
    assert store.done() == {("a", 0), ("a", 1)}
    assert (tmp_path / "run" / "config.yaml").read_text() == "suite: builtin\n"


def test_a_torn_last_line_is_skipped_then_cut_before_the_next_append(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.create({})
    store.append_trajectory(trajectory("a", 0))
    with store.trajectories_path.open("a") as f:
        f.write('{"schema_version": 1, "id": "a/1", "ta')
    assert [t.id for t in store.trajectories()] == ["a/0"]
    assert store.done() == {("a", 0)}
    RunStore(tmp_path / "run").create({})  # a restart
    store.append_trajectory(trajectory("a", 1))
    assert [t.id for t in store.trajectories()] == ["a/0", "a/1"]


def test_a_foreign_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.create({})
    store.append_trajectory(trajectory("a", 0))
    with store.trajectories_path.open("a") as f:
        f.write('{"hello": "world"}\n')
    with pytest.raises(ValueError, match=r"trajectories.jsonl:2: not a trajectory"):
        list(store.trajectories())


def test_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "x.yaml"
    write_atomic(target, b"a: 1\n")
    write_atomic(target, b"a: 2\n")
    assert target.read_text() == "a: 2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["x.yaml"]


def test_a_new_start_removes_what_a_killed_write_left_but_not_a_live_one(tmp_path: Path) -> None:
    """A run killed inside `write_atomic` leaves `.config.yaml.tmp-PID`; the next start removes it, while
    a temporary file of a live process (a write in flight) stays."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    left = tmp_path / f".config.yaml.tmp-{int(dead.stdout)}"
    in_flight = tmp_path / f".metrics.jsonl.tmp-{os.getpid()}"
    for path in (left, in_flight):
        path.write_text("half")
    RunStore(tmp_path).create({"policy": "scripted:gold"})
    assert not left.exists()
    assert in_flight.exists()
    assert (tmp_path / "config.yaml").read_text() == "policy: scripted:gold\n"
