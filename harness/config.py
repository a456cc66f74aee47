"""Run configs: a YAML file, then `key=value` overrides (dotted keys), parsed into a pydantic model."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A config that cannot be used; the message names the file or override and the field."""


def apply_override(data: dict[str, Any], override: str) -> None:
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {override!r}: expected key=value (e.g. sampling.temperature=0.7)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override {override!r}: value is not valid YAML: {e}") from e
    node = data
    parts = key.strip().split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {override!r}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def merged(under: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on `under`, section by section: where both hold a mapping under one key, they merge."""
    out = dict(under)
    for key, value in over.items():
        below = out.get(key)
        out[key] = (
            merged(below if isinstance(below, dict) else {}, value) if isinstance(value, dict) else value
        )
    return out


def load_config(
    model: type[M], path: Path | None, overrides: list[str], base: dict[str, Any] | None = None
) -> M:
    """The model's defaults, then the file, then `base` (the command-line flags a user gave), then the
    `key=value` overrides, validated as `model`. Sections merge key by key: a flag that sets one key of
    a section the file also sets keeps the file's other keys, and the reverse."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with path.open("rb") as f:  # bytes: YAML's reader names the file and what is not UTF-8 in it
                loaded = yaml.safe_load(f) or {}
        except OSError as e:
            raise ConfigError(f"config {path}: {e.strerror}") from e
        except yaml.YAMLError as e:
            raise ConfigError(f"config {path}: not valid YAML: {e}") from e
        except RecursionError as e:
            raise ConfigError(f"config {path}: nested too deeply") from e
        if not isinstance(loaded, dict):
            raise ConfigError(f"config {path}: expected a mapping at the top")
        data = loaded
    data = merged(data, base or {})
    for override in overrides:
        apply_override(data, override)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        where = f"config {path}" if path else "config"
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc']))}: {err['msg']}{_suggestion(model, err)}" for err in e.errors()
        )
        raise ConfigError(f"{where}: {problems}") from e


def _suggestion(model: type[BaseModel], error: Any) -> str:
    """For a key the settings do not have: the closest one they do, as ` (did you mean KEY?)`."""
    if error["type"] != "extra_forbidden":
        return ""
    *path, key = [str(part) for part in error["loc"]]
    owner: Any = model
    for part in path:
        field = owner.model_fields.get(part)
        owner = field.annotation if field is not None else None
        if not (isinstance(owner, type) and issubclass(owner, BaseModel)):
            return ""
    close = difflib.get_close_matches(key, list(owner.model_fields), n=1, cutoff=0.6)
    return f" (did you mean {'.'.join([*path, close[0]])}?)" if close else ""
