"""Diffs between folders, and splitting and filtering of git-format patches.

Host-side git here only ever runs on a git dir this module made itself, with hooks, fsmonitor and
every user or system config turned off, so nothing from a sandbox's repository can run on the host.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SAFE_GIT_CONFIG = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.autocrlf=false",
    "-c",
    "user.name=harness",
    "-c",
    "user.email=harness@localhost",
    "-c",
    "init.defaultBranch=main",
    "-c",
    "commit.gpgsign=false",
]
NOISE = ("__pycache__/", "*.pyc", ".pytest_cache/", "*.egg-info/", ".mypy_cache/", ".ruff_cache/")
NEUTRAL_ATTRIBUTES = "* !text !eol !crlf !working-tree-encoding !filter !ident !diff !merge !whitespace\n"
"""`$GIT_DIR/info/attributes` of every repository host git runs on here: it comes before any
`.gitattributes` of the tree, so that no file of the agent's sets an encoding, a filter or a line-ending
conversion that changes what is diffed or applied, or makes git fail on it."""


def safe_git_env(home: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
        "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
        "LANG": "C",
    }


def git(
    args: list[str], cwd: Path | None = None, home: str = "/nonexistent", input: bytes | None = None
) -> bytes:
    """Runs host git with every external config and hook turned off; raises with git's message."""
    proc = subprocess.run(
        ["git", *SAFE_GIT_CONFIG, *args], cwd=cwd, env=safe_git_env(home), capture_output=True, input=input
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:3])} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def diff_trees(base: Path, new: Path) -> str:
    """A git-format patch (binary-safe) that turns folder `base` into folder `new` (`.git` ignored).

    The patch is UTF-8 text: a changed file whose content is not (Latin-1 source, say) comes as a binary
    patch, which applies the same, rather than as bytes no JSON line or UTF-8 string can hold.
    """
    base, new = base.resolve(), new.resolve()  # git resolves a relative --work-tree again from cwd
    with tempfile.TemporaryDirectory(prefix="harness-diff-") as tmp:
        git_dir = Path(tmp) / "git"
        git(["init", "-q", "--bare", str(git_dir)])
        (git_dir / "info").mkdir(exist_ok=True)
        (git_dir / "info" / "exclude").write_text("\n".join(NOISE) + "\n")
        (git_dir / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES)
        tree_args = [f"--git-dir={git_dir}", "-c", "core.bare=false"]
        git([*tree_args, f"--work-tree={base}", "add", "-A", "."], cwd=base)
        git([*tree_args, f"--work-tree={base}", "commit", "-q", "--allow-empty", "-m", "base"], cwd=base)
        git([*tree_args, f"--work-tree={new}", "add", "-A", "."], cwd=new)
        diff = [*tree_args, f"--work-tree={new}", "diff", "--cached", "--binary", "--no-color", "HEAD"]
        out = git(diff, cwd=new)
        try:
            return out.decode("utf-8")
        except UnicodeDecodeError:
            pass
        # File by file; those that are not UTF-8 again with every path marked binary ("* -diff").
        names = git([*diff, "--name-only", "-z", "--no-renames"], cwd=new).split(b"\0")
        parts = []
        for name in filter(None, names):
            only = ["--no-renames", "--", ":(literal)" + os.fsdecode(name)]
            part = git([*diff, *only], cwd=new)
            try:
                parts.append(part.decode("utf-8"))
            except UnicodeDecodeError:
                (git_dir / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES + "* -diff\n")
                parts.append(git([*diff, *only], cwd=new).decode("utf-8", "surrogateescape"))
                (git_dir / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES)
    return "".join(parts)


def commit_tree(folder: Path, message: str = "base") -> str:
    """Makes `folder` a git repository with a single commit of its contents; returns the commit id."""
    git(["init", "-q", str(folder)])
    (folder / ".git" / "info" / "exclude").write_text("\n".join(NOISE) + "\n")
    git(["add", "-A", "."], cwd=folder)
    git(["commit", "-q", "--allow-empty", "-m", message], cwd=folder)
    return git(["rev-parse", "HEAD"], cwd=folder).decode().strip()


@dataclass(frozen=True)
class FilePatch:
    """The part of a patch that changes one file."""

    old_path: str | None
    new_path: str | None
    text: str

    @property
    def paths(self) -> list[str]:
        return [p for p in (self.old_path, self.new_path) if p is not None]


_HEADER = re.compile(r"^diff --git (?P<a>\S+) (?P<b>\S+)$")


def split_patch(patch: str) -> list[FilePatch]:
    """Splits a git-format patch into its per-file parts (paths without the a/ b/ prefixes)."""
    parts: list[FilePatch] = []
    lines = patch.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("diff --git ")]
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        chunk = lines[start:end]
        match = _HEADER.match(chunk[0].rstrip("\n"))
        old = new = None
        if match:
            old, new = match["a"][2:], match["b"][2:]
        for line in chunk[1:]:
            if line.startswith("--- "):
                old = None if line.strip() == "--- /dev/null" else line[4:].strip()[2:]
            elif line.startswith("+++ "):
                new = None if line.strip() == "+++ /dev/null" else line[4:].strip()[2:]
            elif line.startswith("@@"):
                break
        if any(line.startswith("new file mode") for line in chunk[1:4]):
            old = None
        if any(line.startswith("deleted file mode") for line in chunk[1:4]):
            new = None
        parts.append(FilePatch(old, new, "".join(chunk)))
    return parts


