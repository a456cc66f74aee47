"""A repository's dependencies read the way pip reads them: from its own build backend, in a sandbox.

PEP 517's order, as pip's isolated build follows it: the `[build-system]` requirements (for a repository
without one, `setuptools>=40.8.0` and `wheel` with `setuptools.build_meta:__legacy__`) are installed, the
backend's `get_requires_for_build_wheel` adds its own (a setup.py's `setup_requires`), and its
`prepare_metadata_for_build_wheel` (else `build_wheel`) writes the project's METADATA, whose Requires-Dist
and Provides-Extra give the environment (`tasks.environment.metadata_environment`).

The backend runs the repository's code (setup.py), so it runs in a sandbox of the repository, with no
network (`envs/metadata_probe.py`); the host only installs wheels (`--only-binary :all:`, nothing built
here) from the wheel cache, fetching what is missing from the package index, into a folder per set of
requirements (harness_cache()/build-envs) that is copied in. setuptools-scm and hatch-vcs are told the
version (`PRETEND_VERSION`): a task's single commit has no tags to read one from.

Where the backend cannot be asked (no wheel of a build requirement, a backend that fails on this
repository, a sandbox that does not start), the static parse (`tasks.environment.declared_environment`)
is the answer, and `how` says so and why.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envs.factory import start_sandbox
from envs.python_env import harness_cache, locked_beside
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig, SandboxError
from tasks.environment import (
    BackendMetadata,
    Declared,
    EnvironmentReader,
    declared_environment,
    metadata_environment,
)

PROBE = Path(__file__).with_name("metadata_probe.py")
WORK = "/tmp/harness-metadata"
"""The probe's folder in the sandbox: outside /repo, so nothing of it is in the repository."""
LEGACY_BACKEND = "setuptools.build_meta:__legacy__"
LEGACY_REQUIRES = ["setuptools>=40.8.0", "wheel"]
"""PEP 517's and pip's build system for a repository that names none."""
PROBE_REQUIRES = ["packaging>=22"]
"""What the probe itself reads markers with; on sys.path after the build requirements."""
PRETEND_VERSION = "0.0.0"
"""The version setuptools-scm (and hatch-vcs, through it) reports, as `Environment.version`'s default."""
TIMEOUT_S = 300.0
"""Longest a backend hook may take (a setup.py that compiles nothing should take seconds)."""
MARKER = "harness-build-env.json"
"""Written last in a folder of build requirements: one without it is made again."""


class MetadataError(RuntimeError):
    """The build backend could not be asked; the message says why, on one line."""


class BuildSystem(BaseModel):
    """A repository's `[build-system]` (PEP 517, 518)."""

    model_config = ConfigDict(extra="forbid")

    requires: list[str] = Field(default_factory=lambda: list(LEGACY_REQUIRES))
    """What the backend needs installed to be imported (`requires`)."""
    backend: str = LEGACY_BACKEND
    """`module:object`, as `build-backend` names it."""
    backend_path: list[str] = Field(default_factory=list)
    """Folders of the repository that hold an in-tree backend (`backend-path`)."""


def build_system(repo: Path) -> BuildSystem:
    """The repository's build system; PEP 517's fallback where pyproject.toml names none."""
    path = repo / "pyproject.toml"
    if not path.is_file():
        return BuildSystem()
    try:
        table = tomllib.loads(path.read_text(errors="replace")).get("build-system", {})
    except tomllib.TOMLDecodeError as e:
        raise MetadataError(f"pyproject.toml: not valid TOML: {e}") from e
    if not isinstance(table, dict):
        raise MetadataError("pyproject.toml's [build-system]: not a table")
    try:
        return BuildSystem.model_validate(
            {
                "requires": table.get("requires", LEGACY_REQUIRES),
                "backend": table.get("build-backend", LEGACY_BACKEND),
                "backend_path": table.get("backend-path", []),
            }
        )
    except ValidationError as e:
        raise MetadataError(f"pyproject.toml's [build-system]: {e.errors()[0]['msg']}") from e


def backend_environment(repo: Path, config: SandboxConfig) -> Declared:
    """`repo`'s environment as its build backend reports it, asked in a sandbox made by `config`; the
    static parse, with the reason, where it cannot be asked."""
    if not (repo / "pyproject.toml").is_file() and not (repo / "setup.py").is_file():
        how = "static parse (no pyproject.toml or setup.py: not a project pip would build)"
        return Declared(declared_environment(repo), how)
    try:
        system = build_system(repo)
        metadata = ask_backend(repo, system, config)
    except (MetadataError, SandboxError) as e:
        return Declared(declared_environment(repo), f"static parse (fallback: {e})")
    return Declared(metadata_environment(repo, metadata), f"build backend {system.backend}")


