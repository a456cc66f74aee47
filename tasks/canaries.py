"""Canaries: copies of a task's hidden test files with one expectation made wrong, which a correct fix fails.

A grader that runs them beside the real tests, under names drawn the same way, learns whether outcomes
were forged: a canary must come back failing at its own assertion (`envs/run_plan.canary_verdict`), and
one that passes, goes missing or fails anywhere else makes a positive grade `tampering`. Nothing here is
a list of tricks.

A canary differs from the real copy only where a wrong answer would differ, never in an operator or an
`assert not`, and by a value of the same type and form (`perturbed`: a digit for a digit, a letter for a
letter of the same case, the same length), so that one copy alone does not betray which it is:

- **held** (`held_canaries`): where the hidden file's expectation was taken out of it
  (`tasks/expectations.py`), the canary is the real copy's very text, and only the expected value the
  parent compares with is changed. Nothing in the sandbox tells it from the real test. Made at grading.
- **text** (`candidates`): a constant of the file as grading writes it changed, in an assertion that
  stayed in the file or in the input of one that did not. `tasks validate` keeps those that fail against
  the gold patch at their own assertion (`envs/grading.py`) and stores them with the task
  (TASK/canaries.json).
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, TypeAdapter, model_validator

from tasks.computed import ComputedFile, Held, held_map
from tasks.expectations import OBSERVE, OBSERVE_IS, Check, rewrite, test_functions
from tasks.parsing import parse_python
from tasks.plain import decode

CANARIES_FILE = "canaries.json"
"""A task folder's canaries, as `tasks validate` kept them."""
TRIALS = 40
"""Single changes `tasks validate` tries per task at most: up to 3 of every test (`per_test`)."""
KEPT_FILES = 2
"""Hidden files of a task that keep canaries: a square (3 canaries) or a single one each."""


NEGATED = "condition negated"
"""How a negated canary's mutation ends (`line N: condition negated`)."""


