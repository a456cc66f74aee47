"""Picks a backend by name and starts a sandbox on it."""

from __future__ import annotations

from pathlib import Path

from envs.bwrap import bwrap_path, start_bwrap
from envs.docker import daemon_answers, ensure_image, start_docker
from envs.python_env import is_built
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig, SandboxError
from envs.task_env import bwrap_env_dir, docker_env_image, docker_env_ready
from tasks.model import Task


def resolve_backend(name: str) -> str:
    """`auto` is Docker when a daemon answers, else bubblewrap."""
    if name != "auto":
        return name
    if daemon_answers():
        return "docker"
    if bwrap_path() is not None:
        return "bwrap"
    raise SandboxError("no sandbox backend: the Docker daemon does not answer and bwrap is not installed")


def start_sandbox(
    config: SandboxConfig,
    source_dir: Path | None = None,
    image: str | None = None,
    image_build: Path | None = None,
) -> ExecutorSandbox:
    """Starts a sandbox whose /repo is a copy of `source_dir` (or of the image's /opt/pristine).

    With `image_build` (a folder with a Dockerfile), Docker first builds `image` from it when missing.
    Bubblewrap runs on the host's own system and cannot build one, so it refuses such a task rather than
    grade it in an environment other than the one its Dockerfile describes.
    """
    backend = resolve_backend(config.backend)
    if backend == "docker":
        if image is not None and image_build is not None:
            ensure_image(image, image_build)
        return start_docker(config, source_dir, image)
    if image_build is not None:
        raise SandboxError(
            f"the task's environment is built from {image_build / 'Dockerfile'}; "
            "the bwrap backend cannot build images: use the docker backend"
        )
    return start_bwrap(config, source_dir)


def start_task_sandbox(task: Task, config: SandboxConfig) -> ExecutorSandbox:
    """Starts a sandbox for `task`: a copy of its repository, in its image (built when missing) and its
    environment (`envs/task_env.py`, which `harness env build --suite` makes), with its command timeout.
    Its setup commands are the caller's to run (`envs.start_tree.run_setup`)."""
    config = config.model_copy(update={"command_timeout_s": task.limits.command_timeout_s})
    image, image_build = task.image, task.image_build
    if task.environment is not None:
        not_built = f"task {task.id}: its environment is not built: run `harness env build --suite SUITE`"
        if resolve_backend(config.backend) == "docker":
            base = task.image or config.image
            if task.image is not None and task.image_build is not None:
                ensure_image(task.image, task.image_build)
            if not docker_env_ready(task.environment, base):
                raise SandboxError(not_built)
            image, image_build = docker_env_image(task.environment, base)
        else:
            folder = bwrap_env_dir(task.environment)
            if not is_built(folder):
                raise SandboxError(not_built)
            config = config.model_copy(update={"python_env": folder})
    return start_sandbox(config, task.repo, image, image_build)
