"""Critique-refinement (issue 39, item 2): ECHO's cascaded rollout (Li et al. 2026, "No More Stale
Feedback: Co-Evolving Critics for Open-World Agent Learning", arXiv 2601.06794, §3).

For a failed rollout, the same model in a critic role reads what the environment showed the agent (each
turn's tool call and its observation, clipped, and the final diff; never the grade, the hidden tests or
the gold patch: `critic_prompt`) and writes `credit.critique` = k critiques. Each critique starts a
refined rollout of the task with the critique in its statement (a "refined" task, id `TASK.critique`).
Both tracks enter the same learner step (ECHO's dual-track GRPO): the critic's tokens with the
group-relative refinement gain over the k critiques of one failed rollout as their advantage, the refined
rollouts with their own group advantage over the k refined (`critique_advantages`). Neither enters a
plain group's baseline (their rows are added after the group advantages are taken), and exports leave
refined rollouts out unless asked.

Within one failed rollout's k critiques, the failed reward is the same for all, so the group-relative gain
equals the refined rewards' own group advantage under every estimator here (GRPO's, RLOO's and GPG's are
unchanged by a shift): each critique is credited with its own refinement's advantage. ECHO's
saturation-aware gain shaping, which makes the two differ, is not done here.

`credit.critique_mode: local` is the targeted variant (Composer 2.5's textual feedback): no refined
rollout; each critique goes in as a user message just before the turn it names, and the same model with it
there is the teacher of that turn's tokens alone (`local_row`: OPSD's clipped gap as their advantage).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from harness.agent.trajectory import Trajectory
from harness.training.credit import opsd_signal
from harness.training.learner import LearnerConfig, Row, segment_rows, trajectory_advantages
from harness.training.teacher import teacher_logprobs
from policies.base import SamplingParams, TokenPolicy
from policies.chat_format import ChatFormat
from tasks.model import CRITIQUE_SUFFIX, Task

OBSERVATION_CHARS = 1_200
"""Each observation (and each message without a tool call) the critic reads is clipped to this many
characters, its head and tail kept."""
DIFF_CHARS = 4_000
"""The final diff the critic reads is clipped to this many characters."""
TRANSCRIPT_CHARS = 24_000
"""The whole transcript of turns the critic reads is clipped to this many characters."""
CRITIC_SYSTEM = (
    "You review a coding agent's attempt at a task. You see what it did and what the environment showed"
    " it; you do not see the tests that grade it."
)
CRITIC_ASK = (
    "The attempt did not solve the task. In a few sentences, say what went wrong and what to do instead."
    " Begin with the turn your critique concerns, as `Turn N:`."
)


def clip(text: str, limit: int) -> str:
    """`text` within `limit` characters: its head and tail, and how much was cut between them."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[len(text) - half :]}"


def turn_lines(trajectory: Trajectory) -> list[str]:
    """One entry per turn, numbered from 1 over the whole trajectory: the tool call (or the message, when
    it made none, or the summary it wrote), then what the environment answered, clipped."""
    lines = []
    turns = [turn for segment in trajectory.segments for turn in segment.turns]
    for n, turn in enumerate(turns, start=1):
        if turn.kind == "summary":
            lines.append(f"Turn {n}: summarized its progress:\n{clip(turn.text, OBSERVATION_CHARS)}")
            continue
        if turn.tool_call is not None:
            arguments = turn.tool_call.arguments
            shown = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
            said = f"called {turn.tool_call.name} {clip(shown, OBSERVATION_CHARS)}"
        else:
            said = f"wrote, with no tool call:\n{clip(turn.text, OBSERVATION_CHARS)}"
        answer = turn.parse_error if turn.observation is None else turn.observation
        lines.append(f"Turn {n}: {said}\nThe environment answered:\n{clip(answer or '', OBSERVATION_CHARS)}")
    return lines


def critic_prompt(task: Task, trajectory: Trajectory) -> str:
    """What the critic reads of a failed rollout: the task as the agent saw it (`Task.prompt`), each turn
    (`turn_lines`), the final diff, and what it is asked. Built only from the statement and from what the
    environment showed the agent: no grade, no hidden test, no gold patch."""
    transcript = clip("\n\n".join(turn_lines(trajectory)), TRANSCRIPT_CHARS)
    diff = clip(trajectory.final_diff, DIFF_CHARS) or "(no change)"
    return (
        f"# The task\n\n{task.prompt()}\n\n# The attempt\n\n{transcript or '(no turn)'}\n\n"
        f"# Its final diff\n\n```diff\n{diff}\n```\n\n{CRITIC_ASK}"
    )


def plain(text: str, specials: Sequence[str]) -> str:
    """`text` without the chat template's special tokens' texts: what a tool printed or a critique wrote
    must not open or close a message in the context it is put in."""
    for special in specials:
        text = text.replace(special, "")
    return text


