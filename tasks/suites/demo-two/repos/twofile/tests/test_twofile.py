import arith
import shapes


def test_modules_have_helpers():
    assert callable(arith.add) and callable(shapes.area)