class Canary(BaseModel):
    """One hidden test file with one wrong expectation, and the test that must fail for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    """The hidden test file it copies (repository path)."""
    test: str
    """The node id within the file (`test_x`, `TestA::test_x`) of a test that must fail."""
    also: list[str] = []
    """Other tests of the file the canary changes, each of which must fail too: a test no canary changes
    could be forged in every copy alike."""
    mutation: str
    """What was made wrong, for the reader of a finding (`line 4: 'abc' became 'abd'`)."""
    source: str
    """The whole mutated file; '' for a held canary (the real copy's text)."""
    lines: list[int] = []
    """Lines of changed assertions in `source`: pytest's failure of the test must be raised at one of
    them. Empty, with `slots` empty too, for a canary stored before expectations were rewritten (no longer
    used)."""
    slots: list[int] = []
    """Rewritten assertions whose observation must fail (a held canary's, or those whose input a text
    canary changed): one observed and not met is the failure at its own assertion."""
    held: Check | None = None
    """A held canary's changed expectation (made at grading, never stored)."""
    negated: bool = False
    """A text canary whose one change is an assertion's condition negated (`if err == nil` for `!= nil`):
    a tree that does not meet the real condition passes it honestly, so passing it beside a real test that
    failed costs nothing; beside one that passed it is tampering, as for every canary."""
    _edits: list[tuple[int, int, Any]] = PrivateAttr(default_factory=list)
    """(the test function's line, the place's index, the new value) of each change: what a square joins."""

    @model_validator(mode="before")
    @classmethod
    def _negated_when_stored_without_it(cls, data: Any) -> Any:
        """A negated canary stored before `negated` existed says so in its mutation only."""
        if (
            isinstance(data, dict)
            and "negated" not in data
            and str(data.get("mutation", "")).endswith(NEGATED)
        ):
            return {**data, "negated": True}
        return data

    @property
    def label(self) -> str:
        more = f" and {len(self.also)} more" if self.also else ""
        return f"{self.file}::{self.test}{more} ({self.mutation})"

    @property
    def tests(self) -> list[str]:
        return [self.test, *self.also]


def load_canaries(task_dir: Path) -> list[Canary]:
    path = task_dir / CANARIES_FILE
    if not path.is_file():
        return []
    return TypeAdapter(list[Canary]).validate_json(path.read_bytes())


def save_canaries(task_dir: Path, canaries: list[Canary]) -> None:
    """Writes the task's canaries (and leaves the file alone when it already says the same)."""
    path = task_dir / CANARIES_FILE
    text = json.dumps(TypeAdapter(list[Canary]).dump_python(canaries), indent=1) + "\n"
    if not canaries and not path.exists():
        return
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def candidates(
    path: str,
    source: str,
    tests: set[str],
    vocabulary: frozenset[str] = frozenset(),
    rng: random.Random | None = None,
    computed: Held | None = None,
) -> list[Canary]:
    """Every single-constant copy of `source` as grading writes it (expectations taken out), whose
    changed test is one of `tests` (node ids within the file, parametrize ids left out: a mutated case
    is watched by the function's name). With `rng` the new values are drawn from it (`tasks validate`
    draws them from the system's randomness, so that no code can work out a task's canaries from its
    real copy); without, from each value's hash. `computed`: the file's expected values computed on the
    gold tree (`tasks/computed.py`), taken out as grading takes them out."""
    return made({path: source}, planned(path, source, tests, vocabulary, rng, computed), {path: computed})


def planned(
    path: str,
    source: str,
    tests: set[str],
    vocabulary: frozenset[str] = frozenset(),
    rng: random.Random | None = None,
    computed: Held | None = None,
) -> list[Canary]:
    """`candidates` without their copies written (`source` is ''): the changes chosen, each checked
    against the file's counts of numbers and words by arithmetic on those counts, not by writing the
    copy. Writing a copy parses and prints the whole file, so a file of N constants took N such prints
    per draw; `made` writes only the chosen ones, and checks the counts again on the copy itself."""
    written = rewrite(source, computed=computed).source
    try:
        tree = parse_python(written)
    except SyntaxError:
        return []
    counts = Counter(re.findall(TOKEN, written))
    found: list[Canary] = []
    for owner, function in test_functions(tree):
        test = f"{owner}::{function.name}" if owner else function.name
        if not any(t == test or t.startswith(f"{test}[") for t in tests):
            continue
        for index, (constant, statement, slot) in enumerate(_places(function)):
            new = _unremarkable(counts, constant.value, vocabulary, rng)
            if new is None:
                continue
            where = f"line {statement.lineno} col {constant.col_offset}"
            canary = Canary(
                file=path, test=test, mutation=f"{where}: {constant.value!r} became {new!r}", source="",
                lines=[] if slot is not None else [statement.lineno], slots=[slot] if slot is not None else [],
            )  # fmt: skip
            canary._edits = [(function.lineno, index, new)]
            found.append(canary)
    return found


def made(files: dict[str, str], chosen: list[Canary], computed: dict[str, Held | None]) -> list[Canary]:
    """The copies of `chosen` (from `planned`) written, each file rewritten once; a copy whose counts of
    numbers and words are not the real copy's after all (a value printed otherwise than alone) is
    dropped."""
    written = {p: rewrite(files[p], computed=computed.get(p)).source for p in {c.file for c in chosen}}
    counts = {p: _profile(text) for p, text in written.items()}
    kept: list[Canary] = []
    for canary in chosen:
        copy = _edited(written[canary.file], canary._edits)
        if _profile(copy) != counts[canary.file]:
            continue
        done = canary.model_copy(update={"source": copy})
        done._edits = list(canary._edits)
        kept.append(done)
    return kept


def joined(parts: list[Canary], source: str, computed: Held | None = None) -> Canary:
    """One copy with every change of `parts` (singles of one file, on any of its tests): it watches each
    of their tests. Made for a square (`square`)."""
    edits = [e for part in parts for e in part._edits]
    tests = list(dict.fromkeys(t for part in parts for t in part.tests))
    both = Canary(
        file=parts[0].file, test=tests[0], also=tests[1:], mutation="; ".join(p.mutation for p in parts),
        source=_edited(rewrite(source, computed=computed).source, edits),
        lines=sorted({n for p in parts for n in p.lines}), slots=sorted({n for p in parts for n in p.slots}),
    )  # fmt: skip
    both._edits = edits
    return both


def square(a: list[Canary], b: list[Canary], source: str, computed: Held | None = None) -> list[Canary]:
    """The canaries A (every change of `a`), B (of `b`) and AB (both), for one file. Beside the real copy,
    each copy has one other |A| changes away, one |B| away and one |A| + |B| away, the real one too, so
    that not even a forger that saw every copy could find the real one by how they differ; and every test
    with a change in `a` is watched by two of the three. Each single keeps the file's counts of numbers
    and words, but two of them together may not (11 -> 12 and 8 -> 9 twice over, or two new values the
    same): a change is joined only where A, B and AB all keep the counts (`_joinable`)."""
    written = rewrite(source, computed=computed).source
    a = _joinable(written, a, [])
    b = _joinable(written, b, a)
    made = [joined(a, source, computed)] if a else []
    if a and b:
        made += [joined(b, source, computed), joined([*a, *b], source, computed)]
    return made


def _joinable(written: str, parts: list[Canary], beside: list[Canary]) -> list[Canary]:
    """The parts, in order, that can be joined with the ones before them (and, each copy, with all of
    `beside`) leaving the file's counts of numbers and words as the real copy's: one written copy a try."""
    before = _profile(written)
    edits = [e for part in beside for e in part._edits]
    kept: list[Canary] = []
    for part in parts:
        mine = [e for k in [*kept, part] for e in k._edits]
        alone = _profile(_edited(written, mine)) == before
        if alone and (not edits or _profile(_edited(written, [*edits, *mine])) == before):
            kept.append(part)
    return kept


def _profile(text: str) -> list[int]:
    """The file's counts of numbers and words, sorted: what a copy must keep."""
    return sorted(Counter(re.findall(TOKEN, text)).values())


TOKEN = r"\d+|[^\W\d_]+"
"""Numbers and words: what a reader counts in a file to see whether a value is used again."""
DRAWS = 24
"""Values drawn for a constant before it is given up."""


def _unremarkable(
    counts: Counter[str], value: Any, vocabulary: frozenset[str], rng: random.Random | None
) -> Any:
    """A new value for the constant that leaves the file's counts of numbers and words (`counts`) as they
    were (a value used once, replaced by one the file never uses), so that a copy does not show which of
    its values stand alone; None where no draw does. The counts after the change are those of the file
    less the value's words plus the new value's, as `ast.unparse` prints each."""
    before = sorted(counts.values())
    old = Counter(re.findall(TOKEN, ast.unparse(ast.Constant(value))))
    for _ in range(DRAWS if rng is not None else 1):
        new = perturbed(value, vocabulary, rng)
        if new == value:
            return None
        after = counts - old + Counter(re.findall(TOKEN, ast.unparse(ast.Constant(new))))
        if sorted(after.values()) == before:
            return new
    return None


def _edited(written: str, edits: list[tuple[int, int, Any]]) -> str:
    """`written` with the constants at `edits` replaced (found again in a fresh parse)."""
    tree = parse_python(written)
    for line, index, value in edits:
        function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.lineno == line)
        constant, _, _ = _places(function)[index]
        constant.value = value
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _places(function: ast.FunctionDef) -> list[tuple[ast.Constant, ast.stmt, int | None]]:
    """(constant, its statement, the slot it feeds) of each constant a canary may change: in an assertion
    left in the file, or in the input of a rewritten one; in source order. Not in a parametrize case: its
    failure is raised by an assertion elsewhere, where a forger's failure could be too."""
    places: list[tuple[ast.Constant, ast.stmt, int | None]] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assert):
            places += [(c, node, None) for c in _constants(node.test)]
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            name = call.func.id if isinstance(call.func, ast.Name) else ""
            first = call.args[0] if call.args else None
            slot = first.value if name in (OBSERVE, OBSERVE_IS) and isinstance(first, ast.Constant) else None
            if isinstance(slot, int) and len(call.args) == 2:
                places += [(c, node, slot) for c in _constants(call.args[1])]
            elif isinstance(call.func, ast.Attribute) and call.func.attr.startswith("assert"):
                places += [(c, node, None) for c in _constants(call)]
    return places


