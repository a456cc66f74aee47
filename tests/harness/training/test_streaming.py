"""Sync steps learned group by group as the groups are graded: the same update as the whole batch, on a
real tiny model and in a real training run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.training.distributed import Processes
from harness.training.grpo import AggMode
from harness.training.learner import Learner, LearnerConfig
from harness.training.streaming import GroupLearner
from harness.training.train import TrainConfig, stream_blocker, streams, thread_split, train
from tests.harness.training.test_learner import make_rows

CPU = Processes(rank=0, world=1, device=torch.device("cpu"))


def learner(path: Path, loss_agg: AggMode) -> Learner:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path)
    config = LearnerConfig(
        lr=1e-3, micro_batch_tokens=128, grad_clip=1e9, loss_agg=loss_agg, max_len=40, entropy_coef=0.01
    )
    made = Learner(model, config, pad_id=0, temperature=0.9)
    made.optimizer = Recording(model.parameters())
    return made


class Recording(torch.optim.SGD):
    """Keeps the gradient each step is given and leaves the weights as they are. (The weights after an
    Adam step would not do: its first step, g / (|g| + eps), makes whole steps of the rounding noise of
    near-zero gradients, and is blind to a wrong normaliser.)"""

    def __init__(self, params: Any) -> None:
        super().__init__(params, lr=0.0)
        self.grads: list[torch.Tensor] = []

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        self.grads = [p.grad.clone() for group in self.param_groups for p in group["params"]]


@pytest.mark.parametrize(
    "loss_agg", ["token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_groups_learned_one_by_one_give_the_whole_batchs_update(
    tiny_model_path: Path, loss_agg: AggMode
) -> None:
    """Three groups of different sizes and lengths, over several micro-batches each: the loss, the
    gradient's norm, every metric, the learner's log-probs and the update agree with one step on the
    whole batch."""
    rows = [replace(r, source=(f"t{i}", 0)) for i, r in enumerate(make_rows(12, seed=3))]
    groups = [rows[:3], rows[3:7], rows[7:]]
    whole, grouped = learner(tiny_model_path, loss_agg), learner(tiny_model_path, loss_agg)
    want = whole.grpo_step(rows)
    stepper = GroupLearner(grouped)
    for group in groups:
        stepper.add(group)
    got = stepper.finish()
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == pytest.approx(want[name], rel=1e-5, abs=1e-7), name
    assert grouped.learner_logprobs.keys() == whole.learner_logprobs.keys()
    for key, values in whole.learner_logprobs.items():
        assert grouped.learner_logprobs[key] == pytest.approx(values, abs=1e-5)
    want_grads = whole.optimizer.grads  # type: ignore[attr-defined]
    got_grads = grouped.optimizer.grads  # type: ignore[attr-defined]
    assert len(got_grads) == len(want_grads) > 0
    for got_grad, want_grad in zip(got_grads, want_grads, strict=True):
        scale = want_grad.abs().max()
        assert scale > 0 and torch.allclose(got_grad, want_grad, rtol=1e-4, atol=1e-6 * scale)


def test_a_group_learner_without_rows_changes_nothing(tiny_model_path: Path) -> None:
    stepper = GroupLearner(learner(tiny_model_path, "token-mean"))
    stepper.add([])
    before = [p.detach().clone() for p in stepper.learner.model.parameters()]
    assert stepper.finish() == {}
    assert all(torch.equal(a, b) for a, b in zip(before, stepper.learner.model.parameters(), strict=True))


def scripted(model: Path, out: Path, stream: bool | None) -> TrainConfig:
    """Three tasks of two rollouts a step, two episodes at once: the first group is graded while the
    others roll out. Scripted fixes, so both runs see the same trajectories and rewards."""
    return TrainConfig.model_validate(
        {
            "model": str(model), "script": "gold-or-decoy", "steps": 2, "tasks_per_step": 3,
            "stream_groups": stream, "sampler_batch": 1, "learner": {"lr": 1e-4},
            "rollout": {
                "suite": "demo", "out": str(out), "group_size": 2, "concurrency": 2, "seed": 0,
                "sandbox": {"backend": "bwrap"}, "summary": {"trigger_tokens": 64, "max_summary_tokens": 32},
                "sampling": {"max_new_tokens": 128, "temperature": 1.0},
            },
        }
    )  # fmt: skip


LEARNED = ("loss", "grad_norm", "advantage_mean", "advantage_abs_mean", "reward_mean", "tokens")


def test_a_streamed_training_run_learns_groups_during_rollouts_and_matches_the_whole_batch(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    streamed = train(scripted(tiny_model_path, tmp_path / "streamed", None))
    whole = train(scripted(tiny_model_path, tmp_path / "whole", False))
    # The learner learned groups while episodes of the same step still ran; the whole-batch run did not.
    assert all(0 < m["time_learn_overlapped_s"] <= m["time_learn_s"] for m in streamed)
    assert all("time_learn_overlapped_s" not in m for m in whole)
    for got, want in zip(streamed, whole, strict=True):
        assert got["trajectories_used"] == want["trajectories_used"] == 6
        for name in LEARNED:
            assert got[name] == pytest.approx(want[name], rel=1e-4, abs=1e-6), name
        assert got["policy_version"] == want["policy_version"]
    # (Step 1's loss and gradient norm, equal above, are of step 0's new weights. The weights themselves
    # are not compared: Adam turns the rounding noise of near-zero gradients into steps of up to lr.)
    # The sampler copy sampled step 1 with the weights of step 0's update.
    lines = (tmp_path / "streamed" / "trajectories.jsonl").read_text().splitlines()
    versions = {json.loads(line)["sample_index"] // 2: json.loads(line)["policy_version"] for line in lines}
    assert versions == {0: 0, 1: 1}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"learner": {"advantage_scale": "batch"}}, "advantage_scale: batch"),
        ({"learner": {"advantage": "gpg"}}, "advantage: gpg"),
        ({"learner": {"importance_batch_normalize": True}}, "importance_batch_normalize"),
        ({"learner": {"top_entropy_quantile": 0.2}}, "top_entropy_quantile"),
        ({"credit": {"mode": "opsd"}}, "dense credit"),
        ({"credit": {"hint_rollouts": 2}}, "hint rollouts"),
    ],
)
def test_settings_that_need_the_whole_batch_turn_streaming_off_or_refuse_it(
    tmp_path: Path, change: dict[str, Any], named: str
) -> None:
    base: dict[str, Any] = {"model": str(tmp_path), "rollout": {"suite": "demo"}}
    config = TrainConfig.model_validate(base | change)
    assert named in (stream_blocker(config) or "") and not streams(config, CPU)
    with pytest.raises(ValueError, match=named.replace("_", ".")):
        TrainConfig.model_validate(base | change | {"stream_groups": True})
    plain = TrainConfig.model_validate(base)
    assert stream_blocker(plain) is None and streams(plain, CPU)
    assert not streams(plain.model_copy(update={"stream_groups": False}), CPU)
    assert not streams(plain.model_copy(update={"mode": "async"}), CPU)
    two = Processes(rank=0, world=2, device=torch.device("cpu"))
    assert not streams(plain, two)
    with pytest.raises(ValueError, match="one process"):
        streams(plain.model_copy(update={"stream_groups": True}), two)
    # Streamed, each side keeps every core (a split measured no faster, docs/benchmarks.md).
    assert thread_split(plain, CPU) == (None, None)
