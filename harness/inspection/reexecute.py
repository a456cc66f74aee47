"""`harness replay RUN --id ID --reexecute`: a trajectory's recorded tool calls, played again.

The calls go through the same tools as in the run (the task's allowlist and test command, the run's
bash setting) in a fresh sandbox at the task's start state, and each observation is compared with the
recorded one; then the final diff is collected and graded again in another fresh sandbox and compared
with the recorded diff and grade. This proves a reward was earned, and finds flaky tasks.

Parts of an observation that change from one run to the next on their own (pytest's durations, the
duration of a command that timed out) are normalised on both sides before comparing; the report says
how many observations that touched.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.syntax import Syntax
from rich.text import Text

from envs.backends import resolve_backend
from envs.grading import AgentTreeError, Grade, collect_patch, grade_patch, tree_failure
from envs.sandbox import Sandbox
from harness.agent.parsing import parse_tool_call
from harness.agent.trajectory import Trajectory, Turn
from harness.inspection.runs import RunSetup
from harness.rollouts.episode import SandboxPool
from tasks.model import Task
from tools import Toolbox

OUTCOME_WORDS = r"(?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?|no tests ran)"
VOLATILE: dict[str, tuple[re.Pattern[str], str]] = {
    "pytest durations": (
        re.compile(rf"^(.*\b{OUTCOME_WORDS}\b.*? in )\d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?", re.MULTILINE),
        r"\1<T>s",
    ),
    "timeout durations": (re.compile(r"(timed out after )\d+(?:\.\d+)? s"), r"\1<T> s"),
}
"""Name -> (pattern, replacement) of each volatile part of an observation."""
DIFF_LINES = 40
"""Longest recorded-vs-replayed diff shown per divergence."""


class TurnCheck(BaseModel):
    """One replayed action turn; the texts are kept only where it diverged."""

    model_config = ConfigDict(extra="forbid")

    turn: int
    segment: int
    tool: str | None
    """The tool called; None when the model's text held no valid call (its parse error is compared)."""
    same: bool
    normalised: list[str] = Field(default_factory=list)
    recorded: str | None = None
    replayed: str | None = None
    recorded_error: bool = False
    replayed_error: bool = False


class Reexecution(BaseModel):
    """What re-executing one trajectory found."""

    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    task_id: str
    backend: str
    turns: list[TurnCheck]
    diff_same: bool
    diff_delta: str = ""
    """Unified diff from the recorded final diff to the replayed one, when they differ."""
    recorded_reward: float
    replayed_reward: float
    grade_differences: list[str]
    normalised: dict[str, int]
    """Volatile part name -> observations in which it was normalised."""
    infra_error: str | None = None

    @property
    def reproduced(self) -> bool:
        return (
            self.infra_error is None
            and all(c.same for c in self.turns)
            and self.diff_same
            and not self.grade_differences
        )

    @property
    def first_divergence(self) -> TurnCheck | None:
        return next((c for c in self.turns if not c.same), None)


def normalise(text: str) -> tuple[str, list[str]]:
    """The text with its volatile parts replaced, and the names of the parts it had."""
    found = []
    for name, (pattern, replacement) in VOLATILE.items():
        text, count = pattern.subn(replacement, text)
        if count:
            found.append(name)
    return text, found


def replay_turn(turn: Turn, toolbox: Toolbox, sandbox: Sandbox) -> tuple[str, bool]:
    """What the loop would have observed after this turn: the tool's result, or the parse error."""
    if turn.tool_call is None:
        _, problem = parse_tool_call(turn.text)
        return problem or "", True
    observation = toolbox.call(sandbox, turn.tool_call.name, turn.tool_call.arguments)
    return observation.text, observation.is_error


def check_turn(number: int, segment: int, turn: Turn, replayed: str, replayed_error: bool) -> TurnCheck:
    recorded = turn.observation or ""
    left, found_left = normalise(recorded)
    right, found_right = normalise(replayed)
    same = left == right and turn.observation_error == replayed_error
    return TurnCheck(
        turn=number, segment=segment, tool=turn.tool_call.name if turn.tool_call else None, same=same,
        normalised=sorted(set(found_left) | set(found_right)),
        recorded=None if same else recorded, replayed=None if same else replayed,
        recorded_error=turn.observation_error, replayed_error=replayed_error,
    )  # fmt: skip


def grade_differences(recorded: Grade | None, replayed: Grade) -> list[str]:
    if recorded is None:
        return ["the run has no grade for this trajectory"]
    found = []
    if recorded.correct != replayed.correct:
        found.append(f"correct {recorded.correct:.3f} → {replayed.correct:.3f}")
    if abs(recorded.reward - replayed.reward) > 1e-9:
        found.append(f"reward {recorded.reward:.3f} → {replayed.reward:.3f}")
    if recorded.patch_applied != replayed.patch_applied:
        found.append(f"patch applied {recorded.patch_applied} → {replayed.patch_applied}")
    for before, after in (
        (recorded.fail_to_pass, replayed.fail_to_pass),
        (recorded.pass_to_pass, replayed.pass_to_pass),
    ):
        for name in sorted(set(before) | set(after)):
            if before.get(name) != after.get(name):
                found.append(f"{name}: {before.get(name, 'absent')} → {after.get(name, 'absent')}")
    return found


