"""The grader's test runner in an environment of its own: installed pytest plugins and an editable
install, as real repositories have them. Run on the host, as the sandbox runs it (`python -I -S -B`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import types
import venv
from collections.abc import Callable
from pathlib import Path

import pytest

from envs.grading import DONE, GRADER_INI, RUNNER
from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = """
import _pytest.fixtures

_original = _pytest.fixtures.FixtureFunctionMarker.__call__


def __call__(self, function):
    return _original(self, function)


_pytest.fixtures.FixtureFunctionMarker.__call__ = __call__  # as hypothesis's plugin does to pytest
try:
    import repo_helper  # optional, and the repository happens to have one
except ImportError:
    pass
"""
"""A plugin installed in the environment that patches pytest when imported."""


@pytest.fixture
def environment(tmp_path: Path) -> Path:
    """A Python environment with the harness's packages, a `pytest11` plugin that patches pytest, and the
    repository (`tmp_path/repo`) installed editable (a `.pth` that puts it on `sys.path`)."""
    env = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "harness-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "repo-editable.pth").write_text(str(tmp_path / "repo") + "\n")
    (site / "patchy_plugin.py").write_text(PLUGIN)
    info = site / "patchy_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: patchy-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\npatchy = patchy_plugin\n")
    return python


def run_runner(
    python: Path, tmp_path: Path, targets: list[str], repo: Path | None = None
) -> tuple[dict[str, object], int]:
    repo = repo or tmp_path / "repo"
    grader = tmp_path / "grader"
    grader.mkdir(parents=True)
    (grader / "pytest.ini").write_text(GRADER_INI)
    (grader / "run.py").write_bytes(RUNNER.read_bytes())
    report = grader / "report.json"
    (grader / "plan.json").write_text(json.dumps({"targets": targets, "held": {}}))
    proc = subprocess.Popen(
        [
            python,
            "-I",
            "-S",
            "-B",
            grader / "run.py",
            report,
            grader / "pytest.ini",
            repo,
            grader / "plan.json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=repo,
    )
    output, _ = proc.communicate(timeout=120)
    assert output.rstrip().splitlines()[-1].startswith(DONE), output[-3000:]
    return json.loads(report.read_text()), proc.pid


def test_a_plugin_of_the_environment_that_patches_pytest_is_not_tampering(
    environment: Path, tmp_path: Path
) -> None:
    """The plugin is imported by the runner's parent, before the fingerprint is taken; imported in each
    child instead (as before), its patch looked like the code under test replacing pytest's internals."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests" / "test_calc.py").write_text(
        "import pytest\nfrom calc import add\n\n\n@pytest.fixture\ndef two():\n    return 2\n\n\n"
        "def test_add(two):\n    assert add(two, 3) == 5\n"
    )

    report, _ = run_runner(environment, tmp_path, ["tests/test_calc.py"])

    assert report["tampering"] == [], report
    assert report["outcomes"] == {"tests/test_calc.py::test_add": "passed"}, report


def test_a_test_run_that_ends_without_a_report_says_why(environment: Path, tmp_path: Path) -> None:
    """A plugin of the environment that fails at import fails every child's pytest before any test:
    the file's tests are missing, and the grade's collection errors carry the child's last line (the
    newest pytest-cov on the sandbox's pytest 7.2 did this, and the grade said nothing)."""
    site = next(environment.parent.parent.glob("lib/python3*/site-packages"))
    (site / "patchy_plugin.py").write_text("raise TypeError('made to fail at import')\n")
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_one.py").write_text("def test_one():\n    assert True\n")

    report, _ = run_runner(environment, tmp_path, ["tests/test_one.py"])

    assert report["outcomes"] == {}, report
    message = report["collect_errors"]["tests/test_one.py"]
    assert (
        message.startswith("the test run ended without a report: ") and "TypeError: made to fail" in message
    )


def test_the_runners_parent_never_imports_a_module_of_the_repository(
    environment: Path, tmp_path: Path
) -> None:
    """With the repository on `sys.path` (an editable install) and a plugin that imports an optional
    module the repository provides, only the children import it; the parent refuses it."""
    repo = tmp_path / "repo"
    marks = tmp_path / "marks"
    marks.mkdir()
    (repo / "tests").mkdir(parents=True)
    (repo / "repo_helper.py").write_text(
        f"import os\nopen(os.path.join({str(marks)!r}, str(os.getpid())), 'w').close()\nVALUE = 7\n"
    )
    (repo / "tests" / "test_helper.py").write_text(
        "import repo_helper\n\n\ndef test_value():\n    assert repo_helper.VALUE == 7\n"
    )

    report, parent = run_runner(environment, tmp_path, ["tests/test_helper.py"])

    importers = {int(p.name) for p in marks.iterdir()}
    assert report["outcomes"] == {"tests/test_helper.py::test_value": "passed"}, report
    assert importers and parent not in importers, (parent, importers)
    assert report["tampering"] == [], report


