"""Small, realistic bugs in Python functions: found with `ast`, applied as minimal edits of the text.

Six operators, each the kind of slip a person makes: a flipped comparison (`<` for `<=`, `==` for
`!=`), an off-by-one integer, a dropped `elif` / `else` branch, a wrong default value, two swapped
arguments of a call, and a removed guard clause (`if ...: raise / return`). A mutation replaces one
span of the file's text and leaves every other character as it was, so its inverse is a small diff.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal, get_args

from tasks.parsing import parse_python

Operator = Literal[
    "flipped_comparison",
    "off_by_one",
    "dropped_branch",
    "wrong_default",
    "swapped_arguments",
    "removed_guard",
]
OPERATORS: tuple[Operator, ...] = get_args(Operator)


@dataclass(frozen=True)
class Mutation:
    """One replacement of text[start:end] in one file, inside one function."""

    path: str
    operator: Operator
    function: str
    """The qualified name of the function it is in (`Class.method`)."""
    start: int
    end: int
    replacement: str
    lines: tuple[int, ...]
    """1-based lines of the original file of which one must run for the mutation to matter."""

    def apply(self, text: str) -> str:
        return text[: self.start] + self.replacement + text[self.end :]


class Source:
    """A file's text with ast positions (line, UTF-8 byte column) turned into character offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        # ast counts lines at "\n" only; str.splitlines would also split at form feeds and the like.
        self.lines = re.findall(r"[^\n]*\n|[^\n]+\Z", text)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col].decode(errors="replace"))

    def start(self, node: ast.expr | ast.stmt) -> int:
        return self.offset(node.lineno, node.col_offset)

    def end(self, node: ast.expr | ast.stmt) -> int:
        return self.offset(node.end_lineno or node.lineno, node.end_col_offset or 0)

    def segment(self, node: ast.expr) -> str:
        return self.text[self.start(node) : self.end(node)]

    def line_range(self, first: int, last: int) -> tuple[int, int]:
        """Offsets of lines first..last (1-based, inclusive), their line ends included."""
        return self.starts[first - 1], self.starts[last]

    def stands_alone(self, node: ast.stmt) -> bool:
        """True when nothing but whitespace and a comment shares the statement's first and last lines."""
        before = self.text[self.starts[node.lineno - 1] : self.start(node)]
        after = self.text[self.end(node) : self.starts[node.end_lineno or node.lineno]]
        return not before.strip() and (not after.strip() or after.strip().startswith("#"))


FLIP: dict[type[ast.cmpop], str] = {
    ast.Lt: "<=",
    ast.LtE: "<",
    ast.Gt: ">=",
    ast.GtE: ">",
    ast.Eq: "!=",
    ast.NotEq: "==",
    ast.Is: "is not",
    ast.IsNot: "is",
    ast.In: "not in",
    ast.NotIn: "in",
}
_CMP_TOKEN = re.compile(r"not\s+in\b|is\s+not\b|<=|>=|==|!=|<|>|\bin\b|\bis\b")
_COMMENT = re.compile(r"#[^\n]*")
OFF_BY_ONE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
NO_SWAP = frozenset({"isinstance", "issubclass", "getattr", "setattr", "hasattr", "max", "min"})
"""Calls whose swapped arguments raise TypeError at once (not a bug anyone ships) or change nothing."""


def find_mutations(path: str, text: str) -> list[Mutation]:
    """Every mutation of the functions in `text` that parses and changes the program."""
    tree = parse_python(text)
    source = Source(text)
    before = ast.dump(tree)
    found: list[Mutation] = []
    for function, name in _functions(tree, ""):
        found += _defaults(function, name, source, path)
        for node, parent in _own_nodes(function):
            found += _mutations_of(node, parent, name, source, path)
    return [m for m in found if _changes_program(m, text, before)]


def _changes_program(mutation: Mutation, text: str, before: str) -> bool:
    try:
        after = parse_python(mutation.apply(text))
    except SyntaxError:
        return False
    return ast.dump(after) != before


