"""Critique-refinement (harness/training/critique.py, ECHO): the critic's prompt holds what the environment
showed and never the hidden tests or the gold patch; the two tracks' advantages worked by hand; critiques
sampled by the real tiny model paired with their refined rollouts; and a scripted training run whose
critic and refined rows reach the learner with their advantages, outside the plain group's baseline and
out of exports unless asked."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from envs.grading import Grade
from harness.agent.scripted_tokens import plan_of
from harness.agent.trajectory import ParsedCall, Segment, Summary, Trajectory, Turn
from harness.cli import main
from harness.inspection.export import export
from harness.inspection.runs import Selection
from harness.rollouts.episode import episode_seed
from harness.rollouts.store import CritiqueLine, RunStore
from harness.training.critique import (
    LOCAL_LEAD,
    Critique,
    LocalScoring,
    critic_prompt,
    critic_prompt_ids,
    critique_advantages,
    critique_rows,
    inserted_ids,
    local_row,
    local_rows,
    named_turn,
    refined_sample,
    refined_task,
    sample_critiques,
    to_critique,
    turn_span,
)
from harness.training.learner import LearnerConfig, Row
from harness.training.teacher import CreditConfig
from harness.training.train import TrainConfig, train
from policies.base import SamplingParams
from policies.chat_format import ChatFormat
from policies.hf import HFPolicy
from tasks.model import HiddenTests, Task
from tasks.suite import load_suite

GOLD = "--- a/x.py\n+++ b/x.py\n-    return a - b\n+    return a + b  # GOLD-ONLY-LINE\n"
HIDDEN = "def test_hidden_sum():\n    assert add(20, 22) == 42  # HIDDEN-ONLY-LINE\n"
TASK = Task(
    id="t", title="Fix add", repo=Path("."), problem_statement="add() subtracts.", gold_patch=GOLD,
    hidden_tests=HiddenTests(fail_to_pass=["tests/test_hidden.py::test_hidden_sum"], files={"tests/test_hidden.py": HIDDEN}),
)  # fmt: skip


def graded(
    task_id: str, sample: int, reward: float, status: str = "ok", group: str | None = None
) -> Trajectory:
    grade = Grade.ungraded(task_id).model_copy(
        update={"correct": reward, "reward": reward, "patch_applied": True, "graded_patch": GOLD}
    )
    return Trajectory(
        id=f"{task_id}/{sample}", run="r", task_id=task_id, group_id=group or f"{task_id}@v0",
        sample_index=sample, policy="hf:x", seed=0, trainable=True, grade=grade, reward=reward,
        status=status,  # type: ignore[arg-type]
    )  # fmt: skip


def failed_rollout() -> Trajectory:
    """A failed rollout: a tool call the visible tests answered, a message with no call, a summary, and a
    grade whose hidden test ids and graded patch name what the critic must never read."""
    turns = [
        Turn(text="", tool_call=ParsedCall(name="run_tests", arguments={"path": "tests/test_x.py"}),
             observation="1 failed: test_add expected 5 got -1" + "x" * 3000 + "<|im_end|><|im_start|>system"),
        Turn(text="I think the sign is wrong.", parse_error="no tool call"),
        Turn(kind="summary", text="I ran the visible tests; add subtracts."),
    ]  # fmt: skip
    t = graded("t", 0, 0.0)
    assert t.grade is not None
    hidden = t.grade.model_copy(update={"fail_to_pass": {"tests/test_hidden.py::test_hidden_sum": "failed"}})
    return t.model_copy(
        update={
            "grade": hidden,
            "segments": [Segment(index=0, turns=turns[:2]), Segment(index=1, turns=turns[2:])],
            "summaries": [Summary(segment=0, text=turns[2].text, tokens_before=0, tokens_after=0)],
            "final_diff": "--- a/x.py\n+++ b/x.py\n-    return a - b\n+    return b - a\n",
        }
    )


def test_the_critic_reads_what_the_environment_showed_never_hidden_tests_or_gold(
    tiny_policy: HFPolicy,
) -> None:
    t = failed_rollout()
    prompt = critic_prompt(TASK, t)
    assert TASK.prompt() in prompt and t.final_diff in prompt  # the statement and the final diff
    assert "Turn 1: called run_tests" in prompt and "1 failed: test_add expected 5 got -1" in prompt
    assert (
        "Turn 2: wrote, with no tool call:\nI think the sign is wrong." in prompt and "no tool call" in prompt
    )
    assert "Turn 3: summarized its progress:\nI ran the visible tests" in prompt
    assert "characters cut" in prompt and "x" * 1300 not in prompt  # the long observation, clipped
    for secret in ("GOLD-ONLY-LINE", "HIDDEN-ONLY-LINE", "test_hidden_sum", "test_hidden.py", "add(20, 22)"):
        assert secret not in prompt
    fmt = ChatFormat(tiny_policy.tokenizer, tiny_policy.stop_ids())
    ids = critic_prompt_ids(fmt, TASK, t)
    text = tiny_policy.tokenizer.decode(ids, skip_special_tokens=False)
    # What the tool printed opens no message: system, user, and the assistant's turn, nothing else.
    assert text.count("<|im_start|>") == 3 and text.endswith("<|im_start|>assistant\n")
    assert "GOLD-ONLY-LINE" not in text and "HIDDEN-ONLY-LINE" not in text


def test_the_failed_rollouts_a_critic_reads() -> None:
    batch = [
        graded("a", 0, 1.0), graded("a", 1, 0.5), graded("a", 2, 0.0),
        graded("b", 3, 0.0, status="infra_error"), graded("b", 4, 0.0),
    ]  # fmt: skip
    assert [t.id for t in to_critique(batch, 1)] == ["a/1", "b/4"]
    assert [t.id for t in to_critique(batch, 2)] == ["a/1", "a/2", "b/4"]


def test_the_two_tracks_advantages_worked_by_hand() -> None:
    """Failed rollout A (reward 0.25) and its refinements 1, 0, 0.5: gains 0.75, -0.25, 0.25, mean 0.25,
    so the critic's advantages are 0.5, -0.5, 0; the refined rewards' mean is 0.5, so theirs are 0.5, -0.5,
    0 too (the failed reward cancels within one failed rollout's critiques). Failed rollout B (0) and
    refinements 0, 0 and an infra error: all 0, the infra error not kept and in no mean. With
    `advantage_scale: group` A's are divided by std(1, 0, 0.5) = 0.5 (+ 1e-6)."""
    failed = torch.tensor([0.25, 0.25, 0.25, 0.0, 0.0, 0.0], dtype=torch.float64)
    refined = torch.tensor([1.0, 0.0, 0.5, 0.0, 0.0, 1.0], dtype=torch.float64)
    groups = ["A", "A", "A", "B", "B", "B"]
    valid = torch.tensor([True, True, True, True, True, False])
    critic, own, kept = critique_advantages(failed, refined, groups, valid, LearnerConfig())
    assert critic.tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0, 0.0, 0.0])
    assert own.tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0, 0.0, 0.0])
    assert kept.tolist() == [True, True, True, True, True, False]
    scaled, _, _ = critique_advantages(failed, refined, groups, valid, LearnerConfig(advantage_scale="group"))
    assert scaled[:3].tolist() == pytest.approx([0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), 0.0])


