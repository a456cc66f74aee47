"""`CodingEnv`: a task as a Gymnasium environment, on the episode engine of `harness rollout`. An action
is one assistant message; the reward comes once. Registered as `harness/CodingEnv-v0`.

    import harness.gym  # or gymnasium.make("harness.gym:harness/CodingEnv-v0", ...)
    env = gymnasium.make("harness/CodingEnv-v0", suite="builtin", backend="auto")
    obs, info = env.reset(options={"task": task_or_id})     # the problem statement
    obs, reward, terminated, truncated, info = env.step('{"name": "read_file", "arguments": {...}}')

An action is a tool call `{"name": ..., "arguments": {...}}` (or its JSON text), with an optional
`"content"`, the message's text beside the call; any other text is the model's whole message, its call in
`<tool_call>` tags as a model writes it. Each step is one turn of the rollout's own loop
(`harness/agent/loop.LiveEpisode`), the action played as a chat policy's reply, or with `tokens` as a
token policy's message in that policy's ids: the observation is the tool's result or what is wrong with
the call; `terminated` is set by submit, `truncated` by the task's turn, wall-time or (with `tokens`, as
for a token policy's rollout) token limit, `info["status_reason"]` naming it. A Gym agent keeps its own
memory, so the env never asks it for a self-summary. When the episode ends, the repository is graded
as `run_one` grades a rollout's (`read_patch`, `graded`), in a fresh sandbox; the reward arrives on that
final step, with the grade's breakdown in `info["grade"]`. The task's sandbox (`task_sandbox`), its
setup and its tools (`Toolbox.for_task`) are a rollout's too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import gymnasium as gym
from gymnasium import spaces
from pydantic import ValidationError

from envs.grading import Grade
from envs.replacing import ReplacingSandbox
from envs.reward import RewardConfig
from envs.sandbox import SandboxConfig, SandboxError
from envs.start_tree import run_setup
from harness.agent.loop import LiveEpisode, LoopConfig, open_conversation
from harness.rollouts.episode import graded, read_patch, task_sandbox
from policies.base import ChatReply, Generation, SamplingParams, TokenPolicy, ToolCall
from policies.chat_format import ChatFormat, assistant_text
from summarizer import SummaryConfig
from tasks.model import Task
from tasks.suite import load_suite
from tools import Toolbox, ToolsConfig

ENV_ID = "harness/CodingEnv-v0"
MAX_TEXT = 200_000
# Every character an observation may hold: tab, newlines, and the printable planes (no surrogates).
CHARSET = (
    "\t\n\r" + "".join(chr(c) for c in range(32, 0xD800)) + "".join(chr(c) for c in range(0xE000, 0x10000))
)
NO_SUMMARIES = SummaryConfig(enabled=False)


class TextSpace(spaces.Text):
    """Gymnasium's Text space over CHARSET, shown in one short line (its own repr lists every character)."""

    def __repr__(self) -> str:
        return (
            f"Text({self.min_length}, {self.max_length}, charset=<{len(self.character_set)} characters: "
            "tab, newlines and the printable Basic Multilingual Plane>)"
        )


class ChatActions:
    """The chat policy a `CodingEnv` episode is played with: it answers with the action given to `step`.
    Matches `policies.base.ChatPolicy`."""

    kind: Literal["chat"] = "chat"
    spec = "gym"

    def __init__(self) -> None:
        self.next = ChatReply()

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: SamplingParams
    ) -> ChatReply:
        return self.next


