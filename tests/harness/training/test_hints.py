"""Learnable successes (harness/training/hints.py): the gate on a case worked by hand; hint tasks, failed
groups and the student's context built from real chat-format ids of the tiny model; a hint success's rows
scored by the real tiny model; and a training run that samples hint rollouts for the groups that failed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch

from envs.sandbox import SandboxConfig
from harness.agent.loop import LoopConfig
from harness.agent.scripted_tokens import ScriptedTokens
from harness.agent.trajectory import Segment, Summary, Trajectory, Turn
from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore
from harness.training.credit import privileged_header, surprisal_gate
from harness.training.hints import (
    failed_groups,
    hint_advantage,
    hint_rows,
    hint_task,
    student_prompts,
    student_rows,
)
from harness.training.learner import LearnerConfig, Row
from harness.training.teacher import CreditConfig, teacher_logprobs
from harness.training.train import TrainConfig, train
from policies.chat_format import ChatFormat
from policies.hf import HFPolicy
from summarizer import resume_messages
from tasks.model import HiddenTests, Task
from tasks.suite import load_suite
from tools import Toolbox, ToolsConfig

TASK = Task(
    id="t", title="t", repo=Path("."), problem_statement="Fix add().", gold_patch="--- a/x.py\n+++ b/x.py\n",
    hidden_tests=HiddenTests(fail_to_pass=["tests/test_x.py::test_y"], files={"tests/test_x.py": "def test_y(): ..."}),
)  # fmt: skip
SYSTEM = "You are a careful coding agent."
ROLLOUT = RolloutConfig(loop=LoopConfig(system_prompt=SYSTEM))


def test_the_surprisal_gate() -> None:
    # Student log-probs -1, -3, -9, -0.5 -> surprisals 1, 3, 9, 0.5; tau 2, cap 8, the last off the mask:
    # 1 (under tau), e^-(3 - 2) = 0.367879, 0 (a spike above 8), 0 (off the mask).
    weight = surprisal_gate(
        torch.tensor([[-1.0, -3.0, -9.0, -0.5]]), torch.tensor([[1.0, 1, 1, 0]]), 2.0, 8.0
    )
    assert weight.tolist()[0] == pytest.approx([1.0, math.exp(-1), 0.0, 0.0])
    with pytest.raises(ValueError, match="gate_tau < spike_cap"):
        surprisal_gate(torch.zeros(1, 1), torch.ones(1, 1), 9.0, 8.0)


def trajectory(task_id: str, sample: int, correct: float, status: str = "ok") -> Trajectory:
    from envs.grading import Grade

    grade = Grade.ungraded(task_id).model_copy(
        update={"correct": correct, "reward": correct, "patch_applied": True}
    )
    return Trajectory(
        id=f"{task_id}/{sample}", run="r", task_id=task_id, group_id=f"{task_id}@v0", sample_index=sample,
        policy="hf:x", seed=0, trainable=True, grade=grade, reward=correct, status=status,  # type: ignore[arg-type]
    )  # fmt: skip


def test_hint_tasks_and_the_groups_that_failed() -> None:
    header = privileged_header(TASK, ["gold_patch"])
    hinted = hint_task(TASK, header)
    assert hinted.id == "t.hint" and header in hinted.prompt() and header not in TASK.prompt()
    batch = [
        trajectory("a", 0, 0.0), trajectory("a", 1, 0.0), trajectory("a", 2, 1.0, status="infra_error"),
        trajectory("b", 0, 0.0), trajectory("b", 1, 1.0),
    ]  # fmt: skip
    # a: its graded rollouts all failed (the infra error counts neither way); b: one passed.
    assert failed_groups(batch) == ["a"]


def hint_trajectory(policy: HFPolicy, hinted: Task) -> tuple[Trajectory, ChatFormat]:
    """A hint rollout as the conversation lays it out: segment 0 opens on the hinted prompt, writes a tool
    call and a summary; segment 1 opens on the resume message (hinted prompt + summary) and submits."""
    fmt = ChatFormat(policy.tokenizer, policy.stop_ids())
    tools = Toolbox.for_task(hinted).schemas()
    encode = lambda text: policy.tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    first = fmt.prompt_ids(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": hinted.prompt()}], tools
    )
    second = fmt.prompt_ids(resume_messages(SYSTEM, hinted.prompt(), "I read x.py."), tools)
    call, summary, done = encode("read x.py"), encode("I read x.py."), encode("submit")
    segments = [
        Segment(index=0, prompt_ids=first, turns=[
            Turn(text="read", generated_ids=call, logprobs=[-0.1] * len(call), appended_ids=encode(" ok")),
            Turn(kind="summary", text="I read x.py.", generated_ids=summary, logprobs=[-0.2] * len(summary)),
        ]),
        Segment(index=1, prompt_ids=second, turns=[Turn(text="submit", generated_ids=done, logprobs=[-0.3] * len(done))]),
    ]  # fmt: skip
    t = trajectory(hinted.id, 0, 1.0).model_copy(
        update={
            "segments": segments,
            "summaries": [Summary(segment=0, text="I read x.py.", tokens_before=0, tokens_after=0)],
        }
    )
    return t, fmt


def test_a_hint_success_is_trained_in_the_students_context(tiny_policy: HFPolicy) -> None:
    header = privileged_header(TASK, ["gold_patch", "hidden_tests"])
    hinted = hint_task(TASK, header)
    t, fmt = hint_trajectory(tiny_policy, hinted)
    prompts = student_prompts(t, fmt, TASK, ROLLOUT)
    rows = student_rows(t, prompts)
    window = tiny_policy.tokenizer.encode(header, add_special_tokens=False)[:24]
    for row, segment, prompt in zip(rows, t.segments, prompts, strict=True):
        ids, mask, _ = segment.ids_and_mask()
        cut = len(segment.prompt_ids)
        assert row.ids == prompt + ids[cut:] and row.mask == [0] * len(prompt) + mask[cut:]
        assert not any(row.ids[i : i + len(window)] == window for i in range(len(row.ids)))  # no header
        assert any(ids[i : i + len(window)] == window for i in range(len(ids)))  # the rollout had it
    config = CreditConfig(hint_rollouts=2, gate_tau=2.0, spike_cap=30.0)
    failed = [trajectory("t", i, r) for i, r in enumerate((0.0, 0.5, 0.5, 0.0))]  # its group: all failed
    hinted_rows = hint_rows(
        [t, trajectory(hinted.id, 1, 0.0)], failed, LearnerConfig(), {"t": TASK}, fmt, ROLLOUT,
        tiny_policy.model, config, torch.device("cpu"),
    )  # fmt: skip
    assert hinted_rows.metrics["hint_success_rate"] == 0.5 and hinted_rows.metrics["hint_rollouts"] == 2.0
    for row in hinted_rows.rows:
        model = [t for t, m in enumerate(row.mask[1:]) if m]
        # one more rollout of its group: 1 - mean(0, .5, .5, 0, 1) = 0.6 (scale none, GRPO's baseline)
        assert row.token_advantages is not None and row.advantage == pytest.approx(0.6)
        # The tiny random model finds every token surprising (about ln 2048 = 7.6 > tau): gated below 0.75.
        assert all(0 < row.token_advantages[i] < 0.6 for i in model)
        assert all(row.sampler_logprobs[i + 1] < 0 for i in model)  # the student's own, not the sampler's
    assert hinted_rows.metrics["hint_gated_fraction"] == 1.0
    # segment 1 opens on the summary written with the header in view: not trained unless asked
    assert [r.source for r in hinted_rows.rows] == [(t.id, 0)]
    assert hinted_rows.metrics["hint_segments_dropped"] == 1
    keep = config.model_copy(update={"hint_summaries": "keep"})
    cpu = torch.device("cpu")
    kept = hint_rows([t], failed, LearnerConfig(), {"t": TASK}, fmt, ROLLOUT, tiny_policy.model, keep, cpu)
    assert [r.source for r in kept.rows] == [(t.id, 0), (t.id, 1)]
    assert kept.metrics["hint_segments_dropped"] == 0
    for row in kept.rows:  # the importance reference: the student's log-probs with no header, exactly
        (own,) = teacher_logprobs(tiny_policy.model, [], [row], ROLLOUT.sampling.temperature, cpu)
        assert row.sampler_logprobs[1:] == pytest.approx(own, abs=1e-6)


def test_a_hint_success_is_scaled_as_its_group_and_its_spikes_leave_the_mask(tiny_policy: HFPolicy) -> None:
    """`advantage_scale: group`: (1 - 0.4) / (std(0, .5, .5, 0, 1) + 1e-6), the std Bessel-corrected:
    sqrt(0.70 / 4) = 0.41833. With the spike cap under every token's surprisal (the tiny model's are about
    7.6), every model token is gated to 0: none is left on the mask (it would count in the token-mean
    denominator with nothing to learn), and the row is dropped."""
    hinted = hint_task(TASK, privileged_header(TASK, ["gold_patch"]))
    t, fmt = hint_trajectory(tiny_policy, hinted)
    failed = [trajectory("t", i, r) for i, r in enumerate((0.0, 0.5, 0.5, 0.0))]
    assert hint_advantage(t, failed, LearnerConfig(advantage_scale="group")) == pytest.approx(
        0.6 / (math.sqrt(0.70 / 4) + 1e-6)
    )
    assert hint_advantage(t, failed, LearnerConfig(advantage="rloo")) == pytest.approx(
        0.75
    )  # 1 - mean(others)
    cpu = torch.device("cpu")
    spiky = CreditConfig(hint_rollouts=1, gate_tau=0.5, spike_cap=1.0)
    none = hint_rows([t], failed, LearnerConfig(), {"t": TASK}, fmt, ROLLOUT, tiny_policy.model, spiky, cpu)
    assert none.rows == [] and none.metrics["hint_gated_fraction"] == 1.0
    (plain, *_) = student_rows(t, student_prompts(t, fmt, TASK, ROLLOUT))
    (own,) = teacher_logprobs(tiny_policy.model, [], [plain], ROLLOUT.sampling.temperature, cpu)
    surprisals = sorted(-v for v, m in zip(own, plain.mask[1:], strict=True) if m)
    cap = (surprisals[0] + surprisals[-1]) / 2  # some of this row's tokens above it, some not
    some = CreditConfig(hint_rollouts=1, gate_tau=0.0, spike_cap=cap)
    (first, *_) = hint_rows(
        [t], failed, LearnerConfig(), {"t": TASK}, fmt, ROLLOUT, tiny_policy.model, some, cpu
    ).rows
    assert first.token_advantages is not None
    on_mask = [i for i, m in enumerate(first.mask[1:]) if m]
    assert 0 < len(on_mask) < len(surprisals)  # the spikes left the mask...
    assert all(first.token_advantages[i] > 0 for i in on_mask)  # ...and every token left on it learns


def test_a_students_first_prompt_is_the_one_its_rollout_sampled_from(
    tiny_policy: HFPolicy, tmp_path: Path
) -> None:
    """The student's prompt is rebuilt with the rollout's own settings: with the bash tool turned off,
    the first prompt of a real token rollout is the student's, id for id."""
    task = load_suite("builtin")[0]
    config = RolloutConfig(
        tasks=[task.id], out=tmp_path / "run", sandbox=SandboxConfig(backend="bwrap"),
        tools=ToolsConfig(bash_enabled=False), loop=LoopConfig(system_prompt=SYSTEM, max_turns=1),
    )  # fmt: skip
    rollout(config, policy=ScriptedTokens(tiny_policy, [task]))
    (done,) = RunStore(config.out).trajectories()
    assert done.trainable and done.ids_verified and done.metrics.turns == 1
    (first,) = student_prompts(done, ChatFormat(tiny_policy.tokenizer, tiny_policy.stop_ids()), task, config)
    assert first == done.segments[0].prompt_ids


