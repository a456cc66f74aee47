"""`harness runs` and `harness replay`, run as a user runs them, on recorded runs: what a user looks for is on
screen; `--follow` shows a growing run; `--reexecute` reproduces a gold run and finds an altered turn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from harness.agent.trajectory import Trajectory
from harness.rollouts.store import RunStore
from tests.conftest import require_backend
from tests.harness.test_cli import HARNESS

MINI = Path(__file__).parents[2] / "data" / "suites" / "mini"
WIDE = {**os.environ, "COLUMNS": "200"}
"""Lines as a wide terminal shows them, so that the checked text is not wrapped."""
FIX = {"path": "mini/__init__.py", "old_str": "    if x > hi:\n        return x\n", "new_str": "    if x > hi:\n        return hi\n"}  # fmt: skip


def harness(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HARNESS, *args], capture_output=True, text=True, timeout=timeout, env=WIDE)


def rollout(out: Path, policy: str, backend: str = "bwrap") -> list[Trajectory]:
    proc = harness(
        "rollout", "--suite", str(MINI), "--policy", policy, "--backend", backend, "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return list(RunStore(out).trajectories())


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Trajectory]:
    """A solved mini task whose third call prints 100 lines (an observation to fold)."""
    require_backend("bwrap")
    root = tmp_path_factory.mktemp("scripted")
    script = root / "script.yaml"
    calls = [
        {"name": "list_dir", "arguments": {"path": "."}},
        {"name": "run_tests"},
        {"name": "bash", "arguments": {"command": "seq 1 100"}},
        {"name": "edit", "arguments": FIX},
    ]
    script.write_text(yaml.safe_dump(calls))
    (trajectory,) = rollout(root / "run", f"scripted:{script}")
    return root / "run", trajectory


def test_replay_shows_each_turn_the_diff_and_the_grade(scripted_run: tuple[Path, Trajectory]) -> None:
    run, trajectory = scripted_run
    proc = harness("replay", str(run), "--id", trajectory.id)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "mini-001/0" in out and "task mini-001" in out
    assert "clamp ignores the upper bound" in out  # the task's text
    for number, name in enumerate(["list_dir", "run_tests", "bash", "edit", "submit"], 1):
        assert f"turn {number} · segment 0 · {name}" in out
    assert "→ bash" in out and "seq 1 100" in out
    assert "old_str" in out and "return hi" in out  # the edit's arguments
    assert "edited mini/__init__.py" in out  # an observation
    assert "lines folded (--full shows them)" in out
    lines = out.splitlines()
    assert any(line.strip("│ ") == "15" for line in lines) and not any(
        line.strip("│ ") == "50" for line in lines
    )
    assert "-        return x" in out and "+        return hi" in out  # the final diff
    assert "correct  reward 1.000 = correct 1.000 × (1 − 0.2 × penalty 0.000)" in out
    assert "tests/test_hidden_clamp.py::test_high" in out and "passed" in out
    assert "status     ok" in out and "5 (0 tool errors, 0 parse errors)" in out

    full = harness("replay", str(run), "--task", "mini-001", "--full").stdout
    assert "lines folded" not in full
    assert any(line.strip("│ ") == "50" for line in full.splitlines())


def test_replay_of_a_training_run_shows_summaries_and_advantages(scripted_training_run: Path) -> None:
    run = scripted_training_run
    trajectories = list(RunStore(run).trajectories())
    solved = next(
        t for t in trajectories if t.reward == 1.0 and t.summaries and any(s.turns for s in t.segments[1:])
    )
    proc = harness("replay", str(run), "--id", solved.id)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"task {solved.task_id}" in out and f"policy {solved.policy}" in out
    summary = solved.summaries[0]
    assert (
        f"self-summary: segment 0 closed at {summary.tokens_before} tokens → segment 1 opens with "
        f"{summary.tokens_after} tokens"
    ) in out
    assert summary.text.strip().splitlines()[0] in out
    calls = [t.tool_call.name for s in solved.segments for t in s.turns if t.tool_call]
    assert all(f"· {name}" in out for name in calls)
    added = next(
        line for line in solved.final_diff.splitlines() if line.startswith("+") and not line.startswith("+++")
    )
    assert added in out
    assert "reward 1.000" in out and "correct" in out and "advantage" in out

    failed = next(t for t in trajectories if t.metrics.parse_errors and t.reward == 0.0)
    out = harness("replay", str(run), "--id", failed.id).stdout
    assert "parse error:" in out and "not correct" in out and "no tool call" in out


def test_runs_lists_filters_and_sorts(scripted_training_run: Path) -> None:
    run = scripted_training_run
    trajectories = list(RunStore(run).trajectories())
    rows = json.loads(harness("runs", str(run), "--json").stdout)
    assert [r["id"] for r in rows] == [t.id for t in trajectories]
    assert all(r["advantage"] is not None for r in rows if r["status"] != "infra_error")

    by_reward = json.loads(harness("runs", str(run), "--sort", "reward", "--desc", "--json").stdout)
    assert [r["reward"] for r in by_reward] == sorted((t.reward for t in trajectories), reverse=True)
    task = trajectories[0].task_id
    solved = json.loads(harness("runs", str(run), "--task", task, "--min-reward", "1", "--json").stdout)
    assert {r["id"] for r in solved} == {t.id for t in trajectories if t.task_id == task and t.reward >= 1}

    table = harness("runs", str(run), "--sort", "summaries", "--desc", "--limit", "3")
    assert table.returncode == 0, table.stderr
    most = max(trajectories, key=lambda t: t.metrics.summaries)
    assert f"3 of {len(trajectories)} trajectories" in table.stdout
    for header in ("task", "group", "reward", "turns", "summ.", "tokens", "status", "adv."):
        assert header in table.stdout
    assert most.id in table.stdout and most.group_id in table.stdout and "mean reward" in table.stdout


def test_follow_shows_trajectories_as_the_run_writes_them(
    scripted_run: tuple[Path, Trajectory], tmp_path: Path
) -> None:
    source, trajectory = scripted_run
    run = tmp_path / "growing"
    run.mkdir()
    (run / "config.yaml").write_text((source / "config.yaml").read_text())
    run_file = run / "trajectories.jsonl"
    run_file.write_text(trajectory.model_dump_json() + "\n")
    screen = tmp_path / "screen.txt"
    with screen.open("w") as out:
        proc = subprocess.Popen([*HARNESS, "replay", str(run), "--follow"], stdout=out, stderr=out, env=WIDE)
    try:
        wait_for(screen, "status and timings", 1)
        later = trajectory.model_copy(update={"id": "mini-001/7", "sample_index": 7}).model_dump_json()
        with run_file.open("a") as f:  # written in two parts: the first half is not shown on its own
            f.write(later[:100])
            f.flush()
            time.sleep(1)
            assert "mini-001/7" not in screen.read_text()
            f.write(later[100:] + "\n")
        wait_for(screen, "status and timings", 2)  # the end of the second trajectory
        third = trajectory.model_copy(update={"id": "mini-001/8", "sample_index": 8}).model_dump_json()
        with run_file.open("a") as f:  # another tool's line is named and skipped; following goes on
            f.write("2026-11-30 04:00:00 INFO watcher: synced\n" + third + "\n")
        wait_for(screen, "status and timings", 3)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 1  # a line was skipped
    finally:
        proc.kill()
    text = screen.read_text()
    assert "mini-001/7  task mini-001" in text and "mini-001/8  task mini-001" in text
    assert f"harness: {run_file}:3: not JSON" in text and text.count("final diff") == 3
    assert "Traceback" not in text


def wait_for(path: Path, text: str, times: int, timeout_s: float = 60) -> None:
    """Waits until `text` is on the screen `times` times."""
    deadline = time.monotonic() + timeout_s
    while path.read_text().count(text) < times:
        assert time.monotonic() < deadline, f"{text!r} did not appear {times}x:\n{path.read_text()[-2000:]}"
        time.sleep(0.1)


def test_clear_errors(scripted_run: tuple[Path, Trajectory], tmp_path: Path) -> None:
    run, _ = scripted_run
    for args, message in (
        (["replay", str(tmp_path / "nothing")], "no run directory at"),
        (["replay", str(run), "--id", "mini-001/9"], "no trajectory 'mini-001/9'"),
        (["replay", str(run), "--task", "other"], "no trajectory of task 'other'"),
        (["runs", str(run), "--status", "done"], "--status: Input should be"),
        (["replay", str(run), "--reexecute", "--follow"], "leave out --follow"),
    ):
        proc = harness(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_a_gold_run_reexecutes_exactly_and_an_altered_turn_diverges(backend: str, tmp_path: Path) -> None:
    run = tmp_path / "gold"
    (trajectory,) = rollout(run, "scripted:gold", backend)
    proc = harness("replay", str(run), "--id", trajectory.id, "--reexecute", "--backend", backend)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        f"REPRODUCED: {trajectory.id}: 5 observations, the final diff and the grade (reward 1.000)"
        in proc.stdout
    )
    assert "pytest durations in 2 observations" in proc.stdout  # "1 passed in 0.01s" is not a divergence

    altered = tmp_path / "altered"
    altered.mkdir()
    (altered / "config.yaml").write_text((run / "config.yaml").read_text())
    edit = trajectory.segments[0].turns[2]
    assert edit.tool_call is not None and edit.tool_call.name == "edit" and edit.observation
    edit.observation = edit.observation.replace("return hi", "return 10")
    (altered / "trajectories.jsonl").write_text(trajectory.model_dump_json() + "\n")
    proc = harness("replay", str(altered), "--id", trajectory.id, "--reexecute", "--backend", backend)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"DIVERGED: {trajectory.id} at turn 3 of 5 (edit)" in proc.stdout
    assert "-     5         return 10" in proc.stdout and "+     5         return hi" in proc.stdout
    assert "grade: same (reward 1.000)" in proc.stdout

    report = json.loads(
        harness("replay", str(altered), "--reexecute", "--backend", backend, "--json").stdout
    )[0]
    assert [c["same"] for c in report["turns"]] == [True, True, False, True, True]
    assert report["reproduced"] is False and report["diff_same"] and not report["grade_differences"]


def test_replay_of_many_trajectories_on_a_terminal_goes_through_the_pager(
    scripted_training_run: Path, tmp_path: Path
) -> None:
    """On a terminal, a replay of more than one trajectory is paged ($PAGER, as git and man do); piped,
    it is printed as it is."""
    import pty

    paged = tmp_path / "paged.txt"
    main, child = pty.openpty()
    env = {**os.environ, "PAGER": f"cat > {paged}", "COLUMNS": "120", "TERM": "xterm"}
    env.pop("MANPAGER", None)
    task = next(RunStore(scripted_training_run).trajectories()).task_id  # one task's rollouts: several
    proc = subprocess.run(
        [*HARNESS, "replay", str(scripted_training_run), "--task", task],
        stdin=child, stdout=child, stderr=child, env=env, timeout=300,
    )  # fmt: skip
    os.close(child)
    os.close(main)
    assert proc.returncode == 0
    count = sum(1 for t in RunStore(scripted_training_run).trajectories() if t.task_id == task)
    assert paged.read_text().count("reward") >= count > 1  # every trajectory went to the pager
