"""Task synthesis: each mutation operator on small code, a synthesized suite end to end, and real libraries.

The real-code tests download two pinned source distributions from PyPI (cached under
~/.cache/harness/sdists, so reruns are offline), synthesize ten tasks from each and validate every one.
"""

from __future__ import annotations

import ast
import difflib
import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from envs.factory import start_sandbox
from envs.judge import base_modules
from envs.sandbox import SandboxConfig
from envs.synthesis import SandboxPytest, synthesize_suite
from harness.cli import main
from tasks.mutations import OPERATORS, Mutation, find_mutations
from tasks.suite import load_suite
from tasks.synth import (
    Kept,
    SynthConfig,
    SynthError,
    bug_edit,
    called_functions,
    copy_repository,
    fetch_sdist,
    load_synth_info,
    problem_statement,
    run_baseline,
    run_tests_timeout,
    title,
)
from tests.conftest import require_backend


def mutants_of(code: str, operator: str) -> list[Mutation]:
    return [m for m in find_mutations("m.py", code) if m.operator == operator]


def mutants(code: str, operator: str) -> list[str]:
    return [m.apply(code) for m in mutants_of(code, operator)]


def changed(code: str, mutant: str) -> list[str]:
    """The diff's -/+ lines, without context."""
    diff = difflib.unified_diff(code.splitlines(), mutant.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]


# ---- the operators ---------------------------------------------------------------------------------


def test_flipped_comparison_moves_a_boundary_or_negates() -> None:
    code = "def f(a, b):\n    # a < b here\n    return a < b and a is not None and b not in (1, 2)\n"
    assert [changed(code, m)[1] for m in mutants(code, "flipped_comparison")] == [
        "+    return a <= b and a is not None and b not in (1, 2)",
        "+    return a < b and a is None and b not in (1, 2)",
        "+    return a < b and a is not None and b in (1, 2)",
    ]


def test_off_by_one_changes_integers_in_indexes_arithmetic_and_ranges_only() -> None:
    code = (
        "def f(xs):\n    size = 5\n    for i in range(2):\n        xs[0] += 3\n    return xs[len(xs) - 1]\n"
    )
    assert sorted(changed(code, m)[1] for m in mutants(code, "off_by_one")) == [
        "+        xs[-1] += 3",
        "+        xs[0] += 2",
        "+        xs[0] += 4",
        "+        xs[1] += 3",
        "+    for i in range(1):",
        "+    for i in range(3):",
        "+    return xs[len(xs) - 2]",
        "+    return xs[len(xs)]",  # `- 1` dropped rather than `- 0`
    ]


def test_dropped_branch_removes_an_elif_clause_or_the_else_branch() -> None:
    code = (
        "def sign(x):\n    if x > 0:\n        return 1\n    elif x < 0:\n        return -1\n"
        "    else:  # zero\n        return 0\n"
    )
    assert [changed(code, m) for m in mutants(code, "dropped_branch")] == [
        ["-    elif x < 0:", "-        return -1"],
        ["-    else:  # zero", "-        return 0"],
    ]


def test_wrong_default_flips_booleans_and_shifts_integers() -> None:
    code = 'def f(x, n=2, *, strict=True, name="a"):\n    """Doc."""\n    return x\n'
    assert [changed(code, m)[1] for m in mutants(code, "wrong_default")] == [
        '+def f(x, n=1, *, strict=True, name="a"):',
        '+def f(x, n=3, *, strict=True, name="a"):',
        '+def f(x, n=2, *, strict=False, name="a"):',
    ]


def test_swapped_arguments_swaps_neighbours_but_not_symmetric_or_type_checks() -> None:
    code = "def f(a, b, c):\n    isinstance(a, int)\n    max(a, b)\n    return pow(a, (b + 1), c)\n"
    assert [changed(code, m)[1] for m in mutants(code, "swapped_arguments")] == [
        "+    return pow((b + 1), a, c)",
        "+    return pow(a, c, (b + 1))",
    ]