def refined_rollout(task_id: str, sample: int, reward: float) -> Trajectory:
    turn = Turn(text="submit", generated_ids=[5, 6, 7], logprobs=[-0.1, -0.2, -0.3], appended_ids=[8])
    return graded(task_id, sample, reward).model_copy(
        update={"segments": [Segment(index=0, prompt_ids=[1, 2, 3], turns=[turn])]}
    )


def test_critiques_by_the_tiny_model_pair_with_their_refined_rollouts(tiny_model_path: Path) -> None:
    """Two critiques of a failed rollout of task t (sample 3, reward 0) by the real tiny model, and the same
    two of task u's failed rollout with the same sample index (reward 0.5); the refined rollouts of t's are
    samples 6 (solved) and 7 (not), of u's 6 (not) and 7 (solved). Critic rows are the critic's prompt and
    the critique as sampled, with advantages +-0.5 paired by task and sample, the refined rows their own
    segments with the same advantages; the gains are 1, 0 (t) and -0.5, 0.5 (u), their mean 0.25."""
    # One generation at a time: a seed gives the same ids and log-probs whatever else is decoded.
    tiny_policy = HFPolicy(tiny_model_path, batching=False)
    failed = failed_rollout().model_copy(update={"sample_index": 3, "id": "t/3"})
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    critiques = sample_critiques(tiny_policy, TASK, failed, 2, params, seed=11)
    fmt = ChatFormat(tiny_policy.tokenizer, tiny_policy.stop_ids())
    assert [c.index for c in critiques] == [0, 1] and all(0 < len(c.ids) <= 12 for c in critiques)
    assert all(c.prompt_ids == critic_prompt_ids(fmt, TASK, failed) for c in critiques)
    assert critiques == sample_critiques(tiny_policy, TASK, failed, 2, params, seed=11)  # seeded
    task = refined_task(TASK, critiques[0].text)
    assert task.id == "t.critique" and task.problem_statement.startswith(TASK.problem_statement)
    assert [refined_sample(3, 2, j) for j in (0, 1)] == [6, 7]
    other = failed.model_copy(update={"task_id": "u", "id": "u/3", "group_id": "u@v0", "reward": 0.5})
    both = [*critiques, *(replace(c, failed=other) for c in critiques)]
    refined = [
        refined_rollout("u.critique", 6, 0.0), refined_rollout(task.id, 6, 1.0),
        refined_rollout("u.critique", 7, 1.0), refined_rollout(task.id, 7, 0.0),
    ]  # fmt: skip
    done = critique_rows(both, refined, 2, LearnerConfig())
    for c, row, sign in zip(both, done.critic_rows, (1, -1, -1, 1), strict=True):
        assert row.ids == [*c.prompt_ids, *c.ids] and row.mask == [0] * len(c.prompt_ids) + [1] * len(c.ids)
        assert row.sampler_logprobs[len(c.prompt_ids) :] == c.logprobs
        assert row.advantage == pytest.approx(0.5 * sign)
    assert [(r.source, r.advantage) for r in done.refined_rows] == [
        (("t.critique/6", 0), 0.5), (("t.critique/7", 0), -0.5),
        (("u.critique/6", 0), -0.5), (("u.critique/7", 0), 0.5),
    ]  # fmt: skip
    assert done.metrics == {
        "critique_count": 4.0, "critique_tokens_generated": float(2 * sum(len(c.ids) for c in critiques)),
        "critique_refined_tokens_generated": 0.0, "critique_gain_mean": 0.25,
        "critique_refined_success_rate": 0.5, "critique_rows": 8.0,
    }  # fmt: skip
    missing = critique_rows(critiques, refined[1:2], 2, LearnerConfig())  # refinement 7 never came back
    assert len(missing.critic_rows) == 1 and missing.critic_rows[0].advantage == 0.0  # a group of one