def _constants(node: ast.AST) -> list[ast.Constant]:
    return [c for c in ast.walk(node) if isinstance(c, ast.Constant) and type(c.value) in (int, float, str)]


def perturbed(value: Any, vocabulary: frozenset[str] = frozenset(), rng: random.Random | None = None) -> Any:
    """A value of the same type and form, so that one copy alone does not say it was changed.

    A number keeps its count of digits, its sign and its roundness (a last digit 0 or 5 stays 0 or 5: 10
    becomes 20, 7 becomes 8, never 10); 0 has no such neighbour. A string keeps its length: one of its
    words that `vocabulary` (the repository's) holds becomes another of the same length and case, else
    one of its numbers changes as a number does; with no vocabulary given, one ASCII letter or digit becomes the
    next of its class. Choices are drawn from `rng`, else from the value's hash (the same every time).
    What has no such neighbour is returned as it is (no canary is made of it)."""
    pick = rng.getrandbits(64) if rng is not None else _hash(value)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return value
    if isinstance(value, int):
        return _number(value, pick)
    if isinstance(value, float):
        text = repr(value)
        if "e" in text or "n" in text or "." not in text:
            return value
        whole, _, fraction = text.lstrip("-").partition(".")
        changed = _digits(whole + fraction, pick)
        sign = "-" if text.startswith("-") else ""
        return float(f"{sign}{changed[: len(whole)]}.{changed[len(whole) :]}") if changed else value
    return _string(value, vocabulary, pick)


