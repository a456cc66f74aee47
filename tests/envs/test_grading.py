"""Grading cannot be gamed: exploit patches on built-in tasks score zero alone and never beat the fix."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from envs.grading import RUNNER, collect_patch, grade_patch
from envs.lifecycle import LABEL
from envs.podman import podman
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig
from envs.validation import validate_task
from tasks.canaries import candidates
from tasks.model import HiddenTests, Task
from tasks.patches import diff_trees
from tasks.suite import load_suite
from tests.conftest import BACKENDS, require_backend
from tests.envs.test_cleanup import NOTHING, leftovers
from tests.faults.common import short_dir

FORCE_PASS_CONFTEST = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
"""
SITECUSTOMIZE = """\
import builtins
import _pytest.runner

_pytest.runner.pytest_runtest_call = lambda item: None
builtins.__dict__["__harness_hacked__"] = True
"""


@pytest.fixture(params=[*BACKENDS, "podman"])
def backend(request: pytest.FixtureRequest) -> str:
    """conftest's backends, and podman (here and in the sandbox and escape tests, not in every backend test)."""
    require_backend(request.param)
    return str(request.param)


@pytest.fixture(scope="module")
def builtin_task() -> Task:
    tasks = load_suite("builtin")
    return tasks[0]


def exploit_patch(task: Task, tmp_path: Path, change: Callable[[Path], None], with_fix: bool) -> str:
    """A patch made like an agent makes one: edit a copy of the base repository, then diff it."""
    tree = tmp_path / "agent"
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(task.repo, tree, ignore=shutil.ignore_patterns(".git"))
    if with_fix:
        fixed = grade_gold_tree(task, tmp_path)
        shutil.rmtree(tree)
        shutil.copytree(fixed, tree, ignore=shutil.ignore_patterns(".git"))
    change(tree)
    return diff_trees(task.repo, tree)


def grade_gold_tree(task: Task, tmp_path: Path) -> Path:
    """The base repository with the gold patch applied (by git, on a copy)."""
    fixed = tmp_path / "fixed"
    if not fixed.exists():
        shutil.copytree(task.repo, fixed)
        subprocess.run(["git", "apply", "-"], cwd=fixed, input=(task.gold_patch or "").encode(), check=True)
    return fixed


def first_source_module(tree: Path) -> Path:
    """The repository's package __init__.py, which every test imports."""
    inits = sorted(p for p in tree.glob("*/__init__.py") if p.parent.name not in ("tests", "test"))
    assert inits, f"no package in {tree}"
    return inits[0]


def add_conftest(tree: Path) -> None:
    (tree / "conftest.py").write_text(FORCE_PASS_CONFTEST)
    (tree / "tests").mkdir(exist_ok=True)
    (tree / "tests" / "conftest.py").write_text(FORCE_PASS_CONFTEST)


def delete_tests(tree: Path) -> None:
    shutil.rmtree(tree / "tests", ignore_errors=True)


def empty_tests(tree: Path) -> None:
    for test in (tree / "tests").glob("*.py"):
        test.write_text("")


def plant_hidden_test_paths(task: Task) -> Callable[[Path], None]:
    def plant(tree: Path) -> None:
        for path in task.hidden_tests.files:
            names = {
                i.split("::")[1] for i in task.hidden_tests.fail_to_pass + task.hidden_tests.pass_to_pass
            }
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            (tree / path).write_text(
                "".join(f"def {n.split('[')[0]}():\n    pass\n\n\n" for n in sorted(names))
            )

    return plant


