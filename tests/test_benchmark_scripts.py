"""The GPU learner benchmark stays ready to run on a lent GPU: its smoke test (`--tiny`, on the CPU here)
runs the whole script, packing on and off side by side, and reports what a GPU run reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_learner_benchmark_runs_packed_and_padded_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_learner.py", "--tiny", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    packed, padded = json.loads(out.read_text())
    assert (packed["packing"], padded["packing"]) == (True, False)
    assert packed["computed_tokens"] == packed["real_tokens"] < padded["computed_tokens"]
    assert packed["attention_pairs"] == sum(n * n for n in packed["lengths"]) < padded["attention_pairs"]
    assert all(r["tokens_per_s"] > 0 and r["activation_checkpointing"] == "auto" for r in (packed, padded))
    assert "MFU 6N" in proc.stdout and "peak GiB" in proc.stdout


def test_the_credit_comparison_reads_each_arm_at_plain_grpos_token_budget() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from credit_compare import ArmRun, console, report_cost, rows_of
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    # GRPO samples 10 tokens a step (budget 30) and ends at pass rates 0.5, 0.5 (its final: 0.5). The hint
    # arm samples 15 a step: two steps fit the budget, whose pass rates 0.25 and 0.5 average 0.375; it
    # first reaches 0.5 at step 2.
    grpo = ArmRun(
        0, "grpo", [0.0, 0.5, 0.5], [10.0, 10.0, 10.0], [2.0] * 3, [0.0] * 3, 0.0, 0.0, 0.6, 0.1, 1.0
    )
    hints = ArmRun(
        0, "hints", [0.25, 0.5, 1.0], [15.0, 15.0, 15.0], [3.0] * 3, [0.5, 1.0, 1.5], 4.0, 3.0, 0.9, 0.1, 1.0
    )
    rows = {r.arm: r for r in rows_of([grpo, hints])}
    assert (rows["hints"].hints, rows["grpo"].hints) == ("3/4", "0/0")
    assert (rows["grpo"].pass_rate_at_budget, rows["grpo"].steps_within_budget) == (0.5, 3)
    assert (rows["hints"].pass_rate_at_budget, rows["hints"].steps_within_budget) == (0.375, 2)
    assert rows["hints"].steps_to_grpo_final == 2 and rows["grpo"].steps_to_grpo_final == 2
    with console.capture() as printed:
        report_cost([grpo, hints])
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in printed.get().splitlines()]
    rows_printed = {c[0]: c[1:] for c in cells if c and c[0] in ("grpo", "hints")}
    assert rows_printed == {"grpo": ["2.0", "0.00", "0.0%"], "hints": ["3.0", "1.00", "33.3%"]}


def test_the_credit_comparison_keeps_each_arm_and_merges_seeds_run_apart(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from credit_compare import ArmRun, read_runs, rows_of, write_json
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    def run(seed: int, arm: str, rate: float) -> ArmRun:
        return ArmRun(seed, arm, [rate] * 2, [10.0] * 2, [1.0] * 2, [0.0] * 2, 0.0, 0.0, rate, 0.0, 1.0)

    first, second = tmp_path / "seed0.json", tmp_path / "seed1.json"
    write_json(first, [run(0, "grpo", 0.5)])  # what a run stopped after its first arm leaves
    assert [r["arm"] for r in json.loads(first.read_text())["rows"]] == ["grpo"]
    write_json(first, [run(0, "grpo", 0.5), run(0, "hints", 0.75)])
    write_json(second, [run(1, "grpo", 0.25), run(1, "hints", 1.0)])
    runs = read_runs([first, second])
    assert [(r.seed, r.arm) for r in runs] == [(0, "grpo"), (0, "hints"), (1, "grpo"), (1, "hints")]
    assert {(r.seed, r.arm): r.pass_rate_at_budget for r in rows_of(runs)} == {
        (0, "grpo"): 0.5, (0, "hints"): 0.75, (1, "grpo"): 0.25, (1, "hints"): 1.0,
    }  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "benchmarks/credit_compare.py", "--merge", str(first), str(second)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and "0.875 (0.750-1.000)" in proc.stdout, proc.stdout + proc.stderr
    for files, why in [
        ([first, first], "more than one file"),
        ([tmp_path / "hints.json"], "without their grpo"),
    ]:
        write_json(tmp_path / "hints.json", [run(2, "hints", 1.0)])
        try:
            read_runs(files)
        except SystemExit as e:
            assert why in str(e)
        else:
            raise AssertionError(f"{files} merged")


def test_the_credit_comparison_runs_the_two_edit_testbed_through_dotted_settings(tmp_path: Path) -> None:
    """`rollout.suite=demo-two` reaches the demo's rollout section (the two-edit testbed, issue 39), beside
    the demo's own keys and the arm's credit; an unknown key is refused by the demo's settings."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from credit_compare import arm_config
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    given = {
        "rollout.suite": "demo-two",
        "sft_target_loss": "0.05",
        "decoys_per_fix": "4",
        "backend": "bwrap",
    }
    config = arm_config(1, "hints", given, tmp_path)
    assert (config.rollout.suite, config.sft_target_loss, config.decoys_per_fix) == ("demo-two", 0.05, 4)
    assert config.rollout.sandbox.backend == "bwrap" and config.rollout.group_size == 6  # the demo's default
    assert (config.credit.hint_rollouts, config.seed, config.out) == (2, 1, tmp_path / "seed1-hints")
    with pytest.raises(ValidationError, match="suites"):
        arm_config(0, "grpo", {"rollout.suites": "demo-two"}, tmp_path)
