"""A training run's folder is continued only with the settings that made it.

`harness train` on a folder that already holds a run (metrics, trajectories or checkpoints) needs
`--resume`; with it, every setting that shapes what is learnt (model, learner, sampling, suite, tasks,
group size, reward, ...) must be what the run's config.yaml says, or the command stops before anything
is written and names what differs. `--allow-changes` changes them on purpose, and the change is
recorded in the run (`RUN/changes.jsonl`). What only says how long or where the run goes may change.

`harness sft` and `harness demo` cannot be continued: they refuse a folder that already holds what they
make (`check_fresh`), so that a second run never mixes its steps, checkpoints or model with the first's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from harness.rollouts.config import changed_settings
from harness.rollouts.store import RunFileError, RunStore, append_line

CHANGEABLE = (
    "steps",
    "checkpoint_every",
    "log",
    "device",
    "rollout.out",
    "rollout.concurrency",
    "sampler_batch",
    "threads",
    "stream_groups",
    "rollout.sandbox",
    "rollout.cluster",
)
"""Settings (and everything under them) a resumed run may change: how long it goes, where it runs and
logs, not what it learns."""
CHANGES_FILE = "changes.jsonl"
"""A run's record of the settings changed on purpose (`--allow-changes`), one line per resume."""
STARTED = ("metrics.jsonl", "trajectories.jsonl", "checkpoints")
"""What a folder holds once a training run has started in it."""


def started(out: Path) -> bool:
    """Whether `out` holds a training run: any of `STARTED`, not empty."""
    for name in STARTED:
        path = out / name
        if (path.is_file() and path.stat().st_size > 0) or (path.is_dir() and any(path.iterdir())):
            return True
    return False


def check_continues(config: BaseModel, out: Path, resume: bool, allow_changes: bool) -> list[str]:
    """Refuses (RunFileError, nothing written) a run on a folder that holds one without `resume`, and a
    resume with other settings than the run's without `allow_changes`; returns the changes allowed, which
    are recorded in `out/changes.jsonl`."""
    if not started(out):
        return []
    if not resume:
        raise RunFileError(
            f"{out} already holds a training run: continue it with --resume, or choose another rollout.out"
        )
    RunStore(out).own_trajectories()  # a foreign line is named first: the run cannot go on either way
    path = out / "config.yaml"
    try:
        before = type(config).model_validate(yaml.safe_load(path.read_text()))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValidationError) as e:
        raise RunFileError(
            f"{path}: not the config of a training run ({' '.join(str(e).split())[:300]})"
        ) from e
    changes = changed_settings(before.model_dump(mode="json"), config.model_dump(mode="json"), CHANGEABLE)
    if changes and not allow_changes:
        raise RunFileError(
            f"{out} was trained with other settings ({'; '.join(changes)}): resume it with the settings it "
            "was made with, or pass --allow-changes to change them on purpose (recorded in the run)"
        )
    if changes:
        append_line(out / CHANGES_FILE, json.dumps({"time": time.time(), "changes": changes}))
    return changes


def check_fresh(out: Path, made: list[str], what: str, instead: str) -> None:
    """Refuses (RunFileError, nothing written) a run of a command that cannot be continued on a folder
    holding any of `made` (relative paths; `*`: anything): `what` it is, and what to do `instead`."""
    if not out.is_dir():
        return
    taken = [name for name in made if (any(out.iterdir()) if name == "*" else (out / name).exists())]
    if taken:
        raise RunFileError(f"{out} already holds {what}: {instead}")


def resume_command(argv: list[str]) -> str:
    """The command line that continues an interrupted `harness train` (its own arguments and --resume)."""
    args = [a for a in argv if a != "--resume"]
    return "harness " + " ".join([*args, "--resume"])
