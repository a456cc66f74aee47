"""The policy-gradient family beside GRPO (harness/training/family.py), each on a case worked by hand in
the comments: the numbers asserted are the ones written there, not the function's own output."""

from __future__ import annotations

import math

import pytest
import torch

from harness.training.family import (
    batch_normalized,
    cispo_loss,
    geometric_rejection,
    gpg_advantages,
    gpg_loss,
    gspo_loss,
    kl_bias_corrected,
    kl_estimate,
    kl_in_reward,
    rloo_advantages,
    sapo_loss,
    sequence_importance_weights,
    top_entropy_mask,
    truncated_masked,
)
from harness.training.grpo import aggregate

LN = math.log


def t(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def test_rloo_takes_each_rollouts_baseline_from_the_others_in_its_group() -> None:
    # group a: 1, 0, 0 (and an infra error with reward 5 that counts nowhere). For the 1 the others
    # average 0: A = 1. For each 0 the others average 0.5: A = -0.5. Same as G/(G-1)(r - mean) = 3/2 *
    # (1 - 1/3) = 1. Group b: one valid row, no one to compare with: 0. Group c: all equal: 0.
    rewards = torch.tensor([1.0, 0.0, 0.0, 5.0, 1.0, 1.0, 1.0])
    groups = ["a", "a", "a", "a", "b", "c", "c"]
    valid = torch.tensor([True, True, True, False, True, True, True])
    assert rloo_advantages(rewards, groups, valid).tolist() == pytest.approx([1.0, -0.5, -0.5, 0, 0, 0, 0])


def test_gpg_rescales_by_the_share_of_informative_rollouts() -> None:
    # group a: 1, 0, 0, 0 -> mean 0.25, r - mean = 0.75, -0.25 (x3). Group b: 1, 1, all equal: 0.
    # B = 6 valid rows, M = 2 in the uniform group: alpha = 6 / 4 = 1.5 -> 1.125, -0.375.
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    groups = ["a"] * 4 + ["b"] * 2
    valid = torch.ones(6, dtype=torch.bool)
    expected = [1.125, -0.375, -0.375, -0.375, 0.0, 0.0]
    assert gpg_advantages(rewards, groups, valid).tolist() == pytest.approx(expected)
    # F_norm = 0.5 doubles them.
    assert gpg_advantages(rewards, groups, valid, f_norm=0.5).tolist() == pytest.approx(
        [2 * x for x in expected]
    )


def test_kl_in_the_reward_is_summed_over_every_segment_of_the_trajectory() -> None:
    # trajectory 0 owns rows 0 and 1: 0.1 + 0.3 (the 0.2 is off the mask) + 0.5 = 0.9; trajectory 1 owns
    # row 2: -0.2 + 0.4 = 0.2. coef 0.1: 1 - 0.09 = 0.91, 0 - 0.02 = -0.02.
    kl = t([0.1, 0.2, 0.3], [0.5, 0.0, 0.0], [-0.2, 0.4, 0.0])
    mask = t([1, 0, 1], [1, 0, 0], [1, 1, 0])
    rewards, summed = kl_in_reward(torch.tensor([1.0, 0.0]), kl, torch.tensor([0, 0, 1]), mask, coef=0.1)
    assert summed.tolist() == pytest.approx([0.9, 0.2])
    assert rewards.tolist() == pytest.approx([0.91, -0.02])


def test_the_kl_estimators() -> None:
    # p = 0.5 under the policy, 0.25 under the reference: x = ln 2 = 0.693147.
    # k1 = 0.693147, k2 = x^2 / 2 = 0.240227, abs = 0.693147, k3 = e^-x + x - 1 = 0.5 + 0.693147 - 1.
    # The other way round (x = -ln 2): k1 = -0.693147, k3 = 2 - 0.693147 - 1 = 0.306853.
    p, ref = t([LN(0.5), LN(0.25)]), t([LN(0.25), LN(0.5)])
    assert kl_estimate(p, ref, "k1").tolist()[0] == pytest.approx([0.693147, -0.693147], abs=1e-6)
    assert kl_estimate(p, ref, "k2").tolist()[0] == pytest.approx([0.240227, 0.240227], abs=1e-6)
    assert kl_estimate(p, ref, "abs").tolist()[0] == pytest.approx([0.693147, 0.693147], abs=1e-6)
    assert kl_estimate(p, ref, "k3").tolist()[0] == pytest.approx([0.193147, 0.306853], abs=1e-6)
    # ref far above the policy: x = -15, k3 = e^15 - 14 = 3269003.4; low_var clamps it at 10.
    far = kl_estimate(t([-15.0]), t([0.0]), "k3").item()
    assert far == pytest.approx(math.exp(15) - 14)
    assert kl_estimate(t([-15.0]), t([0.0]), "low_var").item() == 10.0
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_estimate(p, ref, "k4")  # type: ignore[arg-type]


def test_the_bias_corrected_kl_is_weighted_by_the_ratio_to_the_sampling_policy() -> None:
    # pi / pi_old = 1.5 on the token: 0.3 * 1.5 = 0.45; with pi = pi_old it is the estimate itself.
    assert kl_bias_corrected(t([0.3]), t([LN(0.6)]), t([LN(0.4)])).item() == pytest.approx(0.45)
    assert kl_bias_corrected(t([0.3]), t([LN(0.6)]), t([LN(0.6)])).item() == pytest.approx(0.3)


def test_gspo_clips_one_ratio_per_sequence_and_the_token_off_the_mask_does_not_count() -> None:
    # Token ratios 1.21 and 1 on the mask: the sequence ratio is their geometric mean, 1.1. The third
    # token (ratio 5) is off the mask. A = +1, clip_high 0.04: max(-1.1, -1.04) = -1.04, the clipped term
    # wins and carries no gradient. A = -1: max(1.1, 1.04 * 1) ... = 1.1, the unclipped term, whose
    # gradient on each token is -A * s = 1.1 (s_t = sg(s) * pi_t / sg(pi_t)).
    old = t([0.0, 0.0, 0.0])
    mask = t([1, 1, 0])
    for adv, value, grad in ((1.0, -1.04, 0.0), (-1.0, 1.1, 1.1)):
        logp = t([LN(1.21), 0.0, LN(5.0)]).requires_grad_()
        loss, metrics = gspo_loss(logp, old, torch.full((1, 3), adv, dtype=torch.float64), mask, 0.04, 0.04)
        assert loss.tolist()[0] == pytest.approx([value, value, 0.0])
        loss.sum().backward()
        assert logp.grad is not None
        assert logp.grad.tolist()[0] == pytest.approx([grad, grad, 0.0])
        assert metrics["clip_fraction"] == (1.0 if adv > 0 else 0.0)


def test_cispo_clips_the_weight_but_keeps_every_tokens_gradient() -> None:
    # Ratios 2 and 0.5, A = 1, bounds [1 - 1, 1 + 0.5] = [0, 1.5]: weights 1.5 and 0.5. The loss is
    # -w A log p, so its gradient on log p is -w: -1.5 and -0.5; a PPO clip would give the first 0.
    old = t([LN(0.2), LN(0.4)])
    logp = t([LN(0.4), LN(0.2)]).requires_grad_()
    loss, metrics = cispo_loss(logp, old, torch.ones(1, 2, dtype=torch.float64), t([1, 1]), 1.0, 0.5)
    assert loss.tolist()[0] == pytest.approx([-1.5 * LN(0.4), -0.5 * LN(0.2)])
    loss.sum().backward()
    assert logp.grad is not None
    assert logp.grad.tolist()[0] == pytest.approx([-1.5, -0.5])
    assert metrics["clip_fraction"] == 0.5


def test_sapo_gates_smoothly_and_is_the_plain_gradient_on_policy() -> None:
    # On policy (r = 1): gate (4 / tau) sigmoid(0) = 2 / tau; gradient on log p -4 sigmoid'(0) r A = -A.
    # Off policy, r = 2, tau = 1, A = 1: gate 4 sigmoid(1) = 2.924234; gradient -4 sigmoid'(1) * 2 =
    # -4 * 0.196612 * 2 = -1.572895 (a clip would have given 0 beyond 1.28).
    old = t([0.0, 0.0, 0.0])
    logp = t([0.0, 0.0, LN(2.0)]).requires_grad_()
    adv = t([1.0, -1.0, 1.0])
    loss, _ = sapo_loss(logp, old, adv, t([1, 1, 1]), tau_pos=1.0, tau_neg=2.0)
    # -gate * A: -2, +1 (gate 2 / 2 = 1 for tau_neg = 2), -2.924234.
    assert loss.tolist()[0] == pytest.approx([-2.0, 1.0, -2.924234], abs=1e-6)
    loss.sum().backward()
    assert logp.grad is not None
    assert logp.grad.tolist()[0] == pytest.approx([-1.0, 1.0, -1.572895], abs=1e-6)


def test_gpg_is_the_plain_policy_gradient() -> None:
    logp = t([LN(0.5), LN(0.25)]).requires_grad_()
    loss, _ = gpg_loss(logp, t([2.0, -1.0]), t([1, 1]))
    # -A log p: -2 ln 0.5 = 1.386294, ln 0.25 = -1.386294; the gradient is -A.
    assert loss.tolist()[0] == pytest.approx([1.386294, -1.386294], abs=1e-6)
    loss.sum().backward()
    assert logp.grad is not None
    assert logp.grad.tolist()[0] == pytest.approx([-2.0, 1.0])


def test_sequence_importance_weights_truncate_or_drop_whole_rows() -> None:
    # Row 0: token ratios 2 and 2 -> w = 4; row 1: ratio 0.5 on the mask (the 3 is off it) -> w = 0.5;
    # row 2 has no mask-1 token and counts nowhere. truncate at 2: 2, 0.5; the mean before is 2.25.
    # mask with band (0.5, 2): row 0 dropped (4 > 2), row 1 kept (0.5 is inside).
    learner = t([LN(2.0), LN(2.0)], [LN(0.5), LN(3.0)], [0.0, 0.0])
    sampler = torch.zeros(3, 2, dtype=torch.float64)
    mask = t([1, 1], [1, 0], [0, 0])
    weights, metrics = sequence_importance_weights(learner, sampler, mask, "truncate", cap=2.0)
    assert weights.flatten().tolist() == pytest.approx([2.0, 2.0, 0.5, 0.0, 0.0, 0.0])
    assert metrics["seq_is_mean"] == pytest.approx(2.25)
    assert metrics["seq_is_truncated_fraction"] == 0.5
    weights, metrics = sequence_importance_weights(learner, sampler, mask, "mask", band=(0.5, 2.0))
    assert weights.flatten().tolist() == pytest.approx([0.0, 0.0, 0.5, 0.0, 0.0, 0.0])
    assert metrics["seq_is_masked_fraction"] == 0.5


def test_geometric_rejection_judges_the_per_token_average() -> None:
    # Row 0: ratios 4 and 1, geometric mean 2 > 1.9: rejected whole. Row 1: one token, 1.2: kept. Row 2:
    # ratio 100 but off the mask: nothing to reject.
    learner = t([LN(4.0), 0.0], [LN(1.2), 0.0], [LN(100.0), 0.0])
    mask = t([1, 1], [1, 0], [0, 0])
    kept, metrics = geometric_rejection(learner, torch.zeros_like(learner), mask, band=(0.5, 1.9))
    assert kept.tolist() == [[False, False], [True, False], [False, False]]
    assert metrics["seq_rejected_fraction"] == 0.5


def test_batch_normalized_weights_average_one() -> None:
    # Token level: weights 1, 3, 2 on the mask (100 is off it): mean 2 -> 0.5, 1.5, 1.
    weights, mask = t([1.0, 3.0], [2.0, 100.0]), t([1, 1], [1, 0])
    assert batch_normalized(weights, mask, "token").flatten().tolist() == pytest.approx([0.5, 1.5, 1.0, 50.0])
    # Sequence level: one weight per row, 4 and 1: mean 2.5 -> 1.6 and 0.4.
    weights = t([4.0, 4.0], [1.0, 0.0])
    assert batch_normalized(weights, mask, "sequence").flatten().tolist() == pytest.approx(
        [1.6, 1.6, 0.4, 0.0]
    )


def test_truncated_generations_leave_the_loss() -> None:
    # Row 0's second generation (its last two tokens) was cut off; row 1's was not.
    mask = t([1, 0, 1, 1], [1, 1, 0, 0])
    cut = torch.tensor([[False, False, True, True], [False, False, False, False]])
    assert truncated_masked(mask, cut).tolist() == [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]


def test_top_entropy_keeps_the_forking_tokens() -> None:
    # Entropies on the mask: 0.1, 0.5, 0.9, 1.3, 2.0 (the 5.0 is off it). rho = 0.4: the 0.6 quantile is
    # at position 0.6 * 4 = 2.4 -> 0.9 + 0.4 * (1.3 - 0.9) = 1.06: 1.3 and 2.0 stay.
    entropy = t([0.1, 0.5, 0.9], [1.3, 2.0, 5.0])
    mask = t([1, 1, 1], [1, 1, 0])
    assert top_entropy_mask(entropy, mask, 0.4).tolist() == [[False, False, False], [True, True, False]]
    assert top_entropy_mask(entropy, mask, 1.0).tolist() == mask.bool().tolist()


def test_the_sum_aggregations_and_their_split_over_micro_batches() -> None:
    # Row sums 1 + 2 = 3 and 4 (the 3 and the 0s are off the mask): token-sum 7, seq-mean-token-sum 3.5.
    loss, mask = t([1.0, 2.0, 3.0], [4.0, 0.0, 0.0]), t([1, 1, 0], [1, 0, 0])
    assert aggregate(loss, mask, "token-sum").item() == pytest.approx(7.0)
    assert aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx(3.5)
    # One row per micro-batch, normalised by the step's 2 rows, adds up to the same.
    halves = sum(
        aggregate(loss[i : i + 1], mask[i : i + 1], "seq-mean-token-sum", norm_seqs=2) for i in (0, 1)
    )
    assert float(halves) == pytest.approx(3.5)
