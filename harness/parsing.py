"""Tool calls out of model text: the `<tool_call>{json}</tool_call>` format of Qwen / Hermes templates."""

from __future__ import annotations

import json
import re

from harness.trajectory import ParsedCall

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
    return ParsedCall(name=call["name"], arguments=arguments), None
