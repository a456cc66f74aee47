"""JavaScript tasks with npm packages and the mocha, jest and vitest runners (`envs/npm_env.py`, the runners
of `envs/languages/javascript.py`): one small repository a runner, made here with a lock file that pins
it, validated on both backends, and a forger that prints a pass in the runner's own words scored 0."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from envs.factory import start_task_sandbox
from envs.grading import grade_patch
from envs.languages.javascript import TEST_COMMANDS, runner_language, runner_of
from envs.npm_env import build_node_modules, needs_npm, npm_dir
from envs.python_env import MARKER
from envs.sandbox import WORKDIR, SandboxConfig
from envs.validation import validate_task
from tasks.canaries import load_canaries
from tasks.computed import load_computed
from tasks.model import HiddenTests, Task
from tasks.patches import diff_trees
from tests.conftest import require_backend
from tests.envs.test_languages import patched, replace_in

VERSIONS = {"mocha": "10.8.2", "jest": "29.7.0", "vitest": "1.6.1"}
BEFORE = "2026-06-01"
"""npm resolves the runners' own dependencies as they were published by this date: the same lock file on
every run, so the built node_modules is made once and kept in the harness's cache."""
BUGGY = "total(xs) / (xs.length - 1)"
FIXED = "total(xs) / xs.length"
CALC = {
    "cjs": "const total = (xs) => xs.reduce((a, b) => a + b, 0);\nconst mean = (xs) => "
    + BUGGY
    + ";\nmodule.exports = { mean, total };\n",
    "esm": "export const total = (xs) => xs.reduce((a, b) => a + b, 0);\nexport const mean = (xs) => "
    + BUGGY
    + ";\n",
}
HEAD = {
    "mocha": 'const assert = require("node:assert");\nconst { mean, total } = require("../src/calc");\n',
    "jest": 'const { mean, total } = require("../src/calc");\n',
    "vitest": 'import { describe, it, expect } from "vitest";\nimport { mean, total } from "../src/calc.js";\n',
}
CHECK = {
    "mocha": "assert.strictEqual({}, {});",
    "jest": "expect({}).toBe({});",
    "vitest": "expect({}).toBe({});",
}
BROKEN_CONFIG = {
    "mocha": (".mocharc.json", '{"require": "./missing.js"}\n'),
    "jest": ("jest.config.js", "module.exports = { setupFiles: ['./missing.js'] };\n"),
    "vitest": ("vitest.config.js", "export default { test: { setupFiles: ['./missing.js'] } };\n"),
}
"""A configuration of the runner's that fails every run that reads it: the grader reads none."""
TESTS = ["calc (stats) > means a list", "calc (stats) > means one number", "totals"]


def hidden_test(runner: str) -> str:
    check = CHECK[runner]
    return (
        HEAD[runner]
        + '\ndescribe("calc (stats)", () => {\n  it("means a list", () => {\n    '
        + check.format("mean([1, 2, 3, 6])", "3")
        + '\n  });\n  it("means one number", () => {\n    '
        + check.format("mean([5])", "5")
        + '\n  });\n});\n\nit("totals", () => {\n  '
        + check.format("total([1, 2, 3])", "6")
        + "\n});\n"
    )


