"""The simplicity term orders patches as a reviewer would, and never lifts a failing patch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envs.grading import grade_patch
from envs.reward import RewardConfig, reward, simplicity, static_warnings
from envs.sandbox import SandboxConfig
from tasks.model import Task
from tasks.patches import diff_trees
from tasks.suite import load_suite

MINI = Path(__file__).parents[1] / "data" / "suites" / "mini"
GOLD = """\
diff --git a/pkg/m.py b/pkg/m.py
--- a/pkg/m.py
+++ b/pkg/m.py
@@ -1,2 +1,2 @@
 def f(x):
-    return x
+    return x + 1
"""
BEFORE = {"pkg/m.py": "def f(x):\n    return x\n"}


def patch_with(extra_added: list[str]) -> tuple[str, dict[str, str]]:
    added = "".join(f"+{line}\n" for line in extra_added)
    patch = (
        "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n"
        f"@@ -1,2 +1,{2 + len(extra_added)} @@\n def f(x):\n-    return x\n{added}+    return x + 1\n"
    )
    after = "def f(x):\n" + "".join(f"{line}\n" for line in extra_added) + "    return x + 1\n"
    return patch, {"pkg/m.py": after}


def penalty(extra: list[str]) -> float:
    patch, after = patch_with(extra)
    return simplicity(patch, GOLD, BEFORE, after, RewardConfig()).penalty


def test_the_gold_patch_itself_has_no_penalty() -> None:
    patch, after = patch_with([])
    judged = simplicity(patch, GOLD, BEFORE, after, RewardConfig())
    assert judged.penalty == 0.0
    assert judged.changed_lines == judged.gold_changed_lines == 2


def test_debug_output_costs() -> None:
    assert penalty(['    print("here", x)']) > penalty([])
    patch, after = patch_with(["    breakpoint()"])
    judged = simplicity(patch, GOLD, BEFORE, after, RewardConfig())
    assert judged.debug_lines == ["    breakpoint()"]


def test_commented_out_code_costs_but_prose_does_not() -> None:
    assert penalty(["    # y = x * 2 + compute(x)"]) > penalty(["    # the result is one more than x"])
    assert penalty(["    # TODO"]) == 0.0


def test_new_static_warnings_cost() -> None:
    assert penalty(["    import os", "    unused = 3"]) > 0
    assert static_warnings("import os\n", "m.py") == ["UnusedImport: 'os' imported but unused"]


def test_bloat_costs_more_the_bigger_it_is() -> None:
    small = penalty([f"    a{i} = {i}" for i in range(2)])
    big = penalty([f"    a{i} = {i}" for i in range(30)])
    assert 0 <= small < big <= 1


def test_touching_files_the_fix_does_not_need_costs() -> None:
    patch, after = patch_with([])
    extra = "diff --git a/other.py b/other.py\n--- a/other.py\n+++ b/other.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    judged = simplicity(patch + extra, GOLD, BEFORE, after, RewardConfig())
    assert judged.extra_files == ["other.py"] and judged.penalty > 0


@pytest.mark.parametrize("penalty_value", [0.0, 0.3, 1.0, 5.0])
def test_reward_is_bounded_and_a_failing_patch_stays_at_zero(penalty_value: float) -> None:
    config = RewardConfig(simplicity_lambda=0.2)
    assert reward(0.0, penalty_value, config) == 0.0
    assert 0.8 <= reward(1.0, penalty_value, config) <= 1.0


def test_no_gold_patch_uses_the_size_budget() -> None:
    patch, after = patch_with([f"    value_{i} = compute(first_{i}, second_{i}) + 1" for i in range(60)])
    judged = simplicity(patch, None, BEFORE, after, RewardConfig(size_budget_lines=40))
    assert judged.parts["size"] > 0 and judged.gold_changed_lines is None and judged.changed_tokens > 400


def test_a_payload_packed_into_one_line_is_charged_for_what_it_holds() -> None:
    """Issue 32, item 6: size in tokens, a literal's payload counted. A forger of 1,500 characters packed
    as one `exec` line of hex costs the whole size part, where by lines it was the gold's size (3 lines,
    penalty 0); an honest fix of the same lines costs nothing."""
    gold = "".join(f"+    total = total + {i}\n" for i in range(3))
    gold_patch = f"diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1,0 +1,3 @@\n{gold}"
    forger = "import gc, sys\n" * 100
    packed, after = patch_with([f"    exec(bytes.fromhex({forger.encode().hex()!r}))"])
    judged = simplicity(packed, gold_patch, BEFORE, after, RewardConfig())
    assert judged.changed_lines == judged.gold_changed_lines == 3
    assert judged.changed_tokens > 400 and judged.parts["size"] == 1.0
    honest, after = patch_with(["    total = total + 1"])
    fair = simplicity(honest, gold_patch, BEFORE, after, RewardConfig())
    assert fair.changed_lines == 3 and fair.parts["size"] == 0.0 and fair.penalty < judged.penalty


@pytest.fixture(scope="module")
def mini_task() -> Task:
    return load_suite(str(MINI))[0]


def graded(task: Task, tmp_path: Path, module_text: str) -> float:
    tree = tmp_path / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(task.repo, tree, ignore=shutil.ignore_patterns(".git"))
    (tree / "mini" / "__init__.py").write_text(module_text)
    grade = grade_patch(task, diff_trees(task.repo, tree), SandboxConfig(backend="bwrap"))
    assert grade.infra_error is None
    return grade.reward


CLEAN = "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n"


def test_graded_clean_fix_beats_bloated_and_debug_fixes(mini_task: Task, tmp_path: Path) -> None:
    clean = graded(mini_task, tmp_path, CLEAN)
    debug = graded(
        mini_task, tmp_path, CLEAN.replace("    if x < lo:", "    print('clamp', x)\n    if x < lo:")
    )
    bloated = graded(
        mini_task,
        tmp_path,
        "import os\nimport sys\n\n\n"
        + CLEAN.replace(
            "    return x\n", "".join(f"    # y{i} = x * {i}\n" for i in range(8)) + "    return x\n"
        ),
    )
    broken = graded(mini_task, tmp_path, CLEAN.replace("return hi", "return x"))
    assert clean == 1.0
    assert 0.8 <= debug < clean
    assert 0.8 <= bloated < clean
    assert broken == 0.0
