from pathlib import Path

import pytest
from kvstore import Database, ManualClock, Store
from kvstore.snapshot import SnapshotError, dumps, load, loads, save


def test_load_replaces_the_store(tmp_path: Path) -> None:
    db = Database(clock=ManualClock())
    db.execute("SET a 1")
    save(db.store, tmp_path / "dump.json")
    db.execute("SET a 2")
    db.execute("SET scratch temp")
    assert load(db.store, tmp_path / "dump.json") == 1
    assert db.execute("GET a") == "1"
    assert db.execute("GET scratch") is None
    assert db.execute("DBSIZE") == 1


def test_loads_replaces_the_store() -> None:
    source = Store(ManualClock())
    source.set("x", "10")
    target = Store(ManualClock())
    target.set("y", "20")
    assert loads(target, dumps(source)) == 1
    assert target.keys() == ["x"]


def test_empty_snapshot_empties_the_store() -> None:
    store = Store(ManualClock())
    store.set("left", "over")
    assert loads(store, '{"version": 1, "keys": {}}') == 0
    assert len(store) == 0


def test_merge_adds_to_the_store(tmp_path: Path) -> None:
    source = Store(ManualClock())
    source.set("a", "from snapshot")
    save(source, tmp_path / "dump.json")
    target = Store(ManualClock())
    target.set("a", "old")
    target.set("b", "kept")
    assert load(target, tmp_path / "dump.json", merge=True) == 1
    assert target.get("a") == "from snapshot"
    assert target.get("b") == "kept"


def test_malformed_snapshot_changes_nothing() -> None:
    store = Store(ManualClock())
    store.set("keep", "me")
    with pytest.raises(SnapshotError):
        loads(store, '{"version": 1, "keys": {"a": {"value": 5}}}')
    assert store.keys() == ["keep"]
