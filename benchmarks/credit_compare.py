"""Plain GRPO beside OPSD, hint rollouts, a learnability-trained teacher and critiques on the demo, per seed
(issue 39).

    .venv/bin/python benchmarks/credit_compare.py [--seeds 0-2]
        [--arms grpo,opsd,mixed,hints,teacher,critique,local]
        [--json PATH] [KEY=VALUE ...]
    .venv/bin/python benchmarks/credit_compare.py --merge A.json B.json ...

`--json` is written again after every arm, so a run stopped part way keeps the arms it finished; `--merge`
reports the runs of several such files together (seeds run in separate processes, side by side or on
different days).

Each (seed, arm) runs `harness demo` (`harness/training/train_demo.py`; KEY=VALUE overrides its settings,
e.g. grpo_steps=8) with the arm's `credit` settings; a seed's arms start from one warm start (its GRPO
arm's, `warm_start_from`) and share the evaluation seeds, so they differ only in the GRPO steps. The warm
start here includes the right fixes with the privileged header (`header_demos=true`; `header_demos=false`
gives the demo's own): a model that reads the header, which the teacher and the hint rollouts need. The
demo's hard variant is `decoys_per_fix=4` (the warm start writes the wrong fix four times as often); the
two-edit testbed is `rollout.suite=demo-two sft_target_loss=0.05` (a dotted key reaches into a section;
benchmarks/two_edits.py says why 0.05 and where its summaries fall).
Arms:

- grpo:  `credit.mode: outcome` (the default);
- opsd:  `credit.mode: outcome+opsd` (the policy scores its own tokens after the privileged header);
- mixed: `credit.mode: outcome*opsd` (the same signal scaling the outcome within 1 +- 0.2, its sign kept);
- hints: `credit.hint_rollouts: 2` (groups that all failed get two rollouts with the header);
- teacher: the hints arm with `credit.teacher_training: learnability` (the hint rollouts are also the
  teacher's own GRPO groups, rewarded success x learnability; their tokens are the hints arm's).
- critique: `credit.critique: 2` (ECHO: two critiques of each group's first failed rollout by the policy,
  each starting a refined rollout; the critic and the refined rollouts trained in the same step);
- local: `credit.critique: 2, critique_mode: local` (each critique the teacher of the turn it names).
  Both critique arms read better with `critic_demos=true` (the warm start also shows the critic's role on
  the wrong fixes, `Turn N:` and the right edit): without it the tiny model almost never names a turn, and
  local's rows are few or none (on seeds 1 and 2 of the hard variant it trained exactly as GRPO did);
- turn: `credit.turn_weight: 0.5` (each turn also credited with the change in the visible tests' outcomes
  its `run_tests` calls saw). It needs `explore_demos=true`: the demo's own warm start never runs the tests,
  so there would be nothing to credit (refused without it); give it to every arm of the run, so that its
  GRPO arm is the baseline with the same warm start.

Hint rollouts, critiques and refined rollouts sample more tokens than the others, so each arm is read at plain GRPO's sampled-token budget
of the same seed: the training pass rate of the last two steps within that budget, and the first step
whose training pass rate reaches plain GRPO's final one. The evaluation after the last step is printed as
well (hints may have spent more than the budget by then). Printed: each seed's row, then each arm's mean
and range over seeds, and each arm's step time with the teacher's share of it. The numbers are what they
are: no arm is expected to win.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from demo_seeds import overrides_of, seeds_of  # benchmarks/demo_seeds.py
from rich.console import Console
from rich.table import Table

from harness.config import set_key
from harness.training.teacher import CreditConfig
from harness.training.train_demo import DemoConfig, run_training_demo

ARMS = {
    "grpo": CreditConfig(),
    "opsd": CreditConfig(mode="outcome+opsd"),
    "mixed": CreditConfig(mode="outcome*opsd"),
    "hints": CreditConfig(hint_rollouts=2),
    "teacher": CreditConfig(hint_rollouts=2, teacher_training="learnability"),
    "critique": CreditConfig(critique=2),
    "local": CreditConfig(critique=2, critique_mode="local"),
    "turn": CreditConfig(turn_weight=0.5),
}
EXTRA_TOKENS = ("hint_tokens_generated", "critique_tokens_generated", "critique_refined_tokens_generated")
"""Tokens a step samples besides its groups' rollouts: hint rollouts, critiques, refined rollouts."""
console = Console(width=max(Console().width, 120))


