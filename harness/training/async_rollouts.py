"""Asynchronous training's plumbing: rollouts one step ahead of the learner, a weight hand-off, staleness.

In `mode: async` a background thread rolls out the batch of step n+1 while the learner trains on step n.
The sampler takes the learner's newest weights between two batches (`Handoff`), so each batch is sampled
by one policy version and its groups stay whole. Every token carries the version that sampled it; a group
is trained only if `learner_version - min(token versions) <= max_staleness` (`fresh_groups`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from harness.agent.trajectory import Trajectory

W = TypeVar("W")

LOOKAHEAD = 1
"""Batches the producer may roll out ahead of the one the learner trains on."""


class Handoff(Generic[W]):
    """The learner's newest weights on their way to the sampler: `publish` after a learner step packs them
    (a CPU copy, or a folder a server can read); `take` before a batch loads the newest into the sampler.
    A version published while an older one waits replaces it."""

    def __init__(self, pack: Callable[[int], W], load: Callable[[W, int], None]) -> None:
        self._pack = pack
        self._load = load
        self._lock = threading.Lock()  # held while packing or loading: a folder is never removed mid-load
        self._newest: tuple[W, int] | None = None

    def publish(self, version: int) -> None:
        with self._lock:
            self._newest = (self._pack(version), version)

    def take(self) -> None:
        with self._lock:
            if self._newest is not None:
                weights, version = self._newest
                self._newest = None
                self._load(weights, version)


class AsyncRollouts:
    """Runs `roll(step)` for the steps in order in a daemon thread, at most `LOOKAHEAD` steps ahead of
    the learner; the sampler takes the newest published weights before each batch."""

    def __init__(
        self,
        steps: range,
        roll: Callable[[int], list[Trajectory]],
        handoff: Handoff[Any],
        stop: threading.Event,
    ) -> None:
        self._steps = steps
        self._roll = roll
        self._handoff = handoff
        self._stop = stop
        self._gate = threading.Semaphore(LOOKAHEAD + 1)
        self._ready: queue.Queue[tuple[list[Trajectory], float] | BaseException] = queue.Queue()
        self._thread = threading.Thread(target=self._produce, name="async-rollouts", daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        try:
            for step in self._steps:
                self._gate.acquire()
                if self._stop.is_set():
                    return
                self._handoff.take()
                started = time.monotonic()
                batch = self._roll(step)
                self._ready.put((batch, time.monotonic() - started))
        except BaseException as e:  # raised again in the learner's thread
            self._ready.put(e)

    def next_batch(self) -> tuple[list[Trajectory], float]:
        """The next step's batch (waits for it) and the seconds its rollouts took."""
        item = self._ready.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def learned(self, version: int) -> None:
        """The learner finished a step: its weights are published and one more batch may start."""
        self._handoff.publish(version)
        self._gate.release()

    def close(self, timeout_s: float = 30.0) -> None:
        """Stops the producer; episodes in flight are abandoned (run_batch's stop)."""
        self._stop.set()
        self._gate.release()
        self._thread.join(timeout=timeout_s)


def token_versions(trajectory: Trajectory) -> list[tuple[int, int]]:
    """(policy version, generated tokens) of each turn, or of each version within a turn whose ids were
    sampled by several (`Turn.token_versions`); one entry with the trajectory's version if no turn."""
    turns = [turn for segment in trajectory.segments for turn in segment.turns]
    if not turns:
        return [(trajectory.policy_version, 0)]
    counts: list[tuple[int, int]] = []
    for turn in turns:
        if turn.token_versions is None:
            counts.append((turn.policy_version, len(turn.generated_ids)))
        else:
            counts += [(v, turn.token_versions.count(v)) for v in sorted(set(turn.token_versions))]
    return counts


def fresh_groups(
    batch: list[Trajectory], learner_version: int, max_staleness: int
) -> tuple[list[Trajectory], dict[str, float]]:
    """The trajectories of the groups whose oldest token is at most `max_staleness` versions behind the
    learner, and the staleness metrics: groups_dropped_stale, and staleness_mean (per kept generated
    token) and staleness_max of what is kept."""
    oldest: dict[str, int] = {}
    for t in batch:
        versions = min(v for v, _ in token_versions(t))
        oldest[t.group_id] = min(oldest.get(t.group_id, versions), versions)
    keep = {g for g, v in oldest.items() if learner_version - v <= max_staleness}
    kept = [t for t in batch if t.group_id in keep]
    weighted = [(learner_version - v, n) for t in kept for v, n in token_versions(t)]
    tokens = sum(n for _, n in weighted)
    return kept, {
        "groups_dropped_stale": float(len(oldest) - len(keep)),
        "staleness_mean": sum(s * n for s, n in weighted) / tokens if tokens else 0.0,
        "staleness_max": float(max((s for s, _ in weighted), default=0)),
    }
