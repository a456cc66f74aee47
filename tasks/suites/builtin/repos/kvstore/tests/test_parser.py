import pytest
from kvstore import Command, ParseError, parse, tokenize


def test_words_are_split_on_whitespace() -> None:
    assert tokenize("  SET   greeting\thello ") == ["SET", "greeting", "hello"]


def test_double_quotes_keep_spaces_and_escapes() -> None:
    assert tokenize('SET msg "hello world\\n"') == ["SET", "msg", "hello world\n"]


def test_single_quotes_are_literal() -> None:
    assert tokenize("SET path 'C:\\temp dir'") == ["SET", "path", "C:\\temp dir"]


def test_quotes_can_join_a_word() -> None:
    assert tokenize('SET k pre"fix "ed') == ["SET", "k", "prefix ed"]


def test_unbalanced_quote_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="unbalanced"):
        tokenize('SET k "oops')


def test_command_names_are_case_insensitive() -> None:
    assert parse("set Key Value") == Command("SET", ("Key", "Value"))


def test_unknown_command() -> None:
    with pytest.raises(ParseError, match="unknown command 'FROB'"):
        parse("FROB x")


def test_wrong_number_of_arguments() -> None:
    with pytest.raises(ParseError, match="wrong number of arguments for 'get' command"):
        parse("GET a b")
