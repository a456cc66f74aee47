from datetime import date, timedelta

from schedule import BusinessCalendar

CHRISTMAS = BusinessCalendar(holidays=[date(2024, 12, 25), date(2024, 12, 26)])


def test_back_over_a_holiday() -> None:
    assert CHRISTMAS.add_business_days(date(2024, 12, 27), -1) == date(2024, 12, 24)
    assert CHRISTMAS.add_business_days(date(2024, 12, 27), -3) == date(2024, 12, 20)


def test_back_over_a_weekend() -> None:
    calendar = BusinessCalendar()
    assert calendar.add_business_days(date(2024, 4, 15), -1) == date(2024, 4, 12)
    assert calendar.add_business_days(date(2024, 4, 15), -6) == date(2024, 4, 5)


def test_back_from_a_weekend_day() -> None:
    calendar = BusinessCalendar()
    assert calendar.add_business_days(date(2024, 4, 13), -1) == date(2024, 4, 12)
    assert calendar.add_business_days(date(2024, 4, 14), -2) == date(2024, 4, 11)


def test_there_and_back_again() -> None:
    day = date(2024, 12, 16)
    while day < date(2025, 1, 10):
        if CHRISTMAS.is_business_day(day):
            for count in range(1, 12):
                there = CHRISTMAS.add_business_days(day, count)
                assert there > day
                assert CHRISTMAS.add_business_days(there, -count) == day
        day += timedelta(days=1)


def test_back_with_a_custom_weekend() -> None:
    calendar = BusinessCalendar(weekend=(4, 5))  # Friday and Saturday
    assert calendar.add_business_days(date(2024, 4, 14), -1) == date(2024, 4, 11)


def test_zero_rolls_forward() -> None:
    assert CHRISTMAS.add_business_days(date(2024, 12, 25), 0) == date(2024, 12, 27)
    assert CHRISTMAS.add_business_days(date(2024, 12, 24), 0) == date(2024, 12, 24)


def test_between_in_reverse_is_negative() -> None:
    assert CHRISTMAS.business_days_between(date(2024, 12, 30), date(2024, 12, 23)) == -3
