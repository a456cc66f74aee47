"""Accounts and the chart of accounts.

Account names are hierarchical, with ':' between levels: 'Expenses:Food:Groceries'. The first level is the
account's kind: Assets, Liabilities, Equity, Income or Expenses.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ledger import AccountError, UnknownAccountError

SEPARATOR = ":"
KINDS = ("Assets", "Liabilities", "Equity", "Income", "Expenses")
DEBIT_NORMAL = frozenset({"Assets", "Expenses"})


def split_name(name: str) -> list[str]:
    """The levels of an account name, stripped; raises AccountError for a name that is not valid."""
    parts = [part.strip() for part in name.split(SEPARATOR)]
    if any(not part for part in parts):
        raise AccountError(f"invalid account name {name!r}")
    if parts[0] not in KINDS:
        raise AccountError(f"account {name!r} must start with one of {', '.join(KINDS)}")
    return parts


@dataclass(frozen=True, order=True)
class Account:
    name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", SEPARATOR.join(split_name(self.name)))

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.name.split(SEPARATOR))

    @property
    def kind(self) -> str:
        return self.parts[0]

    @property
    def parent(self) -> Account | None:
        return Account(SEPARATOR.join(self.parts[:-1])) if len(self.parts) > 1 else None

    @property
    def sign(self) -> int:
        """+1 for debit-normal accounts (assets, expenses), -1 for the others."""
        return 1 if self.kind in DEBIT_NORMAL else -1

    def is_under(self, other: Account | str) -> bool:
        """Whether this account is `other` or one of its sub-accounts."""
        prefix = other.name if isinstance(other, Account) else Account(other).name
        return self.name == prefix or self.name.startswith(prefix + SEPARATOR)


class Chart:
    """The open accounts. Opening an account opens its parents too."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._accounts: dict[str, Account] = {}
        for name in names:
            self.open(name)

    def open(self, name: str) -> Account:
        account = Account(name)
        node: Account | None = account
        while node is not None and node.name not in self._accounts:
            self._accounts[node.name] = node
            node = node.parent
        return self._accounts[account.name]

    def get(self, name: str) -> Account:
        key = Account(name).name
        try:
            return self._accounts[key]
        except KeyError:
            raise UnknownAccountError(f"no account {key!r}") from None

    def children(self, name: str) -> list[Account]:
        """The direct sub-accounts of `name`."""
        parent = self.get(name)
        return sorted(a for a in self._accounts.values() if a.parent == parent)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            return Account(name).name in self._accounts
        except AccountError:
            return False

    def __iter__(self) -> Iterator[Account]:
        return iter(sorted(self._accounts.values()))
