import json
from pathlib import Path

import pytest
from kvstore import ManualClock, Store
from kvstore.snapshot import SnapshotError, dumps, load, loads, save


def test_round_trip_through_a_file(tmp_path: Path) -> None:
    store = Store(ManualClock(10.0))
    store.set("name", "Ada Lovelace")
    store.set("lang", "日本語")
    save(store, tmp_path / "dump.json")
    fresh = Store(ManualClock(10.0))
    assert load(fresh, tmp_path / "dump.json") == 2
    assert fresh.get("name") == "Ada Lovelace"
    assert fresh.get("lang") == "日本語"


def test_document_shape() -> None:
    store = Store(ManualClock(42.0))
    store.set("k", "v")
    document = json.loads(dumps(store))
    assert document["version"] == 1
    assert document["saved_at"] == 42.0
    assert document["keys"]["k"]["value"] == "v"


def test_bad_version_is_rejected() -> None:
    with pytest.raises(SnapshotError, match="version"):
        loads(Store(ManualClock()), '{"version": 99, "keys": {}}')
