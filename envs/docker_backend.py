"""The Docker backend behind `envs.backends.Backend`: containers (`envs/docker.py`), task images built offline,
a task's environment as an image on its base (`envs/task_env.py`), and the reaping of dead runs' containers."""

from __future__ import annotations

from pathlib import Path

import urllib3

from envs.docker import BUILD_TIMEOUT_S, daemon_answers, image_exists, reap_containers, start_docker
from envs.docker import ensure_image as build_image
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig, SandboxError
from envs.task_env import build_time_left, image_environment, image_task_start
from tasks.environment import Environment
from tasks.model import Task


def ensure_image(tag: str, context: Path | None) -> None:
    """Docker holds `tag`, built from `context` when given and missing (a tag without one must be there)."""
    if context is not None:
        left = build_time_left(BUILD_TIMEOUT_S)
        try:
            build_image(tag, context, left)
        except urllib3.exceptions.HTTPError as e:  # the build's stream read past its time (the build ends)
            raise SandboxError(f"building image {tag} did not end within {left:.0f} s: {e}") from e


class DockerBackend:
    name = "docker"

    def unavailable(self) -> str | None:
        return None if daemon_answers() else "the Docker daemon does not answer"

    def start(
        self, config: SandboxConfig, source_dir: Path | None, image: str | None, image_build: Path | None
    ) -> ExecutorSandbox:
        if image is not None and image_build is not None:
            ensure_image(image, image_build)
        return start_docker(config, source_dir, image)  # creates, never pulls: a missing image is an error

    def has_image(self, tag: str) -> bool:
        """Whether Docker holds `tag` (nothing is pulled)."""
        return image_exists(tag)

    def start_task(self, task: Task, config: SandboxConfig) -> ExecutorSandbox:
        image, image_build = image_task_start(task, config.image, ensure_image)
        return self.start(config, task.repo, image, image_build)

    def build_environment(
        self, environment: Environment, base_image: str, base_build: Path | None, quiet: bool
    ) -> str:
        return image_environment(environment, base_image, base_build, ensure_image)

    def in_environment(self, built: str, config: SandboxConfig) -> tuple[SandboxConfig, str | None]:
        return config, built

    def reap_strays(self, me: str | None, state_dir: Path) -> int:
        return reap_containers(me, state_dir) if daemon_answers() else 0