def _functions(node: ast.AST, prefix: str) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield child, prefix + child.name
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(node, parent) for the function's body, without nested functions and classes (they are
    mutated on their own), asserts, or f-strings (whose inner positions Python 3.11 gets wrong)."""
    stack: list[tuple[ast.AST, ast.AST]] = [(stmt, function) for stmt in reversed(function.body)]
    skip = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assert, ast.JoinedStr)
    while stack:
        node, parent = stack.pop()
        if isinstance(node, skip):
            continue
        yield node, parent
        stack.extend((child, node) for child in reversed(list(ast.iter_child_nodes(node))))


def _mutations_of(node: ast.AST, parent: ast.AST, function: str, source: Source, path: str) -> list[Mutation]:
    if isinstance(node, ast.Compare):
        return _comparisons(node, function, source, path)
    if isinstance(node, ast.Constant | ast.UnaryOp):
        return _off_by_one(node, parent, function, source, path)
    if isinstance(node, ast.If):
        return _dropped_branches(node, function, source, path) + _removed_guard(
            node, parent, function, source, path
        )
    if isinstance(node, ast.Call):
        return _swapped_arguments(node, function, source, path)
    return []


def _lines(first: int, last: int | None) -> tuple[int, ...]:
    return tuple(range(first, (last or first) + 1))


def _comparisons(node: ast.Compare, function: str, source: Source, path: str) -> list[Mutation]:
    found = []
    for i, op in enumerate(node.ops):
        left = node.left if i == 0 else node.comparators[i - 1]
        a, b = source.end(left), source.start(node.comparators[i])
        between = _COMMENT.sub(lambda m: " " * len(m.group()), source.text[a:b])
        token = _CMP_TOKEN.search(between)
        if token is None:
            continue
        found.append(
            Mutation(
                path,
                "flipped_comparison",
                function,
                a + token.start(),
                a + token.end(),
                FLIP[type(op)],
                _lines(node.lineno, node.end_lineno),
            )
        )
    return found


def _int_value(node: ast.AST) -> int | None:
    """The value of an int literal, or of a negated one (`-1`); None for anything else."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_value(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _counts_as_index(node: ast.AST, parent: ast.AST) -> bool:
    """Integers where off-by-one bugs live: arithmetic, comparisons, indexes, slices, range()."""
    if isinstance(parent, ast.BinOp | ast.AugAssign):
        return isinstance(parent.op, OFF_BY_ONE_OPS)
    if isinstance(parent, ast.Subscript):
        return parent.slice is node
    if isinstance(parent, ast.Call):
        return isinstance(parent.func, ast.Name) and parent.func.id == "range" and node in parent.args
    return isinstance(parent, ast.Compare | ast.Slice)


def _off_by_one(
    node: ast.Constant | ast.UnaryOp, parent: ast.AST, function: str, source: Source, path: str
) -> list[Mutation]:
    value = _int_value(node)
    if value is None or not _counts_as_index(node, parent):
        return []
    if not source.segment(node).lstrip("-").strip().isdigit():  # hex, octal, 1_000: leave them be
        return []
    lines = _lines(node.lineno, node.end_lineno)
    found = []
    for new in (value - 1, value + 1):
        start, end, text = source.start(node), source.end(node), str(new)
        if (  # `n - 1` becomes `n`, not `n - 0`
            new == 0
            and isinstance(parent, ast.BinOp)
            and isinstance(parent.op, ast.Add | ast.Sub)
            and parent.right is node
        ):
            start, text = source.end(parent.left), ""
        found.append(Mutation(path, "off_by_one", function, start, end, text, lines))
    return found


