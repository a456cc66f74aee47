"""The learner: trajectories -> segment rows -> length-bucketed micro-batches -> one optimizer step.

The math lives in `harness/training/grpo.py`; this module only feeds it. Segments of all trajectories become rows
(exact ids, loss mask, sampler log-probs, the trajectory's advantage). Rows are sorted by length and cut
into micro-batches under a token budget, so padding stays small without packing; gradients accumulate
over micro-batches with the step's total token count as the one normalizer, so k micro-batches of b/k
give the update of one batch of b. With several processes each takes its share of rows and gradients
are summed across them (gloo on CPU, NCCL on GPU), which gives the one-process update again: either every
process holds all weights and gradients are all-reduced (`parallel: replicate`, DDP's semantics), or
the weights, gradients and optimizer state are sharded with FSDP2 (`parallel: fsdp`, `fully_shard` per
decoder layer and at the root, ZeRO-3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor
from torch.distributed.tensor import DTensor

from harness.agent.trajectory import Trajectory
from harness.training.grpo import AggMode, ISMode, Scale, group_advantages, grpo_loss


class LearnerConfig(BaseModel):
    """How the policy is updated from a batch of trajectories."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(default=1e-5, gt=0)
    """AdamW learning rate."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW (decoupled) weight decay; 0 turns it off."""
    grad_clip: float = Field(default=1.0, gt=0)
    """Global gradient-norm clip."""
    micro_batch_tokens: int = Field(default=16_384, ge=64)
    """Token budget of one micro-batch (rows x longest row, padding included)."""
    advantage_scale: Scale = "none"
    """`none`: A = r - group mean (Dr. GRPO); `group` / `batch`: also divide by that std."""
    drop_uniform_groups: bool = False
    """Leave out groups whose rewards are all equal (their advantage is 0 anyway)."""
    clip_low: float = Field(default=0.2, ge=0)
    """PPO clip where A < 0: the ratio is clipped at 1 - clip_low (verl `clip_ratio_low`). Inactive for now:
    each batch gets one update, so the ratio stays 1."""
    clip_high: float = Field(default=0.28, ge=0)
    """PPO clip where A > 0: the ratio is clipped at 1 + clip_high (DAPO's clip-higher, verl
    `clip_ratio_high`). Inactive for now, as `clip_low`."""
    dual_clip: float | None = Field(default=3.0, gt=1)
    """For A < 0, the per-token loss is at most -A * dual_clip (dual-clip PPO, verl `clip_ratio_c`); None
    turns it off. Inactive for now, as `clip_low`."""
    loss_agg: AggMode = "token-mean"
    """How per-token losses become one scalar: `token-mean` (every token weighs the same, DAPO),
    `seq-mean-token-mean` (every segment row the same, GRPO), `seq-mean-token-sum-norm` (Dr. GRPO, needs
    `max_len`)."""
    max_len: int | None = None
    """The constant of `seq-mean-token-sum-norm` (Dr. GRPO): the generation budget."""
    importance: ISMode = "truncate"
    """Correction of the sampler / learner mismatch: truncated (TIS) or masked (MIS) importance weights."""
    importance_cap: float = Field(default=2.0, gt=1)
    """Most an importance weight can be under `truncate`. `mask` ignores it and drops the tokens whose
    weight is outside [0.5, 2]."""
    kl_coef: float = Field(default=0.0, ge=0)
    """Weight of the k3 KL to the reference model (the starting weights) in the loss; 0 turns it off."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (off by default)."""
    activation_checkpointing: bool = False
    """Recompute the activations in the backward pass instead of keeping them: less memory, more time."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """bfloat16 autocast on GPU; the CPU path stays float32."""
    parallel: Literal["replicate", "fsdp"] = "replicate"
    """With several processes: all-reduced gradients over full replicas, or FSDP2 sharding."""


@dataclass(frozen=True)
class Row:
    """One segment, ready to train on."""

    ids: list[int]
    mask: list[int]
    sampler_logprobs: list[float]
    advantage: float
    source: tuple[str, int] | None = None
    """(trajectory id, segment index) the row was made from, when it was made from one."""
    token_advantages: list[float] | None = None
    """A per-token advantage aligned to ids[1:] (dense credit, `harness/training/credit.py`); None: the
    row's `advantage` on every model token."""


