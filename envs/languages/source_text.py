"""Reading C-family source text (Rust, Go, Java, JavaScript) without a parser: brackets matched past
strings and line comments, a call's arguments split at its top-level commas."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass


def closing(source: str, start: int, open_: str, close: str) -> int:
    """The index just past the bracket that closes the one at `start`, skipping strings and comments."""
    depth, i = 0, start
    while i < len(source):
        ch = source[i]
        if ch == '"':
            i = string_end(source, i)
            continue
        if source.startswith("//", i):
            i = source.find("\n", i)
            i = len(source) if i < 0 else i
            continue
        if ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(source)


def string_end(source: str, start: int) -> int:
    i = start + 1
    while i < len(source) and source[i] != '"':
        i += 2 if source[i] == "\\" else 1
    return i + 1


def arguments(text: str) -> list[str]:
    """A macro call's arguments (`text` between its parentheses), split at the commas outside brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i = string_end(text, i)
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    return [*parts, text[start:]] if text[start:].strip() else parts


Skip = Callable[[str, int], int]
"""(text, i) -> the index past a string or comment that starts at `i`; `i` when none does."""
SLOT = "\x00slot\x00"
"""Where a check's slot number goes in its rewritten text (`envs/process_held.Equality.check`)."""
PROBE = "\x00probe\x00"
"""Where `true` (probing) or `false` goes in a check's rewritten text."""


@dataclass(frozen=True)
class Tapping:
    """How a language's checks report what decides them (`tapped`)."""

    skip: Skip
    tap: str
    """The call that reports an operand's value and returns it, `{}` its text."""
    literal: re.Pattern[str]
    """An operand that needs no report: a literal, a lambda, a class literal."""
    comparisons: re.Pattern[str]
    """A comparison operator in a masked expression (`mask`)."""
    no_split: re.Pattern[str]
    """What makes a masked expression too complex to split: logical, bitwise, conditional, assignment
    operators and arrows."""


def mask(text: str, skip: Skip) -> str:
    """`text` with every character inside a string, a comment or brackets (and the brackets) blanked."""
    out, depth, i = [" "] * len(text), 0, 0
    while i < len(text):
        if (past := skip(text, i)) != i:
            i = past
            continue
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
        elif depth == 0:
            out[i] = text[i]
        i += 1
    return "".join(out)


def literal_spans(text: str, skip: Skip) -> list[tuple[int, int]]:
    """(start, end) of each string, character literal and comment of `text` (`skip` says where one ends)."""
    spans, i = [], 0
    while i < len(text):
        past = skip(text, i)
        if past != i:
            spans.append((i, past))
        i = max(past, i + 1)
    return spans


def split_arguments(text: str, skip: Skip) -> list[tuple[int, int]]:
    """The (start, end) of each argument of `text` (what is between a call's parentheses)."""
    commas = [i for i, ch in enumerate(mask(text, skip)) if ch == ","]
    bounds = [-1, *commas, len(text)]
    spans = [(a + 1, b) for a, b in itertools.pairwise(bounds)]
    return [] if not text.strip() else spans


def operand(text: str, t: Tapping) -> str:
    """`text` (an operand, with its spaces) reported by `t.tap`, unless a literal."""
    inner = text.strip()
    if not inner or t.literal.fullmatch(inner):
        return text
    at = text.index(inner)
    return text[:at] + t.tap.replace("{}", inner) + text[at + len(inner) :]


CHAIN = re.compile(r"[\w$]+(?:\s*\.\s*[\w$]+|\s+(?=\.))*")
"""A masked callee: names joined by dots, brackets blanked (`foo(1).bar` reads `foo   .bar`)."""
NAMESPACE = re.compile(r"(?:[\w$]+\s*\.\s*)*[A-Z][\w$]*(?:\s*\.\s*[\w$]+)*")
"""A receiver that names a class or namespace (`Math`, `java.util.Objects`), not a value."""


EQUALS = re.compile(r"===?|!==?")
"""The comparisons that state a value: against a literal, the check is an equality whose value the text
gives away."""


