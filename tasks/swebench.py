"""SWE-bench instances (JSON lines in SWE-bench's own field layout) imported as a task suite.

    harness tasks import swebench FILE --repos DIR --out SUITE

Each instance's repository comes from DIR, a folder of local clones or mirrors named `owner__name` or
`owner/name` (clusters are often offline). The suite keeps a mirror of each in SUITE/repos/owner__name;
the agent's copy is materialized from `base_commit` as a fresh single commit, so no later object is
reachable from it. `patch` is the gold patch. `test_patch`, applied to the base, gives the hidden tests:
the files it touches, whole, written over the repository at grading only. FAIL_TO_PASS and PASS_TO_PASS
are the JSON-encoded lists of test ids SWE-bench uses (pytest node ids for most repositories), kept as
given. An instance that cannot be imported is reported with the reason; the others go on.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from tasks.environment import EnvironmentReader, static_environment
from tasks.importing import ImportProblem, ImportReport, Skipped, relative_path, write_task_folder
from tasks.model import TASK_ID
from tasks.patches import filter_patch, git, split_patch
from tasks.suite import TaskError, TaskFile, export_commit, validation_problems


class SweBenchInstance(BaseModel):
    """One SWE-bench instance."""

    # Datasets built on SWE-bench add columns of their own (difficulty, meta, text, image_assets, ...).
    # None of them changes how a task is built or graded, so unknown keys are ignored, not refused.
    model_config = ConfigDict(extra="ignore")

    instance_id: str = Field(pattern=TASK_ID)
    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    """The GitHub repository, owner/name."""
    base_commit: str = Field(pattern=r"^[0-9a-fA-F]{7,64}$")
    patch: str = Field(min_length=1)
    """The gold patch."""
    test_patch: str = Field(min_length=1)
    """The tests that judge the fix; hidden from the agent."""
    problem_statement: str = Field(min_length=1)
    FAIL_TO_PASS: list[str] = Field(min_length=1)
    """Test ids that fail at the base and pass with the gold patch (a JSON-encoded list)."""
    PASS_TO_PASS: list[str]
    """Test ids that pass before and after (a JSON-encoded list)."""
    hints_text: str | None = None
    created_at: str | None = None
    version: str | float | None = None
    environment_setup_commit: str | None = None

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _decode_json_list(cls, value: object) -> object:
        """SWE-bench stores the lists as JSON text; datasets that store real lists are taken as they are."""
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a JSON-encoded list of test ids: {e}") from e


class InstanceEnvironment(BaseModel):
    """How an instance's sandbox is made and its visible tests run; unset fields keep the defaults."""

    model_config = ConfigDict(extra="forbid")

    image: str | None = None
    """Docker image; `{instance_id}`, `{repo}` (owner__name) and `{version}` are filled in."""
    setup_commands: list[str] | None = None
    """Shell commands run in the sandbox before the agent starts and before grading."""
    test_command: str | None = None
    """The command of the agent's run_tests tool."""

    def over(self, defaults: InstanceEnvironment) -> InstanceEnvironment:
        return defaults.model_copy(update=self.model_dump(exclude_none=True))


def load_environments(path: Path) -> dict[str, InstanceEnvironment]:
    """A YAML or JSON mapping: instance id -> InstanceEnvironment."""
    try:
        raw = yaml.safe_load(path.read_text())
        return TypeAdapter(dict[str, InstanceEnvironment]).validate_python(raw)
    except (OSError, yaml.YAMLError) as e:
        raise TaskError(f"--environments {path}: {e}") from e
    except ValidationError as e:
        raise TaskError(f"--environments {path}: {validation_problems(e)}") from e


