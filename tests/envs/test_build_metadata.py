"""Dependencies read the way pip reads them (issue 36): the repository's own build backend, asked in a
sandbox with no network, its build requirements installed from the host's wheel cache; the static parse
only where the backend cannot be asked, and the answer says which."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.build_metadata import backend_environment, environment_reader
from envs.factory import start_sandbox
from envs.sandbox import SandboxConfig
from envs.task_env import build_bwrap_env
from tasks.environment import Environment, declared_environment
from tasks.patches import git
from tasks.suite import load_suite
from tasks.swebench import import_swebench
from tests.conftest import require_backend
from tests.tasks.test_swebench import commit, diff, row

CALC = {
    # The common style: the lists are built above the `setup()` call, which gets names, not literals.
    "setup.py": "from setuptools import setup\n\nrequirements = ['six>=1.10']\n"
    "extras = {'docs': ['sphinx']}\nextras['test'] = [r for r in ['iniconfig']]\n\n"
    "setup(name='calc', version='1.4', py_modules=['calc'], install_requires=requirements,\n"
    "      extras_require=extras)\n",
    "calc.py": "import six\n\n\ndef label(x):\n    return six.text_type(x) + '!'\n",
    "tests/test_calc.py": "from calc import label\n\n\ndef test_label():\n    assert label(1) == '1!'\n",
}
BROKEN = {
    "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "broken_backend"\nbackend-path = ["_build"]\n'
    '\n[project]\nname = "broken"\nversion = "1.0"\ndependencies = ["attrs>=22"]\n',
    "_build/broken_backend.py": "def prepare_metadata_for_build_wheel(directory, settings=None):\n"
    "    raise RuntimeError('no metadata here')\n",
}
HATCH = {
    "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
    '[project]\nname = "hlib"\nversion = "2.0"\ndependencies = ["attrs>=22", "pytest>=7"]\n\n'
    '[project.optional-dependencies]\ntest = ["freezegun"]\ndocs = ["sphinx"]\n\n'
    '[dependency-groups]\ntests = ["iniconfig"]\n',
    "src/hlib/__init__.py": "",
}


@pytest.fixture(scope="session")
def cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The harness cache of these tests: its own, filled once (build requirements from pip's cache or
    the package index), shared by every test of the session."""
    return tmp_path_factory.mktemp("harness-cache")


