"""Canary search on real test files: today's `tasks.canaries` against an earlier commit's, side by side.

    .venv/bin/python benchmarks/canary_search.py FILE... [--before REV] [--rounds N] [--seed S]

For each hidden test file (every test function of it named, as a task whose tests are all of the file's
asks), both versions search single-constant canaries with the same draws (`random.Random(seed)`, the
repository's vocabulary from the file's git checkout or its folder), in turn, `--rounds` times: the
earlier one wrote a whole copy of the file (parse and print) for every draw of every constant; today's
checks each draw by arithmetic on the file's counts of numbers and words and writes only the copies it
keeps. Printed per file: seconds of each (every round), the ratio of the medians, and whether the two
made the same canaries (mutation, copy, lines and slots, the same for the same draws). Also timed: what
`tasks validate` asks for, the 40 it tries (`most=TRIALS`), which writes 40 copies at most.

REV defaults to the commit before the change (f5e7034^); its `tasks/canaries.py` is read with `git show`
and imported beside today's (it imports the rest of the package from this tree, which it shares).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from tasks import canaries
from tasks.expectations import rewrite, test_functions

ROOT = Path(__file__).resolve().parent.parent


def earlier_module(rev: str) -> ModuleType:
    """`tasks/canaries.py` as it was at `rev`, imported under another name."""
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:tasks/canaries.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="canaries-before-")) / "canaries_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("canaries_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["canaries_before"] = module  # its models resolve their annotations there
    spec.loader.exec_module(module)
    return module


def every_test(source: str) -> set[str]:
    tree = ast.parse(rewrite(source).source)
    return {f"{owner}::{f.name}" if owner else f.name for owner, f in test_functions(tree)}


def timed(run: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def same(a: list[Any], b: list[Any]) -> bool:
    return [(c.model_dump(), c._edits) for c in a] == [(c.model_dump(), c._edits) for c in b]


def one_file(path: Path, before: ModuleType, rounds: int, seed: int) -> dict[str, Any]:
    source = path.read_text()
    tests = every_test(source)
    vocabulary = canaries.repository_vocabulary(path.parent.parent)
    name = path.name
    ids = [f"{name}::{t}" for t in tests]
    times: dict[str, list[float]] = {"before": [], "today": [], "today, 40 tried": []}
    agree = True
    found = 0
    for k in range(rounds):
        runs = {
            "before": lambda: before.candidates(name, source, tests, vocabulary, random.Random(seed)),
            "today": lambda: canaries.candidates(name, source, tests, vocabulary, random.Random(seed)),
            "today, 40 tried": lambda: canaries.task_candidates(
                {name: source}, ids, vocabulary, random.Random(seed), most=canaries.TRIALS
            ),
        }
        order = list(runs) if k % 2 == 0 else list(reversed(runs))
        made: dict[str, Any] = {}
        for label in order:
            seconds, made[label] = timed(runs[label])
            times[label].append(seconds)
        agree = agree and same(made["before"], made["today"])
        found = len(made["today"])
    medians = {label: statistics.median(values) for label, values in times.items()}
    return {
        "file": str(path), "lines": source.count("\n"), "tests": len(tests), "canaries": found,
        "same canaries": agree, **{f"{label} s": [round(v, 2) for v in values] for label, values in times.items()},
        "before / today": round(medians["before"] / medians["today"], 1),
        "before / today, 40 tried": round(medians["before"] / medians["today, 40 tried"], 1),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--before", default="f5e7034^")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    before = earlier_module(args.before)
    failed = False
    for path in args.files:
        row = one_file(path, before, args.rounds, args.seed)
        failed = failed or not row["same canaries"]
        print(" | ".join(f"{k}: {v}" for k, v in row.items()), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
