"""Python with pytest: the grader's own runner (`envs/grade_runner.py`), a child per test file, expected
values held outside the sandbox (`tasks/expectations.py`), held and text canaries (`tasks/canaries.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from envs.languages import HiddenRequest, Integrity
from envs.reward import PYTHON_STYLE, SourceStyle

if TYPE_CHECKING:
    from envs.hidden_run import HiddenRun
    from envs.judge import Entry
    from envs.sandbox import SandboxConfig
    from tasks.canaries import Canary
    from tasks.model import Task


@dataclass(frozen=True)
class Python:
    name: str = "python"
    integrity: Integrity = "protected"
    suffixes: tuple[str, ...] = (".py",)
    test_command: str = "python3 -m pytest -q"
    holds_expected: bool = True
    style: SourceStyle = PYTHON_STYLE

    def dropped(
        self, path: str, content: bytes | None, tree: dict[str, Entry], base: dict[str, Entry]
    ) -> str | None:
        """Test paths and settings, start-up hooks, packaging metadata, artefacts, shadowing modules
        (`envs/judge.python_rule`)."""
        from envs.judge import python_rule

        return python_rule(path, content, tree, base)

    def run_hidden(self, request: HiddenRequest) -> HiddenRun:
        """The hidden files renamed and rewritten (`envs/run_plan.py`), run by the grader's runner."""
        from envs.grading import _run_tests
        from envs.run_plan import plan_run

        plan = plan_run(request.task, request.canaries, probe=request.probe)
        for path, content in plan.files.items():
            request.sandbox.write_file(path, content.encode())
        return _run_tests(
            request.sandbox, request.task, plan, request.grader_dir, request.timeout, request.trusted
        )

    def task_problems(self, task: Task) -> list[str]:
        """None of its own: the grader's runner and `tasks validate` decide."""
        del task
        return []

    def unwatched(self, task: Task, canaries: list[Canary]) -> list[str]:
        """Nothing: a Python test's outcome is decided outside the code under test's process."""
        del task, canaries
        return []

    def planned(self, task: Task, canaries: list[Canary]) -> tuple[list[Canary], int, int]:
        from envs.run_plan import plan_run

        plan = plan_run(task, canaries)
        return [*plan.canaries.values()], plan.decided, plan.assertions

    def verify_canaries(self, task: Task, sandbox_config: SandboxConfig) -> tuple[list[Canary], int, str]:
        """Single changes tried on the gold patch, joined into squares (`envs/validation.verified_canaries`)."""
        from envs.validation import verified_canaries

        return verified_canaries(task, sandbox_config)


PYTHON = Python()
