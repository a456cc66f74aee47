"""The GPU learner benchmark stays ready to run on a lent GPU: its smoke test (`--tiny`, on the CPU here)
runs the whole script, packing on and off side by side, and reports what a GPU run reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_learner_benchmark_runs_packed_and_padded_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_learner.py", "--tiny", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    packed, padded = json.loads(out.read_text())
    assert (packed["packing"], padded["packing"]) == (True, False)
    assert packed["computed_tokens"] == packed["real_tokens"] < padded["computed_tokens"]
    assert packed["attention_pairs"] == sum(n * n for n in packed["lengths"]) < padded["attention_pairs"]
    assert all(r["tokens_per_s"] > 0 and r["activation_checkpointing"] == "auto" for r in (packed, padded))
    assert "MFU 6N" in proc.stdout and "peak GiB" in proc.stdout
