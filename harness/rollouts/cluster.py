"""Rollout workers as Ray actors: `harness rollout` and `harness train` on a cluster (`cluster.address`).

Each `RolloutWorker` actor owns a sandbox pool on its node and its own policy, built from the run's spec,
and runs `run_one` for (task, sample) jobs. `ClusterRollouts` hands the jobs out, `worker_concurrency`
at a time per worker, and takes the trajectories back as they finish (`ray.wait`), with `run_batch`'s
contract. With an in-process policy (`hf:PATH`) new weights travel through Ray's object store (no shared
file system needed); with inference servers (`tito:MODEL@URLS`) the workers hold no weights: the trainer
loads them on the servers and tells the workers which servers hold which version (`use_servers`). A worker
that dies loses only its in-flight episodes: each is saved as an `infra_error` trajectory naming the
worker (never trained on) and queued again, and a replacement worker takes the dead one's place.

Ray is imported only here, and this module only when `cluster.address` is set.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from harness.agent.trajectory import Timings, Trajectory
from harness.rollouts.config import RolloutConfig
from harness.rollouts.episode import SandboxPool, episode_seed, run_one
from policies.base import Policy
from policies.spec import make_policy, parse_spec
from tasks.model import Task

NAMESPACE = "coding-harness"
MAX_LOSSES = 3
"""A job lost with this many dead workers is not queued again: its last infra_error trajectory stands."""
POLL_S = 0.5
"""How often the driver looks at the stop event while it waits for trajectories."""


LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""Ray turns a node address of 127.0.0.1 into the machine's network address and binds its servers there,
unless clusters are switched off, as on macOS: then every server of a local cluster listens on loopback."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise RuntimeError(
            "cluster.address is set but Ray is not installed: pip install 'coding-harness[ray]'"
        ) from e
    return ray


def start_local_ray(**options: Any) -> str:
    """Starts a Ray cluster of this machine alone, every server of it on 127.0.0.1, and returns its address.

    The processes Ray starts inherit LOOPBACK_ENV; this process reads it too, even if Ray was imported
    before. A cluster meant to span machines is started with `ray start`, not here."""
    ray = import_ray()
    os.environ.update(LOOPBACK_ENV)
    ray._private.ray_constants.ENABLE_RAY_CLUSTER = False
    options = {"include_dashboard": False, "namespace": NAMESPACE, **options}
    ray.init(address="local", _node_ip_address="127.0.0.1", **options)
    return str(ray.get_runtime_context().gcs_address)


def worker_name(run: str, index: int) -> str:
    """The Ray actor name of a run's index-th worker (replacements count on), in namespace NAMESPACE."""
    return f"rollout-{run}-{index}"


