"""Sync training that learns each group as soon as it is graded, while the rest of the batch rolls out.

In `mode: sync` the learner used to wait for the whole batch, then learn it while the sampler waited:
neither ever worked at once. A group's advantages need only its own rewards, and one optimizer step's
gradient is the sum of its groups' gradients, so the learner can take a group's forward and backward
passes the moment its last rollout is graded (`GroupStream` hands them over), and the weights change once,
after the last group, exactly as before: the rollouts of the step all sample one policy version. The one
thing not known before the end is the loss's normaliser (the step's tokens or rows, `loss_agg`); each
group is learned with a normaliser of 1 and the summed gradient is divided by the step's at the end
(`GroupLearner`, `grpo.aggregate_divisor`). The update equals learning the batch whole up to the order
of float additions. `train.stream_blocker` says which settings need the whole batch first.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator

from harness.agent.trajectory import Trajectory
from harness.training.grpo import aggregate_divisor
from harness.training.learner import Learner, Row

Roll = Callable[[int, Callable[[Trajectory], object]], list[Trajectory]]
"""roll(step, each): the step's batch, calling `each` with every trajectory as it finishes (those the
step already had first); returns them all."""


class GroupStream:
    """One step's batch rolled out in a thread of its own; iterating gives each task's group once all its
    `group_size` rollouts are in, in the order of `order` (the order the jobs were handed out, which is
    about the order groups finish; a fixed order keeps the summed gradient the same whatever the timing).
    Afterwards `rolled` is the whole batch (sorted as `roll` returns it), `rollout_s` how long it took,
    and `ended` when (time.monotonic) the last rollout finished."""

    def __init__(
        self, roll: Roll, step: int, order: list[str], group_size: int, stop: threading.Event
    ) -> None:
        self._order = order
        self._group_size = group_size
        self._stop = stop
        self._partial: dict[str, list[Trajectory]] = {}
        self._lock = threading.Lock()
        self._ready: queue.Queue[tuple[str, list[Trajectory]] | BaseException | None] = queue.Queue()
        self.rolled: list[Trajectory] = []
        self.rollout_s = 0.0
        self.ended = float("inf")
        self._thread = threading.Thread(
            target=self._roll, args=(roll, step), name="streamed-rollouts", daemon=True
        )
        self._thread.start()

    def _each(self, trajectory: Trajectory) -> None:
        with self._lock:
            members = self._partial.setdefault(trajectory.task_id, [])
            members.append(trajectory)
            if len(members) == self._group_size:
                del self._partial[trajectory.task_id]
                self._ready.put((trajectory.task_id, sorted(members, key=lambda t: t.sample_index)))

    def _roll(self, roll: Roll, step: int) -> None:
        started = time.monotonic()
        try:
            self.rolled = roll(step, self._each)
            self.ended = time.monotonic()
            self.rollout_s = self.ended - started
            with self._lock:  # groups short of a member (none in a whole batch), learned last
                for task_id, members in self._partial.items():
                    self._ready.put((task_id, sorted(members, key=lambda t: t.sample_index)))
                self._partial.clear()
            self._ready.put(None)
        except BaseException as e:  # raised again in the learner's thread
            self._ready.put(e)

    def __iter__(self) -> Iterator[list[Trajectory]]:
        """The groups; what the rollouts raised is raised here. A consumer that fails calls `close`."""
        arrived: dict[str, list[Trajectory]] = {}
        over = False
        for task_id in [*self._order, None]:  # None: then whatever `order` did not name
            while not over and task_id not in arrived:
                item = self._ready.get()
                if isinstance(item, BaseException):
                    raise item
                over = item is None
                if item is not None:
                    arrived[item[0]] = item[1]
            for key in [task_id] if task_id is not None else sorted(arrived):
                if key in arrived:
                    yield arrived.pop(key)

    def close(self, timeout_s: float = 30.0) -> None:
        """Abandons the episodes in flight (run_batch's stop) and waits for the thread to let go."""
        self._stop.set()
        self._thread.join(timeout=timeout_s)


class GroupLearner:
    """One optimizer step accumulated group by group: `add` each group's rows (forward and backward, the
    loss normalised by 1), then `finish` divides the summed gradient by the step's normaliser and steps."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.tokens = 0.0
        """The step's mask-1 tokens so far (the normaliser of `token-mean`)."""
        self.rows = 0
        """The step's rows so far (the normaliser of the seq-mean modes)."""
        self._sums: dict[str, float] = {}
        self._maxes: dict[str, float] = {}
        learner.learner_logprobs = {}

    def add(self, rows: list[Row]) -> None:
        if not rows:
            return
        metrics = self.learner.accumulate_grpo(rows, totals=(1.0, 1.0))
        self.tokens += sum(sum(r.mask[1:]) for r in rows)
        self.rows += len(rows)
        tokens = metrics.pop("tokens", 0.0)
        self._sums["tokens"] = self._sums.get("tokens", 0.0) + tokens
        self._sums["loss"] = self._sums.get("loss", 0.0) + metrics.pop("loss", 0.0)
        for name, value in metrics.items():  # token-weighted means, as accumulate_grpo's own
            if name.endswith("_max"):
                self._maxes[name] = max(self._maxes.get(name, value), value)
            else:
                self._sums[name] = self._sums.get(name, 0.0) + value * tokens

    def finish(self) -> dict[str, float]:
        """The step's update; its metrics as `Learner.grpo_step` gives them (none without rows)."""
        if not self.rows:
            return {}
        divisor = aggregate_divisor(self.learner.config.loss_agg, self.tokens, self.rows)
        self.learner.scale_gradients(1.0 / divisor)
        tokens = self._sums.get("tokens", 0.0)
        metrics = {
            name: value / divisor
            if name == "loss"
            else value
            if name == "tokens"
            else value / max(1.0, tokens)
            for name, value in self._sums.items()
        }
        return metrics | self._maxes | self.learner.apply()


def merged_stats(parts: list[tuple[dict[str, float], int]]) -> dict[str, float]:
    """The batch's advantage statistics from its groups' (`rows_from_trajectories`' and the KL in the
    reward's), each with its group's trajectory count: counts add up; each mean is weighted by what it is
    a mean of (the advantages by the trajectories used, the KL by the group's trajectories)."""
    used = sum(stats.get("trajectories_used", 0.0) for stats, _ in parts)
    trajectories = sum(n for stats, n in parts if stats)
    merged: dict[str, float] = {}
    for stats, n in parts:
        for name, value in stats.items():
            if name in ("advantage_mean", "advantage_abs_mean"):
                value *= stats["trajectories_used"] / used if used else 0.0
            elif name == "kl_in_reward_mean":
                value *= n / trajectories
            merged[name] = merged.get(name, 0.0) + value
    return merged
