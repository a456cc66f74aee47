"""The training demo, shortened (tests/conftest.py `demo_run`, on each of DEMO_SEEDS): GRPO must raise the
reward and the pass rate.

The warm-start-only evaluation is the baseline: the rise has to come from the GRPO steps, not from the
warm start. Summaries must occur during training and their tokens must be trained on (shown on the
scripted run, whose content is the same on every machine).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.rollouts.store import RunStore
from harness.training.train_demo import DemoConfig, DemoResult, grpo_config, phase_rollout, reused_warm_start

FIRST_LAST = 2
"""Steps averaged at each end of the run."""


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_grpo_raises_the_reward_above_the_first_steps_and_the_warm_start(
    demo_run: tuple[Path, DemoResult],
) -> None:
    _, result = demo_run
    first, last = mean(result.rewards[:FIRST_LAST]), mean(result.rewards[-FIRST_LAST:])
    seen = (
        f"GRPO step rewards {[round(r, 3) for r in result.rewards]}; warm start: pass rate "
        f"{result.baseline_pass_rate:.3f}, reward {result.baseline_reward:.3f} ({result.warm_start_epochs} "
        f"epochs); after GRPO: pass rate {result.final_pass_rate:.3f}, reward {result.final_reward:.3f}"
    )
    assert last > first, seen
    assert last > result.baseline_reward, seen
    assert result.final_reward > result.baseline_reward, seen
    assert result.final_pass_rate > result.baseline_pass_rate, seen


def test_summaries_happen_in_training_and_are_trained_on(scripted_training_run: Path) -> None:
    run = scripted_training_run
    trajectories = {t.id: t for t in RunStore(run).trajectories()}
    assert min(t.metrics.summaries for t in trajectories.values()) >= 1
    trained_summary_tokens = 0
    later_segments = 0
    for line in map(json.loads, (run / "learner.jsonl").read_text().splitlines()):
        trajectory = trajectories[line["trajectory_id"]]
        segment = trajectory.segments[line["segment"]]
        later_segments += line["segment"] > 0
        summary_turns = [turn for turn in segment.turns if turn.kind == "summary"]
        generated = sum(len(turn.generated_ids) for turn in segment.turns)
        assert len(line["learner_logprobs"]) == generated  # every model token, summary tokens included
        if summary_turns and line["advantage"] != 0:
            trained_summary_tokens += sum(len(turn.generated_ids) for turn in summary_turns)
    assert trained_summary_tokens > 0 and later_segments > 0


def test_a_warm_start_is_reused_only_from_a_run_that_has_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="holds no warm-started model"):
        reused_warm_start(tmp_path)
    (tmp_path / "sft" / "model").mkdir(parents=True)
    (tmp_path / "sft" / "model" / "config.json").write_text("{}")
    assert reused_warm_start(tmp_path) == tmp_path / "sft" / "model"


def test_the_demo_nests_its_rollout_settings_and_reads_the_older_flat_form(tmp_path: Path) -> None:
    """DemoConfig holds a RolloutConfig that the evaluations and GRPO start from; the flat `backend`,
    `group_size`, `concurrency` and `temperature` of older settings (and of benchmarks' overrides) go
    into it, over the demo's defaults."""
    flat = DemoConfig.model_validate(
        {
            "out": tmp_path,
            "seed": 2,
            "backend": "bwrap",
            "group_size": 4,
            "concurrency": 3,
            "temperature": 0.5,
        }
    )
    nested = DemoConfig.model_validate(
        {"out": tmp_path, "seed": 2, "rollout": {
            "sandbox": {"backend": "bwrap"}, "group_size": 4, "concurrency": 3, "sampling": {"temperature": 0.5}}}
    )  # fmt: skip
    assert flat == nested
    assert (nested.rollout.suite, nested.rollout.sampling.max_new_tokens) == ("demo", 128)
    evaluation = phase_rollout(nested, "eval-grpo", group_size=nested.eval_samples, seed=10_002)
    assert (evaluation.out, evaluation.group_size, evaluation.concurrency) == (tmp_path / "eval-grpo", 8, 3)
    grpo = grpo_config(nested, tmp_path, nested.rollout.summary).rollout
    assert (grpo.out, grpo.seed, grpo.group_size, grpo.sampling.temperature) == (tmp_path / "grpo", 2, 4, 0.5)
    assert grpo.sandbox.backend == "bwrap" and grpo.policy == f"hf:{tmp_path}"