DEMO_TASK = "demo-double"


def scripted_seed(task_id: str, group: int, hints: int) -> int:
    """The first rollout seed whose scripted plans (`plan_of`, a hash of each episode's seed) play the
    decoy in every one of the group's rollouts of `task_id` at step 0, the gold fix in hint rollout 0 and
    the decoy in the other hint rollouts: the group fails whole, and one of its hints succeeds."""
    from harness.agent.scripted_tokens import plan_of
    from harness.rollouts.episode import episode_seed

    def plays(seed: int, task: str, sample: int) -> str:
        return plan_of(episode_seed(seed, task, sample)).script

    hint = task_id + ".hint"
    return next(
        seed
        for seed in range(10_000)
        if all(plays(seed, task_id, k) == "decoy" for k in range(group))
        and plays(seed, hint, 0) == "gold-min"
        and all(plays(seed, hint, k) == "decoy" for k in range(1, hints))
    )


def scripted_config(out: Path, model: Path, credit: Mapping[str, object]) -> TrainConfig:
    """One step of a scripted run (`script: gold-or-decoy`) on one demo task, whose group fails whole and
    whose first hint rollout succeeds (`scripted_seed`)."""
    return TrainConfig.model_validate(
        {
            "model": str(model), "script": "gold-or-decoy", "steps": 1, "tasks_per_step": 1,
            "learner": {"lr": 1e-4}, "credit": credit,
            "rollout": {
                "suite": "demo", "tasks": [DEMO_TASK], "out": str(out), "group_size": 3, "concurrency": 2,
                "seed": scripted_seed(DEMO_TASK, 3, 2), "sandbox": {"backend": "bwrap"},
                "sampling": {"max_new_tokens": 128, "temperature": 1.0},
            },
        }
    )  # fmt: skip


