"""Learnable successes (issue 19, item 4): when every rollout of a group failed, the group gives GRPO no
gradient. `credit.hint_rollouts: k` samples k more rollouts of that task with the privileged header in its
statement (a "hint" task, id `TASK.hint`); the successful ones are trained on as if the student had
written them: each segment's prompt is rebuilt without the header (the student's own context), the
tokens after it are kept as they were sampled, the student's log-probs of them are taken in that context,
and each token's advantage is the success's advantage times the surprisal gate (`credit.surprisal_gate`).
That advantage is the one the learner's own estimator gives it as one more rollout of its failed group
(`hint_advantage`): the same baseline and the same group or batch scaling as every other row. A token the
gate sets to 0 leaves the row's mask, so it weighs in no token-mean denominator. Hint rollouts never
enter a group's baseline: their rows are added after the group advantages are taken.

`credit.teacher_training: learnability` trains the teacher too (Pedagogical RL's self-teacher, issue 39):
each failed task's hint rollouts are also a GRPO group of the teacher's own, rewarded success x
learnability (the student's surprisal of the teacher's tokens, in the student's context), and their
segments are trained as the teacher sampled them, header included (`teacher_rows`), with the same
weights; its successes still feed the imitation above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from harness.agent.conversation import prompt_ids
from harness.agent.trajectory import Trajectory
from harness.rollouts.config import RolloutConfig
from harness.training.credit import learnability, surprisal_gate, teacher_rewards
from harness.training.learner import LearnerConfig, Row, segment_rows, trajectory_advantages
from harness.training.teacher import CreditConfig, teacher_logprobs
from policies.chat_format import ChatFormat
from tasks.model import HINT_SUFFIX, Task
from tools import Toolbox


def hint_task(task: Task, header: str) -> Task:
    """The task with the privileged header after its statement, under its own id (its rollouts form
    groups of their own, and the viewer shows them apart)."""
    statement = f"{task.problem_statement.rstrip()}\n\n{header}"
    return task.model_copy(update={"id": task.id + HINT_SUFFIX, "problem_statement": statement})


def failed_groups(trajectories: Sequence[Trajectory]) -> list[str]:
    """The tasks whose every graded rollout failed (none correct), sorted. Infra errors count neither way."""
    graded: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        if t.status != "infra_error" and t.grade is not None:
            graded.setdefault(t.task_id, []).append(t)
    return sorted(
        task_id
        for task_id, group in graded.items()
        if all(t.grade is not None and t.grade.correct < 1.0 for t in group)
    )


def student_prompts(
    trajectory: Trajectory, fmt: ChatFormat, task: Task, rollout: RolloutConfig
) -> list[list[int]]:
    """The prompt ids each segment of a hint rollout would have had without the header: the task's own
    statement, and after a summary the same resume message with the summary the rollout wrote; built as
    the rollout built its own (`prompt_ids`), with the rollout's system prompt and tools."""
    tools = Toolbox.for_task(task, rollout.tools).schemas()  # as `run_one` makes the episode's toolbox
    system = rollout.loop.system_prompt
    summaries = [None, *(summary.text for summary in trajectory.summaries)]
    prompts = [prompt_ids(fmt, system, task.prompt(), tools, summary) for summary in summaries]
    return prompts[: len(trajectory.segments)]


def student_rows(trajectory: Trajectory, prompts: Sequence[list[int]]) -> list[Row]:
    """Each segment with its prompt swapped for the student's: the ids after the prompt (generations, tool
    results) unchanged, their mask unchanged; the sampler's log-probs, taken with the header, are dropped
    (0) until the student's are put in. Advantage 0 until weighted."""
    rows = []
    for segment, prompt in zip(trajectory.segments, prompts, strict=False):
        ids, mask, _ = segment.ids_and_mask()
        cut = len(segment.prompt_ids)
        row_ids, row_mask = [*prompt, *ids[cut:]], [0] * len(prompt) + mask[cut:]
        if sum(row_mask):
            rows.append(
                Row(row_ids, row_mask, [0.0] * len(row_ids), 0.0, source=(trajectory.id, segment.index))
            )
    return rows


