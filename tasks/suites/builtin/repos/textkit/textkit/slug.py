"""URL slugs: 'Crème Brûlée, 2 Ways!' -> 'creme-brulee-2-ways'."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Container, Iterable

# Letters that Unicode does not decompose into an ASCII letter and accents.
_TRANSLITERATE = str.maketrans(
    {"ß": "ss", "æ": "ae", "Æ": "AE", "ø": "o", "Ø": "O", "œ": "oe", "Œ": "OE", "ł": "l", "Ł": "L"}
    | {"đ": "d", "Đ": "D", "ð": "d", "þ": "th", "Þ": "Th", "&": " and "}
)
_WORD_RE = re.compile(r"[A-Za-z0-9]+")


def to_ascii(text: str) -> str:
    """`text` with accents removed and other letters spelt in ASCII where one is known; the rest dropped."""
    decomposed = unicodedata.normalize("NFKD", text.translate(_TRANSLITERATE))
    return decomposed.encode("ascii", "ignore").decode("ascii")


def slugify(
    text: str,
    sep: str = "-",
    *,
    max_length: int | None = None,
    lowercase: bool = True,
    stopwords: Iterable[str] = (),
) -> str:
    """A slug of `text`: ASCII letters and digits joined by `sep`.

    Stop words are left out unless nothing else is left. With `max_length`, the slug is cut at the last
    separator that fits (or, for a single long word, at `max_length`).
    """
    ascii_text = to_ascii(text)
    found = _WORD_RE.findall(ascii_text.lower() if lowercase else ascii_text)
    stop = {word.lower() for word in stopwords}
    found = [word for word in found if word.lower() not in stop] or found
    slug = sep.join(found)
    if max_length is not None and len(slug) > max_length:
        head = slug[: max_length + 1]
        slug = head.rsplit(sep, 1)[0] if sep and sep in head else slug[:max_length]
    return slug


def unique_slug(text: str, existing: Container[str], sep: str = "-", *, max_length: int | None = None) -> str:
    """A slug of `text` that is not in `existing`: 'report', then 'report-2', 'report-3'..."""
    base = slugify(text, sep, max_length=max_length) or "item"
    slug, n = base, 2
    while slug in existing:
        slug, n = f"{base}{sep}{n}", n + 1
    return slug
