"""A sandbox that replaces itself when it becomes unusable, carrying the repository over.

A fork bomb, a memory bomb or a dead container leaves a sandbox that cannot be trusted. This wrapper
never reuses it silently: the command that broke it is answered with `failure` set and `replaced`
true, the repository is copied out of the old sandbox when its executor still answers, and a fresh
sandbox with that repository takes its place.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from envs.remote import ExecutorSandbox
from envs.sandbox import WORKDIR, CommandResult, SandboxUnusable

T = TypeVar("T")


class ReplacingSandbox:
    """Matches `envs.sandbox.Sandbox`; `start` makes a fresh sandbox at the task's start state."""

    def __init__(self, start: Callable[[], ExecutorSandbox]) -> None:
        self._start = start
        self.inner = start()
        self.replacements = 0
        self.last_failure: str | None = None

    @property
    def id(self) -> str:
        return self.inner.id

    def _replace(self) -> None:
        old = self.inner
        self.last_failure = old.failure
        with tempfile.TemporaryDirectory(prefix="harness-salvage-") as tmp:
            saved = old.salvage(Path(tmp))
            old.close()
            self.inner = self._start()
            if saved:
                self.inner.run(["find", WORKDIR, "-mindepth", "1", "-delete"])
                self.inner.copy_in(Path(tmp), WORKDIR)
        self.replacements += 1

    def run(
        self,
        cmd: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        try:
            result = self.inner.run(cmd, timeout=timeout, cwd=cwd, env=env, stdin=stdin)
        except SandboxUnusable as e:
            result = CommandResult(
                exit_code=None, output="", timed_out=False, truncated=False, duration_s=0.0, failure=str(e)
            )
        if result.failure is not None:
            self._replace()
            result.replaced = True
        return result

    def _retrying(self, operation: Callable[[ExecutorSandbox], T]) -> T:
        """Runs `operation`; when the sandbox turns out unusable, replaces it and tries once more."""
        try:
            return operation(self.inner)
        except SandboxUnusable:
            self._replace()
            return operation(self.inner)

    def read_file(self, path: str, max_bytes: int = 1 << 24) -> bytes:
        return self._retrying(lambda s: s.read_file(path, max_bytes))

    def write_file(self, path: str, data: bytes) -> None:
        self._retrying(lambda s: s.write_file(path, data))

    def copy_in(self, src: Path, dest: str = WORKDIR) -> None:
        self._retrying(lambda s: s.copy_in(src, dest))

    def copy_out(self, src: str, dest: Path) -> None:
        self._retrying(lambda s: s.copy_out(src, dest))

    def reset(self) -> None:
        if self.inner.failure is not None:
            self.inner.close()
            self.inner = self._start()
        else:
            self.inner.reset()

    def close(self) -> None:
        self.inner.close()
