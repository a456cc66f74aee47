"""How the learner's new weights reach what samples the rollouts: one seam, `WeightSync`, whatever samples.

`pack` runs on the learner's thread right after a step (a CPU copy of the weights, or a folder a server
can read); `load` puts them into the sampler (at once in `mode: sync`; between two batches in `mode:
async`, through `harness/training/async_rollouts.Handoff`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

import torch

from harness.training.checkpoint import save_weights
from policies.hf import HFPolicy
from policies.tito import TitoPolicy

if TYPE_CHECKING:
    from harness.rollouts.cluster import ClusterRollouts

W = TypeVar("W")


@dataclass(frozen=True)
class WeightSync(Generic[W]):
    """The learner's weights of a version, packed, and loaded where the rollouts sample."""

    pack: Callable[[int], W]
    load: Callable[[W, int], None]

    def publish(self, version: int) -> None:
        """`version`'s weights into the sampler now (`mode: sync`)."""
        self.load(self.pack(version), version)


def in_place() -> WeightSync[None]:
    """The sampler is the learner's own model: there is nothing to hand over."""
    return WeightSync(lambda _: None, lambda _weights, _version: None)


def to_copy(policy: HFPolicy, sampler: HFPolicy) -> WeightSync[dict[str, torch.Tensor]]:
    """In this process, into a separate sampling copy of the model (`mode: async`)."""
    return WeightSync(lambda _: cpu_weights(policy), sampler.load_state_dict)


def to_cluster(policy: HFPolicy, cluster: ClusterRollouts) -> WeightSync[dict[str, torch.Tensor]]:
    """To every Ray rollout worker, through Ray's object store."""
    return WeightSync(lambda _: cpu_weights(policy), cluster.load_state_dict)


def to_servers(
    policy: HFPolicy, server: TitoPolicy, root: Path, cluster: ClusterRollouts | None
) -> WeightSync[Path]:
    """To the sampler servers: the weights saved to ROOT/step-N, which every live server then loads; the
    Ray workers, if any, are then told which servers hold them."""

    def pack(version: int) -> Path:
        return save_weights(root, version, policy.model, policy.tokenizer).resolve()

    return WeightSync(pack, lambda weights, version: load_on_servers(server, cluster, weights, version))


def load_on_servers(server: TitoPolicy, cluster: ClusterRollouts | None, weights: Path, version: int) -> None:
    """Every live server loads the folder `weights` as `version`; the cluster's workers then sample on the
    servers that did."""
    server.load_weights(weights, version)
    if cluster is not None:
        cluster.use_servers(version, server.holding(version))


def cpu_weights(policy: HFPolicy) -> dict[str, torch.Tensor]:
    return {name: t.detach().to("cpu", copy=True) for name, t in policy.model.state_dict().items()}
