from datetime import date

from schedule import occurrences, occurrences_between, parse_rule
from schedule.dates import add_months, days_in_month


def test_day_31_falls_on_the_last_day_of_short_months() -> None:
    rule = parse_rule("every month on day 31")
    assert occurrences(rule, date(2024, 1, 1), limit=5) == [
        date(2024, 1, 31),
        date(2024, 2, 29),
        date(2024, 3, 31),
        date(2024, 4, 30),
        date(2024, 5, 31),
    ]
    found = occurrences_between(rule, date(2024, 1, 1), date(2025, 2, 1), date(2025, 3, 31))
    assert found == [date(2025, 2, 28), date(2025, 3, 31)]


def test_start_day_is_kept_after_a_short_month() -> None:
    rule = parse_rule("every month")
    assert occurrences(rule, date(2024, 1, 30), limit=3) == [
        date(2024, 1, 30),
        date(2024, 2, 29),
        date(2024, 3, 30),
    ]
    rule = parse_rule("every month 4 times")
    assert occurrences(rule, date(2023, 1, 29)) == [
        date(2023, 1, 29),
        date(2023, 2, 28),
        date(2023, 3, 29),
        date(2023, 4, 29),
    ]


def test_every_two_months_on_day_30() -> None:
    rule = parse_rule("every 2 months on day 30 until 2024-07-01")
    assert occurrences(rule, date(2023, 12, 1)) == [
        date(2023, 12, 30),
        date(2024, 2, 29),
        date(2024, 4, 30),
        date(2024, 6, 30),
    ]


def test_add_months_into_a_leap_february() -> None:
    assert add_months(date(2024, 1, 31), 1) == date(2024, 2, 29)
    assert add_months(date(2000, 3, 31), -1) == date(2000, 2, 29)
    assert add_months(date(1900, 3, 31), -1) == date(1900, 2, 28)
    assert [days_in_month(year, 2) for year in (2023, 2024, 1900, 2000)] == [28, 29, 28, 29]


def test_days_in_month_of_common_years() -> None:
    assert [days_in_month(2023, month) for month in range(1, 13)] == [
        31,
        28,
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ]


def test_mid_month_days_are_unchanged() -> None:
    rule = parse_rule("every 3 months on day 28")
    assert occurrences(rule, date(2024, 1, 1), limit=3) == [
        date(2024, 1, 28),
        date(2024, 4, 28),
        date(2024, 7, 28),
    ]
