"""A backend added the way a new one is: this module and one row of `envs.sandbox.BACKENDS`
(tests/envs/test_sandbox.py adds the row). It makes bubblewrap sandboxes through the bwrap backend and
counts what it was asked for, so a test can tell the harness went through it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from envs.bwrap_backend import BwrapBackend
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig
from tasks.environment import Environment
from tasks.model import Task

ROW = ("fake", "tests.envs.fake_backend:FakeBackend")
"""The table row that adds it."""
CALLS: Counter[str] = Counter()
"""What the harness asked of it, by method."""


class FakeBackend:
    name = "fake"

    def __init__(self) -> None:
        self.inner = BwrapBackend()

    def unavailable(self) -> str | None:
        return self.inner.unavailable()

    def start(
        self, config: SandboxConfig, source_dir: Path | None, image: str | None, image_build: Path | None
    ) -> ExecutorSandbox:
        CALLS["start"] += 1
        return self.inner.start(config, source_dir, image, image_build)

    def start_task(self, task: Task, config: SandboxConfig) -> ExecutorSandbox:
        CALLS["start_task"] += 1
        return self.inner.start_task(task, config)

    def build_environment(
        self, environment: Environment, base_image: str, base_build: Path | None, quiet: bool
    ) -> str:
        CALLS["build_environment"] += 1
        return self.inner.build_environment(environment, base_image, base_build, quiet)

    def in_environment(self, built: str, config: SandboxConfig) -> tuple[SandboxConfig, str | None]:
        return self.inner.in_environment(built, config)

    def reap_strays(self, me: str | None, state_dir: Path) -> int:
        CALLS["reap_strays"] += 1
        return 0
