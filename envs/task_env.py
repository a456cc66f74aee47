"""A task's own Python environment (`tasks/environment.py`), built once per set of requirements.

The build is the only step with network: the requirements and the sandbox's own (`python_env.REQUIREMENTS`:
the sandbox image's pytest) are resolved and fetched on the host into a wheel cache (`pip wheel`), then
installed from it with no index (`--no-index`), and what was installed is recorded (`harness-env.json`).
The repository's own project is made importable from /repo (its `src/` or its root) by a path file, and
known to importlib.metadata by a small dist-info, as an editable install makes it, without running its
build backend: nothing of the environment is in /repo, so nothing of it is in the agent's diff.

- bwrap: a virtual environment on the host, bound read-only where it lives (as `python_env` is).
- docker: an image `harness-env:KEY` on the task's image: a virtual environment at /opt/harness-env, first
  on PATH, whose packages the host installed into the build context; built offline like any task image.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from envs.npm_env import NPM_TIMEOUT_S, docker_npm_image, needs_npm
from envs.python_env import MARKER, REQUIREMENTS, EnvBuildError, harness_cache, locked_beside
from envs.sandbox import SandboxError
from tasks.environment import Environment
from tasks.model import Task

PROJECT_PTH = "~harness-project.pth"
"""The path file that puts the project's folder of /repo on sys.path; named to come after every other path
file of the environment (Python reads them in name order), so that none of their import lines can find a
module the agent wrote there."""
DOCKER_PREFIX = "/opt/harness-env"
"""Where the environment lives in a Docker image."""
DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
USER root
COPY site/ /opt/harness-env/site/
RUN python3 -m venv --without-pip /opt/harness-env \\
 && /opt/harness-env/bin/python3 -c "import pathlib, site; \\
pathlib.Path(site.getsitepackages()[0], 'harness-env.pth').write_text(open('/opt/harness-env/site/paths').read())"
ENV PATH=/opt/harness-env/bin:/usr/local/bin:/usr/bin:/bin
USER 1000:1000
"""
"""The image of a task's environment: a virtual environment with no system packages, whose path file adds
the packages the host installed as a site folder (their own path files read, as on bwrap), then the
repository's own folder."""


def env_key(environment: Environment, base_image: str = "") -> str:
    """One key per Python, sandbox requirements, task environment (and, for Docker, base image)."""
    fields = [sys.base_prefix, *REQUIREMENTS, environment.model_dump_json(), base_image]
    return hashlib.sha256("\n".join(fields).encode()).hexdigest()[:16]


_deadline: ContextVar[float | None] = ContextVar("build_deadline", default=None)
_wheels_only: ContextVar[bool] = ContextVar("wheels_only", default=False)


@contextmanager
def build_deadline(seconds: float, wheels_only: bool = False) -> Iterator[None]:
    """Within it, this thread's builds (pip, the engine's image builds) end by `seconds` from now, and with
    `wheels_only` pip takes wheels only (`--only-binary :all:`), never running a source distribution's
    build code (a sandbox server's builds, unless its `build_sdists` is on)."""
    tokens = _deadline.set(time.monotonic() + seconds), _wheels_only.set(wheels_only)
    try:
        yield
    finally:
        _deadline.reset(tokens[0])
        _wheels_only.reset(tokens[1])


def build_time_left(default: float) -> float:
    """The most a build step may take now: `default`, or less within a `build_deadline`; EnvBuildError
    where it is past."""
    deadline = _deadline.get()
    if deadline is None:
        return default
    left = deadline - time.monotonic()
    if left <= 0:
        raise EnvBuildError("the build ran past its time (a sandbox server's maxima.build_s)")
    return min(default, left)


def _pip(args: list[str], quiet: bool, before: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """pip with `args`, run from an empty folder of its own: a requirement is never read as a file lying in
    the working folder (an archive named like a project)."""
    binary = ["--only-binary", ":all:"] if _wheels_only.get() and args[0] in ("wheel", "install") else []
    command = [
        sys.executable,
        "-m",
        "pip",
        "--disable-pip-version-check",
        *before,
        *args[:1],
        *binary,
        *args[1:],
    ]
    left = build_time_left(float("inf"))
    with tempfile.TemporaryDirectory(prefix="harness-pip-") as empty:
        try:
            return subprocess.run(
                command,
                capture_output=quiet,
                text=True,
                cwd=empty,
                timeout=None if left == float("inf") else left,
            )
        except subprocess.TimeoutExpired as e:  # pip is killed
            raise EnvBuildError(f"pip {args[0]} did not end within the build's time ({left:.0f} s)") from e


def requirements_of(environment: Environment) -> list[str]:
    return [*REQUIREMENTS, *environment.requirements]


def fetch_wheels(requirements: list[str], quiet: bool) -> Path:
    """Resolves `requirements` on the host and puts a wheel of each, their dependencies included, in the
    wheel cache (from the package index, or pip's configured mirror); returns the cache's folder."""
    wheels = harness_cache() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    done = _pip(
        [
            "wheel",
            "--wheel-dir",
            str(wheels),
            "--find-links",
            str(wheels),
            *(["-q"] if quiet else []),
            *requirements,
        ],
        quiet,
    )
    if done.returncode != 0:
        tail = (done.stderr or "").strip()[-1500:]
        raise EnvBuildError(f"pip could not fetch {' '.join(requirements)}: {tail}")
    return wheels


def _install(wheels: Path, requirements: list[str], where: list[str], quiet: bool) -> None:
    """Installs from the wheel cache alone (no index) into `where`: pip's `--python VENV_PYTHON` (a global
    option) or `--target FOLDER` (an option of install)."""
    python, target = (where, []) if where[0] == "--python" else ([], where)
    args = ["install", "--no-index", "--find-links", str(wheels), *target, *(["-q"] if quiet else [])]
    done = _pip([*args, *requirements], quiet, tuple(python))  # --python comes before the command
    if done.returncode != 0:
        raise EnvBuildError(
            f"pip could not install {' '.join(requirements)}: {(done.stderr or '').strip()[-1500:]}"
        )


def project_files(environment: Environment, site: Path) -> None:
    """The project's dist-info in `site`, so that importlib.metadata knows its name and version."""
    if environment.project is None:
        return
    name = re.sub(r"[-_.]+", "_", environment.project)
    info = site / f"{name}-{environment.version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {environment.project}\nVersion: {environment.version}\n"
    )
    (info / "INSTALLER").write_text("harness\n")
    (info / "RECORD").write_text("")


