"""The yield of `harness tasks mine` on public repositories: commits scanned, tasks kept, why the others
were dropped, environments built, wall time.

    .venv/bin/python benchmarks/mine.py [--repos owner/name ...] [--max-commits N] [--backend bwrap docker]
                                        [--mirrors DIR] [--json PATH]

Each repository is cloned as a user would (`git clone https://github.com/OWNER/NAME`, or from a local
mirror DIR/OWNER+NAME/repo with `--mirrors`, for hosts without GitHub), then mined on each backend into a
fresh suite: the last N first-parent commits, every kept task validated (gold 1, empty 0, `scripted:gold`
solves it). Environments are shared through the harness cache, so a second backend or a rerun builds
none of the bwrap ones again. Prints one Markdown row per repository and backend.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from envs.build_metadata import environment_reader
from envs.lifecycle import install_signal_handlers
from envs.mining import MineConfig, MineReport, mine
from envs.sandbox import SandboxConfig

REPOSITORIES = (
    "r1chardj0n3s/parse",
    "un33k/python-slugify",
    "pytest-dev/iniconfig",
    "hukkin/tomli",
    "more-itertools/more-itertools",
    "python-attrs/attrs",
)
"""Small and middle-sized pure-Python libraries with pytest suites, of different shapes: a flat module,
a top-level test.py, a testing/ folder, src/ layouts, a test suite of thousands of tests, hypothesis."""


def clone(repo: str, mirrors: Path | None, into: Path) -> Path:
    owner, name = repo.split("/")
    local = mirrors / f"{owner}+{name}" / "repo" if mirrors is not None else None
    source = str(local) if local is not None and local.exists() else f"https://github.com/{repo}"
    target = into / name
    subprocess.run(["git", "clone", "-q", source, str(target)], check=True)
    return target


def row(repo: str, report: MineReport) -> str:
    reasons = ", ".join(f"{reason} {n}" for reason, n in report.by_reason().items())
    return (
        f"| {repo} | {report.backend} | {report.scanned} | {len(report.kept)} | {reasons} | "
        f"{len(report.environments)} | {report.duration_s:.0f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repos", nargs="+", default=list(REPOSITORIES), help="owner/name of each")
    parser.add_argument("--max-commits", type=int, default=50, help="commits scanned per repository")
    parser.add_argument("--backend", nargs="+", default=["bwrap"], choices=["bwrap", "docker"])
    parser.add_argument("--mirrors", type=Path, default=None, help="local mirrors: DIR/OWNER+NAME/repo")
    parser.add_argument("--json", type=Path, default=None, help="also write every report to this file")
    args = parser.parse_args()
    install_signal_handlers()
    print(
        "| repository | backend | commits scanned | tasks kept | dropped, by reason | environments | wall |"
    )
    print("|---|---|---:|---:|---|---:|---:|")
    reports = []
    with tempfile.TemporaryDirectory(prefix="harness-mine-bench-") as tmp:
        for repo in args.repos:
            source = clone(repo, args.mirrors, Path(tmp))
            for backend in args.backend:
                out = Path(tmp) / f"suite-{source.name}-{backend}"
                config = MineConfig.model_validate(
                    {"repo": source, "out": out, "max_commits": args.max_commits, "backend": backend}
                )
                reader = environment_reader(SandboxConfig.model_validate({"backend": backend}))
                report = mine(
                    config,
                    reader,
                    on_commit=lambda r: print(r.model_dump_json(), file=sys.stderr, flush=True),
                )
                reports.append(report.model_dump(mode="json") | {"by_reason": report.by_reason()})
                print(row(repo, report), flush=True)
                shutil.rmtree(out, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