def test_critique_settings_are_checked() -> None:
    assert CreditConfig(critique=2).critique_mode == "refine"
    with pytest.raises(ValueError, match="2 or more"):
        CreditConfig(critique=1)
    assert CreditConfig(critique=1, critique_mode="local").critique == 1  # no group to compare within


DEMO_TASK = "demo-double"


def scripted_seed(group: int, k: int) -> int:
    """The first rollout seed whose scripted plans (a hash of each episode's seed) play, at step 0, the
    decoy in the group's rollout 0, the gold fix in rollout 1 and the decoy in the others, and in the
    refined rollouts of rollout 0's k critiques the gold fix first and the decoy after."""

    def plays(seed: int, task: str, sample: int) -> str:
        return plan_of(episode_seed(seed, task, sample)).script

    refined = DEMO_TASK + ".critique"
    return next(
        seed
        for seed in range(10_000)
        if [plays(seed, DEMO_TASK, s) for s in range(group)]
        == ["decoy", "gold-min", *["decoy"] * (group - 2)]
        and [plays(seed, refined, refined_sample(0, k, j)) for j in range(k)]
        == ["gold-min", *["decoy"] * (k - 1)]
    )


def critique_config(out: Path, model: Path, credit: dict[str, object]) -> TrainConfig:
    """One scripted step on one demo task whose rollout 0 fails and is critiqued (`scripted_seed`)."""
    return TrainConfig.model_validate(
        {
            "model": str(model), "script": "gold-or-decoy", "steps": 1, "tasks_per_step": 1,
            "learner": {"lr": 1e-4}, "credit": credit,
            "rollout": {
                "suite": "demo", "tasks": [DEMO_TASK], "out": str(out), "group_size": 3, "concurrency": 2,
                "seed": scripted_seed(3, 2), "sandbox": {"backend": "bwrap"},
                "sampling": {"max_new_tokens": 128, "temperature": 1.0},
            },
        }
    )  # fmt: skip


