"""The rollouts of one batch with the same patch share its grade (harness/rollouts/grade_cache.py)."""

from __future__ import annotations

import threading
import time
from functools import partial
from pathlib import Path

from envs.grading import Grade
from harness.rollouts.config import RolloutConfig
from harness.rollouts.grade_cache import GradeCache, shareable
from harness.rollouts.local import LocalRollouts, rollout
from harness.rollouts.store import RunStore
from policies.spec import make_policy
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


def test_only_a_grade_decided_cleanly_is_shared() -> None:
    """A grade that met trouble (a test stopped at its time limit shows as `error` or `missing`, a file
    that did not collect, tampering, an unexplained canary) is the first rollout's alone: one slow grade of
    a right fix must not zero every copy of it."""
    clean = grade(1.0).model_copy(update={"fail_to_pass": {"t::a": "passed"}, "canaries": {"c": "failed"}})
    troubled = [
        clean.model_copy(update={"fail_to_pass": {"t::a": "error"}}),
        clean.model_copy(update={"pass_to_pass": {"t::b": "missing"}}),
        clean.model_copy(update={"collect_errors": {"t.py": "SyntaxError"}}),
        clean.model_copy(update={"tampering": ["a canary passed"]}),
        clean.model_copy(update={"canaries": {"c": "unexplained"}}),
    ]
    assert shareable(clean) and not any(shareable(g) for g in troubled)
    for bad in troubled:
        cache = GradeCache()
        assert [cache.grade("k", partial(lambda g: g, bad)).reused for _ in range(2)] == [False, False]
    assert [GradeCache().grade("k", lambda: clean).reused for _ in range(1)] == [False]
    shared = GradeCache()
    assert [shared.grade("k", lambda: clean).reused for _ in range(2)] == [False, True]


def test_a_grade_is_shared_within_one_batch_only(tmp_path: Path) -> None:
    """Kept for a whole run, a grade that was lucky once would be paid to every later copy of its text,
    and the policy would learn to write it (red team, docs/reliability.md 5g): the next batch grades
    again."""
    task = load_suite("builtin")[0]
    config = RolloutConfig.model_validate(
        {"suite": "builtin", "policy": "scripted:gold", "concurrency": 2, "out": str(tmp_path / "run"),
         "sandbox": {"backend": "bwrap"}}
    )  # fmt: skip
    local = LocalRollouts(make_policy("scripted:gold"), config)
    try:
        first = local.run_batch([(task, 0), (task, 1)], lambda _: None)
        second = local.run_batch([(task, 2)], lambda _: None)
    finally:
        local.close()
    assert sorted(bool(t.grade and t.grade.reused) for t in first) == [False, True]
    assert second[0].grade is not None and not second[0].grade.reused


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
