import mathlib


def test_is_even():
    assert mathlib.is_even(4)
    assert not mathlib.is_even(3)
