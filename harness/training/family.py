"""The rest of the policy-gradient family beside GRPO's PPO clip (issue 20): pure tensor functions, no
model and no I/O. `harness/training/grpo.py` holds GRPO itself; the learner picks from both by setting.

Shapes: N trajectories, S segment rows, T tokens per row (aligned to the predicted tokens ids[1:]).
A "sequence" below is a segment row: a trajectory with a self-summary has two, each its own sequence.

    Advantages (N,) -> (N,)
      rloo_advantages             leave-one-out baseline                      RLOO
      gpg_advantages              group mean baseline times B / B_valid       GPG
      kl_in_reward                reward minus beta * summed per-token KL     PPO-RLHF
    Per-token estimates (S, T) -> (S, T)
      kl_estimate                 k1 / k2 / k3 / abs / low_var of KL(pi || ref)
      kl_bias_corrected           an estimate times pi / pi_old               DeepSeek-V3.2
    Per-token losses (S, T) -> (S, T), metrics
      gspo_loss                   one ratio per sequence, PPO clip            GSPO
      cispo_loss                  clipped IS weight, stop-gradient, x log p   CISPO
      sapo_loss                   a soft gate instead of the clip             SAPO
      gpg_loss                    -A log p, no ratio                          GPG
    Off-policy correction and token selection (S, T) -> (S, T)
      sequence_importance_weights one IS weight per sequence, TIS / MIS
      geometric_rejection         sequences whose geometric-mean ratio leaves a band
      batch_normalized            weights divided by their batch mean
      truncated_masked            rows of truncated generations out of the loss
      top_entropy_mask            the top-rho quantile of tokens by entropy

Each docstring names its source and the verl (`verl/trainer/ppo/core_algos.py`,
`rollout_corr_helper.py`, read at b178a3c) and TRL (`GRPOTrainer`, read at f2cd577) option it
corresponds to; their code was read for the facts only. docs/algorithms.md has them as one table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from harness.training.grpo import LOG_RATIO_BOUND, _group_index, policy_loss

KLEstimator = Literal["k1", "k2", "k3", "abs", "low_var"]
LOW_VAR_BOUND = 10.0
"""verl clamps its `low_var_kl` (k3) estimate to [-10, 10]."""


# ---- advantages ---------------------------------------------------------------------------------------


def _group_stats(rewards: Tensor, group_ids: Sequence[str] | Tensor, valid: Tensor) -> tuple[Tensor, ...]:
    """Per row: the valid reward (0 on invalid rows), its group's valid count and sum, and whether the
    group's valid rewards are all equal. (N,) each."""
    valid = valid.bool()  # (N,)
    gid = _group_index(group_ids, rewards.device)  # (N,)
    groups = int(gid.max().item()) + 1 if gid.numel() else 0
    r = torch.where(
        valid, rewards if rewards.is_floating_point() else rewards.float(), 0.0
    )  # (N,) in their precision
    zeros = r.new_zeros(groups)  # (G,)
    count = zeros.index_add(0, gid, valid.to(r.dtype))  # (G,)
    total = zeros.index_add(0, gid, r)  # (G,)
    r_max = zeros.scatter_reduce(0, gid[valid], r[valid], "amax", include_self=False)  # (G,)
    r_min = zeros.scatter_reduce(0, gid[valid], r[valid], "amin", include_self=False)  # (G,)
    return r, count[gid], total[gid], (r_max == r_min)[gid]


def rloo_advantages(rewards: Tensor, group_ids: Sequence[str] | Tensor, valid: Tensor) -> Tensor:
    """REINFORCE leave-one-out: each rollout's baseline is the mean reward of the others in its group,
    A_i = r_i - 1/(G-1) sum_{j != i} r_j = G/(G-1) (r_i - mean(r)).

    Source: Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
    from Human Feedback in LLMs" §3.2 (Kool et al. 2019). verl `adv_estimator=rloo`; TRL `RLOOTrainer`.
    Invalid rows (infra errors) are neither baselines nor trained: advantage 0. A group with one valid
    row gets 0 (no other rollout to compare with); verl gives such a row its raw reward.

    rewards, valid: (N,); group_ids: (N,). Returns (N,).
    """
    r, count, total, uniform = _group_stats(rewards, group_ids, valid)  # (N,) each
    others = (total - r) / (count - 1).clamp(min=1)  # (N,) mean of the other valid rows
    advantage = r - others  # (N,)
    return torch.where(valid.bool() & (count > 1) & ~uniform, advantage, torch.zeros_like(advantage))


