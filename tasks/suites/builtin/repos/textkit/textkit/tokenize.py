"""Splitting text into tokens, words and sentences."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

_TOKEN_RE = re.compile(
    r"""
    (?P<number>\d+(?:[.,]\d+)*%?(?!\w))   # 42, 3.14, 1,000, 15%
    | (?P<word>[^\W_]+(?:['’-][^\W_]+)*)  # words, with inner apostrophes and hyphens: don't, well-known
    | (?P<punct>\S)                       # anything else, one character at a time
    """,
    re.VERBOSE,
)
_SENTENCE_END_RE = re.compile(r"[.!?]+[\"')\]’”]*(?=\s|$)")
ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "st", "vs", "etc", "e.g", "i.e", "no", "fig", "a.m", "p.m"}
)


@dataclass(frozen=True)
class Token:
    text: str
    kind: str
    """'word', 'number' or 'punct'."""
    start: int
    end: int


def tokenize(text: str) -> list[Token]:
    """The words, numbers and punctuation marks of `text`, with their offsets."""
    return [Token(m.group(), m.lastgroup or "punct", m.start(), m.end()) for m in _TOKEN_RE.finditer(text)]


def words(text: str, *, lower: bool = False) -> list[str]:
    """The words of `text`, numbers and punctuation left out."""
    found = [t.text for t in tokenize(text) if t.kind == "word"]
    return [w.lower() for w in found] if lower else found


def sentences(text: str) -> list[str]:
    """The sentences of `text`; a full stop after a known abbreviation or an initial does not end one."""
    result = []
    start = 0
    for m in _SENTENCE_END_RE.finditer(text):
        before = text[start : m.start()].split()
        last = before[-1].lower() if before else ""
        if m.group() == "." and (last in ABBREVIATIONS or (len(last) == 1 and last.isalpha())):
            continue
        sentence = text[start : m.end()].strip()
        if sentence:
            result.append(sentence)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        result.append(tail)
    return result


def ngrams(items: Sequence[T], n: int) -> list[tuple[T, ...]]:
    """Every run of `n` consecutive items: ngrams("abc", 2) == [("a", "b"), ("b", "c")]."""
    if n < 1:
        raise ValueError(f"n must be at least 1, not {n}")
    return [tuple(items[i : i + n]) for i in range(len(items) - n + 1)]
