"""The search tool: a regular expression over the repository's text files, with capped results."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from envs.sandbox import WORKDIR, Sandbox
from tools.base import Observation, ToolError
from tools.paths import resolve

RESULTS_FILE = "/tmp/harness-search.json"
"""Where the in-sandbox search writes its matches: a file is not capped the way command output is."""
MAX_LINE_CHARS = 200

# Runs in the sandbox under `python3 -I`, so that modules in the repository cannot shadow the standard
# library. Skips .git, symlinks, binary files and files over 4 MiB, as grep -rI would.
SCRIPT = r"""
import fnmatch, json, os, re, sys

root, start, pattern, glob, limit, max_line, out = sys.argv[1:]
regex, limit, max_line = re.compile(pattern), int(limit), int(max_line)
root = os.path.realpath(root)


def files():
    if not os.path.isdir(start):
        yield start
        return
    for folder, dirs, names in os.walk(start):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in sorted(names):
            yield os.path.join(folder, name)


matches, total = [], 0
for path in files():
    rel = os.path.relpath(path, root)
    if glob and not (fnmatch.fnmatch(os.path.basename(path), glob) or fnmatch.fnmatch(rel, glob)):
        continue
    if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > 4 << 20:
        continue
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        continue
    if b"\0" in data[:8192]:
        continue
    for number, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
        if regex.search(line):
            total += 1
            if len(matches) < limit:
                line = line.rstrip("\r")
                cut = line[:max_line] + (" [...]" if len(line) > max_line else "")
                matches.append(f"{rel}:{number}:{cut}")
with open(out, "w") as f:
    json.dump({"total": total, "matches": matches}, f)
"""


class SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    pattern: str = Field(min_length=1)
    """Python regular expression, searched for in each line."""
    path: str = "."
    """Folder or file to search, relative to the repository root; the whole repository when left out."""
    glob: str | None = None
    """Only search files whose name or relative path matches this glob, such as '*.py'."""


@dataclass(frozen=True)
class Search:
    max_results: int
    """Most matches shown; the observation says how many more there were."""
    timeout_s: float | None
    """Timeout of the search; None uses the sandbox's default."""

    name = "search"
    description = (
        "Search the repository's text files for a regular expression, line by line. Shows "
        "'path:line:text' for each match; .git, binary files and symlinks are skipped."
    )
    Args = SearchArgs

    def run(self, sandbox: Sandbox, args: SearchArgs) -> Observation:
        try:
            re.compile(args.pattern)
        except re.error as e:
            raise ToolError(f"invalid regular expression {args.pattern!r}: {e}") from e
        path = resolve(sandbox, args.path)
        if path.kind == "missing":
            raise ToolError(f"{path.shown!r} does not exist")
        script_args = [WORKDIR, path.real, args.pattern, args.glob or ""]
        script_args += [str(self.max_results), str(MAX_LINE_CHARS), RESULTS_FILE]
        result = sandbox.run(["python3", "-I", "-c", SCRIPT, *script_args], timeout=self.timeout_s)
        if result.timed_out:
            raise ToolError(f"search timed out after {result.duration_s:.1f} s; narrow the path or glob")
        if not result.ok:
            raise ToolError(f"search failed (exit code {result.exit_code}): {result.output.strip()}")
        found = json.loads(sandbox.read_file(RESULTS_FILE))
        total, matches = found["total"], found["matches"]
        if not total:
            return Observation(text=f"no matches for {args.pattern!r} in {path.shown}")
        if total > len(matches):
            matches.append(
                f"[{len(matches)} of {total} matches shown; narrow the pattern, path or glob to see the rest]"
            )
        return Observation(text="\n".join(matches))
