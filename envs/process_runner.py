"""Runs hidden tests in the grading sandbox, each test in a process of its own, for the languages whose
tests are programs (`envs/process_grading.py`): Rust's `cargo test`, and any runner that can run one test
alone and tell its outcome by its exit status.

Standard library only, plus the grader's own runner beside it (`grader_kit.py`, envs/grade_runner.py) for
what both runners do alike (which imports pytest: so `site` runs, for the grader's own site folders; a task of
this family has no Python environment of its own); started as `python3 -I -B process_runner.py REPORT PLAN`. It makes itself
undumpable and reads the plan, then deletes it: the hidden files (real copies and canaries under random
names), and the commands. First the `prepare` command builds the repository as it is (no hidden file
written yet), then the folders a child can write are taken as they are (`Scratch`). For each target, in
an order drawn here: its one file is written, its `build` command compiles it (and, where the language
runs a compiled program, removes the file and its helper again: no test reads the text it runs; a program
that holds the text whole is tampering), and each
of its tests runs alone, in an order drawn for the copy, in a new process session with its own time limit; then every
process the sandbox holds besides this one's line is killed, and every entry of the writable folders is
removed and made again as it was taken (`Scratch.rebuild`: what a test touched and what it did not come
back alike, with new inodes and change times). A canary's copy runs the same tests as its real copy. So a
test's process sees its own copy only, never the others', and what a copy's tests leave reaches no other
copy but through counters the kernel keeps (process ids, inode numbers: docs/reliability.md 5k).

A test passed when its process exited 0 and printed what the plan's `passed` pattern matches (the runner
ran exactly that test); a build that fails fails each of its target's tests (`error`). The code under
test runs in the process whose exit status decides, so it can end it as passed: canaries, which a process
cannot tell from the real copy, catch that (docs/reliability.md 5k). The report is written under a fresh
name, and its digest is the last line printed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

READY = "harness-grader-ready"
TAIL = 4000
"""Characters kept of the end of a failing test's (or build's) output."""
OBSERVE = b"harness-observe "
"""Starts a line that reports a value a rewritten assertion saw (`SLOT DEBUG`): the parent compares it."""
MAX_OBSERVED = 1000
"""Observation lines read of one test's run; a run that prints more has failed (what a forger's flood
would push past the limit is the real observation)."""
MAX_VALUE = 20000
"""Characters kept of one observed value."""


def _kit() -> Any:
    """The grader's own runner, shipped beside this file, imported for what both runners share."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grader_kit.py")
    spec = importlib.util.spec_from_file_location("grader_kit", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(argv: list[str], root: str, env: dict[str, str], limit: float) -> tuple[int | None, str, list[str]]:
    """(exit status, or None when it ran past `limit`; the end of its output; its observation lines) of
    `argv` in a new session. Output goes to an unnamed file, read back line by line: a process that
    prints without end fills the sandbox's disk, never this process's memory."""
    with tempfile.TemporaryFile() as out:
        started = subprocess.Popen(
            argv, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            code: int | None = started.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(started.pid, signal.SIGKILL)
            except OSError:
                pass
            code = None
            started.kill()
            started.wait()
        return (code, *_read_output(out))


def _read_output(out: Any) -> tuple[str, list[str]]:
    """The end of a run's output, and its lines that start with `OBSERVE` (at most `MAX_OBSERVED`)."""
    out.seek(0)
    observed: list[str] = []
    for raw in out:
        if raw.startswith(OBSERVE) and len(observed) <= MAX_OBSERVED:
            observed.append(raw[len(OBSERVE) :].decode("utf-8", "replace").rstrip("\n")[:MAX_VALUE])
    size = out.tell()
    out.seek(max(0, size - TAIL))
    tail = out.read()
    if size > TAIL and b"\n" in tail[:-1]:  # from the first whole line: a cut one misquotes (`rror: ...`)
        tail = tail[tail.index(b"\n") + 1 :]
    return tail.decode("utf-8", "replace"), observed


def _environment(plan: dict[str, Any]) -> dict[str, str]:
    """The children's environment: this one's without the grader's own variables, and the plan's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env.update({str(k): str(v) for k, v in plan.get("env", {}).items()})
    return env


def _write(root: str, path: str, content: str) -> None:
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as f:
        f.write(content)


def run_target(
    target: dict[str, Any], plan: dict[str, Any], env: dict[str, str], report: dict[str, Any]
) -> None:
    """Writes `target`'s file, builds it, runs each of its tests alone; outcomes into `report`."""
    root, limit, path = plan["root"], float(plan["child_timeout_s"]), str(target["path"])
    passed = re.compile(str(plan["passed"]))
    for gone in target.get("remove", []):  # the base's file a hidden one replaces (made again after)
        full = os.path.join(root, str(gone))
        if os.path.lexists(full) and not os.path.isdir(full):
            os.unlink(full)
    for extra, text in {**target.get("extra", {}), path: target["content"]}.items():
        _write(root, str(extra), str(text))
    build = target.get("build")
    if build:
        code, output, _ = _run([str(a) for a in build], root, env, limit)
        if code != 0:
            report["collect_errors"][path] = output if code is not None else f"the build ran past {limit:g} s"
            report["outcomes"].update({f"{path}::{t['name']}": "error" for t in target["tests"]})
            return
    if target.get("gone_once_built"):  # the tests run the compiled copy; its text is not theirs to read
        for written in [path, *target.get("extra", {})]:
            os.unlink(os.path.join(root, str(written)))
        if _holds(str(target.get("program") or ""), str(target["content"])):
            report["tampering"].append(
                f"{path}: the program built from it holds its text (a test file embedded or included)"
            )
            report["outcomes"].update({f"{path}::{t['name']}": "error" for t in target["tests"]})
            return
    tests = list(target["tests"])
    random.SystemRandom().shuffle(tests)  # no test is first in every copy
    for test in tests:
        run_id = f"{path}::{test['name']}"
        started = time.monotonic()
        where = os.path.join(root, str(test.get("cwd") or "."))
        code, output, observed = _run([str(a) for a in test["argv"]], where, env, limit)
        ok = code == 0 and passed.search(output) is not None and len(observed) <= MAX_OBSERVED
        report["outcomes"][run_id] = "passed" if ok else "failed"
        if observed:
            report["observed"][run_id] = [line.split(" ", 1) for line in observed if " " in line]
        report["seconds"][run_id] = round(time.monotonic() - started, 3)
        if not ok:
            report["crashes"][run_id] = output if code is not None else f"ran past its limit of {limit:g} s"


def _holds(program: str, text: str) -> bool:
    """Whether the file `program` holds `text` (UTF-8) whole: what embedding or including a file puts there."""
    if not program:
        return False
    try:
        with open(program, "rb") as f:
            return text.encode("utf-8") in f.read()
    except OSError:
        return False


def _read_plan(path: str) -> dict[str, Any]:
    with open(path) as f:
        plan: dict[str, Any] = json.load(f)
    os.unlink(path)
    return plan


def main() -> None:
    report_path, plan_path = sys.argv[1:3]
    in_sandbox = os.environ.pop("HARNESS_GRADER_SANDBOX", None) == "1"
    kit = _kit()
    kit.undumpable()
    plan = _read_plan(plan_path)
    env = _environment(plan)
    report: dict[str, Any] = {
        "outcomes": {},
        "collect_errors": {},
        "crashes": {},
        "observed": {},
        "seconds": {},
        "tampering": [],
    }
    print(READY, flush=True)
    prepare = plan.get("prepare")
    if prepare:  # the repository built as it is, before any hidden file is on disk
        code, output, _ = _run([str(a) for a in prepare], plan["root"], env, float(plan["child_timeout_s"]))
        if code != 0:
            report["collect_errors"]["(build)"] = (
                output if code is not None else "the build ran past its limit"
            )
    scratch = kit.Scratch([plan["root"], *(kit.SCRATCH if in_sandbox else [])])
    ipc = kit.remove_ipc(set()) if in_sandbox else set()
    targets = list(plan["targets"])
    random.SystemRandom().shuffle(targets)
    for target in targets:
        if "(build)" in report["collect_errors"]:
            report["outcomes"].update({f"{target['path']}::{t['name']}": "error" for t in target["tests"]})
            continue
        run_target(target, plan, env, report)
        if in_sandbox:  # what a test left running must not see the next copy, nor the report
            kit.stop_the_others(spare=set())
        scratch.rebuild()  # every entry made again: which ones a test touched is no mark for the next copy
        ipc = kit.remove_ipc(ipc) if in_sandbox else ipc
    kit.write_report(report_path, report)
    os._exit(0)


if __name__ == "__main__":
    main()
