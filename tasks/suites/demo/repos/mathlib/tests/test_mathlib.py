import mathlib


def test_module_has_helpers():
    assert callable(mathlib.add) and callable(mathlib.area)
