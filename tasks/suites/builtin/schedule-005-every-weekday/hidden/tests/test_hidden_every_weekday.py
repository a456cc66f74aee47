from datetime import date

import pytest
from schedule import Rule, RuleError, next_occurrence, occurrences, parse_rule

LONG_FORM = "every week on mon,tue,wed,thu,fri"


def test_every_weekday_is_the_long_form() -> None:
    rule = parse_rule("every weekday")
    assert rule == parse_rule(LONG_FORM)
    assert rule == Rule("weekly", weekdays=(0, 1, 2, 3, 4))
    assert str(rule) == LONG_FORM


def test_every_weekday_occurrences() -> None:
    rule = parse_rule("every weekday")
    start = date(2024, 3, 8)  # a Friday
    assert occurrences(rule, start, limit=4) == [
        date(2024, 3, 8),
        date(2024, 3, 11),
        date(2024, 3, 12),
        date(2024, 3, 13),
    ]
    assert next_occurrence(rule, start, after=date(2024, 3, 9)) == date(2024, 3, 11)


def test_every_weekday_with_endings() -> None:
    rule = parse_rule("every weekday until 2024-03-12")
    assert rule.until == date(2024, 3, 12)
    assert occurrences(rule, date(2024, 3, 7)) == [
        date(2024, 3, 7),
        date(2024, 3, 8),
        date(2024, 3, 11),
        date(2024, 3, 12),
    ]
    rule = parse_rule("every weekday 3 times")
    assert occurrences(rule, date(2024, 3, 9)) == [date(2024, 3, 11), date(2024, 3, 12), date(2024, 3, 13)]


def test_every_weekday_case_insensitive() -> None:
    assert parse_rule("Every Weekday") == parse_rule("every weekday")


def test_every_weekday_takes_no_interval() -> None:
    with pytest.raises(RuleError):
        parse_rule("every 2 weekday")


def test_long_form_still_works() -> None:
    rule = parse_rule(LONG_FORM)
    assert occurrences(rule, date(2024, 3, 8), limit=2) == [date(2024, 3, 8), date(2024, 3, 11)]
