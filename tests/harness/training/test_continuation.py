"""A training run's folder is continued only with the settings that made it (issue 34, item 1)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from harness.rollouts.config import RolloutConfig, changed_producers
from harness.training.continuation import CHANGEABLE, changed_settings
from tests.harness.test_cli import HARNESS, harness
from tests.harness.training.test_train import MINI, config


def test_what_shapes_the_learning_must_stay_and_how_long_or_where_may_change() -> None:
    before = {
        "steps": 2,
        "learner": {"lr": 1e-3},
        "rollout": {"group_size": 3, "concurrency": 2, "suite": "a"},
    }
    now = {"steps": 5, "learner": {"lr": 1e-2}, "rollout": {"group_size": 4, "concurrency": 8, "suite": "b"}}
    assert changed_settings(before, now, CHANGEABLE) == [
        "learner.lr: 0.001 -> 0.01",
        "rollout.group_size: 3 -> 4",
        "rollout.suite: 'a' -> 'b'",
    ]
    assert changed_settings(before, {**before, "log": {"wandb": True}}, CHANGEABLE) == []


def test_a_rollout_run_names_only_the_setting_that_changed() -> None:
    """Issue 34, item 9: the refusal printed the whole loop settings, system prompt and all."""
    before = RolloutConfig.model_validate({"suite": "builtin", "policy": "scripted:gold"})
    now = before.model_copy(update={"sampling": before.sampling.model_copy(update={"temperature": 0.5})})
    assert changed_producers(before, now) == [f"sampling.temperature: {before.sampling.temperature!r} -> 0.5"]


def test_a_resume_with_other_settings_is_refused_and_writes_nothing(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    path = tmp_path / "train.yaml"
    path.write_text(config(tiny_model_path, out, 1).model_dump_json())
    first = harness("train", "--config", str(path), timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    other_suite = tmp_path / "suite"
    other_suite.symlink_to(MINI)
    for override, named in (
        ("learner.lr=0.01", "learner.lr: 0.001 -> 0.01"),
        ("rollout.sampling.temperature=0.5", "rollout.sampling.temperature: 1.0 -> 0.5"),
        (f"rollout.suite={other_suite}", "rollout.suite:"),
        ("rollout.group_size=4", "rollout.group_size: 3 -> 4"),
    ):
        refused = harness("train", "--config", str(path), "--resume", override)
        assert refused.returncode == 2 and named in refused.stderr, refused.stderr[-2000:]
        assert "--allow-changes" in refused.stderr and "Traceback" not in refused.stderr
    again = harness("train", "--config", str(path))  # no --resume: a second run would append to the first
    assert again.returncode == 2 and "continue it with --resume" in again.stderr, again.stderr[-2000:]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files  # nothing written

    changed = harness(
        "train",
        "--config",
        str(path),
        "--resume",
        "--allow-changes",
        "steps=2",
        "learner.lr=0.002",
        timeout=600,
    )
    assert changed.returncode == 0, changed.stderr[-2000:]
    assert "changed on purpose" in changed.stderr
    (record,) = [json.loads(line) for line in (out / "changes.jsonl").read_text().splitlines()]
    assert record["changes"] == ["learner.lr: 0.001 -> 0.002"]  # steps may change without a word
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [0, 1]


def test_ctrl_c_during_train_says_how_to_go_on_in_one_line(tiny_model_path: Path, tmp_path: Path) -> None:
    """Issue 34, item 5: Ctrl-C during `train` printed 45 lines of traceback and no word of --resume."""
    out = tmp_path / "run"
    path = tmp_path / "train.yaml"
    path.write_text(config(tiny_model_path, out, 50).model_dump_json())
    proc = subprocess.Popen(
        [*HARNESS, "train", "--config", str(path), "checkpoint_every=1"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    said: list[str] = []
    for line in proc.stderr:  # the first step done and checkpointed, then Ctrl-C
        said.append(line)
        if line.startswith("step 1/50"):
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=180)
    text = " ".join(("".join(said) + rest).split())
    assert proc.returncode == 130, text[-2000:]
    assert "Traceback" not in text, text[-3000:]
    assert (
        f"interrupted: {out} keeps what was done, and its last checkpoint is {out / 'checkpoints'}/step-"
        in text
    )
    assert f"go on with: harness train --config {path} checkpoint_every=1 --resume" in text


def test_sft_and_demo_refuse_a_folder_that_holds_their_output(tiny_model_path: Path, tmp_path: Path) -> None:
    """Issue 34, item 1: they cannot be continued, so a second run on the same folder is refused before
    anything is written (a second demo appended its GRPO steps to the first's)."""
    sft_out = tmp_path / "sft"
    (sft_out / "model").mkdir(parents=True)
    refused = harness("sft", f"model={tiny_model_path}", f"out={sft_out}")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert f"{sft_out} already holds a warm-started model (model/): choose another out" in refused.stderr
    demo_out = tmp_path / "demo"
    (demo_out / "base").mkdir(parents=True)
    refused = harness("demo", "--out", str(demo_out))
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and f"{demo_out} already holds a run: pass --out {demo_out}-2" in said, (
        said
    )
    assert sorted(p.name for p in demo_out.iterdir()) == ["base"] and not any((sft_out / "model").iterdir())
