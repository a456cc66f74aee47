import mathlib


def test_negate():
    assert mathlib.negate(5) == -5
    assert mathlib.negate(-2) == 2