TEST_PATTERNS = (
    "test_*.py",
    "*_test.py",
    "tests.py",
    "conftest.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "noxfile.py",
    ".coveragerc",
)
STARTUP_PATTERNS = ("sitecustomize.py", "usercustomize.py", "*.pth", "*.egg-link")
TEST_DIRS = ("tests", "test", "testing")
METADATA_DIRS = (".dist-info", ".egg-info")
"""Installed-package metadata: pytest loads the plugins its entry points name when it starts."""


def is_graded_path(path: str) -> bool:
    """True for paths the grader owns: tests, test configuration, and interpreter start-up hooks."""
    parts = Path(path).parts
    name = parts[-1] if parts else path
    if any(part in TEST_DIRS or part.endswith(METADATA_DIRS) for part in parts[:-1]):
        return True
    return any(fnmatch.fnmatch(name, pat) for pat in TEST_PATTERNS + STARTUP_PATTERNS)


def filter_patch(patch: str) -> tuple[str, list[str]]:
    """Drops every file part that touches a graded path; returns the rest and the dropped paths."""
    kept: list[str] = []
    dropped: list[str] = []
    for part in split_patch(patch):
        if any(is_graded_path(p) for p in part.paths):
            dropped.extend(p for p in part.paths if p not in dropped)
        else:
            kept.append(part.text)
    return "".join(kept), dropped


def changed_lines(patch: str) -> tuple[list[str], list[str]]:
    """The added and removed lines of a patch (text hunks only, without the +/- markers)."""
    added, removed = [], []
    for line in patch.splitlines():
        if line.startswith("+++") or line.startswith("---"):
            continue
        if line.startswith("+"):
            added.append(line[1:])
        elif line.startswith("-"):
            removed.append(line[1:])
    return added, removed


@dataclass(frozen=True)
class TextEdit:
    """One exact replacement in one file: what an edit tool call does."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Hunk:
    """One hunk of a file's patch: where its old text starts (1-based line, as its header says) and the
    exact text it replaces (context and removed lines) with what (context and added lines)."""

    old_start: int
    old_count: int
    old: str
    new: str


_HUNK = re.compile(r"^@@ -(?P<start>\d+)(?:,(?P<count>\d+))? \+\d+(?:,\d+)? @@")


def file_hunks(part: FilePatch) -> list[Hunk]:
    """The hunks of one file's text patch, in order. Binary changes have none to give: ValueError."""
    if "GIT binary patch" in part.text or "Binary files" in part.text:
        raise ValueError(f"{part.new_path or part.old_path}: a binary change is not an edit")
    hunks: list[Hunk] = []
    header: re.Match[str] | None = None
    old_lines: list[str] = []
    new_lines: list[str] = []

    def close() -> None:
        if header is not None:
            count = 1 if header["count"] is None else int(header["count"])
            hunks.append(Hunk(int(header["start"]), count, "".join(old_lines), "".join(new_lines)))

    for line in part.text.splitlines(keepends=True):
        if line.startswith("@@"):
            close()
            header, old_lines, new_lines = _HUNK.match(line), [], []
            if header is None:
                raise ValueError(f"{part.new_path or part.old_path}: an unreadable hunk header {line!r}")
        elif header is None:
            continue
        elif line.startswith("\\"):  # "\ No newline at end of file"
            for lines in (old_lines, new_lines):
                if lines and lines[-1].endswith("\n"):
                    lines[-1] = lines[-1][:-1]
        elif line.startswith("-"):
            old_lines.append(line[1:])
        elif line.startswith("+"):
            new_lines.append(line[1:])
        else:  # context; some tools strip the space of an empty context line
            text = line[1:] if line.startswith(" ") else line
            old_lines.append(text)
            new_lines.append(text)
    close()
    return hunks


def patch_as_edits(patch: str) -> list[TextEdit]:
    """Each hunk of a text patch as an exact replacement (context and removed -> context and added).

    A new file becomes one edit with an empty `old`. Deleted and binary files have no such form and
    raise ValueError.
    """
    edits: list[TextEdit] = []
    for part in split_patch(patch):
        if part.new_path is None:
            raise ValueError(f"{part.old_path}: a deleted file is not an edit")
        edits += [TextEdit(part.new_path, h.old, h.new) for h in file_hunks(part)]
    return edits


def patched_text(text: str, part: FilePatch) -> str:
    """`text` with the hunks of one file's patch applied where their headers say, the last first (so
    the earlier ones' lines do not move): the file a patch makes even where a hunk's text occurs more
    than once. ValueError if a hunk's old text is not at its line."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    for hunk in reversed(file_hunks(part)):
        first = hunk.old_start - 1 if hunk.old_count else hunk.old_start  # count 0: after that line
        at = offsets[min(max(first, 0), len(lines))]
        if not text.startswith(hunk.old, at):
            raise ValueError(f"{part.new_path}: the hunk at line {hunk.old_start} does not match the file")
        text = text[:at] + hunk.new + text[at + len(hunk.old) :]
    return text


def tighten(edit: TextEdit, text: str) -> TextEdit:
    """The same edit with as little context as keeps `old` unique in `text` (whole lines only)."""
    old = edit.old.splitlines(keepends=True)
    new = edit.new.splitlines(keepends=True)
    while len(old) > 1 and len(new) > 1 and old[0] == new[0]:
        if text.count("".join(old[1:])) != 1:
            break
        old, new = old[1:], new[1:]
    while len(old) > 1 and len(new) > 1 and old[-1] == new[-1]:
        if text.count("".join(old[:-1])) != 1:
            break
        old, new = old[:-1], new[:-1]
    return TextEdit(edit.path, "".join(old), "".join(new))
