"""Checkpoints and metric writers for training: plumbing kept apart from the training loop.

A checkpoint is a folder `checkpoints/step-N/` holding the weights (`save_pretrained`, so a sampler or
`harness serve` can load them), the optimizer state, every RNG state and the trainer's position. It is
written under a temporary name and renamed, so a crash mid-save leaves the previous one usable.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.store import append_line


def save_checkpoint(
    root: Path, step: int, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> Path:
    """Writes checkpoints/step-N atomically; returns its path. `model/` loads on its own (tokenizer too)."""
    final = root / f"step-{step}"
    tmp = root / f".step-{step}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(
        {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
        tmp / "rng.pt",
    )
    (tmp / "trainer.json").write_text(json.dumps({"step": step, **state}))
    for path in tmp.rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def save_weights(root: Path, step: int, model: Any, tokenizer: Any) -> Path:
    """Writes the weights (and tokenizer) alone to ROOT/step-N atomically, for a sampler to load; the
    older ones are removed. Returns the folder."""
    final = root / f"step-{step}"
    tmp = root / f".step-{step}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    for path in tmp.iterdir():
        with path.open("rb") as f:
            os.fsync(f.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in root.glob("step-*"):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint (temporary folders of an interrupted save are ignored)."""
    if not root.is_dir():
        return None
    done = [p for p in root.iterdir() if p.name.startswith("step-") and (p / "trainer.json").is_file()]
    return max(done, key=lambda p: int(p.name.split("-")[1]), default=None)


def load_checkpoint(path: Path, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restores the optimizer and the RNGs; returns the trainer state. The weights load separately."""
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    rng = torch.load(path / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    state: dict[str, Any] = json.loads((path / "trainer.json").read_text())
    return state


class MetricsWriter:
    """One JSON line per step in metrics.jsonl, and the same scalars for TensorBoard."""

    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.path = run_dir / "metrics.jsonl"
        self.tensorboard = SummaryWriter(str(run_dir / "tensorboard"))

    def write(self, step: int, metrics: dict[str, float]) -> None:
        append_line(self.path, json.dumps({"step": step, **metrics}))
        for name, value in metrics.items():
            self.tensorboard.add_scalar(name, value, step)
        self.tensorboard.flush()

    def close(self) -> None:
        self.tensorboard.close()
