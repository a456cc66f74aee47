import pytest
from textkit.tokenize import ngrams, sentences, tokenize, words


def test_tokenize_kinds_and_offsets():
    tokens = tokenize("It costs 3.50, isn't it?")
    assert [(t.text, t.kind) for t in tokens] == [
        ("It", "word"),
        ("costs", "word"),
        ("3.50", "number"),
        (",", "punct"),
        ("isn't", "word"),
        ("it", "word"),
        ("?", "punct"),
    ]
    assert (tokens[2].start, tokens[2].end) == (9, 13)


def test_words():
    assert words("A well-known 2nd_try: 15% off!", lower=True) == ["a", "well-known", "2nd", "try", "off"]


def test_sentences():
    text = "Dr. Smith arrived at 5 p.m. on Monday. He left! Did J. Doe stay? Yes"
    assert sentences(text) == [
        "Dr. Smith arrived at 5 p.m. on Monday.",
        "He left!",
        "Did J. Doe stay?",
        "Yes",
    ]
    assert sentences("") == []


def test_ngrams():
    assert ngrams(["a", "b", "c"], 2) == [("a", "b"), ("b", "c")]
    assert ngrams("ab", 3) == []
    with pytest.raises(ValueError):
        ngrams("abc", 0)
