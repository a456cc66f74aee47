"""`harness tasks import swebench`: instances in SWE-bench's field layout, made from small local
repositories with real history, imported, validated, and cut at their base commit in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.factory import start_sandbox
from envs.sandbox import SandboxConfig
from tasks.patches import git
from tasks.suite import load_suite
from tests.harness.test_cli import harness

CALC_BUG = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
CALC_FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
CALC_TESTS = "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(["add", "-A", "."], cwd=repo)
    git(["commit", "-q", "-m", message], cwd=repo)
    return git(["rev-parse", "HEAD"], cwd=repo).decode().strip()


def diff(repo: Path, old: str, new: str, folder: str) -> str:
    return git(["diff", old, new, "--", folder], cwd=repo).decode()


def row(
    instance_id: str, repo: str, base: str, patch: str, test_patch: str, f2p: list[str], p2p: list[str]
) -> dict:
    """An instance with every field of SWE-bench's layout, the lists JSON-encoded as SWE-bench has them."""
    return {
        "repo": repo,
        "instance_id": instance_id,
        "base_commit": base,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": f"{instance_id}: the function returns the wrong value.\nFix it.\n",
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
        "version": "1.0",
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": json.dumps(p2p),
        "environment_setup_commit": base,
        "difficulty": "<15 min fix",  # a column of SWE-bench Verified: ignored
    }


