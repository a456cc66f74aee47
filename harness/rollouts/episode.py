"""One rollout of one task, the unit every way of rolling out runs: the task's sandbox from a pool, its
toolbox, the episode (`harness/agent/loop.py`), the patch, and its grade in a fresh sandbox. Also the
`Rollouts` seam that the in-process and the Ray rollouts implement, chosen by their caller."""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable
from typing import Protocol

from envs.backends import backend, resolved
from envs.factory import start_task_sandbox
from envs.grading import AgentTreeError, Grade, collect_patch, grade_patch, tree_failure
from envs.lifecycle import current_owner
from envs.replacing import ReplacingSandbox
from envs.reward import RewardConfig
from envs.sandbox import SandboxConfig, SandboxError
from envs.start_tree import run_setup
from harness.agent.loop import Episode, Stopped, run_episode
from harness.agent.trajectory import Timings, Trajectory
from harness.rollouts.config import RolloutConfig
from harness.rollouts.grade_cache import GradeCache, grade_key
from policies.base import Policy
from tasks.model import Task
from tools import Toolbox

Job = tuple[Task, int]
"""A task and the index of one of its samples."""


class Rollouts(Protocol):
    """What runs episodes for a caller: in this process (`harness/rollouts/local.py`) or on Ray workers
    (`harness/rollouts/cluster.py`)."""

    def run_batch(
        self, jobs: list[Job], save: Callable[[Trajectory], object], stop: threading.Event | None = None
    ) -> list[Trajectory]:
        """Runs the jobs; `save` gets each trajectory as it finishes; returns those it saved."""
        ...

    def close(self) -> None:
        """Lets go of every sandbox and worker."""
        ...


class SandboxPool:
    """Idle sandboxes per task, reset before reuse; a sandbox that fails to reset is replaced.

    `auto` is resolved once, so a run never switches backends: a Docker daemon that stops answering
    mid-run gives infra errors, not rollouts run and graded on the host's system instead. Making a pool
    reaps what dead runs left, even when this run needs no sandbox (a resumed run with only learning left).
    """

    def __init__(self, config: SandboxConfig) -> None:
        try:
            config = resolved(config)
            strays = backend(config.backend).reap_strays
        except SandboxError:
            strays = None  # no backend at all: every start fails, as an infra error
        current_owner(config.state_dir, config.expiry_s, strays)
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
            sandbox = task_sandbox(task, self.config)
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


def task_sandbox(task: Task, config: SandboxConfig) -> ReplacingSandbox:
    """A sandbox of `task` (its image or environment, its repository), replaced if it dies; the task's
    setup commands are run by the caller (`run_setup`), again after every reset."""
    return ReplacingSandbox(lambda: start_task_sandbox(task, config))


class SandboxLost(SandboxError):
    """The sandbox was killed from outside and the agent's work died with it: the harness's failure."""


def read_patch(sandbox: ReplacingSandbox, task: Task, config: SandboxConfig) -> str | Grade:
    """The agent's changes as a patch, read from its sandbox after the episode (before the sandbox is
    reused), or the grade they get unread: 0 when the agent's tree cannot be read (`AgentTreeError`, the
    agent's doing). Raises `SandboxError` when the sandbox failed, `SandboxLost` when it was replaced and
    the agent's work lost."""
    try:
        patch = collect_patch(sandbox, task, config)
    except AgentTreeError as e:
        return tree_failure(task, e)
    if sandbox.lost is not None:
        raise SandboxLost(f"sandbox lost with the repository: {sandbox.lost}")
    return patch


def graded(
    task: Task, patch: str | Grade, sandbox: SandboxConfig, reward: RewardConfig, grades: GradeCache | None
) -> Grade:
    """The grade of what `read_patch` read, in a fresh sandbox: the grade `grades` (the batch's) holds of
    the same patch when there is one."""
    if isinstance(patch, Grade):
        return patch
    if grades is None:
        return grade_patch(task, patch, sandbox, reward)
    key = grade_key(task, patch, reward, sandbox)
    return grades.grade(key, lambda: grade_patch(task, patch, sandbox, reward))


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
    grades: GradeCache | None = None,
) -> Trajectory:
    """One rollout of one task: an episode, then its grade in a fresh sandbox (or the grade `grades`, the
    batch's, holds of the same patch)."""
    seed = episode_seed(config.seed, task.id, sample)
    try:
        version = policy.version if policy.kind == "token" else 0
    except RuntimeError as e:  # the sampler's server did not answer (policies.tito.SamplerError)
        version, unversioned = 0, f"policy version: {type(e).__name__}: {e}"
    else:
        unversioned = ""
    trajectory = Trajectory(
        id=f"{task.id}/{sample}", run=run_name, task_id=task.id, group_id=f"{task.id}@v{version}",
        sample_index=sample, policy=policy.spec, policy_version=version, seed=seed,
        trainable=policy.kind == "token", timings=Timings(started_at=time.time()),
    )  # fmt: skip
    started = time.monotonic()
    if unversioned:
        return _infra(trajectory, unversioned, started)
    toolbox = Toolbox.for_task(task, config.tools)
    try:
        sandbox = pool.acquire(task)
    except SandboxError as e:
        return _infra(trajectory, f"sandbox start: {e}", started)
    try:
        episode = run_episode(
            task, policy, toolbox, sandbox, config.loop, config.sampling, config.summary, seed, stop
        )
        patch = read_patch(sandbox, task, pool.config)  # read before the sandbox goes back
    except Stopped:
        raise
    except SandboxLost as e:
        return _infra(trajectory, str(e), started)
    except SandboxError as e:
        if stop.is_set():
            raise Stopped from e
        return _infra(trajectory, f"sandbox: {e}", started)
    except Exception as e:  # the sampler or its server failed: the harness's fault, not the model's
        if stop.is_set():
            raise Stopped from e
        return _infra(trajectory, f"{type(e).__name__}: {e}", started)
    finally:
        pool.release(task, sandbox)
    graded_at = time.monotonic()
    grade = graded(task, patch, pool.config, config.reward, grades if config.reuse_grades else None)
    trajectory = _finished(trajectory, episode, patch, grade)
    trajectory.timings.grade_s = time.monotonic() - graded_at
    trajectory.timings.duration_s = time.monotonic() - started
    return trajectory


def _finished(trajectory: Trajectory, episode: Episode, patch: str | Grade, grade: Grade) -> Trajectory:
    """The trajectory with its episode and grade; an infra error where grading failed for the harness."""
    done = trajectory.model_copy(
        update={
            "segments": episode.segments,
            "summaries": episode.summaries,
            "final_diff": patch if isinstance(patch, str) else "",
            "grade": grade,
            "reward": grade.reward,
            "status": "infra_error" if grade.infra_error else episode.status,
            "status_reason": f"grading: {grade.infra_error}" if grade.infra_error else episode.status_reason,
            "metrics": episode.metrics,
            "ids_verified": episode.ids_verified,
        }
    )
    done.timings.generate_s = episode.generate_s
    done.timings.tools_s = episode.tools_s
    return done


def _infra(trajectory: Trajectory, reason: str, started: float) -> Trajectory:
    trajectory.status, trajectory.status_reason = "infra_error", reason
    trajectory.timings.duration_s = time.monotonic() - started
    return trajectory
