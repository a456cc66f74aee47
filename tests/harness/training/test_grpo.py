"""The GRPO math on hand-worked numbers; the arithmetic is in the comments."""

from __future__ import annotations

import math

import pytest
import torch

from harness.training import family
from harness.training.grpo import (
    Scale,
    aggregate,
    entropy_from_logits,
    group_advantages,
    grpo_loss,
    importance_weights,
    kl_k1,
    kl_k3,
    policy_loss,
    token_advantages,
)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def ones(n: int) -> torch.Tensor:
    return torch.ones(n, dtype=torch.bool)


# ---- group_advantages -------------------------------------------------------------------------------


def test_advantage_is_reward_minus_group_mean() -> None:
    # mean(1, 0, 0, 1) = 0.5  ->  1 - 0.5 = 0.5, 0 - 0.5 = -0.5
    adv, kept = group_advantages(t(1, 0, 0, 1), ["a"] * 4, ones(4))
    torch.testing.assert_close(adv, t(0.5, -0.5, -0.5, 0.5))
    assert kept.tolist() == [True] * 4


def test_group_std_scaling_uses_the_unbiased_std() -> None:
    # centred (0.5, -0.5, -0.5, 0.5); sum of squares 4 * 0.25 = 1; unbiased var 1 / 3; std 0.57735
    # 0.5 / 0.57735 = 0.866025  (the population std, 0.5, would give 1.0)
    adv, _ = group_advantages(t(1, 0, 0, 1), ["a"] * 4, ones(4), scale="group")
    torch.testing.assert_close(adv, t(0.866025, -0.866025, -0.866025, 0.866025))


def test_batch_scaling_divides_group_centred_rewards_by_the_batch_std() -> None:
    # groups a = (1, 0), b = (3, 1): centred (0.5, -0.5), (1, -1)
    # batch (1, 0, 3, 1): mean 1.25; squares .0625 + 1.5625 + 3.0625 + .0625 = 4.75; / 3 = 1.583333
    # std 1.258306; 0.5 / 1.258306 = 0.397360, 1 / 1.258306 = 0.794719
    ids = ["a", "a", "b", "b"]
    adv, _ = group_advantages(t(1, 0, 3, 1), ids, ones(4), scale="batch")
    torch.testing.assert_close(adv, t(0.397360, -0.397360, 0.794719, -0.794719))
    # per group: a has std sqrt(0.5) = 0.707107, b std sqrt(2) = 1.414214; both give +-0.707107
    adv, _ = group_advantages(t(1, 0, 3, 1), ids, ones(4), scale="group")
    torch.testing.assert_close(adv, t(0.707107, -0.707107, 0.707107, -0.707107))


def test_group_ids_may_be_a_long_tensor() -> None:
    adv, _ = group_advantages(t(1, 0, 3, 1), torch.tensor([7, 7, 2, 2]), ones(4))
    torch.testing.assert_close(adv, t(0.5, -0.5, 1, -1))


@pytest.mark.parametrize("scale", ["none", "group", "batch"])
def test_infra_errors_are_left_out_of_the_statistics(scale: Scale) -> None:
    # Row 2 (reward 5) died for the harness's reasons: the others must see the group (1, 0, 0, 1)
    # and the batch (1, 0, 0, 1, 2, 0) exactly as if it were not there.
    rewards = t(1, 0, 5, 0, 1, 2, 0)
    ids = ["a"] * 5 + ["b"] * 2
    valid = torch.tensor([True, True, False, True, True, True, True])
    adv, kept = group_advantages(rewards, ids, valid, scale=scale)

    keep = valid.nonzero().squeeze(-1).tolist()
    expected, _ = group_advantages(rewards[keep], [ids[i] for i in keep], ones(6), scale=scale)
    torch.testing.assert_close(adv[keep], expected)
    assert adv[2].item() == 0.0
    assert kept.tolist() == [True, True, False, True, True, True, True]
    if scale == "none":
        torch.testing.assert_close(adv[:5], t(0.5, -0.5, 0, -0.5, 0.5))


def test_uniform_groups_get_zero_and_can_be_dropped() -> None:
    # group a (1, 1, 1): nothing to compare -> 0; group b (1, 0) -> (0.5, -0.5)
    rewards, ids = t(1, 1, 1, 1, 0), ["a", "a", "a", "b", "b"]
    scales: tuple[Scale, ...] = ("none", "group")
    for scale in scales:
        adv, kept = group_advantages(rewards, ids, ones(5), scale=scale)
        assert adv[:3].tolist() == [0.0, 0.0, 0.0]
        assert kept.tolist() == [True] * 5
    adv, kept = group_advantages(rewards, ids, ones(5), drop_uniform_groups=True)
    torch.testing.assert_close(adv, t(0, 0, 0, 0.5, -0.5))
    assert kept.tolist() == [False, False, False, True, True]


