"""`harness rollout`: G rollouts of each task, C at a time, graded and saved as they finish.

Episodes run in worker threads driven by asyncio (sandbox and model calls block); sandboxes are pooled
per task and reset between episodes. Every finished trajectory is one fsynced line of the run file; a
restarted run skips what is done. Ctrl-C stops cleanly: in-flight episodes are abandoned (they run
again on restart), everything finished is already saved. With `cluster.address` the episodes run on Ray
actors instead (`harness/rollouts/cluster.py`), with the same contract.
"""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from envs.factory import resolve_backend, start_task_sandbox
from envs.grading import collect_patch, grade_patch
from envs.lifecycle import closing, current_owner
from envs.replacing import ReplacingSandbox
from envs.reward import RewardConfig
from envs.sandbox import SandboxConfig, SandboxError
from envs.start_tree import run_setup
from harness.agent.loop import LoopConfig, Stopped, run_episode
from harness.agent.trajectory import Timings, Trajectory
from harness.rollouts.store import RunStore
from policies.base import Policy, SamplingParams
from policies.spec import make_policy
from summarizer import SummaryConfig
from tasks.model import Task
from tasks.suite import TaskError, load_suite
from tools import Toolbox, ToolsConfig


class ClusterConfig(BaseModel):
    """Rollout workers as Ray actors (`harness/rollouts/cluster.py`); without `address` everything runs in this
    process and Ray is not imported."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = None
    """A Ray address: `auto` (a running cluster), `local` (start one here), `ray://HOST:PORT`. None: no Ray."""
    workers: int = Field(default=2, ge=1)
    """Rollout worker actors, each with its own sandbox pool and copy of the policy."""
    worker_concurrency: int = Field(default=1, ge=1)
    """Episodes at once on each worker."""


class RolloutConfig(BaseModel):
    """A rollout run; saved as the run's config.yaml."""

    model_config = ConfigDict(extra="forbid")

    suite: str = "builtin"
    """A built-in suite's name or a suite folder."""
    tasks: list[str] | None = None
    """Task ids to run (default: all of the suite)."""
    policy: str = "scripted:gold"
    """Policy spec: hf:PATH, tito:MODEL@URL, openai:MODEL@URL, litellm:MODEL, scripted:gold, scripted:FILE."""
    group_size: int = Field(default=1, ge=1)
    """Rollouts per task (G)."""
    concurrency: int = Field(default=2, ge=1)
    """Episodes at once (C)."""
    seed: int = 0
    out: Path = Path("runs/rollout")
    loop: LoopConfig = Field(default_factory=LoopConfig)
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    summary: SummaryConfig = Field(default_factory=SummaryConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)


class RolloutSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks: int
    trajectories: int
    pass_at_1: float
    pass_at_g: float
    mean_reward: float
    mean_turns: float
    mean_summaries: float
    mean_tokens: float
    statuses: dict[str, int]
    failures: dict[str, int]
    suspicious: int = 0
    """Trajectories whose grade found suspect additions (`Grade.suspicion`)."""
    tampered: int = 0
    """Trajectories whose grade found tampering (forged outcomes, a passing canary)."""


class SandboxPool:
    """Idle sandboxes per task, reset before reuse; a sandbox that fails to reset is replaced.

    `auto` is resolved once, so a run never switches backends: a Docker daemon that stops answering
    mid-run gives infra errors, not rollouts run and graded on the host's system instead. Making a pool
    reaps what dead runs left, even when this run needs no sandbox (a resumed run with only learning left).
    """

    def __init__(self, config: SandboxConfig) -> None:
        current_owner(config.state_dir, config.expiry_s)
        try:
            config = config.model_copy(update={"backend": resolve_backend(config.backend)})
        except SandboxError:
            pass  # no backend at all: every start fails, as an infra error
        self.config = config
        self.idle: dict[str, list[ReplacingSandbox]] = {}
        self.busy: set[ReplacingSandbox] = set()
        self.lock = threading.Lock()

    def acquire(self, task: Task) -> ReplacingSandbox:
        with self.lock:
            sandbox = self.idle.get(task.id, []).pop() if self.idle.get(task.id) else None
        if sandbox is not None:
            try:
                sandbox.reset()
            except SandboxError:
                sandbox.close()
                sandbox = None
        if sandbox is None:
            sandbox = ReplacingSandbox(lambda: start_task_sandbox(task, self.config))
        with self.lock:
            self.busy.add(sandbox)
        run_setup(sandbox, task)
        return sandbox

    def release(self, task: Task, sandbox: ReplacingSandbox) -> None:
        with self.lock:
            self.busy.discard(sandbox)
            self.idle.setdefault(task.id, []).append(sandbox)

    def close_all(self) -> None:
        with self.lock:
            everything = [*self.busy, *(s for group in self.idle.values() for s in group)]
            self.busy.clear()
            self.idle.clear()
        for sandbox in everything:
            sandbox.close()


