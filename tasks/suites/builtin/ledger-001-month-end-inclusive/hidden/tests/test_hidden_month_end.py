from datetime import date
from decimal import Decimal

from ledger.reports import income_statement, monthly_summary, monthly_totals
from ledger.transactions import Ledger


def make_book():
    book = Ledger()
    book.record(date(2024, 1, 1), "Salary", ("Assets:Bank", "2000"), ("Income:Salary", None))
    book.record(date(2024, 1, 31), "Rent", ("Expenses:Rent", "900"), ("Assets:Bank", None))
    book.record(date(2024, 2, 1), "Food", ("Expenses:Food", "50"), ("Assets:Bank", None))
    book.record(date(2024, 2, 29), "Card bill", ("Expenses:Card", "120.50"), ("Assets:Bank", None))
    book.record(date(2024, 12, 31), "Gift", ("Expenses:Gifts", "30"), ("Assets:Bank", None))
    return book


def test_last_day_of_month_is_counted():
    totals = monthly_totals(make_book(), "Expenses", 2024)
    assert totals[1] == Decimal("900.00")
    assert totals[2] == Decimal("170.50")
    assert totals[12] == Decimal("30.00")
    assert sum(totals.values()) == Decimal("1100.50")
    summary = monthly_summary(make_book(), 2024)
    assert summary[0].expenses == Decimal("900.00")


def test_transactions_range_includes_end():
    book = make_book()
    found = book.transactions(date(2024, 1, 2), date(2024, 2, 1))
    assert [tx.description for tx in found] == ["Rent", "Food"]


def test_balance_as_of_includes_that_day():
    book = make_book()
    assert book.balance("Expenses", as_of=date(2024, 1, 31)) == Decimal("900.00")
    assert book.balance("Assets:Bank", as_of=date(2024, 2, 29)) == Decimal("929.50")


def test_income_statement_for_one_day():
    statement = income_statement(make_book(), date(2024, 1, 31), date(2024, 1, 31))
    assert statement.expenses == {"Expenses:Rent": Decimal("900.00")}


def test_first_day_of_month_is_counted():
    book = make_book()
    assert monthly_totals(book, "Income", 2024)[1] == Decimal("2000.00")
    assert [tx.description for tx in book.transactions(date(2024, 2, 1), date(2024, 2, 28))] == ["Food"]


def test_open_ended_range():
    book = make_book()
    assert len(book.transactions()) == 5
    assert [tx.description for tx in book.transactions(start=date(2024, 2, 2))] == ["Card bill", "Gift"]
    assert book.balance("Assets:Bank") == Decimal("899.50")
