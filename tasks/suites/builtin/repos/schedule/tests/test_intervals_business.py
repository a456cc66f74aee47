from datetime import date, datetime, timedelta

from schedule import BusinessCalendar, Interval, free_slots, merge, parse_interval, total_duration

DAY = date(2024, 4, 10)


def span(text: str) -> Interval:
    return parse_interval(text, DAY)


def test_parse_interval_and_overnight() -> None:
    assert span("09:00-12:30") == Interval(datetime(2024, 4, 10, 9), datetime(2024, 4, 10, 12, 30))
    assert span("22:00-02:00").end == datetime(2024, 4, 11, 2)


def test_merge_overlapping() -> None:
    merged = merge([span("13:00-14:00"), span("09:00-10:30"), span("10:00-11:00")])
    assert merged == [span("09:00-11:00"), span("13:00-14:00")]


def test_total_duration_counts_overlap_once() -> None:
    assert total_duration([span("09:00-11:00"), span("10:00-12:00")]) == timedelta(hours=3)


def test_free_slots() -> None:
    busy = [span("09:30-10:00"), span("12:00-13:00"), span("16:45-18:00")]
    free = free_slots(busy, span("09:00-17:00"), min_length=timedelta(minutes=30))
    assert free == [span("09:00-09:30"), span("10:00-12:00"), span("13:00-16:45")]


def test_add_business_days_skips_weekends_and_holidays() -> None:
    calendar = BusinessCalendar(holidays=[date(2024, 4, 1)])
    assert calendar.add_business_days(date(2024, 3, 28), 1) == date(2024, 3, 29)
    assert calendar.add_business_days(date(2024, 3, 29), 1) == date(2024, 4, 2)
    assert calendar.add_business_days(date(2024, 3, 30), 0) == date(2024, 4, 2)


def test_business_days_between() -> None:
    calendar = BusinessCalendar(holidays=[date(2024, 12, 25), date(2024, 12, 28)])
    assert calendar.business_days_between(date(2024, 12, 23), date(2025, 1, 6)) == 9


def test_custom_weekend() -> None:
    calendar = BusinessCalendar(weekend=(4, 5))  # Friday and Saturday
    days = calendar.business_days(date(2024, 4, 11), date(2024, 4, 15))
    assert days == [date(2024, 4, 11), date(2024, 4, 14), date(2024, 4, 15)]
