"""Token ids of chat messages for token-exact episodes, from the model's own chat template.

The first prompt of a segment is rendered whole. Every later message is rendered as a *delta*: the
template applied to a fixed stand-in conversation plus the new message, minus the same conversation
without it. Only that delta text is tokenized and joined to the ids so far, so earlier turns are never
re-rendered or re-tokenized (DESIGN.md, contract 1).
"""

from __future__ import annotations

import json
from typing import Any

from policies.base import Tokenizer

_HOLE = "\ue000"
"""A private-use character that stands in for a message's content while the template renders around it."""

_STAND_IN: list[dict[str, Any]] = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": "A"},
]


class ChatFormat:
    """Renders messages into ids with one tokenizer's chat template."""

    def __init__(self, tokenizer: Tokenizer, stop_ids: list[int]) -> None:
        self.tokenizer = tokenizer
        self.stop_ids = stop_ids
        rendered = self._render(_STAND_IN, add_generation_prompt=False)
        stop_text = tokenizer.decode(stop_ids[:1], skip_special_tokens=False)
        at = rendered.rfind("A" + stop_text)
        if not stop_ids or at < 0:
            raise ValueError("the chat template does not end assistant messages with the stop token")
        self._base = rendered
        # What the template writes after the stop token of an assistant message ("\n" for ChatML).
        self.closing_ids = self.encode(rendered[at + 1 + len(stop_text) :])
        # Where the assistant's next message starts (ChatML: "<|im_start|>assistant\n").
        asked = [*_STAND_IN, {"role": "user", "content": "U"}]
        closed = self._render(asked, add_generation_prompt=False)
        self.reply_ids = self.encode(self._render(asked, add_generation_prompt=True)[len(closed) :])
        decoder = getattr(tokenizer, "added_tokens_decoder", {})
        self.special_texts = [str(t) for t in decoder.values() if getattr(t, "special", False)]
        """The special tokens' texts ("<|im_end|>", ...): in a message's content they are plain text."""

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool, **kwargs: Any) -> str:
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )
        return str(text)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """The ids of a whole prompt, ending where the assistant's next message starts."""
        return self.encode(self._render(messages, add_generation_prompt=True, tools=tools or None))

    def after_generation(self, generated: list[int], finished: bool) -> list[int]:
        """Ids the harness appends to close the assistant's message (a cut-off one gets the stop id)."""
        if finished and generated and generated[-1] in self.stop_ids:
            return list(self.closing_ids)
        return [self.stop_ids[0], *self.closing_ids]

    def message_ids(self, message: dict[str, Any], reply: bool = True) -> list[int]:
        """The ids of one more message after a closed assistant message; with `reply`, also the opening
        of the assistant's next message (`reply_ids`), for a message the assistant answers next."""
        content = message.get("content")
        hostile = isinstance(content, str) and any(t in content for t in self.special_texts)
        if hostile:  # the template's own text around a hole, the content as plain text in it
            message = {**message, "content": _HOLE}
        full = self._render([*_STAND_IN, message], add_generation_prompt=reply)
        if not full.startswith(self._base):
            raise ValueError(
                "the chat template re-renders earlier messages; token-exact deltas are impossible"
            )
        delta = full[len(self._base) :]
        if not hostile:
            return self.encode(delta)
        if delta.count(_HOLE) != 1:
            raise ValueError("the chat template does not render a message's content once, as it is")
        before, after = delta.split(_HOLE)
        return [*self.encode(before), *self.plain_ids(str(content)), *self.encode(after)]

    def plain_ids(self, text: str) -> list[int]:
        """`text` tokenized with the special tokens' texts split as ordinary text: a tool's output that
        prints "<|im_end|><|im_start|>assistant" must not open a turn in the model's context."""
        encode: Any = self.tokenizer.encode
        return list(encode(text, add_special_tokens=False, split_special_tokens=True))


CHATML_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions. Function signatures within <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each call, return a JSON object with the function name and arguments within "
    '<tool_call></tool_call> tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}'
    "\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""A ChatML template with Qwen2.5-style tools and tool responses, for models built here (tiny models)."""


def assistant_text(message: dict[str, Any]) -> str:
    """What a model writes for an assistant message: its text, then its tool call in Hermes format."""
    text = str(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        function = call["function"]
        arguments = function["arguments"]
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:  # the model's own broken JSON: written as it wrote it
                body = f'{{"name": {json.dumps(function["name"])}, "arguments": {arguments}}}'
                text += f"\n<tool_call>\n{body}\n</tool_call>"
                continue
        body = json.dumps({"name": function["name"], "arguments": arguments})
        text += f"\n<tool_call>\n{body}\n</tool_call>"
    return text
