"""Every learner option of the policy-gradient family reaches the update: the composed objective equals
GRPO's with the defaults, each surrogate trains the real tiny model and splits over micro-batches like
the whole batch, and the row-level options (advantage estimators, truncated generations, the KL in the
reward) give the numbers worked out by hand."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError
from transformers import AutoModelForCausalLM

from harness.agent.trajectory import Segment, Trajectory, Turn
from harness.training.grpo import grpo_loss
from harness.training.learner import Learner, LearnerConfig, MicroBatch, objective, rows_from_trajectories
from tests.harness.training.test_learner import gradients, make_rows, trajectory


def micro_batch(
    seed: int = 0, rows: int = 3, width: int = 7
) -> tuple[MicroBatch, torch.Tensor, torch.Tensor]:
    """A micro-batch of random numbers with the learner's shapes, the learner's log-probs (a leaf with
    grad) and the logits of the mask-1 positions."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(rows, width - 1, generator=g) > 0.3).float()  # (B, T-1)
    mask[:, 0] = 1.0
    sampler = -torch.rand(rows, width - 1, generator=g) * 3 * mask  # (B, T-1)
    advantage = torch.randn(rows, 1, generator=g) * mask  # (B, T-1)
    batch = MicroBatch(
        torch.zeros(rows, width, dtype=torch.long), torch.ones(rows, width), mask, sampler, advantage
    )
    logprobs = (sampler + 0.3 * torch.randn(rows, width - 1, generator=g) * mask).requires_grad_()
    logits = torch.randn(int(mask.sum().item()), 11, generator=g)  # (N, V)
    return batch, logprobs, logits


def test_the_default_objective_is_grpo_loss() -> None:
    batch, logprobs, logits = micro_batch()
    reference = batch.sampler - 0.2
    config = LearnerConfig(kl_coef=0.05)
    ours, metrics = objective(config, logprobs, logits, batch, reference, norm_tokens=20, norm_seqs=3)
    (ours_grad,) = torch.autograd.grad(ours, logprobs)
    theirs, _ = grpo_loss(
        logprobs, logprobs.detach(), batch.advantage, batch.mask, batch.sampler,
        ref_logprobs=reference, kl_coef=0.05, norm_tokens=20, norm_seqs=3,
    )  # fmt: skip
    (theirs_grad,) = torch.autograd.grad(theirs, logprobs)
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-7)
    torch.testing.assert_close(ours_grad, theirs_grad)
    assert metrics["kl_ref"] > 0


def test_a_ratio_against_the_sampler_makes_the_clip_act_and_needs_importance_off() -> None:
    batch, logprobs, logits = micro_batch()
    config = LearnerConfig(ratio_against="sampler", importance="none", clip_low=0.01, clip_high=0.01)
    _, metrics = objective(config, logprobs, logits, batch, None, norm_tokens=20, norm_seqs=3)
    # The learner's log-probs are the sampler's plus noise of 0.3: nearly every ratio is outside 1 +- 0.01.
    assert metrics["clip_fraction"] > 0.2
    assert metrics["approx_kl"] != 0
    with pytest.raises(ValidationError, match="set importance: none"):
        LearnerConfig(ratio_against="sampler")


def test_top_entropy_selection_trains_only_the_forking_tokens() -> None:
    batch, logprobs, logits = micro_batch(rows=2, width=9)
    config = LearnerConfig(top_entropy_quantile=0.25, importance="none")
    loss, _ = objective(config, logprobs, logits, batch, None, norm_tokens=20, norm_seqs=2)
    (grad,) = torch.autograd.grad(loss, logprobs)
    trained = int((grad != 0).sum().item())
    tokens = int(batch.mask.sum().item())
    # The top quarter of the tokens by entropy, ties aside: ceil(0.25 * (tokens - 1)) + 1 at most.
    assert 1 <= trained <= math.ceil(0.25 * (tokens - 1)) + 1 < tokens