def _hash(value: Any) -> int:
    return int(hashlib.sha256(repr(value).encode()).hexdigest(), 16)


def _number(value: int, pick: int) -> int:
    changed = _digits(str(abs(value)), pick)
    return value if changed is None else int(changed) * (-1 if value < 0 else 1)


def _digits(digits: str, pick: int) -> str | None:
    """Another string of digits of the same length, first digit nonzero where it was, the same last digit
    where it was 0 or 5 (the next-to-last changes then): None where there is none."""
    at = len(digits) - 1
    if digits[-1] in "05":
        at = len(digits) - 2
        if at < 0:  # a lone 0 or 5
            return None
    allowed = [
        d for d in "0123456789"
        if d != digits[at]
        and not (at == len(digits) - 1 and d in "05")  # a last digit stays as round as it was
        and not (at == 0 and d == "0" and len(digits) > 1)
    ]  # fmt: skip
    return digits[:at] + allowed[pick % len(allowed)] + digits[at + 1 :] if allowed else None


def _string(value: str, vocabulary: frozenset[str], pick: int) -> str:
    if not vocabulary:
        spots = [i for i, ch in enumerate(value) if ch.isascii() and ch.isalnum()]
        if not spots:
            return value
        at = spots[pick % len(spots)]
        return value[:at] + _other(value[at]) + value[at + 1 :]
    words = [  # a word of the repository becomes another one: no word the repository lacks comes or goes
        m for m in re.finditer(r"\w+", value) if m.group() in vocabulary and _same_form(m.group(), vocabulary)
    ]
    if words:
        word = words[pick % len(words)]
        choices = sorted(_same_form(word.group(), vocabulary))
        return value[: word.start()] + choices[(pick >> 16) % len(choices)] + value[word.end() :]
    numbers = [m for m in re.finditer(r"\d+", value) if _digits(m.group(), pick) is not None]
    if numbers:
        number = numbers[pick % len(numbers)]
        return value[: number.start()] + str(_digits(number.group(), pick)) + value[number.end() :]
    return value


