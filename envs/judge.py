"""What of an agent's changes is graded, decided from the tree they produce, never from patch text.

A patch is applied host-side to a scratch copy of the pristine base (`apply_patch`); the resulting files
are compared with the base (`judge_tree`), path by path as the file system and Python see them. A change
is kept only when it is to a regular file, at a path that is none of these (compared in lower case, as
Python's import system does on a case-insensitive file system and as package metadata is matched):

- a test path or test setting (test folders, `test_*.py`, `conftest.py`, `pytest.ini`, `setup.cfg`, ...),
  or one of the task's hidden test files;
- an interpreter start-up hook (`sitecustomize.py`, `usercustomize.py`, `*.pth`);
- packaging metadata (`*.dist-info/`, `*.egg-info/`), whose entry points pytest loads as plugins;
- a compiled or binary artefact the interpreter or the loader would pick up (`__pycache__/`, `*.pyc`,
  `*.so`, ...), or any file holding a NUL byte;
- a module or package that shadows a module of the standard library, or a new one that shadows a module
  of the test runner or of a package it depends on, in a folder that can be on `sys.path` (the root, `src/`,
  or one without `__init__.py`). A runner's module the base already defines is the repository's own (a
  task on attrs, pluggy or iniconfig): the grader tests it, not its own copy (`grade_runner`'s eviction).

Symbolic links and special files are never kept: what a link means depends on where it is read. The
graded tree is the base plus the kept changes, and its diff (`Judged.patch`) is what the simplicity term
measures. Nothing here runs the agent's code; host git only applies text, in a folder this module made.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tasks.patches import NEUTRAL_ATTRIBUTES, diff_trees, git

TEST_DIRS = frozenset({"tests", "test", "testing"})
TEST_FILES = (
    "test_*.py", "*_test.py", "tests.py", "conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "noxfile.py",
    ".coveragerc",
)  # fmt: skip
STARTUP_FILES = ("sitecustomize.py", "usercustomize.py", "*.pth", "*.egg-link")
STARTUP_MODULES = frozenset({"sitecustomize", "usercustomize"})
"""Modules an interpreter's start-up imports by name: a file or folder of these names, at any depth and in
any form (a module, a package, a namespace folder, a compiled file), is dropped."""
METADATA_DIRS = (".dist-info", ".egg-info")
ARTEFACTS = (".pyc", ".pyo", ".so", ".pyd", ".dll", ".dylib", ".egg", ".whl", ".zip")
RUNNER_MODULES = frozenset(
    {"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "hypothesis", "attr", "attrs",
     "exceptiongroup", "tomli", "pygments", "colorama", "typing_extensions", "zipp", "importlib_metadata"}
)  # fmt: skip
"""The test runner and the packages it imports, at once or when it may (pytest 7.2's, on every Python
it supports; pygments and colorama for coloured reports)."""
STDLIB_PREFIXES = ("_sysconfigdata",)
"""Modules the standard library imports by a name made at run time (`sysconfig`'s platform data)."""
STDLIB = frozenset(sys.stdlib_module_names)
SHADOWABLE = STDLIB | RUNNER_MODULES
"""Module names a repository must not newly define where they would come first on `sys.path` (one of
the standard library's not even where the base defines it)."""
ON_PATH = ("", "src")
"""Folders of the repository that are on `sys.path` whether or not they hold an `__init__.py`."""
IGNORED_DIRS = frozenset({".git"})
"""Never part of the graded tree: the sandbox's history is the grader's, not the agent's."""


@dataclass(frozen=True)
class Entry:
    kind: str
    """`file`, `dir`, `link` or `other` (FIFO, socket, device), from lstat: links are not followed."""
    content: bytes = b""


@dataclass(frozen=True)
class Judged:
    """The changes that will be graded, and the ones that will not."""

    kept: dict[str, bytes | None]
    """Path -> its new content; None: the file is deleted."""
    dropped: dict[str, str]
    """Path -> why its change is not graded."""
    patch: str
    """The diff from the base to the graded tree (base plus kept changes)."""
    before: dict[str, str]
    """The base's text of every kept `.py` path ('' for a new file)."""
    after: dict[str, str]
    """The graded text of every kept `.py` path ('' for a deleted file)."""


def walk(root: Path) -> dict[str, Entry]:
    """Every entry under `root` by relative POSIX path, without following links; `.git` left out."""
    found: dict[str, Entry] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in IGNORED_DIRS]
        for name in [*dirs, *files]:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                found[rel] = Entry("link", os.readlink(path).encode("utf-8", "surrogateescape"))
                dirs[:] = [d for d in dirs if d != name]
            elif stat.S_ISDIR(mode):
                found[rel] = Entry("dir")
            elif stat.S_ISREG(mode):
                found[rel] = Entry("file", path.read_bytes())
            else:
                found[rel] = Entry("other")
    return found