def test_geometric_rejection_takes_whole_rows_out() -> None:
    batch, logprobs, logits = micro_batch(rows=3)
    shifted = logprobs.detach().clone()
    shifted[1] += 2.0 * batch.mask[1]  # row 1's geometric-mean ratio to the sampler is now e^2-ish
    leaf = shifted.requires_grad_()
    config = LearnerConfig(rejection_band=(0.2, 3.0), importance="none")
    loss, metrics = objective(config, leaf, logits, batch, None, norm_tokens=20, norm_seqs=3)
    (grad,) = torch.autograd.grad(loss, leaf)
    assert grad[1].abs().sum().item() == 0.0 and grad[0].abs().sum().item() > 0
    assert metrics["seq_rejected_fraction"] == pytest.approx(1 / 3)
    with pytest.raises(ValidationError, match="rejection_band"):
        LearnerConfig(rejection_band=(1.5, 3.0))


def test_sequence_importance_weights_reach_the_loss() -> None:
    batch, logprobs, logits = micro_batch()
    token = LearnerConfig(importance_level="token")
    sequence = LearnerConfig(importance_level="sequence", importance_batch_normalize=True)
    a, _ = objective(token, logprobs, logits, batch, None, norm_tokens=20, norm_seqs=3)
    b, metrics = objective(sequence, logprobs, logits, batch, None, norm_tokens=20, norm_seqs=3)
    assert a.item() != pytest.approx(b.item())
    assert "seq_is_mean" in metrics


def test_the_kl_estimators_and_bias_correction_reach_the_loss() -> None:
    batch, logprobs, logits = micro_batch()
    reference = batch.sampler - 0.5 * batch.mask  # log-probs 0.5 above the reference everywhere... plus noise
    values = {}
    for estimator in ("k1", "k2", "k3", "abs", "low_var"):
        config = LearnerConfig(kl_coef=0.1, kl_estimator=estimator, importance="none")  # type: ignore[arg-type]
        _, metrics = objective(config, logprobs, logits, batch, reference, norm_tokens=20, norm_seqs=3)
        values[estimator] = metrics["kl_ref"]
    x = (logprobs.detach() - reference)[batch.mask.bool()]  # the per-token log-ratios on the mask
    assert values["k1"] == pytest.approx(x.mean().item(), rel=1e-5)
    assert values["k2"] == pytest.approx((0.5 * x**2).mean().item(), rel=1e-5)
    assert values["abs"] == pytest.approx(x.abs().mean().item(), rel=1e-5)
    assert values["k3"] == pytest.approx(values["low_var"]) and values["k3"] > 0
    # On policy (old = the learner's own log-probs) the correction's weight is 1.
    corrected = LearnerConfig(kl_coef=0.1, kl_bias_correction=True, importance="none")
    _, metrics = objective(corrected, logprobs, logits, batch, reference, norm_tokens=20, norm_seqs=3)
    assert metrics["kl_ref"] == pytest.approx(values["k3"])


SURROGATES: list[dict[str, Any]] = [
    {"policy_loss": "gspo", "clip_low": 3e-4, "clip_high": 4e-4, "loss_agg": "seq-mean-token-mean"},
    {"policy_loss": "cispo", "clip_low": 1.0, "clip_high": 4.0},
    {"policy_loss": "sapo", "loss_agg": "seq-mean-token-mean"},
    {"policy_loss": "gpg", "loss_agg": "token-sum"},
    {"policy_loss": "ppo", "loss_agg": "seq-mean-token-sum"},
]


@pytest.mark.parametrize(
    "options", SURROGATES, ids=lambda o: f"{o['policy_loss']}-{o.get('loss_agg', 'token-mean')}"
)
def test_each_surrogate_trains_every_parameter_and_splits_over_micro_batches(
    tiny_model_path: Path, options: dict[str, Any]
) -> None:
    rows = make_rows(8)

    def learner(micro_batch_tokens: int) -> Learner:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
        config = LearnerConfig(lr=1e-3, micro_batch_tokens=micro_batch_tokens, grad_clip=1e9, **options)
        return Learner(model, config, pad_id=0, temperature=0.9)

    whole, split = learner(1_000_000), learner(120)
    metrics = whole.accumulate_grpo(rows)
    split.accumulate_grpo(rows)
    a, b = gradients(whole), gradients(split)
    assert a.keys() == b.keys() and len(a) == len(list(whole.model.parameters()))
    assert all(g.abs().sum() > 0 for g in a.values())
    scale = max(float(g.abs().max()) for g in a.values())  # token-sum's gradients are ~100x the others'
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6 * scale, msg=name)
    assert math.isfinite(metrics["loss"])


