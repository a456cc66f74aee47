"""Rollout throughput with and without Ray, and how much of the time the learner waits, sync against async.

    .venv/bin/python benchmarks/rollout_throughput.py [--episodes N] [--repeats N] [--steps N] [--json PATH]

Everything on this machine, bubblewrap sandboxes, the built-in suite, a local Ray cluster of 2 CPUs.

- Rollouts: episodes per minute of `scripted:gold` (the gold patch in a few tool calls) and of a tiny
  random `hf` model (`policies/tiny.py`; 4 turns of at most 32 tokens, so it never solves anything), in one process (`LocalRollouts`, 2 at a time)
  and on 2 Ray rollout workers (`harness/rollouts/cluster.py`, 1 episode at a time each). The same N episodes in
  each, the four runs interleaved and repeated (`--repeats`); the start-up (Ray actors, model load, first
  sandboxes, timed on 2 warm-up episodes) is reported apart from the steady rate.
- Learner idle fraction: `harness train` on the tiny model for a few steps, in sync and in async mode
  (in one process). Sync: the learner idles while the step's rollouts run, time_rollout_s /
  (time_rollout_s + time_learn_s). Async: it idles only while it waits for a batch, time_wait_s /
  (time_wait_s + time_learn_s). Step 0 (nothing to overlap yet) is left out.

Numbers are measured side by side in one run; the host may be shared, so read the ratios, not the digits.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from datetime import datetime
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import ray
from rich.console import Console
from rich.table import Table

from envs.sandbox import SandboxConfig
from harness.agent.loop import LoopConfig
from harness.rollouts.cluster import ClusterRollouts, start_local_ray
from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import LocalRollouts
from harness.training.train import TrainConfig, train
from policies.base import SamplingParams
from policies.spec import make_policy
from policies.tiny import build_tiny_model
from tasks.suite import load_suite

console = Console(width=max(Console().width, 110))


def rollout_config(policy: str, out: Path, address: str | None) -> RolloutConfig:
    return RolloutConfig.model_validate(
        {
            "suite": "builtin", "policy": policy, "concurrency": 2, "out": str(out),
            "loop": LoopConfig(max_turns=4 if policy.startswith("hf:") else 30),
            "sampling": SamplingParams(max_new_tokens=32, temperature=1.0),
            "sandbox": SandboxConfig(backend="bwrap"),
            "cluster": {"address": address, "workers": 2, "worker_concurrency": 1},
        }
    )  # fmt: skip


def timed_rollouts(policy: str, out: Path, episodes: int, with_ray: bool) -> dict[str, float]:
    """Seconds for `episodes` jobs once warm, and the seconds it took to get warm."""
    config = rollout_config(policy, out, "auto" if with_ray else None)
    tasks = load_suite("builtin")
    jobs = [(tasks[i % len(tasks)], i // len(tasks)) for i in range(episodes)]
    started = time.monotonic()
    if with_ray:
        with ClusterRollouts(config) as cluster:
            cluster.run_batch(jobs[:2], lambda _: None)  # both workers up and warm
            ready = time.monotonic() - started
            begun = time.monotonic()
            done = cluster.run_batch(jobs, lambda _: None)
            elapsed = time.monotonic() - begun
    else:
        local = LocalRollouts(make_policy(policy), config)
        try:
            local.run_batch(jobs[:2], lambda _: None)
            ready = time.monotonic() - started
            begun = time.monotonic()
            done = local.run_batch(jobs, lambda _: None)
            elapsed = time.monotonic() - begun
        finally:
            local.close()
    solved = sum(1 for t in done if t.grade and t.grade.correct == 1.0)
    return {"elapsed_s": elapsed, "ready_s": ready, "solved": solved, "n": len(done)}


def combined(runs: list[dict[str, float]]) -> dict[str, float]:
    """Episodes per minute over all repetitions together; the mean start-up time."""
    total = {key: sum(r[key] for r in runs) for key in runs[0]}
    return {
        "per_minute": 60 * total["n"] / total["elapsed_s"],
        "ready_s": total["ready_s"] / len(runs),
        "solved": total["solved"],
        "n": total["n"],
    }


def idle_fraction(model: Path, out: Path, mode: str, steps: int) -> dict[str, float]:
    config = TrainConfig.model_validate(
        {
            "model": str(model), "suite": "builtin", "out": str(out), "mode": mode, "steps": steps,
            "tasks_per_step": 2, "group_size": 2, "concurrency": 2,
            "loop": {"max_turns": 4}, "sampling": {"max_new_tokens": 32, "temperature": 1.0},
            "sandbox": {"backend": "bwrap"}, "learner": {"lr": 1e-4, "entropy_coef": 0.01},
        }
    )  # fmt: skip
    started = time.monotonic()
    metrics = train(config)[1:]
    waited = sum(m["time_wait_s" if mode == "async" else "time_rollout_s"] for m in metrics)
    learned = sum(m["time_learn_s"] for m in metrics)
    return {
        "idle": waited / (waited + learned),
        "learn_s_per_step": learned / len(metrics),
        "wall_s": time.monotonic() - started,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rollout-bench-"))
    model = build_tiny_model(root / "tiny")
    start_local_ray(num_cpus=2)
    runs: dict[str, list[dict[str, float]]] = {}
    try:
        for repeat in range(args.repeats):  # interleaved, so background load weighs on all alike
            for name, policy in (("scripted:gold", "scripted:gold"), ("hf tiny", f"hf:{model}")):
                for with_ray in (False, True):
                    key = f"{name}, {'2 Ray workers' if with_ray else 'one process'}"
                    out = root / f"{key.replace(' ', '_')}-{repeat}"
                    runs.setdefault(key, []).append(timed_rollouts(policy, out, args.episodes, with_ray))
                    console.print(key, runs[key][-1])
    finally:
        ray.shutdown()
    rates = {key: combined(r) for key, r in runs.items()}
    idle = {
        mode: idle_fraction(model, root / f"train-{mode}", mode, args.steps) for mode in ("sync", "async")
    }
    report(rates, idle, args.episodes * args.repeats)
    if args.json:
        facts = {"when": datetime.now().isoformat(), "machine": platform.platform(), "cpus": os.cpu_count()}
        args.json.write_text(json.dumps({**facts, "rollouts": rates, "learner_idle": idle}, indent=1))
    return 0


def report(rates: dict[str, dict[str, float]], idle: dict[str, dict[str, float]], episodes: int) -> None:
    table = Table(title=f"rollouts, {episodes} episodes each, bwrap, built-in suite")
    for column in ("", "episodes / min", "vs one process", "ready (s)", "solved"):
        table.add_column(column, justify="right" if column else "left")
    for key, r in rates.items():
        base = rates[key.replace("2 Ray workers", "one process")]["per_minute"]
        table.add_row(key, f"{r['per_minute']:.1f}", f"{r['per_minute'] / base:.2f}x", f"{r['ready_s']:.1f}",
                      f"{r['solved']:.0f}/{r['n']:.0f}")  # fmt: skip
    console.print(table)
    learner = Table(title="learner idle fraction, tiny model, steps after the first")
    for column in ("mode", "idle", "learn s / step", "wall s"):
        learner.add_column(column)
    for mode, v in idle.items():
        learner.add_row(mode, f"{v['idle']:.1%}", f"{v['learn_s_per_step']:.2f}", f"{v['wall_s']:.0f}")
    console.print(learner)


if __name__ == "__main__":
    raise SystemExit(main())
