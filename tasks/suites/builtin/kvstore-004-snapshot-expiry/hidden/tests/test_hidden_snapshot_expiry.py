import json
from pathlib import Path

import pytest
from kvstore import Database, ManualClock, Store
from kvstore.snapshot import SnapshotError, dumps, load, loads, save


def test_dump_records_deadlines() -> None:
    db = Database(clock=ManualClock(1000.0))
    db.execute("SET session abc EX 60")
    db.execute("SET name ada")
    keys = json.loads(dumps(db.store))["keys"]
    assert keys == {
        "name": {"value": "ada", "expires_at": None},
        "session": {"value": "abc", "expires_at": 1060.0},
    }


def test_round_trip_keeps_the_remaining_time(tmp_path: Path) -> None:
    db = Database(clock=ManualClock(1000.0))
    db.execute("SET session abc EX 60")
    db.execute("SET name ada")
    save(db.store, tmp_path / "dump.json")

    clock = ManualClock(1020.0)
    restored = Database(clock=clock)
    assert load(restored.store, tmp_path / "dump.json") == 2
    assert restored.execute("TTL session") == 40
    assert restored.execute("TTL name") == -1
    clock.advance(40)
    assert restored.execute("GET session") is None
    assert restored.execute("GET name") == "ada"


def test_keys_that_expired_on_disk_are_not_restored() -> None:
    text = json.dumps(
        {
            "version": 1,
            "saved_at": 800.0,
            "keys": {
                "old": {"value": "1", "expires_at": 900.0},
                "fresh": {"value": "2", "expires_at": 1500},
                "forever": {"value": "3", "expires_at": None},
            },
        }
    )
    store = Store(ManualClock(1000.0))
    assert loads(store, text) == 2
    assert store.keys() == ["forever", "fresh"]
    assert store.ttl("fresh") == 500


def test_bad_deadline_is_rejected_and_changes_nothing() -> None:
    store = Store(ManualClock(0.0))
    store.set("keep", "me")
    text = '{"version": 1, "keys": {"a": {"value": "1", "expires_at": "soon"}}}'
    with pytest.raises(SnapshotError, match="expires_at"):
        loads(store, text)
    assert store.keys() == ["keep"]


def test_plain_keys_round_trip() -> None:
    source = Store(ManualClock(5.0))
    source.set("a", "1")
    source.set("b", "two words")
    target = Store(ManualClock(5.0))
    assert loads(target, dumps(source)) == 2
    assert [target.get("a"), target.get("b")] == ["1", "two words"]


def test_merge_keeps_existing_keys() -> None:
    source = Store(ManualClock(5.0))
    source.set("a", "new")
    target = Store(ManualClock(5.0))
    target.set("a", "old")
    target.set("z", "26")
    assert loads(target, dumps(source), merge=True) == 1
    assert target.get("a") == "new"
    assert target.get("z") == "26"
