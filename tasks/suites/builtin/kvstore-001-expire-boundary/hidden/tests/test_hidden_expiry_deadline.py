from kvstore import Database, ManualClock, Store
from kvstore.snapshot import loads


def make_db() -> tuple[Database, ManualClock]:
    clock = ManualClock(start=1000.0)
    return Database(clock=clock), clock


def test_get_at_exact_deadline_returns_nil() -> None:
    db, clock = make_db()
    db.execute("SET session abc")
    assert db.execute("EXPIRE session 10") == 1
    clock.advance(10)
    assert db.execute("GET session") is None


def test_ttl_and_exists_at_deadline() -> None:
    db, clock = make_db()
    db.execute("SET session abc")
    db.execute("EXPIRE session 10")
    clock.advance(10)
    assert db.execute("TTL session") == -2
    assert db.execute("EXISTS session") == 0
    assert db.execute("KEYS *") == []
    assert db.execute("DBSIZE") == 0


def test_set_ex_expires_at_deadline() -> None:
    db, clock = make_db()
    db.execute("SET token xyz EX 5")
    clock.advance(5)
    assert db.execute("GET token") is None
    assert db.execute("INCR token") == 1


def test_snapshot_entry_due_now_is_not_restored() -> None:
    store = Store(ManualClock(2000.0))
    text = '{"version": 1, "keys": {"a": {"value": "1", "expires_at": 2000.0}, "b": {"value": "2", "expires_at": null}}}'
    assert loads(store, text) == 1
    assert store.get("a") is None
    assert store.keys() == ["b"]


def test_key_alive_just_before_deadline() -> None:
    db, clock = make_db()
    db.execute("SET session abc")
    db.execute("EXPIRE session 10")
    clock.advance(9.999)
    assert db.execute("GET session") == "abc"
    assert db.execute("TTL session") == 1


def test_expire_zero_deletes_at_once() -> None:
    db, _ = make_db()
    db.execute("SET k v")
    assert db.execute("EXPIRE k 0") == 1
    assert db.execute("GET k") is None
