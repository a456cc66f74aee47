"""Does training work on a GPU? The parts of `harness train` that touch the device, on the tiny model.

    python benchmarks/gpu_train_check.py [--device cuda|cpu|auto|cuda:N] [--json PATH]

`harness train` needs sandboxes for its rollouts, which a GPU machine may not have, so this drives its
device-facing parts directly, as `train` does with `device=cuda`: the tiny model (`policies/tiny.py`,
built here, nothing downloaded) sampled by `HFPolicy` on the device; rows made from those generations
(prompt masked out, advantages of both signs); the learner in float32 and with bfloat16 autocast
(`learner.dtype`); a checkpoint written and resumed from (`harness/training/checkpoint.py`); and the new weights
handed back to the sampler. Checks, each PASS or FAIL:

- every parameter of sampler and learner is on the device;
- the learner's log-probs of the sampled tokens (its teacher-forced forward pass inside `grpo_step`) match
  the sampler's: within 1e-3 in float32, and within 0.05 (mean 0.01) with bfloat16 autocast;
- one `grpo_step` with bfloat16 autocast changes every parameter and has a finite gradient norm;
- the checkpoint resumes to the same weights and optimizer state, on the device;
- the sampler takes the new weights and samples on.

Exits 1 if any check fails. `--device cpu` runs the same on the CPU (bfloat16 autocast is then off: the
learner's CPU path is float32). It imports torch, transformers, pydantic, pyyaml, rich and our packages
only, so it runs where those are installed (benchmarks/device_env.sh prepares a bare GPU machine).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
import transformers
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from harness.training.checkpoint import load_checkpoint, optimizer_state, save_checkpoint
from harness.training.distributed import resolve_device
from harness.training.learner import Learner, LearnerConfig, Row
from policies.base import SamplingParams
from policies.hf import HFPolicy
from policies.tiny import build_tiny_model

PROMPTS = [
    "def add(a, b):\n    return",
    "The test fails because",
    "<tool_call>",
    "I will read the file first",
]
TEMPERATURE = 0.8
NEW_TOKENS = 48


@dataclass
class Check:
    name: str
    passed: bool
    value: str
    limit: str


def rows_from(policy: HFPolicy) -> list[Row]:
    """One row per prompt: the prompt (mask 0) and what the policy sampled after it (mask 1)."""
    rows = []
    for i, text in enumerate(PROMPTS):
        prompt = policy.tokenizer.encode(text, add_special_tokens=False)
        params = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=TEMPERATURE, seed=i)
        out = policy.generate(prompt, params)
        ids = prompt + out.ids
        mask = [0] * len(prompt) + [1] * len(out.ids)
        logprobs = [0.0] * len(prompt) + out.logprobs
        rows.append(Row(ids, mask, logprobs, advantage=(-1.0) ** i, source=(f"prompt-{i}", 0)))
    return rows


def learner_on(path: Path, device: str, dtype: Literal["float32", "bfloat16"]) -> Learner:
    model = HFPolicy(path, device=device).model
    config = LearnerConfig(lr=1e-3, dtype=dtype, grad_clip=1e9)
    return Learner(model, config, pad_id=0, temperature=TEMPERATURE)


def logprob_gap(learner: Learner, rows: list[Row]) -> tuple[float, float]:
    """Max and mean |learner - sampler| log-prob over the sampled tokens, after the learner's step."""
    gaps = []
    for row in rows:
        assert row.source is not None
        sampled = [lp for lp, m in zip(row.sampler_logprobs[1:], row.mask[1:], strict=True) if m]
        learned = learner.learner_logprobs[row.source]
        gaps += [abs(a - b) for a, b in zip(learned, sampled, strict=True)]
    return max(gaps), sum(gaps) / len(gaps)


def on_device(model: torch.nn.Module, device: torch.device) -> bool:
    return all(p.device == device for p in model.parameters())


