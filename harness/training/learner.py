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

import copy
import math
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import psutil
import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from torch import Tensor
from torch.distributed.tensor import DTensor

from harness.agent.trajectory import Trajectory
from harness.training import family
from harness.training.family import KLEstimator
from harness.training.grpo import (
    AggMode,
    ISMode,
    Scale,
    aggregate,
    entropy_from_logits,
    group_advantages,
    importance_weights,
    policy_loss,
)
from harness.training.memory import LayerShape, checkpoint_every
from harness.training.packing import Packed, pack, packed_attention_on, packed_hidden, unpack


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
    """Token budget of one micro-batch: the sum of its rows' lengths when `packing`, else rows x longest row
    (padding included)."""
    packing: bool = True
    """Run the model on a micro-batch's rows end to end, each row attending only to itself (no padding
    computed; attention work the sum of the squared lengths), instead of padded to the longest row.
    The log-probs are the same either way (harness/training/packing.py)."""
    advantage: Literal["grpo", "rloo", "gpg"] = "grpo"
    """How a trajectory's advantage comes from its group's rewards: `grpo`, the reward minus the group mean
    (scaled as `advantage_scale` says); `rloo`, minus the mean of the others (verl `adv_estimator=rloo`);
    `gpg`, minus the group mean times B / B_valid (GPG; verl `adv_estimator=gpg`). docs/algorithms.md."""
    advantage_scale: Scale = "none"
    """`none`: A = r - group mean (Dr. GRPO); `group` / `batch`: also divide by that std (`grpo` only)."""
    std_eps: float = Field(default=1e-6, gt=0)
    """Added to the std that `advantage_scale: group | batch` divides by: verl 1e-6, TRL 1e-4."""
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
    policy_loss: Literal["ppo", "gspo", "cispo", "sapo", "gpg"] = "ppo"
    """The per-token surrogate: `ppo` (clip, clip-higher, dual clip; GRPO's), `gspo` (one clipped ratio per
    segment, Qwen3; set `clip_low`/`clip_high` to the paper's 3e-4 / 4e-4), `cispo` (clipped weight
    without gradient times log p, MiniMax-M1; bounds from `clip_low`/`clip_high`), `sapo` (a soft gate,
    `sapo_tau_pos`/`_neg`), `gpg` (-A log p). verl `policy_loss.loss_mode`; docs/algorithms.md."""
    sapo_tau_pos: float = Field(default=1.0, gt=0)
    """SAPO's gate temperature where A > 0 (TRL `sapo_temperature_pos`, verl `tau_pos`)."""
    sapo_tau_neg: float = Field(default=1.05, gt=0)
    """SAPO's gate temperature where A <= 0 (TRL `sapo_temperature_neg`, verl `tau_neg`)."""
    ratio_against: Literal["learner", "sampler"] = "learner"
    """What the policy ratio is taken against. `learner`: the learner's own log-probs before this update;
    with one update per batch the ratio is 1, so clips and gates are inactive and `importance` corrects
    the sampler's mismatch. `sampler`: the log-probs stored with the rollout (verl's rollout-correction
    bypass mode), so the clip acts on the sampler's mismatch and on async staleness; `importance` must
    then be `none`, since the ratio already is the correction."""
    loss_agg: AggMode = "token-mean"
    """How per-token losses become one scalar: `token-mean` (every token weighs the same, DAPO),
    `token-sum` (no normaliser), `seq-mean-token-mean` (every segment row the same, GRPO; verl's choice
    for GSPO and SAPO), `seq-mean-token-sum` (each row's summed loss, averaged over rows),
    `seq-mean-token-sum-norm` (Dr. GRPO, needs `max_len`)."""
    max_len: int | None = None
    """The constant of `seq-mean-token-sum-norm` (Dr. GRPO): the generation budget."""
    importance: ISMode = "truncate"
    """Correction of the sampler / learner mismatch: truncated (TIS) or masked (MIS) importance weights."""
    importance_cap: float = Field(default=2.0, gt=1)
    """Most an importance weight can be under `truncate`. `mask` ignores it and drops the tokens whose
    weight is outside [0.5, 2]."""
    importance_level: Literal["token", "sequence"] = "token"
    """`token`: one importance weight per token; `sequence`: one per segment row, the product of its
    tokens' (verl `rollout_is="sequence"`, TRL `sequence_truncate` / `sequence_mask`)."""
    importance_batch_normalize: bool = False
    """Divide the importance weights by their mean (over the micro-batch's tokens or rows), so they reweigh
    without rescaling (verl `rollout_is_batch_normalize`)."""
    rejection_band: tuple[float, float] | None = None
    """Leave out whole segment rows whose geometric-mean ratio learner / sampler is outside [low, high]
    (verl `rollout_rs="seq_mean_k1"`); None keeps every row."""
    mask_truncated: bool = False
    """Leave out of the loss the tokens of generations cut off by the token limit (finish reason
    `length`; DAPO's overlong filtering, TRL `mask_truncated_completions`)."""
    top_entropy_quantile: float = Field(default=1.0, ge=0, le=1)
    """Keep in the policy loss only this top fraction of the micro-batch's model tokens by entropy ("Beyond
    the 80/20 Rule", 0.2 there; TRL `top_entropy_quantile`); 1 keeps every token."""
    kl_coef: float = Field(default=0.0, ge=0)
    """Weight of the KL to the reference model (the starting weights) in the loss; 0 turns it off."""
    kl_estimator: KLEstimator = "k3"
    """The per-token KL estimate in the loss: k1, k2, k3, abs, or low_var (k3 clamped to +-10, verl's
    `low_var_kl`). verl `kl_loss_type`; TRL always k3."""
    kl_bias_correction: bool = False
    """Weight the KL estimate by pi / pi_old (DeepSeek-V3.2's unbiased KL; TRL `use_bias_correction_kl`)."""
    kl_in_reward: float = Field(default=0.0, ge=0)
    """Take coef x the trajectory's summed k1 KL (sampler vs reference log-probs) off its reward before the
    advantages (verl `use_kl_in_reward` with a fixed `kl_coef`); 0 turns it off."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (off by default)."""
    activation_checkpointing: Literal["off", "all", "every", "auto"] = "off"
    """Recompute decoder layers' activations in the backward pass instead of keeping them (less memory,
    more time): `off`; `all` layers; `every` `checkpoint_every`-th layer; `auto`, the least checkpointing
    whose activations for a micro-batch of `micro_batch_tokens` fit in `activation_memory_fraction` of
    the device's free memory (harness/training/memory.py). `true` / `false` read as `all` / `off`."""
    checkpoint_every: int = Field(default=2, ge=1)
    """With `activation_checkpointing: every`: every k-th decoder layer (0, k, 2k, ...) is checkpointed."""
    activation_memory_fraction: float = Field(default=0.5, gt=0, le=1)
    """With `activation_checkpointing: auto`: the share of the free memory (after the optimizer's state)
    the activations may take."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """The compute precision of forward and backward; the optimizer's weights and state stay float32."""
    mixed_precision: Literal["master", "autocast"] = "master"
    """How `dtype: bfloat16` is done. `master`: the model computes in a bfloat16 copy of its weights, made
    once per step from float32 master weights that AdamW updates (under FSDP, its MixedPrecisionPolicy
    does the same per shard); an in-place sampler then samples in bfloat16 too. `autocast`: float32
    weights cast to bfloat16 at every use by torch.autocast, on a GPU only."""
    parallel: Literal["replicate", "fsdp"] = "replicate"
    """With several processes: all-reduced gradients over full replicas, or FSDP2 sharding."""

    @field_validator("activation_checkpointing", mode="before")
    @classmethod
    def _on_off(cls, value: object) -> object:
        return {True: "all", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _consistent(self) -> LearnerConfig:
        if self.ratio_against == "sampler" and self.importance != "none":
            raise ValueError(
                "ratio_against: sampler takes the ratio against the sampler's log-probs, which already"
                " corrects for it: set importance: none as well"
            )
        if self.rejection_band is not None and not 0 <= self.rejection_band[0] < 1 < self.rejection_band[1]:
            raise ValueError(
                f"rejection_band must be [low, high] with low < 1 < high, got {self.rejection_band}"
            )
        return self


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
    teacher_logprobs: list[float] | None = None
    """The privileged teacher's log-prob of each token, aligned to ids[1:] (0 off the mask), when dense
    credit scored the row; recorded in learner.jsonl for the viewer."""


def rows_from_trajectories(
    trajectories: Sequence[Trajectory], config: LearnerConfig, reward_offsets: Sequence[float] | None = None
) -> tuple[list[Row], dict[str, float]]:
    """Group advantages, broadcast to every segment of each trajectory (contract 3).

    Rollouts marked infra_error, and those whose ids were not verified or not trainable, take no part
    in the advantage statistics and give no rows (contract 4, contract 1). `reward_offsets` are taken off
    the rewards first (the KL in the reward, `Learner.trajectory_kl`).
    """
    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float64)  # (N,)
    if reward_offsets is not None:
        rewards = rewards - torch.tensor(list(reward_offsets), dtype=torch.float64)  # (N,)
    valid = torch.tensor(
        [t.status != "infra_error" and t.trainable and t.ids_verified for t in trajectories]
    )  # (N,)
    advantages, kept = trajectory_advantages(rewards, [t.group_id for t in trajectories], valid, config)
    rows = []
    for t, advantage, keep in zip(trajectories, advantages.tolist(), kept.tolist(), strict=True):
        if keep:
            rows += segment_rows(t, advantage, config.mask_truncated)
    kept_adv = advantages[kept]
    stats = {
        "advantage_mean": kept_adv.mean().item() if kept_adv.numel() else 0.0,
        "advantage_abs_mean": kept_adv.abs().mean().item() if kept_adv.numel() else 0.0,
        "trajectories_used": float(kept.sum().item()),
        "trajectories_excluded": float((~valid).sum().item()),
    }
    return rows, stats


