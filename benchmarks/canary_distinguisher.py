"""How well can a forger tell a task's real test file from its canaries? (issue 32, item 8)

    .venv/bin/python benchmarks/canary_distinguisher.py [--suite builtin] [--before]

For every task of the suite, the copies of each hidden test file that has canaries are made as the grader
makes them (`envs/run_plan.plan_run`: the real copy, its stored text canaries, its held canaries, which
are the real copy's very text). Each detector scores one copy at a time; the chance that it names the real
copy is 1 / (copies tied for its best score) when the real copy is among them, else 0, the mean over the
task's files. Chance level is 1 / copies.

- `style`: the tells of the old canaries: `!=`, `assert not`, a `~` in a string, `is not`, `not in`.
- `unseen words`: words of the copy's constants found nowhere in the repository (its code, visible tests,
  documents): a perturbed expectation reads like a typo there.
- `odd digits`: numbers of the copy that are not round (a perturbed 10 is 11).
- `majority` (needs every copy at once, which the runner does not let a child see; an upper bound): the
  copy closest to all the others in tokens, the centre every canary differs from once.

`--before` reads the canaries stored at commit 20f861b (operator flips, `~` strings, no held copies) the
same way, for comparison. The goal: the best one-copy detector at chance level on every task.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from envs.run_plan import plan_run
from tasks.canaries import Canary
from tasks.model import Task
from tasks.suite import load_suite

REPO = Path(__file__).resolve().parents[1]
BEFORE = "20f861b"
CONSTANT = re.compile(r"""(?:'[^'\n]*'|"[^"\n]*")|\b\d+(?:\.\d+)?\b""")


def copies_by_file(task: Task, canaries: list[Canary]) -> dict[str, tuple[str, list[str]]]:
    """Hidden file -> (the real copy's text, every copy's text: the real one first), for files with canaries."""
    plan = plan_run(task, canaries)
    real = {task_id.split("::", 1)[0]: run.split("::", 1)[0] for task_id, run in plan.ids.items()}
    found: dict[str, tuple[str, list[str]]] = {}
    for run_id, canary in plan.canaries.items():
        text = plan.held[run_id.split("::", 1)[0]]
        real_text = plan.held[real[canary.file]]
        found.setdefault(canary.file, (real_text, [real_text]))[1].append(text)
    return found


def old_copies(task: Task) -> dict[str, tuple[str, list[str]]]:
    """The same, from the canaries stored at BEFORE, written as that grader wrote them."""
    assert task.folder is not None
    path = task.folder.relative_to(REPO) / "canaries.json"
    shown = subprocess.run(["git", "show", f"{BEFORE}:{path}"], cwd=REPO, capture_output=True, text=True)
    if shown.returncode != 0:
        return {}
    import ast

    found: dict[str, tuple[str, list[str]]] = {}
    for raw in json.loads(shown.stdout):
        source = task.hidden_tests.files.get(raw["file"]) or ""
        real = ast.unparse(ast.parse(source)) + "\n"
        found.setdefault(raw["file"], (real, [real]))[1].append(raw["source"])
    return found


def repository_words(task: Task) -> set[str]:
    words: set[str] = set()
    for path in Path(task.repo).rglob("*"):
        if (
            path.is_file()
            and ".git" not in path.parts
            and path.suffix in (".py", ".md", ".txt", ".rst", ".cfg")
        ):
            words |= set(re.findall(r"\w+", path.read_text(errors="replace")))
    return words


def style(text: str, _: list[str], __: set[str]) -> float:
    tells = ("!=", "assert not ", " is not ", " not in ", "~")
    return float(sum(text.count(t) for t in tells))


def unseen_words(text: str, _: list[str], words: set[str]) -> float:
    constants = CONSTANT.findall(text)
    return float(sum(1 for c in constants for w in re.findall(r"[A-Za-z]\w*", c) if w not in words))


def odd_digits(text: str, _: list[str], __: set[str]) -> float:
    return float(sum(1 for n in re.findall(r"\b\d+\b", text) if n[-1] not in "05"))


def majority(text: str, others: list[str], _: set[str]) -> float:
    tokens = re.findall(r"\w+|\S", text)
    total = 0
    for other in others:
        ops = difflib.SequenceMatcher(
            None, tokens, re.findall(r"\w+|\S", other), autojunk=False
        ).get_opcodes()
        total += sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")
    return float(total)


DETECTORS: dict[str, Callable[[str, list[str], set[str]], float]] = {
    "style": style,
    "unseen words": unseen_words,
    "odd digits": odd_digits,
    "majority": majority,
}
ONE_COPY = ("style", "unseen words", "odd digits")


def chance_named(
    real: str, copies: list[str], detector: Callable[[str, list[str], set[str]], float], words: set[str]
) -> float:
    """The chance that picking a copy with the lowest score (ties broken at random) picks a real one."""
    scores = [detector(c, copies[:i] + copies[i + 1 :], words) for i, c in enumerate(copies)]
    best = min(scores)
    tied = [i for i, s in enumerate(scores) if s == best]
    return (1 / len(tied)) if 0 in tied else 0.0


def measure(task: Task, files: dict[str, tuple[str, list[str]]]) -> dict[str, float] | None:
    if not files:
        return None
    words = repository_words(task)
    row: dict[str, list[float]] = {name: [] for name in ["copies", "chance", *DETECTORS]}
    for real, copies in files.values():
        row["copies"].append(len(copies))
        row["chance"].append(1 / len(copies))
        for name, detector in DETECTORS.items():
            row[name].append(chance_named(real, copies, detector, words))
    return {k: statistics.fmean(v) for k, v in row.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--suite", default="builtin")
    parser.add_argument("--before", action="store_true", help=f"the canaries stored at {BEFORE}")
    args = parser.parse_args()
    tasks = load_suite(args.suite)
    table = Table(
        title=f"chance that a detector names the real copy ({'canaries of ' + BEFORE if args.before else 'this tree'})"
    )
    for column in ["task", "copies", "chance", *DETECTORS, "best one-copy / chance"]:
        table.add_column(column, justify="left" if column == "task" else "right")
    ratios, above = [], []
    for task in tasks:
        files = old_copies(task) if args.before else copies_by_file(task, task.hidden_tests.canaries)
        row = measure(task, files)
        if row is None:
            table.add_row(task.id, "0", "-", *(["-"] * len(DETECTORS)), "no canary")
            continue
        best = max(row[name] for name in ONE_COPY)
        ratios.append(best / row["chance"])
        if best > row["chance"] + 1e-9:
            above.append(task.id)
        cells = [f"{row['copies']:.1f}", f"{row['chance']:.2f}", *(f"{row[n]:.2f}" for n in DETECTORS)]
        table.add_row(task.id, *cells, f"{best / row['chance']:.2f}")
    Console().print(table)
    print(
        f"best one-copy detector over chance: median {statistics.median(ratios):.2f}, max {max(ratios):.2f}; "
        f"above chance on {len(above)} of {len(ratios)} tasks{': ' + ', '.join(above) if above else ''}"
    )
    print(
        "majority needs every copy at once: no child sees another's (envs/grade_runner.py), and the kernel's "
        "key rings, files and processes do not outlive a child"
    )


if __name__ == "__main__":
    main()
