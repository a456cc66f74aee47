"""GRPO learning math as small pure tensor functions: no model, no I/O.

Shapes: N trajectories (rollouts), S segments (context windows; the rows the learner trains on, several
per trajectory after self-summaries), T tokens per segment row (padded), V vocabulary.

    group_advantages   (N,) rewards -> (N,) advantages, (N,) kept        group-relative baseline
    token_advantages   (N,) -> (S, T)                                      one reward, every model token
    importance_weights (S, T) learner-old vs sampler log-probs -> weights  TIS / MIS
    policy_loss        (S, T) -> (S, T) per-token clipped loss             PPO clip, clip-higher, dual clip
    aggregate          (S, T) -> scalar                                    token-mean, seq-mean-..., Dr. GRPO
    grpo_loss          the three above, composed

Each docstring names the formula's source and the verl (0.9.x, `verl/trainer/ppo/core_algos.py`,
`rollout_corr_helper.py`) and TRL (`GRPOTrainer`, 1.x) option it corresponds to. Their code was read
for the facts only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

Scale = Literal["none", "group", "batch"]
AggMode = Literal[
    "token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]
ISMode = Literal["truncate", "mask", "none"]

# exp(20) ~ 5e8: a log-ratio beyond this is already "infinitely off-policy"; clamping keeps exp() finite
# so that 0 * ratio stays 0 instead of NaN. verl clamps at the same bound.
LOG_RATIO_BOUND = 20.0


def group_advantages(
    rewards: Tensor,
    group_ids: Sequence[str] | Tensor,
    valid: Tensor,
    scale: Scale = "none",
    drop_uniform_groups: bool = False,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """Group-relative advantage of each trajectory: its reward minus its group's mean reward.

    Sources: DeepSeekMath GRPO (Shao et al. 2024) §4.1.2, outcome supervision,
    A_i = (r_i - mean(r)) / std(r); Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training")
    §3.1 drops the division by std (it up-weights too-easy and too-hard questions), so scale="none" is
    the default here. scale="batch" keeps the group mean but divides by the std of all rewards in the
    batch (the "Lite PPO" recipe, arXiv 2508.08221, which TRL cites for this option).

    std is the unbiased (Bessel-corrected, n - 1) standard deviation, as `torch.std` gives: verl
    (`compute_grpo_outcome_advantage`) and TRL (`rewards.view(-1, G).std(dim=1)`) both use it. The
    population std (n) would give advantages sqrt(n / (n - 1)) times larger.

    Which option each `scale` is:
      - "none":  verl `norm_adv_by_std_in_grpo=False`; TRL `scale_rewards="none"`.
      - "group": verl `norm_adv_by_std_in_grpo=True` (std + 1e-6); TRL `scale_rewards="group"` (std + 1e-4).
      - "batch": no verl GRPO option; TRL `scale_rewards="batch"` (std of all rewards + 1e-4).

    Differences from both, on purpose:
      - `valid=False` rows (infra_error rollouts, DESIGN.md contract 4) take no part in any mean or std;
        their advantage is 0 and `kept` is False. verl and TRL have no such notion.
      - A group with one valid member has advantage 0 (no baseline to compare with). verl sets mean 0
        and std 1 for a singleton, so its advantage is the raw reward; TRL assumes equal-size groups.
      - A group whose valid rewards are all equal (a singleton included) gets exactly 0 (no eps noise);
        with `drop_uniform_groups` its rows are not kept, like DAPO's dynamic sampling filter (verl
        `algorithm.filter_groups`), which drops such groups from the batch.

    Args:
        rewards: (N,) one reward per trajectory.
        group_ids: (N,) group of each trajectory, as strings or as a long tensor.
        valid: (N,) bool, False for infra_error rollouts.

    Returns:
        advantages (N,) and kept (N,) bool: the rows to train on.
    """
    _check_group_inputs(rewards, group_ids, valid, scale)
    valid = valid.bool()  # (N,)
    gid = _group_index(group_ids, rewards.device)  # (N,) long in [0, G)
    # An invalid row's reward is never read: a NaN or inf there must not reach a sum (NaN * 0 is NaN).
    # The math keeps the rewards' precision (float64 stays float64: a float32 cast cost 1.5e-4 relative
    # error against verl's float64 with `kl_in_reward`); integer rewards become float32.
    r = torch.where(valid, rewards if rewards.is_floating_point() else rewards.float(), 0.0)  # (N,)
    count, mean, uniform = _group_stats(r, gid, valid)  # (G,) each
    centered = (r - mean[gid]) * valid.to(r.dtype)  # (N,) 0 on invalid rows
    if scale == "group":
        centered = centered / (_group_std(centered, gid, count)[gid] + eps)  # (N,)
    elif scale == "batch":
        centered = centered / (_batch_std(r[valid]) + eps)  # (N,)
    informative = valid & ~uniform[gid]  # (N,)
    advantages = torch.where(informative, centered, torch.zeros_like(centered))  # (N,)
    kept = informative if drop_uniform_groups else valid.clone()  # (N,)
    return advantages, kept


def _check_group_inputs(
    rewards: Tensor, group_ids: Sequence[str] | Tensor, valid: Tensor, scale: str
) -> None:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    n = rewards.shape[0]
    if len(group_ids) != n or valid.shape != (n,):
        raise ValueError(f"group_ids and valid must have length {n}, like rewards")
    if scale not in ("none", "group", "batch"):
        raise ValueError(f"scale must be 'none', 'group' or 'batch', got {scale!r}")


def _group_stats(r: Tensor, gid: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Over each group's valid rows: their count, their mean reward, and whether their rewards are all
    equal (a singleton included). (G,) each; `r` (N,) is 0 on invalid rows."""
    w = valid.to(r.dtype)  # (N,) 1 for valid rows
    zeros = r.new_zeros(int(gid.max().item()) + 1 if gid.numel() else 0)  # (G,)
    count = zeros.index_add(0, gid, w)  # (G,)
    mean = zeros.index_add(0, gid, r * w) / count.clamp(min=1)  # (G,)
    r_max = zeros.scatter_reduce(0, gid[valid], r[valid], "amax", include_self=False)  # (G,)
    r_min = zeros.scatter_reduce(0, gid[valid], r[valid], "amin", include_self=False)  # (G,)
    return count, mean, r_max == r_min