def unified(recorded: str, replayed: str) -> str:
    lines = list(
        difflib.unified_diff(
            recorded.splitlines(), replayed.splitlines(), "recorded", "replayed", lineterm="", n=2
        )
    )
    if len(lines) > DIFF_LINES:
        lines = [*lines[:DIFF_LINES], f"... {len(lines) - DIFF_LINES} more lines"]
    return "\n".join(lines)


def reexecute(t: Trajectory, task: Task, setup: RunSetup, backend: str | None = None) -> Reexecution:
    """Plays `t`'s tool calls again on `task` and compares everything it observed, its diff and its grade."""
    sandbox_config = setup.sandbox.model_copy(
        update={"backend": resolve_backend(backend or setup.sandbox.backend)}
    )
    toolbox = Toolbox.for_task(task, setup.tools)  # as the episode's
    pool = SandboxPool(sandbox_config)  # the sandbox starts as a rollout's does: limits, image, setup
    checks: list[TurnCheck] = []
    try:
        sandbox = pool.acquire(task)
        number = 0
        for segment in t.segments:
            for turn in segment.turns:
                if turn.kind == "summary":
                    continue
                number += 1
                text, is_error = replay_turn(turn, toolbox, sandbox)
                checks.append(check_turn(number, segment.index, turn, text, is_error))
        try:
            patch, unread = collect_patch(sandbox, task, sandbox_config), None
        except AgentTreeError as e:  # graded 0, as the rollout graded it
            patch, unread = "", tree_failure(task, e)
    finally:
        pool.close_all()
    grade = unread or grade_patch(task, patch, sandbox_config, setup.reward)
    normalised: dict[str, int] = {}
    for check in checks:
        for name in check.normalised:
            normalised[name] = normalised.get(name, 0) + 1
    return Reexecution(
        trajectory_id=t.id, task_id=t.task_id, backend=sandbox_config.backend, turns=checks,
        diff_same=patch == t.final_diff, diff_delta="" if patch == t.final_diff else unified(t.final_diff, patch),
        recorded_reward=t.reward, replayed_reward=grade.reward,
        grade_differences=[] if grade.infra_error else grade_differences(t.grade, grade),
        normalised=normalised, infra_error=grade.infra_error,
    )  # fmt: skip


def report_view(r: Reexecution) -> Iterable[RenderableType]:
    """The verdict, then every divergence: turn by turn, the final diff, the grade."""
    yield Rule(Text(f" re-execution of {r.trajectory_id} on {r.backend} ", style="bold"), characters="━")
    for check in r.turns:
        name = check.tool or "no tool call"
        if check.same:
            note = f" (normalised: {', '.join(check.normalised)})" if check.normalised else ""
            yield Text(f"turn {check.turn} · {name}: same{note}", style="green")
            continue
        yield Text(f"turn {check.turn} · segment {check.segment} · {name}: DIVERGED", style="bold red")
        if check.recorded_error != check.replayed_error:
            yield Text(f"  error flag: recorded {check.recorded_error}, replayed {check.replayed_error}")
        yield Syntax(
            unified(check.recorded or "", check.replayed or ""), "diff", theme="ansi_dark", word_wrap=True
        )
    if r.diff_same:
        yield Text("final diff: same", style="green")
    else:
        yield Group(
            Text("final diff: DIVERGED", style="bold red"), Syntax(r.diff_delta, "diff", theme="ansi_dark")
        )
    if r.infra_error:
        yield Text(f"grade: grading failed on replay (infra error): {r.infra_error}", style="red")
    elif r.grade_differences:
        yield Text("grade: DIVERGED\n  " + "\n  ".join(r.grade_differences), style="bold red")
    else:
        yield Text(f"grade: same (reward {r.replayed_reward:.3f})", style="green")
    if r.normalised:
        counts = ", ".join(f"{name} in {n} observations" for name, n in sorted(r.normalised.items()))
        yield Text(f"volatile parts ignored when comparing: {counts}", style="dim")
    yield verdict(r)


def verdict(r: Reexecution) -> Text:
    if r.infra_error:
        return Text(f"INCONCLUSIVE: {r.trajectory_id} could not be graded again", style="bold yellow")
    if r.reproduced:
        return Text(
            f"REPRODUCED: {r.trajectory_id}: {len(r.turns)} observations, the final diff and the grade "
            f"(reward {r.replayed_reward:.3f}) match the run",
            style="bold green",
        )
    first = r.first_divergence
    where = (
        f"at turn {first.turn} of {len(r.turns)} ({first.tool or 'no tool call'})"
        if first
        else "after the last turn"
    )
    return Text(f"DIVERGED: {r.trajectory_id} {where}", style="bold red")
