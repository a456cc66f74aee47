"""A task's own environment (issue 16): what a real repository declares (a src/ layout, a version file its
packaging backend generates, a dependency from the package index) is read at import, built outside /repo
from a wheel cache, and graded the same on both backends: gold 1 through a real episode, empty 0."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.docker import client
from envs.factory import build_task_env, start_task_sandbox
from envs.grading import grade_patch
from envs.sandbox import SandboxConfig
from harness.rollouts.store import RunStore
from tasks.environment import Environment, declared_environment
from tasks.model import HiddenTests, Task
from tasks.patches import git
from tasks.suite import load_suite
from tests.conftest import require_backend
from tests.harness.test_cli import harness
from tests.tasks.test_swebench import commit, diff, row

# ---- what a repository declares ----------------------------------------------------------------------


def write(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_pyproject_gives_dependencies_test_extras_groups_and_the_version_file(tmp_path: Path) -> None:
    repo = write(tmp_path, {
        "pyproject.toml": '[project]\nname = "My_Lib"\ndependencies = ["attrs>=22", "pytest>=7"]\n'
        '[project.optional-dependencies]\ntest = ["freezegun", "my-lib[extra]"]\ndocs = ["sphinx"]\n'
        '[dependency-groups]\ntests = ["unidecode==1.3.8"]\n'
        '[tool.setuptools_scm]\nversion_file = "src/my_lib/_version.py"\n',
        "src/my_lib/__init__.py": "",
    })  # fmt: skip
    env = declared_environment(repo)
    assert env.requirements == ["attrs>=22", "freezegun", "unidecode==1.3.8"]  # pytest, itself, docs: out
    assert (env.project, env.package_root, env.version_file) == ("My_Lib", "src", "src/my_lib/_version.py")
    assert env.needed()


def test_setup_cfg_setup_py_and_requirements_files(tmp_path: Path) -> None:
    repo = write(tmp_path, {
        "setup.cfg": "[metadata]\nname = cfglib\n[options]\ninstall_requires =\n    six\n    # a comment\n"
        "[options.extras_require]\ntesting =\n    mock\n",
        "setup.py": "from setuptools import setup\nsetup(install_requires=['idna'], "
        "extras_require={'dev': ['black'], 'test': ['hypothesis']}, tests_require=DYNAMIC)\n",
        "requirements-test.txt": "-r requirements/base.txt\ncoverage  # why\n-e .\n--index-url x\n",
        "requirements/base.txt": "certifi\n-r ../requirements-test.txt\n",
        "cfglib/__init__.py": "",
    })  # fmt: skip
    env = declared_environment(repo)
    assert env.requirements == ["six", "mock", "idna", "hypothesis", "certifi", "coverage"]
    assert (env.project, env.package_root, env.version_file) == ("cfglib", "", None)
    assert not declared_environment(write(tmp_path / "bare", {"m.py": ""})).needed()


def test_pytest_and_its_coverage_plugin_are_left_to_the_sandbox(tmp_path: Path) -> None:
    """The sandbox's pytest runs every task; pytest-cov, which only measures, is never installed beside
    it (its newest release failed to import on pytest 7.2, and so every grading run)."""
    write(tmp_path, {"pyproject.toml": '[project]\nname = "p"\n[project.optional-dependencies]\n'
                     'test = ["pytest>=7", "pytest_cov", "freezegun"]\n'})  # fmt: skip
    assert declared_environment(tmp_path).requirements == ["freezegun"]


def test_a_broken_pyproject_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"pyproject\.toml: not valid TOML"):
        declared_environment(write(tmp_path, {"pyproject.toml": "[project\n"}))


def test_the_version_file_command_writes_what_setuptools_scm_would(tmp_path: Path) -> None:
    env = Environment(version_file="pkg/_version.py", version="2.5.1")
    (tmp_path / "pkg").mkdir()
    for command in env.setup_commands():
        assert os.system(f"cd {tmp_path} && {command}") == 0
    made: dict[str, object] = {}
    exec((tmp_path / "pkg" / "_version.py").read_text(), made)
    assert made["__version__"] == "2.5.1" and made["__version_tuple__"] == (2, 5, 1)


# ---- a real repository, end to end -------------------------------------------------------------------

TINYDEP = "def double(x):\n    return 2 * x\n"
VLIB = {
    "pyproject.toml": '[build-system]\nrequires = ["setuptools>=64", "setuptools-scm>=8"]\n'
    'build-backend = "setuptools.build_meta"\n\n[project]\nname = "vlib"\ndynamic = ["version"]\n'
    'dependencies = ["tinydep>=1.0"]\n\n[tool.setuptools_scm]\nversion_file = "src/vlib/_version.py"\n',
    "src/vlib/__init__.py": "from vlib._version import __version__\nfrom vlib.core import scale\n",
    "src/vlib/core.py": "from tinydep import double\n\n\ndef scale(x):\n    return double(x) + 1\n",
    "tests/test_core.py": "from vlib import scale\n\n\ndef test_scale_is_a_number():\n"
    "    assert isinstance(scale(1), int)\n",
    ".gitignore": "src/vlib/_version.py\n",
}
VLIB_TESTS = (
    "from importlib.metadata import version\n\nimport vlib\n\n\ndef test_scale():\n    assert vlib.scale(2) == 4\n"
    '\n\ndef test_version():\n    assert vlib.__version__ == version("vlib") == "0.0.0"\n'
)


def wheel(name: str, version: str, module: str) -> bytes:
    """A pure-Python wheel of one module, as a package index serves it."""
    files = {
        f"{name}/__init__.py": module.encode(),
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }  # fmt: skip
    record = (
        "".join(
            f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
            for p, d in files.items()
        )
        + f"{name}-{version}.dist-info/RECORD,,\n"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for path, data in {**files, f"{name}-{version}.dist-info/RECORD": record.encode()}.items():
            z.writestr(path, data)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A package index on loopback (PEP 503's simple layout) serving `tinydep` 1.0."""
    root = tmp_path_factory.mktemp("index")
    (root / "simple" / "tinydep").mkdir(parents=True)
    (root / "simple" / "tinydep" / "tinydep-1.0-py3-none-any.whl").write_bytes(
        wheel("tinydep", "1.0", TINYDEP)
    )
    (root / "simple" / "tinydep" / "index.html").write_text(
        '<a href="tinydep-1.0-py3-none-any.whl">tinydep-1.0-py3-none-any.whl</a>\n'
    )
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(root))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()


