from datetime import date
from decimal import Decimal

from ledger.reports import monthly_totals
from ledger.transactions import Ledger


def make_book():
    book = Ledger()
    book.record(date(2024, 5, 1), "Pay", ("Assets:Bank:Checking", "1000"), ("Income:Salary", None))
    book.record(
        date(2024, 5, 2), "Groceries", ("Expenses:Food:Groceries", "64.10"), ("Assets:Bank:Checking", None)
    )
    book.record(
        date(2024, 5, 3), "Lunch", ("Expenses:Food:Restaurants", "18.90"), ("Assets:Bank:Checking", None)
    )
    book.record(date(2024, 5, 9), "Save", ("Assets:Bank:Savings", "200"), ("Assets:Bank:Checking", None))
    book.record(date(2024, 6, 1), "Fee", ("Expenses:Bank", "2.50"), ("Assets:Bank:Checking", None))
    return book


def test_parent_balance_includes_sub_accounts():
    book = make_book()
    assert book.balance("Expenses:Food") == Decimal("83.00")
    assert book.balance("Expenses") == Decimal("85.50")
    assert book.balance("Assets:Bank") == Decimal("914.50")
    assert book.balance("Assets") == Decimal("914.50")


def test_parent_balance_as_of():
    book = make_book()
    assert book.balance("Expenses", as_of=date(2024, 5, 2)) == Decimal("64.10")
    assert book.balance("Assets:Bank", as_of=date(2024, 5, 31)) == Decimal("917.00")


def test_parent_balance_matches_monthly_totals():
    book = make_book()
    assert sum(monthly_totals(book, "Expenses", 2024).values()) == book.balance("Expenses")


def test_leaf_balance():
    book = make_book()
    assert book.balance("Expenses:Food:Groceries") == Decimal("64.10")
    assert book.balance("Assets:Bank:Checking") == Decimal("714.50")
    assert book.balance("Income:Salary") == Decimal("1000.00")


def test_own_postings_only_when_asked():
    book = make_book()
    assert book.balance("Expenses:Food", include_children=False) == 0
    assert book.balance("Expenses:Food", include_children=True) == Decimal("83.00")
