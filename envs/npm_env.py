"""A JavaScript task's npm packages: a `node_modules` built on the host from the repository's lock file, once
per lock, and placed outside /repo at `/node_modules`, where Node's resolution (`require` and `import`
alike) finds it from every file of /repo after the repository's own folders.

The build is the only step with network: `npm ci --ignore-scripts` on a copy of the repository's
`package.json` and `package-lock.json` alone (no `.npmrc`, no script of the repository or of a package
runs), from the host's npm cache and its registry, into the harness's cache folder, keyed by the hash of
both files. A repository without a lock file (most older packages keep none in git) has one resolved from
its package.json alone in that folder first (`npm install --package-lock-only --ignore-scripts`: the
newest versions its ranges allow when the folder is made, then kept), keyed by package.json's hash and
recorded as resolved in the folder's marker. Nothing of it is in /repo, so nothing of it is in the agent's
diff, and the judge drops a `node_modules` or a lock file the agent writes.

- bwrap: the folder, bound read-only at /node_modules (`SandboxConfig.node_modules`).
- docker: an image `harness-npm:KEY` on the task's image with the folder copied to /node_modules, built
  offline like any task image.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from envs.python_env import MARKER, EnvBuildError, harness_cache, locked_beside
from tasks.model import Task

NODE_MODULES = "/node_modules"
"""Where a task's packages are in its sandbox: the root's `node_modules`, the last folder Node looks in."""
LOCK = "package-lock.json"
NPM_TIMEOUT_S = 900.0
"""The most one `npm ci` may take."""
DOCKERFILE = """\
FROM {base}
USER root
COPY node_modules/ /node_modules/
USER 1000:1000
"""


def declares_packages(repo: Path) -> bool:
    """Whether `repo`'s package.json names packages (`dependencies` or `devDependencies`)."""
    manifest = repo / "package.json"
    if not manifest.is_file():
        return False
    try:
        data = json.loads(manifest.read_text())
    except json.JSONDecodeError as e:
        raise EnvBuildError(f"{manifest}: not valid JSON: {e}") from e
    return isinstance(data, dict) and bool(data.get("dependencies") or data.get("devDependencies"))


def needs_npm(task: Task) -> bool:
    """Whether `task` runs with npm packages: a JavaScript task whose package.json names some."""
    return task.language == "javascript" and declares_packages(task.repo)


def npm_key(repo: Path) -> str:
    """The hash of the repository's package.json and lock file (package.json's alone, marked so, where it
    has no lock file: npm resolves one)."""
    digest = hashlib.sha256()
    for name in locked_files(repo):
        digest.update((repo / name).read_bytes() + b"\0")
    if not (repo / LOCK).is_file():
        digest.update(b"resolved by npm install --package-lock-only\0")
    return digest.hexdigest()[:16]


def locked_files(repo: Path) -> tuple[str, ...]:
    """The files of `repo` the packages are installed from: package.json and its lock file where it has one."""
    return ("package.json", LOCK) if (repo / LOCK).is_file() else ("package.json",)


def npm_dir(repo: Path) -> Path:
    return harness_cache() / "envs" / f"npm-{npm_key(repo)}"


def build_node_modules(repo: Path, quiet: bool = True, timeout: float = NPM_TIMEOUT_S) -> Path:
    """The `node_modules` of `repo`'s lock file (made once), in a folder of the harness's cache; npm ends
    within `timeout` seconds."""
    folder = npm_dir(repo)
    with locked_beside(folder):
        if (folder / MARKER).is_file():
            return folder / "node_modules"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        names = locked_files(repo)
        for name in names:
            shutil.copyfile(repo / name, folder / name)
        started = time.monotonic()
        if LOCK not in names:
            _npm(folder, ["install", "--package-lock-only"], quiet, timeout)
        _npm(folder, ["ci"], quiet, timeout - (time.monotonic() - started))
        listed = sorted(p.name for p in (folder / "node_modules").iterdir() if not p.name.startswith("."))
        record = {
            "repo": str(repo),
            "lock": npm_key(repo),
            "resolved": LOCK not in names,
            "top_level": listed,
        }
        (folder / MARKER).write_text(json.dumps(record, indent=1))
    return folder / "node_modules"


def _npm(folder: Path, verb: list[str], quiet: bool, left: float) -> None:
    """`npm ci` (or `npm install --package-lock-only`: a lock file resolved from package.json) in `folder`:
    the lock file's packages, no lifecycle script, the user's npm settings and cache but none of the
    repository's; `quiet`: only npm's errors, captured for the EnvBuildError that quotes them."""
    npm = shutil.which("npm")
    if npm is None:
        raise EnvBuildError("npm is not installed on the host: it builds JavaScript tasks' node_modules")
    if left <= 0:
        raise EnvBuildError(f"npm {verb[0]}: no time left in {folder}")
    command = [npm, *verb, "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline"]
    env = {k: v for k, v in os.environ.items() if not k.lower().startswith("npm_config_")}
    try:
        done = subprocess.run(
            [*command, *(["--loglevel=error"] if quiet else [])],
            cwd=folder,
            env=env,
            capture_output=quiet,
            text=True,
            timeout=left,
        )
    except subprocess.TimeoutExpired as e:
        raise EnvBuildError(f"npm {verb[0]} did not end within {left:.0f} s in {folder}") from e
    if done.returncode != 0:
        raise EnvBuildError(f"npm {verb[0]} failed in {folder}: {(done.stderr or '').strip()[-1500:]}")


def docker_npm_image(repo: Path, base_image: str, timeout: float = NPM_TIMEOUT_S) -> tuple[str, Path]:
    """(image name, build context) of `repo`'s packages on `base_image`: the context holds a copy of the
    built `node_modules` (hard links) and its Dockerfile, made once."""
    modules = build_node_modules(repo, timeout=timeout)
    key = hashlib.sha256(f"{npm_key(repo)}\n{base_image}".encode()).hexdigest()[:16]
    context = harness_cache() / "envs" / f"docker-npm-{key}"
    with locked_beside(context):
        if not (context / MARKER).is_file():
            shutil.rmtree(context, ignore_errors=True)
            context.mkdir(parents=True)
            shutil.copytree(modules, context / "node_modules", symlinks=True, copy_function=os.link)
            (context / "Dockerfile").write_text(DOCKERFILE.format(base=base_image))
            (context / MARKER).write_text(json.dumps({"lock": npm_key(repo), "base_image": base_image}))
    return f"harness-npm:{key}", context