@pytest.fixture
def cache(cache_folder: Path) -> Iterator[Path]:
    """`cache_folder` as the harness's cache for one test, and only for it: a session-wide setting
    outlived these tests in their worker, where later bubblewrap sandboxes then found no sandbox
    environment and ran the harness's own pytest."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PIP_CACHE_DIR", os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip"))
        patch.setenv("XDG_CACHE_HOME", str(cache_folder))
        yield cache_folder


def repository(root: Path, files: dict[str, str]) -> Path:
    """A git repository of `files`, committed."""
    git(["init", "-q", str(root)])
    commit(root, files, "start")
    return root


def test_a_setup_py_that_is_not_a_literal_gives_its_real_dependencies(
    backend: str, cache: Path, tmp_path: Path
) -> None:
    """The static parse sees names where setup() wants lists, and finds nothing; setuptools, asked,
    runs setup.py and reports what it builds."""
    repo = repository(tmp_path / "calc", CALC)
    assert declared_environment(repo).requirements == []  # what tasks/environment.py alone gives
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    environment, how = backend_environment(repo, config)
    assert how == "build backend setuptools.build_meta:__legacy__"
    assert environment == Environment(requirements=["six>=1.10", "iniconfig"], project="calc", version="1.4")
    assert sorted(p.name for p in repo.iterdir()) == [".git", "calc.py", "setup.py", "tests"]  # no egg-info


def test_its_environment_collects_and_passes_its_tests(cache: Path, tmp_path: Path) -> None:
    """The environment built from the backend's answer runs the repository's tests; the static one had
    no six, and collecting them failed with ModuleNotFoundError."""
    require_backend("bwrap")
    repo = repository(tmp_path / "calc", CALC)
    config = SandboxConfig(backend="bwrap")
    environment, _ = backend_environment(repo, config)
    built = build_bwrap_env(environment, quiet=True)
    sandbox = start_sandbox(config.model_copy(update={"python_env": built}), repo)
    try:
        result = sandbox.run("python3 -m pytest -q -p no:cacheprovider tests", timeout=120)
    finally:
        sandbox.close()
    assert result.exit_code == 0 and "1 passed" in result.output, result.output


def test_a_broken_backend_falls_back_to_the_static_parse_and_says_why(
    backend: str, cache: Path, tmp_path: Path
) -> None:
    repo = repository(tmp_path / "broken", BROKEN)
    environment, how = backend_environment(repo, SandboxConfig(backend=backend))  # type: ignore[arg-type]
    assert how == (
        "static parse (fallback: the build backend broken_backend failed: RuntimeError: no metadata here)"
    )
    assert environment == declared_environment(repo) and environment.requirements == ["attrs>=22"]


def test_a_pyproject_project_gives_its_dependencies_test_extra_and_groups(
    cache: Path, tmp_path: Path
) -> None:
    """hatchling's metadata: the dependencies and the test extra (pytest left to the sandbox, docs left
    out); the dependency groups, which no metadata holds, read from pyproject.toml as before."""
    require_backend("bwrap")
    repo = repository(tmp_path / "hlib", HATCH)
    environment, how = backend_environment(repo, SandboxConfig(backend="bwrap"))
    assert how == "build backend hatchling.build"
    assert environment == Environment(
        requirements=["attrs>=22", "freezegun", "iniconfig"],
        project="hlib",
        package_root="src",
        version="2.0",
    )


def test_requirements_the_backend_asks_for_are_installed_before_its_metadata(
    cache: Path, tmp_path: Path
) -> None:
    """A setup.py's `setup_requires` (here setuptools-scm, which gives the version) comes from the
    backend's `get_requires_for_build_wheel`, as pip installs it; the single commit has no tag, so the
    version is the one the harness tells it."""
    require_backend("bwrap")
    files = {
        "setup.py": "from setuptools import setup\n\ndeps = ['six']\n\nsetup(name='scmlib', "
        "py_modules=['scmlib'], use_scm_version=True, setup_requires=['setuptools_scm'], install_requires=deps)\n",
        "scmlib.py": "",
    }
    environment, how = backend_environment(
        repository(tmp_path / "scm", files), SandboxConfig(backend="bwrap")
    )
    assert how == "build backend setuptools.build_meta:__legacy__"
    assert (environment.requirements, environment.version) == (["six"], "0.0.0")


def test_the_swebench_import_reads_with_the_backend_and_reports_how(cache: Path, tmp_path: Path) -> None:
    require_backend("bwrap")
    repo = repository(tmp_path / "clones" / "acme__calc", CALC)
    base = git(["rev-parse", "HEAD"], cwd=repo).decode().strip()
    fix = commit(repo, {
        "calc.py": CALC["calc.py"] + "\n\ndef twice(x):\n    return label(x) * 2\n",
        "tests/test_more.py": "from calc import twice\n\n\ndef test_twice():\n    assert twice(2) == '2!2!'\n",
    }, "twice")  # fmt: skip
    instance = row("acme__calc-1", "acme/calc", base, diff(repo, base, fix, "calc.py"),
                   diff(repo, base, fix, "tests"), ["tests/test_more.py::test_twice"], [])  # fmt: skip
    (tmp_path / "instances.jsonl").write_text(json.dumps(instance) + "\n")
    reader = environment_reader(SandboxConfig(backend="bwrap"))
    report = import_swebench(
        tmp_path / "instances.jsonl", tmp_path / "clones", tmp_path / "suite", reader=reader
    )
    assert report.imported == ["acme__calc-1"], report.skipped
    assert report.environments == {"acme__calc-1": "build backend setuptools.build_meta:__legacy__"}
    task = load_suite(str(tmp_path / "suite"))[0]
    assert task.environment is not None and task.environment.requirements == ["six>=1.10", "iniconfig"]


def test_a_folder_pip_would_not_build_is_read_statically(tmp_path: Path) -> None:
    """No pyproject.toml and no setup.py: pip would build nothing, so no backend is asked (no sandbox)."""
    repo = repository(tmp_path / "plain", {"lib.py": "import attrs\n", "requirements.txt": "attrs\n"})
    environment, how = backend_environment(repo, SandboxConfig(backend="bwrap"))
    assert how == "static parse (no pyproject.toml or setup.py: not a project pip would build)"
    assert environment.requirements == ["attrs"]
