"""The code reads along the data flow: harness/'s folders import only what comes before them, no module
imports itself back through another, and no function is longer than a screen (80 lines; 60 in harness/)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from policies.spec import PolicySpecError, make_policy

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "envs", "tools", "policies", "summarizer", "tasks")
LAYERS = ("agent", "rollouts", "training", "inspection")
"""harness/'s folders in the order data flows: each may import those before it, none after."""
MAX_LINES = 80
"""The most lines a function may span, its docstring included."""
HARNESS_MAX_LINES = 60
"""The same limit in harness/ (issue 37)."""
EXPLOITS = ("FORGERS", "HACK_MODULE", "PIPE_ANSWER", "hacker_calls")
"""Names of the red team's exploits of the grader (tests/faults/hacker.py), which the product does not ship
(issue 37, item 7); nor does it name the hackers."""


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "suites" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(path: Path, known: set[str]) -> set[str]:
    """The project's modules `path` imports, at any depth of the file (lazy imports count)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & known


def test_harness_folders_import_only_what_comes_before_them() -> None:
    found = modules()
    wrong = []
    for name, path in found.items():
        parts = name.split(".")
        if parts[0] != "harness" or len(parts) < 3 or parts[1] not in LAYERS:
            continue
        rank = LAYERS.index(parts[1])
        for target in imports(path, set(found)):
            bits = target.split(".")
            if bits[0] == "harness" and len(bits) > 2 and bits[1] in LAYERS and LAYERS.index(bits[1]) > rank:
                wrong.append(f"{name} imports {target}")
            elif bits[0] == "harness" and len(bits) == 2 and bits[1] != "config":
                wrong.append(f"{name} imports {target} (harness/'s entry points import the folders)")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles() -> None:
    found = modules()
    graph = {name: imports(path, set(found)) - {name} for name, path in found.items()}
    cycles = []
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            node = todo.pop()
            if node == start:
                cycles.append(start)
                break
            if node not in seen:
                seen.add(node)
                todo += graph.get(node, ())
    assert not cycles, f"modules that import themselves back: {sorted(cycles)}"


def test_no_function_is_longer_than_a_screen() -> None:
    long = []
    for name, path in modules().items():
        limit = HARNESS_MAX_LINES if name.split(".")[0] == "harness" else MAX_LINES
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    long.append(f"{name}.{node.name}: {lines} lines, over {limit}")
    assert not long, "functions to split:\n" + "\n".join(long)


def test_the_exploits_of_the_grader_stay_in_the_tests() -> None:
    """No product module imports the tests or names the red team's exploits, no policy spec plays them,
    and loading the policies and the rollouts loads none of the tests' modules."""
    wrong = []
    for name, path in modules().items():
        text = path.read_text()
        wrong += [f"{name} names {word}" for word in EXPLOITS if word in text]
        wrong += [f"{name} names the hackers"] if "hacker" in text.lower() else []
        for node in ast.walk(ast.parse(text)):
            targets = [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            targets += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            wrong += [f"{name} imports {t}" for t in targets if t.split(".")[0] == "tests"]
    assert not wrong, "\n".join(wrong)
    with pytest.raises(PolicySpecError, match="scripted policy file hacker"):
        make_policy("scripted:hacker")
    probe = "import sys, policies.spec, policies.scripted, harness.rollouts.local; print(*sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert not [m for m in loaded.stdout.split() if m.split(".")[0] == "tests"], loaded.stdout


def test_the_command_line_is_wiring() -> None:
    """harness/cli.py wires the command groups of harness/commands/ together; their flags and handlers live
    there, and the settings commands' flags are made from the models (issue 37, item 6)."""
    lines = len((ROOT / "harness" / "cli.py").read_text().splitlines())
    assert lines < 400, f"harness/cli.py has {lines} lines"