def test_a_hint_success_in_a_training_run_reaches_the_learner_gated(
    tiny_model_path: Path, tmp_path: Path, learner_rows: list[Row]
) -> None:
    """A scripted run whose group fails whole and whose first hint rollout plays the gold fix: that
    success's row is in the learner's batch, in the student's context (no header), its stored log-probs
    the student's own, its advantage the learner's estimator's for one more rollout of the failed group
    (reward minus the mean of the group with it: `advantage_scale: none`), each token's advantage that
    times the surprisal gate, and the tokens above the spike cap off the mask."""
    trained = learner_rows
    out = tmp_path / "run"
    credit = {"hint_rollouts": 2, "gate_tau": 2.0, "spike_cap": 8.0}
    (metrics,) = train(scripted_config(out, tiny_model_path, credit))
    runs = {t.id: t for t in RunStore(out).trajectories()}
    own = [t for t in runs.values() if t.task_id == DEMO_TASK]
    success = runs[f"{DEMO_TASK}.hint/0"]
    assert all(t.grade is not None and t.grade.correct < 1 for t in own) and len(own) == 3
    assert success.grade is not None and success.grade.correct == 1.0 and success.trainable
    assert metrics["hint_success_rate"] == 0.5 and metrics["hint_share"] > 0
    rewards = [t.reward for t in own] + [success.reward]
    advantage = success.reward - sum(rewards) / len(rewards)
    hinted = [row for row in trained if row.source is not None and row.source[0] == success.id]
    assert hinted and advantage > 0  # its row reached the learner
    student = HFPolicy(tiny_model_path).model  # the weights that scored it: the run's first step
    cpu, spiked = torch.device("cpu"), 0
    for row in hinted:
        assert row.source is not None
        segment = success.segments[row.source[1]]
        ids, mask, _ = segment.ids_and_mask()
        cut = len(segment.prompt_ids)
        tail = len(ids) - cut
        assert row.ids[-tail:] == ids[cut:] and len(row.ids) < len(ids)  # the header is not in its prompt
        full = Row(row.ids, [0] * (len(row.ids) - tail) + mask[cut:], [], 0.0)
        (logprobs,) = teacher_logprobs(student, [], [full], 1.0, cpu)
        assert row.sampler_logprobs[1:] == pytest.approx(logprobs, abs=1e-5)  # the student's own
        assert row.advantage == pytest.approx(advantage)
        on_mask = torch.tensor([full.mask[1:]], dtype=torch.float32)  # (1, T-1)
        gate = surprisal_gate(torch.tensor([logprobs]), on_mask, 2.0, 8.0)  # (1, T-1)
        assert row.token_advantages is not None
        for t, (on, kept, w) in enumerate(zip(full.mask[1:], row.mask[1:], gate[0].tolist(), strict=True)):
            assert kept == (on and w > 0)  # a spike above the cap leaves the mask
            spiked += on and not kept
            if kept:
                assert row.token_advantages[t] == pytest.approx(advantage * w, rel=1e-5)
    assert spiked  # the cap was reached: some tokens left the mask


