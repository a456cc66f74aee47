"""Scripted chat policies: deterministic agents for tests and demos, no model needed.

- `scripted:gold` plays the task's gold patch through the real tools: look around, run the tests, apply
  each hunk with the edit tool (new files with write_file, deletions with bash), run the tests, submit.
  `scripted:gold-min` only applies the hunks and submits; `scripted:decoy` edits the same places wrongly
  (to `pass`) and submits, for warm starts on mixed demonstrations; `scripted:decoy-explore` is the decoy
  played as `gold` plays the fix (look around, run the tests before and after).
- `scripted:FILE` plays a recorded list of tool calls (JSON or YAML: `[{name, arguments}, ...]`), then
  submits.

Any list of calls made from the task plays the same way (`BoundScript`): so do the tests' own scripts
of exploits, which the product does not ship (tests/faults).

The policy keeps no state between calls: the step it is on is counted from the conversation, and a
self-summary records it (`[scripted-step N]`) so the next segment goes on from there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from policies.base import ChatPolicy, ChatReply, SamplingParams, ToolCall
from policies.spec import PolicySpecError
from tasks.model import Task
from tasks.patches import FilePatch, TextEdit, file_hunks, patched_text, split_patch, tighten

STEP_MARK = re.compile(r"\[scripted-step (\d+)\]")


class ScriptedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = {}


def gold_calls(task: Task, explore: bool = True) -> list[ScriptedCall]:
    """The calls that apply the task's gold patch with the agent's own tools.

    With `explore` the agent first looks around and runs the tests, and runs them again after the fix;
    without it, it only edits, with as little context as keeps each edit unique (the shortest solving
    episode, for warm starts of tiny models).
    """
    if not task.gold_patch:
        raise ValueError(f"task {task.id} has no gold patch to play")
    calls = [ScriptedCall(name="list_dir", arguments={"path": "."}), ScriptedCall(name="run_tests")]
    calls = calls if explore else []
    parts = split_patch(task.gold_patch)
    for part in parts:
        if part.new_path is not None:
            calls += file_calls(task, part, tight=not explore)
    for part in parts:
        if part.old_path is not None and part.old_path != part.new_path:  # deleted, or renamed away
            calls.append(ScriptedCall(name="bash", arguments={"command": f"rm -f -- '{part.old_path}'"}))
    if explore:
        calls.append(ScriptedCall(name="run_tests"))
    return calls


def file_calls(task: Task, part: FilePatch, tight: bool) -> list[ScriptedCall]:
    """The tool calls that make one file's change: an edit per hunk, each against the file as the
    earlier ones left it (`tight`: with as little context as keeps it unique there); one write_file of
    the whole new file for a new or renamed file, or where a hunk's text is not unique in the file (the
    edit tool refuses those)."""
    path = part.new_path or ""
    source = task.repo / (part.old_path or path)
    original = source.read_text() if part.old_path is not None and source.is_file() else ""
    whole = [
        ScriptedCall(name="write_file", arguments={"path": path, "content": patched_text(original, part)})
    ]
    if part.old_path != part.new_path:
        return whole
    text, calls = original, []
    for hunk in file_hunks(part):
        edit = TextEdit(path, hunk.old, hunk.new)
        edit = tighten(edit, text) if tight else edit
        if not edit.old or text.count(edit.old) != 1:
            return whole
        text = text.replace(edit.old, edit.new, 1)
        calls.append(
            ScriptedCall(name="edit", arguments={"path": path, "old_str": edit.old, "new_str": edit.new})
        )
    return calls


def load_script(path: Path) -> list[ScriptedCall]:
    try:
        with path.open("rb") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise PolicySpecError(f"scripted policy file {path}: {e}") from e
    try:
        return TypeAdapter(list[ScriptedCall]).validate_python(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or '(top)'}: {err['msg']}" for err in e.errors()
        )
        raise PolicySpecError(
            f"scripted policy file {path}: expected a list of {{name, arguments}} calls: {problems}"
        ) from e


class ScriptedPolicy:
    """Matches `policies.base.ChatPolicy`."""

    kind: Literal["chat"] = "chat"

    def __init__(self, source: str) -> None:
        self.spec = f"scripted:{source}"
        self.source = source
        named = ("gold", "gold-min", "decoy", "decoy-explore")
        self.script = None if source in named else load_script(Path(source))

    def calls(self, task: Task) -> list[ScriptedCall]:
        if self.script is not None:
            return self.script
        calls = gold_calls(task, explore=self.source in ("gold", "decoy-explore"))
        if self.source.startswith("decoy"):  # the right place, the wrong fix: the edited lines become `pass`
            for call in calls:
                existing = task.repo / call.arguments.get("path", "")
                if call.name == "write_file" and existing.is_file():  # a whole file written: left as it was
                    call.arguments["content"] = existing.read_text()
                if call.name == "edit":
                    indent = call.arguments["old_str"][
                        : len(call.arguments["old_str"]) - len(call.arguments["old_str"].lstrip())
                    ]
                    call.arguments["new_str"] = f"{indent}pass\n"
        return calls

    def for_task(self, task: Task) -> ChatPolicy:
        """This script for `task`: what an episode of it asks."""
        return BoundScript(self.spec, self.calls(task))

    def reply(self, task: Task, done: int, summarizing: bool) -> ChatReply:
        """The message after `done` steps of this script for `task` (`script_reply`)."""
        return script_reply(self.calls(task), done, summarizing)


def script_reply(calls: list[ScriptedCall], done: int, summarizing: bool) -> ChatReply:
    """The message after `done` steps of `calls`: the next call (submit once they are all made), or a
    self-summary that records the step for the next segment."""
    if summarizing:
        return ChatReply(content=f"I ran {done} steps of my script so far. [scripted-step {done}]")
    call = calls[done] if done < len(calls) else ScriptedCall(name="submit")
    return ChatReply(
        content=f"Step {done + 1}: {call.name}.",
        tool_calls=[ToolCall(name=call.name, arguments=call.arguments, id=f"call_{done}")],
    )


class BoundScript:
    """The calls one episode plays (`ScriptedPolicy.for_task`, or any script made from a task), under the
    policy name `spec`; matches `ChatPolicy`."""

    kind: Literal["chat"] = "chat"

    def __init__(self, spec: str, calls: list[ScriptedCall]) -> None:
        self.spec, self.calls = spec, calls

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: SamplingParams
    ) -> ChatReply:
        return script_reply(self.calls, steps_done(messages), summarizing=not tools)


def steps_done(messages: list[dict[str, Any]]) -> int:
    """Tool calls made so far: those of this segment, after the step its opening summary recorded."""
    resumed = 0
    for message in messages:
        if message["role"] == "user":
            found = STEP_MARK.findall(str(message.get("content", "")))
            if found:
                resumed = int(found[-1])
    return resumed + sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
