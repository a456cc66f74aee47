"""Crashes: `kill -9` of `harness rollout` and `harness train` at random moments, each followed by a restart.

50 kills in all (30 of rollouts, 20 of training), at moments drawn from a seeded generator and spread
over start-up, episodes, the append of a trajectory line, learning and checkpoint saves. A run is killed
and restarted until it finishes; then the next run takes the remaining kills. Every finished run must
equal an uninterrupted one: each (task, sample) finished exactly once, with the same content; every file
of the run directory readable; the metrics of each step written once; every checkpoint loadable and the
last one bit-identical to the uninterrupted run's. The next start reaps what each killed run left:
nothing is left at the end.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from safetensors.torch import load_file

from envs.lifecycle import REAPER_LOG
from harness.rollouts.store import read_lines
from harness.training.checkpoint import latest_checkpoint
from tests.conftest import require_backend
from tests.faults.common import MINI, NOTHING, Forked, ForkServer, leftovers, short_dir

SEED = 9
ROLLOUT_KILLS = {"start-up": 6, "mid-episode": 12, "after-append": 6, "mid-append": 6}
TRAIN_KILLS = {
    "start-up": 3,
    "mid-rollout": 5,
    "after-checkpoint": 3,
    "mid-checkpoint": 3,
    "checkpoint-stall": 3,
    "saved-stall": 3,
}
GROUP = 6
"""Rollouts of the rollout runs (one task)."""
STEPS = 3
"""Steps of the training runs."""


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A sandbox state folder of the test's own, with a short path (executor sockets live in it)."""
    root = short_dir("hfc-")
    yield root / "state"
    shutil.rmtree(root, ignore_errors=True)


@dataclass
class Killer:
    """Kills a command at drawn moments and restarts it, run after run."""

    forks: ForkServer
    command: Callable[[Path, str, Path], list[str]]
    """(run folder, kind of kill, marker file) -> the arguments of `python -m tests.faults.inject`."""
    rng: random.Random
    wait_for: Callable[[str, Path, Forked, Path], None]
    """Waits in the spawned process's life for the moment of the kill."""
    log: Path
    done: Counter[str] = field(default_factory=Counter)
    seconds: Counter[str] = field(default_factory=Counter)
    finished_runs: list[Path] = field(default_factory=list)
    torn_tails: int = 0

    def cycle(self, run: Path, kind: str) -> bool:
        """Starts the command on `run`, kills it at a moment of `kind`; False if it finished first."""
        marker = run.parent / f"{run.name}.marker"
        marker.unlink(missing_ok=True)
        began = time.monotonic()
        proc = self.forks.spawn(self.command(run, kind, marker), self.log)
        try:
            self.wait_for(kind, run, proc, marker)
        except Finished:
            assert proc.wait() == 0, f"exited with {proc.poll()}: see {self.log}"
            return False
        finally:
            proc.kill()
            proc.wait()
        self.done[kind] += 1
        self.seconds[kind] += round(time.monotonic() - began, 1)
        self.torn_tails += torn(run / "trajectories.jsonl")
        for path in run.glob("*.jsonl"):  # every line parses, but for a torn last one, which readers skip
            assert all(json.loads(line) for _, line in read_lines(path)), path
        return True

    def run_all(
        self, kills: dict[str, int], new_run: Callable[[], Path], finish: Callable[[Path], None]
    ) -> Path:
        """Spends every kill; a run that finishes before its kill is checked and replaced by a new one."""
        kinds = [kind for kind, count in kills.items() for _ in range(count)]
        self.rng.shuffle(kinds)
        run = new_run()
        for kind in kinds:
            while not self.cycle(run, kind):
                finish(run)
                self.finished_runs.append(run)
                run = new_run()
        return run


class Finished(Exception):
    """The process ended before the moment of its kill came."""


def wait_for_process(proc: Forked, condition: Callable[[], bool], timeout: float = 120) -> None:
    """Waits for `condition` while the process lives; raises Finished when it exits first."""
    began = time.monotonic()
    while not condition():
        if proc.poll() is not None:
            raise Finished
        assert time.monotonic() - began < timeout, "the moment of the kill never came"
        time.sleep(0.002)


def pause(proc: Forked, seconds: float) -> None:
    """Waits `seconds` (drawn by the caller) while the process lives."""
    deadline = time.monotonic() + seconds
    wait_for_process(proc, lambda: time.monotonic() > deadline)


