"""Padding-free micro-batches (issue 20, item 1): the rows of a micro-batch end to end in one sequence.

A padded micro-batch computes rows x longest row positions, and its attention, masked, costs
rows x longest^2. Packed, the model sees exactly the rows' tokens (sum of lengths, 0 padding), the
position ids restart at 0 at each row, and attention is causal inside each row and blind across rows,
so its work is the sum of the squared lengths. verl, SkyRL and prime-rl train this way ("remove
padding", varlen attention).

    pack            rows -> Packed (1, L) ids, positions, row boundaries; the loss tensors (1, L-1)
    unpack          (1, L-1) -> (B, T-1): the packed log-probs in the padded layout the loss math reads
    packed_attention  the attention function the model runs while packed: per row, causal

Attention runs row by row with `scaled_dot_product_attention(is_causal=True)`: no mask tensor, so on a
GPU it takes the flash kernel, and on a CPU it is exact. Where the `flash_attn` package is installed
and the tensors are on a GPU, its varlen kernel does all rows in one call instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface

from policies.shared_prefix import attention_as

ATTENTION = "harness_packed"
"""The name the packed attention function is registered under (transformers' `AttentionInterface`). No
mask function is registered with it, so the model builds no (L, L) mask while packed."""


class PackableRow(Protocol):
    """What packing reads of a learner row (harness/training/learner.py `Row`)."""

    @property
    def ids(self) -> list[int]: ...
    @property
    def mask(self) -> list[int]: ...
    @property
    def sampler_logprobs(self) -> list[float]: ...


@dataclass(frozen=True)
class Packed:
    """Rows end to end. Everything after `cu_seqlens` is aligned to the predicted tokens ids[1:]."""

    input_ids: Tensor
    """(1, L) the rows' ids, L = the sum of their lengths."""
    position_ids: Tensor
    """(1, L) each token's position inside its own row."""
    cu_seqlens: Tensor
    """(R+1,) int32, where each row starts; the last entry is L."""
    max_len: int
    """The longest row."""
    mask: Tensor
    """(1, L-1) 1 where the next token is one of the model's own (trained) in the same row; 0 at a row's last
    token, whose next token is another row's."""


def pack(rows: Sequence[PackableRow], device: torch.device) -> Packed:
    """The rows as one sequence on `device`."""
    lengths = [len(r.ids) for r in rows]
    ids = [t for r in rows for t in r.ids]
    positions = [p for n in lengths for p in range(n)]
    mask = [m for r in rows for m in [*r.mask[1:], 0]][:-1]  # a row's last token predicts nothing of its own
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    return Packed(
        input_ids=torch.tensor([ids], dtype=torch.long, device=device),  # (1, L)
        position_ids=torch.tensor([positions], dtype=torch.long, device=device),  # (1, L)
        cu_seqlens=torch.tensor(bounds, dtype=torch.int32, device=device),  # (R+1,)
        max_len=max(lengths),
        mask=torch.tensor([mask], dtype=torch.float32, device=device),  # (1, L-1)
    )


def unpack(values: Tensor, packed: Packed) -> Tensor:
    """(1, L-1) values aligned to the packed sequence's predicted tokens -> (R, T-1) aligned to each row's
    ids[1:] in a right-padded layout (T the longest row), 0 on padding: what `learner.collate` gives."""
    bounds = packed.cu_seqlens.tolist()
    out = values.new_zeros((len(bounds) - 1, packed.max_len - 1))  # (R, T-1)
    for row, (start, end) in enumerate(itertools.pairwise(bounds)):
        out[row, : end - start - 1] = values[0, start : end - 1]
    return out


def packed_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """Causal attention inside each packed row, none across rows. query: (1, H, L, D); key, value:
    (1, H_kv, L, D) (grouped-query heads are shared as the model shares them). Returns (1, L, H, D), the
    layout transformers' attention functions return. The rows come from `cu_seq_lens_q`, which the
    learner passes through the model's forward."""
    bounds = kwargs.get("cu_seq_lens_q")
    if bounds is None or attention_mask is not None:
        raise ValueError(
            "packed attention needs cu_seq_lens_q and no attention mask: call it through `packed_forward`"
        )
    if query.shape[0] != 1:
        raise ValueError(f"a packed batch is one sequence, got batch {query.shape[0]}")
    dropout = dropout if module.training else 0.0
    if query.is_cuda and _flash_varlen is not None:
        return _flash(query, key, value, bounds, kwargs["max_length_q"], dropout, scaling), None
    group = query.shape[1] != key.shape[1]
    cuts = bounds.tolist()
    outs = [
        F.scaled_dot_product_attention(
            query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], dropout_p=dropout, is_causal=True, scale=scaling,
            enable_gqa=group,
        )  # (1, H, n, D)
        for s, e in itertools.pairwise(cuts)
    ]  # fmt: skip
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None  # (1, L, H, D)


def _flash(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    bounds: Tensor,
    max_len: int,
    dropout: float,
    scaling: float | None,
) -> Tensor:
    """flash-attn's varlen kernel over all rows at once: (1, H, L, D) -> (1, L, H, D)."""
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (L, H, D) each
    out = _flash_varlen(
        q, k, v, bounds, bounds, max_len, max_len, dropout_p=dropout, softmax_scale=scaling, causal=True
    )
    return out.unsqueeze(0)  # (1, L, H, D)


try:  # the varlen kernel, where the package is installed (GPU machines)
    from flash_attn import flash_attn_varlen_func as _flash_varlen
except ImportError:
    _flash_varlen = None

AttentionInterface.register(ATTENTION, packed_attention)


def packed_attention_on(model: Any) -> AbstractContextManager[None]:
    """The model's attention is `packed_attention` inside the block, and what it was after. The learner
    and an in-place sampler share the model but never run at once (sync.in_place); an asynchronous
    sampler has a copy of its own."""
    return attention_as(model, ATTENTION)


def packed_hidden(model: Any, packed: Packed) -> Tensor:
    """(1, L, hidden) the decoder's last hidden states over the packed rows."""
    with packed_attention_on(model):
        return model.get_decoder()(
            input_ids=packed.input_ids, position_ids=packed.position_ids,
            cu_seq_lens_q=packed.cu_seqlens, cu_seq_lens_k=packed.cu_seqlens,
            max_length_q=packed.max_len, max_length_k=packed.max_len,
        ).last_hidden_state  # fmt: skip


def attention_work(lengths: Sequence[int], packed: bool) -> int:
    """Query-key pairs an attention layer scores per head: rows x longest^2 padded (the mask does not
    skip work), the sum of squared lengths packed."""
    return sum(n * n for n in lengths) if packed else len(lengths) * max(lengths) ** 2
