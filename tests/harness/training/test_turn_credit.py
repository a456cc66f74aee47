"""Turn-level credit from the agent's own `run_tests` results (issue 39, item 3), worked by hand."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.agent.trajectory import ParsedCall, Segment, Trajectory, Turn
from harness.training.learner import LearnerConfig, Row, rows_from_trajectories
from harness.training.turn_credit import (
    Call,
    bonus_per_token,
    trajectory_bonuses,
    turn_bonuses,
    visible_pass_rate,
    with_turn_credit,
)

LIBTEST = """running 2 tests
test a ... ok
test b ... FAILED

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

running 2 tests
test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
"""
JUNIT = """Test run finished after 64 ms
[         4 containers found      ]
[         3 tests successful      ]
[         1 tests failed          ]
"""
MOCHA = "\n  3 passing (12ms)\n  1 failing\n\n  1) rpn\n"
JEST = "Test Suites: 1 failed, 1 total\nTests:       1 failed, 2 passed, 3 total\n"
VITEST = " Test Files  1 failed (1)\n      Tests  1 failed | 3 passed (4)\n   Start at  10:00:00\n"


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        (LIBTEST, 3 / 4),
        (JUNIT, 3 / 4),
        (MOCHA, 3 / 4),
        (JEST, 2 / 3),
        (VITEST, 3 / 4),
        ("ls: not found\nexit code 127", None),
    ],
)
def test_recorded_outputs_give_their_pass_rates(text: str, rate: float | None) -> None:
    assert visible_pass_rate(text) == rate


def test_pytests_own_output(tmp_path: Path) -> None:
    """2 passed, 1 failed and 1 error (a fixture that raises) of a real pytest run: 2 of 4."""
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef broken():\n    raise RuntimeError\n\n"
        "def test_a():\n    pass\n\ndef test_b():\n    pass\n\n"
        "def test_c():\n    assert 1 == 2\n\ndef test_d(broken):\n    pass\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert visible_pass_rate(run.stdout) == 2 / 4


def test_node_tests_own_output(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node, "node is installed with the JavaScript toolchain (.ci/run)"
    (tmp_path / "x.test.js").write_text(
        "const test = require('node:test'); const assert = require('node:assert');\n"
        "test('a', () => assert.strictEqual(1, 1)); test('b', () => assert.strictEqual(1, 2));\n"
        "test('c', () => {});\n"
    )
    run = subprocess.run([node, "--test"], capture_output=True, text=True, cwd=tmp_path)
    assert visible_pass_rate(run.stdout) == 2 / 3


def test_go_tests_own_output(tmp_path: Path) -> None:
    """Without -v go lists failures only: packages are the unit (one failed, one passed)."""
    go = shutil.which("go")
    assert go, "go is installed with the Go toolchain (.ci/run)"
    (tmp_path / "go.mod").write_text("module ex\n\ngo 1.19\n")
    (tmp_path / "a_test.go").write_text(
        'package ex\n\nimport "testing"\n\nfunc TestA(t *testing.T) {}\n\n'
        'func TestB(t *testing.T) { t.Fatal("no") }\n'
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/b_test.go").write_text(
        'package sub\n\nimport "testing"\n\nfunc TestC(t *testing.T) {}\n'
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GOPROXY": "off", "GOFLAGS": "-mod=mod",
           "GOCACHE": str(tmp_path / ".cache")}  # fmt: skip
    run = subprocess.run([go, "test", "./..."], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert visible_pass_rate(run.stdout) == 1 / 2, run.stdout + run.stderr


def _call(tool: str | None, observation: str | None = None, arguments: str = "{}") -> Call:
    return Call(tool, arguments, observation)


def test_a_span_is_split_over_its_changing_turns_and_clipped() -> None:
    """run 1/2 | read, edit, bash | run 1 -> +1/2 over two changing turns: +0.25 each, clipped to 0.2
    | edit | a run of one file (not comparable, first of its kind) | run 3/4 -> the edit's -0.25
    | edit (no run after it) -> 0."""
    half, full, most = "1 passed, 1 failed in 0.1s", "2 passed in 0.1s", "3 passed, 1 failed in 0.1s"
    calls = [
        _call("run_tests", half),
        _call("read_file"),
        _call("edit"),
        _call("bash"),
        _call("run_tests", full),
        _call("edit"),
        _call("run_tests", "1 failed in 0.1s", '{"paths": ["tests/test_x.py"]}'),
        _call("run_tests", most),
        _call("edit"),
    ]
    assert turn_bonuses(calls, weight=1.0, clip=0.2) == [0, 0, 0.2, 0.2, 0, -0.2, 0, 0, 0]
    assert turn_bonuses(calls, weight=0.4, clip=1.0) == pytest.approx([0, 0, 0.1, 0.1, 0, -0.1, 0, 0, 0])


def test_a_turn_is_credited_by_the_first_comparable_run_only() -> None:
    """Two selections both seen before an edit: the file's run after it measures it (0 -> 1); the
    whole run later measures nothing new."""
    whole, one = "{}", '{"paths": ["t.py"]}'
    calls = [
        _call("run_tests", "1 failed in 0.1s", whole),
        _call("run_tests", "1 failed in 0.1s", one),
        _call("edit"),
        _call("run_tests", "1 passed in 0.1s", one),
        _call("run_tests", "1 passed in 0.1s", whole),
    ]
    assert turn_bonuses(calls, weight=0.5, clip=1.0) == [0, 0, 0.5, 0, 0]


def test_runs_that_name_no_count_and_edits_before_the_first_run_credit_nothing() -> None:
    calls = [
        _call("edit"),
        _call("run_tests", "1 passed in 0.1s"),
        _call("edit"),
        _call("run_tests", "crash"),
    ]
    assert turn_bonuses(calls, weight=1.0, clip=1.0) == [0, 0, 0, 0]


def _turn(tool: str, generated: int, appended: int, observation: str | None = None) -> Turn:
    return Turn(
        text="",
        generated_ids=list(range(generated)),
        appended_ids=list(range(appended)),
        tool_call=ParsedCall(name=tool, arguments={}),
        observation=observation,
    )


def test_bonuses_land_on_each_turns_generated_tokens_across_a_summary() -> None:
    """Segment 0: prompt 3, run (2 generated, 1 appended), edit (2, 1); a summary opens segment 1:
    prompt 2, run (1, 1). The edit, measured in the next segment, gets 0.5 on its 2 generated ids."""
    first = Segment(
        index=0,
        prompt_ids=[0, 1, 2],
        turns=[_turn("run_tests", 2, 1, "1 failed in 0.1s"), _turn("edit", 2, 1)],
    )
    second = Segment(index=1, prompt_ids=[0, 1], turns=[_turn("run_tests", 1, 1, "1 passed in 0.1s")])
    bonuses = trajectory_bonuses([first, second], weight=0.5, clip=1.0)
    assert bonuses == [[0.0, 0.5], [0.0]]
    # ids: p p p | g g a | g g a -> shifted by one: 8 entries, the edit's generated ids at 6 and 7
    assert bonus_per_token(first, bonuses[0]) == [0, 0, 0, 0, 0, 0.5, 0.5, 0]
    assert len(bonus_per_token(first, bonuses[0])) == len(first.ids_and_mask()[0]) - 1


def _episode(sample: int, reward: float) -> Trajectory:
    """Two segments: run (1 of 2 pass) and an edit; a summary; then a run (2 of 2)."""
    first = Segment(
        index=0,
        prompt_ids=[5, 6, 7],
        turns=[_turn("run_tests", 2, 1, "1 passed, 1 failed in 0.1s"), _turn("edit", 3, 1)],
    )
    second = Segment(index=1, prompt_ids=[5, 6], turns=[_turn("run_tests", 1, 1, "2 passed in 0.1s")])
    for segment in (first, second):
        for turn in segment.turns:
            turn.logprobs = [-1.0] * len(turn.generated_ids)
    return Trajectory(
        id=f"t/{sample}", run="r", task_id="t", group_id="t@v0", sample_index=sample, policy="hf:x",
        seed=0, trainable=True, segments=[first, second], reward=reward, status="ok",
    )  # fmt: skip


def test_rows_get_the_bonus_on_the_turns_tokens_beside_their_outcome_advantage() -> None:
    """Group of two (rewards 1, 0: advantages +-0.5 with LearnerConfig's estimator, as test_learner
    checks): the edit's 3 generated ids get A + 0.5 * (1 - 1/2) = A + 0.25, every other model token A;
    a row made otherwise (no source) and `turn_weight` 0 are left alone."""
    batch = [_episode(0, 1.0), _episode(1, 0.0)]
    rows, _ = rows_from_trajectories(batch, LearnerConfig())
    hint = Row([1, 2, 3], [0, 1, 1], [0.0, 0.0, 0.0], 0.7)
    out, metrics = with_turn_credit([*rows, hint], batch, weight=0.5, clip=1.0)
    assert out[-1] is hint
    for row, credited in zip(rows, out, strict=False):
        a = row.advantage
        assert abs(a) == pytest.approx(0.5)
        if row.source is not None and row.source[1] == 0:
            # ids: p p p | g g a | g g g a; shifted: the edit's ids 6, 7, 8 at 5, 6, 7
            expected = [a] * 9
            expected[5:8] = [a + 0.25] * 3
        else:
            expected = [a] * (len(row.ids) - 1)
        assert credited.token_advantages == pytest.approx(expected)
    assert metrics == {"turn_credit_share": pytest.approx(1 / 3), "turn_credit_mean_abs": pytest.approx(0.25)}
    same, none = with_turn_credit(rows, batch, weight=0.0, clip=1.0)
    assert same == rows and none == {}


def test_dense_credit_already_on_a_row_is_kept_and_added_to() -> None:
    (row, *_), _ = rows_from_trajectories([_episode(0, 1.0), _episode(1, 0.0)], LearnerConfig())
    dense = replace(row, token_advantages=[0.1 * j for j in range(len(row.ids) - 1)])
    (out,), _ = with_turn_credit([dense], [_episode(0, 1.0)], weight=1.0, clip=0.3)
    expected = [0.1 * j + (0.3 if j in (5, 6, 7) else 0.0) for j in range(9)]  # the bonus 0.5 clipped
    assert out.token_advantages == pytest.approx(expected)


def test_the_setting_reaches_a_training_step(tiny_model_path: Path, tmp_path: Path) -> None:
    """`credit.turn_weight` on: the step's rows pass through `with_turn_credit` (its metrics are the
    step's); off: nothing of it."""
    from harness.training.teacher import CreditConfig
    from harness.training.train import train
    from tests.harness.training.test_train import config

    on = config(tiny_model_path, tmp_path / "on", 1).model_copy(
        update={"credit": CreditConfig(turn_weight=0.5)}
    )
    (metrics,) = train(on)
    assert {"turn_credit_share", "turn_credit_mean_abs"} <= set(metrics)
    (plain,) = train(config(tiny_model_path, tmp_path / "off", 1))
    assert "turn_credit_share" not in plain
