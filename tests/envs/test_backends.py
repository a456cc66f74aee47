"""The backend table (`envs.sandbox.BACKENDS`, `envs/backends.py`): a backend is added by its own module and
one row, and then sandboxes, task sandboxes and grading run on it; `auto` is worked out once per process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from envs import backends
from envs.factory import start_sandbox, start_task_sandbox
from envs.grading import grade_patch
from envs.sandbox import BACKENDS, SandboxConfig, SandboxError
from tasks.suite import load_suite
from tests.conftest import require_backend
from tests.envs import fake_backend

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> str:
    name, path = fake_backend.ROW
    monkeypatch.setitem(BACKENDS, name, path)
    require_backend(name)
    return name


def test_an_unknown_backend_is_refused_with_the_table_in_the_message() -> None:
    with pytest.raises(
        ValidationError, match="unknown sandbox backend 'fake': expected auto or one of docker, bwrap, podman"
    ):
        SandboxConfig(backend="fake")
    with pytest.raises(SandboxError, match="unknown sandbox backend"):
        backends.resolve_backend("fake")


def test_a_row_adds_a_backend_that_starts_sandboxes_and_grades(fake: str, sample_repo: Path) -> None:
    before = dict(fake_backend.CALLS)
    sandbox = start_sandbox(SandboxConfig(backend=fake), sample_repo)
    try:
        assert sandbox.run("python3 -c 'import pkg.calc; print(pkg.calc.add(2, 3))'").output.strip() == "5"
    finally:
        sandbox.close()
    task = load_suite("builtin")[0]
    gold = grade_patch(task, task.gold_patch or "", SandboxConfig(backend=fake))
    empty = grade_patch(task, "", SandboxConfig(backend=fake))
    assert (gold.correct, empty.correct) == (1.0, 0.0), (gold, empty)
    sandbox = start_task_sandbox(task, SandboxConfig(backend=fake))
    sandbox.close()
    assert fake_backend.CALLS["start"] == before.get("start", 0) + 1
    assert fake_backend.CALLS["start_task"] >= before.get("start_task", 0) + 3  # two grades and one start


def test_the_command_line_offers_a_row_as_a_backend(fake: str) -> None:
    from harness.cli import build_parser

    args = build_parser().parse_args(["sandbox", "run", "--backend", fake, "true"])
    assert args.backend == fake


def test_auto_is_worked_out_once_per_process() -> None:
    """Once auto has an answer, a backend that goes away mid-run gives infra errors, not another backend;
    a process that finds none says why for each."""
    script = (
        "from envs import backends\n"
        "first = backends.resolve_backend('auto')\n"
        "for name in backends.BACKENDS:\n"
        "    backends._load(name).unavailable = lambda name=name: f'{name} went away'\n"
        "print(first, backends.resolve_backend('auto'))\n"
        "backends._auto = None\n"
        "try:\n"
        "    backends.resolve_backend('auto')\n"
        "except backends.SandboxError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    answers, refusal = done.stdout.splitlines()
    first, second = answers.split()
    assert first == second and first in BACKENDS
    reasons = "; ".join(f"{name}: {name} went away" for name in BACKENDS)
    assert refusal == f"no sandbox backend can run here ({reasons})"
