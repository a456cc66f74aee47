import io
from decimal import Decimal

import pytest
from ledger import CsvFormatError, LedgerError
from ledger.csvio import read_journal, read_statement

JOURNAL = """\
date,description,account,amount
2024-03-01,Coffee,Expenses:Coffee,3.10
2024-03-01,Coffee,Assets:Cash,-3.1O
"""


def test_bad_amount_in_journal_names_the_line():
    with pytest.raises(CsvFormatError, match=r"^line 3: not an amount: '-3\.1O'$") as info:
        read_journal(io.StringIO(JOURNAL))
    assert info.value.line == 3
    assert isinstance(info.value, LedgerError)


def test_bad_amount_in_statement_names_the_line():
    text = 'date,description,amount\n2024-03-01,Pay,"1,000.00"\n\n2024-03-02,Shop,12..5\n'
    with pytest.raises(CsvFormatError, match=r"^line 4: not an amount: '12\.\.5'$"):
        read_statement(io.StringIO(text), "Assets:Bank")


def test_empty_amount_in_statement():
    text = "date,description,amount\n2024-03-01,Pay,\n"
    with pytest.raises(CsvFormatError, match=r"^line 2: not an amount: ''$"):
        read_statement(io.StringIO(text), "Assets:Bank")


def test_bad_date_still_names_the_line():
    text = "date,description,amount\n2024-03-01,Pay,1\n03/02/2024,Shop,-2\n"
    with pytest.raises(CsvFormatError, match=r"^line 3: bad date '03/02/2024'"):
        read_statement(io.StringIO(text), "Assets:Bank")


def test_good_amounts_are_read():
    text = "date,description,amount\n2024-03-01,Pay,$1.50\n2024-03-02,Shop,-0.25\n"
    transactions = read_statement(io.StringIO(text), "Assets:Bank")
    assert [tx.postings[0].amount for tx in transactions] == [Decimal("1.50"), Decimal("-0.25")]
