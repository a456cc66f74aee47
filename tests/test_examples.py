"""The recipes in examples/ read as the settings they are for, and the rollout recipe runs as written."""

from __future__ import annotations

import json
from pathlib import Path

from harness.config import load_config
from harness.rollouts.config import RolloutConfig
from harness.training.sft import SFTConfig
from harness.training.train import TrainConfig
from tasks.suite import load_suite
from tests.harness.test_cli import harness

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RECIPES = {"rollout.yaml": RolloutConfig, "sft.yaml": SFTConfig, "train.yaml": TrainConfig}


def test_every_recipe_reads_as_its_settings_and_the_readme_shows_it() -> None:
    assert {p.name for p in EXAMPLES.glob("*.yaml")} == set(RECIPES)
    readme = (EXAMPLES / "README.md").read_text()
    for name, model in RECIPES.items():
        config = load_config(model, EXAMPLES / name, [])
        assert f"examples/{name}" in readme
        assert name.removesuffix(".yaml") in (EXAMPLES / name).read_text().splitlines()[0]  # how to run it
        assert (
            config.model_dump()
            != model.model_validate({"model": "m"} if "model" in model.model_fields else {}).model_dump()
        )  # it sets something
    train = load_config(TrainConfig, EXAMPLES / "train.yaml", [])
    assert train.rollout.group_size >= 2 and train.rollout.suite == "demo"


def test_the_rollout_recipe_runs_as_written(tmp_path: Path) -> None:
    task = load_suite("builtin")[0]
    proc = harness(
        "rollout", "--config", str(EXAMPLES / "rollout.yaml"), "--backend", "bwrap", "--json",
        f"tasks=[{task.id}]", f"out={tmp_path / 'run'}", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert (summary["trajectories"], summary["pass_at_1"]) == (2, 1.0)
