"""Sampler and rollout throughput, and how much of the time the learner waits, sync against async.

    .venv/bin/python benchmarks/rollout_throughput.py [--episodes N] [--repeats N] [--steps N] [--json PATH]
                                                      [--only sampler|rollouts|learner] [--splits]

Everything on this machine, bubblewrap sandboxes, the built-in suite, a local Ray cluster of 2 CPUs.

- Sampler: sampled tokens per second of the in-process `hf` sampler on the tiny model, C clients at once
  (C = 1, 4, 8, 16), each asking for generations of `max_new_tokens` 128 one after another on the
  built-in tasks' real first prompts (system, tools, task: 600-900 ids), with the sampler decoding all
  live sequences together (`policies/batching.py`) against the same sampler one generation at a time
  (`batching=False`, the sampler before issue 35). Rounds interleaved, C and mode alternating.

- Rollouts: episodes per minute of `scripted:gold` (the gold patch in a few tool calls) and of a tiny
  random `hf` model (`policies/tiny.py`; 4 turns of at most 32 tokens, so it never solves anything), in one process (`LocalRollouts`, 2 at a time)
  and on 2 Ray rollout workers (`harness/rollouts/cluster.py`, 1 episode at a time each). The same N episodes in
  each, the four runs interleaved and repeated (`--repeats`); the start-up (Ray actors, model load, first
  sandboxes, timed on 2 warm-up episodes) is reported apart from the steady rate.
- Training steps: the training demo's GRPO run (`harness demo`'s step 4: 6 tasks x 6 rollouts a step,
  self-summaries, from the demo's warm start, made once here) for a few steps, in turn: sync sampling
  one generation at a time with 3 episodes at once and every rollout graded (the demo before issue 35),
  sync batched with 12 and grades of the same tree reused, learning the whole batch after its rollouts
  or each group as it is graded (`stream_groups`; every core for each side, the default, and one
  learner thread), async batched with 12. Wall time per step, and the learner's idle
  share, the wall time it did not spend learning over the whole wall time (1 - sum time_learn_s /
  wall; streamed, time_learn_s is the learner's busy time, during the rollouts or after). Step 0 is
  left out. `--splits` runs async mode instead with each
  split of the cores between the learner and the sampler (`threads.learner` / `threads.sampler`: all /
  all, half / half, all / 1, 1 / all).

Numbers are measured side by side in one run; the host may be shared, so read the ratios, not the digits.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import ray
from rich.console import Console
from rich.table import Table

from envs.sandbox import SandboxConfig
from harness.agent.loop import SYSTEM_PROMPT, LoopConfig
from harness.rollouts.cluster import ClusterRollouts, start_local_ray
from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import LocalRollouts
from harness.training.train import CpuThreads, train
from harness.training.train_demo import DemoConfig, grpo_config, summary_budget, warm_start
from policies.base import SamplingParams
from policies.chat_format import ChatFormat
from policies.cpu_threads import host_cores
from policies.hf import HFPolicy
from policies.spec import make_policy
from policies.tiny import build_tiny_model
from tasks.suite import load_suite
from tools import Toolbox

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


CLIENTS = (1, 4, 8, 16)


def real_prompts(policy: HFPolicy) -> list[list[int]]:
    """The built-in tasks' first prompts (system, tools, task), as an episode's first generation sees them."""
    fmt = ChatFormat(policy.tokenizer, policy.stop_ids())
    return [
        fmt.prompt_ids(
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task.prompt()}],
            Toolbox.for_task(task).schemas(),
        )
        for task in load_suite("builtin")
    ]


def sampled_per_second(policy: HFPolicy, prompts: list[list[int]], clients: int, batched: bool) -> float:
    """Sampled tokens per second with `clients` threads, each generating on two prompts in turn."""
    policy.batched = batched
    jobs = [(prompts[(c * 2 + k) % len(prompts)], c * 2 + k) for c in range(clients) for k in range(2)]
    params = [SamplingParams(max_new_tokens=128, temperature=1.0, seed=seed) for _, seed in jobs]
    begun = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        done = list(pool.map(lambda j: policy.generate(j[0], params[j[1]]), jobs))
    return sum(len(g.ids) for g in done) / (time.perf_counter() - begun)


def sampler_rates(model: Path, repeats: int) -> dict[str, dict[str, list[float]]]:
    """Per C, the tokens per second of each round, batched and one at a time, rounds interleaved."""
    policy = HFPolicy(model)
    assert policy.batched, "the tiny model must batch"
    prompts = real_prompts(policy)
    rates: dict[str, dict[str, list[float]]] = {str(c): {"batched": [], "serial": []} for c in CLIENTS}
    for repeat in range(repeats):
        for clients in CLIENTS:
            for mode in ("serial", "batched") if repeat % 2 == 0 else ("batched", "serial"):
                rate = sampled_per_second(policy, prompts, clients, mode == "batched")
                rates[str(clients)][mode].append(rate)
                console.print(f"sampler C={clients} {mode}: {rate:.0f} tokens/s")
    return rates


Row = tuple[str, str, int, int, bool, dict[str, int | None], bool]
CORES = host_cores()
TRAINING: tuple[Row, ...] = (  # name, mode, sampler_batch, concurrency, reuse_grades, threads, stream_groups
    ("sync, one at a time, every rollout graded (before)", "sync", 1, 3, False, {}, False),
    ("sync, batched, grades reused, whole batches", "sync", 16, 12, True, {}, False),
    ("sync, batched, grades reused, streamed groups", "sync", 16, 12, True, {}, True),
    (f"sync, batched, grades reused, streamed groups, threads 1 / {CORES}", "sync", 16, 12, True,
     {"learner": 1, "sampler": CORES}, True),
    ("async, batched, grades reused", "async", 16, 12, True, {}, False),
)  # fmt: skip
SPLITS: tuple[Row, ...] = tuple(  # `--splits`: async mode with each learner / sampler thread split
    (f"async, learner {learner} / sampler {sampler} threads", "async", 16, 12, True,
     {"learner": learner, "sampler": sampler}, False)
    for learner, sampler in ((CORES, CORES), (max(1, CORES // 2), max(1, CORES // 2)), (CORES, 1), (1, CORES))
)  # fmt: skip


def warm_started(root: Path) -> tuple[DemoConfig, Path]:
    """The training demo's warm start (seed 0, bwrap), done once for every training run here."""
    demo = DemoConfig.model_validate({"out": root / "demo", "rollout": {"sandbox": {"backend": "bwrap"}}})
    base = build_tiny_model(root / "demo" / "base", seed=0, hidden_size=demo.hidden_size, layers=demo.layers)
    model, _ = warm_start(demo, base, SandboxConfig(backend="bwrap"), Console(quiet=True))
    return demo, model


