"""The teacher's log-prob of each of the student's own tokens, given the privileged header first
(issue 19, item 2): the same segment ids, unchanged, after the header's, so that positions align by
construction. Here the teacher runs in-process on a model (the current policy, the frozen warm-start
reference, or another model folder)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from harness.training.learner import Row, token_logprobs


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
