import io
from datetime import date
from decimal import Decimal

import pytest
from ledger import CsvFormatError
from ledger.csvio import read_journal, read_statement, write_journal
from ledger.transactions import Ledger

JOURNAL = """\
date,description,account,amount
2024-03-01,Salary,Assets:Bank,"3,000.00"
2024-03-01,Salary,Income:Salary,
2024-03-04,Groceries,Expenses:Food,82.40
2024-03-04,Groceries,Assets:Bank,-82.40
"""


def test_read_journal_groups_rows():
    transactions = read_journal(io.StringIO(JOURNAL))
    assert [(tx.date, tx.description, len(tx.postings)) for tx in transactions] == [
        (date(2024, 3, 1), "Salary", 2),
        (date(2024, 3, 4), "Groceries", 2),
    ]
    assert transactions[0].postings[1].amount == Decimal("-3000.00")


def test_journal_round_trip_keeps_transactions_apart():
    book = Ledger()
    book.record(date(2024, 3, 2), "Coffee", ("Expenses:Coffee", "3.10"), ("Assets:Cash", None))
    book.record(date(2024, 3, 2), "Coffee", ("Expenses:Coffee", "2.90"), ("Assets:Cash", None))
    out = io.StringIO()
    assert write_journal(book, out) == 4
    assert out.getvalue().splitlines()[:2] == [
        "id,date,description,account,amount",
        "1,2024-03-02,Coffee,Expenses:Coffee,3.10",
    ]
    again = read_journal(io.StringIO(out.getvalue()))
    assert [tx.postings for tx in again] == [tx.postings for tx in book]


def test_read_statement_books_money_in_and_out():
    statement = "Date,Description,Amount\n05/03/2024,Pay,1200.00\n06/03/2024,Rent,-800.00\n\n"
    transactions = read_statement(io.StringIO(statement), "Assets:Bank", date_format="%d/%m/%Y")
    book = Ledger()
    for tx in transactions:
        book.add(tx)
    assert book.balance("Assets:Bank") == Decimal("400.00")
    assert book.balance("Income:Uncategorized") == Decimal("1200.00")
    assert book.balance("Expenses:Uncategorized") == Decimal("800.00")


def test_missing_column():
    with pytest.raises(CsvFormatError, match="line 1: missing column amount"):
        read_statement(io.StringIO("date,description\n2024-03-01,x\n"), "Assets:Bank")


def test_bad_date_names_the_line():
    text = "date,description,amount\n2024-03-01,ok,1\n2024-13-01,bad,2\n"
    with pytest.raises(CsvFormatError, match=r"line 3: bad date '2024-13-01'"):
        read_statement(io.StringIO(text), "Assets:Bank")


def test_unbalanced_journal_names_the_first_line():
    text = "date,description,account,amount\n2024-03-01,a,Assets:Bank,1\n2024-03-01,a,Income:X,-2\n"
    with pytest.raises(CsvFormatError, match=r"line 2: .*off by -1"):
        read_journal(io.StringIO(text))