def run_checks(setting: str, work: Path) -> tuple[torch.device, list[Check]]:
    device = resolve_device(setting)
    checks: list[Check] = []
    path = build_tiny_model(work / "model")
    sampler = HFPolicy(path, device=str(device), seed=0)
    rows = rows_from(sampler)
    checks.append(Check("sampler on the device", on_device(sampler.model, device), str(device), str(device)))

    full = learner_on(path, str(device), "float32")
    full.grpo_step(rows)
    worst, mean = logprob_gap(full, rows)
    checks.append(Check("float32 learner = sampler log-probs", worst <= 1e-3, f"max {worst:.2e}", "max 1e-3"))

    half = learner_on(path, str(device), "bfloat16")
    checks.append(Check("learner on the device", on_device(half.model, device), str(device), str(device)))
    before = {n: p.detach().clone() for n, p in half.model.named_parameters()}
    metrics = half.grpo_step(rows)
    worst, mean = logprob_gap(half, rows)
    checks.append(
        Check(
            "bfloat16 learner ~ sampler log-probs",
            worst <= 0.05 and mean <= 0.01,
            f"max {worst:.2e} mean {mean:.2e}",
            "max 5e-2 mean 1e-2",
        )
    )
    unchanged = [n for n, p in half.model.named_parameters() if torch.equal(p, before[n])]
    grad_norm = metrics["grad_norm"]
    checks.append(
        Check(
            "grpo_step moves every parameter",
            not unchanged and 0 < grad_norm < float("inf"),
            f"{len(unchanged)} unchanged, grad_norm {grad_norm:.3g}",
            "0 unchanged, finite grad_norm",
        )
    )

    saved = save_checkpoint(
        work / "checkpoints",
        1,
        half.model,
        sampler.tokenizer,
        optimizer_state(half.model, half.optimizer),
        {},
    )
    resumed = learner_on(saved / "model", str(device), "bfloat16")
    state = load_checkpoint(saved, resumed.model, resumed.optimizer)
    pairs = zip(half.model.state_dict().values(), resumed.model.state_dict().values(), strict=True)
    weights_equal = all(torch.equal(a, b) for a, b in pairs)
    params = zip(half.model.parameters(), resumed.model.parameters(), strict=True)
    moments = [(half.optimizer.state[p], resumed.optimizer.state[q]) for p, q in params]
    moments_equal = all(torch.equal(a["exp_avg_sq"], b["exp_avg_sq"]) for a, b in moments)
    moments_here = all(b["exp_avg"].device == device for _, b in moments)
    checks.append(
        Check(
            "checkpoint resumes on the device",
            state["step"] == 1 and weights_equal and moments_equal and moments_here,
            f"weights {'=' if weights_equal else '!='}, optimizer {'=' if moments_equal else '!='}, "
            f"on {'the device' if moments_here else 'another device'}",
            "equal, on the device",
        )
    )

    sampler.load_state_dict({k: v.detach().cpu() for k, v in half.model.state_dict().items()}, version=1)
    again = sampler.generate(
        rows[0].ids[:4], SamplingParams(max_new_tokens=8, temperature=TEMPERATURE, seed=0)
    )
    checks.append(
        Check(
            "sampler takes the new weights",
            again.policy_version == 1 and len(again.ids) > 0,
            f"version {again.policy_version}",
            "version 1",
        )
    )
    return device, checks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="auto, cpu, cuda or cuda:N (default: cuda)")
    parser.add_argument("--json", type=Path, help="write the report as JSON here")
    args = parser.parse_args()
    console = Console()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as work:
        device, checks = run_checks(args.device, Path(work))
    passed = all(c.passed for c in checks)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    table = Table(title=f"harness train on {device} ({name})")
    for column in ("check", "result", "value", "limit"):
        table.add_column(column)
    for c in checks:
        table.add_row(c.name, "[green]PASS[/]" if c.passed else "[red]FAIL[/]", c.value, c.limit)
    console.print(table)
    seconds = time.monotonic() - started
    console.print(
        f"{'PASS' if passed else 'FAIL'}: {sum(c.passed for c in checks)}/{len(checks)} in {seconds:.0f}s"
    )
    if args.json is not None:
        report = {
            "device": str(device),
            "device_name": name,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "passed": passed,
            "seconds": round(seconds, 1),
            "checks": [asdict(c) for c in checks],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