def gpg_advantages(
    rewards: Tensor, group_ids: Sequence[str] | Tensor, valid: Tensor, f_norm: float = 1.0
) -> Tensor:
    """GPG's advantage: A_i = alpha (r_i - mean(r)) / F_norm, alpha = B / (B - M), with B the valid rows
    and M those in groups whose rewards are all equal (their advantage is 0: "Accurate Gradient
    Estimation" rescales the batch as if only the informative rows were in it).

    Source: Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for Model
    Reasoning" (arXiv 2504.02546) §3. verl `adv_estimator=gpg` (with `loss_mode=gpg`); verl counts the
    rows with a non-zero reward as B - M instead, which differs from the paper when rewards are 0/1.
    No TRL counterpart.

    rewards, valid: (N,); group_ids: (N,). Returns (N,).
    """
    if f_norm <= 0:
        raise ValueError(f"f_norm must be positive, got {f_norm}")
    r, count, total, uniform = _group_stats(rewards, group_ids, valid)  # (N,) each
    informative = valid.bool() & ~uniform  # (N,)
    alpha = valid.sum().to(r.dtype) / informative.sum().clamp(min=1).to(r.dtype)  # ()
    advantage = alpha * (r - total / count.clamp(min=1)) / f_norm  # (N,)
    return torch.where(informative, advantage, torch.zeros_like(advantage))


def kl_in_reward(
    rewards: Tensor, kl: Tensor, segment_owner: Tensor, mask: Tensor, coef: float
) -> tuple[Tensor, Tensor]:
    """The reward with the KL to the reference taken off: r_i - coef * sum over the model tokens of all
    of trajectory i's segments of kl_t (PPO-RLHF, Ouyang et al. 2022 eq. 2; Stiennon et al. 2020).

    verl `algorithm.use_kl_in_reward` with a fixed controller (`kl_ctrl.kl_coef`): the per-token reward
    is score - coef * kl and GRPO sums it over the response, which is this. No TRL GRPO counterpart.

    rewards: (N,); kl: (S, T) per-token estimate (k1 in verl by default); segment_owner: (S,) long;
    mask: (S, T). Returns the new rewards (N,) and each trajectory's summed KL (N,).
    """
    per_row = (kl.detach() * mask).sum(-1)  # (S,)
    summed = rewards.new_zeros(rewards.shape).index_add(0, segment_owner, per_row.to(rewards.dtype))  # (N,)
    return rewards - coef * summed, summed


# ---- KL estimates -------------------------------------------------------------------------------------


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, estimator: KLEstimator) -> Tensor:
    """A per-token estimate of KL(pi || ref) from the sampled token's log-probs, x = logp - ref_logp.

    Schulman, "Approximating KL Divergence" (2020): k1 = x (unbiased, can be negative); k2 = x^2 / 2
    (biased, low variance, its gradient is the true KL gradient's estimate); k3 = exp(-x) + x - 1
    (unbiased, >= 0); abs = |x|. `low_var` is k3 clamped to [-10, 10], verl's `low_var_kl`. verl
    `kl_penalty` / `kl_loss_type`: "k1" ("kl"), "k2" ("mse"), "k3", "abs", "low_var_kl"; TRL: k3 always.

    logprobs, ref_logprobs: (S, T). Returns (S, T).
    """
    x = logprobs - ref_logprobs  # (S, T)
    if estimator == "k1":
        return x
    if estimator == "k2":
        return 0.5 * x.square()
    if estimator == "abs":
        return x.abs()
    if estimator in ("k3", "low_var"):
        neg = (-x).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)  # (S, T) ref_logp - logp
        k3 = neg.exp() - neg - 1.0  # (S, T)
        return k3.clamp(-LOW_VAR_BOUND, LOW_VAR_BOUND) if estimator == "low_var" else k3
    raise ValueError(f"unknown KL estimator {estimator!r}: k1, k2, k3, abs or low_var")