def _group_std(centered: Tensor, gid: Tensor, count: Tensor) -> Tensor:
    """The unbiased (n - 1) std of each group's valid rewards, from the (N,) centered rewards (0 on
    invalid rows) and the (G,) valid counts; 0 for a singleton. Returns (G,)."""
    sq = centered.new_zeros(count.shape).index_add(0, gid, centered**2)  # (G,)
    return (sq / (count - 1).clamp(min=1)).sqrt()  # (G,)


def _batch_std(valid_r: Tensor) -> Tensor:
    """The unbiased std of the batch's (n_valid,) valid rewards; 0 with fewer than two. Returns ()."""
    return valid_r.std() if valid_r.numel() > 1 else valid_r.new_zeros(())  # ()


def token_advantages(advantages: Tensor, segment_owner: Tensor, loss_mask: Tensor) -> Tensor:
    """The trajectory's advantage on every model token of every segment it owns, 0 elsewhere.

    DESIGN.md contract 3: one reward per trajectory, the same for all its segments (self-summaries
    included); verl and TRL broadcast the same way (`scores.unsqueeze(-1) * response_mask`,
    `advantages.unsqueeze(1)`), with one row per sequence instead of per segment.

    Args:
        advantages: (N,) one per trajectory.
        segment_owner: (S,) long, the trajectory index (into N) of each segment row.
        loss_mask: (S, T) 1 on model-produced tokens (contract 2).

    Returns:
        (S, T) advantages.
    """
    if segment_owner.shape != loss_mask.shape[:1]:
        raise ValueError("segment_owner must have one entry per loss_mask row")
    per_segment = advantages[segment_owner]  # (S,)
    return per_segment.unsqueeze(-1) * loss_mask.to(advantages.dtype)  # (S, T)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 3.0,
) -> tuple[Tensor, dict[str, float]]:
    """Per-token clipped surrogate loss, with decoupled clip bounds and the dual clip.

    Sources: PPO clip (Schulman et al. 2017) as used by GRPO, DeepSeekMath (Shao et al. 2024) eq. 3:
        loss = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A),  ratio = exp(logp - old);
    clip_high > clip_low is DAPO's Clip-Higher (Yu et al. 2025, "Clip-Higher"; 0.2 / 0.28 are its values);
    for A < 0 the loss is also capped at -dual_clip * A, the dual-clip PPO bound of Ye et al. 2020
    ("Mastering Complex Control in MOBA Games with Deep RL"): loss = min(loss, -A * dual_clip). Without
    it a token whose ratio has grown large gets an unbounded push down. `dual_clip=None` disables it.

    verl: `compute_policy_loss_vanilla` with `clip_ratio_low`, `clip_ratio_high`, `clip_ratio_c`
    (dual clip always on there, default 3.0). TRL: `epsilon` (low), `epsilon_high`, and `delta`, which
    clamps the unclipped ratio at delta before the min; for A < 0 that is the same dual clip (loss
    -delta * A once ratio > delta), for A > 0 it changes nothing while delta > 1 + epsilon_high.

    Gradients flow only through `logprobs`; `old_logprobs` and `advantages` are detached.

    Args:
        logprobs: (S, T) the learner's log-probs of the sampled tokens, with grad.
        old_logprobs: (S, T) the log-probs the ratio is taken against (the learner before this update).
        advantages: (S, T), e.g. from `token_advantages`.
        mask: (S, T) 1 on tokens that count.

    Returns:
        per-token loss (S, T), 0 where mask is 0, and metrics: clip_fraction (tokens whose clipped term
        won: A > 0 and ratio > 1 + clip_high, or A < 0 and ratio < 1 - clip_low; verl `pg_clipfrac`,
        TRL `clip_ratio/region_mean`), dual_clip_fraction (A < 0 and ratio > dual_clip; verl
        `pg_clipfrac_lower`), approx_kl (mean of old - new, verl `ppo_kl`), ratio_mean, ratio_max.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (it bounds ratio * |A| from above), got {dual_clip}")
    m = mask.bool()  # (S, T)
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)  # (S, T)
    ratio = log_ratio.exp()  # (S, T)
    loss, clip_won, dual_clipped = _clipped_surrogate(
        ratio, advantages.detach(), clip_low, clip_high, dual_clip
    )  # (S, T) each
    loss = torch.where(m, loss, torch.zeros_like(loss))  # (S, T)
    with torch.no_grad():
        metrics = _clip_metrics(log_ratio, ratio, clip_won, dual_clipped, m)
    return loss, metrics


def _clipped_surrogate(
    ratio: Tensor, adv: Tensor, clip_low: float, clip_high: float, dual_clip: float | None
) -> tuple[Tensor, Tensor, Tensor]:
    """`policy_loss`'s formula, on every token: the loss, and (bool) where the clipped term won and where
    the dual clip capped the loss. All (S, T)."""
    unclipped = -adv * ratio  # (S, T)
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # (S, T)
    loss = torch.maximum(unclipped, clipped)  # (S, T)  = -min(ratio*A, clip(ratio)*A)
    dual_clipped = torch.zeros_like(loss, dtype=torch.bool)  # (S, T)
    if dual_clip is not None:
        bound = -adv * dual_clip  # (S, T)
        dual_clipped = (adv < 0) & (loss > bound)  # (S, T)
        loss = torch.where(adv < 0, torch.minimum(loss, bound), loss)  # (S, T)
    return loss, clipped > unclipped, dual_clipped


def _clip_metrics(
    log_ratio: Tensor, ratio: Tensor, clip_won: Tensor, dual_clipped: Tensor, m: Tensor
) -> dict[str, float]:
    """`policy_loss`'s metrics, over the tokens of the (S, T) bool mask `m`."""
    n = m.sum().clamp(min=1)  # ()
    return {
        "clip_fraction": (clip_won & m).sum().div(n).item(),
        "dual_clip_fraction": (dual_clipped & m).sum().div(n).item(),
        "approx_kl": (-log_ratio).masked_fill(~m, 0.0).sum().div(n).item(),
        "ratio_mean": ratio.masked_fill(~m, 0.0).sum().div(n).item(),
        "ratio_max": ratio.masked_fill(~m, float("-inf")).max().item() if m.any() else 0.0,
    }