def given_away(expr: str, t: Tapping) -> bool:
    """Whether `expr` compares a value with a literal for (in)equality (`x === 5`, `x.equals("a")`): what
    it reports is in the test's text, as an expected value left in the file would be."""
    body = expr.strip().lstrip("!").strip()
    shown = mask(body, t.skip)
    found = list(t.comparisons.finditer(shown))
    if len(found) == 1 and EQUALS.fullmatch(found[0].group()) and not t.no_split.search(shown):
        sides = (body[: found[0].start()].strip(), body[found[0].end() :].strip())
        return any(t.literal.fullmatch(side) for side in sides)
    paren = _top_paren(body, t.skip)
    if paren <= 0 or shown[paren:].strip() or not re.search(r"\bequals\s*$", body[:paren]):
        return False
    return bool(t.literal.fullmatch(body[paren + 1 : -1].strip()))


ORDER = re.compile(r"<=|>=|<|>")
"""The comparisons that state a range (`x < 5`, `Math.abs(a - b) <= eps`), not a value."""


def tolerant(expr: str, t: Tapping) -> bool:
    """Whether `expr` states a range (one ordering comparison at its top level): holding its operands'
    values exactly would fail a correct fix whose value is elsewhere in the range, so no check is made of
    it (a text canary, or nothing, watches it)."""
    shown = mask(expr.strip().lstrip("!").strip(), t.skip)
    found = list(t.comparisons.finditer(shown))
    single = len(found) == 1 and not t.no_split.search(shown)  # not a lambda's arrow, not `a < b && c`
    return single and ORDER.fullmatch(found[0].group()) is not None


def tapped(expr: str, t: Tapping) -> str:
    """`expr` (a check's decisive operand) with the operands that decide it reported: each non-literal side
    of one comparison (`a < b`; the left of `instanceof`), or the receiver and arguments of a call (`P(x)`,
    `x.m(y)`); `expr` itself where it is neither, or too complex to split (`&&`, `?:`, arrows)."""
    body = expr.lstrip()
    if body.startswith("!"):
        body = body.lstrip("!").lstrip()
    head = expr[: len(expr) - len(body)]
    shown = mask(body, t.skip)
    if t.no_split.search(shown):
        return expr
    found = list(t.comparisons.finditer(shown))
    if len(found) == 1:
        op = found[0]
        right = body[op.end() :]
        return (
            head
            + operand(body[: op.start()], t)
            + op.group()
            + (right if "instanceof" in op.group() else operand(right, t))
        )
    return head + _call_tapped(body, shown, t)


def _top_paren(text: str, skip: Skip) -> int:
    """The index of the last opening parenthesis of `text` outside strings and brackets; -1 for none."""
    found, depth, i = -1, 0, 0
    while i < len(text):
        if (past := skip(text, i)) != i:
            i = past
            continue
        if text[i] == "(" and depth == 0:
            found = i
        depth += (text[i] in "([{") - (text[i] in ")]}")
        i += 1
    return found


def _call_tapped(body: str, shown: str, t: Tapping) -> str:
    """`body` with a call's receiver and arguments reported (`tapped`); as it is when it is no call."""
    text = body.rstrip()
    paren = _top_paren(text, t.skip)
    callee = shown[:paren]
    if paren <= 0 or shown[paren:].strip() or not text.endswith(")") or not CHAIN.fullmatch(callee.rstrip()):
        return body
    inside = text[paren + 1 : -1]
    spans = split_arguments(inside, t.skip)
    args = ",".join(operand(inside[a:b], t) for a, b in spans)
    dot = callee.rfind(".")
    receiver = text[:dot] if dot > 0 else ""
    if receiver and not NAMESPACE.fullmatch(receiver.strip()) and not receiver.strip().startswith("new "):
        receiver = operand(receiver, t)
    called = receiver + text[dot:paren] if dot > 0 else text[:paren]
    return called + "(" + args + ")" + body[len(text) :]


C_CHAR = re.compile(r"'(?:[^'\\\n]|\\[^'\n]+)'")
"""A Go rune or Rust char literal (a Rust lifetime `'a` is none)."""


def skip_c_family(text: str, i: int) -> int:
    """Past a Go or Rust string, raw string, rune or comment that starts at `i`; `i` when none does."""
    if text[i] == '"':
        return string_end(text, i)
    if text[i] == "`":
        end = text.find("`", i + 1)
        return len(text) if end < 0 else end + 1
    if text[i] == "'":
        char = C_CHAR.match(text, i)
        return char.end() if char else i
    for opening, close in (("//", "\n"), ("/*", "*/")):
        if text.startswith(opening, i):
            end = text.find(close, i + 2)
            return len(text) if end < 0 else end + (len(close) if close != "\n" else 0)
    return i
