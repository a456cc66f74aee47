"""Tool calls out of model text: the `<tool_call>{json}</tool_call>` format of Qwen / Hermes templates."""

from __future__ import annotations

import json
import re

from harness.agent.trajectory import ParsedCall

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def parse_tool_call(text: str) -> tuple[ParsedCall | None, str | None]:
    """The first tool call in `text`, or a message for the model saying what is wrong with it."""
    match = TOOL_CALL.search(text)
    if match is None:
        return None, (
            "No tool call found. Call exactly one tool per message, as "
            '<tool_call>\n{"name": "<tool name>", "arguments": {...}}\n</tool_call>'
        )
    body = match.group(1)
    try:
        call = json.loads(body)
    except json.JSONDecodeError as e:
        return None, f"The tool call is not valid JSON ({e.msg} at character {e.pos}); fix it and call again."
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None, 'A tool call is a JSON object with a string "name" and an "arguments" object.'
    arguments = call.get("arguments", {})
    if not isinstance(arguments, dict | str):
        return None, f'The "arguments" of {call["name"]} must be a JSON object.'
    return checked(ParsedCall(name=call["name"], arguments=arguments))


def checked(call: ParsedCall) -> tuple[ParsedCall | None, str | None]:
    """The call, or a message when one of its strings holds a lone surrogate (a JSON escape such as
    \\ud800 without its pair): that is no character, and no file, command or log line can hold it."""
    found = _lone_surrogate(call.model_dump())
    if found is None:
        return call, None
    return None, (
        f"The tool call holds \\u{ord(found):04x}, half of a UTF-16 surrogate pair, which is not a "
        "character; write the character itself (or both halves of its pair) and call again."
    )


def _lone_surrogate(value: object) -> str | None:
    if isinstance(value, str):
        found = next((c for c in value if "\ud800" <= c <= "\udfff"), None)
        if found is None and "\\u" in value:  # arguments as JSON text: their escapes count too
            try:
                return _lone_surrogate(json.loads(value))
            except ValueError:
                return None
        return found
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if isinstance(value, list):
        return next((found for v in value if (found := _lone_surrogate(v)) is not None), None)
    return None
