from kvstore import Database, Error, ManualClock

MESSAGE = "ERR value is not an integer or out of range"


def make_db() -> Database:
    return Database(clock=ManualClock(start=50.0))


def test_incr_on_text_is_an_error_reply() -> None:
    db = make_db()
    db.execute("SET name ada")
    reply = db.execute("INCR name")
    assert isinstance(reply, Error)
    assert reply == MESSAGE
    assert db.execute("GET name") == "ada"
    assert db.execute("PING") == "PONG"


def test_decr_and_incrby_on_text() -> None:
    db = make_db()
    db.execute("SET word hello")
    assert db.execute("DECR word") == MESSAGE
    assert db.execute("INCRBY word 5") == MESSAGE
    assert db.execute("GET word") == "hello"


def test_incr_on_a_decimal_number() -> None:
    db = make_db()
    db.execute("SET price 1.5")
    assert db.execute("INCR price") == MESSAGE
    assert db.execute("GET price") == "1.5"


def test_error_inside_exec_does_not_stop_the_others() -> None:
    db = make_db()
    db.execute("SET name ada")
    db.execute("MULTI")
    db.execute("SET a 1")
    db.execute("INCR name")
    db.execute("INCR a")
    replies = db.execute("EXEC")
    assert replies == ["OK", MESSAGE, 2]
    assert isinstance(replies, list)
    assert isinstance(replies[1], Error)
    assert db.execute("GET a") == "2"


def test_incr_negative_number() -> None:
    db = make_db()
    db.execute("SET n -5")
    assert db.execute("INCR n") == -4
    assert db.execute("INCRBY n -10") == -14


def test_incrby_with_bad_amount() -> None:
    db = make_db()
    db.execute("SET n 1")
    assert db.execute("INCRBY n ten") == MESSAGE
    assert db.execute("GET n") == "1"
