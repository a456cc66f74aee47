"""CodingEnv passes Gymnasium's checker, an episode that plays the gold patch earns a reward, and the
env and `harness rollout` are one episode engine: the same messages give the same observations, limits
and grade, for a chat policy that submits and for a token policy cut off by the token limit."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

import harness.gym
from envs.sandbox import SandboxConfig
from harness.agent.conversation import prompt_ids
from harness.agent.trajectory import Trajectory, Turn
from harness.gym import CodingEnv
from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore
from policies.chat_format import ChatFormat
from tasks.patches import patch_as_edits
from tasks.suite import load_suite
from tools import Toolbox, ToolsConfig

if TYPE_CHECKING:
    from policies.hf import HFPolicy

MINI = Path(__file__).parents[1] / "data" / "suites" / "mini"
Step = tuple[str, float, bool, bool, dict[str, Any]]


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
    obs, _, terminated, truncated, info = env.step("{not json")  # text, as a model writes it
    assert info["is_error"] and "No tool call found" in obs and not (terminated or truncated)
    obs, _, _, _, info = env.step({"name": "no_such_tool", "arguments": {}})
    assert info["is_error"] and "unknown tool" in obs
    obs, reward, terminated, truncated, info = env.step({"name": "list_dir", "arguments": {}})
    assert truncated and not terminated and info["status_reason"] == "max_turns (3)"
    assert reward == 0.0 and info["grade"]["correct"] == 0.0
    env.close()


def timeless(text: str) -> str:
    """An observation without its durations (pytest's `in 0.12s`)."""
    return re.sub(r"\d+\.\d+s\b", "<t>s", text)


def replay(env: CodingEnv, trajectory: Trajectory, action: Callable[[Turn], str | dict[str, Any]]) -> Step:
    """The trajectory's turns played through the env as `action` makes each: every observation is the
    rollout's (durations aside); the last step's result."""
    step: Step | None = None
    for turn in (turn for segment in trajectory.segments for turn in segment.turns):
        step = env.step(action(turn))
        observation, _, _, _, info = step
        assert timeless(observation) == timeless(turn.observation or "")
        assert info["is_error"] == turn.observation_error
    assert step is not None
    return step


def same_grade(info: dict[str, Any], trajectory: Trajectory) -> bool:
    ignored = {"duration_s"}
    assert trajectory.grade is not None
    return {k: v for k, v in info["grade"].items() if k not in ignored} == trajectory.grade.model_dump(
        exclude=ignored
    )


def test_an_episode_through_the_env_is_the_rollouts_episode(backend: str, tmp_path: Path) -> None:
    """`harness rollout` with the scripted gold policy, then its messages played through the env: each
    observation and the grade are the same (durations aside)."""
    task = load_suite("builtin")[0]
    config = RolloutConfig(tasks=[task.id], policy="scripted:gold", out=tmp_path / "run")
    config.sandbox = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    rollout(config)
    (trajectory,) = RunStore(tmp_path / "run").trajectories()
    assert trajectory.grade is not None and trajectory.grade.correct == 1.0 and trajectory.metrics.turns >= 3

    env = harness.gym.make_coding_env(backend=backend, task_ids=[task.id])
    try:
        env.reset(options={"task": task.id})

        def message(turn: Turn) -> dict[str, Any]:
            assert turn.tool_call is not None
            return {"name": turn.tool_call.name, "arguments": turn.tool_call.arguments, "content": turn.text}

        _, reward, terminated, truncated, info = replay(env, trajectory, message)
    finally:
        env.close()
    assert terminated and not truncated and info["status_reason"] is None
    assert reward == trajectory.reward and same_grade(info, trajectory)


def test_the_token_limit_cuts_the_env_where_it_cuts_the_rollout(
    tiny_policy: HFPolicy, tmp_path: Path
) -> None:
    """A token policy's rollout (`ScriptedTokens` on the tiny model) cut by the task's token limit after
    its first turn, then its messages played through the env in that model's ids: the same ids, the same
    observations, the same limit, the same grade."""
    from harness.agent.scripted_tokens import ScriptedTokens  # torch, only for this test

    task = load_suite("builtin")[0]
    config = RolloutConfig(tasks=[task.id], out=tmp_path / "run", sandbox=SandboxConfig(backend="bwrap"))
    tools = Toolbox.for_task(task, config.tools).schemas()
    fmt = ChatFormat(tiny_policy.tokenizer, tiny_policy.stop_ids())
    budget = len(prompt_ids(fmt, config.loop.system_prompt, task.prompt(), tools)) + 1  # one turn passes it
    task = task.model_copy(update={"limits": task.limits.model_copy(update={"max_tokens": budget})})
    rollout(config, policy=ScriptedTokens(tiny_policy, [task]), tasks=[task])
    (trajectory,) = RunStore(tmp_path / "run").trajectories()
    assert trajectory.status_reason == f"max_tokens ({budget})" and trajectory.metrics.turns == 1

    env = CodingEnv([task], lambda t: Toolbox.for_task(t, config.tools), config.sandbox, tokens=tiny_policy)
    try:
        env.reset(options={"task": task.id})
        _, reward, terminated, truncated, info = replay(env, trajectory, lambda turn: turn.text)
        assert env.live is not None
        (segment,) = env.live.conv.segments
        assert segment.ids_and_mask()[0] == trajectory.segments[0].ids_and_mask()[0]
    finally:
        env.close()
    assert truncated and not terminated and info["status_reason"] == trajectory.status_reason
    assert reward == trajectory.reward and same_grade(info, trajectory)
