from kvstore import Database, ManualClock


def test_multi_exec_runs_queued_commands() -> None:
    db = Database(clock=ManualClock())
    assert db.execute("MULTI") == "OK"
    assert db.execute("SET a 1") == "QUEUED"
    assert db.execute("INCR a") == "QUEUED"
    assert db.execute("GET a") == "QUEUED"
    assert db.execute("EXEC") == ["OK", 2, "2"]


def test_discard_drops_the_queue() -> None:
    db = Database(clock=ManualClock())
    db.execute("MULTI")
    db.execute("SET a 1")
    assert db.execute("DISCARD") == "OK"
    assert db.execute("GET a") is None


def test_parse_error_aborts_the_transaction() -> None:
    db = Database(clock=ManualClock())
    db.execute("MULTI")
    db.execute("SET a 1")
    assert db.execute("SET a").startswith("ERR wrong number of arguments")
    assert db.execute("EXEC").startswith("EXECABORT")
    assert db.execute("GET a") is None


def test_sessions_have_their_own_transactions() -> None:
    db = Database(clock=ManualClock())
    first, second = db.session(), db.session()
    first.execute("MULTI")
    first.execute("SET a 1")
    assert second.execute("GET a") is None
    first.execute("EXEC")
    assert second.execute("GET a") == "1"
