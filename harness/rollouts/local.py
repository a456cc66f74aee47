"""`harness rollout`: G rollouts of each task, C at a time, graded and saved as they finish.

Episodes run in worker threads driven by asyncio (sandbox and model calls block); sandboxes are pooled
per task and reset between episodes (`harness/rollouts/episode.py` runs one). Every finished trajectory is
one fsynced line of the run file; a restarted run skips what is done. Ctrl-C stops cleanly: in-flight
episodes are abandoned (they run again on restart), everything finished is already saved. With
`cluster.address` the episodes run on Ray actors instead (`harness/rollouts/cluster.py`), with the same
contract (`Rollouts`).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import yaml
from pydantic import ValidationError

from envs.lifecycle import closing
from harness.agent.loop import Stopped
from harness.agent.trajectory import Trajectory
from harness.rollouts.config import RolloutConfig, RolloutSummary, changed_producers
from harness.rollouts.episode import Job, Rollouts, SandboxPool, run_one
from harness.rollouts.grade_cache import GradeCache
from harness.rollouts.store import RunFileError, RunStore, read_lines
from policies.base import Policy
from policies.spec import check_spec, make_policy
from tasks.model import Task
from tasks.suite import TaskError, load_suite


def select(tasks: list[Task], ids: list[str] | None) -> list[Task]:
    if ids is None:
        return tasks
    known = {t.id: t for t in tasks}
    missing = [i for i in ids if i not in known]
    if missing:
        raise TaskError(f"tasks: no task {', '.join(missing)} in the suite")
    return [known[i] for i in ids]


class LocalRollouts:
    """Episodes in this process: C at a time in worker threads driven by asyncio, sandboxes pooled per
    task and reset between episodes."""

    def __init__(
        self,
        policy: Policy,
        config: RolloutConfig,
        pool: SandboxPool | None = None,
        owns_policy: bool = False,
    ) -> None:
        self.policy, self.config = policy, config
        self.pool = pool or SandboxPool(config.sandbox)
        self.owns_policy = owns_policy
        """Whether `close` closes the policy too (one this object made from `config.policy`)."""

    def run_batch(
        self, jobs: list[Job], save: Callable[[Trajectory], object], stop: threading.Event | None = None
    ) -> list[Trajectory]:
        """Runs the (task, sample index) jobs C at a time; `save` gets each trajectory as it finishes.

        On Ctrl-C the episodes in flight are abandoned (nothing of them is saved) and KeyboardInterrupt
        propagates once their threads have let go of their sandboxes.
        """
        stop = stop or threading.Event()
        save_lock = threading.Lock()
        finished: list[Trajectory] = []
        policy, config, pool = self.policy, self.config, self.pool
        grades = GradeCache()  # this batch's: a grade is shared by the same patches of one batch only

        def job(task: Task, sample: int) -> None:
            trajectory = run_one(task, sample, policy, config, pool, stop, config.out.name, grades)
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

    def close(self) -> None:
        self.pool.close_all()
        close_policy = getattr(self.policy, "close", None)  # an in-process sampler's thread, a client
        if self.owns_policy and close_policy is not None:
            close_policy()


def make_rollouts(config: RolloutConfig, policy: Policy | None = None) -> Rollouts:
    """The rollouts `config` asks for: on Ray workers with `cluster.address` (which build their policy from
    `config.policy`), else in this process with `policy` (or the one `config.policy` names)."""
    if config.cluster.address is None:
        if policy is None:
            return LocalRollouts(make_policy(config.policy), config, owns_policy=True)
        return LocalRollouts(policy, config)
    if policy is not None:
        raise ValueError("cluster.address is set: the workers build the policy from `policy`, pass none")
    from harness.rollouts.cluster import ClusterRollouts  # Ray is imported only when asked for

    return ClusterRollouts(config)


def rollout(
    config: RolloutConfig,
    policy: Policy | None = None,
    on_progress: Callable[[int, int, Trajectory | None], None] | None = None,
    tasks: list[Task] | None = None,
    retry_infra_errors: bool = True,
) -> RolloutSummary:
    """Runs every rollout of the config that the run directory does not have yet; returns the summary.
    `tasks`, if given, are run instead of the config's suite and selection (tasks made on the fly, such
    as hint tasks). An episode whose last try ended in `infra_error` (the policy's server, a sandbox or
    the daemon failed, not the policy) is run again, its failed line kept in the file before the new one;
    with `retry_infra_errors=False` it counts as done."""
    tasks = select(load_suite(config.suite), config.tasks) if tasks is None else tasks
    if policy is None:
        check_spec(config.policy)  # before the run's folder is written
    store = RunStore(config.out)
    check_continues(store, config)
    every = [(t, k) for t in tasks for k in range(config.group_size)]
    jobs = resume_jobs(every, last_tries(store.create(config)), retry_infra_errors).todo
    count = 0
    if on_progress is not None:
        on_progress(0, len(jobs), None)

    def save(trajectory: Trajectory) -> None:
        nonlocal count
        store.append_trajectory(trajectory)
        count += 1
        if on_progress is not None:
            on_progress(count, len(jobs), trajectory)

    rollouts = make_rollouts(config, policy)
    try:
        rollouts.run_batch(jobs, save)
    finally:
        rollouts.close()
    return summarize(list(last_tries(store.trajectories()).values()), len(tasks))


def _cause(trajectory: Trajectory) -> str:
    return (trajectory.status_reason or trajectory.status).split(":")[0].split(" (")[0]


def last_tries(trajectories: Iterable[Trajectory]) -> dict[tuple[str, int], Trajectory]:
    """(task id, sample index) -> its last trajectory in the run: a retried episode's new try."""
    return {(t.task_id, t.sample_index): t for t in trajectories}