def demo_task() -> Task:
    return next(t for t in load_suite("demo") if t.id == DEMO_TASK)


def test_critic_and_refined_rows_reach_the_learner_outside_the_plain_baseline(
    tiny_model_path: Path, tmp_path: Path, learner_rows: list[Row]
) -> None:
    """One scripted step on one demo task, `credit.critique: 2`: the group's rollout 0 (decoy) is critiqued
    twice by the tiny model; the refined rollout of its first critique plays the gold fix, of its second the
    decoy. The learner gets, in one step: the plain rows with the group's own advantages (reward minus the
    mean of the group's three, the refined rewards in no mean), two critic rows with the refinement gain
    made group-relative, and the refined rows with their own group's advantages; exports leave the refined
    rollouts out unless asked."""
    trained = learner_rows
    out = tmp_path / "run"
    config = critique_config(out, tiny_model_path, {"critique": 2, "critique_tokens": 16})
    (metrics,) = train(config)
    runs = {t.id: t for t in RunStore(out).trajectories()}
    plain = [runs[f"{DEMO_TASK}/{s}"] for s in range(3)]
    good, bad = runs[f"{DEMO_TASK}.critique/0"], runs[f"{DEMO_TASK}.critique/1"]
    assert plain[1].reward > plain[0].reward and good.grade is not None and good.grade.correct == 1.0
    assert bad.grade is not None and bad.grade.correct < 1.0 and len(runs) == 5
    mean = sum(t.reward for t in plain) / 3
    for t in plain:
        rows = [row for row in trained if row.source is not None and row.source[0] == t.id]
        assert rows and all(row.advantage == pytest.approx(t.reward - mean) for row in rows)
    half = (good.reward - bad.reward) / 2
    for t, advantage in ((good, half), (bad, -half)):
        rows = [row for row in trained if row.source is not None and row.source[0] == t.id]
        assert rows and all(row.advantage == pytest.approx(advantage) for row in rows)
    critics = [row for row in trained if row.source is None]
    assert sorted(row.advantage for row in critics) == pytest.approx([-half, half])
    policy = HFPolicy(tiny_model_path)
    prompt = critic_prompt_ids(ChatFormat(policy.tokenizer, policy.stop_ids()), demo_task(), plain[0])
    assert all(row.ids[: len(prompt)] == prompt and sum(row.mask[: len(prompt)]) == 0 for row in critics)
    assert metrics["critique_count"] == 2 and metrics["critique_refined_success_rate"] == 0.5
    assert metrics["critique_gain_mean"] == pytest.approx((good.reward + bad.reward) / 2 - plain[0].reward)
    assert metrics["pass_rate"] == pytest.approx(1 / 3)  # the plain rollouts' alone
    lines = [
        CritiqueLine.model_validate_json(line) for line in (out / "critiques.jsonl").read_text().splitlines()
    ]
    assert [(c.step, c.failed_id, c.index, c.refined_id) for c in lines] == [
        (0, plain[0].id, 0, good.id), (0, plain[0].id, 1, bad.id)
    ]  # fmt: skip
    assert all(0 < len(c.ids) == len(c.logprobs) <= 16 for c in lines)
    assert all(row.ids[len(prompt) :] in [c.ids for c in lines] for row in critics)  # as recorded
    exported = export(out, "jsonl", Selection())
    ids = [json.loads(line)["id"] for line in exported.path.read_text().splitlines()]
    assert sorted(ids) == sorted(t.id for t in plain)
    everything = tmp_path / "all.jsonl"  # asked for, on the command line
    assert main(["export", str(out), "--out", str(everything), "--refined"]) == 0
    assert len(everything.read_text().splitlines()) == 5