def test_removed_guard_deletes_an_early_exit_but_never_empties_a_block() -> None:
    code = (
        "def f(x, items):\n    if x is None:\n        raise ValueError('x')\n"
        "    for item in items:\n        if item:\n            continue\n        print(item)\n"
        "    if x:\n        return 1\n    return 2\n"
        "def g(x):\n    if x:\n        return 1\n"
    )
    assert [changed(code, m) for m in mutants(code, "removed_guard")] == [
        ["-    if x is None:", "-        raise ValueError('x')"],
        ["-        if item:", "-            continue"],
        ["-    if x:", "-        return 1"],
    ]


def test_mutations_keep_the_rest_of_the_file_byte_for_byte() -> None:
    code = (
        "import os  # comment\n\n\nclass Box:\n    def put(self, items, limit=3, strict=False):\n"
        '        """Doc: a < b."""\n        if not items:\n            raise ValueError("empty")\n'
        "        total = 0\n        for i in range(len(items) - 1):\n            if items[i] <= limit:\n"
        "                total += items[i]\n            elif items[i] is None:\n                continue\n"
        "            else:\n                total -= 1\n        label = f'{total + 1}'\n"
        "        return divmod(total, 2), label\n"
    )
    found = find_mutations("box.py", code)
    assert {m.operator for m in found} == set(OPERATORS)
    for m in found:
        mutant = m.apply(code)
        ast.parse(mutant)
        assert m.function == "Box.put"
        assert (
            code[: m.start] == mutant[: m.start]
            and code[m.end :] == mutant[len(mutant) - len(code) + m.end :]
        )
        assert 1 <= len(changed(code, mutant)) <= 4, (m, changed(code, mutant))
        assert "total + 1" in mutant  # f-strings are left alone


def test_bug_edit_takes_context_until_the_text_is_unique() -> None:
    code = "def f(a, b):\n    return a < b\n\n\ndef g(a, b):\n    return a < b\n"
    mutation = mutants_of(code, "flipped_comparison")[1]
    edit = bug_edit("m.py", code, mutation)
    assert code.count(edit.old) == 1
    assert code.replace(edit.old, edit.new) == mutation.apply(code)
    assert edit.old == "def g(a, b):\n    return a < b\n"
    feed = "def f(a):\n    \x0c\n    return a < 1\n"  # a form feed is no line break to ast
    mutation = mutants_of(feed, "flipped_comparison")[0]
    edit = bug_edit("m.py", feed, mutation)
    assert edit.old == "    return a < 1\n" and feed.replace(edit.old, edit.new) == mutation.apply(feed)


