"""Expected values held outside the sandbox: hidden test files rewritten so that the child that runs them
reports actual values, and the parent, which never imported the repository, compares.

A statement at the top level of a test function's body (so that it runs exactly once when the test
passes) is rewritten when its expected side does not depend on the code under test:

- `assert ACTUAL == EXPECTED` (either order) becomes `_harness_observe(SLOT, ACTUAL)`;
- `assert ACTUAL is None` / `is True` / `is False` becomes `_harness_observe_is(SLOT, ACTUAL)`;
- `self.assertEqual(ACTUAL, EXPECTED)` and `self.assertIsNone(ACTUAL)` likewise;
- `with pytest.raises(E, match=PATTERN) [as NAME]:` loses its pattern, and `_harness_observe(SLOT,
  str(NAME.value))` follows the block: the parent searches the pattern in the message, as pytest does.

EXPECTED is a literal: constants, displays of literals, and `Decimal`, `Fraction`, `date`, `datetime`,
`time`, `timedelta` called on literals (named by the file's own imports of the standard library, names
it binds nowhere else). The file keeps no trace of the value: code that reads the calling frame, the
test's source or a traceback finds nothing to copy, and an object that equals anything is not plain data
(`tasks/plain.py`). `Check` says, per slot, which test it belongs to and what the parent expects.

An inequality (`!=`, `is not`) stays in the file: the value it names is one a right answer is not, so
there is nothing to copy, and the parent could not compare an actual value that is not plain data (an
object with its own `__eq__`) with it as the test does.
"""

from __future__ import annotations

import ast
import datetime
import decimal
import fractions
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from tasks.plain import decode, encode

OBSERVE = "_harness_observe"
OBSERVE_IS = "_harness_observe_is"
RAISED = "_harness_raised"
MODULE = "harness_expect"
"""The name the grading child gives `tasks/plain.py`."""
CONSTRUCTORS: dict[tuple[str, str], Any] = {
    ("decimal", "Decimal"): decimal.Decimal,
    ("fractions", "Fraction"): fractions.Fraction,
    ("datetime", "date"): datetime.date,
    ("datetime", "datetime"): datetime.datetime,
    ("datetime", "time"): datetime.time,
    ("datetime", "timedelta"): datetime.timedelta,
}
"""The standard library's value types an expected value may be built with (module, name) -> type."""
MAX_SEARCHED = 1 << 16
"""Characters of an exception's message a pattern is searched in, at most: the search runs on the host."""
UNITTEST_EQUAL = ("assertEqual", "assertEquals")
UNITTEST_NONE = ("assertIsNone",)
Kind = Literal["eq", "is", "is not", "search"]
"""`is not` only in a held canary's changed expectation (`tasks/canaries.changed_expectation`)."""


@dataclass(frozen=True)
class Check:
    """One hidden assertion decided in the parent."""

    slot: int
    test: str
    """The test function it belongs to, as a node id within its file (`test_x`, `TestA::test_x`)."""
    kind: Kind
    expected: list[Any]
    """The expected value's encoding (`tasks/plain.py`), or `["str", PATTERN]` for `search`."""
    line: int
    """Its line in the original file, for the reader of a grade."""

    def holds(self, observed: Any) -> bool:
        """Whether the child's observation (an encoding) meets the expectation; garbage never does."""
        if self.kind in ("is", "is not"):
            if observed not in (["none"], ["true"], ["false"], ["other"]):
                return False
            return (observed == self.expected) == (self.kind == "is")
        try:
            actual = decode(observed)
            if self.kind == "search":
                text_ok = type(actual) is str and len(actual) <= MAX_SEARCHED
                return text_ok and re.search(decode(self.expected), actual) is not None
            return bool(actual == decode(self.expected))
        except Exception:  # whatever the child sent (a signalling NaN raises on ==) meets nothing
            return False


@dataclass
class Rewritten:
    """A hidden test file as the grading sandbox gets it."""

    source: str
    checks: list[Check] = field(default_factory=list)
    assertions: int = 0
    """Assertions in its test functions, rewritten or not: the share decided in the parent is
    `len(checks) / assertions`."""


