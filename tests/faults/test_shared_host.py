"""Runs that share a host never touch each other's sandboxes (issue 33).

For `CHURN_S` seconds, `WORKERS` harness processes from two installs (this checkout and a clone of it)
start and stop sandboxes, gradings and rollouts on both backends, in the state folder and on the Docker
daemon every harness on the host shares, while two processes keep the cores busy. Every few seconds one
worker, with its whole process tree, dies of `kill -9` and a new one starts (its first sandbox reaps
what the dead left). Each worker steps the wall clock its liveness code reads by up to an hour either way
and shakes the start times psutil derives from it. Records of dead runs whose pids now belong to live
processes stand in for reused pids. No worker may lose a sandbox it is using, and at the end nothing of
a dead run may be left: folder, lock file, container, control group or process.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from envs.docker import client, reap_containers
from envs.lifecycle import LABEL, Owner, reap, start_ticks
from envs.sandbox import SandboxConfig
from tests.conftest import require_backend
from tests.envs.test_cleanup import CGROUP_ROOT

CHURN_S = 150.0
"""Seconds of churn: workers started, used and killed."""
WORKERS = 6
"""Harness processes alive at once, half of each install."""
KILL_EVERY_S = 15.0
"""Seconds between two `kill -9`s."""

WORKER = r"""
import json, random, sys, time, types
from pathlib import Path

import psutil

from envs import lifecycle

seed, backend, until = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
rng = random.Random(seed)
# The clock of a busy virtual machine, as the liveness code reads it: stepped forward and back, and
# the processes' start times that psutil derives from it shaken by most of a second.
real_time, real_create = time.time, psutil.Process.create_time
lifecycle.time = types.SimpleNamespace(
    time=lambda: real_time() + rng.choice([-3600.0, -0.8, 0.0, 0.8, 3600.0]),
    strftime=time.strftime, sleep=time.sleep, monotonic=time.monotonic,
)
psutil.Process.create_time = lambda self: real_create(self) + rng.choice([-0.8, 0.0, 0.8])

from envs.factory import start_sandbox
from envs.grading import grade_patch
from envs.lifecycle import current_owner
from envs.sandbox import SandboxConfig
from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore
from tasks.suite import load_suite

config = SandboxConfig(backend=backend)
task = next(t for t in load_suite("builtin") if t.id == "kvstore-001-expire-boundary")
print(json.dumps({"run": current_owner(config.state_dir, config.expiry_s).run_id}), flush=True)


def sandboxes():
    opened = [start_sandbox(config, task.repo) for _ in range(rng.randint(1, 2))]
    try:
        for i in range(rng.randint(3, 8)):
            for s in opened:
                s.write_file(f"note{i}.txt", f"{i}\n".encode())
                out = s.run(f"cat note{i}.txt && ls /repo | wc -l").output
                assert out.startswith(f"{i}\n"), out
            time.sleep(rng.uniform(0.1, 0.8))
    finally:
        for s in opened:
            s.close()


def grading():
    grade = grade_patch(task, task.gold_patch or "", config)
    assert grade.infra_error is None and grade.correct == 1.0, grade.infra_error


def rolling():
    out = Path(sys.argv[4]) / f"run-{seed}-{time.monotonic_ns()}"
    cfg = RolloutConfig.model_validate({"suite": "builtin", "tasks": [task.id], "policy": "scripted:gold",
                                        "out": str(out), "sandbox": {"backend": backend}})
    rollout(cfg)
    (trajectory,) = RunStore(out).trajectories()
    assert trajectory.status == "ok" and trajectory.reward > 0, (trajectory.status, trajectory.status_reason)


while time.monotonic() < until:
    action = rng.choice([sandboxes, sandboxes, grading, rolling])
    try:
        action()
        print(json.dumps({"ok": action.__name__}), flush=True)
    except Exception as e:
        print(json.dumps({"lost": action.__name__, "error": f"{type(e).__name__}: {e}"[:2000]}), flush=True)
