"""Harbor task folders imported as a task suite.

    harness tasks import harbor DIR --out SUITE

A Harbor task folder holds instruction.md (the problem statement), task.toml (timeouts, resources,
metadata), environment/Dockerfile (the machine the agent works in), tests/test.sh (the verifier, run
once the agent is done; it writes the reward to /logs/verifier/reward.txt or reward.json) and,
optionally, solution/solve.sh (the reference solution). DIR is one such folder or a folder of them.

How a Harbor task becomes a harness task:
- The image is built from environment/Dockerfile, offline, with `HARNESS_LINES` appended: the files of
  the image's working directory are the task's repository; the agent works on a writable copy at /repo,
  which the old path leads to; /tests and /logs lead into /tmp/harbor, since the sandbox's root is
  read-only.
- The repository is copied out of the built image into SUITE/repos/TASK (without any .git) and
  materialized as a single commit, like every suite's.
- tests/ become the verifier's files, written to /tests at grading only: never in the image, never in
  the agent's copy. The verifier's reward is the task's.
- The gold patch is what solution/solve.sh changes in the working directory (run as root, in an image
  build on top of the task's image).
- [agent].timeout_sec is the episode's wall time, [verifier].timeout_sec the grading timeout,
  [verifier].env the verifier's environment. The harness's own sandbox limits apply, without network.

Building needs the Docker daemon (`Images`); the bwrap backend refuses to run these tasks.
"""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
import tomllib
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tasks.importing import ImportProblem, ImportReport, Skipped, write_task_folder
from tasks.model import TASK_ID, Limits, Verifier
from tasks.patches import diff_trees
from tasks.suite import TaskError, TaskFile, image_tag, validation_problems

VERIFIER = Verifier(command="bash /tests/test.sh", reward_dir="/logs/verifier")
SETUP = "mkdir -p /tmp/harbor/tests /tmp/harbor/logs/verifier"
"""Makes what /tests and /logs lead to, on the fresh /tmp of each sandbox."""
HARNESS_LINES = """
# ---- added by `harness tasks import harbor` ----
# The working directory's files are the task's repository: the harness keeps them at /opt/pristine and
# gives the agent a writable copy at /repo, which the old path leads to. The sandbox's root is
# read-only, so /tests and /logs lead into /tmp/harbor, which the task's setup command makes.
USER root
RUN set -e; w="$(pwd)"; \\
    case "$w" in /|/opt|/opt/*|/tmp|/tmp/*|/run|/run/*|/tests|/tests/*|/logs|/logs/*) \\
      echo "harness: the working directory $w cannot hold the task's repository; set WORKDIR" >&2; \\
      exit 1;; \\
    esac; \\
    rm -rf /opt/pristine; mkdir -p /opt/pristine /opt/harness /run; cp -a "$w"/. /opt/pristine/; \\
    if [ "$w" != /repo ]; then cd /; rm -rf "$w"; ln -s /repo "$w"; fi; \\
    mkdir -p /repo; rm -rf /tests /logs; ln -s /tmp/harbor/tests /tests; ln -s /tmp/harbor/logs /logs
WORKDIR /repo
USER 1000:1000
ENTRYPOINT ["python3", "-I", "/opt/harness/executor.py"]
CMD []
"""


class Images(Protocol):
    """Builds and reads Docker images (envs.docker.DockerImages). Failures raise RuntimeError."""

    def build(self, tag: str, context: Path, timeout_s: float) -> None: ...

    def export(self, tag: str, path: str, dest: Path) -> None: ...

    def remove(self, tag: str) -> None: ...


