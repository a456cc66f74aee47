"""Held values of languages whose tests are programs (`envs/process_held.py`): checks of other kinds than
equality report what decides them, and a named test is watched only when every assertion of it is."""

from __future__ import annotations

import pytest

from envs.languages.java import JAVA
from envs.languages.javascript import JAVASCRIPT
from envs.process_grading import ProcessLanguage
from envs.process_held import Equality, Slot, class_only, guessable, held_outcome, held_verdict, rewrite
from tasks.canaries import Canary
from tasks.computed import ComputedFile, ComputedValue, digest
from tasks.model import Task
from tasks.plain import encode
from tasks.suite import load_suite

WRAP = "ts-003-wrap-exact-width"
FILE = "test/wrap.hidden.test.ts"
EMPTY = "empty text has no lines"


def with_held(task: Task, values: dict[int, str]) -> Task:
    """`task` with only `values` (line -> the value held) stored for the empty-text test of its file."""
    source = task.hidden_tests.files[FILE]
    held = [ComputedValue(test=EMPTY, line=n, expected=encode(v)) for n, v in values.items()]
    computed = {FILE: ComputedFile(sha256=digest(source), values=held)}
    return task.model_copy(
        update={"hidden_tests": task.hidden_tests.model_copy(update={"computed": computed})}
    )


def test_a_test_is_watched_only_when_each_of_its_assertions_is() -> None:
    """ts-003's empty-text test holds a list (its equality) and checks `Array.isArray(...)`: with the
    equality alone held it is unwatched (before, one held assertion made the test watched, red team 4);
    the check held with a value the type does not give away, or changed by a text canary, watches it;
    a guessable check (`[] | true`) does not."""
    task = next(t for t in load_suite("javascript") if t.id == WRAP)
    source = task.hidden_tests.files[FILE]
    equality, check = (e for e in JAVASCRIPT.equalities(source, EMPTY))
    assert not equality.check and check.check and "Array.isArray" in source.splitlines()[check.line - 1]
    test_id = f"{FILE}::{EMPTY}"
    assert test_id in JAVASCRIPT.unwatched(with_held(task, {equality.line: '["a b"]'}), [])
    both = with_held(task, {equality.line: '["a b"]', check.line: '["ab"] | true'})
    assert test_id not in JAVASCRIPT.unwatched(both, [])
    guessed = with_held(task, {equality.line: '["a b"]', check.line: "[] | true"})
    assert test_id in JAVASCRIPT.unwatched(guessed, [])
    changed = source.replace('" ab "', '" abc "')
    text = Canary(file=FILE, test=EMPTY, mutation="x", source=changed, lines=[check.line])
    assert test_id not in JAVASCRIPT.unwatched(with_held(task, {equality.line: '["a b"]'}), [text])


def test_guessable_checks() -> None:
    assert guessable("[] | true") and guessable("OptionalDouble.empty | true") and guessable("0")
    assert not guessable('["ab"] | true') and not guessable('threw tally.RpnException: "stack underflow"')


