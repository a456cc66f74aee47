"""Grading: the agent's changes, judged as the tree they produce, tested by hidden tests in a fresh sandbox.

1. The agent's diff is taken host-side between the pristine base and a copy of the agent's repository
   (its `.git` entries removed); no git runs in, or on, the agent's repository.
2. The diff is applied host-side to a scratch copy of the base, and the resulting files decide what is
   graded (`envs/judge.py`): changes to test paths, test settings, start-up hooks, packaging metadata,
   compiled artefacts, links and shadowing modules are dropped. The patch text is never filtered.
3. A fresh sandbox starts from the pristine base; the kept files are written into it (no patch is
   applied there); the hidden tests are written over the result.
4. The tests run under the grader's own runner and ini file, with `python3 -I`; outcomes are read from a
   report file outside the repository, and a test that is skipped, errored, missing or uncollected
   counts as failed.
   Each target (a test file, or one test) runs in a child of the runner, which itself never imports the
   repository's code, keeps only a child's outcomes for the child's own target, and lets no child learn
   what the others run (grade_runner.py). A child also looks for what
   the code under test changed in it (pytest's or unittest's functions, hooks, test items), the parent
   for rewritten test files; a finding (`tampering`), or a report that does not match the digest the
   runner printed last, fails every test.
   Beside the hidden tests run the task's canaries (`tasks/canaries.py`, `envs/run_plan.py`): copies
   with one wrong expectation, under random file names drawn like the real copies'. A canary that passes
   beside the test it was made from is `tampering`.
4'. A task judged by a verifier script (Harbor's tests/test.sh) instead gets the verifier's files
   written at their absolute paths and its command run; its reward file (or, without one, its exit
   status) decides. A verifier that writes no reward counts as failed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import shutil
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envs.factory import start_task_sandbox
from envs.hidden_run import HiddenRun, Outcome, Probe
from envs.judge import Judged, apply_patch, base_modules, judge_tree
from envs.languages import HiddenRequest, Integrity, language_of
from envs.lifecycle import close_later
from envs.reward import WEIGHTS, RewardConfig, Simplicity, reward, simplicity
from envs.run_plan import RunPlan, canary_verdict, scored
from envs.sandbox import WORKDIR, Sandbox, SandboxConfig, SandboxError, SandboxUnusable
from envs.start_tree import run_setup, start_tree
from envs.suspicion import suspicions
from tasks import plain as plain_module
from tasks.canaries import (
    Canary,
)
from tasks.model import Task, Verifier
from tasks.patches import diff_trees

RUNNER = Path(__file__).with_name("grade_runner.py")
EXPECT = Path(plain_module.__file__)
"""Shipped beside the runner as `harness_expect`: what rewritten hidden tests report actual values to."""
READY = "harness-grader-ready"
"""Printed by the runner once pytest is imported, before any code of the repository runs."""
DONE = "harness-grader-done"
"""The runner's last line: DONE and the sha256 of the report it wrote."""
GRADER_INI = "[pytest]\naddopts =\nconsole_output_style = classic\n"


