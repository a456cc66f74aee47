"""`harness train` on several processes: where each one computes, and what rank 0 exchanges with the rest.

Under `torchrun --nproc-per-node N -m harness.cli train ...` every process runs `train`. Rank 0 alone
touches sandboxes, servers and the run directory; it sends each step's rows to all processes, each takes
its share of the learner's work (harness/training/learner.py), and the learner's log-probs and, under FSDP, the
whole weights come back to rank 0. One process (no WORLD_SIZE, or 1) runs the same code, and every
exchange below returns its argument.

Python objects travel over a gloo group of their own, so that NCCL (which the learner's collectives use on
GPUs) never carries them, and with a long timeout: the other processes wait in `broadcast` while rank 0
rolls out a step, which can take far longer than a collective's usual limit.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from harness.config import ConfigError

DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
"""The settings of `TrainConfig.device`."""
WAIT_FOR_RANK_0 = timedelta(hours=24)
"""How long the other processes wait for rank 0's next rows (a step's rollouts, its checkpoint writes)."""

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class Processes:
    """This process's place among the training processes."""

    rank: int
    world: int
    device: torch.device
    objects: dist.ProcessGroup | None = None
    """The gloo group that Python objects travel on (None in one process)."""
    started_here: bool = False
    """Whether `start` initialised the process group (and `stop` destroys it)."""

    @property
    def main(self) -> bool:
        return self.rank == 0


def check_device(setting: str) -> str:
    if not DEVICE.fullmatch(setting):
        raise ValueError(f"{setting!r} is not a device: use auto, cpu, cuda or cuda:N")
    return setting


def resolve_device(setting: str, local_rank: int | None = None) -> torch.device:
    """`auto`: CUDA when there is a GPU, else the CPU. Under torchrun (`local_rank` given) `auto` and
    `cuda` mean cuda:LOCAL_RANK, one GPU per process."""
    check_device(setting)
    if setting == "auto":
        setting = "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"device={setting}: torch sees no CUDA device (torch.cuda.is_available() is False)")
    if local_rank is None:  # with its index, so that it compares equal to the parameters' device
        index = int(setting[5:]) if setting != "cuda" else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise ConfigError(f"device={setting}: only {torch.cuda.device_count()} CUDA devices are visible")
        return torch.device("cuda", index)
    if setting != "cuda":
        raise ConfigError(
            f"device={setting} under torchrun would put every process on one GPU: "
            "use device=cuda (or auto), which gives each process cuda:LOCAL_RANK"
        )
    if local_rank >= torch.cuda.device_count():
        raise ConfigError(f"LOCAL_RANK {local_rank} has no GPU: {torch.cuda.device_count()} visible")
    return torch.device("cuda", local_rank)


def start(device: str) -> Processes:
    """One process, or this one of torchrun's (WORLD_SIZE > 1): the process group is initialised unless it
    already is, with NCCL for CUDA tensors and gloo for CPU ones."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1 and not dist.is_initialized():
        return Processes(rank=0, world=1, device=resolve_device(device))
    resolved = resolve_device(device, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    started_here = not dist.is_initialized()
    if resolved.type == "cuda":
        torch.cuda.set_device(resolved)  # FSDP2 builds its device mesh on the current device
    if started_here:
        backend = "cpu:gloo,cuda:nccl" if resolved.type == "cuda" else "gloo"
        dist.init_process_group(backend, device_id=resolved if resolved.type == "cuda" else None)
    objects = dist.new_group(backend="gloo", timeout=WAIT_FOR_RANK_0)
    return Processes(dist.get_rank(), dist.get_world_size(), resolved, objects, started_here)


def stop(processes: Processes) -> None:
    if processes.started_here:
        dist.destroy_process_group()


def broadcast(processes: Processes, value: T) -> T:
    """Rank 0's `value`, on every process; what the others pass is ignored."""
    if processes.world == 1:
        return value
    box: list[Any] = [value]
    dist.broadcast_object_list(box, src=0, group=processes.objects)
    out: T = box[0]
    return out


def merge_on_main(processes: Processes, part: dict[K, V]) -> dict[K, V]:
    """The union of every process's `part`, on rank 0; the others get their own part back."""
    if processes.world == 1:
        return part
    parts: list[Any] | None = [None] * processes.world if processes.main else None
    dist.gather_object(part, parts, dst=0, group=processes.objects)
    if parts is None:
        return part
    merged: dict[K, V] = {}
    for each in parts:
        merged.update(each)
    return merged


def full_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights of a sharded model on rank 0, on the CPU (the others get an empty dict). A
    collective: every process calls it."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state: dict[str, torch.Tensor] = get_model_state_dict(model, options=options)  # type: ignore[assignment]
    return state
