"""The agent loop: one episode of one policy on one task, turn by turn, with self-summaries.

Each turn the model generates; its tool call is parsed (from `<tool_call>` text, or native for chat
policies) and run through the tools; the result is appended as the tool's message. When the segment's
context passes the summary budget the model summarizes its progress and goes on from a new segment.
The episode ends on submit, or on a limit (turns, total tokens of a token policy's episode, wall time).
A bad tool call becomes an error observation and is counted; only the harness's own failures
(`SandboxUnusable`, a sampler error) end the episode early, as an infra error, raised to the caller.
A turn and the limits are `LiveEpisode`'s: `run_episode` drives it here, `harness.gym.CodingEnv` one
action at a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envs.sandbox import Sandbox
from harness.agent.conversation import ChatConversation, TokenConversation
from harness.agent.parsing import checked, parse_tool_call
from harness.agent.trajectory import Metrics, ParsedCall, Segment, Status, Summary, Turn
from policies.base import Policy, SamplingParams, Scripted
from summarizer import SummaryConfig, should_summarize
from tasks.model import Task
from tools import Toolbox

SYSTEM_PROMPT = (
    "You are a software engineer working in a repository at /repo, in a sandbox with no network. "
    "Use the tools to explore the code, reproduce the problem, fix it with small, clean changes, and "
    "run the tests. Call exactly one tool per message. When the fix is done, call submit."
)


class LoopConfig(BaseModel):
    """How an episode runs. Task limits (turns, tokens, wall time) apply too."""

    model_config = ConfigDict(extra="forbid")

    system_prompt: str = SYSTEM_PROMPT
    """The system message of every segment."""
    max_turns: int | None = Field(default=None, ge=1)
    """Overrides the task's turn limit when set."""


class Stopped(Exception):
    """The run was asked to stop (Ctrl-C); the episode is abandoned, not saved."""


class Episode(BaseModel):
    """What the loop produced; the runner adds the grade and writes the trajectory."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    segments: list[Segment]
    summaries: list[Summary]
    status: Status
    status_reason: str | None
    metrics: Metrics
    trainable: bool
    ids_verified: bool
    generate_s: float
    tools_s: float


Conversation = TokenConversation | ChatConversation


def open_conversation(
    task: Task,
    policy: Policy,
    toolbox: Toolbox,
    config: LoopConfig,
    sampling: SamplingParams,
    summary: SummaryConfig,
    seed: int,
) -> Conversation:
    """The episode's context at its start: the system prompt, the task and the episode's own tools."""
    tools = toolbox.schemas()
    if policy.kind == "token":
        return TokenConversation(policy, config.system_prompt, task.prompt(), tools, sampling, summary, seed)
    chat = policy.for_task(task) if isinstance(policy, Scripted) else policy  # only a script sees the task
    return ChatConversation(chat, config.system_prompt, task.prompt(), tools, sampling, summary, seed)


def _act(
    turn: Turn, native_call: ParsedCall | None, toolbox: Toolbox, sandbox: Sandbox, metrics: Metrics
) -> tuple[str, bool]:
    """The turn's tool call run (or why it could not be parsed): the observation's text, and whether the
    agent submitted. The turn records the call, its error and its time."""
    call, problem = checked(native_call) if native_call is not None else parse_tool_call(turn.text)
    turn.tool_call = call
    if call is None:
        metrics.parse_errors += 1
        turn.parse_error = problem
        text, is_error, submitted = problem or "", True, False
    else:
        tool_started = time.monotonic()
        observation = toolbox.call(sandbox, call.name, call.arguments)
        turn.tool_s = time.monotonic() - tool_started
        text, is_error, submitted = observation.text, observation.is_error, observation.submitted
    metrics.tool_errors += int(is_error and call is not None)
    turn.observation, turn.observation_error = text, is_error
    return text, submitted


class LiveEpisode:
    """An episode between its turns: `step` plays one turn (generate, run the tool call, observe, summarize
    when the context is over budget), `limit` says which limit ends the episode before its next turn, and
    `result` is the finished episode. `run_episode` drives it, and so does `harness.gym.CodingEnv`."""

    def __init__(
        self,
        task: Task,
        conv: Conversation,
        toolbox: Toolbox,
        sandbox: Sandbox,
        config: LoopConfig,
        summary: SummaryConfig,
    ) -> None:
        self.conv, self.toolbox, self.sandbox, self.summary = conv, toolbox, sandbox, summary
        self.limits = task.limits
        self.max_turns = config.max_turns or task.limits.max_turns
        self.metrics = Metrics()
        self.started = time.monotonic()
        self.tools_s = 0.0
        self.submitted = False

    def limit(self) -> str | None:
        """Which limit ends the episode before its next turn, if one does."""
        if self.metrics.turns >= self.max_turns:
            return f"max_turns ({self.max_turns})"
        if self.conv.trainable and self.conv.total_tokens() >= self.limits.max_tokens:
            return f"max_tokens ({self.limits.max_tokens})"
        if time.monotonic() - self.started >= self.limits.wall_time_s:
            return f"wall_time ({self.limits.wall_time_s:.0f}s)"
        return None

    def step(self) -> Turn:
        """One turn: the policy's message, its tool call run in the sandbox, the result observed, and a
        self-summary when the context has passed its budget (not after a submit)."""
        turn, native_call = self.conv.generate()
        self.metrics.turns += 1
        text, self.submitted = _act(turn, native_call, self.toolbox, self.sandbox, self.metrics)
        self.tools_s += turn.tool_s
        self.conv.observe(turn, text)
        if not self.submitted and should_summarize(
            self.conv.context_tokens(), len(self.conv.segment.turns), self.summary
        ):
            self.conv.summarize()
        return turn

    def result(self, limit: str | None) -> Episode:
        """The episode as it ended: submitted, or cut off by `limit`."""
        conv, metrics = self.conv, self.metrics
        metrics.summaries = len(conv.summaries)
        metrics.generated_tokens = sum(len(t.generated_ids) for s in conv.segments for t in s.turns)
        metrics.total_tokens = conv.total_tokens()
        if conv.trainable:
            metrics.max_context_tokens = max(s.token_count() for s in conv.segments)
        else:
            metrics.max_context_tokens = max(
                [s.tokens_before for s in conv.summaries] + [conv.context_tokens()]
            )
        return Episode(
            segments=conv.segments,
            summaries=conv.summaries,
            status="ok" if self.submitted else "limit",
            status_reason=None if self.submitted else limit,
            metrics=metrics,
            trainable=conv.trainable,
            ids_verified=conv.verified,
            generate_s=sum(t.generate_s for s in conv.segments for t in s.turns),
            tools_s=self.tools_s,
        )


def run_episode(
    task: Task,
    policy: Policy,
    toolbox: Toolbox,
    sandbox: Sandbox,
    config: LoopConfig,
    sampling: SamplingParams,
    summary: SummaryConfig,
    seed: int,
    stop: threading.Event | None = None,
    on_turn: Callable[[int], Any] | None = None,
) -> Episode:
    conv = open_conversation(task, policy, toolbox, config, sampling, summary, seed)
    live = LiveEpisode(task, conv, toolbox, sandbox, config, summary)
    while not live.submitted:
        if stop is not None and stop.is_set():
            raise Stopped
        limit = live.limit()
        if limit is not None:
            return live.result(limit)
        live.step()
        if on_turn is not None:
            on_turn(live.metrics.turns)
    return live.result(None)