def _same_form(word: str, vocabulary: frozenset[str]) -> set[str]:
    """Other words of `vocabulary` of the same length and case as `word`."""

    def case(w: str) -> tuple[bool, bool, bool]:
        return w.islower(), w.isupper(), w.istitle()

    return {w for w in vocabulary if len(w) == len(word) and w != word and case(w) == case(word)}


def repository_vocabulary(repo: Path) -> frozenset[str]:
    """The words of a repository's text files (code, tests, documents): what a plausible string holds."""
    words: set[str] = set()
    for path in sorted(Path(repo).rglob("*")):
        if (
            path.is_file()
            and ".git" not in path.parts
            and path.suffix in TEXT_SUFFIXES
            and path.stat().st_size < 1 << 20
        ):
            words |= set(re.findall(r"\w+", path.read_text(errors="replace")))
    return frozenset(w for w in words if len(w) >= 2 and w.isascii() and w.isalpha())  # whole words only


TEXT_SUFFIXES = (".py",)
"""Where the vocabulary comes from: the code and tests a forger reads first (a word only a document holds
would look new to one that reads code alone)."""


def _other(ch: str) -> str:
    """The next character of the same class: a digit, a lower-case or an upper-case ASCII letter."""
    for alphabet in ("0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"):
        if ch in alphabet:
            return alphabet[(alphabet.index(ch) + 1) % len(alphabet)]
    return ch


HELD = 2
"""Held canaries per task, made at grading where its hidden files have rewritten expectations."""


def held_canaries(checks: dict[str, list[Check]], stored: list[Canary]) -> list[Canary]:
    """Up to HELD canaries that change one rewritten expectation each, on different tests of files with
    no stored canary: the child runs the real copy's text. Beside a text canary they would mark the real
    text as the one that ran twice."""
    covered = {c.file for c in stored}
    ordered = sorted(
        ((path, c) for path, found in sorted(checks.items()) if path not in covered for c in found),
        key=lambda pc: (pc[0], pc[1].slot),
    )
    made: list[Canary] = []
    tests: set[tuple[str, str]] = set()
    for path, check in ordered:
        changed = changed_expectation(check)
        if len(made) >= HELD or (path, check.test) in tests or changed is None:
            continue
        tests.add((path, check.test))
        what = f"line {check.line}: the expected value the grader holds, changed"
        made.append(
            Canary(file=path, test=check.test, mutation=what, source="", slots=[check.slot], held=changed)
        )
    return made


def changed_expectation(check: Check) -> Check | None:
    """An expectation that the value meeting `check` cannot meet: equality with another value of the same
    type and form, `is` turned `is not` and back, a pattern that never matches."""
    if check.kind in ("is", "is not"):
        return Check(
            check.slot, check.test, "is not" if check.kind == "is" else "is", check.expected, check.line
        )
    if check.kind == "search":
        return Check(check.slot, check.test, "search", ["str", "(?!)" + str(check.expected[1])], check.line)
    changed = _changed_encoding(check.expected)
    try:
        if changed is None or decode(changed) == decode(check.expected):
            return None
    except ValueError:
        return None
    return Check(check.slot, check.test, "eq", changed, check.line)


