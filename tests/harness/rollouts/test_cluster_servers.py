"""`harness train` with rollout workers on Ray (`cluster.address=local`) that sample on an inference server
(`sampler=tito:...`, one `harness serve` on loopback): the workers hold no weights, the trainer loads each
step's weights on the server (through `harness serve`'s route, or vLLM's, which names no version: then the
workers tag tokens with the version the trainer tells them of), and every trajectory carries the version
that sampled it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.serve import create_app, running
from harness.training.train import train
from policies.hf import HFPolicy
from policies.tito import ReloadEndpoint
from tests.harness.training.test_train import config


@pytest.mark.timeout(90)
@pytest.mark.parametrize("reload", ["harness", "vllm"])
def test_ray_workers_sample_on_a_server_the_trainer_loads_each_steps_weights_on(
    reload: ReloadEndpoint, tiny_model_path: Path, tmp_path: Path
) -> None:
    served = HFPolicy(tiny_model_path)
    with running(create_app(served, model_name="tiny", max_model_len=4096)) as url:
        run = config(tiny_model_path, tmp_path / "run", 2)
        cluster = run.rollout.cluster.model_copy(
            update={"address": "local", "workers": 1, "worker_concurrency": 2}
        )
        rollout = run.rollout.model_copy(update={"cluster": cluster})
        update = {"sampler": f"tito:tiny@{url}", "sampler_reload": reload, "rollout": rollout}
        metrics = train(run.model_copy(update=update))
    assert len(metrics) == 2 and all(m["infra_errors"] == 0 for m in metrics)
    trajectories = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").open()]
    assert len(trajectories) == 6
    assert {t["policy_version"] for t in trajectories} == {0, 1}  # step 1 sampled with step 0's weights
    for t in trajectories:
        assert t["group_id"].endswith(f"@v{t['policy_version']}")
        assert all(
            turn["policy_version"] == t["policy_version"] for s in t["segments"] for turn in s["turns"]
        )
    # The trainer's last push reached the server: version 2, or, for vLLM's route, which takes no version,
    # the stand-in's third reload (the run's starting weights, then each step's).
    assert served.version == {"harness": 2, "vllm": 3}[reload]
    assert (tmp_path / "run" / "weights" / "step-2").is_dir()
