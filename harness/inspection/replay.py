"""`harness replay` and `harness runs`: a run's trajectories in the terminal.

`replay` shows a trajectory the way it happened: the task; each turn's reasoning, tool call and
observation (long observations folded); self-summaries set apart with the context tokens before and
after; the final diff; the grade and how the reward came from it; status and timings. With `--follow`
it shows each trajectory as the run writes it. `runs` lists a run's trajectories as a table.
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from rich import box
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.rule import Rule
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from envs.grading import Grade
from harness.agent.parsing import TOOL_CALL
from harness.agent.trajectory import ParsedCall, Summary, Trajectory, Turn
from harness.inspection.runs import RunError, RunSetup, advantages, load_setup, load_tasks
from harness.rollouts.store import SegmentAdvantage

SortKey = Literal["order", "id", "task", "reward", "turns", "summaries", "tokens", "duration"]


class Folding(BaseModel):
    """How much of a long observation replay shows."""

    model_config = ConfigDict(extra="forbid")

    head_lines: int = 15
    tail_lines: int = 5
    line_chars: int = 2000
    """Longest line shown whole; a longer one (a one-line megabyte of arguments) keeps its head and tail."""
    diff_lines: int = 400
    """Most lines of the final diff shown."""
    full: bool = False
    """Show every line, whole."""


class RunContext:
    """What replay looks up beside the trajectories: task texts, the reward's lambda, advantages."""

    def __init__(self, root: Path, suite: str | None = None) -> None:
        self.root = root
        self.suite = suite
        self.skipped: list[str] = []
        """`FILE:LINE: why` of each line of learner.jsonl that is not a learner line."""
        self.advantages = advantages(root, self.skipped)
        try:
            self.setup: RunSetup | None = load_setup(root, suite)
        except RunError:  # replay shows what it can without the run's config
            self.setup = None
        self._prompts: dict[str, str] | None = None

    def task_prompt(self, t: Trajectory) -> str | None:
        """The task as the agent first saw it: the chat prompt, else the suite's task."""
        for message in t.segments[0].messages[:2] if t.segments else []:
            if message.get("role") == "user":
                return str(message.get("content", ""))
        if self._prompts is None:
            self._prompts = {}
            if self.setup is not None:
                try:
                    self._prompts = {i: task.prompt() for i, task in load_tasks(self.setup).items()}
                except RunError:
                    pass
        return self._prompts.get(t.task_id)


def fold(text: str, folding: Folding, style: str = "") -> Text:
    """The text, its middle lines replaced by a marker when it has more lines than folding shows, and
    the middle of each overlong line too."""
    lines = [clip(line, folding) for line in text.rstrip("\n").split("\n")]
    hidden = len(lines) - folding.head_lines - folding.tail_lines
    if folding.full or hidden <= 1:
        return Text("\n".join(lines) or "(empty)", style=style)
    shown = Text("\n".join(lines[: folding.head_lines]) + "\n", style=style)
    shown.append(f"··· {hidden} lines folded (--full shows them) ···", style="bold yellow")
    shown.append("\n" + "\n".join(lines[-folding.tail_lines :]), style=style)
    return shown


def clip(line: str, folding: Folding) -> str:
    """The line, or its head and tail around a marker when it is longer than folding shows."""
    if folding.full or len(line) <= folding.line_chars:
        return line
    half = folding.line_chars // 2
    return f"{line[:half]} ··· {len(line) - 2 * half} characters folded ··· {line[-half:]}"


def header(t: Trajectory, ctx: RunContext) -> RenderableType:
    verdict = grade_verdict(t.grade)
    lines = [
        f"[bold]{escape(t.id)}[/]  task [bold]{escape(t.task_id)}[/]  group {escape(t.group_id)}  "
        f"sample {t.sample_index}  policy {escape(t.policy)} (version {t.policy_version})",
        f"status [bold]{t.status}[/]  reward [bold]{t.reward:.3f}[/]  {verdict}  "
        f"{t.metrics.turns} turns  {t.metrics.summaries} summaries  {t.metrics.total_tokens} tokens",
    ]
    trained = ctx.advantages.get(t.id, [])
    if trained:
        lines.append(advantage_line(trained))
    return Text.from_markup("\n".join(lines))


