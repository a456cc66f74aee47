"""Which files a repository's pytest collects, read from its configuration the way pytest reads it.

pytest takes its settings from the first of these that configures it, at the repository's root:
`pytest.ini` (or `.pytest.ini`, whatever it holds), `pyproject.toml` with `[tool.pytest.ini_options]`,
`tox.ini` with `[pytest]`, `setup.cfg` with `[tool:pytest]`. Of those settings, `python_files` (the
file name patterns, by default `test_*.py *_test.py`) and `testpaths` (the folders searched when no path
is given, by default the root) say which files hold tests. Read, never run.
"""

from __future__ import annotations

import configparser
import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_FILES = ("test_*.py", "*_test.py")
"""pytest's `python_files` when nothing sets it."""


@dataclass(frozen=True)
class Collection:
    """What a repository's pytest collects when run with no path."""

    python_files: tuple[str, ...] = DEFAULT_FILES
    testpaths: tuple[str, ...] = ()
    """Folders (or globs of them) under the root; () is the root itself."""
    source: str = ""
    """The file that configured pytest; "" where none does (pytest's defaults)."""

    def collects(self, path: str) -> bool:
        """Whether pytest collects the file at `path` (relative to the root, with /)."""
        if self.testpaths and not any(_under(path, root) for root in self.testpaths):
            return False
        name = path.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatch(path if "/" in p else name, p) for p in self.python_files)


def _under(path: str, root: str) -> bool:
    root = root.strip("/").removeprefix("./")
    if root in ("", "."):
        return True
    parts = path.split("/")
    return any(fnmatch.fnmatch("/".join(parts[:k]), root) for k in range(1, len(parts) + 1))


def pytest_collection(repo: Path) -> Collection:
    """The collection settings of the first file that configures pytest at `repo`'s root."""
    for name in ("pytest.ini", ".pytest.ini"):
        if (repo / name).is_file():
            return _from_ini(repo / name, "pytest", always=True) or Collection(source=name)
    pyproject = repo / "pyproject.toml"
    if pyproject.is_file():
        try:
            table = tomllib.loads(pyproject.read_text(errors="replace"))
        except tomllib.TOMLDecodeError:
            table = {}
        options = table.get("tool", {}).get("pytest", {}).get("ini_options")
        if isinstance(options, dict):
            return Collection(
                _words(options.get("python_files")) or DEFAULT_FILES,
                _words(options.get("testpaths")),
                "pyproject.toml",
            )
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        found = _from_ini(repo / name, section, always=False)
        if found is not None:
            return found
    return Collection()


def _from_ini(path: Path, section: str, always: bool) -> Collection | None:
    """The settings of `section` of an INI file; None where it has no such section (and `always` is
    false: pytest.ini configures pytest even without it)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(errors="replace")) if path.is_file() else None
    except configparser.Error:
        return None
    if not parser.has_section(section):
        return Collection(source=path.name) if always and path.is_file() else None
    files = _words(parser.get(section, "python_files", fallback=None))
    return Collection(
        files or DEFAULT_FILES, _words(parser.get(section, "testpaths", fallback=None)), path.name
    )


def _words(value: object) -> tuple[str, ...]:
    """An INI value's whitespace-separated words, or a TOML string or list of them."""
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list):
        return tuple(word for item in value if isinstance(item, str) for word in item.split())
    return ()
