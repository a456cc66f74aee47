"""`harness tasks import harbor`: a Harbor task folder becomes a task whose image is built from its
Dockerfile, whose tests run only at grading, and which `scripted:gold` solves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envs.docker import image_exists, remove_image
from envs.factory import start_sandbox
from envs.grading import grade_patch, refuse_unprotected
from envs.reward import RewardConfig
from envs.sandbox import SandboxConfig, SandboxError
from envs.validation import validate_task
from harness.rollouts.store import RunStore
from tasks.harbor import import_harbor
from tasks.model import Task
from tasks.patches import diff_trees
from tasks.suite import load_suite
from tests.conftest import require_backend
from tests.faults.hacker import FORGERS
from tests.harness.test_cli import harness

TASK_TOML = """\
version = "1.0"

[metadata]
author_name = "Ada"
difficulty = "easy"
category = "programming"
tags = ["python"]

[verifier]
timeout_sec = 120.0
service = "main"

[agent]
timeout_sec = 600.0

[environment]
build_timeout_sec = 300.0
cpus = 1
memory_mb = 2048
storage_mb = 10240
"""
DOCKERFILE = """\
FROM harness-sandbox:latest
WORKDIR /app
COPY app/ /app/
"""
TEST_SH = """\
#!/bin/bash
# Harbor's verifier: the tests sit in /tests, the reward goes to /logs/verifier/reward.txt.
cd /app
if python3 -m pytest -q -p no:cacheprovider /tests/test_greet.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
TEST_GREET = """\
import sys

sys.path.insert(0, "/app")
from greet import greet


def test_greet_names_the_person():
    assert greet("Ada") == "Hello, Ada!"
"""
SOLVE_SH = """\
#!/bin/bash
cd /app
sed -i 's/return "Hello!"/return f"Hello, {name}!"/' greet.py
"""


