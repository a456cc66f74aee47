"""Expected values computed on the gold tree: hidden assertions whose expected side is built by code
(`assert merge(blocks) == [span("09:00-11:00")]`, objects of the repository's own class), which no
literal of the file holds (`tasks/expectations.py` holds the literal ones).

Left in the file, such an expected side is a value the code under test can read from the calling frame
and return whenever it looks plausible. So `tasks validate` runs the hidden files once more on the gold
tree, each such assertion rewritten as `_harness_probe(SLOT, ACTUAL, EXPECTED)`, which reports both sides
encoded field by field (`tasks/plain.encode(objects=True)`). Where the two sides encode alike in every
run, the expected side's encoding is stored with the task (TASK/computed.json), and grading rewrites the
assertion as `_harness_observe_fields(SLOT, ACTUAL)`: the expected side's code leaves the file (and with
it the module-level helpers and constants only it read), and the parent compares the child's encoding
with the stored one.

Which assertions: `assert A == E` (or `self.assertEqual(A, E)`) at the top of a test function's body,
neither side a literal, where E reads no name the test function binds (arguments, fixtures, locals:
values of one run) and calls nothing A is the result of (`f(a) == f(b)` states a relation between two
results, not a value). E is the right side, unless only the left one is a display (`[...] == merged`).

The trade: E is evaluated with the gold tree's code. A fix that also changes the helpers E calls (so that
A and E move together) fails where the original assertion passed; validation only holds an E whose two
sides encode alike on the gold tree, so that the stored value is the one the test itself checks there.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter

COMPUTED_FILE = "computed.json"
"""A task folder's expected values computed on its gold tree, as `tasks validate` stored them."""
UNSAFE = (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)
"""What an expected side may not hold: code that binds, waits or defers."""
DISPLAYS = (ast.List, ast.Tuple, ast.Set, ast.Dict)
HOPS = 8
"""Local names followed back to their assignment when looking for what an actual side is the result of."""


class ComputedValue(BaseModel):
    """One hidden assertion's expected side, as its encoding on the gold tree."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    test: str
    """The test function (`test_x`, `TestA::test_x`) within its file."""
    line: int
    """The assertion's line in the original file."""
    expected: list[Any]
    """`tasks/plain.encode(EXPECTED, objects=True)` on the gold tree."""


class ComputedFile(BaseModel):
    """A hidden file's computed expected values, valid for the one text they were computed from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: str
    """Of the hidden file's text: a file changed since makes its values stale (not used)."""
    values: list[ComputedValue]


Held = dict[tuple[str, int], list[Any]]
"""(test, line) -> the expected side's encoding, for one file."""


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def held_map(files: dict[str, ComputedFile], path: str, source: str) -> Held:
    """The stored values of `path`, when they were computed from this very `source`."""
    found = files.get(path)
    if found is None or found.sha256 != digest(source):
        return {}
    return {(v.test, v.line): v.expected for v in found.values}


def load_computed(task_dir: Path) -> dict[str, ComputedFile]:
    path = task_dir / COMPUTED_FILE
    if not path.is_file():
        return {}
    return TypeAdapter(dict[str, ComputedFile]).validate_json(path.read_bytes())


def save_computed(task_dir: Path, files: dict[str, ComputedFile]) -> None:
    """Writes the task's computed values (and leaves the file alone when it already says the same)."""
    path = task_dir / COMPUTED_FILE
    kept = {p: f for p, f in sorted(files.items()) if f.values}
    if not kept:
        path.unlink(missing_ok=True)
        return
    text = json.dumps(TypeAdapter(dict[str, ComputedFile]).dump_python(kept), indent=1) + "\n"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


@dataclass
class Scope:
    """What rewriting a test function needs to know of computed expectations."""

    values: Held = field(default_factory=dict)
    probe: bool = False
    """Validation's run on the gold tree: every candidate becomes a probe of both sides."""
    function: ast.FunctionDef | None = None
    used: set[str] = field(default_factory=set)
    """Observers the rewritten file calls beyond the literal ones."""
    dropped_reads: set[str] = field(default_factory=set)
    """Names the expected sides taken out of the file read."""


def computed_sides(
    left: ast.expr, right: ast.expr, function: ast.FunctionDef
) -> tuple[ast.expr, ast.expr] | None:
    """(actual, expected) of `left == right` when the expected side can be computed on the gold tree (see
    the module docstring); None otherwise."""
    actual, expected = (
        (right, left) if isinstance(left, DISPLAYS) and not isinstance(right, DISPLAYS) else (left, right)
    )
    if any(isinstance(n, UNSAFE) for n in ast.walk(expected)):
        return None
    reads = _reads(expected)
    if not reads or reads & _bound_in(function):
        return None
    callee = _callee(actual, function)
    if callee is not None and callee in _called(expected):
        return None
    return actual, expected


def _reads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _bound_in(function: ast.FunctionDef) -> set[str]:
    """Every name the function binds: its arguments, assignments, loop and `with` targets, nested defs."""
    names = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node is not function:
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _called(node: ast.AST) -> set[str]:
    return {dotted(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}


def _callee(actual: ast.expr, function: ast.FunctionDef) -> str | None:
    """The dotted name of the function whose result `actual` is (through attributes, subscripts and local
    names assigned once), or None when it is none."""
    node: ast.expr | None = actual
    for _ in range(HOPS):
        if isinstance(node, ast.Call):
            name = dotted(node.func)
            if "?" not in name:
                return name
            node = node.func.value if isinstance(node.func, ast.Attribute) else None
        elif isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Name):
            node = _assigned(node.id, function)
        else:
            return None
    return None


def _assigned(name: str, function: ast.FunctionDef) -> ast.expr | None:
    """The value of the one `name = VALUE` of the function, if it has exactly one."""
    found = [
        n.value
        for n in ast.walk(function)
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
    ]
    return found[0] if len(found) == 1 else None


def dotted(node: ast.expr) -> str:
    """`a.b.c` of a name or an attribute chain; `?` where a part is anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return "?"


def drop_unread_helpers(tree: ast.Module, names: set[str]) -> None:
    """Takes out the module-level functions (undecorated, not tests) and assignments of `names` that
    nothing in the file reads any more: an expected side's helper left behind could still be called by
    code that looks for plausible values. Repeated, since a dropped helper may have been the last reader
    of another."""
    while True:
        reads = _reads(tree)
        unread = {n for n in names if n not in reads}
        kept = [node for node in tree.body if not (_defines(node) & unread)]
        if len(kept) == len(tree.body):
            return
        tree.body = kept


def _defines(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef) and not node.decorator_list and not node.name.startswith("test"):
        return {node.name}
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return {node.targets[0].id}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return {node.target.id}
    return set()
