"""`harness export`: a run's trajectories as files that `datasets.load_dataset` reads directly.

- `jsonl`: one flat row per trajectory (ids, task, reward, status, counts, tool calls, the final diff),
  with the whole trajectory as JSON text in `trajectory`.
- `parquet`: the same rows, with a fixed schema.
- `sft`: one chat conversation per segment, `{"messages": [{"role", "content"}, ...]}`, the
  conversational language-modeling format of TRL's SFTTrainer. An assistant message is what the model
  wrote: its text, then its tool call as `<tool_call>{json}</tool_call>` (as harness/training/sft.py writes it);
  a tool result is a tool message; a self-summary is the assistant's answer to the summary request, and
  the next segment opens with it, as in the run.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

from harness.agent.trajectory import Segment, Trajectory
from harness.inspection.runs import RunError, Selection, load_setup, load_tasks, open_run, read_run, select
from harness.rollouts.store import write_atomic
from policies.chat_format import assistant_text
from summarizer import request_message, resume_messages

ExportFormat = Literal["jsonl", "parquet", "sft"]
FILE_NAMES: dict[ExportFormat, str] = {
    "jsonl": "trajectories.jsonl",
    "parquet": "trajectories.parquet",
    "sft": "sft.jsonl",
}


class ExportRow(BaseModel):
    """One trajectory as a flat row (jsonl and parquet)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    run: str
    task_id: str
    group_id: str
    sample_index: int
    policy: str
    policy_version: int
    seed: int
    trainable: bool
    reward: float
    correct: float | None
    """The grade's correctness; None when the trajectory was not graded."""
    status: str
    status_reason: str | None
    turns: int
    summaries: int
    tool_errors: int
    parse_errors: int
    generated_tokens: int
    total_tokens: int
    duration_s: float
    tool_calls: list[str]
    """The name of each tool called, in order."""
    final_diff: str
    trajectory: str
    """The whole trajectory as JSON (harness.agent.trajectory.Trajectory)."""


class ExportResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: Path
    rows: int
    trajectories: int
    notes: list[str] = []
    """What was not read: lines that are not trajectories, a torn last line (harness.inspection.runs.RunRead.notes)."""
    skipped: int = 0
    """Lines that are not trajectories (a torn last line is not counted)."""


def export_row(t: Trajectory) -> ExportRow:
    m = t.metrics
    return ExportRow(
        id=t.id, run=t.run, task_id=t.task_id, group_id=t.group_id, sample_index=t.sample_index,
        policy=t.policy, policy_version=t.policy_version, seed=t.seed, trainable=t.trainable,
        reward=t.reward, correct=t.grade.correct if t.grade is not None else None, status=t.status,
        status_reason=t.status_reason, turns=m.turns, summaries=m.summaries, tool_errors=m.tool_errors,
        parse_errors=m.parse_errors, generated_tokens=m.generated_tokens, total_tokens=m.total_tokens,
        duration_s=t.timings.duration_s,
        tool_calls=[turn.tool_call.name for s in t.segments for turn in s.turns if turn.tool_call],
        final_diff=t.final_diff, trajectory=t.model_dump_json(),
    )  # fmt: skip


def chat_conversation(segment: Segment) -> list[dict[str, str]]:
    """A chat policy's segment, each assistant tool call written into its text."""
    return [
        {
            "role": str(m["role"]),
            "content": assistant_text(m) if m["role"] == "assistant" else str(m.get("content") or ""),
        }
        for m in segment.messages
    ]


def token_conversations(t: Trajectory, system: str, task_prompt: str) -> list[list[dict[str, str]]]:
    """A token policy's segments rebuilt as messages, the way its context grew (harness/agent/conversation.py)."""
    conversations = []
    opening = [{"role": "system", "content": system}, {"role": "user", "content": task_prompt}]
    for segment in t.segments:
        messages = list(opening)
        for turn in segment.turns:
            if turn.kind == "summary":
                messages += [request_message(), {"role": "assistant", "content": turn.text}]
                opening = resume_messages(system, task_prompt, turn.text)
                continue
            messages.append({"role": "assistant", "content": turn.text})
            if turn.observation is not None:
                messages.append({"role": "tool", "content": turn.observation})
        conversations.append(messages)
    return conversations


def until_last_assistant(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The conversation up to the model's last message (what follows is not trained on anyway)."""
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    return messages[: last + 1]


def sft_rows(
    trajectories: Sequence[Trajectory], prompts: Callable[[], tuple[str, dict[str, str]]]
) -> list[dict[str, Any]]:
    """`{"messages": ...}` per segment; `prompts()` gives the system prompt and each task's prompt,
    needed only for token-policy trajectories (chat ones keep their messages)."""
    rows = []
    for t in trajectories:
        if all(s.messages for s in t.segments):
            conversations = [chat_conversation(s) for s in t.segments]
        else:
            system, tasks = prompts()
            if t.task_id not in tasks:
                raise RunError(f"task {t.task_id} of {t.id} is not in the run's suite; give it with --suite")
            conversations = token_conversations(t, system, tasks[t.task_id])
        for messages in conversations:
            kept = until_last_assistant(messages)
            if kept:
                rows.append({"messages": kept})
    return rows


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    write_atomic(path, "".join(json.dumps(row) + "\n" for row in rows).encode())


def write_parquet(path: Path, rows: Sequence[ExportRow]) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise RunError("--format parquet needs pyarrow: pip install pyarrow") from e
    kinds = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
    fields = []
    for name, field in ExportRow.model_fields.items():
        annotation = field.annotation
        if annotation == list[str]:
            kind = pa.list_(pa.string())
        else:
            kind = kinds[next(a for a in (annotation, *get_args(annotation)) if a in kinds)]
        fields.append(pa.field(name, kind))
    table = pa.Table.from_pylist([r.model_dump() for r in rows], schema=pa.schema(fields))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def export(
    root: Path, fmt: ExportFormat, selection: Selection, out: Path | None = None, suite: str | None = None
) -> ExportResult:
    """Writes the selected trajectories of the run at `root` in `fmt`; by default to root/export/."""
    run = read_run(open_run(root))
    trajectories = select(run, selection)
    if not trajectories:
        raise RunError(f"nothing to export: no trajectory of {root} matches the filters")
    path = out or root / "export" / FILE_NAMES[fmt]
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "sft":

        @functools.cache
        def prompts() -> tuple[str, dict[str, str]]:
            setup = load_setup(root, suite)
            return setup.loop.system_prompt, {i: task.prompt() for i, task in load_tasks(setup).items()}

        rows = sft_rows(trajectories, prompts)
        write_jsonl(path, rows)
        return ExportResult(
            path=path,
            rows=len(rows),
            trajectories=len(trajectories),
            notes=run.notes(),
            skipped=len(run.skipped),
        )
    flat = [export_row(t) for t in trajectories]
    if fmt == "parquet":
        write_parquet(path, flat)
    else:
        write_jsonl(path, [r.model_dump() for r in flat])
    return ExportResult(
        path=path, rows=len(flat), trajectories=len(trajectories), notes=run.notes(), skipped=len(run.skipped)
    )
