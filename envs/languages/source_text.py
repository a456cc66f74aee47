"""Reading C-family source text (Rust, Go, Java, JavaScript) without a parser: brackets matched past
strings and line comments, a call's arguments split at its top-level commas."""

from __future__ import annotations


def closing(source: str, start: int, open_: str, close: str) -> int:
    """The index just past the bracket that closes the one at `start`, skipping strings and comments."""
    depth, i = 0, start
    while i < len(source):
        ch = source[i]
        if ch == '"':
            i = string_end(source, i)
            continue
        if source.startswith("//", i):
            i = source.find("\n", i)
            i = len(source) if i < 0 else i
            continue
        if ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(source)


def string_end(source: str, start: int) -> int:
    i = start + 1
    while i < len(source) and source[i] != '"':
        i += 2 if source[i] == "\\" else 1
    return i + 1


def arguments(text: str) -> list[str]:
    """A macro call's arguments (`text` between its parentheses), split at the commas outside brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i = string_end(text, i)
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    return [*parts, text[start:]] if text[start:].strip() else parts
