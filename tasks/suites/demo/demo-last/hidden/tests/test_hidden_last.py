import mathlib


def test_last():
    assert mathlib.last([1, 2, 3]) == 3
    assert mathlib.last(['a']) == 'a'
