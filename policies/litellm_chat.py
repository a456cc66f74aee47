"""A chat policy through litellm, which speaks to most hosted model APIs (`litellm:anthropic/...`), or to
a server of one's own (`litellm:openai/MODEL@http://HOST:PORT/v1`: litellm's `api_base`).

litellm is an optional dependency: `pip install coding-harness[litellm]`.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from policies.base import ChatReply, SamplingParams, ToolCall


class LiteLLMChatPolicy:
    """Matches `policies.base.ChatPolicy`; `model` is a litellm model name, keys come from its usual
    environment variables (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...)."""

    kind: Literal["chat"] = "chat"

    def __init__(
        self, model: str, api_base: str | None = None, timeout_s: float = 600.0, max_retries: int = 3
    ) -> None:
        # Without this, importing litellm downloads its model price list; a sandboxed run has no network.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        try:
            import litellm
        except ImportError as e:  # litellm's own message first: it names what it lacks (tenacity, ...)
            raise ImportError(
                f"the litellm policy could not import litellm ({e}); install it with "
                "pip install 'coding-harness[litellm]'"
            ) from e
        litellm.suppress_debug_info = True  # no provider list printed with every error
        self.spec = f"litellm:{model}" + (f"@{api_base}" if api_base else "")
        self.model = model
        self.api_base = api_base
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self._litellm = litellm

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: SamplingParams
    ) -> ChatReply:
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        if params.seed is not None:
            extra["seed"] = params.seed
        if self.api_base is not None:
            extra["api_base"] = self.api_base
        if self.api_base is not None and self.model.startswith("openai/"):  # a server of one's own (vLLM,
            extra["api_key"] = os.environ.get("OPENAI_API_KEY") or "EMPTY"  # `harness serve`) needs no key
        response = self._litellm.completion(
            model=self.model,
            messages=messages,
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            timeout=self.timeout_s,
            num_retries=self.max_retries,
            **extra,
        )
        message = response.choices[0].message
        calls = [
            ToolCall(name=call.function.name, arguments=call.function.arguments, id=call.id)
            for call in message.tool_calls or []
        ]
        usage = response.usage
        return ChatReply(
            content=message.content or "",
            tool_calls=calls,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            finish_reason=str(response.choices[0].finish_reason or "stop"),
        )
