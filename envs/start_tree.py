"""The tree an episode starts from: the task's repository after its setup commands.

A task's `setup_commands` run in every sandbox before the agent starts, and again in the grading sandbox.
What they leave in /repo (a generated version file, a package's egg-info, an extension built in place)
belongs to the start, not to the agent: the agent's diff is taken against this tree, a patch (the
agent's, a gold patch, `harness grade --patch`) is applied to it, and the diff that is graded and that the
simplicity term measures is the one against it. What the commands change outside /repo (folders in /tmp)
they make again in each sandbox.

The tree is made once per task and sandbox settings (the commands run in a sandbox of the task's image,
then /repo is copied out) and kept under the harness's cache. A task without setup commands starts from
its repository as it is. Commands whose output differs from run to run (a timestamp) show that file as
changed in the agent's diff, where grading drops or rewrites it like any other.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

from envs.backends import resolve_backend
from envs.factory import start_task_sandbox
from envs.python_env import locked_beside
from envs.sandbox import WORKDIR, Sandbox, SandboxConfig, SandboxError
from tasks.model import Task
from tasks.suite import cache_root

MARKER = ".harness-start-tree.json"
"""Written beside the tree when it is complete: a folder without it is made again."""

_made: dict[str, Path] = {}
_lock = threading.Lock()


def start_tree(task: Task, config: SandboxConfig) -> Path:
    """The folder holding the task's start tree: `task.repo` itself when the task has no setup commands."""
    if not task.setup():
        return task.repo
    settings = _settings(task, config)
    with _lock:  # a run's task repositories do not change while it runs: their files are read once
        if settings in _made:
            return _made[settings]
    folder = cache_root().parent / "start-trees" / f"{task.id}-{_key(task.repo, settings)}"
    with locked_beside(folder):  # runs that start together make it once
        if not (folder / MARKER).is_file():
            _make(task, config, folder)
    with _lock:
        _made[settings] = folder / "repo"
    return folder / "repo"


def run_setup(sandbox: Sandbox, task: Task, timeout: float | None = None) -> None:
    """Runs the task's setup commands (`Task.setup`) in `sandbox`; the first that fails raises
    `SandboxError`."""
    run_commands(sandbox, task.setup(), timeout)


def run_commands(sandbox: Sandbox, commands: list[str], timeout: float | None = None) -> None:
    """Runs setup commands in `sandbox`, in order; the first that fails raises `SandboxError`."""
    for command in commands:
        result = sandbox.run(command, timeout=timeout)
        if result.exit_code != 0:
            raise SandboxError(f"setup command {command!r} failed: {result.output[-500:]}")


def _make(task: Task, config: SandboxConfig, folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        sandbox = start_task_sandbox(task, config)
        try:
            run_setup(sandbox, task, task.limits.grade_timeout_s)
            sandbox.copy_out(WORKDIR, staging / "repo")
        finally:
            sandbox.close()
        record = {"task": task.id, "repo": str(task.repo), "setup_commands": task.setup()}
        (staging / MARKER).write_text(json.dumps(record, indent=1))
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _settings(task: Task, config: SandboxConfig) -> str:
    """The commands and the sandbox they run in."""
    fields = {
        "repo": str(task.repo.resolve()),
        "setup_commands": task.setup(),
        "environment": task.environment.model_dump() if task.environment else None,
        "image": task.image,
        "image_build": str(task.image_build),
        "backend": resolve_backend(config.backend),
        "sandbox_image": config.image,
        "python_env": str(config.python_env),
    }
    return json.dumps(fields, sort_keys=True)


def _key(repo: Path, settings: str) -> str:
    """What the start tree depends on: `settings` and the repository's files (path, size, time of change)."""
    stamp = hashlib.sha256(settings.encode())
    for root, dirs, files in os.walk(repo):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            st = os.lstat(path)
            stamp.update(f"{os.path.relpath(path, repo)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return stamp.hexdigest()[:16]
