import io
from decimal import Decimal

from ledger.csvio import read_journal, read_statement
from ledger.money import parse_amount
from ledger.reports import monthly_summary
from ledger.transactions import Ledger

PARENTHESES = """\
date,description,amount
2024-04-01,Salary,"2,500.00"
2024-04-03,Supermarket,(45.20)
2024-04-12,Electricity,($60.00)
2024-05-02,Refund,15.00
"""

MINUS = """\
date,description,amount
2024-04-01,Salary,"2,500.00"
2024-04-03,Supermarket,-45.20
2024-04-12,Electricity,-$60.00
"""


def load(text):
    book = Ledger()
    for tx in read_statement(io.StringIO(text), "Assets:Bank"):
        book.add(tx)
    return book


def test_parenthesized_withdrawals_are_expenses():
    book = load(PARENTHESES)
    april = monthly_summary(book, 2024)[3]
    assert (april.income, april.expenses) == (Decimal("2500.00"), Decimal("105.20"))
    assert april.net == Decimal("2394.80")
    assert book.balance("Assets:Bank") == Decimal("2409.80")
    assert book.balance("Expenses:Uncategorized") == Decimal("105.20")


def test_journal_with_parenthesized_amounts():
    text = "date,description,account,amount\n2024-04-03,Shop,Assets:Bank,(45.20)\n2024-04-03,Shop,Expenses:Food,\n"
    [tx] = read_journal(io.StringIO(text))
    assert [p.amount for p in tx.postings] == [Decimal("-45.20"), Decimal("45.20")]


def test_parse_amount_accounting_style():
    assert parse_amount("(45.20)") == Decimal("-45.20")
    assert parse_amount("($60.00)") == Decimal("-60.00")
    assert parse_amount(" ( 1,234.50 ) ") == Decimal("-1234.50")
    assert parse_amount("(€3)") == Decimal("-3")


def test_minus_sign_withdrawals_are_expenses():
    book = load(MINUS)
    april = monthly_summary(book, 2024)[3]
    assert (april.income, april.expenses) == (Decimal("2500.00"), Decimal("105.20"))
    assert book.balance("Assets:Bank") == Decimal("2394.80")


def test_parse_amount_plain_forms():
    assert parse_amount("45.20") == Decimal("45.20")
    assert parse_amount("-$60.00") == Decimal("-60.00")
    assert parse_amount("1,234.50") == Decimal("1234.50")