def sandbox_started(state_dir: Path, pid: int) -> Callable[[], bool]:
    """True once the process with `pid` has an executor socket: a sandbox of its own is up."""
    return lambda: any(state_dir.glob(f"r{pid}-*/*/sock"))


def line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def torn(path: Path) -> bool:
    """Whether a kill left a torn last line (the reader skips it; the next start cuts it off)."""
    return path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")


# ---- what a finished run must be --------------------------------------------------------------------


def jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of a finished run's JSONL file, which must all be whole and parse."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), f"{path}: a torn last line after the run finished"
    return [json.loads(line) for line in data.decode().splitlines()]


IGNORED = ("timings", "run", "started_at", "policy", "reused")
"""Durations and start times; the run's folder name; the policy spec, which names the folder of the
weights (a resumed run's sampler loads them from its checkpoint: the same weights, `policy_version`);
which of a batch's rollouts with one patch graded it and which took its grade (`Grade.reused`: timing)."""


def projection(value: Any) -> Any:
    """What must not depend on crashes: everything but the IGNORED fields and durations (`*_s`)."""
    if isinstance(value, dict):
        return {k: projection(v) for k, v in value.items() if not (k.endswith("_s") or k in IGNORED)}
    if isinstance(value, list):
        return [projection(v) for v in value]
    return value


