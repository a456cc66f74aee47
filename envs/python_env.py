"""The Python environment that task code and tests run with in a bubblewrap sandbox.

A virtual environment on the host, made once by `harness env build` (`make setup` runs it), holding the
pytest that the sandbox image's Debian ships, with the same dependencies: a task is graded by the same
pytest on both backends. It is not the harness's own environment, whose test plugins (anyio with trio,
pytest-timeout) would load into every grading child: a quarter of a grade's CPU went to importing them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from envs.sandbox import SandboxError

REQUIREMENTS = (
    "pytest==7.2.1", "pluggy==1.0.0", "iniconfig==1.1.1", "packaging==23.0", "attrs==22.2.0", "py==1.11.0",
)  # fmt: skip
"""python3-pytest of Debian bookworm (the sandbox image's base) and the packages it brings."""
TRACER = "coverage==7.18.0"
"""coverage.py, for its C line tracer only: synthesis's traced baseline loads the extension module
(`tracer_module`) from a folder of its own, so no grading run, and no repository's import, sees it."""
MARKER = "harness-env.json"
"""Written last: a folder without it is a build that did not finish, and is made again."""


class EnvBuildError(SandboxError):
    """The environment could not be built (no package index, pip failed), or a configured one is not one."""


def harness_cache() -> Path:
    """The harness's cache folder on the host ($XDG_CACHE_HOME/harness, else ~/.cache/harness)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "harness"


@contextmanager
def locked_beside(folder: Path) -> Iterator[None]:
    """An exclusive lock on a file beside `folder`: two processes that make it at once make it once (the
    second finds the first's)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def default_env_dir() -> Path:
    """Where the environment for this Python and these requirements lives: one per pair."""
    version = ".".join(map(str, sys.version_info[:3]))
    key = hashlib.sha256("\n".join([sys.base_prefix, *REQUIREMENTS]).encode()).hexdigest()[:12]
    return harness_cache() / "envs" / f"sandbox-py{version}-{key}"


def is_built(folder: Path) -> bool:
    return (folder / MARKER).is_file() and (folder / "bin" / "python3").exists()


def build_env(folder: Path | None = None, quiet: bool = False) -> Path:
    """Makes the environment (once: a built one is kept) and the tracer beside it (`build_tracer`), and
    returns its folder. Needs the package index, or pip's configured mirror; the lock of what it
    installed is in `harness-env.json`."""
    folder = folder or default_env_dir()
    build_tracer(quiet)
    with locked_beside(folder):
        if is_built(folder):
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
        python = folder / "bin" / "python3"
        pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
        installed = subprocess.run(
            [*pip, "install", "--no-deps", *(["-q"] if quiet else []), *REQUIREMENTS], text=True
        )
        if installed.returncode != 0:
            raise EnvBuildError(f"pip could not install {' '.join(REQUIREMENTS)} into {folder}")
        frozen = subprocess.run([*pip, "freeze"], capture_output=True, text=True, check=True).stdout
        record = {"python": sys.base_prefix, "requirements": list(REQUIREMENTS), "installed": frozen.split()}
        (folder / MARKER).write_text(json.dumps(record, indent=1))
    return folder


def tracer_dir() -> Path:
    """Where `TRACER` is installed for this Python: the sandbox's Python is this one (bwrap) or of the same
    minor version (the Docker image's); a module built for another does not load, and settrace is used."""
    version = "".join(map(str, sys.version_info[:2]))
    return harness_cache() / "tracers" / f"{TRACER.replace('==', '-')}-cp{version}"


def tracer_module() -> Path | None:
    """The C tracer's extension module, where `build_tracer` installed it."""
    if not (tracer_dir() / MARKER).is_file():
        return None
    return next(iter(sorted((tracer_dir() / "coverage").glob("tracer.*.so"))), None)


def build_tracer(quiet: bool = False) -> Path | None:
    """Installs `TRACER` (a binary wheel, nothing built here) into `tracer_dir()` once, and returns its C
    tracer; None, with a warning, where pip cannot: synthesis then traces with `sys.settrace`, slower."""
    folder = tracer_dir()
    with locked_beside(folder):
        if tracer_module() is None:
            shutil.rmtree(folder, ignore_errors=True)
            pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-deps"]
            pip += ["--only-binary=:all:", "--target", str(folder), *(["-q"] if quiet else []), TRACER]
            if subprocess.run(pip, text=True).returncode == 0:
                (folder / MARKER).write_text(json.dumps({"python": sys.base_prefix, "requirement": TRACER}))
    module = tracer_module()
    if module is None:
        warnings.warn(f"pip could not install {TRACER}: synthesis traces with sys.settrace", stacklevel=2)
    return module


_warned: set[Path] = set()


def sandbox_env(configured: Path | None) -> Path | None:
    """The environment a bubblewrap sandbox uses: the configured one, else the built default; None (the
    harness's own environment, with a warning once) where none was built."""
    if configured is not None:
        if not (configured / "bin" / "python3").exists():
            raise EnvBuildError(f"python_env {configured} is not a virtual environment (no bin/python3)")
        return configured
    folder = default_env_dir()
    if is_built(folder):
        return folder
    if folder not in _warned:
        _warned.add(folder)
        warnings.warn(
            "no sandbox environment is built (run `harness env build`): bubblewrap sandboxes run task code"
            " with the harness's own Python environment and its pytest, not the sandbox image's",
            stacklevel=2,
        )
    return None
