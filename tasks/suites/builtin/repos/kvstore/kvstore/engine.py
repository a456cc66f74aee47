"""Sessions run command lines against a database; MULTI ... EXEC queues commands and runs them together."""

from __future__ import annotations

import json
from collections.abc import Callable

from kvstore.errors import CommandError, ParseError
from kvstore.parser import Command, parse, parse_int
from kvstore.store import Clock, Store, SystemClock


class Status(str):
    """A status reply such as OK or QUEUED (shown without quotes)."""


class Error(str):
    """An error reply; its text starts with an error code such as ERR."""


Reply = str | int | None | list["Reply"]

OK = Status("OK")
QUEUED = Status("QUEUED")
_TRANSACTION_CONTROL = {"MULTI", "EXEC", "DISCARD"}


class Database:
    """A store and the clock it runs on; sessions share it."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.store = Store(self.clock)
        self._default: Session | None = None

    def session(self) -> Session:
        return Session(self)

    def execute(self, line: str) -> Reply:
        """Run one line in the database's own session."""
        if self._default is None:
            self._default = self.session()
        return self._default.execute(line)


class Session:
    """One client: runs lines one at a time and holds its transaction state."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.store = db.store
        self._queue: list[Command] | None = None
        self._aborted = False

    @property
    def in_transaction(self) -> bool:
        return self._queue is not None

    def execute(self, line: str) -> Reply:
        """Parse and run one line (or queue it, inside a transaction); errors come back as replies."""
        try:
            command = parse(line)
        except ParseError as e:
            if self._queue is not None:
                self._aborted = True
            return Error(f"ERR {e}")
        if self._queue is not None and command.name not in _TRANSACTION_CONTROL:
            self._queue.append(command)
            return QUEUED
        return self.run(command)

    def run(self, command: Command) -> Reply:
        handler: Callable[..., Reply] = getattr(self, f"_cmd_{command.name.lower()}")
        try:
            return handler(*command.args)
        except CommandError as e:
            return Error(f"ERR {e}")

    def _cmd_ping(self, message: str | None = None) -> Reply:
        return Status("PONG") if message is None else message

    def _cmd_set(self, key: str, value: str, *options: str) -> Reply:
        ttl = None
        if options:
            if len(options) != 2 or options[0].upper() != "EX":
                raise CommandError("syntax error")
            ttl = parse_int(options[1])
            if ttl <= 0:
                raise CommandError("invalid expire time in 'set' command")
        self.store.set(key, value, ttl=ttl)
        return OK

    def _cmd_get(self, key: str) -> Reply:
        return self.store.get(key)

    def _cmd_del(self, *keys: str) -> Reply:
        return self.store.delete(*keys)

    def _cmd_exists(self, *keys: str) -> Reply:
        return sum(1 for key in keys if self.store.exists(key))

    def _cmd_incr(self, key: str) -> Reply:
        return self.store.incr(key)

    def _cmd_decr(self, key: str) -> Reply:
        return self.store.incr(key, -1)

    def _cmd_incrby(self, key: str, amount: str) -> Reply:
        return self.store.incr(key, parse_int(amount))

    def _cmd_expire(self, key: str, seconds: str) -> Reply:
        return int(self.store.expire(key, parse_int(seconds)))

    def _cmd_ttl(self, key: str) -> Reply:
        return self.store.ttl(key)

    def _cmd_persist(self, key: str) -> Reply:
        return int(self.store.persist(key))

    def _cmd_keys(self, pattern: str = "*") -> Reply:
        keys: list[Reply] = list(self.store.keys(pattern))
        return keys

    def _cmd_dbsize(self) -> Reply:
        return len(self.store)

    def _cmd_flushdb(self) -> Reply:
        self.store.clear()
        return OK

    def _cmd_multi(self) -> Reply:
        if self._queue is not None:
            raise CommandError("MULTI calls can not be nested")
        self._queue = []
        self._aborted = False
        return OK

    def _cmd_exec(self) -> Reply:
        if self._queue is None:
            raise CommandError("EXEC without MULTI")
        queued, aborted = self._queue, self._aborted
        self._queue, self._aborted = None, False
        if aborted:
            return Error("EXECABORT Transaction discarded because of previous errors.")
        return [self.run(command) for command in queued]

    def _cmd_discard(self) -> Reply:
        if self._queue is None:
            raise CommandError("DISCARD without MULTI")
        self._queue, self._aborted = None, False
        return OK


def format_reply(reply: Reply) -> str:
    """A reply as a command-line client shows it."""
    if isinstance(reply, Error):
        return f"(error) {reply}"
    if isinstance(reply, Status):
        return str(reply)
    if reply is None:
        return "(nil)"
    if isinstance(reply, int):
        return f"(integer) {reply}"
    if isinstance(reply, str):
        return json.dumps(reply, ensure_ascii=False)
    if not reply:
        return "(empty array)"
    width = len(str(len(reply)))
    lines: list[str] = []
    for number, item in enumerate(reply, 1):
        label = f"{number:>{width}}) "
        first, *rest = format_reply(item).split("\n")
        lines.append(label + first)
        lines.extend(" " * len(label) + line for line in rest)
    return "\n".join(lines)