Rule = Callable[[str, bytes | None, dict[str, Entry], dict[str, Entry]], str | None]
"""(path, new content or None when deleted, the new tree, the base) -> why the change is not graded, or
None: a language plug-in's `dropped` (`envs/languages/`)."""


def why_dropped(
    path: str,
    content: bytes | None,
    tree: dict[str, Entry],
    hidden: set[str],
    base: dict[str, Entry] | None = None,
    rule: Rule | None = None,
) -> str | None:
    """Why a change to `path` (new `content`, None when deleted) in `tree` (from `base`) is not graded;
    None: it is. A hidden test path never is; else `rule` decides (Python's, `python_rule`, by default)."""
    if path in hidden:
        return "a hidden test path"
    return (rule or python_rule)(path, content, tree, base or {})


def python_rule(
    path: str, content: bytes | None, tree: dict[str, Entry], base: dict[str, Entry]
) -> str | None:
    """The module docstring's rules for a Python repository (and for every repository: the grader's
    runners are Python)."""
    parts = [part.lower() for part in PurePosixPath(path).parts]
    name = parts[-1]
    if any(part in TEST_DIRS for part in parts[:-1]) or _matches(name, TEST_FILES):
        return "a test path or test setting"
    if _matches(name, STARTUP_FILES) or any(part.split(".", 1)[0] in STARTUP_MODULES for part in parts):
        return "an interpreter start-up hook"
    if any(part.endswith(METADATA_DIRS) for part in parts):
        return "packaging metadata"
    if "__pycache__" in parts or name.endswith(ARTEFACTS):
        return "a compiled or binary artefact"
    if content is not None and b"\0" in content:
        return "a binary file"
    shadowed = _shadowed_module(PurePosixPath(path), tree, base)
    if content is not None and shadowed is not None:
        return f"a module that shadows {shadowed!r}"
    return None


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _shadowed_module(path: PurePosixPath, tree: dict[str, Entry], base: dict[str, Entry]) -> str | None:
    """The module a file at `path` would define ahead of the standard library or the test runner:
    `NAME.py` or `NAME/__init__.py` in the root, in `src/` or in a folder without `__init__.py` (a
    possible `sys.path` entry); a runner's module only where the base does not define it there."""
    if path.name == "__init__.py" and len(path.parts) >= 2:
        module, folder = path.parent.name, path.parent.parent
    elif path.suffix == ".py":
        module, folder = path.stem, path.parent
    else:
        return None
    init = (folder / "__init__.py").as_posix() if folder.parts else "__init__.py"
    if init in tree and folder.as_posix().lstrip(".") not in ON_PATH:
        return None
    name = module.lower()
    if name in {m.lower() for m in STDLIB} or name.startswith(STDLIB_PREFIXES):
        return module
    if name not in {m.lower() for m in RUNNER_MODULES}:
        return None
    defined = module_files(folder.as_posix().lstrip("."), module)
    return None if any(_kind(base.get(p)) == "file" for p in defined) else module


def module_files(folder: str, module: str) -> tuple[str, str]:
    """The two files that define `module` in `folder` (relative, '' the root): `NAME.py` and
    `NAME/__init__.py`. The one rule of what a base defines, for the judge and for `base_modules`: a
    folder of that name without `__init__.py` defines nothing that could stand in for a loaded package."""
    prefix = f"{folder}/" if folder else ""
    return f"{prefix}{module}.py", f"{prefix}{module}/__init__.py"


def base_modules(repo: Path) -> list[str]:
    """The top-level modules the repository defines in its folders on `sys.path` (`ON_PATH`), by
    `module_files`. Read from the pristine base: the grader's runner gives these names to the
    repository, never to its own loaded copies (`grade_runner.evict_shadowed`)."""
    found: set[str] = set()
    for part in ON_PATH:
        folder = repo / part if part else repo
        if not folder.is_dir() or folder.is_symlink():
            continue
        for entry in folder.iterdir():
            name = entry.stem if entry.suffix == ".py" else entry.name
            files = [repo / f for f in module_files(part, name)]
            if name.isidentifier() and any(f.is_file() and not f.is_symlink() for f in files):
                found.add(name)
    return sorted(found)


