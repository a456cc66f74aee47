"""Activation checkpointing chosen by the memory a micro-batch needs (issue 20, item 3): pure arithmetic.

A decoder layer keeps, for its backward pass, about (10 h + 4 i) values per token (Qwen2 / Llama: the two
norms' inputs and outputs, q, k, v before and after the rotary embedding, the attention and o_proj
outputs, the residuals, and the MLP's gate, up, activation and product; h the hidden size, i the MLP's
intermediate size, with attention by a fused kernel that keeps no scores). The arithmetic follows
Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4 (34 h bytes
per token and layer at 16 bits for GPT's 4h MLP, with the scores kept). A checkpointed layer keeps only
its input, h values, and recomputes the rest in the backward pass, one layer at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LayerShape:
    hidden: int
    intermediate: int
    layers: int


def layer_values_per_token(shape: LayerShape) -> int:
    """Values a layer keeps per token for its backward pass, not checkpointed."""
    return 10 * shape.hidden + 4 * shape.intermediate


def activation_bytes(shape: LayerShape, tokens: int, value_bytes: int, every: int | None) -> int:
    """Bytes of activations a forward over `tokens` keeps: every layer whole (`every` None), or every
    `every`-th layer checkpointed (layer index % every == 0, as transformers counts them) keeping only its
    input, plus one layer's whole activations while it is recomputed."""
    full = layer_values_per_token(shape)
    if every is None:
        return tokens * value_bytes * shape.layers * full
    checkpointed = math.ceil(shape.layers / every)
    kept = checkpointed * shape.hidden + (shape.layers - checkpointed) * full + full
    return tokens * value_bytes * kept


def checkpoint_every(shape: LayerShape, tokens: int, value_bytes: int, budget_bytes: int) -> int | None:
    """The checkpointing that fits the budget at the least recomputation: None (no checkpointing) when the
    whole activations fit; else the largest k whose every-k-th checkpointing fits; else 1 (every layer,
    the least memory there is)."""
    if activation_bytes(shape, tokens, value_bytes, None) <= budget_bytes:
        return None
    for every in range(shape.layers, 0, -1):
        if activation_bytes(shape, tokens, value_bytes, every) <= budget_bytes:
            return every
    return 1
