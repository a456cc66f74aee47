"""The policy protocols: a token policy samples ids from ids; a chat policy answers messages.

Token policies (`hf`, `tito`) give trainable trajectories: the loop keeps the exact ids that went in and
came out, with the sampler's log-probs. Chat policies (`openai`, `litellm`, `scripted`) work on messages;
their trajectories are for evaluation and inspection only.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from tasks.model import Task


class SamplingParams(BaseModel):
    """How one generation is sampled."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int = Field(default=512, ge=1)
    """Most tokens one generation may produce."""
    temperature: float = Field(default=1.0, ge=0)
    """0 means greedy."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling: sample among the likeliest ids until their mass reaches top_p; 1 keeps them all."""
    seed: int | None = None
    """Seed of this generation's sampler; None draws one."""


class Generation(BaseModel):
    """One sampled continuation: exactly the ids the sampler produced, and their log-probs."""

    model_config = ConfigDict(extra="forbid")

    ids: list[int]
    logprobs: list[float]
    """log p(id) under the sampler's distribution (after temperature), one per id."""
    finish_reason: Literal["stop", "length"]
    """`stop`: the model ended its message (the last id is a stop id); `length`: max_new_tokens hit."""
    policy_version: int = 0
    """The learner step whose weights sampled these ids (the first id's, where weights changed between
    two of them)."""
    token_versions: list[int] | None = None
    """The version that sampled each id, when weights changed between two of this generation's ids (a
    batched sampler loads new weights between decode steps); None when every id has `policy_version`."""


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer the loop uses."""

    eos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


class TokenPolicy(Protocol):
    """Samples token ids given token ids. `tokenizer` renders messages the way the model was trained."""

    kind: Literal["token"]
    spec: str
    tokenizer: Tokenizer

    @property
    def version(self) -> int:
        """The policy version (learner step) of the weights now loaded."""
        ...

    def stop_ids(self) -> list[int]:
        """Ids that end an assistant message (the chat template's end-of-turn token)."""
        ...

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation: ...


@runtime_checkable
class Scorer(Protocol):
    """Scores token ids it is given: what a teacher does with a student's tokens (issue 19)."""

    def prompt_logprobs(self, ids: list[int], temperature: float) -> list[float]:
        """log p(ids[t] | ids[:t]) for t >= 1 (len(ids) - 1 values), the logits divided by `temperature`
        as the sampler divides them (raw at 0)."""
        ...


class ToolCall(BaseModel):
    """A tool call as a chat API returns it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] | str
    id: str | None = None


class ChatReply(BaseModel):
    """One assistant message from a chat policy, with the token usage its server reported."""

    model_config = ConfigDict(extra="forbid")

    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    """As the server said: `stop`, `length` (cut at max tokens), `tool_calls`, ..."""


class ChatPolicy(Protocol):
    """Answers a conversation (OpenAI message dicts) with text and native tool calls.

    `tools` is empty when the harness asks for a self-summary, which must be plain text.
    """

    kind: Literal["chat"]
    spec: str

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: SamplingParams
    ) -> ChatReply: ...


@runtime_checkable
class Scripted(Protocol):
    """A chat policy that plays a script made from the task itself (its gold patch): the one kind of policy
    shown the whole task, and only when an episode binds it (`for_task`). Every other policy sees what the
    agent sees: the prompt, its messages and the tools."""

    def for_task(self, task: Task) -> ChatPolicy: ...


Policy = TokenPolicy | ChatPolicy