def test_problem_statement_says_what_goes_wrong_and_names_no_test(tmp_path: Path) -> None:
    """Issue 36, item 6: the statement names the library's functions the failing tests call and quotes
    the wrong values they saw, never a test's id or name, nor the mutated code."""
    (tmp_path / "calc").mkdir()
    (tmp_path / "calc" / "__init__.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "helpers.py").write_text("def check(x):\n    return x\n")
    (tmp_path / "tests" / "__init__.py").write_text("import calc as shared\n")
    (tmp_path / "tests" / "test_a.py").write_text(
        "import calc.ops as ops\nfrom calc import add\nfrom tests.helpers import check\n\nfrom . import shared\n\n"
        "def test_one():\n    assert check(add(1, 1)) == 3\n\n\n"
        "class TestTwo:\n    def test_two(self, n):\n        assert ops.half(n) == shared.mul(n)\n"
    )
    kept = Kept(
        fail_to_pass=["tests/test_a.py::test_one", "tests/test_a.py::TestTwo::test_two[1]"],
        pass_to_pass=["tests/test_a.py::test_three"],
        messages={
            "tests/test_a.py::test_one": "AssertionError: assert 2 == 3\n +  where 2 = <function add at 0x7f01>(1, 1)",
            "tests/test_a.py::TestTwo::test_two[1]": "ValueError: while evaluating `if items[i] <= limit:`",
        },
    )
    functions = called_functions(tmp_path, kept.fail_to_pass)
    assert functions == ["calc.add", "calc.ops.half", "calc.mul"]  # not the test folder's own helper
    text = problem_statement(kept, "python3 -m pytest -q tests", ["if items[i] <= limit:"], functions, "calc")
    heading = title(kept, functions, "calc")
    assert heading == "`calc.add`, `calc.ops.half` and 1 more raise `ValueError`"
    assert title(kept, functions[:2], "calc") == "`calc.add` and `calc.ops.half` raise `ValueError`"
    assert text.startswith(heading + ".")
    assert "    AssertionError: assert 2 == 3\n     +  where 2 = <function add>(1, 1)" in text
    assert "0x7f01" not in text and "items[i]" not in text  # no address, no mutated code
    assert "python3 -m pytest -q tests" in text
    for name in ("test_a", "test_one", "TestTwo", "test_two"):
        assert name not in text and name not in heading
    missing = Kept(
        fail_to_pass=["tests/test_a.py::test_one"],
        pass_to_pass=[],
        messages={"tests/test_a.py::test_one": "Failed: DID NOT RAISE <class 'ValueError'>"},
    )
    assert title(missing, [], "calc") == "`calc` does not raise `ValueError`"
    wrong = missing.model_copy(update={"messages": {"tests/test_a.py::test_one": "assert [1] == []"}})
    assert title(wrong, ["calc.add"], "calc") == "`calc.add` gives a wrong result"


# ---- a small repository, end to end ----------------------------------------------------------------

SHOP = '''"""A small library."""


def grade(score, passing=50):
    if score < 0:
        raise ValueError("a score is never negative")
    if score >= 90:
        return "A"
    elif score >= passing:
        return "pass"
    else:
        return "fail"


def last(items, n=1):
    if n <= 0:
        raise ValueError("n must be positive")
    return items[len(items) - n :]


def windows(items, size=2, pad=False):
    out = []
    for i in range(len(items) - size + 1):
        out.append(items[i : i + size])
    if pad and len(items) < size:
        out.append(items + [None] * (size - len(items)))
    return out


def ratio(part, whole):
    return divide(part, whole)


def divide(a, b):
    if b == 0:
        return 0.0
    return a / b
'''

SHOP_TESTS = """import pytest

from shop import divide, grade, last, ratio, windows


@pytest.mark.parametrize("score, expected", [(95, "A"), (90, "A"), (50, "pass"), (49, "fail")])
def test_grade(score, expected):
    assert grade(score) == expected


def test_grade_rejects_negative_scores():
    with pytest.raises(ValueError):
        grade(-1)


def test_last():
    assert last([1, 2, 3]) == [3]
    assert last([1, 2, 3], 2) == [2, 3]


def test_last_needs_a_positive_count():
    with pytest.raises(ValueError):
        last([1, 2], 0)


def test_windows():
    assert windows([1, 2, 3]) == [[1, 2], [2, 3]]


def test_windows_pads_short_input_on_request():
    assert windows([1], pad=True) == [[1, None]]
    assert windows([1]) == []


def test_ratio():
    assert ratio(1, 4) == 0.25
    assert divide(1, 0) == 0.0
"""


@pytest.fixture
def shop_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "shop-src"
    (repo / "tests").mkdir(parents=True)
    (repo / "shop.py").write_text(SHOP)
    (repo / "tests" / "test_shop.py").write_text(SHOP_TESTS)
    (repo / ".git").mkdir()  # left out of the suite's copy
    return repo


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["bwrap"])  # docker synthesizes in test_valid_tasks_from_a_real_library
def test_synthesized_suite_validates_and_is_reproducible(
    backend: str, shop_repo: Path, tmp_path: Path
) -> None:
    require_backend(backend)
    out = tmp_path / "suite"
    config = SynthConfig(repo=shop_repo, out=out, name="shop", n=6, seed=0)
    sandbox = SandboxConfig.model_validate({"backend": backend})
    report = synthesize_suite(config, sandbox)
    assert len(report.tasks) == 6 and not report.rejected
    assert report.passing_tests == 10 and report.tried >= report.kept == 6
    assert len({t.operator for t in report.tasks}) >= 4
    assert not (out / "repos" / "shop" / ".git").exists()

    tasks = load_suite(str(out))
    assert [t.id for t in tasks] == [f"shop-{k:03d}" for k in range(1, 7)]
    bases = set()
    for task in tasks:
        info = load_synth_info(out / task.id)
        f2p, p2p = task.hidden_tests.fail_to_pass, task.hidden_tests.pass_to_pass
        assert f2p and p2p and not set(f2p) & set(p2p)
        assert task.test_command == "python3 -m pytest -q tests"
        removed, added = changed_lines(task.gold_patch or "")
        assert 1 <= len(removed) + len(added) <= 4, task.gold_patch
        for line in removed + added:  # the gold patch's lines: never in the statement
            assert line.strip() not in task.problem_statement or len(line.strip()) < 8
        assert "`shop." in task.problem_statement and "`shop." in task.title  # the functions involved
        for test in f2p + p2p:  # no test named: what goes wrong is told as a user would see it
            assert test.split("::")[-1].split("[")[0] not in task.problem_statement + task.title
        assert info.path == "shop.py" and info.fail_to_pass == len(f2p)
        bases.add((task.repo / "shop.py").read_text())
    assert len(bases) == 6  # no two tasks start from the same code

    again = tmp_path / "again"  # one sandbox where the first had two: the same tasks, trial by trial
    second = synthesize_suite(
        config.model_copy(update={"out": again}), sandbox, validate=False, concurrency=1
    )
    assert second.baseline_cached  # the same repository, traced once (issue 16: 9 minutes on a large one)
    assert (second.passing_tests, second.covered_lines) == (report.passing_tests, report.covered_lines)
    for task in tasks:
        assert (again / task.id / "task.yaml").read_text() == (out / task.id / "task.yaml").read_text()
    assert [t.model_dump(exclude={"duration_s"}) for t in second.trials] == [
        t.model_dump(exclude={"duration_s"}) for t in report.trials[: len(second.trials)]
    ]


