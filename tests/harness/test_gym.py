"""CodingEnv passes Gymnasium's checker, an episode that plays the gold patch earns a reward, and the
env and `harness rollout` are one episode engine: the same tool calls give the same observations and
grade."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

import harness.gym
from envs.sandbox import SandboxConfig
from harness.gym import CodingEnv
from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore
from tasks.patches import patch_as_edits
from tasks.suite import load_suite
from tools import Toolbox, ToolsConfig

MINI = Path(__file__).parents[1] / "data" / "suites" / "mini"


def test_gymnasium_env_checker(backend: str) -> None:
    env = gym.make("harness/CodingEnv-v0", suite=str(MINI), backend=backend)
    try:
        check_env(env.unwrapped, skip_render_check=True)
        assert len(repr(env.observation_space)) < 200 and "Text(0, 200000" in repr(env.action_space)
    finally:
        env.close()
        env.close()  # safe twice


def test_gold_episode_through_the_edit_tool_earns_a_reward(backend: str) -> None:
    task = load_suite("builtin")[0]
    env = CodingEnv(
        [task], lambda t: Toolbox(ToolsConfig(test_command=t.test_command)), SandboxConfig(backend=backend)
    )  # type: ignore[arg-type]
    obs, info = env.reset(options={"task": task.id})
    assert task.problem_statement.strip()[:40] in obs
    assert {s["function"]["name"] for s in info["tools"]} >= {"edit", "submit", "read_file"}
    for edit in patch_as_edits(task.gold_patch or ""):
        action = {"name": "edit", "arguments": {"path": edit.path, "old_str": edit.old, "new_str": edit.new}}
        obs, reward, terminated, truncated, info = env.step(json.dumps(action))
        assert not info["is_error"], obs
        assert reward == 0.0 and not terminated and not truncated
    obs, reward, terminated, truncated, info = env.step({"name": "run_tests", "arguments": {}})
    obs, reward, terminated, truncated, info = env.step({"name": "submit", "arguments": {}})
    assert terminated and not truncated
    assert reward > 0 and info["grade"]["correct"] == 1.0
    env.close()


def test_limits_truncate_and_bad_actions_are_observations() -> None:
    task = load_suite(str(MINI))[0]
    task = task.model_copy(update={"limits": task.limits.model_copy(update={"max_turns": 3})})
    env = CodingEnv(
        [task], lambda t: Toolbox(ToolsConfig(test_command=t.test_command)), SandboxConfig(backend="bwrap")
    )
    env.reset()
    obs, _, terminated, truncated, info = env.step("{not json")
    assert info["is_error"] and "not JSON" in obs and not (terminated or truncated)
    obs, _, _, _, info = env.step({"name": "no_such_tool", "arguments": {}})
    assert info["is_error"] and "unknown tool" in obs
    obs, reward, terminated, truncated, info = env.step({"name": "list_dir", "arguments": {}})
    assert truncated and not terminated
    assert reward == 0.0 and info["grade"]["correct"] == 0.0
    env.close()


def timeless(text: str) -> str:
    """An observation without its durations (pytest's `in 0.12s`)."""
    return re.sub(r"\d+\.\d+s\b", "<t>s", text)


def test_an_episode_through_the_env_is_the_rollouts_episode(backend: str, tmp_path: Path) -> None:
    """`harness rollout` with the scripted gold policy, then its tool calls played through the env: each
    observation and the grade are the same (durations aside)."""
    task = load_suite("builtin")[0]
    config = RolloutConfig(tasks=[task.id], policy="scripted:gold", out=tmp_path / "run")
    config.sandbox = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    rollout(config)
    (trajectory,) = RunStore(tmp_path / "run").trajectories()
    turns = [turn for segment in trajectory.segments for turn in segment.turns]
    assert trajectory.grade is not None and trajectory.grade.correct == 1.0 and len(turns) >= 3

    env = harness.gym.make_coding_env(backend=backend, task_ids=[task.id])
    try:
        env.reset(options={"task": task.id})
        for turn in turns:
            assert turn.tool_call is not None
            action = {"name": turn.tool_call.name, "arguments": turn.tool_call.arguments}
            observation, _, terminated, truncated, info = env.step(action)
            assert timeless(observation) == timeless(turn.observation or "")
            assert info["is_error"] == turn.observation_error
    finally:
        env.close()
    assert terminated and not truncated
    ignored = {"duration_s"}
    assert {k: v for k, v in info["grade"].items() if k not in ignored} == trajectory.grade.model_dump(
        exclude=ignored
    )