def test_a_learnability_trained_teachers_rows_reach_the_learner_with_their_own_weight(
    tiny_model_path: Path, tmp_path: Path, learner_rows: list[Row]
) -> None:
    """`credit.teacher_training: learnability`, `teacher_weight: 0.5`, the scripted run above: the task's two
    hint rollouts are the teacher's group, the gold one rewarded its learnability L (worked here from the
    student's own log-probs of its tokens, all of its segment: exp(-(mean surprisal + max(0, peak - 8))))
    and the decoy 0, so their advantages are +-L/2 (GRPO's, scale none), times 0.5 on every token of their
    segments as sampled (the header in the prompt). Every other row is the same as with the option off,
    and off adds no row and no metric."""
    trained = learner_rows
    credit = {"hint_rollouts": 2}
    off_metrics = train(scripted_config(tmp_path / "off", tiny_model_path, credit))[0]
    off, trained[:] = list(trained), []
    taught = {**credit, "teacher_training": "learnability", "teacher_weight": 0.5}
    (metrics,) = train(scripted_config(tmp_path / "on", tiny_model_path, taught))
    assert not any(key.startswith("teacher_") for key in off_metrics) and off_metrics["hint_share"] > 0
    assert all(row.source is not None for row in off)
    teacher = [row for row in trained if row.source is None]
    assert [row.source for row in trained if row.source is not None] == [row.source for row in off]
    for a, b in zip([row for row in trained if row.source is not None], off, strict=True):
        assert (a.ids, a.mask, a.advantage) == (b.ids, b.mask, b.advantage)
    runs = {t.id: t for t in RunStore(tmp_path / "on").trajectories()}
    gold, decoy = runs[f"{DEMO_TASK}.hint/0"], runs[f"{DEMO_TASK}.hint/1"]
    (imitated,) = [row for row in trained if row.source == (gold.id, 0)]
    _, full_mask, _ = gold.segments[0].ids_and_mask()
    tail = len(full_mask) - len(gold.segments[0].prompt_ids)
    surprisals = [
        -lp for lp, m in zip(imitated.sampler_logprobs[-tail:], full_mask[-tail:], strict=True) if m
    ]  # the student's own log-probs of the gold rollout's tokens, gated out or not
    expected = math.exp(-(sum(surprisals) / len(surprisals) + max(0.0, max(surprisals) - 8.0)))
    assert len(gold.segments) == 1 and metrics["teacher_learnability_mean"] == pytest.approx(
        expected, rel=1e-5
    )
    assert (
        metrics["teacher_rows"] == 2
        and metrics["hint_success_rate"] == 0.5
        and "hint_gated_fraction" in metrics
    )
    assert len(teacher) == 2
    for t, sign in ((gold, 1), (decoy, -1)):
        ids, mask, logprobs = t.segments[0].ids_and_mask()
        (row,) = [row for row in teacher if row.ids == ids]  # the teacher's context, header included
        assert (row.mask, row.sampler_logprobs) == (mask, logprobs)
        assert row.token_advantages is None and row.advantage == pytest.approx(sign * 0.5 * expected / 2)