def advantage_line(trained: list[SegmentAdvantage]) -> str:
    values = {a.advantage for a in trained}
    if len(values) == 1:  # contract 3: one advantage for every segment
        return f"trained at step {trained[0].step}: advantage {trained[0].advantage:+.3f} on {len(trained)} segments"
    segments = ", ".join(f"segment {a.segment}: {a.advantage:+.3f}" for a in trained)
    return f"trained at step {trained[0].step}: advantage {segments}"


def grade_verdict(grade: Grade | None) -> str:
    if grade is None:
        return "[yellow]not graded[/]"
    if grade.infra_error:
        return "[red]grading failed[/]"
    return "[green]correct[/]" if grade.correct == 1.0 else f"[red]not correct[/] ({grade.correct:.2f})"


def reasoning(turn: Turn) -> str:
    """The model's text without the tool call it ends with (that is shown parsed)."""
    if turn.tool_call is None:
        return turn.text.strip()
    return TOOL_CALL.sub("", turn.text).strip()


def call_view(call: ParsedCall, folding: Folding) -> RenderableType:
    """The call's name and arguments (folded like observations); multi-line values (code) in blocks of
    their own."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold cyan", no_wrap=True)
    grid.add_column()
    arguments: dict[str, Any] | str = call.arguments
    name = Text(f"→ {clip(call.name, folding.model_copy(update={'line_chars': 200}))}")
    if isinstance(arguments, str):
        grid.add_row(name, fold(arguments, folding) if arguments else Text("(no arguments)"))
        return grid
    grid.add_row(name, Text("" if arguments else "(no arguments)"))
    for key, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value)
        grid.add_row(Text(f"  {clip(key, folding)}"), fold(shown, folding, "green" if "\n" in shown else ""))
    return grid


def turn_view(number: int, segment: int, turn: Turn, folding: Folding) -> RenderableType:
    name = turn.tool_call.name if turn.tool_call else "no tool call"
    title = f"turn {number} · segment {segment} · {name}"
    timing = f"generate {turn.generate_s:.2f}s · tool {turn.tool_s:.2f}s"
    parts: list[RenderableType] = [Rule(Text(title, style="bold"), align="left"), Text(timing, style="dim")]
    thought = reasoning(turn)
    if thought:
        parts.append(Text("\n".join(clip(line, folding) for line in thought.split("\n")), style="italic"))
    if turn.tool_call is not None:
        parts.append(call_view(turn.tool_call, folding))
    if turn.parse_error is not None:
        parts.append(Text(f"parse error: {turn.parse_error}", style="red"))
    elif turn.observation is not None:
        style = "red" if turn.observation_error else "blue"
        title = "observation (error)" if turn.observation_error else "observation"
        parts.append(
            Panel(fold(turn.observation, folding), title=title, title_align="left", border_style=style)
        )
    return Group(*parts)


def summary_view(turn: Turn, summary: Summary | None) -> RenderableType:
    if summary is None:
        title = "self-summary"
    else:
        title = (
            f"self-summary: segment {summary.segment} closed at {summary.tokens_before} tokens → "
            f"segment {summary.segment + 1} opens with {summary.tokens_after} tokens"
        )
    return Group(
        Rule(Text(title, style="bold magenta"), characters="═"),
        Panel(Text(turn.text.strip() or "(empty)"), border_style="magenta"),
    )


def diff_view(diff: str, folding: Folding) -> RenderableType:
    if not diff.strip():
        return Text("(the agent changed nothing)", style="dim")
    lines = [clip(line, folding) for line in diff.rstrip("\n").split("\n")]
    shown = Syntax(
        "\n".join(lines[: None if folding.full else folding.diff_lines]),
        "diff",
        theme="ansi_dark",
        word_wrap=True,
    )
    if folding.full or len(lines) <= folding.diff_lines:
        return shown
    rest = f"··· {len(lines) - folding.diff_lines} more lines of the diff (--full shows them) ···"
    return Group(shown, Text(rest, style="bold yellow"))


def grade_view(t: Trajectory, setup: RunSetup | None) -> RenderableType:
    grade = t.grade
    if grade is None:
        return Text.from_markup(f"[yellow]not graded[/]: {escape(t.status_reason or t.status)}")
    parts: list[RenderableType] = [
        Text.from_markup(f"{grade_verdict(grade)}  {reward_formula(grade, setup)}")
    ]
    if grade.infra_error:
        parts.append(Text(f"infra error: {grade.infra_error}", style="red"))
    if grade.reused:
        parts.append(Text("the grade of the same patch graded for another rollout of its batch, given again"))
    if grade.apply_error:
        parts.append(Text(f"the patch did not apply: {grade.apply_error}", style="red"))
    if grade.dropped_paths:
        parts.append(
            Text(f"ignored by the grader (test and start-up paths): {', '.join(grade.dropped_paths)}")
        )
    parts += [Text(f"tampering: {finding}", style="red") for finding in grade.tampering]
    parts += [Text(f"suspicious: {finding}", style="yellow") for finding in grade.suspicion]
    tests = Table("hidden test", "kind", "outcome", box=None, pad_edge=False)
    for kind, outcomes in (("FAIL_TO_PASS", grade.fail_to_pass), ("PASS_TO_PASS", grade.pass_to_pass)):
        for name, outcome in outcomes.items():
            tests.add_row(Text(name), kind, Text(outcome, style="green" if outcome == "passed" else "red"))
    if tests.row_count:
        parts.append(tests)
    if grade.simplicity is not None:
        s = grade.simplicity
        weights = ", ".join(f"{k} {v:.2f}" for k, v in s.parts.items())
        parts.append(
            Text(
                f"simplicity penalty {s.penalty:.3f} ({weights}); {s.changed_lines} changed lines, {s.changed_tokens} tokens"
            )
        )
    return Group(*parts)


def reward_formula(grade: Grade, setup: RunSetup | None) -> str:
    """How the reward came from the grade: reward = correct × (1 − λ·penalty) (envs/reward.py)."""
    penalty = grade.simplicity.penalty if grade.simplicity is not None else 0.0
    if setup is None:
        return f"reward [bold]{grade.reward:.3f}[/] (correct {grade.correct:.3f}, penalty {penalty:.3f})"
    lam = setup.reward.simplicity_lambda
    return f"reward [bold]{grade.reward:.3f}[/] = correct {grade.correct:.3f} × (1 − {lam:g} × penalty {penalty:.3f})"


def status_view(t: Trajectory) -> RenderableType:
    m, s = t.metrics, t.timings
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    reason = f" ({t.status_reason})" if t.status_reason else ""
    started = (
        datetime.datetime.fromtimestamp(s.started_at).strftime("%Y-%m-%d %H:%M:%S") if s.started_at else "?"
    )
    grid.add_row("status", Text(f"{t.status}{reason}", style="green" if t.status == "ok" else "red"))
    grid.add_row("turns", f"{m.turns} ({m.tool_errors} tool errors, {m.parse_errors} parse errors)")
    grid.add_row("summaries", str(m.summaries))
    grid.add_row(
        "tokens",
        f"{m.generated_tokens} generated, {m.total_tokens} total, {m.max_context_tokens} max context",
    )
    grid.add_row(
        "time",
        f"{s.duration_s:.1f}s: generate {s.generate_s:.1f}s, tools {s.tools_s:.1f}s, grade {s.grade_s:.1f}s; "
        f"started {started}",
    )
    return grid


def trajectory_view(t: Trajectory, ctx: RunContext, folding: Folding) -> Iterable[RenderableType]:
    """Everything replay shows of one trajectory, top to bottom."""
    yield Rule(Text(f" {t.id} ", style="bold"), characters="━")
    yield header(t, ctx)
    prompt = ctx.task_prompt(t)
    yield Panel(
        Text(prompt.strip())
        if prompt
        else Text("(the task's text is not in the run and its suite was not found)"),
        title=f"task {t.task_id}",
        title_align="left",
        border_style="bright_black",
    )
    summaries = {s.segment: s for s in t.summaries}
    number = 0
    for segment in t.segments:
        for turn in segment.turns:
            if turn.kind == "summary":
                yield summary_view(turn, summaries.get(segment.index))
                continue
            number += 1
            yield turn_view(number, segment.index, turn, folding)
    yield Rule(Text("final diff", style="bold"), align="left")
    yield diff_view(t.final_diff, folding)
    yield Rule(Text("grade", style="bold"), align="left")
    yield grade_view(t, ctx.setup)
    yield Rule(Text("status and timings", style="bold"), align="left")
    yield status_view(t)


def show(console: Console, trajectories: Iterable[Trajectory], ctx: RunContext, folding: Folding) -> int:
    shown = 0
    for t in trajectories:
        for part in trajectory_view(t, ctx, folding):
            console.print(part)
        console.print()
        console.file.flush()  # --follow: each trajectory appears whole, as soon as it is read
        shown += 1
    return shown


# ---- harness runs ---------------------------------------------------------------------------------

SORT_KEYS: dict[str, Callable[[Trajectory], Any]] = {
    "id": lambda t: t.id,
    "task": lambda t: (t.task_id, t.sample_index),
    "reward": lambda t: t.reward,
    "turns": lambda t: t.metrics.turns,
    "summaries": lambda t: t.metrics.summaries,
    "tokens": lambda t: t.metrics.total_tokens,
    "duration": lambda t: t.timings.duration_s,
}


def sort_trajectories(trajectories: list[Trajectory], key: SortKey, descending: bool) -> list[Trajectory]:
    if key == "order":
        return list(reversed(trajectories)) if descending else trajectories
    return sorted(trajectories, key=SORT_KEYS[key], reverse=descending)


class RunRow(BaseModel):
    """One line of `harness runs`."""

    model_config = ConfigDict(extra="forbid")

    id: str
    task: str
    group: str
    reward: float
    correct: float | None
    turns: int
    summaries: int
    tokens: int
    status: str
    duration_s: float
    advantage: float | None
    """Training runs: the GRPO advantage the trajectory was trained with."""
    run_again: bool = False
    """An earlier try of an episode the run ran again (it ended in infra_error): listed, not counted."""
    flags: str = ""
    """`T` when the grade found tampering, `S` when it found suspect additions, `U` when it is unprotected
    (a verifier script decided, run where the agent's code could write the reward)."""


def run_row(t: Trajectory, trained: list[SegmentAdvantage], run_again: bool = False) -> RunRow:
    return RunRow(
        run_again=run_again,
        id=t.id, task=t.task_id, group=t.group_id, reward=t.reward,
        correct=t.grade.correct if t.grade is not None else None, turns=t.metrics.turns,
        summaries=t.metrics.summaries, tokens=t.metrics.total_tokens, status=t.status,
        duration_s=round(t.timings.duration_s, 2), advantage=trained[0].advantage if trained else None,
        flags=("T" if t.grade and t.grade.tampering else "")
        + ("S" if t.grade and t.grade.suspicion else "")
        + ("U" if t.grade and t.grade.integrity == "unprotected" else ""),
    )  # fmt: skip


def runs_table(title: str, rows: list[RunRow], training: bool) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD)
    columns = ["id", "task", "group", "reward", "pass", "turns", "summ.", "tokens", "status", "time", "flags"]
    for name in [*columns, *(["adv."] if training else [])]:
        left = name in ("id", "task", "group", "pass", "status")
        table.add_column(name, no_wrap=True, justify="left" if left else "right")
    for r in rows:
        passed = "" if r.correct is None else ("yes" if r.correct == 1.0 else "no")
        status = f"{r.status}, run again" if r.run_again else r.status
        cells = [
            r.id, r.task, r.group, f"{r.reward:.3f}", passed, str(r.turns), str(r.summaries), str(r.tokens),
            status, f"{r.duration_s:.1f}s", r.flags,
        ]  # fmt: skip
        if training:
            cells.append("" if r.advantage is None else f"{r.advantage:+.3f}")
        table.add_row(*(Text(c) for c in cells), style=None if r.status == "ok" else "red")
    return table


def runs_caption(rows: list[RunRow]) -> str:
    if not rows:
        return "no trajectory matches"
    again = sum(r.run_again for r in rows)
    rows = [r for r in rows if not r.run_again]  # an episode run again counts by its last try
    graded = [r for r in rows if r.status != "infra_error"]
    mean = sum(r.reward for r in graded) / len(graded) if graded else 0.0
    passed = sum(1 for r in graded if r.correct == 1.0) / len(graded) if graded else 0.0
    counts = ", ".join(f"{k} {v}" for k, v in sorted(Counter(r.status for r in rows).items()))
    unprotected = sum("U" in r.flags for r in rows)
    trust = f" · unprotected {unprotected} (a verifier the agent's code could answer)" if unprotected else ""
    tried = f" · {again} earlier tries of episodes run again, listed, not counted" if again else ""
    return f"mean reward {mean:.3f} · pass rate {passed:.3f} · {counts}{trust}{tried}"
