from textkit.case import (
    camel_case,
    constant_case,
    kebab_case,
    pascal_case,
    snake_case,
    split_words,
    title_case,
)


def test_split_words():
    assert split_words("parseHTTPResponse2") == ["parse", "HTTP", "Response2"]
    assert split_words("hello_world-again  now") == ["hello", "world", "again", "now"]
    assert split_words("") == []


def test_conversions():
    assert snake_case("userName") == "user_name"
    assert kebab_case("XMLHttpRequest") == "xml-http-request"
    assert camel_case("user name") == "userName"
    assert pascal_case("user_name") == "UserName"
    assert constant_case("maxValue") == "MAX_VALUE"
    assert camel_case("") == ""


def test_title_case():
    assert title_case("the lord of the rings") == "The Lord of the Rings"
    assert title_case("what is it for") == "What Is It For"
    assert title_case("NASA and the iPhone") == "NASA and the iPhone"
    assert title_case("a self-made man") == "A Self-Made Man"
