"""The key space: string values, optional deadlines, and the clock that decides when a key is gone."""

from __future__ import annotations

import math
import time
from fnmatch import fnmatchcase
from typing import Any, Protocol

from kvstore.errors import CommandError


class Clock(Protocol):
    """Anything that tells the time, in seconds."""

    def now(self) -> float: ...


class SystemClock:
    """The wall clock: seconds since the epoch."""

    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that only moves when told to; for tests and simulations."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds


class Store:
    """Keys mapped to string values. A key with a deadline disappears once the clock reaches it."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._data: dict[str, str] = {}
        self._expires: dict[str, float] = {}

    def _alive(self, key: str) -> bool:
        """Whether `key` exists now; an expired key is removed on the way."""
        deadline = self._expires.get(key)
        if deadline is not None and self.clock.now() >= deadline:
            del self._data[key]
            del self._expires[key]
        return key in self._data

    def get(self, key: str) -> str | None:
        return self._data[key] if self._alive(key) else None

    def set(self, key: str, value: str, *, ttl: float | None = None) -> None:
        """Store `value` under `key`; any previous deadline is dropped, `ttl` sets a new one."""
        self._data[key] = value
        self._expires.pop(key, None)
        if ttl is not None:
            self._expires[key] = self.clock.now() + ttl

    def delete(self, *keys: str) -> int:
        """Remove the keys; returns how many of them existed."""
        removed = 0
        for key in keys:
            if self._alive(key):
                del self._data[key]
                self._expires.pop(key, None)
                removed += 1
        return removed

    def exists(self, key: str) -> bool:
        return self._alive(key)

    def incr(self, key: str, amount: int = 1) -> int:
        """Add `amount` to the integer stored at `key` (a missing key counts as 0); keeps its deadline."""
        current = self.get(key)
        try:
            number = int(current) if current is not None else 0
        except ValueError:
            raise CommandError("value is not an integer or out of range") from None
        number += amount
        self._data[key] = str(number)
        return number

    def expire(self, key: str, seconds: float) -> bool:
        """Give `key` a deadline `seconds` from now (0 or less deletes it); False if it does not exist."""
        if not self._alive(key):
            return False
        if seconds <= 0:
            self.delete(key)
        else:
            self._expires[key] = self.clock.now() + seconds
        return True

    def ttl(self, key: str) -> int:
        """Seconds left before `key` expires, rounded up; -1 if it never does, -2 if it does not exist."""
        if not self._alive(key):
            return -2
        deadline = self._expires.get(key)
        if deadline is None:
            return -1
        return math.ceil(deadline - self.clock.now())

    def persist(self, key: str) -> bool:
        """Drop the deadline of `key`; False if it does not exist or has none."""
        return self._alive(key) and self._expires.pop(key, None) is not None

    def keys(self, pattern: str = "*") -> list[str]:
        """The live keys matching a glob pattern (``*``, ``?``, ``[abc]``), sorted."""
        return [key for key in sorted(self._data) if self._alive(key) and fnmatchcase(key, pattern)]

    def clear(self) -> None:
        self._data.clear()
        self._expires.clear()

    def __len__(self) -> int:
        return len(self.keys())

    def export(self) -> dict[str, dict[str, Any]]:
        """Every live key with its value and its deadline (None: it never expires)."""
        return {key: {"value": self._data[key], "expires_at": self._expires.get(key)} for key in self.keys()}

    def restore(self, key: str, value: str, expires_at: float | None = None) -> bool:
        """Put back a key with an absolute deadline; False (and nothing stored) if that has passed."""
        self._data[key] = value
        self._expires.pop(key, None)
        if expires_at is not None:
            self._expires[key] = expires_at
        return self._alive(key)
