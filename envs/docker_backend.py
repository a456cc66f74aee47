"""The Docker backend behind `envs.backends.Backend`: containers (`envs/docker.py`), task images built offline,
a task's environment as an image on its base (`envs/task_env.py`), and the reaping of dead runs' containers."""

from __future__ import annotations

from pathlib import Path

from envs.docker import daemon_answers, ensure_image, reap_containers, start_docker
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig
from envs.task_env import docker_env_image, docker_env_ready, not_built
from tasks.environment import Environment
from tasks.model import Task


class DockerBackend:
    name = "docker"

    def unavailable(self) -> str | None:
        return None if daemon_answers() else "the Docker daemon does not answer"

    def start(
        self, config: SandboxConfig, source_dir: Path | None, image: str | None, image_build: Path | None
    ) -> ExecutorSandbox:
        if image is not None and image_build is not None:
            ensure_image(image, image_build)
        return start_docker(config, source_dir, image)

    def start_task(self, task: Task, config: SandboxConfig) -> ExecutorSandbox:
        image, image_build = task.image, task.image_build
        if task.environment is not None:
            base = task.image or config.image
            if task.image is not None and task.image_build is not None:
                ensure_image(task.image, task.image_build)
            if not docker_env_ready(task.environment, base):
                raise not_built(task)
            image, image_build = docker_env_image(task.environment, base)  # its image built here when missing
        return self.start(config, task.repo, image, image_build)

    def build_environment(
        self, environment: Environment, base_image: str, base_build: Path | None, quiet: bool
    ) -> str:
        if base_build is not None:
            ensure_image(base_image, base_build)
        image, context = docker_env_image(environment, base_image)
        ensure_image(image, context)
        return image

    def in_environment(self, built: str, config: SandboxConfig) -> tuple[SandboxConfig, str | None]:
        return config, built

    def reap_strays(self, me: str | None, state_dir: Path) -> int:
        return reap_containers(me, state_dir) if daemon_answers() else 0
