import arith
import shapes


def test_add():
    assert arith.add(2, 3) == 5
    assert arith.add(-1, 1) == 0


def test_area():
    assert shapes.area(3, 4) == 12
    assert shapes.area(1, 5) == 5
