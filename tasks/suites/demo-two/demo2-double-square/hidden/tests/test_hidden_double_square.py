import arith
import shapes


def test_double():
    assert arith.double(5) == 10
    assert arith.double(0) == 0


def test_square():
    assert shapes.is_square(3, 3) is True
    assert shapes.is_square(2, 5) is False