def test_no_path_file_of_the_environment_runs_in_the_runner(environment: Path, tmp_path: Path) -> None:
    """Issue 32, item 4: the runner starts without `site`. An import line of a `.pth` file (which runs
    before any line of the runner when `site` processes it) runs in no process of the grade, while the
    folders the path files name (the editable repository) are still on the tests' path."""
    site = next(environment.parent.parent.glob("lib/python3*/site-packages"))
    marks = tmp_path / "marks"
    marks.mkdir()
    (site / "aaa-startup.pth").write_text(
        f"import os; open(os.path.join({str(marks)!r}, str(os.getpid())), 'w').close()\n"
    )
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )

    report, _ = run_runner(environment, tmp_path, ["tests/test_calc.py"])

    assert report["outcomes"] == {"tests/test_calc.py::test_add": "passed"}, report
    assert list(marks.iterdir()) == []


CODE: dict[str, object] = {}
"""What the fingerprint test changed, to put back."""


def test_the_fingerprint_names_each_kind_of_change_and_nothing_once_undone() -> None:
    """Its one-pass comparison finds every change the per-name comparison names: a name rebound or
    deleted, a function's code or defaults swapped in place, a property's function's code, a class
    attribute added."""
    import json as watched

    from envs.grade_runner import Fingerprint

    fingerprint = Fingerprint()
    assert fingerprint.changes() == []
    prop = next(
        (space.label, key, value)
        for space in fingerprint.spaces
        for key, value in vars(space.owner).items()
        if isinstance(value, property)
        and isinstance(value.fget, types.FunctionType)
        and not value.fget.__code__.co_freevars
    )
    dumps, encoder, decoder = watched.dumps, watched.JSONEncoder, watched.decoder
    fget = prop[2].fget
    changes: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {
        "json.JSONEncoder was replaced": (
            lambda: setattr(watched, "JSONEncoder", dict), lambda: setattr(watched, "JSONEncoder", encoder)
        ),
        "json.decoder was deleted": (lambda: delattr(watched, "decoder"), lambda: setattr(watched, "decoder", decoder)),
        "json.dumps was replaced": (
            lambda: setattr(dumps, "__code__", watched.loads.__code__),
            lambda: setattr(dumps, "__code__", CODE["dumps"]),
        ),
        "json.dumps was replaced ": (  # its defaults, in place
            lambda: setattr(dumps, "__kwdefaults__", {**dumps.__kwdefaults__, "indent": 4}),
            lambda: setattr(dumps, "__kwdefaults__", CODE["kwdefaults"]),
        ),
        f"{prop[0]}.{prop[1]} was replaced": (
            lambda: setattr(fget, "__code__", (lambda self: None).__code__),
            lambda: setattr(fget, "__code__", CODE["fget"]),
        ),
        "json.encoder.JSONEncoder.forged was added": (
            lambda: setattr(encoder, "forged", True), lambda: delattr(encoder, "forged")
        ),
    }  # fmt: skip
    CODE.update(dumps=dumps.__code__, kwdefaults=dumps.__kwdefaults__, fget=fget.__code__)
    for finding, (do, undo) in changes.items():
        do()
        try:
            assert finding.strip() in fingerprint.changes(), finding
        finally:
            undo()
        assert fingerprint.changes() == [], finding


SCRATCH_CHILD = """
import json, os, sys
from envs.grade_runner import Scratch

scratch, bound = sys.argv[1], os.path.join(sys.argv[1], "env", "lib")
root = Scratch([scratch])
under_mount = sorted(p for p in root.entries if p.startswith(bound + "/"))
with open(os.path.join(scratch, "left.txt"), "w") as f:  # what a child leaves behind
    f.write("forged")
with open(os.path.join(scratch, "kept.txt"), "w") as f:
    f.write("changed")
root.rebuild()
print(json.dumps({
    "mounts": sorted(root.mounts), "read under the mount": under_mount,
    "left": os.path.exists(os.path.join(scratch, "left.txt")),
    "kept": open(os.path.join(scratch, "kept.txt")).read(),
    "bound": open(os.path.join(bound, "module.py")).read(),
}))
"""


def test_scratch_folders_leave_a_bound_environment_unread_and_in_place(tmp_path: Path) -> None:
    """A bubblewrap sandbox binds the harness's Python read-only where it lives; under /tmp (a checkout
    there) that is inside a scratch folder the runner keeps and puts back after every child. It read the
    whole bound environment (1.1 GB and seconds of CPU a grade, with torch in it); a mount point is now
    left as it is, while what a child writes beside it is still put back."""
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("making a mount namespace needs root; CI runs as root")
        pytest.skip("making a mount namespace needs root")
    scratch, environment = tmp_path / "scratch", tmp_path / "environment"
    (environment / "pkg").mkdir(parents=True)
    (environment / "module.py").write_text("VALUE = 1\n")
    (environment / "pkg" / "__init__.py").write_text("")
    scratch.mkdir()
    mount = (
        f"mount -t tmpfs -o size=1m none {scratch} && mkdir -p {scratch}/env/lib && echo kept > {scratch}/kept.txt"
        f' && mount --bind -o ro {environment} {scratch}/env/lib && exec "$@"'
    )
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh"]
    command += [sys.executable, "-c", SCRATCH_CHILD, str(scratch)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "mounts": [f"{scratch}/env/lib"], "read under the mount": [], "left": False, "kept": "kept\n",
        "bound": "VALUE = 1\n",
    }  # fmt: skip


