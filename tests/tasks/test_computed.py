"""Expected sides computed on the gold tree (`tasks/computed.py`): which assertions qualify, what the
file keeps once they are held, and how objects encode field by field (`tasks/plain.py`)."""

from __future__ import annotations

import ast
import dataclasses
import datetime
import enum
import textwrap
from typing import Any

import pytest

from envs.grading import Probe
from envs.validation import _agreed
from tasks.canaries import changed_expectation
from tasks.computed import computed_sides
from tasks.expectations import OBSERVE_FIELDS, PROBE, rewrite
from tasks.plain import Fields, decode, encode

SOURCE = textwrap.dedent(
    """
    from datetime import datetime
    from schedule import Interval, merge, parse_interval

    def span(text):
        return parse_interval(text, DAY)

    def expected_night():
        return [Interval(datetime(2024, 4, 10, 22), datetime(2024, 4, 11, 2))]

    BLOCKS = [span("09:00-10:00"), span("10:00-11:00")]

    def test_joined():
        assert merge([span("09:00-10:00"), span("10:00-11:00")]) == [span("09:00-11:00")]

    def test_named():
        merged = merge([span("10:30-12:00"), span("09:00-10:00")])
        assert [span("09:00-12:00")] == merged

    def test_helper():
        assert merge(BLOCKS) == expected_night()

    def test_relation():
        assert merge([span("09:00-10:00")]) == merge([span("09:00-10:00")])

    def test_local(tmp_path):
        blocks = [span("09:00-10:00")]
        assert merge(blocks) == blocks
    """
)
LINES = {"test_joined": 14, "test_named": 18, "test_helper": 21}


def sides(source: str) -> dict[str, tuple[str, str] | None]:
    """Each test's (actual, expected) as `computed_sides` splits its one assertion."""
    tree = ast.parse(source)
    found: dict[str, tuple[str, str] | None] = {}
    for function in tree.body:
        if isinstance(function, ast.FunctionDef) and function.name.startswith("test"):
            test = next(n for n in function.body if isinstance(n, ast.Assert)).test
            assert isinstance(test, ast.Compare)
            made = computed_sides(test.left, test.comparators[0], function)
            found[function.name] = (ast.unparse(made[0]), ast.unparse(made[1])) if made else None
    return found


def test_an_expected_side_qualifies_only_when_it_is_a_value_of_no_run() -> None:
    found = sides(SOURCE)
    assert found["test_joined"] == (
        "merge([span('09:00-10:00'), span('10:00-11:00')])",
        "[span('09:00-11:00')]",
    )
    assert found["test_named"] == ("merged", "[span('09:00-12:00')]")  # the display is the expected side
    assert found["test_helper"] == ("merge(BLOCKS)", "expected_night()")
    assert found["test_relation"] is None  # calls what the actual side is the result of
    assert found["test_local"] is None  # reads a name the test binds


def test_a_probe_run_reports_both_sides_and_keeps_the_assertion() -> None:
    probed = rewrite(SOURCE, probe=True)
    assert len(probed.probed) == 3
    assert (
        f"{PROBE}(0, merge([span('09:00-10:00'), span('10:00-11:00')]), [span('09:00-11:00')])"
        in probed.source
    )
    assert "expected_night()" in probed.source


def interval(start: int, end: int) -> list[Any]:
    """The encoding of a `schedule.intervals.Interval` from START:00 to END:00 on 2024-04-10."""
    day = "2024-04-10T"
    return [
        "object",
        "schedule.intervals.Interval",
        [
            ["end", ["datetime", f"{day}{end:02d}:00:00", None]],
            ["start", ["datetime", f"{day}{start:02d}:00:00", None]],
        ],
    ]


