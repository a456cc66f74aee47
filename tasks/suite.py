"""Task suites: a folder of task folders, loaded by name (built-in) or by path.

A suite folder:

    SUITE/
      repos/NAME/                the repositories, in their correct (fixed) state
      TASK_ID/task.yaml          a `TaskFile`
      TASK_ID/hidden/...         hidden test files, by repository path
      TASK_ID/verifier/...       optional: files of the task's verifier, by absolute sandbox path
      TASK_ID/gold.patch         optional; else the gold patch is the inverse of the task's `bug` edits

Each task's base repository is materialized once into a cache folder as a git repository with a single
commit (the repository with the task's `bug` edits applied, or a git repository cut at `base_commit`),
so the agent's copy has no object newer than its base.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tasks.canaries import load_canaries
from tasks.computed import load_computed
from tasks.environment import Environment
from tasks.model import LANGUAGE, TASK_ID, HiddenTests, Limits, Task, Verifier, check_judge
from tasks.patches import NOISE, SAFE_GIT_CONFIG, commit_tree, diff_trees, git, safe_git_env

BUILTIN_SUITES = Path(__file__).with_name("suites")


class TaskError(ValueError):
    """A task file that cannot be used; the message names the file and the field."""


class BugEdit(BaseModel):
    """One exact replacement that turns the correct repository into the task's start state."""

    model_config = ConfigDict(extra="forbid")

    path: str
    old: str = Field(min_length=1)
    new: str
    count: int = Field(default=1, ge=1)
    """How many times `old` must occur in the file (all are replaced)."""

    @field_validator("path")
    @classmethod
    def _inside_the_repository(cls, path: str) -> str:
        if not stays_inside(path):
            raise ValueError(f"{path!r} is not a path inside the repository")
        return path


class TaskFile(BaseModel):
    """The content of a task.yaml."""

    model_config = ConfigDict(extra="forbid")

    title: str
    repo: str
    """A folder under the suite's `repos/`, or a path relative to the task folder."""
    base_commit: str | None = None
    """When `repo` is a git repository: the commit the task starts from."""
    bug: list[BugEdit] = Field(default_factory=list)
    problem_statement: str
    setup_commands: list[str] = Field(default_factory=list)
    environment: Environment | None = None
    """What the code and tests need installed (`harness env build --suite` builds it); `tasks import`
    writes what the repository declares."""
    language: str = Field(default="python", pattern=LANGUAGE)
    """The language of its code and tests (`Task.language`)."""
    test_command: str = "python3 -m pytest -q"
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    verifier: Verifier | None = None
    """Instead of test ids: a script whose reward decides the grade (its files also come from `verifier/`)."""
    gold_patch: str | None = None
    """A patch file relative to the task folder."""
    image: str | None = None
    image_build: str | None = None
    """A folder relative to the task folder with a Dockerfile that builds the image (named from its content
    unless `image` is given)."""
    limits: Limits = Field(default_factory=Limits)
    tools: list[str] | None = None

    @model_validator(mode="after")
    def _one_judge(self) -> TaskFile:
        check_judge(self.fail_to_pass, self.pass_to_pass, self.verifier is not None)
        return self


def cache_root() -> Path:
    base = os.environ.get("HARNESS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "harness"
    )
    return Path(base) / "tasks"


def suite_path(name_or_path: str) -> Path:
    builtin = BUILTIN_SUITES / name_or_path
    if "/" not in name_or_path and builtin.is_dir():
        return builtin
    path = Path(name_or_path)
    if not path.is_dir():
        known = ", ".join(sorted(p.name for p in BUILTIN_SUITES.iterdir() if p.is_dir()))
        raise TaskError(f"suite {name_or_path!r}: not a built-in suite ({known}) nor a folder")
    return path


def load_suite(name_or_path: str) -> list[Task]:
    """Every task of a suite, sorted by id, with its base repository materialized."""
    root = suite_path(name_or_path)
    task_dirs = sorted(p for p in root.iterdir() if (p / "task.yaml").is_file())
    if not task_dirs:
        raise TaskError(f"suite {root}: no TASK/task.yaml inside")
    return [load_task(d, root) for d in task_dirs]


