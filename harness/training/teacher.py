"""The teacher's log-prob of each of the student's own tokens, given the privileged header first
(issue 19, item 2): the same segment ids, unchanged, after the header's, so that positions align by
construction. Here the teacher runs in-process on a model (the current policy or the frozen starting
weights). `with_dense_credit` turns those log-probs into each row's per-token advantage
(`harness/training/credit.py`), and `CreditConfig` is how a run asks for it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.training.credit import (
    CreditMode,
    Privileged,
    dense_advantages,
    dense_weight,
    opsd_signal,
    privileged_header,
    turn_mean,
)
from harness.training.learner import Row, token_logprobs
from policies.base import Scorer
from tasks.model import Task


def header_ids(tokenizer: Any, task: Task, parts: Sequence[Privileged]) -> list[int]:
    """The teacher header's tokens for `task`: the ids that go before a row's own when the teacher scores
    it, and before a warm-start demonstration that teaches the model to read them (`SFTConfig`)."""
    return list(tokenizer.encode(privileged_header(task, parts), add_special_tokens=False))


@torch.no_grad()
def teacher_logprobs(
    model: Any, header_ids: Sequence[int], rows: Sequence[Row], temperature: float, device: torch.device
) -> list[list[float]]:
    """For each row: log p_T(ids[t] | header, ids[:t]) aligned to the row's predicted tokens ids[1:]
    (length len(ids) - 1), on its mask-1 tokens; 0.0 elsewhere. One row at a time (no padding)."""
    out = []
    h = len(header_ids)
    for row in rows:
        ids = torch.tensor([[*header_ids, *row.ids]], device=device)  # (1, H + T)
        mask = torch.zeros((1, h + len(row.ids) - 1), device=device)  # (1, H + T - 1)
        # The row's token t (t >= 1) is predicted at index h + t - 1; its first token, as in the
        # student's own context, is not predicted (it opens the prompt).
        mask[0, h:] = torch.tensor(row.mask[1:], dtype=torch.float32, device=device)
        attention = torch.ones_like(ids)  # (1, H + T)
        logprobs, _ = token_logprobs(model, ids, attention, temperature, mask)  # (1, H + T - 1)
        out.append([float(v) for v in logprobs[0, h:].cpu()])
    return out


def served_teacher_logprobs(
    scorer: Scorer, header_ids: Sequence[int], rows: Sequence[Row], temperature: float
) -> list[list[float]]:
    """`teacher_logprobs` through a server's prompt log-probs (`policies.base.Scorer`): the same
    alignment, one request per row."""
    out = []
    h = len(header_ids)
    for row in rows:
        scored = scorer.prompt_logprobs([*header_ids, *row.ids], temperature)  # aligned to (header + ids)[1:]
        own = scored[h : h + len(row.ids) - 1]  # the row's own tokens ids[1:], after the header
        out.append([v if m else 0.0 for v, m in zip(own, row.mask[1:], strict=True)])
    return out


PROBE_TEXT = "def add(a, b):\n    return a + b\n"
"""What `served_temperature` has a server score."""


def served_temperature(scorer: Scorer, temperature: float, ids: list[int]) -> None:
    """Refuses a server whose prompt log-probs ignore the temperature (vLLM's score at 1 whatever is asked)
    when the run samples at another: its teacher's gap would also measure the temperature. `ids` are
    scored at `temperature` and at 1; the same values mean the temperature was ignored."""
    if temperature in (0.0, 1.0) or len(ids) < 2:
        return
    asked, plain = scorer.prompt_logprobs(ids, temperature), scorer.prompt_logprobs(ids, 1.0)
    if all(abs(a - b) < 1e-6 for a, b in zip(asked, plain, strict=True)):
        raise ValueError(
            f"credit.teacher_via: server: the server's prompt log-probs ignore the temperature (at"
            f" {temperature:g} they equal those at 1, as vLLM's do); sample at temperature 1 or score with"
            " credit.teacher_via: learner"
        )


class CreditConfig(BaseModel):
    """Dense credit from the task's privileged context (on-policy self-distillation, OPSD)."""

    model_config = ConfigDict(extra="forbid")

    mode: CreditMode = "outcome"
    """`outcome`: the GRPO advantage on every model token (the default). `opsd`: the clipped teacher-student
    gap alone. `outcome+opsd`: both, summed on each token (the gap can flip a success's sign).
    `outcome*opsd`: the outcome scaled per token by clip(1 + beta * sign(A) * gap, 1 - band, 1 + band), its
    sign kept (OPSD's own hybrid with GRPO; `credit.dense_advantages`)."""
    privileged: list[Privileged] = Field(default_factory=lambda: list[Privileged](["gold_patch"]))
    """What the teacher's header holds: `gold_patch`, `hidden_tests`. The student never
    sees it: its rows, prompts and sandboxes are untouched."""
    teacher: str = "self"
    """Which weights score: `self` (the current policy, with the header), `reference` (the run's starting
    weights, frozen), or the folder of another model that shares the policy's tokenizer (frozen)."""
    teacher_via: Literal["learner", "server"] = "learner"
    """Where the teacher scores: in-process on the learner's device, or on the run's sampler servers
    (`sampler: tito:...`, which hold the current policy) through vLLM's prompt log-probs (`harness serve`
    has them too); `server` needs `teacher: self`."""
    clip: float = Field(default=1.0, gt=0)
    """The gap log p_T - log p_S is clipped to +-clip on each token (unclipped, style tokens dominate)."""
    beta: float = Field(default=1.0, ge=0)
    """Weight of the dense signal in the advantage (at step 0, when `decay_steps` decays it)."""
    band: float = Field(default=0.2, gt=0, lt=1)
    """`outcome*opsd`: each token's weight on the outcome stays within 1 +- band."""
    decay_steps: int = Field(default=0, ge=0)
    """The dense weight falls linearly from `beta` to 0 over this many training steps (0: it stays)."""
    granularity: Literal["token", "turn"] = "token"
    """`turn`: each generation (a tool call or a summary) gets its tokens' mean signal on all of them."""
    hint_rollouts: int = Field(default=0, ge=0)
    """For a group whose every rollout failed: this many more rollouts with the privileged header in the
    task's statement; the successful ones are trained on in the student's own context, gated per token
    (harness/training/hints.py), outside every group's baseline. 0 turns it off. (The issue names it
    `sampling.hint_rollouts`; it lives with the rest of the privileged-context settings.)"""
    gate_tau: float = Field(default=2.0, ge=0)
    """A hint rollout's token counts fully where the student's surprisal -log p_S is at most this, and
    exp(-(s - tau)) beyond."""
    hint_summaries: Literal["drop", "keep"] = "drop"
    """A hint rollout's segments after its first summary open on that summary, which was written with the
    header in view and may carry it: `drop` trains only its first segment (the summary's own tokens
    there are gated as any other), `keep` trains them all in that context."""
    spike_cap: float = Field(default=8.0, gt=0)
    """A hint rollout's token whose student surprisal is above this counts 0 (a token only the header
    explains); with `teacher_training: learnability`, also where a teacher rollout's spike penalty starts."""
    teacher_training: Literal["off", "learnability"] = "off"
    """`learnability`: the hint rollouts are also a self-teacher's own GRPO groups (one per failed task, of
    `hint_rollouts` each), rewarded success x learnability (`credit.learnability`: the student's surprisal
    of the teacher's tokens in its own context, mean and spike), and trained on in the teacher's context
    (header included), with the same weights, weighted by `teacher_weight`; their successes still feed
    the gated imitation. Pedagogical RL's self-teacher (issue 39, item 1). `off`: the teacher samples as
    it is."""
    teacher_weight: float = Field(default=1.0, ge=0)
    """`teacher_training: learnability`: the teacher rows' weight in the loss (their advantages are
    multiplied by it, and the surrogate is linear in the advantage; entropy and KL terms are not
    weighted). 1, as much as a student row: the paper's weighting is not known here."""
    spike_penalty: float = Field(default=1.0, ge=0)
    """`teacher_training: learnability`: lambda, what each nat of a teacher rollout's largest surprisal
    above `spike_cap` takes off its log-learnability (one nat of mean surprisal takes off the same).
    1 is ours: the paper's constant is not known here."""

    critique: int = Field(default=0, ge=0)
    """Critique-refinement (ECHO, issue 39 item 2; `harness/training/critique.py`): for a failed rollout, the
    policy in a critic role reads what the environment showed (its tool calls, their observations, the final
    diff; never the grade, hidden tests or gold patch) and writes this many critiques; each starts a refined
    rollout with the critique in the task's statement (task id `TASK.critique`). The critique's tokens get
    the group-relative refinement gain over the k critiques, the refined rollouts their own group
    advantage; both in the same learner step, outside every plain group's baseline. 0 turns it off; else
    at least 2 with `critique_mode: refine` (a group of one has no baseline)."""
    critique_mode: Literal["refine", "local"] = "refine"
    """`refine`: the critique track above. `local` (Composer 2.5's targeted textual feedback): no refined
    rollout; each critique is inserted, as a user message, just before the turn it names (`Turn N`), and the
    current policy with it there is the teacher of that turn's tokens alone: their advantage is
    `beta` x the gap log p_T - log p_S clipped to +-`clip` (OPSD's signal, `beta` decayed by `decay_steps`),
    over the k critiques of a rollout, in a row of its own; the critic's tokens are not trained."""
    critique_per_group: int = Field(default=1, ge=1)
    """`critique`: at most this many failed rollouts of each group are critiqued (lowest sample index
    first); each costs `critique` critiques and as many refined rollouts."""
    critique_tokens: int = Field(default=256, ge=1)
    """`critique`: the most tokens one critique may have (it is cut there)."""

    turn_weight: float = Field(default=0.0, ge=0)
    """Turn-level credit from the agent's own `run_tests` results (`harness/training/turn_credit.py`): a
    turn that changed files gets its share of the change in the visible tests' pass rate that the next
    comparable run showed, times this, added to its tokens' advantage. 0 turns it off (the default)."""
    turn_clip: float = Field(default=0.5, gt=0)
    """Turn-level credit: each turn's bonus is clipped to +-turn_clip (about half an outcome advantage, so
    the outcome's sign dominates where they disagree)."""

    @model_validator(mode="after")
    def _teacher_groups(self) -> CreditConfig:
        if self.teacher_training != "off" and self.hint_rollouts < 2:
            raise ValueError(
                "credit.teacher_training compares the teacher's rollouts within a group: it needs"
                f" credit.hint_rollouts of at least 2, got {self.hint_rollouts}"
            )
        return self

    @model_validator(mode="after")
    def _critique_groups(self) -> CreditConfig:
        if self.critique == 1 and self.critique_mode == "refine":
            raise ValueError(
                "credit.critique compares the critiques of one failed rollout within a group: it needs 2 or"
                " more (0 turns it off), got 1"
            )
        return self


def teacher_folder(teacher: str, model: Path) -> Path | None:
    """The folder a frozen teacher loads from: the run's starting weights (`reference`), another model's
    folder, or None for `self`. Another model must read the same token ids: its vocabulary size must
    equal the policy's, as their config.json files say."""
    if teacher == "self":
        return None
    if teacher == "reference":
        return model
    folder = Path(teacher)
    if not (folder / "config.json").is_file():
        raise ValueError(
            f"credit.teacher must be self, reference or a model folder; {teacher} holds no config.json"
        )
    sizes = [json.loads((f / "config.json").read_text()).get("vocab_size") for f in (folder, model)]
    if sizes[0] != sizes[1]:
        raise ValueError(f"credit.teacher {teacher} has vocabulary size {sizes[0]}, the policy {sizes[1]}")
    return folder


@dataclass
class Credited:
    """Rows with dense advantages, and what the signal looked like."""

    rows: list[Row]
    metrics: dict[str, float]


def _scored(
    scorer: Any, header: Sequence[int], row: Row, temperature: float, device: torch.device
) -> list[float]:
    """The row's tokens scored after `header` by a model in-process or a `Scorer` (a server)."""
    if isinstance(scorer, Scorer):
        return served_teacher_logprobs(scorer, header, [row], temperature)[0]
    return teacher_logprobs(scorer, header, [row], temperature, device)[0]


def with_dense_credit(
    rows: Sequence[Row],
    headers: Sequence[Sequence[int]],
    teacher: Any,
    config: CreditConfig,
    temperature: float,
    device: torch.device,
    step: int = 0,
    student: Any = None,
    context: int | None = None,
) -> Credited:
    """Each row with its per-token advantage (`credit.dense_advantages`): the teacher scores the row's own
    tokens after the row's header (`headers[i]`, the tokens of `privileged_header` for its task), and the
    student scores them with no header: `student` is the learner's model (a served teacher's own server,
    so that both sides come from one engine), by default the teacher itself. Never the sampler's stored
    log-probs: in an async run those are stale, and another engine's differ, and the gap would measure
    that too. A row whose header and ids pass `context` tokens (the model's window) is not scored: its
    signal is 0, and `credit_rows_too_long` counts it. The rows' ids are not changed. `teacher` and
    `student` are models scored in-process, or `Scorer`s (a server's prompt log-probs)."""
    if config.mode == "outcome":
        return Credited(list(rows), {})
    student = teacher if student is None else student
    beta = dense_weight(config.beta, step, config.decay_steps)
    out, gaps, too_long = [], [], 0
    for row, header in zip(rows, headers, strict=True):
        mask = torch.tensor([row.mask[1:]], dtype=torch.float32)  # (1, T-1)
        scored: list[float] | None = None
        signal = torch.zeros_like(mask)  # (1, T-1)
        if context is None or len(header) + len(row.ids) <= context:
            scored = _scored(teacher, header, row, temperature, device)
            t_lp = torch.tensor([scored], dtype=torch.float32)  # (1, T-1)
            s_lp = torch.tensor(
                [_scored(student, [], row, temperature, device)], dtype=torch.float32
            )  # (1, T-1)
            signal = opsd_signal(t_lp, s_lp, mask, config.clip)  # (1, T-1)
            gaps.append((t_lp - s_lp)[mask.bool()])
        else:
            too_long += 1
        if config.granularity == "turn":
            signal = turn_mean(signal, mask)
        dense = dense_advantages(torch.tensor([row.advantage]), signal, mask, config.mode, beta, config.band)
        out.append(replace(row, token_advantages=[float(v) for v in dense[0]], teacher_logprobs=scored))
    return Credited(out, _gap_metrics(gaps, config.clip) | {"credit_rows_too_long": float(too_long)})


def _gap_metrics(gaps: list[torch.Tensor], clip: float) -> dict[str, float]:
    """The teacher-student gap over every scored token: its mean, its 95th percentile of size, and the
    share clipped."""
    every = torch.cat(gaps) if gaps else torch.zeros(0)
    if not every.numel():
        return {"credit_gap_mean": 0.0, "credit_gap_p95": 0.0, "credit_clipped_fraction": 0.0}
    return {
        "credit_gap_mean": float(every.mean()),
        "credit_gap_p95": float(every.abs().quantile(0.95)),
        "credit_clipped_fraction": float((every.abs() > clip).sum()) / every.numel(),
    }
