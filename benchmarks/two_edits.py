"""Where the self-summaries fall in the demo's harder testbed (`tasks/suites/demo-two`, issue 39).

    .venv/bin/harness demo --out runs/demo-two --sft-target-loss 0.05 rollout.suite=demo-two [--backend bwrap]
    .venv/bin/python benchmarks/two_edits.py runs/demo-two

Each task of demo-two needs two edits, one in `arith.py` and one in `shapes.py`. For each phase of a demo
run (its warm-start evaluation, its GRPO rollouts, its final evaluation) this prints how many episodes
made both edits, in how many a self-summary came between the first and the second (the summary then has
to carry the first edit's having been made), and the pass rate of each kind: what outcome credit alone has
to work with when a bad summary can lose the first edit. The warm start's loss levels off near 0.04 on
demo-two (its demonstrations are unsure at two places, the right and the wrong fix of each file, where the
demo's are at one), so the demo's target of 0.01 is never met and all 200 epochs would run: 0.05 here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.agent.trajectory import Trajectory
from harness.rollouts.store import RunStore

FILES = ("arith.py", "shapes.py")
PHASES = ("eval-warm-start", "grpo", "eval-grpo")


def edits_and_summaries(trajectory: Trajectory) -> list[str]:
    """The episode's events in order: the file of each edit call, and `summary` for each summary turn."""
    events = []
    for segment in trajectory.segments:
        for turn in segment.turns:
            if turn.kind == "summary":
                events.append("summary")
            elif turn.tool_call is not None and isinstance(turn.tool_call.arguments, dict):
                path = str(turn.tool_call.arguments.get("path", ""))
                if turn.tool_call.name in ("edit", "write_file") and path.endswith(FILES):
                    events.append(path)
    return events


def summary_between(events: list[str]) -> bool | None:
    """None unless both files were edited; else whether a summary came between the first edit of one and
    the first edit of the other."""
    firsts = [events.index(f) for f in FILES if f in events]
    if len(firsts) < 2:
        return None
    return "summary" in events[min(firsts) : max(firsts)]


def phase_line(name: str, trajectories: list[Trajectory]) -> str:
    kinds: dict[str, list[float]] = {
        "one file or none": [],
        "both, summary between": [],
        "both, no summary": [],
    }
    for t in trajectories:
        between = summary_between(edits_and_summaries(t))
        key = (
            "one file or none"
            if between is None
            else "both, summary between"
            if between
            else "both, no summary"
        )
        kinds[key].append(1.0 if t.grade is not None and t.grade.correct == 1.0 else 0.0)
    cells = [f"{k}: {len(v)} (pass {sum(v) / len(v):.2f})" if v else f"{k}: 0" for k, v in kinds.items()]
    return f"{name:<16} {len(trajectories):>4} episodes; " + "; ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("run", type=Path, help="a `harness demo` output folder")
    args = parser.parse_args()
    for phase in PHASES:
        folder = args.run / phase
        if folder.is_dir():
            print(
                phase_line(phase, [t for t in RunStore(folder).trajectories() if t.status != "infra_error"])
            )


if __name__ == "__main__":
    main()
