"""Multilingual SWE-bench datasets read into SWE-bench's own layout, and their test ids placed in files.

Two public layouts reach `harness tasks import swebench` besides SWE-bench's own:

- **SWE-bench Multilingual**: SWE-bench's fields, no language field (the language is read off the gold
  patch's files), test ids as each repository's log parser names them (`TestParse/empty` for Go,
  `parser::tests::empty_input` for Rust, a test's full name for Jest).
- **Multi-SWE-bench**: a row per pull request, `org`, `repo`, `number`, `base.sha`, `fix_patch`,
  `test_patch`, `resolved_issues`, and the tests by transition, `f2p_tests`, `s2p_tests`, `n2p_tests`,
  `p2p_tests` (name -> the outcomes at each stage); a `language` field in some copies of it (`js`, `ts`).
  `multi_swe_bench_row` rewrites such a row in SWE-bench's fields: FAIL_TO_PASS are the tests that did not
  pass at the base and pass with the fix (failed, skipped or absent before: `f2p`, `s2p`, `n2p`), the
  problem statement is the issues the pull request resolves (its own text describes the fix).

The grader of a language other than Python names a test `FILE::NAME`, NAME as the language's plug-in
finds it in FILE (`Language.tests_in`, `envs/languages/`). `place_ids` turns a dataset's test ids into
those: each id's candidate names (the whole id; its last `::`, `.`, `#` or space-separated part; a Go
subtest's parent) are looked up in the hidden test files first, then in the repository's own test files;
an id found in no file, or in several, is reported and left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

PYTHON = "python"

DATASET_LANGUAGES = {
    "js": "javascript",
    "javascript": "javascript",
    "ts": "javascript",  # one plug-in for both (envs/languages/javascript.py), TypeScript by suffix
    "typescript": "javascript",
    "go": "go",
    "golang": "go",
    "rust": "rust",
    "rs": "rust",
    "java": "java",
    "python": "python",
    "py": "python",
}
"""A dataset's name for a language -> the plug-in's (a name not here is taken as it is)."""

TestsIn = Callable[[str], list[str]]
"""A test file's source -> the names of its tests (a plug-in's `tests_in`)."""


def dataset_language(name: str) -> str:
    """The plug-in name of a dataset's language field (`ts` -> `typescript`)."""
    key = name.strip().lower()
    return DATASET_LANGUAGES.get(key, key)


def multi_swe_bench_row(row: dict[str, Any]) -> dict[str, Any]:
    """A Multi-SWE-bench row in SWE-bench's fields (module docstring); another row as it is."""
    if not {"org", "fix_patch", "base"} <= row.keys():
        return row
    org, name, number = row.get("org"), row.get("repo"), row.get("number")
    base = row["base"] if isinstance(row["base"], dict) else {}
    converted: dict[str, Any] = {
        "instance_id": row.get("instance_id") or f"{org}__{name}-{number}",
        "repo": f"{org}/{name}",
        "base_commit": base.get("sha"),
        "patch": row.get("fix_patch"),
        "test_patch": row.get("test_patch"),
        "problem_statement": _issues_text(row),
        "FAIL_TO_PASS": _names(row, "f2p_tests", "s2p_tests", "n2p_tests"),
        "PASS_TO_PASS": _names(row, "p2p_tests"),
    }
    if isinstance(row.get("language"), str):
        converted["language"] = row["language"]
    return converted


def _names(row: dict[str, Any], *keys: str) -> list[str]:
    names: list[str] = []
    for key in keys:
        value = row.get(key) or {}
        names += [n for n in (value if isinstance(value, dict | list) else []) if n not in names]
    return names


def _issues_text(row: dict[str, Any]) -> str:
    """The issues the pull request resolves, each its title and body; with none, the pull request's own
    title and body."""
    issues = [i for i in row.get("resolved_issues") or [] if isinstance(i, dict)]
    parts = [f"{i.get('title') or ''}\n\n{i.get('body') or ''}".strip() for i in issues]
    parts = [p for p in parts if p]
    if not parts:
        parts = [f"{row.get('title') or ''}\n\n{row.get('body') or ''}".strip()]
    return "\n\n".join(parts)


def language_of_paths(paths: Iterable[str], suffixes: dict[str, tuple[str, ...]]) -> str | None:
    """The language most of `paths` are source files of (`suffixes`: language -> its suffixes; ties go to
    the name first in order), or None when none is."""
    counts = {name: sum(1 for p in paths if p.endswith(ends)) for name, ends in suffixes.items() if ends}
    counts = {n: c for n, c in counts.items() if c}
    return max(sorted(counts), key=lambda n: counts[n]) if counts else None