def _dropped_branches(node: ast.If, function: str, source: Source, path: str) -> list[Mutation]:
    """An `elif` clause (its test and body) or the `else` branch, removed."""
    if not node.orelse:
        return []
    first = node.orelse[0]
    if len(node.orelse) == 1 and isinstance(first, ast.If) and _line(source, first.lineno).startswith("elif"):
        last = first.body[-1].end_lineno or first.body[-1].lineno
        start, end = source.line_range(first.lineno, last)
        lines = _lines(first.lineno, first.test.end_lineno)
        return [Mutation(path, "dropped_branch", function, start, end, "", lines)]
    else_line = _else_line(node, source)
    if else_line is None:
        return []
    start, end = source.line_range(else_line, node.orelse[-1].end_lineno or else_line)
    lines = _lines(first.lineno, node.orelse[-1].end_lineno)
    return [Mutation(path, "dropped_branch", function, start, end, "", lines)]


def _line(source: Source, lineno: int) -> str:
    return source.lines[lineno - 1].strip()


def _else_line(node: ast.If, source: Source) -> int | None:
    """The line of the `else:` that opens the If's orelse (blank and comment lines skipped)."""
    lineno = (node.body[-1].end_lineno or node.body[-1].lineno) + 1
    while lineno <= node.orelse[0].lineno:
        text = _line(source, lineno)
        if re.match(r"else\s*:", text):
            return lineno
        if text and not text.startswith("#"):
            return None
        lineno += 1
    return None


def _block_of(parent: ast.AST, node: ast.stmt) -> list[ast.stmt]:
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(stmt is node for stmt in block):
            return block
    return []


def _removed_guard(node: ast.If, parent: ast.AST, function: str, source: Source, path: str) -> list[Mutation]:
    """`if cond: raise / return / continue / break` with no else, removed from a block it is not alone in."""
    exits = (ast.Raise, ast.Return, ast.Continue, ast.Break)
    if node.orelse or not isinstance(node.body[-1], exits) or len(node.body) > 2:
        return []
    if len(_block_of(parent, node)) < 2 or not source.stands_alone(node):
        return []
    start, end = source.line_range(node.lineno, node.end_lineno or node.lineno)
    lines = _lines(node.body[0].lineno, node.body[-1].end_lineno)
    return [Mutation(path, "removed_guard", function, start, end, "", lines)]


def _swapped_arguments(node: ast.Call, function: str, source: Source, path: str) -> list[Mutation]:
    if isinstance(node.func, ast.Name) and node.func.id in NO_SWAP:
        return []
    if any(isinstance(arg, ast.Starred) for arg in node.args):
        return []
    found = []
    spans = [_with_parentheses(source, arg) for arg in node.args]
    for (a_start, a_end), (b_start, b_end) in pairwise(spans):
        first, second = source.text[a_start:a_end], source.text[b_start:b_end]
        if first == second:
            continue
        between = source.text[a_end:b_start]
        lines = _lines(node.lineno, node.end_lineno)
        replacement = second + between + first
        found.append(Mutation(path, "swapped_arguments", function, a_start, b_end, replacement, lines))
    return found


def _with_parentheses(source: Source, node: ast.expr) -> tuple[int, int]:
    """The node's span, widened over parentheses around it (ast positions leave them out)."""
    start, end = source.start(node), source.end(node)
    while True:
        before = source.text[:start].rstrip()
        after = source.text[end:].lstrip()
        if not (before.endswith("(") and after.startswith(")")):
            return start, end
        start = len(before) - 1
        end = len(source.text) - len(after) + 1


def _defaults(
    function: ast.FunctionDef | ast.AsyncFunctionDef, name: str, source: Source, path: str
) -> list[Mutation]:
    """A boolean default flipped, an integer default off by one; they matter once the body runs."""
    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body:
        return []
    lines = _lines(body[0].lineno, function.end_lineno)
    found = []
    for default in [*function.args.defaults, *function.args.kw_defaults]:
        if default is None:
            continue
        start, end = source.start(default), source.end(default)
        if isinstance(default, ast.Constant) and isinstance(default.value, bool):
            found.append(Mutation(path, "wrong_default", name, start, end, str(not default.value), lines))
            continue
        value = _int_value(default)
        if value is not None and source.segment(default).lstrip("-").strip().isdigit():
            for new in (value - 1, value + 1):
                found.append(Mutation(path, "wrong_default", name, start, end, str(new), lines))
    return found