def test_a_group_with_one_valid_member_has_advantage_zero() -> None:
    # group a is a singleton; in group b one of the two rollouts is an infra error
    rewards, ids = t(1, 1, 0), ["a", "b", "b"]
    valid = torch.tensor([True, True, False])
    adv, kept = group_advantages(rewards, ids, valid, scale="group")
    assert adv.tolist() == [0.0, 0.0, 0.0]
    assert kept.tolist() == [True, True, False]
    _, kept = group_advantages(rewards, ids, valid, drop_uniform_groups=True)
    assert kept.tolist() == [False, False, False]


def test_bad_scale_is_an_error() -> None:
    with pytest.raises(ValueError, match="scale"):
        group_advantages(t(1, 0), ["a", "a"], ones(2), scale="std")  # type: ignore[arg-type]


# ---- token_advantages -------------------------------------------------------------------------------


def test_the_trajectory_advantage_reaches_every_model_token_of_each_of_its_segments() -> None:
    # trajectory 0 (A = 0.5) has two segments (rows 0 and 1, a self-summary between them);
    # trajectory 1 (A = -0.5) has one (row 2). Prompt and tool-result tokens have mask 0.
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 0, 1, 1, 0], [0, 1, 0, 0, 0]])
    out = token_advantages(t(0.5, -0.5), torch.tensor([0, 0, 1]), mask)
    expected = torch.tensor(
        [[0, 0.5, 0.5, 0, 0.5], [0, 0, 0.5, 0.5, 0], [0, -0.5, 0, 0, 0]], dtype=torch.float32
    )
    torch.testing.assert_close(out, expected)


# ---- policy_loss ------------------------------------------------------------------------------------


def one_token_loss(ratio: float, adv: float, dual_clip: float | None = 3.0) -> float:
    logp = torch.tensor([[math.log(ratio)]])
    loss, _ = policy_loss(
        logp, torch.zeros(1, 1), torch.tensor([[adv]]), torch.ones(1, 1), dual_clip=dual_clip
    )
    return loss.item()


def test_the_clip_bounds() -> None:
    # A = 1, ratio 1.5: -min(1.5 * 1, 1.28 * 1) = -1.28 (clip-higher bound 1 + 0.28)
    assert one_token_loss(1.5, 1.0) == pytest.approx(-1.28)
    # A = -1, ratio 0.5: -min(0.5 * -1, 0.8 * -1) = -min(-0.5, -0.8) = 0.8 (lower bound 1 - 0.2)
    assert one_token_loss(0.5, -1.0) == pytest.approx(0.8)
    # inside the band nothing is clipped: A = 2, ratio 1.1 -> -2.2
    assert one_token_loss(1.1, 2.0) == pytest.approx(-2.2)


def test_the_dual_clip_bounds_a_negative_advantage_loss() -> None:
    # A = -1, ratio 5: -min(-5, -1.28) = 5, capped at 3 * |A| = 3
    assert one_token_loss(5.0, -1.0) == pytest.approx(3.0)
    # A = -2: capped at 6
    assert one_token_loss(5.0, -2.0) == pytest.approx(6.0)
    # without the dual clip the loss is ratio * |A| = 5
    assert one_token_loss(5.0, -1.0, dual_clip=None) == pytest.approx(5.0)
    # a positive advantage is never dual-clipped: A = 1, ratio 5 -> -1.28
    assert one_token_loss(5.0, 1.0) == pytest.approx(-1.28)


def test_clip_fractions_and_ratio_metrics() -> None:
    # tokens: (ratio 1.5, A 1) high clip; (0.5, -1) low clip; (5, -1) dual clip; (1, 1) untouched;
    # the last one is masked out and must count nowhere.
    ratios = t(1.5, 0.5, 5.0, 1.0, 100.0)
    adv = t(1, -1, -1, 1, -1).unsqueeze(0)
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    loss, metrics = policy_loss(ratios.log().unsqueeze(0), torch.zeros(1, 5), adv, mask)
    torch.testing.assert_close(loss, t(-1.28, 0.8, 3.0, -1.0, 0.0).unsqueeze(0))
    assert metrics["clip_fraction"] == pytest.approx(2 / 4)
    assert metrics["dual_clip_fraction"] == pytest.approx(1 / 4)
    assert metrics["ratio_mean"] == pytest.approx((1.5 + 0.5 + 5 + 1) / 4)  # 2.0
    assert metrics["ratio_max"] == pytest.approx(5.0)
    # approx_kl = mean(old - new) = -(ln 1.5 + ln 0.5 + ln 5 + 0) / 4 = -ln(3.75) / 4 = -0.330439
    assert metrics["approx_kl"] == pytest.approx(-math.log(3.75) / 4, abs=1e-6)


