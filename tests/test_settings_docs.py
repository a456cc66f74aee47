"""Every field of every settings model has a docstring: the string literal right after the field says what
it does, its unit and what its default means."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "envs", "tools", "policies", "summarizer", "tasks")
NAMES = ("SamplingParams", "Limits")
"""Settings models whose names do not end in `Config`."""


def name_of(node: ast.expr) -> str:
    """`X` of `X`, `module.X` and `X[...]`; empty for anything else."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def is_settings_model(node: ast.ClassDef) -> bool:
    named = node.name.endswith("Config") or node.name in NAMES
    return named and "BaseModel" in {name_of(base) for base in node.bases}


def undocumented(source: str, where: str) -> list[str]:
    """`where:line Class.field` for each field of a settings model in `source` with no docstring after it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ClassDef) and is_settings_model(node)):
            continue
        for statement, after in zip(node.body, [*node.body[1:], None], strict=True):
            if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
                continue
            field = statement.target.id
            if field == "model_config" or name_of(statement.annotation) == "ClassVar":
                continue
            documented = (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            )
            if not documented:
                found.append(f"{where}:{statement.lineno} {node.name}.{field}")
    return found


def settings_files() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.relative_to(ROOT).parts[:2] != ("tasks", "suites")
    ]


def test_the_check_finds_settings_models() -> None:
    """The scan sees the settings models, so an empty list below is not an empty scan."""
    seen = set()
    for path in settings_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and is_settings_model(node):
                seen.add(node.name)
    expected = {"RolloutConfig", "TrainConfig", "LearnerConfig", "LoopConfig", "SFTConfig", "DemoConfig"}
    expected |= {"SandboxConfig", "RewardConfig", "SamplingParams", "SummaryConfig", "ToolsConfig", "Limits"}
    assert expected <= seen


def test_the_check_fails_on_a_field_without_a_docstring() -> None:
    source = (
        "class RunConfig(BaseModel):\n"
        "    model_config = ConfigDict(extra='forbid')\n"
        "    kinds: ClassVar[tuple[str, ...]] = ()\n"
        "    steps: int = 1\n"
        '    """Training steps."""\n'
        "    seed: int = 0\n"
        "    out: str = 'runs'\n"
        "class Row(BaseModel):\n"
        "    ids: list[int]\n"
    )
    assert undocumented(source, "x.py") == ["x.py:6 RunConfig.seed", "x.py:7 RunConfig.out"]


def test_every_settings_field_has_a_docstring() -> None:
    missing = [
        line
        for path in settings_files()
        for line in undocumented(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not missing, f"{len(missing)} settings fields have no docstring:\n" + "\n".join(missing)