def aggregate(
    per_token: Tensor,
    mask: Tensor,
    mode: AggMode = "token-mean",
    norm_tokens: int | None = None,
    norm_seqs: int | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Reduce a per-token loss to the scalar to call backward on.

    With gradient accumulation over micro-batches, pass the optimizer step's totals (`norm_tokens`:
    mask-1 tokens in the whole step; `norm_seqs`: rows with at least one mask-1 token in the whole
    step); each micro-batch's value is then its share, and the micro-batch values sum to the
    full-batch value. Left None, they are counted in this call's `mask`.

    A "sequence" here is a segment row: a trajectory with a self-summary has two rows, and the seq-mean
    modes weigh each row equally.

    Modes (loss = sum over mask-1 tokens of per_token, unless said otherwise):
      - "token-mean": loss / norm_tokens. DAPO's token-level policy gradient loss (Yu et al. 2025,
        "Token-Level Policy Gradient Loss"): every token weighs the same, whatever its sequence's length.
        verl `loss_agg_mode="token-mean"` (with `batch_num_tokens`); TRL `loss_type="dapo"` (normalised
        by `num_items_in_batch`, the step's tokens). TRL `loss_type="bnpo"` is the same formula over
        the local micro-batch only (norm_tokens=None here).
      - "token-sum": the plain sum, no normaliser: the step's loss grows with its tokens (the learning
        rate must be set for it). verl's newest `seq-mean-token-sum-norm` with `loss_scale_factor=1`
        is this; TRL has no counterpart.
      - "seq-mean-token-sum": mean over rows of the row sum: each sequence's whole loss counts, so long
        sequences weigh more (a sequence-level REINFORCE objective). verl `"seq-mean-token-sum"`; no
        TRL counterpart.
      - "seq-mean-token-mean": mean over rows of (row sum / row tokens): GRPO as written in
        DeepSeekMath eq. 3 (1/G sum_i 1/|o_i| sum_t). verl `"seq-mean-token-mean"`; TRL
        `loss_type="grpo"`.
      - "seq-mean-token-sum-norm": loss / (norm_seqs * max_len), Dr. GRPO's constant normaliser (Liu et
        al. 2025 §3.1) that removes the 1/|o_i| length bias. `max_len` must be a constant of the run
        (e.g. the generation budget of a segment), never this batch's longest row. verl
        `"seq-mean-token-sum-norm"` with `loss_scale_factor` (defaults to the padded width there); TRL
        `loss_type="dr_grpo"` with `max_completion_length` (TRL counts every row, empty ones included).

    Args:
        per_token: (S, T) per-token loss.
        mask: (S, T) 1 on tokens that count.
    """
    m = mask.to(per_token.dtype)  # (S, T)
    row_sum = (per_token * m).sum(-1)  # (S,)
    row_tokens = m.sum(-1)  # (S,)
    if mode == "token-sum":
        return row_sum.sum()  # ()
    if mode == "seq-mean-token-mean":
        row_sum = row_sum / row_tokens.clamp(min=1)  # (S,) the row means, 0 for empty rows
    return row_sum.sum() / _normaliser(mode, row_tokens, norm_tokens, norm_seqs, max_len)  # ()


def _normaliser(
    mode: AggMode, row_tokens: Tensor, norm_tokens: int | None, norm_seqs: int | None, max_len: int | None
) -> Tensor | int:
    """What `aggregate` divides the summed row values by in `mode` (not "token-sum"), from the (S,)
    mask-1 tokens of each row where the step's totals are None."""
    if mode == "token-mean":
        return norm_tokens if norm_tokens is not None else row_tokens.sum().clamp(min=1)
    n_seqs = norm_seqs if norm_seqs is not None else (row_tokens > 0).sum().clamp(min=1)
    if mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        return n_seqs
    if mode == "seq-mean-token-sum-norm":
        if max_len is None:
            raise ValueError(
                "seq-mean-token-sum-norm needs max_len, a constant such as the generation budget"
            )
        return n_seqs * max_len
    raise ValueError(f"unknown aggregation mode {mode!r}")