def training_steps(demo: DemoConfig, model: Path, out: Path, steps: int, row: Row) -> dict[str, float]:
    """Wall time per step and the learner's idle share of the demo's GRPO run (`train_demo.grpo_config`)
    from its warm start, with the mode, sampler batch and concurrency of `row`."""
    _, mode, batch, concurrency, reuse, threads, stream = row
    config = grpo_config(demo, model, summary_budget(model, demo))
    config = config.model_copy(
        update={"mode": mode, "steps": steps, "checkpoint_every": steps, "sampler_batch": batch,
                "threads": CpuThreads(**threads), "stream_groups": stream,
                "rollout": config.rollout.model_copy(update={"out": out, "concurrency": concurrency, "reuse_grades": reuse})}
    )  # fmt: skip
    ends: list[float] = []
    metrics = train(config, on_step=lambda _step, _metrics: ends.append(time.monotonic()))[1:]
    wall = ends[-1] - ends[0]  # steps 1 .. n-1: from the end of step 0 to the end of the last
    learned = sum(m["time_learn_s"] for m in metrics)
    return {"idle": 1 - learned / wall, "learn_s_per_step": learned / len(metrics), "s_per_step": wall / len(metrics),
            "reward_mean": sum(m["reward_mean"] for m in metrics) / len(metrics)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--only", choices=("sampler", "rollouts", "learner"))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--splits", action="store_true", help="training rows: async with each thread split")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rollout-bench-"))
    model = build_tiny_model(root / "tiny", hidden_size=96, layers=3)  # the training demo's model
    facts: dict[str, object] = {"when": datetime.now().isoformat(), "machine": platform.platform(), "cpus": os.cpu_count(),
                                "load_before": os.getloadavg()[0]}  # fmt: skip
    if args.only in (None, "sampler"):
        facts["sampler"] = sampler_rates(model, args.repeats)
        report_sampler(facts["sampler"])  # type: ignore[arg-type]
    if args.only in (None, "rollouts"):
        facts["rollouts"] = rollout_rates(model, root, args.episodes, args.repeats)
    if args.only in (None, "learner"):
        steps: dict[str, list[dict[str, float]]] = {}
        demo, warm = warm_started(root)
        rows = SPLITS if args.splits else TRAINING
        for repeat in range(args.repeats):  # interleaved, so background load weighs on all alike
            for n, row in enumerate(rows):
                out = root / f"train-{n}-{repeat}"
                steps.setdefault(row[0], []).append(training_steps(demo, warm, out, args.steps, row))
                console.print(row[0], steps[row[0]][-1])
        facts["training"] = steps
        report_training(steps, rows[0][0])
    facts["load_after"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps(facts, indent=1))
    return 0


