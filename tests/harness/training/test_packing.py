"""Padding-free micro-batches (harness/training/packing.py) on the real tiny model: the same log-probs and
gradients as the padded path, no padded position computed, attention work the sum of squared lengths,
and no row seeing another."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from harness.training import packing
from harness.training.learner import Learner, LearnerConfig, Row, collate, micro_batches, token_logprobs
from harness.training.packing import attention_work, pack, unpack
from tests.harness.training.test_learner import gradients, make_rows

BENCHMARK_LENGTHS = [round(256 + i * (4096 - 256) / 19) for i in range(20)]
"""benchmarks/learner.py's batch: 20 segments spread evenly over 256-4,096 tokens."""


def test_pack_lines_up_each_rows_predictions_and_masks_the_boundary() -> None:
    # Row a: ids 10 11 12, mask 0 1 1 -> predicts 11 (mask 1), 12 (mask 1). Row b: ids 20 21, mask 0 1.
    # Packed ids 10 11 12 20 21; positions 0 1 2 0 1; the prediction of 20 from 12 crosses rows: mask 0.
    rows = [Row([10, 11, 12], [0, 1, 1], [0.0, -1.0, -2.0], 1.0), Row([20, 21], [0, 1], [0.0, -3.0], -1.0)]
    packed = pack(rows, torch.device("cpu"))
    assert packed.input_ids.tolist() == [[10, 11, 12, 20, 21]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 0, 1]]
    assert packed.cu_seqlens.tolist() == [0, 3, 5]
    assert packed.mask.tolist() == [[1.0, 1.0, 0.0, 1.0]]
    # unpack lays the 4 predictions out as collate does: (2 rows, longest 3 - 1).
    assert unpack(torch.tensor([[1.0, 2.0, 9.0, 4.0]]), packed).tolist() == [[1.0, 2.0], [4.0, 0.0]]
    assert collate(rows, 0, torch.device("cpu")).mask.tolist() == [[1.0, 1.0], [1.0, 0.0]]


def test_packed_logprobs_equal_the_padded_ones(tiny_model_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # grouped-query heads too
    rows = make_rows(9, seed=3)
    batch = collate(rows, 0, torch.device("cpu"))
    with torch.no_grad():
        padded, padded_logits = token_logprobs(model, batch.input_ids, batch.attention_mask, 0.9, batch.mask)
        packed, packed_logits = token_logprobs(
            model, batch.input_ids, batch.attention_mask, 0.9, batch.mask, pack(rows, torch.device("cpu"))
        )
    assert packed.shape == padded.shape
    assert (packed - padded).abs().max().item() <= 1e-5
    assert (packed_logits - padded_logits).abs().max().item() <= 1e-4  # same positions, same order
    assert model.config._attn_implementation != packing.ATTENTION  # put back after the packed forward


def test_a_packed_row_sees_only_itself(tiny_model_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    rows = make_rows(3, seed=5)
    changed = [rows[0], Row([7] * len(rows[1].ids), rows[1].mask, rows[1].sampler_logprobs, 1.0), rows[2]]
    out = []
    for group in (rows, changed):
        batch = collate(group, 0, torch.device("cpu"))
        with torch.no_grad():
            logprobs, _ = token_logprobs(
                model,
                batch.input_ids,
                batch.attention_mask,
                1.0,
                batch.mask,
                pack(group, torch.device("cpu")),
            )
        out.append(logprobs)
    # Row 1's tokens changed: rows 0 and 2, before and after it in the sequence, are untouched.
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][2], out[1][2])
    assert not torch.equal(out[0][1], out[1][1])


def test_no_padded_position_and_the_sum_of_squares_of_attention_work(
    tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the learner benchmark's lengths (scaled down 8x to keep the test short), every query-key pair
    the attention scores is counted where it is computed."""
    lengths = [n // 8 for n in BENCHMARK_LENGTHS]
    rows = [Row(list(range(3, n + 3)), [0] * (n // 2) + [1] * (n - n // 2), [-1.0] * n, 1.0) for n in lengths]
    scored: list[int] = []
    real_sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting(query: torch.Tensor, key: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        scored.append(query.shape[-2] * key.shape[-2])
        return real_sdpa(query, key, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(packing.F, "scaled_dot_product_attention", counting)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    packed = pack(rows, torch.device("cpu"))
    with torch.no_grad():
        hidden = packing.packed_hidden(model, packed)
    assert hidden.shape[1] == sum(lengths)  # every position computed is a real token: 0 padding
    per_layer = sum(scored) / model.config.num_hidden_layers
    squares = sum(n * n for n in lengths)
    assert per_layer <= 1.05 * squares
    assert per_layer == squares == attention_work(lengths, packed=True)
    # What the padded path computes for the same rows, in the learner's micro-batches of 8,192 positions:
    padded = sum(attention_work([lengths[i] for i in b], packed=False) for b in micro_batches(lengths, 8192))
    assert padded > 1.5 * squares


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean"])
def test_a_packed_step_has_the_padded_steps_gradients(tiny_model_path: Path, loss_agg: str) -> None:
    rows = make_rows(10, seed=1)

    def learner(packed: bool) -> Learner:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
        config = LearnerConfig(
            lr=1e-3, micro_batch_tokens=300, grad_clip=1e9, packing=packed, loss_agg=loss_agg
        )  # type: ignore[arg-type]
        return Learner(model, config, pad_id=0, temperature=0.9)

    padded, packed = learner(False), learner(True)
    padded_metrics = padded.accumulate_grpo(rows)
    packed_metrics = packed.accumulate_grpo(rows)
    assert packed_metrics["loss"] == pytest.approx(padded_metrics["loss"], rel=1e-5)
    a, b = gradients(padded), gradients(packed)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-6, msg=name)
    # The packed micro-batches hold more rows: their budget counts real tokens only.
    lengths = [len(r.ids) for r in rows]
    assert len(micro_batches(lengths, 300, packed=True)) < len(micro_batches(lengths, 300))
