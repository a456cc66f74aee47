"""Checkpoints and metric writers for training: plumbing kept apart from the training loop.

A checkpoint is a folder `checkpoints/step-N/` holding the weights (`save_pretrained`, so a sampler or
`harness serve` can load them), the optimizer state, every RNG state and the trainer's position. It is
written under a temporary name and renamed, so a crash mid-save leaves the previous one usable.

The optimizer state is saved whole, on the CPU, keyed by parameter name (torch.distributed.checkpoint's
full state dict), so a checkpoint written on a GPU, or by FSDP processes from their shards, resumes on
any device and any number of processes.
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
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's whole state on the CPU, keyed by parameter name. Under FSDP it is gathered from the
    shards: a collective that every process calls, and only rank 0 gets the values."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state: dict[str, Any] = get_optimizer_state_dict(model, optimizer, options=options)
    return state


def save_checkpoint(
    root: Path, step: int, model: Any, tokenizer: Any, optimizer: dict[str, Any], state: dict[str, Any]
) -> Path:
    """Writes checkpoints/step-N atomically; returns its path. `model/` loads on its own (tokenizer too);
    `optimizer` is `optimizer_state`'s."""
    final = root / f"step-{step}"
    tmp = _fresh_tmp(root, step)
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    torch.save(optimizer, tmp / "optimizer.pt")
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
    tmp = _fresh_tmp(root, step)
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


def _fresh_tmp(root: Path, step: int) -> Path:
    """An empty temporary folder for step-N; the temporary folders of saves a crash cut short go first
    (one process writes a run's checkpoints, so none of them is still being written)."""
    for stale in root.glob(".step-*.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f".step-{step}.tmp-{os.getpid()}"
    tmp.mkdir(parents=True)
    return tmp


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint (temporary folders of an interrupted save are ignored)."""
    if not root.is_dir():
        return None
    done = [p for p in root.iterdir() if p.name.startswith("step-") and (p / "trainer.json").is_file()]
    return max(done, key=lambda p: int(p.name.split("-")[1]), default=None)


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restores the optimizer of `model` (onto its parameters' devices, sharded as they are) and the RNGs;
    returns the trainer state. The weights load separately."""
    saved = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False)
    set_optimizer_state_dict(model, optimizer, saved, options=StateDictOptions(full_state_dict=True))
    rng = torch.load(path / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    state: dict[str, Any] = json.loads((path / "trainer.json").read_text())
    return state