class Dataset:
    """Two repositories with history (a clone `owner__name`, a mirror `owner/name`) and a JSONL file of
    two good instances and six bad lines."""

    def __init__(self, root: Path) -> None:
        self.report: dict = {}
        """What the import printed (--json)."""
        self.clones = root / "clones"
        calc = self.clones / "acme__calc"
        git(["init", "-q", str(calc)])
        start = {"calc/__init__.py": CALC_BUG, "tests/test_calc.py": CALC_TESTS, "README.md": "# calc\n"}
        # `git archive` would leave README.md out; the agent's copy must hold the commit as it is.
        commit(calc, {**start, ".gitattributes": "README.md export-ignore\n"}, "start")
        self.calc_base = commit(calc, {"README.md": "# calc\n\nAdds and subtracts.\n"}, "docs")
        self.calc_fix = commit(
            calc,
            {
                "calc/__init__.py": CALC_FIXED,
                "tests/test_calc.py": CALC_TESTS + "\n\ndef test_sub():\n    assert sub(5, 3) == 2\n",
            },
            "fix sub",
        )
        commit(calc, {"README.md": "# calc 1.0\n"}, "release 1.0")
        git(["tag", "-a", "v1.0", "-m", "1.0"], cwd=calc)
        git(["checkout", "-q", "-b", "next"], cwd=calc)
        commit(calc, {"calc/extra.py": "X = 1\n"}, "next")
        git(["checkout", "-q", "main"], cwd=calc)
        self.fixed_blob = git(["rev-parse", f"{self.calc_fix}:calc/__init__.py"], cwd=calc).decode().strip()

        words = root / "words-work"
        git(["init", "-q", str(words)])
        words_base = commit(
            words, {"words/__init__.py": "def shout(s):\n    return s.lower() + '!'\n"}, "start"
        )
        words_fix = commit(
            words,
            {
                "words/__init__.py": "def shout(s):\n    return s.upper() + '!'\n",
                "tests/test_shout.py": "from words import shout\n\n\ndef test_shout():\n    assert shout('hi') == 'HI!'\n",
            },
            "fix shout",
        )
        git(["clone", "-q", "--mirror", str(words), str(self.clones / "acme" / "words")])

        calc_patch = diff(calc, self.calc_base, self.calc_fix, "calc")
        calc_tests = diff(calc, self.calc_base, self.calc_fix, "tests")
        good = [
            row(
                "acme__calc-2",
                "acme/calc",
                self.calc_base,
                calc_patch,
                calc_tests,
                ["tests/test_calc.py::test_sub"],
                ["tests/test_calc.py::test_add"],
            ),
            row(
                "acme__words-1",
                "acme/words",
                words_base,
                diff(words, words_base, words_fix, "words"),
                diff(words, words_base, words_fix, "tests"),
                ["tests/test_shout.py::test_shout"],
                [],
            ),
        ]
        missing = {k: v for k, v in good[0].items() if k != "test_patch"} | {"instance_id": "acme__calc-3"}
        bad_list = good[0] | {
            "instance_id": "acme__calc-4",
            "FAIL_TO_PASS": '["tests/test_calc.py::test_sub"',
        }
        unknown = good[0] | {"instance_id": "acme__nothing-1", "repo": "acme/nothing"}
        no_base = good[0] | {"instance_id": "acme__calc-5", "base_commit": "0" * 40}
        stale = good[0] | {"instance_id": "acme__calc-6", "base_commit": self.calc_fix}
        lines = [json.dumps(r) for r in (good[0], missing, bad_list, unknown, no_base, stale, good[1])]
        self.file = root / "instances.jsonl"
        self.file.write_text("\n".join([*lines, "this is not JSON"]) + "\n")
        self.suite = root / "suite"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    data = Dataset(tmp_path_factory.mktemp("swebench"))
    proc = harness(
        "tasks",
        "import",
        "swebench",
        str(data.file),
        "--repos",
        str(data.clones),
        "--out",
        str(data.suite),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    data.report = json.loads(proc.stdout)
    return data


def test_good_instances_are_imported_and_each_bad_one_is_named_with_its_reason(imported: Dataset) -> None:
    report = imported.report
    assert report["imported"] == ["acme__calc-2", "acme__words-1"]
    reasons = {s["task_id"]: s["reason"] for s in report["skipped"]}
    assert reasons.pop(None).startswith("not a JSON object")
    assert reasons == {
        "acme__calc-3": "test_patch: Field required",
        "acme__calc-4": reasons["acme__calc-4"],
        "acme__nothing-1": reasons["acme__nothing-1"],
        "acme__calc-5": f"base_commit {'0' * 40}: not in the clone {(imported.clones / 'acme__calc').resolve()} "
        "(reachable from none of its refs)",
        "acme__calc-6": reasons["acme__calc-6"],
    }
    assert reasons["acme__calc-4"].startswith(
        "FAIL_TO_PASS: Value error, not a JSON-encoded list of test ids"
    )
    assert "no git clone at" in reasons["acme__nothing-1"] and "acme__nothing" in reasons["acme__nothing-1"]
    assert "acme/nothing" in reasons["acme__nothing-1"]
    assert reasons["acme__calc-6"].startswith("patch does not apply at base_commit: error: patch failed")
    assert [s["source"].rsplit(":", 1)[1] for s in report["skipped"]] == ["2", "3", "4", "5", "6", "8"]


def test_the_suite_holds_the_hidden_tests_apart_from_the_agents_copy(imported: Dataset) -> None:
    tasks = {t.id: t for t in load_suite(str(imported.suite))}
    calc, words = tasks["acme__calc-2"], tasks["acme__words-1"]
    assert calc.repo_name == "acme__calc" and calc.hidden_tests.fail_to_pass == [
        "tests/test_calc.py::test_sub"
    ]
    assert "def test_sub" in calc.hidden_tests.files["tests/test_calc.py"]
    assert "def test_sub" not in (calc.repo / "tests" / "test_calc.py").read_text()
    assert "test_shout" in words.hidden_tests.files["tests/test_shout.py"]
    assert not (words.repo / "tests").exists()
    assert calc.gold_patch and "return a - b" in calc.gold_patch and "tests/" not in calc.gold_patch
    assert calc.problem_statement.startswith("acme__calc-2: the function")
    assert (calc.repo / "README.md").read_text() == "# calc\n\nAdds and subtracts.\n"


def test_nothing_imported_fails(tmp_path: Path) -> None:
    (tmp_path / "clones").mkdir()
    (tmp_path / "bad.jsonl").write_text('{"instance_id": "x-1"}\n')
    proc = harness(
        "tasks",
        "import",
        "swebench",
        str(tmp_path / "bad.jsonl"),
        "--repos",
        str(tmp_path / "clones"),
        "--out",
        str(tmp_path / "s"),
    )
    assert proc.returncode == 1
    assert "skipped" in proc.stdout and "x-1" in proc.stdout and "repo: Field required" in proc.stdout
    assert "0 imported, 1 skipped" in proc.stdout


def test_imported_tasks_validate_and_hide_every_later_commit(imported: Dataset, backend: str) -> None:
    proc = harness(
        "tasks", "validate", "--suite", str(imported.suite), "--backend", backend, "--repeats", "1", "--json",
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout)
    assert [(r["task_id"], r["gold_rewards"], r["empty_rewards"]) for r in results] == [
        ("acme__calc-2", [1.0], [0.0]),
        ("acme__words-1", [1.0], [0.0]),
    ]

    task = next(t for t in load_suite(str(imported.suite)) if t.id == "acme__calc-2")
    sandbox = start_sandbox(SandboxConfig(backend=backend), task.repo, task.image)
    try:
        history = sandbox.run("git log --all --format=%H")
        assert history.exit_code == 0, history.output
        assert history.output.split() == [task.base_commit]
        assert sandbox.run(["git", "for-each-ref", "--format=%(refname)"]).output.split() == [
            "refs/heads/main"
        ]
        assert set(sandbox.run("git log --all --reflog --format=%H").output.split()) == {task.base_commit}
        assert sandbox.run("git tag").output == ""
        for gone in (imported.calc_fix, imported.calc_base, imported.fixed_blob):
            assert sandbox.run(["git", "cat-file", "-e", gone]).exit_code != 0, gone
        assert sandbox.run("grep -rn test_sub /repo").exit_code == 1
        assert "return a + b" in sandbox.read_file("calc/__init__.py").decode().split("def sub")[1]
    finally:
        sandbox.close()


def test_environments_set_each_instances_image_and_setup(imported: Dataset, tmp_path: Path) -> None:
    environments = tmp_path / "environments.yaml"
    environments.write_text("acme__words-1: {image: harness-sandbox:latest, setup_commands: ['true']}\n")
    out = tmp_path / "suite"
    proc = harness(
        "tasks", "import", "swebench", str(imported.file), "--repos", str(imported.clones), "--out", str(out),
        "--image", "sweb.eval.{instance_id}:v{version}", "--setup-command", "pip install -e .",
        "--test-command", "python3 -m pytest -q tests", "--environments", str(environments),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    tasks = {t.id: t for t in load_suite(str(out))}
    calc, words = tasks["acme__calc-2"], tasks["acme__words-1"]
    assert (calc.image, calc.setup_commands) == ("sweb.eval.acme__calc-2:v1.0", ["pip install -e ."])
    assert (words.image, words.setup_commands) == ("harness-sandbox:latest", ["true"])
    assert calc.test_command == words.test_command == "python3 -m pytest -q tests"

    environments.write_text("acme__words-1: {imag: x}\n")
    proc = harness(
        "tasks", "import", "swebench", str(imported.file), "--repos", str(imported.clones), "--out", str(out),
        "--environments", str(environments),
    )  # fmt: skip
    assert proc.returncode == 2
    assert f"--environments {environments}: acme__words-1.imag: Extra inputs are not permitted" in proc.stderr
