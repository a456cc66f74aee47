"""Task synthesis for the languages whose tests are programs: the pure parts of `harness tasks synth
--language javascript` (`envs/synthesis_programs.py` measures the candidates with the grader).

A task's base is the repository without its test files, with one mutation in place (its `bug` edit); its
gold patch is the edit's inverse; its hidden files are the repository's test files, whole (as `harness
tasks mine` makes them: a FAIL_TO_PASS test in a file the agent saw would be decided by its process alone);
FAIL_TO_PASS the tests the mutation fails, PASS_TO_PASS the others that passed on the original. The
problem statement says what a user would see: the functions the failing tests call and the failures'
messages, never a test's name nor the mutated code.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.importing import write_task_folder
from tasks.mutations_js import JsMutation, JsOperator
from tasks.suite import BugEdit, TaskFile

ProgramVerdict = Literal["kept", "survived", "duplicate", "unconfirmed", "broke_build", "not_graded"]
MUTATORS: dict[str, str] = {"javascript": "tasks.mutations_js"}
"""Languages whose source synthesis can mutate -> the module whose `find_mutations` does it."""
STATEMENT_MESSAGES = 3
"""Distinct failure messages the problem statement quotes."""
BROKE_BUILD = re.compile(r"SyntaxError|Cannot find module|ERR_MODULE_NOT_FOUND|is not defined")
"""A failure that says the mutated code no longer loads: not a bug anyone ships."""


class ProgramTrial(BaseModel):
    """One mutation tried."""

    model_config = ConfigDict(extra="forbid")

    operator: JsOperator
    path: str
    function: str
    line: int
    verdict: ProgramVerdict
    failing: int = 0
    """Tests that failed with the mutation in place."""
    duration_s: float


class ProgramTask(BaseModel):
    """What a task was made from (written next to its task.yaml as synth.json)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    operator: JsOperator
    path: str
    function: str
    line: int
    fail_to_pass: int
    pass_to_pass: int
    canaries: int = 0
    """Canaries its validation made (text canaries kept and held ones); 0 when it was not validated."""


class ProgramReport(BaseModel):
    """The outcome of one synthesis of a repository whose tests are programs."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    name: str
    suite: str
    language: str
    test_files: int
    passing_tests: int
    candidates: int
    """Distinct mutations of the source files."""
    trials: list[ProgramTrial] = Field(default_factory=list)
    tasks: list[ProgramTask] = Field(default_factory=list)
    rejected: dict[str, list[str]] = Field(default_factory=dict)
    """Task id -> problems: tasks validation refused, removed again."""
    baseline_s: float = 0.0
    duration_s: float = 0.0

    @property
    def tried(self) -> int:
        return len(self.trials)

    @property
    def tasks_per_minute(self) -> float:
        return 60.0 * len(self.tasks) / self.duration_s if self.duration_s else 0.0

    def verdicts(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for trial in self.trials:
            counts[trial.verdict] += 1
        return dict(counts)


def bug_edit(path: str, text: str, mutation: JsMutation) -> BugEdit:
    """The mutation as an exact replacement of whole lines, with just enough context to be unique."""
    lines = re.findall(r"[^\n]*\n|[^\n]+\Z", text)
    mutated = mutation.apply(text)
    first = text.count("\n", 0, mutation.start)
    last = text.count("\n", 0, max(mutation.start, mutation.end - 1))
    lo, hi = first, last
    while True:
        start, end = sum(len(x) for x in lines[:lo]), sum(len(x) for x in lines[: hi + 1])
        old = text[start:end]
        new = mutated[start : end + len(mutated) - len(text)]
        if old.strip() and text.count(old) == 1:
            return BugEdit(path=path, old=old, new=new)
        if lo == 0 and hi == len(lines) - 1:
            raise ValueError(f"{path}: no unique context for a mutation at line {first + 1}")
        lo, hi = max(lo - 1, 0), min(hi + 1, len(lines) - 1)


IMPORTED = re.compile(
    r"(?:const|let|var)\s*\{([^}]*)\}\s*=\s*require\(\s*[\"'](\.[^\"']*)[\"']\s*\)"
    r"|import\s*\{([^}]*)\}\s*from\s*[\"'](\.[^\"']*)[\"']"
    r"|(?:const|let|var)\s+([\w$]+)\s*=\s*require\(\s*[\"'](\.[^\"']*)[\"']\s*\)"
    r"|import\s+(?:\*\s+as\s+)?([\w$]+)\s+from\s*[\"'](\.[^\"']*)[\"']"
)
"""The names a test file takes from the repository's own modules (relative `require` and `import`)."""


