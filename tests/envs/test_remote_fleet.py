"""Remote sandboxes (`envs/remote_backend.py`) served by real `harness sandbox-server` processes
(`envs/sandbox_server.py`), each on its local backend (bwrap, or Docker where said) and in a network
namespace of its own joined to the test's by a veth pair, as a host of its own would be (on loopback
addresses of their own where namespaces cannot be made or the test says so): the sandbox protocol through
a server, a server killed mid-command, a client killed or frozen mid-command, capacity, health and the
fleet's secret, the server's maxima, a whole rollout graded through the servers, and tasks whose
environment or image the servers build."""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from envs import backends, remote_backend
from envs.channel import ExecutorChannel
from envs.docker import image_exists, remove_image
from envs.factory import build_task_env, start_sandbox, start_task_sandbox
from envs.grading import grade_patch
from envs.lifecycle import reap
from envs.remote import ExecutorSandbox
from envs.replacing import ReplacingSandbox
from envs.sandbox import SandboxConfig, SandboxError, SandboxUnusable
from envs.sandbox_server import ServerMaxima, buildable
from envs.stream_auth import HandshakeError, TcpDialer, derive, read_secret
from tasks.environment import Environment, declared_environment
from tasks.model import HiddenTests, Task
from tests.conftest import require_backend
from tests.envs import test_task_env

ROOT = Path(__file__).resolve().parents[2]


