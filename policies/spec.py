"""Policies by spec string, e.g. `hf:PATH`, `tito:MODEL@URL`, `openai:MODEL@URL`, `litellm:MODEL`,
`litellm:MODEL@URL`, `scripted:gold`, `scripted:FILE`. A plain table of dotted paths; the backend module loads on use."""

from __future__ import annotations

import importlib
from typing import Any

from policies.base import Policy

BACKENDS = {
    "hf": "policies.hf:HFPolicy",
    "tito": "policies.tito:TitoPolicy",
    "openai": "policies.openai_chat:OpenAIChatPolicy",
    "litellm": "policies.litellm_chat:LiteLLMChatPolicy",
    "scripted": "policies.scripted:ScriptedPolicy",
}


class PolicySpecError(ValueError):
    pass


def parse_spec(spec: str) -> tuple[str, list[Any]]:
    """(backend, constructor arguments) of a spec string."""
    backend, sep, rest = spec.partition(":")
    if not sep or backend not in BACKENDS or not rest:
        raise PolicySpecError(
            f"policy {spec!r}: expected BACKEND:ARGS with BACKEND one of {', '.join(BACKENDS)} "
            "(hf:PATH, tito:MODEL@URL, openai:MODEL@URL, litellm:MODEL[@URL], scripted:gold, scripted:FILE)"
        )
    if backend in ("tito", "openai"):
        model, at, url = rest.rpartition("@")
        if not at or not model or not url:
            raise PolicySpecError(f"policy {spec!r}: expected {backend}:MODEL@URL")
        return backend, [model, url]
    if backend == "litellm":  # a server of one's own: litellm:openai/MODEL@http://HOST:PORT/v1
        model, at, url = rest.rpartition("@")
        if at and model and url.startswith(("http://", "https://")):
            return backend, [model, url]
    return backend, [rest]


def make_policy(spec: str) -> Policy:
    backend, args = parse_spec(spec)
    module, _, name = BACKENDS[backend].partition(":")
    policy: Policy = getattr(importlib.import_module(module), name)(*args)
    return policy