def test_dual_clip_must_exceed_one() -> None:
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), dual_clip=0.5)


# ---- aggregate --------------------------------------------------------------------------------------

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


def test_aggregation_modes_on_an_uneven_mask() -> None:
    # token-mean: (1 + 2 + 3 + 4) / 4 tokens = 2.5
    assert aggregate(LOSS, MASK, "token-mean").item() == pytest.approx(2.5)
    # seq-mean-token-mean: (6 / 3 + 4 / 1) / 2 rows = (2 + 4) / 2 = 3
    assert aggregate(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx(3.0)
    # seq-mean-token-sum-norm, max_len 4: (6 + 4) / (2 rows * 4) = 1.25
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", max_len=4).item() == pytest.approx(1.25)


def test_empty_rows_do_not_count_as_sequences() -> None:
    loss = torch.cat([LOSS, torch.full((1, 3), 9.0)])
    mask = torch.cat([MASK, torch.zeros(1, 3, dtype=torch.long)])
    assert aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.0)
    assert aggregate(loss, mask, "token-mean").item() == pytest.approx(2.5)


def test_the_constant_normaliser_is_required() -> None:
    with pytest.raises(ValueError, match="max_len"):
        aggregate(LOSS, MASK, "seq-mean-token-sum-norm")


def test_micro_batches_sum_to_the_full_batch_value() -> None:
    # rows split 1 + 1; the step's totals are 4 tokens, 2 rows
    # token-mean: 6 / 4 + 4 / 4 = 1.5 + 1 = 2.5
    parts = [aggregate(LOSS[i : i + 1], MASK[i : i + 1], "token-mean", norm_tokens=4) for i in range(2)]
    assert sum(p.item() for p in parts) == pytest.approx(2.5)
    # seq-mean-token-mean: 2 / 2 + 4 / 2 = 3
    parts = [
        aggregate(LOSS[i : i + 1], MASK[i : i + 1], "seq-mean-token-mean", norm_seqs=2) for i in range(2)
    ]
    assert sum(p.item() for p in parts) == pytest.approx(3.0)
    # seq-mean-token-sum-norm: 6 / 8 + 4 / 8 = 1.25
    parts = [
        aggregate(LOSS[i : i + 1], MASK[i : i + 1], "seq-mean-token-sum-norm", norm_seqs=2, max_len=4)
        for i in range(2)
    ]
    assert sum(p.item() for p in parts) == pytest.approx(1.25)


# ---- KL and entropy ---------------------------------------------------------------------------------


def test_k1_and_k3_on_a_worked_example() -> None:
    # logp = 0 (p = 1... as a number), ref = ln 0.5 = -0.693147
    # k1 = logp - ref = 0.693147
    # k3: r = ref - logp = -0.693147; exp(r) - r - 1 = 0.5 + 0.693147 - 1 = 0.193147
    logp, ref = t(0.0, -1.0), t(math.log(0.5), -1.0)
    torch.testing.assert_close(kl_k1(logp, ref), t(0.693147, 0.0))
    torch.testing.assert_close(kl_k3(logp, ref), t(0.193147, 0.0))
    # k3 is never negative: r = ln 2 -> 2 - 0.693147 - 1 = 0.306853
    torch.testing.assert_close(kl_k3(t(0.0), t(math.log(2.0))), t(0.306853))


def test_entropy_from_logits() -> None:
    # uniform over 4 -> ln 4 = 1.386294; one dominant logit -> ~0
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]])
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([[math.log(4.0), 0.0]]))


# ---- importance_weights -----------------------------------------------------------------------------

# learner-old minus sampler log-ratios ln 3, ln 1.5, 0, ln 0.25 -> w = 3, 1.5, 1, 0.25; a fifth token,
# masked out, has w = e^5 and must not show in any metric.
IS_LOG_RATIO = torch.tensor([[math.log(3.0), math.log(1.5), 0.0, math.log(0.25), 5.0]])
IS_MASK = torch.tensor([[1, 1, 1, 1, 0]])
# mean |log w| = (1.098612 + 0.405465 + 0 + 1.386294) / 4 = 2.890372 / 4 = 0.722593; max 1.386294


def test_truncated_importance_sampling() -> None:
    weights, mask, metrics = importance_weights(IS_LOG_RATIO, torch.zeros(1, 5), IS_MASK, "truncate", cap=2.0)
    torch.testing.assert_close(weights, t(2.0, 1.5, 1.0, 0.25, 0.0).unsqueeze(0))
    assert mask.tolist() == [[True, True, True, True, False]]
    assert metrics["is_truncated_fraction"] == pytest.approx(1 / 4)
    assert metrics["is_masked_fraction"] == 0.0
    assert metrics["is_abs_log_ratio_mean"] == pytest.approx(0.722593, abs=1e-6)
    assert metrics["is_abs_log_ratio_max"] == pytest.approx(1.386294, abs=1e-6)