def test_the_agents_test_timeout_comes_from_the_measured_full_run() -> None:
    """A full run of 20 s gets 2 minutes (4 times, plus 10 s, in whole minutes); a quick one the default."""
    assert run_tests_timeout(0.5) == 60.0
    assert run_tests_timeout(20.0) == 120.0
    assert run_tests_timeout(100.0) == 420.0


def changed_lines(patch: str) -> tuple[list[str], list[str]]:
    lines = [line for line in patch.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    return [line[1:] for line in lines if line[0] == "-"], [line[1:] for line in lines if line[0] == "+"]


def test_errors_name_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "lib.py").write_text("def f():\n    return 1\n")
    out = tmp_path / "suite"
    assert main(["tasks", "synth", "--repo", str(bare), "--out", str(out)]) == 2
    assert "no test files (test_*.py or *_test.py)" in capsys.readouterr().err
    assert not (out / "repos" / "bare").exists()  # a failed synthesis leaves no repository behind

    assert main(["tasks", "synth", "--repo", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "not a directory" in capsys.readouterr().err
    with pytest.raises(SynthError, match="exact version"):
        fetch_sdist("inflection")


def test_the_suite_copy_leaves_out_git_caches_and_a_suite_inside_the_repository(shop_repo: Path) -> None:
    (shop_repo / "__pycache__").mkdir()
    (shop_repo / "__pycache__" / "shop.cpython-311.pyc").write_bytes(b"")
    out = shop_repo / "suites" / "mine"
    out.mkdir(parents=True)
    name, copy = copy_repository(SynthConfig(repo=shop_repo, out=out))
    assert name == "shop-src" and copy == out / "repos" / "shop-src"
    assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*")) == [
        "shop.py",
        "suites",
        "tests",
        "tests/test_shop.py",
    ]
    with pytest.raises(SynthError, match="has a repository 'shop-src' already"):
        copy_repository(SynthConfig(repo=shop_repo, out=out))


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("tests", "expected"),
    [
        ("def test_alone():\n    assert 1 + 1 == 2\n", "run no line of the repository's own code"),
        ("from lib import f\n\n\ndef test_f():\n    assert f() == 2\n", "no test passes"),
    ],
    ids=["nothing_covered", "nothing_passes"],
)
def test_repositories_that_cannot_make_tasks_are_refused(
    tests: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_backend("bwrap")
    repo = tmp_path / "lib"
    repo.mkdir()
    (repo / "lib.py").write_text("def f():\n    return 1\n")
    (repo / "test_lib.py").write_text(tests)
    code = main(
        ["tasks", "synth", "--repo", str(repo), "--out", str(tmp_path / "suite"), "--backend", "bwrap"]
    )
    assert code == 2
    assert expected in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_a_mutation_that_eats_the_sandbox_does_not_stop_synthesis(backend: str, tmp_path: Path) -> None:
    repo = tmp_path / "bomb"
    repo.mkdir()
    (repo / "test_bomb.py").write_text(
        "def test_bomb():\n    hog = []\n    while True:\n        hog.append(bytearray(1 << 24))\n\n\n"
        "def test_fine():\n    assert True\n"
    )
    config = SandboxConfig.model_validate({"backend": backend, "memory_mb": 256})
    runner = SandboxPytest(lambda: start_sandbox(config, repo))
    try:
        bombed = runner.run_tests(["test_bomb.py::test_bomb"], [], timeout=60)
        assert bombed.outcomes.get("test_bomb.py::test_bomb") != "passed"
        assert not bombed.crashed or runner.replacements == 1
        fine = runner.run_tests(["test_bomb.py::test_fine"], [], timeout=60)
        assert fine.outcomes == {"test_bomb.py::test_fine": "passed"}
    finally:
        runner.close()


def test_the_traced_run_split_over_sandboxes_gives_the_same_baseline(backend: str, tmp_path: Path) -> None:
    """The traced run shards the test files over the runners (every n-th file) and merges them: the
    same passing tests and the same lines per test as one runner tracing all."""
    repo = tmp_path / "calc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
        "def half(a):\n    if a % 2:\n        raise ValueError(a)\n    return a // 2\n"
    )
    for name, body in {"add": "add(2, 3) == 5", "sub": "sub(2, 3) == -1", "half": "half(4) == 2"}.items():
        (repo / "tests" / f"test_{name}.py").write_text(
            f"from calc import *\n\n\ndef test_{name}():\n    assert {body}\n"
        )
    config = SandboxConfig.model_validate({"backend": backend})
    runners = [SandboxPytest(lambda: start_sandbox(config, repo)) for _ in range(2)]
    tests = ["tests/test_add.py", "tests/test_half.py", "tests/test_sub.py"]
    try:
        alone = run_baseline(runners[:1], tests, ["calc.py"], timeout=60)
        split = run_baseline(runners, tests, ["calc.py"], timeout=60)
    finally:
        for runner in runners:
            runner.close()
    assert len(alone.passing) == 3 and alone.by_line["calc.py"][10] == ["tests/test_half.py::test_half"]
    assert (split.passing, split.by_line) == (alone.passing, alone.by_line)
    assert runners[1].runs == 1  # the second sandbox traced its shard
    assert alone.tracer == split.tracer == "ctracer"  # coverage.py's C tracer, from `harness env build`


