"""Where a training run's metrics go: metrics.jsonl always (flat names, one line per step, what the
viewer and `harness runs` read), and the trackers of `log.report_to` under grouped names
(`rollout/reward_mean`, `learner/loss`, `time/rollout_s`), as verl, SkyRL and TRL users find them:
TensorBoard (RUN/tensorboard), Weights & Biases and MLflow (`pip install 'coding-harness[trackers]'`).

W&B follows its environment as usual (`WANDB_MODE=offline`, `WANDB_API_KEY`, ...) and keeps its files in
RUN/wandb; MLflow logs to `MLFLOW_TRACKING_URI` when it is set, else to RUN/mlruns.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from harness.rollouts.store import append_line

ROLLOUT_METRICS = frozenset(
    {
        "reward_mean", "pass_rate", "infra_errors", "turns_mean", "summaries_per_trajectory",
        "tokens_generated", "tokens_total", "parse_errors_mean", "suspicious_fraction", "tampered_fraction",
        "unprotected_fraction",
    }
)  # fmt: skip
"""The step's rollout metrics (`harness/training/train.step_metrics`)."""
ASYNC_METRICS = frozenset({"groups_dropped_stale", "staleness_mean", "staleness_max"})
TrackerName = Literal["tensorboard", "wandb", "mlflow"]


def _tensorboard_only() -> list[TrackerName]:
    return ["tensorboard"]


class LogConfig(BaseModel):
    """Where a training run's metrics go besides metrics.jsonl."""

    model_config = ConfigDict(extra="forbid")

    report_to: list[TrackerName] = Field(default_factory=_tensorboard_only)
    """Trackers that get every step's metrics, under grouped names: `tensorboard` (RUN/tensorboard),
    `wandb`, `mlflow`; empty for none."""
    project: str = "coding-harness"
    """The W&B project, and the MLflow experiment."""
    run_name: str | None = None
    """The run's name in W&B and MLflow; default: the run folder's name."""


def grouped(name: str) -> str:
    """A flat metric name as trackers show it: `rollout/`, `async/`, `time/`, `train/` or `learner/`."""
    if name.startswith("time_"):
        return f"time/{name.removeprefix('time_')}"
    if name in ROLLOUT_METRICS:
        return f"rollout/{name}"
    if name in ASYNC_METRICS:
        return f"async/{name}"
    if name == "policy_version":
        return "train/policy_version"
    return f"learner/{name}"


class Tracker(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoard:
    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandB:
    def __init__(self, run_dir: Path, config: LogConfig, settings: dict[str, Any]) -> None:
        wandb = _need("wandb")
        name = config.run_name or run_dir.name
        # One W&B run per run folder: a resumed run continues it.
        self.run = wandb.init(
            project=config.project, name=name, id=_run_id(run_dir), resume="allow", dir=str(run_dir),
            config=settings,
        )  # fmt: skip

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


MLFLOW_RUN_FILE = "mlflow_run_id"
"""The MLflow run a run folder's metrics go to, written when its first start made it."""


class MLflow:
    def __init__(self, run_dir: Path, config: LogConfig, settings: dict[str, Any]) -> None:
        mlflow = _need("mlflow")
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # a folder of the run, no server
            mlflow.set_tracking_uri((run_dir / "mlruns").resolve().as_uri())
        mlflow.set_experiment(config.project)
        self.mlflow = mlflow
        # One MLflow run per run folder, as for W&B: a resumed run continues the run its first start made.
        record = run_dir / MLFLOW_RUN_FILE
        earlier = record.read_text().strip() if record.is_file() else ""
        try:
            self.run = mlflow.start_run(run_id=earlier) if earlier else None
        except mlflow.exceptions.MlflowException:  # another tracking store, or the run was deleted there
            self.run = None
        if self.run is None:
            self.run = mlflow.start_run(run_name=config.run_name or run_dir.name)
            record.write_text(self.run.info.run_id + "\n")
            mlflow.log_dict(settings, "config.json")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.mlflow.log_metrics(metrics, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"log.report_to names {module}, which is not installed ({e}): pip install 'coding-harness[trackers]'"
        ) from e


def _run_id(run_dir: Path) -> str:
    import hashlib

    return hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:16]


class MetricsWriter:
    """One JSON line per step in metrics.jsonl, and the same scalars, grouped, to each tracker."""

    def __init__(
        self, run_dir: Path, config: LogConfig | None = None, settings: dict[str, Any] | None = None
    ) -> None:
        config = config or LogConfig()
        self.path = run_dir / "metrics.jsonl"
        makers: dict[str, Callable[[], Tracker]] = {
            "tensorboard": lambda: TensorBoard(run_dir),
            "wandb": lambda: WandB(run_dir, config, settings or {}),
            "mlflow": lambda: MLflow(run_dir, config, settings or {}),
        }
        self.trackers: list[Tracker] = [makers[name]() for name in dict.fromkeys(config.report_to)]

    def write(self, step: int, metrics: dict[str, float]) -> None:
        append_line(self.path, json.dumps({"step": step, **metrics}))
        named = {grouped(name): value for name, value in metrics.items()}
        for tracker in self.trackers:
            tracker.log(step, named)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()
