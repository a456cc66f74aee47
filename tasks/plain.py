"""Plain data, encoded canonically: what a grading child reports of an actual value, so that the parent,
which holds the expected value, decides equality (`tasks/expectations.py`, `envs/grade_runner.py`).

Standard library only: the grader ships this file into the sandbox, where the rewritten hidden tests
import it as `harness_expect` and call `observe(SLOT, ACTUAL)` where they had `assert ACTUAL == EXPECTED`.

Only plain data encodes: None, bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset,
and the standard library's Decimal, Fraction, date, datetime (naive or a fixed offset), time and
timedelta. With `objects` (an expected value computed on the gold tree, `tasks/computed.py`), an instance
of any other class encodes field by field, as `["object", TYPE NAME, [[FIELD, ENCODING], ...]]`: a
dataclass by the fields its own equality compares, an enum member by its name, anything else by its
instance attributes and slots, each read from the instance's dictionary where it is there (else with
`object.__getattribute__`, which runs a descriptor of the class of that name: the value is the child's to
report anyway, and the parent compares it with a value the sandbox never held). A subclass of a builtin container or scalar encodes as its base only when no class of it
defines its own equality; anything else (an object with its own `__eq__`, an always-equal object) encodes
as `["opaque", TYPE NAME]`, which equals no expected value. Encoding reads a value through its base
type's own C methods, so no method of the value runs. Decoding (in the parent) rebuilds the same plain
values, and Python's own `==` on them then compares as the original assert did.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import fractions
from typing import Any

MAX_DEPTH = 64
"""Nesting beyond this is not plain data (and a list that holds itself never ends)."""
MAX_ITEMS = 200_000
"""Scalars encoded per value at most."""
MAX_SAME_HASH = 64
"""Keys of one hash a decoded set or dict may hold (equal hashes beyond chance are made on purpose)."""
SCALARS: dict[type, str] = {int: "int", float: "float", complex: "complex", str: "str", bytes: "bytes"}
CONTAINERS: dict[type, str] = {list: "list", tuple: "tuple", dict: "dict", set: "set", frozenset: "frozenset"}
EQUALITY = ("__eq__", "__ne__")
ITERATE: dict[type, Any] = {
    list: list.__iter__,
    tuple: tuple.__iter__,
    set: set.__iter__,
    frozenset: frozenset.__iter__,
}
"""The base type's own iterator: a subclass's `__iter__` never runs."""

OBJECT = "object"
"""The tag of an object encoded field by field."""

OBSERVED: list[list[Any]] = []
"""[node id, slot, encoding] of each observation in this process, in order (read by the grader's runner)."""
CURRENT: list[str] = [""]
"""The node id of the test running now (set by the grader's runner)."""


class NotPlain(Exception):
    """The value is not plain data."""


def observe(slot: int, value: Any) -> None:
    """Records the actual value of the hidden assertion `slot` for the test that runs now."""
    OBSERVED.append([CURRENT[0], slot, encode(value)])


def observe_is(slot: int, value: Any) -> None:
    """Records which singleton (None, True, False) `value` is, for an `is` assertion: identity needs no
    plain data, and any other object is `["other"]`."""
    kind = "none" if value is None else "true" if value is True else "false" if value is False else "other"
    OBSERVED.append([CURRENT[0], slot, [kind]])


def observe_fields(slot: int, value: Any) -> None:
    """Records the actual value of the hidden assertion `slot` whose expected value the grader computed on
    the gold tree: objects encode field by field (`encode(objects=True)`)."""
    OBSERVED.append([CURRENT[0], slot, encode(value, objects=True)])


def probe(slot: int, actual: Any, expected: Any) -> None:
    """At validation, on the gold tree: records both sides of the assertion `slot` (the expected side
    under slot `-1 - slot`), then asserts as the test did."""
    OBSERVED.append([CURRENT[0], slot, encode(actual, objects=True)])
    OBSERVED.append([CURRENT[0], -1 - slot, encode(expected, objects=True)])
    if not actual == expected:
        raise AssertionError(f"hidden assertion {slot}: the two sides differ")


def encode(value: Any, objects: bool = False) -> list[Any]:
    """The canonical encoding of `value`, or `["opaque", TYPE]` when it is not plain data; with `objects`,
    instances of other classes encode field by field."""
    try:
        return _encode(value, 0, [0, int(objects)])
    except (NotPlain, RecursionError):
        return ["opaque", _type_name(value)]


def _type_name(value: Any) -> str:
    kind = type(value)
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', '?')}"[:200]


def _base(value: Any) -> type | None:
    """The builtin type `value` counts as: its own, or its base when no class between defines equality."""
    kind = type(value)
    if kind in SCALARS or kind in CONTAINERS or kind is bool:
        return kind
    for base in (*SCALARS, *CONTAINERS):
        if isinstance(value, base):
            between = kind.__mro__[: kind.__mro__.index(base)]
            if any(name in vars(c) for c in between for name in EQUALITY):
                return None
            return base
    return None


def _encode(value: Any, depth: int, count: list[int]) -> list[Any]:
    count[0] += 1
    if depth > MAX_DEPTH or count[0] > MAX_ITEMS:
        raise NotPlain("too deep or too large")
    if value is None:
        return ["none"]
    if value is True or value is False:
        return ["bool", value is True]
    special = _encode_special(value)
    if special is not None:
        return special
    base = _base(value)
    if base is None and count[1] and _object_like(value):
        return _fields(value, depth, count)
    if base is None:
        raise NotPlain(_type_name(value))
    if base is int:
        return ["int", int.__repr__(value)]
    if base is float:
        return ["float", float.__repr__(value)]
    if base is complex:
        return [
            "complex",
            float.__repr__(complex.real.__get__(value)),
            float.__repr__(complex.imag.__get__(value)),
        ]
    if base is str:
        return ["str", str.__str__(value)]
    if base is bytes:
        return ["bytes", bytes.hex(value)]
    if base is dict:
        items = [[_encode(k, depth + 1, count), _encode(v, depth + 1, count)] for k, v in dict.items(value)]
        return ["dict", items]
    members: Any = ITERATE[base](value)
    return [CONTAINERS[base], [_encode(v, depth + 1, count) for v in members]]


def _object_like(value: Any) -> bool:
    """An instance of a class of its own: not a builtin (a function, a module, a method), not a class, not
    a subclass of a builtin scalar or container (whose own equality then decides), not an exception."""
    kind = type(value)
    if getattr(kind, "__module__", "builtins") == "builtins" or isinstance(value, type | BaseException):
        return False
    return not isinstance(value, (*SCALARS, *CONTAINERS))


def _fields(value: Any, depth: int, count: list[int]) -> list[Any]:
    kind = type(value)
    if isinstance(value, enum.Enum):
        return [
            OBJECT,
            _type_name(value),
            [["_name_", ["str", str(object.__getattribute__(value, "_name_"))]]],
        ]
    try:
        own = object.__getattribute__(value, "__dict__")
    except AttributeError:
        own = {}
    if type(own) is not dict:
        raise NotPlain("an instance dictionary that is not a dict")
    items = []
    names = _field_names(kind, own)
    for name in names:
        try:
            field = dict.__getitem__(own, name) if name in own else object.__getattribute__(value, name)
        except AttributeError as e:  # an unset slot
            raise NotPlain(f"{name} is not set") from e
        items.append([name, _encode(field, depth + 1, count)])
    return [OBJECT, _type_name(value), items]


def _field_names(kind: type, own: dict[Any, Any]) -> list[str]:
    """A dataclass's compared fields; else the instance's attributes (`own`) and every slot of its
    classes."""
    if any("__dataclass_fields__" in vars(c) for c in kind.__mro__):
        return sorted(f.name for f in dataclasses.fields(kind) if f.compare)
    names: set[str] = set()
    names.update(k for k in dict.keys(own) if type(k) is str)
    for c in kind.__mro__:
        slots = vars(c).get("__slots__", ())
        names.update([slots] if isinstance(slots, str) else [s for s in slots if isinstance(s, str)])
    return sorted(names - {"__dict__", "__weakref__"})


def _encode_special(value: Any) -> list[Any] | None:
    """The standard library's value types, by exact type (their C types cannot be patched)."""
    kind = type(value)
    if kind is decimal.Decimal:
        return ["decimal", decimal.Decimal.__str__(value)]
    if kind is fractions.Fraction:
        return ["fraction", int.__repr__(value.numerator), int.__repr__(value.denominator)]
    if kind is datetime.datetime:
        offset = _offset(value)
        return ["datetime", datetime.datetime.isoformat(value.replace(tzinfo=None)), offset]
    if kind is datetime.date:
        return ["date", datetime.date.isoformat(value)]
    if kind is datetime.time:
        return ["time", datetime.time.isoformat(value.replace(tzinfo=None)), _offset(value)]
    if kind is datetime.timedelta:
        return ["timedelta", value.days, value.seconds, value.microseconds]
    return None


def _offset(value: datetime.datetime | datetime.time) -> float | None:
    """The fixed offset of an aware value in seconds; None when naive. Any other time zone is not plain."""
    zone = value.tzinfo
    if zone is None:
        return None
    if type(zone) is not datetime.timezone:
        raise NotPlain("a time zone other than a fixed offset")
    delta = datetime.timezone.utcoffset(zone, None)
    return delta.total_seconds()


def decode(data: Any, depth: int = 0) -> Any:
    """The plain value an encoding stands for; raises ValueError for what no `encode` makes (a forged
    or garbled answer) and for `opaque`, which stands for no value."""
    if depth > MAX_DEPTH + 1 or not isinstance(data, list) or not data or not isinstance(data[0], str):
        raise ValueError("not an encoding")
    tag, rest = data[0], data[1:]
    try:
        return _decode(tag, rest, depth)
    except (TypeError, ValueError, IndexError, OverflowError, ArithmeticError, KeyError) as e:
        raise ValueError(f"not an encoding: {e}") from e


def _decode(tag: str, rest: list[Any], depth: int) -> Any:
    if tag == "none":
        return None
    if tag == "bool":
        return _typed(rest[0], bool)
    if tag in ("int", "float"):
        return int(_typed(rest[0], str)) if tag == "int" else float(_typed(rest[0], str))
    if tag == "complex":
        return complex(float(_typed(rest[0], str)), float(_typed(rest[1], str)))
    if tag == "str":
        return _typed(rest[0], str)
    if tag == "bytes":
        return bytes.fromhex(_typed(rest[0], str))
    if tag == "decimal":
        return decimal.Decimal(_typed(rest[0], str))
    if tag == "fraction":
        return fractions.Fraction(int(_typed(rest[0], str)), int(_typed(rest[1], str)))
    if tag in ("datetime", "time"):
        parse = datetime.datetime if tag == "datetime" else datetime.time
        naive = parse.fromisoformat(_typed(rest[0], str))
        offset = rest[1]
        if offset is None:
            return naive
        return naive.replace(tzinfo=datetime.timezone(datetime.timedelta(seconds=float(offset))))
    if tag == "date":
        return datetime.date.fromisoformat(_typed(rest[0], str))
    if tag == "timedelta":
        return datetime.timedelta(days=_int(rest[0]), seconds=_int(rest[1]), microseconds=_int(rest[2]))
    if tag == "dict":
        pairs = [(decode(k, depth + 1), decode(v, depth + 1)) for k, v in _typed(rest[0], list)]
        _spread([k for k, _ in pairs])
        return dict(pairs)
    if tag == OBJECT:
        pairs = [(_typed(name, str), decode(v, depth + 1)) for name, v in _typed(rest[1], list)]
        names = [name for name, _ in pairs]
        if names != sorted(set(names)):
            raise ValueError("fields not in order, or named twice")
        return Fields(_typed(rest[0], str), tuple(pairs))
    containers = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
    if tag in containers:
        items = [decode(v, depth + 1) for v in _typed(rest[0], list)]
        return containers[tag](_spread(items) if tag in ("set", "frozenset") else items)
    raise ValueError(f"no value: {tag}")


@dataclasses.dataclass(frozen=True)
class Fields:
    """An object as its encoding stands for it (in the parent, which never imports the repository's
    classes): equal to another only with the same type name and equal fields."""

    type: str
    items: tuple[tuple[str, Any], ...]


def _spread(keys: list[Any]) -> list[Any]:
    """`keys`, when their hashes are spread as real data's are: many keys of one hash (made to collide)
    would cost the host quadratic time to put in a set or dict."""
    counts: dict[int, int] = {}
    for key in keys:
        h = hash(key)
        counts[h] = counts.get(h, 0) + 1
        if counts[h] > MAX_SAME_HASH:
            raise ValueError(f"more than {MAX_SAME_HASH} keys of one hash")
    return keys


def _typed(value: Any, kind: type) -> Any:
    if type(value) is not kind:
        raise TypeError(f"{kind.__name__} expected")
    return value


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError("int expected")
    return value
