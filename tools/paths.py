"""Confines the paths the model names to the repository: lexically first, then through symlinks."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Literal

from envs.sandbox import WORKDIR, Sandbox
from tools.base import ToolError

RESOLVE_TIMEOUT_S = 10.0

# Prints the repository's real path, the path's real path (resolved the way the kernel will open it) and
# what the path is. Model input only ever arrives as positional arguments, never inside the script.
RESOLVE = 'realpath -m -- "$1" "$2" || exit 1; stat -L -c %F -- "$2" 2>/dev/null || echo missing'

Kind = Literal["file", "dir", "missing", "other"]


@dataclass(frozen=True)
class RepoPath:
    """A path the model named, checked to stay inside the repository."""

    shown: str
    """As the model wrote it, for messages."""
    rel: str
    """Relative to the repository root, symlinks resolved ('.' for the root itself)."""
    real: str
    """Absolute inside the sandbox, symlinks resolved."""
    kind: Kind


def resolve(sandbox: Sandbox, path: str) -> RepoPath:
    """Checks that `path` stays in the repository, or raises ToolError with a message for the model."""
    if not path:
        raise ToolError(
            "the path is empty; give a path relative to the repository root, such as 'src/app.py' or '.'"
        )
    if "\0" in path or "\n" in path:
        raise ToolError(f"path {path!r} holds a NUL or newline character")
    if posixpath.isabs(path):
        raise ToolError(
            f"path {path!r} is absolute; give it relative to the repository root "
            f"(for {WORKDIR}/src/app.py write src/app.py)"
        )
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        raise ToolError(f"path {path!r} leaves the repository")
    result = sandbox.run(
        ["sh", "-c", RESOLVE, "sh", WORKDIR, posixpath.join(WORKDIR, path)], timeout=RESOLVE_TIMEOUT_S
    )
    lines = result.output.splitlines()
    if not result.ok or len(lines) != 3:
        raise ToolError(f"cannot resolve path {path!r}: {result.output.strip() or 'no output'}")
    root, real, stat_kind = lines
    if real != root and not real.startswith(root + "/"):
        raise ToolError(f"path {path!r} leaves the repository (through a symlink it is {real})")
    return RepoPath(shown=path, rel=posixpath.relpath(real, root), real=real, kind=kind_of(stat_kind))


def kind_of(stat_kind: str) -> Kind:
    """Maps `stat -c %F` ('regular empty file', 'directory', ...) to the kinds the tools care about."""
    if stat_kind == "missing":
        return "missing"
    if stat_kind == "directory":
        return "dir"
    if stat_kind.startswith("regular"):
        return "file"
    return "other"
