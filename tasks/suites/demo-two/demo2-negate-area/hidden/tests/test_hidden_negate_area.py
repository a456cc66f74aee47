import arith
import shapes


def test_negate():
    assert arith.negate(4) == -4
    assert arith.negate(-2) == 2


def test_area():
    assert shapes.area(3, 4) == 12
    assert shapes.area(1, 5) == 5
