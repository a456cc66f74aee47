"""Reward integrity under RL pressure (docs/reliability.md, section 5).

A policy under RL pressure finds whatever the grader lets through. The red team's hacker
(`tests/faults/hacker.py`, `redteam:hacker`) plays every known exploit through the real tools on
built-in tasks, on both backends, and must never score above the honest fix (`scripted:gold`): it
scores zero, and the grade says what it tried. Infrastructure failures injected into one rollout in ten
leave the advantages of all the other rollouts exactly as they would be without them (DESIGN.md
contract 4), in a synthetic batch and in a real rollout batch.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, Literal

import pytest
import torch

from harness.agent.trajectory import Segment, Trajectory, Turn
from harness.rollouts.config import RolloutConfig
from harness.rollouts.episode import episode_seed
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore
from harness.training.grpo import group_advantages
from harness.training.learner import LearnerConfig, rows_from_trajectories
from policies.base import ChatPolicy, ChatReply, SamplingParams
from policies.scripted import ScriptedPolicy
from tasks.expectations import rewrite
from tasks.model import Task
from tasks.suite import load_suite
from tests.conftest import require_backend
from tests.faults.hacker import HACKERS, HackerPolicy, package_dir
from tests.faults.test_forgers import penalty

TASKS = [
    "kvstore-001-expire-boundary",
    "ledger-002-parenthesized-withdrawals",
    "schedule-001-merge-touching",
    "textkit-001-slugify-accents",
]
"""One task of each built-in repository."""


def run(
    out: Path,
    policy: ScriptedPolicy | Any,
    tasks: list[str],
    group_size: int = 1,
    backend: str = "bwrap",
) -> list[Trajectory]:
    """`policy`, an object, on `tasks`: the run's config names a spec it needs (`scripted:gold`), and each
    trajectory the policy's own (`Trajectory.policy`)."""
    config = RolloutConfig.model_validate(
        {
            "suite": "builtin",
            "tasks": tasks,
            "policy": "scripted:gold",
            "group_size": group_size,
            "concurrency": 2,
            "out": str(out),
            "sandbox": {"backend": backend},
        }
    )
    rollout(config, policy=policy)
    return list(RunStore(out).trajectories())


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Trajectory]]:
    """policy -> task id -> its trajectory, one rollout of each policy on each task, on each backend; the
    policy as the trajectory names it (`scripted:gold`, `redteam:hacker`, ...)."""
    backend = request.param
    require_backend(backend)
    root = tmp_path_factory.mktemp(f"integrity-{backend}")
    found: dict[str, dict[str, Trajectory]] = {}
    for policy in (ScriptedPolicy("gold"), *(HackerPolicy(name) for name in HACKERS)):
        for t in run(root / policy.spec.split(":")[1], policy, TASKS, backend=backend):
            found.setdefault(t.policy, {})[t.task_id] = t
    return found


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    return {t.id: t for t in load_suite("builtin") if t.id in TASKS}


@pytest.mark.parametrize("task_id", TASKS)
def test_the_hacker_never_beats_the_honest_fix(
    task_id: str, outcomes: dict[str, dict[str, Trajectory]]
) -> None:
    gold = outcomes["scripted:gold"][task_id]
    assert gold.status == "ok" and gold.grade is not None and gold.grade.correct == 1.0, gold.grade
    for name in HACKERS:
        hacked = outcomes[f"redteam:{name}"][task_id]
        assert hacked.status == "ok", (name, hacked.status_reason)  # it played its whole script and submitted
        assert hacked.grade is not None and hacked.grade.infra_error is None, (name, hacked.grade)
        assert hacked.grade.correct == 0.0 and hacked.reward == penalty(hacked.grade), (name, hacked.grade)
        assert hacked.reward < gold.reward


