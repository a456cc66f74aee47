"""Decode attention over a prefix every row of the batch shares, read once for all of them.

The live sequences of a rollout batch begin with the same ids: the system prompt and the tool schemas
(about 2,200 ids on the built-in tasks), and a group's episodes the same task. Plain batched attention
reads those keys and values once per row at every decode step. Here the shared part is read once: every
row's queries attend to row 0's copy of it in one call, each row's own part is attended apart, and the
two are merged by their log-sum-exps, the way vLLM's cascade attention and FlashInfer's shared-prefix
kernels merge partial attentions:

    out = out_prefix * exp(lse_prefix - lse) + out_own * exp(lse_own - lse),  lse = logaddexp(lse_prefix, lse_own)

which is softmax attention over the whole row (the partial softmaxes re-weighted by their mass). Row b
reads row 0's keys for the shared ids: the same ids at the same positions under the same weights, equal
to its own up to float rounding (bitwise when one was copied from the other through the prefix store).
On the CPU only (torch's CPU flash kernel returns the log-sum-exp); elsewhere the scheduler attends as
the model does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface

ATTENTION = "harness_shared_prefix"
"""The name the attention function is registered under (transformers' `AttentionInterface`)."""
MIN_SHARED = 128
"""Fewer shared ids than this are attended as usual: two calls and a merge cost more than they save."""
_flash_cpu: Any = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def common_prefix(rows: list[list[int]]) -> int:
    """How many leading ids every one of `rows` has in common."""
    first, shared = rows[0], min(len(row) for row in rows)
    for row in rows[1:]:
        low, high = 0, shared  # first[:low] == row[:low]; the answer is at most high
        while low < high:
            middle = (low + high + 1) // 2
            if first[low:middle] == row[low:middle]:
                low = middle
            else:
                high = middle - 1
        shared = low
    return shared


def supported(model: Any) -> bool:
    """Whether the model's decode can attend through `shared_prefix_attention`: on the CPU, every layer
    plain causal attention (no sliding window, no soft-capping)."""
    config = model.config
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    parameter = next(model.parameters())
    return (
        _flash_cpu is not None
        and parameter.device.type == "cpu"
        and kinds == {"full_attention"}
        and not getattr(config, "attn_logit_softcapping", None)
    )


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """One query a row over keys whose first `shared_prefix` positions every row shares. query: (B, H, 1,
    D); key, value: (B, KV, L, D); attention_mask: (B, 1, 1, L) additive (0 seen, -inf not). Returns
    (B, 1, H, D), the layout transformers' attention functions return."""
    shared: int = kwargs["shared_prefix"]
    if attention_mask is None or query.shape[2] != 1:
        raise ValueError("shared-prefix attention is for a decode step: one query a row and its mask")
    batch, heads, _, dim = query.shape
    kv = key.shape[1]
    group = heads // kv
    q = query.reshape(batch, kv, group, dim)  # the heads that share a key head side by side
    every_row = q.permute(1, 0, 2, 3).reshape(1, kv, batch * group, dim)  # (1, KV, B*g, D)
    out_p, lse_p = _flash_cpu(every_row, key[:1, :, :shared], value[:1, :, :shared], scale=scaling)
    out_p = out_p.reshape(kv, batch, group, dim).transpose(0, 1)  # (B, KV, g, D)
    lse_p = lse_p.reshape(kv, batch, group).transpose(0, 1)  # (B, KV, g)
    out_o, lse_o = _flash_cpu(
        q, key[:, :, shared:], value[:, :, shared:], attn_mask=attention_mask[..., shared:], scale=scaling
    )  # (B, KV, g, D), (B, KV, g): each row's own part, the new id's key among it
    lse = torch.logaddexp(lse_p, lse_o)
    out = out_p * (lse_p - lse).exp()[..., None] + out_o * (lse_o - lse).exp()[..., None]
    return out.reshape(batch, heads, 1, dim).transpose(1, 2), None  # (B, 1, H, D)


AttentionInterface.register(ATTENTION, shared_prefix_attention)


@contextmanager
def attention_as(model: Any, name: str) -> Iterator[None]:
    """The model attends through the function registered as `name` inside the block, as before after
    it. Whoever else runs the same model must not run at once (the learner and an in-place sampler take
    turns; an asynchronous sampler has a copy of its own)."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before
