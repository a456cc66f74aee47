"""Self-summaries: when to summarize, the request the model answers, and how the next segment starts.

When a segment's context passes `trigger_tokens`, the loop appends `REQUEST` (loss mask 0), the model
answers with a summary (loss mask 1: the summary is trained on like any other model output), and a new
segment starts from the system prompt, the task, and that summary. Chainable without limit. No I/O here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

REQUEST = (
    "Your context is nearly full. Write a summary of your progress so far that lets you continue from it "
    "alone: what you learned about the repository and the problem, what you changed (files and why), "
    "what you verified, and what remains to do. Do not call a tool in this message."
)
RESUME = "Summary of your progress so far, written by you before your context was reset:\n\n{summary}"


class SummaryConfig(BaseModel):
    """When and how the model summarizes its own progress."""

    model_config = ConfigDict(extra="forbid")

    trigger_tokens: int = Field(default=24_000, ge=64)
    """A segment whose context passes this many tokens is closed with a self-summary."""
    max_summary_tokens: int = Field(default=1024, ge=8)
    """Longest summary the model may write."""
    enabled: bool = True
    """False: no summaries; one segment grows until a task limit ends the episode."""


def should_summarize(context_tokens: int, turns_in_segment: int, config: SummaryConfig) -> bool:
    """True when the segment is over budget and has done at least one action since it started."""
    return config.enabled and turns_in_segment > 0 and context_tokens >= config.trigger_tokens


def request_message() -> dict[str, Any]:
    return {"role": "user", "content": REQUEST}


def resume_messages(system: str, task_prompt: str, summary: str) -> list[dict[str, Any]]:
    """The opening messages of the segment after a summary."""
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": task_prompt + "\n\n" + RESUME.format(summary=summary.strip())},
    ]
