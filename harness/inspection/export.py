"""`harness export`: a run's trajectories as files that `datasets.load_dataset` reads directly.

- `jsonl`: one flat row per trajectory (ids, task, reward, status, counts, tool calls, the final diff),
  with the whole trajectory as JSON text in `trajectory`.
- `parquet`: the same rows, with a fixed schema.
- `sft`: one chat conversation per segment, `{"messages": [{"role", "content"}, ...]}`, the
  conversational language-modeling format of TRL's SFTTrainer. An assistant message is what the model
  wrote: its text, then its tool call as `<tool_call>{json}</tool_call>` (as harness/training/sft.py writes it);
  a tool result is a tool message; a self-summary is the assistant's answer to the summary request, and
  the next segment opens with it, as in the run.
- `sft-tools`: the same conversations in the tool-calling form of TRL's SFTTrainer and of chat templates:
  `{"messages": [...], "tools": [...]}`, an assistant's tool call in its `tool_calls` (arguments as an
  object), each tool result a tool message answering that call, and `tools` the schemas the episode had.
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
from tasks.model import CRITIQUE_SUFFIX, HINT_SUFFIX, Task
from tools import Toolbox, ToolsConfig

ExportFormat = Literal["jsonl", "parquet", "sft", "sft-tools"]
FILE_NAMES: dict[ExportFormat, str] = {
    "jsonl": "trajectories.jsonl",
    "parquet": "trajectories.parquet",
    "sft": "sft.jsonl",
    "sft-tools": "sft-tools.jsonl",
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


def token_conversations(
    t: Trajectory, system: str, task_prompt: str, native: bool = False
) -> list[list[dict[str, Any]]]:
    """A token policy's segments rebuilt as messages, the way its context grew (harness/agent/conversation.py).
    An assistant message is the model's text; with `native`, its tool call is taken out of the text into
    `tool_calls` (arguments as an object), and the tool message answers that call."""
    conversations = []
    opening: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": task_prompt},
    ]
    for segment in t.segments:
        messages = list(opening)
        for n, turn in enumerate(segment.turns):
            if turn.kind == "summary":
                messages += [request_message(), {"role": "assistant", "content": turn.text}]
                opening = resume_messages(system, task_prompt, turn.text)
                continue
            native_call = turn.tool_call if native else None
            if native_call is not None:
                call = {"name": native_call.name, "arguments": _object(native_call.arguments)}
                content = turn.text.split("<tool_call>", 1)[0].strip()
                calls = [{"id": f"call_{n}", "type": "function", "function": call}]
                messages.append({"role": "assistant", "content": content, "tool_calls": calls})
            else:
                messages.append({"role": "assistant", "content": turn.text})
            if turn.observation is not None:
                answer = {"tool_call_id": f"call_{n}"} if native_call is not None else {}
                messages.append({"role": "tool", "content": turn.observation, **answer})
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


def tool_conversations(t: Trajectory, system: str, task_prompt: str) -> list[list[dict[str, Any]]]:
    """Each segment as messages with native tool calls: chat trajectories as they were sent (arguments
    read back into objects), token ones rebuilt with `token_conversations(native=True)`."""
    if all(s.messages for s in t.segments):
        return [[_native(m) for m in s.messages] for s in t.segments]
    return token_conversations(t, system, task_prompt, native=True)


def _native(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as stored, with each tool call's arguments as an object."""
    calls = message.get("tool_calls")
    if not calls:
        return dict(message)
    native = [
        {**c, "function": {**c["function"], "arguments": _object(c["function"].get("arguments"))}}
        for c in calls
    ]
    return {**message, "tool_calls": native}


def _object(arguments: Any) -> Any:
    """Tool-call arguments as an object: JSON text parsed, anything else as it is."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def sft_tool_rows(
    trajectories: Sequence[Trajectory], context: Callable[[], tuple[str, dict[str, Task], ToolsConfig]]
) -> list[dict[str, Any]]:
    """`{"messages": ..., "tools": ...}` per segment, up to the model's last message."""
    system, tasks, tools = context()
    rows = []
    for t in trajectories:
        if t.task_id not in tasks:
            raise RunError(f"task {t.task_id} of {t.id} is not in the run's suite; give it with --suite")
        task = tasks[t.task_id]
        schemas = Toolbox.for_task(task, tools).schemas()
        for messages in tool_conversations(t, system, task.prompt()):
            last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
            if last >= 0:
                rows.append({"messages": messages[: last + 1], "tools": schemas})
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
    root: Path,
    fmt: ExportFormat,
    selection: Selection,
    out: Path | None = None,
    suite: str | None = None,
    refined: bool = False,
) -> ExportResult:
    """Writes the selected trajectories of the run at `root` in `fmt`; by default to root/export/. The
    refined rollouts of `credit.critique` (a critique in their statement) only with `refined`."""
    run = read_run(open_run(root))
    # Hint rollouts (credit.hint_rollouts) had the task's privileged context in their prompt: they are
    # not the student's trajectories, and the reference fix must not leave the run through an export.
    trajectories = [
        t
        for t in select(run, selection)
        if not t.task_id.endswith(HINT_SUFFIX) and (refined or not t.task_id.endswith(CRITIQUE_SUFFIX))
    ]
    if not trajectories:
        raise RunError(f"nothing to export: no trajectory of {root} matches the filters")
    path = out or root / "export" / FILE_NAMES[fmt]
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt in ("sft", "sft-tools"):

        @functools.cache
        def context() -> tuple[str, dict[str, Task], ToolsConfig]:
            setup = load_setup(root, suite)
            return setup.loop.system_prompt, load_tasks(setup), setup.tools

        def prompts() -> tuple[str, dict[str, str]]:
            system, tasks, _ = context()
            return system, {i: task.prompt() for i, task in tasks.items()}

        rows = sft_rows(trajectories, prompts) if fmt == "sft" else sft_tool_rows(trajectories, context)
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