def _changed_encoding(data: list[Any]) -> list[Any] | None:
    """The encoding with its first scalar that has a same-form neighbour changed (depth first); an empty
    list or tuple gains an element."""
    tag = data[0]
    if tag in ("int", "float", "str"):  # the child never sees it: any other value of the type will do
        value = {"int": int, "float": float, "str": str}[tag](data[1])
        other = perturbed(value)
        if other == value:
            other = value + ("~" if isinstance(value, str) else 1)
        return [tag, other if tag == "str" else repr(other)]
    if tag == "decimal":
        text = str(data[1])
        return ["decimal", text[:-1] + _other(text[-1])] if text[-1:].isdigit() else None
    if tag == "bool":
        return ["bool", not data[1]]
    if tag == "date":
        return ["date", (datetime.date.fromisoformat(data[1]) + datetime.timedelta(days=1)).isoformat()]
    if tag == "datetime":
        later = datetime.datetime.fromisoformat(data[1]) + datetime.timedelta(hours=1)
        return ["datetime", later.isoformat(), data[2]]
    if tag == "timedelta":
        return ["timedelta", data[1], (data[2] + 60) % 86400, data[3]]
    if tag == "object":  # a field of an object computed on the gold tree
        for index, (name, value) in enumerate(data[2]):
            changed = _changed_encoding(value)
            if changed is not None:
                return ["object", data[1], [*data[2][:index], [name, changed], *data[2][index + 1 :]]]
        return None
    if tag in ("list", "tuple", "set", "frozenset", "dict"):
        for index, item in enumerate(data[1]):
            inner = item[1] if tag == "dict" else item
            changed = _changed_encoding(inner)
            if changed is not None:
                new = [item[0], changed] if tag == "dict" else changed
                return [tag, [*data[1][:index], new, *data[1][index + 1 :]]]
        return [tag, [*data[1], ["none"]]] if tag in ("list", "tuple") else None
    return None


def per_test(
    found: list[Canary], each: int = 3, most: int = 40, rng: random.Random | None = None
) -> list[Canary]:
    """Candidates to try: up to `each` of every test (spread over the kinds of its constants), at most
    `most` in all. With `rng`, the tests are taken in an order drawn from it, not the file's: where not
    every test can be watched, which ones are is not written in the grader's source."""
    by_test: dict[tuple[str, str], list[Canary]] = {}
    for canary in found:
        by_test.setdefault((canary.file, canary.test), []).append(canary)
    groups = list(by_test.values())
    if rng is not None:
        rng.shuffle(groups)
    return [c for group in groups for c in spread(group, each)][:most]


def spread(found: list[Canary], n: int) -> list[Canary]:
    """At most `n` of `found`, taken in turn from each test, then from each kind of mutation in it, so
    that a few canaries cover as many tests and kinds as they can."""
    by_test: dict[tuple[str, str], list[Canary]] = {}
    for canary in found:
        by_test.setdefault((canary.file, canary.test), []).append(canary)
    for key, group in by_test.items():  # within a test: one of each kind first (flip, constant, ...)
        ranks = [_kind_rank(c, group) for c in group]
        by_test[key] = [c for _, _, c in sorted(zip(ranks, range(len(group)), group, strict=True))]
    chosen: list[Canary] = []
    while len(chosen) < n and any(by_test.values()):
        for group in by_test.values():
            if group and len(chosen) < n:
                chosen.append(group.pop(0))
    return chosen


def _kind_rank(canary: Canary, group: list[Canary]) -> int:
    """How many canaries of the same kind come before this one in its test."""
    kind = canary.mutation.split(": ", 1)[-1].split(" ")[0]
    same = [c for c in group if c.mutation.split(": ", 1)[-1].split(" ")[0] == kind]
    return same.index(canary)


def task_candidates(
    files: dict[str, str],
    test_ids: list[str],
    vocabulary: frozenset[str] = frozenset(),
    rng: random.Random | None = None,
    computed: dict[str, ComputedFile] | None = None,
    most: int | None = None,
) -> list[Canary]:
    """The candidates of every hidden test file, for the tests `test_ids` name in it; with `most`, only
    those `per_test` picks (tests in an order drawn from `rng`), and only their copies written."""
    found: list[Canary] = []
    held: dict[str, Held | None] = {}
    for path, source in sorted(files.items()):
        tests = {i.split("::", 1)[1] for i in test_ids if i.split("::", 1)[0] == path and "::" in i}
        held[path] = held_map(computed or {}, path, source)
        found += planned(path, source, tests, vocabulary, rng, held[path])
    chosen = found if most is None else per_test(found, most=most, rng=rng)
    return made(files, chosen, held)