class Grade(BaseModel):
    """The full result of grading one patch on one task."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    correct: float
    """1 when every FAIL_TO_PASS and PASS_TO_PASS test passed (or the fraction, with partial credit)."""
    reward: float
    fail_to_pass: dict[str, Outcome]
    pass_to_pass: dict[str, Outcome]
    patch_applied: bool
    apply_error: str | None = None
    dropped_paths: list[str]
    """Paths of the diff the grader ignored (tests, test settings, start-up hooks, artefacts, links)."""
    dropped_why: dict[str, str] = Field(default_factory=dict)
    """Why each dropped path was not graded."""
    graded_patch: str = ""
    """The diff that was graded: the base to the base plus the kept changes."""
    simplicity: Simplicity | None
    duration_s: float
    infra_error: str | None = None
    """Set when grading itself failed (sandbox or daemon trouble): not the patch's fault."""
    reused: bool = False
    """The grade of the same patch graded for another rollout of the same batch, given again, not graded
    again (`harness/rollouts/grade_cache.py`, `RolloutConfig.reuse_grades`)."""
    tampering: list[str] = Field(default_factory=list)
    """What the code under test changed in the test run itself (pytest, hooks, tests, the report), and
    canaries that passed; when set, every test counts as failed."""
    suspicion: list[str] = Field(default_factory=list)
    """`PATH: what` the graded diff adds that a bug fix has no business adding (`envs/suspicion.py`); shown,
    counted, and charged only by `RewardConfig.suspicion_penalty`."""
    canaries: dict[str, str] = Field(default_factory=dict)
    """Each canary run (`FILE::TEST (MUTATION)`) -> `failed` (at its own assertion, as it must), `passed`
    or `unexplained` (missing, crashed, stopped, failed elsewhere)."""
    decided_in_parent: int = 0
    """Hidden assertions whose expected value the grader held outside the sandbox (`tasks/expectations.py`)."""
    integrity: Integrity = "protected"
    """`unprotected`: a verifier script (a Harbor task's tests/test.sh) ran in the sandbox that holds the
    agent's code, as the user that writes the reward, so nothing keeps that code from writing the reward
    itself; `harness train` refuses such tasks unless `reward.allow_unprotected` (`integrity_of`).
    `process`: each hidden test ran in a process of its own whose exit status decided it, and the code
    under test ran in that process (another language's runtime, `envs/process_grading.py`): canaries catch
    a forger, no expected value is held outside the sandbox."""
    hidden_assertions: int = 0
    """Hidden assertions of the test files run, decided in the parent or not."""
    collect_errors: dict[str, str] = Field(default_factory=dict)
    """Hidden test files pytest could not collect -> the error's last line: why their tests are `error`
    or `missing` (a module not found, a syntax error). Told by the code under test: shown, never scored."""
    probes: list[Probe] = Field(default_factory=list, exclude=True)
    """A probe run's observations (`grade_patch(probe=True)`, `tasks validate`); never stored."""

    @classmethod
    def ungraded(cls, task_id: str, **fields: Any) -> Grade:
        """A grade of nothing, reward 0: a patch that did not apply (`apply_error`), or grading that could
        not run (`infra_error`)."""
        return cls(
            task_id=task_id, correct=0.0, reward=0.0, fail_to_pass={}, pass_to_pass={}, patch_applied=False,
            dropped_paths=[], simplicity=None, duration_s=0.0, **fields,
        )  # fmt: skip


class AgentTreeError(Exception):
    """The agent's repository could not be read or diffed because of what the agent left in it (odd
    names, modes, files the copy refuses, attributes or encodings git chokes on): its grade is 0 with
    this finding (`tree_failure`), never an infra error that training would leave out."""


INFRA_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.ENOMEM, errno.EMFILE, errno.ENFILE})
"""Host errors that are the machine's, not the agent's tree's."""


def integrity_of(task: Task) -> Integrity:
    """How far a task's grade can be trusted (`envs.languages.Integrity`): `unprotected` when a verifier
    script decides, run as the user that writes the reward; else what its language's runner reaches
    (`protected` for Python's, `process` where each test's own process decides)."""
    return "unprotected" if task.hidden_tests.verifier is not None else language_of(task).integrity


def refuse_unprotected(tasks: list[Task], config: RewardConfig) -> None:
    """Raises ValueError naming the tasks whose grade the agent's code could write, unless allowed."""
    unprotected = [t.id for t in tasks if integrity_of(t) == "unprotected"]
    if unprotected and not config.allow_unprotected:
        shown = ", ".join(unprotected[:5]) + (
            f" and {len(unprotected) - 5} more" if len(unprotected) > 5 else ""
        )
        raise ValueError(
            f"{len(unprotected)} task(s) are graded by a verifier script that runs as the user that writes the "
            f"reward ({shown}): a policy could learn to write its own reward. Leave them out, or set "
            "reward.allow_unprotected=true to train on them anyway."
        )