def critic_prompt_ids(fmt: ChatFormat, task: Task, trajectory: Trajectory) -> list[int]:
    """The critic's prompt ids: its system message and `critic_prompt`, the assistant's turn opened."""
    user = plain(critic_prompt(task, trajectory), fmt.special_texts)
    return fmt.prompt_ids(
        [{"role": "system", "content": CRITIC_SYSTEM}, {"role": "user", "content": user}], None
    )


def refined_task(task: Task, critique: str) -> Task:
    """The task with `critique` after its statement, under the refined id (its rollouts are grouped apart,
    the viewer and exports tell them apart)."""
    statement = (
        f"{task.problem_statement.rstrip()}\n\nA review of an earlier attempt at this task:\n{critique}"
    )
    return task.model_copy(update={"id": task.id + CRITIQUE_SUFFIX, "problem_statement": statement})


def refined_sample(failed_sample: int, k: int, j: int) -> int:
    """The sample index of the refined rollout started by critique j of k of the failed rollout with
    sample index `failed_sample`: distinct over the run, as sample indices are."""
    return failed_sample * k + j


def refined_job(critique: Critique, k: int) -> tuple[str, int]:
    """The refined rollout `critique` starts: its task id and sample index."""
    failed = critique.failed
    return failed.task_id + CRITIQUE_SUFFIX, refined_sample(failed.sample_index, k, critique.index)


def to_critique(trajectories: Sequence[Trajectory], per_group: int) -> list[Trajectory]:
    """The failed rollouts a critic reads: graded, trainable and verified, not solved; at most `per_group`
    of each group, lowest sample index first; sorted by task and sample index."""
    failed = sorted(
        (
            t
            for t in trajectories
            if t.status != "infra_error" and t.trainable and t.ids_verified
            and t.grade is not None and t.grade.correct < 1.0
        ),
        key=lambda t: (t.task_id, t.sample_index),
    )  # fmt: skip
    taken: dict[str, int] = {}
    out = []
    for t in failed:
        if taken.get(t.group_id, 0) < per_group:
            taken[t.group_id] = taken.get(t.group_id, 0) + 1
            out.append(t)
    return out


@dataclass(frozen=True)
class Critique:
    """One critique the critic wrote of a failed rollout, as sampled."""

    failed: Trajectory
    """The failed rollout it read."""
    index: int
    """j of the failed rollout's k critiques."""
    prompt_ids: list[int]
    ids: list[int]
    """The critique's sampled ids."""
    logprobs: list[float]
    """The sampler's log-prob of each of `ids`."""
    text: str
    """Its text, as the refined task's statement holds it."""

    def row(self, advantage: float) -> Row:
        """The critic's row: its prompt (mask 0) and its critique (mask 1), `advantage` on every token."""
        ids = [*self.prompt_ids, *self.ids]
        mask = [0] * len(self.prompt_ids) + [1] * len(self.ids)
        return Row(ids, mask, [0.0] * len(self.prompt_ids) + list(self.logprobs), advantage)


def sample_critiques(
    policy: TokenPolicy,
    task: Task,
    failed: Trajectory,
    k: int,
    params: SamplingParams,
    seed: int,
) -> list[Critique]:
    """k critiques of `failed` by `policy` in the critic's role (`critic_prompt_ids`), critique j sampled
    with seed `seed + j`, all k at once (a batching sampler decodes them together); each one's text
    without special tokens (it goes into a statement)."""
    fmt = ChatFormat(policy.tokenizer, policy.stop_ids())
    prompt = critic_prompt_ids(fmt, task, failed)

    def one(j: int) -> Critique:
        made = policy.generate(prompt, params.model_copy(update={"seed": seed + j}))
        text = plain(policy.tokenizer.decode(made.ids, skip_special_tokens=True), fmt.special_texts)
        return Critique(failed, j, prompt, list(made.ids), list(made.logprobs), text.strip())

    with ThreadPoolExecutor(max_workers=k) as pool:
        return list(pool.map(one, range(k)))


def critique_advantages(
    failed_reward: Tensor,
    refined_reward: Tensor,
    groups: Sequence[str],
    valid: Tensor,
    learner: LearnerConfig,
) -> tuple[Tensor, Tensor, Tensor]:
    """ECHO's dual-track advantages (arXiv 2601.06794, §3): each critique's refinement gain
    g_j = r(refined_j) - r(failed) made group-relative over the k critiques of one failed rollout, and
    each refined rollout's reward made group-relative over the same k, both by the learner's own
    estimator (`trajectory_advantages`: GRPO's baseline r - mean, its scaling, or RLOO / GPG).

    Args:
        failed_reward: (N,) the reward of the failed rollout each refined rollout started from.
        refined_reward: (N,) each refined rollout's reward.
        groups: N keys, one per failed rollout (its k critiques share one).
        valid: (N,) bool, False where the refined rollout cannot be trained on (an infra error).

    Returns:
        critic (N,), refined (N,) advantages, and kept (N,) bool.
    """
    gains = refined_reward - failed_reward  # (N,)
    critic, kept = trajectory_advantages(gains, groups, valid, learner)  # (N,), (N,)
    refined, _ = trajectory_advantages(refined_reward, groups, valid, learner)  # (N,)
    return critic, refined, kept


