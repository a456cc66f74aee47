import arith
import shapes


def test_negate():
    assert arith.negate(4) == -4
    assert arith.negate(-2) == 2


def test_square():
    assert shapes.is_square(3, 3) is True
    assert shapes.is_square(2, 5) is False