def collect_patch(sandbox: Sandbox, task: Task, config: SandboxConfig) -> str:
    """The agent's changes as a git-format patch against the task's start tree (`envs/start_tree.py`:
    its repository after its setup commands, in sandboxes of `config`). A sandbox that no longer
    answers is an infra error (SandboxError); an executor that answers with an error, a copy that cannot
    be unpacked, or a diff git refuses is the agent's tree's doing (AgentTreeError)."""
    base = start_tree(task, config)
    with tempfile.TemporaryDirectory(prefix="harness-collect-") as tmp:
        new = Path(tmp) / "repo"
        try:
            sandbox.copy_out(WORKDIR, new)
        except SandboxUnusable:
            raise
        except SandboxError as e:
            raise AgentTreeError(f"the repository could not be copied out: {e}") from e
        except (OSError, tarfile.TarError, ValueError, UnicodeError) as e:
            _raise_if_infra(e)
            raise AgentTreeError(f"the repository could not be unpacked: {e}") from e
        try:
            drop_git_entries(new)
            return diff_trees(base, new)
        except (OSError, RuntimeError, ValueError, UnicodeError) as e:
            _raise_if_infra(e)
            raise AgentTreeError(f"the repository could not be diffed: {str(e)[:500]}") from e


def _raise_if_infra(error: BaseException) -> None:
    if isinstance(error, OSError) and error.errno in INFRA_ERRNOS:
        raise SandboxError(f"the host could not hold the repository: {error}") from error


def tree_failure(task: Task, error: AgentTreeError) -> Grade:
    """The grade of an episode whose repository could not be read: 0, with the reason."""
    return Grade.ungraded(task.id, apply_error=f"the agent's tree: {error}")


def drop_git_entries(tree: Path) -> None:
    """Removes every `.git` (folder, gitfile or link) in a copy of the agent's repository. Host git takes a
    folder holding one for a nested repository and reads the repository it names, which a gitfile can
    put anywhere on the host; without them, the agent's files in such a folder are diffed as files."""
    for root, dirs, files in os.walk(tree):
        for name in [*dirs, *files]:
            path = Path(root) / name
            if name == ".git":
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        dirs[:] = [d for d in dirs if d != ".git"]


def _outcome(name: str, outcomes: dict[str, str]) -> Outcome:
    found = outcomes.get(name)
    if found in ("passed", "failed", "error", "skipped"):
        return found  # type: ignore[return-value]
    return "missing"


def grade_patch(
    task: Task,
    patch: str,
    sandbox_config: SandboxConfig,
    reward_config: RewardConfig | None = None,
    trial: list[Canary] | None = None,
    probe: bool = False,
) -> Grade:
    """Grades `patch` on `task` in a fresh sandbox. Infra failures come back as `infra_error`.

    The task's canaries run beside its hidden tests, and one that passes is tampering. `trial` replaces
    them with canaries on trial (`tasks validate`): their outcomes are reported, never held against the
    patch. `probe`: validation's run that computes expected sides on the gold tree (`tasks/computed.py`):
    no canaries, and both sides of each candidate assertion come back in `Grade.probes`."""
    reward_config = reward_config or RewardConfig()
    started = time.monotonic()
    empty = Grade.ungraded(task.id)
    try:
        base = start_tree(task, sandbox_config)
    except SandboxError as e:
        return empty.model_copy(update={"infra_error": str(e), "duration_s": time.monotonic() - started})
    judged, sandbox = _judge_while_starting(task, base, patch, sandbox_config)
    if isinstance(judged, str):  # a patch that does not apply is told as such, whatever the sandbox did
        return empty.model_copy(update={"apply_error": judged, "duration_s": time.monotonic() - started})
    empty = empty.model_copy(
        update={
            "dropped_paths": sorted(judged.dropped),
            "dropped_why": judged.dropped,
            "graded_patch": judged.patch,
        }
    )
    if isinstance(sandbox, SandboxError):
        return empty.model_copy(
            update={"infra_error": str(sandbox), "duration_s": time.monotonic() - started}
        )
    try:
        return _grade_in(sandbox, task, judged, empty, reward_config, started, trial, probe)
    except SandboxError as e:
        return empty.model_copy(update={"infra_error": str(e), "duration_s": time.monotonic() - started})
    finally:
        close_later(sandbox)  # the grade is decided: it is returned while the sandbox goes


