"""Bad input everywhere (docs/reliability.md, section 6).

Malformed configs, task files, SWE-bench rows, Harbor task folders, run directories and model output,
each given to the real command line in a subprocess (or, for model output, to a real rollout): every
one gets a message naming the file, line or field, a non-zero exit and no Python traceback, and nothing
else is lost: the good rows are imported, the other trajectories of a run are still listed, replayed
and exported, and a run that cannot be continued is left as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from harness.agent.parsing import parse_tool_call
from harness.agent.trajectory import Trajectory
from harness.rollouts.config import RolloutConfig
from harness.rollouts.local import rollout
from harness.rollouts.store import RunStore, SegmentAdvantage, torn_tail
from policies.base import ChatReply, SamplingParams, ToolCall
from tasks.patches import git
from tests.conftest import require_backend
from tests.tasks.test_harbor import harbor_task
from tests.tasks.test_swebench import commit, diff, row

BUILTIN_REPOS = Path(__file__).parents[2] / "tasks" / "suites" / "builtin" / "repos"
TASKS = ["kvstore-001-expire-boundary", "ledger-001-month-end-inclusive"]


@dataclass
class Case:
    """One bad input given to the command line, and what it must answer."""

    name: str
    args: list[str]
    says: list[str]
    """Fragments of the message, all on stderr."""
    code: int = 2
    proc: subprocess.CompletedProcess[str] | None = field(default=None, repr=False)


def run_cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def run_all(cases: list[Case], env: dict[str, str] | None = None) -> dict[str, Case]:
    with ThreadPoolExecutor(3) as pool:
        for case, proc in zip(cases, pool.map(lambda c: run_cli(c.args, env), cases), strict=True):
            case.proc = proc
    return {case.name: case for case in cases}


def check(case: Case) -> None:
    proc = case.proc
    assert proc is not None
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert proc.returncode == case.code, (proc.returncode, proc.stderr)
    for fragment in case.says:
        assert fragment in proc.stderr, (fragment, proc.stderr)


# ---- configs ---------------------------------------------------------------------------------------


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.fixture(scope="module")
def config_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    d = tmp_path_factory.mktemp("configs")
    out = ["--out", str(d / "run")]
    syntax = write(d / "syntax.yaml", "suite: builtin\npolicy: [unclosed\n")
    unknown = write(d / "unknown.yaml", "suite: builtin\npolciy: scripted:gold\n")
    types = write(d / "types.yaml", "group_size: many\nconcurrency: -1\nloop: {max_turns: [1]}\n")
    top = write(d / "list.yaml", "- a\n- b\n")
    latin1 = write(d / "latin1.yaml", b"suite: caf\xe9\n")
    nul = write(d / "nul.yaml", b"suite: a\x00b\n")
    deep = write(d / "deep.yaml", "a: " + "[" * 20_000 + "]" * 20_000 + "\n")
    script = write(d / "script.yaml", "- read_file\n- {name: 3}\n")
    train = write(d / "train.yaml", f"model: {d}\nsteps: x\nbogus: 1\n")
    sft = write(d / "sft.yaml", f"model: {d}\nepochs: 0\nscripts: gold\n")
    cases = [
        Case("rollout: YAML syntax error", ["rollout", "--config", str(syntax)],
             [f"config {syntax}: not valid YAML", "line 2, column 9"]),
        Case("rollout: unknown key", ["rollout", "--config", str(unknown)],
             [f"config {unknown}: polciy: Extra inputs are not permitted"]),
        Case("rollout: wrong types", ["rollout", "--config", str(types)],
             ["group_size: Input should be a valid integer", "concurrency: Input should be greater than or "
              "equal to 1", "loop.max_turns: Input should be a valid integer"]),
        Case("rollout: a list, not a mapping", ["rollout", "--config", str(top)],
             [f"config {top}: expected a mapping at the top"]),
        Case("rollout: not UTF-8", ["rollout", "--config", str(latin1)],
             [f"config {latin1}: not valid YAML", "#x00e9: invalid continuation byte", "position 10"]),
        Case("rollout: a NUL byte", ["rollout", "--config", str(nul)],
             [f"config {nul}: not valid YAML", "unacceptable character #x0000"]),
        Case("rollout: nested 20,000 deep", ["rollout", "--config", str(deep)],
             [f"config {deep}: nested too deeply"]),
        Case("rollout: no such file", ["rollout", "--config", str(d / "nope.yaml")],
             [f"config {d / 'nope.yaml'}: No such file or directory"]),
        Case("rollout: override without =", ["rollout", "noequals"], ["override 'noequals': expected key=value"]),
        Case("rollout: override of the wrong type", ["rollout", "sampling.temperature=hot"],
             ["override 'sampling.temperature=hot': sampling.temperature: Input should be a valid number"]),
        Case("rollout: override into a value", ["rollout", "--group-size", "2", "group_size.x=1"],
             ["override 'group_size.x=1': group_size is not a section"]),
        Case("rollout: unknown task id", ["rollout", "--tasks", "nope,kvstore-001-expire-boundary", *out],
             ["tasks: no task nope in the suite"]),
        Case("rollout: unknown suite", ["rollout", "--suite", str(d / "nosuite"), *out],
             [f"suite '{d / 'nosuite'}': not a built-in suite"]),
        Case("rollout: unknown policy backend", ["rollout", "--policy", "bogus:x", "--tasks", TASKS[0], *out],
             ["policy 'bogus:x': expected BACKEND:ARGS"]),
        Case("rollout: missing policy script", ["rollout", "--policy", f"scripted:{d / 'nope.yaml'}",
             "--tasks", TASKS[0], *out], [f"scripted policy file {d / 'nope.yaml'}: [Errno 2]"]),
        Case("rollout: policy script of the wrong shape", ["rollout", "--policy", f"scripted:{script}",
             "--tasks", TASKS[0], *out],
             [f"scripted policy file {script}: expected a list of {{name, arguments}} calls",
              "0: Input should be a valid dictionary", "1.name: Input should be a valid string"]),
        Case("train: wrong type and unknown key", ["train", "--config", str(train)],
             [f"config {train}: steps: Input should be a valid integer", "bogus: Extra inputs are not permitted"]),
        Case("train: model not a folder", ["train", f"model={d / 'nomodel'}"],
             [f"config: model: {d / 'nomodel'} is not a folder"]),
        Case("sft: bad values", ["sft", "--config", str(sft)],
             [f"config {sft}: ", "epochs: Input should be greater than or equal to 1",
              "scripts: Input should be a valid list"]),
    ]  # fmt: skip
    return run_all(cases)


CONFIG_CASES = [
    "rollout: YAML syntax error", "rollout: unknown key", "rollout: wrong types", "rollout: a list, not a mapping",
    "rollout: not UTF-8", "rollout: a NUL byte", "rollout: nested 20,000 deep", "rollout: no such file",
    "rollout: override without =", "rollout: override of the wrong type", "rollout: override into a value",
    "rollout: unknown task id", "rollout: unknown suite", "rollout: unknown policy backend",
    "rollout: missing policy script", "rollout: policy script of the wrong shape",
    "train: wrong type and unknown key", "train: model not a folder", "sft: bad values",
]  # fmt: skip


@pytest.mark.parametrize("name", CONFIG_CASES)
def test_a_bad_config_is_named_and_refused(name: str, config_cases: dict[str, Case]) -> None:
    check(config_cases[name])


# ---- task files ------------------------------------------------------------------------------------

GOOD_TASK = "title: t\nrepo: kvstore\nproblem_statement: p\nfail_to_pass: [tests/test_a.py::test_a]\n"


@pytest.fixture(scope="module")
def task_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    d = tmp_path_factory.mktemp("suites")

    def suite(
        name: str, task_yaml: str | bytes, task_id: str = "t-1", files: dict[str, str | bytes] | None = None
    ) -> Path:
        root = d / name.replace(" ", "-").replace(",", "")
        (root / "repos").mkdir(parents=True)
        (root / "repos" / "kvstore").symlink_to(BUILTIN_REPOS / "kvstore")
        write(root / task_id / "task.yaml", task_yaml)
        for path, content in (files or {}).items():
            write(root / task_id / path, content)
        return root

    outside = write(d / "secret.txt", "host secret\n")
    dangling = d / "dangling-repo"
    dangling.mkdir()
    (dangling / "gone.py").symlink_to(d / "nowhere.py")
    specs: list[tuple[str, str | bytes, str, dict[str, Any], list[str]]] = [
        ("missing field", GOOD_TASK.replace("title: t\n", ""), "t-1", {}, ["t-1/task.yaml: title: Field required"]),
        ("unknown key", GOOD_TASK + "titel: x\n", "t-1", {}, ["t-1/task.yaml: titel: Extra inputs are not permitted"]),
        ("wrong types", GOOD_TASK.replace("[tests/test_a.py::test_a]", "tests/test_a.py::test_a")
         + "limits: {max_turns: 0}\n", "t-1", {},
         ["fail_to_pass: Input should be a valid list", "limits.max_turns: Input should be greater than or equal to 1"]),
        ("no judge", GOOD_TASK.replace("fail_to_pass: [tests/test_a.py::test_a]\n", ""), "t-1", {},
         ["fail_to_pass: give at least one test id"]),
        ("bad id", GOOD_TASK, "bad id!", {}, ["bad id!: the folder's name is the task's id, and 'bad id!' is not one"]),
        ("YAML syntax error", "title: [unclosed\n", "t-1", {}, ["t-1/task.yaml: not valid YAML"]),
        ("task.yaml not UTF-8", b"title: caf\xe9\n", "t-1", {},
         ["t-1/task.yaml: not valid YAML", "#x00e9: invalid continuation byte"]),
        ("missing repository", GOOD_TASK.replace("repo: kvstore", "repo: nothere"), "t-1", {},
         ["t-1/task.yaml: repo: no folder 'nothere'"]),
        ("repository that cannot be copied", GOOD_TASK.replace("repo: kvstore", f"repo: {dangling}"), "t-1", {},
         [f"t-1/task.yaml: repo: cannot copy {dangling}: [Errno 2] No such file or directory"]),
        ("missing gold patch", GOOD_TASK + "gold_patch: gold.patch\n", "t-1", {}, ["gold_patch: no file"]),
        ("bug edit outside the repository", GOOD_TASK + "bug: [{path: ../../../../etc/hosts, old: a, new: b}]\n",
         "t-1", {}, ["bug.0.path: Value error, '../../../../etc/hosts' is not a path inside the repository"]),
        ("bug edit that does not match", GOOD_TASK + "bug: [{path: kvstore/store.py, old: 'no such text', new: b}]\n",
         "t-1", {}, ["t-1/task.yaml: bug.0.old: found 0 times in kvstore/store.py, expected 1"]),
        ("hidden test not UTF-8", GOOD_TASK, "t-1", {"hidden/tests/test_a.py": b"\xff\xfe = 1\n"},
         ["t-1/hidden/tests/test_a.py: not UTF-8 text (invalid start byte at byte 0)"]),
        ("hidden test a link out of the task", GOOD_TASK, "t-1", {"link": outside},
         [f"t-1/hidden/tests/test_a.py: a link to {outside}"]),
        ("image build without a Dockerfile", GOOD_TASK + "image_build: env\n", "t-1", {}, ["image_build: no Dockerfile"]),
    ]  # fmt: skip
    cases = []
    for name, task_yaml, task_id, files, says in specs:
        link = files.pop("link", None)
        root = suite(name, task_yaml, task_id, files)
        if link is not None:
            (root / task_id / "hidden" / "tests").mkdir(parents=True)
            (root / task_id / "hidden" / "tests" / "test_a.py").symlink_to(link)
        cases.append(Case(f"task: {name}", ["tasks", "list", "--suite", str(root)], says))
    (d / "empty").mkdir()
    cases.append(Case("task: a suite without tasks", ["tasks", "list", "--suite", str(d / "empty")],
                      [f"suite {d / 'empty'}: no TASK/task.yaml inside"]))  # fmt: skip
    return run_all(cases, {"HARNESS_CACHE": str(d / "cache")})


TASK_CASES = [
    "missing field", "unknown key", "wrong types", "no judge", "bad id", "YAML syntax error", "task.yaml not UTF-8",
    "missing repository", "repository that cannot be copied", "missing gold patch", "bug edit outside the repository",
    "bug edit that does not match", "hidden test not UTF-8", "hidden test a link out of the task",
    "image build without a Dockerfile", "a suite without tasks",
]  # fmt: skip


@pytest.mark.parametrize("name", TASK_CASES)
def test_a_bad_task_file_is_named_and_refused(name: str, task_cases: dict[str, Case]) -> None:
    check(task_cases[f"task: {name}"])


# ---- SWE-bench rows --------------------------------------------------------------------------------


def test_bad_swebench_rows_are_each_named_and_the_good_ones_imported(tmp_path: Path) -> None:
    clones = tmp_path / "clones"
    calc = clones / "acme__calc"
    git(["init", "-q", str(calc)])
    base = commit(
        calc, {"calc/__init__.py": "def sub(a, b):\n    return a + b\n", "tests/test_calc.py": "\n"}, "base"
    )
    fix = commit(calc, {"calc/__init__.py": "def sub(a, b):\n    return a - b\n",
                        "tests/test_calc.py": "from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n"},
                 "fix")  # fmt: skip
    good = row("acme__calc-1", "acme/calc", base, diff(calc, base, fix, "calc"), diff(calc, base, fix, "tests"),
               ["tests/test_calc.py::test_sub"], [])  # fmt: skip
    escape = "diff --git a/../../x b/../../x\n--- a/../../x\n+++ b/../../x\n@@ -0,0 +1 @@\n+x\n"
    bad: list[tuple[str | bytes, str]] = [
        (json.dumps(good | {"instance_id": "acme__calc-2", "FAIL_TO_PASS": 5}), "FAIL_TO_PASS: Input should be a valid list"),
        (json.dumps(good | {"instance_id": "acme__calc-3", "base_commit": 12345}), "base_commit: Input should be a valid string"),
        (json.dumps(good | {"instance_id": "acme__calc-4", "problem_statement": None}),
         "problem_statement: Input should be a valid string"),
        (json.dumps({"instance_id": "acme__calc-5"}), "repo: Field required; base_commit: Field required"),
        (json.dumps(good | {"instance_id": "acme__calc-6", "patch": "this is not a diff\n"}),
         "patch does not apply at base_commit"),
        (json.dumps(good | {"instance_id": "acme__calc-7", "patch": escape}), "patch does not apply at base_commit"),
        (json.dumps(good | {"instance_id": "acme__calc-8", "test_patch": "tests, but no diff\n"}),
         "test_patch: no `diff --git` file headers"),
        (json.dumps(good | {"instance_id": "../evil"}), "instance_id: String should match pattern"),
        (json.dumps([good]), "not a JSON object but a list"),
        (b'{"instance_id": "acme__calc-9", "repo": "caf\xe9"}', "not UTF-8 text (invalid continuation byte at byte 44)"),
        ('{"instance_id": "acme__calc-10", ', "not a JSON object: Expecting property name"),
    ]  # fmt: skip
    # The second good row's problem statement holds U+2028, which JSON allows raw in a string.
    second = json.dumps(
        good | {"instance_id": "acme__calc-11", "problem_statement": "a\u2028b\r\n"}, ensure_ascii=False
    )
    lines = [
        json.dumps(good).encode(),
        *(b if isinstance(b, bytes) else b.encode() for b, _ in bad),
        second.encode(),
    ]
    data = write(tmp_path / "instances.jsonl", b"\r\n".join(lines) + b"\r\n")
    only_bad = write(tmp_path / "bad.jsonl", b"\n".join(lines[1:-1]) + b"\n")
    common = ["--repos", str(clones), "--json"]
    proc = run_cli(["tasks", "import", "swebench", str(data), "--out", str(tmp_path / "suite"), *common])
    assert "Traceback" not in proc.stderr and proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["imported"] == ["acme__calc-1", "acme__calc-11"]
    assert [s["source"] for s in report["skipped"]] == [f"{data}:{n}" for n in range(2, 2 + len(bad))]
    for skipped, (_, says) in zip(report["skipped"], bad, strict=True):
        assert says in skipped["reason"], (skipped, says)
    proc = run_cli(["tasks", "import", "swebench", str(only_bad), "--out", str(tmp_path / "suite2"), *common])
    assert "Traceback" not in proc.stderr and proc.returncode == 1, proc.stderr
    assert len(json.loads(proc.stdout)["skipped"]) == len(bad)


# ---- Harbor task folders ---------------------------------------------------------------------------


def test_bad_harbor_folders_are_each_named(tmp_path: Path) -> None:
    root = tmp_path / "dataset"

    def broken(name: str) -> Path:
        return harbor_task(root / name)

    (broken("no-instruction") / "instruction.md").unlink()
    write(broken("bad-toml") / "task.toml", "version = \n")
    write(
        broken("wrong-types") / "task.toml", '[verifier]\ntimeout_sec = "soon"\n[agent]\ntimeout_sec = [1]\n'
    )
    (broken("no-test-sh") / "tests" / "test.sh").unlink()
    broken("bad name!")
    write(broken("latin1") / "instruction.md", b"caf\xe9\n")
    write(broken("empty-instruction") / "instruction.md", "  \n")
    (broken("multi-step") / "steps").mkdir()
    compose = broken("compose")
    (compose / "environment" / "Dockerfile").unlink()
    write(compose / "environment" / "docker-compose.yaml", "services: {}\n")
    write(broken("binary-tests") / "tests" / "data.bin", b"\x00\xff\xfe")
    expected = {
        "bad name!": "folder name 'bad name!' is no task id",
        "bad-toml": "task.toml: not valid TOML",
        "binary-tests": "tests/data.bin is not UTF-8 text",
        "compose": "only a Dockerfile environment is supported",
        "empty-instruction": "instruction.md is empty",
        "latin1": "instruction.md: 'utf-8' codec can't decode byte 0xe9",
        "multi-step": "multi-step tasks (steps/) are not supported",
        "no-instruction": "no instruction.md",
        "no-test-sh": "no tests/test.sh",
        "wrong-types": "task.toml: verifier.timeout_sec: Input should be a valid number",
    }
    proc = run_cli(["tasks", "import", "harbor", str(root), "--out", str(tmp_path / "suite"), "--json"])
    assert "Traceback" not in proc.stderr and proc.returncode == 1, proc.stderr
    reasons = {s["task_id"]: s["reason"] for s in json.loads(proc.stdout)["skipped"]}
    assert set(reasons) == set(expected)
    for name, says in expected.items():
        assert says in reasons[name], (name, reasons[name])


# ---- run directories -------------------------------------------------------------------------------

OTHER_TOOL = "2024-05-01 12:00:00 INFO watcher: checkpoint synced\n"
CORRUPTIONS: dict[str, tuple[int, bytes, str]] = {
    # name: (line to insert before (0: append), the bytes, what the message says)
    "another tool's line": (2, OTHER_TOOL.encode(), "trajectories.jsonl:2: not JSON (trailing characters"),
    "JSON of another schema": (3, b'{"event": "heartbeat", "t": 1}\n',
                               "trajectories.jsonl:3: not a trajectory: id: Field required"),
    "a trajectory of the wrong types": (2, b'{"schema_version": 1, "id": "a/0", "task_id": "a", "sample_index": "x"}\n',
                                        "trajectories.jsonl:2: not a trajectory: run: Field required"),
    "bytes that are not UTF-8": (0, b'{"id": "\xff\xfe"}\n', "trajectories.jsonl:5: not UTF-8 text"),
}  # fmt: skip
TORN = b'{"schema_version":1,"id":"kvstore-001-expire-boundary/9","ta'


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real rollout run: 2 tasks x 2 rollouts of the gold fix, on bwrap."""
    require_backend("bwrap")
    out = tmp_path_factory.mktemp("runs") / "clean"
    proc = run_cli(["rollout", "--policy", "scripted:gold-min", "--tasks", ",".join(TASKS), "--group-size", "2",
                    "--backend", "bwrap", "--out", str(out), "--json"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


def corrupted(clean: Path, dest: Path, name: str) -> Path:
    shutil.copytree(clean, dest)
    path = dest / "trajectories.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    if name == "a torn last line":
        path.write_bytes(b"".join(lines) + TORN)
    elif name == "a broken config.yaml":
        write(dest / "config.yaml", "suite: [unclosed\n")
    else:
        before, data, _ = CORRUPTIONS[name]
        at = before - 1 if before else len(lines)
        path.write_bytes(b"".join([*lines[:at], data, *lines[at:]]))
    return dest


@pytest.mark.parametrize("name", [*CORRUPTIONS, "a torn last line", "a broken config.yaml"])
def test_readers_name_a_bad_line_skip_it_and_lose_nothing_else(
    name: str, clean_run: Path, tmp_path: Path
) -> None:
    run = corrupted(clean_run, tmp_path / "run", name)
    ids = [t.id for t in RunStore(clean_run).trajectories()]
    skipped = name in CORRUPTIONS
    says = CORRUPTIONS[name][2] if skipped else "its last line is torn (60 bytes" if "torn" in name else None
    exported = tmp_path / "export.jsonl"
    commands = {
        "runs": ["runs", str(run), "--json"],
        "replay": ["replay", str(run), "--id", ids[-1]],
        "export": ["export", str(run), "--out", str(exported)],
        "export sft": ["export", str(run), "--format", "sft", "--out", str(tmp_path / "sft.jsonl")],
    }
    with ThreadPoolExecutor(2) as pool:
        procs = dict(zip(commands, pool.map(run_cli, commands.values()), strict=True))
    for command, proc in procs.items():
        assert "Traceback" not in proc.stderr + proc.stdout, (command, proc.stderr)
        assert proc.returncode == (1 if skipped else 0), (command, proc.stderr)
        if says is not None:
            assert f"harness: {run / 'trajectories.jsonl'}" in proc.stderr and says in proc.stderr, (
                command,
                proc.stderr,
            )
    assert [r["id"] for r in json.loads(procs["runs"].stdout)] == ids
    assert ids[-1] in procs["replay"].stdout
    assert [json.loads(line)["id"] for line in exported.read_text().splitlines()] == ids
    if name == "a broken config.yaml":  # what needs the config names it
        proc = run_cli(["replay", str(run), "--reexecute", "--id", ids[0]])
        check(Case(name, [], [f"{run / 'config.yaml'}: not a readable YAML file"], 2, proc))


@pytest.mark.parametrize("name", [*CORRUPTIONS, "a torn last line"])
def test_a_run_with_a_bad_line_is_not_continued_and_is_left_as_it_was(
    name: str, clean_run: Path, tmp_path: Path
) -> None:
    run = corrupted(clean_run, tmp_path / "run", name)
    before = (run / "trajectories.jsonl").read_bytes()
    args = ["rollout", "--policy", "scripted:gold-min", "--tasks", ",".join(TASKS), "--group-size", "2",
            "--backend", "bwrap", "--out", str(run)]  # fmt: skip
    proc = run_cli(args)
    assert "Traceback" not in proc.stderr, proc.stderr
    if name not in CORRUPTIONS:  # a torn tail is what a crash leaves: cut, and the run goes on
        assert proc.returncode == 0, proc.stderr
        assert torn_tail(run / "trajectories.jsonl") == 0
        assert (run / "trajectories.jsonl").read_bytes() == (clean_run / "trajectories.jsonl").read_bytes()
        return
    check(
        Case(name, args, [CORRUPTIONS[name][2], "A run is continued only on its own trajectories"], 2, proc)
    )
    assert (run / "trajectories.jsonl").read_bytes() == before


def test_a_foreign_line_in_learner_jsonl_is_named_and_the_other_advantages_are_shown(
    clean_run: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(clean_run, run)
    ids = [t.id for t in RunStore(clean_run).trajectories()]
    lines = [
        SegmentAdvantage(step=1, trajectory_id=ids[0], segment=0, advantage=0.5, learner_logprobs=[-0.1]),
        OTHER_TOOL,
        SegmentAdvantage(step=1, trajectory_id=ids[1], segment=0, advantage=-0.5, learner_logprobs=[-0.2]),
    ]
    write(
        run / "learner.jsonl", "".join(x if isinstance(x, str) else x.model_dump_json() + "\n" for x in lines)
    )
    says = f"harness: {run / 'learner.jsonl'}:2: not JSON"

    runs = run_cli(["runs", str(run), "--json"])
    replay = run_cli(["replay", str(run), "--id", ids[1]])

    for proc in (runs, replay):
        assert "Traceback" not in proc.stderr and proc.returncode == 1 and says in proc.stderr, proc.stderr
    shown = {row["id"]: row["advantage"] for row in json.loads(runs.stdout)}
    assert shown == {i: {ids[0]: 0.5, ids[1]: -0.5}.get(i) for i in ids}
    assert ids[1] in replay.stdout


def test_train_resume_on_a_run_with_a_foreign_line_is_refused(clean_run: Path, tmp_path: Path) -> None:
    run = corrupted(clean_run, tmp_path / "run", "another tool's line")
    before = (run / "trajectories.jsonl").read_bytes()
    model = tmp_path / "model"
    model.mkdir()
    proc = run_cli(["train", "--resume", f"model={model}", f"out={run}", f"tasks=[{TASKS[0]}]"])
    check(
        Case(
            "train --resume", [], [CORRUPTIONS["another tool's line"][2], "A run is continued only"], 2, proc
        )
    )
    assert (run / "trajectories.jsonl").read_bytes() == before


# ---- model output ----------------------------------------------------------------------------------

BIG = "x = 1\n" * 350_000
"""2.1 MB of file content in one tool call."""
CALLS: list[tuple[str, dict[str, Any] | str, str]] = [
    # (tool, arguments as the model sent them, what the observation says)
    ("bash", {"command": "printf 'a\\0b\\xff' > blob.bin; printf 'caf\\xe9 = 1\\n' > latin1.py"}, "exit code 0"),
    ("read_file", {"path": "blob.bin"}, "'blob.bin' is a binary file (4 bytes); it cannot be shown as text"),
    ("read_file", {"path": "latin1.py"}, "caf\ufffd = 1"),
    ("edit", {"path": "latin1.py", "old_str": "caf", "new_str": "cafe"},
     "'latin1.py' is not UTF-8 text (invalid continuation byte at byte 3)"),
    ("edit", {"path": "blob.bin", "old_str": "a", "new_str": "b"}, "'blob.bin' is a binary file"),
    ("write_file", '{"path": "broken.py", "content": ', "the arguments of write_file are not valid JSON"),
    ("write_file", "{'path': 'single.py'}", "Expecting property name enclosed in double quotes"),
    ("write_file", '["not", "an", "object"]', "the arguments of write_file must be a JSON object, not list"),
    ("write_file", {"path": "a.py"}, "invalid arguments for write_file: content: Field required"),
    ("write_file", '{"path": "lone.py", "content": "x = \\"\\ud800\\"\\n"}', "holds \\ud800, half of a UTF-16"),
    ("write_file", {"path": "s.py", "content": "\udcff"}, "holds \\udcff, half of a UTF-16"),
    ("write_file", {"path": "emoji_😀/ملف_עברית.py", "content": "s = 'e\u0301\u0301 👩‍👩‍👧 \u202eevil\u202c'\n"},
     "created emoji_😀/ملف_עברית.py (1 line)"),
    ("read_file", {"path": "emoji_😀/ملف_עברית.py"}, "s = 'e\u0301\u0301 👩‍👩‍👧 \u202eevil\u202c'"),
    ("write_file", {"path": "big.txt", "content": BIG}, "created big.txt (350000 lines)"),
    ("edit", {"path": "big.txt", "old_str": BIG + "z", "new_str": "y"}, "old_str was not found in 'big.txt'"),
    ("read_file", {"path": "big.txt", "start_line": 349_999}, "349999\tx = 1\n350000\tx = 1"),
    ("bash", {"command": "echo " + "A" * 1_000_000}, "Argument list too long"),
    ("x" * 1_000_000, {}, "unknown tool 'xxxxxxxx"),
    ("search", {"pattern": "[unclosed"}, ""),
]  # fmt: skip


class Garbler:
    """A chat model whose every reply is bad in one way: broken JSON, MBs of arguments, odd Unicode
    (RTL, combining marks, emoji, lone surrogates), binary files; its own text holds a lone surrogate
    and its summaries too."""

    kind: Literal["chat"] = "chat"
    spec = "test:garbler"

    def __init__(self) -> None:
        self.step = 0

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: SamplingParams
    ) -> ChatReply:
        if not tools:
            return ChatReply(content=f"summary \ud800 after {self.step} steps \u202e")
        self.step += 1
        if self.step > len(CALLS):
            return ChatReply(content="done \U0001f600", tool_calls=[ToolCall(name="submit", arguments={})])
        name, arguments, _ = CALLS[self.step - 1]
        return ChatReply(
            content=f"step {self.step} \ud83d", tool_calls=[ToolCall(name=name, arguments=arguments)]
        )


@pytest.fixture(scope="module")
def garbled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Trajectory]:
    require_backend("bwrap")
    out = tmp_path_factory.mktemp("garbled") / "run"
    config = RolloutConfig.model_validate(
        {"tasks": [TASKS[0]], "out": str(out), "sandbox": {"backend": "bwrap"}, "loop": {"max_turns": 60}}
    )
    rollout(config, policy=Garbler())
    (trajectory,) = RunStore(out).trajectories()
    return out, trajectory


def test_bad_model_output_becomes_error_observations_and_the_trajectory_is_kept(
    garbled: tuple[Path, Trajectory],
) -> None:
    _, t = garbled
    assert t.status == "ok", t.status_reason  # it went on to its submit
    actions = [turn for s in t.segments for turn in s.turns if turn.kind == "action"]
    assert len(actions) == len(CALLS) + 1
    for turn, (name, _, says) in zip(actions, CALLS, strict=False):
        text = turn.observation or ""
        assert says in text, (name[:20], says, text[:300])
        assert len(text) <= 12_100
    assert t.segments[0].turns[0].text == "step 1 \\ud83d"  # the lone surrogate is kept, escaped
    assert t.grade is not None and t.grade.infra_error is None and t.grade.patch_applied, t.grade
    t.final_diff.encode()  # UTF-8 text: Latin-1 and binary files come as binary patches
    assert "diff --git a/latin1.py b/latin1.py" in t.final_diff and "GIT binary patch" in t.final_diff
    assert '"a/emoji_\\360\\237\\230\\200/' in t.final_diff


def test_a_run_of_bad_model_output_replays_and_exports(
    garbled: tuple[Path, Trajectory], tmp_path: Path
) -> None:
    run, t = garbled
    commands = [
        ["runs", str(run)],
        ["replay", str(run), "--id", t.id],
        ["export", str(run), "--out", str(tmp_path / "t.jsonl")],
        ["export", str(run), "--format", "sft", "--out", str(tmp_path / "sft.jsonl")],
    ]
    with ThreadPoolExecutor(2) as pool:
        for args, proc in zip(commands, pool.map(run_cli, commands), strict=True):
            assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr)
    (row,) = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert row["id"] == t.id and row["final_diff"] == t.final_diff
    sft = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert any(
        '"arguments": {"path": "broken.py", "content": }' in m["content"] for r in sft for m in r["messages"]
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("I will fix it now.", "No tool call found"),
        (
            '<tool_call>{"name": "read_file", "arguments": {"path": "a.py"</tool_call>',
            "not valid JSON (Expecting",
        ),
        ('<tool_call>{"name": "read_file"} trailing</tool_call>', "not valid JSON (Extra data"),
        ("<tool_call>[1, 2]</tool_call>", 'a JSON object with a string "name"'),
        ('<tool_call>{"name": 7}</tool_call>', 'a JSON object with a string "name"'),
        (
            '<tool_call>{"name": "bash", "arguments": [1]}</tool_call>',
            'The "arguments" of bash must be a JSON object',
        ),
        ('<tool_call>{"name": "bash", "arguments": {"command": "\\udcff"}}</tool_call>', "holds \\udcff"),
        ('<tool_call>{"name": "write_file", "arguments": {"content": "' + "y" * 3_000_000, "not valid JSON"),
        ("<tool_call>" + "\u202e\u0301" * 1000, "not valid JSON (Expecting value"),
    ],
    ids=[
        "no call",
        "unclosed",
        "trailing",
        "array",
        "name",
        "arguments",
        "surrogate",
        "3 MB unclosed",
        "rtl",
    ],
)
def test_broken_tool_calls_of_a_token_model_get_a_message(text: str, says: str) -> None:
    call, problem = parse_tool_call(text)
    assert call is None and problem is not None and says in problem, problem
    assert len(problem) < 500


def test_a_tool_call_in_unicode_passes_whole() -> None:
    text = '<tool_call>{"name": "write_file", "arguments": {"path": "ملف.py", "content": "\\ud83d\\ude00 e\u0301"}}'
    call, problem = parse_tool_call(text + "</tool_call>")
    assert problem is None and call is not None
    assert call.arguments == {"path": "ملف.py", "content": "\U0001f600 e\u0301"}