def test_masked_importance_sampling() -> None:
    # band (0.5, 2): 3 and 0.25 fall out; 1.5 and 1 stay with their weight
    weights, mask, metrics = importance_weights(
        IS_LOG_RATIO, torch.zeros(1, 5), IS_MASK, "mask", band=(0.5, 2.0)
    )
    torch.testing.assert_close(weights, t(0.0, 1.5, 1.0, 0.0, 0.0).unsqueeze(0))
    assert mask.tolist() == [[False, True, True, False, False]]
    assert metrics["is_masked_fraction"] == pytest.approx(2 / 4)
    assert metrics["is_truncated_fraction"] == 0.0


def test_no_importance_correction() -> None:
    weights, mask, _ = importance_weights(IS_LOG_RATIO, torch.zeros(1, 5), IS_MASK, "none")
    torch.testing.assert_close(weights, t(1, 1, 1, 1, 0).unsqueeze(0))
    assert mask.tolist() == [[True, True, True, True, False]]


# ---- grpo_loss --------------------------------------------------------------------------------------


def test_gradients_flow_only_through_the_learner_logprobs() -> None:
    # two tokens, ratio 1 (old = logp), A = (1, -1), sampler equal to old (weight 1), token-mean over 2:
    # loss = -(r0 * 1 + r1 * -1) / 2, d loss / d logp = -A * r / 2 = (-0.5, 0.5)
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    sampler = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[1.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    mask = torch.ones(1, 2)
    loss, _ = grpo_loss(logp, old, adv, mask, sampler_logprobs=sampler, ref_logprobs=ref, kl_coef=0.1)
    loss.backward()
    assert old.grad is None and sampler.grad is None and adv.grad is None and ref.grad is None
    # the k3 term has zero gradient where logp = ref: d/dlogp (e^r - r - 1) = 1 - e^r = 0 at r = 0
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5, 0.5]]))


def test_grpo_loss_composes_clip_weights_and_aggregation() -> None:
    # token 0: ratio 1.5, A 1 -> -1.28, weight min(3, 2) = 2 -> -2.56
    # token 1: ratio 1, A -1 -> 1, weight 1 -> 1; token 2 is masked out
    # token-mean over the 2 mask tokens: (-2.56 + 1) / 2 = -0.78
    logp = torch.tensor([[math.log(1.5), 0.0, 7.0]])
    old = torch.zeros(1, 3)
    sampler = torch.tensor([[-math.log(3.0), 0.0, 0.0]])
    adv = torch.tensor([[1.0, -1.0, 1.0]])
    mask = torch.tensor([[1, 1, 0]])
    loss, metrics = grpo_loss(logp, old, adv, mask, sampler_logprobs=sampler)
    assert loss.item() == pytest.approx(-0.78)
    assert metrics["clip_fraction"] == pytest.approx(0.5)
    assert metrics["is_truncated_fraction"] == pytest.approx(0.5)
    # with MIS (band 0.5..2) token 0 is dropped but still counts in the denominator: (0 + 1) / 2
    loss, metrics = grpo_loss(logp, old, adv, mask, sampler_logprobs=sampler, is_mode="mask")
    assert loss.item() == pytest.approx(0.5)
    assert metrics["is_masked_fraction"] == pytest.approx(0.5)


@pytest.mark.parametrize("scale", ["none", "group", "batch"])
def test_advantages_keep_the_rewards_precision(scale: str) -> None:
    """With `kl_in_reward` rewards are float64 sums of many small terms: the advantage math must not round
    them to float32 (1.5e-4 relative error against verl in float64), whatever the scale."""
    generator = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, generator=generator, dtype=torch.float64) * 1e-3 + 1.0  # close rewards
    groups = [f"g{i // 4}" for i in range(12)]
    valid = torch.ones(12, dtype=torch.bool)
    advantages, _ = group_advantages(rewards, groups, valid, scale=scale)  # type: ignore[arg-type]
    assert advantages.dtype == torch.float64
    grouped = rewards.view(3, 4)
    expected = grouped - grouped.mean(dim=1, keepdim=True)
    if scale == "group":
        expected = expected / (grouped.std(dim=1, keepdim=True) + 1e-6)
    elif scale == "batch":
        expected = expected / (rewards.std() + 1e-6)
    assert torch.allclose(advantages, expected.flatten(), rtol=1e-12, atol=1e-15)
    assert group_advantages(rewards.float(), groups, valid, scale=scale)[0].dtype == torch.float32  # type: ignore[arg-type]
    for other in (
        family.rloo_advantages(rewards, groups, valid),
        family.gpg_advantages(rewards, groups, valid),
    ):
        assert other.dtype == torch.float64
