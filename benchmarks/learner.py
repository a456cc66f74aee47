"""Learner throughput, ours against TRL's GRPO loss path, on the same model and the same batch, at two shapes.

    .venv/bin/python benchmarks/learner.py [--quick] [--shapes tiny,qwen2.5-0.5b-width] [--json PATH] [--threads N]

One optimizer step (forward, backward, gradient clip, AdamW) over one batch of segments whose lengths
are spread evenly over a range, each a prompt (loss mask 0) followed by model tokens (loss mask 1), on a
randomly initialised Qwen2, float32 on the CPU, both paths without activation checkpointing and with the
same learning rate. Two shapes, one after the other (`SHAPES`):

- `tiny`: hidden 128, 2 layers, vocabulary 2,048 (0.9 M parameters); 20 segments of 256-4,096 tokens.
- `qwen2.5-0.5b-width`: Qwen2.5-0.5B's hidden size (896), heads (14 and 2), MLP (4,864) and vocabulary
  (151,936) with 2 of its layers (166 M parameters, most of them the tied LM head); 8 segments of
  128-768 tokens. The ratio users should expect is this one: at real widths the LM head and the MLPs
  dominate, not the attention and the per-call overhead that a tiny model magnifies.

- ours: `Learner.grpo_step`: rows sorted by length and cut into micro-batches under a token budget, each
  micro-batch's rows packed end to end (no padding; attention inside each row: `packing: true`, the
  default).
- ours, padded: the same with `packing: false`: each micro-batch padded to its longest row.
- TRL 1.16 (`pip install -e '.[bench]'`): a real `GRPOTrainer` on its own copy of the same weights,
  loss_type "dapo" (its default; token-mean over the step's tokens, as ours). The generation batch is
  laid out as `_generate_and_score_completions` lays it out after generating (prompts left-padded and
  completions right-padded over the whole generation batch, with `trl.trainer.utils.pad`), shuffled and
  split into micro-batches of `per_device_train_batch_size` sequences by TRL's `shuffle_sequence_dict`
  and `split_tensor_dict`, as `_prepare_inputs` does, and each micro-batch goes through the trainer's
  own `training_step` (`GRPOTrainer._compute_loss` with its fused LM head, `accelerator.backward`);
  then, as the Trainer's inner loop does, `_clip_grad_norm` and the trainer's optimizer. Only the
  generation is skipped: `_prepare_inputs` hands the prepared micro-batch through.

Both paths take one warm-up step on a short batch first. Then they alternate, the one that goes first
switching every repetition, so background load weighs on both alike. Throughput is real tokens (prompt
and model tokens, no padding) per second of the whole step, the median of the timed steps. The issue's
target, ours at least 1.5 times TRL's, is printed as PASS / FAIL, and the exit status is 1 when it fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is made locally; never wait on a hub

import psutil
import torch
from rich.console import Console
from rich.table import Table
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from harness.training.learner import Learner, LearnerConfig, Row, micro_batches
from harness.training.packing import attention_work
from policies.tiny import build_tiny_model

TARGET_RATIO = 1.5
TRL_MICRO_BATCH = 4
"""TRL's `per_device_train_batch_size`, sequences per micro-batch."""
LR = 1e-6
THREADS = 1
"""On a 2-core host shared with other jobs, two intra-op threads made steps 2-4x slower and erratic (each
parallel region waits for a descheduled thread); one thread is steady. `--threads 2` on a quiet host."""

console = Console(width=max(Console().width, 110))


@dataclass(frozen=True)
class Plan:
    segments: int
    """A multiple of TRL_MICRO_BATCH: TRL splits the generation batch evenly."""
    min_len: int
    max_len: int
    reps: int
    """Timed steps per path."""


@dataclass(frozen=True)
class Shape:
    """A Qwen2 model to measure on, with random weights, and the batches it is measured on."""

    name: str
    model: dict[str, int]
    """vocab_size, hidden_size, intermediate_size, layers, heads, kv_heads."""
    micro_batch_tokens: int
    """Our token budget per micro-batch: the sum of the rows' lengths packed, rows x longest row padded."""
    full: Plan
    quick: Plan