@dataclass
class Hinted:
    rows: list[Row]
    """The imitation rows: hint successes in the student's context, gated."""
    metrics: dict[str, float]
    learnable: dict[str, float] = field(default_factory=dict)
    """Each scored hint success's learnability (`credit.learnability`), by trajectory id, when the
    teacher is trained (`credit.teacher_training: learnability`)."""
    teacher_rows: list[Row] = field(default_factory=list)
    """The teacher's own GRPO rows (`teacher_rows`), in its context."""


def hint_advantage(success: Trajectory, batch: Sequence[Trajectory], learner: LearnerConfig) -> float:
    """A hint success's advantage as one more rollout of its task's group in `batch`: the learner's own
    estimator (`trajectory_advantages`: its baseline, its group or batch scaling) over the batch's rollouts
    with the success added to that group; only the success's own advantage is taken."""
    task_id = success.task_id.removesuffix(HINT_SUFFIX)
    group = next(t.group_id for t in batch if t.task_id == task_id)
    rewards = torch.tensor([*(t.reward for t in batch), success.reward], dtype=torch.float64)  # (N + 1,)
    valid = torch.tensor(
        [*(t.status != "infra_error" and t.trainable and t.ids_verified for t in batch), True]
    )
    advantages, _ = trajectory_advantages(rewards, [*(t.group_id for t in batch), group], valid, learner)
    return float(advantages[-1])


def hint_rows(
    hints: Sequence[Trajectory],
    batch: Sequence[Trajectory],
    learner: LearnerConfig,
    tasks: dict[str, Task],
    fmt: ChatFormat,
    rollout: RolloutConfig,
    student: Any,
    config: CreditConfig,
    device: torch.device,
) -> Hinted:
    """Rows of the successful hint rollouts in the student's context, each token's advantage
    (`hint_advantage` over the step's `batch`) x the surprisal gate of the student's own log-prob
    (`student`, the model being trained, scores them at the rollout's temperature), gated-out tokens off
    the mask; the student's log-probs stand as the sampler's, so no importance weight corrects them away.
    With `teacher_training: learnability`, every segment of a success is scored, and its learnability
    taken from all of them."""
    rows, learnable, gated, tokens, dropped = [], {}, 0, 0, 0
    teaching = config.teacher_training == "learnability"
    solved = [
        t for t in hints if t.grade is not None and t.grade.correct >= 1.0 and t.trainable and t.ids_verified
    ]
    for t in solved:
        task_id = t.task_id.removesuffix(HINT_SUFFIX)
        advantage = hint_advantage(t, batch, learner)
        segments = student_rows(t, student_prompts(t, fmt, tasks[task_id], rollout))
        kept = segments
        if config.hint_summaries == "drop":  # later segments open on a summary written under the header
            kept = [row for row in segments if row.source is None or row.source[1] == 0]
        dropped += len(segments) - len(kept)
        # The student's own log-probs, in its own context (the row's prompt has no header).
        own = [
            teacher_logprobs(student, [], [row], rollout.sampling.temperature, device)[0]
            for row in (segments if teaching else kept)
        ]
        if teaching:
            learnable[t.id] = rollout_learnability(segments, own, config)
        for row, logprobs in zip(kept, own, strict=False):  # `kept` is a prefix of `segments`
            gated_row, row_gated, row_tokens = imitation_row(row, logprobs, advantage, config)
            gated, tokens = gated + row_gated, tokens + row_tokens
            if gated_row is not None:
                rows.append(gated_row)
    metrics = {
        "hint_rollouts": float(len(hints)),
        "hint_tokens_generated": float(sum(t.metrics.generated_tokens for t in hints)),
        "hint_success_rate": len(solved) / len(hints) if hints else 0.0,
        "hint_gated_fraction": gated / tokens if tokens else 0.0,
        "hint_segments_dropped": float(dropped),
    }
    return Hinted(rows, metrics, learnable)