def kl_bias_corrected(kl: Tensor, logprobs: Tensor, old_logprobs: Tensor) -> Tensor:
    """The KL estimate weighted by pi / pi_old on the sampled token: the tokens were drawn from pi_old,
    so E_old[(pi / pi_old) k3] is the KL of the current policy (DeepSeek-V3.2 report, arXiv 2512.02556,
    "unbiased KL estimate"). TRL `use_bias_correction_kl=True` (off by default there); no verl option.
    The weight keeps its gradient, as in TRL. With one update per batch pi = pi_old and it is 1.

    kl, logprobs, old_logprobs: (S, T). Returns (S, T).
    """
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)  # (S, T)
    return kl * log_ratio.exp()  # (S, T)


# ---- per-token losses ---------------------------------------------------------------------------------


def _masked_mean(values: Tensor, mask: Tensor) -> float:
    m = mask.bool()  # (S, T)
    return float(values.masked_fill(~m, 0.0).sum().div(m.sum().clamp(min=1)).item())


def gspo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
) -> tuple[Tensor, dict[str, float]]:
    """Group Sequence Policy Optimization: the PPO clip on one ratio per sequence, the geometric mean of
    its tokens' ratios, s_i = exp(1/|y_i| sum_t (logp - old)), in the token form s_{i,t} = sg[s_i] *
    pi(y_t) / sg[pi(y_t)] (same value, and a per-token advantage can be used):
        loss_t = -min(s_{i,t} A_t, clip(s_{i,t}, 1 - clip_low, 1 + clip_high) A_t).

    Source: Zheng et al. 2025, "Group Sequence Policy Optimization" (arXiv 2507.18071) eq. 5-7 and
    GSPO-token eq. 13; 3e-4 / 4e-4 are the paper's clip ranges. verl `loss_mode=gspo` (with
    `clip_ratio_low/high`, always seq-mean-token-mean there; verl clamps the log-ratio at 10 from above,
    here at +-20 like every ratio); TRL `importance_sampling_level="sequence"`.

    logprobs (with grad), old_logprobs, advantages, mask: (S, T). Returns the per-token loss (S, T), 0
    off the mask, and clip_fraction, approx_kl, seq_ratio_mean.
    """
    m = mask.to(logprobs.dtype)  # (S, T)
    log_ratio = logprobs - old_logprobs.detach()  # (S, T)
    seq_log_ratio = (log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1)  # (S,)
    token_log = logprobs - logprobs.detach() + seq_log_ratio.detach().unsqueeze(-1)  # (S, T)
    # GRPO's clip on the sequence ratio: its log against 0 is token_log (no dual clip in GSPO).
    loss, clip = policy_loss(
        token_log, torch.zeros_like(token_log), advantages, mask, clip_low, clip_high, None
    )
    metrics = {
        "clip_fraction": clip["clip_fraction"],
        "approx_kl": _masked_mean(-log_ratio.detach(), mask),
        "seq_ratio_mean": clip["ratio_mean"],
    }
    return loss, metrics


