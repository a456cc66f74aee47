"""Case conversions: snake_case, kebab-case, camelCase, PascalCase, CONSTANT_CASE and Title Case."""

from __future__ import annotations

import re

_CHUNK_RE = re.compile(r"[^\W_]+")
# Words that Title Case keeps in lower case, unless they come first or last.
SMALL_WORDS = frozenset(
    {"a", "an", "and", "as", "at", "but", "by", "for", "from", "in", "nor", "of", "on", "or", "the", "to"}
)


def _starts_word(prev: str, ch: str, nxt: str) -> bool:
    """Whether a new word starts at `ch`: fooBar, foo2Bar, and the last capital of an acronym: HTTPServer."""
    if not ch.isupper():
        return False
    return prev.islower() or prev.isdigit() or (prev.isupper() and nxt.islower())


def split_words(text: str) -> list[str]:
    """The words of an identifier or a phrase: 'parseHTTPResponse2' -> ['parse', 'HTTP', 'Response2']."""
    result = []
    for chunk in _CHUNK_RE.findall(text):
        start = 0
        for i in range(1, len(chunk)):
            if _starts_word(chunk[i - 1], chunk[i], chunk[i + 1 : i + 2]):
                result.append(chunk[start:i])
                start = i
        result.append(chunk[start:])
    return result


def _capitalize(word: str) -> str:
    return word[:1].upper() + word[1:].lower()


def snake_case(text: str) -> str:
    return "_".join(word.lower() for word in split_words(text))


def kebab_case(text: str) -> str:
    return "-".join(word.lower() for word in split_words(text))


def constant_case(text: str) -> str:
    return "_".join(word.upper() for word in split_words(text))


def pascal_case(text: str) -> str:
    return "".join(_capitalize(word) for word in split_words(text))


def camel_case(text: str) -> str:
    pascal = pascal_case(text)
    return pascal[:1].lower() + pascal[1:]


def title_case(text: str) -> str:
    """Title Case for headlines: small words (of, the, and...) stay lower-case except first and last;
    words in capitals (NASA) and with inner capitals (iPhone) are kept; hyphenated parts are each done."""
    words = text.split()
    out = []
    for i, word in enumerate(words):
        if 0 < i < len(words) - 1 and word.lower() in SMALL_WORDS:
            out.append(word.lower())
        else:
            out.append("-".join(_title_word(part) for part in word.split("-")))
    return " ".join(out)


def _title_word(word: str) -> str:
    if any(ch.isupper() for ch in word[1:]):
        return word
    return word[:1].upper() + word[1:]
