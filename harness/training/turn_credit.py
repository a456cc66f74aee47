"""Turn-level credit from what the environment said (issue 39, item 3): a turn whose tool call changed the
repository gets a share of the change in the visible tests' pass rate that the agent's own next
`run_tests` showed, added to the outcome advantage on that turn's tokens, clipped. The visible tests only:
what the agent saw in its episode, never the hidden tests, so it adds no channel to the reward.

    visible_pass_rate(text)                        run_tests output -> passed / (passed + failed), or None
    turn_bonuses(calls, weight, clip)              (K,) turns -> (K,) bonus per turn
    bonus_per_token(segment, bonuses)              a segment's turns' bonuses -> (T-1,) on the row's shifted ids
    with_turn_credit(rows, trajectories, ...)      rows of those trajectories with the bonus on their tokens

How a span is credited (ours; the issue fixes only "from the change in visible test outcomes that its
tool calls caused, added like OPSD's signal, with a clip"): between two `run_tests` calls with the same
arguments (the same selection of tests, so their rates compare), the change in pass rate is split evenly
over the turns in between whose tool can change files (`write_file`, `edit`, `bash`) and that no earlier
comparable run measured, each share times `weight`, clipped to +-`clip`. Edits before the first comparable run, and runs whose output names no
count (a crash before collection), credit nothing. Summed with the outcome advantage A, a turn's tokens
get A + bonus, as `outcome+opsd` adds OPSD's gap (`credit.dense_advantages`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from harness.agent.trajectory import Segment, Trajectory, Turn

if TYPE_CHECKING:  # the viewer reads the bonuses without torch
    from harness.training.learner import Row

CHANGING_TOOLS = frozenset({"write_file", "edit", "bash"})
"""Tools whose call can change the repository; the others (read_file, list_dir, search, run_tests, submit)
read it."""

_COUNTS: list[tuple[re.Pattern[str], str]] = [
    # pytest's summary line: "== 2 failed, 3 passed, 1 error in 0.12s ==" or -q's "3 passed in 0.1s"
    (re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in [\d.]+s\b.*$", re.M), "pytest"),
    # libtest, once per test binary: "test result: FAILED. 3 passed; 1 failed; 0 ignored"
    (re.compile(r"test result: \w+\. (\d+) passed; (\d+) failed"), "libtest"),
    # node:test's TAP and spec reporters: "# pass 3" / "# fail 1", "ℹ pass 3" / "ℹ fail 1"
    (re.compile(r"^(?:#|ℹ) (pass|fail) (\d+)$", re.M), "node"),
    # JUnit's console launcher: "[         3 tests successful      ]", "[         1 tests failed          ]"
    (re.compile(r"\[\s*(\d+) tests (successful|failed)\s*\]"), "junit"),
    # go test -v: "--- PASS: TestX (0.00s)"; without -v only failures are listed, so packages count:
    # "ok  \tpkg\t0.01s", "FAIL\tpkg\t0.01s"
    (re.compile(r"^\s*--- PASS: ", re.M), "go -v"),
    (re.compile(r"^(ok|FAIL)[ \t]+\S+", re.M), "go"),
    # mocha "3 passing" / "1 failing"; jest "Tests: 1 failed, 2 passed, 3 total",
    (re.compile(r"^\s*(\d+) (passing|failing)\b", re.M), "mocha"),
    # vitest " Tests  1 failed | 2 passed (3)"
    (re.compile(r"^\s*Tests:?\s+(.*\d+ (?:passed|failed).*)$", re.M), "jest"),
]


def _pytest(found: list[re.Match[str]]) -> tuple[int, int]:
    words = dict((w, int(n)) for n, w in re.findall(r"(\d+) (\w+)", found[-1].group(1)))
    return words.get("passed", 0), words.get("failed", 0) + words.get("error", 0) + words.get("errors", 0)


def _counts(text: str) -> tuple[int, int] | None:
    """(passed, failed) as the first runner whose summary the output holds reports them."""
    for pattern, runner in _COUNTS:
        found = list(pattern.finditer(text))
        if not found:
            continue
        if runner == "pytest":
            return _pytest(found)
        if runner == "libtest":
            return sum(int(m.group(1)) for m in found), sum(int(m.group(2)) for m in found)
        if runner in ("node", "junit", "mocha"):
            pairs = [
                (m.group(1), m.group(2)) if runner == "node" else (m.group(2), m.group(1)) for m in found
            ]
            totals = {"pass": 0, "fail": 0}
            for word, number in pairs:
                totals["pass" if word in ("pass", "successful", "passing") else "fail"] += int(number)
            return totals["pass"], totals["fail"]
        if runner == "go -v":
            return len(found), len(re.findall(r"^\s*--- FAIL: ", text, re.M))
        if runner == "go":
            passed = sum(m.group(1) == "ok" for m in found)
            return passed, len(found) - passed
        words = dict((w, int(n)) for n, w in re.findall(r"(\d+) (\w+)", found[-1].group(1)))
        return words.get("passed", 0), words.get("failed", 0)
    return None


def visible_pass_rate(text: str) -> float | None:
    """The share of tests passed in a `run_tests` output, or None when it names no count."""
    counts = _counts(text)
    if counts is None or sum(counts) == 0:
        return None
    return counts[0] / sum(counts)


@dataclass(frozen=True)
class Call:
    """What turn credit reads of a turn: its tool, its arguments, and what the tool returned."""

    tool: str | None
    arguments: str
    observation: str | None

    @classmethod
    def of(cls, turn: Turn) -> Call:
        call = turn.tool_call
        if call is None:
            return cls(None, "", turn.observation)
        arguments = (
            call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, sort_keys=True)
        )
        return cls(call.name, arguments, turn.observation)


def turn_bonuses(calls: Sequence[Call], weight: float, clip: float) -> list[float]:
    """(K,) -> (K,): each turn's bonus; the change in pass rate between two comparable `run_tests` runs,
    split evenly over the file-changing turns between them, times `weight`, clipped to +-clip. A turn is
    credited by the first comparable run after it only."""
    bonuses = [0.0] * len(calls)
    last: dict[str, float] = {}  # run_tests arguments -> the pass rate it last showed
    pending: dict[str, list[int]] = {}  # run_tests arguments -> file-changing turns since that run
    for k, call in enumerate(calls):
        if call.tool in CHANGING_TOOLS:
            for turns in pending.values():
                turns.append(k)
        rate = visible_pass_rate(call.observation or "") if call.tool == "run_tests" else None
        if rate is None:
            continue
        since = pending.get(call.arguments, [])
        for j in since:
            bonuses[j] = max(-clip, min(clip, weight * (rate - last[call.arguments]) / len(since)))
        for turns in pending.values():
            turns[:] = [j for j in turns if j not in since]
        last[call.arguments], pending[call.arguments] = rate, []
    return bonuses


def bonus_per_token(segment: Segment, bonuses: Sequence[float]) -> list[float]:
    """(T-1,): each of the segment's turns' bonus on its generated tokens, 0 elsewhere, aligned with the
    learner's shifted ids (`Row.token_advantages[j]` is the advantage of id j + 1)."""
    out = [0.0] * len(segment.prompt_ids)
    for turn, bonus in zip(segment.turns, bonuses, strict=True):
        out += [bonus] * len(turn.generated_ids) + [0.0] * len(turn.appended_ids)
    return out[1:]


