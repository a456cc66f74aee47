import mathlib


def test_double():
    assert mathlib.double(4) == 8
    assert mathlib.double(0) == 0
