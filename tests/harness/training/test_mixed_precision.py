"""bfloat16 compute with float32 master weights (learner `dtype: bfloat16`, `mixed_precision: master`), on
the real tiny model on the CPU: the model computes in a bfloat16 copy made once per step, AdamW steps
float32 weights, and two FSDP processes (MixedPrecisionPolicy) take the one-process step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM

from harness.training.learner import Learner, LearnerConfig
from tests.harness.training.test_learner import make_rows


def learner(path: Path, **settings: object) -> Learner:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path)
    config = LearnerConfig(lr=1e-3, micro_batch_tokens=200, grad_clip=1e9, **settings)  # type: ignore[arg-type]
    return Learner(model, config, pad_id=0, temperature=0.9)


def test_the_model_computes_in_bfloat16_and_adamw_steps_float32_masters(tiny_model_path: Path) -> None:
    full, half = learner(tiny_model_path), learner(tiny_model_path, dtype="bfloat16")
    assert half.master is not None and half.trained is half.master
    assert {p.dtype for p in half.model.parameters()} == {torch.bfloat16}
    stepped = {p for group in half.optimizer.param_groups for p in group["params"]}
    assert stepped == set(half.master.parameters()) and {p.dtype for p in stepped} == {torch.float32}
    before = {n: p.detach().clone() for n, p in half.master.named_parameters()}
    rows = make_rows(8)
    expected, got = full.grpo_step(rows), half.grpo_step(rows)
    assert got["loss"] == pytest.approx(expected["loss"], rel=0.05, abs=1e-3)
    for (name, kept), computed in zip(half.master.named_parameters(), half.model.parameters(), strict=True):
        assert not torch.equal(kept, before[name]), name  # the step moved every master weight ...
        assert torch.equal(computed, kept.to(torch.bfloat16)), name  # ... and the bf16 copy is made from it
        assert computed.grad is None and kept.grad is None
    # A step of lr 1e-3 is below bfloat16's resolution for most weights near 1: only the masters keep it.
    assert all(v.dtype == torch.float32 for v in half.full_state_dict().values())


def _rank_main(rank: int, world: int, init_file: str, path: str, out: str) -> None:
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    try:
        sharded = learner(Path(path), dtype="bfloat16", parallel="fsdp")
        computed: list[torch.dtype] = []
        mlp = sharded.model.get_decoder().layers[0].mlp  # type: ignore[operator, union-attr]
        mlp.register_forward_hook(lambda _module, _args, output: computed.append(output.dtype))
        metrics = sharded.grpo_step(make_rows(11))
        weights = sharded.full_state_dict()
        if rank == 0:
            torch.save({"weights": weights, "metrics": metrics, "computed": set(computed)}, out)
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()


def test_fsdp_keeps_float32_shards_and_takes_the_one_process_step(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    single = learner(tiny_model_path, dtype="bfloat16")
    expected = single.grpo_step(make_rows(11))
    out = tmp_path / "step.pt"
    mp.start_processes(
        _rank_main, args=(2, str(tmp_path / "init"), str(tiny_model_path), str(out)), nprocs=2, join=True,
        start_method="spawn",
    )  # fmt: skip
    two = torch.load(out, weights_only=False)
    assert two["computed"] == {torch.bfloat16}  # the gathered shards computed in bfloat16
    assert two["metrics"]["loss"] == pytest.approx(expected["loss"], rel=0.02, abs=1e-4)
    one = single.full_state_dict()
    assert all(two["weights"][name].dtype == torch.float32 for name in one)
    # bfloat16 sums in another order, and AdamW's first step is about lr * sign(g): weights whose gradient
    # is ~0 in exact arithmetic (k_proj's bias: softmax ignores a shift of every key) step either way.
    close = sum(int(torch.isclose(two["weights"][n], v, rtol=0, atol=1e-4).sum()) for n, v in one.items())
    assert close / sum(v.numel() for v in one.values()) > 0.98
