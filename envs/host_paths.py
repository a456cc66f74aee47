"""Host folders a sandbox's unprivileged user must read: readable copies and reachability checks.

Both backends run the sandbox's processes as an unprivileged host user. A bind mount keeps the host's
modes, so a folder private to root (tempfile.mkdtemp makes those) would be unreadable inside; and the
bubblewrap backend looks up every folder it binds as that user, so a folder under a parent only root
may search (a checkout in /root) cannot even be found.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import uuid
from pathlib import Path

_copies: dict[tuple[Path, Path], tuple[list[tuple[str, int, int, int]], Path]] = {}
_copies_lock = threading.Lock()


def readable_source(source: Path, run_dir: Path) -> Path:
    """`source` when every user can read all of it, else a readable copy in `run_dir`.

    The copy is made once per run and shared by the run's sandboxes of that source (they mount it
    read-only), until the source changes.
    """
    entries = [(p, p.lstat()) for p in (source, *source.rglob("*"))]
    if all(world_readable(st.st_mode) for _, st in entries):
        return source
    stamp = [(str(p), st.st_mode, st.st_size, st.st_mtime_ns) for p, st in entries]
    with _copies_lock:  # sandboxes of one task start together: one copy for all of them
        known = _copies.get((source, run_dir))
        if known is not None and known[0] == stamp and known[1].is_dir():
            return known[1]
        copy = run_dir / f"source-{uuid.uuid4().hex[:8]}"
        shutil.copytree(source, copy, symlinks=True)
        for p in (copy, *copy.rglob("*")):
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | (0o555 if p.is_dir() else 0o444))
        _copies[(source, run_dir)] = (stamp, copy)  # an older copy stays: a running sandbox mounts it
        return copy


def world_readable(mode: int) -> bool:
    if stat.S_ISLNK(mode):
        return True
    need = stat.S_IROTH | stat.S_IXOTH if stat.S_ISDIR(mode) else stat.S_IROTH
    return mode & need == need


def _allowed(st: os.stat_result, uid: int, gid: int, want: int) -> bool:
    """Whether `uid` (member of `gid` only) has the `want` bits (4 read, 1 search) on a file."""
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return (st.st_mode >> shift) & want == want


def reachable(path: Path, uid: int, gid: int) -> bool:
    """Whether `uid` can find `path` by its name and read it (list and search it, for a folder)."""
    path = Path(os.path.abspath(path))
    try:
        if not all(_allowed(os.stat(p), uid, gid, 1) for p in reversed(path.parents)):
            return False
        st = os.stat(path)
    except OSError:
        return False
    return _allowed(st, uid, gid, 5 if stat.S_ISDIR(st.st_mode) else 4)