def trajectory_advantages(
    rewards: Tensor, group_ids: Sequence[str], valid: Tensor, config: LearnerConfig
) -> tuple[Tensor, Tensor]:
    """(N,) advantages by `config.advantage`, and (N,) the rows kept (valid, and not in a uniform group
    when `drop_uniform_groups`)."""
    advantages, kept = group_advantages(
        rewards, group_ids, valid, config.advantage_scale, config.drop_uniform_groups, config.std_eps
    )  # (N,), (N,)
    if config.advantage == "rloo":
        advantages = family.rloo_advantages(rewards, group_ids, valid)  # (N,)
    elif config.advantage == "gpg":
        advantages = family.gpg_advantages(rewards, group_ids, valid)  # (N,)
    return advantages, kept


def segment_rows(trajectory: Trajectory, advantage: float, mask_truncated: bool) -> list[Row]:
    """One row per segment with a model token; with `mask_truncated`, the tokens of generations the token
    limit cut off are not trained on (a row left without one is dropped)."""
    rows = []
    for segment in trajectory.segments:
        ids, mask, logprobs = segment.ids_and_mask()
        if mask_truncated:
            cut = [0] * len(segment.prompt_ids)
            for turn in segment.turns:
                cut += [turn.finish_reason == "length"] * len(turn.generated_ids) + [0] * len(
                    turn.appended_ids
                )
            kept = family.truncated_masked(
                torch.tensor([mask]), torch.tensor([cut], dtype=torch.bool)
            )  # (1, L)
            mask = kept[0].tolist()
        if sum(mask):
            rows.append(Row(ids, mask, logprobs, advantage, source=(trajectory.id, segment.index)))
    return rows


