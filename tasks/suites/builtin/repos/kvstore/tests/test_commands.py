from kvstore import Database, Error, ManualClock, format_reply


def make_db() -> tuple[Database, ManualClock]:
    clock = ManualClock(start=1_000.0)
    return Database(clock=clock), clock


def test_set_and_get() -> None:
    db, _ = make_db()
    assert db.execute("SET name ada") == "OK"
    assert db.execute("GET name") == "ada"
    assert db.execute("GET missing") is None


def test_del_counts_existing_keys() -> None:
    db, _ = make_db()
    db.execute("SET a 1")
    db.execute("SET b 2")
    assert db.execute("DEL a b c") == 2
    assert db.execute("EXISTS a b") == 0


def test_incr_and_decr() -> None:
    db, _ = make_db()
    assert db.execute("INCR hits") == 1
    assert db.execute("INCRBY hits 10") == 11
    assert db.execute("DECR hits") == 10
    assert db.execute("GET hits") == "10"


def test_expire_removes_key_later() -> None:
    db, clock = make_db()
    db.execute("SET token abc")
    assert db.execute("EXPIRE token 30") == 1
    clock.advance(29.5)
    assert db.execute("GET token") == "abc"
    clock.advance(1)
    assert db.execute("GET token") is None
    assert db.execute("EXPIRE token 30") == 0


def test_set_with_ex_and_persist() -> None:
    db, clock = make_db()
    db.execute("SET s v EX 5")
    assert db.execute("PERSIST s") == 1
    clock.advance(100)
    assert db.execute("GET s") == "v"


def test_keys_with_pattern() -> None:
    db, _ = make_db()
    for key in ("user:1", "user:2", "order:1"):
        db.execute(f"SET {key} x")
    assert db.execute("KEYS user:*") == ["user:1", "user:2"]
    assert db.execute("DBSIZE") == 3


def test_errors_are_replies() -> None:
    db, _ = make_db()
    reply = db.execute("EXPIRE k soon")
    assert isinstance(reply, Error)
    assert reply == "ERR value is not an integer or out of range"
    assert db.execute("PING") == "PONG"


def test_format_reply() -> None:
    db, _ = make_db()
    db.execute("SET a 1")
    assert format_reply(db.execute("GET a")) == '"1"'
    assert format_reply(db.execute("GET b")) == "(nil)"
    assert format_reply(db.execute("KEYS *")) == '1) "a"'
    assert format_reply(db.execute("NOPE")) == "(error) ERR unknown command 'NOPE'"
