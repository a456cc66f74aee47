"""Grades of the same tree are given again, not graded again (harness/rollouts/grade_cache.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from envs.grading import Grade
from harness.rollouts.config import RolloutConfig
from harness.rollouts.grade_cache import GradeCache
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore
from tasks.suite import load_suite
from tests.harness.test_cli import harness


def grade(reward: float, infra: str | None = None) -> Grade:
    return Grade.ungraded("t", infra_error=infra).model_copy(update={"correct": reward, "reward": reward})


def test_a_key_is_graded_once_even_when_asked_at_once_and_infra_errors_are_not_kept() -> None:
    cache = GradeCache(kept=2)
    calls: list[str] = []

    def slow(key: str, reward: float = 1.0, infra: str | None = None):  # type: ignore[no-untyped-def]
        def compute() -> Grade:
            calls.append(key)
            time.sleep(0.2)
            return grade(reward, infra)

        return compute

    results: list[Grade] = []
    threads = [threading.Thread(target=lambda: results.append(cache.grade("a", slow("a")))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == ["a"] and sorted(g.reused for g in results) == [False, True, True, True]
    assert cache.grade("a", slow("a")).reused and calls == ["a"]
    assert not cache.grade("b", slow("b", infra="daemon gone")).reused
    assert cache.grade("b", slow("b")).reward == 1.0 and calls == ["a", "b", "b"]  # graded again
    cache.grade("c", slow("c"))
    cache.grade("d", slow("d"))  # two kept: "a", the least recently used, goes
    cache.grade("a", slow("a"))
    assert calls[-1] == "a"


def test_a_group_that_writes_one_fix_grades_it_once(tmp_path: Path) -> None:
    """Scripted gold on one task, four rollouts: one graded, three given its grade, the same reward; with
    `reuse_grades=false` all four graded."""
    task = load_suite("builtin")[0]
    for reuse in (True, False):
        out = tmp_path / f"reuse-{reuse}"
        config = RolloutConfig.model_validate(
            {"suite": "builtin", "tasks": [task.id], "policy": "scripted:gold", "group_size": 4, "concurrency": 2,
             "seed": 1 if reuse else 2, "out": str(out), "sandbox": {"backend": "bwrap"}, "reuse_grades": reuse}
        )  # fmt: skip
        rollout(config)
        grades = [t.grade for t in RunStore(out).trajectories()]
        assert all(g is not None and g.reward == 1.0 for g in grades)
        assert sum(bool(g and g.reused) for g in grades) == (3 if reuse else 0)
    replayed = harness("replay", str(tmp_path / "reuse-True"), timeout=120)
    assert replayed.returncode == 0 and "given again" in replayed.stdout
