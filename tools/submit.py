"""The submit tool: the model says it is done."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from envs.sandbox import Sandbox
from tools.base import Observation


class SubmitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    message: str = ""
    """A short note on what was changed, if any."""


@dataclass(frozen=True)
class Submit:
    name = "submit"
    description = "Submit the repository as it is now as the final answer. This ends the episode."
    Args = SubmitArgs

    def run(self, sandbox: Sandbox, args: SubmitArgs) -> Observation:
        return Observation(text="submitted", submitted=True)
