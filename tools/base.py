"""What every tool shares: the observation it returns, the protocol it matches, the error it raises."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from envs.sandbox import Sandbox


class Observation(BaseModel):
    """What the model is shown after one tool call."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    text: str
    is_error: bool = False
    """The call did not do what was asked; the text says why and what to do instead."""
    submitted: bool = False
    """The model submitted its work: the episode ends after this call."""


class ToolError(Exception):
    """A call a tool refuses for a reason the model can fix; the message is the whole observation."""


class Tool(Protocol):
    """One tool: its name and description for the model, its argument model, and how it runs."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def Args(self) -> type[BaseModel]: ...

    def run(self, sandbox: Sandbox, args: Any) -> Observation:
        """Runs with `args`, an instance of `Args`; raises ToolError for calls the model must change."""
        ...
