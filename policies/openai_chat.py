"""A chat policy on any OpenAI-compatible chat completions server (OpenAI, vLLM, `harness serve`)."""

from __future__ import annotations

import os
from typing import Any, Literal, cast

from openai import OpenAI
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall

from policies.base import ChatReply, SamplingParams, ToolCall


class OpenAIChatPolicy:
    """Matches `policies.base.ChatPolicy`. The API key is read from `api_key_env`; a local server that
    wants none gets "EMPTY", as vLLM's examples send."""

    kind: Literal["chat"] = "chat"

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 600.0,
        max_retries: int = 3,
    ) -> None:
        self.spec = f"openai:{model}@{base_url}"
        self.model = model
        self._client = OpenAI(
            base_url=base_url,
            api_key=os.environ.get(api_key_env) or "EMPTY",
            timeout=timeout_s,
            max_retries=max_retries,
        )

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: SamplingParams
    ) -> ChatReply:
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        if params.seed is not None:
            extra["seed"] = params.seed
        completion: ChatCompletion = self._client.chat.completions.create(
            model=self.model,
            messages=cast(Any, messages),
            max_completion_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            **extra,
        )
        if not completion.choices:
            raise RuntimeError(f"{self.spec} answered with no choices")
        message = completion.choices[0].message
        calls = [
            ToolCall(name=call.function.name, arguments=call.function.arguments, id=call.id)
            for call in message.tool_calls or []
            if isinstance(call, ChatCompletionMessageFunctionToolCall)
        ]
        usage = completion.usage
        return ChatReply(
            content=message.content or "",
            tool_calls=calls,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            finish_reason=completion.choices[0].finish_reason or "stop",
        )
