"""Token-exact episodes with a real tiny model: summaries, log-probs, id extension, and the loss mask."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.agent.trajectory import Segment, Trajectory
from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore
from policies.base import Generation, SamplingParams
from policies.chat_format import ChatFormat
from policies.hf import HFPolicy, sequence_logprobs
from summarizer import request_message

MINI = Path(__file__).parents[2] / "data" / "suites" / "mini"
TEMPERATURE = 0.9


class RecordingPolicy:
    """The real tiny policy, remembering the exact prompt ids of every generation it was asked for."""

    kind = "token"

    def __init__(self, inner: HFPolicy) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.tokenizer = inner.tokenizer
        self.prompts: list[list[int]] = []
        self.outputs: list[list[int]] = []

    @property
    def version(self) -> int:
        return self.inner.version

    def stop_ids(self) -> list[int]:
        return self.inner.stop_ids()

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        generation = self.inner.generate(prompt_ids, params)
        self.prompts.append(list(prompt_ids))
        self.outputs.append(list(generation.ids))
        return generation


def prompt_tokens(policy: HFPolicy) -> int:
    """Tokens of a segment's first prompt (system, tools and task) for the mini task."""
    from harness.agent.loop import SYSTEM_PROMPT
    from tasks.suite import load_suite
    from tools import Toolbox, ToolsConfig

    task = load_suite(str(MINI))[0]
    fmt = ChatFormat(policy.tokenizer, policy.stop_ids())
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task.prompt()}]
    return len(fmt.prompt_ids(messages, Toolbox(ToolsConfig()).schemas()))


@pytest.fixture(scope="module")
def episodes(
    tiny_policy: HFPolicy, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[Trajectory], RecordingPolicy]:
    recording = RecordingPolicy(tiny_policy)
    out = tmp_path_factory.mktemp("runs") / "tiny"
    config = RolloutConfig.model_validate(
        {
            "suite": str(MINI),
            "policy": tiny_policy.spec,
            "group_size": 2,
            "concurrency": 1,
            "out": str(out),
            "loop": {"max_turns": 14},
            "sampling": {"max_new_tokens": 40, "temperature": TEMPERATURE},
            "summary": {"trigger_tokens": prompt_tokens(tiny_policy) + 160, "max_summary_tokens": 24},
            "sandbox": {"backend": "bwrap"},
        }
    )
    rollout(config, policy=recording)  # type: ignore[arg-type]
    return list(RunStore(out).trajectories()), recording


def test_every_episode_writes_at_least_three_summaries(
    episodes: tuple[list[Trajectory], RecordingPolicy],
) -> None:
    trajectories, _ = episodes
    assert len(trajectories) == 2
    for t in trajectories:
        assert t.trainable and t.ids_verified and t.status == "limit"
        assert t.metrics.summaries >= 3 and len(t.segments) == t.metrics.summaries + 1
        assert t.grade is not None and t.grade.correct == 0.0  # a random model does not fix bugs
        for summary in t.summaries:
            assert summary.tokens_after < summary.tokens_before
        assert t.metrics.total_tokens > t.metrics.max_context_tokens


def test_recomputed_logprobs_match_the_sampler(
    episodes: tuple[list[Trajectory], RecordingPolicy], tiny_policy: HFPolicy
) -> None:
    trajectories, _ = episodes
    worst = 0.0
    for t in trajectories:
        for segment in t.segments:
            ids, mask, sampled = segment.ids_and_mask()
            recomputed = sequence_logprobs(tiny_policy.model, ids, 1, TEMPERATURE)
            for i in range(1, len(ids)):
                if mask[i]:
                    worst = max(worst, abs(recomputed[i - 1] - sampled[i]))
    assert 0 <= worst <= 1e-4, worst


def test_each_generation_extends_the_previous_ids_exactly(
    episodes: tuple[list[Trajectory], RecordingPolicy],
) -> None:
    trajectories, recording = episodes
    turns = [turn for t in trajectories for s in t.segments for turn in s.turns]
    assert len(recording.prompts) == len(turns)
    calls = iter(zip(recording.prompts, recording.outputs, strict=True))
    for t in trajectories:
        for segment in t.segments:
            context = list(segment.prompt_ids)
            for turn in segment.turns:
                prompt, output = next(calls)
                assert prompt == context  # the sampler saw exactly the stored ids so far
                assert output == turn.generated_ids
                assert (turn.prompt_tokens, turn.completion_tokens) == (len(prompt), len(output))
                context += turn.generated_ids + turn.appended_ids