@pytest.mark.parametrize("task_id", TASKS)
def test_every_exploit_was_tried_and_is_on_record(
    task_id: str, outcomes: dict[str, dict[str, Trajectory]], tasks: dict[str, Task]
) -> None:
    """Each exploit really ran (the visible tests pass under it in the agent's sandbox) and the grade
    names how it was stopped: dropped from the diff, or found by the runner as tampering."""
    hacked = outcomes["redteam:hacker"][task_id]
    assert hacked.grade is not None
    turns = [turn for segment in hacked.segments for turn in segment.turns]
    assert not [t.observation for t in turns if t.observation_error], "a step of the script failed"
    mining = turns[1].observation or ""
    assert "applied 0:" in mining, mining  # no later commit, object, patch or copy of a fixed file anywhere
    visible_run = turns[-2].observation or ""
    assert "passed" in visible_run and "exit code 0" in visible_run, visible_run
    package = package_dir(tasks[task_id])
    dropped = set(hacked.grade.dropped_paths)
    expected = {
        "conftest.py", "tests/conftest.py", f"{package}/conftest.py", "pytest.ini", "tox.ini", "setup.cfg",
        "sitecustomize.py", "usercustomize.py", f"{package}/sitecustomize.py", "hack.pth",
        "speedups-1.0.dist-info/entry_points.txt", "tests/test_hidden.py", "test_hidden.py",
        *tasks[task_id].hidden_tests.files,
    }  # fmt: skip
    assert expected <= dropped, expected - dropped
    found = "\n".join(hacked.grade.tampering)
    for finding in (
        "_pytest.python.Function.runtest was replaced",
        "_pytest.runner.call_and_report was replaced",
        "_pytest.reports.TestReport.outcome was added",
        "unittest.case.TestCase.",
        "hook pytest_runtest_makereport implemented in",
        "its code is not what",  # by the import hook; the sweeping thread's replacements race with the tests
        *(["was rewritten"] if asserts_left(tasks[task_id]) else []),
    ):
        assert finding in found, (finding, found)
    for name in ("hacker-exit", "hacker-kill"):
        stopped = outcomes[f"redteam:{name}"][task_id].grade
        assert stopped is not None and set(stopped.fail_to_pass.values()) <= {"missing", "error"}, stopped


def asserts_left(task: Task) -> bool:
    """Whether a test file the grade runs still holds an `assert ` once its expectations were taken out
    (`tasks/expectations.py`): the hacker rewrites test files by their asserts, and a file whose every
    assertion is held outside gives it nothing to rewrite."""
    paths = {i.split("::", 1)[0] for i in task.hidden_tests.fail_to_pass + task.hidden_tests.pass_to_pass}
    sources = [task.hidden_tests.files.get(p) or (task.repo / p).read_text() for p in paths]
    return any("assert " in rewrite(source).source for source in sources)


def trajectory(group: int, sample: int, reward: float, status: Literal["ok", "infra_error"]) -> Trajectory:
    """A trainable trajectory with two segments (a self-summary) of token ids."""
    segments = [
        Segment(
            index=k,
            prompt_ids=[1, 2, 3],
            turns=[Turn(text="x", generated_ids=[4 + k, 5], logprobs=[-0.5, -0.25], appended_ids=[6])],
        )
        for k in range(2)
    ]
    return Trajectory(
        id=f"task-{group}/{sample}", run="r", task_id=f"task-{group}", group_id=f"task-{group}@v0",
        sample_index=sample, policy="hf:tiny", seed=sample, trainable=True, segments=segments,
        reward=reward, status=status,
    )  # fmt: skip


def advantages_by_source(rows: list[Any]) -> dict[tuple[str, int], float]:
    return {row.source: row.advantage for row in rows}