@dataclass(frozen=True)
class ArmRun:
    seed: int
    arm: str
    pass_rates: list[float]
    """The training pass rate of each GRPO step."""
    tokens: list[float]
    """Tokens sampled in each step, hint rollouts, critiques and refined rollouts included."""
    step_seconds: list[float]
    """Each step's rollout and learner time (the hint rollouts are part of the rollout time)."""
    credit_seconds: list[float]
    """Each step's teacher scoring and gating: a part of its learner time (0 for plain GRPO)."""
    hint_rollouts: float
    """Hint rollouts sampled over the run (groups that all failed x `credit.hint_rollouts`)."""
    hint_successes: float
    """Those of them that solved their task: the rows a hint arm trains on come from these."""
    final_eval: float
    warm_start_eval: float
    minutes: float


def arm_config(seed: int, arm: str, overrides: dict[str, str], root: Path) -> DemoConfig:
    """The demo's settings for one arm of one seed: `overrides` are the demo's keys, dotted ones reaching
    into its sections (`rollout.suite=demo-two` runs the two-edit testbed)."""
    settings: dict[str, Any] = {"out": str(root / f"seed{seed}-{arm}"), "seed": seed, "header_demos": True}
    for key, value in overrides.items():
        set_key(settings, key, value)
    return DemoConfig.model_validate(settings).model_copy(update={"credit": ARMS[arm]})


