"""Where a CI run's test time went: reads pytest's JUnit reports (`make test` writes them) and prints each
report's test count and summed seconds, the files that took longest and the slowest tests.

CI's log keeps only its tail, and pytest's own `--durations` table prints in the middle of it; `.ci/run`
prints this after `make test`, so that a slow or timed-out run still says where its time went.

    python3 .ci/slowest.py test-artifacts/ci/*.xml [--top 25]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def cases(report: Path) -> list[tuple[str, str, float]]:
    """(file, test, seconds) for every test case of one JUnit report; setup and teardown are counted in
    pytest's `time`."""
    root = ET.parse(report).getroot()
    found = []
    for case in root.iter("testcase"):
        # classname is `tests.envs.test_x` or `tests.envs.test_x.TestClass`
        file = _file_of(case.get("classname", "").replace(".", "/"))
        found.append((file, case.get("name", "?"), float(case.get("time", "0") or 0)))
    return found


def _file_of(dotted_path: str) -> str:
    """The test file of a JUnit classname made a path: the longest prefix that names a test_*.py file."""
    parts = dotted_path.split("/")
    for end in range(len(parts), 0, -1):
        if parts[end - 1].startswith("test_"):
            return "/".join(parts[:end]) + ".py"
    return dotted_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=25, help="how many files and tests to list")
    args = parser.parse_args(argv)
    every: list[tuple[str, str, float]] = []
    for report in args.reports:
        if not report.exists():
            print(f"{report}: missing (its part did not finish)")
            continue
        found = cases(report)
        every += found
        print(f"{report}: {len(found)} tests, {sum(t for _, _, t in found):.0f} s summed over workers")
    per_file: dict[str, float] = defaultdict(float)
    for file, _, seconds in every:
        per_file[file] += seconds
    print(f"\nthe {args.top} files that took longest (seconds, summed):")
    for file, seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {seconds:7.0f}  {file}")
    print(f"\nthe {args.top} slowest tests (seconds, with setup and teardown):")
    for file, name, seconds in sorted(every, key=lambda c: -c[2])[: args.top]:
        print(f"  {seconds:7.1f}  {file}::{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