def validation_problems(error: ValidationError) -> str:
    """Each problem of a parse on one line: `field.path: message; ...`."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in error.errors())


def load_task(task_dir: Path, suite_root: Path) -> Task:
    path = task_dir / "task.yaml"
    if not re.match(TASK_ID, task_dir.name):
        raise TaskError(f"{task_dir}: the folder's name is the task's id, and {task_dir.name!r} is not "
                        "one (letters, digits, _ . -, starting with a letter or digit)")  # fmt: skip
    try:
        with path.open("rb") as f:  # bytes: YAML's reader names the file and what is not UTF-8 in it
            raw = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise TaskError(f"{path}: not valid YAML: {e}") from e
    try:
        spec = TaskFile.model_validate(raw)
    except ValidationError as e:
        raise TaskError(f"{path}: {validation_problems(e)}") from e

    source = suite_root / "repos" / spec.repo
    if not source.is_dir():
        source = (task_dir / spec.repo).resolve()
    if not source.is_dir():
        raise TaskError(f"{path}: repo: no folder {spec.repo!r} under {suite_root / 'repos'} or {task_dir}")
    hidden = _folder_files(task_dir / "hidden")
    verifier = None
    if spec.verifier is not None:
        found = {f"/{name}": text for name, text in _folder_files(task_dir / "verifier").items()}
        verifier = spec.verifier.model_copy(update={"files": {**spec.verifier.files, **found}})
    image, image_build = spec.image, None
    if spec.image_build is not None:
        image_build = (task_dir / spec.image_build).resolve()
        if not (image_build / "Dockerfile").is_file():
            raise TaskError(f"{path}: image_build: no Dockerfile in {image_build}")
        image = image or image_tag(task_dir.name, image_build)
    base, commit, inverse = materialize(task_dir.name, source, spec, path)
    gold = inverse
    if spec.gold_patch is not None:
        gold_file = task_dir / spec.gold_patch
        if not gold_file.is_file():
            raise TaskError(f"{path}: gold_patch: no file {gold_file}")
        gold = gold_file.read_text()
    return Task(
        id=task_dir.name,
        title=spec.title,
        repo=base,
        repo_name=spec.repo,
        base_commit=commit,
        problem_statement=spec.problem_statement,
        setup_commands=spec.setup_commands,
        environment=spec.environment,
        language=spec.language,
        test_command=spec.test_command,
        hidden_tests=HiddenTests(
            files=hidden,
            fail_to_pass=spec.fail_to_pass,
            pass_to_pass=spec.pass_to_pass,
            verifier=verifier,
            canaries=load_canaries(task_dir),
            computed=load_computed(task_dir),
        ),
        folder=task_dir,
        gold_patch=gold,
        image=image,
        image_build=image_build,
        limits=spec.limits,
        tools=spec.tools,
    )


def _folder_files(root: Path) -> dict[str, str]:
    """Relative path -> text of every file under `root` (none when it does not exist)."""
    found = {}
    for f in sorted(root.rglob("*")):
        if not f.is_file() or "__pycache__" in f.parts:
            continue
        if not f.resolve().is_relative_to(root.resolve()):
            raise TaskError(f"{f}: a link to {f.resolve()}, outside {root}: task files must be inside it")
        try:
            found[str(f.relative_to(root))] = f.read_bytes().decode()
        except UnicodeDecodeError as e:
            raise TaskError(f"{f}: not UTF-8 text ({e.reason} at byte {e.start}): task files must be") from e
    return found


def image_tag(task_id: str, context: Path) -> str:
    """The name of the image a task's build context makes: a new context content, a new name."""
    h = hashlib.sha256()
    for f in sorted(context.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(context)).encode() + b"\0" + f.read_bytes() + b"\0")
    name = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")  # what Docker allows in a name
    return f"harness-task/{name}:{h.hexdigest()[:16]}"