def import_swebench(
    file: Path,
    repos: Path,
    out: Path,
    defaults: InstanceEnvironment | None = None,
    environments: dict[str, InstanceEnvironment] | None = None,
    reader: EnvironmentReader | None = static_environment,
) -> ImportReport:
    """Imports every instance of `file` into the suite `out`; the report names each one left out. With a
    `reader` (the build backend's, `envs/build_metadata.py`, or the static parse of `tasks/environment.py`),
    a task whose repository declares requirements, a src/ layout or a generated version file gets that
    environment, for `harness env build --suite` to build; the report says how each was read."""
    if not repos.is_dir():
        raise TaskError(f"--repos {repos}: not a folder")
    try:
        lines = file.read_bytes().split(b"\n")  # not splitlines(): JSON strings may hold U+2028 and the like
    except OSError as e:
        raise TaskError(f"{file}: {e}") from e
    defaults = defaults or InstanceEnvironment()
    environments = environments or {}
    report = ImportReport(suite=out)
    for number, raw in enumerate(lines, 1):
        try:
            line = raw.decode()
        except UnicodeDecodeError as e:
            reason = f"not UTF-8 text ({e.reason} at byte {e.start})"
            report.skipped.append(Skipped(source=f"{file}:{number}", task_id=None, reason=reason))
            continue
        if not line.strip():
            continue
        task_id = _instance_id(line)
        try:
            instance = parse_instance(line)
            if instance.instance_id in report.imported:
                raise ImportProblem("instance_id: the same as an earlier line's")
            env = environments.get(instance.instance_id, InstanceEnvironment()).over(defaults)
            warnings, how = import_instance(instance, repos, out, env, reader)
        except ImportProblem as e:
            report.skipped.append(Skipped(source=f"{file}:{number}", task_id=task_id, reason=str(e)))
            continue
        report.imported.append(instance.instance_id)
        if how is not None:
            report.environments[instance.instance_id] = how
        report.warnings += [f"{instance.instance_id}: {w}" for w in warnings]
    return report


def _instance_id(line: str) -> str | None:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    found = row.get("instance_id") if isinstance(row, dict) else None
    return found if isinstance(found, str) else None


def parse_instance(line: str) -> SweBenchInstance:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise ImportProblem(f"not a JSON object: {e}") from e
    if not isinstance(row, dict):
        raise ImportProblem(f"not a JSON object but a {type(row).__name__}")
    try:
        return SweBenchInstance.model_validate(row)
    except ValidationError as e:
        raise ImportProblem(validation_problems(e)) from e


def import_instance(
    instance: SweBenchInstance,
    repos: Path,
    out: Path,
    env: InstanceEnvironment,
    reader: EnvironmentReader | None = static_environment,
) -> tuple[list[str], str | None]:
    """Writes one task folder; returns warnings about it and how its environment was read (None: not
    read). Raises ImportProblem when it cannot be used."""
    slug = instance.repo.replace("/", "__")
    mirror = ensure_mirror(find_clone(repos, instance.repo), out / "repos" / slug)
    base = resolve_commit(mirror, instance.base_commit)
    with tempfile.TemporaryDirectory(prefix="harness-swebench-") as tmp:
        tree = Path(tmp) / "base"
        try:
            export_commit(mirror, base, tree)
            git(["init", "-q", str(tree)])  # `git apply` then works here, not in a repository above
            check_applies(tree, instance.patch, "patch")
            hidden = apply_test_patch(tree, instance.test_patch)
        except (TaskError, RuntimeError) as e:  # git failed on this repository or commit
            raise ImportProblem(str(e)) from e
        try:
            environment, how = reader(tree) if reader is not None else (None, None)
        except ValueError as e:  # a pyproject.toml that is not TOML
            raise ImportProblem(f"the repository's declarations: {e}") from e
        unknown = [
            test_id
            for test_id in instance.FAIL_TO_PASS + instance.PASS_TO_PASS
            if test_id.split("::", 1)[0] not in hidden and not (tree / test_id.split("::", 1)[0]).is_file()
        ]
    warnings = []
    if unknown:
        warnings.append(
            f"{len(unknown)} test ids name no test file (FILE::NAME, pytest's node ids), e.g. {unknown[0]!r}: "
            "the grader runs pytest and counts them as missing"
        )
    dropped = filter_patch(instance.patch)[1]
    if dropped:
        warnings.append(f"the gold patch changes {', '.join(dropped)}, which the grader drops (test paths)")
    spec = TaskFile(
        title=instance.instance_id,
        repo=slug,
        base_commit=base,
        problem_statement=instance.problem_statement,
        setup_commands=env.setup_commands or [],
        environment=environment if environment and environment.needed() else None,
        fail_to_pass=instance.FAIL_TO_PASS,
        pass_to_pass=instance.PASS_TO_PASS,
        gold_patch="gold.patch",
        image=_image(env.image, instance, slug),
    )
    if env.test_command:
        spec.test_command = env.test_command
    files: dict[str, str | bytes] = {f"hidden/{path}": text for path, text in hidden.items()}
    files["gold.patch"] = instance.patch
    write_task_folder(out, instance.instance_id, spec, files)
    return warnings, how