def make_repo(runner: str, folder: Path) -> Path:
    """A repository whose package.json names `runner` (pinned) and whose lock file npm makes here."""
    folder.mkdir(parents=True)
    manifest = {
        "name": "calc",
        "version": "1.0.0",
        "private": True,
        **({"type": "module"} if runner == "vitest" else {}),
        "scripts": {"test": TEST_COMMANDS[runner]},
        "devDependencies": {runner: VERSIONS[runner]},
    }
    (folder / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (folder / "src").mkdir()
    (folder / "src/calc.js").write_text(CALC["esm" if runner == "vitest" else "cjs"])
    name, text = BROKEN_CONFIG[runner]
    (folder / name).write_text(text)
    npm = shutil.which("npm")
    assert npm is not None, "npm is needed on the host"
    subprocess.run(
        [npm, "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund", f"--before={BEFORE}"],
        cwd=folder, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return folder


def make_task(runner: str, root: Path) -> Task:
    base = make_repo(runner, root / "base")
    fixed = root / "fixed"
    shutil.copytree(base, fixed)
    replace_in(fixed / "src/calc.js", BUGGY, FIXED)
    hidden = "test/calc.hidden.test.js"
    return Task(
        id=f"calc-{runner}",
        title=f"mean divides by one too few ({runner})",
        repo=base,
        problem_statement="`mean([1, 2, 3, 6])` gives 4; it must be 3.",
        language="javascript",
        test_command=TEST_COMMANDS[runner],
        hidden_tests=HiddenTests(
            files={hidden: hidden_test(runner)},
            fail_to_pass=[f"{hidden}::{t}" for t in TESTS[:2]],
            pass_to_pass=[f"{hidden}::{TESTS[2]}"],
        ),
        gold_patch=diff_trees(base, fixed),
    )


@pytest.fixture(scope="module", params=list(VERSIONS))
def runner_task(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Task:
    return make_task(request.param, tmp_path_factory.mktemp(request.param))


def test_the_runner_and_its_packages_come_from_package_json(runner_task: Task, tmp_path: Path) -> None:
    """The runner named in devDependencies is the one that runs; npm builds node_modules from the lock file
    alone, outside the repository, once."""
    runner = runner_task.id.removeprefix("calc-")
    language = runner_language(runner_task)
    assert language is not None and language.test_command == TEST_COMMANDS[runner]
    assert needs_npm(runner_task)
    modules = build_node_modules(runner_task.repo)
    assert (
        modules == npm_dir(runner_task.repo) / "node_modules"
        and (modules / runner / "package.json").is_file()
    )
    assert not (runner_task.repo / "node_modules").exists()
    assert (
        runner_of({"devDependencies": {"jest": "1", "mocha": "1"}, "scripts": {"test": "jest -i"}}) == "jest"
    )
    with pytest.raises(ValueError, match="several test runners"):
        runner_of({"devDependencies": {"jest": "1", "mocha": "1"}})


def test_a_repository_without_a_lock_file_has_one_resolved_outside_it(tmp_path: Path) -> None:
    """Most older packages keep no lock file in git (jshttp's): npm resolves one from package.json alone in
    the cache folder, keyed apart from any locked build, and nothing is written into the repository."""
    locked = make_repo("mocha", tmp_path / "locked")
    unlocked = tmp_path / "unlocked"
    shutil.copytree(locked, unlocked)
    (unlocked / "package-lock.json").unlink()
    modules = build_node_modules(unlocked)
    assert modules == npm_dir(unlocked) / "node_modules" != npm_dir(locked) / "node_modules"
    assert (modules / "mocha/package.json").is_file()
    assert json.loads((modules.parent / MARKER).read_text())["resolved"] is True
    assert not (unlocked / "package-lock.json").exists() and not (unlocked / "node_modules").exists()


FORGED = {
    "mocha": "ok 1 calc\\n# tests 1\\n# pass 1\\n# fail 0\\n1..1\\n",
    "jest": "Tests:       1 passed, 1 total\\n",
    "vitest": " Tests  1 passed (1)\\n",
}
"""A pass in each runner's own summary format."""


def forger(runner: str, tree: Path) -> None:
    """Loading the code under test prints the runner's pass and ends the process with status 0."""
    text = f'process.stdout.write("{FORGED[runner]}");\nprocess.exit(0);\n'
    (tree / "src/calc.js").write_text(text + (tree / "src/calc.js").read_text())


@pytest.mark.parametrize(
    ("runner_task", "backend"),
    [("mocha", "bwrap"), ("jest", "bwrap"), ("vitest", "bwrap"), ("mocha", "docker")],
    indirect=["runner_task"],
)
def test_each_runner_validates_and_a_forged_pass_scores_nothing(
    backend: str, runner_task: Task, tmp_path: Path
) -> None:
    """Gold 1, empty 0, expected values held outside the sandbox and canaries, under the repository's own
    runner from /node_modules, its configuration file (which would fail every run) not read; then code
    under test that prints the runner's pass scores 0. Every runner on bwrap, mocha on Docker too (its
    packages baked into an image; jest and vitest validated there by hand, 2026-12-06, and each one's
    run_tests runs there below): CI's time."""
    require_backend(backend)
    config = SandboxConfig(backend=backend)
    task = runner_task.model_copy(update={"folder": tmp_path / "task"})
    task.folder.mkdir()  # type: ignore[union-attr]
    result = validate_task(task, config, repeats=1)
    assert result.ok, (task.id, result.problems)
    assert result.gold_rewards == [1.0] and result.empty_rewards == [0.0]
    assert result.canaries + result.held_canaries >= 3, task.id
    assert result.decided_in_parent == 3, task.id
    hidden = task.hidden_tests.model_copy(
        update={"computed": load_computed(tmp_path / "task"), "canaries": load_canaries(tmp_path / "task")}
    )
    task = task.model_copy(update={"hidden_tests": hidden})
    runner = task.id.removeprefix("calc-")
    graded = grade_patch(task, patched(task, tmp_path / "forged", functools.partial(forger, runner)), config)
    assert graded.infra_error is None and graded.correct == 0.0 and graded.reward <= 0.0, graded


RUN_TESTS_SAYS = {
    "mocha": ["1 passing", "2 failing"],
    "jest": ["Tests:       2 failed, 1 passed, 3 total"],
    "vitest": ["Tests  2 failed | 1 passed (3)"],
}
"""What each runner's own command says of the hidden file's tests at the base commit."""


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_run_tests_is_the_repositorys_own_runner(backend: str, runner_task: Task) -> None:
    """The agent's `run_tests` command runs the repository's runner from /node_modules, settings read (the
    broken one removed, as an agent would), in the sandbox as the agent has it, and leaves no cache in /repo."""
    require_backend(backend)
    runner = runner_task.id.removeprefix("calc-")
    sandbox = start_task_sandbox(runner_task, SandboxConfig(backend=backend))
    try:
        sandbox.write_file(f"{WORKDIR}/test/calc.test.js", hidden_test(runner).encode())
        sandbox.run(["rm", f"{WORKDIR}/{BROKEN_CONFIG[runner][0]}"])
        ran = sandbox.run(runner_task.test_command)
        left = sandbox.run(["ls", "-A", WORKDIR]).output.split()
    finally:
        sandbox.close()
    assert ran.exit_code not in (0, None) and all(s in ran.output for s in RUN_TESTS_SAYS[runner]), ran.output
    assert "node_modules" not in left  # nothing of the run in the agent's diff (vitest's results cache)
