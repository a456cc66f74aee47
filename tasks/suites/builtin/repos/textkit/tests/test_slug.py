from textkit.slug import slugify, unique_slug


def test_slugify_basics():
    assert slugify("Hello, World!") == "hello-world"
    assert slugify("  Tom & Jerry -- 2024  ") == "tom-and-jerry-2024"
    assert slugify("Straße im Ærø", sep="_") == "strasse_im_aero"
    assert slugify("Keep Case", lowercase=False) == "Keep-Case"
    assert slugify("!!!") == ""


def test_slugify_stopwords():
    assert slugify("The Art of War", stopwords=["the", "of"]) == "art-war"
    assert slugify("The Of", stopwords=["the", "of"]) == "the-of"


def test_slugify_max_length_cuts_at_word():
    assert slugify("one two three", max_length=9) == "one-two"
    assert slugify("one two three", max_length=7) == "one-two"
    assert slugify("abcdefghij", max_length=4) == "abcd"


def test_unique_slug():
    assert unique_slug("Report", {"other"}) == "report"
    assert unique_slug("Report", {"report", "report-2"}) == "report-3"
    assert unique_slug("???", set()) == "item"
