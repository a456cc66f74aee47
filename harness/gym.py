"""Registers `harness/CodingEnv-v0` with Gymnasium, wired to the agent's tools.

import harness.gym  # or gymnasium.make("harness.gym:harness/CodingEnv-v0", ...)
env = gymnasium.make("harness/CodingEnv-v0", suite="builtin", backend="auto")
"""

from __future__ import annotations

import gymnasium as gym

from envs.gym_env import CodingEnv
from envs.reward import RewardConfig
from envs.sandbox import SandboxConfig
from tasks.model import Task
from tasks.suite import load_suite
from tools import Toolbox, ToolsConfig

ENV_ID = "harness/CodingEnv-v0"


def make_coding_env(
    suite: str = "builtin",
    backend: str = "auto",
    task_ids: list[str] | None = None,
    simplicity_lambda: float = 0.2,
    bash_enabled: bool = True,
) -> CodingEnv:
    tasks = load_suite(suite)
    if task_ids is not None:
        tasks = [t for t in tasks if t.id in set(task_ids)]

    def toolbox(task: Task) -> Toolbox:
        return Toolbox(
            ToolsConfig(test_command=task.test_command, allowed=task.tools, bash_enabled=bash_enabled)
        )

    return CodingEnv(
        tasks,
        toolbox,
        SandboxConfig(backend=backend),  # type: ignore[arg-type]
        RewardConfig(simplicity_lambda=simplicity_lambda),
    )


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="harness.gym:make_coding_env", disable_env_checker=True)
