"""Activation checkpointing chosen by memory (harness/training/memory.py): the arithmetic on a case worked
by hand, and the learner checkpointing the layers it chose on the real tiny model, with the same
gradients as without."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from harness.training.learner import Learner, LearnerConfig
from harness.training.memory import LayerShape, activation_bytes, checkpoint_every, layer_values_per_token
from tests.harness.training.test_learner import gradients, make_rows

SHAPE = LayerShape(hidden=4, intermediate=8, layers=4)


def test_the_activation_arithmetic() -> None:
    # 10 * 4 + 4 * 8 = 72 values a token per layer. 10 tokens at 2 bytes: whole, 10 * 2 * 4 * 72 = 5760.
    # Every 2nd layer (0 and 2) keeps its input only: 2 * 4 + 2 * 72 + 72 (the layer being recomputed) =
    # 224 -> 4480. Every layer: 4 * 4 + 72 = 88 -> 1760. Every 4th (layer 0 only): 4 + 3 * 72 + 72 = 292
    # -> 5840, more than none at all: one checkpointed layer saves less than the recompute buffer costs.
    assert layer_values_per_token(SHAPE) == 72
    assert activation_bytes(SHAPE, 10, 2, None) == 5760
    assert activation_bytes(SHAPE, 10, 2, 2) == 4480
    assert activation_bytes(SHAPE, 10, 2, 1) == 1760
    assert activation_bytes(SHAPE, 10, 2, 4) == 5840


def test_the_least_checkpointing_that_fits() -> None:
    assert checkpoint_every(SHAPE, 10, 2, budget_bytes=5800) is None  # 5760 fits whole
    assert checkpoint_every(SHAPE, 10, 2, budget_bytes=5000) == 3  # every 3rd: layers 0 and 3, 4480
    assert checkpoint_every(SHAPE, 10, 2, budget_bytes=2000) == 1
    assert checkpoint_every(SHAPE, 10, 2, budget_bytes=100) == 1  # nothing fits: the least memory there is


def flags(learner: Learner) -> list[bool]:
    return [bool(layer.gradient_checkpointing) for layer in learner.model.get_decoder().layers]  # type: ignore[operator, union-attr]


def test_the_learner_checkpoints_the_layers_it_chose_and_gets_the_same_gradients(
    tiny_model_path: Path,
) -> None:
    def learner(**settings: object) -> Learner:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
        return Learner(model, LearnerConfig(lr=1e-3, grad_clip=1e9, **settings), pad_id=0)  # type: ignore[arg-type]

    plain = learner()
    layers = len(flags(plain))
    assert plain.checkpoint_every is None and not any(flags(plain))
    every = learner(activation_checkpointing="every", checkpoint_every=2)
    assert flags(every) == [i % 2 == 0 for i in range(layers)]
    assert flags(learner(activation_checkpointing=True)) == [True] * layers  # an older config's `true`
    assert learner(activation_checkpointing="auto", activation_memory_fraction=1e-12).checkpoint_every == 1
    assert learner(activation_checkpointing="auto", activation_memory_fraction=1.0).checkpoint_every is None
    rows = make_rows(6)
    plain.accumulate_grpo(rows)
    every.accumulate_grpo(rows)
    a, b = gradients(plain), gradients(every)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-7, msg=name)
