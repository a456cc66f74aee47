"""The agent's tools: typed arguments, OpenAI schemas, execution through a Sandbox."""

from tools.base import Observation, Tool, ToolError
from tools.commands import Bash, RunTests
from tools.files import Edit, ListDir, ReadFile, WriteFile
from tools.search import Search
from tools.submit import Submit
from tools.toolbox import Toolbox, ToolsConfig

__all__ = [
    "Bash",
    "Edit",
    "ListDir",
    "Observation",
    "ReadFile",
    "RunTests",
    "Search",
    "Submit",
    "Tool",
    "ToolError",
    "Toolbox",
    "ToolsConfig",
    "WriteFile",
]