@dataclass
class Critiqued:
    """The critique track's rows for a step: the critic's and the refined rollouts'."""

    critic_rows: list[Row]
    refined_rows: list[Row]
    metrics: dict[str, float]
    local: list[Row] = field(default_factory=list)
    """`critique_mode: local`: each named turn's row (`local_row`)."""

    @property
    def rows(self) -> list[Row]:
        return [*self.critic_rows, *self.refined_rows, *self.local]


def critique_rows(
    critiques: Sequence[Critique], refined: Sequence[Trajectory], k: int, learner: LearnerConfig
) -> Critiqued:
    """Rows of both tracks: critique j of failed rollout f pairs with the refined rollout of f's refined
    task with sample index `refined_sample(f, k, j)`. A critique whose refined rollout is missing or cannot be trained on gives no
    row. The refined rows are each segment as sampled (the critique in its prompt)."""
    by_job = {(t.task_id, t.sample_index): t for t in refined}
    pairs = [(c, by_job.get(refined_job(c, k))) for c in critiques]
    valid = torch.tensor(
        [t is not None and t.status != "infra_error" and t.trainable and t.ids_verified for _, t in pairs]
    )  # (N,)
    failed = torch.tensor([c.failed.reward for c, _ in pairs], dtype=torch.float64)  # (N,)
    rewards = torch.tensor([t.reward if t else 0.0 for _, t in pairs], dtype=torch.float64)  # (N,)
    groups = [c.failed.id for c, _ in pairs]
    critic, own, kept = critique_advantages(failed, rewards, groups, valid, learner)  # (N,) each
    critic_rows, refined_rows = [], []
    for (c, t), a_c, a_r, keep in zip(pairs, critic.tolist(), own.tolist(), kept.tolist(), strict=True):
        if keep and t is not None:
            critic_rows.append(c.row(a_c))
            refined_rows += segment_rows(t, a_r, learner.mask_truncated)
    graded = [t for _, t in pairs if t is not None and t.status != "infra_error"]
    gains = (rewards - failed)[valid]  # (V,)
    metrics = {
        "critique_count": float(len(critiques)),
        "critique_tokens_generated": float(sum(len(c.ids) for c in critiques)),
        "critique_refined_tokens_generated": float(sum(t.metrics.generated_tokens for t in refined)),
        "critique_gain_mean": float(gains.mean()) if gains.numel() else 0.0,
        "critique_refined_success_rate": (
            sum(t.grade is not None and t.grade.correct >= 1.0 for t in graded) / len(graded)
            if graded
            else 0.0
        ),
        "critique_rows": float(len(critic_rows) + len(refined_rows)),
    }
    return Critiqued(critic_rows, refined_rows, metrics)


# `credit.critique_mode: local`: the critique as a teacher's context on the one turn it names (the targeted
# textual feedback Composer 2.5 describes): no refined rollout; the same model, with the critique inserted
# just before that turn, scores the turn's own tokens, and the clipped gap to the model without it (OPSD's
# signal, `credit.opsd_signal`) is those tokens' advantage, in a row of their own.

TURN_NAMED = re.compile(r"\bturn\s+(\d+)", re.IGNORECASE)
"""How a critique names the turn it concerns (`CRITIC_ASK` asks it to begin so)."""
LOCAL_LEAD = "A review of what you are about to do:"
"""Opens the critique's message where it is inserted."""


def named_turn(text: str, turns: int) -> int | None:
    """The turn a critique names first (`Turn N`, numbered from 1 as the critic read them), 0-based; None
    when it names none of 1..`turns`."""
    found = TURN_NAMED.search(text)
    if found is None or not 1 <= int(found.group(1)) <= turns:
        return None
    return int(found.group(1)) - 1


@dataclass(frozen=True)
class TurnSpan:
    """Where a turn's generated ids lie in its segment's ids: [start, end)."""

    segment: int
    start: int
    end: int


