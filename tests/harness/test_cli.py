"""The `harness` command line, run as a user runs it: a real process on real sandboxes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = [sys.executable, "-m", "harness.cli"]


def harness(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HARNESS, *args], input=stdin, capture_output=True, text=True, timeout=timeout)


def test_sandbox_run_prints_a_json_result(backend: str, sample_repo: Path) -> None:
    proc = harness(
        "sandbox", "run", "--backend", backend, "--dir", str(sample_repo), "--", "cat", "README.md"
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result == {
        "exit_code": 0,
        "output": "# sample\n",
        "timed_out": False,
        "truncated": False,
        "duration_s": result["duration_s"],
    }


def test_sandbox_run_reports_timeouts_and_failures(backend: str) -> None:
    proc = harness("sandbox", "run", "--backend", backend, "--timeout", "1", "--", "echo start; sleep 30")
    result = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert result["timed_out"] is True and result["exit_code"] is None
    assert result["output"] == "start\n"
    assert result["duration_s"] < 1 + 2 + 7  # timeout and kill grace; not the 30 s sleep, on a busy host too

    proc = harness("sandbox", "run", "--backend", backend, "--", "sh", "-c", "exit 7")
    assert json.loads(proc.stdout)["exit_code"] == 7


def test_sandbox_run_rejects_bad_input(backend: str, tmp_path: Path) -> None:
    proc = harness("sandbox", "run", "--backend", backend, "--")
    assert proc.returncode != 0 and "give a command" in proc.stderr
    proc = harness("sandbox", "run", "--backend", backend, "--dir", str(tmp_path / "missing"), "--", "true")
    assert proc.returncode != 0 and "not a directory" in proc.stderr
    proc = harness("sandbox", "run", "--backend", "nosuch", "--", "true")
    assert proc.returncode == 2 and "backend" in proc.stderr


def test_sandbox_shell_keeps_the_working_folder(backend: str, sample_repo: Path) -> None:
    session = "ls\ncd pkg\npwd\nfalse\nexit\n"
    proc = harness("sandbox", "shell", "--backend", backend, "--dir", str(sample_repo), stdin=session)
    assert proc.returncode == 0, proc.stderr
    assert "README.md" in proc.stdout
    assert "/repo/pkg\n" in proc.stdout
    assert "[exit 1]" in proc.stdout


def test_demo_plays_a_builtin_task_end_to_end(backend: str) -> None:
    proc = harness("demo", "--episode", "--backend", backend, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "PASS: reward 1.000" in proc.stdout and "turn 1: list_dir" in proc.stdout


def test_harness_model_tiny_makes_a_model_folder_that_serves_and_refuses_a_full_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new user's way to a model without a download: the folder `hf:`, `serve` and `train` take."""
    out = tmp_path / "tiny"
    proc = harness("model", "tiny", "--out", str(out), "--layers", "1", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    assert f"harness serve --model {out}" in proc.stdout
    from policies.hf import HFPolicy

    assert HFPolicy(out).model.config.num_hidden_layers == 1
    from harness.cli import main

    assert main(["model", "tiny", "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err


def test_harness_version_and_runs_on_a_folder_of_runs(tmp_path: Path) -> None:
    version = harness("--version")
    assert version.returncode == 0 and version.stdout.startswith("harness ")
    mini = Path(__file__).parents[1] / "data" / "suites" / "mini"
    for name, policy in (("gold", "scripted:gold"), ("decoy", "scripted:decoy")):
        made = harness(
            "rollout", "--suite", str(mini), "--policy", policy, "--backend", "bwrap",
            "--out", str(tmp_path / "runs" / name), timeout=300,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr[-2000:]
    (tmp_path / "runs" / "notes").mkdir()  # not a run: left out
    listed = harness("runs", str(tmp_path / "runs"))
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in listed.stdout.splitlines() if "scripted:" in line]
    assert len(lines) == 2 and "gold" in lines[1] and "decoy" in lines[0] and "notes" not in listed.stdout


def test_a_demo_whose_pass_rate_did_not_rise_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The exit status 1 comes with the reason (the demo's run itself is `test_train_demo.py`'s)."""
    from harness import cli
    from harness.training import train_demo

    flat = train_demo.DemoResult(
        baseline_pass_rate=0.25, final_pass_rate=0.25, baseline_reward=0.2, final_reward=0.2,
        rewards=[0.2], summaries_per_trajectory=[1.0], warm_start_epochs=3,
    )  # fmt: skip
    monkeypatch.setattr(train_demo, "run_training_demo", lambda config: flat)
    assert cli.main(["demo", "--out", str(tmp_path / "demo"), "grpo_steps=1"]) == 1
    assert (
        "The pass rate did not rise (0.250 after the warm start, 0.250 after GRPO)" in capsys.readouterr().err
    )


def test_a_rollout_whose_every_episode_is_an_infra_error_exits_non_zero(tmp_path: Path) -> None:
    """Issue 34, item 4: a policy server that does not answer leaves nothing graded; the command says so
    in one line, with the cause, and exits 1 (it exited 0)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))  # a port nothing listens on: bound, never accepting
    port = listener.getsockname()[1]
    try:
        proc = harness("rollout", "--suite", "builtin", "--tasks", "kvstore-001-expire-boundary", "--policy",
                       f"openai:m@http://127.0.0.1:{port}/v1", "--backend", "bwrap", "--out",
                       str(tmp_path / "run"), timeout=300)  # fmt: skip
    finally:
        listener.close()
    assert proc.returncode == 1, proc.stderr[-2000:]
    said = " ".join(proc.stderr.split())
    assert "every episode ended in infra_error (1 of 1: APIConnectionError: " in said, said[-2000:]
    assert "Connection error" in said and "run the same command again" in said, said[-2000:]
    assert "Traceback" not in proc.stderr


def test_a_missing_local_model_is_not_taken_for_a_hub_id(tmp_path: Path) -> None:
    """Issue 34, item 4: `--policy hf:runs/no-such-model` tried the Hub five times, ended in a 92-line
    traceback and left config.yaml in the new run folder. Now one line, exit 2, nothing written."""
    (tmp_path / "runs").mkdir()
    out = tmp_path / "runs" / "r"
    proc = subprocess.run(
        [*HARNESS, "rollout", "--policy", "hf:runs/no-such-model", "--suite", "demo", "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert (
        "harness: policy 'hf:runs/no-such-model': runs/no-such-model is not a model folder here"
        in proc.stderr
    )
    assert "Traceback" not in proc.stderr and not out.exists()
    for local in ("./no-such-model", "/no/such/model", "a/b/c"):
        proc = harness("rollout", "--policy", f"hf:{local}", "--suite", "demo", "--out", str(out))
        assert proc.returncode == 2 and "is not a model folder here" in proc.stderr, proc.stderr
    # tito:MODEL@URL loads MODEL's tokenizer: `tito:tiny@URL` against `harness serve` went to the Hub too
    proc = harness(
        "rollout", "--policy", "tito:tiny@http://127.0.0.1:9/v1", "--suite", "demo", "--out", str(out)
    )
    assert proc.returncode == 2 and "loads the served model's tokenizer from MODEL" in proc.stderr, (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr and not out.exists()


def test_an_episode_that_ended_in_infra_error_runs_again_and_runs_counts_its_last_try(tmp_path: Path) -> None:
    """Issue 34, item 2: re-running the command printed 0/0, the failed episodes counted as done. Now they
    run again (the failed line kept), `--keep-failed` leaves them, and `harness runs` counts last tries."""
    out = tmp_path / "run"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing answers there
    command = ["rollout", "--suite", "demo", "--tasks", "demo-add", "--policy", f"openai:m@http://127.0.0.1:{port}/v1",
               "--backend", "bwrap", "--out", str(out)]  # fmt: skip
    for _ in range(2):
        assert harness(*command, timeout=300).returncode == 1
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 2
    assert harness(*command, "--keep-failed", timeout=300).returncode == 1
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 2
    listed = harness("runs", str(out))
    said = " ".join(listed.stdout.split())
    assert (
        "infra_error, run again" in said and "infra_error 1 · 1 earlier tries of episodes run again" in said
    ), said
