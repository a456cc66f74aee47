"""Transactions (balanced sets of postings) and the Ledger that holds them in date order."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from ledger import UnbalancedTransactionError
from ledger.accounts import Account, Chart
from ledger.money import currency, parse_amount, quantize

Amount = Decimal | int | str


def to_decimal(value: Amount) -> Decimal:
    """An amount as a Decimal; text goes through parse_amount. Floats are refused: they cannot hold cents."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, str):
        return parse_amount(value)
    raise TypeError(f"amount must be a Decimal, an int or a str, not {type(value).__name__}")


@dataclass(frozen=True)
class Posting:
    account: Account
    amount: Decimal
    """Positive for a debit, negative for a credit."""


@dataclass(frozen=True)
class Transaction:
    date: date
    description: str
    postings: tuple[Posting, ...]

    @classmethod
    def build(cls, when: date, description: str, entries: Iterable[tuple[str, Amount | None]]) -> Transaction:
        """A checked transaction from (account, amount) pairs. One amount may be None: it balances the rest."""
        postings: list[Posting] = []
        missing: int | None = None
        for name, amount in entries:
            if amount is None:
                if missing is not None:
                    raise UnbalancedTransactionError(f"{description!r}: more than one posting has no amount")
                missing = len(postings)
                postings.append(Posting(Account(name), Decimal(0)))
            else:
                postings.append(Posting(Account(name), to_decimal(amount)))
        if missing is not None:
            rest = sum((p.amount for p in postings), Decimal(0))
            postings[missing] = Posting(postings[missing].account, -rest)
        tx = cls(when, description, tuple(postings))
        tx.check()
        return tx

    @property
    def total(self) -> Decimal:
        return sum((p.amount for p in self.postings), Decimal(0))

    def check(self) -> None:
        """Raises UnbalancedTransactionError unless there are two postings or more and they sum to zero."""
        if len(self.postings) < 2:
            raise UnbalancedTransactionError(
                f"{self.description!r} on {self.date}: needs two postings or more"
            )
        if self.total != 0:
            raise UnbalancedTransactionError(f"{self.description!r} on {self.date}: off by {self.total}")


class Ledger:
    """The transactions of one currency, in date order (in order of entry for equal dates)."""

    def __init__(self, currency_code: str = "USD", chart: Chart | None = None) -> None:
        self.currency = currency(currency_code).code
        self.chart = chart if chart is not None else Chart()
        self._transactions: list[Transaction] = []

    def add(self, tx: Transaction) -> Transaction:
        """Adds `tx` with its amounts rounded to the currency, opening its accounts; returns what was added."""
        rounded = Transaction(
            tx.date,
            tx.description,
            tuple(Posting(p.account, quantize(p.amount, self.currency)) for p in tx.postings),
        )
        rounded.check()
        for posting in rounded.postings:
            self.chart.open(posting.account.name)
        index = bisect.bisect_right(self._transactions, rounded.date, key=lambda t: t.date)
        self._transactions.insert(index, rounded)
        return rounded

    def record(self, when: date, description: str, *entries: tuple[str, Amount | None]) -> Transaction:
        """Builds and adds a transaction: ledger.record(day, "Coffee", ("Expenses:Food", "3.50"), ("Assets:Cash", None))."""
        return self.add(Transaction.build(when, description, entries))

    def transactions(self, start: date | None = None, end: date | None = None) -> list[Transaction]:
        """The transactions dated from `start` to `end`, both included; None leaves that side open."""
        return [
            tx
            for tx in self._transactions
            if (start is None or tx.date >= start) and (end is None or tx.date <= end)
        ]

    def postings(
        self,
        account: str,
        *,
        start: date | None = None,
        end: date | None = None,
        include_children: bool = True,
    ) -> Iterator[tuple[Transaction, Posting]]:
        """The postings to `account` (and, by default, to its sub-accounts) between `start` and `end`."""
        target = self.chart.get(account)
        for tx in self.transactions(start, end):
            for posting in tx.postings:
                if posting.account == target or (include_children and posting.account.is_under(target)):
                    yield tx, posting

    def balance(self, account: str, *, as_of: date | None = None, include_children: bool = True) -> Decimal:
        """The balance of `account` at the end of day `as_of`, in its normal sign: money in the bank, a card's
        debt and earned income are all positive. Sub-accounts count unless include_children is False."""
        sign = self.chart.get(account).sign
        postings = self.postings(account, end=as_of, include_children=include_children)
        total = sum((p.amount for _, p in postings), Decimal(0))
        return total if sign > 0 else -total

    def __iter__(self) -> Iterator[Transaction]:
        return iter(self._transactions)

    def __len__(self) -> int:
        return len(self._transactions)
