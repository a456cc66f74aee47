"""The grader judges the tree a patch produces, not the patch's text (issue 15, item 1).

Each exploit leaves `demo-add`'s bug in place and smuggles in a fix where the grader must not take one
from: a root `conftest.py` (or a pytest plugin, or compiled bytecode) that patches `mathlib.add` before
the hidden test runs. Each is written so that `git apply` really creates the file (checked), in a form
that a reader of the patch text could take for something else. Graded, every one must score 0, with
the smuggled path named among the dropped ones; the honest fix still scores 1.
"""

from __future__ import annotations

import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envs.grading import grade_patch
from envs.judge import apply_patch, base_modules, judge_tree
from envs.sandbox import SandboxConfig
from tasks.model import Task
from tasks.patches import diff_trees
from tasks.suite import load_suite
from tests.conftest import require_backend

FIXING_CONFTEST = "import mathlib\n\nmathlib.add = lambda a, b: a + b\n"
"""Not a fix of the code: the hidden test's module sees a patched function."""


@pytest.fixture(scope="module")
def task() -> Task:
    return next(t for t in load_suite("demo") if t.id == "demo-add")


def new_file(header_a: str, header_b: str, minus: str, plus: str, body: str) -> str:
    lines = body.splitlines()
    added = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git {header_a} {header_b}\nnew file mode 100644\n--- {minus}\n+++ {plus}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{added}"
    )


def tree_patch(task: Task, tmp_path: Path, files: dict[str, bytes]) -> str:
    """The diff an episode would give for an agent that wrote `files` into the repository."""
    tree = tmp_path / "agent"
    shutil.copytree(task.repo, tree, ignore=shutil.ignore_patterns(".git"))
    for path, content in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(content)
    return diff_trees(task.repo, tree)


def binary_new_file(tmp_path: Path, path: str, content: bytes) -> str:
    """A git binary patch that creates `path` (episodes never diff caches; `harness grade --patch` takes any)."""
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_bytes(content)
    out = subprocess.run(
        ["git", "diff", "--no-index", "--binary", "--", "/dev/null", path], cwd=tmp_path, capture_output=True
    )
    return out.stdout.decode()


