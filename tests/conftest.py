"""Shared fixtures: real sandboxes on both backends.

In CI (CI=true) a missing backend is a failure, not a skip: the suite must prove both work.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from envs.backends import backend as sandbox_backend
from envs.factory import start_sandbox
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig
from tasks.suite import load_suite

if TYPE_CHECKING:
    from harness.training.train_demo import DemoResult
    from policies.hf import HFPolicy

# Tests stay on loopback: litellm must not fetch its price list from the internet when imported.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # A worker has about one core of the machine: torch's OpenMP team of one thread per core, spinning at
    # every barrier for a thread that waits behind the other worker, made the demo's warm start 4 times
    # slower. Set before torch is imported, so that the harness processes tests start inherit it too.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

BACKENDS = ["docker", "bwrap"]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TRAINING_RUNS = {"scripted_training_run": 400, "demo_run": 600}
"""Session fixtures that train, and the seconds (before `TIMEOUT_SCALE`) a test that asks for one may
take: the first to ask makes it (about 30 s and 4 minutes on 2 idle cores), and pytest's timeout counts
a fixture's setup."""


SERIAL = (
    "tests/faults/test_hostile_scale.py",
    "tests/faults/test_daemon.py",
    "tests/envs/test_cleanup.py",
    "tests/faults/test_shared_host.py",
)
"""Files marked `serial`, which `make test` runs alone after the others: they measure the whole host (a
fleet's latency, memory and processes), restart the Docker daemon every sandbox uses, or count every
sandbox's containers and control groups, or kill and reap runs in the state folder every run shares. A test in another file that measures the whole host carries
the `serial` mark itself (tests/envs/test_limits.py's bombs)."""
LONG_FIRST = (
    "tests/harness/training/test_train_demo.py",
    "tests/test_newcomer.py",
    "tests/faults/test_crashes.py",
    "tests/harness/test_cli_tasks.py",
    "tests/tasks/test_synth.py",
    "tests/faults/test_forgers.py",
    "tests/harness/training/test_train_distributed.py",
)
"""The longest files (minutes each), collected first: pytest-xdist hands out files in collection order
(`--no-loadscope-reorder`), so that the run does not end on one worker busy with one of them."""


WHOLE_SUITE_BACKEND = "bwrap"
"""The backend on which tests that run every built-in task (validation, scripted gold) run all 24; on
the other they run one task a repository (`builtin_sample`). Both backends run the same pytest on the
same files (`harness env build` takes the sandbox image's), so a task that holds on one and not on the
other would be a sandbox fault, which one task a repository shows as well; each backend's run of all 24
took CI about 40 s."""


def builtin_sample(backend: str) -> list[str] | None:
    """The built-in task ids a whole-suite test runs on `backend`: None (all of them) on
    `WHOLE_SUITE_BACKEND`, else the first task of each repository."""
    if backend == WHOLE_SUITE_BACKEND:
        return None
    first: dict[str, str] = {}
    for task in sorted(load_suite("builtin"), key=lambda t: t.id):
        first.setdefault(task.repo_name, task.id)
    return sorted(first.values())


TIMEOUT_SCALE = 3
"""Every test's timeout (pytest-timeout: its own, or the 300 s default) is this many times what it says.
The figures are sized on a test run alone on 2 idle cores; `make test` runs four at once, and CI must also
pass while other work keeps both cores busy, which made tests 3-4 times slower here. A timeout only
catches a hang, and a hang is caught as surely at three times the figure."""