def turn_span(trajectory: Trajectory, n: int) -> TurnSpan | None:
    """Turn n's (0-based over the whole trajectory, as `turn_lines` numbers them) generated ids in its
    segment; None when it generated none (a chat policy's turn)."""
    seen = 0
    for segment in trajectory.segments:
        at = len(segment.prompt_ids)
        for turn in segment.turns:
            if seen == n:
                end = at + len(turn.generated_ids)
                return TurnSpan(segment.index, at, end) if turn.generated_ids else None
            at += len(turn.generated_ids) + len(turn.appended_ids)
            seen += 1
    return None


def inserted_ids(fmt: ChatFormat, ids: Sequence[int], span: TurnSpan, critique: str) -> list[int] | None:
    """The teacher's context for the turn at `span` of a segment's `ids`: the ids before the turn with the
    opening of the assistant's reply cut, the critique as a user message (`LOCAL_LEAD` first) and the reply's
    opening again, then the turn's own generated ids. None when the ids before the turn do not end with
    the reply's opening (another template's layout)."""
    before, opening = list(ids[: span.start]), list(fmt.reply_ids)
    if before[-len(opening) :] != opening:
        return None
    message = {"role": "user", "content": plain(f"{LOCAL_LEAD}\n{critique}", fmt.special_texts)}
    return [*before[: -len(opening)], *fmt.message_ids(message), *ids[span.start : span.end]]


def local_advantages(teacher: Tensor, student: Tensor, clip: float, weight: float) -> Tensor:
    """The named turn's per-token advantage: weight x clip(log p_T - log p_S, -clip, clip), p_T the model
    with the critique inserted, p_S without it (OPSD's signal, arXiv 2601.18734, on one turn's tokens;
    `credit.opsd_signal`). teacher, student: (1, L) the turn's L tokens -> (1, L)."""
    return weight * opsd_signal(teacher, student, torch.ones_like(teacher), clip)  # (1, L)


@dataclass(frozen=True)
class LocalScoring:
    """How `local_row` scores a turn: the model (the current policy, the critique-conditioned teacher and
    the student both), the temperature the rollouts were sampled at, the gap's clip (`credit.clip`), its
    weight (`credit.beta` as it stands this step, over the k critiques of a rollout), and the device."""

    model: Any
    temperature: float
    clip: float
    weight: float
    device: torch.device

    def logprobs(self, ids: list[int], length: int) -> list[float]:
        """log p(ids[t] | ids[:t]) of the last `length` ids."""
        row = Row(ids, [0] * (len(ids) - length) + [1] * length, [], 0.0)
        return teacher_logprobs(self.model, [], [row], self.temperature, self.device)[0][-length:]


def local_row(critique: Critique, fmt: ChatFormat, scoring: LocalScoring) -> tuple[Row, float] | None:
    """The failed rollout's segment up to the end of the turn `critique` names, trained on that turn's
    tokens alone with `local_advantages` (its outcome 0: the rollout's own row holds the outcome), the
    sampler's log-probs kept; and the turn's mean gap. None where the critique names no turn with ids, or
    the template's layout does not let the critique in."""
    turns = sum(len(segment.turns) for segment in critique.failed.segments)
    n = named_turn(critique.text, turns)
    span = turn_span(critique.failed, n) if n is not None else None
    if span is None:
        return None
    segment = next(s for s in critique.failed.segments if s.index == span.segment)
    ids, _, logprobs = segment.ids_and_mask()
    taught = inserted_ids(fmt, ids, span, critique.text)
    if taught is None:
        return None
    length = span.end - span.start
    teacher = torch.tensor([scoring.logprobs(taught, length)])  # (1, L)
    student = torch.tensor([scoring.logprobs(ids[: span.end], length)])  # (1, L)
    signal = local_advantages(teacher, student, scoring.clip, scoring.weight)  # (1, L)
    dense = [0.0] * (span.start - 1) + signal[0].tolist()  # aligned to ids[1:]
    mask = [0] * span.start + [1] * length
    row = Row(ids[: span.end], mask, logprobs[: span.end], 0.0, token_advantages=dense)
    return row, float((teacher - student).mean())


def local_rows(critiques: Sequence[Critique], fmt: ChatFormat, scoring: LocalScoring) -> Critiqued:
    """`credit.critique_mode: local`: a `local_row` for each critique that names a turn; the critic's own
    tokens are not trained (no refinement measures them)."""
    placed = [(c, local_row(c, fmt, scoring)) for c in critiques]
    rows = [made[0] for _, made in placed if made is not None]
    gaps = [made[1] for _, made in placed if made is not None]
    metrics = {
        "critique_count": float(len(critiques)),
        "critique_tokens_generated": float(sum(len(c.ids) for c in critiques)),
        "critique_local_rows": float(len(rows)),
        "critique_local_unplaced": float(len(critiques) - len(rows)),
        "critique_local_gap_mean": sum(gaps) / len(gaps) if gaps else 0.0,
    }
    return Critiqued([], [], metrics, local=rows)
