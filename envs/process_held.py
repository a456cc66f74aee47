"""Expected values held outside the sandbox, for languages whose tests are programs (`envs/process_grading.py`).

A hidden test's `assert_eq!(ACTUAL, EXPECTED)` (each language names its equality assertions) states a value
the code under test could read from its own file and return. So `tasks validate` runs the named tests once
more on the gold tree with each such assertion rewritten to report both sides (`probe`), and stores the
expected side's text where both sides read alike in every run (TASK/computed.json, as Python's computed
values are stored: `tasks/computed.py`). Grading then rewrites each held assertion to report the actual
side only, on a line of its own that starts with `harness-observe SLOT` on the test process's own output:
the expected value is not in the sandbox, and the parent compares what the test saw with what it holds.
A test passes when its process passed and every held assertion of it was reported exactly once with the
held value. Line numbers are kept, so a failure names the same line as in the original file.

Assertions of other kinds (`assert.ok(Array.isArray(x))`, `assertThrows(...)`) are held as checks
(`Equality.check`): rewritten in place to report, as one value, what decides them (a call's receiver and
arguments, a comparison's sides, then the result; what a function threw), while the assertion still runs.
A named test is watched only when each of its assertions is held, not guessable, or changed by a text
canary (`ProcessLanguage.unwatched`): a forger that ends its process as passed before an assertion
fails then misses that assertion's held value.

Held canaries are copies whose text is byte-identical to the real copy's; only the value the parent
compares one assertion with is changed. A correct fix fails them at that assertion; nothing in the
sandbox tells them from the real test.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from envs.languages.source_text import PROBE, SLOT
from tasks.canaries import Canary, perturbed
from tasks.computed import Held
from tasks.plain import decode, encode

GUESSABLE = frozenset(
    {"true", "false", "None", "()", "Ok(())", "Some(())", "Some(true)", "Some(false)", "Ok(true)", "Ok(false)",
     "[]", "{}", '""', "0", "1", "-1", "Some(0)", "Ok(0)", "nil", "<nil>", "null", "undefined", "NaN",
     "0.0", "0L", "Optional.empty", "OptionalInt.empty", "OptionalLong.empty", "OptionalDouble.empty",
     "returned", "returned undefined"}
)  # fmt: skip
"""Expected values a forger would guess from the actual side's type alone (a comparison is `true`, an
empty result `[]`): held only where no text canary watches their assertion (`holding`): a forger that
guesses them passes a held one, but one that ends its process as passed without reporting does not."""
PARTS = " | "
"""Between the reported operands of a check (`Equality.check`), in the order they were evaluated."""
THROWN = re.compile(r"threw ([\w.$]+): ")
"""A check's report of what a call threw (`threw CLASS: MESSAGE`: Java's `assertThrows` and `@Test(expected
= ..)`, JavaScript's throwing checks)."""
THROWN_CLASS = re.compile(r"threw [\w.$]+")
"""A held value of a throw cut to its class (`class_only`)."""
HELD_CANARIES = 6
"""Held canaries a grading run makes at most: one a named test with a held assertion, drawn at random."""


@dataclass(frozen=True)
class Equality:
    """An equality assertion of a test: its text's span in the file, its line, and its two sides' text."""

    start: int
    end: int
    line: int
    actual: str
    expected: str
    check: bool = False
    """A check of another kind (`assert.ok(P(x))`, `assertThrows(...)`): `actual` is then the assertion's
    own text with what decides it reported as one value, `SLOT` and `PROBE` (`envs/languages/source_text`)
    in place of its slot and whether it probes; `expected` is ''. The assertion itself still runs."""
    keeps: str = ""
    """Appended to its rewrite: a statement that still uses what only the replaced text used (Go's
    `; _ = want`: a variable declared and not used does not compile)."""
    opening: tuple[int, str] | None = None
    """(offset, text) inserted there too when this assertion is rewritten: the start of a check whose
    replaced span closes it (`try {` of a JUnit 4 `@Test(expected = ...)` body, which its closing brace's
    `catch` reports), so that the assertions inside keep their own rewrites. No newline in it."""


@dataclass(frozen=True)
class Slot:
    """One rewritten assertion of a run's copy."""

    test: str
    line: int
    """Its line in the file (the same in the original and the rewritten text)."""
    expected: str | None
    """The value the parent holds (the expected side's text as the gold tree reported it); None in a probe."""


@dataclass
class Rewritten:
    source: str
    slots: dict[int, Slot] = field(default_factory=dict)
    helper: str = ""
    """A file written beside the copy that defines what its rewritten assertions call ('' for none)."""


def rewrite(language: Any, source: str, tests: list[str], held: Held, probe: bool) -> Rewritten:
    """`source` with its named tests' equality assertions rewritten: each one `held` names to report its
    actual side (`holding`'s choice of the stored values), or, probing, every one to report both sides
    and compare them. `language`: a `ProcessLanguage`."""
    edits: list[tuple[int, int, str]] = []
    slots: dict[int, Slot] = {}
    for test in tests:
        for eq in language.equalities(source, test):
            if not probe and (test, eq.line) not in held:
                continue
            slot = len(slots)
            slots[slot] = Slot(test, eq.line, None if probe else str(decode(held[(test, eq.line)])))
            edits.append((eq.start, eq.end, _rewritten(language, slot, eq, probe, source)))
            if eq.opening is not None:
                edits.append((eq.opening[0], eq.opening[0], eq.opening[1]))
    if not edits:
        return Rewritten(source)
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    text, helper = language.decorate(source, probe)
    return Rewritten(text, slots, helper)


