"""What the importers of outside task formats share: their report, and writing one task folder."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from tasks.suite import TaskFile, stays_inside


class ImportProblem(ValueError):
    """One task cannot be imported; the message says why. The import goes on with the others."""


class Skipped(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    """Where the task came from: FILE:LINE or a folder."""
    task_id: str | None
    reason: str


class ImportReport(BaseModel):
    """What an import wrote into the suite and what it left out, and why."""

    model_config = ConfigDict(extra="forbid")

    suite: Path
    imported: list[str] = Field(default_factory=list)
    skipped: list[Skipped] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    environments: dict[str, str] = Field(default_factory=dict)
    """Task id -> how its repository's environment was read: its build backend, or the static parse
    (and why the backend could not be asked)."""


def relative_path(path: str) -> str:
    """`path` when it stays inside the folder it is relative to, else an ImportProblem."""
    if not stays_inside(path):
        raise ImportProblem(f"path {path!r} would leave its folder")
    return path


class _LiteralDumper(yaml.SafeDumper):
    """Writes multi-line strings (problem statements) as readable `|` blocks."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_LiteralDumper.add_representer(str, _represent_str)


def task_yaml(spec: TaskFile) -> str:
    data: dict[str, Any] = spec.model_dump(mode="json", exclude_defaults=True)
    return yaml.dump(data, Dumper=_LiteralDumper, sort_keys=False, allow_unicode=True, width=1000)


def write_task_folder(suite: Path, task_id: str, spec: TaskFile, files: dict[str, str | bytes]) -> Path:
    """Writes SUITE/TASK_ID (task.yaml and `files`, by path in the task folder), replacing an older one
    whole: the folder is made aside and renamed, so a failed import never leaves half a task."""
    suite.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{task_id}-", dir=suite))
    work.chmod(0o755)
    try:
        (work / "task.yaml").write_text(task_yaml(spec))
        for name, content in files.items():
            path = work / relative_path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        target = suite / task_id
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target
