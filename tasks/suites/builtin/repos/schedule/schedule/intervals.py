"""Time intervals: half-open spans [start, end) of datetimes, merged, measured and searched for gaps."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta


@dataclass(frozen=True, order=True)
class Interval:
    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError(f"an interval must end after it starts: {self.start} .. {self.end}")

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    def overlaps(self, other: Interval) -> bool:
        """Whether the two share some time; intervals that only touch do not."""
        return self.start < other.end and other.start < self.end

    def contains(self, moment: datetime) -> bool:
        return self.start <= moment < self.end

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M} - {self.end:%Y-%m-%d %H:%M}"


def parse_interval(text: str, on: date) -> Interval:
    """A range such as "09:00-12:30" on the day `on`; an end at or before the start is on the next day."""
    try:
        first, second = (part.strip() for part in text.split("-"))
        start = datetime.combine(on, time.fromisoformat(first))
        end = datetime.combine(on, time.fromisoformat(second))
    except ValueError:
        raise ValueError(f"not a time range (HH:MM-HH:MM): {text!r}") from None
    if end <= start:
        end += timedelta(days=1)
    return Interval(start, end)


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals with overlapping and touching ones joined: sorted, and no two share or touch."""
    merged: list[Interval] = []
    for current in sorted(intervals):
        if merged and current.start <= merged[-1].end:
            last = merged[-1]
            merged[-1] = Interval(last.start, max(last.end, current.end))
        else:
            merged.append(current)
    return merged


def total_duration(intervals: Iterable[Interval]) -> timedelta:
    """The time covered by at least one of the intervals."""
    return sum((interval.duration for interval in merge(intervals)), timedelta())


def free_slots(
    busy: Iterable[Interval], window: Interval, min_length: timedelta = timedelta(0)
) -> list[Interval]:
    """The parts of `window` no busy interval covers, each at least `min_length` long."""
    free: list[Interval] = []
    cursor = window.start
    for block in merge(busy):
        if block.start >= window.end:
            break
        if block.start > cursor and block.start - cursor >= min_length:
            free.append(Interval(cursor, block.start))
        cursor = max(cursor, block.end)
    if cursor < window.end and window.end - cursor >= min_length:
        free.append(Interval(cursor, window.end))
    return free