TINY = Shape(
    "tiny",
    {
        "vocab_size": 2048,
        "hidden_size": 128,
        "intermediate_size": 512,
        "layers": 2,
        "heads": 2,
        "kv_heads": 1,
    },
    8192,  # two rows of 4,096
    Plan(segments=20, min_len=256, max_len=4096, reps=3),
    Plan(segments=12, min_len=256, max_len=3072, reps=2),
)
"""Head size 64 as in real models; two layers keep a full run within ~4 minutes on 2 cores."""
QWEN_WIDTH = Shape(
    "qwen2.5-0.5b-width",
    {
        "vocab_size": 151936,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "layers": 2,
        "heads": 14,
        "kv_heads": 2,
    },
    2048,  # the logits of 2,048 positions over 151,936 ids, with their gradient, are about 2.5 GB
    Plan(segments=8, min_len=128, max_len=768, reps=2),
    Plan(segments=4, min_len=128, max_len=512, reps=1),
)
"""Qwen2.5-0.5B's width, heads, MLP and vocabulary (its LM head, 136 M parameters, is most of the work)
with 2 of its 24 layers, so a step fits a 2-core host: 166 M parameters."""
SHAPES = {shape.name: shape for shape in (TINY, QWEN_WIDTH)}


@dataclass(frozen=True)
class Segment:
    ids: list[int]
    prompt_len: int
    """Tokens before the model's part: loss mask 0."""
    sampler_logprobs: list[float]
    """The sampler's log-prob of each model token (0 on the prompt)."""
    advantage: float


@dataclass
class PathResult:
    name: str
    micro_batches: int
    computed_tokens: int
    """Rows x width summed over micro-batches: what the model runs on, padding included."""
    step_s: list[float]
    median_s: float
    real_tokens_per_s: float
    model_tokens_per_s: float


@dataclass
class Results:
    date: str
    machine: dict[str, str]
    plan: Plan
    shape: str
    model: dict[str, int]
    parameters: int
    lengths: list[int]
    real_tokens: int
    """Prompt and model tokens, no padding."""
    model_tokens: int
    """Loss-mask-1 tokens."""
    ours: PathResult
    padded: PathResult
    """Ours with `packing: false`."""
    trl: PathResult
    trl_local_tokens: int
    """What TRL's micro-batches would compute, each padded only to its own longest prompt and completion."""
    ratio: float
    """Ours over TRL in real tokens per second, from the median step times."""
    packing_ratio: float
    """Ours packed over ours padded, the same way."""
    attention_work: dict[str, int]
    """Query-key pairs scored per attention layer and head: packed, padded."""
    ratios: list[float]
    """The same from each repetition's pair of adjacent steps: how much the host's load moved it."""
    passed: bool


def build_model(path: Path, shape: Shape) -> Path:
    """The tiny model's tokenizer (2,048 ids; a larger vocabulary is padded beyond it, as Qwen's own is)
    and a model of `shape` with weights drawn from seed 0."""
    m = shape.model
    build_tiny_model(path, seed=0, hidden_size=m["hidden_size"], layers=m["layers"], heads=m["heads"])
    config = AutoConfig.from_pretrained(path)
    config.vocab_size, config.intermediate_size = m["vocab_size"], m["intermediate_size"]
    config.num_key_value_heads = m["kv_heads"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).save_pretrained(path)
    return path


# ---- the batch -------------------------------------------------------------------------------------


