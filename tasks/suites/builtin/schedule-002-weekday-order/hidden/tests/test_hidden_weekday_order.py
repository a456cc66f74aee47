from datetime import date

from schedule import next_occurrence, occurrences, occurrences_between, parse_rule

START = date(2024, 1, 3)  # a Wednesday


def test_occurrences_with_days_out_of_order() -> None:
    rule = parse_rule("every week on fri,mon")
    assert occurrences(rule, START, limit=4) == [
        date(2024, 1, 5),
        date(2024, 1, 8),
        date(2024, 1, 12),
        date(2024, 1, 15),
    ]
    rule = parse_rule("every 2 weeks on sun, wed, mon")
    assert occurrences(rule, START, limit=5) == [
        date(2024, 1, 3),
        date(2024, 1, 7),
        date(2024, 1, 15),
        date(2024, 1, 17),
        date(2024, 1, 21),
    ]


def test_next_occurrence_with_days_out_of_order() -> None:
    rule = parse_rule("every week on fri,mon")
    assert next_occurrence(rule, START, after=date(2024, 1, 6)) == date(2024, 1, 8)


def test_between_with_days_out_of_order() -> None:
    rule = parse_rule("every week on thu,tue")
    found = occurrences_between(rule, START, date(2024, 1, 1), date(2024, 1, 17))
    assert found == [date(2024, 1, 4), date(2024, 1, 9), date(2024, 1, 11), date(2024, 1, 16)]


def test_repeated_day_counts_once() -> None:
    rule = parse_rule("every week on mon,mon,wed 4 times")
    assert occurrences(rule, date(2024, 1, 8)) == [
        date(2024, 1, 8),
        date(2024, 1, 10),
        date(2024, 1, 15),
        date(2024, 1, 17),
    ]


def test_rules_with_the_same_days_are_equal() -> None:
    assert parse_rule("every week on fri,mon") == parse_rule("every week on mon,fri")
    assert parse_rule("every week on wed,monday,wed").weekdays == (0, 2)
    assert str(parse_rule("every 2 weeks on Fri, Tue")) == "every 2 weeks on tue,fri"


def test_days_in_calendar_order() -> None:
    rule = parse_rule("every week on mon,fri")
    assert occurrences(rule, START, limit=3) == [date(2024, 1, 5), date(2024, 1, 8), date(2024, 1, 12)]


def test_single_day() -> None:
    rule = parse_rule("every week on sunday until 2024-01-21")
    assert occurrences(rule, START) == [date(2024, 1, 7), date(2024, 1, 14), date(2024, 1, 21)]
