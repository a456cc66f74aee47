"""Task synthesis in a sandbox: `tasks.synth` with its tests run by `pytest_runner.py`, then validated.

`concurrency` sandboxes, each started from the suite's copy of the repository, serve the whole
synthesis: a mutation is written over its file in one of them, the tests run, the original is written
back. Every task written is then
validated as `harness tasks validate` does (gold patch 1, empty patch 0, in fresh sandboxes), and one
that fails is removed again.

The synthesis runs load no pytest plugins from entry points (they cost ~0.6 s a run on a host with
many packages): those belong to the sandbox's Python, not to the repository. The validation runs the
grader unchanged, so a task whose outcome a plugin would change does not survive it.
"""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from envs.backends import backend
from envs.build_metadata import backend_environment
from envs.factory import start_sandbox
from envs.grading import GRADER_INI
from envs.grading import RUNNER as GRADE_RUNNER
from envs.judge import base_modules
from envs.python_env import tracer_module
from envs.remote import ExecutorSandbox
from envs.sandbox import WORKDIR, SandboxConfig, SandboxError
from envs.start_tree import run_commands
from envs.task_env import env_key
from envs.validation import Validation, validate_task
from tasks.environment import Environment
from tasks.suite import load_task
from tasks.synth import (
    Check,
    PytestRun,
    SynthConfig,
    SynthError,
    SynthReport,
    Trial,
    copy_repository,
    synthesize,
)

RUNNER = Path(__file__).with_name("pytest_runner.py")
READY = "harness-pytest-runner-ready"
"""Printed by the runner once pytest is imported, before any code of the repository runs."""
TRACERS = ["sys.monitoring", "ctracer", "settrace"]
"""How the traced run records lines: the first the sandbox's Python offers (`pytest_runner.pick_tracer`)."""
REPORT_MAX_BYTES = 1 << 26
"""The traced run's report holds every line each test ran: megabytes for a suite of thousands of tests."""