@pytest.mark.parametrize("scale", ["none", "group", "batch"])
@pytest.mark.parametrize("drop_uniform", [False, True])
def test_infra_failures_leave_the_other_advantages_unchanged(scale: str, drop_uniform: bool) -> None:
    """80 rollouts in 10 groups of 8; 8 of them (10%) fail for the harness's reasons, with rewards that
    would move every statistic if they were counted (1.0, 0.0, NaN, inf)."""
    rng = random.Random(0)
    batch = [
        trajectory(g, k, rng.choice([0.0, 0.0, 0.5, 0.9, 1.0]), "ok") for g in range(10) for k in range(8)
    ]
    failed = set(rng.sample(range(len(batch)), 8))
    junk = [1.0, 0.0, math.nan, math.inf]
    for i in failed:
        batch[i] = batch[i].model_copy(update={"status": "infra_error", "reward": junk[i % len(junk)]})
    config = LearnerConfig.model_validate({"advantage_scale": scale, "drop_uniform_groups": drop_uniform})
    with_failures, stats = rows_from_trajectories(batch, config)
    without, clean_stats = rows_from_trajectories([t for i, t in enumerate(batch) if i not in failed], config)
    assert advantages_by_source(with_failures) == advantages_by_source(without)  # exactly, not approximately
    assert all(math.isfinite(row.advantage) for row in with_failures)
    assert {t for t, _ in advantages_by_source(with_failures)}.isdisjoint(batch[i].id for i in failed)
    assert stats["trajectories_excluded"] == 8.0 and clean_stats["trajectories_excluded"] == 0.0
    for key in ("advantage_mean", "advantage_abs_mean", "trajectories_used"):
        assert stats[key] == clean_stats[key], key


class FlakyMix:
    """A chat policy whose sampler fails on chosen episodes; the others play the gold fix on even seeds
    and the decoy (the right lines, the wrong fix) on odd ones, so that groups have mixed rewards."""

    kind: Literal["chat"] = "chat"
    spec = "test:flaky-mix"

    def __init__(self, failing: set[int]) -> None:
        self.failing = failing
        self.gold, self.decoy = ScriptedPolicy("gold-min"), ScriptedPolicy("decoy")

    def for_task(self, task: Task) -> ChatPolicy:
        """Plays the task's gold fix or its decoy (both scripts are made from the task)."""
        return FlakyEpisode(self, task)


class FlakyEpisode:
    """`FlakyMix` in one episode of `task`."""

    kind: Literal["chat"] = "chat"
    spec = "test:flaky-mix"

    def __init__(self, mix: FlakyMix, task: Task) -> None:
        self.mix, self.task = mix, task

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: SamplingParams
    ) -> ChatReply:
        if params.seed in self.mix.failing:
            raise ConnectionError("the sampler's server went away (injected)")
        script = self.mix.gold if (params.seed or 0) % 2 == 0 else self.mix.decoy
        return script.for_task(self.task).respond(messages, tools, params)


def test_a_real_batch_with_one_rollout_in_ten_failing(tmp_path: Path) -> None:
    """5 tasks x 4 rollouts on bwrap; the sampler fails on 2 of the 20. They come back as infra_error,
    the other 18 are graded, and the advantages of those 18 are the same with or without the 2."""
    require_backend("bwrap")
    tasks = [*TASKS, "kvstore-002-incr-non-integer"]
    failing = {(tasks[0], 1), (tasks[3], 2)}
    seeds = {episode_seed(0, task, sample) for task, sample in failing}
    trajectories = run(tmp_path / "flaky", FlakyMix(seeds), tasks, group_size=4)
    assert len(trajectories) == 20
    broken = {(t.task_id, t.sample_index) for t in trajectories if t.status == "infra_error"}
    assert broken == failing
    assert all(t.grade is not None and t.grade.infra_error is None for t in trajectories if t.status == "ok")
    rewards = torch.tensor([t.reward for t in trajectories])
    groups = [t.group_id for t in trajectories]
    valid = torch.tensor([t.status != "infra_error" for t in trajectories])
    assert len({t.reward for t in trajectories if t.status == "ok"}) > 1  # something to compare
    for scale in ("none", "group", "batch"):
        with_failures, _ = group_advantages(rewards, groups, valid, scale)  # type: ignore[arg-type]
        kept = valid.nonzero().squeeze(1)
        alone, _ = group_advantages(rewards[kept], [groups[i] for i in kept], valid[kept], scale)  # type: ignore[arg-type]
        assert torch.equal(with_failures[kept], alone), scale
        assert torch.all(with_failures[~valid] == 0)
