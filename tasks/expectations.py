"""Expected values held outside the sandbox: hidden test files rewritten so that the child that runs them
reports actual values, and the parent, which never imported the repository, compares.

A statement at the top level of a test function's body (so that it runs exactly once when the test
passes) is rewritten when its expected side does not depend on the code under test:

- `assert ACTUAL == EXPECTED` (either order) becomes `_harness_observe(SLOT, ACTUAL)`;
- `assert ACTUAL is None` / `is True` / `is False` becomes `_harness_observe_is(SLOT, ACTUAL)`;
- `self.assertEqual(ACTUAL, EXPECTED)` and `self.assertIsNone(ACTUAL)` likewise;
- `with pytest.raises(E, match=PATTERN) [as NAME]:` loses its pattern, and `_harness_observe(SLOT,
  str(NAME.value))` follows the block: the parent searches the pattern in the message, as pytest does.

A parametrized test (`@pytest.mark.parametrize` alone on the function, with a literal table) loses the
columns that only its expected side reads: `assert f(text) == Decimal(expected)` becomes
`_harness_observe(SLOT + _harness_case, f(text))`, the table keeps its other columns and gains the
case's index, and each case gets ids `0`, `1`, ... (pytest's own ids would spell the expected values).
The parent holds one expectation per case (`Check.test` is `test_f[K]`) and maps the task's ids, which
pytest made from the values, to the new ones (`Rewritten.cases`).

EXPECTED is a literal: constants, displays of literals, and `Decimal`, `Fraction`, `date`, `datetime`,
`time`, `timedelta` called on literals (named by the file's own imports of the standard library, names
it binds nowhere else). The file keeps no trace of the value: code that reads the calling frame, the
test's source or a traceback finds nothing to copy, and an object that equals anything is not plain data
(`tasks/plain.py`). `Check` says, per slot, which test it belongs to and what the parent expects.

An expected side built by code (objects of the repository's own classes) is held too, once `tasks
validate` computed it on the gold tree (`tasks/computed.py`): `computed` maps (test, line) to its encoding,
and the assertion becomes `_harness_observe_fields(SLOT, ACTUAL)`.

An inequality (`!=`, `is not`) stays in the file: the value it names is one a right answer is not, so
there is nothing to copy, and the parent could not compare an actual value that is not plain data (an
object with its own `__eq__`) with it as the test does.
"""

from __future__ import annotations

import ast
import copy
import datetime
import decimal
import fractions
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from tasks.computed import Held, Scope, computed_sides, dotted, drop_unread_helpers
from tasks.parsing import parse_python
from tasks.plain import decode, encode

