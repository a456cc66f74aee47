"""Money: parsing amounts from text, rounding to a currency, and formatting."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation


@dataclass(frozen=True)
class Currency:
    code: str
    symbol: str
    decimals: int
    """Digits after the decimal point: 2 for cents, 0 for yen."""


CURRENCIES: dict[str, Currency] = {
    c.code: c
    for c in (
        Currency("USD", "$", 2),
        Currency("EUR", "€", 2),
        Currency("GBP", "£", 2),
        Currency("JPY", "¥", 0),
        Currency("CHF", "CHF ", 2),
        Currency("KWD", "KD ", 3),
    )
}

# Longest first, so that "CHF" is stripped whole.
_SYMBOLS = sorted({c.symbol.strip() for c in CURRENCIES.values()}, key=len, reverse=True)


def currency(code: str) -> Currency:
    """The currency with ISO code `code` (case-insensitive)."""
    try:
        return CURRENCIES[code.upper()]
    except KeyError:
        raise ValueError(f"unknown currency {code!r}") from None


def quantize(amount: Decimal, code: str = "USD") -> Decimal:
    """`amount` rounded (half up) to the minor unit of the currency: cents for USD, whole yen for JPY."""
    return amount.quantize(Decimal(1).scaleb(-currency(code).decimals), rounding=ROUND_HALF_UP)


def _split_sign(raw: str) -> tuple[str, str]:
    if raw[:1] in ("-", "+"):
        return raw[0], raw[1:].lstrip()
    return "", raw


def _strip_symbol(raw: str) -> str:
    for symbol in _SYMBOLS:
        if raw.startswith(symbol):
            return raw[len(symbol) :].lstrip()
    return raw


def parse_amount(text: str) -> Decimal:
    """Parse '1,234.56', '-12', '$ 7.50', '$-7.50', '+3' or '(45.00)' (a negative amount) into a Decimal."""
    raw = text.strip()
    negative = False
    if raw.startswith("(") and raw.endswith(")"):
        negative, raw = True, raw[1:-1].strip()
    sign, raw = _split_sign(raw)
    raw = _strip_symbol(raw)
    if not sign:
        sign, raw = _split_sign(raw)
    if sign == "-":
        negative = not negative
    raw = raw.replace(",", "").replace("_", "")
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise ValueError(f"not an amount: {text!r}") from None
    if not value.is_finite():
        raise ValueError(f"not an amount: {text!r}")
    return -value if negative else value


def format_money(
    amount: Decimal | int | str,
    code: str = "USD",
    *,
    symbol: bool = True,
    accounting: bool = False,
) -> str:
    """'$1,234.50', '-$3.00' (or '($3.00)' with accounting=True), '¥1,200', 'KD 0.125'."""
    cur = currency(code)
    value = quantize(parse_amount(amount) if isinstance(amount, str) else Decimal(amount), cur.code)
    digits = f"{abs(value):,.{cur.decimals}f}"
    text = f"{cur.symbol}{digits}" if symbol else digits
    if value < 0:
        return f"({text})" if accounting else f"-{text}"
    return text