def aggregate_divisor(mode: AggMode, norm_tokens: float, norm_seqs: float) -> float:
    """What `aggregate` divides a step's summed loss by, given the step's totals: the loss aggregated
    with `norm_tokens = norm_seqs = 1`, divided by this, is the loss aggregated with the totals (every
    mode is linear in its one normaliser; `seq-mean-token-sum-norm` keeps its `max_len` either way).
    A learner that must start before the totals are known (groups learned as they are graded,
    harness/training/streaming.py) scales its summed gradient by the inverse at the end."""
    if mode == "token-sum":
        return 1.0
    if mode == "token-mean":
        return max(1.0, norm_tokens)
    return max(1.0, norm_seqs)  # the seq-mean modes


def kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k1 estimate of KL(pi || ref): logp - ref_logp. Unbiased, can be negative.

    Schulman, "Approximating KL Divergence" (2020), k1. verl `kl_penalty(..., "kl" | "k1")`, used by
    `algorithm.use_kl_in_reward` (subtracted from the reward, as in PPO-RLHF). Shapes: (S, T) -> (S, T).
    """
    return logprobs - ref_logprobs  # (S, T)


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(pi || ref): exp(r) - r - 1 with r = ref_logp - logp. Unbiased, >= 0.

    Schulman, "Approximating KL Divergence" (2020), k3; the estimator of DeepSeekMath eq. 4, added to
    the loss with coefficient beta (eq. 3). verl `kl_penalty(..., "low_var_kl" | "k3")`, chosen by
    `actor.kl_loss_type` with `actor.use_kl_loss` (verl also clamps the result to [-10, 10]; not here);
    TRL `beta` (always k3, in the loss).
    Shapes: (S, T) -> (S, T).
    """
    r = (ref_logprobs - logprobs).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)  # (S, T)
    return r.exp() - r - 1.0  # (S, T)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the next-token distribution at each position: logsumexp(z) - sum softmax(z) * z.

    A diagnostic (entropy collapse, DAPO "Clip-Higher"); verl `entropy_from_logits`, TRL
    `entropy_from_logits`. Shapes: (S, T, V) -> (S, T).
    """
    probs = torch.softmax(logits, dim=-1)  # (S, T, V)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)  # (S, T)


def importance_weights(
    learner_old_logprobs: Tensor,
    sampler_logprobs: Tensor,
    mask: Tensor,
    mode: ISMode = "truncate",
    cap: float = 2.0,
    band: tuple[float, float] = (0.5, 2.0),
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """Per-token weights that correct for the sampler (vLLM, bf16) not being exactly the learner.

    w = exp(learner_old - sampler) = pi_learner / pi_sampler on the sampled token. Sources: Yao et al.
    2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training": truncated importance
    sampling (TIS), min(w, cap); and masked importance sampling (MIS; "When Speed Kills Stability:
    Demystifying RL Collapse from the Training-Inference Mismatch", 2025; IcePop): tokens with w outside
    `band` are dropped. The per-token policy loss is multiplied by the weights, which carry no gradient.

    verl (`rollout_corr_helper.compute_rollout_correction_weights`, `algorithm.rollout_correction`):
    "truncate" = `rollout_is="token"`, `rollout_is_threshold=cap`; "mask" = `rollout_is_threshold=
    "lo_hi"` (zero weight outside [lo, hi]), or `rollout_rs="token_k1"` which removes the tokens from the
    response mask instead. TRL: `vllm_importance_sampling_correction=True` with
    `vllm_importance_sampling_mode="token_truncate"` (clamp at `vllm_importance_sampling_cap`) or
    `"token_mask"` (weight 0 above the cap; TRL has no lower bound). The `sequence_*` modes of TRL and
    `rollout_is="sequence"` of verl (one weight per sequence, exp of the summed log-ratio) are not
    offered: on long agent trajectories the product of thousands of ratios is all noise.

    Args:
        learner_old_logprobs: (S, T) the learner's log-probs of the sampled tokens before the update.
        sampler_logprobs: (S, T) the sampler's log-probs, as stored with the segment (contract 1).
        mask: (S, T) 1 on tokens that count.

    Returns:
        weights (S, T) detached, 0 where dropped or mask is 0; the mask without the dropped tokens
        (S, T) bool; metrics: is_abs_log_ratio_mean, is_abs_log_ratio_max, is_truncated_fraction,
        is_masked_fraction (over mask-1 tokens).
    """
    if mode not in ("truncate", "mask", "none"):
        raise ValueError(f"mode must be 'truncate', 'mask' or 'none', got {mode!r}")
    m = mask.bool()  # (S, T)
    log_ratio = (learner_old_logprobs - sampler_logprobs).detach()  # (S, T)
    w = log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).exp()  # (S, T)
    truncated = torch.zeros_like(m)  # (S, T)
    dropped = torch.zeros_like(m)  # (S, T)
    if mode == "truncate":
        truncated = (w > cap) & m  # (S, T)
        weights = w.clamp(max=cap)  # (S, T)
    elif mode == "mask":
        low, high = band
        dropped = ((w < low) | (w > high)) & m  # (S, T)
        weights = w.masked_fill(dropped, 0.0)  # (S, T)
    else:
        weights = torch.ones_like(w)  # (S, T)
    weights = weights.masked_fill(~m, 0.0)  # (S, T)
    return weights, m & ~dropped, _is_metrics(log_ratio, truncated, dropped, m)


def _is_metrics(log_ratio: Tensor, truncated: Tensor, dropped: Tensor, m: Tensor) -> dict[str, float]:
    """`importance_weights`' metrics, over the tokens of the (S, T) bool mask `m`."""
    n = m.sum().clamp(min=1)  # ()
    abs_lr = log_ratio.abs().masked_fill(~m, 0.0)  # (S, T)
    return {
        "is_abs_log_ratio_mean": abs_lr.sum().div(n).item(),
        "is_abs_log_ratio_max": abs_lr.max().item() if m.any() else 0.0,
        "is_truncated_fraction": truncated.sum().div(n).item(),
        "is_masked_fraction": dropped.sum().div(n).item(),
    }


def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    sampler_logprobs: Tensor | None = None,
    is_mode: ISMode = "truncate",
    is_cap: float = 2.0,
    is_band: tuple[float, float] = (0.5, 2.0),
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 3.0,
    agg_mode: AggMode = "token-mean",
    norm_tokens: int | None = None,
    norm_seqs: int | None = None,
    max_len: int | None = None,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """The scalar GRPO loss of one (micro-)batch: `policy_loss`, times `importance_weights`, plus
    kl_coef * k3 against `ref_logprobs` (DeepSeekMath eq. 3; off by default), then `aggregate`.

    With one update per batch, `old_logprobs` is `logprobs.detach()` (ratio 1, the clip inactive).
    Tokens MIS drops keep their place in the denominators (weight 0), as in TRL and verl's IcePop
    mode, so `norm_tokens` can be counted from the loss masks before the step. All arguments are
    (S, T) tensors; see the functions above for the options.
    """
    per_token, metrics = policy_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high, dual_clip)
    if sampler_logprobs is not None:
        weights, _, is_metrics = importance_weights(
            old_logprobs, sampler_logprobs, mask, is_mode, is_cap, is_band
        )
        per_token = per_token * weights  # (S, T)
        metrics |= is_metrics
    if ref_logprobs is not None and kl_coef != 0.0:
        kl = kl_k3(logprobs, ref_logprobs.detach())  # (S, T)
        per_token = per_token + kl_coef * kl  # (S, T)
        metrics["kl_ref"] = aggregate(kl.detach(), mask, "token-mean").item()
    loss = aggregate(per_token, mask, agg_mode, norm_tokens, norm_seqs, max_len)  # ()
    return loss, metrics


def _group_index(group_ids: Sequence[str] | Tensor, device: torch.device) -> Tensor:
    """Group ids (strings, or any integers) -> (N,) long indices in [0, G), in order of first appearance."""
    keys = group_ids.tolist() if isinstance(group_ids, Tensor) else list(group_ids)
    index: dict[object, int] = {}
    return torch.tensor([index.setdefault(k, len(index)) for k in keys], dtype=torch.long, device=device)