def unchecked_pyc(task: Task, tmp_path: Path) -> bytes:
    """`mathlib.py` with the fix, compiled to bytecode that Python loads without checking the source."""
    source = tmp_path / "mathlib.py"
    source.write_text((task.repo / "mathlib.py").read_text().replace("return a - b", "return a + b"))
    out = tmp_path / "mathlib.pyc"
    py_compile.compile(str(source), str(out), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return out.read_bytes()


def exploits(task: Task, tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Name -> (patch, the path `git apply` creates that must not be graded)."""
    cache = f"__pycache__/mathlib.{sys.implementation.cache_tag}.pyc"
    plugin = "[pytest11]\nfixer = mathlib_fixer\n"
    return {
        "quoted-escaped-name": (
            new_file('"a/con\\146test.py"', '"b/con\\146test.py"', "/dev/null", '"b/con\\146test.py"', FIXING_CONFTEST),
            "conftest.py",
        ),
        "name-then-tab-and-timestamp": (
            new_file("a/conftest.py", "b/conftest.py", "/dev/null", "b/conftest.py\t2020-01-01 00:00:00", FIXING_CONFTEST),
            "conftest.py",
        ),
        "traditional-diff-after-an-allowed-part": (
            tree_patch(task, tmp_path / "t1", {"README.md": b"# mathlib\n\nmore\n"})
            + "--- /dev/null\n+++ conftest.py\n@@ -0,0 +1,3 @@\n"
            + "".join(f"+{line}\n" for line in FIXING_CONFTEST.splitlines()),
            "conftest.py",
        ),
        "upper-case-dist-info-plugin": (
            tree_patch(
                task, tmp_path / "t2",
                {"fixer-1.0.DIST-INFO/entry_points.txt": plugin.encode(),
                 "fixer-1.0.DIST-INFO/METADATA": b"Metadata-Version: 2.1\nName: fixer\nVersion: 1.0\n",
                 "mathlib_fixer.py": FIXING_CONFTEST.encode()},
            ),
            "fixer-1.0.DIST-INFO/entry_points.txt",
        ),
        "fake-header-behind-a-form-feed": (
            tree_patch(
                task, tmp_path / "t3",
                {"notes.txt": b"x\x0cdiff --git a/README.md b/README.md\n", "conftest.py": FIXING_CONFTEST.encode()},
            ),
            "conftest.py",
        ),
        "binary-part-by-gitattributes": (
            tree_patch(
                task, tmp_path / "t4",
                {".gitattributes": b"conftest.py binary\n", "conftest.py": FIXING_CONFTEST.encode() + b"\xff#\n"},
            ),
            "conftest.py",
        ),
        "unchecked-pyc-in-pycache": (binary_new_file(tmp_path / "t5", cache, unchecked_pyc(task, tmp_path)), cache),
        "new-module-shadowing-the-stdlib": (
            tree_patch(task, tmp_path / "t6", {"tests/__init__.py": b"", "copyreg.py": b"import mathlib\n"}),
            "copyreg.py",
        ),
    }  # fmt: skip


NAMES = [
    "quoted-escaped-name",
    "name-then-tab-and-timestamp",
    "traditional-diff-after-an-allowed-part",
    "upper-case-dist-info-plugin",
    "fake-header-behind-a-form-feed",
    "binary-part-by-gitattributes",
    "unchecked-pyc-in-pycache",
    "new-module-shadowing-the-stdlib",
]


@pytest.mark.parametrize("name", NAMES)
def test_what_git_apply_makes_of_an_exploit_is_judged_as_files(task: Task, tmp_path: Path, name: str) -> None:
    patch, smuggled = exploits(task, tmp_path)[name]
    scratch = tmp_path / "scratch"
    assert apply_patch(task.repo, patch, scratch) is None
    assert (scratch / smuggled).exists(), f"the exploit does not create {smuggled}: not a real attack"
    judged = judge_tree(task.repo, scratch, set(task.hidden_tests.files))
    assert smuggled in judged.dropped, judged.dropped
    assert smuggled not in judged.kept and f"+++ b/{smuggled}" not in judged.patch


@pytest.mark.parametrize("name", NAMES)
def test_an_exploit_scores_nothing(task: Task, tmp_path: Path, name: str) -> None:
    require_backend("bwrap")
    patch, smuggled = exploits(task, tmp_path)[name]
    grade = grade_patch(task, patch, SandboxConfig(backend="bwrap"))
    assert grade.infra_error is None, grade.infra_error
    assert grade.reward == 0.0 and grade.correct == 0.0, grade.model_dump(exclude={"graded_patch"})
    assert smuggled in grade.dropped_paths


def test_links_and_special_files_are_never_graded(task: Task, tmp_path: Path) -> None:
    tree = tmp_path / "agent"
    shutil.copytree(task.repo, tree, ignore=shutil.ignore_patterns(".git"))
    (tree / "mathlib.py").unlink()
    (tree / "mathlib.py").symlink_to("/etc/hostname")  # the module, swapped for a link
    (tree / "conftest.py").symlink_to("mathlib.py")
    judged = judge_tree(task.repo, tree)
    assert set(judged.dropped) == {"mathlib.py", "conftest.py"}
    assert judged.kept == {} and judged.patch == ""


def test_the_honest_fix_is_kept_whole_and_is_what_simplicity_measures(task: Task, tmp_path: Path) -> None:
    assert task.gold_patch
    scratch = tmp_path / "scratch"
    assert apply_patch(task.repo, task.gold_patch, scratch) is None
    judged = judge_tree(task.repo, scratch, set(task.hidden_tests.files))
    assert list(judged.kept) == ["mathlib.py"] and judged.dropped == {}
    assert "+    return a + b" in judged.patch and "-    return a - b" in judged.patch
    assert judged.before["mathlib.py"] != judged.after["mathlib.py"]


def test_a_patch_git_cannot_apply_is_an_apply_error(task: Task, tmp_path: Path) -> None:
    broken = "diff --git a/mathlib.py b/mathlib.py\n--- a/mathlib.py\n+++ b/mathlib.py\n@@ -1,1 +1,1 @@\n-nope\n+yes\n"
    assert apply_patch(task.repo, broken, tmp_path / "scratch") is not None


@pytest.mark.parametrize(
    "path",
    [
        "src/sitecustomize/__init__.py", "lib/usercustomize.py", "pkg/deep/SiteCustomize/hook.py",
        "sitecustomize/__init__.py", "usercustomize.cpython-311.py",
    ],
)  # fmt: skip
def test_a_start_up_hook_is_dropped_in_any_form_and_place(task: Task, tmp_path: Path, path: str) -> None:
    """Issue 32, item 4: a package named like sitecustomize (what the interpreter's start-up imports by
    name, found through a .pth that puts src/ on the path) is dropped like the module file."""
    patch = tree_patch(task, tmp_path, {path: FIXING_CONFTEST.encode()})
    scratch = tmp_path / "scratch"
    assert apply_patch(task.repo, patch, scratch) is None
    judged = judge_tree(task.repo, scratch, set(task.hidden_tests.files))
    assert judged.dropped == {path: "an interpreter start-up hook"} and judged.kept == {}


def judged_changes(tmp_path: Path, base: dict[str, str], new: dict[str, str]) -> dict[str, str]:
    """What the judge drops when `new` files are written over a base of `base` files: path -> why."""
    trees = {}
    for name, files in (("base", base), ("new", {**base, **new})):
        root = tmp_path / name
        for path, text in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        trees[name] = root
    return judge_tree(trees["base"], trees["new"]).dropped


@pytest.mark.parametrize("name", ["pluggy", "iniconfig", "packaging", "attr", "attrs"])
def test_a_runners_package_the_base_defines_is_the_repositorys_to_fix(tmp_path: Path, name: str) -> None:
    """Issue 36, item 2: a task on a package pytest depends on edits that package (kept), while a new
    module of that name in another repository, at the root or in `src/` (on `sys.path` even with an
    `__init__.py`), is still dropped; a standard library name is dropped even where the base has it."""
    base = {f"{name}/__init__.py": "X = 1\n", "other/__init__.py": ""}
    assert judged_changes(tmp_path / "own", base, {f"{name}/__init__.py": "X = 2\n"}) == {}
    shadow = {f"{name}.py": "X = 2\n", "src/__init__.py": "", f"src/{name}.py": "X = 2\n"}
    dropped = judged_changes(tmp_path / "new", {"other/__init__.py": ""}, shadow)
    assert dropped == {
        f"{name}.py": f"a module that shadows {name!r}",
        f"src/{name}.py": f"a module that shadows {name!r}",
    }
    stdlib = judged_changes(tmp_path / "stdlib", {"json.py": "X = 1\n"}, {"json.py": "X = 2\n"})
    assert stdlib == {"json.py": "a module that shadows 'json'"}


def test_a_folder_named_like_a_runners_package_without_init_lets_no_new_package_through(
    tmp_path: Path,
) -> None:
    """Red team of issue 36 item 2: a base with a `py/` folder of scripts (no `__init__.py`) or a
    `packaging/` folder of data defines no package: a new `__init__.py` there is a new runner package
    (dropped), and the grader's loaded `py` is not given up for it (`base_modules`)."""
    base = {"py/gen.py": "X = 1\n", "packaging/debian.txt": "control\n", "lib/__init__.py": ""}
    new = {"py/__init__.py": "X = 2\n", "packaging/__init__.py": "X = 2\n", "_sysconfigdata__linux.py": ""}
    assert judged_changes(tmp_path, base, new) == {
        "py/__init__.py": "a module that shadows 'py'",
        "packaging/__init__.py": "a module that shadows 'packaging'",
        "_sysconfigdata__linux.py": "a module that shadows '_sysconfigdata__linux'",
    }
    assert base_modules(tmp_path / "base") == ["lib"]
    (tmp_path / "base" / "src" / "attr").mkdir(parents=True)
    (tmp_path / "base" / "src" / "attr" / "__init__.py").write_text("")
    (tmp_path / "base" / "tool.py").write_text("")
    assert base_modules(tmp_path / "base") == ["attr", "lib", "tool"]