def cispo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 1.0,
    clip_high: float = 4.0,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped IS-weight Policy Optimization: every token keeps its gradient; the importance weight is
    clipped and carries none, loss_t = -sg(clip(r_t, 1 - clip_low, 1 + clip_high)) A_t log pi(y_t).

    Source: MiniMax-M1 report (arXiv 2506.13585) §3.1, eq. 4-5; the report leaves the lower bound off
    (clip_low = 1: the weight is at least 0) and tunes the upper. verl `loss_mode=cispo` with
    `clip_ratio_low/high` (same bounds); TRL `loss_type="cispo"` caps the weight at `epsilon_high`,
    which is clip_low = 1, clip_high = epsilon_high - 1 here.

    logprobs (with grad), old_logprobs, advantages, mask: (S, T). Returns (S, T) and clip_fraction,
    approx_kl.
    """
    log_ratio = (logprobs.detach() - old_logprobs.detach()).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)  # (S, T)
    ratio = log_ratio.exp()  # (S, T)
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # (S, T) no grad
    loss = -weight * advantages.detach() * logprobs * mask  # (S, T)
    with torch.no_grad():
        metrics = {
            "clip_fraction": _masked_mean((weight != ratio).float(), mask),
            "approx_kl": _masked_mean(-log_ratio, mask),
        }
    return loss, metrics


def sapo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[Tensor, dict[str, float]]:
    """Soft Adaptive Policy Optimization: a smooth gate in place of the clip,
        loss_t = -f(r_t) A_t,  f(r) = (4 / tau) sigmoid(tau (r - 1)),
    with tau = tau_pos where A > 0 and tau_neg elsewhere. f(1) = 2 / tau and f'(1) = 1, so on policy the
    gradient is the plain policy gradient; away from r = 1 it fades smoothly instead of stopping.

    Source: Gao et al. 2025, "Soft Adaptive Policy Optimization" (arXiv 2511.20347) eq. 6-8; 1.0 / 1.05
    are TRL's defaults. verl `loss_mode=sapo` (`tau_pos`, `tau_neg`, always seq-mean-token-mean there);
    TRL `loss_type="sapo"` (`sapo_temperature_pos`, `sapo_temperature_neg`).

    logprobs (with grad), old_logprobs, advantages, mask: (S, T). Returns (S, T) and gate_mean, approx_kl.
    """
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"SAPO temperatures must be positive, got {tau_pos}, {tau_neg}")
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)  # (S, T)
    ratio = log_ratio.exp()  # (S, T)
    adv = advantages.detach()  # (S, T)
    tau = torch.where(adv > 0, tau_pos, tau_neg).to(ratio.dtype)  # (S, T)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)  # (S, T)
    loss = -gate * adv * mask  # (S, T)
    with torch.no_grad():
        metrics = {"gate_mean": _masked_mean(gate, mask), "approx_kl": _masked_mean(-log_ratio, mask)}
    return loss, metrics


def gpg_loss(logprobs: Tensor, advantages: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
    """The plain policy gradient, no ratio and no clip: loss_t = -A_t log pi(y_t) (REINFORCE, Williams
    1992; GPG, arXiv 2504.02546 eq. 6, with `gpg_advantages`). verl `loss_mode=gpg`; no TRL counterpart.

    logprobs (with grad), advantages, mask: (S, T). Returns (S, T) and no metrics.
    """
    return -advantages.detach() * logprobs * mask, {}


# ---- off-policy correction and token selection ----------------------------------------------------------


def sequence_importance_weights(
    learner_old_logprobs: Tensor,
    sampler_logprobs: Tensor,
    mask: Tensor,
    mode: Literal["truncate", "mask"] = "truncate",
    cap: float = 2.0,
    band: tuple[float, float] = (0.5, 2.0),
) -> tuple[Tensor, dict[str, float]]:
    """One importance weight per sequence, w_i = exp(sum_t (learner_old - sampler)) = prod_t w_t, on
    every token of it: unbiased for a sequence-level objective, high variance on long ones. `truncate`:
    min(w_i, cap) (sequence TIS); `mask`: 0 where w_i is outside `band` (sequence MIS).

    Source: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
    (TIS), and "When Speed Kills Stability" (MIS) at the sequence level. verl `rollout_is="sequence"`
    with `rollout_is_threshold` (truncate) or `rollout_rs="seq_sum_k1"` (mask); TRL
    `vllm_importance_sampling_mode="sequence_truncate"` / `"sequence_mask"` (TRL's mask has no lower
    bound: band = (0, cap)). The sum is clamped at +-20 before exp, as in verl.

    learner_old_logprobs, sampler_logprobs, mask: (S, T). Returns weights (S, T), detached, 0 off the
    mask, and seq_is_mean (before truncation), seq_is_truncated_fraction, seq_is_masked_fraction.
    """
    m = mask.to(learner_old_logprobs.dtype)  # (S, T)
    rows = m.sum(-1) > 0  # (S,)
    seq_log = ((learner_old_logprobs - sampler_logprobs).detach() * m).sum(-1)  # (S,)
    w = seq_log.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).exp()  # (S,)
    truncated = torch.zeros_like(rows)  # (S,)
    dropped = torch.zeros_like(rows)  # (S,)
    if mode == "truncate":
        truncated = (w > cap) & rows  # (S,)
        weights = w.clamp(max=cap)  # (S,)
    elif mode == "mask":
        dropped = ((w < band[0]) | (w > band[1])) & rows  # (S,)
        weights = w.masked_fill(dropped, 0.0)  # (S,)
    else:
        raise ValueError(f"mode must be 'truncate' or 'mask', got {mode!r}")
    n = rows.sum().clamp(min=1)  # ()
    metrics = {
        "seq_is_mean": float(w[rows].sum().div(n).item()),
        "seq_is_truncated_fraction": float(truncated.sum().div(n).item()),
        "seq_is_masked_fraction": float(dropped.sum().div(n).item()),
    }
    return weights.unsqueeze(-1) * m, metrics  # (S, T)


def geometric_rejection(
    learner_old_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, band: tuple[float, float]
) -> tuple[Tensor, dict[str, float]]:
    """Whole sequences out of the loss when their geometric-mean ratio exp(mean_t (learner_old -
    sampler)) is outside `band`: a per-token average, so long and short sequences are judged alike.

    Source: the geometric-mean rejection of "When Speed Kills Stability" (2025); verl
    `rollout_rs="seq_mean_k1"` with `rollout_rs_threshold="lo_hi"` (formerly `rollout_rs="geometric"`).
    No TRL counterpart.

    learner_old_logprobs, sampler_logprobs, mask: (S, T). Returns the kept mask (S, T) bool and
    seq_rejected_fraction.
    """
    m = mask.bool()  # (S, T)
    rows = m.any(-1)  # (S,)
    mean_log = ((learner_old_logprobs - sampler_logprobs).detach() * m).sum(-1) / m.sum(-1).clamp(
        min=1
    )  # (S,)
    geometric = mean_log.exp()  # (S,)
    rejected = ((geometric < band[0]) | (geometric > band[1])) & rows  # (S,)
    n = rows.sum().clamp(min=1)  # ()
    return m & ~rejected.unsqueeze(-1), {"seq_rejected_fraction": float(rejected.sum().div(n).item())}


def batch_normalized(weights: Tensor, mask: Tensor, level: Literal["token", "sequence"]) -> Tensor:
    """Importance weights divided by their mean over the batch, so that they reweigh tokens without
    changing the step's overall scale. `token`: the mean over mask-1 tokens; `sequence`: the mean over
    rows with a token of each row's weight (one weight per row, as `sequence_importance_weights`).

    verl `rollout_is_batch_normalize=True`; no TRL counterpart. A mean under 1e-8 leaves the weights
    as they are (verl does the same).

    weights, mask: (S, T). Returns (S, T).
    """
    m = mask.to(weights.dtype)  # (S, T)
    if level == "token":
        mean = (weights * m).sum() / m.sum().clamp(min=1)  # ()
    else:
        rows = m.sum(-1) > 0  # (S,)
        per_row = (weights * m).sum(-1) / m.sum(-1).clamp(min=1)  # (S,)
        mean = per_row[rows].sum() / rows.sum().clamp(min=1)  # ()
    return weights / mean if float(mean) > 1e-8 else weights


def truncated_masked(mask: Tensor, truncated: Tensor) -> Tensor:
    """The loss mask without the tokens of generations the token limit cut off (they did not end on their
    own, so the reward says nothing about how they would have ended). In an agent episode a generation
    is one turn: a tool call or a summary.

    Source: DAPO (Yu et al. 2025) "Overlong Filtering"; TRL `mask_truncated_completions=True` (one
    completion per row there). No verl switch (its DAPO recipe shapes the reward of overlong samples).

    mask: (S, T); truncated: (S, T) bool, True on the tokens of a cut-off generation. Returns (S, T).
    """
    return mask * (~truncated.bool()).to(mask.dtype)  # (S, T)


def top_entropy_mask(entropy: Tensor, mask: Tensor, rho: float) -> Tensor:
    """Only the top-rho fraction of the batch's mask-1 tokens by entropy of the next-token distribution
    stay in the policy loss: the "forking" tokens where the policy chooses (Wang et al. 2025, "Beyond
    the 80/20 Rule: High-Entropy Minority Tokens Drive Effective RL", §4; rho = 0.2 there). A token is
    kept when its entropy is >= the (1 - rho) quantile (linear interpolation, `torch.quantile`).

    TRL `top_entropy_quantile=rho` (same threshold rule); no verl option. rho = 1 keeps every token.

    entropy, mask: (S, T). Returns (S, T) bool.
    """
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho}")
    m = mask.bool()  # (S, T)
    if rho >= 1.0 or not m.any():
        return m
    threshold = torch.quantile(entropy[m].float(), 1.0 - rho)  # ()
    return m & (entropy >= threshold)  # (S, T)