def _judge_while_starting(
    task: Task, base: Path, patch: str, config: SandboxConfig
) -> tuple[Judged | str, Sandbox | SandboxError]:
    """`judge_patch` here while the grading sandbox starts in a thread (mostly the daemon's or the
    kernel's work: a third of the start on Docker overlaps the judging). The sandbox is closed again when
    the patch does not apply, or when judging fails."""
    with ThreadPoolExecutor(1, thread_name_prefix="grade-start") as pool:
        starting = pool.submit(_started, task, config)
        try:
            judged = judge_patch(base, patch, task)
        except BaseException:
            _close(starting.result())
            raise
        sandbox = starting.result()
    if isinstance(judged, str):  # not graded: the patch does not apply
        _close(sandbox)
    return judged, sandbox


def _started(task: Task, config: SandboxConfig) -> Sandbox | SandboxError:
    try:
        return start_task_sandbox(task, config)
    except SandboxError as e:
        return e


def _close(sandbox: Sandbox | SandboxError) -> None:
    if not isinstance(sandbox, SandboxError):
        sandbox.close()


def judge_patch(base: Path, patch: str, task: Task) -> Judged | str:
    """What grading keeps of the tree `patch` makes of `base` (`envs/judge.py`); the reason, when it does
    not apply."""
    with tempfile.TemporaryDirectory(prefix="harness-judge-") as tmp:
        error = apply_patch(base, patch, Path(tmp) / "repo")
        return (
            error
            if error is not None
            else judge_tree(base, Path(tmp) / "repo", set(task.hidden_tests.files), language_of(task).dropped)
        )


def write_kept(sandbox: Sandbox, judged: Judged) -> None:
    """The kept changes, file by file, into the sandbox's pristine copy, as `write_changes` makes them on
    the host: deletions first (in path order), then the new files; a folder the agent turned into a file
    (its files deleted above) is removed before the file is written."""
    deleted = [path for path, content in judged.kept.items() if content is None]
    for path in deleted:
        removed = sandbox.run(["rm", "-rf", "--", path], timeout=60)
        if removed.exit_code != 0:
            raise SandboxError(f"cannot remove {path}: {removed.output[-500:]}")
    emptied = {
        p for p, c in judged.kept.items() if c is not None and any(d.startswith(p + "/") for d in deleted)
    }
    for path, content in judged.kept.items():
        if content is None:
            continue
        if path in emptied:
            sandbox.run(["rm", "-rf", "--", path], timeout=60)
        sandbox.write_file(path, content)


def _grade_in(
    sandbox: Sandbox,
    task: Task,
    judged: Judged,
    empty: Grade,
    reward_config: RewardConfig,
    started: float,
    trial: list[Canary] | None,
    probe: bool = False,
) -> Grade:
    timeout = task.limits.grade_timeout_s
    with ThreadPoolExecutor(1, thread_name_prefix="grade-static") as pool:  # while the tests run
        static = pool.submit(_static_terms, task, judged, reward_config)
        run_setup(sandbox, task, timeout)  # /repo is now the start tree the patch was judged against
        grader_dir = f"/tmp/grader-{secrets.token_hex(8)}"
        write_kept(sandbox, judged)
        verifier = task.hidden_tests.verifier
        if verifier is not None:
            for path, content in task.hidden_tests.files.items():
                sandbox.write_file(path, content.encode())
            tests = _run_verifier(sandbox, verifier, timeout)
        else:
            canaries = task.hidden_tests.canaries if trial is None else trial
            request = HiddenRequest(
                sandbox, task, canaries, grader_dir, timeout, trial is None and not probe, probe
            )
            tests = language_of(task).run_hidden(request)
        judged_simplicity, static_suspect = static.result()
    suspect = [*static_suspect, *tests.suspicion]
    f2p, p2p, score, timed_out = tests.fail_to_pass, tests.pass_to_pass, tests.score, tests.timed_out
    all_passed = 1.0 if score == 1.0 and not timed_out else 0.0
    correct = score if reward_config.partial_credit else all_passed
    return empty.model_copy(
        update={
            "correct": correct,
            "reward": reward(
                correct, judged_simplicity.penalty, reward_config, suspect=bool(suspect), forged=tests.forged
            ),
            "suspicion": suspect,
            "fail_to_pass": f2p,
            "pass_to_pass": p2p,
            "patch_applied": True,
            "simplicity": judged_simplicity,
            "duration_s": time.monotonic() - started,
            "tampering": tests.tampering,
            "canaries": tests.canaries,
            "collect_errors": tests.collect_errors,
            "decided_in_parent": tests.decided_in_parent,
            "integrity": integrity_of(task),
            "hidden_assertions": tests.hidden_assertions,
            "probes": tests.probes,
        }
    )


