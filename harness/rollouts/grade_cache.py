"""Grades of graded trees seen before in this process, given again instead of graded again.

What a grade decides from is the task and the patch applied to its pristine base (`envs/judge.py` judges
the tree the patch makes, in a fresh sandbox), with the reward and sandbox settings: the same five give
the same grade but for what a test leaves to chance. A GRPO group of a model that is sure of itself
writes the same fix many times over, and grading (hidden tests, their canaries) costs more CPU than
sampling the episode on a small host, so the first rollout with a tree grades it and the others with it
take that grade (`Grade.reused`), also those that finish while it is being graded. A grade that ended in
an infra error is not kept. Chance stays fair: a patch that passes at random draws once for all its
copies instead of once each, the same expectation.
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
"""Grades kept, the least recently used going first."""


def grade_key(task: Task, patch: str, reward: RewardConfig, sandbox: SandboxConfig) -> str:
    """What a grade is decided from, hashed: the whole task (tests, canaries, computed values), the patch
    and the settings."""
    parts = (task.model_dump_json(), patch, reward.model_dump_json(), sandbox.model_dump_json())
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part.encode())
    return digest.hexdigest()


class GradeCache:
    """Grades by `grade_key`; a key being graded is waited for, not graded twice."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._done: OrderedDict[str, Grade] = OrderedDict()
        self._running: dict[str, Future[Grade]] = {}
        self._lock = threading.Lock()

    def grade(self, key: str, compute: Callable[[], Grade]) -> Grade:
        """The kept grade of `key` (marked reused), else `compute()`'s, kept unless it is an infra error."""
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
            return compute() if first.infra_error else first.model_copy(update={"reused": True})
        try:
            grade = compute()
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._lock:
                self._running.pop(key, None)
        with self._lock:
            if not grade.infra_error:
                self._done[key] = grade
                while len(self._done) > self.kept:
                    self._done.popitem(last=False)
        mine.set_result(grade)
        return grade


GRADES = GradeCache()
"""This process's grades (rollouts on Ray workers keep one per worker)."""
