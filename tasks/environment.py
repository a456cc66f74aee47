"""What a repository declares that its code and tests need: the environment a task's sandbox gets.

Read, never run: pyproject.toml (`[project]` dependencies, the test extras of `optional-dependencies`,
PEP 735 `[dependency-groups]`, setuptools-scm's and hatch-vcs's version file), setup.cfg (`[options]`
install_requires and extras_require), setup.py (the literal lists given to `setup()`: install_requires,
tests_require, extras_require) and requirements files (requirements.txt and the test and dev ones, with
their `-r` includes). `harness env build` installs the result outside /repo (`envs/python_env.py`); the
agent never installs anything.

That static parse is the fallback. Real tasks read their dependencies the way pip does: the project's
own build backend, asked in a sandbox (`envs/build_metadata.py`), reports them, and `metadata_environment`
takes them with the test extras chosen as here; a setup.py that builds its lists in code is read right.

pytest itself is the sandbox's (one pytest for every task and both backends): a repository's own pytest
requirement is left out, and so is pytest-cov (`LEFT_OUT`); its other pytest plugins are not.
"""

from __future__ import annotations

import ast
import configparser
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from tasks.parsing import parse_python

TEST_EXTRAS = ("test", "tests", "testing")
"""Extras and dependency groups whose requirements the tests need."""
DEV_EXTRAS = ("dev", "develop", "development")
"""Taken only where no test extra exists: they often hold linters and documentation tools as well."""
REQUIREMENT_FILES = (
    "requirements.txt", "requirements-test.txt", "requirements-tests.txt", "requirements_test.txt",
    "test-requirements.txt", "test_requirements.txt", "requirements-testing.txt", "requirements/test.txt",
    "requirements/tests.txt", "requirements/testing.txt", "requirements/base.txt",
)  # fmt: skip
LEFT_OUT = {"pytest", "pytest-cov"}
"""Requirement names never installed into a task's environment: the sandbox's own pytest is used, and
coverage's plugin measures, never decides an outcome, while its releases follow pytest's (the newest, on
the sandbox's pytest 7.2, failed every grading run at import: humanize 4.9's test extra)."""
UNNAMED = "UNKNOWN"
"""The name setuptools writes into the metadata of a project that gives none."""
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class Environment(BaseModel):
    """What a task's code and tests need beyond the sandbox's Python and pytest; made at build time
    (`harness env build`), outside /repo."""

    model_config = ConfigDict(extra="forbid")

    requirements: list[str] = Field(default_factory=list)
    """Requirement specifiers (PEP 508), installed from the package index when the environment is built."""
    project: str | None = None
    """The repository's own distribution name: importable from /repo and known to importlib.metadata, as
    an editable install makes it, without running its build backend."""
    package_root: str = ""
    """The folder of the repository that holds its packages: "" (the root) or "src"."""
    version: str = "0.0.0"
    """The version the project reports (a packaging backend's version hook reads git tags, which a task's
    single commit does not have)."""
    version_file: str | None = None
    """A file the packaging backend writes at build time and the code imports (setuptools-scm's
    `version_file`, hatch-vcs's `version-file`): made in the task's start tree."""

    def needed(self) -> bool:
        """Whether a task needs this environment: requirements to install, a src/ layout to make
        importable or a version file to make (a project name alone does not)."""
        return bool(self.requirements or self.package_root or self.version_file)

    def setup_commands(self) -> list[str]:
        """Shell commands that make, in /repo, what a build of the project would have left there."""
        if self.version_file is None:
            return []
        parts = [int(p) for p in re.findall(r"\d+", self.version)[:3]]
        text = (
            "# made by the harness, as the packaging backend's version hook would\n"
            f"__version__ = version = {self.version!r}\n"
            f"__version_tuple__ = version_tuple = {tuple(parts)!r}\n"
        )
        quoted = text.replace("'", "'\\''")
        return [f"test -e {self.version_file} || printf '%s' '{quoted}' > {self.version_file}"]