def _static_terms(task: Task, judged: Judged, reward_config: RewardConfig) -> tuple[Simplicity, list[str]]:
    """What the graded diff itself decides: the simplicity term and the static suspicions (host CPU, a
    tenth of a grade on Docker, done while the sandbox runs the tests). A diff the terms cannot read (a
    file nested past what a parser can walk) is charged the whole penalty and named, never an exception
    out of grading: what the agent's tree causes is the agent's."""
    try:
        judged_simplicity = simplicity(
            judged.patch, task.gold_patch, judged.before, judged.after, reward_config, language_of(task).style
        )
        return judged_simplicity, suspicions(judged.before, judged.after)
    except Exception as e:
        parts = dict.fromkeys(WEIGHTS, 1.0)
        unread = Simplicity(
            changed_lines=0, gold_changed_lines=None, extra_files=[], debug_lines=[], commented_code_lines=[],
            new_warnings=[], parts=parts, penalty=1.0,
        )  # fmt: skip
        return unread, [f"the graded diff could not be analysed ({type(e).__name__})"]


MESSAGE = 300
"""Characters kept of a collection error's message."""


def _run_tests(
    sandbox: Sandbox, task: Task, plan: RunPlan, grader_dir: str, timeout: float, trusted: bool
) -> HiddenRun:
    """Runs the hidden pytest ids and the canaries. Besides the outcomes: the tampering found (the
    runner's findings and, when `trusted`, canaries that passed where the test they were made from passed
    too; then nothing passed), each canary's outcome, and the hidden files pytest could not collect."""
    sandbox.write_file(f"{grader_dir}/pytest.ini", GRADER_INI.encode())
    sandbox.write_file(f"{grader_dir}/run.py", RUNNER.read_bytes())
    sandbox.write_file(f"{grader_dir}/harness_expect.py", EXPECT.read_bytes())
    report = f"{grader_dir}/report-{secrets.token_hex(8)}.json"
    held = f"{grader_dir}/plan-{secrets.token_hex(8)}.json"
    child_limit = min(task.limits.test_file_timeout_s, timeout)
    plan_file = {
        "targets": plan.targets(),
        "held": plan.held,
        "child_timeout_s": child_limit,
        "base_modules": base_modules(task.repo),
    }
    sandbox.write_file(held, json.dumps(plan_file).encode())
    run = sandbox.run(
        ["python3", "-I", "-S", "-B", f"{grader_dir}/run.py", report, f"{grader_dir}/pytest.ini", WORKDIR, held],
        timeout=timeout,
        env={"PYTHONHASHSEED": "0", "HARNESS_GRADER_SANDBOX": "1"},
    )  # fmt: skip
    if READY not in run.output and not run.timed_out:
        raise SandboxError(f"the grader's test runner did not start: {run.output.strip()[-1000:]}")
    read = _read_report(sandbox, report, run.output)
    tampering, not_collected = read.tampering, read.collect_errors
    outcomes = {run_id: scored(run_id, plan, read.outcomes, read.observed) for run_id in plan.ids.values()}
    canaries = {
        c.label: canary_verdict(run_id, plan, read.outcomes, read.observed, read.crashes, outcomes)
        for run_id, c in plan.canaries.items()
    }
    f2p = {name: _outcome(plan.ids[name], outcomes) for name in task.hidden_tests.fail_to_pass}
    p2p = {name: _outcome(plan.ids[name], outcomes) for name in task.hidden_tests.pass_to_pass}
    # Evidence of forging: a text canary passed (its changed constant sits in the child's own text, and
    # validation kept it only where the base and the gold patch both fail it). A held canary's changed value
    # never enters the sandbox: met, it was met by chance (a wrong answer equal to it), never by a forger.
    found, forged = canary_findings(
        canaries,
        {
            c.label: any(outcomes.get(i) == "passed" for i in plan.watched[r][1])
            for r, c in plan.canaries.items()
        },
        {c.label: c.held is None for c in plan.canaries.values()},
        trusted,
    )
    tampering += found
    if tampering:
        f2p, p2p = dict.fromkeys(f2p, "error"), dict.fromkeys(p2p, "error")
    passed = sum(o == "passed" for o in (*f2p.values(), *p2p.values()))
    score = passed / (len(f2p) + len(p2p))
    errors = _task_paths(not_collected, plan)
    suspect = [*dict.fromkeys(_task_finding(x, plan) for x in read.suspicion)]
    counts = {"decided_in_parent": plan.decided, "hidden_assertions": plan.assertions}
    probes = probe_pairs(plan, read.observed) if plan.probe else []  # a grade's own run has none
    return HiddenRun(
        f2p,
        p2p,
        score,
        run.timed_out,
        tampering,
        canaries,
        errors,
        suspicion=suspect,
        forged=forged,
        probes=probes,
        **counts,
    )


