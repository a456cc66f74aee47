import pytest
from kvstore import Command, Database, ManualClock, ParseError, parse, tokenize


def make_db() -> tuple[Database, ManualClock]:
    clock = ManualClock(start=0.0)
    return Database(clock=clock), clock


def test_tokenize_keeps_empty_quoted_words() -> None:
    assert tokenize('SET k "" x') == ["SET", "k", "", "x"]
    assert tokenize("SET k ''") == ["SET", "k", ""]
    assert tokenize('a ""\t""') == ["a", "", ""]


def test_a_line_of_only_an_empty_word() -> None:
    assert tokenize('""') == [""]
    with pytest.raises(ParseError, match="unknown command ''"):
        parse('""')


def test_set_and_get_an_empty_value() -> None:
    db, _ = make_db()
    assert parse('SET greeting ""') == Command("SET", ("greeting", ""))
    assert db.execute('SET greeting ""') == "OK"
    assert db.execute("GET greeting") == ""
    assert db.execute("EXISTS greeting") == 1


def test_empty_value_with_expiry() -> None:
    db, clock = make_db()
    assert db.execute("SET greeting '' EX 10") == "OK"
    assert db.execute("GET greeting") == ""
    clock.advance(10)
    assert db.execute("GET greeting") is None


def test_empty_key() -> None:
    db, _ = make_db()
    assert db.execute('SET "" nothing') == "OK"
    assert db.execute('GET ""') == "nothing"
    assert db.execute("KEYS *") == [""]
    assert db.execute("DEL ''") == 1


def test_unicode_value_in_quotes() -> None:
    db, _ = make_db()
    assert db.execute('SET motto "héllo wörld ✓"') == "OK"
    assert db.execute("GET motto") == "héllo wörld ✓"


def test_blank_line_is_still_an_error() -> None:
    db, _ = make_db()
    assert db.execute("   ") == "ERR empty command"
