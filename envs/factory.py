"""Starts sandboxes on the backend the settings name (`envs/backends.py`), and builds tasks' environments."""

from __future__ import annotations

from pathlib import Path

from envs.backends import backend
from envs.npm_env import needs_npm, npm_dir
from envs.python_env import EnvBuildError
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig
from tasks.model import Task


def start_sandbox(
    config: SandboxConfig,
    source_dir: Path | None = None,
    image: str | None = None,
    image_build: Path | None = None,
) -> ExecutorSandbox:
    """Starts a sandbox whose /repo is a copy of `source_dir` (or of the image's /opt/pristine).

    With `image_build` (a folder with a Dockerfile), a backend that builds images first builds `image` from
    it when missing; one that cannot (bubblewrap runs on the host's own system) refuses such a task rather
    than grade it in an environment other than the one its Dockerfile describes.
    """
    return backend(config.backend).start(config, source_dir, image, image_build)


def start_task_sandbox(task: Task, config: SandboxConfig) -> ExecutorSandbox:
    """Starts a sandbox for `task`: a copy of its repository, in its image (built when missing) and its
    environment (`envs/task_env.py`, which `harness env build --suite` makes), with its command timeout.
    Its setup commands are the caller's to run (`envs.start_tree.run_setup`)."""
    config = config.model_copy(update={"command_timeout_s": task.limits.command_timeout_s})
    return backend(config.backend).start_task(task, config)


def build_task_env(task: Task, config: SandboxConfig, quiet: bool = False) -> str:
    """Builds `task`'s environment for `config`'s backend; returns what the backend made of it (bwrap: a
    folder; docker: an image, built offline from a context made here). A JavaScript task's npm packages
    (`envs/npm_env.py`): made, and on Docker their image too."""
    if task.environment is None and needs_npm(task):
        start_task_sandbox(task, config).close()
        return str(npm_dir(task.repo) / "node_modules")
    if task.environment is None:
        raise EnvBuildError(f"task {task.id} has no environment of its own")
    image = task.image or config.image
    build = task.image_build if task.image is not None else None
    return backend(config.backend).build_environment(task.environment, image, build, quiet)
