"""The sandboxes' Python environment (envs/python_env.py): task code and tests run with the same pytest on
both backends, and a bubblewrap sandbox never runs them with the harness's own environment."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from envs.python_env import REQUIREMENTS, EnvBuildError, default_env_dir, is_built, sandbox_env
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig
from tests.conftest import IN_CI, require_backend
from tests.harness.test_cli import harness

VERSIONS = (
    "python3 -c 'import importlib.metadata as m, json;"
    ' print(json.dumps({d: m.version(d) for d in ["pytest", "pluggy", "iniconfig", "packaging", "attrs"]}))\''
)


def versions(sandbox: ExecutorSandbox) -> dict[str, str]:
    result = sandbox.run(VERSIONS)
    assert result.exit_code == 0, result.output
    found: dict[str, str] = json.loads(result.output)
    return {name: version.split("+")[0] for name, version in found.items()}  # Debian's 1.0.0+repack


def test_the_environment_is_built_where_ci_runs() -> None:
    """`make setup` builds it; without it the bwrap grades below would run on the harness's pytest."""
    if IN_CI:
        assert is_built(default_env_dir()), f"{default_env_dir()} is not built: run `harness env build`"
    elif not is_built(default_env_dir()):
        pytest.skip("no sandbox environment built here (`harness env build`)")
    lock = json.loads((default_env_dir() / "harness-env.json").read_text())
    assert lock["requirements"] == list(REQUIREMENTS)
    assert all(any(line.lower() == r.lower() for line in lock["installed"]) for r in REQUIREMENTS), lock


def test_env_build_keeps_a_built_environment() -> None:
    """Run again (every `make setup`), it reuses what is built, without the package index."""
    folder = default_env_dir()
    if not is_built(folder):
        pytest.fail(f"{folder} is not built: run `harness env build`")
    record = (folder / "harness-env.json").stat().st_mtime_ns
    proc = harness("env", "build", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(folder)
    assert (folder / "harness-env.json").stat().st_mtime_ns == record


def test_both_backends_run_the_same_pytest(
    make_sandbox: Callable[..., ExecutorSandbox], backend: str
) -> None:
    """The bubblewrap sandbox's packages are the sandbox image's, version for version."""
    require_backend("docker")
    require_backend("bwrap")
    if not is_built(default_env_dir()):
        pytest.fail("the sandbox environment is not built (`harness env build`)")
    wanted = dict(r.split("==") for r in REQUIREMENTS)
    found = versions(make_sandbox())
    assert found == {name: wanted[name] for name in found}, (backend, found)


def test_a_bwrap_sandbox_does_not_see_the_harnesss_own_packages(sample_repo: Path) -> None:
    """The harness's test plugins (anyio, pytest-timeout) and its libraries are not importable there."""
    require_backend("bwrap")
    from envs.bwrap import start_bwrap

    if not is_built(default_env_dir()):
        pytest.fail("the sandbox environment is not built (`harness env build`)")
    sandbox = start_bwrap(SandboxConfig(backend="bwrap"), sample_repo)
    try:
        result = sandbox.run("python3 -c 'import anyio' ; python3 -c 'import pytest_timeout'")
    finally:
        sandbox.close()
    assert result.output.count("ModuleNotFoundError") == 2, result.output


def test_a_configured_environment_that_is_none_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EnvBuildError, match="not a virtual environment"):
        sandbox_env(tmp_path)
    require_backend("bwrap")
    from envs.bwrap import start_bwrap

    with pytest.raises(EnvBuildError, match="not a virtual environment"):
        start_bwrap(SandboxConfig(backend="bwrap", python_env=tmp_path), tmp_path)


def test_without_a_built_environment_the_harnesss_own_is_used_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert not is_built(default_env_dir())
    with pytest.warns(UserWarning, match="harness env build"):
        assert sandbox_env(None) is None
    half = default_env_dir()
    (half / "bin").mkdir(parents=True)
    (half / "bin" / "python3").symlink_to("/bin/true")
    assert not is_built(half)  # a build that stopped before its record is no environment