JS_CHECKS = {
    "assert.ok(Array.isArray(wrap(text, 5)))": "assert.ok(harness_check(S, P, Array.isArray(harness_tap(S, "
    "(wrap(text, 5))))))",
    "assert(\n  r.size > 2,\n  'm')": None,  # a range: an exact value would fail a correct fix within it
    "assert.ok(Math.abs(mean(xs) - 2.5) <= 1e-9)": None,
    "expect(mean(xs)).toBeCloseTo(2.5, 5)": None,
    "expect(r.size).not.toBeLessThan(3)": None,
    "assert.notStrictEqual(v4(), v4())": None,
    "assert.ok(r.size)": "assert.ok(harness_check(S, P, r.size))",
    "assert.throws(() => f(1), /x/)": "assert.throws(harness_thrown(S, P, () => f(1)), /x/)",
    "expect(() => f()).toThrow('x')": "expect(harness_thrown(S, P, () => f())).toThrow('x')",
    "assert.throws(() => f(1), RangeError)": 'assert.throws(harness_thrown(S, P, () => f(1), RangeError, "RangeError"), RangeError)',
    "expect(() => f()).toThrow(errors.Bad)": 'expect(harness_thrown(S, P, () => f(), errors.Bad, "errors.Bad"))'
    ".toThrow(errors.Bad)",
    "expect(() => f()).toThrow(\n  Bad,\n)": 'expect(harness_thrown(S, P, () => f(), Bad, "Bad")).toThrow(\n  Bad,\n)',
    "expect(() => f()).toThrow(make())": "expect(harness_thrown(S, P, () => f())).toThrow(make())",
    "expect(m.get('k')).toBeUndefined()": "expect(harness_check(S, P, harness_tap(S, (m)).get('k')))"
    ".toBeUndefined()",
    "assert.ok(!stack.isEmpty())": "assert.ok(harness_check(S, P, !harness_tap(S, (stack)).isEmpty()))",
    "assert.ok(a && b)": "assert.ok(harness_check(S, P, a && b))",
    "assert.ok(x === 5)": None,  # an equality whose value the text gives away
    "assert.fail('no')": None,
}
JAVA_CHECKS = {
    "assertTrue(Stats.median().isEmpty())": "assertTrue(HarnessObserve.check(S, P, HarnessObserve.tap(S, "
    "Stats.median()).isEmpty()))",
    'assertThrows(E.class, () -> Rpn.eval("1 0 /"))': "assertThrows(E.class, HarnessObserve.thrown(S, P, E.class, () "
    '-> Rpn.eval("1 0 /")))',
    'assertFalse("m", a.size() > 2)': None,  # a range
    "assertEquals(2.5, Stats.mean(xs), 1e-9)": None,  # a delta
    'assertEquals("m", 2.5, Stats.mean(xs), 1e-9)': None,
    "assertNotEquals(a, b)": None,
    'assertEquals(2.5, Stats.mean(xs), "m")': 'assertEquals(2.5, HarnessObserve.check(S, P, Stats.mean(HarnessObserve.tap(S, xs))), "m")',
    "assertSame(a, b)": "assertSame(HarnessObserve.tap(S, a), HarnessObserve.check(S, P, b))",
    'assertTrue(s.equals("a"))': None,
    'fail("no")': None,
}


@pytest.mark.parametrize(("language", "cases"), [(JAVASCRIPT, JS_CHECKS), (JAVA, JAVA_CHECKS)])
def test_checks_report_what_decides_them_in_place(
    language: ProcessLanguage, cases: dict[str, str | None]
) -> None:
    """Each non-equality assertion keeps its text and lines, with its operands reported in place: a call's
    receiver and arguments, a comparison's sides, what a throwing check's function threw."""
    for call, expected in cases.items():
        source = (
            "test('t', () => {\n" + call + ";\n});\n"
            if language is JAVASCRIPT
            else ("class T {\n    @Test\n    void t() {\n        " + call + ";\n    }\n}\n")
        )
        test = "t"
        found = [e for e in language.equalities(source, test) if e.check]
        shown = [e.actual.replace("\x00slot\x00", "S").replace("\x00probe\x00", "P") for e in found]
        assert shown == ([] if expected is None else [expected]), call
        if found:
            held = {(test, found[0].line): encode("v")}
            written = rewrite(language, source, [test], held, probe=False)
            body = written.source.split("\nfinal class HarnessObserve")[0]
            assert body.count("\n") == source.count("\n") and "check" not in str(written.slots)
            assert isinstance(found[0], Equality) and found[0].expected == ""


def test_a_fail_to_pass_tests_throw_is_held_by_its_class_alone() -> None:
    """The message a FAIL_TO_PASS test's throw carries is the gold fix's wording, which the test does not
    check: held by class, any message passes; a PASS_TO_PASS test's stays whole (the code's as it was)."""
    thrown = encode('threw tally.RpnException: "division by zero"')
    held = class_only({("fixed", 4): thrown, ("kept", 9): thrown, ("fixed", 6): encode("42")}, {"fixed"})
    assert held == {
        ("fixed", 4): encode("threw tally.RpnException"), ("kept", 9): thrown, ("fixed", 6): encode("42"),
    }  # fmt: skip
    slots = {0: Slot("fixed", 4, "threw tally.RpnException"), 1: Slot("kept", 9, str(thrown[1]))}
    expected = {s: str(v.expected) for s, v in slots.items()}
    reworded = [[0, 'threw tally.RpnException: "cannot divide by 0"'], [1, 'threw tally.RpnException: "x"']]
    assert held_outcome("passed", "fixed", slots, expected, reworded) == "passed"
    assert held_outcome("passed", "kept", slots, expected, reworded) == "failed"
    other = [[0, 'threw java.lang.ArithmeticException: "/ by zero"']]
    assert held_outcome("passed", "fixed", slots, expected, other) == "failed"
    assert held_verdict("failed", reworded, 0, "threw tally.RpnExceptioo") == "failed"
    assert held_verdict("failed", reworded, 0, "threw tally.RpnException") == "unexplained"
