"""The query language: one command per line, words separated by whitespace.

A word may be quoted with double quotes (backslash escapes ``\\n``, ``\\t``, ``\\r``, ``\\\\`` and
``\\"`` work inside) or with single quotes (taken literally). Quotes may start or end in the
middle of a word: ``pre"fix "ed`` is the single word ``prefix ed``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvstore.errors import CommandError, ParseError

ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"'}

# Command name -> (fewest arguments, most arguments, or None for no upper limit).
ARITY: dict[str, tuple[int, int | None]] = {
    "PING": (0, 1),
    "SET": (2, 4),
    "GET": (1, 1),
    "DEL": (1, None),
    "EXISTS": (1, None),
    "INCR": (1, 1),
    "DECR": (1, 1),
    "INCRBY": (2, 2),
    "EXPIRE": (2, 2),
    "TTL": (1, 1),
    "PERSIST": (1, 1),
    "KEYS": (0, 1),
    "DBSIZE": (0, 0),
    "FLUSHDB": (0, 0),
    "MULTI": (0, 0),
    "EXEC": (0, 0),
    "DISCARD": (0, 0),
}

_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class Command:
    """A parsed command: its upper-case name and its arguments, as written."""

    name: str
    args: tuple[str, ...] = ()


def tokenize(line: str) -> list[str]:
    """Split a line into words, honouring quotes and escapes."""
    words: list[str] = []
    current: list[str] = []
    in_word = False
    quote: str | None = None
    i = 0
    while i < len(line):
        ch = line[i]
        if quote is not None:
            if ch == quote:
                quote = None
            elif ch == "\\" and quote == '"' and i + 1 < len(line):
                i += 1
                current.append(ESCAPES.get(line[i], "\\" + line[i]))
            else:
                current.append(ch)
        elif ch.isspace():
            if in_word:
                words.append("".join(current))
                current = []
                in_word = False
        elif ch in "\"'":
            quote = ch
            in_word = True
        else:
            current.append(ch)
            in_word = True
        i += 1
    if quote is not None:
        raise ParseError("unbalanced quotes in request")
    if in_word:
        words.append("".join(current))
    return words


def parse(line: str) -> Command:
    """Parse one line into a Command, checking the name and the number of arguments."""
    words = tokenize(line)
    if not words:
        raise ParseError("empty command")
    name = words[0].upper()
    if name not in ARITY:
        raise ParseError(f"unknown command '{words[0]}'")
    args = tuple(words[1:])
    fewest, most = ARITY[name]
    if len(args) < fewest or (most is not None and len(args) > most):
        raise ParseError(f"wrong number of arguments for '{name.lower()}' command")
    return Command(name, args)


def parse_int(word: str) -> int:
    """An integer argument: an optional sign and ASCII digits, nothing else."""
    if not _INTEGER.fullmatch(word):
        raise CommandError("value is not an integer or out of range")
    return int(word)
