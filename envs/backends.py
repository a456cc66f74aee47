"""The sandbox backends behind one protocol, by name from `envs.sandbox.BACKENDS`, and `auto` worked out once.

A backend owns everything that differs between ways of isolating a repository: starting a sandbox (from an
image it builds, or refusing one it cannot), starting one in a task's own environment, building that
environment, and removing what dead runs left outside the state folder. The rest of the harness asks the
backend; nothing else names one.
"""

from __future__ import annotations

import functools
import importlib
import threading
from pathlib import Path
from typing import Protocol

from envs.remote import ExecutorSandbox
from envs.sandbox import BACKENDS, SandboxConfig, SandboxError, known_backend
from tasks.environment import Environment
from tasks.model import Task


class Backend(Protocol):
    """One way of making sandboxes; its class is named in `envs.sandbox.BACKENDS`."""

    name: str

    def unavailable(self) -> str | None:
        """Why this host cannot run the backend now (`auto` skips it); None when it can."""
        ...

    def start(
        self, config: SandboxConfig, source_dir: Path | None, image: str | None, image_build: Path | None
    ) -> ExecutorSandbox:
        """A sandbox whose /repo is a copy of `source_dir`, in `image` (built from `image_build` when
        missing, where the backend builds images; refused where it cannot)."""
        ...

    def start_task(self, task: Task, config: SandboxConfig) -> ExecutorSandbox:
        """A sandbox for `task`: its repository, image and environment (which must be built already)."""
        ...

    def build_environment(
        self, environment: Environment, base_image: str, base_build: Path | None, quiet: bool
    ) -> str:
        """Builds `environment` once (on `base_image`, itself built from `base_build` where given); returns
        what `in_environment` takes: a folder or an image."""
        ...

    def in_environment(self, built: str, config: SandboxConfig) -> tuple[SandboxConfig, str | None]:
        """The settings and image of a sandbox in the environment `build_environment` returned."""
        ...

    def reap_strays(self, me: str | None, state_dir: Path) -> int:
        """Removes the sandboxes dead runs other than `me` left outside `state_dir` (containers); returns
        how many (`envs.lifecycle.reap` removes what is inside)."""
        ...


@functools.cache
def _load(name: str) -> Backend:
    module, _, attr = BACKENDS[name].partition(":")
    backend: Backend = getattr(importlib.import_module(module), attr)()
    return backend


_auto: str | None = None
_auto_lock = threading.Lock()


def resolve_backend(name: str) -> str:
    """`name` checked against the table; `auto` is the first backend this host can run, worked out the
    first time it is asked and kept for the process, so that a run never switches backends (a Docker
    daemon that stops answering mid-run gives infra errors, not rollouts graded on the host instead)."""
    global _auto
    if name != "auto":
        try:
            return known_backend(name)
        except ValueError as e:
            raise SandboxError(str(e)) from None
    with _auto_lock:
        if _auto is None:
            reasons = []
            for candidate in BACKENDS:
                reason = _load(candidate).unavailable()
                if reason is None:
                    _auto = candidate
                    break
                reasons.append(f"{candidate}: {reason}")
            else:
                raise SandboxError(f"no sandbox backend can run here ({'; '.join(reasons)})")
        return _auto


def backend(name: str) -> Backend:
    """The backend of `name` (`auto` resolved)."""
    return _load(resolve_backend(name))


def resolved(config: SandboxConfig) -> SandboxConfig:
    """`config` with its backend resolved: what settings are turned into where they are read."""
    return config.model_copy(update={"backend": resolve_backend(config.backend)})


def reap_strays_everywhere(me: str | None, state_dir: Path) -> int:
    """Every backend's `reap_strays` (`harness sandbox reap`); each asks its own engine only where it runs."""
    return sum(_load(name).reap_strays(me, state_dir) for name in BACKENDS)