class TokenActions:
    """The token policy a `CodingEnv` episode with `tokens` is played with: the action given to `step` as
    text (a call in `<tool_call>` tags) in ids of that policy's tokenizer, ending with its stop id, as a
    token policy's message; log-probs 0 (nothing was sampled). Matches `policies.base.TokenPolicy`."""

    kind: Literal["token"] = "token"
    spec = "gym"

    def __init__(self, policy: TokenPolicy) -> None:
        self.tokenizer = policy.tokenizer
        self.stops = policy.stop_ids()
        self.format = ChatFormat(self.tokenizer, self.stops)
        self.next = ChatReply()

    @property
    def version(self) -> int:
        return 0

    def stop_ids(self) -> list[int]:
        return list(self.stops)

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        calls = [{"function": {"name": c.name, "arguments": c.arguments}} for c in self.next.tool_calls]
        text = assistant_text({"content": self.next.content, "tool_calls": calls})
        ids = [*self.format.encode(text), self.stops[0]]
        return Generation(ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")


def as_reply(action: str | dict[str, Any], index: int) -> ChatReply:
    """The assistant message an action stands for (the module docstring says how it is read); its call,
    if native, has the id `call_{index}`."""
    call: Any = action
    text = action if isinstance(action, str) else json.dumps(action)
    if isinstance(action, str):
        try:
            call = json.loads(action)
        except json.JSONDecodeError:
            return ChatReply(content=text)
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ChatReply(content=text)
    try:
        native = ToolCall(name=call["name"], arguments=call.get("arguments", {}), id=f"call_{index}")
    except ValidationError:  # arguments neither an object nor its JSON text: the loop says what is wrong
        return ChatReply(content=f"<tool_call>{json.dumps(call)}</tool_call>")
    return ChatReply(content=str(call.get("content") or ""), tool_calls=[native])


class CodingEnv(gym.Env[str, str]):
    """One coding task per episode, in a sandbox; see the module docstring."""

    metadata = {"render_modes": []}  # noqa: RUF012  (Gymnasium declares it an instance variable)

    def __init__(
        self,
        tasks: list[Task],
        tools: Callable[[Task], Toolbox],
        sandbox_config: SandboxConfig | None = None,
        reward_config: RewardConfig | None = None,
        loop: LoopConfig | None = None,
        tokens: TokenPolicy | None = None,
    ) -> None:
        """`tokens`: lay the context out in that policy's ids (its chat template and tokenizer), as its
        rollout would, so that the task's token limit applies; the env never samples from it."""
        if not tasks:
            raise ValueError("CodingEnv needs at least one task")
        self.tasks = {task.id: task for task in tasks}
        self.make_tools = tools
        self.sandbox_config = sandbox_config or SandboxConfig()
        self.reward_config = reward_config or RewardConfig()
        self.loop = loop or LoopConfig()
        self.observation_space = TextSpace(max_length=MAX_TEXT, min_length=0, charset=CHARSET)
        self.action_space = TextSpace(max_length=MAX_TEXT, min_length=0, charset=CHARSET)
        self.actions: ChatActions | TokenActions = ChatActions() if tokens is None else TokenActions(tokens)
        self.task: Task | None = None
        self.sandbox: ReplacingSandbox | None = None
        self.live: LiveEpisode | None = None
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
        toolbox = self.make_tools(task)
        conv = open_conversation(task, self.actions, toolbox, self.loop, SamplingParams(), NO_SUMMARIES, 0)
        self.live = LiveEpisode(task, conv, toolbox, self.sandbox, self.loop, NO_SUMMARIES)
        self.task, self.done = task, False
        return task.prompt(), {"task_id": task.id, "tools": toolbox.schemas()}

    def step(self, action: str | dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        task, sandbox, live = self.task, self.sandbox, self.live
        if task is None or sandbox is None or live is None or self.done:
            raise RuntimeError("call reset() before step(), and again after an episode ends")
        calls = sum(1 for m in live.conv.segment.messages if m.get("tool_calls"))
        self.actions.next = as_reply(action, calls)
        try:
            turn = live.step()
        except SandboxError as e:  # the harness failed, not the model (contract 4): no grade
            self.done = True
            return f"infra error: {e}", 0.0, False, True, {"turn": live.metrics.turns, "infra_error": str(e)}
        terminated = live.submitted
        limit = None if terminated else live.limit()
        truncated = limit is not None
        info: dict[str, Any] = {"turn": live.metrics.turns, "is_error": turn.observation_error}
        reward = 0.0
        if terminated or truncated:
            self.done = True
            grade = self._grade(task, sandbox)
            reward = grade.reward
            info |= {"grade": grade.model_dump(), "status_reason": limit}
            if grade.infra_error:
                info["infra_error"] = grade.infra_error
        return (turn.observation or "")[:MAX_TEXT], reward, terminated, truncated, info

    def _grade(self, task: Task, sandbox: ReplacingSandbox) -> Grade:
        try:
            patch = read_patch(sandbox, task, self.sandbox_config)
        except SandboxError as e:
            return Grade.ungraded(task.id, infra_error=f"could not read the agent's repository: {e}")
        return graded(task, patch, self.sandbox_config, self.reward_config, None)

    def _close_sandbox(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

    def close(self) -> None:
        self._close_sandbox()


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
        SandboxConfig(backend=backend),
        RewardConfig(simplicity_lambda=simplicity_lambda),
    )


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="harness.gym:make_coding_env", disable_env_checker=True)
