"""Does the training demo learn on this machine, whatever the seed? `harness demo` once per seed.

    .venv/bin/python benchmarks/demo_seeds.py [--seeds 0-9] [--backend bwrap] [--json PATH] [KEY=VALUE ...]

Each seed builds its own tiny model, warm-starts it, evaluates it, trains it with GRPO and evaluates it
again on the same evaluation seeds (`harness/training/train_demo.py`; KEY=VALUE overrides its settings, e.g.
grpo_steps=6). Printed per seed: the warm start's epochs, the pass rate of the warm start and after GRPO,
the mean reward of the first and last two GRPO steps, and the minutes it took; then how many seeds
improved and the median and range of each column. The target: the pass rate after GRPO is above the
warm start's in at least 9 seeds of 10 (the script exits 1 otherwise).

Numbers differ between CPUs: a tiny model trained from random weights amplifies their rounding
differences. The spread over seeds is the figure to compare between machines, not one seed's numbers.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.training.train_demo import DemoConfig, run_training_demo

TARGET_SHARE = 0.9
"""Share of the seeds whose pass rate must rise."""


def seeds_of(text: str) -> list[int]:
    """`0-9` or `0,3,5` (or both: `0-4,8`)."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds += list(range(int(low), int(high or low) + 1))
    return seeds


def overrides_of(pairs: list[str]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {pair!r}")
        found[key] = value
    return found


@dataclass(frozen=True)
class SeedRun:
    seed: int
    warm_start_epochs: int
    warm_start_pass: float
    grpo_pass: float
    first_reward: float
    """Mean reward of the first two GRPO steps."""
    last_reward: float
    """Mean reward of the last two GRPO steps."""
    minutes: float
    rewards: list[float]
    """Mean reward of every GRPO step."""

    @property
    def rises(self) -> bool:
        return self.grpo_pass > self.warm_start_pass


def run_seed(seed: int, root: Path, backend: str, overrides: dict[str, str]) -> SeedRun:
    settings = {**overrides, "out": str(root / f"seed-{seed}"), "backend": backend, "seed": seed}
    began = time.monotonic()
    result = run_training_demo(DemoConfig.model_validate(settings), Console(quiet=True))
    return SeedRun(
        seed=seed,
        warm_start_epochs=result.warm_start_epochs,
        warm_start_pass=result.baseline_pass_rate,
        grpo_pass=result.final_pass_rate,
        first_reward=statistics.mean(result.rewards[:2]),
        last_reward=statistics.mean(result.rewards[-2:]),
        minutes=(time.monotonic() - began) / 60,
        rewards=result.rewards,
    )


COLUMNS = ["warm_start_epochs", "warm_start_pass", "grpo_pass", "first_reward", "last_reward", "minutes"]


def report(console: Console, runs: list[SeedRun]) -> bool:
    machine = platform.processor() or platform.machine()
    table = Table("seed", *COLUMNS, "rises", title=f"harness demo, {len(runs)} seeds ({machine})")
    for run in runs:
        values = (getattr(run, c) for c in COLUMNS)
        table.add_row(str(run.seed), *(f"{v:.3g}" for v in values), "yes" if run.rises else "NO")
    spread = {c: [float(getattr(run, c)) for run in runs] for c in COLUMNS}
    table.add_section()
    table.add_row("median", *(f"{statistics.median(v):.3g}" for v in spread.values()), "")
    table.add_row("range", *(f"{min(v):.3g}-{max(v):.3g}" for v in spread.values()), "")
    console.print(table)
    risen = sum(run.rises for run in runs)
    ok = risen >= TARGET_SHARE * len(runs)
    verdict = "met" if ok else "MISSED"
    console.print(f"pass rate rose in {risen} of {len(runs)} seeds (target: {TARGET_SHARE:.0%}): {verdict}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--json", type=Path)
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE settings of the demo")
    args = parser.parse_args()
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="demo-seeds-"))
    overrides = overrides_of(args.overrides)
    runs: list[SeedRun] = []
    for seed in seeds_of(args.seeds):
        run = run_seed(seed, root, args.backend, overrides)
        runs.append(run)
        console.print(
            f"seed {seed}: warm start {run.warm_start_pass:.3f} ({run.warm_start_epochs} epochs) -> GRPO "
            f"{run.grpo_pass:.3f}; step rewards {[round(r, 3) for r in run.rewards]}; {run.minutes:.1f} min"
        )
    ok = report(console, runs)
    if args.json:
        record = {"date": datetime.now().isoformat(timespec="seconds"), "overrides": overrides}
        args.json.write_text(json.dumps({**record, "runs": [asdict(run) for run in runs]}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
