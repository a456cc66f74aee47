"""CSV import and export.

A journal file has one posting a row, with the columns date, description, account and amount, and an
optional id column. Consecutive rows with the same id (or, without ids, the same date and description)
make one transaction; one row of a transaction may leave its amount empty to balance the others.

A bank statement has one row a transaction of a single account, with the columns date, description and
amount. Money in (a positive amount) is booked against `income`, money out against `expenses`.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import IO

from ledger import CsvFormatError, LedgerError
from ledger.money import parse_amount
from ledger.transactions import Ledger, Transaction

JOURNAL_COLUMNS = ("date", "description", "account", "amount")
STATEMENT_COLUMNS = ("date", "description", "amount")
DATE_FORMAT = "%Y-%m-%d"


def _rows(file: IO[str], required: tuple[str, ...], delimiter: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for each non-blank row, with lower-case column names and stripped values."""
    reader = csv.DictReader(file, delimiter=delimiter)
    header = [name.strip().lower() for name in reader.fieldnames or []]
    missing = [name for name in required if name not in header]
    if missing:
        raise CsvFormatError(1, f"missing column {', '.join(missing)}")
    reader.fieldnames = header
    for row in reader:
        if None in row:
            raise CsvFormatError(reader.line_num, f"more fields than the {len(header)} columns")
        values = {key: (value or "").strip() for key, value in row.items()}
        if any(values.values()):
            yield reader.line_num, values


def _parse_date(line: int, text: str, date_format: str) -> date:
    try:
        return datetime.strptime(text, date_format).date()
    except ValueError:
        raise CsvFormatError(line, f"bad date {text!r}, expected the format {date_format}") from None


def _parse_amount(line: int, text: str) -> Decimal:
    try:
        return parse_amount(text)
    except ValueError as e:
        raise CsvFormatError(line, str(e)) from None


@dataclass
class _Group:
    line: int
    key: object
    date: date
    description: str
    entries: list[tuple[str, Decimal | None]] = field(default_factory=list)


def read_journal(file: IO[str], *, date_format: str = DATE_FORMAT, delimiter: str = ",") -> list[Transaction]:
    """The transactions of a journal file, in file order."""
    groups: list[_Group] = []
    for line, row in _rows(file, JOURNAL_COLUMNS, delimiter):
        when = _parse_date(line, row["date"], date_format)
        amount = _parse_amount(line, row["amount"]) if row["amount"] else None
        key = row.get("id") or (when, row["description"])
        if not groups or groups[-1].key != key:
            groups.append(_Group(line, key, when, row["description"]))
        groups[-1].entries.append((row["account"], amount))
    transactions = []
    for group in groups:
        try:
            transactions.append(Transaction.build(group.date, group.description, group.entries))
        except LedgerError as e:
            raise CsvFormatError(group.line, str(e)) from None
    return transactions


def read_statement(
    file: IO[str],
    account: str,
    *,
    income: str = "Income:Uncategorized",
    expenses: str = "Expenses:Uncategorized",
    date_format: str = DATE_FORMAT,
    delimiter: str = ",",
) -> list[Transaction]:
    """One transaction per row of a bank statement for `account`."""
    transactions = []
    for line, row in _rows(file, STATEMENT_COLUMNS, delimiter):
        when = _parse_date(line, row["date"], date_format)
        amount = _parse_amount(line, row["amount"])
        counter = income if amount >= 0 else expenses
        transactions.append(Transaction.build(when, row["description"], [(account, amount), (counter, None)]))
    return transactions


def write_journal(ledger: Ledger, file: IO[str], *, delimiter: str = ",", with_ids: bool = True) -> int:
    """Writes every posting of `ledger` as a journal row; returns the number of rows written.

    With ids, reading the file back gives the same transactions even when two in a row share a date and a
    description.
    """
    writer = csv.writer(file, delimiter=delimiter, lineterminator="\n")
    writer.writerow(["id", *JOURNAL_COLUMNS] if with_ids else JOURNAL_COLUMNS)
    rows = 0
    for number, tx in enumerate(ledger, start=1):
        for posting in tx.postings:
            row = [tx.date.strftime(DATE_FORMAT), tx.description, posting.account.name, str(posting.amount)]
            writer.writerow([str(number), *row] if with_ids else row)
            rows += 1
    return rows