def expected_mask_and_appended(segment: Segment, fmt: ChatFormat) -> None:
    """Walks a segment token by token: what the model produced is 1, everything the harness put in is 0."""
    ids, mask, _ = segment.ids_and_mask()
    position = len(segment.prompt_ids)
    assert mask[:position] == [0] * position
    for k, turn in enumerate(segment.turns):
        n = len(turn.generated_ids)
        assert ids[position : position + n] == turn.generated_ids
        assert mask[position : position + n] == [1] * n
        position += n
        expected = fmt.after_generation(turn.generated_ids, turn.finish_reason == "stop")
        if turn.kind == "action":
            # the tool result, then the summary request or the opening of the next assistant message
            expected += fmt.message_ids({"role": "tool", "content": turn.observation}, reply=False)
            if k + 1 < len(segment.turns) and segment.turns[k + 1].kind == "summary":
                expected += fmt.message_ids(request_message())
            elif k + 1 < len(segment.turns):
                expected += fmt.reply_ids
                assert fmt.tokenizer.decode(fmt.reply_ids) == "<|im_start|>assistant\n"
        assert turn.appended_ids == expected
        m = len(turn.appended_ids)
        assert mask[position : position + m] == [0] * m
        position += m
    assert position == len(ids)


def test_the_loss_mask_is_one_exactly_on_model_tokens(
    episodes: tuple[list[Trajectory], RecordingPolicy], tiny_policy: HFPolicy
) -> None:
    trajectories, _ = episodes
    fmt = ChatFormat(tiny_policy.tokenizer, tiny_policy.stop_ids())
    for t in trajectories:
        for index, segment in enumerate(t.segments):
            expected_mask_and_appended(segment, fmt)
            summary_turns = [turn for turn in segment.turns if turn.kind == "summary"]
            if index < len(t.segments) - 1:
                assert len(summary_turns) == 1 and segment.turns[-1].kind == "summary"
                _, mask, _ = segment.ids_and_mask()
                assert sum(mask) >= len(summary_turns[0].generated_ids) > 0  # summary tokens are trained on
                next_prompt = tiny_policy.tokenizer.decode(t.segments[index + 1].prompt_ids)
                assert summary_turns[0].text.strip() in next_prompt
            else:
                assert not summary_turns


def test_token_exact_episodes_through_harness_serve_and_tito(
    tiny_policy: HFPolicy, tiny_model_path: Path, tmp_path: Path
) -> None:
    """The same contract over HTTP: a served model, sampled by token ids through the tito backend."""
    from harness.serve import create_app, running
    from policies.spec import make_policy

    out = tmp_path / "tito"
    served = HFPolicy(tiny_model_path)
    app = create_app(served, model_name=str(tiny_model_path))
    with running(app) as url:
        policy = make_policy(f"tito:{tiny_model_path}@{url}")
        assert policy.kind == "token"
        config = RolloutConfig.model_validate(
            {
                "suite": str(MINI),
                "policy": policy.spec,
                "out": str(out),
                "loop": {"max_turns": 12},
                "sampling": {"max_new_tokens": 40, "temperature": TEMPERATURE},
                "summary": {"trigger_tokens": prompt_tokens(tiny_policy) + 160, "max_summary_tokens": 24},
                "sandbox": {"backend": "bwrap"},
            }
        )
        rollout(config, policy=policy)
    (trajectory,) = RunStore(out).trajectories()
    assert trajectory.trainable and trajectory.ids_verified and trajectory.metrics.summaries >= 3
    worst = 0.0
    for segment in trajectory.segments:
        ids, mask, sampled = segment.ids_and_mask()
        recomputed = sequence_logprobs(tiny_policy.model, ids, 1, TEMPERATURE)
        worst = max([worst, *(abs(recomputed[i - 1] - sampled[i]) for i in range(1, len(ids)) if mask[i])])
    assert worst <= 1e-4, worst
