"""Learner throughput, model FLOPs utilisation and peak memory on one GPU, packed and padded side by side.

    .venv/bin/python benchmarks/gpu_learner.py [--tiny] [--shapes 0.5b,1.5b] [--packing on,off]
        [--peak-tflops N] [--bf16-weights] [--micro-batch-tokens N] [--checkpointing auto|all|off]
        [--profile] [--json PATH]

The models have Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 query and 2 key-value heads, MLP 4864,
vocabulary 151,936, tied embeddings) and Qwen2.5-1.5B's (hidden 1536, 28 layers, 12 and 2 heads, MLP
8960), with random weights: nothing is downloaded. For each shape and each of packing on and off (one
after the other, in one run), our `Learner` trains it as a run would (`dtype="bfloat16"`: float32 weights
and AdamW, bfloat16 autocast; activation checkpointing chosen by the memory the micro-batch needs,
`auto`) on one batch of segments whose lengths are spread evenly up to 8,192 tokens. After one warm-up
step, each timed step is one `grpo_step` (forward, backward, clip, AdamW).

    tokens/s = real tokens of the batch (no padding) / step time
    MFU      = 6 x parameters x real tokens / step time / the GPU's peak dense bfloat16 FLOP/s

6N per token counts the matrix products of forward and backward (Kaplan et al. 2020, "Scaling Laws",
section 2.1), not attention's T^2 term nor the recomputation of activation checkpointing; the line
"with attention" adds 6 x layers x hidden x T per token of a segment of length T (causal: half of
the 12 x layers x hidden x T of PaLM's MFU, Chowdhery et al. 2022, appendix B). The peak comes from
PEAK_TFLOPS by the device's name, or from --peak-tflops.

Without a GPU it prints so and exits 0; `--tiny` runs a small shape on whatever device there is (the
CPU here), a smoke test of the script itself.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
from learner import Plan, make_segments, our_rows  # benchmarks/learner.py
from rich.console import Console
from rich.table import Table
from transformers import Qwen2Config, Qwen2ForCausalLM

from harness.training.learner import Learner, LearnerConfig, micro_batch_positions, micro_batches
from harness.training.packing import attention_work


@dataclass(frozen=True)
class Shape:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int


QWEN25_05B = Shape(
    vocab_size=151936, hidden_size=896, intermediate_size=4864, layers=24, heads=14, kv_heads=2
)
QWEN25_15B = Shape(
    vocab_size=151936, hidden_size=1536, intermediate_size=8960, layers=28, heads=12, kv_heads=2
)
SHAPES = {"0.5b": QWEN25_05B, "1.5b": QWEN25_15B}
TINY = Shape(vocab_size=2048, hidden_size=64, intermediate_size=256, layers=2, heads=4, kv_heads=2)
FULL = Plan(segments=64, min_len=256, max_len=8192, reps=3)
SMOKE = Plan(segments=8, min_len=64, max_len=512, reps=2)

PEAK_TFLOPS = {
    "H200": 989.0,
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.0,  # SXM
    "A100": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
}
"""Dense bfloat16 tensor-core peak in TFLOP/s, from NVIDIA's data sheets. The first name found as whole
words in the device's name counts ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"), so the more
specific come first."""

console = Console(width=max(Console().width, 160))


@dataclass
class Results:
    device: str
    shape: Shape
    parameters: int
    weights: str
    packing: bool
    activation_checkpointing: str
    checkpoint_every: int | None
    """Every k-th layer checkpointed (1: all), None: none; `auto` chooses it."""
    micro_batch_tokens: int
    lengths: list[int]
    real_tokens: int
    computed_tokens: int
    """Positions the model computes: rows x longest row over the micro-batches padded, the real tokens
    packed."""
    attention_pairs: int
    """Query-key pairs one attention layer and head scores over the step."""
    micro_batches: int
    step_s: list[float]
    median_s: float
    tokens_per_s: float
    peak_tflops: float | None
    mfu: float | None
    """6N model FLOPs."""
    mfu_with_attention: float | None
    peak_memory_gib: float | None


def peak_tflops(device: torch.device, override: float | None) -> float | None:
    if override is not None:
        return override
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((tflops for key, tflops in PEAK_TFLOPS.items() if re.search(rf"\b{key}\b", name)), None)


def build_model(shape: Shape, device: torch.device, bf16_weights: bool) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    with device:
        model = Qwen2ForCausalLM(config)
    return model.bfloat16() if bf16_weights else model


def measure(
    shape: Shape,
    plan: Plan,
    device: torch.device,
    micro_batch_tokens: int,
    bf16_weights: bool,
    peak: float | None,
    packing: bool,
    checkpointing: Literal["off", "all", "auto"] = "auto",
    profile: bool = False,
) -> Results:
    model = build_model(shape, device, bf16_weights)
    config = LearnerConfig(
        micro_batch_tokens=micro_batch_tokens,
        dtype="bfloat16",
        activation_checkpointing=checkpointing,
        packing=packing,
    )
    learner = Learner(model, config, pad_id=0)
    parameters = sum(p.numel() for p in model.parameters())
    rows = our_rows(make_segments(plan, shape.vocab_size))
    lengths = [len(r.ids) for r in rows]
    batches = micro_batches(lengths, micro_batch_tokens, packing)

    def step() -> float:
        t0 = time.perf_counter()
        learner.grpo_step(rows)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    console.print(f"[dim]warm-up step: {step():.2f} s")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for i in range(plan.reps):
        times.append(step())
        console.print(f"[dim]step {i + 1}/{plan.reps}: {times[-1]:.2f} s")

    if profile:
        print_profile(step)
    median = statistics.median(times)
    real = sum(lengths)
    model_flops = 6 * parameters * real
    # 6 L d T per token of a segment of length T, T tokens per segment
    attention_flops = sum(6 * shape.layers * shape.hidden_size * n * n for n in lengths)
    return Results(
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        shape=shape,
        parameters=parameters,
        weights="bfloat16" if bf16_weights else "float32 (bfloat16 autocast)",
        packing=packing,
        activation_checkpointing=checkpointing,
        checkpoint_every=learner.checkpoint_every,
        micro_batch_tokens=micro_batch_tokens,
        lengths=lengths,
        real_tokens=real,
        computed_tokens=sum(micro_batch_positions(lengths, b, packing) for b in batches),
        attention_pairs=sum(attention_work([lengths[i] for i in b], packing) for b in batches),
        micro_batches=len(batches),
        step_s=times,
        median_s=median,
        tokens_per_s=real / median,
        peak_tflops=peak,
        mfu=model_flops / median / (peak * 1e12) if peak else None,
        mfu_with_attention=(model_flops + attention_flops) / median / (peak * 1e12) if peak else None,
        peak_memory_gib=torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
    )


def print_profile(step: Callable[[], float]) -> None:
    """One more step under torch.profiler: the operators that took the most device time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        step()
    sort_by = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort_by, row_limit=15, max_name_column_width=50), flush=True)


