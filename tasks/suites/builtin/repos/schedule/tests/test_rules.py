from datetime import date

import pytest
from schedule import Rule, RuleError, parse_rule
from schedule.dates import add_months, parse_weekday


def test_every_day() -> None:
    assert parse_rule("every day") == Rule("daily")
    assert parse_rule("Every 3 Days") == Rule("daily", interval=3)


def test_weeks_on_weekdays() -> None:
    assert parse_rule("every 2 weeks on mon,wed") == Rule("weekly", 2, weekdays=(0, 2))
    assert parse_rule("every week on Tue, Thu") == Rule("weekly", weekdays=(1, 3))


def test_month_on_day_until() -> None:
    rule = parse_rule("every month on day 15 until 2024-12-31")
    assert rule == Rule("monthly", month_day=15, until=date(2024, 12, 31))


def test_count() -> None:
    assert parse_rule("every week on fri 4 times") == Rule("weekly", weekdays=(4,), count=4)


def test_str_parses_back() -> None:
    text = "every 2 weeks on mon,wed until 2024-06-30"
    assert str(parse_rule(text)) == text
    assert parse_rule(str(parse_rule("every 3 months 5 times"))) == Rule("monthly", 3, count=5)


@pytest.mark.parametrize(
    "text",
    ["every 0 days", "every fortnight", "every day on mon"],
    ids=["zero-interval", "unknown-unit", "on-with-days"],
)
def test_bad_rules(text: str) -> None:
    with pytest.raises(RuleError):
        parse_rule(text)


def test_weekday_abbreviations() -> None:
    assert [parse_weekday(name) for name in ("Monday", "tue", "TH", "sun")] == [0, 1, 3, 6]


def test_add_months_clamps_to_short_months() -> None:
    assert add_months(date(2023, 1, 31), 1) == date(2023, 2, 28)
    assert add_months(date(2023, 5, 10), -7) == date(2022, 10, 10)
