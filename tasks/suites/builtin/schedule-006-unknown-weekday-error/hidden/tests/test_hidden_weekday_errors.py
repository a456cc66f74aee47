import pytest
from schedule import RuleError, parse_rule
from schedule.dates import parse_weekday, parse_weekdays


def test_misspelled_weekday_in_a_rule() -> None:
    with pytest.raises(RuleError, match="unknown weekday: 'wendsday'"):
        parse_rule("every week on mon,wendsday")


def test_parse_weekday_raises_value_error() -> None:
    with pytest.raises(ValueError, match="unknown weekday: 'funday'"):
        parse_weekday("funday")
    with pytest.raises(ValueError, match="unknown weekday: ''"):
        parse_weekday("  ")


def test_message_keeps_the_users_spelling() -> None:
    with pytest.raises(ValueError) as caught:
        parse_weekday("  Frieday ")
    assert str(caught.value) == "unknown weekday: 'Frieday'"
    with pytest.raises(RuleError) as caught_rule:
        parse_rule("every 2 weeks on tue, thirsday until 2024-05-01")
    assert str(caught_rule.value) == "unknown weekday: 'thirsday'"


def test_parse_weekdays_with_one_bad_name() -> None:
    with pytest.raises(ValueError, match="unknown weekday: 'x'"):
        parse_weekdays("mon, x, fri")


def test_known_names_and_abbreviations() -> None:
    assert parse_weekdays("Sunday, tues, THURS, sa") == (1, 3, 5, 6)


def test_missing_weekdays() -> None:
    with pytest.raises(RuleError, match="no weekdays given"):
        parse_rule("every week on")