@pytest.fixture(scope="module")
def built(index: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The cache the file's environments are built into: its own, made by the first test that needs one
    (the import's build; the later tests reuse it). The sandbox's pytest comes from pip's cache where it
    is, tinydep from the index above."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PIP_CACHE_DIR", os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip"))
        patch.setenv("XDG_CACHE_HOME", str(cache))
        patch.setenv("PIP_EXTRA_INDEX_URL", index)
        yield cache


def vlib_dataset(root: Path, tests: str, fail_to_pass: list[str]) -> Path:
    """`root` with a clone of acme/vlib (`clones/acme__vlib`) and one SWE-bench row (`instances.jsonl`)
    whose fix drops the `+ 1` and whose test patch adds `tests`."""
    repo = root / "clones" / "acme__vlib"
    git(["init", "-q", str(repo)])
    base = commit(repo, VLIB, "start")
    fix = commit(repo, {
        "src/vlib/core.py": VLIB["src/vlib/core.py"].replace("double(x) + 1", "double(x)"),
        "tests/test_scale.py": tests,
    }, "fix scale")  # fmt: skip
    instance = row("acme__vlib-1", "acme/vlib", base, diff(repo, base, fix, "src"), diff(repo, base, fix, "tests"),
                   fail_to_pass, ["tests/test_scale.py::test_version"])  # fmt: skip
    (root / "instances.jsonl").write_text(json.dumps(instance) + "\n")
    return root


@pytest.fixture(scope="module")
def vlib_instances(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """acme/vlib: a src/ layout, a version file setuptools-scm writes at build time, a dependency."""
    return vlib_dataset(tmp_path_factory.mktemp("vlib"), VLIB_TESTS, ["tests/test_scale.py::test_scale"])


def test_a_repository_with_its_own_environment_imports_validates_and_is_solved(
    backend: str, built: Path, vlib_instances: Path, tmp_path: Path
) -> None:
    if backend == "docker":  # its environment's image is built by this run, not found from an earlier one
        for image in client().images.list(name="harness-env"):
            client().images.remove(image.id, force=True)
    suite = tmp_path / "suite"
    imported = harness("tasks", "import", "swebench", str(vlib_instances / "instances.jsonl"), "--repos",
                       str(vlib_instances / "clones"), "--out", str(suite), "--backend", backend, "--json",
                       timeout=900)  # fmt: skip
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert json.loads(imported.stdout)["environments"] == {
        "acme__vlib-1": "build backend setuptools.build_meta"
    }
    task = load_suite(str(suite))[0]
    assert task.environment == Environment(
        requirements=["tinydep>=1.0"], project="vlib", package_root="src", version_file="src/vlib/_version.py"
    )
    assert not (task.repo / "src" / "vlib" / "_version.py").exists()  # made in the start tree only

    validated = harness("tasks", "validate", "--suite", str(suite), "--backend", backend, "--repeats", "1",
                        "--json", timeout=900)  # fmt: skip
    result = json.loads(validated.stdout)[0]
    assert validated.returncode == 0 and result["ok"], (result, validated.stderr[-2000:])
    assert result["gold_rewards"][0] > 0.9 and result["empty_rewards"] == [0.0]

    out = tmp_path / "gold"
    rolled = harness("rollout", "--suite", str(suite), "--policy", "scripted:gold", "--backend", backend,
                     "--out", str(out), "--json", timeout=900)  # fmt: skip
    assert rolled.returncode == 0, rolled.stderr[-3000:]
    assert json.loads(rolled.stdout)["pass_at_1"] == 1.0
    trajectory = next(iter(RunStore(out).trajectories()))
    assert "src/vlib/core.py" in trajectory.final_diff and "_version" not in trajectory.final_diff


VLIB_SCALE_TESTS = (
    "from vlib import scale\n\n\ndef test_scale_of_two():\n    assert scale(2) == 5\n\n\n"
    "def test_scale_of_zero():\n    assert scale(0) == 1\n"
)


def test_synthesis_runs_in_the_environment_the_repository_declares(
    backend: str, built: Path, tmp_path: Path
) -> None:
    """vlib (a src/ layout, a generated version file, a dependency from the index): `tasks synth` builds
    its environment, traces and tries mutations in it, two sandboxes side by side, and writes it into
    every task, which then validates (gold 1, empty 0)."""
    repo = write(tmp_path / "vlib", {**VLIB, "tests/test_scale.py": VLIB_SCALE_TESTS})
    suite = tmp_path / "suite"
    made = harness("tasks", "synth", "--repo", str(repo), "--out", str(suite), "--n", "1", "--backend", backend,
                   "--concurrency", "2", "--no-validate", "--json", timeout=900)  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    report = json.loads(made.stdout)
    assert len(report["tasks"]) == 1 and report["passing_tests"] == 3, report["trials"]
    assert report["environment_read"] == "build backend setuptools.build_meta"
    tasks = load_suite(str(suite))
    assert [t.environment for t in tasks] == [declared_environment(repo)]
    assert not (tasks[0].repo / "src/vlib/_version.py").exists()  # made in the start tree only

    validated = harness("tasks", "validate", "--suite", str(suite), "--backend", backend, "--repeats", "1",
                        "--json", timeout=900)  # fmt: skip
    results = json.loads(validated.stdout)
    assert validated.returncode == 0 and all(r["ok"] for r in results), (results, validated.stderr[-2000:])
    assert all(r["gold_rewards"] == [1.0] and r["empty_rewards"] == [0.0] for r in results), results


# ---- red team: the environment's path file ---------------------------------------------------------

FIX = (
    "diff --git a/src/vlib/core.py b/src/vlib/core.py\n--- a/src/vlib/core.py\n+++ b/src/vlib/core.py\n"
    "@@ -4,2 +4,2 @@ from tinydep import double\n def scale(x):\n-    return double(x) + 1\n"
    "+    return double(x)\n"
)
PARENT_PAYLOAD = (
    "import os, sys\n"
    "if sys.argv[0].endswith('run.py'):  # the grader's runner, while it imports pytest\n"
    "    os._exit(0)  # a forger here would rewrite the report; leaving early shows the code ran\n"
)


def test_a_module_the_runner_imports_optionally_is_never_found_in_src(
    backend: str, built: Path, tmp_path: Path
) -> None:
    """The project's path file puts /repo/src on sys.path. The standard library tries optional modules
    while pytest is imported (`org` in copy, `msvcrt` in subprocess): found in src/, the agent's code
    would run in the grader's runner before it guards anything. The runner takes the repository off
    sys.path before its first import; the fix alone, with the planted package beside it, grades 1."""
    repo = write(tmp_path / "repo", VLIB)
    environment = declared_environment(repo)
    task = Task(
        id="vlib", title="scale", repo=repo, problem_statement="scale adds one", environment=environment,
        hidden_tests=HiddenTests(files={"tests/test_scale.py": VLIB_TESTS},
                                 fail_to_pass=["tests/test_scale.py::test_scale"]),
    )  # fmt: skip
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    build_task_env(task, config, quiet=True)
    fix = FIX
    assert grade_patch(task, fix, config).correct == 1.0
    planted = fix + "".join(
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,3 @@\n" + "".join(f"+{line}\n" for line in PARENT_PAYLOAD.splitlines())
        for path in ("src/org/__init__.py", "src/msvcrt.py")
    )
    grade = grade_patch(task, planted, config)
    assert grade.infra_error is None, grade.infra_error
    assert grade.correct == 1.0 and "src/org/__init__.py" in grade.graded_patch, grade
    # The agent's own processes import the project from src/; the executor (PID 1) starts without `site`.
    sandbox = start_task_sandbox(task, config)
    try:
        assert "/repo/src" in sandbox.run("python3 -c 'import sys; print(sys.path)'").output
        assert "-S" in sandbox.run("tr '\\0' ' ' < /proc/1/cmdline").output.split()
    finally:
        sandbox.close()


def test_both_backends_grade_it_the_same_test_by_test(built: Path, tmp_path: Path) -> None:
    """One pytest (the sandbox image's 7.2.1) and the same packages on both backends: the same outcome
    for every hidden test, for the fix and for a patch that only half fixes it."""
    require_backend("docker")
    require_backend("bwrap")
    repo = write(tmp_path / "repo", VLIB)
    hidden = HiddenTests(
        files={"tests/test_scale.py": VLIB_TESTS.replace('"0.0.0"', '"0.0.0" and vlib.scale(0) == 0')},
        fail_to_pass=["tests/test_scale.py::test_scale"], pass_to_pass=["tests/test_scale.py::test_version"],
    )  # fmt: skip
    task = Task(id="vlib", title="scale", repo=repo, problem_statement="scale adds one",
                environment=declared_environment(repo), hidden_tests=hidden)  # fmt: skip
    half = VLIB["src/vlib/core.py"].replace("double(x) + 1", "double(x) + (x == 0)")
    patches = {"fix": FIX, "half": FIX.replace("+    return double(x)\n", f"+{half.splitlines()[-1]}\n")}
    outcomes: dict[str, dict[str, object]] = {}
    for backend in ("bwrap", "docker"):
        config = SandboxConfig(backend=backend)  # type: ignore[arg-type]
        build_task_env(task, config, quiet=True)
        for name, patch in patches.items():
            grade = grade_patch(task, patch, config)
            assert grade.infra_error is None, grade.infra_error
            outcomes[f"{name} {backend}"] = {**grade.fail_to_pass, **grade.pass_to_pass}
    assert outcomes["fix bwrap"] == outcomes["fix docker"] == dict.fromkeys(outcomes["fix bwrap"], "passed")
    assert outcomes["half bwrap"] == outcomes["half docker"] == {
        "tests/test_scale.py::test_scale": "passed", "tests/test_scale.py::test_version": "failed",
    }  # fmt: skip
