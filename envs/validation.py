"""Validation: whether a task grades as it should, and what `tasks validate` stores with it.

A task's gold patch must pass and the empty patch fail, every time, and the gold patch must also pass
as an episode plays it. Then, with `keep`, what grading holds of the task is made and stored in its
folder: the expected sides its hidden assertions compute, evaluated on the gold tree
(TASK/computed.json, `tasks/computed.py`: the gold patch runs `RUNS` times with every candidate assertion
probed, and an expected side is kept when, in every run and every test or case that reached it, both
sides decoded equal and the expected side the same everywhere, so that a value that changes between runs,
a time or an address, is never held), and the canaries that fail on the gold patch (TASK/canaries.json).
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from envs.factory import start_task_sandbox
from envs.grading import Grade, Probe, collect_patch, grade_patch, judge_patch
from envs.judge import Judged
from envs.languages import language_of
from envs.run_plan import source_of
from envs.sandbox import SandboxConfig, SandboxError
from envs.start_tree import run_setup, start_tree
from policies.scripted import gold_calls
from tasks.canaries import (
    KEPT_FILES,
    TRIALS,
    Canary,
    repository_vocabulary,
    save_canaries,
    square,
    task_candidates,
)
from tasks.computed import ComputedFile, ComputedValue, digest, held_map, save_computed
from tasks.importing import task_yaml
from tasks.model import Task
from tasks.plain import decode
from tasks.suite import TaskFile
from tools.toolbox import Toolbox, ToolsConfig


class Validation(BaseModel):
    """Whether a task grades as it should: its gold patch passes and the empty patch fails, every time;
    and how many canaries it has, each verified to fail on the gold patch."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    gold_rewards: list[float]
    empty_rewards: list[float]
    problems: list[str]
    canaries: int = 0
    """Canaries the task keeps, each verified to fail on the gold patch. None makes a weaker task: a
    forger that passes every test is not caught."""
    canaries_tried: int = 0
    held_canaries: int = 0
    """Canaries made at each grading that change an expected value the grader holds: the child runs the
    real copy's very text (`tasks/canaries.held_canaries`)."""
    decided_in_parent: int = 0
    """Hidden assertions whose expected value the grader holds outside the sandbox."""
    hidden_assertions: int = 0
    """Hidden assertions of the test files the task's ids name."""
    no_canary: str = ""
    """Why the task has no canary of a kind, for the reader of `tasks validate`."""
    unwatched: list[str] = []
    """Named tests that no held value and no text canary watch (a process language's; refused)."""
    dropped: list[str] = []
    """PASS_TO_PASS tests this validation left out because nothing but their process watched them
    (`validate_dropping_unwatched`); the task's task.yaml loses them only where it validated without them."""
    uncovered: list[str] = []
    """Named tests (FAIL_TO_PASS and PASS_TO_PASS) that no canary changes: code under test that passes
    only these, in its own process, goes unseen (docs/reliability.md 5h). Reported, not refused; a process
    language refuses a named test that no held value and no text canary watch (`unwatched`, 5k)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def weak(self) -> bool:
        return self.canaries + self.held_canaries == 0


def validate_task(
    task: Task, sandbox_config: SandboxConfig, repeats: int = 3, keep: bool = True, episode: bool = True
) -> Validation:
    """Grades the gold patch and the empty patch `repeats` times each, and the gold patch once more as an
    episode plays it (`gold_episode_problems`); any deviation is a problem. Then tries canaries on the
    gold patch and, with `keep`, stores those that fail there in the task's folder. `episode=False` leaves
    the episode out (synthesis: its tasks have no setup commands, and the gold patch only reverts a bug)."""
    problems: list[str] = []
    if not task.gold_patch:
        problems.append("no gold patch")
    language = language_of(task)
    problems += language.task_problems(task)
    if language.holds_expected:
        task, computing = _with_computed(task, sandbox_config) if keep else (task, _stale_computed(task))
    else:
        computing = []
    problems += computing
    golds = (
        [grade_patch(task, task.gold_patch, sandbox_config) for _ in range(repeats)]
        if task.gold_patch
        else []
    )
    problems += [p for g in golds for p in _gold_problems(g, task)]
    if episode and task.gold_patch and not problems:
        problems += gold_episode_problems(task, sandbox_config, gold_passed=bool(golds))
    empties = [grade_patch(task, "", sandbox_config) for _ in range(repeats)]
    problems += [p for g in empties for p in _empty_problems(g)]
    undecided = ""
    if keep:
        kept, tried, undecided = (
            language.verify_canaries(task, sandbox_config) if not problems else ([], 0, "")
        )
        unwatched = language.unwatched(task, kept) if not problems else []
        problems += unwatched_problems(unwatched)
        if task.folder is not None and not problems:  # what grading holds of the task, stored together
            save_computed(task.folder, task.hidden_tests.computed)
            save_canaries(task.folder, kept)
    else:  # the stored ones, checked: drawn at random, they are not made again
        kept, tried = task.hidden_tests.canaries, len(task.hidden_tests.canaries)
        graded = _stored_canaries_graded(golds, empties)
        still, undecided = (
            _failing_on_gold(task, kept, sandbox_config, graded) if not problems else (kept, "")
        )
        if undecided:
            problems.append(f"the stored canaries could not be checked: {undecided}")
        elif len(still) != len(kept) or any(not (c.lines or c.slots) for c in kept):
            problems.append(
                f"{len(kept) - len(still)} stored canaries no longer fail on the gold patch at their own "
                "assertion, or were made by an older grader: run it without --check"
            )
        unwatched = language.unwatched(task, kept) if not problems else []
        problems += unwatched_problems(unwatched, bool(unwatched) and _held_now(task, kept, sandbox_config))
    planned, decided, assertions = language.planned(task, kept)
    held = sum(not c.source for c in planned)  # a held canary runs the real copy's very text
    return Validation(
        task_id=task.id,
        gold_rewards=[g.reward for g in golds],
        empty_rewards=[g.reward for g in empties],
        problems=sorted(set(problems)),
        canaries=len(kept),
        canaries_tried=tried,
        held_canaries=held,
        decided_in_parent=decided,
        hidden_assertions=assertions,
        no_canary=_why_no_canary(task, len(kept), tried, held, undecided),
        uncovered=uncovered_tests(task, planned),
        unwatched=unwatched,
    )


def _gold_problems(g: Grade, task: Task) -> list[str]:
    """What a grade of the gold patch shows wrong: an infra error, or a hidden test that did not pass."""
    if g.infra_error:
        return [f"gold: infra error: {g.infra_error}"]
    if g.correct != 1.0:
        failing = {k: v for k, v in {**g.fail_to_pass, **g.pass_to_pass}.items() if v != "passed"}
        return [
            f"gold patch does not pass: {g.apply_error or g.tampering or failing}{not_collected(g, task)}"
        ]
    return []


def _empty_problems(g: Grade) -> list[str]:
    """What a grade of the empty patch shows wrong: an infra error, tampering (a stored text canary the bug
    itself meets passes there: every test then counts as an error), a pass, or a PASS_TO_PASS test failing."""
    if g.infra_error:
        return [f"empty: infra error: {g.infra_error}"]
    if g.tampering:
        return [f"the empty patch's grade found tampering: {'; '.join(g.tampering)}"]
    if g.correct != 0.0:
        return ["the empty patch passes: the hidden tests do not catch the bug"]
    failing = {k: v for k, v in g.pass_to_pass.items() if v != "passed"}
    return [f"PASS_TO_PASS tests fail at the base commit: {failing}"] if failing else []


UNWATCHED = "named tests that no held value and no text canary watch"
"""The start of the problem that refuses a task with named tests only their process decides."""


def unwatched_problems(unwatched: list[str], held_now: bool = False) -> list[str]:
    """The problem `tasks validate` reports for `unwatched` named tests (none when there are none);
    `held_now`: values computed on the gold tree now would watch some of them, where `--check` read only
    the stored ones (`_held_now`)."""
    if not unwatched:
        return []
    advice = "; the stored held values are missing or stale: validate it without --check" if held_now else ""
    return [
        f"{UNWATCHED} (a check of the value a test computes, or a literal the gold patch fails when changed,"
        f" is needed): {', '.join(unwatched)}{advice}"
    ]


def _held_now(task: Task, canaries: list[Canary], sandbox_config: SandboxConfig) -> bool:
    """Whether the expected values the gold tree computes now would watch more named tests than the
    stored ones (`--check` stores nothing, so its advice to validate without it must be true)."""
    language = language_of(task)
    if not language.holds_expected:
        return False
    files, problems = computed_values(task, sandbox_config)
    if problems or not files:
        return False
    fresh = task.model_copy(update={"hidden_tests": task.hidden_tests.model_copy(update={"computed": files})})
    return len(language.unwatched(fresh, canaries)) < len(language.unwatched(task, canaries))


DROP_ROUNDS = 3
"""Validations after the first that may drop more unwatched PASS_TO_PASS tests: the canaries are drawn
anew each time, so a test one draw watched may go unwatched in the next."""


def validate_dropping_unwatched(
    task: Task, sandbox_config: SandboxConfig, repeats: int = 3, episode: bool = True
) -> Validation:
    """`validate_task` (keeping what it makes); where it refuses the task only for PASS_TO_PASS tests that
    nothing but their process watches, the task validated again without them (up to `DROP_ROUNDS` times),
    and its task.yaml rewritten without them once it validates (gold 1, empty 0, canaries kept). A FAIL_TO_PASS
    test so refused refuses the task: it is what the task asks to fix, and nothing is dropped."""
    result = validate_task(task, sandbox_config, repeats, True, episode)
    dropped: list[str] = []
    for _ in range(DROP_ROUNDS):
        refused = set(result.unwatched)
        if not refused or refused & set(task.hidden_tests.fail_to_pass):
            break
        hidden = task.hidden_tests
        dropped += [t for t in hidden.pass_to_pass if t in refused]
        kept = [t for t in hidden.pass_to_pass if t not in refused]
        task = task.model_copy(update={"hidden_tests": hidden.model_copy(update={"pass_to_pass": kept})})
        result = validate_task(task, sandbox_config, repeats, True, episode)
    if dropped and result.ok and task.folder is not None:
        _write_pass_to_pass(task.folder / "task.yaml", task.hidden_tests.pass_to_pass)
    return result.model_copy(update={"dropped": dropped})


def _write_pass_to_pass(path: Path, kept: list[str]) -> None:
    """Rewrites the task.yaml at `path` with only the PASS_TO_PASS tests in `kept`."""
    spec = TaskFile.model_validate(yaml.safe_load(path.read_text()))
    left = [test for test in spec.pass_to_pass if test in set(kept)]
    path.write_text(task_yaml(spec.model_copy(update={"pass_to_pass": left})))


def uncovered_tests(task: Task, canaries: list[Canary]) -> list[str]:
    """The task's named tests that no canary (text or held) changes; a parametrized case counts as its
    function. A verifier-judged task names no pytest ids: none."""
    if task.hidden_tests.verifier is not None:
        return []
    covered = {f"{c.file}::{test}" for c in canaries for test in c.tests}
    named = [*task.hidden_tests.fail_to_pass, *task.hidden_tests.pass_to_pass]
    return [t for t in named if t.split("[", 1)[0] not in covered]


def _with_computed(task: Task, sandbox_config: SandboxConfig) -> tuple[Task, list[str]]:
    """The task with its expected sides computed on the gold tree (stored in its folder with its canaries,
    once the task proved valid), and the problems met doing so."""
    files, problems = computed_values(task, sandbox_config)
    if problems:
        return task, problems
    hidden = task.hidden_tests.model_copy(update={"computed": files})
    return task.model_copy(update={"hidden_tests": hidden}), []


def _stale_computed(task: Task) -> list[str]:
    """Stored computed values made from another text of their hidden file (`--check`)."""
    stale = [
        path
        for path, stored in task.hidden_tests.computed.items()
        if stored.sha256 != digest(source_of(task, path) or "")
    ]
    return (
        [
            f"computed expected values of {', '.join(stale)} were made from another text: run it without --check"
        ]
        if stale
        else []
    )


def _why_no_canary(task: Task, kept: int, tried: int, held: int, undecided: str = "") -> str:
    """Why a kind of canary is missing: '' when the task has both. `undecided`: why the trial grades of
    the canaries decided nothing, when they did not."""
    why = []
    if task.hidden_tests.verifier is not None:
        return "judged by a verifier script: canaries need pytest ids"
    if held == 0 and kept:
        why.append("no held canary: its files have text canaries, beside which one would mark the real text")
    elif held == 0:
        why.append(
            "no held canary: no assertion of the named tests has an expected value the grader can hold"
        )
    if kept == 0 and tried == 0:
        why.append(
            "no text canary: no constant in an assertion left in the tests, or in a rewritten one's input"
        )
    elif kept == 0 and undecided:
        why.append(f"no text canary: {undecided}")
    elif kept == 0:
        why.append(f"no text canary: none of the {tried} tried failed on the gold patch at its own assertion")
    return "; ".join(why)


def gold_episode_problems(task: Task, sandbox_config: SandboxConfig, gold_passed: bool = False) -> list[str]:
    """The gold patch played as an agent plays it: a sandbox started as an episode's (setup commands
    run), the change made by `scripted:gold`'s own tool calls (an edit per hunk, a whole-file write where
    a hunk's text is not unique, deletions through bash), the agent's diff collected from it and graded.
    A gold the tools refuse, or whose right fix scores below 1 this way (setup output in the diff, files
    a sandbox cannot hold), is one no agent can solve, though its gold patch grades 1 when applied
    directly. With `gold_passed` (the caller graded the gold patch itself: 1), a collected diff that the
    judge keeps and drops exactly as it does the gold patch is that same graded tree and is not graded
    again (a third of a validation's grades; on a process-level language, a JVM or a build a test)."""
    base = start_tree(task, sandbox_config)
    gold = judge_patch(base, task.gold_patch or "", task)
    if isinstance(gold, str):
        return []  # the direct grade says why
    toolbox = Toolbox.for_task(task, ToolsConfig(bash_enabled=True))
    try:
        sandbox = start_task_sandbox(task, sandbox_config)
        try:
            run_setup(sandbox, task)
            refused = []
            for call in gold_calls(task, explore=False):
                seen = toolbox.call(sandbox, call.name, call.arguments)
                if seen.is_error:
                    refused.append(f"{call.name} {call.arguments.get('path', '')}: {seen.text[:300]}")
            patch = collect_patch(sandbox, task, sandbox_config)
        finally:
            sandbox.close()
    except SandboxError as e:
        return [f"gold episode: infra error: {e}"]
    if refused:
        return ["the tools refuse the gold patch's calls (scripted:gold): " + "; ".join(refused)]
    if gold_passed and same_graded_tree(judge_patch(base, patch, task), gold):
        return []
    g = grade_patch(task, patch, sandbox_config)
    if g.infra_error:
        return [f"gold episode: infra error: {g.infra_error}"]
    if g.correct != 1.0:
        failing = {k: v for k, v in {**g.fail_to_pass, **g.pass_to_pass}.items() if v != "passed"}
        why = g.apply_error or g.tampering or failing or f"dropped {g.dropped_paths}"
        return [f"the gold patch played through an episode does not pass: {why}{not_collected(g, task)}"]
    return []


def same_graded_tree(played: Judged | str, gold: Judged) -> bool:
    """Whether grading `played` grades what it grades of `gold`: the same kept contents, the same
    dropped paths, the same diff from the base (modes and links included)."""
    return (
        not isinstance(played, str)
        and played.kept == gold.kept
        and played.dropped == gold.dropped
        and played.patch == gold.patch
    )


def not_collected(grade: Grade, task: Task) -> str:
    """`; not collected: FILE: ERROR`, for the hidden files pytest could not import, with a hint where a
    module was not found in a repository whose code is under `src/` (only the root is on sys.path)."""
    if not grade.collect_errors:
        return ""
    text = "; ".join(f"{path}: {error}" for path, error in grade.collect_errors.items())
    missing = any("ModuleNotFoundError" in e for e in grade.collect_errors.values())
    hint = (
        " (a src/ layout? only the repository root is on sys.path)"
        if missing and (task.repo / "src").is_dir()
        else ""
    )
    return f"; not collected: {text}{hint}"


def verified_canaries(task: Task, sandbox_config: SandboxConfig) -> tuple[list[Canary], int, str]:
    """Canaries of the task's hidden files that fail on its gold patch at their own assertions, how many
    single changes were tried, and why the trial grades decided nothing ('' when they did). New values
    are drawn from the system's randomness. Per file, the tests with a single change that fails on the
    gold patch are joined into a square (`tasks.canaries.square`): A changes every one of them, B a second
    constant of those that have one, AB both; a square that does not fail whole on the gold patch falls
    back to A alone."""
    hidden = task.hidden_tests
    if hidden.verifier is not None or not task.gold_patch:
        return [], 0, ""
    vocabulary = repository_vocabulary(task.repo)
    trial = task_candidates(
        hidden.files,
        hidden.fail_to_pass + hidden.pass_to_pass,
        vocabulary,
        random.SystemRandom(),
        hidden.computed,
        most=TRIALS,
    )
    by_test: dict[tuple[str, str], list[Canary]] = {}
    single, undecided = _failing_on_gold(task, trial, sandbox_config)
    for canary in single:
        by_test.setdefault((canary.file, canary.test), []).append(canary)
    squares: dict[str, list[Canary]] = {}
    for file in dict.fromkeys(f for f, _ in by_test):
        groups = [g for (f, _), g in by_test.items() if f == file]
        source = hidden.files[file]
        squares[file] = square(
            [g[0] for g in groups],
            [g[1] for g in groups if len(g) > 1],
            source,
            held_map(hidden.computed, file, source),
        )
    made = [c for found_square in squares.values() for c in found_square]
    made_failing, made_undecided = _failing_on_gold(task, made, sandbox_config)
    failing = {c.label for c in made_failing}
    kept: list[Canary] = []
    for made_square in list(squares.values())[:KEPT_FILES]:
        whole = all(c.label in failing for c in made_square)
        kept += made_square if whole else [c for c in made_square[:1] if c.label in failing]
    return kept, len(trial), undecided or made_undecided


TRIAL_ATTEMPTS = 3
"""Times a trial grade of canaries is tried before the task goes without them: one slow or flaky grade
on a loaded host must not cost a task its canaries."""


def _stored_canaries_graded(golds: list[Grade], empties: list[Grade]) -> tuple[Grade | None, Grade | None]:
    """The last gold grade that passed every hidden test and the last empty grade that decided, for the
    check of the stored canaries (`validate_task(keep=False)`): every grade runs the stored canaries beside
    the hidden tests and reports each one's verdict, as a trial grade of them does; a trial differs only
    in what it makes of the verdicts (`grading.canary_findings`: nothing held against the patch). So the
    check's two trial grades are these, not two more (None where such a grade is missing)."""
    gold = next((g for g in reversed(golds) if not g.infra_error and g.correct == 1.0), None)
    empty = next((g for g in reversed(empties) if not g.infra_error), None)
    return gold, empty


def _failing_on_gold(
    task: Task,
    trial: list[Canary],
    sandbox_config: SandboxConfig,
    graded: tuple[Grade | None, Grade | None] = (None, None),
) -> tuple[list[Canary], str]:
    """Those of `trial` that come back failing at their own assertion on the gold patch, and that the
    base (the empty patch) does not pass either: a canary the bug itself meets would take a wrong answer
    for a forged one (a text canary that passes costs a grade `forgery_penalty`). A negated canary of a
    FAIL_TO_PASS test is kept though the base passes it: the base fails the real test, beside which a
    negated canary that passes costs nothing (`Canary.negated`), and the negation of a test's one failing
    check is what the bug itself meets. Each grade is tried up to `TRIAL_ATTEMPTS` times; when none
    decided, no canary and why (else ''). `graded`: grades of the gold and the empty patch already made
    with `trial` as the task's canaries (`_stored_canaries_graded`), read in place of trial grades."""
    if not trial:
        return [], ""
    gold, empty = graded
    g, why = (
        (gold, "")
        if gold is not None
        else _trial_grade(task, task.gold_patch or "", trial, sandbox_config, "the gold patch")
    )
    if g is None:
        return [], why
    failing = [c for c in trial if g.canaries.get(c.label) == "failed"]
    if not failing:
        return [], ""
    failing_tests = set(task.hidden_tests.fail_to_pass)
    exempt = [c for c in failing if c.negated and f"{c.file}::{c.test}" in failing_tests and not c.also]
    screened = [c for c in failing if c not in exempt]
    if not screened:
        return exempt, ""
    base, why = (
        (empty, "")
        if empty is not None
        else _trial_grade(task, "", screened, sandbox_config, "the empty patch")
    )
    if base is None:
        return [], why
    return [c for c in failing if c in exempt or base.canaries.get(c.label) != "passed"], ""


def _trial_grade(
    task: Task, patch: str, trial: list[Canary], sandbox_config: SandboxConfig, what: str
) -> tuple[Grade | None, str]:
    """The first of up to `TRIAL_ATTEMPTS` grades of `patch` with `trial` that decides (no infra error;
    on the gold patch, every hidden test passing), or None and what the last one met."""
    why = ""
    for _ in range(TRIAL_ATTEMPTS):
        g = grade_patch(task, patch, sandbox_config, trial=trial)
        if g.infra_error:
            why = f"infra error: {g.infra_error}"
        elif patch and g.correct != 1.0:
            why = "the hidden tests did not all pass beside the canaries"
        else:
            return g, ""
    return (
        None,
        f"the trial grade of {what} with the canaries decided nothing in {TRIAL_ATTEMPTS} tries ({why})",
    )


RUNS = 2
"""Probe runs on the gold tree: a value must come back the same in each."""


def computed_values(
    task: Task, sandbox_config: SandboxConfig, runs: int = RUNS
) -> tuple[dict[str, ComputedFile], list[str]]:
    """The task's computed expected sides by hidden file, and the problems met (an infra error: then no
    values). Nothing for a task judged by a verifier or without a gold patch."""
    hidden = task.hidden_tests
    if hidden.verifier is not None or not task.gold_patch:
        return {}, []
    seen: list[list[Probe]] = []
    for _ in range(runs):
        grade = grade_patch(task, task.gold_patch, sandbox_config, probe=True)
        if grade.infra_error:
            return {}, [f"computing expected values on the gold patch: infra error: {grade.infra_error}"]
        seen.append(grade.probes)
    kept = _agreed(seen)
    files: dict[str, ComputedFile] = {}
    for path in sorted({p for p, _, _ in kept}):
        source = source_of(task, path)
        if source is None:
            continue
        values = [
            ComputedValue(test=t, line=n, expected=v) for (p, t, n), v in sorted(kept.items()) if p == path
        ]
        files[path] = ComputedFile(sha256=digest(source), values=values)
    return files, []


def _agreed(seen: list[list[Probe]]) -> dict[tuple[str, str, int], list[Any]]:
    """(path, test, line) -> the expected side's encoding, for the assertions every run saw, always with
    equal sides and the same expected value."""
    by_run: list[dict[tuple[str, str, int], list[Probe]]] = []
    for probes in seen:
        grouped: dict[tuple[str, str, int], list[Probe]] = defaultdict(list)
        for probe in probes:
            grouped[(probe.path, probe.test, probe.line)].append(probe)
        by_run.append(grouped)
    common = set.intersection(*(set(g) for g in by_run)) if by_run else set()
    kept: dict[tuple[str, str, int], list[Any]] = {}
    for key in common:
        probes = [p for grouped in by_run for p in grouped[key]]
        first = _decoded(probes[0].expected)
        if first is None:
            continue
        if all(_same(p.actual, first) and _same(p.expected, first) for p in probes):
            kept[key] = probes[0].expected
    return kept


def _decoded(encoding: Any) -> Any:
    try:
        return (decode(encoding),)
    except ValueError:
        return None


def _same(encoding: Any, value: tuple[Any]) -> bool:
    other = _decoded(encoding)
    try:
        return other is not None and bool(other[0] == value[0])
    except Exception:  # values that refuse comparison are not held
        return False
