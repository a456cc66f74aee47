"""The agent loop: one episode of one policy on one task, turn by turn, with self-summaries.

Each turn the model generates; its tool call is parsed (from `<tool_call>` text, or native for chat
policies) and run through the tools; the result is appended as the tool's message. When the segment's
context passes the summary budget the model summarizes its progress and goes on from a new segment.
The episode ends on submit, or on a limit (turns, total tokens, wall time). A bad tool call becomes an
error observation and is counted; only the harness's own failures (`SandboxUnusable`, a sampler
error) end the episode early, as an infra error, raised to the caller.
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
from tasks.model import Limits, Task
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


def _limit_reached(
    conv: TokenConversation | ChatConversation, turns: int, max_turns: int, limits: Limits, elapsed_s: float
) -> str | None:
    """Which limit ends the episode before its next turn, if one does."""
    if turns >= max_turns:
        return f"max_turns ({max_turns})"
    if conv.trainable and sum(s.token_count() for s in conv.segments) >= limits.max_tokens:
        return f"max_tokens ({limits.max_tokens})"
    if elapsed_s >= limits.wall_time_s:
        return f"wall_time ({limits.wall_time_s:.0f}s)"
    return None


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


def _count_tokens(conv: TokenConversation | ChatConversation, metrics: Metrics) -> None:
    """The episode's summaries and token counts into `metrics`."""
    metrics.summaries = len(conv.summaries)
    metrics.generated_tokens = sum(len(t.generated_ids) for s in conv.segments for t in s.turns)
    if conv.trainable:
        metrics.total_tokens = sum(s.token_count() for s in conv.segments)
        metrics.max_context_tokens = max(s.token_count() for s in conv.segments)
    else:
        metrics.total_tokens = sum(s.tokens_before for s in conv.summaries) + conv.context_tokens()
        metrics.max_context_tokens = max([s.tokens_before for s in conv.summaries] + [conv.context_tokens()])


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
    tools = toolbox.schemas()
    prompt = task.prompt()
    conv: TokenConversation | ChatConversation
    if policy.kind == "token":
        conv = TokenConversation(policy, config.system_prompt, prompt, tools, sampling, summary, seed)
    else:
        chat = (
            policy.for_task(task) if isinstance(policy, Scripted) else policy
        )  # only a script sees the task
        conv = ChatConversation(chat, config.system_prompt, prompt, tools, sampling, summary, seed)
    max_turns = config.max_turns or task.limits.max_turns
    metrics = Metrics()
    started = time.monotonic()
    status: Status = "limit"
    reason: str | None = None
    tools_s = 0.0
    while True:
        if stop is not None and stop.is_set():
            raise Stopped
        reason = _limit_reached(conv, metrics.turns, max_turns, task.limits, time.monotonic() - started)
        if reason is not None:
            break
        turn, native_call = conv.generate()
        metrics.turns += 1
        text, submitted = _act(turn, native_call, toolbox, sandbox, metrics)
        tools_s += turn.tool_s
        conv.observe(turn, text)
        if on_turn is not None:
            on_turn(metrics.turns)
        if submitted:
            status, reason = "ok", None
            break
        if should_summarize(conv.context_tokens(), len(conv.segment.turns), summary):
            conv.summarize()
    _count_tokens(conv, metrics)
    return Episode(
        segments=conv.segments,
        summaries=conv.summaries,
        status=status,
        status_reason=reason,
        metrics=metrics,
        trainable=conv.trainable,
        ids_verified=conv.verified,
        generate_s=sum(t.generate_s for s in conv.segments for t in s.turns),
        tools_s=tools_s,
    )