def run_arm(seed: int, arm: str, overrides: dict[str, str], root: Path, warm: Path | None) -> ArmRun:
    """One arm of one seed; from the warm start of the run in `warm` if given (the seed's first arm)."""
    config = arm_config(seed, arm, overrides, root).model_copy(update={"warm_start_from": warm})
    started = time.monotonic()
    result = run_training_demo(config)
    lines = [json.loads(line) for line in (config.out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    return ArmRun(
        seed=seed, arm=arm,
        pass_rates=[line["pass_rate"] for line in lines],
        tokens=[line["tokens_generated"] + sum(line.get(key, 0.0) for key in EXTRA_TOKENS) for line in lines],
        step_seconds=[line["time_rollout_s"] + line["time_learn_s"] for line in lines],
        credit_seconds=[line.get("time_credit_s", 0.0) for line in lines],
        hint_rollouts=sum(line.get("hint_rollouts", 0.0) for line in lines),
        hint_successes=sum(line.get("hint_rollouts", 0.0) * line.get("hint_success_rate", 0.0) for line in lines),
        final_eval=result.final_pass_rate, warm_start_eval=result.baseline_pass_rate,
        minutes=(time.monotonic() - started) / 60,
    )  # fmt: skip


def at_budget(run: ArmRun, budget: float) -> tuple[float, int | None]:
    """The mean training pass rate of the last two steps within `budget` sampled tokens, and the number of
    steps that took."""
    spent, within = 0.0, 0
    for tokens in run.tokens:
        if spent + tokens > budget * 1.0001:
            break
        spent, within = spent + tokens, within + 1
    rates = run.pass_rates[max(0, within - 2) : within]
    return (sum(rates) / len(rates) if rates else 0.0), within


def steps_to_reach(run: ArmRun, target: float) -> int | None:
    """The first step (1-based) whose training pass rate is at least `target`; None if none is."""
    return next((i + 1 for i, rate in enumerate(run.pass_rates) if rate >= target), None)


@dataclass(frozen=True)
class Row:
    seed: int
    arm: str
    pass_rate_at_budget: float
    steps_within_budget: int | None
    steps_to_grpo_final: int | None
    final_eval: float
    warm_start_eval: float
    tokens: float
    hints: str
    minutes: float


def rows_of(runs: list[ArmRun]) -> list[Row]:
    rows = []
    for run in runs:
        grpo = next(r for r in runs if r.seed == run.seed and r.arm == "grpo")
        target = sum(grpo.pass_rates[-2:]) / len(grpo.pass_rates[-2:])
        rate, steps = at_budget(run, sum(grpo.tokens))
        rows.append(
            Row(run.seed, run.arm, rate, steps, steps_to_reach(run, target), run.final_eval,
                run.warm_start_eval, sum(run.tokens), f"{run.hint_successes:.0f}/{run.hint_rollouts:.0f}",
                run.minutes)
        )  # fmt: skip
    return rows


def spread(values: list[float]) -> str:
    return f"{statistics.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def report(rows: list[Row]) -> None:
    table = Table(title="per seed: training pass rate at plain GRPO's sampled-token budget")
    for col in ("seed", "arm", "pass@budget", "steps in budget", "steps to GRPO's final", "eval after",
                "warm start eval", "tokens", "hints solved", "min"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r.seed), r.arm, f"{r.pass_rate_at_budget:.3f}", str(r.steps_within_budget),
            str(r.steps_to_grpo_final), f"{r.final_eval:.3f}", f"{r.warm_start_eval:.3f}", f"{r.tokens:,.0f}",
            r.hints, f"{r.minutes:.1f}",
        )  # fmt: skip
    console.print(table)
    summary = Table(title="over seeds: mean (min-max)")
    for col in ("arm", "pass@budget", "eval after", "steps to GRPO's final (reached / seeds)"):
        summary.add_column(col, justify="right")
    for arm in dict.fromkeys(r.arm for r in rows):
        mine = [r for r in rows if r.arm == arm]
        reached = [r.steps_to_grpo_final for r in mine if r.steps_to_grpo_final is not None]
        steps = (
            f"{statistics.mean(reached):.1f} ({len(reached)}/{len(mine)})"
            if reached
            else f"- (0/{len(mine)})"
        )
        summary.add_row(
            arm, spread([r.pass_rate_at_budget for r in mine]), spread([r.final_eval for r in mine]), steps
        )
    console.print(summary)


def report_cost(runs: list[ArmRun]) -> None:
    """Each arm's step time and the teacher's share of it, from the same steps' own clocks."""
    table = Table(title="cost per GRPO step, over seeds: mean seconds")
    for col in ("arm", "step (rollout + learn)", "of it: teacher and gate", "share"):
        table.add_column(col, justify="right")
    for arm in dict.fromkeys(r.arm for r in runs):
        steps = [s for r in runs if r.arm == arm for s in r.step_seconds]
        credit = [s for r in runs if r.arm == arm for s in r.credit_seconds]
        step, teacher = statistics.mean(steps), statistics.mean(credit)
        table.add_row(arm, f"{step:.1f}", f"{teacher:.2f}", f"{teacher / step:.1%}")
    console.print(table)


def write_json(path: Path, runs: list[ArmRun]) -> None:
    """The runs so far and their rows (each seed's rows once its GRPO arm is among them)."""
    seeds = {r.seed for r in runs if r.arm == "grpo"}
    rows = rows_of([r for r in runs if r.seed in seeds])
    dump = {"runs": [asdict(r) for r in runs], "rows": [asdict(r) for r in rows]}
    path.write_text(json.dumps(dump, indent=2) + "\n")


def read_runs(paths: list[Path]) -> list[ArmRun]:
    """The runs of several `--json` files, in order; a (seed, arm) given twice is refused."""
    runs = [ArmRun(**run) for path in paths for run in json.loads(path.read_text())["runs"]]
    seen = [(r.seed, r.arm) for r in runs]
    twice = sorted({k for k in seen if seen.count(k) > 1})
    if twice:
        raise SystemExit(f"--merge: these (seed, arm) are in more than one file: {twice}")
    missing = sorted({r.seed for r in runs} - {r.seed for r in runs if r.arm == "grpo"})
    if missing:
        raise SystemExit(f"--merge: seeds without their grpo arm (the budget is its): {missing}")
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-2", help="(default: %(default)s)")
    parser.add_argument("--arms", default=",".join(ARMS), help="(default: %(default)s)")
    parser.add_argument("--json", type=Path, help="also write the runs and rows to this file, after each arm")
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="report the runs of these --json files together"
    )
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE settings of the demo")
    args = parser.parse_args()
    if args.merge:
        runs = read_runs(args.merge)
        report(rows_of(runs))
        report_cost(runs)
        return 0
    arms = args.arms.split(",")
    if "grpo" not in arms or any(a not in ARMS for a in arms):
        raise SystemExit(f"--arms: some of {sorted(ARMS)}, grpo among them (the budget is its)")
    if "turn" in arms and overrides_of(args.overrides).get("explore_demos") not in ("true", "True", "1"):
        raise SystemExit(
            "--arms turn: add explore_demos=true (a warm start that runs the tests; every arm gets it)"
        )
    runs = []
    with tempfile.TemporaryDirectory(prefix="credit-compare-") as tmp:
        for seed in seeds_of(args.seeds):
            for arm in ["grpo", *(a for a in arms if a != "grpo")]:
                console.print(f"[bold]seed {seed}, {arm}")
                warm = None if arm == "grpo" else Path(tmp) / f"seed{seed}-grpo"
                runs.append(run_arm(seed, arm, overrides_of(args.overrides), Path(tmp), warm))
                if args.json is not None:
                    write_json(args.json, runs)
    report(rows_of(runs))
    report_cost(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
