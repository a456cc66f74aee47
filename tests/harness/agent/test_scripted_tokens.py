"""`ScriptedTokens`: scripted fixes played as a model's own tokens. What it writes depends on the episode's
seed alone, never on the weights, so a run is the same on CPUs whose arithmetic differs; its log-probs are
the model's own."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from harness.agent.scripted_tokens import STUMBLE, ScriptedTokens, plan_of
from harness.agent.trajectory import Trajectory
from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore
from policies.hf import HFPolicy, sequence_logprobs
from policies.tiny import build_tiny_model
from tasks.suite import load_suite
from tests.conftest import require_backend


def play(model: Path, out: Path) -> list[Trajectory]:
    config = RolloutConfig.model_validate(
        {
            "suite": "demo", "group_size": 4, "concurrency": 2, "seed": 3, "out": str(out),
            "sandbox": {"backend": "bwrap"}, "summary": {"trigger_tokens": 64, "max_summary_tokens": 32},
            "sampling": {"max_new_tokens": 128, "temperature": 1.0},
        }
    )  # fmt: skip
    policy = HFPolicy(model)
    rollout(config, ScriptedTokens(policy, load_suite("demo")))
    return sorted(RunStore(out).trajectories(), key=lambda t: t.id)


@pytest.mark.timeout(600)
def test_two_models_write_the_same_episodes_with_their_own_logprobs(tmp_path: Path) -> None:
    """Models of different weights stand for one model on CPUs of different rounding."""
    require_backend("bwrap")
    one, other = (build_tiny_model(tmp_path / f"model-{seed}", seed=seed) for seed in (1, 2))
    first, second = play(one, tmp_path / "one"), play(other, tmp_path / "other")

    def ids(t: Trajectory) -> list[list[int]]:
        return [turn.generated_ids for s in t.segments for turn in s.turns]

    assert [t.id for t in first] == [t.id for t in second]
    assert [ids(t) for t in first] == [ids(t) for t in second]
    assert [t.reward for t in first] == [t.reward for t in second]
    assert first[0].segments[0].turns[0].logprobs != second[0].segments[0].turns[0].logprobs

    # The plans come out as designed: right and wrong fixes, stumbles, summaries, no infra error.
    outcomes = Counter((plan_of(t.seed).script, t.reward == 1.0) for t in first)
    assert set(outcomes) == {("gold-min", True), ("decoy", False)}, outcomes
    stumbled = [t for t in first if plan_of(t.seed).stumble]
    assert stumbled and all(t.metrics.parse_errors == 1 for t in stumbled)
    assert all(t.segments[0].turns[0].text == STUMBLE for t in stumbled)
    assert all(t.metrics.parse_errors == 0 for t in first if not plan_of(t.seed).stumble)
    assert all(t.status == "ok" and t.metrics.summaries >= 1 for t in first)

    # The reported log-probs are the model's own, as the learner recomputes them.
    policy = HFPolicy(one)
    segment = first[0].segments[0]
    turn = segment.turns[0]
    prompt = segment.prompt_ids
    again = sequence_logprobs(policy.model, [*prompt, *turn.generated_ids], len(prompt), 1.0)
    assert again == pytest.approx(turn.logprobs, abs=1e-5)