ENDLESS = """
def test_forever():
    while True:
        pass


def test_swallows_exceptions():
    try:
        while True:
            pass
    except Exception:
        pass


def test_fine():
    assert True
"""


@pytest.mark.timeout(300)
def test_a_test_that_never_ends_is_stopped_alone_and_the_run_goes_on(backend: str, tmp_path: Path) -> None:
    """With a per-test limit, an endless test (one that catches every `Exception` too) is stopped after
    it and named; the other tests' outcomes come back, long before the whole run's limit."""
    repo = tmp_path / "endless"
    repo.mkdir()
    (repo / "test_endless.py").write_text(ENDLESS)
    runner = SandboxPytest(lambda: start_sandbox(SandboxConfig.model_validate({"backend": backend}), repo))
    try:
        began = time.monotonic()
        run = runner.run_tests(["test_endless.py"], [], timeout=240, test_timeout=2.0)
        took = time.monotonic() - began
    finally:
        runner.close()
    assert not run.timed_out and not run.crashed and took < 60, (took, run)
    assert run.timed_out_tests == [
        "test_endless.py::test_forever",
        "test_endless.py::test_swallows_exceptions",
    ]
    assert run.outcomes == {
        "test_endless.py::test_forever": "failed",
        "test_endless.py::test_swallows_exceptions": "failed",
        "test_endless.py::test_fine": "passed",
    }
    # It ran until its limit, not less. The limit's timer starts before pytest's clock of the test's first
    # phase and runs between its phases, so the phases' summed durations fall a little short of 2 s
    # (1.996 s in one CI run): a tenth of the limit covers that time, which load can lengthen.
    assert run.durations["test_endless.py::test_forever"] >= 0.9 * 2.0