def _fingerprint(source: Path, spec: TaskFile) -> str:
    h = hashlib.sha256(spec.model_dump_json(include={"bug", "base_commit"}).encode())
    if spec.base_commit is None:
        for f in sorted(source.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and ".git" not in f.relative_to(source).parts:
                h.update(str(f.relative_to(source)).encode() + b"\0" + f.read_bytes() + b"\0")
    else:
        h.update(str(source.resolve()).encode())
    return h.hexdigest()[:16]


def materialize(task_id: str, source: Path, spec: TaskFile, path: Path) -> tuple[Path, str, str | None]:
    """The task's base repository in the cache, its commit id, and the inverse of its bug edits."""
    target = cache_root() / f"{task_id}-{_fingerprint(source, spec)}"
    repo = target / "repo"
    if not (target / "done").is_file():
        _build_base(task_id, source, spec, path, target)
    inverse_file = target / "inverse.patch"
    return repo, (target / "commit").read_text(), inverse_file.read_text() if inverse_file.exists() else None


def _build_base(task_id: str, source: Path, spec: TaskFile, path: Path, target: Path) -> None:
    """Builds the base repository in a temporary folder, then renames it to `target` (atomic)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{task_id}-", dir=target.parent))
    try:
        tree = work / "repo"
        if spec.base_commit is not None:
            export_commit(source, spec.base_commit, tree)
        else:
            noise = [pattern.rstrip("/") for pattern in NOISE]
            try:
                shutil.copytree(source, tree, ignore=shutil.ignore_patterns(".git", *noise))
            except OSError as e:  # shutil.Error holds one (source, target, why) per file it could not copy
                why = e.args[0][0][2] if isinstance(e, shutil.Error) else str(e)
                raise TaskError(f"{path}: repo: cannot copy {source}: {why}") from e
        for i, edit in enumerate(spec.bug):
            target_file = tree / edit.path
            if not target_file.is_file():
                raise TaskError(f"{path}: bug.{i}.path: no file {edit.path!r} in repo {spec.repo!r}")
            text = target_file.read_text()
            found = text.count(edit.old)
            if found != edit.count:
                raise TaskError(
                    f"{path}: bug.{i}.old: found {found} times in {edit.path}, expected {edit.count}"
                )
            target_file.write_text(text.replace(edit.old, edit.new))
        inverse = diff_trees(tree, source) if spec.bug else None
        commit = commit_tree(tree)
        (work / "commit").write_text(commit)
        if inverse is not None:
            (work / "inverse.patch").write_text(inverse)
        (work / "done").write_text("")
        try:
            work.rename(target)
        except OSError:  # another process materialized it first
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def export_commit(source: Path, commit: str, dest: Path) -> None:
    """Writes the files of `commit` of the git repository `source` into the new folder `dest`, byte for
    byte: unlike `git archive`, no .gitattributes rule (export-ignore, export-subst, eol) changes them."""
    listing = git(["-C", str(source), "ls-tree", "-r", "-z", "--full-tree", f"{commit}^{{commit}}"])
    entries: list[tuple[str, str, str]] = []  # (mode, object id, path)
    for record in listing.split(b"\0"):
        if record:
            meta, _, raw_path = record.partition(b"\t")
            mode, _kind, sha = meta.decode().split()
            entries.append((mode, sha, _safe_tree_path(os.fsdecode(raw_path), source, commit)))
    dest.mkdir(parents=True)
    blobs = [(mode, sha, p) for mode, sha, p in entries if mode != "160000"]
    for mode, _sha, p in entries:
        if mode == "160000":  # a submodule: git checks out an empty folder for it
            (dest / p).mkdir(parents=True, exist_ok=True)
    for (mode, _sha, p), data in zip(blobs, _read_blobs(source, [sha for _, sha, _ in blobs]), strict=True):
        target = dest / p
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            target.symlink_to(os.fsdecode(data))
        else:
            target.write_bytes(data)
            target.chmod(0o755 if mode == "100755" else 0o644)


def _safe_tree_path(path: str, source: Path, commit: str) -> str:
    if not stays_inside(path):
        raise TaskError(f"{source}: commit {commit} holds a path git would refuse to check out: {path!r}")
    return path


def stays_inside(path: str) -> bool:
    """Whether the relative path `path` names something inside its folder (and outside any .git)."""
    parts = path.split("/")
    return not path.startswith("/") and not any(p in ("", ".", "..") or p.lower() == ".git" for p in parts)


def _read_blobs(source: Path, shas: list[str]) -> Iterator[bytes]:
    """The contents of the given blobs, in order, from one `git cat-file --batch`."""
    with tempfile.TemporaryFile() as wanted:
        wanted.write("".join(f"{sha}\n" for sha in shas).encode())
        wanted.seek(0)
        proc = subprocess.Popen(
            ["git", *SAFE_GIT_CONFIG, "-C", str(source), "cat-file", "--batch"],
            stdin=wanted,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=safe_git_env("/nonexistent"),
        )
    out = proc.stdout
    if out is None:  # never: stdout is a pipe
        raise TaskError(f"{source}: git cat-file gave no output")
    try:
        for sha in shas:
            header = out.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                raise TaskError(f"{source}: cannot read object {sha}: {b' '.join(header).decode()}")
            yield out.read(int(header[2]))
            out.read(1)  # the newline after each object
    finally:
        out.close()
        proc.kill()
        proc.wait()
