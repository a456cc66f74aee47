"""The two ways an episode's context grows: exact token ids (token policies) or chat messages.

Both record segments, turns and summaries into the trajectory schema, and both start a new segment
from system prompt + task + summary when the loop asks them to summarize.
"""

from __future__ import annotations

import json
import time
from typing import Any

from harness.agent.trajectory import ParsedCall, Segment, Summary, Turn
from policies.base import ChatPolicy, SamplingParams, TokenPolicy
from policies.chat_format import ChatFormat
from summarizer import SummaryConfig, request_message, resume_messages

CHARS_PER_TOKEN = 4
"""Estimate for chat policies whose server reports no usage (scripted ones)."""
SEEDS_PER_EPISODE = 1_000_003
"""The n-th generation of the episode with seed s is sampled with seed s * SEEDS_PER_EPISODE + n."""


def opening_messages(system: str, task_prompt: str, summary: str | None = None) -> list[dict[str, Any]]:
    """The messages a segment opens with: the system prompt and the task; after a self-summary, the task
    with that summary (`summarizer.resume_messages`)."""
    if summary is None:
        return [{"role": "system", "content": system}, {"role": "user", "content": task_prompt}]
    return resume_messages(system, task_prompt, summary)


def prompt_ids(
    fmt: ChatFormat, system: str, task_prompt: str, tools: list[dict[str, Any]], summary: str | None = None
) -> list[int]:
    """The ids a token episode's segment opens with, given the episode's tool schemas: the one place a
    segment's prompt is built, for the rollout and for whatever rebuilds it (hint rollouts' students)."""
    return fmt.prompt_ids(opening_messages(system, task_prompt, summary), tools)


class TokenConversation:
    """Keeps the exact ids of the current segment; every message after the first is a tokenized delta."""

    trainable = True

    def __init__(
        self,
        policy: TokenPolicy,
        system: str,
        task_prompt: str,
        tools: list[dict[str, Any]],
        params: SamplingParams,
        summary: SummaryConfig,
        seed: int,
    ) -> None:
        self.policy = policy
        self.format = ChatFormat(policy.tokenizer, policy.stop_ids())
        self.system, self.task_prompt, self.tools = system, task_prompt, tools
        self.params, self.summary_config, self.seed = params, summary, seed
        self.segments: list[Segment] = []
        self.summaries: list[Summary] = []
        self.context: list[int] = []
        self.generations = 0
        self.verified = True
        self._open(None)

    @property
    def segment(self) -> Segment:
        return self.segments[-1]

    def context_tokens(self) -> int:
        return len(self.context)

    def total_tokens(self) -> int:
        """Every token of every segment so far, summaries included."""
        return sum(s.token_count() for s in self.segments)

    def _open(self, summary: str | None) -> None:
        prompt = prompt_ids(self.format, self.system, self.task_prompt, self.tools, summary)
        self.segments.append(Segment(index=len(self.segments), prompt_ids=prompt))
        self.context = list(prompt)
        self._reply_pending = False

    def _append(self, turn: Turn, ids: list[int]) -> None:
        turn.appended_ids += ids
        self.context += ids

    def generate(
        self, max_new_tokens: int | None = None, kind: str = "action"
    ) -> tuple[Turn, ParsedCall | None]:
        """Samples the next assistant message from exactly the ids so far."""
        if self._reply_pending:  # a tool result came last: the assistant's next message opens here
            self._append(self.segment.turns[-1], list(self.format.reply_ids))
            self._reply_pending = False
        self._verify()
        self.generations += 1
        params = self.params.model_copy(
            update={
                "seed": self.seed * SEEDS_PER_EPISODE + self.generations,
                "max_new_tokens": max_new_tokens or self.params.max_new_tokens,
            }
        )
        started = time.monotonic()
        generation = self.policy.generate(list(self.context), params)
        took = time.monotonic() - started
        if len(generation.logprobs) != len(generation.ids):
            raise ValueError(
                f"the sampler gave {len(generation.ids)} ids but {len(generation.logprobs)} log-probs"
            )
        text = self.policy.tokenizer.decode(generation.ids, skip_special_tokens=False)
        for stop in self.format.stop_ids:  # the end-of-turn token is not part of the message's text
            stop_text = self.policy.tokenizer.decode([stop], skip_special_tokens=False)
            if stop_text and text.endswith(stop_text):
                text = text[: -len(stop_text)]
        turn = Turn(
            kind=kind,  # type: ignore[arg-type]
            text=text,
            generated_ids=list(generation.ids),
            logprobs=list(generation.logprobs),
            policy_version=generation.policy_version,
            token_versions=generation.token_versions,
            finish_reason=generation.finish_reason,
            generate_s=took,
            prompt_tokens=len(self.context),
            completion_tokens=len(generation.ids),
        )
        self.segment.turns.append(turn)
        self.context += generation.ids
        self._append(turn, self.format.after_generation(generation.ids, generation.finish_reason == "stop"))
        return turn, None

    def observe(self, turn: Turn, text: str) -> None:
        """Appends a tool result (or an error message) as the tool's message. The opening of the next
        assistant message follows only when one is generated: a summary request may come first."""
        self._append(turn, self.format.message_ids({"role": "tool", "content": text}, reply=False))
        self._reply_pending = True

    def summarize(self) -> Summary:
        """Asks for a summary, lets the model write it, and opens the next segment from it."""
        last = self.segment.turns[-1]
        self._reply_pending = False
        self._append(last, self.format.message_ids(request_message()))
        before = len(self.context)
        turn, _ = self.generate(self.summary_config.max_summary_tokens, kind="summary")
        closed = self.segment.index
        self._verify()
        self._open(turn.text)
        summary = Summary(
            segment=closed, text=turn.text, tokens_before=before, tokens_after=len(self.context)
        )
        self.summaries.append(summary)
        return summary

    def _verify(self) -> None:
        """Contract 1: the ids about to be sampled from are exactly the stored ids of the segment."""
        if self.segment.ids_and_mask()[0] != self.context:
            self.verified = False