def trajectory_bonuses(segments: Sequence[Segment], weight: float, clip: float) -> list[list[float]]:
    """Per segment, per turn: the bonuses of `turn_bonuses` over the whole episode (a summary between two
    runs does not break a span: the repository is the same)."""
    calls = [Call.of(turn) for segment in segments for turn in segment.turns]
    flat = iter(turn_bonuses(calls, weight, clip))
    return [[next(flat) for _ in segment.turns] for segment in segments]


def with_turn_credit(
    rows: Sequence[Row], trajectories: Sequence[Trajectory], weight: float, clip: float
) -> tuple[list[Row], dict[str, float]]:
    """Each row made from a segment of `trajectories` with its turns' bonuses added to its per-token
    advantage (its own, when dense credit set one, else its outcome advantage on every token); rows made
    otherwise (hint and teacher rows) and a `weight` of 0 leave them as they are. Metrics: the share of
    rows' model turns that got a bonus and the mean bonus's size over those."""
    if weight == 0:
        return list(rows), {}
    segments = {t.id: {s.index: s for s in t.segments} for t in trajectories}
    bonuses = {
        t.id: dict(
            zip([s.index for s in t.segments], trajectory_bonuses(t.segments, weight, clip), strict=True)
        )
        for t in trajectories
    }
    out, credited, turns = [], [], 0
    for row in rows:
        if row.source is None or row.source[0] not in segments:
            out.append(row)
            continue
        trajectory_id, index = row.source
        segment, bonus = segments[trajectory_id][index], bonuses[trajectory_id][index]
        per_token = bonus_per_token(segment, bonus)  # (T-1,)
        if len(per_token) != len(row.ids) - 1:  # not the segment's own ids: left as it is
            out.append(row)
            continue
        turns += len(bonus)
        credited += [abs(b) for b in bonus if b]
        base = row.token_advantages or [row.advantage] * len(per_token)
        out.append(replace(row, token_advantages=[a + b for a, b in zip(base, per_token, strict=True)]))
    return out, {
        "turn_credit_share": len(credited) / turns if turns else 0.0,
        "turn_credit_mean_abs": sum(credited) / len(credited) if credited else 0.0,
    }