@dataclass
class Placed:
    """A dataset's test ids as the grader names them."""

    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)
    """Ids found in no test file."""
    ambiguous: list[str] = field(default_factory=list)
    """Ids whose name more than one test file has."""


def candidate_names(test_id: str) -> list[str]:
    """The names a dataset's test id may stand for, the most specific first."""
    found = [test_id]
    head = test_id.split("/", 1)[0]  # a Go subtest's parent, a path's first part
    parts = [
        test_id.rsplit("::", 1)[-1],
        head,
        test_id.rsplit("#", 1)[-1],
        re.sub(r"\(.*\)$", "", test_id).rsplit(".", 1)[-1],  # pkg.Class.method, method(pkg.Class)
        test_id.split("(", 1)[0].strip(),
        test_id.rsplit(" > ", 1)[-1],  # a runner's `file > describe > test`
    ]
    return [n for n in dict.fromkeys([*found, *parts]) if n]


def _owner_hint(test_id: str) -> str:
    """The class or file a Java or Rust id names before its test (`pkg.FooTest#bar` -> FooTest), or ''."""
    match = re.match(r"^(?:[\w.]+\.)?(\w+)[#.](\w+)$", test_id) or re.match(r"^\w+\(([\w.]+)\)$", test_id)
    return match.group(1).rsplit(".", 1)[-1] if match else ""


def place_id(test_id: str, files: dict[str, list[str]]) -> tuple[str | None, bool]:
    """(FILE::NAME, or None; whether several files would do) of one id, `files` being each test file's
    tests, hidden files first. An id already of the form FILE::NAME with NAME in FILE stays."""
    path, _, name = test_id.partition("::")
    if name and name in files.get(path, []):
        return test_id, False
    hint = _owner_hint(test_id)
    for candidate in candidate_names(test_id):
        owners = [p for p, names in files.items() if candidate in names]
        if hint and len(owners) > 1:
            owners = [p for p in owners if PurePosixPath(p).stem == hint] or owners
        if owners:
            return f"{owners[0]}::{candidate}", len(owners) > 1
    return None, False


def place_ids(fail_to_pass: list[str], pass_to_pass: list[str], files: dict[str, list[str]]) -> Placed:
    """Each id placed (`place_id`); a test named both ways (two Go subtests of one test) is FAIL_TO_PASS."""
    placed = Placed()
    for ids, into in ((fail_to_pass, placed.fail_to_pass), (pass_to_pass, placed.pass_to_pass)):
        for test_id in ids:
            where, several = place_id(test_id, files)
            if where is None:
                placed.unplaced.append(test_id)
                continue
            if several:
                placed.ambiguous.append(test_id)
            if where not in placed.fail_to_pass and where not in into:
                into.append(where)
    placed.pass_to_pass = [i for i in placed.pass_to_pass if i not in placed.fail_to_pass]
    return placed


def tests_by_file(
    hidden: dict[str, str], tree: dict[str, str], tests_in: TestsIn, is_test: Callable[[str], bool]
) -> dict[str, list[str]]:
    """Each test file's tests: the hidden files first (the test patch's), then the repository's own."""
    found = {path: tests_in(text) for path, text in hidden.items()}
    for path, text in sorted(tree.items()):
        if path not in found and is_test(path):
            found[path] = tests_in(text)
    return {p: names for p, names in found.items() if names}


@dataclass(frozen=True)
class LanguageSupport:
    """What an import needs of the language plug-ins (`envs.languages.import_support` makes it; tasks/
    imports nothing of envs/)."""

    suffixes: dict[str, tuple[str, ...]] = field(default_factory=lambda: {PYTHON: (".py",)})
    """Each known language -> its source suffixes."""
    tests_in: dict[str, TestsIn] = field(default_factory=dict)
    """Each language whose ids are placed in files (not Python's: pytest's node ids are FILE::NAME)."""
    is_test: dict[str, Callable[[str], bool]] = field(default_factory=dict)
    """Each language of `tests_in` -> whether a repository path is one of its test files."""
    test_command: dict[str, str] = field(default_factory=dict)
    """Each language -> the repository's test command (the agent's `run_tests`)."""

    def language(self, declared: str | None, patch_paths: list[str]) -> str:
        """The task's language: the dataset's field, else what the gold patch's files are, else Python."""
        name = dataset_language(declared) if declared else language_of_paths(patch_paths, self.suffixes)
        name = name or PYTHON
        if name not in self.suffixes:
            known = ", ".join(sorted(self.suffixes))
            raise ValueError(f"language {name!r}: no plug-in grades it (known: {known})")
        return name