def make_segments(plan: Plan, vocab_size: int, seed: int = 0) -> list[Segment]:
    """Lengths evenly spread over [min_len, max_len] in random order, prompts of 10-50 % of each."""
    rng = random.Random(seed)
    step = (plan.max_len - plan.min_len) / max(1, plan.segments - 1)
    lengths = [round(plan.min_len + i * step) for i in range(plan.segments)]
    rng.shuffle(lengths)
    generator = torch.Generator().manual_seed(seed)
    segments = []
    for n in lengths:
        prompt_len = round(n * rng.uniform(0.1, 0.5))
        ids = torch.randint(8, vocab_size, (n,), generator=generator).tolist()  # clear of the special tokens
        sampled = -torch.empty(n - prompt_len).exponential_(generator=generator)  # (n - prompt_len,)
        logprobs = [0.0] * prompt_len + sampled.tolist()
        segments.append(Segment(ids, prompt_len, logprobs, rng.choice((-1.0, 1.0)) * rng.uniform(0.2, 1.0)))
    return segments


def our_rows(segments: list[Segment]) -> list[Row]:
    return [
        Row(s.ids, [0] * s.prompt_len + [1] * (len(s.ids) - s.prompt_len), s.sampler_logprobs, s.advantage)
        for s in segments
    ]


# ---- TRL ---------------------------------------------------------------------------------------------