@dataclass(frozen=True)
class Resumed:
    """A batch of jobs on resume: what the run already holds and what is left to run."""

    done: list[Trajectory]
    """The last try of each job the run holds, in the jobs' order."""
    todo: list[Job]
    """The jobs to run, in their order."""


def resume_jobs(
    jobs: list[Job], latest: dict[tuple[str, int], Trajectory], retry_infra_errors: bool
) -> Resumed:
    """`jobs` split by what the run holds (`latest`, from `last_tries`): a job with a try is done, unless
    its last try ended in `infra_error` and `retry_infra_errors` (then it runs again, its failed line kept
    before the new one). The one filter of every resumed run: `harness rollout`, training steps, hints."""

    def done(key: tuple[str, int]) -> bool:
        return key in latest and not (retry_infra_errors and latest[key].status == "infra_error")

    return Resumed(
        done=[latest[(t.id, k)] for t, k in jobs if done((t.id, k))],
        todo=[(t, k) for t, k in jobs if not done((t.id, k))],
    )


def check_continues(store: RunStore, config: RolloutConfig) -> None:
    """A run folder that holds trajectories is continued only by the settings that made them (`PRODUCERS`):
    else RunFileError, before anything is written, naming what differs."""
    path = store.root / "config.yaml"
    if not path.is_file() or next(read_lines(store.trajectories_path), None) is None:
        return
    try:
        before = RolloutConfig.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValidationError) as e:
        raise RunFileError(
            f"{path}: not the config of a rollout run ({' '.join(str(e).split())[:300]})"
        ) from e
    changed = changed_producers(before, config)
    if changed:
        raise RunFileError(
            f"{store.root} holds trajectories made with other settings ({'; '.join(changed)}): continue it "
            "with the settings it was made with, or choose another --out"
        )


def summarize(trajectories: list[Trajectory], n_tasks: int) -> RolloutSummary:
    graded = [t for t in trajectories if t.status != "infra_error"]
    by_task: dict[str, list[bool]] = {}
    for t in graded:
        by_task.setdefault(t.task_id, []).append(bool(t.grade and t.grade.correct == 1.0))

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    failures = Counter(_cause(t) for t in trajectories if t.status != "ok")
    examples: dict[str, str] = {}
    for t in trajectories:
        if t.status != "ok" and t.status_reason:
            examples.setdefault(_cause(t), " ".join(t.status_reason.split())[:300])
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
        failure_examples=examples,
        suspicious=sum(1 for t in graded if t.grade is not None and t.grade.suspicion),
        tampered=sum(1 for t in graded if t.grade is not None and t.grade.tampering),
    )
