import pytest
from textkit.wrap import fill, paragraphs, truncate, wrap

TEXT = "The quick brown fox jumps over the lazy dog"


def test_wrap():
    assert wrap(TEXT, 16) == ["The quick brown", "fox jumps over", "the lazy dog"]
    assert wrap("") == []


def test_wrap_indents():
    lines = wrap(TEXT, 18, initial_indent="* ", subsequent_indent="  ")
    assert lines == ["* The quick brown", "  fox jumps over", "  the lazy dog"]
    with pytest.raises(ValueError):
        wrap(TEXT, 2, initial_indent="> ")


def test_wrap_long_words():
    assert wrap("a abcdefghijkl b", 5) == ["a", "abcde", "fghij", "kl b"]
    assert wrap("a abcdefghijkl b", 5, break_long_words=False) == ["a", "abcdefghijkl", "b"]


def test_fill_keeps_paragraphs():
    assert fill("one two\nthree\n\n  \n four  five ", 10) == "one two\nthree\n\nfour five"
    assert paragraphs("\n\na\n\nb\n") == ["a", "b"]


def test_truncate():
    assert truncate("short", 10) == "short"
    assert truncate(TEXT, 20) == "The quick brown fox…"
    assert truncate(TEXT, 12, placeholder="...") == "The quick..."
    assert truncate("Supercalifragilistic", 8) == "Superca…"
