"""Grades shared between the rollouts of one batch (one training step's, one rollout command's) whose
patches are the same text, instead of graded once each.

What a grade decides from is the task and the patch applied to its pristine base (`envs/judge.py` judges
the tree the patch makes, in a fresh sandbox), with the reward and sandbox settings: the same four give the
same grade but for what is left to chance (the canaries' order and names, a flaky test). A GRPO group of a
model that is sure of itself writes the same fix many times over, and grading (hidden tests, their
canaries) costs more CPU than sampling the episode on a small host, so the first rollout of a batch with a
patch grades it and the others with it take that grade (`Grade.reused`), also those that finish while it
is being graded.

Why one batch and no longer (red team, docs/reliability.md 5g): kept for a whole run, a grade that was
lucky once (a forger whose guess of the real copy came out right, a wrong fix that passed a flaky test)
would be paid again to every later copy of that text, and the policy would learn to write the texts that
were lucky: the canaries' "no guess pays on average" holds only if every new sample draws again. Within
one batch the policy does not change, so copies sharing one draw have the expectation of a draw each.
Only a clean grade is shared: none of an infra error, tampering, a file that did not collect, a test
that errored, went missing or was skipped (a child stopped at its time limit), or a canary unexplained;
so that one slow grade of a right fix does not zero every copy of it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

from envs.grading import Grade, RewardConfig
from envs.sandbox import SandboxConfig
from tasks.model import Task

KEPT = 4096
"""Grades kept in one batch, the least recently used going first."""


def grade_key(task: Task, patch: str, reward: RewardConfig, sandbox: SandboxConfig) -> str:
    """What a grade is decided from, hashed: the whole task (tests, canaries, computed values), the patch
    and the settings, each part framed by its length in bytes."""
    parts = (task.model_dump_json(), patch, reward.model_dump_json(), sandbox.model_dump_json())
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogateescape")
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def shareable(grade: Grade) -> bool:
    """Whether `grade` was decided cleanly, by the patch and not by trouble (the module docstring)."""
    outcomes = [*grade.fail_to_pass.values(), *grade.pass_to_pass.values()]
    return (
        grade.infra_error is None
        and not grade.tampering
        and not grade.collect_errors
        and all(outcome in ("passed", "failed") for outcome in outcomes)
        and all(verdict in ("passed", "failed") for verdict in grade.canaries.values())
    )


class GradeCache:
    """One batch's grades by `grade_key`; a key being graded is waited for, not graded twice."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._done: OrderedDict[str, Grade] = OrderedDict()
        self._running: dict[str, Future[Grade]] = {}
        self._lock = threading.Lock()

    def grade(self, key: str, compute: Callable[[], Grade]) -> Grade:
        """The kept grade of `key` (marked reused), else `compute()`'s, kept when it is `shareable`."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key].model_copy(update={"reused": True})
            running = self._running.get(key)
            if running is None:
                mine: Future[Grade] = Future()
                self._running[key] = mine
        if running is not None:
            first = running.result()
            return first.model_copy(update={"reused": True}) if shareable(first) else compute()
        try:
            grade = compute()
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._lock:
                self._running.pop(key, None)
        with self._lock:
            if shareable(grade):
                self._done[key] = grade
                while len(self._done) > self.kept:
                    self._done.popitem(last=False)
        mine.set_result(grade)
        return grade