def print_report(results: list[Results]) -> None:
    first = results[0]
    console.print(
        f"\n[bold]GPU learner benchmark[/] on {first.device}: {len(first.lengths)} segments of "
        f"{min(first.lengths):,}-{max(first.lengths):,} tokens, {first.real_tokens:,} real tokens; "
        f"micro-batches of at most {first.micro_batch_tokens:,} positions; weights {first.weights}"
    )
    table = Table(title="one optimizer step, median (min-max) of the timed steps, side by side in one run")
    columns = ("model", "packing", "checkpointing", "micro-batches", "padding", "attention pairs",
               "step s", "tokens/s", "MFU 6N", "MFU +attn", "peak GiB")  # fmt: skip
    for col in columns:
        table.add_column(col, justify="left" if col in ("model", "packing", "checkpointing") else "right")
    for r in results:
        every = "none" if r.checkpoint_every is None else f"every {r.checkpoint_every}"
        table.add_row(
            f"{r.parameters / 1e9:.2f} B", "on" if r.packing else "off", f"{r.activation_checkpointing}: {every}",
            str(r.micro_batches), f"{1 - r.real_tokens / r.computed_tokens:.0%}", f"{r.attention_pairs:,}",
            f"{r.median_s:.2f} ({min(r.step_s):.2f}-{max(r.step_s):.2f})", f"{r.tokens_per_s:,.0f}",
            "-" if r.mfu is None else f"{r.mfu:.1%}",
            "-" if r.mfu_with_attention is None else f"{r.mfu_with_attention:.1%}",
            "-" if r.peak_memory_gib is None else f"{r.peak_memory_gib:.1f}",
        )  # fmt: skip
    console.print(table)
    if first.peak_tflops is None:
        console.print("MFU: no peak known for this device (give --peak-tflops)")
    else:
        console.print(f"MFU against {first.peak_tflops:g} TFLOP/s dense bfloat16")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a small shape on any device: a smoke test")
    parser.add_argument("--peak-tflops", type=float, help="the device's peak dense bfloat16 TFLOP/s")
    parser.add_argument("--bf16-weights", action="store_true", help="bfloat16 weights and AdamW state")
    parser.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=LearnerConfig().micro_batch_tokens,
        help="(default: %(default)s)",
    )
    parser.add_argument(
        "--checkpointing", choices=("auto", "all", "off"), default="auto", help="(default: %(default)s)"
    )
    parser.add_argument("--shapes", default="0.5b,1.5b", help="of 0.5b, 1.5b (default: %(default)s)")
    parser.add_argument("--packing", default="on,off", help="on, off or both (default: %(default)s)")
    parser.add_argument(
        "--profile", action="store_true", help="profile one more step, print the top operators"
    )
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    if torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    elif args.tiny:
        device = torch.device("cpu")
    else:
        console.print(
            "no GPU here: nothing to measure (--tiny runs a small shape on the CPU as a smoke test)"
        )
        return 0
    shapes = [TINY] if args.tiny else [SHAPES[name] for name in args.shapes.split(",")]
    plan = SMOKE if args.tiny else FULL
    peak = peak_tflops(device, args.peak_tflops)
    results = []
    for shape in shapes:
        for packing in [value == "on" for value in args.packing.split(",")]:
            console.print(f"[dim]{shape}, packing {'on' if packing else 'off'}")
            result = measure(
                shape, plan, device, args.micro_batch_tokens, args.bf16_weights, peak, packing,
                checkpointing=args.checkpointing, profile=args.profile,
            )  # fmt: skip
            results.append(result)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    print_report(results)
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