def judge_tree(base: Path, new: Path, hidden: set[str] | None = None, rule: Rule | None = None) -> Judged:
    """Compares tree `new` with `base`; keeps the changes a fix may make (see the module docstring; `rule`:
    the task's language's, Python's by default)."""
    hidden = hidden or set()
    old, now = walk(base), walk(new)
    kept: dict[str, bytes | None] = {}
    dropped: dict[str, str] = {}
    for path in sorted(set(old) | set(now)):
        if _noise(path):
            continue
        before, after = old.get(path), now.get(path)
        if before == after or (before and after and before.kind == after.kind == "dir"):
            continue
        if "link" in (_kind(before), _kind(after)) or "other" in (_kind(before), _kind(after)):
            dropped[path] = "a symbolic link or special file"
            continue
        if _kind(before) != "file" and _kind(after) != "file":
            continue  # a folder came or went: its files are judged one by one
        content = after.content if after is not None and after.kind == "file" else None
        reason = why_dropped(path, content, now, hidden, old, rule)
        if reason is not None:
            dropped[path] = reason
        else:
            kept[path] = content
    return _graded(base, old, kept, dropped)


def _kind(entry: Entry | None) -> str | None:
    return entry.kind if entry is not None else None


def _noise(path: str) -> bool:
    """Caches that tools leave behind (pytest's, mypy's): neither graded nor reported."""
    parts = PurePosixPath(path).parts
    return any(part in (".pytest_cache", ".mypy_cache", ".ruff_cache") for part in parts)


def _graded(
    base: Path, old: dict[str, Entry], kept: dict[str, bytes | None], dropped: dict[str, str]
) -> Judged:
    """The graded tree's diff and the texts the simplicity term compares."""
    before = {p: _text(old.get(p)) for p in kept if p.endswith(".py")}
    after = {p: (c or b"").decode("utf-8", "replace") for p, c in kept.items() if p.endswith(".py")}
    with tempfile.TemporaryDirectory(prefix="harness-graded-") as tmp:
        graded = Path(tmp) / "repo"
        shutil.copytree(base, graded, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        write_changes(graded, kept)
        patch = diff_trees(base, graded)
    return Judged(kept=kept, dropped=dropped, patch=patch, before=before, after=after)


def _text(entry: Entry | None) -> str:
    return entry.content.decode("utf-8", "replace") if entry is not None and entry.kind == "file" else ""


def write_changes(root: Path, changes: dict[str, bytes | None]) -> None:
    """Writes kept changes into a copy of the base (paths from `judge_tree`: relative, no links on them):
    deletions first, so that a folder the agent replaced with a file (or a file with a folder) is gone
    before its new self is written."""
    for path, content in changes.items():
        if content is None:
            try:
                (root / path).unlink(missing_ok=True)
            except NotADirectoryError:
                pass  # a folder above it is a file already: it is gone with the folder
    for path, content in changes.items():
        if content is None:
            continue
        target = root / path
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        for parent in reversed(target.relative_to(root).parents[:-1]):
            folder = root / parent
            if folder.is_file() or folder.is_symlink():
                folder.unlink()  # a file where the new one needs a folder
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_file() and not target.is_symlink():
            target.unlink()
        target.write_bytes(content)


def apply_patch(base: Path, patch: str, scratch: Path) -> str | None:
    """Copies `base` to `scratch` and applies `patch` there with git; returns git's message on failure.

    `git apply` refuses paths that leave the folder or pass through a link; what it writes is judged
    afterwards as files, so how any tool reads the patch's text no longer matters."""
    shutil.copytree(base, scratch, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    if not patch.strip():
        return None
    try:  # a repository of its own, so that no folder above the scratch copy is taken for one
        git(["init", "-q", str(scratch)])
        (scratch / ".git" / "info").mkdir(exist_ok=True)
        (scratch / ".git" / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES)
        git(
            ["apply", "--whitespace=nowarn", "-"], cwd=scratch, input=patch.encode("utf-8", "surrogateescape")
        )
    except RuntimeError as e:
        return str(e)
    return None