def test_rloo_and_gpg_advantages_and_the_std_epsilon_reach_the_rows() -> None:
    batch = [
        trajectory("a", 0, 1.0),
        trajectory("a", 1, 0.0),
        trajectory("a", 2, 0.0),
        trajectory("b", 0, 1.0),
    ]
    advantage = {
        name: [r.advantage for r in rows_from_trajectories(batch, config)[0][::2]]
        for name, config in {
            "rloo": LearnerConfig(advantage="rloo"),
            "gpg": LearnerConfig(advantage="gpg"),
            "grpo-std": LearnerConfig(advantage_scale="group", std_eps=1.0),
        }.items()
    }
    # RLOO: 1 - 0 = 1, 0 - 0.5 = -0.5 (x2); b alone: 0. GPG: B = 4 valid, M = 1 (b alone is uniform):
    # alpha = 4/3 times 2/3, -1/3: 0.888889, -0.444444. Group std of (1, 0, 0) = 0.57735, + eps 1:
    # (2/3) / 1.57735 = 0.422650, (-1/3) / 1.57735 = -0.211325.
    assert advantage["rloo"] == pytest.approx([1.0, -0.5, -0.5, 0.0])
    assert advantage["gpg"] == pytest.approx([0.888889, -0.444444, -0.444444, 0.0], abs=1e-6)
    assert advantage["grpo-std"] == pytest.approx([0.422650, -0.211325, -0.211325, 0.0], abs=1e-6)


def test_generations_cut_off_by_the_token_limit_are_not_trained_on() -> None:
    turns = [
        Turn(text="a", generated_ids=[8, 8], logprobs=[-1.0, -1.0], appended_ids=[9]),
        Turn(
            text="b", generated_ids=[7, 7, 7], logprobs=[-1.0] * 3, finish_reason="length", appended_ids=[9]
        ),
    ]
    t = trajectory("a", 0, 1.0).model_copy(
        update={"segments": [Segment(index=0, prompt_ids=[5], turns=turns)]}
    )
    batch = [t, trajectory("a", 1, 0.0)]
    (row, *_), _ = rows_from_trajectories(batch, LearnerConfig())
    (masked, *_), _ = rows_from_trajectories(batch, LearnerConfig(mask_truncated=True))
    assert row.mask == [0, 1, 1, 0, 1, 1, 1, 0]
    assert masked.mask == [0, 1, 1, 0, 0, 0, 0, 0]


def one_segment(tid: str, reward: float, logprobs: list[float], ids: list[int]) -> Trajectory:
    turn = Turn(text="x", generated_ids=ids, logprobs=logprobs)
    return trajectory("k", int(tid), reward).model_copy(
        update={"id": f"k/{tid}", "segments": [Segment(index=0, prompt_ids=[5, 6, 7], turns=[turn])]}
    )


def test_the_kl_in_the_reward_is_the_samplers_log_ratio_to_the_reference(tiny_model_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval().requires_grad_(False)
    learner = Learner(model, LearnerConfig(kl_in_reward=0.1), pad_id=0, temperature=1.0, reference=reference)
    ids = [11, 12, 13, 14]
    with torch.no_grad():
        logits = reference(torch.tensor([[5, 6, 7, *ids]])).logits[0, 2:-1]  # predicts ids
        own = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1).tolist()
    # A sampler whose log-probs are the reference's: KL 0. One 0.5 above on every token: 4 x 0.5 = 2.
    same, above = one_segment("0", 1.0, own, ids), one_segment("1", 1.0, [x + 0.5 for x in own], ids)
    assert learner.trajectory_kl([same, above]) == pytest.approx([0.0, 2.0], abs=1e-4)
    # Both rewards are 1; the KL takes 0.1 x 2 = 0.2 off the second: advantages +0.1 and -0.1.
    rows, _ = rows_from_trajectories([same, above], learner.config, [0.0, 0.2])
    assert [r.advantage for r in rows] == pytest.approx([0.1, -0.1])
    with pytest.raises(ValueError, match="need a reference model"):
        Learner(model, LearnerConfig(kl_in_reward=0.1), pad_id=0)