class SandboxPytest:
    """`PytestRunner` on a sandbox: runs `pytest_runner.py` in it and reads the report it writes.

    A run that leaves the sandbox unusable (a mutation that eats all memory or forks without end)
    counts as crashed, and a fresh sandbox, at the repository's correct state, takes its place.
    """

    def __init__(
        self, start: Callable[[], ExecutorSandbox], key: str = "", modules: list[str] | None = None
    ) -> None:
        self.start = start
        self.key = key
        self.modules = modules or []
        """The repository's top-level modules (`judge.base_modules`): its own, not pytest's copies."""
        self.dir = f"/tmp/synth-{secrets.token_hex(6)}"
        self.runs = 0
        self.replacements = 0
        self.ctracer = tracer_module()
        """coverage.py's C tracer where `harness env build` installed it, copied next to the runner."""
        self.sandbox = self._fresh()

    def _fresh(self) -> ExecutorSandbox:
        sandbox = self.start()
        sandbox.write_file(f"{self.dir}/runner.py", RUNNER.read_bytes())
        sandbox.write_file(f"{self.dir}/grade_runner.py", GRADE_RUNNER.read_bytes())
        sandbox.write_file(f"{self.dir}/pytest.ini", GRADER_INI.encode())
        if self.ctracer is not None:
            sandbox.write_file(f"{self.dir}/{self.ctracer.name}", self.ctracer.read_bytes())
        return sandbox

    def write_file(self, path: str, text: str) -> None:
        self.sandbox.write_file(path, text.encode())

    def run_tests(
        self, targets: list[str], trace: list[str], timeout: float, test_timeout: float | None = None
    ) -> PytestRun:
        self.runs += 1
        report = f"{self.dir}/report-{self.runs}.json"
        spec: dict[str, object] = {"report": report, "ini": f"{self.dir}/pytest.ini", "root": WORKDIR}
        spec |= {"targets": targets, "test_timeout": test_timeout, "base_modules": self.modules}
        spec |= {"tracers": TRACERS, "ctracer": f"{self.dir}/{self.ctracer.name}" if self.ctracer else None}
        self.sandbox.write_file(f"{self.dir}/spec.json", json.dumps({**spec, "trace": trace}).encode())
        result = self.sandbox.run(
            ["python3", "-I", "-B", f"{self.dir}/runner.py", f"{self.dir}/spec.json"],
            timeout=timeout,
            env={"PYTHONHASHSEED": "0", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        )
        if result.failure is not None:
            self.close()
            self.sandbox = self._fresh()
            self.replacements += 1
            return PytestRun(crashed=True, duration_s=result.duration_s)
        if result.timed_out:
            return PytestRun(timed_out=True, duration_s=result.duration_s)
        if READY not in result.output:
            raise SynthError(f"pytest does not start in the sandbox: {result.output.strip()[-500:]}")
        try:
            raw = json.loads(self.sandbox.read_file(report, max_bytes=REPORT_MAX_BYTES))
        except (SandboxError, ValueError):
            return PytestRun(crashed=True, duration_s=result.duration_s)
        raw.pop("exit_code", None)
        return PytestRun.model_validate({**raw, "duration_s": result.duration_s})

    def close(self) -> None:
        self.sandbox.close()


def validator(sandbox_config: SandboxConfig, concurrency: int) -> Check:
    """A check that validates new task folders once each (gold 1, empty 0), `concurrency` at a time."""

    def check(task_dirs: list[Path]) -> dict[str, list[str]]:
        tasks = [load_task(d, d.parent) for d in task_dirs]
        with ThreadPoolExecutor(max(1, concurrency)) as pool:
            results: list[Validation] = list(
                pool.map(lambda t: validate_task(t, sandbox_config, 1, episode=False), tasks)
            )
        for result in results:
            infra = [p for p in result.problems if "infra error" in p]
            if infra:  # the harness's trouble, not the task's: stop rather than drop good tasks
                raise SandboxError(f"validating {result.task_id}: {infra[0]}")
        return {r.task_id: r.problems for r in results}

    return check


def synthesize_suite(
    config: SynthConfig,
    sandbox_config: SandboxConfig,
    validate: bool = True,
    concurrency: int = 2,
    on_trial: Callable[[Trial], None] | None = None,
) -> SynthReport:
    """Copies the repository into the suite, builds the environment it declares (its dependencies as its
    build backend reports them, `envs/build_metadata.py`; a src/ layout, a generated version file:
    `tasks/environment.py`), synthesizes tasks in `concurrency` sandboxes side by side (the same tasks as
    in one), and validates each, `concurrency` at a time; the report says how the environment was read."""
    name, repo = copy_repository(config)
    report = None
    try:
        declared, how = backend_environment(repo, sandbox_config)
        environment = declared if declared.needed() else None
        start, key = sandbox_starter(repo, sandbox_config, environment)
        runners: list[SandboxPytest] = []
        try:
            with ThreadPoolExecutor(max(1, concurrency)) as pool:
                modules = base_modules(repo)
                starting = [
                    pool.submit(SandboxPytest, start, key, modules) for _ in range(max(1, concurrency))
                ]
                failed = [e for e in (f.exception() for f in starting) if e is not None]
                runners += [f.result() for f in starting if f.exception() is None]
            if failed:  # every sandbox started is closed below
                raise failed[0]
            check = validator(sandbox_config, concurrency) if validate else None
            report = synthesize(config, repo, name, runners, check, on_trial, environment)
            report.environment_read = how
        finally:
            for runner in runners:
                runner.close()
    finally:
        unused = not any(config.out.glob(f"{name}-[0-9][0-9][0-9]*/task.yaml"))
        if (report is None or not report.tasks) and unused:  # no task uses it: leave it out of the suite
            shutil.rmtree(repo)
    return report


def sandbox_starter(
    repo: Path, config: SandboxConfig, environment: Environment | None
) -> tuple[Callable[[], ExecutorSandbox], str]:
    """How to start a synthesis sandbox of `repo`: in `environment` (built here, once) with its setup
    commands run, as a task made from it will be; and the key of that runner for the baseline cache."""
    key = config.model_dump_json(include={"backend", "image", "python_env"})
    if environment is None:
        return lambda: start_sandbox(config, repo), key
    chosen = backend(config.backend)
    config, image = chosen.in_environment(
        chosen.build_environment(environment, config.image, None, True), config
    )
    commands = environment.setup_commands()

    def start() -> ExecutorSandbox:
        sandbox = start_sandbox(config, repo, image)
        try:
            run_commands(sandbox, commands, timeout=120)
        except SandboxError:
            sandbox.close()
            raise
        return sandbox

    return start, f"{key} {env_key(environment, config.image)}"
