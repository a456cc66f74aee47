"""The agent's tools together: their config, their OpenAI schemas, and one `call` that never raises."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envs.sandbox import Sandbox, SandboxUnusable
from tasks.model import Task
from tools.base import Observation, Tool, ToolError
from tools.commands import Bash, RunTests
from tools.files import Edit, ListDir, ReadFile, WriteFile
from tools.search import Search
from tools.submit import Submit


class ToolsConfig(BaseModel):
    """Which tools the model gets and how far they go."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    bash_enabled: bool = True
    """Offer the bash tool; a task meant to be solved with the file tools alone turns it off."""
    test_command: str = "python3 -m pytest -q"
    """The task's visible test command, a shell command; run_tests appends the paths it is given."""
    max_observation_chars: int = Field(default=12000, ge=1000)
    """Longest observation; a longer one keeps its head and tail around a marker."""
    search_max_results: int = Field(default=100, ge=1)
    """Most matches search shows; it says how many more there were."""
    allowed: list[str] | None = None
    """Names of the tools the model may use (a task's allowlist); None offers them all."""
    command_timeout_s: float | None = Field(default=None, gt=0)
    """Timeout of bash, run_tests and search; None uses the sandbox's own command timeout."""


class Toolbox:
    """The tools a config allows. `call` turns every failure into an error observation."""

    def __init__(self, config: ToolsConfig) -> None:
        self.config = config
        tools: list[Tool] = [
            ReadFile(config.max_observation_chars),
            ListDir(config.max_observation_chars),
            Search(config.search_max_results, config.command_timeout_s),
            Edit(),
            WriteFile(),
            RunTests(config.test_command, config.command_timeout_s),
        ]
        if config.bash_enabled:
            tools.append(Bash(config.command_timeout_s))
        tools.append(Submit())
        self.tools = {
            tool.name: tool for tool in tools if config.allowed is None or tool.name in config.allowed
        }

    @classmethod
    def for_task(cls, task: Task, config: ToolsConfig | None = None) -> Toolbox:
        """The tools of `task`: its test command and its allowlist over `config` (default settings)."""
        config = config or ToolsConfig()
        return cls(config.model_copy(update={"test_command": task.test_command, "allowed": task.tools}))

    def schemas(self) -> list[dict[str, Any]]:
        """The tools in the OpenAI function-calling format."""
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": without_titles(tool.Args.model_json_schema()),
                },
            }
            for tool in self.tools.values()
        ]

    def call(self, sandbox: Sandbox, name: str, arguments: dict[str, Any] | str) -> Observation:
        """Runs one tool call of the model; `arguments` is its JSON text or the parsed object."""
        try:
            observation = self._call(sandbox, name, arguments)
        except ToolError as e:
            observation = Observation(text=str(e), is_error=True)
        except SandboxUnusable:
            raise  # the harness's failure, not the model's: the episode ends as an infra error
        except Exception as e:  # a failing tool or sandbox must not end the episode from here
            observation = Observation(text=f"{name} failed: {type(e).__name__}: {e}", is_error=True)
        return observation.model_copy(
            update={"text": cap(observation.text, self.config.max_observation_chars)}
        )

    def _call(self, sandbox: Sandbox, name: str, arguments: dict[str, Any] | str) -> Observation:
        tool = self.tools.get(name)
        if tool is None:
            if name == Bash.name:
                raise ToolError("the bash tool is turned off for this task; use the other tools")
            raise ToolError(f"unknown tool {name!r}; the tools are: {', '.join(self.tools)}")
        try:
            args = tool.Args.model_validate(parse_arguments(name, arguments))
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(map(str, error['loc'])) or 'arguments'}: {error['msg']}" for error in e.errors()
            )
            raise ToolError(f"invalid arguments for {name}: {problems}") from e
        return tool.run(sandbox, args)


def parse_arguments(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    """The arguments as an object; empty text means no arguments."""
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            raise ToolError(f"the arguments of {name} are not valid JSON: {e}") from e
    if not isinstance(arguments, dict):
        raise ToolError(f"the arguments of {name} must be a JSON object, not {type(arguments).__name__}")
    return arguments


def without_titles(schema: Any) -> Any:
    """The JSON schema without pydantic's generated titles, which only cost the model tokens."""
    if isinstance(schema, dict):
        # A property named "title" maps to a schema (a dict); only the keyword maps to a string.
        return {k: without_titles(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [without_titles(item) for item in schema]
    return schema


def cap(text: str, limit: int) -> str:
    """The head and tail of `text` around a marker, when it is longer than `limit` characters."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"
