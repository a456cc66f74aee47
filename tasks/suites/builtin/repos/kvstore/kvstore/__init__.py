"""kvstore: a tiny in-memory key-value database with a Redis-like command language."""

from kvstore.engine import Database, Error, Session, Status, format_reply
from kvstore.errors import CommandError, ParseError
from kvstore.parser import Command, parse, tokenize
from kvstore.store import ManualClock, Store, SystemClock

__all__ = [
    "Command",
    "CommandError",
    "Database",
    "Error",
    "ManualClock",
    "ParseError",
    "Session",
    "Status",
    "Store",
    "SystemClock",
    "format_reply",
    "parse",
    "tokenize",
]
