from kvstore import Database, ManualClock


def make_db() -> tuple[Database, ManualClock]:
    clock = ManualClock(start=1000.0)
    return Database(clock=clock), clock


def test_ttl_of_a_missing_key() -> None:
    db, _ = make_db()
    assert db.execute("TTL nothing") == -2


def test_ttl_of_a_key_without_expiry() -> None:
    db, _ = make_db()
    db.execute("SET name ada")
    assert db.execute("TTL name") == -1


def test_ttl_counts_down_and_rounds_up() -> None:
    db, clock = make_db()
    db.execute("SET session abc EX 60")
    assert db.execute("TTL session") == 60
    clock.advance(0.5)
    assert db.execute("ttl session") == 60
    clock.advance(20)
    assert db.execute("Ttl session") == 40


def test_ttl_after_expiry() -> None:
    db, clock = make_db()
    db.execute("SET session abc")
    db.execute("EXPIRE session 10")
    clock.advance(10)
    assert db.execute("TTL session") == -2


def test_ttl_after_persist_and_set() -> None:
    db, _ = make_db()
    db.execute("SET a 1 EX 30")
    db.execute("PERSIST a")
    assert db.execute("TTL a") == -1
    db.execute("SET b 1 EX 30")
    db.execute("SET b 2")
    assert db.execute("TTL b") == -1


def test_ttl_in_a_transaction() -> None:
    db, _ = make_db()
    db.execute("MULTI")
    assert db.execute("SET k v EX 5") == "QUEUED"
    assert db.execute("TTL k") == "QUEUED"
    assert db.execute("EXEC") == ["OK", 5]


def test_ttl_arity() -> None:
    db, _ = make_db()
    assert db.execute("TTL") == "ERR wrong number of arguments for 'ttl' command"
    assert db.execute("TTL a b") == "ERR wrong number of arguments for 'ttl' command"


def test_expire_still_reports_missing_keys() -> None:
    db, _ = make_db()
    assert db.execute("EXPIRE nothing 10") == 0
