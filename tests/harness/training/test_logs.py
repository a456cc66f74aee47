"""A training run's metrics reach TensorBoard, Weights & Biases (offline) and MLflow (a file store) under
grouped names, while metrics.jsonl keeps the flat ones."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.training.logs import LogConfig, MetricsWriter, grouped

STEPS = [
    {"reward_mean": 0.25, "loss": 1.5, "time_rollout_s": 3.0, "staleness_mean": 0.5, "policy_version": 1.0},
    {"reward_mean": 0.75, "loss": 1.25, "time_rollout_s": 2.0, "staleness_mean": 0.0, "policy_version": 2.0},
]


def test_flat_names_are_grouped_as_trackers_show_them() -> None:
    assert [grouped(name) for name in STEPS[0]] == [
        "rollout/reward_mean", "learner/loss", "time/rollout_s", "async/staleness_mean", "train/policy_version",
    ]  # fmt: skip


def test_every_tracker_gets_each_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = tmp_path / "run"
    run.mkdir()
    config = LogConfig(report_to=["tensorboard", "wandb", "mlflow"], run_name="r1")
    writer = MetricsWriter(run, config, {"model": "m", "steps": 2})
    for step, metrics in enumerate(STEPS):
        writer.write(step, metrics)
    wandb_run = next(t for t in writer.trackers if type(t).__name__ == "WandB").run
    assert wandb_run.summary["rollout/reward_mean"] == 0.25  # W&B commits a step when the next one comes
    assert dict(wandb_run.config) == {"model": "m", "steps": 2}
    writer.close()

    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines == [{"step": step, **metrics} for step, metrics in enumerate(STEPS)]
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("rollout/reward_mean")] == [0.25, 0.75]
    client = MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name("coding-harness").experiment_id])
    assert found.info.run_name == "r1"
    history = client.get_metric_history(found.info.run_id, "learner/loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.5), (1, 1.25)]
    assert list((run / "wandb").glob("offline-run-*/run-*.wandb"))


def test_a_tracker_that_is_not_installed_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"log.report_to names wandb.*coding-harness\[trackers\]"):
        MetricsWriter(tmp_path, LogConfig(report_to=["wandb"]), {})


def test_a_resumed_run_logs_to_the_same_mlflow_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34, item 9: every invocation of one training run (each resume) opened a new MLflow run."""
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = tmp_path / "run"
    run.mkdir()
    config = LogConfig(report_to=["mlflow"])
    for step, metrics in enumerate(STEPS):  # two invocations, one step each
        writer = MetricsWriter(run, config, {"model": "m"})
        writer.write(step, metrics)
        writer.close()
    client = MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name("coding-harness").experiment_id])
    history = client.get_metric_history(found.info.run_id, "learner/loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.5), (1, 1.25)]
