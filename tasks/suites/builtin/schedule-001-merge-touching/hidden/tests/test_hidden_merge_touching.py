import itertools
from datetime import date, datetime, timedelta

from schedule import Interval, merge, parse_interval, total_duration

DAY = date(2024, 4, 10)


def span(text: str) -> Interval:
    return parse_interval(text, DAY)


def test_touching_intervals_are_joined() -> None:
    assert merge([span("09:00-10:00"), span("10:00-11:00")]) == [span("09:00-11:00")]


def test_chain_of_touching_and_overlapping() -> None:
    merged = merge([span("10:30-12:00"), span("09:00-10:00"), span("10:00-11:00"), span("13:00-14:00")])
    assert merged == [span("09:00-12:00"), span("13:00-14:00")]


def test_touching_at_midnight() -> None:
    evening = span("22:00-00:00")
    night = parse_interval("00:00-02:00", date(2024, 4, 11))
    assert merge([night, evening]) == [Interval(datetime(2024, 4, 10, 22), datetime(2024, 4, 11, 2))]


def test_no_two_merged_intervals_touch() -> None:
    blocks = [span(f"{hour:02d}:00-{hour + 1:02d}:00") for hour in (8, 9, 10, 12, 13, 15)]
    merged = merge(blocks)
    assert merged == [span("08:00-11:00"), span("12:00-14:00"), span("15:00-16:00")]
    assert all(a.end < b.start for a, b in itertools.pairwise(merged))


def test_separate_intervals_stay_apart() -> None:
    merged = merge([span("09:00-09:59"), span("10:00-11:00")])
    assert merged == [span("09:00-09:59"), span("10:00-11:00")]
    assert merge([]) == []


def test_touching_intervals_do_not_overlap() -> None:
    assert not span("09:00-10:00").overlaps(span("10:00-11:00"))
    assert span("09:00-10:01").overlaps(span("10:00-11:00"))


def test_total_duration_of_touching_intervals() -> None:
    assert total_duration([span("09:00-10:00"), span("10:00-11:00")]) == timedelta(hours=2)
