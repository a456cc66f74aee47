"""`harness rollout` with scripted policies: every built-in task solved, nothing lost across crashes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from envs.sandbox import SandboxConfig
from harness.agent.trajectory import Trajectory
from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import last_tries, resume_jobs, rollout
from harness.rollouts.store import RunFileError, RunStore
from policies.base import ChatReply, SamplingParams, ToolCall
from tasks.suite import load_suite
from tests.conftest import builtin_sample
from tests.harness.test_cli import HARNESS, harness

MINI = Path(__file__).parents[2] / "data" / "suites" / "mini"


def test_scripted_gold_solves_every_builtin_task(backend: str, tmp_path: Path) -> None:
    """All of them on `WHOLE_SUITE_BACKEND`, one a repository on the other."""
    out = tmp_path / "gold"
    sample = builtin_sample(backend)
    selected = ["--tasks", ",".join(sample)] if sample else []
    proc = harness(
        "rollout", "--suite", "builtin", "--policy", "scripted:gold", "--backend", backend,
        "--concurrency", "3", "--out", str(out), "--json", *selected, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["trajectories"] == (len(sample) if sample else len(load_suite("builtin")))
    assert summary["pass_at_1"] == 1.0 and summary["statuses"] == {"ok": summary["trajectories"]}
    for trajectory in RunStore(out).trajectories():
        assert trajectory.grade is not None and trajectory.grade.correct == 1.0, trajectory.task_id
        assert not trajectory.trainable and trajectory.final_diff
        assert any(t.tool_call and t.tool_call.name == "edit" for s in trajectory.segments for t in s.turns)
    assert (out / "config.yaml").is_file()


def test_a_restarted_run_skips_what_is_done(tmp_path: Path) -> None:
    out = tmp_path / "run"
    common = [
        "rollout",
        "--suite",
        str(MINI),
        "--policy",
        "scripted:gold",
        "--backend",
        "bwrap",
        "--out",
        str(out),
    ]
    assert harness(*common, "--group-size", "2").returncode == 0
    first = (out / "trajectories.jsonl").read_text()
    assert harness(*common, "--group-size", "3", "--json").returncode == 0
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert (out / "trajectories.jsonl").read_text().startswith(first)
    assert sorted(json.loads(line)["sample_index"] for line in lines) == [0, 1, 2]


def test_the_resume_filter_keeps_each_jobs_last_try_and_retries_infra_errors() -> None:
    """The one filter of every resumed run (`harness rollout`, training steps, hint rollouts): a job the
    run holds is done with its last try, unless that try was an infra error and the caller retries them;
    a try of a job not asked for is left alone."""
    task = load_suite(str(MINI))[0]

    def tried(sample: int, status: str) -> Trajectory:
        return Trajectory(
            id=f"{task.id}/{sample}", run="r", task_id=task.id, group_id=f"{task.id}@v0",
            sample_index=sample, policy="scripted:gold", seed=0, trainable=False, status=status,  # type: ignore[arg-type]
        )  # fmt: skip

    lines = [tried(0, "infra_error"), tried(0, "ok"), tried(1, "infra_error"), tried(7, "ok")]
    jobs = [(task, 0), (task, 1), (task, 2)]
    retried = resume_jobs(jobs, last_tries(lines), retry_infra_errors=True)
    assert retried.done == [lines[1]] and retried.todo == [(task, 1), (task, 2)]
    kept = resume_jobs(jobs, last_tries(lines), retry_infra_errors=False)
    assert kept.done == [lines[1], lines[2]] and kept.todo == [(task, 2)]


def slow_script(path: Path, steps: int, pause_s: float) -> Path:
    calls = [{"name": "bash", "arguments": {"command": f"sleep {pause_s}"}} for _ in range(steps)]
    path.write_text(yaml.safe_dump(calls))
    return path


def test_kill_9_mid_run_loses_and_repeats_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = slow_script(tmp_path / "slow.yaml", steps=3, pause_s=0.2)
    args = [
        "rollout", "--suite", str(MINI), "--policy", f"scripted:{script}", "--backend", "bwrap",
        "--group-size", "12", "--concurrency", "2", "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen([*HARNESS, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_file = out / "trajectories.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and (not run_file.exists() or run_file.read_text().count("\n") < 3):
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    saved_before = run_file.read_text().count("\n")
    assert 3 <= saved_before < 12
    with run_file.open("a") as f:  # what a crash in the middle of a write leaves behind
        f.write('{"schema_version": 1, "id": "mini-001/99", "task_')
    assert len(list(RunStore(out).trajectories())) == saved_before  # the torn line is skipped

    again = harness(*args, "--json", timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    trajectories = list(RunStore(out).trajectories())
    samples = [t.sample_index for t in trajectories]
    assert sorted(samples) == list(range(12)), samples  # none lost, none repeated
    assert all(line.startswith('{"schema_version":1') for line in run_file.read_text().splitlines())


def test_ctrl_c_stops_cleanly_with_finished_work_saved(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = slow_script(tmp_path / "slow.yaml", steps=4, pause_s=0.3)
    args = [
        "rollout", "--suite", str(MINI), "--policy", f"scripted:{script}", "--backend", "bwrap",
        "--group-size", "10", "--concurrency", "2", "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen([*HARNESS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_file = out / "trajectories.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and (not run_file.exists() or run_file.read_text().count("\n") < 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "finished trajectories are saved" in stderr
    saved = list(RunStore(out).trajectories())
    assert 2 <= len(saved) < 10 and all(t.status == "ok" for t in saved)
    leftovers = subprocess.run(["pgrep", "-f", f"--label r{proc.pid}-"], capture_output=True, text=True)
    assert leftovers.stdout.strip() == "", "sandboxes of the interrupted run are still running"


def test_a_1000_turn_episode_with_summaries_stays_small(tmp_path: Path) -> None:
    out = tmp_path / "run"
    calls = [{"name": "bash", "arguments": {"command": f"echo step {i}"}} for i in range(1000)]
    script = tmp_path / "long.json"
    script.write_text(json.dumps(calls))
    command = [
        *HARNESS, "rollout", "--suite", str(MINI), "--policy", f"scripted:{script}", "--backend", "bwrap",
        "--out", str(out), "--json", "loop.max_turns=1100", "summary.trigger_tokens=3000",
    ]  # fmt: skip
    # A fresh parent whose only child is the harness, so ru_maxrss is the harness's own peak.
    measure = (
        "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", measure, *command], capture_output=True, text=True, timeout=600
    )
    peak_kib, code = map(int, proc.stdout.split()[-2:])
    assert code == 0, proc.stderr[-2000:]
    (trajectory,) = RunStore(out).trajectories()
    assert trajectory.metrics.turns >= 1000 and trajectory.status == "ok"
    assert trajectory.metrics.summaries >= 10
    assert trajectory.metrics.max_context_tokens < 3000 + 1000 < trajectory.metrics.total_tokens
    assert peak_kib < 300 * 1024, f"harness peak RSS {peak_kib / 1024:.0f} MiB"
    line_bytes = len(trajectory.model_dump_json()) + 1
    assert (out / "trajectories.jsonl").stat().st_size <= 2 * line_bytes


class Recorder:
    """A chat policy that writes down everything it is given, then plays a script that knows nothing of
    the task: read the README, submit."""

    kind: Literal["chat"] = "chat"
    spec = "test:recorder"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: SamplingParams
    ) -> ChatReply:
        self.seen.append(repr((messages, tools, params)))
        done = sum(1 for m in messages if m["role"] == "assistant")
        call = (
            ToolCall(name="list_dir", arguments={"path": "."})
            if done == 0
            else ToolCall(name="submit", arguments={})
        )
        return ChatReply(content="", tool_calls=[call])


def test_a_chat_policy_never_sees_the_hidden_tests_or_the_gold_patch(tmp_path: Path) -> None:
    """Only a scripted policy is shown the task itself (`Scripted.for_task`); any other chat policy gets
    the prompt, its messages, the tools and the sampling settings."""
    task = load_suite("builtin")[0]
    recorder = Recorder()
    config = RolloutConfig(tasks=[task.id], out=tmp_path / "run", sandbox=SandboxConfig(backend="bwrap"))
    rollout(config, policy=recorder)
    assert [t.status for t in RunStore(config.out).trajectories()] == ["ok"]
    seen = "\n".join(recorder.seen)
    assert task.problem_statement.strip()[:40] in seen
    secrets = [*task.hidden_tests.files.values(), *task.hidden_tests.fail_to_pass, task.gold_patch or ""]
    assert all(secret and secret not in seen for secret in secrets)


def test_a_run_folder_is_continued_only_by_the_settings_that_made_it(tmp_path: Path) -> None:
    """Another policy (or sampling, seed, loop...) on a folder with trajectories is refused before anything
    is written, naming what differs; the same settings with more samples or another C continue it."""
    out = tmp_path / "run"
    config = RolloutConfig(
        suite=str(MINI), policy="scripted:gold", out=out, sandbox=SandboxConfig(backend="bwrap")
    )
    rollout(config)
    written = (out / "config.yaml").read_text()
    other = config.model_copy(update={"policy": "scripted:decoy"})
    with pytest.raises(
        RunFileError, match=r"policy: 'scripted:gold' -> 'scripted:decoy'[\s\S]*another --out"
    ):
        rollout(other)
    hotter = config.model_copy(update={"sampling": config.sampling.model_copy(update={"temperature": 0.3})})
    with pytest.raises(RunFileError, match=r"\(sampling\.temperature: [0-9.]+ -> 0\.3\)"):
        rollout(hotter)  # the one setting that changed, not its whole section
    assert (out / "config.yaml").read_text() == written  # the refused runs wrote nothing
    summary = rollout(config.model_copy(update={"group_size": 2, "concurrency": 1}))
    assert summary.trajectories == 2 * len(load_suite(str(MINI)))


def test_a_bad_policy_spec_fails_before_a_run_folder_is_made(tmp_path: Path) -> None:
    proc = harness("rollout", "--policy", "gpt4", "--out", str(tmp_path / "run"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "policy 'gpt4': expected BACKEND:ARGS" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()