class ChatConversation:
    """Keeps OpenAI-style messages; token counts come from the server's usage, or an estimate."""

    trainable = False

    def __init__(
        self,
        policy: ChatPolicy,
        system: str,
        task_prompt: str,
        tools: list[dict[str, Any]],
        params: SamplingParams,
        summary: SummaryConfig,
        seed: int,
    ) -> None:
        self.policy = policy
        self.system, self.task_prompt, self.tools = system, task_prompt, tools
        self.params = params.model_copy(update={"seed": seed})
        self.summary_config = summary
        self.segments: list[Segment] = []
        self.summaries: list[Summary] = []
        self.verified = True
        self.generations = 0
        self._reported = 0
        self._open(None)

    @property
    def segment(self) -> Segment:
        return self.segments[-1]

    def _open(self, summary: str | None) -> None:
        messages = opening_messages(self.system, self.task_prompt, summary)
        self.segments.append(Segment(index=len(self.segments), messages=messages))
        self._reported = 0

    def context_tokens(self) -> int:
        estimate = sum(len(json.dumps(m)) for m in self.segment.messages) // CHARS_PER_TOKEN
        return max(self._reported, estimate)

    def total_tokens(self) -> int:
        """The tokens of each closed segment when it was summarized, and of the current one."""
        return sum(s.tokens_before for s in self.summaries) + self.context_tokens()

    def generate(
        self, max_new_tokens: int | None = None, kind: str = "action"
    ) -> tuple[Turn, ParsedCall | None]:
        self.generations += 1
        params = self.params.model_copy(
            update={"max_new_tokens": max_new_tokens or self.params.max_new_tokens}
        )
        started = time.monotonic()
        reply = self.policy.respond(self.segment.messages, self.tools if kind == "action" else [], params)
        took = time.monotonic() - started
        self._reported = reply.prompt_tokens + reply.completion_tokens
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        call = None
        if reply.tool_calls and kind == "action":
            first = reply.tool_calls[0]
            call = ParsedCall(name=first.name, arguments=first.arguments)
            arguments = first.arguments if isinstance(first.arguments, str) else json.dumps(first.arguments)
            message["tool_calls"] = [
                {
                    "id": first.id or "call_0",
                    "type": "function",
                    "function": {"name": first.name, "arguments": arguments},
                }
            ]
        self.segment.messages.append(message)
        turn = Turn(
            kind=kind,  # type: ignore[arg-type]
            text=reply.content,
            generate_s=took,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            finish_reason=reply.finish_reason,
        )
        self.segment.turns.append(turn)
        return turn, call

    def observe(self, turn: Turn, text: str) -> None:
        last = self.segment.messages[-1]
        if last.get("tool_calls"):
            self.segment.messages.append(
                {"role": "tool", "tool_call_id": last["tool_calls"][0]["id"], "content": text}
            )
        else:
            self.segment.messages.append({"role": "user", "content": text})

    def summarize(self) -> Summary:
        self.segment.messages.append(request_message())
        before = self.context_tokens()
        turn, _ = self.generate(self.summary_config.max_summary_tokens, kind="summary")
        closed = self.segment.index
        self._open(turn.text)
        summary = Summary(
            segment=closed, text=turn.text, tokens_before=before, tokens_after=self.context_tokens()
        )
        self.summaries.append(summary)
        return summary