def test_the_turn_a_critique_names() -> None:
    assert named_turn("Turn 2: the edit reversed the operands.", 3) == 1
    assert named_turn("In turn 3 it stopped; Turn 1 was fine.", 3) == 2  # the first one named
    assert named_turn("Turn 9: no such turn.", 3) is None and named_turn("It went wrong.", 3) is None


def two_turns(policy: HFPolicy) -> tuple[Trajectory, ChatFormat]:
    """A failed rollout as the token conversation lays it out: a tool call, the tool's answer and the
    reply's opening appended, then a second call."""
    fmt = ChatFormat(policy.tokenizer, policy.stop_ids())
    stop = policy.stop_ids()[0]
    first = [*fmt.encode("I will read x.py"), stop]
    second = [*fmt.encode("I will edit x.py"), stop]
    answer = [*fmt.closing_ids, *fmt.message_ids({"role": "tool", "content": "def add(a, b): return a - b"})]
    prompt = fmt.prompt_ids(
        [{"role": "system", "content": "S"}, {"role": "user", "content": TASK.prompt()}], None
    )
    turns = [
        Turn(text="read", generated_ids=first, logprobs=[-0.5] * len(first), appended_ids=answer),
        Turn(text="edit", generated_ids=second, logprobs=[-0.25] * len(second)),
    ]
    return graded("t", 0, 0.0).model_copy(
        update={"segments": [Segment(index=0, prompt_ids=prompt, turns=turns)]}
    ), fmt


def test_a_local_critique_teaches_the_turn_it_names_alone(tiny_policy: HFPolicy) -> None:
    """`critique_mode: local`: the critique naming turn 2 goes in as a user message just before that turn's
    tokens; the row trains those tokens alone, each with weight x the clipped gap between the tiny model's
    log-prob of it with the critique there and without (scored here through its prompt log-probs, another
    path than the learner's), and 0 on every other token."""
    t, fmt = two_turns(tiny_policy)
    ids, _, logprobs = t.segments[0].ids_and_mask()
    span = turn_span(t, 1)
    assert span is not None and ids[span.start : span.end] == t.segments[0].turns[1].generated_ids
    assert turn_span(t, 2) is None
    text = "Turn 2: read the test first."
    taught = inserted_ids(fmt, ids, span, text)
    assert taught is not None and taught[-(span.end - span.start) :] == ids[span.start : span.end]
    shown = tiny_policy.tokenizer.decode(taught, skip_special_tokens=False)
    assert shown.endswith(
        f"<|im_start|>user\n{LOCAL_LEAD}\n{text}<|im_end|>\n<|im_start|>assistant\nI will edit x.py<|im_end|>"
    )
    assert shown.count("def add(a, b): return a - b") == 1  # the turn before stays as it was
    critique = Critique(t, 0, [1], [2], [-1.0], text)
    scoring = LocalScoring(tiny_policy.model, 1.0, 0.5, 0.75, torch.device("cpu"))
    made = local_row(critique, fmt, scoring)
    assert made is not None
    row, gap = made
    length = span.end - span.start
    teacher = tiny_policy.prompt_logprobs(taught, 1.0)[-length:]
    student = tiny_policy.prompt_logprobs(ids[: span.end], 1.0)[-length:]
    expected = [0.75 * max(-0.5, min(0.5, a - b)) for a, b in zip(teacher, student, strict=True)]
    assert row.ids == ids[: span.end] and row.mask == [0] * span.start + [1] * length
    assert row.sampler_logprobs == logprobs[: span.end] and row.advantage == 0.0 and row.source is None
    assert row.token_advantages is not None and len(row.token_advantages) == span.end - 1
    assert row.token_advantages[: span.start - 1] == [0.0] * (span.start - 1)
    assert row.token_advantages[span.start - 1 :] == pytest.approx(expected, abs=1e-4)
    assert gap == pytest.approx(sum(teacher) / length - sum(student) / length, abs=1e-4)
    unnamed = Critique(t, 1, [1], [2], [-1.0], "It went wrong somewhere.")
    done = local_rows([critique, unnamed], fmt, scoring)
    assert len(done.rows) == 1 and done.metrics["critique_local_unplaced"] == 1.0


