"""The dates a rule falls on, for a series that starts on a given date."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import date, timedelta

from schedule.dates import add_months, start_of_week
from schedule.rules import Rule


def _daily(rule: Rule, start: date) -> Iterator[date]:
    day = start
    while True:
        yield day
        day += timedelta(days=rule.interval)


def _weekly(rule: Rule, start: date) -> Iterator[date]:
    weekdays = rule.weekdays or (start.weekday(),)
    week = start_of_week(start)
    while True:
        for weekday in weekdays:
            day = week + timedelta(days=weekday)
            if day >= start:
                yield day
        week += timedelta(weeks=rule.interval)


def _monthly(rule: Rule, start: date) -> Iterator[date]:
    first = start.replace(day=1)
    on_day = rule.month_day or start.day
    months = 0
    while True:
        day = add_months(first, months, on_day=on_day)
        if day >= start:
            yield day
        months += rule.interval


_GENERATORS: dict[str, Callable[[Rule, date], Iterator[date]]] = {
    "daily": _daily,
    "weekly": _weekly,
    "monthly": _monthly,
}


def iter_occurrences(rule: Rule, start: date) -> Iterator[date]:
    """Every date of the series starting on `start`, in order; endless unless the rule has until or count.

    Weeks and months are counted from the start date's week and month: "every 2 weeks on mon,wed"
    started on a Wednesday falls on that Wednesday, then on the Monday and Wednesday two weeks later.
    """
    for produced, day in enumerate(_GENERATORS[rule.freq](rule, start)):
        if rule.until is not None and day > rule.until:
            return
        if rule.count is not None and produced >= rule.count:
            return
        yield day


def occurrences(
    rule: Rule, start: date, *, after: date | None = None, limit: int | None = None
) -> list[date]:
    """The dates of the series strictly after `after` (from the start, if None), at most `limit` of them.

    A rule with neither until nor count needs a limit.
    """
    if limit is None and rule.until is None and rule.count is None:
        raise ValueError(f"the rule {str(rule)!r} never ends: give a limit")
    found: list[date] = []
    for day in iter_occurrences(rule, start):
        if limit is not None and len(found) >= limit:
            break
        if after is None or day > after:
            found.append(day)
    return found


def next_occurrence(rule: Rule, start: date, after: date) -> date | None:
    """The first date of the series strictly after `after`; None if the series ends before."""
    found = occurrences(rule, start, after=after, limit=1)
    return found[0] if found else None


def occurrences_between(rule: Rule, start: date, first: date, last: date) -> list[date]:
    """The dates of the series from `first` to `last`, both included."""
    found: list[date] = []
    for day in iter_occurrences(rule, start):
        if day > last:
            break
        if day >= first:
            found.append(day)
    return found