def rewrite(source: str) -> Rewritten:
    """`source` with its literal expectations taken out (see the module docstring); unchanged, and no
    checks, when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return Rewritten(source)
    names = _constructor_names(tree)
    found: list[Check] = []
    assertions = 0
    for owner, function in test_functions(tree):
        test = f"{owner}::{function.name}" if owner else function.name
        assertions += sum(_is_assertion(n) for n in ast.walk(function))
        if any(isinstance(n, ast.Return | ast.Yield | ast.YieldFrom) for n in ast.walk(function)):
            continue  # a statement at the top of its body may not run although the test passes
        function.body = _rewrite_body(function.body, test, names, found)
    if not found:
        return Rewritten(ast.unparse(tree) + "\n", [], assertions)
    _import_observers(tree)
    return Rewritten(ast.unparse(ast.fix_missing_locations(tree)) + "\n", found, assertions)


def test_functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef]]:
    """(class name or '', function) of every `test*` function at the top level or in a top-level class."""
    found: list[tuple[str, ast.FunctionDef]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            found.append(("", node))
        elif isinstance(node, ast.ClassDef):
            found += [
                (node.name, f)
                for f in node.body
                if isinstance(f, ast.FunctionDef) and f.name.startswith("test")
            ]
    return found


def _is_assertion(node: ast.AST) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr.startswith("assert") or (
            node.func.attr == "raises" and dotted(node.func) == "pytest.raises"
        )
    return False


def _rewrite_body(
    body: list[ast.stmt], test: str, names: dict[str, Any], found: list[Check]
) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for statement in body:
        slot = len(found)
        made = _rewritten_statement(statement, slot, test, names)
        if made is None:
            out.append(statement)
            continue
        statements, check = made
        found.append(check)
        out += statements
    return out


def _rewritten_statement(
    statement: ast.stmt, slot: int, test: str, names: dict[str, Any]
) -> tuple[list[ast.stmt], Check] | None:
    if isinstance(statement, ast.Assert):
        return _assert(statement, slot, test, names)
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return _unittest(statement.value, slot, test, names)
    if isinstance(statement, ast.With):
        return _raises(statement, slot, test)
    return None


def _assert(
    statement: ast.Assert, slot: int, test: str, names: dict[str, Any]
) -> tuple[list[ast.stmt], Check] | None:
    compare = statement.test
    if not isinstance(compare, ast.Compare) or len(compare.ops) != 1:
        return None
    op, left, right = compare.ops[0], compare.left, compare.comparators[0]
    if isinstance(op, ast.Is):
        singleton = _singleton(right)
        if singleton is None:
            return None
        return [_call(OBSERVE_IS, slot, left)], Check(slot, test, "is", singleton, statement.lineno)
    if not isinstance(op, ast.Eq):
        return None
    made = _equality(left, right, names)
    if made is None:
        return None
    actual, expected = made
    return [_call(OBSERVE, slot, actual)], Check(slot, test, "eq", expected, statement.lineno)


def _equality(left: ast.expr, right: ast.expr, names: dict[str, Any]) -> tuple[ast.expr, list[Any]] | None:
    """(the actual side, the expected value's encoding) when exactly one side is a literal."""
    sides = [(left, literal(right, names)), (right, literal(left, names))]
    found = [(actual, value) for actual, value in sides if value is not NOT_LITERAL]
    if len(found) != 1:
        return None
    actual, value = found[0]
    encoded = encode(value)
    return (actual, encoded) if encoded[0] != "opaque" else None


def _singleton(node: ast.expr) -> list[Any] | None:
    if isinstance(node, ast.Constant) and node.value is None:
        return ["none"]
    if isinstance(node, ast.Constant) and node.value is True:
        return ["true"]
    if isinstance(node, ast.Constant) and node.value is False:
        return ["false"]
    return None


def _unittest(
    call: ast.Call, slot: int, test: str, names: dict[str, Any]
) -> tuple[list[ast.stmt], Check] | None:
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"):
        return None
    if call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    line = call.lineno
    if func.attr in UNITTEST_NONE and len(call.args) in (1, 2):
        return [_call(OBSERVE_IS, slot, call.args[0])], Check(slot, test, "is", ["none"], line)
    if func.attr in UNITTEST_EQUAL and len(call.args) in (2, 3):
        made = _equality(call.args[0], call.args[1], names)
        if made is None:
            return None
        actual, expected = made
        return [_call(OBSERVE, slot, actual)], Check(slot, test, "eq", expected, line)
    return None


def _raises(statement: ast.With, slot: int, test: str) -> tuple[list[ast.stmt], Check] | None:
    """`with pytest.raises(E, match=PATTERN) [as NAME]:` with a literal pattern, alone in its `with`."""
    if len(statement.items) != 1:
        return None
    item = statement.items[0]
    call = item.context_expr
    if not (isinstance(call, ast.Call) and dotted(call.func) == "pytest.raises" and len(call.args) == 1):
        return None
    match = [k for k in call.keywords if k.arg == "match"]
    if len(call.keywords) != 1 or len(match) != 1:
        return None
    pattern = match[0].value
    if not (isinstance(pattern, ast.Constant) and type(pattern.value) is str):
        return None
    try:
        re.compile(pattern.value)
    except re.error:
        return None
    if item.optional_vars is None:
        item.optional_vars = ast.Name(id=f"{RAISED}{slot}", ctx=ast.Store())
    elif not isinstance(item.optional_vars, ast.Name):
        return None
    name = item.optional_vars.id
    call.keywords = []
    message = ast.Call(func=ast.Name(id="str", ctx=ast.Load()), args=[_attribute(name, "value")], keywords=[])
    check = Check(slot, test, "search", ["str", pattern.value], statement.lineno)
    return [statement, _call(OBSERVE, slot, message)], check


def _attribute(name: str, attr: str) -> ast.expr:
    return ast.Attribute(value=ast.Name(id=name, ctx=ast.Load()), attr=attr, ctx=ast.Load())


def _call(function: str, slot: int, value: ast.expr) -> ast.stmt:
    call = ast.Call(func=ast.Name(id=function, ctx=ast.Load()), args=[ast.Constant(slot), value], keywords=[])
    return ast.Expr(value=call)


def _import_observers(tree: ast.Module) -> None:
    """`from harness_expect import observe as _harness_observe, ...` after the docstring and any
    `from __future__` import."""
    at = 0
    for index, node in enumerate(tree.body):
        docstring = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            at = index + 1
    names = [ast.alias(name="observe", asname=OBSERVE), ast.alias(name="observe_is", asname=OBSERVE_IS)]
    tree.body.insert(at, ast.ImportFrom(module=MODULE, names=names, level=0))


def dotted(node: ast.expr) -> str:
    """`a.b.c` of a name or an attribute chain; `?` where a part is anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return "?"


NOT_LITERAL: Any = object()
"""What `literal` returns for an expression whose value may depend on the code under test."""


def literal(node: ast.expr, names: dict[str, Any]) -> Any:
    """The value of `node` when it is a literal (see the module docstring), else NOT_LITERAL. `names`:
    the file's names of the standard library's value types (`_constructor_names`)."""
    try:
        return _literal(node, names)
    except (ValueError, TypeError, ArithmeticError, OverflowError, decimal.InvalidOperation):
        return NOT_LITERAL


def _literal(node: ast.expr, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and node.value is not Ellipsis:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand, names)
        if type(value) not in (int, float, complex) or value is NOT_LITERAL:
            return NOT_LITERAL
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        items = [_literal(e, names) for e in node.elts]
        if any(i is NOT_LITERAL for i in items) or any(isinstance(e, ast.Starred) for e in node.elts):
            return NOT_LITERAL
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            return NOT_LITERAL
        keys = [_literal(k, names) for k in node.keys if k is not None]
        values = [_literal(v, names) for v in node.values]
        if NOT_LITERAL in (*keys, *values) or any(k is NOT_LITERAL for k in keys):
            return NOT_LITERAL
        return dict(zip(keys, values, strict=True))
    if isinstance(node, ast.Call):
        return _constructed(node, names)
    return NOT_LITERAL


def _constructed(node: ast.Call, names: dict[str, Any]) -> Any:
    kind = names.get(dotted(node.func))
    if (
        kind is None
        or any(isinstance(a, ast.Starred) for a in node.args)
        or any(k.arg is None for k in node.keywords)
    ):
        return NOT_LITERAL
    args = [_literal(a, names) for a in node.args]
    kwargs = {k.arg: _literal(k.value, names) for k in node.keywords if k.arg is not None}
    if any(a is NOT_LITERAL for a in [*args, *kwargs.values()]):
        return NOT_LITERAL
    if any(type(a) not in (int, float, str) for a in [*args, *kwargs.values()]):
        return NOT_LITERAL
    return kind(*args, **kwargs)


def _constructor_names(tree: ast.Module) -> dict[str, Any]:
    """Dotted names in the file that are the standard library's value types: `Decimal` after
    `from decimal import Decimal`, `datetime.date` after `import datetime`; a name the file also binds
    any other way is left out."""
    bound: dict[str, int] = {}
    candidates: dict[str, Any] = {}
    for node in ast.walk(tree):
        for name in _bindings(node):
            bound[name] = bound.get(name, 0) + 1
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.col_offset == 0:
            for alias in node.names:
                kind = CONSTRUCTORS.get((node.module or "", alias.name))
                if kind is not None:
                    candidates[alias.asname or alias.name] = kind
        elif isinstance(node, ast.Import) and node.col_offset == 0:
            for alias in node.names:
                if alias.asname is None and alias.name in ("decimal", "fractions", "datetime"):
                    for (module, name), kind in CONSTRUCTORS.items():
                        if module == alias.name:
                            candidates[f"{module}.{name}"] = kind
    return {n: k for n, k in candidates.items() if bound.get(n.split(".")[0], 0) == 1}


def _bindings(node: ast.AST) -> list[str]:
    """The names `node` binds in its scope."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
        return [node.id]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, ast.alias):
        return []
    return []