OBSERVE = "_harness_observe"
CASE = "_harness_case"
"""The column a rewritten parametrize table gains: the case's index, which picks its slot."""
MAX_ID_TEXT = 100
"""A string longer than this gets an id pytest's versions make differently: its table is left alone."""
OBSERVE_IS = "_harness_observe_is"
OBSERVE_FIELDS = "_harness_observe_fields"
PROBE = "_harness_probe"
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
    `decided / assertions`."""
    cases: dict[str, str] = field(default_factory=dict)
    """Node id within the file of each case of a rewritten parametrize table, as pytest names it from
    the original (`test_f[1-2-3]`, `TestA::test_f[x]`) -> as the rewritten file names it (`test_f[0]`)."""

    @property
    def probed(self) -> list[int]:
        """Slots of a probe run's assertions (`rewrite(probe=True)`: their checks expect nothing), each
        observed as `[SLOT, ACTUAL]` and `[-1 - SLOT, EXPECTED]`."""
        return [c.slot for c in self.checks if not c.expected]

    @property
    def decided(self) -> int:
        """Assertions taken out of the file (a table's one assertion holds a check per case)."""
        return len({(c.test.split("[")[0], c.line) for c in self.checks})


def rewrite(
    source: str, parametrize: bool = True, computed: Held | None = None, probe: bool = False
) -> Rewritten:
    """`source` with its literal expectations taken out (see the module docstring); unchanged, and no
    checks, when it does not parse. `parametrize=False` leaves parametrize tables as they are (for a
    task whose ids name cases otherwise than pytest's rules say). `computed`: the expected values the
    gold tree gave (`tasks/computed.py`); `probe`: validation's run that computes them."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return Rewritten(source)
    names: dict[str, Any] = {**_constructor_names(tree)}
    names |= _module_constants(tree, names)
    found: list[Check] = []
    cases: dict[str, str] = {}
    assertions = 0
    marked = _marked_classes(tree)
    scope = Scope(values=computed or {}, probe=probe)
    for owner, function in test_functions(tree):
        test = f"{owner}::{function.name}" if owner else function.name
        assertions += sum(_is_assertion(n) for n in ast.walk(function))
        if any(isinstance(n, ast.Return | ast.Yield | ast.YieldFrom) for n in ast.walk(function)):
            continue  # a statement at the top of its body may not run although the test passes
        table = _table(function) if parametrize and owner not in marked else None
        if table is not None:
            cases.update(_rewrite_cases(function, table, test, names, found))
        scope.function = function
        function.body = _rewrite_body(function.body, test, names, found, scope)
    if not found:
        return Rewritten(ast.unparse(tree) + "\n", [], assertions)
    _drop_unread_constants(tree, names)
    drop_unread_helpers(tree, scope.dropped_reads)
    _import_observers(tree, sorted(scope.used))
    return Rewritten(ast.unparse(ast.fix_missing_locations(tree)) + "\n", found, assertions, cases)


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
    body: list[ast.stmt], test: str, names: dict[str, Any], found: list[Check], scope: Scope | None = None
) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for statement in body:
        slot = len(found)
        made = _rewritten_statement(statement, slot, test, names, scope or Scope())
        if made is None:
            out.append(statement)
            continue
        statements, check = made
        found.append(check)
        out += statements
    return out


def _rewritten_statement(
    statement: ast.stmt, slot: int, test: str, names: dict[str, Any], scope: Scope
) -> tuple[list[ast.stmt], Check] | None:
    if isinstance(statement, ast.Assert):
        return _assert(statement, slot, test, names, scope)
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return _unittest(statement.value, slot, test, names, scope)
    if isinstance(statement, ast.With):
        return _raises(statement, slot, test)
    return None


def _assert(
    statement: ast.Assert, slot: int, test: str, names: dict[str, Any], scope: Scope
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
        return _computed(left, right, slot, test, statement.lineno, scope)
    actual, expected = made
    return [_call(OBSERVE, slot, actual)], Check(slot, test, "eq", expected, statement.lineno)


def _computed(
    left: ast.expr, right: ast.expr, slot: int, test: str, line: int, scope: Scope
) -> tuple[list[ast.stmt], Check] | None:
    """An equality whose expected side is computed (`tasks/computed.py`): probed on the gold tree, or
    observed field by field against the value stored from it. A probe's check expects nothing: its run
    decides no grade."""
    sides = computed_sides(left, right, scope.function) if scope.function is not None else None
    if sides is None:
        return None
    actual, expected = sides
    if scope.probe:
        scope.used.add("probe")
        call = ast.Call(
            func=ast.Name(id=PROBE, ctx=ast.Load()), args=[ast.Constant(slot), actual, expected], keywords=[]
        )
        return [ast.Expr(value=call)], Check(slot, test, "eq", [], line)
    value = scope.values.get((test, line))
    if value is None:
        return None
    scope.used.add("observe_fields")
    scope.dropped_reads |= {n.id for n in ast.walk(expected) if isinstance(n, ast.Name)}
    return [_call(OBSERVE_FIELDS, slot, actual)], Check(slot, test, "eq", value, line)


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
    call: ast.Call, slot: int, test: str, names: dict[str, Any], scope: Scope
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
            return (
                _computed(call.args[0], call.args[1], slot, test, line, scope)
                if len(call.args) == 2
                else None
            )
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


@dataclass
class Table:
    """A test function's one `@pytest.mark.parametrize(NAMES, ROWS[, ids=IDS])` with a literal table."""

    decorator: ast.Call
    names: list[str]
    rows: list[list[ast.expr]]
    ids: list[str]
    """Each case's id as pytest makes it from the original table (or the explicit `ids`)."""


def _marked_classes(tree: ast.Module) -> set[str]:
    """Classes (and '' for the module) whose tests a parametrize mark outside the function reaches: a
    class decorator or a `pytestmark` assignment. Their tables are left alone (ids would combine)."""
    marked: set[str] = set()
    scopes: list[tuple[str, list[ast.stmt]]] = [("", tree.body)]
    scopes += [(n.name, n.body) for n in tree.body if isinstance(n, ast.ClassDef)]
    for name, body in scopes:
        for node in body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
                marked.add(name)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(
            "parametrize" in ast.unparse(d) for d in node.decorator_list
        ):
            marked.add(node.name)
    return marked | ({n.name for n in tree.body if isinstance(n, ast.ClassDef)} if "" in marked else set())


def _table(function: ast.FunctionDef) -> Table | None:
    """The function's parametrize table when it is its only one, literal enough to name each case as
    pytest does: names as a string or a list of strings, rows as a list of tuples (a list of values for
    one name), ids explicit strings or made from values (`_pytest_id`)."""
    marks = [d for d in function.decorator_list if "parametrize" in ast.unparse(d)]
    if len(marks) != 1 or not isinstance(call := marks[0], ast.Call):
        return None
    if dotted(call.func) != "pytest.mark.parametrize" or len(call.args) != 2 or function.args.defaults:
        return None
    if any(k.arg != "ids" for k in call.keywords):
        return None
    names = _argnames(call.args[0])
    rows = _rows(call.args[1], len(names)) if names else None
    if not names or not rows:
        return None
    ids = _explicit_ids(call.keywords[0].value, len(rows)) if call.keywords else _pytest_ids(names, rows)
    if ids is None or len(set(ids)) != len(ids):
        return None  # pytest would add counters, which its versions make differently
    return Table(call, names, rows, ids)


def _argnames(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        names = [n.strip() for n in node.value.split(",") if n.strip()]
    elif isinstance(node, ast.List | ast.Tuple) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        names = [str(e.value) for e in node.elts if isinstance(e, ast.Constant)]
    else:
        return []
    return names if all(n.isidentifier() for n in names) and len(set(names)) == len(names) else []


def _rows(node: ast.expr, width: int) -> list[list[ast.expr]] | None:
    if not isinstance(node, ast.List | ast.Tuple) or not node.elts:
        return None
    if width == 1:
        return [[e] for e in node.elts] if not any(isinstance(e, ast.Starred) for e in node.elts) else None
    rows = []
    for element in node.elts:
        if not isinstance(element, ast.Tuple | ast.List) or len(element.elts) != width:
            return None
        if any(isinstance(e, ast.Starred) for e in element.elts):
            return None
        rows.append(list(element.elts))
    return rows


def _explicit_ids(node: ast.expr, count: int) -> list[str] | None:
    if not isinstance(node, ast.List | ast.Tuple) or len(node.elts) != count:
        return None
    ids = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return [_escaped(i) for i in ids] if len(ids) == count else None


def _pytest_ids(names: list[str], rows: list[list[ast.expr]]) -> list[str] | None:
    """pytest's ids of a table of literals: a string ASCII-escaped, a number, bool or None as `str`,
    anything else (a tuple, a Decimal) as the argument's name and the case's index."""
    ids = []
    for index, row in enumerate(rows):
        parts = []
        for name, node in zip(names, row, strict=True):
            value = literal(node, {})
            if value is NOT_LITERAL and not isinstance(node, ast.Call | ast.List | ast.Tuple | ast.Dict):
                return None  # a name: a class, function or enum would be named by what it holds
            if isinstance(value, str | bytes):
                if len(value) > MAX_ID_TEXT:
                    return None
                parts.append(_escaped(value))
            elif value is None or type(value) in (int, float, bool, complex):
                parts.append(str(value))
            else:
                parts.append(f"{name}{index}")
        ids.append("-".join(parts))
    return ids


def _escaped(value: str | bytes) -> str:
    """pytest's `ascii_escaped`: non-ASCII and unprintable characters as backslash escapes."""
    if isinstance(value, bytes):
        text = value.decode("ascii", "backslashreplace")
    else:
        text = value.encode("unicode_escape").decode("ascii")
    table = {i: f"\\x{i:02x}" for i in range(128) if i not in range(32, 127)}
    table.update({ord("\t"): "\\t", ord("\r"): "\\r", ord("\n"): "\\n"})
    return text.translate(table)


def _rewrite_cases(
    function: ast.FunctionDef, table: Table, test: str, names: dict[str, Any], found: list[Check]
) -> dict[str, str]:
    """Takes out of `function` and its table the columns only an expectation reads; returns the cases'
    original node ids -> new ones (none when no column was taken out)."""
    held: set[str] = set()
    body: list[ast.stmt] = []
    for statement in function.body:
        made = _case_statement(statement, function, table, test, names, found, held)
        body.append(made if made is not None else statement)
    if not held:
        return {}
    function.body = body
    keep = [i for i, n in enumerate(table.names) if n not in held]
    columns: list[ast.expr] = [ast.Constant(table.names[i]) for i in keep]
    table.decorator.args = [
        ast.Tuple(elts=[*columns, ast.Constant(CASE)], ctx=ast.Load()),
        ast.List(
            elts=[
                ast.Tuple(elts=[row[i] for i in keep] + [ast.Constant(k)], ctx=ast.Load())
                for k, row in enumerate(table.rows)
            ],
            ctx=ast.Load(),
        ),
    ]
    ids = ast.List(elts=[ast.Constant(str(k)) for k in range(len(table.rows))], ctx=ast.Load())
    table.decorator.keywords = [ast.keyword(arg="ids", value=ids)]
    function.args.args = [a for a in function.args.args if a.arg not in held] + [ast.arg(arg=CASE)]
    return {f"{test}[{original}]": f"{test}[{k}]" for k, original in enumerate(table.ids)}


def _case_statement(
    statement: ast.stmt,
    function: ast.FunctionDef,
    table: Table,
    test: str,
    names: dict[str, Any],
    found: list[Check],
    held: set[str],
) -> ast.stmt | None:
    """`_harness_observe(BASE + _harness_case, ACTUAL)` for an equality whose one side reads only table
    columns that nothing else in the function reads, with a check per case; None otherwise."""
    sides = _equality_sides(statement)
    if sides is None:
        return None
    columns = set(table.names) - {a.arg for a in function.args.kwonlyargs}
    arguments = {a.arg for a in function.args.args}
    reads = Counter(n.id for s in function.body for n in ast.walk(s) if isinstance(n, ast.Name))
    for actual, expected in (sides, sides[::-1]):
        used = [n.id for n in ast.walk(expected) if isinstance(n, ast.Name) and n.id in columns]
        own = Counter(used)
        if not used or any(reads[n] != own[n] or n not in arguments or n in held for n in own):
            continue
        encodings = _case_encodings(expected, table, names)
        if encodings is None:
            continue
        base = len(found)
        line = statement.lineno
        found += [Check(base + k, f"{test}[{k}]", "eq", e, line) for k, e in enumerate(encodings)]
        held.update(own)
        slot = ast.BinOp(left=ast.Constant(base), op=ast.Add(), right=ast.Name(id=CASE, ctx=ast.Load()))
        call = ast.Call(func=ast.Name(id=OBSERVE, ctx=ast.Load()), args=[slot, actual], keywords=[])
        return ast.Expr(value=call)
    return None


def _equality_sides(statement: ast.stmt) -> tuple[ast.expr, ast.expr] | None:
    """The two sides of `assert A == B` or `self.assertEqual(A, B[, msg])`."""
    if isinstance(statement, ast.Assert):
        test = statement.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            return test.left, test.comparators[0]
        return None
    if not (isinstance(statement, ast.Expr) and isinstance(call := statement.value, ast.Call)):
        return None
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr in UNITTEST_EQUAL
        and dotted(func.value) == "self"
        and not call.keywords
        and len(call.args) in (2, 3)
        and not any(isinstance(a, ast.Starred) for a in call.args)
    ):
        return call.args[0], call.args[1]
    return None


def _case_encodings(expected: ast.expr, table: Table, names: dict[str, Any]) -> list[list[Any]] | None:
    """The expected side's value in each case (its columns replaced by the case's literals), encoded."""
    encodings = []
    for row in table.rows:
        values = dict(zip(table.names, row, strict=True))
        substituted = _Substitute(values).visit(copy.deepcopy(expected))
        value = literal(substituted, names)
        if value is NOT_LITERAL:
            return None
        encoded = encode(value)
        if encoded[0] == "opaque":
            return None
        encodings.append(encoded)
    return encodings


class _Substitute(ast.NodeTransformer):
    """Replaces names by expressions (a copy of each)."""

    def __init__(self, values: dict[str, ast.expr]) -> None:
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.expr:
        value = self.values.get(node.id)
        return copy.deepcopy(value) if value is not None else node


def _attribute(name: str, attr: str) -> ast.expr:
    return ast.Attribute(value=ast.Name(id=name, ctx=ast.Load()), attr=attr, ctx=ast.Load())


def _call(function: str, slot: int, value: ast.expr) -> ast.stmt:
    call = ast.Call(func=ast.Name(id=function, ctx=ast.Load()), args=[ast.Constant(slot), value], keywords=[])
    return ast.Expr(value=call)


def _import_observers(tree: ast.Module, more: list[str]) -> None:
    """`from harness_expect import observe as _harness_observe, ...` after the docstring and any
    `from __future__` import; `more`: the observers of computed expectations the file calls."""
    at = 0
    for index, node in enumerate(tree.body):
        docstring = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            at = index + 1
    names = [ast.alias(name="observe", asname=OBSERVE), ast.alias(name="observe_is", asname=OBSERVE_IS)]
    names += [
        ast.alias(name=name, asname={"probe": PROBE, "observe_fields": OBSERVE_FIELDS}[name]) for name in more
    ]
    tree.body.insert(at, ast.ImportFrom(module=MODULE, names=names, level=0))


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
    if isinstance(node, ast.Name):
        bound = names.get(node.id)
        return bound.value if isinstance(bound, Bound) else NOT_LITERAL
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


@dataclass(frozen=True)
class Bound:
    """A module-level constant's value, as `literal` reads a name bound to it."""

    value: Any


IMMUTABLE = (str, bytes, int, float, complex, bool, type(None), decimal.Decimal, fractions.Fraction)
IMMUTABLE_DATES = (datetime.date, datetime.time, datetime.timedelta)


def _module_constants(tree: ast.Module, names: dict[str, Any]) -> dict[str, Bound]:
    """`NAME = LITERAL` at the module's top level, of an immutable value, for a name the file binds
    nowhere else: an expected value a test names (`assert reply == MESSAGE`) is then held like a literal,
    and the assignment leaves the file where nothing else reads it (`_drop_unread_constants`)."""
    bound: dict[str, int] = {}
    for node in ast.walk(tree):
        for name in _bindings(node):
            bound[name] = bound.get(name, 0) + 1
    found: dict[str, Bound] = {}
    for node in tree.body:
        target, value = _assignment(node)
        if target is None or value is None or bound.get(target) != 1:
            continue
        constant = literal(value, {**names, **found})
        if constant is not NOT_LITERAL and _immutable(constant):
            found[target] = Bound(constant)
    return found


def _assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return node.target.id, node.value
    return None, None


def _immutable(value: Any) -> bool:
    if isinstance(value, tuple | frozenset):
        return all(_immutable(v) for v in value)
    return type(value) in IMMUTABLE or type(value) in IMMUTABLE_DATES or type(value) is datetime.datetime


def _drop_unread_constants(tree: ast.Module, names: dict[str, Any]) -> None:
    """Takes out the module constants nothing reads any more (their reads became held expectations)."""
    reads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    unread = {name for name, value in names.items() if isinstance(value, Bound) and name not in reads}
    tree.body = [node for node in tree.body if _assignment(node)[0] not in unread]


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
