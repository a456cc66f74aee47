"""The recipes in examples/ read as the settings they are for, and the CPU ones run small: the rollout
recipe as written; SWE-bench import and evaluation on a small imported dataset; the provider recipe
against `harness serve` of a tiny model; the Ray cluster recipe on a cluster of this machine. The GPU
recipes (one GPU with an inference server, FSDP) are read and checked for what makes them what they
are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.config import load_config
from harness.rollouts.config import RolloutConfig
from harness.training.sft import SFTConfig
from harness.training.train import TrainConfig
from tasks.suite import load_suite
from tests.harness.test_cli import harness

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RECIPES = {
    "rollout.yaml": RolloutConfig,
    "sft.yaml": SFTConfig,
    "train.yaml": TrainConfig,
    "gpu-server.yaml": TrainConfig,
    "fsdp.yaml": TrainConfig,
    "ray-cluster.yaml": TrainConfig,
    "swebench.yaml": RolloutConfig,
    "provider.yaml": RolloutConfig,
}


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


def rolled_out(recipe: str, out: Path, *overrides: str) -> dict[str, Any]:
    """The JSON summary of `harness rollout --config examples/RECIPE` on bwrap, with `overrides`."""
    proc = harness(
        "rollout", "--config", str(EXAMPLES / recipe), "--backend", "bwrap", "--json", *overrides, f"out={out}",
        timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def test_the_rollout_recipe_runs_as_written(tmp_path: Path) -> None:
    task = load_suite("builtin")[0]
    summary = rolled_out("rollout.yaml", tmp_path / "run", f"tasks=[{task.id}]")
    assert (summary["trajectories"], summary["pass_at_1"]) == (2, 1.0)


def test_the_gpu_recipes_say_what_makes_them_theirs() -> None:
    server = load_config(TrainConfig, EXAMPLES / "gpu-server.yaml", [])
    assert server.sampler is not None and server.sampler.startswith("tito:") and server.device == "cuda"
    assert server.learner.dtype == "bfloat16" and server.mode == "async"
    fsdp = load_config(TrainConfig, EXAMPLES / "fsdp.yaml", [])
    assert fsdp.learner.parallel == "fsdp" and "torchrun" in (EXAMPLES / "fsdp.yaml").read_text()
    cluster = load_config(TrainConfig, EXAMPLES / "ray-cluster.yaml", [])
    assert cluster.rollout.cluster.address == "auto" and cluster.rollout.cluster.workers >= 2
    provider = load_config(RolloutConfig, EXAMPLES / "provider.yaml", [])
    assert provider.policy.startswith("litellm:")


def test_the_swebench_recipe_imports_and_evaluates_a_dataset(tmp_path: Path) -> None:
    from tests.tasks.test_swebench import Dataset

    data = Dataset(tmp_path / "data")
    imported = harness(
        "tasks", "import", "swebench", str(data.file), "--repos", str(data.clones), "--out", str(data.suite),
        "--backend", "bwrap", timeout=900,
    )  # fmt: skip
    assert "acme__calc-2" in imported.stdout, imported.stdout + imported.stderr
    summary = rolled_out("swebench.yaml", tmp_path / "run", f"suite={data.suite}")
    assert summary["trajectories"] == summary["tasks"] >= 2 and summary["pass_at_1"] == 1.0, summary


def test_the_provider_recipe_rolls_out_against_a_server_of_ones_own(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    from harness.serve import create_app, running
    from policies.hf import HFPolicy

    task = load_suite("builtin")[0]
    with running(create_app(HFPolicy(tiny_model_path), model_name="tiny")) as url:
        summary = rolled_out(
            "provider.yaml", tmp_path / "run", f"policy=litellm:openai/tiny@{url}", f"tasks=[{task.id}]",
            "group_size=1", "loop.max_turns=2", "sampling.max_new_tokens=16",
        )  # fmt: skip
    assert summary["trajectories"] == 1 and "infra_error" not in summary["statuses"], summary


def test_the_ray_cluster_recipe_trains_on_a_cluster_of_this_machine(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    task = load_suite("demo")[0]
    proc = harness(
        "train", "--config", str(EXAMPLES / "ray-cluster.yaml"), f"model={tiny_model_path}", "steps=1",
        "tasks_per_step=1", "rollout.suite=demo", f"rollout.tasks=[{task.id}]", "rollout.group_size=2",
        "rollout.concurrency=2", "rollout.cluster.address=local", "rollout.cluster.workers=1",
        "rollout.sandbox.backend=bwrap", "rollout.sampling.max_new_tokens=16", "rollout.loop.max_turns=2",
        f"rollout.out={tmp_path / 'run'}", timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(line)["step"] == 0