def imported_names(source: str) -> dict[str, str]:
    """Local name -> the name it has in the repository's module (`{ toRoman: roman }` binds roman)."""
    names: dict[str, str] = {}
    for m in IMPORTED.finditer(source):
        listed = m.group(1) or m.group(3)
        if listed is None:
            whole = m.group(5) or m.group(7)
            names[whole] = whole
            continue
        for part in listed.split(","):
            own, _, local = part.strip().replace(" as ", ":").partition(":")
            if own.strip():
                names[(local or own).strip()] = own.strip()
    return names


def called_functions(sources: dict[str, str], spans: dict[str, list[tuple[int, int]]]) -> list[str]:
    """The repository's functions the failing tests call (in their assertions' spans, by the names their
    files import from the repository), in the order first called: `toRoman`, `stats.median`."""
    found: dict[str, None] = {}
    for path, ranges in spans.items():
        names = imported_names(sources[path])
        for start, end in ranges:
            for m in re.finditer(r"(?<![\w$.])([\w$]+(?:\.[\w$]+)?)\s*\(", sources[path][start:end]):
                head = m.group(1).split(".")[0]
                if head in names:
                    found[m.group(1).replace(head, names[head], 1)] = None
    return list(found)


def _quoted(message: str, secrets: list[str], tests: set[str]) -> str:
    lines = [line.rstrip()[:200] for line in message.strip().splitlines()[:8]]
    if not lines or any(s in line for line in lines for s in [*secrets, *tests]):
        return ""
    return "\n".join(lines)


def problem_statement(functions: list[str], messages: list[str], secrets: list[str], tests: set[str]) -> str:
    """What a user of the library sees go wrong: the functions involved and the failures' messages (the
    values given beside the intended ones, the errors thrown); never a test's name nor the mutated code."""
    named = [f"`{f}`" for f in functions[:2]] + ([f"{len(functions) - 2} more"] if len(functions) > 2 else [])
    subject = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named) or "The library"
    thrown = next((m.split(":")[0] for m in messages if re.match(r"\w*Error: ", m)), None)
    plural = len(functions) > 1
    if thrown:
        symptom = f"throw{'' if plural else 's'} `{thrown}`"
    else:
        symptom = "give wrong results" if plural else "gives a wrong result"
    parts = [f"{subject} {symptom}."]
    quoted = list(dict.fromkeys(q for m in messages if (q := _quoted(m, secrets, tests))))
    if quoted:
        parts.append("What the code does now, as the checks that catch it report it:")
        parts += [
            "\n".join(f"    {line}" if line else "" for line in q.splitlines())
            for q in quoted[:STATEMENT_MESSAGES]
        ]
    parts.append(
        "Hidden tests check this behaviour at grading. Find the cause in the repository's code and fix it "
        "there; what works now must keep working."
    )
    return "\n\n".join(parts) + "\n"


def secrets_of(edit: BugEdit) -> list[str]:
    """Lines of the edit (before and after) long enough that quoting them would give the fix away."""
    return [line.strip() for line in (edit.old + edit.new).splitlines() if len(line.strip()) >= 8]


def write_program_task(
    suite: Path,
    task_id: str,
    spec: TaskFile,
    hidden: dict[str, str],
    made: ProgramTask,
) -> Path:
    """SUITE/TASK: task.yaml, hidden/ (the repository's test files, whole) and synth.json."""
    files: dict[str, str | bytes] = {f"hidden/{path}": text for path, text in hidden.items()}
    files["synth.json"] = made.model_dump_json(indent=1) + "\n"
    return write_task_folder(suite, task_id, spec, files)


def next_task_id(out: Path, name: str) -> str:
    k = 1
    while (out / f"{name}-{k:03d}").exists():
        k += 1
    return f"{name}-{k:03d}"
