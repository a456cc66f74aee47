"""`harness train` in async mode on the tiny model: rollouts of step n+1 overlap learning on step n, every
trained token is within `max_staleness` versions of the learner, older groups are dropped and counted,
and the importance weights see the staleness."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.training.train import TrainConfig, train
from tests.harness.training.test_train import config


def async_config(model: Path, out: Path, max_staleness: int) -> TrainConfig:
    return config(model, out, 3).model_copy(update={"mode": "async", "max_staleness": max_staleness})


def trained_staleness(run: Path) -> list[tuple[int, int]]:
    """(step, learner version - policy version) of every trained turn, from learner.jsonl and the trajectories."""
    lines = (run / "trajectories.jsonl").read_text().splitlines()
    trajectories: dict[str, Any] = {t["id"]: t for t in map(json.loads, lines)}
    out = []
    for line in map(json.loads, (run / "learner.jsonl").read_text().splitlines()):
        segment = trajectories[line["trajectory_id"]]["segments"][line["segment"]]
        out += [(line["step"], line["step"] - turn["policy_version"]) for turn in segment["turns"]]
    return out


def test_async_training_trains_one_step_stale_data_with_importance_weights(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    metrics = train(async_config(tiny_model_path, tmp_path / "run", max_staleness=1))
    assert len(metrics) == 3
    assert all(m["groups_dropped_stale"] == 0 and m["staleness_max"] <= 1 for m in metrics)
    # Step 1's rollouts ran while the learner trained step 0: sampled by version 0, trained at version 1.
    assert metrics[1]["staleness_max"] == 1 and metrics[1]["staleness_mean"] > 0
    trained = trained_staleness(tmp_path / "run")
    assert {step for step, _ in trained} == {0, 1, 2}
    assert all(0 <= staleness <= 1 for _, staleness in trained)
    # The learner's log-probs were compared with the sampler's: stale tokens get weights other than 1.
    assert metrics[0]["is_abs_log_ratio_mean"] < 1e-4  # step 0 is on-policy
    assert metrics[1]["is_abs_log_ratio_mean"] > 1e-3
    assert "time_wait_s" in metrics[1]


def test_groups_older_than_max_staleness_are_dropped_and_counted(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    metrics = train(async_config(tiny_model_path, tmp_path / "run", max_staleness=0))
    assert metrics[0]["groups_dropped_stale"] == 0  # the first batch is sampled by the learner's weights
    assert metrics[1]["groups_dropped_stale"] == 1  # rolled out during step 0: one version behind
    assert sum(m["groups_dropped_stale"] for m in metrics) >= 1
    trained = trained_staleness(tmp_path / "run")
    assert trained and all(staleness == 0 for _, staleness in trained)
    assert 1 not in {step for step, _ in trained}


def test_a_turn_sampled_across_a_weight_update_counts_each_token_at_its_own_version() -> None:
    """A batched sampler loads new weights between decode steps: one turn's ids can carry two versions,
    and staleness counts each id at its own (the oldest decides whether its group is kept)."""
    from harness.agent.trajectory import Segment, Trajectory, Turn
    from harness.training.async_rollouts import fresh_groups, token_versions

    turn = Turn(
        text="x",
        generated_ids=[1, 2, 3, 4],
        logprobs=[0.0] * 4,
        policy_version=2,
        token_versions=[2, 2, 3, 3],
    )
    plain = Turn(text="y", generated_ids=[5, 6], logprobs=[0.0] * 2, policy_version=3)
    trajectory = Trajectory(
        id="t/0", run="r", task_id="t", group_id="g", sample_index=0, policy="hf:m", seed=0, trainable=True,
        segments=[Segment(index=0, prompt_ids=[0], turns=[turn, plain])],
    )  # fmt: skip
    assert token_versions(trajectory) == [(2, 2), (3, 2), (3, 2)]
    kept, metrics = fresh_groups([trajectory], learner_version=4, max_staleness=2)
    assert kept and metrics["staleness_mean"] == (2 * 2 + 1 * 4) / 6 and metrics["staleness_max"] == 2
    assert fresh_groups([trajectory], learner_version=4, max_staleness=1)[0] == []