"""

BURNER = "while True:\n    pass\n"


@dataclass
class Worker:
    """One harness process: its install, backend, output file and run id."""

    proc: subprocess.Popen[bytes]
    install: Path
    backend: str
    out: Path
    killed: bool = False
    run_id: str = ""
    events: list[dict[str, str]] = field(default_factory=list)

    def read(self) -> None:
        lines = [json.loads(line) for line in self.out.read_text().splitlines() if line.startswith("{")]
        self.run_id = next((e["run"] for e in lines if "run" in e), "")
        self.events = [e for e in lines if "run" not in e]


def start_worker(install: Path, backend: str, seed: int, until: float, tmp: Path) -> Worker:
    out = tmp / f"worker-{seed}.jsonl"
    stream: IO[bytes] = out.open("wb")
    env = {**os.environ, "PYTHONPATH": str(install), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(seed), backend, str(until), str(tmp / "runs")],
        cwd=install, env=env, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    stream.close()
    return Worker(proc, install, backend, out)


def reused_pid_records(state_dir: Path) -> list[str]:
    """Records of dead runs whose pids belong to live processes now (this one, and pid 1), locks gone."""
    made = []
    for pid in (os.getpid(), 1):
        owner = Owner(run_id=f"r{pid}-deadbeef", host=socket.gethostname(), pid=pid, pid_start=time.time(),
                      expires=time.time() + 3600, pid_ticks=(start_ticks(pid) or 0) + 7)  # fmt: skip
        (state_dir / owner.run_id).mkdir(parents=True, exist_ok=True)
        (state_dir / owner.run_id / "owner.json").write_text(owner.model_dump_json())
        made.append(owner.run_id)
    return made


def left_of(run_id: str, state_dir: Path) -> list[str]:
    """Whatever the host still holds of a run."""
    found = [p.name for p in (state_dir / run_id, state_dir / f"{run_id}.lock") if p.exists()]
    found += [c.name for c in client().containers.list(all=True, filters={"label": f"{LABEL}={run_id}"})]
    found += [str(g) for g in CGROUP_ROOT.glob(f"*/harness/{run_id}--*")]
    for proc in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if f"{run_id}/".encode() in proc.read_bytes():
                found.append(proc.parent.name)
        except OSError:
            pass
    return found


@pytest.mark.timeout(900)
def test_runs_of_two_installs_that_kill_and_reap_each_other_lose_no_live_sandbox(tmp_path: Path) -> None:
    for backend in ("bwrap", "docker"):
        require_backend(backend)
    here = Path(__file__).resolve().parents[2]
    clone = tmp_path / "install-b"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(here), str(clone)], check=True)
    installs = [here, clone]
    state_dir = SandboxConfig().state_dir
    fake_dead = reused_pid_records(state_dir)
    burners = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(2)]
    rng = random.Random(33)
    until = time.monotonic() + CHURN_S
    seed = 0
    workers: list[Worker] = []
    try:
        for i in range(WORKERS):
            seed += 1
            workers.append(
                start_worker(installs[i % 2], ("bwrap", "docker")[i // 2 % 2], seed, until, tmp_path)
            )
        while time.monotonic() < until - KILL_EVERY_S:
            time.sleep(KILL_EVERY_S)
            victim = rng.choice([w for w in workers if w.proc.poll() is None and not w.killed])
            os.killpg(victim.proc.pid, signal.SIGKILL)  # the harness process and whatever it started
            victim.proc.wait()
            victim.killed = True
            seed += 1
            workers.append(start_worker(victim.install, victim.backend, seed, until, tmp_path))
        for worker in workers:
            worker.proc.wait(timeout=CHURN_S + 300)
    finally:
        for burner in burners:
            burner.kill()
        for worker in workers:
            if worker.proc.poll() is None:
                os.killpg(worker.proc.pid, signal.SIGKILL)
    for worker in workers:
        worker.read()
    lived = [w for w in workers if not w.killed]
    lost = [(w.run_id, e) for w in lived for e in w.events if "lost" in e]
    assert not lost, lost
    assert all(w.run_id for w in workers), [w.out.read_text()[-2000:] for w in workers if not w.run_id]
    done = {(w.backend, e["ok"]) for w in lived for e in w.events if "ok" in e}
    assert {("bwrap", "sandboxes"), ("docker", "sandboxes")} <= done, done
    assert sum(w.killed for w in workers) >= 5
    reap(state_dir, reap_containers)  # as the next run's first sandbox would
    leftovers = {r: left_of(r, state_dir) for r in [*(w.run_id for w in workers), *fake_dead]}
    assert not any(leftovers.values()), leftovers