def canary_findings(
    verdicts: dict[str, str], real_passed: dict[str, bool], text: dict[str, bool], trusted: bool
) -> tuple[list[str], bool]:
    """Tampering told by canaries (each by label: its verdict, whether the real copy of its test passed,
    whether it is a text canary only a forger meets: a changed literal, not a negated condition), and
    whether outcomes were forged (such a canary passed). Nothing while canaries are on trial (`trusted`
    False). Where the real test passed, its canary must come back failing at its own assertion; a changed
    literal met where the real copy failed is a wrong guess of a forger, and pays `forgery_penalty`."""
    if not trusted:
        return [], False
    forged = any(v == "passed" and text[label] for label, v in verdicts.items())
    found = [
        f"canary {label} came back {v} beside the real test, which passed: "
        "a test a child cannot tell from its canary was answered selectively or forged"
        for label, v in verdicts.items()
        if v != "failed" and real_passed[label]
    ]
    found += [
        f"canary {label} came back passed (its changed expectation was met) beside a real test that "
        "did not pass: outcomes were forged in a copy taken for the real one"
        for label, v in verdicts.items()
        if v == "passed" and text[label] and not real_passed[label]
    ]
    return found, forged


def probe_pairs(plan: RunPlan, observed: dict[str, list[list[Any]]]) -> list[Probe]:
    """Each probe's two sides, where a test (or a case) observed both exactly once."""
    paths = {r.split("::", 1)[0]: t.split("::", 1)[0] for t, r in plan.ids.items()}
    found: list[Probe] = []
    for run_id, entries in observed.items():
        name, _, node = run_id.partition("::")
        for slot, check in plan.checks.get(name, {}).items():
            if check.expected or name not in paths:
                continue
            actual = [value for s, value in entries if s == slot]
            expected = [value for s, value in entries if s == -1 - slot]
            if len(actual) == 1 and len(expected) == 1:
                found.append(
                    Probe(
                        path=paths[name],
                        test=check.test,
                        line=check.line,
                        node=node,
                        actual=actual[0],
                        expected=expected[0],
                    )
                )
    return found


def _task_finding(finding: str, plan: RunPlan) -> str:
    """`FILE: ...` with the file named as the task names it, not by the name it ran under."""
    run, sep, rest = finding.partition(": ")
    names = {r.split("::", 1)[0]: t.split("::", 1)[0] for t, r in plan.ids.items()}
    names |= {r.split("::", 1)[0]: f"a canary of {c.file}" for r, c in plan.canaries.items()}
    return f"{names.get(run, run)}{sep}{rest}"


def _task_paths(errors: dict[str, str], plan: RunPlan) -> dict[str, str]:
    """Collection errors keyed by the task's file names, not the names the files ran under."""
    names = {run.split("::", 1)[0]: task.split("::", 1)[0] for task, run in plan.ids.items()}
    names |= {run.split("::", 1)[0]: f"a canary of {c.file}" for run, c in plan.canaries.items()}
    named = {names.get(k.split("::", 1)[0], k): str(v)[:MESSAGE] for k, v in errors.items()}
    ordered = sorted(named.items(), key=lambda kv: kv[0].startswith("a canary of "))  # the task's files first
    return dict(ordered[:20])


