from datetime import date

import pytest
from schedule import next_occurrence, occurrences, occurrences_between, parse_rule


def test_every_three_days() -> None:
    rule = parse_rule("every 3 days")
    assert occurrences(rule, date(2024, 1, 30), limit=3) == [
        date(2024, 1, 30),
        date(2024, 2, 2),
        date(2024, 2, 5),
    ]


def test_every_other_week_counts_from_the_start_week() -> None:
    rule = parse_rule("every 2 weeks on mon,wed")
    start = date(2024, 1, 3)  # a Wednesday
    assert occurrences(rule, start, limit=4) == [
        date(2024, 1, 3),
        date(2024, 1, 15),
        date(2024, 1, 17),
        date(2024, 1, 29),
    ]


def test_weekly_without_days_uses_the_start_weekday() -> None:
    rule = parse_rule("every week 3 times")
    assert occurrences(rule, date(2024, 3, 7)) == [date(2024, 3, 7), date(2024, 3, 14), date(2024, 3, 21)]


def test_monthly_on_a_day() -> None:
    rule = parse_rule("every month on day 15")
    assert occurrences(rule, date(2024, 1, 20), limit=3) == [
        date(2024, 2, 15),
        date(2024, 3, 15),
        date(2024, 4, 15),
    ]


def test_until_is_inclusive() -> None:
    rule = parse_rule("every week on fri until 2024-03-15")
    assert occurrences(rule, date(2024, 3, 1)) == [date(2024, 3, 1), date(2024, 3, 8), date(2024, 3, 15)]


def test_next_occurrence() -> None:
    rule = parse_rule("every 2 days 3 times")
    assert next_occurrence(rule, date(2024, 5, 1), after=date(2024, 5, 2)) == date(2024, 5, 3)
    assert next_occurrence(rule, date(2024, 5, 1), after=date(2024, 5, 5)) is None


def test_between_handles_endless_rules() -> None:
    rule = parse_rule("every 3 months")
    found = occurrences_between(rule, date(2023, 11, 10), date(2024, 1, 1), date(2024, 12, 31))
    assert found == [date(2024, 2, 10), date(2024, 5, 10), date(2024, 8, 10), date(2024, 11, 10)]


def test_endless_rule_needs_a_limit() -> None:
    with pytest.raises(ValueError, match="never ends"):
        occurrences(parse_rule("every day"), date(2024, 1, 1))