class HarborInfo(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    description: str = ""
    authors: list[dict[str, Any]] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class HarborVerifier(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timeout_sec: float = Field(default=600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    network_mode: str | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


class HarborAgent(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timeout_sec: float | None = Field(default=None, gt=0)
    user: str | int | None = None
    network_mode: str | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


class HarborEnvironment(BaseModel):
    model_config = ConfigDict(extra="ignore")

    build_timeout_sec: float = Field(default=600.0, gt=0)
    docker_image: str | None = None
    """A prebuilt image; used (from the local daemon) when there is no Dockerfile."""
    cpus: int = 1
    memory_mb: int = 2048
    storage_mb: int = 10240
    memory: str | None = None
    storage: str | None = None
    gpus: int = 0
    gpu_types: list[str] | None = None
    allow_internet: bool = True
    network_mode: str | None = None
    allowed_hosts: list[str] = Field(default_factory=list)
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: str | None = None
    healthcheck: dict[str, Any] | None = None


class HarborSolution(BaseModel):
    model_config = ConfigDict(extra="ignore")

    env: dict[str, str] = Field(default_factory=dict)


class HarborConfig(BaseModel):
    """A task.toml, in Harbor's schema (1.0 and 1.1).

    Harbor's schema grows from release to release and Harbor itself ignores keys it does not know, so
    unknown keys are ignored here too rather than refused; the import names them in a warning
    (`unknown_keys`), so a typo does not pass unseen.
    """

    model_config = ConfigDict(extra="ignore")

    version: str | None = None
    """The schema version under its 1.0 name; not used."""
    schema_version: str | None = None
    """The schema version (1.1 on); not used."""
    task: HarborInfo | None = None
    """[task]: the package's name, description, authors and keywords; the name is the imported task's
    title (without it, the folder's name)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """[metadata]: free-form (author, difficulty, tags); not used."""
    verifier: HarborVerifier = Field(default_factory=HarborVerifier)
    """[verifier]: `timeout_sec` is the grading timeout, `env` the verifier's environment variables."""
    agent: HarborAgent = Field(default_factory=HarborAgent)
    """[agent]: `timeout_sec` is the episode's wall time (without it, `Limits`' default of 1800 s)."""
    environment: HarborEnvironment = Field(default_factory=HarborEnvironment)
    """[environment]: `docker_image` (when there is no Dockerfile) and `build_timeout_sec` are used; the
    harness's own sandbox limits apply instead of the resources asked for."""
    solution: HarborSolution = Field(default_factory=HarborSolution)
    """[solution]: `env`, the environment variables solution/solve.sh runs with to make the gold patch."""
    source: str | None = None
    """A top-level `source` key of task.toml; not used."""


SECTIONS: dict[str, type[BaseModel]] = {
    "task": HarborInfo,
    "verifier": HarborVerifier,
    "agent": HarborAgent,
    "environment": HarborEnvironment,
    "solution": HarborSolution,
}


def unknown_keys(raw: dict[str, Any]) -> list[str]:
    """The keys of a task.toml that HarborConfig does not know, as section.key."""
    unknown = [key for key in raw if key not in HarborConfig.model_fields]
    for name, model in SECTIONS.items():
        section = raw.get(name)
        if isinstance(section, dict):
            unknown += [f"{name}.{key}" for key in section if key not in model.model_fields]
    return unknown


class HarborTask(BaseModel):
    """A Harbor task folder, read and checked."""

    model_config = ConfigDict(extra="forbid")

    id: str
    folder: Path
    config: HarborConfig
    unknown_keys: list[str]
    """Keys of task.toml the harness does not know (ignored)."""
    instruction: str
    dockerfile: str
    tests: dict[str, str]
    """Path under tests/ -> content."""
    has_solution: bool


def import_harbor(root: Path, out: Path, images: Images | None) -> ImportReport:
    """Imports every Harbor task folder of `root` into the suite `out` (`images` None: no Docker)."""
    report = ImportReport(suite=out)
    for folder in task_folders(root):
        try:
            task = read_task(folder)
            if images is None:
                raise ImportProblem(
                    "building environment/Dockerfile needs the Docker daemon, which does not answer"
                )
            warnings = import_task(task, out, images)
        except ImportProblem as e:
            report.skipped.append(Skipped(source=str(folder), task_id=folder.name, reason=str(e)))
            continue
        report.imported.append(task.id)
        report.warnings += [f"{task.id}: {w}" for w in warnings]
    return report


def task_folders(root: Path) -> list[Path]:
    """`root` when it is a task folder (it has task.toml), else its sub-folders that look like one."""
    if not root.is_dir():
        raise TaskError(f"{root}: not a folder")
    if (root / "task.toml").is_file():
        return [root]
    found = [
        p
        for p in sorted(root.iterdir())
        if p.is_dir() and any((p / name).exists() for name in ("task.toml", "instruction.md", "tests"))
    ]
    if not found:
        raise TaskError(
            f"{root}: no Harbor task folder (task.toml, instruction.md, environment/, tests/) in it"
        )
    return found


def read_task(folder: Path) -> HarborTask:
    if not re.match(TASK_ID, folder.name):
        raise ImportProblem(f"folder name {folder.name!r} is no task id (letters, digits, _ . -)")
    config, unknown = _read_config(folder / "task.toml")
    if (folder / "steps").is_dir():
        raise ImportProblem("multi-step tasks (steps/) are not supported")
    instruction = _read_text(folder / "instruction.md").strip()
    if not instruction:
        raise ImportProblem("instruction.md is empty")
    return HarborTask(
        id=folder.name,
        folder=folder,
        config=config,
        unknown_keys=unknown,
        instruction=instruction,
        dockerfile=_dockerfile(folder, config),
        tests=_tests(folder / "tests"),
        has_solution=(folder / "solution" / "solve.sh").is_file(),
    )


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise ImportProblem(f"no {path.name}")
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ImportProblem(f"{path.name}: {e}") from e


def _read_config(path: Path) -> tuple[HarborConfig, list[str]]:
    try:
        raw = tomllib.loads(_read_text(path))
    except tomllib.TOMLDecodeError as e:
        raise ImportProblem(f"task.toml: not valid TOML: {e}") from e
    try:
        return HarborConfig.model_validate(raw), unknown_keys(raw)
    except ValidationError as e:
        raise ImportProblem(f"task.toml: {validation_problems(e)}") from e


def _dockerfile(folder: Path, config: HarborConfig) -> str:
    environment = folder / "environment"
    if (environment / "Dockerfile").is_file():
        return _read_text(environment / "Dockerfile")
    if any((environment / name).is_file() for name in ("docker-compose.yaml", "docker-compose.yml")):
        raise ImportProblem("environment/docker-compose.yaml: only a Dockerfile environment is supported")
    if config.environment.docker_image:
        return f"FROM {config.environment.docker_image}\n"
    raise ImportProblem("no environment/Dockerfile and no [environment] docker_image")


def _tests(tests: Path) -> dict[str, str]:
    if not (tests / "test.sh").is_file():
        raise ImportProblem("no tests/test.sh")
    found = {}
    for f in sorted(tests.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            try:
                found[str(f.relative_to(tests))] = f.read_bytes().decode("utf-8")
            except UnicodeDecodeError as e:
                raise ImportProblem(
                    f"tests/{f.relative_to(tests)} is not UTF-8 text: verifier files must be"
                ) from e
    return found


def import_task(task: HarborTask, out: Path, images: Images) -> list[str]:
    """Builds the task's image, copies its repository out, derives the gold patch, writes the task."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".harbor-{task.id}-", dir=out) as tmp:
        environment = Path(tmp) / "environment"
        _stage_environment(task, environment)
        tag = image_tag(task.id, environment)
        repo = Path(tmp) / "repo"
        try:
            images.build(tag, environment, task.config.environment.build_timeout_sec)
            images.export(tag, "/opt/pristine", repo)
        except RuntimeError as e:
            raise ImportProblem(str(e)) from e
        shutil.rmtree(repo / ".git", ignore_errors=True)  # the agent's history starts at its base
        warnings = _warnings(task.config)
        if task.unknown_keys:
            warnings.append(f"task.toml: unknown keys, ignored: {', '.join(task.unknown_keys)}")
        gold = None
        if task.has_solution:
            gold, problem = _solve(task, tag, repo, Path(tmp), images)
            if problem:
                warnings.append(problem)
        target = out / "repos" / task.id
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        repo.rename(target)
        files: dict[str, str | bytes] = {
            f"environment/{f.relative_to(environment)}": f.read_bytes()
            for f in sorted(environment.rglob("*"))
            if f.is_file()
        }
        files.update({f"verifier/tests/{name}": text for name, text in task.tests.items()})
        if gold:
            files["gold.patch"] = gold
        write_task_folder(out, task.id, _task_file(task, gold is not None), files)
    return warnings


def _stage_environment(task: HarborTask, dest: Path) -> None:
    """The build context: environment/ as it is, with the harness's lines appended to the Dockerfile."""
    source = task.folder / "environment"
    if source.is_dir():
        shutil.copytree(source, dest, symlinks=True)
    else:
        dest.mkdir()
    dockerfile = task.dockerfile if task.dockerfile.endswith("\n") else task.dockerfile + "\n"
    (dest / "Dockerfile").write_text(dockerfile + HARNESS_LINES)


def _solve(
    task: HarborTask, tag: str, repo: Path, tmp: Path, images: Images
) -> tuple[str | None, str | None]:
    """The gold patch: what solution/solve.sh changes, run in an image build on top of the task's image."""
    context = tmp / "solve"
    shutil.copytree(task.folder / "solution", context / "solution", symlinks=True)
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in task.config.solution.env.items())
    (context / "Dockerfile").write_text(
        f"FROM {tag}\nUSER root\nCOPY solution/ /solution/\n"
        "RUN set -e; rm -rf /repo; cp -a /opt/pristine /repo; cd /repo; "
        f"env {env} bash /solution/solve.sh\n"
    )
    solved_tag = f"{tag}-solved"
    solved = tmp / "solved"
    try:
        images.build(solved_tag, context, task.config.environment.build_timeout_sec)
        images.export(solved_tag, "/repo", solved)
    except RuntimeError as e:
        return None, f"solution/solve.sh failed, so there is no gold patch: {str(e)[-1500:]}"
    finally:
        images.remove(solved_tag)
    gold = diff_trees(repo, solved)
    if not gold.strip():
        return None, "solution/solve.sh changes nothing in the working directory: no gold patch"
    return gold, None


def _task_file(task: HarborTask, has_gold: bool) -> TaskFile:
    config = task.config
    limits = Limits(grade_timeout_s=config.verifier.timeout_sec)
    if config.agent.timeout_sec is not None:
        limits.wall_time_s = config.agent.timeout_sec
    return TaskFile(
        title=config.task.name if config.task else task.id,
        repo=task.id,
        problem_statement=task.instruction,
        setup_commands=[SETUP],
        verifier=VERIFIER.model_copy(update={"env": config.verifier.env}),
        gold_patch="gold.patch" if has_gold else None,
        image_build="environment",
        limits=limits,
    )


def _warnings(config: HarborConfig) -> list[str]:
    """Settings of task.toml the harness does not apply, where that may change the result."""
    unapplied = []
    if config.environment.gpus:
        unapplied.append("environment.gpus (sandboxes have no GPU)")
    if "allow_internet" in config.environment.model_fields_set and config.environment.allow_internet:
        unapplied.append("environment.allow_internet (sandboxes have no network)")
    for section, model in (("agent", config.agent), ("verifier", config.verifier)):
        if model.user is not None:
            unapplied.append(f"{section}.user (everything runs as uid 1000)")
    for name in ("env", "mcp_servers", "healthcheck"):
        if name in config.environment.model_fields_set:
            unapplied.append(f"environment.{name}")
    return [f"task.toml sets {', '.join(unapplied)}: not applied"] if unapplied else []
