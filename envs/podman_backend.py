"""The Podman backend behind `envs.backends.Backend`: containers through the `podman` command line with no
daemon (`envs/podman.py`), task images built offline, a task's environment as an image on its base (the
build context `envs/task_env.py` makes for Docker), and the reaping of dead runs' containers."""

from __future__ import annotations

from pathlib import Path

from envs.docker import daemon_answers
from envs.docker import image_exists as in_docker
from envs.podman import (
    BUILD_TIMEOUT_S,
    image_exists,
    podman_path,
    podman_unavailable,
    reap_containers,
    start_podman,
)
from envs.podman import ensure_image as podman_image
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig
from envs.task_env import build_time_left, image_environment, image_task_start
from tasks.environment import Environment
from tasks.model import Task


def ensure_image(tag: str, context: Path | None) -> None:
    """podman holds `tag` (`envs.podman.ensure_image`), its build within a build's time (`build_deadline`)."""
    podman_image(tag, context, build_time_left(BUILD_TIMEOUT_S))


class PodmanBackend:
    name = "podman"

    def unavailable(self) -> str | None:
        return "podman is not installed" if podman_path() is None else podman_unavailable()

    def start(
        self, config: SandboxConfig, source_dir: Path | None, image: str | None, image_build: Path | None
    ) -> ExecutorSandbox:
        ensure_image(image or config.image, image_build if image is not None else None)
        return start_podman(config, source_dir, image)

    def has_image(self, tag: str) -> bool:
        """Whether podman holds `tag`, or Docker to load it from (`envs.podman.ensure_image`); nothing is
        pulled (podman runs and builds with `--pull=never`)."""
        return image_exists(tag) or (daemon_answers() and in_docker(tag))

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
        return reap_containers(me, state_dir) if self.unavailable() is None else 0
