"""The trajectory schema: every token of an episode, exactly as the sampler saw it, and its grade.

A segment is one context window: its prompt ids, then per turn the ids the model generated (loss mask
1) and the ids the harness appended after them (loss mask 0: the closing of the message, the tool
result, a summary request). The ids of a segment are therefore

    prompt_ids + turn[0].generated_ids + turn[0].appended_ids + turn[1].generated_ids + ...

and each turn's sampler prompt is exactly the ids before its generated ids (DESIGN.md, contract 1).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envs.grading import Grade

SCHEMA_VERSION = 1
Status = Literal["ok", "limit", "infra_error"]


class ParsedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] | str


class Turn(BaseModel):
    """One model generation and what the harness appended after it."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["action", "summary"] = "action"
    text: str
    """The model's text (its generated ids decoded, or a chat model's content)."""
    generated_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    """The sampler's log-prob of each generated id."""
    appended_ids: list[int] = Field(default_factory=list)
    policy_version: int = 0
    """The version of the weights that sampled the generated ids (the first id's, when they changed
    between two of them: see `token_versions`)."""
    token_versions: list[int] | None = None
    """The version that sampled each generated id, when new weights came between two of them (a batched
    sampler loads weights between decode steps); None when every id has `policy_version`."""
    finish_reason: str = "stop"
    tool_call: ParsedCall | None = None
    parse_error: str | None = None
    observation: str | None = None
    observation_error: bool = False
    generate_s: float = 0.0
    tool_s: float = 0.0
    prompt_tokens: int = 0
    """The prompt's tokens: as a chat policy's server reported them, or a token policy's context length."""
    completion_tokens: int = 0
    """The generated tokens: as a chat policy's server reported them, or `len(generated_ids)`."""


class Segment(BaseModel):
    """One context window."""

    model_config = ConfigDict(extra="forbid")

    index: int
    prompt_ids: list[int] = Field(default_factory=list)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """The conversation, for chat policies (token policies keep ids instead)."""
    turns: list[Turn] = Field(default_factory=list)

    def ids_and_mask(self) -> tuple[list[int], list[int], list[float]]:
        """All ids of the segment, the loss mask (1 = model-produced), and sampler log-probs (0 where mask 0)."""
        ids = list(self.prompt_ids)
        mask = [0] * len(ids)
        logprobs = [0.0] * len(ids)
        for turn in self.turns:
            ids += turn.generated_ids
            mask += [1] * len(turn.generated_ids)
            logprobs += turn.logprobs
            ids += turn.appended_ids
            mask += [0] * len(turn.appended_ids)
            logprobs += [0.0] * len(turn.appended_ids)
        return ids, mask, logprobs

    def token_count(self) -> int:
        return len(self.prompt_ids) + sum(len(t.generated_ids) + len(t.appended_ids) for t in self.turns)


class Summary(BaseModel):
    """A self-summary: it closed segment `segment` and opened the next one."""

    model_config = ConfigDict(extra="forbid")

    segment: int
    text: str
    tokens_before: int
    """Context tokens of the closed segment when the summary was requested."""
    tokens_after: int
    """Prompt tokens of the new segment (system + task + summary)."""


class Metrics(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turns: int = 0
    tool_errors: int = 0
    parse_errors: int = 0
    summaries: int = 0
    generated_tokens: int = 0
    total_tokens: int = 0
    """Tokens processed over all segments (prompts, generations and appended ids)."""
    max_context_tokens: int = 0
    """The largest context any one segment reached."""


class Timings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    started_at: float = 0.0
    duration_s: float = 0.0
    generate_s: float = 0.0
    tools_s: float = 0.0
    grade_s: float = 0.0


class Trajectory(BaseModel):
    """One attempt of one policy at one task, from reset to grade."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    id: str
    run: str
    task_id: str
    group_id: str
    """Rollouts of one task under one policy version share a group (GRPO compares within it)."""
    sample_index: int
    policy: str
    policy_version: int = 0
    seed: int
    trainable: bool
    """True when the ids are exact sampler ids with log-probs (token policies)."""
    ids_verified: bool = True
    """Every turn's ids extended the previous ones (contract 1); a trajectory failing it is not trained on."""
    segments: list[Segment] = Field(default_factory=list)
    summaries: list[Summary] = Field(default_factory=list)
    final_diff: str = ""
    grade: Grade | None = None
    reward: float = 0.0
    status: Status = "ok"
    status_reason: str | None = None
    metrics: Metrics = Field(default_factory=Metrics)
    timings: Timings = Field(default_factory=Timings)