def micro_batches(lengths: Sequence[int], token_budget: int, packed: bool = False) -> list[list[int]]:
    """Row indices grouped longest-first so that a micro-batch's positions stay within the budget: rows x
    longest row padded, the sum of the lengths packed."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches and micro_batch_positions(lengths, [*batches[-1], i], packed) <= token_budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def micro_batch_positions(lengths: Sequence[int], batch: list[int], packed: bool) -> int:
    """Positions the model computes for the rows `batch`: their lengths summed packed, rows x longest padded."""
    return sum(lengths[i] for i in batch) if packed else len(batch) * max(lengths[i] for i in batch)


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
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    temperature: float,
    mask: Tensor,
    packed: Packed | None = None,
) -> tuple[Tensor, Tensor]:
    """log p(ids[t+1] | ids[:t+1]) at the sampler's temperature where `mask` is 1 (0 elsewhere), and the
    logits of those positions. With `packed` (the same rows, `packing.pack`), the model runs on the rows
    end to end instead of padded, and the result is laid out as the padded one.

    The LM head and the float32 log-softmax run only on the masked positions: over a long segment the
    full (B, T, V) logits would be the largest tensor of the step, and the prompt never needs them.
    """
    if packed is not None:
        chosen, logits = _masked_head(
            model, packed_hidden(model, packed), packed.input_ids, packed.mask, temperature
        )
        return unpack(chosen, packed), logits  # (B, T-1), (N, V)
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return _masked_head(model, hidden, input_ids, mask, temperature)


def _masked_head(
    model: Any, hidden: Tensor, input_ids: Tensor, mask: Tensor, temperature: float
) -> tuple[Tensor, Tensor]:
    """hidden (B, T, H), ids (B, T), mask (B, T-1) -> the log-probs (B, T-1) of ids[1:] where mask is 1,
    and the logits (N, V) of those positions, in row-major order."""
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


def objective(
    config: LearnerConfig,
    logprobs: Tensor,
    logits: Tensor,
    batch: MicroBatch,
    reference: Tensor | None,
    norm_tokens: int,
    norm_seqs: int,
) -> tuple[Tensor, dict[str, float]]:
    """The scalar loss of one micro-batch, composed as `config` says: the per-token surrogate
    (`surrogate`), times the importance weights, on the tokens kept by rejection and entropy selection,
    plus the KL to the reference and minus the entropy bonus, then aggregated over the step's totals.
    With the defaults it is `grpo.grpo_loss`. logprobs (with grad), reference: (B, T-1); logits: (N, V)
    of the mask-1 positions."""
    mask = batch.mask  # (B, T-1)
    old = batch.sampler if config.ratio_against == "sampler" else logprobs.detach()  # (B, T-1)
    per_token, metrics = surrogate(config, logprobs, old, batch.advantage, mask)  # (B, T-1)
    if config.importance != "none":
        if config.importance_level == "token":
            weights, _, is_metrics = importance_weights(
                logprobs.detach(), batch.sampler, mask, config.importance, config.importance_cap
            )  # (B, T-1)
        else:
            mode: Literal["truncate", "mask"] = "truncate" if config.importance == "truncate" else "mask"
            weights, is_metrics = family.sequence_importance_weights(
                logprobs.detach(), batch.sampler, mask, mode, config.importance_cap
            )  # (B, T-1)
        if config.importance_batch_normalize:
            weights = family.batch_normalized(weights, mask, config.importance_level)  # (B, T-1)
        per_token = per_token * weights  # (B, T-1)
        metrics |= is_metrics
    if config.rejection_band is not None:
        kept, rs_metrics = family.geometric_rejection(
            logprobs.detach(), batch.sampler, mask, config.rejection_band
        )
        per_token = per_token * kept  # (B, T-1) rejected rows keep their place in the denominators
        metrics |= rs_metrics
    entropy = torch.zeros_like(mask)  # (B, T-1)
    if config.top_entropy_quantile < 1.0 or config.entropy_coef:  # a softmax over (N, V): only when asked
        entropy[mask.bool()] = entropy_from_logits(logits).to(entropy.dtype)
    if config.top_entropy_quantile < 1.0:
        per_token = per_token * family.top_entropy_mask(entropy.detach(), mask, config.top_entropy_quantile)
    if reference is not None and config.kl_coef > 0:
        kl = family.kl_estimate(logprobs, reference.detach(), config.kl_estimator)  # (B, T-1)
        if config.kl_bias_correction:
            kl = family.kl_bias_corrected(kl, logprobs, old)  # (B, T-1)
        per_token = per_token + config.kl_coef * kl  # (B, T-1)
        metrics["kl_ref"] = aggregate(kl.detach(), mask, "token-mean").item()
    if config.entropy_coef:
        per_token = per_token - config.entropy_coef * entropy  # (B, T-1)
    loss = aggregate(per_token, mask, config.loss_agg, norm_tokens, norm_seqs, config.max_len)  # ()
    return loss, metrics


def surrogate(
    config: LearnerConfig, logprobs: Tensor, old: Tensor, advantages: Tensor, mask: Tensor
) -> tuple[Tensor, dict[str, float]]:
    """The per-token policy loss `config.policy_loss` names (grpo.py, family.py). All (B, T-1)."""
    if config.policy_loss == "ppo":
        return policy_loss(
            logprobs, old, advantages, mask, config.clip_low, config.clip_high, config.dual_clip
        )
    if config.policy_loss == "gspo":
        return family.gspo_loss(logprobs, old, advantages, mask, config.clip_low, config.clip_high)
    if config.policy_loss == "cispo":
        return family.cispo_loss(logprobs, old, advantages, mask, config.clip_low, config.clip_high)
    if config.policy_loss == "sapo":
        return family.sapo_loss(logprobs, old, advantages, mask, config.sapo_tau_pos, config.sapo_tau_neg)
    return family.gpg_loss(logprobs, advantages, mask)


def checkpointing(model: torch.nn.Module, config: LearnerConfig, device: torch.device) -> int | None:
    """Which decoder layers `config.activation_checkpointing` checkpoints: every k-th, or None."""
    if config.activation_checkpointing == "off":
        return None
    if config.activation_checkpointing == "all":
        return 1
    if config.activation_checkpointing == "every":
        return config.checkpoint_every
    c: Any = model.config
    shape = LayerShape(int(c.hidden_size), int(c.intermediate_size), int(c.num_hidden_layers))
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else psutil.virtual_memory().available
    budget = int((free - 3 * params) * config.activation_memory_fraction)  # AdamW's two moments and the grads
    value_bytes = 2 if config.dtype == "bfloat16" and device.type == "cuda" else 4
    return checkpoint_every(shape, config.micro_batch_tokens, value_bytes, max(0, budget))


class MaskedLogprobs(torch.nn.Module):
    """`token_logprobs` as a module, so that FSDP2 can shard it at the root: its forward is where the
    root's parameters (embeddings, final norm, LM head, tied or not) are gathered and their gradients
    reduced, although the decoder and the head are called separately inside."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        temperature: float,
        mask: Tensor,
        packed: Packed | None,
    ) -> Any:
        return token_logprobs(self.model, input_ids, attention_mask, temperature, mask, packed)