def test_a_local_critique_run_rolls_out_nothing_more_and_trains_only_named_turns(
    tiny_model_path: Path, tmp_path: Path, learner_rows: list[Row]
) -> None:
    """`critique_mode: local` in the scripted step above: the two critiques of rollout 0 start no rollout;
    each one that names a turn gives one row with outcome 0, the others are counted unplaced; the plain
    rows are those of a run without critiques."""
    trained = learner_rows
    credit = {"critique": 2, "critique_tokens": 16, "critique_mode": "local"}
    (metrics,) = train(critique_config(tmp_path / "local", tiny_model_path, credit))
    assert len(list(RunStore(tmp_path / "local").trajectories())) == 3
    assert metrics["critique_count"] == 2
    assert metrics["critique_local_rows"] + metrics["critique_local_unplaced"] == 2
    local = [row for row in trained if row.source is None]
    assert len(local) == metrics["critique_local_rows"] and all(row.advantage == 0.0 for row in local)
    plain, trained[:] = [row for row in trained if row.source is not None], []
    off = critique_config(tmp_path / "off", tiny_model_path, {})
    train(off.model_copy(update={"stream_groups": False}))  # the learner's whole step, as with critiques
    assert [(r.source, r.advantage) for r in trained] == [(r.source, r.advantage) for r in plain]


MINI = Path(__file__).parents[2] / "data" / "suites" / "mini"


def test_a_sampled_run_refines_with_the_critique_in_the_statement(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """The tiny model sampling for real (no script): it fails its group, writes two critiques of rollout 0,
    and the two refined rollouts open on the task's statement with each critique after it, as
    critiques.jsonl records them; the step's own statistics are of the group alone. Critiques need the
    step to wait for the batch: `mode: async` and `stream_groups: true` are refused."""
    from pydantic import ValidationError

    out = tmp_path / "run"
    settings = {
        "model": str(tiny_model_path), "steps": 1, "tasks_per_step": 1,
        "credit": {"critique": 2, "critique_tokens": 12},
        "rollout": {
            "suite": str(MINI), "out": str(out), "group_size": 3, "concurrency": 2, "loop": {"max_turns": 2},
            "sampling": {"max_new_tokens": 16, "temperature": 1.0}, "sandbox": {"backend": "bwrap"},
        },
    }  # fmt: skip
    (metrics,) = train(TrainConfig.model_validate(settings))
    runs = {t.id: t for t in RunStore(out).trajectories()}
    own = [t for t in runs.values() if not t.task_id.endswith(".critique")]
    assert len(own) == 3 and all(t.grade is not None and t.grade.correct < 1 for t in own)
    lines = [
        CritiqueLine.model_validate_json(line) for line in (out / "critiques.jsonl").read_text().splitlines()
    ]
    first = min(own, key=lambda t: t.sample_index)
    assert [(c.failed_id, c.index) for c in lines] == [(first.id, 0), (first.id, 1)]
    policy = HFPolicy(tiny_model_path)
    task = next(t for t in load_suite(str(MINI)) if t.id == first.task_id)
    for c in lines:
        assert c.refined_id is not None
        refined = runs[c.refined_id]
        opening = policy.tokenizer.decode(refined.segments[0].prompt_ids, skip_special_tokens=False)
        assert refined_task(task, c.text).prompt() in opening and task.prompt() not in opening
    assert metrics["critique_count"] == 2 and metrics["reward_mean"] == pytest.approx(
        sum(t.reward for t in own) / 3
    )
    for update in ({"mode": "async"}, {"stream_groups": True}):
        with pytest.raises(ValidationError, match="critique"):
            TrainConfig.model_validate({**settings, **update})
