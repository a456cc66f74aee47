"""A remote sandbox's step overhead beside a local one: `harness sandbox-server` on a loopback address.

    .venv/bin/python benchmarks/remote_sandbox.py [--steps N] [--json PATH]

One bwrap sandbox started here and one served by a server process on 127.0.0.2 (its own bwrap backend),
both from the same small repository; `true` runs in each in turn, so background load weighs on both
alike, then a 64 MB file is copied out of each in turn (a large reply through the relay and the seal). The overhead is the difference of the medians; issue 37's target is 2 ms over loopback. The
exit status is 1 when it is missed.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envs.factory import start_sandbox
from envs.lifecycle import install_signal_handlers
from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxConfig

ROOT = Path(__file__).resolve().parents[1]
TARGET_MS = 2.0
COPY_MB = 64
"""Size of the file copied out of each sandbox: what a large reply costs through the relay and the seal."""
COPIES = 5


def serve(folder: Path) -> tuple[subprocess.Popen[str], str, Path]:
    secret = folder / "fleet.secret"
    secret.write_text(secrets.token_hex(32))
    secret.chmod(0o600)
    command = [
        sys.executable,
        "-m",
        "harness.cli",
        "sandbox-server",
        "--listen",
        "127.0.0.2:0",
        "--secret-file",
        str(secret),
    ]
    command += ["--backend", "bwrap", "--state-dir", str(folder / "server-state")]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().split()[-1], secret


def step_ms(sandbox: ExecutorSandbox) -> float:
    start = time.perf_counter()
    result = sandbox.run(["true"])
    elapsed = (time.perf_counter() - start) * 1000
    if not result.ok:
        raise SystemExit(f"`true` failed in {sandbox.backend}: {result}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    install_signal_handlers()
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp:
        folder = Path(tmp)
        (folder / "repo").mkdir()
        (folder / "repo" / "main.py").write_text("print('hi')\n")
        proc, address, secret = serve(folder)
        try:
            times = measure(folder, address, secret, args.steps)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    report = {
        name: {"p50_ms": statistics.median(t), "p95_ms": statistics.quantiles(t, n=20)[-1], "n": len(t)}
        for name, t in times.items()
    }
    overhead = report["remote"]["p50_ms"] - report["local"]["p50_ms"]
    for name, stat in report.items():
        what = f"copy-out of {COPY_MB} MB, {name.split()[0]}" if "copy" in name else f"step `true`, {name}"
        print(f"{what:>28}: p50 {stat['p50_ms']:.2f} ms, p95 {stat['p95_ms']:.2f} ms (n={stat['n']})")
    verdict = "PASS" if overhead <= TARGET_MS else "FAIL"
    print(f"remote overhead (p50): {overhead:.2f} ms, target {TARGET_MS} ms: {verdict}")
    if args.json is not None:
        args.json.write_text(json.dumps({**report, "overhead_ms": overhead}, indent=2))
    return 0 if verdict == "PASS" else 1


def measure(folder: Path, address: str, secret: Path, steps: int) -> dict[str, list[float]]:
    local = start_sandbox(SandboxConfig(backend="bwrap", state_dir=folder / "state"), folder / "repo")
    served = start_sandbox(
        SandboxConfig(backend="remote", remote=[address], remote_secret=secret), folder / "repo"
    )
    times: dict[str, list[float]] = {"local": [], "remote": [], "local copy-out": [], "remote copy-out": []}
    try:
        for i in range(steps + 10):
            for name, sandbox in (("local", local), ("remote", served)):
                elapsed = step_ms(sandbox)
                if i >= 10:  # warm-up
                    times[name].append(elapsed)
        for sandbox in (local, served):
            sandbox.run(f"head -c {COPY_MB << 20} /dev/urandom > blob")
        for i in range(COPIES):
            for name, sandbox in (("local", local), ("remote", served)):
                start = time.perf_counter()
                sandbox.copy_out("/repo", folder / f"{name}-{i}")
                times[f"{name} copy-out"].append((time.perf_counter() - start) * 1000)
    finally:
        local.close()
        served.close()
    return times


if __name__ == "__main__":
    raise SystemExit(main())