class BackendMetadata(BaseModel):
    """What a repository's build backend says of its project (`envs/metadata_probe.py`), markers evaluated
    by the sandbox's Python."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    """The distribution's name (METADATA's `Name`)."""
    version: str | None = None
    """Its version (METADATA's `Version`)."""
    requires: list[str] = Field(default_factory=list)
    """The requirements of the project itself (no extra)."""
    extras: dict[str, list[str]] = Field(default_factory=dict)
    """Extra (normalized name) -> its requirements."""


class Declared(NamedTuple):
    """A repository's environment and how it was read."""

    environment: Environment
    how: str
    """"build backend NAME", or "static parse" (with the reason where the backend could not be asked)."""


EnvironmentReader = Callable[[Path], Declared]
"""Reads a repository's environment: `static_environment` here, or its build backend's answer
(`envs/build_metadata.py`), which tasks/ takes as a callable so as not to import envs/."""


def static_environment(repo: Path) -> Declared:
    return Declared(declared_environment(repo), "static parse")


def declared_environment(repo: Path) -> Environment:
    """The environment `repo` declares (empty where it declares nothing)."""
    project, requirements, version_file = _pyproject(repo / "pyproject.toml")
    name, more = _setup_cfg(repo / "setup.cfg")
    project = project or name
    requirements += more
    name, more = _setup_py(repo / "setup.py")
    return _environment(repo, project or name, requirements + more, version_file)


def metadata_environment(repo: Path, metadata: BackendMetadata) -> Environment:
    """The environment of `repo` whose project and dependencies (its own and its test extras, chosen as
    `declared_environment` chooses them) its build backend gave; the rest is read as there: PEP 735
    dependency groups, requirements files, a src/ layout, the version file."""
    project, _, version_file = _pyproject(repo / "pyproject.toml")
    groups = _groups(_toml(repo / "pyproject.toml"))
    requirements = [*metadata.requires, *_extras(metadata.extras), *groups]
    name = metadata.name if metadata.name != UNNAMED else None
    environment = _environment(repo, project or name, requirements, version_file)
    return environment.model_copy(update={"version": metadata.version or environment.version})


def _environment(
    repo: Path, project: str | None, requirements: list[str], version_file: str | None
) -> Environment:
    """The requirements (and those of the requirements files) less the project itself and `LEFT_OUT`."""
    for file in REQUIREMENT_FILES:
        requirements = requirements + _requirements_file(repo, repo / file, set())
    own = _normal(project) if project else None
    kept = [r for r in dict.fromkeys(requirements) if _name(r) not in {own, *LEFT_OUT}]
    return Environment(
        requirements=kept,
        project=project,
        package_root="src" if _has_packages(repo / "src") else "",
        version_file=version_file,
    )


def _toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(errors="replace"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path.name}: not valid TOML: {e}") from e


def _pyproject(path: Path) -> tuple[str | None, list[str], str | None]:
    """(name, requirements, version file) of a pyproject.toml."""
    data = _toml(path)
    project = data.get("project", {})
    requirements = _strings(project.get("dependencies"))
    requirements += _extras(project.get("optional-dependencies"))
    requirements += _groups(data)
    tool = data.get("tool", {})
    scm = tool.get("setuptools_scm", {})
    vcs = tool.get("hatch", {}).get("build", {}).get("hooks", {}).get("vcs", {})
    version_file = scm.get("version_file") or scm.get("write_to") or vcs.get("version-file")
    name = project.get("name")
    return (
        (name if isinstance(name, str) else None),
        requirements,
        (str(version_file) if version_file else None),
    )


def _groups(data: dict[str, Any]) -> list[str]:
    """The requirements of the test dependency groups (PEP 735), or of the dev ones."""
    groups = data.get("dependency-groups", {})
    return _extras(
        {k: [e for e in v if isinstance(e, str)] for k, v in groups.items() if isinstance(v, list)}
    )


def _lines(text: str) -> list[str]:
    """The lines of a setup.cfg list value, without blanks and comments."""
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def _setup_cfg(path: Path) -> tuple[str | None, list[str]]:
    if not path.is_file():
        return None, []
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(errors="replace"))
    except configparser.Error:
        return None, []
    requirements = _lines(parser.get("options", "install_requires", fallback=""))
    extras = (
        {k: _lines(v) for k, v in parser.items("options.extras_require")}
        if parser.has_section("options.extras_require")
        else {}
    )
    return parser.get("metadata", "name", fallback=None), requirements + _extras(extras)


def _setup_py(path: Path) -> tuple[str | None, list[str]]:
    """The literal arguments of the `setup()` call; what is computed at run time is not seen."""
    if not path.is_file():
        return None, []
    try:
        tree = parse_python(path.read_text(errors="replace"))
    except SyntaxError:
        return None, []
    for node in ast.walk(tree):
        func = getattr(node, "func", None)
        if isinstance(node, ast.Call) and getattr(func, "id", getattr(func, "attr", None)) == "setup":
            args = {k.arg: _literal(k.value) for k in node.keywords if k.arg}
            requirements = _strings(args.get("install_requires")) + _strings(args.get("tests_require"))
            extras = args.get("extras_require")
            name = args.get("name")
            return (name if isinstance(name, str) else None), requirements + _extras(extras)
    return None, []


def _requirements_file(repo: Path, path: Path, seen: set[Path]) -> list[str]:
    """Requirement lines, with `-r` includes inside the repository followed once; options, editable
    installs and local paths are left out."""
    path = path.resolve()
    if not path.is_file() or path in seen or not path.is_relative_to(repo.resolve()):
        return []
    seen.add(path)
    found: list[str] = []
    for raw in path.read_text(errors="replace").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            found += _requirements_file(repo, path.parent / line.split(None, 1)[1], seen)
        elif line and not line.startswith(("#", "-", ".", "/")) and NAME.match(line):
            found.append(line)
    return found


def _extras(table: object) -> list[str]:
    """The requirements of the test extras, or of the dev ones where there is no test extra."""
    if not isinstance(table, dict):
        return []
    chosen = [k for k in table if str(k).lower() in TEST_EXTRAS] or [
        k for k in table if str(k).lower() in DEV_EXTRAS
    ]
    return [r for k in chosen for r in _strings(table[k])]


def _literal(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip()]
    if isinstance(value, list | tuple):
        return [v.strip() for v in value if isinstance(v, str) and v.strip()]
    return []


def _normal(name: str) -> str:
    """PEP 503's normal form of a project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _name(requirement: str) -> str | None:
    found = NAME.match(requirement)
    return _normal(found.group(1)) if found else None


def _has_packages(folder: Path) -> bool:
    return folder.is_dir() and any(
        (p.is_dir() and (p / "__init__.py").is_file()) or p.suffix == ".py" for p in folder.iterdir()
    )