def rows_from_trajectories(
    trajectories: Sequence[Trajectory], config: LearnerConfig
) -> tuple[list[Row], dict[str, float]]:
    """Group advantages, broadcast to every segment of each trajectory (contract 3).

    Rollouts marked infra_error, and those whose ids were not verified or not trainable, take no part
    in the advantage statistics and give no rows (contract 4, contract 1).
    """
    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float64)  # (N,)
    valid = torch.tensor(
        [t.status != "infra_error" and t.trainable and t.ids_verified for t in trajectories]
    )  # (N,)
    advantages, kept = group_advantages(
        rewards, [t.group_id for t in trajectories], valid, config.advantage_scale, config.drop_uniform_groups
    )  # (N,), (N,)
    rows = []
    for t, advantage, keep in zip(trajectories, advantages.tolist(), kept.tolist(), strict=True):
        if not keep:
            continue
        for segment in t.segments:
            ids, mask, logprobs = segment.ids_and_mask()
            if sum(mask):
                rows.append(Row(ids, mask, logprobs, advantage, source=(t.id, segment.index)))
    kept_adv = advantages[kept]
    stats = {
        "advantage_mean": kept_adv.mean().item() if kept_adv.numel() else 0.0,
        "advantage_abs_mean": kept_adv.abs().mean().item() if kept_adv.numel() else 0.0,
        "trajectories_used": float(kept.sum().item()),
        "trajectories_excluded": float((~valid).sum().item()),
    }
    return rows, stats


def micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Row indices grouped longest-first so that rows x longest row stays within the budget."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches and lengths[batches[-1][0]] * (len(batches[-1]) + 1) <= token_budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


@dataclass(frozen=True)
class MicroBatch:
    """Rows as right-padded tensors; everything after `attention_mask` is aligned to the predicted tokens
    ids[1:]."""

    input_ids: Tensor
    """(B, T) token ids, `pad_id` after each row's end."""
    attention_mask: Tensor
    """(B, T) 1 on a row's tokens, 0 on padding."""
    mask: Tensor
    """(B, T-1) 1 where the token is the model's own (trained), 0 elsewhere."""
    sampler: Tensor
    """(B, T-1) the sampler's log-prob of each token."""
    advantage: Tensor
    """(B, T-1) the row's advantage on its trained tokens, 0 elsewhere."""


def collate(rows: Sequence[Row], pad_id: int, device: torch.device) -> MicroBatch:
    """The rows as one right-padded micro-batch on `device`."""
    width = max(len(r.ids) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, T)
    attention = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(rows), width - 1))  # (B, T-1)
    sampler = torch.zeros((len(rows), width - 1))  # (B, T-1)
    advantage = torch.zeros((len(rows), width - 1))  # (B, T-1)
    for b, r in enumerate(rows):
        n = len(r.ids)
        ids[b, :n] = torch.tensor(r.ids)
        attention[b, :n] = 1
        mask[b, : n - 1] = torch.tensor(r.mask[1:], dtype=torch.float32)
        sampler[b, : n - 1] = torch.tensor(r.sampler_logprobs[1:], dtype=torch.float32)
        if r.token_advantages is None:
            advantage[b, : n - 1] = r.advantage * mask[b, : n - 1]
        else:
            advantage[b, : n - 1] = torch.tensor(r.token_advantages, dtype=torch.float32) * mask[b, : n - 1]
    return MicroBatch(*(t.to(device) for t in (ids, attention, mask, sampler, advantage)))


def token_logprobs(
    model: Any, input_ids: Tensor, attention_mask: Tensor, temperature: float, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """log p(ids[t+1] | ids[:t+1]) at the sampler's temperature where `mask` is 1 (0 elsewhere), and the
    logits of those positions.

    The LM head and the float32 log-softmax run only on the masked positions: over a long segment the
    full (B, T, V) logits would be the largest tensor of the step, and the prompt never needs them.
    """
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    where = mask.bool()  # (B, T-1)
    picked = hidden[:, :-1][where]  # (N, H)
    logits = model.get_output_embeddings()(picked).float()  # (N, V)
    if temperature > 0:
        logits = logits / temperature  # (N, V)
    targets = input_ids[:, 1:][where]  # (N,)
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)  # (N,)
    out = torch.zeros(mask.shape, dtype=chosen.dtype, device=chosen.device)  # (B, T-1)
    out[where] = chosen
    return out, logits


