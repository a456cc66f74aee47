from datetime import date
from decimal import Decimal

import pytest
from ledger.reports import income_statement, month_bounds, monthly_summary, monthly_totals
from ledger.transactions import Ledger


@pytest.fixture
def book():
    book = Ledger()
    book.record(date(2024, 1, 2), "Salary", ("Assets:Bank", "2500"), ("Income:Salary", None))
    book.record(date(2024, 1, 10), "Rent", ("Expenses:Housing:Rent", "900"), ("Assets:Bank", None))
    book.record(date(2024, 1, 15), "Food", ("Expenses:Food", "120.35"), ("Assets:Bank", None))
    book.record(date(2024, 2, 2), "Salary", ("Assets:Bank", "2500"), ("Income:Salary", None))
    book.record(date(2024, 2, 14), "Refund", ("Assets:Bank", "20"), ("Expenses:Food", None))
    book.record(date(2024, 2, 20), "Rent", ("Expenses:Housing:Rent", "900"), ("Assets:Bank", None))
    return book


def test_month_bounds():
    assert month_bounds(2024, 2) == (date(2024, 2, 1), date(2024, 2, 29))
    assert month_bounds(2023, 12) == (date(2023, 12, 1), date(2023, 12, 31))
    with pytest.raises(ValueError, match="month"):
        month_bounds(2024, 13)


def test_monthly_totals(book):
    totals = monthly_totals(book, "Expenses", 2024)
    assert sorted(totals) == list(range(1, 13))
    assert totals[1] == Decimal("1020.35")
    assert totals[2] == Decimal("880.00")
    assert totals[3] == 0
    assert monthly_totals(book, "Income", 2024)[2] == Decimal("2500.00")


def test_income_statement(book):
    statement = income_statement(book, date(2024, 1, 1), date(2024, 2, 15))
    assert statement.income == {"Income:Salary": Decimal("5000.00")}
    assert statement.expenses == {
        "Expenses:Food": Decimal("100.35"),
        "Expenses:Housing:Rent": Decimal("900.00"),
    }
    assert statement.net == Decimal("3999.65")


def test_monthly_summary(book):
    summary = monthly_summary(book, 2024)
    assert len(summary) == 12
    assert (summary[0].income, summary[0].expenses, summary[0].net) == (
        Decimal("2500.00"),
        Decimal("1020.35"),
        Decimal("1479.65"),
    )
    assert summary[5].net == 0
