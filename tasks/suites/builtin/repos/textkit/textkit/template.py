"""A tiny template engine.

    >>> render("Hello {{ user.name|title }}!", user={"name": "ada lovelace"})
    'Hello Ada Lovelace!'

A tag is `{{ name }}`, optionally with filters: `{{ name|upper }}`, `{{ price|default:"n/a" }}`. A filter
takes at most one argument, a quoted string (without that quote inside) or a number. Names may be dotted
(`user.name`, `rows.0`): each part is a key of a mapping, an index of a list or an attribute. `\\{{` gives a
literal `{{`. A name that the context does not define is an error in strict mode (the default) and renders
as an empty string otherwise.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from textkit.case import camel_case, kebab_case, snake_case, title_case
from textkit.slug import slugify
from textkit.wrap import truncate

_TAG_RE = re.compile(r"(\\?)\{\{(.*?)\}\}", re.DOTALL)
_NAME_RE = re.compile(r"[A-Za-z_]\w*(?:\.\w+)*")
_FILTER_RE = re.compile(r"\s*([A-Za-z_]\w*)\s*(?::\s*(\"[^\"]*\"|'[^']*'|-?\d+(?:\.\d+)?)\s*)?")

Filter = Callable[..., object]


class TemplateError(ValueError):
    """A template that cannot be parsed, or rendered with the context given."""


class Undefined:
    """The value of a name that the context does not define."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Undefined({self.name!r})"


FILTERS: dict[str, Filter] = {}
_TAKES_UNDEFINED: set[str] = set()


def register_filter(name: str, *, takes_undefined: bool = False) -> Callable[[Filter], Filter]:
    """Registers a filter for every template; with takes_undefined it also gets Undefined values."""

    def decorator(func: Filter) -> Filter:
        FILTERS[name] = func
        if takes_undefined:
            _TAKES_UNDEFINED.add(name)
        return func

    return decorator


register_filter("upper")(lambda value: str(value).upper())
register_filter("lower")(lambda value: str(value).lower())
register_filter("title")(lambda value: title_case(str(value)))
register_filter("strip")(lambda value: str(value).strip())
register_filter("length")(len)
register_filter("escape")(lambda value: html.escape(str(value)))
register_filter("slug")(lambda value: slugify(str(value)))
register_filter("snake")(lambda value: snake_case(str(value)))
register_filter("kebab")(lambda value: kebab_case(str(value)))
register_filter("camel")(lambda value: camel_case(str(value)))
register_filter("truncate")(lambda value, width=80: truncate(str(value), int(width)))
register_filter("join")(lambda value, sep=", ": str(sep).join(str(item) for item in value))


@register_filter("default", takes_undefined=True)
def _default(value: object, fallback: object = "") -> object:
    """`fallback` for an undefined name, None or an empty string."""
    return fallback if isinstance(value, Undefined) or value is None or value == "" else value


@dataclass(frozen=True)
class _Tag:
    name: str
    filters: tuple[tuple[str, tuple[object, ...]], ...]


def _parse_tag(expr: str, offset: int, filters: Mapping[str, Filter]) -> _Tag:
    name, *pipes = _split_pipes(expr)
    name = name.strip()
    if not _NAME_RE.fullmatch(name):
        raise TemplateError(f"bad name {name!r} in the tag at offset {offset}")
    chain = []
    for pipe in pipes:
        m = _FILTER_RE.fullmatch(pipe)
        if m is None:
            raise TemplateError(f"bad filter {pipe.strip()!r} in the tag at offset {offset}")
        if m.group(1) not in filters:
            raise TemplateError(f"unknown filter {m.group(1)!r} in the tag at offset {offset}")
        arg = m.group(2)
        if arg is None:
            chain.append((m.group(1), ()))
        elif arg[0] in "\"'":
            chain.append((m.group(1), (arg[1:-1],)))
        else:
            chain.append((m.group(1), (float(arg) if "." in arg else int(arg),)))
    return _Tag(name, tuple(chain))


def _split_pipes(expr: str) -> list[str]:
    """`expr` split at each '|' that is not inside quotes."""
    parts, current, quote = [], "", ""
    for ch in expr:
        if ch == "|" and not quote:
            parts.append(current)
            current = ""
            continue
        if quote and ch == quote:
            quote = ""
        elif not quote and ch in "\"'":
            quote = ch
        current += ch
    return [*parts, current]


def _lookup(scope: Mapping[str, object], name: str) -> object:
    first, *rest = name.split(".")
    if first not in scope:
        return Undefined(name)
    value = scope[first]
    for part in rest:
        try:
            if isinstance(value, Mapping):
                value = value[part]
            elif isinstance(value, Sequence) and not isinstance(value, str) and part.isdigit():
                value = value[int(part)]
            else:
                value = getattr(value, part)
        except (LookupError, AttributeError):
            return Undefined(name)
    return value


class Template:
    def __init__(
        self, source: str, *, strict: bool = True, filters: Mapping[str, Filter] | None = None
    ) -> None:
        self.source = source
        self.strict = strict
        self._filters = {**FILTERS, **(filters or {})}
        self._parts: list[str | _Tag] = []
        end = 0
        for m in _TAG_RE.finditer(source):
            self._parts.append(source[end : m.start()])
            if m.group(1):
                self._parts.append(m.group()[1:])
            else:
                self._parts.append(_parse_tag(m.group(2), m.start(), self._filters))
            end = m.end()
        if "{{" in source[end:]:
            raise TemplateError(f"unclosed tag at offset {source.index('{{', end)}")
        self._parts.append(source[end:])

    def render(self, context: Mapping[str, object] | None = None, /, **values: object) -> str:
        scope = {**(context or {}), **values}
        return "".join(
            part if isinstance(part, str) else self._render_tag(part, scope) for part in self._parts
        )

    def _render_tag(self, tag: _Tag, scope: Mapping[str, object]) -> str:
        value = _lookup(scope, tag.name)
        for name, args in tag.filters:
            if isinstance(value, Undefined) and name not in _TAKES_UNDEFINED:
                value = self._undefined(value)
            try:
                value = self._filters[name](value, *args)
            except Exception as e:
                raise TemplateError(f"filter {name!r} failed on {tag.name!r}: {e}") from e
        if isinstance(value, Undefined):
            value = self._undefined(value)
        return "" if value is None else str(value)

    def _undefined(self, value: Undefined) -> str:
        if self.strict:
            raise TemplateError(f"undefined name {value.name!r}")
        return ""


def render(source: str, context: Mapping[str, object] | None = None, /, **values: object) -> str:
    """Template(source).render(context, **values)."""
    return Template(source).render(context, **values)