def imitation_row(
    row: Row, own: list[float], advantage: float, config: CreditConfig
) -> tuple[Row | None, int, int]:
    """`row` (in the student's context) with each token's advantage `advantage` x the surprisal gate of
    the student's log-prob `own` (aligned to ids[1:]), the tokens gated to 0 off its mask, and `own` as
    its sampler log-probs; None if no token is left. Also how many of its tokens the gate weighed below 1,
    and how many it weighed."""
    mask = torch.tensor([row.mask[1:]], dtype=torch.float32)  # (1, T-1)
    weight = surprisal_gate(torch.tensor([own]), mask, config.gate_tau, config.spike_cap)  # (1, T-1)
    counts = int(((weight < 1) & mask.bool()).sum()), int(mask.sum())
    dense = [advantage * float(w) for w in weight[0]]
    kept = [row.mask[0], *(m if float(w) > 0 else 0 for m, w in zip(row.mask[1:], weight[0], strict=True))]
    if not sum(kept):
        return None, *counts
    return Row(row.ids, kept, [0.0, *own], advantage, row.source, token_advantages=dense), *counts


def rollout_learnability(segments: Sequence[Row], own: Sequence[list[float]], config: CreditConfig) -> float:
    """One rollout's learnability (`credit.learnability`) over the model tokens of all its `segments`, the
    student's log-probs `own` of each (aligned to its ids[1:]) laid end to end."""
    logprobs = [
        v for row, lp in zip(segments, own, strict=True) for v, m in zip(lp, row.mask[1:], strict=True) if m
    ]
    student = torch.tensor([logprobs], dtype=torch.float32)  # (1, N)
    return float(learnability(student, torch.ones_like(student), config.spike_cap, config.spike_penalty)[0])


def teacher_rows(
    hints: Sequence[Trajectory], learnable: dict[str, float], learner: LearnerConfig, config: CreditConfig
) -> tuple[list[Row], dict[str, float]]:
    """The learnability-trained teacher's own GRPO track (`credit.teacher_training: learnability`): each
    failed task's hint rollouts are one group of the teacher's, rewarded success x learnability
    (`credit.teacher_rewards`; `learnable` from `hint_rows`), advantages by the learner's own estimator
    within those groups alone; each rollout's segments are trained as sampled, in the teacher's context
    (the header in the prompt, the sampler's log-probs), its advantage x `teacher_weight`. The rows carry
    no source: the imitation row of the same segment holds its place in learner.jsonl."""
    if not hints:
        return [], {}
    valid = torch.tensor(
        [t.status != "infra_error" and t.trainable and t.ids_verified for t in hints]
    )  # (N,)
    success = torch.tensor(
        [float(t.grade is not None and t.grade.correct >= 1.0) for t in hints], dtype=torch.float64
    )  # (N,)
    scores = torch.tensor([learnable.get(t.id, 0.0) for t in hints], dtype=torch.float64)  # (N,)
    rewards = teacher_rewards(success, scores)  # (N,)
    advantages, kept = trajectory_advantages(rewards, [t.group_id for t in hints], valid, learner)  # (N,)
    rows = [
        replace(row, source=None)
        for t, advantage, keep in zip(hints, advantages.tolist(), kept.tolist(), strict=True)
        if keep
        for row in segment_rows(t, config.teacher_weight * advantage, learner.mask_truncated)
    ]
    metrics = {
        "teacher_learnability_mean": sum(learnable.values()) / len(learnable) if learnable else 0.0,
        "teacher_reward_mean": float(rewards[valid].mean()) if bool(valid.any()) else 0.0,
        "teacher_advantage_abs_mean": float(advantages[kept].abs().mean()) if bool(kept.any()) else 0.0,
        "teacher_rows": float(len(rows)),
    }
    return rows, metrics
