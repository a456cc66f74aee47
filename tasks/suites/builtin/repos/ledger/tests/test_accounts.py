import pytest
from ledger import AccountError, UnknownAccountError
from ledger.accounts import Account, Chart


def test_account_name_is_normalized():
    account = Account(" Expenses : Food:Groceries ")
    assert account.name == "Expenses:Food:Groceries"
    assert account.kind == "Expenses"
    assert account.parent == Account("Expenses:Food")
    assert Account("Assets").parent is None
    assert account.is_under(Account("Expenses:Food"))
    assert account.is_under("Expenses")
    assert not Account("Expenses:Foodstuff").is_under("Expenses:Food")


@pytest.mark.parametrize("name", ["", "Expenses::Food", "Stuff:Things", "Assets:"])
def test_invalid_account_names(name):
    with pytest.raises(AccountError):
        Account(name)


def test_normal_sign():
    assert Account("Assets:Bank").sign == 1
    assert Account("Expenses:Rent").sign == 1
    assert Account("Income:Salary").sign == -1
    assert Account("Liabilities:Card").sign == -1


def test_chart_opens_parents():
    chart = Chart(["Expenses:Food:Groceries", "Expenses:Rent"])
    assert "Expenses:Food" in chart
    assert "Expenses" in chart
    assert "Assets" not in chart
    assert [a.name for a in chart.children("Expenses")] == ["Expenses:Food", "Expenses:Rent"]
    with pytest.raises(UnknownAccountError, match="Income"):
        chart.get("Income")
