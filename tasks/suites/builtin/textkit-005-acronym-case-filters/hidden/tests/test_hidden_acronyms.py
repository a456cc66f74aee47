from textkit.case import constant_case, kebab_case, pascal_case, snake_case, split_words
from textkit.template import render


def test_snake_filter_with_trailing_acronym():
    assert render("{{ field|snake }}", field="userID") == "user_id"
    assert render("{{ field|snake }}", field="parseURL") == "parse_url"
    assert snake_case("getHTTP") == "get_http"


def test_kebab_filter_acronym_before_digit():
    assert render("/api/{{ resource|kebab }}", resource="HTML5Parser") == "/api/html5-parser"
    assert kebab_case("loadMP3") == "load-mp3"


def test_all_caps_words_stay_whole():
    assert split_words("MAX_RETRIES") == ["MAX", "RETRIES"]
    assert split_words("ID") == ["ID"]
    assert render("{{ name|snake }}", name="MAX_RETRIES") == "max_retries"
    assert pascal_case("XML") == "Xml"


def test_constant_case_round_trip():
    assert constant_case("DEFAULT_TIMEOUT") == "DEFAULT_TIMEOUT"
    assert constant_case("userID") == "USER_ID"


def test_acronym_in_the_middle():
    assert split_words("HTTPServer") == ["HTTP", "Server"]
    assert snake_case("XMLHttpRequest") == "xml_http_request"
    assert render("{{ cls|kebab }}", cls="IOError") == "io-error"


def test_lower_and_mixed_case():
    assert snake_case("fooBarBaz") == "foo_bar_baz"
    assert split_words("version2Update") == ["version2", "Update"]
    assert kebab_case("already-kebab case") == "already-kebab-case"
