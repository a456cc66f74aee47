"""The reward: correctness from the hidden tests, scaled down by a bounded simplicity penalty.

    reward = correct * (1 - lambda * penalty),   penalty in [0, 1]

so a failing patch never scores above zero, and among passing patches a bloated or messy one scores
below a clean one, by at most `lambda`. The penalty is a weighted mean of five parts, each in [0, 1]:
size beyond what the fix needs, files the fix does not need, leftover debug output, commented-out
code, and new static warnings (pyflakes) in the changed Python files.

Size is counted in tokens, not lines (`tokens`): a name or number of n characters is ceil(n / 6) tokens
and every other character one, inside string literals too, so a payload packed into one long line or
one hex string is charged for what it holds.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field
from pyflakes import checker as pyflakes_checker

from tasks.parsing import parse_python
from tasks.patches import changed_lines, split_patch


class RewardConfig(BaseModel):
    """How a grade becomes a reward."""

    model_config = ConfigDict(extra="forbid")

    simplicity_lambda: float = Field(default=0.2, ge=0, le=1)
    """Most a passing patch can lose to the simplicity penalty."""
    partial_credit: bool = False
    """`correct` becomes the fraction of hidden tests passed instead of all-or-nothing."""
    size_budget_lines: int = Field(default=40, ge=1)
    """Changed lines allowed without penalty when the task has no gold patch (counted as 10 tokens each:
    size is measured in tokens)."""
    allow_unprotected: bool = False
    """Train on tasks whose grade is `unprotected` (a verifier script that runs as the user that writes the
    reward: Harbor tasks); refused by default, since a policy could learn to write its own reward."""
    suspicion_penalty: float = Field(default=0.0, ge=0, le=1)
    """Share of the reward a grade loses when the graded diff adds what a bug fix has no business adding
    (`envs/suspicion.py`); 0 only reports it."""
    forgery_penalty: float = Field(default=1.0, ge=0, le=1)
    """The reward of a grade in which a canary passed (its changed expectation was met: outcomes were
    forged) is minus this, whatever the real tests did. A forger that cannot tell a copy from its
    canaries forges each canary as often as the real copy, so a wrong guess must cost at least what a
    right one earns (1): then no guessing pays on average."""


WEIGHTS = {
    "size": 0.3,
    "extra_files": 0.2,
    "debug_output": 0.2,
    "commented_code": 0.15,
    "static_warnings": 0.15,
}
DEBUG_LINE = re.compile(
    r"^\s*(print\(|breakpoint\(\)|import pdb|pdb\.set_trace\(|import ipdb|console\.log\()"
)
WARNINGS_COUNTED = (
    "UnusedImport",
    "UnusedVariable",
    "UndefinedName",
    "RedefinedWhileUnused",
    "ImportStarUsed",
)


class Simplicity(BaseModel):
    """What the simplicity term saw in the final diff, and the penalty it gave."""

    model_config = ConfigDict(extra="forbid")

    changed_lines: int
    gold_changed_lines: int | None
    changed_tokens: int = 0
    """The graded diff's added and removed lines in tokens (`tokens`): what the size part measures."""
    gold_changed_tokens: int | None = None
    extra_files: list[str]
    debug_lines: list[str]
    commented_code_lines: list[str]
    new_warnings: list[str]
    parts: dict[str, float]
    """Each part of the penalty, in [0, 1], before weighting."""
    penalty: float


TOKEN = re.compile(r"\w+|[^\w\s]")
WORD_TOKEN = 6
"""Characters of a name, number or word taken as one token (about what a code tokenizer makes of them)."""
TOKENS_PER_LINE = 10
"""A changed line's worth of tokens: `size_budget_lines` in tokens, where a task has no gold patch."""


def tokens(lines: list[str]) -> int:
    """The size of changed lines in tokens: each run of word characters ceil(n / WORD_TOKEN), each other
    non-space character one."""
    count = 0
    for line in lines:
        for token in TOKEN.findall(line):
            count += -(-len(token) // WORD_TOKEN) if token[0].isalnum() or token[0] == "_" else 1
    return count


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def _files(patch: str) -> set[str]:
    return {p for part in split_patch(patch) for p in part.paths}


@dataclass(frozen=True)
class SourceStyle:
    """How a language's source shows the simplicity term's parts: debug output and commented-out code
    (a language plug-in's `style`, `envs/languages/`)."""

    debug: re.Pattern[str]
    """A changed line that prints for debugging."""
    comment: str
    """The line comment's marker."""
    code: re.Pattern[str] | None = None
    """A comment's text that reads as code; None: Python's parser decides."""


PYTHON_STYLE = SourceStyle(debug=DEBUG_LINE, comment="#")


def _is_commented_code(line: str, style: SourceStyle = PYTHON_STYLE) -> bool:
    stripped = line.strip()
    if not stripped.startswith(style.comment):
        return False
    if style.code is not None and stripped[len(style.comment) :].startswith(("/", "!")):
        return False  # a documentation comment (`///`, `//!`)
    body = stripped.lstrip(style.comment[0]).strip()
    if not body or body.startswith(("!", "-*-", "type:", "noqa", "pragma")):
        return False
    if style.code is not None:
        return style.code.search(body) is not None
    try:
        tree = parse_python(body)
    except SyntaxError:
        return False
    # A bare word or constant ("# TODO", "# 42") is prose, not code.
    return not all(
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Name | ast.Constant) for node in tree.body
    )


