"""Small arithmetic helpers."""


def add(a, b):
    return a + b


def double(x):
    return x * 2


def negate(x):
    return -x