class MaskedLogprobs(torch.nn.Module):
    """`token_logprobs` as a module, so that FSDP2 can shard it at the root: its forward is where the
    root's parameters (embeddings, final norm, LM head, tied or not) are gathered and their gradients
    reduced, although the decoder and the head are called separately inside."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor, temperature: float, mask: Tensor) -> Any:
        return token_logprobs(self.model, input_ids, attention_mask, temperature, mask)


def shard(model: torch.nn.Module) -> MaskedLogprobs:
    """FSDP2 over the current process group: one unit per decoder layer, the rest in the root unit.
    Gradients are summed, not averaged, across processes: each process's loss is already divided by
    the token count of the whole step."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    for layer in model.get_decoder().layers:  # type: ignore[operator]
        fully_shard(layer)
    root = MaskedLogprobs(model)
    fully_shard(root)
    for module in root.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no pre-multiplied sum)
    return root


class Learner:
    """An optimizer over a causal LM, stepping on GRPO batches (or SFT batches)."""

    def __init__(
        self,
        model: torch.nn.Module,
        config: LearnerConfig,
        pad_id: int,
        temperature: float = 1.0,
        reference: torch.nn.Module | None = None,
    ) -> None:
        """`reference`: a frozen copy of the starting weights, needed when `config.kl_coef` > 0."""
        if config.kl_coef > 0 and reference is None:
            raise ValueError("learner.kl_coef > 0 needs a reference model")
        self.reference = reference
        self.model = model
        self.config = config
        self.pad_id = pad_id
        self.temperature = temperature
        self.device = next(model.parameters()).device
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.sharded = config.parallel == "fsdp" and self.world > 1
        # Sharding replaces the parameters with sharded ones: the optimizer is made after it.
        self.forward = shard(model) if self.sharded else MaskedLogprobs(model)
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=config.lr, weight_decay=config.weight_decay
        )
        if config.activation_checkpointing:  # renamed in transformers 5.24; the old name warns
            enable = (
                getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            )
            enable()  # type: ignore[operator]
        self.learner_logprobs: dict[tuple[str, int], list[float]] = {}
        """After a GRPO step: the learner's log-prob of every mask-1 token (index >= 1) of each sourced row."""

    def _autocast(self) -> torch.autocast:
        enabled = self.config.dtype == "bfloat16" and self.device.type == "cuda"
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=enabled)

    def _share(self, rows: Sequence[Row]) -> list[Row]:
        return list(rows[self.rank :: self.world])

    def _micro_batches(self, rows: Sequence[Row]) -> list[list[int]]:
        """This process's micro-batches. Sharded, every process must run as many forward and backward
        passes as the others (each one gathers parameters collectively): the short ones get empty
        micro-batches (index -1: a row with loss mask 0)."""
        batches = micro_batches([len(r.ids) for r in rows], self.config.micro_batch_tokens)
        if self.sharded:
            most = int(self._total(len(batches), op=dist.ReduceOp.MAX))
            batches += [[-1]] * (most - len(batches))
        return batches

    def _rows(self, mine: Sequence[Row], indices: list[int]) -> list[Row]:
        empty = Row(ids=[self.pad_id, self.pad_id], mask=[0, 0], sampler_logprobs=[0.0, 0.0], advantage=0.0)
        return [mine[i] if i >= 0 else empty for i in indices]

    def _total(self, value: float, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM) -> float:
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, op=op)
        return float(t.item())

    def grpo_step(self, rows: Sequence[Row]) -> dict[str, float]:
        """One optimizer step on all rows of a batch; returns the step's metrics."""
        metrics = self.accumulate_grpo(rows)
        return metrics | self.apply()

    def sft_step(self, rows: Sequence[Row]) -> dict[str, float]:
        """One optimizer step of supervised fine-tuning: token-mean NLL of the mask-1 tokens."""
        metrics = self.accumulate_sft(rows)
        return metrics | self.apply()

    def accumulate_grpo(self, rows: Sequence[Row]) -> dict[str, float]:
        """Forward and backward over this process's share of the rows, micro-batch by micro-batch."""
        mine = self._share(rows)
        norm_tokens = self._total(sum(sum(r.mask[1:]) for r in mine))
        norm_seqs = self._total(len(mine))
        sums: dict[str, float] = {}
        maxes: dict[str, float] = {}
        self.learner_logprobs = {}
        self.model.train()
        for batch_rows in self._micro_batches(mine):
            batch = collate(self._rows(mine, batch_rows), self.pad_id, self.device)
            with self._autocast():
                logprobs, logits = self.forward(
                    batch.input_ids, batch.attention_mask, self.temperature, batch.mask
                )  # (B, T-1), (N, V)
            for b, i in enumerate(batch_rows):
                source = mine[i].source if i >= 0 else None
                if source is not None:
                    where = batch.mask[b].bool()  # (T-1,)
                    self.learner_logprobs[source] = logprobs[b][where].tolist()
            reference = None
            if self.reference is not None and self.config.kl_coef > 0:
                with torch.no_grad(), self._autocast():
                    reference, _ = token_logprobs(
                        self.reference,
                        batch.input_ids,
                        batch.attention_mask,
                        self.temperature,
                        batch.mask,
                    )  # (B, T-1)
            loss, metrics = grpo_loss(
                logprobs,
                logprobs.detach(),  # one update per batch: the ratio is 1 and the clip is inactive
                batch.advantage,
                batch.mask,
                sampler_logprobs=batch.sampler,
                is_mode=self.config.importance,
                is_cap=self.config.importance_cap,
                clip_low=self.config.clip_low,
                clip_high=self.config.clip_high,
                dual_clip=self.config.dual_clip,
                agg_mode=self.config.loss_agg,
                norm_tokens=max(1, int(norm_tokens)),
                norm_seqs=max(1, int(norm_seqs)),
                max_len=self.config.max_len,
                ref_logprobs=reference,
                kl_coef=self.config.kl_coef,
            )
            if self.config.entropy_coef:
                probs = torch.softmax(logits, dim=-1)  # (N, V)
                entropy = -(probs * torch.log_softmax(logits, dim=-1)).sum(-1)  # (N,)
                loss = loss - self.config.entropy_coef * entropy.sum() / max(1.0, norm_tokens)
            loss.backward()
            tokens = float(batch.mask.sum().item())
            sums["loss"] = sums.get("loss", 0.0) + float(loss.item())
            sums["tokens"] = sums.get("tokens", 0.0) + tokens
            for name, value in metrics.items():
                if name.endswith("_max"):
                    maxes[name] = max(maxes.get(name, value), value)
                else:  # a token-weighted mean over micro-batches
                    sums[name] = sums.get(name, 0.0) + value * tokens
        out: dict[str, float] = {}
        total = self._total(sums.get("tokens", 0.0))
        for name, value in sums.items():
            out[name] = (
                self._total(value) if name in ("loss", "tokens") else self._total(value) / max(1.0, total)
            )
        out.update(maxes)
        return out

    def accumulate_sft(self, rows: Sequence[Row]) -> dict[str, float]:
        mine = self._share(rows)
        norm_tokens = max(1.0, self._total(sum(sum(r.mask[1:]) for r in mine)))
        total_loss = 0.0
        self.model.train()
        for batch_rows in self._micro_batches(mine):
            batch = collate(self._rows(mine, batch_rows), self.pad_id, self.device)
            with self._autocast():
                logprobs, _ = self.forward(batch.input_ids, batch.attention_mask, 1.0, batch.mask)
            loss = -(logprobs * batch.mask).sum() / norm_tokens  # ()
            loss.backward()
            total_loss += float(loss.item())
        return {"loss": self._total(total_loss)}

    def reduce_gradients(self) -> None:
        """Sums gradients over processes: each one's loss is already over the global token count.
        (Sharded, FSDP2 has reduce-scattered them in the backward pass.)"""
        if self.world > 1 and not self.sharded:
            for p in self.model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)

    def apply(self) -> dict[str, float]:
        """Reduces, clips and applies the accumulated gradients."""
        self.reduce_gradients()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        norm = float(grad_norm.full_tensor().item() if isinstance(grad_norm, DTensor) else grad_norm.item())
        return {"grad_norm": norm if math.isfinite(norm) else float("nan")}

    def full_state_dict(self) -> dict[str, Tensor]:
        """The whole weights on every process (gathered when sharded), on the CPU, under the model's names."""
        state = {}
        for name, value in self.model.state_dict().items():
            full = value.full_tensor() if isinstance(value, DTensor) else value
            state[name] = full.detach().cpu()
        return state