def _image(template: str | None, instance: SweBenchInstance, slug: str) -> str | None:
    if template is None:
        return None
    fields = {"instance_id": instance.instance_id, "repo": slug, "version": str(instance.version or "")}
    try:
        return template.format_map(fields)
    except (KeyError, ValueError, IndexError) as e:
        raise ImportProblem(
            f"image {template!r}: only {{instance_id}}, {{repo}}, {{version}} are filled in"
        ) from e


def find_clone(repos: Path, repo: str) -> Path:
    """The local clone or mirror of `repo` (owner/name) in `repos`."""
    owner, name = repo.split("/")
    candidates = [repos / f"{owner}__{name}", repos / owner / name]
    for path in candidates:
        if (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir()):
            return path
    raise ImportProblem(f"repo {repo!r}: no git clone at {candidates[0]} nor at {candidates[1]}")


def ensure_mirror(source: Path, mirror: Path) -> Path:
    """The suite's own mirror of `source` (made once; objects are hard links where the disk allows)."""
    if mirror.exists():
        return mirror
    mirror.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{mirror.name}-", dir=mirror.parent))
    try:
        git(["clone", "--mirror", "--quiet", str(source.resolve()), str(work / "git")])
        (work / "git").rename(mirror)
    except RuntimeError as e:
        raise ImportProblem(f"cannot mirror {source}: {_git_message(e)}") from e
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return mirror


def resolve_commit(mirror: Path, commit: str) -> str:
    """The full id of `commit` in `mirror`; a clone that gained commits since the mirror was made is
    fetched again first."""
    revision = ["-C", str(mirror), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"]
    for fetch_first in (False, True):
        try:
            if fetch_first:
                git(["-C", str(mirror), "fetch", "--quiet", "--prune", "origin"])
            return git(revision).decode().strip()
        except RuntimeError:
            continue
    source = git(["-C", str(mirror), "config", "--get", "remote.origin.url"]).decode().strip()
    raise ImportProblem(f"base_commit {commit}: not in the clone {source} (reachable from none of its refs)")


def check_applies(tree: Path, patch: str, field: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".patch") as f:
        f.write(patch)
        f.flush()
        try:
            git(["apply", "--check", "--whitespace=nowarn", f.name], cwd=tree)
        except RuntimeError as e:
            raise ImportProblem(f"{field} does not apply at base_commit: {_git_message(e)}") from e


def apply_test_patch(tree: Path, test_patch: str) -> dict[str, str]:
    """Applies the test patch to `tree`; returns the hidden tests: path -> the whole new content."""
    parts = split_patch(test_patch)
    if not parts:
        raise ImportProblem("test_patch: no `diff --git` file headers")
    check_applies(tree, test_patch, "test_patch")
    with tempfile.NamedTemporaryFile("w", suffix=".patch") as f:
        f.write(test_patch)
        f.flush()
        git(["apply", "--whitespace=nowarn", f.name], cwd=tree)
    hidden = {}
    for part in parts:
        if part.new_path is None:
            raise ImportProblem(
                f"test_patch deletes {part.old_path}: hidden tests can only add or change files"
            )
        path = relative_path(part.new_path)
        try:
            hidden[path] = (tree / path).read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise ImportProblem(f"test_patch: {path} is not UTF-8 text: hidden tests must be text") from e
    return hidden


def _git_message(error: RuntimeError) -> str:
    """git's own message, on one line."""
    return "; ".join(line.strip() for line in str(error).split(": ", 1)[-1].splitlines() if line.strip())