FAST_PATH = """
import sys
sys.path.insert(0, sys.argv[1])
import pytest
from envs import grade_runner
if sys.argv[3] == "marked":
    grade_runner._mark_items_checked()
fingerprint = grade_runner.Fingerprint()
pytest.main([sys.argv[2], "-q", "-p", "no:cacheprovider"])
print(fingerprint.unchanged(), fingerprint.changes())
"""


@pytest.mark.parametrize("marked", [True, False], ids=["marked", "unmarked"])
def test_an_honest_session_keeps_the_fingerprint_on_its_fast_path(tmp_path: Path, marked: bool) -> None:
    """pytest marks an item class the first time it makes one; marked in the zygote beforehand
    (`_mark_items_checked`), a child's honest session changes no watched class, and its check ends after
    the one-pass comparison. Unmarked, the class gained a name: the slow path ran, to find nothing."""
    test = tmp_path / "test_one.py"
    test.write_text("def test_one():\n    assert 1 + 1 == 2\n")
    proc = subprocess.run(
        [sys.executable, "-c", FAST_PATH, str(ROOT), str(test), "marked" if marked else "unmarked"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == f"{marked} []", proc.stdout[-2000:]


def test_the_audit_hook_leaves_the_standard_librarys_own_reads_to_it(tmp_path: Path) -> None:
    """`@dataclass` reads `__code__`, `__defaults__` and `__kwdefaults__` of the class's functions through
    `inspect.signature`: the standard library's own reads, not a finding against an honest fix. The
    repository's own frame reading a function's `__code__`, or a frame through `inspect`, still is."""
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "shapes.py").write_text(
        "import inspect\nfrom dataclasses import dataclass\n\n\n@dataclass(frozen=True, order=True)\n"
        "class Box:\n    side: int = 1\n\n\ndef area(box: Box) -> int:\n    return box.side * box.side\n\n\n"
        "def arity() -> int:\n    return len(inspect.signature(area).parameters)\n"
    )
    (root / "peek.py").write_text(
        "import inspect\n\n\ndef consts(f):\n    return f.__code__.co_consts\n\n\n"
        "def caller():\n    return inspect.stack()[1].function\n"
    )
    (root / "tests" / "test_shapes.py").write_text(
        "from shapes import Box, area, arity\n\n\ndef test_area():\n    assert area(Box(3)) == 9 and arity() == 1\n"
    )
    (root / "tests" / "test_peek.py").write_text(
        "from peek import caller, consts\n\n\ndef test_peek():\n    assert consts(test_peek) and caller()\n"
    )
    ids = ["tests/test_shapes.py::test_area", "tests/test_peek.py::test_peek"]
    report, _ = run_runner(Path(sys.executable), tmp_path, ids)
    assert report["outcomes"] == dict.fromkeys(ids, "passed"), report
    suspicion = report["suspicion"]
    assert isinstance(suspicion, list)
    assert not [s for s in suspicion if "shapes.py" in s], suspicion
    assert "tests/test_peek.py: at run time: peek.py:5: object.__getattr__" in suspicion, suspicion
    assert any(s.startswith("tests/test_peek.py: at run time: peek.py:9: sys._getframe") for s in suspicion)


MAILBOX = """import os


def fresh():
    # a.txt was made before z.txt: a later change time means an earlier child wrote it
    seen = os.stat("a.txt").st_ctime_ns > os.stat("z.txt").st_ctime_ns
    with open("a.txt", "w") as f:
        f.write("a\\n")
    return not seen
"""
"""Code under test that tells whether an earlier child ran: by which entry's change time is newer."""


def test_what_a_child_touched_is_no_mark_for_a_later_one(tmp_path: Path) -> None:
    """Putting back only what a child changed gives what it touched a new change time (and inode); every
    entry is made again instead, in one order, so a child that compares them learns nothing of another
    target's run: the second test file's child would fail here if it could tell."""
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "a.txt").write_text("a\n")
    (root / "z.txt").write_text("z\n")
    (root / "mailbox.py").write_text(MAILBOX)
    for name in ("one", "two"):
        (root / "tests" / f"test_{name}.py").write_text(
            f"import mailbox\n\n\ndef test_{name}():\n    assert mailbox.fresh()\n"
        )
    report, _ = run_runner(Path(sys.executable), tmp_path, ["tests/test_one.py", "tests/test_two.py"])
    assert report["outcomes"] == {
        "tests/test_one.py::test_one": "passed",
        "tests/test_two.py::test_two": "passed",
    }
    assert (root / "a.txt").read_text() == "a\n" and sorted(p.name for p in root.iterdir()) == [
        "a.txt", "mailbox.py", "tests", "z.txt"]  # fmt: skip
