import textwrap

from textkit.wrap import fill, wrap

TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light"
)


def test_line_of_exactly_width_fits():
    assert wrap("aaaa bbbb cccc", 9) == ["aaaa bbbb", "cccc"]
    assert wrap("hello world", 11) == ["hello world"]
    assert wrap("a b c d", 3) == ["a b", "c d"]


def test_exact_width_with_indents():
    assert wrap("ab cd ef", 7, initial_indent="> ") == ["> ab cd", "ef"]
    assert wrap("ab cd ef gh", 7, subsequent_indent="  ") == ["ab cd", "  ef gh"]


def test_fill_exact_width():
    assert fill("one two\n\nthree four", 8) == "one two\n\nthree\nfour"
    assert fill("one two three", 7) == "one two\nthree"


def test_agrees_with_textwrap():
    for width in range(12, 60):  # no word is longer than a line
        expected = textwrap.wrap(TEXT, width, break_on_hyphens=False)
        assert wrap(TEXT, width) == expected, width


def test_lines_never_exceed_width():
    for width in range(14, 40):
        lines = wrap(TEXT, width, initial_indent="* ", subsequent_indent="  ")
        assert all(len(line) <= width for line in lines)
        assert " ".join(line[2:] for line in lines) == TEXT


def test_long_words_are_split_at_width():
    assert wrap("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert wrap("x abcdefgh", 4, break_long_words=False) == ["x", "abcdefgh"]
