"""Policies by spec string, e.g. `hf:PATH`, `tito:MODEL@URL`, `openai:MODEL@URL`, `litellm:MODEL`,
`litellm:MODEL@URL`, `scripted:gold`, `scripted:FILE`. A plain table of dotted paths; the backend module loads on use."""

from __future__ import annotations

import importlib
from pathlib import Path
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


def check_spec(spec: str) -> None:
    """What can be told before a run starts (and writes its folder): `hf:PATH` names a model folder here,
    or a Hugging Face Hub id (`ORG/NAME`, nothing of it on disk), and so does `tito:MODEL@URL`'s MODEL,
    whose tokenizer the client loads. A path that is neither gets one line, not five retries of the Hub
    and a traceback."""
    backend, args = parse_spec(spec)
    if backend not in ("hf", "tito"):
        return
    path = Path(args[0]).expanduser()
    if path.is_dir():
        return
    parts = args[0].split("/")
    hub_id = (
        len(parts) == 2 and all(parts) and not args[0].startswith((".", "~")) and not Path(parts[0]).exists()
    )
    if not hub_id:
        what = (
            "is not a model folder here (a folder holding config.json and the weights"
            if backend == "hf"
            else (
                "is not a model folder here (tito:MODEL@URL loads the served model's tokenizer from MODEL: the folder "
                "given to `harness serve --model` or vLLM"
            )
        )
        raise PolicySpecError(
            f"policy {spec!r}: {args[0]} {what}, e.g. from `harness model tiny --out PATH`); a Hugging Face Hub "
            "id is ORG/NAME"
        )


def make_policy(spec: str) -> Policy:
    backend, args = parse_spec(spec)
    module, _, name = BACKENDS[backend].partition(":")
    loaded = importlib.import_module(module)
    try:
        policy: Policy = getattr(loaded, name)(*args)
    except OSError as e:  # transformers' word for a model it found neither here nor on the Hub
        if backend not in ("hf", "tito"):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PolicySpecError(f"policy {spec!r}: no model loaded from {args[0]}: {first[:300]}") from e
    except RuntimeError as e:  # the tito client's SamplerError: its server refused or did not answer
        if backend != "tito" or not isinstance(e, loaded.SamplerError):
            raise
        raise PolicySpecError(f"policy {spec!r}: {e}") from e
    return policy
