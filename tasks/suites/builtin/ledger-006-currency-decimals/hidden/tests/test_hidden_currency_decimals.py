from datetime import date
from decimal import Decimal

from ledger.money import format_money, quantize
from ledger.transactions import Ledger


def test_yen_ledger_rounds_to_whole_yen():
    yen = Ledger("JPY")
    tx = yen.record(date(2024, 6, 1), "Train", ("Expenses:Travel", "1200.4"), ("Assets:Cash", None))
    assert [str(p.amount) for p in tx.postings] == ["1200", "-1200"]
    yen.record(date(2024, 6, 2), "Snack", ("Expenses:Food", "149.5"), ("Assets:Cash", "-149.5"))
    assert yen.balance("Expenses:Food") == Decimal("150")
    assert str(yen.balance("Assets:Cash")) == "-1350"


def test_dinar_ledger_keeps_three_decimals():
    dinar = Ledger("KWD")
    dinar.record(date(2024, 6, 1), "Taxi", ("Expenses:Travel", "1.2345"), ("Assets:Cash", None))
    assert str(dinar.balance("Expenses:Travel")) == "1.235"
    assert dinar.balance("Assets:Cash") == Decimal("-1.235")


def test_format_money_uses_the_currency_decimals():
    assert format_money(Decimal("1200"), "JPY") == "¥1,200"
    assert format_money(Decimal("-1234567.5"), "JPY") == "-¥1,234,568"
    assert format_money(Decimal("0.125"), "KWD") == "KD 0.125"
    assert format_money(Decimal("-12.3456"), "KWD", accounting=True) == "(KD 12.346)"
    assert format_money(Decimal("7"), "jpy", symbol=False) == "7"


def test_quantize_by_currency():
    assert quantize(Decimal("1200.5"), "JPY") == Decimal("1201")
    assert quantize(Decimal("0.0005"), "KWD") == Decimal("0.001")
    assert quantize(Decimal("2.345")) == Decimal("2.35")


def test_dollar_ledger_rounds_to_cents():
    book = Ledger("USD")
    book.record(date(2024, 6, 1), "Gum", ("Expenses:Food", "0.995"), ("Assets:Cash", None))
    assert str(book.balance("Expenses:Food")) == "1.00"
    assert format_money(book.balance("Assets:Cash"), "USD") == "-$1.00"
    assert format_money(Decimal("1234.5"), "CHF") == "CHF 1,234.50"
