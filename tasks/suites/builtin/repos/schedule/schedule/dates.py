"""Calendar helpers: weekday names, ISO dates and month arithmetic."""

from __future__ import annotations

from datetime import date, timedelta

WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _weekday_table() -> dict[str, int]:
    table: dict[str, int] = {}
    for number, name in enumerate(WEEKDAY_NAMES):
        table[name] = number
        table[name[:3]] = number
        table[name[:2]] = number
    table.update({"tues": 1, "weds": 2, "thur": 3, "thurs": 3})
    return table


_WEEKDAYS = _weekday_table()


def parse_weekday(name: str) -> int:
    """0 for Monday ... 6 for Sunday, from an English name or abbreviation ("tue", "Th") in any case."""
    try:
        return _WEEKDAYS[name.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown weekday: {name.strip()!r}") from None


def parse_weekdays(text: str) -> tuple[int, ...]:
    """Weekday numbers from a comma-separated list such as "mon,wed" or "Tue, Thu": sorted, no repeats."""
    names = [part for part in text.split(",") if part.strip()]
    if not names:
        raise ValueError("no weekdays given")
    return tuple(sorted({parse_weekday(name) for name in names}))


def parse_date(text: str) -> date:
    """A date written as YYYY-MM-DD."""
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a date (YYYY-MM-DD): {text!r}") from None


def is_leap_year(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    if not 1 <= month <= 12:
        raise ValueError(f"a month is 1..12, not {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return _MONTH_DAYS[month - 1]


def add_months(day: date, months: int, *, on_day: int | None = None) -> date:
    """The date `months` months after `day` (before it, if negative).

    The result falls on day-of-month `on_day` (default: the day of `day`), moved back to the last day
    of the month when the month is too short: add_months(2023-01-31, 1) is 2023-02-28.
    """
    year, month = divmod(day.year * 12 + day.month - 1 + months, 12)
    month += 1
    wanted = day.day if on_day is None else on_day
    return date(year, month, min(wanted, days_in_month(year, month)))


def start_of_week(day: date) -> date:
    """The Monday of the week `day` is in."""
    return day - timedelta(days=day.weekday())
