"""The bubblewrap backend behind `envs.backends.Backend`: sandboxes on the host's own system (`envs/bwrap.py`),
which cannot build images, and a task's environment as a virtual environment bound read-only
(`envs/task_env.py`). Its sandboxes live inside the state folder, so it has no strays of its own."""

from __future__ import annotations

from pathlib import Path

from envs.bwrap import bwrap_path, start_bwrap
from envs.npm_env import NPM_TIMEOUT_S, build_node_modules, needs_npm
from envs.python_env import is_built
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig, SandboxError
from envs.task_env import build_bwrap_env, build_time_left, bwrap_env_dir, not_built
from tasks.environment import Environment
from tasks.model import Task


class BwrapBackend:
    name = "bwrap"

    def unavailable(self) -> str | None:
        return None if bwrap_path() is not None else "bubblewrap (bwrap) is not installed"

    def start(
        self, config: SandboxConfig, source_dir: Path | None, image: str | None, image_build: Path | None
    ) -> ExecutorSandbox:
        if image_build is not None:
            raise SandboxError(
                f"the task's environment is built from {image_build / 'Dockerfile'}; "
                "the bwrap backend cannot build images: use the docker backend"
            )
        return start_bwrap(config, source_dir)

    def start_task(self, task: Task, config: SandboxConfig) -> ExecutorSandbox:
        if task.environment is not None:
            folder = bwrap_env_dir(task.environment)
            if not is_built(folder):
                raise not_built(task)
            config = config.model_copy(update={"python_env": folder})
        if needs_npm(task):  # made here when missing: the lock file names exactly what it holds
            modules = build_node_modules(task.repo, timeout=build_time_left(NPM_TIMEOUT_S))
            config = config.model_copy(update={"node_modules": modules})
        return self.start(config, task.repo, task.image, task.image_build)

    def build_environment(
        self, environment: Environment, base_image: str, base_build: Path | None, quiet: bool
    ) -> str:
        return str(build_bwrap_env(environment, quiet))

    def in_environment(self, built: str, config: SandboxConfig) -> tuple[SandboxConfig, str | None]:
        return config.model_copy(update={"python_env": Path(built)}), None

    def reap_strays(self, me: str | None, state_dir: Path) -> int:
        return 0