class Namespace:
    """A network namespace joined to this one by a veth pair; `host` is its address."""

    def __init__(self, index: int) -> None:
        tag = f"{os.getpid() % 100000}x{index}"
        self.name, self.outer, inner = f"hsb{tag}", f"ho{tag}", f"hi{tag}"
        net = f"10.213.{(os.getpid() % 60) * 4 + index}"
        self.host = f"{net}.2"
        steps = [
            ["netns", "add", self.name],
            ["link", "add", self.outer, "type", "veth", "peer", "name", inner],
            ["link", "set", inner, "netns", self.name],
            ["addr", "add", f"{net}.1/24", "dev", self.outer],
            ["link", "set", self.outer, "up"],
            ["-n", self.name, "addr", "add", f"{self.host}/24", "dev", inner],
            ["-n", self.name, "link", "set", inner, "up"],
            ["-n", self.name, "link", "set", "lo", "up"],
        ]
        try:
            for step in steps:
                subprocess.run(["ip", *step], check=True, capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            self.remove()
            raise

    def remove(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True, timeout=10)


def namespace(index: int) -> Namespace | None:
    """A namespace of its own for server `index`, where this process may make one (root, `ip`)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return None
    try:
        return Namespace(index)
    except (OSError, subprocess.SubprocessError):
        return None


class Server:
    """One `harness sandbox-server` process, in `space` where given, else on the loopback address `host`;
    what it logs goes to `log`."""

    def __init__(
        self,
        host: str,
        space: Namespace | None,
        secret: Path,
        state: Path,
        capacity: int,
        heartbeat: float,
        backend: str = "bwrap",
        options: tuple[str, ...] = (),
    ) -> None:
        listen = f"{space.host if space else host}:0"
        command = [
            sys.executable,
            "-m",
            "harness.cli",
            "sandbox-server",
            "--listen",
            listen,
            "--secret-file",
            str(secret),
        ]
        command += ["--capacity", str(capacity), "--heartbeat-timeout-s", str(heartbeat)]
        command += ["--backend", backend, *options]
        prefix = ["nsenter", f"--net=/run/netns/{space.name}", "--"] if space else []  # execs: same pid
        self.state, self.space, self.log = state, space, state.with_suffix(".log")
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [*prefix, *command, "--state-dir", str(state)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line
        self.address = line.split()[-1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: its sandboxes are closed
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        reap(self.state)  # what a server killed with SIGKILL left
        if self.space is not None:
            self.space.remove()
        print(self.log.read_text())
        self.log.unlink(missing_ok=True)


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.secret"
    path.write_text(secrets.token_hex(32))
    path.chmod(0o600)
    return path


@pytest.fixture
def fleet(tmp_path: Path, secret_file: Path) -> Iterator[Callable[..., list[Server]]]:
    """Starts sandbox servers, each in a namespace of its own (with `space`, where one can be made) or on
    127.0.0.2, 127.0.0.3, ...; stops them afterwards."""
    require_backend("bwrap")
    servers: list[Server] = []

    states: list[Path] = []

    def start(
        n: int = 1,
        capacity: int = 2,
        heartbeat: float = 3.0,
        backend: str = "bwrap",
        space: bool = True,
        options: tuple[str, ...] = (),
    ) -> list[Server]:
        for _ in range(n):
            i = len(servers)
            # A short folder: the executors' socket paths must fit AF_UNIX's 108 bytes, which pytest's
            # tmp_path under xdist (/tmp/pytest-of-root/pytest-N/popen-gwK/test_.../) did not leave them.
            states.append(Path(tempfile.mkdtemp(prefix=f"hs{i}-", dir="/tmp")))
            where = namespace(i) if space else None
            servers.append(
                Server(
                    f"127.0.0.{i + 2}", where, secret_file, states[-1], capacity, heartbeat, backend, options
                )
            )
        return servers

    yield start
    for server in servers:
        server.stop()
    for state in states:
        shutil.rmtree(state, ignore_errors=True)


def remote(servers: list[Server], secret: Path, **settings: object) -> SandboxConfig:
    return SandboxConfig(
        backend="remote",
        remote=[s.address for s in servers],
        remote_secret=secret,
        **settings,  # type: ignore[arg-type]
    )


def free(server: Server, secret: Path) -> int:
    return remote_backend.ping(server.address, read_secret(secret))


def test_the_sandbox_protocol_works_through_a_server(
    fleet: Callable[..., list[Server]], secret_file: Path, sample_repo: Path, tmp_path: Path
) -> None:
    (server,) = fleet()
    sandbox = start_sandbox(remote([server], secret_file), sample_repo)
    assert free(server, secret_file) == 1
    try:
        assert sandbox.backend == "remote"
        result = sandbox.run("python3 -c 'import pkg.calc; print(pkg.calc.add(2, 3))'")
        assert (result.exit_code, result.output.strip()) == (0, "5")
        assert sandbox.run("sleep 5", timeout=0.5).timed_out
        sandbox.write_file("notes/a.txt", b"hello")
        assert sandbox.read_file("notes/a.txt") == b"hello"
        sandbox.copy_out("/repo", tmp_path / "out")
        assert (tmp_path / "out" / "notes" / "a.txt").read_bytes() == b"hello"
        host, port = server.address.split(":")  # the server's own listener is out of the sandbox's reach
        reach = f"import socket; socket.create_connection(('{host}', {port}), 2)"
        assert sandbox.run(["python3", "-c", reach]).exit_code != 0
        sandbox.reset()
        assert sandbox.run("test -e notes/a.txt").exit_code != 0
        assert sandbox.run("cat pkg/calc.py").output.startswith("def add")
        name = remote_backend.stream_name(
            sandbox.id
        )  # the data stream is accepted once, even with its secret
        key = sandbox.isolation.control.transport.session_key  # type: ignore[attr-defined]
        with pytest.raises(HandshakeError):
            ExecutorChannel(TcpDialer(server.address, name, derive(key, name))).accept(5, lambda: True, str)
        assert sandbox.run("echo still mine").output.strip() == "still mine"
    finally:
        sandbox.close()
        sandbox.close()
    assert free(server, secret_file) == 2


def test_a_served_sandbox_keeps_the_limits_its_client_asked_for(
    fleet: Callable[..., list[Server]], secret_file: Path
) -> None:
    """The client's `pids_limit` holds on the server, and the server's limit counter reaches the client."""
    (server,) = fleet()
    sandbox = start_sandbox(remote([server], secret_file, pids_limit=32))
    try:
        spawn = "import subprocess\nfor _ in range(60): subprocess.Popen(['sleep', '5'])"
        result = sandbox.run(["python3", "-c", spawn], timeout=30)
        assert result.failure is not None and "process limit" in result.failure, result
    finally:
        sandbox.close()


def test_a_command_outlives_the_heartbeat_timeout_and_a_sandbox_its_expiry(
    fleet: Callable[..., list[Server]], secret_file: Path
) -> None:
    """The heartbeats keep a sandbox whose command runs longer than the server's timeout (2 s here); a
    sandbox older than its `expiry_s` is destroyed by the server, and its client's next call fails."""
    (server,) = fleet(heartbeat=2.0)
    sandbox = start_sandbox(remote([server], secret_file))
    short = start_sandbox(remote([server], secret_file, expiry_s=1.0))
    try:
        assert sandbox.run("sleep 3; echo done").output.strip() == "done"
        with pytest.raises(SandboxUnusable):
            short.run("echo too late")
        assert free(server, secret_file) == 1
    finally:
        sandbox.close()
        short.close()


def test_a_stopped_server_destroys_its_sandboxes(
    fleet: Callable[..., list[Server]], secret_file: Path
) -> None:
    (server,) = fleet()
    sandbox = start_sandbox(remote([server], secret_file))
    assert list(server.state.rglob(f"{sandbox.id}.*"))
    server.proc.terminate()  # SIGTERM
    server.proc.wait(timeout=20)
    assert not list(server.state.rglob(f"{sandbox.id}.*"))
    with pytest.raises(SandboxUnusable, match="lost"):
        sandbox.run("true")
    sandbox.close()


def run_in_thread(sandbox: ExecutorSandbox, command: str) -> dict[str, object]:
    outcome: dict[str, object] = {}

    def go() -> None:
        try:
            outcome["result"] = sandbox.run(command, timeout=60)
        except SandboxError as e:
            outcome["error"] = e
        outcome["at"] = time.monotonic()

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def test_a_server_killed_mid_command_makes_the_sandbox_unusable_and_a_new_one_starts_elsewhere(
    fleet: Callable[..., list[Server]], secret_file: Path, sample_repo: Path
) -> None:
    servers = fleet(2)
    config = remote(servers, secret_file)
    sandbox = ReplacingSandbox(lambda: start_sandbox(config, sample_repo))
    inner = sandbox.inner
    assert isinstance(inner.isolation, remote_backend.RemoteIsolation)
    (victim,) = [s for s in servers if s.address == inner.isolation.address]
    sandbox.run("echo work > work.txt")
    outcome = run_in_thread(inner, "sleep 30")
    time.sleep(0.5)
    killed = time.monotonic()
    victim.proc.send_signal(signal.SIGKILL)
    outcome["thread"].join(10)  # type: ignore[attr-defined]
    assert isinstance(outcome.get("error"), SandboxUnusable), outcome
    assert float(outcome["at"]) - killed < 5  # type: ignore[arg-type]
    assert "lost" in str(outcome["error"]) or "died" in str(outcome["error"])
    result = sandbox.run("cat work.txt")  # the sandbox replaces itself: on the other server, repository lost
    assert result.replaced and not result.carried_over
    assert sandbox.lost is not None  # what makes the episode an infra error
    assert sandbox.inner.isolation.address != victim.address  # type: ignore[attr-defined]
    assert sandbox.run("cat pkg/calc.py").exit_code == 0
    sandbox.close()


CLIENT = """
import sys
from pathlib import Path
from envs.factory import start_sandbox
from envs.sandbox import SandboxConfig
config = SandboxConfig(backend="remote", remote=[sys.argv[1]], remote_secret=Path(sys.argv[2]))
sandbox = start_sandbox(config, None)
print(sandbox.id, flush=True)
sandbox.run("sleep 120", timeout=200)
"""


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_the_sandboxes_of_a_vanished_client_are_reaped(
    how: str, fleet: Callable[..., list[Server]], secret_file: Path
) -> None:
    """Killed: its streams close and the server destroys at once. Frozen (SIGSTOP, as a host that drops
    off the network without closing anything): the heartbeats stop, and the server destroys within its
    heartbeat timeout (3 s here)."""
    (server,) = fleet(capacity=2, heartbeat=3.0)
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, server.address, str(secret_file)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdout is not None
    sandbox_id = client.stdout.readline().strip()
    assert sandbox_id and free(server, secret_file) == 1
    assert list(server.state.rglob(f"{sandbox_id}.*"))
    time.sleep(1)
    client.send_signal(signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    gone = time.monotonic()
    while free(server, secret_file) != 2:
        assert time.monotonic() - gone < (2 if how == "killed" else 3.0 + 2), "not reaped in time"
        time.sleep(0.1)
    assert not list(server.state.rglob(f"{sandbox_id}.*"))
    client.kill()
    client.wait()


def test_a_full_server_refuses_and_the_client_takes_the_next(
    fleet: Callable[..., list[Server]], secret_file: Path
) -> None:
    first, second = fleet(2, capacity=1)
    only_first = remote([first], secret_file)
    a = start_sandbox(only_first)
    try:
        with pytest.raises(SandboxError, match="full"):
            start_sandbox(only_first)
        b = start_sandbox(remote([first, second], secret_file))
        assert b.isolation.address == second.address  # type: ignore[attr-defined]
        b.close()
    finally:
        a.close()


def test_a_server_that_does_not_answer_is_skipped(
    fleet: Callable[..., list[Server]], secret_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (server,) = fleet()
    monkeypatch.setattr(remote_backend, "CONNECT_TIMEOUT_S", 0.5)
    monkeypatch.setattr(remote_backend, "_turn", itertools.count())  # the first start begins at the first
    monkeypatch.setattr(remote_backend, "_down", {})
    silent = socket.create_server(("127.0.0.9", 0))  # accepts, never speaks
    dead = "127.0.0.10:9"  # nothing listens
    addresses = [f"127.0.0.9:{silent.getsockname()[1]}", dead, server.address]
    config = SandboxConfig(backend="remote", remote=addresses, remote_secret=secret_file)
    start = time.monotonic()
    sandbox = start_sandbox(config)
    assert sandbox.isolation.address == server.address  # type: ignore[attr-defined]
    assert time.monotonic() - start < 10
    sandbox.close()
    assert set(addresses[:2]) <= set(remote_backend._down)  # tried after the others for a while
    sandbox = start_sandbox(config)
    assert sandbox.isolation.address == server.address  # type: ignore[attr-defined]
    sandbox.close()
    silent.close()


def test_a_client_chooses_only_the_limits_of_its_sandbox(
    fleet: Callable[..., list[Server]], secret_file: Path
) -> None:
    """The server's own settings (its backend, state folder, host user) are not a client's to change."""
    (server,) = fleet()
    control = ExecutorChannel(TcpDialer(server.address, remote_backend.CONTROL, read_secret(secret_file)))
    control.accept(5, lambda: True, str)
    for settings in ({"host_uid": 0}, {"state_dir": "/etc"}, {"backend": "docker"}, {"memory_mb": 1}):
        reply = control.call({"op": "start", "settings": settings, "source": None, "recipe": {}}, 30)
        assert not reply["ok"] and "could not start" in reply["error"], (settings, reply)
    for recipe in ({"image": "--privileged"}, {"image": None, "volumes": ["/:/host"]}):  # nor engine options
        reply = control.call({"op": "start", "settings": {}, "source": None, "recipe": recipe}, 30)
        assert not reply["ok"] and "could not start" in reply["error"], (recipe, reply)
    assert control.call({"op": "ping"}, 5) == {"ok": True, "free": 2}
    control.close()


def test_a_client_without_the_fleet_secret_is_refused(
    fleet: Callable[..., list[Server]], tmp_path: Path
) -> None:
    (server,) = fleet()
    wrong = tmp_path / "wrong.secret"
    wrong.write_text(secrets.token_hex(32))
    wrong.chmod(0o600)
    with pytest.raises(SandboxError, match="handshake"):
        start_sandbox(SandboxConfig(backend="remote", remote=[server.address], remote_secret=wrong))
    os.chmod(wrong, 0o644)
    with pytest.raises(SandboxError, match="chmod 600"):
        start_sandbox(SandboxConfig(backend="remote", remote=[server.address], remote_secret=wrong))


def test_a_rollout_reaches_reward_1_through_sandbox_servers(
    fleet: Callable[..., list[Server]], secret_file: Path, tmp_path: Path
) -> None:
    from harness.rollouts.config import RolloutConfig
    from harness.rollouts.local import rollout
    from tasks.suite import load_suite

    servers = fleet(2, capacity=4)
    task = load_suite("builtin")[0]
    config = RolloutConfig(
        tasks=[task.id], policy="scripted:gold", out=tmp_path / "run", sandbox=remote(servers, secret_file)
    )
    summary = rollout(config)
    assert (summary.trajectories, summary.mean_reward) == (1, 1.0), summary


@pytest.mark.timeout(300)
def test_rollouts_on_ray_workers_take_their_sandboxes_from_the_servers(
    fleet: Callable[..., list[Server]], secret_file: Path, tmp_path: Path
) -> None:
    """The recipe of docs/scale.md on one machine: rollout workers on a local Ray cluster, every sandbox
    served by the fleet (the workers are other processes: the settings and the secret reach them)."""
    from harness.rollouts.config import RolloutConfig
    from harness.rollouts.local import rollout

    servers = fleet(2, capacity=4)
    config = RolloutConfig.model_validate(
        {
            "suite": "demo", "tasks": ["demo-add", "demo-area"], "policy": "scripted:gold", "group_size": 2,
            "out": str(tmp_path / "run"), "sandbox": remote(servers, secret_file).model_dump(),
            "cluster": {"address": "local", "workers": 2},
        }
    )  # fmt: skip
    summary = rollout(config)
    assert (summary.trajectories, summary.mean_reward) == (4, 1.0), summary
    started = sum(server.log.read_text().count(" started (") for server in servers)
    assert started >= 4, [server.log.read_text() for server in servers]  # each episode's, and its grades


def test_a_client_may_ask_no_more_than_the_servers_maxima(
    fleet: Callable[..., list[Server]], secret_file: Path
) -> None:
    """Above a maximum a start is refused, naming the setting and the maximum, never served with less
    (docs/reliability.md 5j: a client asked for 20 GB of memory and got it); at the maxima it is served."""
    (server,) = fleet()
    maxima = ServerMaxima().model_dump(exclude={"build_s"})  # the limits of a sandbox (a build's: below)
    for name, most in maxima.items():
        above = f"sandbox\\.{name}={most * 2}.* is above this server's maxima\\.{name}={most}"
        with pytest.raises(SandboxError, match=above):
            start_sandbox(remote([server], secret_file, **{name: most * 2}))
    assert free(server, secret_file) == 2
    sandbox = start_sandbox(remote([server], secret_file, **maxima))
    try:
        assert sandbox.run("echo served").output.strip() == "served"
    finally:
        sandbox.close()


# ---- tasks whose environment or image the servers build ----------------------------------------------

index = test_task_env.index  # a package index on loopback, and the cache the environments are built into
built = test_task_env.built


def vlib_task(root: Path) -> Task:
    """acme/vlib (a src/ layout, a generated version file, a dependency from the index) whose hidden
    `test_version` a half fix fails."""
    repo = test_task_env.write(root / "repo", test_task_env.VLIB)
    hidden = HiddenTests(
        files={
            "tests/test_scale.py": test_task_env.VLIB_TESTS.replace(
                '"0.0.0"', '"0.0.0" and vlib.scale(0) == 0'
            )
        },
        fail_to_pass=["tests/test_scale.py::test_scale"],
        pass_to_pass=["tests/test_scale.py::test_version"],
    )
    environment = declared_environment(repo)
    return Task(
        id="vlib",
        title="scale",
        repo=repo,
        problem_statement="scale",
        environment=environment,
        hidden_tests=hidden,
    )


def test_a_task_with_its_own_environment_is_graded_through_a_server_as_locally(
    backend: str, fleet: Callable[..., list[Server]], secret_file: Path, built: Path, tmp_path: Path
) -> None:
    """On each backend, the server builds the task's environment when a sandbox first needs it (fetching
    from the package index of its host: the test's, on loopback), once for two sandboxes asked for at the
    same time, and reuses it after; the fix and a half fix grade test by test as on the local backend,
    which finds the server's build by the same key."""
    # its pip reaches the test's package index on loopback
    (server,) = fleet(capacity=3, backend=backend, space=False)
    task = vlib_task(tmp_path)
    served = remote([server], secret_file)
    with ThreadPoolExecutor(2) as pool:
        sandboxes = list(pool.map(lambda _: start_task_sandbox(task, served), range(2)))
    remote_ = backends.backend("remote")  # and as `tasks synth` starts its sandboxes, from what a build gave
    assert task.environment is not None
    built_here = remote_.build_environment(task.environment, served.image, None, True)
    synth, image = remote_.in_environment(built_here, served)
    try:
        sandboxes.append(start_sandbox(synth, task.repo, image))
        for sandbox in sandboxes:
            assert sandbox.run("python3 -c 'import tinydep; print(tinydep.double(2))'").output == "4\n"
    finally:
        for sandbox in sandboxes:
            sandbox.close()
    fix = test_task_env.FIX
    half = fix.replace("+    return double(x)\n", "+    return double(x) + (x == 0)\n")
    outcomes: dict[str, dict[str, object]] = {}
    for where, config in (("remote", served), ("local", SandboxConfig(backend=backend))):
        if where == "local":
            build_task_env(task, config, quiet=True)
        for name, patch in (("fix", fix), ("half", half)):
            grade = grade_patch(task, patch, config)
            assert grade.infra_error is None, grade.infra_error
            outcomes[f"{name} {where}"] = {**grade.fail_to_pass, **grade.pass_to_pass}
    assert outcomes["fix remote"] == outcomes["fix local"] == dict.fromkeys(outcomes["fix local"], "passed")
    assert (
        outcomes["half remote"]
        == outcomes["half local"]
        == {
            "tests/test_scale.py::test_scale": "passed",
            "tests/test_scale.py::test_version": "failed",
        }
    )
    assert server.log.read_text().count(" ready in ") == 1, server.log.read_text()


def test_a_server_builds_only_requirements_of_the_package_index(
    fleet: Callable[..., list[Server]], secret_file: Path, sample_repo: Path
) -> None:
    """A server builds on its host, as root: a URL, a path or an option in a requirement, or a project
    name, version or package root that would make a path or a path file's line, is refused."""
    buildable(Environment(requirements=["tinydep>=1.0", 'attrs[tests] (>=22); python_version >= "3.8"']))
    bad = [
        Environment(requirements=["evil @ https://example.com/evil-1.0.tar.gz"]),
        Environment(requirements=["--index-url=http://example.com/simple"]),
        Environment(requirements=["./vendored"]),
        Environment(project="../../etc"),
        Environment(version="0/../../../etc/x"),
        Environment(package_root="src\nimport os; os.system('id')"),
    ]
    for environment in bad:
        with pytest.raises(ValueError, match="environment: "):
            buildable(environment)
    (server,) = fleet()
    task = Task(
        id="evil",
        title="e",
        repo=sample_repo,
        problem_statement="e",
        environment=bad[0],
        hidden_tests=HiddenTests(fail_to_pass=["tests/test_calc.py::test_add"]),
    )
    with pytest.raises(SandboxError, match="is not a requirement of the package index"):
        start_task_sandbox(task, remote([server], secret_file))
    assert free(server, secret_file) == 2


def built_as(context: Path) -> str:
    """The name a server gives the image it builds from `context`."""
    import hashlib

    packed = remote_backend._pack(context)
    assert packed is not None
    return "harness-served/" + hashlib.sha256(packed.encode()).hexdigest()


def test_a_tasks_image_is_built_by_a_docker_server_and_refused_by_a_bwrap_one(
    fleet: Callable[..., list[Server]], secret_file: Path, sample_repo: Path, tmp_path: Path
) -> None:
    require_backend("docker")
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM harness-sandbox:latest\nCOPY marker.txt /opt/marker.txt\n")
    (context / "marker.txt").write_text("built on the server\n")
    image = f"harness-task/served-build:{secrets.token_hex(8)}"  # as `tasks.suite.image_tag` names it
    served = built_as(context)
    (docker_server,) = fleet(backend="docker", space=False)
    bwrap_server = fleet()[-1]
    try:
        sandbox = start_sandbox(remote([docker_server], secret_file), sample_repo, image, context)
        try:
            assert sandbox.run("cat /opt/marker.txt").output == "built on the server\n"
            assert sandbox.run("cat pkg/calc.py").output.startswith("def add")
        finally:
            sandbox.close()
        assert image_exists(served) and not image_exists(image)  # named by its context, never the client
        with pytest.raises(SandboxError, match="bwrap backend cannot build images"):
            start_sandbox(remote([bwrap_server], secret_file), sample_repo, image, context)
    finally:
        remove_image(served)


def test_an_archive_whose_paths_go_through_its_links_is_refused(tmp_path: Path) -> None:
    """Red team (docs/reliability.md 5j): a chain of links and a path through them wrote a file outside the
    server's folder, past the `data` filter of a Python without the fix of CVE-2025-4517. A tar of a folder
    never has such a path, so the server refuses any."""
    import base64
    import io
    import tarfile

    from envs.sandbox_server import _unpack

    def archive(*members: tuple[str, str | None]) -> str:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, link in members:
                info = tarfile.TarInfo(name)
                if link is None:
                    tar.addfile(info, io.BytesIO(b""))
                else:
                    info.type, info.linkname = tarfile.SYMTYPE, link
                    tar.addfile(info)
        return base64.b64encode(buffer.getvalue()).decode()

    with pytest.raises(tarfile.TarError, match="goes through the link escape"):
        _unpack(archive(("escape", "."), ("escape/x", None)), tmp_path / "a")
    _unpack(archive(("pkg/link", "../README"), ("README", None), ("pkg/mod.py", None)), tmp_path / "b")
    assert (tmp_path / "b" / "pkg" / "link").is_symlink() and (tmp_path / "b" / "pkg" / "mod.py").is_file()
    compressed = io.BytesIO()  # a client packs none; a small bomb would fill the server's disk
    with tarfile.open(fileobj=compressed, mode="w:gz") as tar:
        tar.addfile(tarfile.TarInfo("zeros"), io.BytesIO(b""))
    with pytest.raises(tarfile.ReadError):
        _unpack(base64.b64encode(compressed.getvalue()).decode(), tmp_path / "c")
    with pytest.raises(ValueError, match="max_build_context_mb=1"):
        _unpack(archive(("big", None)) + "A" * (2 << 20), tmp_path / "d", most_mb=1)


def _tar(*members: tuple[str, str | None]) -> str:
    """A tar (base64) of empty files (link None), folders (a name ending in /) and symbolic links."""
    import base64
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, link in members:
            info = tarfile.TarInfo(name)
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info, None if info.isdir() or info.issym() else io.BytesIO(b""))
    return base64.b64encode(buffer.getvalue()).decode()


def test_an_archive_with_dotdot_parts_or_links_through_links_is_refused(tmp_path: Path) -> None:
    """Red team 2 (docs/reliability.md 5j, 2a): the chain of links of CVE-2025-4517 with `q/../` before each
    name stepped around the check of literal prefixes and wrote as root outside the folder. A name that is
    absolute or has a `..` part, a link target that is absolute, leaves the folder or goes through a link,
    is refused; a tar of a folder has none of them."""
    import tarfile

    from envs.sandbox_server import _unpack

    chain = [("q/", None), ("d/", None), ("a", "d"), ("q/../a/x", None)]
    refused = {
        "dotdot": (chain, "has a '..' part"),
        "absolute": ([("/etc/x", None)], "absolute"),
        "absolute target": ([("l", "/etc")], "absolute"),
        "target leaves": ([("p/l", "../../etc")], "leaves the folder"),
        "target through a link": ([("a", "d/e"), ("escape", "a/../../..")], "goes through the link a"),
    }
    for i, (members, match) in enumerate(refused.values()):
        with pytest.raises(tarfile.TarError, match=match):
            _unpack(_tar(*members), tmp_path / f"r{i}")
    _unpack(_tar(("pkg/link", "../README"), ("README", None), ("bin/py", "../pkg/link")), tmp_path / "ok")
    assert (tmp_path / "ok" / "bin" / "py").is_symlink()


def test_a_client_never_names_the_image_another_client_runs_and_a_server_never_pulls(
    fleet: Callable[..., list[Server]], secret_file: Path, tmp_path: Path
) -> None:
    """Red team 2 (docs/reliability.md 5j, 2e, 2f, 2o): client B, asking for image N built from its own
    context, got client A's image built under N; a client built a plain image named as another's
    environment (`harness-env:KEY`), which that environment then ran in; an image named with a registry
    on the host's loopback had Docker pull from it. A server names what it builds by the context's hash,
    refuses its own names and registries, and starts no image it does not hold."""
    require_backend("docker")
    (server,) = fleet(backend="docker", space=False)
    config = remote([server], secret_file)
    name = f"harness-test/poison:{secrets.token_hex(4)}"
    contexts = []
    for who in ("a", "b"):
        context = tmp_path / who
        context.mkdir()
        (context / "Dockerfile").write_text(
            f"FROM harness-sandbox:latest\nUSER root\nRUN echo {who} > /opt/who\n"
        )
        contexts.append(context)
    try:
        for who, context in zip("ab", contexts, strict=True):
            sandbox = start_sandbox(config, None, name, context)
            try:
                assert sandbox.run("cat /opt/who").output == f"{who}\n"
            finally:
                sandbox.close()
        assert not image_exists(name)
        refused = {
            "harness-env:0123456789abcdef": "are the server's own",
            "harness-served/abc": "are the server's own",
            "127.0.0.1:5000/internal/thing:latest": "names a registry",
            "localhost/x": "names a registry",
            "dir:/tmp/x": "names a registry",
            "docker-daemon:harness-sandbox:latest": "is not an image's name",
            f"harness-test/absent:{secrets.token_hex(4)}": "not on this server",
        }
        for image, match in refused.items():
            with pytest.raises(SandboxError, match=match):
                start_sandbox(config, None, image, contexts[0] if image.startswith("harness-env") else None)
    finally:
        for context in contexts:
            remove_image(built_as(context))
    assert free(server, secret_file) == 2


def test_a_build_context_that_would_have_the_engine_fetch_is_refused(
    fleet: Callable[..., list[Server]], secret_file: Path, tmp_path: Path
) -> None:
    """Red team 2 (docs/reliability.md 5j, 2g): `ADD http://127.0.0.1:P/...` was fetched by dockerd from
    the host's loopback during a server's build. An ADD of a URL or git repository (continuation lines
    joined, ONBUILD's too), a `# syntax=` directive, and a base the server does not hold are refused."""
    from envs.sandbox_server import buildable_context

    refused = {
        "FROM harness-sandbox:latest\nADD http://127.0.0.1:1/secret /x\n": "ADD of a URL",
        "FROM harness-sandbox:latest\nADD --chown=1:1 \\\n  HTTP://10.0.0.1/s \\\n  /x\n": "ADD of a URL",
        'FROM harness-sandbox:latest\nONBUILD ADD ["https://h/s", "/x"]\n': "ADD of a URL",
        "FROM harness-sandbox:latest\nADD git@github.com:a/b.git /x\n": "git repository",
        "# syntax=docker/dockerfile:1\nFROM harness-sandbox:latest\n": "parser directive",
        "FROM 127.0.0.1:1/evil:latest\n": "not on this server",
        "FROM oci-archive:/etc/passwd\n": "builds from named images",
        "ARG B=x\nFROM $B\n": "builds from named images",
        "FROM harness-sandbox:latest\nCOPY --from=127.0.0.1:1/evil / /x\n": "not on this server",
    }
    for i, (dockerfile, match) in enumerate(refused.items()):
        context = tmp_path / f"c{i}"
        context.mkdir()
        (context / "Dockerfile").write_text(dockerfile)
        with pytest.raises(ValueError, match=match):
            buildable_context(context, lambda image: image == "harness-sandbox:latest")
    ok = "FROM harness-sandbox:latest AS base\nFROM base\nCOPY --from=base /etc/hostname /x\nADD a.tar /y\n"
    (tmp_path / "Dockerfile").write_text(ok)
    buildable_context(tmp_path, lambda image: image == "harness-sandbox:latest")
    require_backend("docker")
    (server,) = fleet(backend="docker", space=False)
    with pytest.raises(SandboxError, match="ADD of a URL"):
        start_sandbox(remote([server], secret_file), None, "harness-test/fetch:1", tmp_path / "c0")


def test_a_requirement_is_never_a_file_and_pip_builds_nothing_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team 2 (docs/reliability.md 5j, 2n): a requirement naming an archive (`rt2local-1.0.tar.gz`)
    that lay in the server's working folder had pip run its setup.py as root, `build_sdists` off. A
    requirement is parsed (PEP 508) and must name a project of the index; pip runs from an empty folder of
    its own, and takes wheels only (`--only-binary :all:` on its command line) unless the server says."""
    from envs import task_env

    for line in ("rt2local-1.0.tar.gz", "x.whl", "evil @ file:///tmp/x", "-e .", "a/b", "pkg.zip"):
        with pytest.raises(ValueError, match="is not a requirement of the package index"):
            buildable(Environment(requirements=[line]))
    buildable(Environment(requirements=["tinydep>=1.0", "zope.interface[test]~=6.0; os_name == 'posix'"]))
    ran: list[tuple[list[str], str]] = []

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        ran.append((command, str(kwargs.get("cwd"))))
        assert not os.listdir(str(kwargs["cwd"]))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(task_env.subprocess, "run", run)
    monkeypatch.setattr(task_env, "harness_cache", lambda: tmp_path)
    monkeypatch.chdir(tmp_path)
    for only in (True, False):
        with task_env.build_deadline(3600, wheels_only=only):
            task_env.fetch_wheels(["tinydep"], quiet=True)
        command, cwd = ran[-1]
        assert cwd != str(tmp_path) and ("--only-binary" in command) is only, command
        assert (
            command[command.index("wheel") + 1 : command.index("wheel") + 3] == ["--only-binary", ":all:"]
            or not only
        )


def test_a_tiny_cpu_quota_is_refused_not_read_as_no_limit(
    fleet: Callable[..., list[Server]], secret_file: Path
) -> None:
    """Red team 2 (docs/reliability.md 5j, 2k): `cpus=1e-9` rounded to a quota of 0, which cgroups (bwrap)
    and Docker read as no limit at all. The least a sandbox asks is 0.01 of a core, which each backend
    turns into a positive quota."""
    from pydantic import ValidationError

    for cpus in (1e-9, 0.0099, float("nan")):
        with pytest.raises(ValidationError, match="cpus"):
            SandboxConfig(cpus=cpus)
    least = SandboxConfig(cpus=0.01).cpus
    assert int(least * 1e9) > 0 and int(least * 100_000) >= 1000  # Docker's nano_cpus, cgroups' cpu.max
    (server,) = fleet()
    with pytest.raises(SandboxError, match="cpus"):
        start_sandbox(remote([server], secret_file).model_copy(update={"cpus": 1e-9}))
    assert free(server, secret_file) == 2


def test_a_sandbox_dies_at_its_expiry_however_its_client_keeps_its_stream_busy(
    fleet: Callable[..., list[Server]], secret_file: Path
) -> None:
    """Red team 2 (docs/reliability.md 5j, 2c): a client that kept two pings always in flight kept its
    sandbox past `expiry_s`, checked only when the control stream idled. It is checked on every request,
    and a timer destroys the sandbox at its expiry whatever its stream does."""
    (server,) = fleet(heartbeat=5.0)
    control = ExecutorChannel(TcpDialer(server.address, remote_backend.CONTROL, read_secret(secret_file)))
    control.accept(5, lambda: True, lambda: server.address)
    reply = control.call({"op": "start", "settings": {"expiry_s": 2.0}, "source": None, "recipe": {}}, 60)
    assert reply["ok"], reply
    began, stop, answers = time.monotonic(), threading.Event(), []

    def busy() -> None:
        try:
            control.send({"op": "ping"}, 5)
            while not stop.is_set():
                control.send({"op": "alive"}, 5)
                answers.append(control.receive(5))
        except (SandboxError, OSError):
            pass

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    try:
        while free(server, secret_file) < 2:
            assert time.monotonic() - began < 6, "the sandbox outlived its expiry_s=2"
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(10)
        control.close()
    assert answers and time.monotonic() - began >= 1.5


def test_a_build_ends_by_maxima_build_s_and_so_does_a_wait_for_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team 2 (docs/reliability.md 5j, 2h): a build held its place of the server's capacity forever
    after its client left. Each build step (pip, the engine's image builds) is stopped by `maxima.build_s`
    and the start refused; a start waiting for another's build of the same environment waits as long."""
    from envs.python_env import EnvBuildError
    from envs.sandbox_server import SandboxServer, ServerConfig
    from envs.task_env import build_deadline, env_key, fetch_wheels

    silent = socket.create_server(("127.0.0.1", 0))  # a package index that never answers
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{silent.getsockname()[1]}/simple")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    began = time.monotonic()
    with build_deadline(2.0), pytest.raises(EnvBuildError, match="did not end within"):
        fetch_wheels(["tinydep-never-there"], quiet=True)
    assert time.monotonic() - began < 10
    secret = tmp_path / "secret"
    secret.write_text(secrets.token_hex(32))
    secret.chmod(0o600)
    config = ServerConfig(listen="127.0.0.1:0", secret_file=secret, maxima=ServerMaxima(build_s=1.0))
    server = SandboxServer(config.model_copy(update={"sandbox": SandboxConfig(backend="bwrap")}), b"s" * 32)
    try:
        environment = Environment(requirements=["tinydep"])
        server._building[env_key(environment, "img")] = held = threading.Lock()
        held.acquire()  # another start's build that does not end
        began = time.monotonic()
        with pytest.raises(SandboxError, match=r"outlasted maxima\.build_s"):
            server._environment(environment, "img", None)
        assert 0.9 < time.monotonic() - began < 5
    finally:
        server.close()
        silent.close()


def test_a_source_larger_than_max_source_mb_is_refused(
    fleet: Callable[..., list[Server]], secret_file: Path, tmp_path: Path
) -> None:
    """Red team 2 (docs/reliability.md 5j, 2d): a 150 MiB source was read whole into the server's memory.
    A source tree's tar above `max_source_mb` is refused before it is decoded; one below it is served."""
    (server,) = fleet(options=("max_source_mb=1",))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "big.bin").write_bytes(os.urandom(2 << 20))
    with pytest.raises(SandboxError, match="larger than this server's max_source_mb=1"):
        start_sandbox(remote([server], secret_file), repo)
    (repo / "big.bin").write_bytes(os.urandom(1 << 19))
    sandbox = start_sandbox(remote([server], secret_file), repo)
    try:
        assert sandbox.run("wc -c < big.bin").output.strip() == str(1 << 19)
    finally:
        sandbox.close()


def test_a_request_line_longer_than_the_servers_caps_ends_its_connection(
    fleet: Callable[..., list[Server]], secret_file: Path
) -> None:
    """Red team 2 (docs/reliability.md 5j, 2d): 400 MiB without a newline grew the server by 400 MB. A line
    longer than a source and a build context at their caps (base64) ends the client's connection, and the
    server serves the next client."""
    (server,) = fleet(options=("max_source_mb=1", "max_build_context_mb=1"))
    secret = read_secret(secret_file)
    control = ExecutorChannel(TcpDialer(server.address, remote_backend.CONTROL, secret))
    control.accept(10, lambda: True, lambda: server.address)
    assert control._sock is not None
    rss = psutil.Process(server.proc.pid).memory_info().rss
    with pytest.raises(OSError):  # the server hangs up once the line passes 1 + 1 MB of tars, base64
        for _ in range(64):
            control._sock.sendall(b"x" * (1 << 20))
            time.sleep(0.01)
    assert psutil.Process(server.proc.pid).memory_info().rss - rss < 32 << 20
    assert free(server, secret_file) == 2
