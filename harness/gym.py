"""`CodingEnv`: a task as a Gymnasium environment, on the same episode parts as `harness rollout`. An
action is one tool call; the reward comes once. Registered as `harness/CodingEnv-v0`.

    import harness.gym  # or gymnasium.make("harness.gym:harness/CodingEnv-v0", ...)
    env = gymnasium.make("harness/CodingEnv-v0", suite="builtin", backend="auto")
    obs, info = env.reset(options={"task": task_or_id})     # the problem statement
    obs, reward, terminated, truncated, info = env.step('{"name": "read_file", "arguments": {...}}')

`terminated` is set by submit, `truncated` by the task's turn or wall-time limit; either way the
repository is graded in a fresh sandbox and the reward arrives on that final step, with the grade's
breakdown in `info["grade"]`. The task's sandbox (`harness/rollouts/episode.task_sandbox`), its setup, its
tools (`Toolbox.for_task`) and its grade (`envs/grading.grade_patch`) are a rollout's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
from gymnasium import spaces

from envs.grading import AgentTreeError, Grade, collect_patch, grade_patch, tree_failure
from envs.replacing import ReplacingSandbox
from envs.reward import RewardConfig
from envs.sandbox import Sandbox, SandboxConfig, SandboxError
from envs.start_tree import run_setup
from harness.rollouts.episode import task_sandbox
from tasks.model import Task
from tasks.suite import load_suite
from tools import Toolbox, ToolsConfig

ENV_ID = "harness/CodingEnv-v0"
MAX_TEXT = 200_000
# Every character an observation may hold: tab, newlines, and the printable planes (no surrogates).
CHARSET = (
    "\t\n\r" + "".join(chr(c) for c in range(32, 0xD800)) + "".join(chr(c) for c in range(0xE000, 0x10000))
)


class TextSpace(spaces.Text):
    """Gymnasium's Text space over CHARSET, shown in one short line (its own repr lists every character)."""

    def __repr__(self) -> str:
        return (
            f"Text({self.min_length}, {self.max_length}, charset=<{len(self.character_set)} characters: "
            "tab, newlines and the printable Basic Multilingual Plane>)"
        )


class ToolObservation(Protocol):
    @property
    def text(self) -> str: ...

    @property
    def is_error(self) -> bool: ...

    @property
    def submitted(self) -> bool: ...


class ToolRunner(Protocol):
    """What the env needs of the tools: `tools.Toolbox` matches it."""

    def call(self, sandbox: Sandbox, name: str, arguments: dict[str, Any] | str) -> ToolObservation: ...

    def schemas(self) -> list[dict[str, Any]]: ...


class CodingEnv(gym.Env[str, str]):
    """One coding task per episode, in a sandbox; see the module docstring."""

    metadata = {"render_modes": []}  # noqa: RUF012  (Gymnasium declares it an instance variable)

    def __init__(
        self,
        tasks: list[Task],
        tools: Callable[[Task], ToolRunner],
        sandbox_config: SandboxConfig | None = None,
        reward_config: RewardConfig | None = None,
    ) -> None:
        if not tasks:
            raise ValueError("CodingEnv needs at least one task")
        self.tasks = {task.id: task for task in tasks}
        self.make_tools = tools
        self.tools: ToolRunner | None = None
        self.sandbox_config = sandbox_config or SandboxConfig()
        self.reward_config = reward_config or RewardConfig()
        self.observation_space = TextSpace(max_length=MAX_TEXT, min_length=0, charset=CHARSET)
        self.action_space = TextSpace(max_length=MAX_TEXT, min_length=0, charset=CHARSET)
        self.task: Task | None = None
        self.sandbox: ReplacingSandbox | None = None
        self.turns = 0
        self.started = 0.0
        self.done = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        chosen = (options or {}).get("task")
        if chosen is None:
            ids = sorted(self.tasks)
            chosen = ids[int(self.np_random.integers(len(ids)))]
        task = chosen if isinstance(chosen, Task) else self.tasks.get(str(chosen))
        if task is None:
            raise ValueError(f"unknown task {chosen!r}; known: {', '.join(sorted(self.tasks))}")
        self._close_sandbox()
        self.sandbox = task_sandbox(task, self.sandbox_config)  # as a rollout starts its episode's
        run_setup(self.sandbox, task)
        self.task, self.turns, self.started, self.done = task, 0, time.monotonic(), False
        self.tools = self.make_tools(task)
        return task.prompt(), {"task_id": task.id, "tools": self.tools.schemas()}

    def step(self, action: str | dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None or self.sandbox is None or self.tools is None or self.done:
            raise RuntimeError("call reset() before step(), and again after an episode ends")
        self.turns += 1
        name, arguments, problem = parse_action(action)
        if problem is not None:
            text, is_error, submitted = problem, True, False
        else:
            try:
                observation = self.tools.call(self.sandbox, name, arguments)
            except SandboxError as e:  # the harness failed, not the model (contract 4): no grade
                self.done = True
                return f"infra error: {e}", 0.0, False, True, {"turn": self.turns, "infra_error": str(e)}
            text, is_error, submitted = observation.text, observation.is_error, observation.submitted
        limits = self.task.limits
        terminated = submitted
        truncated = not terminated and (
            self.turns >= limits.max_turns or time.monotonic() - self.started >= limits.wall_time_s
        )
        info: dict[str, Any] = {"turn": self.turns, "is_error": is_error}
        reward = 0.0
        if terminated or truncated:
            self.done = True
            grade = self._grade()
            reward = grade.reward
            info["grade"] = grade.model_dump()
            if grade.infra_error:
                info["infra_error"] = grade.infra_error
        return text[:MAX_TEXT], reward, terminated, truncated, info

    def _grade(self) -> Grade:
        assert self.task is not None and self.sandbox is not None
        try:
            patch = collect_patch(self.sandbox, self.task, self.sandbox_config)
        except AgentTreeError as e:
            return tree_failure(self.task, e)
        except SandboxError as e:
            return Grade.ungraded(self.task.id, infra_error=f"could not read the agent's repository: {e}")
        return grade_patch(self.task, patch, self.sandbox_config, self.reward_config)

    def _close_sandbox(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

    def close(self) -> None:
        self._close_sandbox()


def parse_action(action: str | dict[str, Any]) -> tuple[str, dict[str, Any] | str, str | None]:
    """(tool name, arguments, problem): a malformed action becomes a problem text, never an exception."""
    if isinstance(action, str):
        try:
            action = json.loads(action)
        except json.JSONDecodeError as e:
            return (
                "",
                {},
                f'an action is a JSON object {{"name": ..., "arguments": {{...}}}}; this is not JSON: {e}',
            )
    if not isinstance(action, dict) or not isinstance(action.get("name"), str):
        return "", {}, 'an action is a JSON object with a string "name" and an "arguments" object'
    arguments = action.get("arguments", {})
    if not isinstance(arguments, dict | str):
        return "", {}, '"arguments" must be an object (or its JSON text)'
    return action["name"], arguments, None


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
    tools = ToolsConfig(bash_enabled=bash_enabled)
    return CodingEnv(
        tasks,
        lambda task: Toolbox.for_task(task, tools),
        SandboxConfig(backend=backend),  # type: ignore[arg-type]
        RewardConfig(simplicity_lambda=simplicity_lambda),
    )


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="harness.gym:make_coding_env", disable_env_checker=True)