def rollout_rates(model: Path, root: Path, episodes: int, repeats: int) -> dict[str, dict[str, float]]:
    start_local_ray(num_cpus=2)
    runs: dict[str, list[dict[str, float]]] = {}
    try:
        for repeat in range(repeats):  # interleaved, so background load weighs on all alike
            for name, policy in (("scripted:gold", "scripted:gold"), ("hf tiny", f"hf:{model}")):
                for with_ray in (False, True):
                    key = f"{name}, {'2 Ray workers' if with_ray else 'one process'}"
                    out = root / f"{key.replace(' ', '_')}-{repeat}"
                    runs.setdefault(key, []).append(timed_rollouts(policy, out, episodes, with_ray))
                    console.print(key, runs[key][-1])
    finally:
        ray.shutdown()
    rates = {key: combined(r) for key, r in runs.items()}
    report_rollouts(rates, episodes * repeats)
    return rates


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def report_sampler(rates: dict[str, dict[str, list[float]]]) -> None:
    table = Table(title="sampled tokens / s, tiny model (demo shape), real first prompts, 128 new tokens")
    for column in ("clients C", "one at a time", "batched", "batched / one at a time"):
        table.add_column(column, justify="right")
    for clients, r in rates.items():
        ratios = [b / s for b, s in zip(r["batched"], r["serial"], strict=True)]
        table.add_row(clients, spread(r["serial"]), spread(r["batched"]),
                      f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")  # fmt: skip
    console.print(table)


def report_training(steps: dict[str, list[dict[str, float]]], first: str) -> None:
    table = Table(title="training steps, the demo's GRPO settings, tiny model, steps after the first")
    for column in ("", "s / step", "vs the first row", "learner idle share", "learn s / step"):
        table.add_column(column, justify="right" if column else "left")
    base = statistics.median(r["s_per_step"] for r in steps[first])
    for name, runs in steps.items():
        per_step = [r["s_per_step"] for r in runs]
        table.add_row(name, f"{statistics.median(per_step):.2f} ({min(per_step):.2f}-{max(per_step):.2f})",
                      f"{base / statistics.median(per_step):.2f}x", f"{statistics.median(r['idle'] for r in runs):.1%}",
                      f"{statistics.median(r['learn_s_per_step'] for r in runs):.2f}")  # fmt: skip
    console.print(table)


def report_rollouts(rates: dict[str, dict[str, float]], episodes: int) -> None:
    table = Table(title=f"rollouts, {episodes} episodes each, bwrap, built-in suite")
    for column in ("", "episodes / min", "vs one process", "ready (s)", "solved"):
        table.add_column(column, justify="right" if column else "left")
    for key, r in rates.items():
        base = rates[key.replace("2 Ray workers", "one process")]["per_minute"]
        table.add_row(key, f"{r['per_minute']:.1f}", f"{r['per_minute'] / base:.2f}x", f"{r['ready_s']:.1f}",
                      f"{r['solved']:.0f}/{r['n']:.0f}")  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    raise SystemExit(main())
