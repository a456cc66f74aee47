"""Word wrap, paragraphs and truncation."""

from __future__ import annotations

import re

_BLANK_LINE_RE = re.compile(r"\n[ \t]*\n")


def wrap(
    text: str,
    width: int = 70,
    *,
    initial_indent: str = "",
    subsequent_indent: str = "",
    break_long_words: bool = True,
) -> list[str]:
    """The lines of `text` wrapped to at most `width` characters, indents included.

    Runs of whitespace, line breaks too, count as one space. A word longer than a line is split over
    several unless break_long_words is False, when it gets a line of its own.
    """
    if width <= max(len(initial_indent), len(subsequent_indent)):
        raise ValueError(f"width {width} leaves no room after the indent")
    lines: list[str] = []
    indent = initial_indent
    line = ""
    for word in text.split():
        room = width - len(indent)
        if line and len(line) + 1 + len(word) <= room:
            line += " " + word
            continue
        if line:
            lines.append(indent + line)
            indent = subsequent_indent
            room = width - len(indent)
        while break_long_words and len(word) > room:
            lines.append(indent + word[:room])
            word = word[room:]
            indent = subsequent_indent
            room = width - len(indent)
        line = word
    if line:
        lines.append(indent + line)
    return lines


def paragraphs(text: str) -> list[str]:
    """The paragraphs of `text`: blocks separated by blank lines, stripped; empty ones left out."""
    return [p.strip() for p in _BLANK_LINE_RE.split(text) if p.strip()]


def fill(text: str, width: int = 70, *, initial_indent: str = "", subsequent_indent: str = "") -> str:
    """Each paragraph of `text` wrapped to `width`, with a blank line between paragraphs."""
    return "\n\n".join(
        "\n".join(wrap(p, width, initial_indent=initial_indent, subsequent_indent=subsequent_indent))
        for p in paragraphs(text)
    )


def truncate(text: str, width: int, placeholder: str = "…") -> str:
    """`text` (whitespace collapsed) cut to at most `width` characters, `placeholder` included.

    The cut is made at the end of a word when one ends in the second half of the room; a word is split
    only when that is not possible.
    """
    if width < 0:
        raise ValueError(f"width must be 0 or more, not {width}")
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    room = width - len(placeholder)
    if room <= 0:
        return placeholder[:width]
    cut = text[:room]
    if text[room] != " ":
        space = cut.rfind(" ")
        if space >= room // 2:
            cut = cut[:space]
    return cut.rstrip() + placeholder
