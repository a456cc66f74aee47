"""Small arithmetic helpers."""


def add(a, b):
    return a + b


def double(x):
    return x * 2


def is_even(n):
    return n % 2 == 0


def last(items):
    return items[-1]


def area(width, height):
    return width * height


def negate(x):
    return -x