def repo_path(environment: Environment) -> str:
    """The folder of /repo the project's packages are imported from."""
    return f"/repo/{environment.package_root}".rstrip("/")


def bwrap_env_dir(environment: Environment) -> Path:
    version = ".".join(map(str, sys.version_info[:3]))
    return harness_cache() / "envs" / f"task-py{version}-{env_key(environment)}"


def build_bwrap_env(environment: Environment, quiet: bool = False) -> Path:
    """The virtual environment of `environment` for bubblewrap sandboxes (made once)."""
    folder = bwrap_env_dir(environment)
    with locked_beside(folder):
        if (folder / MARKER).is_file():
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        requirements = requirements_of(environment)
        wheels = fetch_wheels(requirements, quiet)
        venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
        _install(wheels, requirements, ["--python", str(folder / "bin" / "python3")], quiet)
        site = Path(sysconfig.get_path("purelib", vars={"base": str(folder), "platbase": str(folder)}))
        project_files(environment, site)
        (site / PROJECT_PTH).write_text(repo_path(environment) + "\n")
        _record(
            folder, environment, [sys.executable, "-m", "pip", "--python", str(folder / "bin" / "python3")]
        )
    return folder


def docker_env_image(environment: Environment, base_image: str) -> tuple[str, Path]:
    """(image name, build context) of `environment` on `base_image`; the context is the wheel cache's
    packages installed for the image, made once. The image itself is built from it offline when a
    sandbox first needs it (`envs.docker.ensure_image`)."""
    key = env_key(environment, base_image)
    context = harness_cache() / "envs" / f"docker-{key}"
    with locked_beside(context):
        if not (context / MARKER).is_file():
            shutil.rmtree(context, ignore_errors=True)
            requirements = requirements_of(environment)
            wheels = fetch_wheels(requirements, quiet=True)
            site = context / "site"
            _install(wheels, requirements, ["--target", str(site)], quiet=True)
            project_files(environment, site)
            (site / "paths").write_text(
                f"import site; site.addsitedir('{DOCKER_PREFIX}/site')\n{repo_path(environment)}\n"
            )
            (context / "Dockerfile").write_text(DOCKERFILE.replace("${BASE_IMAGE}", base_image, 1))
            _record(context, environment, [sys.executable, "-m", "pip", "--disable-pip-version-check"], site)
    return f"harness-env:{key}", context


def docker_env_ready(environment: Environment, base_image: str) -> bool:
    key = env_key(environment, base_image)
    return (harness_cache() / "envs" / f"docker-{key}" / MARKER).is_file()


def _record(folder: Path, environment: Environment, pip: list[str], target: Path | None = None) -> None:
    """The lock of what was installed, written last: a folder without it is a build that did not end."""
    listed = [*pip, "list", "--format", "freeze", *(["--path", str(target)] if target else [])]
    frozen = subprocess.run(listed, capture_output=True, text=True).stdout.split()
    record = {"environment": environment.model_dump(), "python": sys.base_prefix, "installed": frozen}
    (folder / MARKER).write_text(json.dumps(record, indent=1))


def not_built(task: Task) -> SandboxError:
    return SandboxError(
        f"task {task.id}: its environment is not built: run `harness env build --suite SUITE`"
    )


def image_task_start(
    task: Task, config_image: str, ensure_image: Callable[[str, Path | None], None]
) -> tuple[str | None, Path | None]:
    """(image, build context) of a sandbox of `task` on a backend of images (Docker, Podman): the task's
    own, or, for a task with an environment, the environment's image on it (built from the context when
    the sandbox starts); the environment's context must be made already (`harness env build`). A
    JavaScript task's npm packages (`envs/npm_env.py`) are an image on it too, made here when missing."""
    if task.environment is None and not needs_npm(task):
        return task.image, task.image_build
    base = task.image or config_image
    ensure_image(base, task.image_build if task.image is not None else None)
    if task.environment is None:
        return docker_npm_image(task.repo, base, build_time_left(NPM_TIMEOUT_S))
    if not docker_env_ready(task.environment, base):
        raise not_built(task)
    return docker_env_image(task.environment, base)


def image_environment(
    environment: Environment,
    base_image: str,
    base_build: Path | None,
    ensure_image: Callable[[str, Path | None], None],
) -> str:
    """Builds `environment` as an image on `base_image` (itself built from `base_build` where given)."""
    ensure_image(base_image, base_build)
    image, context = docker_env_image(environment, base_image)
    ensure_image(image, context)
    return image
