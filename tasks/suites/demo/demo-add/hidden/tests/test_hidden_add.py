import mathlib


def test_add():
    assert mathlib.add(2, 3) == 5
    assert mathlib.add(-1, 1) == 0