def startup_hooks(tree: Path) -> None:
    (tree / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (tree / "usercustomize.py").write_text(SITECUSTOMIZE)
    (tree / "hack.pth").write_text("import sitecustomize\n")
    package = first_source_module(tree).parent
    (package / "sitecustomize.py").write_text(SITECUSTOMIZE)


def fake_passed_lines(task: Task) -> Callable[[Path], None]:
    def fake(tree: Path) -> None:
        lines = "".join(f"print({i + ' PASSED'!r})\n" for i in task.hidden_tests.fail_to_pass)
        init = first_source_module(tree)
        init.write_text(init.read_text() + lines + "print('==== 99 passed in 0.01s ====')\n")

    return fake


def skip_everything(tree: Path) -> None:
    init = first_source_module(tree)
    init.write_text("import pytest\n\npytest.skip('not today', allow_module_level=True)\n" + init.read_text())
    (tree / "pytest.ini").write_text("[pytest]\naddopts = -p no:python --collect-only\n")


def break_collection(tree: Path) -> None:
    init = first_source_module(tree)
    init.write_text("import os\n\nos._exit(0)\n" + init.read_text())


def tamper_with_report(tree: Path) -> None:
    """Code under test that overwrites any grader report it can find, now and at exit."""
    init = first_source_module(tree)
    init.write_text(
        "import atexit, json, subprocess, sys\n\n"
        "_FAKE = json.dumps({'outcomes': {a: 'passed' for a in sys.argv if '::' in a}})\n"
        "_REPORTS = [a for a in sys.argv if a.endswith('.json')]\n\n"
        "def _forge():\n"
        "    for p in _REPORTS:\n"
        "        open(p, 'w').write(_FAKE)\n\n"
        "_forge()\n"
        "atexit.register(_forge)\n"
        "for p in _REPORTS:\n"
        "    subprocess.Popen(['sh', '-c', 'sleep 0.3; cat > \"$0\"', p], stdin=subprocess.PIPE,"
        " start_new_session=True).stdin.write(_FAKE.encode())\n" + init.read_text()
    )


@pytest.fixture(scope="module")
def honest_reward(builtin_task: Task) -> float:
    grade = grade_patch(builtin_task, builtin_task.gold_patch or "", SandboxConfig(backend="bwrap"))
    assert grade.correct == 1.0, grade
    return grade.reward


def exploits(task: Task) -> dict[str, Callable[[Path], None]]:
    return {
        "conftest_forces_passes": add_conftest,
        "delete_tests": delete_tests,
        "empty_tests": empty_tests,
        "plant_hidden_test_paths": plant_hidden_test_paths(task),
        "startup_hooks": startup_hooks,
        "fake_passed_lines": fake_passed_lines(task),
        "skip_everything": skip_everything,
        "break_collection": break_collection,
        "tamper_with_report": tamper_with_report,
    }


EXPLOITS = [
    "conftest_forces_passes",
    "delete_tests",
    "empty_tests",
    "plant_hidden_test_paths",
    "startup_hooks",
    "fake_passed_lines",
    "skip_everything",
    "break_collection",
    "tamper_with_report",
]


@pytest.mark.parametrize("exploit", EXPLOITS)
def test_exploit_alone_scores_zero_and_never_beats_the_fix(
    exploit: str, builtin_task: Task, honest_reward: float, tmp_path: Path, backend: str
) -> None:
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    change = exploits(builtin_task)[exploit]
    alone = grade_patch(builtin_task, exploit_patch(builtin_task, tmp_path, change, with_fix=False), config)
    assert alone.infra_error is None
    assert alone.correct == 0.0 and alone.reward == 0.0, alone.model_dump()
    combined = grade_patch(builtin_task, exploit_patch(builtin_task, tmp_path, change, with_fix=True), config)
    assert combined.infra_error is None
    assert combined.reward <= honest_reward, combined.model_dump()


def test_test_paths_are_dropped_and_reported(builtin_task: Task, tmp_path: Path) -> None:
    patch = exploit_patch(builtin_task, tmp_path, add_conftest, with_fix=True)
    grade = grade_patch(builtin_task, patch, SandboxConfig(backend="bwrap"))
    assert set(grade.dropped_paths) == {"conftest.py", "tests/conftest.py"}
    assert grade.correct == 1.0


def test_grades_are_deterministic(builtin_task: Task, backend: str) -> None:
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    grades = [grade_patch(builtin_task, builtin_task.gold_patch or "", config) for _ in range(5)]
    dumps = {g.model_dump_json(exclude={"duration_s"}) for g in grades}
    assert len(dumps) == 1
    assert grades[0].correct == 1.0


def test_the_grade_is_returned_while_its_sandbox_closes(
    builtin_task: Task, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grade does not wait for the sandbox's close (a container's stop on Docker), and the close still
    happens."""
    release, closed = threading.Event(), threading.Event()
    close = ExecutorSandbox.close

    def held_close(self: ExecutorSandbox) -> None:
        release.wait(60)
        close(self)
        closed.set()

    monkeypatch.setattr(ExecutorSandbox, "close", held_close)
    grade = grade_patch(builtin_task, builtin_task.gold_patch or "", SandboxConfig(backend=backend))  # type: ignore[arg-type]
    assert grade.correct == 1.0
    assert not closed.is_set()  # returned with the close still held
    release.set()
    assert closed.wait(60)


GRADE_AND_EXIT = """
import json, sys
from pathlib import Path
from envs.grading import grade_patch
from envs.lifecycle import current_owner
from envs.sandbox import SandboxConfig
from tasks.suite import load_suite
task = load_suite("builtin")[0]
config = SandboxConfig(backend=sys.argv[1], state_dir=Path(sys.argv[2]))
grade = grade_patch(task, task.gold_patch, config)
print(json.dumps({"correct": grade.correct, "run": current_owner(config.state_dir, config.expiry_s).run_id}))
"""


def test_a_process_that_exits_right_after_a_grade_leaves_no_sandbox(backend: str) -> None:
    """The interpreter waits at exit for a grading sandbox still closing."""
    state_dir = short_dir("grade-exit-")  # executor sockets live in it
    proc = subprocess.run(
        [sys.executable, "-c", GRADE_AND_EXIT, backend, str(state_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["correct"] == 1.0
    assert leftovers(state_dir, result["run"]) == NOTHING
    if backend == "podman":  # `leftovers` asks Docker for containers
        listed = podman(
            ["ps", "--all", "--filter", f"label={LABEL}={result['run']}", "--format", "{{.Names}}"], 30
        )
        assert listed.returncode == 0 and listed.stdout.split() == [], listed
    shutil.rmtree(state_dir)


def test_a_patch_that_does_not_apply_scores_zero(builtin_task: Task) -> None:
    patch = "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n"
    grade = grade_patch(builtin_task, patch, SandboxConfig(backend="bwrap"))
    assert not grade.patch_applied and grade.apply_error
    assert grade.reward == 0.0 and grade.infra_error is None


def test_collect_patch_sees_only_the_agents_changes(
    builtin_task: Task, make_sandbox: Callable[..., object]
) -> None:
    sandbox = make_sandbox(builtin_task.repo)
    assert collect_patch(sandbox, builtin_task, sandbox.config) == ""  # type: ignore[arg-type]
    sandbox.write_file("NEW.txt", b"hello\n")  # type: ignore[attr-defined]
    patch = collect_patch(sandbox, builtin_task, sandbox.config)  # type: ignore[arg-type]
    assert "b/NEW.txt" in patch and "+hello" in patch


def test_the_agents_repository_has_no_future_objects(
    builtin_task: Task, make_sandbox: Callable[..., object]
) -> None:
    sandbox = make_sandbox(builtin_task.repo)
    log = sandbox.run("git log --all --format=%H | wc -l; git count-objects -v | grep ^count")  # type: ignore[attr-defined]
    commits = int(log.output.split()[0])
    assert commits == 1, log.output
    hidden = sandbox.run("ls " + " ".join(builtin_task.hidden_tests.files))  # type: ignore[attr-defined]
    assert hidden.exit_code != 0, "hidden tests are visible to the agent"


UNITTEST_TEST = """\
from unittest import TestCase

from pkg.calc import add


class AddTests(TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
"""
ADD_FIX = """\
diff --git a/pkg/calc.py b/pkg/calc.py
--- a/pkg/calc.py
+++ b/pkg/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""


def unittest_task(root: Path, test: str) -> Task:
    """A task whose hidden test is a `unittest.TestCase`, on a repository whose `add` subtracts."""
    repo = root / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    hidden = HiddenTests(
        files={"tests/test_add.py": test}, fail_to_pass=["tests/test_add.py::AddTests::test_add"]
    )
    return Task(id="unittest", title="add", repo=repo, problem_statement="add subtracts", hidden_tests=hidden)


def test_a_unittest_testcase_imported_by_name_grades_clean_on_both_backends(
    backend: str, tmp_path: Path
) -> None:
    """pytest 7 (both backends' pytest) sets its fixtures on `unittest.TestCase` when a test module imports
    that by name: this was a false `tampering` finding, every such test an error, the fix worth 0."""
    task = unittest_task(tmp_path, UNITTEST_TEST)
    grade = grade_patch(task, ADD_FIX, SandboxConfig(backend=backend))  # type: ignore[arg-type]
    assert grade.tampering == [] and grade.fail_to_pass == {"tests/test_add.py::AddTests::test_add": "passed"}
    assert grade.correct == 1.0
    forged = ADD_FIX + (
        "diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n+++ b/pkg/__init__.py\n"
        "@@ -0,0 +1,3 @@\n+import unittest\n+\n+unittest.TestCase._UnitTestCase__pytest_class_setup = len\n"
    )
    plain = task.model_copy(  # a module that does not import the name: pytest sets nothing there
        update={"hidden_tests": task.hidden_tests.model_copy(update={"files": {"tests/test_add.py": UNITTEST_TEST.replace(
            "from unittest import TestCase", "import unittest").replace("(TestCase)", "(unittest.TestCase)")}})}
    )  # fmt: skip
    graded = grade_patch(plain, forged, SandboxConfig(backend=backend))  # type: ignore[arg-type]
    assert any("_UnitTestCase__pytest_class_setup" in t for t in graded.tampering), graded.tampering
    assert graded.correct == 0.0


def test_a_hidden_file_that_cannot_be_collected_says_why(backend: str, tmp_path: Path) -> None:
    """Its tests are not just `error`: the grade names the file and pytest's error, and validation adds
    the src/ hint where a module was not found in a repository with a src/ folder."""
    task = unittest_task(tmp_path, UNITTEST_TEST.replace("from pkg.calc import add", "from calc import add"))
    (task.repo / "src").mkdir()
    (task.repo / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    grade = grade_patch(task, ADD_FIX, config)
    assert grade.correct == 0.0 and grade.tampering == []
    assert grade.collect_errors["tests/test_add.py"] == "ModuleNotFoundError: No module named 'calc'"
    (problem,) = validate_task(task.model_copy(update={"gold_patch": ADD_FIX}), config, repeats=1).problems
    assert "not collected: tests/test_add.py: ModuleNotFoundError: No module named 'calc'" in problem
    assert "a src/ layout?" in problem


OPTION_CONFTEST = """
def pytest_addoption(parser):
    parser.addoption("--flavour", default="plain", help="added by the repository")
"""
OPTION_TEST = """
from pkg.calc import add


def test_add(request):
    assert request.config.getoption("flavour") == "plain"
    assert add(2, 3) == 5
"""


def test_an_option_a_repository_conftest_adds_is_parsed_in_every_child(backend: str, tmp_path: Path) -> None:
    """The runner hands a child the option parser pytest built before (`_reuse_option_parsers`, pytest 7
    in both sandboxes): a conftest that adds an option still configures, in the real test's child and
    in the canary's, and its default reaches the test."""
    task = unittest_task(tmp_path, OPTION_TEST)
    task = task.model_copy(
        update={
            "hidden_tests": task.hidden_tests.model_copy(
                update={"fail_to_pass": ["tests/test_add.py::test_add"]}
            )
        }
    )
    (task.repo / "conftest.py").write_text(OPTION_CONFTEST)
    canary = next(c for c in candidates("tests/test_add.py", OPTION_TEST, {"test_add"}) if c.slots == [1])
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]

    grade = grade_patch(task, ADD_FIX, config, trial=[canary])

    assert grade.tampering == [] and grade.collect_errors == {}, grade
    assert grade.fail_to_pass == {"tests/test_add.py::test_add": "passed"} and grade.correct == 1.0
    assert grade.canaries[canary.label] == "failed" and set(grade.canaries.values()) == {"failed"}


REUSED_PARSER = """
import sys
sys.path.insert(0, "/tmp")
import runner
config = runner.premade(["-p", "no:cacheprovider"])
parser = config._parser
first = parser._getparser()
assert parser._getparser() is first, "not reused"
parser.addoption("--flavour", default="plain")
print(parser._getparser() is first, parser._getparser().parse_known_args(["--flavour", "sweet"])[0].flavour)
"""


def test_a_reused_option_parser_is_built_again_once_an_option_is_added(
    make_sandbox: Callable[..., ExecutorSandbox],
) -> None:
    """In the sandbox's pytest (7.2, which builds its argparse parser afresh at every parse), the parser
    is reused while the options are the same, and built again when a plugin or conftest adds one."""
    sandbox = make_sandbox()
    sandbox.write_file("/tmp/runner.py", RUNNER.read_bytes())
    result = sandbox.run(["python3", "-c", REUSED_PARSER])
    assert result.exit_code == 0, result.output
    assert result.output.split() == ["False", "sweet"], result.output


OWN_PACKAGE_TEST = """\
import {name}


def test_the_repositorys_own():
    assert {name}.ORIGIN == "the repository's fixed copy"
"""


@pytest.mark.parametrize("name", ["attr", "attrs", "iniconfig", "packaging", "pluggy"])
def test_a_package_pytest_depends_on_is_graded_from_the_repository(
    backend: str, tmp_path: Path, name: str
) -> None:
    """Issue 36, item 2: pytest loads its own attrs, iniconfig, packaging and pluggy before any test; a
    task on one of them grades the repository's copy (the fix scores 1, the base 0), not the grader's."""
    repo = tmp_path / "repo"
    (repo / name).mkdir(parents=True)
    (repo / name / "__init__.py").write_text('ORIGIN = "the repository\'s broken copy"\n')
    hidden = HiddenTests(
        files={"tests/test_own.py": OWN_PACKAGE_TEST.format(name=name)},
        fail_to_pass=["tests/test_own.py::test_the_repositorys_own"],
    )
    task = Task(id=f"own-{name}", title=name, repo=repo, problem_statement="broken", hidden_tests=hidden)
    fix = (
        f"diff --git a/{name}/__init__.py b/{name}/__init__.py\n--- a/{name}/__init__.py\n"
        f'+++ b/{name}/__init__.py\n@@ -1 +1 @@\n-ORIGIN = "the repository\'s broken copy"\n'
        f'+ORIGIN = "the repository\'s fixed copy"\n'
    )
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    graded = grade_patch(task, fix, config)
    assert graded.dropped_why == {} and graded.tampering == [], (graded.dropped_why, graded.tampering)
    assert graded.collect_errors == {} and graded.correct == 1.0, graded.fail_to_pass
    assert grade_patch(task, "", config).correct == 0.0
