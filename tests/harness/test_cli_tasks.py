"""`harness tasks list`, `harness tasks validate` and `harness grade`, run as a user runs them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tasks.canaries import load_canaries
from tasks.suite import load_suite
from tests.conftest import builtin_sample, require_backend
from tests.harness.test_cli import HARNESS, harness

MINI = Path(__file__).parents[1] / "data" / "suites" / "mini"


def test_tasks_list_json_and_table() -> None:
    proc = harness("tasks", "list", "--suite", str(MINI), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [
        {"id": "mini-001", "repository": "mini", "title": "clamp ignores the upper bound"}
    ]
    proc = harness("tasks", "list", "--suite", "builtin")
    assert proc.returncode == 0 and "tasks" in proc.stdout
    narrow = subprocess.run([*HARNESS, "tasks", "list", "--suite", "builtin"], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "40"}, timeout=60)  # fmt: skip
    assert all(t.id in narrow.stdout for t in load_suite("builtin")), narrow.stdout  # ids are never cut


VALIDATE_S = 600
"""How long one `tasks validate` of the one-task suite may take: about 50 s (three gold and three empty grades,
the canaries' trials) beside a loaded CI, and past 60 s under more load; the limit only catches a hang."""


@pytest.mark.parametrize("backend", ["bwrap"])  # docker validates through the CLI in the builtin suite's test
def test_tasks_validate_passes_a_good_suite_and_keeps_its_canaries(backend: str, tmp_path: Path) -> None:
    require_backend(backend)
    suite = tmp_path / "suite"
    shutil.copytree(MINI, suite)
    proc = harness(
        "tasks", "validate", "--suite", str(suite), "--backend", backend, "--json", timeout=VALIDATE_S
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = json.loads(proc.stdout)
    assert result["ok"] and result["gold_rewards"] == [1.0, 1.0, 1.0] and result["empty_rewards"] == [0.0] * 3
    assert result["canaries"] + result["held_canaries"] >= 1 and not result["weak"], result
    # Text canaries are drawn at random and only those that fail on gold are kept: there may be none.
    kept = load_canaries(suite / "mini-001")
    assert len(kept) == result["canaries"] and all(c.file == "tests/test_hidden_clamp.py" for c in kept)
    # Values are drawn at random: --check verifies the stored canaries rather than drawing new ones.
    again = harness(
        "tasks", "validate", "--suite", str(suite), "--backend", backend, "--repeats", "1", "--check",
        timeout=VALIDATE_S,
    )  # fmt: skip
    assert again.returncode == 0 and f"mini-001: {result['canaries']} canaries" in again.stdout, again.stdout


def test_tasks_validate_names_a_task_whose_tests_miss_the_bug(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(MINI, suite)
    task_file = suite / "mini-001" / "task.yaml"
    # The hidden F2P test now checks the lower bound, which the bug does not touch: the empty patch passes.
    task_file.write_text(
        task_file.read_text().replace(
            "fail_to_pass: [tests/test_hidden_clamp.py::test_high]",
            "fail_to_pass: [tests/test_hidden_clamp.py::test_low]",
        )
    )
    proc = harness("tasks", "validate", "--suite", str(suite), "--backend", "bwrap", timeout=VALIDATE_S)
    assert proc.returncode == 1
    assert "mini-001" in proc.stdout + proc.stderr and "empty patch passes" in proc.stderr


def test_grade_prints_the_reward_and_breakdown(tmp_path: Path) -> None:
    task = load_suite(str(MINI))[0]
    patch = tmp_path / "fix.patch"
    patch.write_text(task.gold_patch or "")
    proc = harness(
        "grade",
        "--suite",
        str(MINI),
        "--task",
        "mini-001",
        "--patch",
        str(patch),
        "--backend",
        "bwrap",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    grade = json.loads(proc.stdout)
    assert grade["correct"] == 1.0 and grade["reward"] == 1.0
    assert grade["fail_to_pass"] == {"tests/test_hidden_clamp.py::test_high": "passed"}
    assert grade["simplicity"]["penalty"] == 0.0

    proc = harness(
        "grade", "--suite", str(MINI), "--task", "mini-001", "--patch", str(patch), "--backend", "bwrap"
    )
    assert proc.returncode == 0 and "reward 1.000" in proc.stdout

    empty = tmp_path / "empty.patch"
    empty.write_text("")
    proc = harness(
        "grade", "--suite", str(MINI), "--task", "mini-001", "--patch", str(empty), "--backend", "bwrap"
    )
    assert proc.returncode == 1 and "not correct" in proc.stdout


def test_grade_rejects_bad_input(tmp_path: Path) -> None:
    proc = harness("grade", "--suite", str(MINI), "--task", "nope", "--patch", "x.patch")
    assert proc.returncode == 2 and "no task nope" in proc.stderr
    proc = harness(
        "grade", "--suite", str(MINI), "--task", "mini-001", "--patch", str(tmp_path / "none.patch")
    )
    assert proc.returncode != 0 and "no such file" in proc.stderr


@pytest.mark.timeout(1200)
def test_the_builtin_suite_validates(backend: str) -> None:
    """Every built-in task (one a repository on the backend that is not `WHOLE_SUITE_BACKEND`): gold patch
    correct and empty patch zero on this backend; its stored canaries are the ones validation keeps (each
    failing on the gold patch at its own assertion), with held ones at least 2, and a reason where a kind
    is missing. Once each: that a grade is the same every time is
    tests/envs/test_grading.py's to show, and three rounds took 8 minutes a backend."""
    sample = builtin_sample(backend)
    selected = ["--tasks", ",".join(sample)] if sample else []
    proc = harness(
        "tasks", "validate", "--suite", "builtin", "--backend", backend, "--concurrency", "3", "--check",
        "--repeats", "1", "--json", *selected, timeout=900,
    )  # fmt: skip
    results = json.loads(proc.stdout)
    assert len(results) == (len(sample) if sample else len(load_suite("builtin"))) and len(results) >= 4
    assert [r["task_id"] for r in results if not r["ok"]] == [], proc.stderr
    assert proc.returncode == 0
    counts = [(r["task_id"], r["canaries"], r["held_canaries"]) for r in results]
    assert min(r["canaries"] + r["held_canaries"] for r in results) >= 2, counts
    assert all(r["no_canary"] for r in results if 0 in (r["canaries"], r["held_canaries"])), counts
