"""A small double-entry bookkeeping library.

The modules: money (parsing, rounding, formatting), accounts, transactions (and the Ledger), csvio and
reports. The exceptions live here; every one derives from LedgerError.
"""


class LedgerError(Exception):
    """Base class of the errors that the ledger package raises on purpose."""


class AccountError(LedgerError, ValueError):
    """An account name that is not valid."""


class UnknownAccountError(LedgerError, LookupError):
    """An account that the chart of accounts does not hold."""


class UnbalancedTransactionError(LedgerError, ValueError):
    """A transaction whose postings do not sum to zero."""


class CsvFormatError(LedgerError, ValueError):
    """A CSV file that cannot be read; the message starts with the line number."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