def timeout_of(config: pytest.Config, item: pytest.Item) -> float:
    """The timeout a test asks for (its closest `timeout` mark, else the ini's), or its training run's when
    that is longer."""
    mark = item.get_closest_marker("timeout")
    own = config.getini("timeout") if mark is None else mark.args[0] if mark.args else mark.kwargs["timeout"]
    needs = [s for f, s in TRAINING_RUNS.items() if f in getattr(item, "fixturenames", ())]
    return float(max([float(own), *needs]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's timeout is scaled by `TIMEOUT_SCALE`; one that asks for a training run gets at least
    that run's. The files of `SERIAL` are marked so, and those of `LONG_FIRST` come first, in that order."""
    root = config.rootpath
    for item in items:
        item.add_marker(pytest.mark.timeout(TIMEOUT_SCALE * timeout_of(config, item)), append=False)
        if item.path.relative_to(root).as_posix() in SERIAL:
            item.add_marker(pytest.mark.serial)

    def rank(item: pytest.Item) -> int:
        name = item.path.relative_to(root).as_posix()
        return LONG_FIRST.index(name) if name in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)  # stable: the order within a file and among the others is pytest's


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """`make(folder)` run once for the whole test run, even under pytest-xdist, where every worker is a
    session of its own: the first worker to ask makes it in the run's shared temporary folder, under a
    file lock, and the others wait for it and reuse it. Returns the folder."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = shared / name, shared / f"{name}.done"
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            make(folder)
            done.touch()
    return folder


def backend_missing(name: str) -> str | None:
    """Why the host cannot run backend `name`, or None."""
    return sandbox_backend(name).unavailable()


def require_backend(name: str) -> None:
    why = backend_missing(name)
    if why is None:
        return
    if IN_CI:
        pytest.fail(f"{name} backend needed in CI: {why}")
    pytest.skip(why)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return str(request.param)


@pytest.fixture
def sample_repo(tmp_path: Path) -> Path:
    """A small repository with a package, a test and a nested folder."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "calc.py").write_text(
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    )
    (repo / "tests").mkdir()
    (repo / "tests" / "test_calc.py").write_text(
        "from pkg.calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    (repo / "README.md").write_text("# sample\n")
    return repo


@pytest.fixture
def make_sandbox(backend: str, sample_repo: Path) -> Iterator[Callable[..., ExecutorSandbox]]:
    """Starts sandboxes on the test's backend (sample_repo by default) and closes them afterwards."""
    made: list[ExecutorSandbox] = []

    def make(source: Path | None = None, **overrides: object) -> ExecutorSandbox:
        config = SandboxConfig(backend=backend, **overrides)  # type: ignore[arg-type]
        sandbox = start_sandbox(config, source or sample_repo)
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()


@pytest.fixture
def sandbox(make_sandbox: Callable[..., ExecutorSandbox]) -> ExecutorSandbox:
    return make_sandbox()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2 model and a locally trained tokenizer (`build_tiny_model`, seed 0)."""
    from policies.tiny import build_tiny_model

    return made_once(tmp_path_factory, "tiny-model", build_tiny_model)


@pytest.fixture(scope="session")
def tiny_policy(tiny_model_path: Path) -> HFPolicy:
    """One `HFPolicy` on the tiny model, shared: tests that change its weights make their own."""
    from policies.hf import HFPolicy

    return HFPolicy(tiny_model_path)


@pytest.fixture(scope="session")
def scripted_training_run(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: Path) -> Path:
    """A `harness train` run (bwrap) whose policy plays scripted fixes as its own tokens (`script:
    gold-or-decoy`): the same trajectories and rewards on every machine, with solved and failed rollouts,
    parse errors, self-summaries in every trajectory, advantages of both signs, learner.jsonl and a
    checkpoint. Only the log-probs differ between CPUs."""
    from harness.training.train import TrainConfig, train

    require_backend("bwrap")

    def make(out: Path) -> None:
        config = TrainConfig.model_validate(
            {
                "model": str(tiny_model_path), "script": "gold-or-decoy", "steps": 3, "tasks_per_step": 3,
                "checkpoint_every": 3, "learner": {"lr": 1e-4},
                "rollout": {
                    "suite": "demo", "out": str(out), "group_size": 4, "concurrency": 2, "seed": 0,
                    "sandbox": {"backend": "bwrap"}, "summary": {"trigger_tokens": 64, "max_summary_tokens": 32},
                    "sampling": {"max_new_tokens": 128, "temperature": 1.0},
                },
            }
        )  # fmt: skip
        train(config)

    return made_once(tmp_path_factory, "scripted-train", make)


SHORT_DEMO = {"grpo_steps": 4, "group_size": 4, "tasks_per_step": 4, "eval_samples": 4}
"""The training demo, shortened for CI: the same warm start, fewer GRPO steps and samples."""
DEMO_SEEDS = [0]
"""Seeds of the learning test: learning must show on each. One: benchmarks/demo_seeds.py measures the
spread over 10 (the pass rate rose on 10 of 10); each seed here costs CI about 3 minutes on 2 cores."""


@pytest.fixture(scope="session", params=DEMO_SEEDS, ids=[f"seed{s}" for s in DEMO_SEEDS])
def demo_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, DemoResult]:
    """A short run of `harness demo` (warm start, GRPO with summaries, evaluations) on bwrap, per seed.

    OUT/grpo is a training run directory; OUT/sft/demonstrations/* and OUT/eval-* are rollout run
    directories. What the model samples differs between CPUs: tests that need a run of fixed content use
    `scripted_training_run`."""
    from harness.training.train_demo import DemoConfig, run_training_demo

    require_backend("bwrap")
    out = tmp_path_factory.mktemp(f"demo-{request.param}") / "run"
    settings = {"out": str(out), "backend": "bwrap", "seed": request.param, **SHORT_DEMO}
    return out, run_training_demo(DemoConfig.model_validate(settings))