def shard(model: torch.nn.Module, bfloat16: bool = False) -> MaskedLogprobs:
    """FSDP2 over the current process group: one unit per decoder layer, the rest in the root unit.
    Gradients are summed, not averaged, across processes: each process's loss is already divided by
    the token count of the whole step. `bfloat16`: the shards stay float32 (the master weights) and are
    gathered as bfloat16 for compute; gradients are reduced in float32."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bfloat16 else None
    )
    options: dict[str, Any] = {} if policy is None else {"mp_policy": policy}
    for layer in model.get_decoder().layers:  # type: ignore[operator]
        fully_shard(layer, **options)
    root = MaskedLogprobs(model)
    fully_shard(root, **options)
    for module in root.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no pre-multiplied sum)
    return root


def master_weights(model: torch.nn.Module) -> torch.nn.Module:
    """A float32 copy of `model` to keep and step; `model` itself becomes the bfloat16 copy that computes."""
    master = copy.deepcopy(model).float()
    model.to(torch.bfloat16)
    return master


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
        """`reference`: a frozen copy of the starting weights, needed for a KL (`kl_coef`, `kl_in_reward`)."""
        if (config.kl_coef > 0 or config.kl_in_reward > 0) and reference is None:
            raise ValueError("learner.kl_coef > 0 and learner.kl_in_reward > 0 need a reference model")
        self.reference = reference
        self.model = model
        self.config = config
        self.pad_id = pad_id
        self.temperature = temperature
        self.device = next(model.parameters()).device
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.sharded = config.parallel == "fsdp" and self.world > 1
        master = config.dtype == "bfloat16" and config.mixed_precision == "master"
        self.master = master_weights(model) if master and not self.sharded else None
        """float32 master weights of the bfloat16 `model` (`mixed_precision: master`, unsharded)."""
        self.trained = self.master if self.master is not None else model
        """The module whose weights the optimizer steps: the master weights, or the model itself."""
        # Sharding replaces the parameters with sharded ones: the optimizer is made after it.
        self.forward = shard(model, bfloat16=master) if self.sharded else MaskedLogprobs(model)
        self.optimizer = torch.optim.AdamW(
            [p for p in self.trained.parameters() if p.requires_grad],
            lr=config.lr,
            weight_decay=config.weight_decay,
        )
        self.checkpoint_every = checkpointing(model, config, self.device)
        """Every k-th decoder layer is checkpointed (1: all); None: none."""
        if self.checkpoint_every is not None:
            model.activation_checkpointing_enable(every_n_layers=self.checkpoint_every)  # type: ignore[operator]
        self.learner_logprobs: dict[tuple[str, int], list[float]] = {}
        """After a GRPO step: the learner's log-prob of every mask-1 token (index >= 1) of each sourced row."""

    def _autocast(self) -> torch.autocast:
        autocast = self.config.dtype == "bfloat16" and self.config.mixed_precision == "autocast"
        enabled = autocast and self.device.type == "cuda"
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=enabled)

    def _share(self, rows: Sequence[Row]) -> list[Row]:
        return list(rows[self.rank :: self.world])

    def _micro_batches(self, rows: Sequence[Row]) -> list[list[int]]:
        """This process's micro-batches. Sharded, every process must run as many forward and backward
        passes as the others (each one gathers parameters collectively): the short ones get empty
        micro-batches (index -1: a row with loss mask 0)."""
        batches = micro_batches(
            [len(r.ids) for r in rows], self.config.micro_batch_tokens, self.config.packing
        )
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

    def _backward(self, loss: Tensor) -> None:
        """Backward; packed, with the packed attention in place, since checkpointed layers run their forward
        again in it."""
        with packed_attention_on(self.model) if self.config.packing else nullcontext():
            loss.backward()

    def _pack(self, rows: Sequence[Row]) -> Packed | None:
        return pack(rows, self.device) if self.config.packing else None

    def _reference_logprobs(self, batch: MicroBatch, packed: Packed | None) -> Tensor:
        """(B, T-1) the frozen reference's log-probs of the batch's tokens, where its mask is 1."""
        if self.reference is None:
            raise ValueError("a KL to the reference needs a reference model")
        with torch.no_grad(), self._autocast():
            reference, _ = token_logprobs(
                self.reference, batch.input_ids, batch.attention_mask, self.temperature, batch.mask, packed
            )
        return reference

    def trajectory_kl(self, trajectories: Sequence[Trajectory]) -> list[float]:
        """Each trajectory's summed k1 KL, sampler vs reference log-probs, over its model tokens in every
        segment (for `kl_in_reward`; 0 for a trajectory without a trainable segment)."""
        rows = [r for t in trajectories for r in segment_rows(t, 0.0, mask_truncated=False)]
        owner = {t.id: i for i, t in enumerate(trajectories)}
        kl = torch.zeros(len(trajectories), dtype=torch.float64)  # (N,)
        lengths = [len(r.ids) for r in rows]
        for indices in micro_batches(lengths, self.config.micro_batch_tokens, self.config.packing):
            chosen = [rows[i] for i in indices]
            batch = collate(chosen, self.pad_id, self.device)
            reference = self._reference_logprobs(batch, self._pack(chosen))  # (B, T-1)
            estimate = family.kl_estimate(batch.sampler, reference, "k1")  # (B, T-1)
            owners = torch.tensor([owner[source[0]] for i in indices if (source := rows[i].source)])  # (B,)
            _, summed = family.kl_in_reward(
                kl.new_zeros(kl.shape), estimate.cpu(), owners, batch.mask.cpu(), 1.0
            )
            kl += summed  # (N,)
        return kl.tolist()

    def grpo_step(self, rows: Sequence[Row]) -> dict[str, float]:
        """One optimizer step on all rows of a batch; returns the step's metrics."""
        self.learner_logprobs = {}
        metrics = self.accumulate_grpo(rows)
        return metrics | self.apply()

    def sft_step(self, rows: Sequence[Row]) -> dict[str, float]:
        """One optimizer step of supervised fine-tuning: token-mean NLL of the mask-1 tokens."""
        metrics = self.accumulate_sft(rows)
        return metrics | self.apply()

    def accumulate_grpo(
        self, rows: Sequence[Row], totals: tuple[float, float] | None = None
    ) -> dict[str, float]:
        """Forward and backward over this process's share of the rows, micro-batch by micro-batch, adding
        to the gradients and to `learner_logprobs`. `totals`: the (mask-1 tokens, rows) the loss is
        normalised by; by default those of `rows`, the whole step. (1, 1) leaves the normalising to the
        caller (`grpo.aggregate_divisor`), which learns a step's groups before it knows its totals."""
        mine = self._share(rows)
        norm_tokens, norm_seqs = totals or (
            self._total(sum(sum(r.mask[1:]) for r in mine)),
            self._total(len(mine)),
        )
        sums: dict[str, float] = {}
        maxes: dict[str, float] = {}
        self.model.train()
        for batch_rows in self._micro_batches(mine):
            chosen = self._rows(mine, batch_rows)
            batch, packed = collate(chosen, self.pad_id, self.device), self._pack(chosen)
            with self._autocast():
                logprobs, logits = self.forward(
                    batch.input_ids, batch.attention_mask, self.temperature, batch.mask, packed
                )  # (B, T-1), (N, V)
            for b, i in enumerate(batch_rows):
                source = mine[i].source if i >= 0 else None
                if source is not None:
                    where = batch.mask[b].bool()  # (T-1,)
                    self.learner_logprobs[source] = logprobs[b][where].tolist()
            reference = self._reference_logprobs(batch, packed) if self.config.kl_coef > 0 else None
            loss, metrics = objective(
                self.config,
                logprobs,
                logits,
                batch,
                reference,
                max(1, int(norm_tokens)),
                max(1, int(norm_seqs)),
            )
            self._backward(loss)
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
            chosen = self._rows(mine, batch_rows)
            batch = collate(chosen, self.pad_id, self.device)
            with self._autocast():
                logprobs, _ = self.forward(
                    batch.input_ids, batch.attention_mask, 1.0, batch.mask, self._pack(chosen)
                )
            loss = -(logprobs * batch.mask).sum() / norm_tokens  # ()
            self._backward(loss)
            total_loss += float(loss.item())
        return {"loss": self._total(total_loss)}

    def scale_gradients(self, factor: float) -> None:
        """Multiplies the accumulated gradients by `factor` (before `apply` reduces and clips them)."""
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.mul_(factor)

    def reduce_gradients(self) -> None:
        """Sums gradients over processes: each one's loss is already over the global token count.
        (Sharded, FSDP2 has reduce-scattered them in the backward pass.)"""
        if self.world > 1 and not self.sharded:
            for p in self.trained.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)

    def apply(self) -> dict[str, float]:
        """Reduces, clips and applies the accumulated gradients (with master weights: moved to them in
        float32 first, and the bfloat16 copy made from them after)."""
        if self.master is not None:
            for kept, computed in zip(self.master.parameters(), self.model.parameters(), strict=True):
                kept.grad = None if computed.grad is None else computed.grad.float()
                computed.grad = None
        self.reduce_gradients()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.trained.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.master is not None:
            with torch.no_grad():
                for kept, computed in zip(self.master.parameters(), self.model.parameters(), strict=True):
                    computed.copy_(kept)
        norm = float(grad_norm.full_tensor().item() if isinstance(grad_norm, DTensor) else grad_norm.item())
        return {"grad_norm": norm if math.isfinite(norm) else float("nan")}

    def full_state_dict(self) -> dict[str, Tensor]:
        """The whole weights on every process (gathered when sharded), on the CPU, under the model's names."""
        state = {}
        for name, value in self.trained.state_dict().items():
            full = value.full_tensor() if isinstance(value, DTensor) else value
            state[name] = full.detach().cpu()
        return state
