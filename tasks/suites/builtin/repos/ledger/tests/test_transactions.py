from datetime import date
from decimal import Decimal

import pytest
from ledger import UnbalancedTransactionError, UnknownAccountError
from ledger.transactions import Ledger, Transaction


def test_missing_amount_balances_the_rest():
    tx = Transaction.build(
        date(2024, 1, 5), "Lunch", [("Expenses:Food", "12.50"), ("Expenses:Tips", 2), ("Assets:Cash", None)]
    )
    assert [p.amount for p in tx.postings] == [Decimal("12.50"), Decimal(2), Decimal("-14.50")]


def test_unbalanced_transaction_is_refused():
    with pytest.raises(UnbalancedTransactionError, match=r"off by 0\.01"):
        Transaction.build(date(2024, 1, 5), "Lunch", [("Expenses:Food", "12.50"), ("Assets:Cash", "-12.49")])
    with pytest.raises(UnbalancedTransactionError, match="two postings"):
        Transaction.build(date(2024, 1, 5), "Nothing", [("Expenses:Food", "0")])


def test_floats_are_refused():
    with pytest.raises(TypeError, match="float"):
        Transaction.build(date(2024, 1, 5), "Lunch", [("Expenses:Food", 1.5), ("Assets:Cash", None)])


def test_transactions_are_kept_in_date_order():
    book = Ledger()
    book.record(date(2024, 2, 1), "second", ("Expenses:A", 1), ("Assets:Cash", None))
    book.record(date(2024, 1, 1), "first", ("Expenses:A", 1), ("Assets:Cash", None))
    book.record(date(2024, 2, 1), "third", ("Expenses:A", 1), ("Assets:Cash", None))
    assert [tx.description for tx in book] == ["first", "second", "third"]
    assert [tx.description for tx in book.transactions(date(2024, 1, 15))] == ["second", "third"]


def test_balances_in_normal_sign():
    book = Ledger()
    book.record(date(2024, 3, 1), "Salary", ("Assets:Bank", "3,000.00"), ("Income:Salary", None))
    book.record(date(2024, 3, 4), "Groceries", ("Expenses:Food", "82.40"), ("Liabilities:Card", None))
    book.record(date(2024, 3, 9), "Card bill", ("Liabilities:Card", "82.40"), ("Assets:Bank", None))
    assert book.balance("Assets:Bank") == Decimal("2917.60")
    assert book.balance("Income:Salary") == Decimal("3000.00")
    assert book.balance("Liabilities:Card", as_of=date(2024, 3, 5)) == Decimal("82.40")
    assert book.balance("Liabilities:Card") == 0
    with pytest.raises(UnknownAccountError):
        book.balance("Assets:Savings")


def test_amounts_are_rounded_to_cents():
    book = Ledger("EUR")
    tx = book.record(date(2024, 3, 1), "Coffee", ("Expenses:Coffee", "2.345"), ("Assets:Cash", "-2.345"))
    assert [p.amount for p in tx.postings] == [Decimal("2.35"), Decimal("-2.35")]