def environment_reader(config: SandboxConfig) -> EnvironmentReader:
    """`backend_environment` in sandboxes made by `config`, for readers that take a repository alone."""
    return functools.partial(backend_environment, config=config)


def ask_backend(repo: Path, system: BuildSystem, config: SandboxConfig) -> BackendMetadata:
    """Runs the probe in a sandbox of `repo`: the backend's own requirements, then its metadata."""
    sandbox = start_sandbox(config, repo)
    try:
        sandbox.write_file(f"{WORK}/probe.py", PROBE.read_bytes())
        sandbox.copy_in(installed(PROBE_REQUIRES), f"{WORK}/probe-requires")
        sandbox.copy_in(installed(system.requires), f"{WORK}/requires")
        more = run_probe(sandbox, system, "requires", "requires")["requires"]
        folder = "requires"
        if set(more) - set(system.requires):  # the backend asks for more: installed as pip would
            sandbox.copy_in(installed([*system.requires, *more]), f"{WORK}/requires-more")
            folder = "requires-more"
        raw = run_probe(sandbox, system, "metadata", folder)
    finally:
        sandbox.close()
    try:
        return BackendMetadata.model_validate(raw)
    except ValidationError as e:
        raise MetadataError(f"the probe's answer: {e.errors()[0]['msg']}") from e


def run_probe(sandbox: ExecutorSandbox, system: BuildSystem, mode: str, folder: str) -> dict[str, Any]:
    """One hook of the backend, with the build requirements of `folder`; its answer."""
    spec = {
        "mode": mode,
        "backend": system.backend,
        "backend_path": system.backend_path,
        "paths": [f"{WORK}/{folder}", f"{WORK}/probe-requires"],
        "out": f"{WORK}/out",
        "result": f"{WORK}/{mode}.json",
    }
    sandbox.write_file(f"{WORK}/{mode}-spec.json", json.dumps(spec).encode())
    result = sandbox.run(
        ["python3", "-I", "-S", "-B", f"{WORK}/probe.py", f"{WORK}/{mode}-spec.json"],
        timeout=TIMEOUT_S,
        env={"SETUPTOOLS_SCM_PRETEND_VERSION": PRETEND_VERSION},
    )
    if result.timed_out:
        raise MetadataError(f"the build backend {system.backend} took more than {TIMEOUT_S:.0f} s")
    if result.exit_code != 0:
        lines = [line.strip() for line in result.output.splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit code {result.exit_code}"
        raise MetadataError(f"the build backend {system.backend} failed: {last}")
    return dict(json.loads(sandbox.read_file(f"{WORK}/{mode}.json")))


def installed(requirements: list[str]) -> Path:
    """A folder with `requirements` installed from wheels (`pip install --target`), made once per set;
    the wheels come from the host's wheel cache, else from the package index into it."""
    version = ".".join(map(str, sys.version_info[:2]))
    key = hashlib.sha256("\n".join([version, *sorted(requirements)]).encode()).hexdigest()[:16]
    folder = harness_cache() / "build-envs" / key
    with locked_beside(folder):
        if (folder / MARKER).is_file():
            return folder / "site"
        shutil.rmtree(folder, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=folder.parent))
        try:
            _install(requirements, staging / "site")
            (staging / MARKER).write_text(json.dumps({"python": version, "requirements": requirements}))
            staging.rename(folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder / "site"


def _install(requirements: list[str], target: Path) -> None:
    """Installs from the wheel cache alone; where it lacks a wheel, fetches them first and tries again."""
    if not requirements:  # a backend that needs nothing (in-tree, standard library only)
        target.mkdir(parents=True)
        return
    wheels = harness_cache() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    binary = ["--only-binary", ":all:", "--find-links", str(wheels)]
    install = [*pip, "install", *binary, "--no-index", "--target", str(target), *requirements]
    if subprocess.run(install, capture_output=True, text=True).returncode == 0:
        return
    fetched = subprocess.run(
        [*pip, "download", *binary, "--dest", str(wheels), *requirements], capture_output=True, text=True
    )
    shutil.rmtree(target, ignore_errors=True)
    done = subprocess.run(install, capture_output=True, text=True) if fetched.returncode == 0 else fetched
    if done.returncode != 0:
        error = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or ["pip failed"]
        raise MetadataError(f"the build requirements {', '.join(requirements)}: {error[0]}")
