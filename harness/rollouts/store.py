"""The run directory: append-only, fsynced trajectory lines that survive `kill -9` (DESIGN.md, contract 7).

    runs/NAME/config.yaml          the full resolved config
    runs/NAME/trajectories.jsonl   one trajectory a line, schema_version first
    runs/NAME/metrics.jsonl        one line per training step or rollout batch
    runs/NAME/learner.jsonl        training runs: one `SegmentAdvantage` line per trained segment

A line is written whole with one `write` and fsynced before the next is started. A reader skips a torn
last line (a crash mid-write); a writer cuts that torn tail off before it appends, so a restarted run
continues where it stopped with every finished trajectory read exactly once. A run whose file holds
any other line that is not a trajectory (another tool's, a hand edit) is not continued: `create` says
which line, before anything is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticSerializationError

from harness.agent.trajectory import Trajectory

LEARNER_FILE = "learner.jsonl"
CRITIQUES_FILE = "critiques.jsonl"


class SegmentAdvantage(BaseModel):
    """One line of a training run's learner.jsonl: a trained segment's advantage and the learner's log-prob
    of each model-produced token, in order (the sampler's are in the trajectory)."""

    model_config = ConfigDict(extra="forbid")

    step: int
    trajectory_id: str
    segment: int
    advantage: float
    learner_logprobs: list[float]
    teacher_logprobs: list[float] | None = None
    """With dense credit (issue 19): the privileged teacher's log-prob of each model-produced token, in
    the same order; None without."""
    token_advantages: list[float] | None = None
    """With dense credit: the advantage each model-produced token was trained with, in order; None when
    every token had `advantage`."""


class CritiqueLine(BaseModel):
    """One line of a training run's critiques.jsonl (`credit.critique`): a critique of a failed rollout,
    as the critic sampled it."""

    model_config = ConfigDict(extra="forbid")

    step: int
    failed_id: str
    """The failed rollout the critic read."""
    index: int
    """j of that rollout's k critiques."""
    text: str
    """The critique as a refined task's statement (or the inserted message) holds it."""
    ids: list[int]
    logprobs: list[float]
    """The sampler's log-prob of each of `ids`."""
    refined_id: str | None = None
    """The refined rollout it started; None with `critique_mode: local`."""


class RunFileError(ValueError):
    """A line of a run file that is not what it should be; the message names the file and the line."""


def line_problem(error: ValidationError, kind: str = "trajectory") -> str:
    """Why a line is not a `kind` (a trajectory, a learner line), on one line."""
    errors = error.errors()
    if errors and errors[0]["type"] == "json_invalid":
        return f"not JSON ({errors[0]['msg'].removeprefix('Invalid JSON: ')})"
    if errors and errors[0]["type"] == "string_unicode":
        return "not UTF-8 text"
    shown = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in errors[:3])
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return f"not a {kind}: {shown}{more}"


def parse_trajectory(path: Path, number: int, line: str) -> Trajectory:
    try:
        return Trajectory.model_validate_json(line)
    except ValidationError as e:
        raise RunFileError(f"{path}:{number}: {line_problem(e)}") from e


def scrubbed(value: Any) -> Any:
    """`value` with every lone surrogate in its strings written out as an escape (\\udcff), so that it
    can be encoded as UTF-8. Surrogates come from JSON escapes in model output and from bytes that are
    not UTF-8 (surrogateescape)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {scrubbed(k): scrubbed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrubbed(v) for v in value]
    return value


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.trajectories_path = root / "trajectories.jsonl"
        self.metrics_path = root / "metrics.jsonl"
        self.learner_path = root / LEARNER_FILE
        self.critiques_path = root / CRITIQUES_FILE

    def own_trajectories(self) -> list[Trajectory]:
        """The trajectories the run file holds, a torn last line aside; RunFileError when a line is not one
        (a continued run must hold only its own)."""
        try:
            return list(self.trajectories())
        except RunFileError as e:
            raise RunFileError(
                f"{e}. A run is continued only on its own trajectories: move that line out of the file "
                "(`harness runs` still shows the others), then run again"
            ) from e

    def create(self, config: BaseModel | dict[str, Any]) -> list[Trajectory]:
        """Makes the folder and writes the resolved config (atomically); returns the trajectories a continued
        run already holds. It must hold only trajectories (a torn last line aside, which is cut): else
        RunFileError, and nothing is written."""
        found = self.own_trajectories()
        self.root.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.root)
        data = config.model_dump(mode="json") if isinstance(config, BaseModel) else config
        write_atomic(self.root / "config.yaml", yaml.safe_dump(data, sort_keys=False).encode())
        for path in (self.trajectories_path, self.metrics_path):
            cut_torn_tail(path)
        return found

    def append_trajectory(self, trajectory: Trajectory) -> int:
        """Appends one trajectory line and fsyncs it; returns the bytes written. A string that cannot be
        UTF-8 (a lone surrogate) is written escaped rather than losing the trajectory."""
        try:
            line = trajectory.model_dump_json()
        except PydanticSerializationError:
            line = Trajectory.model_validate(scrubbed(trajectory.model_dump())).model_dump_json()
        return append_line(self.trajectories_path, line)

    def append_metrics(self, metrics: dict[str, Any]) -> None:
        append_line(self.metrics_path, json.dumps(metrics))

    def trajectories(self) -> Iterator[Trajectory]:
        """Every complete trajectory line; a torn last line is skipped; a foreign line is a RunFileError."""
        for number, line in read_lines(self.trajectories_path):
            yield parse_trajectory(self.trajectories_path, number, line)

    def done(self) -> set[tuple[str, int]]:
        """(task id, sample index) of every finished trajectory, to skip on restart."""
        done = set()
        for number, line in read_lines(self.trajectories_path):
            try:
                head = json.loads(line)
                done.add((str(head["task_id"]), int(head["sample_index"])))
            except (ValueError, KeyError, TypeError) as e:
                raise RunFileError(f"{self.trajectories_path}:{number}: not a trajectory ({e!r})") from e
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
    """(line number, text) of every complete line; the last one is skipped when torn. Bytes that are not
    UTF-8 come through as lone surrogates (surrogateescape), which no parser takes for a trajectory."""
    if not path.exists():
        return
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.endswith(b"\n"):
                return  # torn by a crash mid-write
            text = raw.decode("utf-8", "surrogateescape")
            if text.strip():
                yield number, text


def torn_tail(path: Path) -> int:
    """The size in bytes of a torn last line (a crash mid-write, or a line being written); 0: none."""
    if not path.exists():
        return 0
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size == 0:
            return 0
        f.seek(max(0, size - (1 << 20)))
        tail = f.read()
    end = tail.rfind(b"\n")
    if end == -1 and size > len(tail):
        return 1 << 20  # more than the last MiB without a newline
    return len(tail) - end - 1


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


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Removes the temporary files `write_atomic` left in `folder` when its process was killed mid-write
    (the file it was replacing is whole: old or new); those of a live process are its writes in flight."""
    removed = []
    for path in folder.glob(".*.tmp-*"):
        pid = path.name.rpartition(".tmp-")[2]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


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
