"""The file tools: read_file, list_dir, write_file and edit."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from envs.sandbox import Sandbox
from tools.base import Observation, ToolError
from tools.paths import RepoPath, resolve

MAX_FILE_BYTES = 4 << 20
BINARY_SNIFF_BYTES = 8192
EDIT_CONTEXT_LINES = 3
LIST_TIMEOUT_S = 30.0
LISTING_FILE = "/tmp/harness-list.txt"
FOOTER_CHARS = 100


def split_lines(text: str) -> list[str]:
    """The file's lines, numbered from 1 the way editors and tracebacks count them."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def numbered(lines: list[str], first: int) -> list[str]:
    """Each line after its number, the way the model is shown files."""
    return [f"{n:>6}\t{line}" for n, line in enumerate(lines, first)]


def counted(text: str) -> str:
    count = len(split_lines(text))
    return f"{count} line" if count == 1 else f"{count} lines"


def fit(rows: list[str], max_chars: int) -> list[str]:
    """The leading rows that fit in `max_chars` with room for a footer; at least one."""
    budget = max_chars - FOOTER_CHARS
    for count, row in enumerate(rows):
        budget -= len(row) + 1
        if budget < 0:
            return rows[: max(count, 1)]
    return rows


def read_text(sandbox: Sandbox, path: RepoPath, errors: str) -> str:
    """The text of a regular file; `errors="strict"` refuses a file that is not UTF-8."""
    if path.kind == "missing":
        raise ToolError(f"file {path.shown!r} does not exist")
    if path.kind == "dir":
        raise ToolError(f"{path.shown!r} is a folder, not a file; use list_dir to see what it holds")
    if path.kind == "other":
        raise ToolError(f"{path.shown!r} is not a regular file")
    data = sandbox.read_file(path.real, max_bytes=MAX_FILE_BYTES)
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        raise ToolError(f"{path.shown!r} is a binary file ({len(data)} bytes); it cannot be shown as text")
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError as e:
        raise ToolError(f"{path.shown!r} is not UTF-8 text ({e.reason} at byte {e.start})") from e


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    path: str
    """File to read, relative to the repository root."""
    start_line: int | None = Field(default=None, ge=1)
    """First line to show, counting from 1; the start of the file when left out."""
    end_line: int | None = Field(default=None, ge=1)
    """Last line to show, included; the end of the file when left out."""


@dataclass(frozen=True)
class ReadFile:
    max_chars: int
    """Most characters shown at once; a longer file is shown in pages."""

    name = "read_file"
    description = (
        "Show a text file of the repository with line numbers (number, tab, line), whole or a range "
        "of lines. A long file is shown in pages; the last line says where to go on."
    )
    Args = ReadFileArgs

    def run(self, sandbox: Sandbox, args: ReadFileArgs) -> Observation:
        path = resolve(sandbox, args.path)
        lines = split_lines(read_text(sandbox, path, errors="replace"))
        if not lines:
            return Observation(text=f"{path.shown} is empty")
        start = args.start_line or 1
        if start > len(lines):
            raise ToolError(
                f"start_line {start} is past the end of {path.shown!r}, which has {len(lines)} lines"
            )
        if args.end_line is not None and args.end_line < start:
            raise ToolError(f"end_line {args.end_line} is before start_line {start}")
        end = min(args.end_line or len(lines), len(lines))
        rows = fit(numbered(lines[start - 1 : end], start), self.max_chars)
        last = start + len(rows) - 1
        if last < end:
            rows.append(f"[lines {start}-{last} of {len(lines)}; read on with start_line={last + 1}]")
        return Observation(text="\n".join(rows))


class ListDirArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    path: str = "."
    """Folder to list, relative to the repository root; the root when left out."""
    depth: int = Field(default=1, ge=1, le=10)
    """How many levels down to list: 1 shows only the folder's own entries."""


