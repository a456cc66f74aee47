"""Picks a backend by name and starts a sandbox on it."""

from __future__ import annotations

from pathlib import Path

from envs.bwrap import bwrap_path, start_bwrap
from envs.docker import daemon_answers, start_docker
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig, SandboxError


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
    config: SandboxConfig, source_dir: Path | None = None, image: str | None = None
) -> ExecutorSandbox:
    """Starts a sandbox whose /repo is a copy of `source_dir` (or of the image's /opt/pristine)."""
    backend = resolve_backend(config.backend)
    if backend == "docker":
        return start_docker(config, source_dir, image)
    return start_bwrap(config, source_dir)