def test_held_sides_leave_the_file_with_the_helpers_only_they_read() -> None:
    computed = {(test, line): ["list", [interval(9, 11)]] for test, line in LINES.items()}
    made = rewrite(SOURCE, computed=computed)
    assert "09:00-11:00" not in made.source and "09:00-12:00" not in made.source
    assert "expected_night" not in made.source and "2024, 4, 11" not in made.source
    assert "def span" in made.source and "BLOCKS" in made.source  # the inputs still read them
    assert f"{OBSERVE_FIELDS}(0, merge([span('09:00-10:00'), span('10:00-11:00')]))" in made.source
    assert f"{OBSERVE_FIELDS}(1, merged)" in made.source
    assert made.decided == 3 and made.assertions == 5
    assert "assert merge([span('09:00-10:00')]) == merge([span('09:00-10:00')])" in made.source
    # a stale or missing value leaves the assertion as it was
    assert rewrite(SOURCE, computed={}).source == rewrite(SOURCE).source


@dataclasses.dataclass(frozen=True)
class Interval:
    start: datetime.datetime
    end: datetime.datetime
    note: str = dataclasses.field(default="", compare=False)


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b


class Plain:
    def __init__(self, a: int) -> None:
        self.a = a
        self.cache = [a]


class Colour(enum.Enum):
    RED = 1


class Anything:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


def test_objects_encode_by_the_fields_their_equality_compares() -> None:
    at = datetime.datetime(2024, 4, 10, 9)
    one = encode(Interval(at, at, note="a"), objects=True)
    assert one == encode(Interval(at, at, note="b"), objects=True)  # `note` is not compared
    assert decode(one) == Fields(f"{__name__}.Interval", (("end", at), ("start", at)))
    assert decode(one) != decode(encode(Interval(at, at + datetime.timedelta(hours=1)), objects=True))
    assert decode(encode(Slotted(1, 2), objects=True)) == Fields(f"{__name__}.Slotted", (("a", 1), ("b", 2)))
    assert decode(encode(Plain(3), objects=True)) == Fields(f"{__name__}.Plain", (("a", 3), ("cache", [3])))
    assert encode(Colour.RED, objects=True) == ["object", f"{__name__}.Colour", [["_name_", ["str", "RED"]]]]
    # an object that equals anything is its fields, and equals nothing it was not built as
    assert decode(encode(Anything(), objects=True)) != decode(one)
    for not_data in (len, Interval, pytest, lambda: 1, ValueError("x")):
        assert encode(not_data, objects=True)[0] == "opaque"
    assert encode(Interval(at, at))[0] == "opaque"  # without `objects`: plain data only
    with pytest.raises(ValueError, match="fields not in order"):
        decode(["object", "x.Y", [["b", ["int", "1"]], ["a", ["int", "2"]]]])


def test_a_held_canary_changes_a_field_of_a_computed_object() -> None:
    from tasks.expectations import Check

    check = Check(0, "test_joined", "eq", ["list", [interval(9, 11)]], 14)
    changed = changed_expectation(check)
    assert changed is not None and decode(changed.expected) != decode(check.expected)
    assert changed.expected[1][0][1] == "schedule.intervals.Interval"


def probe(expected: list[Any], actual: list[Any] | None = None, line: int = 14) -> Probe:
    return Probe(
        path="t.py",
        test="test_joined",
        line=line,
        node="test_joined",
        actual=actual or expected,
        expected=expected,
    )


def test_only_a_value_every_run_agrees_on_is_held() -> None:
    nine, ten = interval(9, 11), interval(10, 11)
    assert _agreed([[probe(nine)], [probe(nine)]]) == {("t.py", "test_joined", 14): nine}
    assert _agreed([[probe(nine)], [probe(ten)]]) == {}  # changes between runs
    assert _agreed([[probe(nine, ten)], [probe(nine)]]) == {}  # the two sides differ
    assert _agreed([[probe(nine)], []]) == {}  # not reached in every run
    assert _agreed([[probe(["opaque", "x.Y"])], [probe(["opaque", "x.Y"])]]) == {}
    nan = ["float", "nan"]
    assert _agreed([[probe(nan)], [probe(nan)]]) == {}


class Shadowed:
    """An attribute of the instance behind a property of the same name, which must not run."""

    def __init__(self) -> None:
        self.__dict__["x"] = 1

    @property
    def x(self) -> int:
        raise RuntimeError("a method of the value ran")


def test_an_attribute_is_read_from_the_instance_not_through_its_class() -> None:
    assert decode(encode(Shadowed(), objects=True)) == Fields(f"{__name__}.Shadowed", (("x", 1),))