def trl_trainer(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, plan: Plan, out: Path) -> Any:
    """A GRPOTrainer as a user would make one: one optimizer step per generation batch, like ours."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    steps = plan.segments // TRL_MICRO_BATCH
    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=TRL_MICRO_BATCH,
        gradient_accumulation_steps=steps,
        num_generations=TRL_MICRO_BATCH,
        max_completion_length=plan.max_len,
        learning_rate=LR,
        use_cpu=True,
        bf16=False,  # float32, as our learner on the CPU
        activation_checkpointing=False,  # TRL's default is on; ours is off
        report_to="none",
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=no_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["-"] * plan.segments}),
        processing_class=tokenizer,
    )
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = steps  # set by the Trainer's loop; the dapo loss reads it
    # The micro-batches come generated and split; TRL's `_prepare_inputs` would generate them.
    trainer._prepare_inputs = lambda inputs: inputs  # type: ignore[method-assign]
    return trainer


def no_reward(completions: list[Any], **_: Any) -> list[float | None]:
    """Rewards are never computed here: the batch comes with its advantages."""
    return [0.0] * len(completions)


def trl_generation_batch(segments: list[Segment], pad_id: int) -> dict[str, Any]:
    """What `_generate_and_score_completions` returns for these completions (no vLLM, no reference model)."""
    from trl.trainer.utils import pad

    prompts = [torch.tensor(s.ids[: s.prompt_len]) for s in segments]
    completions = [torch.tensor(s.ids[s.prompt_len :]) for s in segments]
    completion_mask = pad([torch.ones_like(c) for c in completions], padding_value=0, padding_side="right")
    return {
        "prompt_ids": pad(prompts, padding_value=pad_id, padding_side="left"),  # (B, P)
        "prompt_mask": pad([torch.ones_like(p) for p in prompts], padding_value=0, padding_side="left"),
        "completion_ids": pad(completions, padding_value=pad_id, padding_side="right"),  # (B, C)
        "completion_mask": completion_mask,  # (B, C)
        "advantages": torch.tensor([s.advantage for s in segments]),  # (B,)
        "num_items_in_batch": completion_mask.sum(),  # ()
    }


def trl_step(trainer: Any, segments: list[Segment], pad_id: int) -> tuple[int, int]:
    """One optimizer step as the Trainer's inner loop makes it.

    Returns the tokens computed (rows x (P + C) per micro-batch), and what they would be were each
    micro-batch padded only to its own longest prompt and longest completion.
    """
    from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

    batch: dict[str, Any] = shuffle_sequence_dict(trl_generation_batch(segments, pad_id))
    chunks: list[dict[str, Any]] = split_tensor_dict(batch, trainer.args.steps_per_generation)
    model = trainer.model
    for i, inputs in enumerate(chunks):
        trainer.accelerator.gradient_state._set_sync_gradients(i == len(chunks) - 1)
        trainer.training_step(model, inputs, batch["num_items_in_batch"])
    if trainer.args.max_grad_norm > 0:
        trainer._clip_grad_norm(model)
    trainer.optimizer.step()
    model.zero_grad()
    computed = local = 0
    for c in chunks:
        rows, width = c["prompt_ids"].shape[0], c["prompt_ids"].shape[1] + c["completion_ids"].shape[1]
        computed += rows * width
        local += rows * int(c["prompt_mask"].sum(1).max() + c["completion_mask"].sum(1).max())
    return computed, local


# ---- measurement and report ------------------------------------------------------------------------


def machine() -> dict[str, str]:
    return {
        "cpus": str(os.cpu_count()),
        "torch threads": str(torch.get_num_threads()),
        "memory": f"{psutil.virtual_memory().total / 2**30:.0f} GiB",
        "load average (1 min) at start": f"{os.getloadavg()[0]:.1f}",
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def path_result(
    name: str, n_micro: int, computed: int, times: list[float], real: int, model: int
) -> PathResult:
    median = statistics.median(times)
    return PathResult(name, n_micro, computed, times, median, real / median, model / median)


def measure(shape: Shape, plan: Plan) -> Results:
    import trl

    host = machine()
    torch.manual_seed(0)  # TRL's shuffle draws from the global generator
    with tempfile.TemporaryDirectory(prefix="bench-learner-") as tmp:
        path = build_model(Path(tmp) / "model", shape)
        tokenizer = AutoTokenizer.from_pretrained(path)
        pad_id = tokenizer.pad_token_id
        ours_model = AutoModelForCausalLM.from_pretrained(path)
        learner = Learner(
            ours_model, LearnerConfig(lr=LR, micro_batch_tokens=shape.micro_batch_tokens), pad_id
        )
        padded = Learner(
            AutoModelForCausalLM.from_pretrained(path),
            LearnerConfig(lr=LR, micro_batch_tokens=shape.micro_batch_tokens, packing=False),
            pad_id,
        )
        trainer = trl_trainer(AutoModelForCausalLM.from_pretrained(path), tokenizer, plan, Path(tmp) / "trl")
        parameters = sum(p.numel() for p in ours_model.parameters())

        segments = make_segments(plan, shape.model["vocab_size"])
        rows = our_rows(segments)
        warm = make_segments(replace(plan, min_len=64, max_len=256), shape.model["vocab_size"], seed=1)
        learner.grpo_step(our_rows(warm))
        padded.grpo_step(our_rows(warm))
        trl_step(trainer, warm, pad_id)

        steps: dict[str, Callable[[], Any]] = {
            "ours": lambda: learner.grpo_step(rows),
            "padded": lambda: padded.grpo_step(rows),
            "trl": lambda: trl_step(trainer, segments, pad_id),
        }
        times: dict[str, list[float]] = {name: [] for name in steps}
        trl_tokens = (0, 0)
        orders = [("ours", "padded", "trl"), ("trl", "padded", "ours"), ("padded", "trl", "ours")]
        for i in range(plan.reps):
            for name in orders[i % len(orders)]:
                t0 = time.perf_counter()
                value = steps[name]()
                times[name].append(time.perf_counter() - t0)
                if name == "trl":
                    trl_tokens = value
                console.print(f"[dim]step {i + 1}/{plan.reps} {name}: {times[name][-1]:.2f} s")
    host["load average (1 min) at end"] = f"{os.getloadavg()[0]:.1f}"

    lengths = [len(s.ids) for s in segments]
    real = sum(lengths)
    model_tokens = sum(len(s.ids) - s.prompt_len for s in segments)
    packed_batches = micro_batches(lengths, shape.micro_batch_tokens, packed=True)
    padded_batches = micro_batches(lengths, shape.micro_batch_tokens)
    ours = path_result("ours, packed", len(packed_batches), real, times["ours"], real, model_tokens)
    ours_padded = path_result(
        "ours, padded",
        len(padded_batches),
        sum(len(b) * lengths[b[0]] for b in padded_batches),  # the first row of each is its longest
        times["padded"],
        real,
        model_tokens,
    )
    work = {
        "packed": sum(attention_work([lengths[i] for i in b], packed=True) for b in packed_batches),
        "padded": sum(attention_work([lengths[i] for i in b], packed=False) for b in padded_batches),
    }
    theirs = path_result(
        f"TRL {trl.__version__}",
        plan.segments // TRL_MICRO_BATCH,
        trl_tokens[0],
        times["trl"],
        real,
        model_tokens,
    )
    ratio = ours.real_tokens_per_s / theirs.real_tokens_per_s
    return Results(
        date=datetime.now().isoformat(timespec="seconds"),
        machine=host,
        plan=plan,
        shape=shape.name,
        model=shape.model,
        parameters=parameters,
        lengths=lengths,
        real_tokens=real,
        model_tokens=model_tokens,
        ours=ours,
        padded=ours_padded,
        trl=theirs,
        trl_local_tokens=trl_tokens[1],
        ratio=ratio,
        packing_ratio=ours.real_tokens_per_s / ours_padded.real_tokens_per_s,
        attention_work=work,
        ratios=[t / o for o, t in zip(times["ours"], times["trl"], strict=True)],
        passed=ratio >= TARGET_RATIO,
    )


def print_report(res: Results) -> None:
    shape = ", ".join(f"{k} {v}" for k, v in res.model.items())
    console.print(
        f"\n[bold]Learner benchmark, {res.shape}[/] {res.date}: {len(res.lengths)} segments of "
        f"{min(res.lengths):,}-{max(res.lengths):,} tokens, {res.real_tokens:,} real tokens "
        f"({res.model_tokens:,} with loss mask 1); Qwen2 {shape}: {res.parameters / 1e6:.2f} M parameters"
    )
    console.print(", ".join(f"{k} {v}" for k, v in res.machine.items()))
    table = Table(
        title="One optimizer step (forward, backward, clip, AdamW); median (min-max) of the timed steps"
    )
    for col in ("", "micro-batches", "tokens computed", "padding", "step s", "real tok/s", "mask-1 tok/s"):
        table.add_column(col, justify="left" if not col else "right")
    for r in (res.ours, res.padded, res.trl):
        table.add_row(
            r.name,
            str(r.micro_batches),
            f"{r.computed_tokens:,}",
            f"{1 - res.real_tokens / r.computed_tokens:.0%}",
            f"{r.median_s:.2f} ({min(r.step_s):.2f}-{max(r.step_s):.2f})",
            f"{r.real_tokens_per_s:,.0f}",
            f"{r.model_tokens_per_s:,.0f}",
        )
    console.print(table)
    console.print(
        f"TRL pads over the whole generation batch; padded per micro-batch only, it would compute "
        f"{res.trl_local_tokens:,} tokens ({1 - res.real_tokens / res.trl_local_tokens:.0%} padding)."
    )
    squares = sum(n * n for n in res.lengths)
    console.print(
        f"Attention work per layer and head (query-key pairs): packed {res.attention_work['packed']:,}"
        f" ({res.attention_work['packed'] / squares:.2f}x the sum of squared lengths), padded"
        f" {res.attention_work['padded']:,} ({res.attention_work['padded'] / squares:.2f}x). Packed over"
        f" padded, real tokens per second: {res.packing_ratio:.2f}x."
    )
    verdict = "[green]PASS" if res.passed else "[red]FAIL"
    pairs = ", ".join(f"{r:.2f}x" for r in res.ratios)
    console.print(
        f"ours / TRL, real tokens per second: {res.ratio:.2f}x (target ≥ {TARGET_RATIO:g}x) {verdict}; "
        f"repetition by repetition {pairs}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller, shorter batch: about a minute")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"of {', '.join(SHAPES)} (default: all, one after the other)",
    )
    parser.add_argument(
        "--threads", type=int, default=THREADS, help="torch's intra-op threads (default: %(default)s)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        import trl  # noqa: F401
    except ImportError:
        console.print("[red]TRL is needed: .venv/bin/pip install -e '.[bench]'")
        return 2
    results = []
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        results.append(measure(shape, shape.quick if args.quick else shape.full))
        print_report(results[-1])
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
