"""Reports: monthly totals, income statements and the trial balance."""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from ledger.transactions import Ledger


def month_bounds(year: int, month: int) -> tuple[date, date]:
    """The first and the last day of a month."""
    if not 1 <= month <= 12:
        raise ValueError(f"month must be from 1 to 12, not {month}")
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def monthly_totals(ledger: Ledger, account: str, year: int) -> dict[int, Decimal]:
    """The change of `account` (sub-accounts included, in its normal sign) in each month of `year`."""
    sign = ledger.chart.get(account).sign
    totals = {}
    for month in range(1, 13):
        start, end = month_bounds(year, month)
        change = sum((p.amount for _, p in ledger.postings(account, start=start, end=end)), Decimal(0))
        totals[month] = change if sign > 0 else -change
    return totals


@dataclass(frozen=True)
class IncomeStatement:
    start: date
    end: date
    income: dict[str, Decimal]
    """Earned, by account; positive."""
    expenses: dict[str, Decimal]
    """Spent, by account; positive."""

    @property
    def total_income(self) -> Decimal:
        return sum(self.income.values(), Decimal(0))

    @property
    def total_expenses(self) -> Decimal:
        return sum(self.expenses.values(), Decimal(0))

    @property
    def net(self) -> Decimal:
        return self.total_income - self.total_expenses


def income_statement(ledger: Ledger, start: date, end: date) -> IncomeStatement:
    """Income and expenses by account from `start` to `end`, both included."""
    income: dict[str, Decimal] = {}
    expenses: dict[str, Decimal] = {}
    for tx in ledger.transactions(start, end):
        for posting in tx.postings:
            name = posting.account.name
            if posting.account.kind == "Income":
                income[name] = income.get(name, Decimal(0)) - posting.amount
            elif posting.account.kind == "Expenses":
                expenses[name] = expenses.get(name, Decimal(0)) + posting.amount
    return IncomeStatement(start, end, dict(sorted(income.items())), dict(sorted(expenses.items())))


@dataclass(frozen=True)
class MonthSummary:
    year: int
    month: int
    income: Decimal
    expenses: Decimal

    @property
    def net(self) -> Decimal:
        return self.income - self.expenses


def monthly_summary(ledger: Ledger, year: int) -> list[MonthSummary]:
    """Total income and expenses for each month of `year`."""
    summaries = []
    for month in range(1, 13):
        statement = income_statement(ledger, *month_bounds(year, month))
        summaries.append(MonthSummary(year, month, statement.total_income, statement.total_expenses))
    return summaries
