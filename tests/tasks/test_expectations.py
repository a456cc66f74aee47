"""Expected values held outside the sandbox (issue 32, item 1): hidden tests rewritten so that the child
reports actual values as plain data and the parent compares; canaries that differ from the real copy
only by a value of the same form (item 2)."""

from __future__ import annotations

import datetime
import random
import re
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from tasks import plain
from tasks.canaries import Canary, candidates, changed_expectation, held_canaries, perturbed, square
from tasks.expectations import Check, rewrite
from tasks.plain import decode, encode
from tasks.suite import load_suite

HIDDEN = '''\
"""Hidden tests."""
from __future__ import annotations

import datetime
import unittest
from decimal import Decimal

import pytest

from calc import add, parse, total


def test_add():
    assert add(2, 3) == 5
    assert "secret-expected-text" == add("secret-", "expected-text")
    assert add(2, 2) != 5
    assert parse("") is None
    assert total([Decimal("0.55"), Decimal("0.55")]) == Decimal("1.10")
    assert add(datetime.date(2024, 2, 28), 1) == datetime.date(2024, 2, 29)
    assert add(1, 1)


def test_raises():
    with pytest.raises(ValueError, match=r"^bad amount: 'x\\.1'$"):
        parse("x.1")


def test_loop():
    for n in range(3):
        assert add(n, 0) == n


def test_returns():
    assert add(1, 1) == 2
    return


class TestCalc(unittest.TestCase):
    def test_method(self):
        self.assertEqual(add(1, 2), 3)
        self.assertIsNone(parse(""))
'''


def test_literal_expectations_leave_the_file_and_are_held_by_slot() -> None:
    rewritten = rewrite(HIDDEN)
    source = rewritten.source
    for secret in ("secret-expected-text", "1.10')", "2024, 2, 29", "^bad amount", "== 3"):
        assert secret not in source, secret
    kinds = {(c.test, c.kind) for c in rewritten.checks}
    assert ("test_add", "eq") in kinds and ("test_add", "is") in kinds
    assert "assert add(2, 2) != 5" in source  # an inequality names no value to copy: it stays
    assert ("test_raises", "search") in kinds
    assert ("TestCalc::test_method", "eq") in kinds and ("TestCalc::test_method", "is") in kinds
    assert not any(c.test in ("test_loop", "test_returns") for c in rewritten.checks)  # may not run once
    assert "assert add(1, 1)\n" in source  # no expected value: stays as it is
    assert "assert add(n, 0) == n" in source
    assert [c.slot for c in rewritten.checks] == list(range(len(rewritten.checks)))
    assert rewritten.assertions == 12 and len(rewritten.checks) == 8
    assert source.index("from __future__") < source.index("from harness_expect import")
    compile(source, "rewritten.py", "exec")
    by_line = {c.line: c for c in rewritten.checks}
    assert decode(by_line[18].expected) == Decimal("1.10")
    assert decode(by_line[19].expected) == datetime.date(2024, 2, 29)


def test_a_name_the_file_rebinds_is_not_taken_for_the_standard_librarys() -> None:
    source = "from decimal import Decimal\nfrom calc import f\n\n\ndef Decimal(x):\n    return x\n\n\ndef test_a():\n    assert f() == Decimal('1')\n"
    assert rewrite(source).checks == []


CONSTANTS = """\
from decimal import Decimal

from calc import add, parse

MESSAGE = "ERR value is not an integer"
TOTAL: Decimal = Decimal("1.10")
SEEN = ["a"]
INPUT = "12"


def test_reply():
    assert parse("x") == MESSAGE
    assert add(TOTAL, 0) == (TOTAL, MESSAGE)
    assert parse(INPUT) == INPUT
    assert SEEN == ["a"]
"""


def test_a_module_constant_a_test_expects_is_held_and_leaves_the_file_when_nothing_else_reads_it() -> None:
    """`assert reply == MESSAGE` holds MESSAGE like a literal; its assignment leaves the file unless
    something else still reads it. A mutable value (a list a test could change) is not a constant."""
    rewritten = rewrite(CONSTANTS)
    assert "MESSAGE" not in rewritten.source and "not an integer" not in rewritten.source
    assert "TOTAL" in rewritten.source  # read by the actual side too: stays, and so does its value
    assert "INPUT = '12'" in rewritten.source and "SEEN = ['a']" in rewritten.source
    expected = [decode(c.expected) for c in rewritten.checks]
    assert expected[:3] == [
        "ERR value is not an integer",
        (Decimal("1.10"), "ERR value is not an integer"),
        "12",
    ]
    assert expected[3] == ["a"]  # SEEN, a list, is the actual side
    rebound = CONSTANTS + "\n\ndef test_rebinds():\n    global MESSAGE\n    MESSAGE = 'other'\n"
    assert "MESSAGE = 'ERR value is not an integer'" in rewrite(rebound).source  # bound twice: not constant


class AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True


class Reply(str):
    """A str subclass without equality of its own: it compares as its text."""


class Liar(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


@pytest.mark.parametrize(
    "value",
    [
        None, True, 0, -12, 1.5, float("inf"), 2 + 3j, "tëxt", b"\x00\xff", [1, [2, (3,)]], {"a": {1, 2}},
        frozenset({1}), Decimal("1.10"), datetime.date(2024, 1, 31), datetime.timedelta(hours=2),
        datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
    ],
)  # fmt: skip
def test_plain_data_comes_back_as_it_went(value: object) -> None:
    again = decode(encode(value))
    assert again == value and type(again) is type(value)


def test_what_is_not_plain_data_equals_nothing() -> None:
    eq = Check(0, "test_a", "eq", encode("ok"), 1)
    assert encode(AlwaysEqual())[0] == "opaque"
    assert not eq.holds(encode(AlwaysEqual()))
    assert not eq.holds(encode(Liar("no")))  # its own __eq__: not plain data
    assert eq.holds(encode(Reply("ok"))) and not eq.holds(encode(Reply("no")))
    assert not eq.holds(["opaque", "x"]) and not eq.holds("garbage") and not eq.holds(["int", "nan?"])
    assert not eq.holds(encode([AlwaysEqual()]))
    assert not Check(0, "t", "eq", encode(3), 1).holds(encode(Decimal("sNaN")))  # raises on ==: no crash
    assert not Check(0, "t", "search", ["str", "(a+)+$"], 1).holds(encode("a" * 70000 + "!"))  # not searched


def test_an_answer_that_would_cost_the_host_quadratic_time_equals_nothing() -> None:
    """Ints that all hash alike, as a set or as dict keys, are refused before they are put together
    (40,000 of them took the host 124 s); real data's hashes are spread."""
    colliding = [["int", str(i * (2**61 - 1))] for i in range(40_000)]
    started = time.monotonic()
    assert not Check(0, "t", "eq", encode({1}), 1).holds(["set", colliding])
    assert not Check(0, "t", "eq", encode({1: 1}), 1).holds(["dict", [[k, ["int", "1"]] for k in colliding]])
    assert time.monotonic() - started < 5
    spread = set(range(40_000))
    assert Check(0, "t", "eq", encode(spread), 1).holds(encode(spread))


def test_the_parent_compares_as_the_original_assert_did() -> None:
    assert Check(0, "t", "eq", encode(Decimal("1.10")), 1).holds(encode(Decimal("1.1")))
    assert Check(0, "t", "eq", encode(1), 1).holds(encode(1.0))
    assert not Check(0, "t", "eq", encode([1]), 1).holds(encode((1,)))
    assert Check(0, "t", "is", ["none"], 1).holds(["none"]) and not Check(0, "t", "is", ["none"], 1).holds(
        ["other"]
    )
    assert Check(0, "t", "is not", ["none"], 1).holds(["other"])
    assert Check(0, "t", "search", ["str", r"^bad \d$"], 1).holds(encode("bad 7"))
    assert not Check(0, "t", "search", ["str", r"^bad \d$"], 1).holds(encode(7))


def test_most_hidden_assertions_of_the_built_in_suites_are_decided_in_the_parent() -> None:
    decided = assertions = 0
    for suite in ("builtin", "demo"):
        for task in load_suite(suite):
            for path, source in task.hidden_tests.files.items():
                if path.endswith(".py"):
                    rewritten = rewrite(source)
                    decided, assertions = decided + rewritten.decided, assertions + rewritten.assertions
    assert decided / assertions >= 0.85, (decided, assertions)  # 304 of 339 (0.90) measured


TABLES = """\
from decimal import Decimal

import pytest

from calc import parse, add


@pytest.mark.parametrize(
    ("text", "expected"),
    [("12", "12.50"), ("1,234.56", "1234.56"), ("\u20ac1_000", "1000"), ("a\\tb", "7"), ("", "0")],
)
def test_parse(text, expected):
    assert parse(text) == Decimal(expected)


@pytest.mark.parametrize("a, b, total", [(1, 2, 3), (2.5, None, 2.5), ((1,), b"x\\xff", 41), (-1, 1e20, 1e20)])
def test_add(a, b, total):
    assert total == add(a, b)


class TestNamed:
    @pytest.mark.parametrize("n, out", [(1, "one"), (2, "two")], ids=["first", "t\u00e9"])
    def test_n(self, n, out):
        assert add(n, 0) == n
        assert parse(str(n)) == out


@pytest.mark.parametrize("n", [1, 2])
def test_both_sides(n):
    assert add(n, 0) == n


@pytest.mark.parametrize("n, m", [(1, 2), (2, 3)])
@pytest.mark.parametrize("k", [0])
def test_stacked(n, m, k):
    assert add(n, k) == m
"""
CALC = """\
from decimal import Decimal


def parse(text):
    words = {"1": "one", "2": "two"}
    if text in words:
        return words[text]
    cleaned = text.replace(",", "").replace("\u20ac", "").replace("_", "")
    return Decimal(7) if "\\t" in cleaned else Decimal(cleaned or "0") + (Decimal("0.5") if cleaned == "12" else 0)


def add(a, b):
    return {1: 3, 2.5: 2.5, -1: 1e20}.get(a, 41) if b is not 0 else a
"""


def pytest_json(folder: Path, *args: str) -> list[str]:
    """Node ids pytest collects (`--collect-only`) or the outcome lines of a run, from a real pytest."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=folder, capture_output=True, text=True, timeout=120)  # fmt: skip
    return proc.stdout.splitlines()


def test_parametrize_cases_are_held_one_by_one_and_named_as_pytest_names_them(tmp_path: Path) -> None:
    """A table's expected column leaves the file and each case's value is held in the parent; the cases
    the task's ids name (pytest's ids, which spell the values) map to new ids that do not."""
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "harness_expect.py").write_text(Path(plain.__file__).read_text())
    (tmp_path / "test_orig.py").write_text(TABLES)
    rewritten = rewrite(TABLES)
    (tmp_path / "test_new.py").write_text(rewritten.source)
    collected = {
        line.split("::", 1)[1]
        for line in pytest_json(tmp_path, "--collect-only", "test_orig.py")
        if "::" in line
    }
    assert set(rewritten.cases) == {
        c for c in collected if c.split("[")[0] in ("test_parse", "test_add", "TestNamed::test_n")
    }
    assert rewritten.cases["test_parse[\\u20ac1_000-1000]"] == "test_parse[2]"
    assert rewritten.cases["TestNamed::test_n[t\\xe9]"] == "TestNamed::test_n[1]"
    for secret in ("12.50", "1234.56", "'one'", "41", "1e+20-"):
        assert secret not in rewritten.source, secret
    assert "assert add(n, 0) == n" in rewritten.source  # the column is read by the actual side too
    assert "def test_stacked(n, m, k)" in rewritten.source  # two tables: ids would combine, left alone
    run = [
        line for line in pytest_json(tmp_path, "-rA", "test_new.py") if line.startswith(("PASSED", "FAILED"))
    ]
    new_ids = {line.split("::", 1)[1].split(" ")[0] for line in run if line.startswith("PASSED")}
    assert set(rewritten.cases.values()) <= new_ids
    checks = {c.test: c for c in rewritten.checks if "[" in c.test}
    assert decode(checks["test_parse[0]"].expected) == Decimal("12.50")
    assert decode(checks["test_add[3]"].expected) == 1e20 and decode(checks["test_add[2]"].expected) == 41
    assert decode(checks["TestNamed::test_n[1]"].expected) == "two"
    # A table pytest would name otherwise (a duplicate id gets a counter) is left as it was.
    duplicated = TABLES.replace("(1, 2, 3), (2.5", "(1, 2, 3), (1, 2, 3), (2.5")
    assert not any(k.startswith("test_add[") for k in rewrite(duplicated).cases)
    assert rewrite(TABLES, parametrize=False).cases == {}


def test_perturbations_keep_type_and_form() -> None:
    words = frozenset({"brulee", "crumbs", "Ways", "Days", "integer", "numbers"})
    for value in (7, 19, -19, 1100, 10, 15, 250, 2.5, "creme-brulee", "09:00-12:00", "not an integer", "A1"):
        for changed in (perturbed(value), perturbed(value, words)):
            assert changed != value and type(changed) is type(value)
            if isinstance(value, str):
                assert len(changed) == len(value)
                assert [c.isdigit() for c in changed] == [c.isdigit() for c in value]
                assert [c.isupper() for c in changed] == [c.isupper() for c in value]
            else:
                assert len(str(abs(changed))) == len(str(abs(value))) and (changed < 0) == (value < 0)
                assert (str(changed)[-1] in "05") == (str(value)[-1] in "05")  # as round as it was
    assert perturbed("creme-brulee", words) == "creme-crumbs"  # a word of the repository's
    assert perturbed("") == "" and perturbed(" - ") == " - " and perturbed(0) == 0 and perturbed(5) == 5
    assert perturbed("zzz qqq", words) == "zzz qqq"  # no word of its form in the repository, no digit


def test_canaries_differ_from_the_real_copy_in_one_constant_and_never_in_an_operator() -> None:
    written = rewrite(HIDDEN).source
    found = candidates("tests/test_calc.py", HIDDEN, {"test_add", "test_loop", "TestCalc::test_method"})
    assert found and found == candidates(
        "tests/test_calc.py", HIDDEN, {"test_add", "test_loop", "TestCalc::test_method"}
    )
    ops = re.compile(r"==|!=| is |not |assertNotEqual|assertIsNotNone")
    for canary in found:
        real, copy = written.splitlines(), canary.source.splitlines()
        assert len(real) == len(copy)
        differing = [i + 1 for i, (a, b) in enumerate(zip(real, copy, strict=True)) if a != b]
        assert len(differing) == 1 and len(canary.lines) + len(canary.slots) == 1, canary.mutation
        line = differing[0]
        assert canary.lines in ([line], []) and ops.findall(real[line - 1]) == ops.findall(copy[line - 1])
        assert len(real[line - 1]) == len(copy[line - 1])
    assert len({c.label for c in found}) == len(found)


def test_a_square_gives_every_copy_the_same_neighbourhood() -> None:
    """Issue 32, item 2: the real copy R and canaries A (changes a_t, one in each test), B (b_t) and AB:
    each copy has one other |A| changes away, one |B| away and one |A| + |B| away, so a forger that saw
    every copy cannot find R; every test changed in A is watched by A and AB."""
    written = rewrite(HIDDEN).source.splitlines()
    found = candidates("tests/test_calc.py", HIDDEN, {"test_add", "TestCalc::test_method"})
    by_test: dict[str, list[Canary]] = {}
    for canary in found:
        by_test.setdefault(canary.test, []).append(canary)
    a = [group[0] for group in by_test.values()]
    b = [group[1] for group in by_test.values() if len(group) > 1]
    made = square(a, b, HIDDEN)
    assert len(made) == 3 and sorted(made[0].tests) == sorted(by_test) and made[2].tests == made[0].tests
    assert set(made[2].lines) == {n for c in [*a, *b] for n in c.lines}
    copies = [written, *(c.source.splitlines() for c in made)]

    def changes(x: list[str], y: list[str]) -> int:
        return sum(p != q for p, q in zip(x, y, strict=True))

    profiles = [sorted(changes(copy, other) for other in copies if other is not copy) for copy in copies]
    assert all(profile == profiles[0] for profile in profiles), profiles


def test_values_drawn_at_random_cannot_be_worked_out_from_the_real_copy() -> None:
    """`tasks validate` draws canary values from the system's randomness: two draws differ (a forger that
    runs the public perturbation on its own copy does not find them)."""
    words = frozenset({"secret", "expect", "result", "answer", "target", "string"})
    draws = {perturbed("secret-expected-text 1234", words, random.Random(seed)) for seed in range(20)}
    assert len(draws) >= 4


def found_on(path: str) -> list[Canary]:
    return candidates(path, HIDDEN, {"test_add"})[:1]


def test_held_canaries_change_only_the_value_the_parent_holds() -> None:
    checks = rewrite(HIDDEN).checks
    made = held_canaries({"tests/test_calc.py": checks}, [])
    assert len(made) == 2 and len({c.test for c in made}) == 2
    for canary in made:
        assert canary.source == "" and canary.held is not None and canary.slots == [canary.held.slot]
    assert (
        held_canaries({"tests/test_calc.py": checks}, found_on("tests/test_calc.py")) == []
    )  # beside text ones
    for check in checks:
        changed = changed_expectation(check)
        assert changed is not None and changed.slot == check.slot
        meets = check.expected if check.kind in ("eq", "is") else ["str", "bad amount: 'x.1'"]
        if check.kind == "search":
            assert check.holds(encode("bad amount: 'x.1'"))
            meets = encode("bad amount: 'x.1'")
        assert check.holds(meets) and not changed.holds(meets), check


def test_the_stored_canaries_of_the_built_in_suites_are_made_by_todays_rules() -> None:
    root = Path(__file__).resolve().parents[2] / "tasks" / "suites"
    for suite in ("builtin", "demo"):
        for task in load_suite(str(root / suite)):
            for canary in task.hidden_tests.canaries:
                written = rewrite(task.hidden_tests.files[canary.file]).source
                assert (canary.lines or canary.slots) and canary.source != written, (task.id, canary.label)
                assert len(canary.source.splitlines()) == len(written.splitlines()), (task.id, canary.label)
