"""Who a sandbox is on the host: an unprivileged user on both backends, held to its process limit even
where no control group can be made, and able to read a source behind a folder only root may search."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from envs.host_paths import reachable
from envs.remote import ExecutorSandbox

ROOT = Path(__file__).resolve().parents[2]
MakeSandbox = Callable[..., ExecutorSandbox]

FORKS = (
    "python3 -c 'import os, time\n"
    "n = 0\n"
    "for _ in range(1000):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError:\n"
    "        break\n"
    "    if pid == 0:\n"
    "        time.sleep(5)\n"
    "        os._exit(0)\n"
    "    n += 1\n"
    'print("forked", n)\''
)
"""Forks children that stay alive until one fork fails, then prints how many it made."""


def sandbox_chain(seconds: str) -> list[tuple[list[str], tuple[int, ...]]] | None:
    """The command line and host uids of the host process `sleep SECONDS` and of each of its parents."""
    for proc in psutil.process_iter(["cmdline"]):
        if proc.info["cmdline"] == ["sleep", seconds]:
            try:
                return [(p.cmdline(), tuple(p.uids())) for p in (proc, *proc.parents())]
            except psutil.Error:
                return None
    return None


def test_a_sandbox_runs_as_an_unprivileged_host_user(make_sandbox: MakeSandbox) -> None:
    """Its processes, seen from the host, belong to a user that is not root, and so does its executor."""
    sandbox = make_sandbox()
    seconds = f"7.{os.getpid()}{threading.get_ident() % 1000}"
    runner = threading.Thread(target=sandbox.run, args=(f"sleep {seconds}",), kwargs={"timeout": 30})
    runner.start()
    try:
        deadline = time.monotonic() + 20
        while (chain := sandbox_chain(seconds)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        runner.join()
    assert chain is not None, f"sleep {seconds} never showed among the host's processes"
    executor = next(i for i, (line, _) in enumerate(chain) if any("executor.py" in a for a in line))
    inside = chain[: executor + 1]
    assert all(0 not in uids for _, uids in inside), inside


def test_a_source_behind_a_private_folder_is_readable_inside(
    tmp_path: Path, make_sandbox: MakeSandbox
) -> None:
    """A checkout in a folder only root may search (as under /root) and itself private to root: the
    sandbox's user reads it all the same (a readable copy, bound through a root-made mount)."""
    private = tmp_path / "private"
    source = private / "checkout"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("VALUE = 41\n")
    source.chmod(0o700)
    private.chmod(0o700)

    result = make_sandbox(source=source).run("cat pkg/mod.py")

    assert result.exit_code == 0 and result.output == "VALUE = 41\n", result.output


def test_reachable_follows_every_parent() -> None:
    base = Path(tempfile.mkdtemp(prefix="harness-reach-"))  # pytest's own folders are private to root
    try:
        inner = base / "a" / "b"
        inner.mkdir(parents=True)
        (inner / "f").write_text("x")
        for p in (base, base / "a", inner):
            p.chmod(0o755)
        (inner / "f").chmod(0o644)
        assert reachable(inner / "f", 61000, 61000) and reachable(inner, 61000, 61000)
        (base / "a").chmod(0o700)
        assert not reachable(inner / "f", 61000, 61000)
        (base / "a").chmod(0o711)  # search without listing is enough for a parent
        assert reachable(inner / "f", 61000, 61000)
        (inner / "f").chmod(0o600)
        assert not reachable(inner / "f", 61000, 61000)
        assert not reachable(base / "missing", 61000, 61000)
    finally:
        shutil.rmtree(base)


START_AND_BOMB = """
import json, sys
from pathlib import Path
from envs.bwrap import start_bwrap
from envs.sandbox import SandboxConfig

config = SandboxConfig(backend="bwrap", pids_limit=64, state_dir=Path(sys.argv[2]))
sandbox = start_bwrap(config, Path(sys.argv[1]))
try:
    result = sandbox.run(sys.argv[3], timeout=30)
    print(json.dumps({"cgroup": sandbox.isolation.group is not None, "output": result.output,
                      "failure": result.failure}))
finally:
    sandbox.close()
"""


def test_the_process_limit_holds_where_no_cgroup_can_be_made(tmp_path: Path, sample_repo: Path) -> None:
    """bwrap in a private mount namespace whose /sys/fs/cgroup is read-only, as on a host that delegates no
    cgroup: the sandbox's processes stop at `pids_limit` (the executor's rlimit, counted per user
    namespace), and the sandbox is marked as having hit it; a shell's `ulimit -u` (not in dash) and a sandbox
    mapped to host root (whom the kernel does not hold to the rlimit) had no limit at all."""
    if os.geteuid() != 0:
        pytest.skip("making a mount namespace needs root; CI runs as root")
    script = tmp_path / "bomb.py"
    script.write_text(START_AND_BOMB)
    hide_cgroups = 'mount -t tmpfs -o ro,size=4k none /sys/fs/cgroup && exec "$@"'
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", hide_cgroups, "sh"]
    state = Path(tempfile.mkdtemp(prefix="hu-", dir="/tmp"))  # a socket path has at most 107 bytes
    command += [sys.executable, str(script), str(sample_repo), str(state), FORKS]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    finally:
        shutil.rmtree(state, ignore_errors=True)

    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["cgroup"] is False, seen
    forked = int(seen["output"].split()[-1])
    assert 16 <= forked < 64, seen  # the executor and the shell count too
    assert "process limit" in (seen["failure"] or ""), seen  # seen as a fork bomb, as with a cgroup
