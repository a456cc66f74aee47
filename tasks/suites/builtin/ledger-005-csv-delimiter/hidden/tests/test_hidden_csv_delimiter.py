import io
from datetime import date
from decimal import Decimal

import pytest
from ledger import CsvFormatError
from ledger.csvio import read_journal, read_statement, write_journal
from ledger.transactions import Ledger


def test_read_statement_with_semicolons():
    text = 'date;description;amount\n2024-03-05;Bakery;-4.20\n2024-03-06;Salary;"2,100.00"\n'
    transactions = read_statement(io.StringIO(text), "Assets:Bank", delimiter=";")
    assert [(tx.date, tx.description, tx.postings[0].amount) for tx in transactions] == [
        (date(2024, 3, 5), "Bakery", Decimal("-4.20")),
        (date(2024, 3, 6), "Salary", Decimal("2100.00")),
    ]
    assert transactions[0].postings[1].account.name == "Expenses:Uncategorized"


def test_read_journal_with_semicolons():
    text = (
        "id;date;description;account;amount\n"
        "7;2024-03-05;Bakery; bread; rolls;Expenses:Food;4.20\n"
        "7;2024-03-05;Bakery; bread; rolls;Assets:Cash;\n"
    )
    with pytest.raises(CsvFormatError, match="line 2"):
        read_journal(io.StringIO(text), delimiter=";")
    text = (
        "id;date;description;account;amount\n"
        '7;2024-03-05;"Bakery; bread, rolls";Expenses:Food;4.20\n'
        '7;2024-03-05;"Bakery; bread, rolls";Assets:Cash;\n'
    )
    [tx] = read_journal(io.StringIO(text), delimiter=";")
    assert tx.description == "Bakery; bread, rolls"
    assert [p.amount for p in tx.postings] == [Decimal("4.20"), Decimal("-4.20")]


def test_write_journal_with_semicolons_round_trips():
    book = Ledger()
    book.record(date(2024, 3, 5), "Bakery; bread", ("Expenses:Food", "4.20"), ("Assets:Cash", None))
    book.record(date(2024, 3, 6), "Salary", ("Assets:Bank", "2,100"), ("Income:Salary", None))
    out = io.StringIO()
    assert write_journal(book, out, delimiter=";") == 4
    lines = out.getvalue().splitlines()
    assert lines[0] == "id;date;description;account;amount"
    assert lines[1] == '1;2024-03-05;"Bakery; bread";Expenses:Food;4.20'
    assert lines[3] == "2;2024-03-06;Salary;Assets:Bank;2100.00"
    again = read_journal(io.StringIO(out.getvalue()), delimiter=";")
    assert [tx.postings for tx in again] == [tx.postings for tx in book]
    assert [tx.description for tx in again] == ["Bakery; bread", "Salary"]


def test_tab_separated_statement():
    text = "date\tdescription\tamount\n2024-03-05\tBakery, downtown\t-4.20\n"
    [tx] = read_statement(io.StringIO(text), "Assets:Bank", delimiter="\t")
    assert (tx.description, tx.postings[0].amount) == ("Bakery, downtown", Decimal("-4.20"))


def test_comma_is_still_the_default():
    book = Ledger()
    book.record(date(2024, 3, 5), "Bakery", ("Expenses:Food", "4.20"), ("Assets:Cash", None))
    out = io.StringIO()
    write_journal(book, out)
    assert out.getvalue().splitlines()[1] == "1,2024-03-05,Bakery,Expenses:Food,4.20"
    [tx] = read_statement(io.StringIO("date,description,amount\n2024-03-05,x,1\n"), "Assets:Bank")
    assert tx.postings[0].amount == 1
