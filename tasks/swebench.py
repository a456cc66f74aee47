"""SWE-bench instances (JSON lines in SWE-bench's own field layout) imported as a task suite.

    harness tasks import swebench FILE --repos DIR --out SUITE

Each instance's repository comes from DIR, a folder of local clones or mirrors named `owner__name` or
`owner/name` (clusters are often offline). The suite keeps a mirror of each in SUITE/repos/owner__name;
the agent's copy is materialized from `base_commit` as a fresh single commit, so no later object is
reachable from it. `patch` is the gold patch. `test_patch`, applied to the base, gives the hidden tests:
the files it touches, whole, written over the repository at grading only. FAIL_TO_PASS and PASS_TO_PASS
are the JSON-encoded lists of test ids SWE-bench uses (pytest node ids for most repositories), kept as
given. An instance that cannot be imported is reported with the reason; the others go on.

Multilingual datasets come in the same way (`tasks/multilingual.py`): SWE-bench Multilingual's rows as
they are, Multi-SWE-bench's rewritten in these fields. A task's language is the row's `language`, else the
one the gold patch's files are written in; its test ids are placed in the files that hold them
(`FILE::NAME`, as the language's plug-in names a test), and its `run_tests` command is the language's.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from tasks.environment import Environment, EnvironmentReader, static_environment
from tasks.importing import ImportProblem, ImportReport, Skipped, relative_path, write_task_folder
from tasks.model import TASK_ID
from tasks.multilingual import PYTHON, LanguageSupport, multi_swe_bench_row, place_ids, tests_by_file
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
    language: str | None = None
    """The code's language as the dataset names it (`js`, `ts`, `go`, ...; Multi-SWE-bench has it), or
    None: read off the gold patch's files."""

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
    language: str | None = None
    """The code's language where the row names none (`go`, `rust`, ...); unset: read off the gold patch."""

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
    support: LanguageSupport | None = None,
) -> ImportReport:
    """Imports every instance of `file` into the suite `out`; the report names each one left out. With a
    `reader` (the build backend's, `envs/build_metadata.py`, or the static parse of `tasks/environment.py`),
    a task whose repository declares requirements, a src/ layout or a generated version file gets that
    environment, for `harness env build --suite` to build; the report says how each was read. `support`
    knows the languages besides Python (`envs.languages.import_support`); without it every task is
    Python's."""
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
            warnings, how = import_instance(instance, repos, out, env, reader, support)
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
    found = multi_swe_bench_row(row).get("instance_id") if isinstance(row, dict) else None
    return found if isinstance(found, str) else None


def parse_instance(line: str) -> SweBenchInstance:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise ImportProblem(f"not a JSON object: {e}") from e
    if not isinstance(row, dict):
        raise ImportProblem(f"not a JSON object but a {type(row).__name__}")
    try:
        return SweBenchInstance.model_validate(multi_swe_bench_row(row))
    except ValidationError as e:
        raise ImportProblem(validation_problems(e)) from e


def import_instance(
    instance: SweBenchInstance,
    repos: Path,
    out: Path,
    env: InstanceEnvironment,
    reader: EnvironmentReader | None = static_environment,
    support: LanguageSupport | None = None,
) -> tuple[list[str], str | None]:
    """Writes one task folder; returns warnings about it and how its environment was read (None: not
    read). Raises ImportProblem when it cannot be used."""
    support = support or LanguageSupport()
    try:
        paths = [p for f in split_patch(instance.patch) for p in f.paths]
        language = support.language(instance.language or env.language, paths)
    except ValueError as e:
        raise ImportProblem(str(e)) from e
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
        if language == PYTHON:
            environment, how, f2p, p2p, warnings = _python_part(instance, tree, hidden, reader)
        else:
            environment, how = None, None
            f2p, p2p, warnings = _placed_ids(instance, tree, hidden, support, language)
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
        language=language,
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        gold_patch="gold.patch",
        image=_image(env.image, instance, slug),
    )
    if env.test_command or language in support.test_command:
        spec.test_command = env.test_command or support.test_command[language]
    files: dict[str, str | bytes] = {f"hidden/{path}": text for path, text in hidden.items()}
    files["gold.patch"] = instance.patch
    write_task_folder(out, instance.instance_id, spec, files)
    return warnings, how


def _python_part(
    instance: SweBenchInstance, tree: Path, hidden: dict[str, str], reader: EnvironmentReader | None
) -> tuple[Environment | None, str | None, list[str], list[str], list[str]]:
    """A Python task's environment (as `reader` reads the tree), its ids as given, and the warnings."""
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
    return environment, how, instance.FAIL_TO_PASS, instance.PASS_TO_PASS, warnings


def _placed_ids(
    instance: SweBenchInstance, tree: Path, hidden: dict[str, str], support: LanguageSupport, language: str
) -> tuple[list[str], list[str], list[str]]:
    """FAIL_TO_PASS and PASS_TO_PASS placed in the files that hold them (`place_ids`), and the warnings;
    an ImportProblem when no FAIL_TO_PASS id is found in any test file."""
    is_test = support.is_test[language]
    own = {
        p.relative_to(tree).as_posix(): p
        for p in tree.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(tree).parts and is_test(p.relative_to(tree).as_posix())
    }
    texts = {path: f.read_bytes().decode("utf-8", "replace") for path, f in own.items()}
    placed = place_ids(
        instance.FAIL_TO_PASS,
        instance.PASS_TO_PASS,
        tests_by_file(hidden, texts, support.tests_in[language], is_test),
    )
    if not placed.fail_to_pass:
        example = instance.FAIL_TO_PASS[0]
        raise ImportProblem(
            f"no FAIL_TO_PASS id names a {language} test in the test files (e.g. {example!r})"
        )
    warnings = []
    if placed.unplaced:
        warnings.append(
            f"{len(placed.unplaced)} test ids name no {language} test in any test file, left out: "
            f"{', '.join(placed.unplaced[:3])}"
        )
    if placed.ambiguous:
        warnings.append(
            f"{len(placed.ambiguous)} test ids name a test of several files (the hidden one, else the first, "
            f"taken): {', '.join(placed.ambiguous[:3])}"
        )
    return placed.fail_to_pass, placed.pass_to_pass, warnings


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
