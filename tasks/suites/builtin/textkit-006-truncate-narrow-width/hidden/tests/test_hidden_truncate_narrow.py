import pytest
from textkit.template import render
from textkit.wrap import truncate

TEXTS = ["Hello world", "The quick brown fox jumps", "Supercalifragilistic", "a b c d e f g"]
PLACEHOLDERS = ["…", "...", " [more]"]


def test_never_longer_than_width():
    for text in TEXTS:
        for placeholder in PLACEHOLDERS:
            for width in range(len(text) + 3):
                result = truncate(text, width, placeholder=placeholder)
                assert len(result) <= width, (text, placeholder, width, result)


def test_zero_width_gives_empty_string():
    assert truncate("Hello world", 0) == ""
    assert truncate("Hello world", 0, placeholder="...") == ""


def test_filter_with_a_narrow_width():
    assert len(render("{{ cell|truncate:2 }}", cell="Hello world")) <= 2
    assert len(render("{{ cell|truncate:0 }}", cell="Hello world")) == 0


def test_placeholder_when_there_is_room():
    for text in TEXTS:
        for placeholder in PLACEHOLDERS:
            for width in range(len(placeholder) + 1, len(text)):
                result = truncate(text, width, placeholder=placeholder)
                assert result.endswith(placeholder)
                assert len(result) <= width
                assert text.startswith(result[: -len(placeholder)])
    assert truncate("Hello world", 8) == "Hello…"


def test_negative_width_is_refused():
    with pytest.raises(ValueError, match="width"):
        truncate("Hello world", -1)


def test_short_text_is_kept():
    assert truncate("Hello", 5) == "Hello"
    assert truncate("  Hello   world ", 11) == "Hello world"
    assert truncate("", 0) == ""
