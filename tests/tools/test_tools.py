"""The agent's tools on both backends: what the model sees when a call works, and when it does not."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from envs.remote import ExecutorSandbox
from envs.sandbox import SandboxUnusable
from tools import Observation, Toolbox, ToolsConfig

TOOLBOX = Toolbox(ToolsConfig())

REQUIRED = {
    "read_file": ["path"],
    "list_dir": [],
    "search": ["pattern"],
    "edit": ["path", "old_str", "new_str"],
    "write_file": ["path", "content"],
    "run_tests": [],
    "bash": ["command"],
    "submit": [],
}

CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


def call(sandbox: ExecutorSandbox, name: str, toolbox: Toolbox = TOOLBOX, **arguments: Any) -> Observation:
    return toolbox.call(sandbox, name, arguments)


def ok(sandbox: ExecutorSandbox, name: str, toolbox: Toolbox = TOOLBOX, **arguments: Any) -> str:
    observation = call(sandbox, name, toolbox, **arguments)
    assert not observation.is_error, observation.text
    return observation.text


def error(sandbox: ExecutorSandbox, name: str, toolbox: Toolbox = TOOLBOX, **arguments: Any) -> str:
    observation = call(sandbox, name, toolbox, **arguments)
    assert observation.is_error, observation.text
    return observation.text


def keys(schema: Any) -> set[str]:
    """Every key of every object in a JSON schema, at any depth."""
    if isinstance(schema, dict):
        return set(schema).union(*(keys(value) for value in schema.values()))
    if isinstance(schema, list):
        return set().union(*(keys(item) for item in schema))
    return set()


# ---- schemas and the toolbox ----------------------------------------------------------------------


def test_every_tool_has_an_openai_function_schema() -> None:
    schemas = TOOLBOX.schemas()
    assert [schema["function"]["name"] for schema in schemas] == list(REQUIRED)
    for schema in schemas:
        assert json.loads(json.dumps(schema)) == schema
        assert schema["type"] == "function"
        function = schema["function"]
        assert set(function) == {"name", "description", "parameters"}
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", function["name"])
        assert function["description"]
        parameters = function["parameters"]
        assert parameters["type"] == "object"
        assert parameters["additionalProperties"] is False
        assert parameters.get("required", []) == REQUIRED[function["name"]]
        assert all(field.get("description") for field in parameters["properties"].values())
        assert "title" not in keys(parameters)


def test_bash_can_be_turned_off(sandbox: ExecutorSandbox) -> None:
    toolbox = Toolbox(ToolsConfig(bash_enabled=False))
    assert "bash" not in [schema["function"]["name"] for schema in toolbox.schemas()]
    assert "turned off" in error(sandbox, "bash", toolbox, command="touch made")
    assert not sandbox.run(["test", "-e", "made"]).ok


def test_bad_calls_become_error_observations(sandbox: ExecutorSandbox) -> None:
    cases: list[tuple[str, dict[str, Any] | str, str]] = [
        ("nope", {}, "unknown tool 'nope'; the tools are: read_file, list_dir"),
        ("read_file", '{"path": "README.md"', "the arguments of read_file are not valid JSON"),
        ("read_file", '["README.md"]', "must be a JSON object, not list"),
        ("read_file", {}, "invalid arguments for read_file: path: Field required"),
        ("read_file", {"path": ["README.md"]}, "path: Input should be a valid string"),
        (
            "read_file",
            '{"path": "README.md", "start_line": "abc"}',
            "start_line: Input should be a valid integer",
        ),
        (
            "read_file",
            {"path": "README.md", "start_line": 0},
            "start_line: Input should be greater than or equal to 1",
        ),
        ("bash", {"command": "true", "cwd": "/"}, "cwd: Extra inputs are not permitted"),
        ("run_tests", {"paths": "tests"}, "paths: Input should be a valid list"),
    ]
    for name, arguments, message in cases:
        observation = TOOLBOX.call(sandbox, name, arguments)
        assert observation.is_error and message in observation.text, (name, arguments, observation.text)
    assert TOOLBOX.call(sandbox, "read_file", '{"path": "README.md"}').text == "     1\t# sample"
    assert TOOLBOX.call(sandbox, "submit", "").submitted  # empty text is no arguments


def test_a_dead_sandbox_is_the_harness_failure_not_an_observation(sandbox: ExecutorSandbox) -> None:
    sandbox.close()
    with pytest.raises(SandboxUnusable):  # contract 4: the loop marks the episode infra_error
        Toolbox(ToolsConfig()).call(sandbox, "read_file", {"path": "README.md"})


def test_long_observations_keep_head_and_tail(sandbox: ExecutorSandbox) -> None:
    toolbox = Toolbox(ToolsConfig(max_observation_chars=1000))
    text = ok(sandbox, "bash", toolbox, command='python3 -c \'print("h" + "x" * 5000)\'')
    assert len(text) < 1100
    assert text.startswith("hxxx") and "characters cut" in text and text.endswith("exit code 0")


# ---- paths ----------------------------------------------------------------------------------------


def test_paths_that_leave_the_repository_are_refused(sandbox: ExecutorSandbox) -> None:
    assert sandbox.run(["ln", "-s", "/etc", "etc_link"]).ok
    assert sandbox.run(["ln", "-s", "..", "up"]).ok
    escapes = [
        "../outside.txt",
        "pkg/../../outside.txt",
        "/etc/passwd",
        "/repo/README.md",
        "etc_link/passwd",
        "etc_link/../outside.txt",  # lexically inside; the kernel follows the link first
        "up/outside.txt",
        "up",
    ]
    for path in escapes:
        for name, arguments in [
            ("read_file", {"path": path}),
            ("list_dir", {"path": path}),
            ("search", {"pattern": "root", "path": path}),
            ("edit", {"path": path, "old_str": "", "new_str": "escaped"}),
            ("write_file", {"path": path, "content": "escaped"}),
            ("run_tests", {"paths": [path]}),
        ]:
            text = error(sandbox, name, **arguments)
            assert f"path {path!r} leaves the repository" in text or f"path {path!r} is absolute" in text, (
                text
            )
    assert not sandbox.run(["test", "-e", "/outside.txt"]).ok
    assert "relative to the repository root" in error(sandbox, "read_file", path="/etc/passwd")
    assert "the path is empty" in error(sandbox, "read_file", path="")


def test_symlinks_inside_the_repository_are_followed(sandbox: ExecutorSandbox) -> None:
    assert sandbox.run(["ln", "-s", "pkg/calc.py", "calc_link"]).ok
    assert sandbox.run(["ln", "-s", "pkg", "pkg_link"]).ok
    assert ok(sandbox, "read_file", path="calc_link", end_line=1) == "     1\tdef add(a, b):"
    assert ok(sandbox, "list_dir", path="pkg_link") == "pkg/__init__.py\npkg/calc.py"
    assert ok(sandbox, "read_file", path="pkg/./../pkg/calc.py", end_line=1) == "     1\tdef add(a, b):"


# ---- read_file ------------------------------------------------------------------------------------


def test_read_file_shows_numbered_lines_whole_or_a_range(sandbox: ExecutorSandbox) -> None:
    whole = ok(sandbox, "read_file", path="pkg/calc.py")
    assert whole == "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(CALC.splitlines(), 1))
    assert (
        ok(sandbox, "read_file", path="pkg/calc.py", start_line=5)
        == "     5\tdef sub(a, b):\n     6\t    return a - b"
    )
    assert (
        ok(sandbox, "read_file", path="pkg/calc.py", start_line=2, end_line=2) == "     2\t    return a + b"
    )
    assert (
        ok(sandbox, "read_file", path="pkg/calc.py", start_line=6, end_line=99) == "     6\t    return a - b"
    )
    assert ok(sandbox, "read_file", path="pkg/__init__.py") == "pkg/__init__.py is empty"


def test_read_file_pages_a_long_file(sandbox: ExecutorSandbox) -> None:
    sandbox.write_file("long.txt", "".join(f"line {n}\n" for n in range(1, 501)).encode())
    toolbox = Toolbox(ToolsConfig(max_observation_chars=1000))
    first = ok(sandbox, "read_file", toolbox, path="long.txt")
    footer = first.splitlines()[-1]
    match = re.fullmatch(r"\[lines 1-(\d+) of 500; read on with start_line=(\d+)\]", footer)
    assert match and int(match[2]) == int(match[1]) + 1, footer
    assert len(first) <= 1000
    second = ok(sandbox, "read_file", toolbox, path="long.txt", start_line=int(match[2]))
    assert second.startswith(f"{match[2]:>6}\tline {match[2]}\n")


def test_read_file_errors(sandbox: ExecutorSandbox) -> None:
    sandbox.write_file("blob.bin", b"\x7fELF\x00\x01\x02")
    assert error(sandbox, "read_file", path="nope.py") == "file 'nope.py' does not exist"
    assert "'pkg' is a folder, not a file; use list_dir" in error(sandbox, "read_file", path="pkg")
    assert "'blob.bin' is a binary file (7 bytes)" in error(sandbox, "read_file", path="blob.bin")
    assert error(sandbox, "read_file", path="pkg/calc.py", start_line=7) == (
        "start_line 7 is past the end of 'pkg/calc.py', which has 6 lines"
    )
    assert error(sandbox, "read_file", path="pkg/calc.py", start_line=3, end_line=2) == (
        "end_line 2 is before start_line 3"
    )
    assert sandbox.run(["mkfifo", "pipe"]).ok
    assert "not a regular file" in error(sandbox, "read_file", path="pipe")


# ---- list_dir -------------------------------------------------------------------------------------


def test_list_dir_lists_relative_to_the_root_and_hides_git(sandbox: ExecutorSandbox) -> None:
    sandbox.write_file(".git/HEAD", b"ref: refs/heads/main\n")
    assert sandbox.run(["ln", "-s", "pkg/calc.py", "calc_link"]).ok
    assert ok(sandbox, "list_dir") == "README.md\ncalc_link -> pkg/calc.py\npkg/\ntests/"
    assert ok(sandbox, "list_dir", path="pkg") == "pkg/__init__.py\npkg/calc.py"
    deep = ok(sandbox, "list_dir", depth=2).splitlines()
    assert "pkg/calc.py" in deep and "tests/test_calc.py" in deep
    assert not [entry for entry in deep if ".git" in entry]
    sandbox.run(["mkdir", "empty"])
    assert ok(sandbox, "list_dir", path="empty") == "empty is an empty folder"
    assert error(sandbox, "list_dir", path="nope") == "folder 'nope' does not exist"
    assert "'README.md' is a file, not a folder" in error(sandbox, "list_dir", path="README.md")


def test_list_dir_shows_the_first_entries_of_a_long_listing(sandbox: ExecutorSandbox) -> None:
    assert sandbox.run(["sh", "-c", "mkdir many && cd many && for i in $(seq 100 399); do : > f$i; done"]).ok
    text = ok(sandbox, "list_dir", Toolbox(ToolsConfig(max_observation_chars=1000)), path="many")
    *entries, footer = text.splitlines()
    assert entries == [f"many/f{n}" for n in range(100, 100 + len(entries))]
    assert footer == f"[{len(entries)} of 300 entries shown; list a subfolder or use a smaller depth]"
    assert len(text) <= 1000


# ---- search ---------------------------------------------------------------------------------------


def test_search_shows_path_line_and_text(sandbox: ExecutorSandbox) -> None:
    sandbox.write_file("blob.bin", b"def hidden\x00")
    sandbox.write_file(".git/config", b"def in_git\n")
    sandbox.write_file("re.py", b"raise SystemExit('the repository shadowed the standard library')\n")
    everywhere = (
        "pkg/calc.py:1:def add(a, b):\npkg/calc.py:5:def sub(a, b):\ntests/test_calc.py:4:def test_add():"
    )
    assert ok(sandbox, "search", pattern=r"def \w+\(") == everywhere
    assert ok(sandbox, "search", pattern=r"def \w+\(", path="tests") == "tests/test_calc.py:4:def test_add():"
    assert ok(sandbox, "search", pattern="def ", glob="test_*.py") == "tests/test_calc.py:4:def test_add():"
    assert ok(sandbox, "search", pattern="return", path="pkg/calc.py") == (
        "pkg/calc.py:2:    return a + b\npkg/calc.py:6:    return a - b"
    )
    assert ok(sandbox, "search", pattern="nowhere") == "no matches for 'nowhere' in ."


def test_search_caps_its_results(sandbox: ExecutorSandbox) -> None:
    toolbox = Toolbox(ToolsConfig(search_max_results=2))
    assert ok(sandbox, "search", toolbox, pattern="def") == (
        "pkg/calc.py:1:def add(a, b):\npkg/calc.py:5:def sub(a, b):\n"
        "[2 of 3 matches shown; narrow the pattern, path or glob to see the rest]"
    )
    # More than a command's output may hold: none of it is lost on the way out of the sandbox.
    sandbox.write_file("many.txt", b"".join(b"%03d " % n + b"y" * 150 + b"\n" for n in range(150)))
    text = ok(sandbox, "search", Toolbox(ToolsConfig(max_observation_chars=100_000)), pattern="y+$")
    assert text.splitlines() == [f"many.txt:{n + 1}:{n:03d} " + "y" * 150 for n in range(100)] + [
        "[100 of 150 matches shown; narrow the pattern, path or glob to see the rest]"
    ]
    sandbox.write_file("wide.txt", b"x" * 1000 + b"\n")
    assert ok(sandbox, "search", pattern="x", glob="wide.txt") == "wide.txt:1:" + "x" * 200 + " [...]"


def test_search_errors(sandbox: ExecutorSandbox) -> None:
    assert "invalid regular expression '(': missing ), unterminated subpattern" in error(
        sandbox, "search", pattern="("
    )
    assert error(sandbox, "search", pattern="x", path="nope") == "'nope' does not exist"
    assert "pattern: String should have at least 1 character" in error(sandbox, "search", pattern="")


# ---- edit and write_file --------------------------------------------------------------------------


def test_edit_replaces_one_unique_string(sandbox: ExecutorSandbox) -> None:
    text = ok(sandbox, "edit", path="pkg/calc.py", old_str="return a - b", new_str="return a - b  # sub")
    assert text == (
        "edited pkg/calc.py:\n     3\t\n     4\t\n     5\tdef sub(a, b):\n     6\t    return a - b  # sub"
    )
    assert sandbox.read_file("pkg/calc.py").decode() == CALC.replace("a - b", "a - b  # sub")
    ok(
        sandbox,
        "edit",
        path="pkg/calc.py",
        old_str="def add(a, b):\n",
        new_str="def add(a, b):\n    '''Sum.'''\n",
    )
    assert (
        sandbox.read_file("pkg/calc.py")
        .decode()
        .startswith("def add(a, b):\n    '''Sum.'''\n    return a + b\n")
    )


def test_edit_errors_and_creating_a_file(sandbox: ExecutorSandbox) -> None:
    assert "old_str was not found in 'pkg/calc.py'" in error(
        sandbox, "edit", path="pkg/calc.py", old_str="return  a + b", new_str="x"
    )
    assert "old_str appears 2 times in 'pkg/calc.py'; include more of the surrounding lines" in error(
        sandbox, "edit", path="pkg/calc.py", old_str="return a", new_str="x"
    )
    assert sandbox.read_file("pkg/calc.py").decode() == CALC
    assert "'pkg/calc.py' already exists" in error(
        sandbox, "edit", path="pkg/calc.py", old_str="", new_str="x"
    )
    assert "file 'nope.py' does not exist; to create it" in error(
        sandbox, "edit", path="nope.py", old_str="x", new_str="y"
    )
    assert "is a folder" in error(sandbox, "edit", path="pkg", old_str="x", new_str="y")
    sandbox.write_file("latin1.txt", "café\n".encode("latin-1"))
    assert "is not UTF-8 text" in error(sandbox, "edit", path="latin1.txt", old_str="caf", new_str="x")

    assert (
        ok(sandbox, "edit", path="new/mod.py", old_str="", new_str="X = 1\n") == "created new/mod.py (1 line)"
    )
    assert sandbox.read_file("new/mod.py") == b"X = 1\n"


def test_write_file_creates_folders_and_replaces_files(sandbox: ExecutorSandbox) -> None:
    assert ok(sandbox, "write_file", path="a/b/c.txt", content="one\ntwo\n") == "created a/b/c.txt (2 lines)"
    assert ok(sandbox, "write_file", path="a/b/c.txt", content="three") == "wrote a/b/c.txt (1 line)"
    assert sandbox.read_file("a/b/c.txt") == b"three"
    assert "'pkg' is a folder" in error(sandbox, "write_file", path="pkg", content="x")


# ---- run_tests, bash and submit -------------------------------------------------------------------


def test_run_tests_runs_the_task_tests_or_given_paths(sandbox: ExecutorSandbox) -> None:
    text = ok(sandbox, "run_tests")
    assert "1 passed" in text and text.endswith("exit code 0")
    sandbox.write_file("tests/test_fail.py", b"def test_fail():\n    assert 1 == 2\n")
    failed = ok(sandbox, "run_tests", paths=["tests/test_fail.py"])  # failing tests are not a failed call
    assert "1 failed" in failed and failed.endswith("exit code 1")
    assert "1 passed" in ok(sandbox, "run_tests", paths=["tests/test_calc.py::test_add"])
    assert "'-p' is an option, not a path" in error(sandbox, "run_tests", paths=["-p", "evil"])


def test_run_tests_quotes_the_paths(sandbox: ExecutorSandbox) -> None:
    toolbox = Toolbox(ToolsConfig(test_command="printf '%s|'"))
    text = ok(sandbox, "run_tests", toolbox, paths=["a b.py", "$(touch pwned).py"])
    assert text == "a b.py|$(touch pwned).py|\n\nexit code 0"
    assert not sandbox.run(["test", "-e", "pwned"]).ok


def test_bash_shows_output_and_exit_code(sandbox: ExecutorSandbox) -> None:
    assert ok(sandbox, "bash", command="echo out; echo err >&2; exit 3") == "out\nerr\n\nexit code 3"
    assert ok(sandbox, "bash", command="[[ -n $BASH_VERSION ]] && echo bash") == "bash\n\nexit code 0"
    assert ok(sandbox, "bash", command="true") == "(no output)\n\nexit code 0"
    toolbox = Toolbox(ToolsConfig(command_timeout_s=0.5))
    assert re.fullmatch(
        r"started\n\ntimed out after 0\.\d s; the command was killed",
        error(sandbox, "bash", toolbox, command="echo started; sleep 5"),
    )


def test_submit_ends_the_episode(sandbox: ExecutorSandbox) -> None:
    observation = call(sandbox, "submit", message="fixed sub")
    assert observation.submitted and not observation.is_error
    assert TOOLBOX.call(sandbox, "submit", {}).submitted