def harbor_task(folder: Path) -> Path:
    """A Harbor task folder: instruction, config, environment (Dockerfile and files), tests, solution."""
    files = {
        "instruction.md": "`greet(name)` in /app/greet.py ignores the name. Make `greet('Ada')` return 'Hello, Ada!'.\n",
        "task.toml": TASK_TOML,
        "environment/Dockerfile": DOCKERFILE,
        "environment/app/greet.py": 'def greet(name):\n    return "Hello!"\n',
        "tests/test.sh": TEST_SH,
        "tests/test_greet.py": TEST_GREET,
        "solution/solve.sh": SOLVE_SH,
    }
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Harbor dataset of one good task and two broken ones, imported."""
    require_backend("docker")
    root = tmp_path_factory.mktemp("harbor")
    harbor_task(root / "dataset" / "greet")
    broken = harbor_task(root / "dataset" / "no-tests")
    for f in (broken / "tests").iterdir():
        f.unlink()
    (broken / "tests").rmdir()
    (harbor_task(root / "dataset" / "bad-toml") / "task.toml").write_text("version = \n")
    out = root / "suite"
    proc = harness(
        "tasks", "import", "harbor", str(root / "dataset"), "--out", str(out), "--json", timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["imported"] == ["greet"]
    skipped = [(s["task_id"], s["reason"]) for s in report["skipped"]]
    assert skipped[1] == ("no-tests", "no tests/test.sh")
    assert skipped[0][0] == "bad-toml" and skipped[0][1].startswith("task.toml: not valid TOML: ")
    assert report["warnings"] == ["greet: task.toml: unknown keys, ignored: verifier.service"]
    return out


@pytest.fixture(scope="module")
def task(suite: Path) -> Task:
    (task,) = load_suite(str(suite))
    return task


def test_the_task_keeps_its_tests_out_of_the_agents_copy(task: Task) -> None:
    assert task.problem_statement.startswith("`greet(name)` in /app/greet.py")
    assert task.limits.wall_time_s == 600.0 and task.limits.grade_timeout_s == 120.0
    assert task.hidden_tests.verifier is not None
    assert sorted(task.hidden_tests.verifier.files) == ["/tests/test.sh", "/tests/test_greet.py"]
    assert task.image_build is not None and (task.image_build / "Dockerfile").read_text().startswith(
        DOCKERFILE
    )
    assert sorted(p.name for p in task.repo.iterdir()) == [".git", "greet.py"]
    assert task.gold_patch and '+    return f"Hello, {name}!"' in task.gold_patch

    sandbox = start_sandbox(SandboxConfig(backend="docker"), task.repo, task.image, task.image_build)
    try:
        for command in task.setup_commands:
            assert sandbox.run(command).exit_code == 0
        assert sandbox.run("cat /app/greet.py").output == 'def greet(name):\n    return "Hello!"\n'
        assert sandbox.run("ls -A /tests/ /logs/verifier/").output == "/logs/verifier/:\n\n/tests/:\n"
        found = sandbox.run("grep -rl test_greet /repo/ /app/ /opt/ /tmp/ /tests/ /logs/")
        assert found.exit_code == 1 and found.output == ""
        sandbox.run("echo changed > /app/greet.py")
        assert sandbox.read_file("greet.py") == b"changed\n"  # /app is the agent's /repo
    finally:
        sandbox.close()


def test_gold_passes_and_the_empty_patch_fails(task: Task) -> None:
    assert task.image is not None
    remove_image(task.image)  # as on a machine that never built it: the first sandbox builds it again
    result = validate_task(task, SandboxConfig(backend="docker"), repeats=1)
    assert image_exists(task.image)
    assert result.ok, result.problems
    assert result.gold_rewards == [1.0] and result.empty_rewards == [0.0]
    grade = grade_patch(task, "", SandboxConfig(backend="docker"))
    assert grade.fail_to_pass == {"bash /tests/test.sh": "failed"} and grade.correct == 0.0


def test_scripted_gold_solves_it(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = harness(
        "rollout", "--suite", str(suite), "--policy", "scripted:gold", "--backend", "docker",
        "--out", str(out), "--json", timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["pass_at_1"] == 1.0 and summary["statuses"] == {"ok": 1}
    (trajectory,) = RunStore(out).trajectories()
    assert trajectory.grade is not None and trajectory.grade.fail_to_pass == {"bash /tests/test.sh": "passed"}


def test_bwrap_refuses_a_task_built_from_a_dockerfile(task: Task) -> None:
    with pytest.raises(SandboxError, match="bwrap backend cannot build images: use the docker backend"):
        start_sandbox(SandboxConfig(backend="bwrap"), task.repo, task.image, task.image_build)
    result = validate_task(task, SandboxConfig(backend="bwrap"), repeats=1)
    assert not result.ok and all("bwrap backend cannot build images" in p for p in result.problems)


def test_without_docker_each_task_is_reported(tmp_path: Path) -> None:
    harbor_task(tmp_path / "greet")
    report = import_harbor(tmp_path / "greet", tmp_path / "suite", images=None)
    assert report.imported == []
    assert [(s.task_id, s.reason) for s in report.skipped] == [
        ("greet", "building environment/Dockerfile needs the Docker daemon, which does not answer")
    ]


def test_a_verifier_grade_is_unprotected_and_training_refuses_it(
    suite: Path, task: Task, tmp_path: Path
) -> None:
    """Issue 32, item 7: the verifier runs as the user that writes the reward, so the grade says it is
    `unprotected`, `runs` flags it, and `harness train` refuses the task unless allowed."""
    grade = grade_patch(task, task.gold_patch or "", SandboxConfig(backend="docker"))
    assert grade.correct == 1.0 and grade.integrity == "unprotected"
    # Why: the verifier's pytest runs the agent's module, which can end it with status 0 before a test
    # runs (the hacker's `os-exit-at-import`); the script then writes reward 1 for an unfixed bug.
    copy = tmp_path / "forged"
    shutil.copytree(task.repo, copy, ignore=shutil.ignore_patterns(".git"))
    (copy / "greet.py").write_text((copy / "greet.py").read_text() + FORGERS["os-exit-at-import"].tail)
    forged = grade_patch(task, diff_trees(task.repo, copy), SandboxConfig(backend="docker"))
    assert forged.correct == 1.0 and forged.integrity == "unprotected", forged
    with pytest.raises(ValueError, match=r"1 task\(s\) are graded by a verifier script .*greet"):
        refuse_unprotected([task], RewardConfig())
    refuse_unprotected([task], RewardConfig(allow_unprotected=True))
    model = tmp_path / "model"
    assert harness("model", "tiny", "--out", str(model)).returncode == 0
    proc = harness(
        "train", f"model={model}", f"rollout.suite={suite}", f"rollout.out={tmp_path / 'run'}", "steps=1",
        "rollout.sandbox.backend=docker", timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0 and "reward.allow_unprotected=true" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "run" / "trajectories.jsonl").exists()
    out = tmp_path / "rolled"
    rolled = harness(
        "rollout",
        "--suite",
        str(suite),
        "--policy",
        "scripted:gold",
        "--backend",
        "docker",
        "--out",
        str(out),
    )
    assert rolled.returncode == 0, rolled.stderr[-2000:]
    listed = harness("runs", str(out))
    assert "unprotected 1" in listed.stdout and " U" in listed.stdout, listed.stdout