def episode_seed(seed: int, task_id: str, sample: int) -> int:
    return zlib.crc32(f"{seed}/{task_id}/{sample}".encode())


def run_one(
    task: Task,
    sample: int,
    policy: Policy,
    config: RolloutConfig,
    pool: SandboxPool,
    stop: threading.Event,
    run_name: str,
) -> Trajectory:
    """One rollout of one task: an episode, then its grade in a fresh sandbox."""
    seed = episode_seed(config.seed, task.id, sample)
    version = policy.version if policy.kind == "token" else 0
    trajectory = Trajectory(
        id=f"{task.id}/{sample}",
        run=run_name,
        task_id=task.id,
        group_id=f"{task.id}@v{version}",
        sample_index=sample,
        policy=policy.spec,
        policy_version=version,
        seed=seed,
        trainable=policy.kind == "token",
        timings=Timings(started_at=time.time()),
    )
    started = time.monotonic()
    toolbox = Toolbox(
        ToolsConfig(test_command=task.test_command, allowed=task.tools, bash_enabled=config.loop.bash_enabled)
    )
    try:
        sandbox = pool.acquire(task)
    except SandboxError as e:
        return _infra(trajectory, f"sandbox start: {e}", started)
    try:
        episode = run_episode(
            task, policy, toolbox, sandbox, config.loop, config.sampling, config.summary, seed, stop
        )
        patch = collect_patch(sandbox, task, pool.config)
    except Stopped:
        raise
    except SandboxError as e:
        if stop.is_set():
            raise Stopped from e
        return _infra(trajectory, f"sandbox: {e}", started)
    except Exception as e:  # the sampler or its server failed: the harness's fault, not the model's
        if stop.is_set():
            raise Stopped from e
        return _infra(trajectory, f"{type(e).__name__}: {e}", started)
    else:
        if sandbox.lost is not None:  # the agent's work died with a sandbox killed from outside
            return _infra(trajectory, f"sandbox lost with the repository: {sandbox.lost}", started)
    finally:
        pool.release(task, sandbox)
    graded_at = time.monotonic()
    grade = grade_patch(task, patch, pool.config, config.reward)
    trajectory = trajectory.model_copy(
        update={
            "segments": episode.segments,
            "summaries": episode.summaries,
            "final_diff": patch,
            "grade": grade,
            "reward": grade.reward,
            "status": "infra_error" if grade.infra_error else episode.status,
            "status_reason": f"grading: {grade.infra_error}" if grade.infra_error else episode.status_reason,
            "metrics": episode.metrics,
            "ids_verified": episode.ids_verified,
        }
    )
    trajectory.timings.generate_s = episode.generate_s
    trajectory.timings.tools_s = episode.tools_s
    trajectory.timings.grade_s = time.monotonic() - graded_at
    trajectory.timings.duration_s = time.monotonic() - started
    return trajectory


def _infra(trajectory: Trajectory, reason: str, started: float) -> Trajectory:
    trajectory.status, trajectory.status_reason = "infra_error", reason
    trajectory.timings.duration_s = time.monotonic() - started
    return trajectory


def select(tasks: list[Task], ids: list[str] | None) -> list[Task]:
    if ids is None:
        return tasks
    known = {t.id: t for t in tasks}
    missing = [i for i in ids if i not in known]
    if missing:
        raise TaskError(f"tasks: no task {', '.join(missing)} in the suite")
    return [known[i] for i in ids]


