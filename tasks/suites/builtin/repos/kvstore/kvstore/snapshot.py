"""Snapshots: the whole store as one JSON document, and back.

    {"version": 1, "saved_at": 1700000000.0,
     "keys": {"name": {"value": "ada", "expires_at": null},
              "session": {"value": "x1", "expires_at": 1700000060.0}}}

Deadlines are absolute times on the store's clock, so a key that expired while the snapshot sat on
disk is not brought back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kvstore.store import Store

FORMAT_VERSION = 1


class SnapshotError(ValueError):
    """A document that is not a snapshot this version can read."""


def dumps(store: Store) -> str:
    document = {"version": FORMAT_VERSION, "saved_at": store.clock.now(), "keys": store.export()}
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False)


def loads(store: Store, text: str, *, merge: bool = False) -> int:
    """Load a snapshot into `store`; returns how many keys were restored.

    Without `merge` the store ends up holding exactly the snapshot's keys; with it, the snapshot's
    keys are added to (and override) what the store already holds. A malformed document changes nothing.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise SnapshotError(f"not JSON: {e}") from None
    if not isinstance(document, dict):
        raise SnapshotError("a snapshot is a JSON object")
    if document.get("version") != FORMAT_VERSION:
        raise SnapshotError(f"unsupported snapshot version: {document.get('version')!r}")
    keys = document.get("keys")
    if not isinstance(keys, dict):
        raise SnapshotError("a snapshot needs a 'keys' object")
    entries = [_entry(key, raw) for key, raw in keys.items()]
    if not merge:
        store.clear()
    return sum(store.restore(key, value, expires_at) for key, value, expires_at in entries)


def _entry(key: str, raw: object) -> tuple[str, str, float | None]:
    if not isinstance(raw, dict) or not isinstance(raw.get("value"), str):
        raise SnapshotError(f"key {key!r}: an entry needs a string 'value'")
    expires_at = raw.get("expires_at")
    if expires_at is not None and (isinstance(expires_at, bool) or not isinstance(expires_at, int | float)):
        raise SnapshotError(f"key {key!r}: 'expires_at' must be a number or null")
    return key, raw["value"], expires_at


def save(store: Store, path: str | os.PathLike[str]) -> None:
    """Write a snapshot of `store` to `path`, replacing the file only once it is complete."""
    target = Path(path)
    partial = target.with_name(target.name + ".tmp")
    partial.write_text(dumps(store) + "\n", encoding="utf-8")
    partial.replace(target)


def load(store: Store, path: str | os.PathLike[str], *, merge: bool = False) -> int:
    """Load the snapshot at `path` into `store` (see `loads`)."""
    return loads(store, Path(path).read_text(encoding="utf-8"), merge=merge)