class RolloutWorker:
    """One actor's state: a sandbox pool on its node and its own copy of the policy (or client of the
    inference servers)."""

    def __init__(
        self,
        config: RolloutConfig,
        seed: int,
        state: Mapping[str, torch.Tensor] | None,
        version: int,
        make_policy: Callable[[], Policy] | None = None,
        servers: list[str] | None = None,
    ) -> None:
        self.config = config
        self.policy = make_policy() if make_policy is not None else _make_policy(config.policy, seed)
        # Here, not in a later call: a threaded actor may run calls out of order.
        if state is not None:
            self.load_state_dict(state, version)
        if servers is not None:
            self.use_servers(version, servers)
        self.pool = SandboxPool(config.sandbox)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.running = 0

    def run(self, task: Task, sample: int) -> str:
        """One rollout; the trajectory as JSON."""
        with self.lock:
            self.running += 1
        try:
            trajectory = run_one(
                task, sample, self.policy, self.config, self.pool, self.stop, self.config.out.name
            )
        finally:
            with self.lock:
                self.running -= 1
        return trajectory.model_dump_json()

    def in_flight(self) -> int:
        """Episodes running now."""
        return self.running

    def load_state_dict(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        from policies.hf import HFPolicy

        if not isinstance(self.policy, HFPolicy):
            raise TypeError(f"policy {self.policy.spec!r} takes no weights; only hf:PATH does")
        self.policy.load_state_dict(state, version)

    def use_servers(self, version: int, urls: list[str]) -> None:
        from policies.tito import TitoPolicy

        if not isinstance(self.policy, TitoPolicy):
            raise TypeError(f"policy {self.policy.spec!r} samples on no server; only tito:MODEL@URLS does")
        self.policy.follow(version, urls)

    def close(self) -> None:
        self.stop.set()
        self.pool.close_all()


def _make_policy(spec: str, seed: int) -> Policy:
    """`hf:PATH` gets the worker's own seed, so two workers never draw the same samples."""
    backend, args = parse_spec(spec)
    if backend == "hf":
        from policies.hf import HFPolicy

        return HFPolicy(args[0], spec=spec, seed=seed)
    return make_policy(spec)


@dataclass(frozen=True)
class _Job:
    task: Task
    sample: int
    losses: int = 0
    worker: str = ""
    started_at: float = 0.0


class ClusterRollouts:
    """The driver: `workers` RolloutWorker actors, jobs handed out as slots free up, dead ones replaced.

    `make_policy`, when given, builds each worker's policy instead of `config.policy` (`harness train`
    passes one for its inference servers, with the run's tokenizer); Ray ships it to the workers."""

    def __init__(self, config: RolloutConfig, make_policy: Callable[[], Policy] | None = None) -> None:
        self.ray = import_ray()
        self.config = config
        self.make_policy = make_policy
        self.owns_ray = not self.ray.is_initialized()
        if self.owns_ray and config.cluster.address == "local":
            start_local_ray()
        elif self.owns_ray:
            self.ray.init(address=config.cluster.address, namespace=NAMESPACE)
        slots = config.cluster.worker_concurrency
        # One thread more than episodes, so in_flight / load_state_dict answer while episodes run.
        self.actor_class = self.ray.remote(num_cpus=1, max_concurrency=slots + 1)(RolloutWorker)
        self.workers: dict[str, Any] = {}
        self.started = 0
        self.weights: tuple[Any, int] | None = None
        self.servers: tuple[int, list[str]] | None = None
        for _ in range(config.cluster.workers):
            self._start_worker()
        address = self.ray.get_runtime_context().gcs_address
        print(f"rollouts on {config.cluster.workers} Ray workers, cluster {address}", file=sys.stderr)

    def __enter__(self) -> ClusterRollouts:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _start_worker(self) -> None:
        name = worker_name(self.config.out.name, self.started)
        seed = zlib.crc32(f"{self.config.seed}/worker/{self.started}".encode())
        self.started += 1
        state = self.weights[0] if self.weights else None
        servers = self.servers[1] if self.servers else None
        options = self.actor_class.options(name=name, namespace=NAMESPACE)
        self.workers[name] = options.remote(self.config, seed, state, self.version, self.make_policy, servers)

    @property
    def version(self) -> int:
        """The policy version the workers sample with now."""
        if self.servers is not None:
            return self.servers[0]
        return self.weights[1] if self.weights else 0

    def load_state_dict(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """Every worker (and every later replacement) samples with these weights from now on."""
        self.weights = (self.ray.put(dict(state)), version)
        for name, handle in list(self.workers.items()):
            try:
                self.ray.get(handle.load_state_dict.remote(*self.weights))
            except self.ray.exceptions.RayActorError:
                self._replace(name)

    def use_servers(self, version: int, urls: list[str]) -> None:
        """Every worker (and every later replacement) samples on the servers at `urls`, which hold weights
        `version`, from now on."""
        self.servers = (version, list(urls))
        for name, handle in list(self.workers.items()):
            try:
                self.ray.get(handle.use_servers.remote(*self.servers))
            except self.ray.exceptions.RayActorError:
                self._replace(name)

    def _replace(self, name: str) -> None:
        if self.workers.pop(name, None) is not None:
            self._start_worker()

    def run_batch(
        self,
        jobs: list[tuple[Task, int]],
        save: Callable[[Trajectory], object],
        stop: threading.Event | None = None,
    ) -> list[Trajectory]:
        """Runs the (task, sample index) jobs on the workers; `save` gets each trajectory as it finishes,
        the `infra_error` ones of lost episodes included. On stop, episodes in flight are abandoned."""
        stop = stop or threading.Event()
        queue = deque(_Job(task, sample) for task, sample in jobs)
        running: dict[Any, _Job] = {}
        finished: list[Trajectory] = []
        while (queue or running) and not stop.is_set():
            self._hand_out(queue, running)
            ready, _ = self.ray.wait(list(running), num_returns=1, timeout=POLL_S)
            for ref in ready:
                if ref in running:  # a worker's death may have taken it already
                    for trajectory in self._collect(ref, running, queue):
                        save(trajectory)
                        finished.append(trajectory)
        return finished

    def _hand_out(self, queue: deque[_Job], running: dict[Any, _Job]) -> None:
        busy: dict[str, int] = {}
        for job in running.values():
            busy[job.worker] = busy.get(job.worker, 0) + 1
        for name, handle in self.workers.items():
            while queue and busy.get(name, 0) < self.config.cluster.worker_concurrency:
                job = replace(queue.popleft(), worker=name, started_at=time.time())
                running[handle.run.remote(job.task, job.sample)] = job
                busy[name] = busy.get(name, 0) + 1

    def _collect(self, ref: Any, running: dict[Any, _Job], queue: deque[_Job]) -> list[Trajectory]:
        """The finished job's trajectory; or, if its worker died, an infra_error one for each of the
        worker's jobs in flight, which go back to the queue."""
        job = running.pop(ref)
        try:
            return [Trajectory.model_validate_json(self.ray.get(ref))]
        except self.ray.exceptions.RayActorError as e:
            lost = [job, *(running.pop(r) for r in [r for r, j in running.items() if j.worker == job.worker])]
            self._replace(job.worker)
            queue.extendleft(replace(j, losses=j.losses + 1) for j in lost if j.losses + 1 < MAX_LOSSES)
            reason = f"worker {job.worker} died: {type(e).__name__}"
            return [self._lost(j, reason) for j in lost]

    def _lost(self, job: _Job, reason: str) -> Trajectory:
        version = self.version
        return Trajectory(
            id=f"{job.task.id}/{job.sample}/lost-{job.losses}",
            run=self.config.out.name,
            task_id=job.task.id,
            group_id=f"{job.task.id}@v{version}",
            sample_index=job.sample,
            policy=self.config.policy,
            policy_version=version,
            seed=episode_seed(self.config.seed, job.task.id, job.sample),
            trainable=False,
            status="infra_error",
            status_reason=reason,
            timings=Timings(started_at=job.started_at, duration_s=time.time() - job.started_at),
        )

    def close(self) -> None:
        """Closes every worker's sandboxes, then ends the workers (and Ray, if this started it)."""
        handles = list(self.workers.values())
        self.workers.clear()
        try:
            self.ray.get([h.close.remote() for h in handles], timeout=30)
        except Exception:  # a dead or stuck worker: its sandboxes expire and are reaped
            pass
        for handle in handles:
            self.ray.kill(handle)
        if self.owns_ray:
            self.ray.shutdown()
