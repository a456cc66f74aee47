import arith
import shapes


def test_double():
    assert arith.double(5) == 10
    assert arith.double(0) == 0


def test_perimeter():
    assert shapes.perimeter(2, 3) == 10
    assert shapes.perimeter(1, 1) == 4