def test_each_policy_loss_setting_picks_its_surrogate() -> None:
    from harness.training import family
    from harness.training.grpo import aggregate, policy_loss

    batch, logprobs, logits = micro_batch()
    old, adv, mask = batch.sampler, batch.advantage, batch.mask  # the ratio against the sampler is not 1
    expected = {
        "ppo": policy_loss(logprobs, old, adv, mask, 0.2, 0.28, 3.0)[0],
        "gspo": family.gspo_loss(logprobs, old, adv, mask, 0.2, 0.28)[0],
        "cispo": family.cispo_loss(logprobs, old, adv, mask, 0.2, 0.28)[0],
        "sapo": family.sapo_loss(logprobs, old, adv, mask, 1.0, 1.05)[0],
        "gpg": family.gpg_loss(logprobs, adv, mask)[0],
    }
    values = {name: aggregate(loss, mask, "token-mean", 20).item() for name, loss in expected.items()}
    assert len({round(v, 6) for v in values.values()}) == 5  # five different numbers on this batch
    for name, value in values.items():
        config = LearnerConfig(policy_loss=name, ratio_against="sampler", importance="none")  # type: ignore[arg-type]
        loss, _ = objective(config, logprobs, logits, batch, None, norm_tokens=20, norm_seqs=3)
        assert loss.item() == pytest.approx(value, abs=1e-7), name


DENSE_SETTINGS: list[dict[str, Any]] = [
    *({"loss_agg": agg} for agg in ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum")),
    {"loss_agg": "seq-mean-token-sum-norm", "max_len": 64},
    {"importance": "mask"},
    {"importance": "none"},
    {"importance_level": "sequence", "importance_batch_normalize": True},
]


@pytest.mark.parametrize("options", DENSE_SETTINGS, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_dense_advantages_enter_token_by_token_under_every_aggregation_and_importance_setting(
    tiny_model_path: Path, options: dict[str, Any]
) -> None:
    """Dense credit (issue 19) hands the learner one advantage per token. At the first update the ratio is
    1 and the loss is linear in the advantages, so the gradient of scalar + delta must be the scalar's plus
    delta's, whatever the aggregation or importance correction; and a row whose per-token advantages all
    equal its scalar must train exactly as the scalar row."""
    rows = make_rows(6)
    g = random.Random(1)
    deltas = [[g.uniform(-1, 1) for _ in r.ids[1:]] for r in rows]

    def grads(token_advantages: list[list[float]] | None) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
        learner = Learner(model, LearnerConfig(lr=1e-3, grad_clip=1e9, **options), pad_id=0, temperature=0.9)
        dense: list[list[float] | None] = [*token_advantages] if token_advantages else [None] * len(rows)
        learner.accumulate_grpo([replace(r, token_advantages=d) for r, d in zip(rows, dense, strict=True)])
        return gradients(learner)

    scalar, delta = grads(None), grads(deltas)
    both = grads([[r.advantage + d for d in ds] for r, ds in zip(rows, deltas, strict=True)])
    same = grads([[r.advantage] * (len(r.ids) - 1) for r in rows])
    scale = max(float(g.abs().max()) for g in scalar.values())
    for name in scalar:
        torch.testing.assert_close(both[name], scalar[name] + delta[name], rtol=1e-4, atol=1e-5 * scale)
        torch.testing.assert_close(same[name], scalar[name], rtol=1e-6, atol=1e-7 * scale)
    # delta's gradient is not the scalar's rescaled: the per-token values reached the loss one by one.
    flat = torch.cat([g.flatten() for g in scalar.values()]), torch.cat([g.flatten() for g in delta.values()])
    assert abs(float(torch.nn.functional.cosine_similarity(*flat, dim=0))) < 0.9