def static_warnings(source: str, filename: str) -> list[str]:
    """pyflakes' warnings of the kinds we count, as 'Kind: message' strings (line numbers dropped)."""
    try:
        tree = parse_python(source, filename=filename)
        found = pyflakes_checker.Checker(tree, filename=filename)
    except SyntaxError as e:
        return [f"SyntaxError: {e.msg}"]
    except (ValueError, RecursionError, MemoryError) as e:  # nested past what a parser can walk
        return [f"Unreadable: {type(e).__name__}"]
    out = []
    for msg in found.messages:
        kind = type(msg).__name__
        if kind in WARNINGS_COUNTED:
            out.append(f"{kind}: {msg.message % msg.message_args}")
    return out


def new_static_warnings(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Warnings in the changed Python files after the patch that were not there before."""
    new: list[str] = []
    for path, source in sorted(after.items()):
        if not path.endswith(".py"):
            continue
        old = static_warnings(before.get(path, ""), path)
        for warning in static_warnings(source, path):
            if warning in old:
                old.remove(warning)
            else:
                new.append(f"{path}: {warning}")
    return new


def simplicity(
    patch: str,
    gold_patch: str | None,
    before: dict[str, str],
    after: dict[str, str],
    config: RewardConfig,
    style: SourceStyle = PYTHON_STYLE,
) -> Simplicity:
    """Judges a (test-filtered) patch. `before` / `after`: contents of its changed Python files (pyflakes);
    `style`: the task's language's debug output and comments."""
    added, removed = changed_lines(patch)
    size, size_tokens = len(added) + len(removed), tokens([*added, *removed])
    gold_added: list[str] = []
    gold_size = gold_tokens = None
    if gold_patch:
        gold_added, gold_removed = changed_lines(gold_patch)
        gold_size, gold_tokens = len(gold_added) + len(gold_removed), tokens([*gold_added, *gold_removed])
        # Up to 1.5x the gold patch is free; 5x or more costs the whole part.
        size_part = _clip((size_tokens / max(gold_tokens, 1) - 1.5) / 3.5)
        extra_files = sorted(_files(patch) - _files(gold_patch))
    else:
        budget = config.size_budget_lines * TOKENS_PER_LINE
        size_part = _clip((size_tokens - budget) / (4 * budget))
        extra_files = []
    gold_debug = sum(1 for line in gold_added if style.debug.match(line))
    debug = [line for line in added if style.debug.match(line)]
    debug = debug[gold_debug:]  # prints the fix itself needs are not debug output
    commented = [line for line in added if _is_commented_code(line, style)]
    warnings = new_static_warnings(before, after)
    parts = {
        "size": size_part,
        "extra_files": _clip(len(extra_files) / 2),
        "debug_output": _clip(len(debug) / 2),
        "commented_code": _clip(len(commented) / 3),
        "static_warnings": _clip(len(warnings) / 2),
    }
    penalty = _clip(sum(WEIGHTS[name] * value for name, value in parts.items()))
    return Simplicity(
        changed_lines=size,
        gold_changed_lines=gold_size,
        changed_tokens=size_tokens,
        gold_changed_tokens=gold_tokens,
        extra_files=extra_files,
        debug_lines=debug,
        commented_code_lines=commented,
        new_warnings=warnings,
        parts=parts,
        penalty=penalty,
    )


def reward(
    correct: float,
    simplicity_penalty: float,
    config: RewardConfig,
    suspect: bool = False,
    forged: bool = False,
) -> float:
    """reward = correct * (1 - lambda * penalty) * (1 - suspicion_penalty if suspect): never above
    `correct`, never below 0; -forgery_penalty when a canary passed (`forged`)."""
    if forged:
        return -config.forgery_penalty
    kept = 1.0 - config.suspicion_penalty if suspect else 1.0
    return correct * (1.0 - config.simplicity_lambda * _clip(simplicity_penalty)) * kept
