"""Business days: days that are neither weekend days nor holidays, and counting in them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, timedelta


class BusinessCalendar:
    """Which days are working days. Weekend days are weekday numbers, 0 (Monday) .. 6 (Sunday)."""

    def __init__(self, holidays: Iterable[date] = (), weekend: Iterable[int] = (5, 6)) -> None:
        self.holidays = frozenset(holidays)
        self.weekend = frozenset(weekend)
        if not self.weekend <= set(range(7)):
            raise ValueError(f"weekend days are 0 (Monday) .. 6 (Sunday), not {sorted(self.weekend)}")
        if len(self.weekend) == 7:
            raise ValueError("a week needs at least one working day")

    def is_business_day(self, day: date) -> bool:
        return day.weekday() not in self.weekend and day not in self.holidays

    def roll_forward(self, day: date) -> date:
        """`day` if it is a business day, else the next one."""
        while not self.is_business_day(day):
            day += timedelta(days=1)
        return day

    def roll_backward(self, day: date) -> date:
        """`day` if it is a business day, else the one before."""
        while not self.is_business_day(day):
            day -= timedelta(days=1)
        return day

    def add_business_days(self, day: date, count: int) -> date:
        """The date `count` business days after `day`, or before it when `count` is negative.

        `day` itself need not be a business day. A count of 0 rolls forward to a business day.
        """
        if count == 0:
            return self.roll_forward(day)
        step = timedelta(days=1 if count > 0 else -1)
        for _ in range(abs(count)):
            day += step
            while not self.is_business_day(day):
                day += step
        return day

    def business_days_between(self, first: date, last: date) -> int:
        """Business days from `first` (included) to `last` (excluded); negative when `last` comes first."""
        if last < first:
            return -self.business_days_between(last, first)
        weeks, extra = divmod((last - first).days, 7)
        count = weeks * (7 - len(self.weekend))
        tail = first + timedelta(weeks=weeks)
        count += sum(
            1 for offset in range(extra) if (tail + timedelta(days=offset)).weekday() not in self.weekend
        )
        count -= sum(1 for h in self.holidays if first <= h < last and h.weekday() not in self.weekend)
        return count

    def business_days(self, first: date, last: date) -> list[date]:
        """Every business day from `first` to `last`, both included."""
        days = []
        day = self.roll_forward(first)
        while day <= last:
            days.append(day)
            day = self.roll_forward(day + timedelta(days=1))
        return days
