"""Run configs: a YAML file, then `key=value` overrides (dotted keys), parsed into a pydantic model."""

from __future__ import annotations

import ast
import difflib
import functools
import inspect
import textwrap
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from tasks.parsing import parse_python

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
    try:
        set_key(data, key.strip(), value)
    except ConfigError as e:
        raise ConfigError(f"override {override!r}: {e}") from e


def set_key(data: dict[str, Any], key: str, value: Any) -> None:
    """`value` under the dotted `key` in `data`, its sections made where missing."""
    node = data
    *path, last = key.split(".")
    for part in path:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{part} is not a section")
        node = child
    node[last] = value


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
    given: dict[str, str] = {}
    for override in overrides:
        apply_override(data, override)
        given[override.partition("=")[0].strip()] = override
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_problems(model, e, f"config {path}" if path else "config", given)) from e


def _problems(model: type[BaseModel], error: ValidationError, where: str, given: dict[str, str]) -> str:
    """Each problem under what it came from: the override that set the field, else the file (`where`)."""
    by_source: dict[str, list[str]] = {}
    for err in error.errors():
        loc = ".".join(map(str, err["loc"]))
        source = next(
            (f"override {text!r}" for key, text in given.items() if _overlaps(key, loc)),
            where,
        )
        by_source.setdefault(source, []).append(f"{loc}: {err['msg']}{_suggestion(model, err)}")
    return "; ".join(f"{source}: {'; '.join(found)}" for source, found in by_source.items())


def _overlaps(key: str, loc: str) -> bool:
    return key == loc or loc.startswith(f"{key}.") or key.startswith(f"{loc}.")


def _suggestion(model: type[BaseModel], error: Any) -> str:
    """For a key the settings do not have: the closest one they do in the same section, else the setting
    anywhere whose last name is closest (`grop_size` -> `rollout.group_size`), as ` (did you mean KEY?)`."""
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
    if close:
        return f" (did you mean {'.'.join([*path, close[0]])}?)"
    paths = _setting_paths(model)
    close = difflib.get_close_matches(key, [p.rsplit(".", 1)[-1] for p in paths], n=1, cutoff=0.75)
    found = [p for p in paths if p.rsplit(".", 1)[-1] == close[0]] if close else []
    return f" (did you mean {found[0]}?)" if found else ""


def _setting_paths(model: type[BaseModel], prefix: str = "", depth: int = 0) -> list[str]:
    """Every setting's dotted path, sections included (down to 4 levels)."""
    found: list[str] = []
    for name, field in model.model_fields.items():
        found.append(f"{prefix}{name}")
        inner = field.annotation
        if depth < 4 and isinstance(inner, type) and issubclass(inner, BaseModel):
            found += _setting_paths(inner, f"{prefix}{name}.", depth + 1)
    return found


def commented_yaml(config: BaseModel) -> str:
    """`config` as a YAML file to start from: every setting with its value, after its docstring as a
    comment; a nested settings model is a section. It reads back to the same settings."""
    return "".join(_yaml_lines(config, ""))


def _yaml_lines(config: BaseModel, indent: str) -> list[str]:
    docs = field_docs(type(config))
    dumped = config.model_dump(mode="json")
    lines = []
    for name in type(config).model_fields:
        for line in textwrap.wrap(" ".join(docs.get(name, "").split()), 100 - len(indent)):
            lines.append(f"{indent}# {line}\n")
        value = getattr(config, name)
        if isinstance(value, BaseModel):
            lines += [f"{indent}{name}:\n", *_yaml_lines(value, indent + "  ")]
        else:
            text = yaml.safe_dump({name: dumped[name]}, sort_keys=False, allow_unicode=True, width=100)
            lines += [f"{indent}{line}\n" for line in text.splitlines()]
    return lines


@functools.cache
def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field's docstring (the string right after it in the class body), from the class's source and
    those of its settings bases."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            tree = parse_python(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, [*body[1:], None], strict=True):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            doc = after.value if isinstance(after, ast.Expr) else None
            if isinstance(doc, ast.Constant) and isinstance(doc.value, str):
                docs[node.target.id] = inspect.cleandoc(doc.value)
    return docs