@dataclass(frozen=True)
class ListDir:
    max_chars: int
    """Most characters shown; a longer listing shows its first entries."""

    name = "list_dir"
    description = (
        "List the files and folders under a folder of the repository, as paths relative to the "
        "repository root; folders end in '/'. The .git folder is hidden."
    )
    Args = ListDirArgs

    def run(self, sandbox: Sandbox, args: ListDirArgs) -> Observation:
        path = resolve(sandbox, args.path)
        if path.kind == "missing":
            raise ToolError(f"folder {path.shown!r} does not exist")
        if path.kind != "dir":
            raise ToolError(f"{path.shown!r} is a file, not a folder; use read_file to see it")
        # find writes to a file, which is not capped the way command output is.
        find = ["find", path.real, "-mindepth", "1", "-maxdepth", str(args.depth)]
        skip_git = ["-name", ".git", "-prune", "-o"]
        result = sandbox.run(
            [*find, *skip_git, "-fprintf", LISTING_FILE, r"%y\t%P\t%l\0"], timeout=LIST_TIMEOUT_S
        )
        if not result.ok:
            raise ToolError(f"cannot list {path.shown!r}: {result.output.strip()}")
        prefix = "" if path.rel == "." else path.rel + "/"
        entries = []
        for record in sandbox.read_file(LISTING_FILE).decode(errors="replace").split("\0")[:-1]:
            kind, name, target = record.split("\t", 2)
            entries.append(prefix + name + ("/" if kind == "d" else f" -> {target}" if kind == "l" else ""))
        if not entries:
            return Observation(text=f"{path.shown} is an empty folder")
        shown = fit(sorted(entries), self.max_chars)
        if len(shown) < len(entries):
            shown.append(
                f"[{len(shown)} of {len(entries)} entries shown; list a subfolder or use a smaller depth]"
            )
        return Observation(text="\n".join(shown))


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    path: str
    """File to write, relative to the repository root; missing folders are made."""
    content: str
    """The whole new content of the file."""


@dataclass(frozen=True)
class WriteFile:
    name = "write_file"
    description = "Write a whole file, creating it (and its folders) or replacing what it held."
    Args = WriteFileArgs

    def run(self, sandbox: Sandbox, args: WriteFileArgs) -> Observation:
        path = resolve(sandbox, args.path)
        if path.kind == "dir":
            raise ToolError(f"{path.shown!r} is a folder; give the path of a file inside it")
        if path.kind == "other":
            raise ToolError(f"{path.shown!r} is not a regular file; it cannot be written")
        sandbox.write_file(path.real, args.content.encode())
        verb = "created" if path.kind == "missing" else "wrote"
        return Observation(text=f"{verb} {path.shown} ({counted(args.content)})")


class EditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    path: str
    """File to edit, relative to the repository root."""
    old_str: str
    """Text to replace. It must appear exactly once, whitespace and indentation included. Empty to create a new file."""
    new_str: str
    """Text to put in its place (the content of the file, when creating one)."""


@dataclass(frozen=True)
class Edit:
    name = "edit"
    description = (
        "Replace one exact, unique piece of text in a file with new text, and show the lines around "
        "the change. With an empty old_str, create a file that does not exist yet."
    )
    Args = EditArgs

    def run(self, sandbox: Sandbox, args: EditArgs) -> Observation:
        path = resolve(sandbox, args.path)
        if path.kind == "missing":
            if args.old_str:
                raise ToolError(
                    f"file {path.shown!r} does not exist; to create it, call edit with an empty old_str "
                    "or use write_file"
                )
            sandbox.write_file(path.real, args.new_str.encode())
            return Observation(text=f"created {path.shown} ({counted(args.new_str)})")
        if not args.old_str:
            raise ToolError(
                f"{path.shown!r} already exists, so old_str must be the text to replace "
                "(use write_file to replace the whole file)"
            )
        text = read_text(sandbox, path, errors="strict")
        count = text.count(args.old_str)
        if count == 0:
            raise ToolError(
                f"old_str was not found in {path.shown!r}; it must match the file exactly, whitespace and "
                "indentation included (read the file to copy the text)"
            )
        if count > 1:
            raise ToolError(
                f"old_str appears {count} times in {path.shown!r}; include more of the surrounding lines "
                "so that it matches exactly once"
            )
        at = text.index(args.old_str)
        new_text = text[:at] + args.new_str + text[at + len(args.old_str) :]
        sandbox.write_file(path.real, new_text.encode())
        first = text.count("\n", 0, at) + 1
        last = first + args.new_str.count("\n")
        lines = split_lines(new_text)
        low = max(1, first - EDIT_CONTEXT_LINES)
        high = min(len(lines), last + EDIT_CONTEXT_LINES)
        snippet = "\n".join(numbered(lines[low - 1 : high], low))
        return Observation(text=f"edited {path.shown}:\n{snippet}")
