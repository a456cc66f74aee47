"""Recurrence rules written in plain English, such as "every 2 weeks on mon,wed until 2024-06-30".

Grammar (case does not matter)::

    every [N] (day|days|week|weeks|month|months) [on WEEKDAYS | on day D] [until YYYY-MM-DD] [K times]
    every weekday [until YYYY-MM-DD] [K times]

``on WEEKDAYS`` goes with weeks ("on mon,wed", "on Tue, Thu"); ``on day D`` with months.
``until`` is inclusive. ``every weekday`` means Monday to Friday.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from schedule.dates import WEEKDAY_NAMES, parse_date, parse_weekdays

_UNITS = {
    "day": "daily",
    "days": "daily",
    "week": "weekly",
    "weeks": "weekly",
    "month": "monthly",
    "months": "monthly",
}
_UNIT_NAMES = {"daily": "day", "weekly": "week", "monthly": "month"}


class RuleError(ValueError):
    """A rule the parser does not understand; the message says why."""


@dataclass(frozen=True)
class Rule:
    freq: str
    """"daily", "weekly" or "monthly"."""
    interval: int = 1
    weekdays: tuple[int, ...] = ()
    """Weekly rules: 0 (Monday) .. 6 (Sunday), sorted; empty means the weekday of the start date."""
    month_day: int | None = None
    """Monthly rules: the day of the month; None means the day of the start date."""
    until: date | None = None
    """The last date the series may reach (inclusive)."""
    count: int | None = None
    """The most occurrences the series has."""

    def __str__(self) -> str:
        unit = _UNIT_NAMES[self.freq]
        text = f"every {self.interval} {unit}s" if self.interval > 1 else f"every {unit}"
        if self.weekdays:
            text += " on " + ",".join(WEEKDAY_NAMES[day][:3] for day in self.weekdays)
        if self.month_day is not None:
            text += f" on day {self.month_day}"
        if self.until is not None:
            text += f" until {self.until.isoformat()}"
        if self.count is not None:
            text += f" {self.count} times"
        return text


def _is_number(word: str) -> bool:
    return word.isascii() and word.isdigit()


def _is_count(words: list[str], pos: int) -> bool:
    return _is_number(words[pos]) and words[pos + 1 : pos + 2] in (["time"], ["times"])


def parse_rule(text: str) -> Rule:
    words = text.lower().split()
    if not words or words[0] != "every":
        raise RuleError(f"a rule starts with 'every': {text!r}")
    pos = 1
    interval = 1
    if pos < len(words) and _is_number(words[pos]) and not _is_count(words, pos):
        interval = int(words[pos])
        pos += 1
        if interval < 1:
            raise RuleError("the interval must be at least 1")
    if pos >= len(words):
        raise RuleError(f"a rule needs a unit (day, week or month): {text!r}")
    unit = words[pos]
    pos += 1
    weekdays: tuple[int, ...] = ()
    month_day = None
    if unit == "weekday":
        if interval != 1:
            raise RuleError("'every weekday' takes no interval")
        freq, weekdays = "weekly", (0, 1, 2, 3, 4)
    elif unit in _UNITS:
        freq = _UNITS[unit]
        if pos < len(words) and words[pos] == "on":
            end = pos + 1
            while end < len(words) and words[end] != "until" and not _is_count(words, end):
                end += 1
            clause = words[pos + 1 : end]
            pos = end
            if freq == "weekly":
                weekdays = _weekdays(clause)
            elif freq == "monthly":
                month_day = _month_day(clause)
            else:
                raise RuleError("'on' goes with weeks or months, not days")
    else:
        raise RuleError(f"unknown unit {unit!r}: use day, week or month")
    until, count = _endings(words[pos:], text)
    return Rule(freq, interval, weekdays, month_day, until, count)


def _weekdays(clause: list[str]) -> tuple[int, ...]:
    try:
        return parse_weekdays(",".join(clause))
    except ValueError as e:
        raise RuleError(str(e)) from None


def _month_day(clause: list[str]) -> int:
    if len(clause) != 2 or clause[0] != "day" or not _is_number(clause[1]):
        raise RuleError(f"expected 'on day N' in a monthly rule, got 'on {' '.join(clause)}'")
    day = int(clause[1])
    if not 1 <= day <= 31:
        raise RuleError(f"a day of the month is 1..31, not {day}")
    return day


def _endings(words: list[str], text: str) -> tuple[date | None, int | None]:
    until: date | None = None
    count: int | None = None
    pos = 0
    while pos < len(words):
        if words[pos] == "until" and pos + 1 < len(words) and until is None:
            try:
                until = parse_date(words[pos + 1])
            except ValueError as e:
                raise RuleError(str(e)) from None
        elif _is_count(words, pos) and count is None:
            count = int(words[pos])
            if count < 1:
                raise RuleError("a rule needs at least 1 time")
        else:
            raise RuleError(f"unexpected {words[pos]!r} in rule {text!r}")
        pos += 2
    return until, count
