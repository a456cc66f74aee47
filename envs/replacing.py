"""A sandbox that replaces itself when it becomes unusable, carrying the repository over.

A fork bomb, a memory bomb or a dead container leaves a sandbox that cannot be trusted. This wrapper
never reuses it silently: the command that broke it is answered with `failure` set and `replaced`
true, the repository is copied out of the old sandbox when its executor still answers, and a fresh
sandbox with that repository takes its place. When it cannot be copied out of a sandbox that died of
something other than its own limits (killed from outside, its daemon restarted), `lost` says so: the
agent's work is gone through no fault of its own, and the runner counts the episode as an infra error.

A start costs the host CPU that no sandbox's limits cover (the daemon's, the runtime's), so replacements
back off: the first since the last reset is at once, each further one waits twice as long as the one
before. An agent that breaks its sandbox over and over pays with its own wall time, not with its
neighbours' CPU.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from envs.remote import ExecutorSandbox
from envs.sandbox import WORKDIR, CommandResult, SandboxUnusable

T = TypeVar("T")
BACKOFF_S = 1.0
"""Wait before the second replacement since the last reset; it doubles for each further one."""
BACKOFF_MAX_S = 16.0


class ReplacingSandbox:
    """Matches `envs.sandbox.Sandbox`; `start` makes a fresh sandbox at the task's start state."""

    def __init__(self, start: Callable[[], ExecutorSandbox]) -> None:
        self._start = start
        self.inner = start()
        self.replacements = 0
        self.recent_replacements = 0
        """Replacements since the last reset: what the backoff counts."""
        self.last_failure: str | None = None
        self.lost: str | None = None
        """Why the repository was lost to a failure that was not the agent's, since the last reset."""

    @property
    def id(self) -> str:
        return self.inner.id

    def _replace(self) -> bool:
        """Starts a fresh sandbox in place of the broken one; True when the repository was carried over."""
        old = self.inner
        self.last_failure = old.failure
        with tempfile.TemporaryDirectory(prefix="harness-salvage-") as tmp:
            saved = old.salvage(Path(tmp))
            if not saved and not old.limit_hit:
                self.lost = old.failure or "the sandbox became unusable"
            old.close()
            if self.recent_replacements:
                time.sleep(min(BACKOFF_S * 2 ** (self.recent_replacements - 1), BACKOFF_MAX_S))
            self.inner = self._start()
            if saved:
                self.inner.run(["find", WORKDIR, "-mindepth", "1", "-delete"])
                self.inner.copy_in(Path(tmp), WORKDIR)
        self.replacements += 1
        self.recent_replacements += 1
        return saved

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
            result.carried_over = self._replace()
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
        self.lost = None
        self.recent_replacements = 0
        if self.inner.failure is not None:
            self.inner.close()
            self.inner = self._start()
        else:
            self.inner.reset()

    def close(self) -> None:
        self.inner.close()