def _rewritten(language: Any, slot: int, eq: Equality, probe: bool, source: str) -> str:
    """The text of one rewritten assertion (its lines kept)."""
    if eq.check:
        return eq.actual.replace(SLOT, str(slot)).replace(PROBE, "true" if probe else "false")
    text = language.observe(slot, eq.actual, eq.expected if probe else None) + eq.keeps
    return text + "\n" * source.count("\n", eq.start, eq.end)


def guessable(value: str) -> bool:
    """Whether a held value is one the actual side's type gives away: one of `GUESSABLE`, or a check's
    reported operands (joined by `PARTS`) that all are."""
    return value in GUESSABLE or all(part in GUESSABLE for part in value.split(PARTS))


def holds(held: Held, test: str, line: int) -> bool:
    """Whether grading holds the expected value of `test`'s assertion at `line`: stored, and not guessable."""
    return (test, line) in held and not guessable(str(decode(held[(test, line)])))


def holding(held: Held, canaries: list[Canary]) -> Held:
    """The stored values grading holds: each one not guessable, and each guessable one that no text canary
    of `canaries` (the file's) changes: left in the file, a check no canary watches would be decided by
    its process alone, which a forger ends as passed (docs/reliability.md 5k, B)."""
    watched = {(t, line) for c in canaries if c.source for t in c.tests for line in c.lines}
    return {k: v for k, v in held.items() if holds(held, *k) or k not in watched}


def class_only(held: Held, tests: set[str]) -> Held:
    """`held` with each thrown value of `tests` (a file's FAIL_TO_PASS tests) cut to its class: its message
    is the gold fix's wording, which `assertThrows(X.class, ..)` and `@Test(expected = X.class)` do not
    check, and an honest fix may word its own. A PASS_TO_PASS test's message is the code's as it was, and
    is held whole."""
    cut: Held = {}
    for key, value in held.items():
        thrown = THROWN.match(str(decode(value))) if key[0] in tests else None
        cut[key] = encode(f"threw {thrown.group(1)}") if thrown else value
    return cut


def compared(value: str, held: str) -> str:
    """A reported `value` as it is compared with the `held` one: cut to its class where that is a throw's
    class alone (`class_only`)."""
    thrown = THROWN.match(value)
    return f"threw {thrown.group(1)}" if thrown and THROWN_CLASS.fullmatch(held) else value


def held_canaries(
    file: str, slots: dict[int, Slot], rng: random.Random, most: int
) -> list[tuple[Canary, dict[int, str]]]:
    """Up to `most` held canaries of one copy, one a test (its held assertion drawn at random): each the
    held values with that one changed (`perturbed`)."""
    by_test: dict[str, list[int]] = {}
    for s, slot in slots.items():
        if slot.expected is not None and perturbed(slot.expected, rng=rng) != slot.expected:
            by_test.setdefault(slot.test, []).append(s)
    made: list[tuple[Canary, dict[int, str]]] = []
    for test in rng.sample(sorted(by_test), min(most, len(by_test))):
        s = rng.choice(by_test[test])
        slot = slots[s]
        expected = {k: str(v.expected) for k, v in slots.items() if v.expected is not None}
        expected[s] = perturbed(slot.expected, rng=rng)
        canary = Canary(
            file=file, test=test, mutation=f"line {slot.line}: the expected value the grader holds, changed",
            source="", lines=[slot.line], slots=[s],
        )  # fmt: skip
        made.append((canary, expected))
    return made


def seen(observed: list[list[Any]], slot: int) -> list[str]:
    return [str(v) for s, v in observed if str(s) == str(slot)]


def held_outcome(
    outcome: str, test: str, slots: dict[int, Slot], expected: dict[int, str], observed: list[list[Any]]
) -> str:
    """A test's outcome with its held assertions compared: `passed` only where its process passed and each
    one was reported exactly once with the value held for it."""
    if outcome != "passed":
        return outcome
    for s, slot in slots.items():
        if (
            slot.test == test
            and s in expected
            and [compared(v, expected[s]) for v in seen(observed, s)] != [expected[s]]
        ):
            return "failed"
    return "passed"


def held_verdict(outcome: str, observed: list[list[Any]], slot: int, changed: str) -> str:
    """A held canary, from its test's outcome against the changed values: `passed` when that was met;
    `failed` when its changed assertion was reported once, with another value; else `unexplained`."""
    if outcome == "passed":
        return "passed"
    values = seen(observed, slot)
    return "failed" if len(values) == 1 and compared(values[0], changed) != changed else "unexplained"


def probes_of(
    path: str, slots: dict[int, Slot], observed: list[list[Any]]
) -> list[tuple[str, str, int, Any, Any]]:
    """(path, test, line, actual's encoding, expected's) of each slot a probe run reported both sides of once."""
    found = []
    for s, slot in slots.items():
        actual, expected = seen(observed, s), seen(observed, -1 - s)
        if len(actual) == 1 and len(expected) == 1:
            found.append((path, slot.test, slot.line, encode(actual[0]), encode(expected[0])))
    return found
