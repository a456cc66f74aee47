"""Credit finer than the outcome, from the privileged context every coding task has (issue 19): pure
functions, no model and no I/O.

Shapes: S segment rows, T tokens per row (padded; aligned to the predicted tokens ids[1:], as the
learner's micro-batches are), H the teacher header's tokens.

    privileged_header  task -> str                       what the teacher sees that the student never does
    opsd_signal        (S, T) teacher, student -> (S, T)  clip(log p_T - log p_S, +-c) on model tokens
    turn_mean          (S, T) -> (S, T)                   the signal averaged over each generation
    dense_advantages   (S,) outcome, (S, T) signal -> (S, T)
    dense_weight       step -> float                      beta, decayed linearly to 0 over `decay_steps`
    surprisal_gate     (S, T) student log-probs -> (S, T) weights of a hint rollout's tokens
    learnability       (B, T) student log-probs -> (B,)   how learnable each teacher rollout is
    teacher_rewards    (B,) success, (B,) learnability -> (B,) the learnability-trained teacher's reward

On-policy self-distillation (OPSD, arXiv 2601.18734): the student samples on its own; the same model,
given privileged context, scores the student's tokens; the per-token gap log p_T(y_t) - log p_S(y_t) is
a dense, on-policy signal. It must be clipped, or a few tokens of style dominate it (the paper's finding,
and why `clip` is not optional here). The turn as a unit of credit follows ECHO (arXiv 2601.06794).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from tasks.model import Task

Privileged = Literal["gold_patch", "hidden_tests"]
"""What the teacher's header may hold. (A third part, the hidden tests' output on the unfixed repository,
was never recorded by grading, so the header always read "(not known)": removed, issue 39.)"""
CreditMode = Literal["outcome", "opsd", "outcome+opsd", "outcome*opsd"]

HEADER_TITLE = "Reference material for this task (not shown to the agent):"


def privileged_header(task: Task, parts: Sequence[Privileged]) -> str:
    """The teacher's header: the task's privileged context in a fixed form, the parts in the order given."""
    sections = [HEADER_TITLE]
    for part in dict.fromkeys(parts):
        if part == "gold_patch":
            sections.append(f"## A correct fix\n```diff\n{(task.gold_patch or '(none)').rstrip()}\n```")
        else:
            files = "\n".join(
                f"### {path}\n```{task.language}\n{text.rstrip()}\n```"
                for path, text in sorted(task.hidden_tests.files.items())
            )
            ids = "\n".join(f"- {test_id}" for test_id in task.hidden_tests.fail_to_pass)
            sections.append(f"## The tests that must pass\n{ids}\n{files}".rstrip())
    return "\n\n".join(sections) + "\n"


def opsd_signal(teacher: Tensor, student: Tensor, mask: Tensor, clip: float) -> Tensor:
    """clip(log p_T(y_t) - log p_S(y_t), -clip, clip) where `mask` is 1 (the model's own tokens), 0
    elsewhere. teacher, student, mask: (S, T) -> (S, T). The student's log-probs are constants here (the
    signal is an advantage, not a loss term): pass them detached."""
    if clip <= 0:
        raise ValueError(f"clip must be positive, got {clip}: an unclipped gap lets a few tokens dominate")
    gap = (teacher - student).clamp(-clip, clip)  # (S, T)
    return gap * mask


def turn_mean(signal: Tensor, mask: Tensor) -> Tensor:
    """Each contiguous run of mask-1 tokens (one generation: a tool call or a summary) gets its mean
    signal on every token of the run; 0 where `mask` is 0. signal, mask: (S, T) -> (S, T)."""
    on = mask > 0  # (S, T)
    starts = on & ~torch.nn.functional.pad(on[:, :-1], (1, 0), value=False)  # (S, T) first token of a run
    run_id = torch.cumsum(starts.long(), dim=1) * on.long()  # (S, T) 1, 2, ... per run; 0 off the mask
    runs = int(run_id.max().item()) + 1
    flat = run_id + runs * torch.arange(signal.shape[0], device=signal.device).unsqueeze(1)  # (S, T) unique
    sums = torch.zeros(signal.shape[0] * runs, dtype=signal.dtype, device=signal.device)
    counts = torch.zeros_like(sums)
    sums.index_add_(0, flat.flatten(), (signal * on).flatten())
    counts.index_add_(0, flat.flatten(), on.to(signal.dtype).flatten())
    means = sums / counts.clamp(min=1)  # (S * runs,)
    return means[flat] * on  # (S, T)


def dense_advantages(
    outcome: Tensor, signal: Tensor, mask: Tensor, mode: CreditMode, beta: float, band: float = 0.2
) -> Tensor:
    """The per-token advantage the learner trains on. outcome: (S,) each row's GRPO advantage; signal:
    (S, T) from `opsd_signal` (or `turn_mean` of it); mask: (S, T). -> (S, T), 0 off the mask.

    `outcome`: the outcome on every model token (plain GRPO). `opsd`: beta * signal alone. `outcome+opsd`:
    their sum (the dense term can outweigh the outcome: with |A| <= 1 and the gap clipped to +-clip, it
    flips the sign of a success's credit wherever beta * gap < -A). `outcome*opsd`: the outcome scaled per
    token, its sign kept, as OPSD's authors mix their signal with GRPO's (arXiv 2601.18734, read in issue
    39): A * clip(1 + beta * sign(A) * g_t, 1 - band, 1 + band), so a success's tokens the teacher favours
    (g_t > 0) get up to (1 + band) A, and a failure's tokens it disfavours up to (1 + band) of the blame;
    `band` < 1 keeps every weight positive."""
    spread = outcome.unsqueeze(1) * mask  # (S, T)
    if mode == "outcome":
        return spread
    if mode == "outcome*opsd":
        if not 0 < band < 1:
            raise ValueError(f"band must be in (0, 1) so that no token's credit changes sign, got {band}")
        toward = torch.sign(outcome).unsqueeze(1) * signal  # (S, T) the gap, turned to the outcome's side
        weight = (1 + beta * toward).clamp(1 - band, 1 + band)  # (S, T)
        return spread * weight
    dense = beta * signal * mask  # (S, T)
    return dense if mode == "opsd" else spread + dense


def dense_weight(beta: float, step: int, decay_steps: int) -> float:
    """The dense signal's weight at training step `step` (0-based): `beta`, decayed linearly to 0 over
    `decay_steps` steps (0: no decay), as OPSD's hybrid lets the outcome take over as training goes on."""
    if decay_steps <= 0:
        return beta
    return beta * max(0.0, 1.0 - step / decay_steps)


def surprisal_gate(student: Tensor, mask: Tensor, tau: float, spike_cap: float) -> Tensor:
    """How much each token of a hint rollout (a success found with the privileged header in the prompt)
    counts when the student imitates it: weight 1 where the student's surprisal s = -log p_S(y_t) is at
    most `tau` (a token it could have written), exp(-(s - tau)) beyond, and 0 above `spike_cap` (a token
    it would never write: learning it is learning the header). The "nearest successes" of pedagogical RL
    (N. Ziems): imitation weighted by the student's own plausibility, extreme spikes gated out.
    student, mask: (S, T) -> (S, T), 0 off the mask."""
    if not 0 <= tau < spike_cap:
        raise ValueError(f"need 0 <= gate_tau < spike_cap, got {tau} and {spike_cap}")
    surprisal = -student  # (S, T)
    weight = torch.exp(-(surprisal - tau).clamp(min=0))  # (S, T) 1 up to tau
    weight = weight.masked_fill(surprisal > spike_cap, 0.0)  # (S, T)
    return weight * mask


def learnability(student: Tensor, mask: Tensor, spike_cap: float, spike_penalty: float) -> Tensor:
    """How learnable each teacher rollout is for the student: exp(-(mean_t s_t + lambda * max(0, max_t s_t
    - spike_cap))), s_t = -log p_S(y_t) the student's surprisal of the teacher's token in the student's own
    context (no header), over the rollout's mask-1 tokens. In (0, 1]: 1 when the student would write every
    token for sure; the mean term is the geometric mean of the student's per-token probability, and the
    spike term costs a rollout its single most surprising token where that passes the cap the gate
    zeroes at (`surprisal_gate`), so that one extreme jump costs more than its share of a mean.
    Pedagogical RL's spike-aware pedagogy reward (S. Chakraborty, N. Ziems et al., 2026, as issue 39
    reads it: mean surprisal with a penalty on single extreme spikes); the exact form and its constants
    are ours, the paper's are not known here. A row with no mask-1 token gets 0 (nothing to learn).
    student, mask: (B, T), one rollout a row (its segments' tokens laid end to end) -> (B,)."""
    if spike_penalty < 0:
        raise ValueError(f"spike_penalty must be at least 0, got {spike_penalty}")
    on = mask > 0  # (B, T)
    surprisal = -student * on  # (B, T) 0 off the mask
    count = on.sum(dim=1)  # (B,)
    mean = surprisal.sum(dim=1) / count.clamp(min=1)  # (B,)
    peak = surprisal.masked_fill(~on, 0.0).amax(dim=1)  # (B,) surprisal >= 0, so 0 is a floor
    spike = (peak - spike_cap).clamp(min=0)  # (B,)
    value = torch.exp(-(mean + spike_penalty * spike))  # (B,)
    return value * (count > 0)


def teacher_rewards(success: Tensor, learnable: Tensor) -> Tensor:
    """The learnability-trained teacher's reward (Pedagogical RL): success x learnability, so a failure
    earns 0 however learnable, and among successes the ones nearest the student's distribution earn most.
    success (1 or 0), learnable: (B,) -> (B,)."""
    return success * learnable  # (B,)
