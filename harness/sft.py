"""Chat trajectories (e.g. `scripted:gold` rollouts) as token rows for supervised warm starts.

Each segment is rendered with the model's own chat format, the same way a token-exact episode grows: the
prompt whole, then every assistant message as the text the model would generate (its content and its
tool call as `<tool_call>{json}</tool_call>`) followed by the stop id (loss mask 1), then the closing and
the next messages as template deltas (loss mask 0). Summaries are assistant messages too, so they are
trained on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from harness.learner import Row
from harness.trajectory import Trajectory
from policies.chat_format import ChatFormat


def assistant_text(message: dict[str, Any]) -> str:
    """What a model writes for an assistant message: its text, then its tool call in Hermes format."""
    text = str(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        function = call["function"]
        arguments = function["arguments"]
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        body = json.dumps({"name": function["name"], "arguments": arguments})
        text += f"\n<tool_call>\n{body}\n</tool_call>"
    return text


def segment_row(messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]], fmt: ChatFormat) -> Row:
    ids = fmt.prompt_ids(list(messages[:2]), tools)
    mask = [0] * len(ids)
    for message in messages[2:]:
        if message["role"] == "assistant":
            produced = [*fmt.encode(assistant_text(message)), fmt.stop_ids[0]]
            ids += produced
            mask += [1] * len(produced)
            closing = list(fmt.closing_ids)
            ids += closing
            mask += [0] * len(closing)
        else:
            delta = fmt.message_ids(message)
            ids += delta
            mask += [0] * len(delta)
    return Row(ids=ids, mask=mask, sampler_logprobs=[0.0] * len(ids), advantage=0.0)


def sft_rows(
    trajectories: Sequence[Trajectory], tools_for: Callable[[str], list[dict[str, Any]]], fmt: ChatFormat
) -> list[Row]:
    """One row per segment of every trajectory that solved its task; `tools_for(task_id)` gives its tools."""
    rows = []
    for t in trajectories:
        if t.grade is None or t.grade.correct != 1.0:
            continue
        for segment in t.segments:
            if segment.messages:
                rows.append(segment_row(segment.messages, tools_for(t.task_id), fmt))
    return rows