def check_readable(run: Path) -> Counter[str]:
    """Opens every file of the run directory the way its readers do; returns the files by kind."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    kinds: Counter[str] = Counter()
    for path in sorted(p for p in run.rglob("*") if p.is_file()):
        relative = path.relative_to(run)
        assert ".tmp-" not in str(relative), f"{relative}: a temporary file of an interrupted write"
        if path.suffix == ".jsonl":
            jsonl(path)
        elif path.name == "config.yaml":
            assert isinstance(yaml.safe_load(path.read_text()), dict)
        elif relative.parts[0] == "tensorboard":
            list(EventFileLoader(str(path)).Load())  # stops at a torn last record, by design
        elif path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".safetensors":
            load_file(str(path))
        elif path.suffix == ".pt":
            torch.load(path, weights_only=False)
        elif path.suffix == ".jinja":
            path.read_text()
        else:
            raise AssertionError(f"{relative}: a file no reader of the run directory knows")
        kinds[path.suffix] += 1
    return kinds


def check_clean(state_dir: Path, last_pid: int) -> None:
    """No sandbox, process, control group or socket is left, and no folder of a killed run."""
    assert leftovers(state_dir) == NOTHING
    runs = [p.name for p in state_dir.iterdir() if p.name != REAPER_LOG] if state_dir.is_dir() else []
    assert all(name.startswith(f"r{last_pid}-") for name in runs), runs  # the last run exited normally


# ---- rollouts ---------------------------------------------------------------------------------------


def rollout_command(state_dir: Path) -> Callable[[Path, str, Path], list[str]]:
    def command(run: Path, kind: str, marker: Path) -> list[str]:
        stall = ["--stall", "append", "--marker", str(marker)] if kind == "mid-append" else []
        return [
            *stall, "--", "rollout", "--suite", str(MINI), "--policy", "scripted:gold-min",
            "--backend", "bwrap", "--group-size", str(GROUP), "--concurrency", "2", "--out", str(run),
            f"sandbox.state_dir={state_dir}",
        ]  # fmt: skip

    return command


def rollout_moment(state_dir: Path, rng: random.Random) -> Callable[[str, Path, Forked, Path], None]:
    def wait_for(kind: str, run: Path, proc: Forked, marker: Path) -> None:
        if kind == "start-up":
            pause(proc, rng.uniform(0.05, 1.2))
        elif kind == "mid-episode":
            wait_for_process(proc, sandbox_started(state_dir, proc.pid))
            pause(proc, rng.uniform(0.0, 1.5))
        elif kind == "after-append":
            lines = line_count(run / "trajectories.jsonl")
            wait_for_process(proc, lambda: line_count(run / "trajectories.jsonl") > lines)
            pause(proc, rng.uniform(0.0, 0.3))
        else:  # mid-append: the process hangs half-way through writing a line
            wait_for_process(proc, marker.exists)

    return wait_for


def to_the_end(forks: ForkServer, args: list[str], log: Path) -> int:
    """Runs a command to its end (an uninterrupted run, or the restart that finishes a killed one);
    returns its pid."""
    proc = forks.spawn(args, log)
    assert proc.wait() == 0, log.read_text()[-3000:]
    return proc.pid


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    server = ForkServer(tmp_path_factory.mktemp("forks"))
    yield server
    server.close()


def test_rollouts_killed_30_times_lose_and_repeat_nothing(
    state_dir: Path, forks: ForkServer, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    require_backend("bwrap")
    began = time.monotonic()
    command = rollout_command(state_dir)
    reference = tmp_path / "reference" / "run"
    to_the_end(forks, command(reference, "none", tmp_path / "unused"), tmp_path / "log")
    expected = sorted((projection(t) for t in jsonl(reference / "trajectories.jsonl")), key=str)
    assert len(expected) == GROUP and {t["status"] for t in expected} == {"ok"}

    def check(run: Path) -> None:
        kinds = check_readable(run)
        assert set(kinds) == {".jsonl", ".yaml"}, kinds
        got = sorted((projection(t) for t in jsonl(run / "trajectories.jsonl")), key=str)
        assert [(t["task_id"], t["sample_index"]) for t in got] == [
            (t["task_id"], t["sample_index"]) for t in expected
        ]  # each (task, sample) exactly once
        assert got == expected

    runs = iter(range(100))
    rng = random.Random(SEED)
    killer = Killer(forks, command, rng, rollout_moment(state_dir, rng), tmp_path / "log")
    last = killer.run_all(ROLLOUT_KILLS, lambda: tmp_path / f"run-{next(runs)}" / "run", check)
    last_pid = to_the_end(forks, command(last, "none", tmp_path / "unused"), tmp_path / "log")
    check(last)
    check_clean(state_dir, last_pid)

    assert killer.done == Counter(ROLLOUT_KILLS)
    figures = {
        "kills": dict(killer.done),
        "runs": len(killer.finished_runs) + 1,
        "torn_tails": killer.torn_tails,
        "seconds": dict(killer.seconds),
        "wall_s": round(time.monotonic() - began, 1),
    }
    record_property("figures", figures)
    print("rollout kills:", json.dumps(figures))


# ---- training ---------------------------------------------------------------------------------------


def train_config(model: Path, state_dir: Path, run: Path) -> Path:
    config = {
        "model": str(model),
        "suite": str(MINI),
        "out": str(run),
        "steps": STEPS,
        "tasks_per_step": 1,
        "group_size": 2,
        "concurrency": 2,
        "loop": {"max_turns": 2},
        "sampling": {"max_new_tokens": 8, "temperature": 1.0},
        "sandbox": {"backend": "bwrap", "state_dir": str(state_dir)},
        "learner": {"lr": 1e-3, "entropy_coef": 0.01},
        "sampler_batch": 1,  # compared bit for bit: which episodes share a decode step must not matter
    }
    path = run.parent / "train.yaml"
    run.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def train_command(model: Path, state_dir: Path) -> Callable[[Path, str, Path], list[str]]:
    def command(run: Path, kind: str, marker: Path) -> list[str]:
        stalls = {"checkpoint-stall": "checkpoint", "saved-stall": "saved"}
        stall = ["--stall", stalls[kind], "--marker", str(marker)] if kind in stalls else []
        config = train_config(model, state_dir, run)
        return [*stall, "--", "train", "--config", str(config), "--resume"]

    return command


def checkpoint_folders(run: Path, pattern: str) -> set[str]:
    return {p.name for p in (run / "checkpoints").glob(pattern)}


def train_moment(
    state_dir: Path, rng: random.Random, caught: Counter[str]
) -> Callable[[str, Path, Forked, Path], None]:
    def wait_for(kind: str, run: Path, proc: Forked, marker: Path) -> None:
        if kind == "start-up":
            pause(proc, rng.uniform(0.3, 4.0))
        elif kind == "mid-rollout":
            wait_for_process(proc, sandbox_started(state_dir, proc.pid))
            pause(proc, rng.uniform(0.0, 1.0))
        elif kind == "after-checkpoint":  # one step more, then a kill early in the next one
            before = checkpoint_folders(run, "step-*")
            wait_for_process(proc, lambda: checkpoint_folders(run, "step-*") - before != set())
            pause(proc, rng.uniform(0.0, 0.5))
        elif kind == "mid-checkpoint":  # a real race: killed as soon as a save's folder shows
            wait_for_process(proc, lambda: checkpoint_folders(run, ".step-*.tmp-*") != set())
            proc.kill()
            proc.wait()
            caught["mid-save"] += bool(checkpoint_folders(run, ".step-*.tmp-*"))
        elif kind == "checkpoint-stall":  # the optimizer file is half written when the kill comes
            wait_for_process(proc, marker.exists)
            caught["previous-usable"] += loadable(latest_checkpoint(run / "checkpoints"))
        else:  # saved-stall: a checkpoint was just completed, nothing after it written yet
            wait_for_process(proc, marker.exists)

    return wait_for


def test_training_killed_20_times_resumes_from_the_last_complete_checkpoint(
    tiny_model_path: Path,
    state_dir: Path,
    forks: ForkServer,
    tmp_path: Path,
    record_property: pytest.RecordProperty,
) -> None:
    require_backend("bwrap")
    began = time.monotonic()
    command = train_command(tiny_model_path, state_dir)
    reference = tmp_path / "reference" / "run"
    to_the_end(forks, command(reference, "none", tmp_path / "unused"), tmp_path / "log")
    expected = {
        "trajectories": sorted((projection(t) for t in jsonl(reference / "trajectories.jsonl")), key=str),
        "metrics": [strip_timings(m) for m in jsonl(reference / "metrics.jsonl")],
        "learner": sorted(jsonl(reference / "learner.jsonl"), key=str),
    }
    assert [m["step"] for m in expected["metrics"]] == list(range(STEPS))
    final = load_file(str(reference / "checkpoints" / f"step-{STEPS}" / "model" / "model.safetensors"))

    def check(run: Path) -> None:
        kinds = check_readable(run)
        assert kinds[".pt"] == 2 * STEPS and kinds[".safetensors"] == STEPS, kinds
        trajectories = sorted((projection(t) for t in jsonl(run / "trajectories.jsonl")), key=str)
        assert len({(t["task_id"], t["sample_index"]) for t in trajectories}) == len(trajectories)
        assert trajectories == expected["trajectories"]
        assert [strip_timings(m) for m in jsonl(run / "metrics.jsonl")] == expected["metrics"]
        assert sorted(jsonl(run / "learner.jsonl"), key=str) == expected["learner"]
        assert checkpoint_folders(run, "*") == {f"step-{n}" for n in range(1, STEPS + 1)}
        weights = load_file(str(run / "checkpoints" / f"step-{STEPS}" / "model" / "model.safetensors"))
        assert weights.keys() == final.keys() and all(torch.equal(weights[k], final[k]) for k in final)

    caught: Counter[str] = Counter()
    runs = iter(range(100))
    rng = random.Random(SEED)
    killer = Killer(forks, command, rng, train_moment(state_dir, rng, caught), tmp_path / "log")
    last = killer.run_all(TRAIN_KILLS, lambda: tmp_path / f"run-{next(runs)}" / "run", check)
    last_pid = to_the_end(forks, command(last, "none", tmp_path / "unused"), tmp_path / "log")
    check(last)
    check_clean(state_dir, last_pid)

    assert killer.done == Counter(TRAIN_KILLS)
    assert caught["previous-usable"] == TRAIN_KILLS["checkpoint-stall"]
    figures = {
        "kills": dict(killer.done),
        "runs": len(killer.finished_runs) + 1,
        "caught_mid_save": caught["mid-save"],
        "torn_tails": killer.torn_tails,
        "seconds": dict(killer.seconds),
        "wall_s": round(time.monotonic() - began, 1),
    }
    record_property("figures", figures)
    print("train kills:", json.dumps(figures))


def loadable(checkpoint: Path | None) -> bool:
    """The checkpoint a resume would take loads: weights, optimizer, RNG states, trainer state."""
    if checkpoint is None:
        return True  # none yet: the resume starts from the model
    load_file(str(checkpoint / "model" / "model.safetensors"))
    torch.load(checkpoint / "optimizer.pt", weights_only=False)
    torch.load(checkpoint / "rng.pt", weights_only=False)
    return "step" in json.loads((checkpoint / "trainer.json").read_text())


def strip_timings(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if not k.startswith("time_")}
