"""Flags made from a settings model: every top-level setting of a simple type is a flag named after it
(`group_size` -> `--group-size`), its docstring the help, so a new setting needs no command-line edit.
Sections and mappings are reached with `key=value` overrides; a command may name a few nested settings
as flags too (`--backend` -> `sandbox.backend`)."""

from __future__ import annotations

import argparse
import importlib
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from harness.config import commented_yaml, field_docs, load_config, set_key

M = TypeVar("M", bound=BaseModel)
PREFIX = "setting."
"""The argparse destinations of settings flags start with this, then the setting's dotted key."""
SIMPLE = (str, int, float, Path)


def comma_list(text: str) -> list[str]:
    """`a, b,c` as `["a", "b", "c"]`: how a flag gives a list setting."""
    return [item.strip() for item in text.split(",") if item.strip()]


def optional_inner(annotation: Any) -> Any:
    """`X` of `X | None`; any other annotation as it is."""
    if get_origin(annotation) in (Union, types.UnionType):
        given = [arg for arg in get_args(annotation) if arg is not type(None)]
        return given[0] if len(given) == 1 else annotation
    return annotation


def flag_options(annotation: Any) -> dict[str, Any] | None:
    """argparse's keyword arguments for a setting of this type: a value of a simple type, one of a
    `Literal`'s choices, a comma-separated list, or on/off (`--x` / `--no-x`) for a bool. None for a type
    no flag gives (a section, a mapping): `key=value` sets those."""
    inner = optional_inner(annotation)
    if inner is bool:
        return {"action": argparse.BooleanOptionalAction}
    if inner in SIMPLE:
        return {"type": inner}
    if get_origin(inner) is Literal and all(isinstance(v, str) for v in get_args(inner)):
        return {"choices": list(get_args(inner))}
    if get_origin(inner) is list:
        (item,) = get_args(inner) or (Any,)
        if item is str or (get_origin(item) is Literal and all(isinstance(v, str) for v in get_args(item))):
            return {"type": comma_list, "metavar": "A,B,..."}
    return None


def setting_at(model: type[BaseModel], key: str) -> tuple[FieldInfo, str]:
    """The field a dotted key names and its docstring."""
    owner, *path, name = [model, *key.split(".")]
    for part in path:
        owner = optional_inner(owner.model_fields[part].annotation)
    return owner.model_fields[name], field_docs(owner).get(name, "")


def add_setting(parser: argparse.ArgumentParser, flag: str, model: type[BaseModel], key: str) -> bool:
    """`--flag` for the setting `key` of `model`, if its type takes one; whether it was added."""
    field, doc = setting_at(model, key)
    options = flag_options(field.annotation)
    if options is None:
        return False
    if "type" in options:
        options.setdefault("metavar", flag.upper().replace("-", "_"))
    shown = " ".join(doc.split()).replace("%", "%%")  # argparse formats help with %
    if "." in key:
        shown = f"{shown} ({key})"
    parser.add_argument(f"--{flag}", dest=PREFIX + key, default=argparse.SUPPRESS, help=shown, **options)
    return True


def add_settings(
    parser: argparse.ArgumentParser, model: type[BaseModel], flags: Mapping[str, str] | None = None
) -> None:
    """A flag for each top-level setting of `model` that takes one, then one for each of `flags` (flag
    name -> dotted key of a nested setting); `--config FILE`, `--print-config` and `key=value` overrides."""
    parser.add_argument("--config", type=Path, default=None, help="a YAML file of these settings")
    for name in model.model_fields:
        add_setting(parser, name.replace("_", "-"), model, name)
    for flag, key in (flags or {}).items():
        if not add_setting(parser, flag, model, key):
            raise TypeError(f"--{flag}: {model.__name__}.{key} is not a setting a flag can give")
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved settings (defaults, file, flags, overrides) as YAML, each with what it "
        "does as a comment, and stop",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        help="key=value settings, a nested one by its dotted key (--print-config shows them all)",
    )


def given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags gave (those not given are left out), as nested sections."""
    data: dict[str, Any] = {}
    for dest, value in vars(args).items():
        if dest.startswith(PREFIX):
            set_key(data, dest.removeprefix(PREFIX), value)
    return data


def resolved(args: argparse.Namespace, model: type[M]) -> M:
    """The command's settings: defaults, `--config`, the flags given, then the `key=value` overrides."""
    return load_config(model, args.config, args.overrides, given_settings(args))


def printed_config(config: BaseModel) -> int:
    """The resolved settings as a YAML file a user can start from (`--config`), each setting's docstring
    as its comment."""
    print(commented_yaml(config), end="")
    return 0


def import_model(path: str) -> type[BaseModel]:
    """The settings model at `module:Name`."""
    module, _, name = path.partition(":")
    model: type[BaseModel] = getattr(importlib.import_module(module), name)
    return model


class CommandParser(argparse.ArgumentParser):
    """A command's parser. Given `settings` (`module:Model`) and `flags` (see `add_settings`), it makes its
    settings flags the first time it parses or shows help: a model's module (training's imports torch) is
    imported for its own command only."""

    def __init__(
        self, *args: Any, settings: str | None = None, flags: Mapping[str, str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.settings = settings
        self.flags = dict(flags or {})
        self.filled = settings is None

    def fill(self) -> None:
        """Makes the settings flags, once."""
        if not self.filled and self.settings is not None:
            self.filled = True
            add_settings(self, import_model(self.settings), self.flags)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self.fill()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self.fill()
        return super().format_help()

    def format_usage(self) -> str:
        self.fill()
        return super().format_usage()