@dataclass
class Report:
    """What the runner's report file says, once its digest matched."""

    outcomes: dict[str, str] = field(default_factory=dict)
    """Each run id (renamed files, canaries) -> passed, failed, error or skipped, as pytest said."""
    tampering: list[str] = field(default_factory=list)
    collect_errors: dict[str, str] = field(default_factory=dict)
    observed: dict[str, list[list[Any]]] = field(default_factory=dict)
    """Each run id -> [[slot, encoding], ...]: the actual values of its rewritten assertions."""
    crashes: dict[str, Any] = field(default_factory=dict)
    """Each failed run id -> [exception type, line in its own file, 0 when raised elsewhere]."""
    suspicion: list[str] = field(default_factory=list)
    """What the children's audit hooks saw the repository's code do (`grade_runner.Audit`)."""


def _read_report(sandbox: Sandbox, report: str, output: str) -> Report:
    """The runner's outcomes, findings and collection errors. No report (the run crashed or timed out):
    nothing passed. A report that is not the one whose digest the runner printed last was written by
    someone else."""
    try:
        raw = sandbox.read_file(report)
    except SandboxError:
        return Report()
    last = output.rstrip("\n").rsplit("\n", 1)[-1]
    if last != f"{DONE} {hashlib.sha256(raw).hexdigest()}":
        return Report(
            tampering=["the report is not the one the grader's runner wrote (its digest does not match)"]
        )
    try:
        parsed = json.loads(raw)
        errors = parsed.get("collect_errors", {})
        errors = {str(k): str(v) for k, v in errors.items()} if isinstance(errors, dict) else {}
        observed = parsed.get("observed", {})
        crashes = parsed.get("crashes", {})
        return Report(
            dict(parsed["outcomes"]),
            [str(t) for t in parsed["tampering"]],
            errors,
            {str(k): list(v) for k, v in observed.items() if isinstance(v, list)},
            {str(k): v for k, v in crashes.items()},
            [str(x) for x in parsed.get("suspicion", [])][:50],
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # nested past the stack too
        return Report(tampering=["the report is not valid JSON"])


def _run_verifier(sandbox: Sandbox, verifier: Verifier, timeout: float) -> HiddenRun:
    """Runs the verifier script; its one outcome is keyed by its command, its score is its reward."""
    for path, content in verifier.files.items():
        sandbox.write_file(path, content.encode())
    if verifier.reward_dir is not None:
        made = sandbox.run(["mkdir", "-p", verifier.reward_dir], timeout=30)
        if made.exit_code != 0:
            raise SandboxError(
                f"cannot make the verifier's folder {verifier.reward_dir}: {made.output[-500:]}"
            )
    run = sandbox.run(verifier.command, timeout=timeout, env=verifier.env)
    if run.timed_out:
        outcome: Outcome = "failed"
        score = 0.0
    elif verifier.reward_dir is None:
        score = 1.0 if run.exit_code == 0 else 0.0
        outcome = "passed" if score == 1.0 else "failed"
    else:
        outcome, score = _read_reward(sandbox, verifier.reward_dir)
    return HiddenRun({verifier.command: outcome}, {}, score, run.timed_out)


def _read_reward(sandbox: Sandbox, reward_dir: str) -> tuple[Outcome, float]:
    """Harbor's reward files: reward.json ({"reward": x}) wins over reward.txt (x); x is clamped to [0, 1]."""
    try:
        raw = sandbox.read_file(f"{reward_dir}/reward.json")
        try:
            value = float(json.loads(raw)["reward"])
        except (ValueError, KeyError, TypeError):
            return "error", 0.0
    except SandboxError:
        try:
            raw = sandbox.read_file(f"{reward_dir}/reward.txt")
        except SandboxError:
            return "missing", 0.0
        try:
            value = float(raw.decode(errors="replace").strip())
        except ValueError:
            return "error", 0.0
    score = min(1.0, max(0.0, value)) if value == value else 0.0  # NaN is no reward
    return ("passed" if score == 1.0 else "failed"), score
