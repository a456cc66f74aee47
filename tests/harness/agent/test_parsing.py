"""Tool calls parsed from model text; every malformed call becomes a message for the model."""

from __future__ import annotations

import pytest

from harness.agent.parsing import parse_tool_call


def test_a_hermes_tool_call_is_parsed() -> None:
    text = 'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    call, problem = parse_tool_call(text)
    assert problem is None and call is not None
    assert call.name == "read_file" and call.arguments == {"path": "a.py"}


def test_an_unclosed_call_at_the_end_of_a_cut_generation_still_parses() -> None:
    call, _ = parse_tool_call('<tool_call>{"name": "submit", "arguments": {}}')
    assert call is not None and call.name == "submit"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I will just think.", "No tool call found"),
        ('<tool_call>{"name": "bash", "arguments": {"command": </tool_call>', "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", 'string "name"'),
        ('<tool_call>{"name": "bash", "arguments": [1]}</tool_call>', "must be a JSON object"),
    ],
)
def test_malformed_calls_become_messages(text: str, expected: str) -> None:
    call, problem = parse_tool_call(text)
    assert call is None and problem is not None and expected in problem
