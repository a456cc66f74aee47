from decimal import Decimal

import pytest
from ledger.money import format_money, parse_amount, quantize


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12", "12"),
        ("1,234.56", "1234.56"),
        ("  -7.5 ", "-7.5"),
        ("+3", "3"),
        ("$ 7.50", "7.50"),
        ("-$12.00", "-12.00"),
        ("$-12.00", "-12.00"),
        ("€1_000", "1000"),
    ],
)
def test_parse_amount(text, expected):
    assert parse_amount(text) == Decimal(expected)


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "NaN", "$"])
def test_parse_amount_rejects_garbage(text):
    with pytest.raises(ValueError, match="not an amount"):
        parse_amount(text)


def test_quantize_rounds_half_up():
    assert quantize(Decimal("2.345")) == Decimal("2.35")
    assert quantize(Decimal("-2.345"), "EUR") == Decimal("-2.35")


def test_format_money():
    assert format_money(Decimal("1234.5")) == "$1,234.50"
    assert format_money(Decimal("-3"), "EUR") == "-€3.00"
    assert format_money(Decimal("-3"), "GBP", accounting=True) == "(£3.00)"
    assert format_money("1000000", symbol=False) == "1,000,000.00"
    assert format_money(0) == "$0.00"
    with pytest.raises(ValueError, match="unknown currency"):
        format_money(1, "XYZ")