# ---- real third-party code -------------------------------------------------------------------------

LIBRARIES = [("inflection==0.5.1", "docker"), ("parse==1.20.2", "bwrap")]
"""Small pure-Python libraries whose sdists ship pytest suites needing nothing but pytest; each is
synthesized on one backend, so both are proven on real code."""


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("requirement", "backend_name"), LIBRARIES)
def test_valid_tasks_from_a_real_library(
    requirement: str, backend_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_backend(backend_name)
    name = requirement.split("==")[0]
    source = fetch_sdist(requirement)
    assert any(source.rglob("test_*.py")), f"the {requirement} sdist ships no tests"
    out = tmp_path / "suite"
    args = ["tasks", "synth", "--repo", str(source), "--out", str(out), "--name", name]
    # Six tasks, each validated below (benchmarks/synth.py makes 20 of four libraries on both settings).
    assert main([*args, "--n", "6", "--backend", backend_name, "--no-validate", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["tasks"]) == 6, report["trials"]

    assert (
        main(
            ["tasks", "validate", "--suite", str(out), "--backend", backend_name, "--repeats", "1", "--json"]
        )
        == 0
    )
    results = json.loads(capsys.readouterr().out)
    assert len(results) == 6
    for result in results:
        assert result["ok"], result
        assert result["gold_rewards"] == [1.0] and result["empty_rewards"] == [0.0], result
    for task_dir in sorted(out.glob(f"{name}-*")):
        spec = yaml.safe_load((task_dir / "task.yaml").read_text())
        assert spec["repo"] == name and len(spec["bug"]) == 1
    shutil.rmtree(out)


def test_a_src_layout_that_does_not_import_says_why(tmp_path: Path) -> None:
    """The collection error's text reaches the message (it read `(no message)`), with the src/ hint."""
    require_backend("bwrap")
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    runner = SandboxPytest(lambda: start_sandbox(SandboxConfig(backend="bwrap"), repo))
    try:
        with pytest.raises(SynthError) as raised:
            run_baseline([runner], ["tests/test_calc.py"], ["src/calc.py"], timeout=60)
    finally:
        runner.close()
    assert "tests/test_calc.py: ModuleNotFoundError: No module named 'calc'" in str(raised.value)
    assert "a src/ layout?" in str(raised.value)


def test_the_synthesis_runner_runs_the_repositorys_copy_of_a_package_pytest_loaded(tmp_path: Path) -> None:
    """Issue 36, item 2: a baseline of a repository named like one of pytest's own dependencies (attrs'
    `attr`) runs the repository's code, not the copy pytest imported first."""
    repo = tmp_path / "own"
    (repo / "attr").mkdir(parents=True)
    (repo / "attr" / "__init__.py").write_text('ORIGIN = "the repository"\n')
    (repo / "test_own.py").write_text(
        'import attr\n\n\ndef test_own():\n    assert attr.ORIGIN == "the repository"\n'
    )
    runner = SandboxPytest(
        lambda: start_sandbox(SandboxConfig(backend="bwrap"), repo), modules=base_modules(repo)
    )
    try:
        run = runner.run_tests(["test_own.py"], ["attr/__init__.py"], timeout=60)
        assert run.outcomes == {"test_own.py::test_own": "passed"}, run.collect_errors
    finally:
        runner.close()
