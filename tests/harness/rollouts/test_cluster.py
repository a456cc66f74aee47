"""`harness train` with rollout workers as Ray actors on a local 2-CPU Ray cluster: killing a worker mid-run
neither stops the run nor puts its lost episodes into the loss; they are saved as infra_error and run
again; every trained token stays within `max_staleness` and the importance weights are logged."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from harness.rollouts.cluster import NAMESPACE, start_local_ray, worker_name
from harness.rollouts.store import RunStore
from harness.training.train import train
from tests.harness.training.test_train_async import async_config, trained_staleness


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    start_local_ray(num_cpus=2)
    yield
    ray.shutdown()


def kill_when_busy(name: str, killed: threading.Event, done: threading.Event) -> None:
    """Kills the actor `name` once it has an episode in flight, trying until `done` (the run ended): on a
    busy host the workers take minutes to start."""
    while not done.is_set():
        try:
            actor = ray.get_actor(name, namespace=NAMESPACE)
            if ray.get(actor.in_flight.remote(), timeout=10) > 0:
                ray.kill(actor)
                killed.set()
                return
        except (ValueError, ray.exceptions.RayError):  # not started yet
            pass
        time.sleep(0.05)


@pytest.mark.timeout(600)
def test_a_killed_worker_loses_only_its_episodes_which_run_again_untrained(
    local_ray: None, tiny_model_path: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    config = async_config(tiny_model_path, run, max_staleness=1)
    cluster = config.rollout.cluster.model_copy(update={"address": "auto", "workers": 2})
    config = config.model_copy(update={"rollout": config.rollout.model_copy(update={"cluster": cluster})})
    killed, done = threading.Event(), threading.Event()
    killer = threading.Thread(
        target=kill_when_busy, args=(worker_name(run.name, 0), killed, done), daemon=True
    )
    killer.start()
    try:
        metrics = train(config)
    finally:
        done.set()
    killer.join()
    assert killed.is_set() and len(metrics) == 3

    trajectories = list(RunStore(run).trajectories())
    lost = [t for t in trajectories if t.status == "infra_error"]
    assert lost and all(
        t.status_reason == f"worker {worker_name(run.name, 0)} died: ActorDiedError" for t in lost
    )
    redone = {(t.task_id, t.sample_index) for t in trajectories if t.status != "infra_error"}
    assert {(t.task_id, t.sample_index) for t in lost} <= redone  # every lost episode ran again
    assert sum(m["infra_errors"] for m in metrics) == len(lost)
    trained_ids = {
        json.loads(line)["trajectory_id"] for line in (run / "learner.jsonl").read_text().splitlines()
    }
    assert trained_ids and not trained_ids & {t.id for t in lost}

    trained = trained_staleness(run)
    assert {step for step, _ in trained} == {0, 1, 2}
    assert all(0 <= staleness <= config.max_staleness for _, staleness in trained)
    assert all("is_abs_log_ratio_mean" in m and "is_truncated_fraction" in m for m in metrics)
    assert metrics[1]["staleness_max"] == 1 and metrics[1]["is_abs_log_ratio_mean"] > 1e-3