def run_batch(
    jobs: list[tuple[Task, int]],
    policy: Policy,
    config: RolloutConfig,
    pool: SandboxPool,
    save: Callable[[Trajectory], object],
    stop: threading.Event | None = None,
) -> list[Trajectory]:
    """Runs the (task, sample index) jobs C at a time; `save` gets each trajectory as it finishes.

    On Ctrl-C the episodes in flight are abandoned (nothing of them is saved) and KeyboardInterrupt
    propagates once their threads have let go of their sandboxes.
    """
    stop = stop or threading.Event()
    save_lock = threading.Lock()
    finished: list[Trajectory] = []

    def job(task: Task, sample: int) -> None:
        trajectory = run_one(task, sample, policy, config, pool, stop, config.out.name)
        with save_lock:
            if stop.is_set() or closing.is_set():
                return  # an interrupted run keeps only what finished before the interrupt
            save(trajectory)
            finished.append(trajectory)

    async def main() -> None:
        gate = asyncio.Semaphore(config.concurrency)

        async def limited(task: Task, sample: int) -> None:
            async with gate:
                if not (stop.is_set() or closing.is_set()):
                    try:
                        await asyncio.to_thread(job, task, sample)
                    except Stopped:
                        pass

        await asyncio.gather(*(limited(t, k) for t, k in jobs))

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        stop.set()
        pool.close_all()  # in-flight calls fail fast, so their threads end
        raise
    return finished


def rollout(
    config: RolloutConfig,
    policy: Policy | None = None,
    on_progress: Callable[[int, int, Trajectory | None], None] | None = None,
) -> RolloutSummary:
    """Runs every rollout of the config that the run directory does not have yet; returns the summary."""
    tasks = select(load_suite(config.suite), config.tasks)
    store = RunStore(config.out)
    done = {(t.task_id, t.sample_index) for t in store.create(config)}
    jobs = [(t, k) for t in tasks for k in range(config.group_size) if (t.id, k) not in done]
    count = 0
    if on_progress is not None:
        on_progress(0, len(jobs), None)

    def save(trajectory: Trajectory) -> None:
        nonlocal count
        store.append_trajectory(trajectory)
        count += 1
        if on_progress is not None:
            on_progress(count, len(jobs), trajectory)

    if config.cluster.address is not None:
        from harness.rollouts.cluster import ClusterRollouts

        if policy is not None:
            raise ValueError("cluster.address is set: the workers build the policy from `policy`, pass none")
        with ClusterRollouts(config) as cluster:
            cluster.run_batch(jobs, save)
    else:
        policy = policy or make_policy(config.policy)
        pool = SandboxPool(config.sandbox)
        try:
            run_batch(jobs, policy, config, pool, save)
        finally:
            pool.close_all()
    return summarize(list(store.trajectories()), len(tasks))


def summarize(trajectories: list[Trajectory], n_tasks: int) -> RolloutSummary:
    graded = [t for t in trajectories if t.status != "infra_error"]
    by_task: dict[str, list[bool]] = {}
    for t in graded:
        by_task.setdefault(t.task_id, []).append(bool(t.grade and t.grade.correct == 1.0))

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    failures = Counter(
        (t.status_reason or t.status).split(":")[0].split(" (")[0] for t in trajectories if t.status != "ok"
    )
    return RolloutSummary(
        tasks=n_tasks,
        trajectories=len(trajectories),
        pass_at_1=mean([mean([float(c) for c in v]) for v in by_task.values()]),
        pass_at_g=mean([float(any(v)) for v in by_task.values()]),
        mean_reward=mean([t.reward for t in graded]),
        mean_turns=mean([t.metrics.turns for t in trajectories]),
        mean_summaries=mean([t.metrics.summaries for t in trajectories]),
        mean_tokens=mean([t.metrics.total_tokens for t in trajectories]),
        statuses=dict(Counter(t.status for t in trajectories)),
        failures=dict(failures),
        suspicious=sum(1 for t in graded if t.grade is not None and t.grade.suspicion),
        tampered=sum(1 for t in graded if t.grade is not None and t.grade.tampering),
    )
