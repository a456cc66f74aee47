"""What making the writable folders again costs a grade, per child, by the size of the repository.

    .venv/bin/python benchmarks/scratch_rebuild.py [--rounds N]

Both grading runners (`envs/grade_runner.py` for Python, `envs/process_runner.py` for the others) make
every entry of /repo, /tmp and /dev/shm again after each child (`Scratch.rebuild`), so that no child can
tell which entries an earlier one touched. A grade pays it once per child (a test file, or a copy, or a
canary). Trees of 1,000 and 10,000 small files (1.2 kB each, 100 to a folder) are made on /dev/shm, a
tmpfs as the sandboxes' /repo is, and rebuilt `--rounds` times each, the sizes taken in turn; after each
rebuild the tree is checked to be what it was. Medians and the spread are printed; nothing is a target.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from envs.grade_runner import Scratch

SIZES = (1000, 10000)


def make_tree(root: str, files: int) -> None:
    for n in range(files):
        folder = os.path.join(root, f"pkg{n // 100}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"m{n % 100}.py"), "w") as f:
            f.write("x = 1\n" * 200)


def listing(root: str) -> list[tuple[str, int]]:
    return sorted(
        (os.path.join(d, n), os.path.getsize(os.path.join(d, n)))
        for d, _, names in os.walk(root)
        for n in names
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="harness-scratch-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        scratches, before, seconds = {}, {}, {n: [] for n in SIZES}
        for n in SIZES:
            root = os.path.join(base, str(n))
            make_tree(root, n)
            scratches[n], before[n] = Scratch([root]), listing(root)
        for _ in range(args.rounds):
            for n in SIZES:
                with open(os.path.join(base, str(n), "pkg0", "m0.py"), "a") as f:
                    f.write("touched\n")  # what a child did
                started = time.perf_counter()
                scratches[n].rebuild()
                seconds[n].append(time.perf_counter() - started)
                assert listing(os.path.join(base, str(n))) == before[n]
        print(f"load {os.getloadavg()[0]:.1f}, {args.rounds} rounds, on {base.rsplit('/', 1)[0]}")
        for n in SIZES:
            s = seconds[n]
            print(f"{n:>6} files: rebuild {statistics.median(s) * 1000:.0f} ms a child "
                  f"(min {min(s) * 1000:.0f}, max {max(s) * 1000:.0f})")  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
