"""Rust with `cargo test`, offline: each hidden test in a process of its own (`envs/process_grading.py`).

A task's hidden files are integration tests (`tests/NAME.rs`); its ids are `tests/NAME.rs::TEST`, the
name of a `#[test]` function at the top of the file. Each copy runs as `tests/test_<hex>.rs`: the runner
builds the repository (`cargo build`) before any copy is written, then for each copy builds its test
target and runs each test alone (`cargo test --test STEM -- --exact TEST`); exit status 0 with libtest's
`1 passed` is a pass. Builds go to a target folder outside /repo. The judge drops, beside Python's rules,
what changes how cargo builds or which tests run: build scripts, `Cargo.toml` (test targets, profiles,
proc-macro crates, `autotests`), `Cargo.lock`, cargo's settings (`.cargo/`, a `runner` there would run
every test binary through the agent's program), the toolchain file and compiled outputs.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from envs.process_grading import Commands, ProcessLanguage
from envs.reward import SourceStyle

TEST_FN = re.compile(r"#\[test\]\s*(?:#\[[^\]]*\]\s*)*(?:pub\s+)?(?:async\s+)?fn\s+([A-Za-z_]\w*)")
ASSERT = re.compile(r"\b(?:assert|assert_eq|assert_ne|debug_assert|debug_assert_eq)!\s*\(")
CARGO_FILES = frozenset({"build.rs", "cargo.toml", "cargo.lock", "rust-toolchain", "rust-toolchain.toml"})
ARTEFACTS = (".rlib", ".rmeta", ".o", ".a", ".d")


def named_tests(source: str) -> list[str]:
    """The `#[test]` functions of a test file (those at its top level run under their own names)."""
    return TEST_FN.findall(source)


def _closing(source: str, start: int, open_: str, close: str) -> int:
    """The index just past the bracket that closes the one at `start`, skipping strings and comments."""
    depth, i = 0, start
    while i < len(source):
        ch = source[i]
        if ch == '"':
            i = _string_end(source, i)
            continue
        if source.startswith("//", i):
            i = source.find("\n", i)
            i = len(source) if i < 0 else i
            continue
        if ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(source)


def _string_end(source: str, start: int) -> int:
    i = start + 1
    while i < len(source) and source[i] != '"':
        i += 2 if source[i] == "\\" else 1
    return i + 1


def assertions_in(source: str, test: str) -> list[tuple[int, int, int]]:
    """(start, end, line) of each assertion macro in the body of `#[test] fn test`."""
    found = [m for m in TEST_FN.finditer(source) if m.group(1) == test]
    if not found:
        return []
    brace = source.find("{", found[0].end())
    if brace < 0:
        return []
    end = _closing(source, brace, "{", "}")
    spans = []
    for m in ASSERT.finditer(source, brace, end):
        close = _closing(source, m.end() - 1, "(", ")")
        spans.append((m.start(), close, source.count("\n", 0, m.start()) + 1))
    return spans


def run_path(path: str, token: str) -> str:
    """`tests/test_<token>.rs`: a copy is an integration test of its own."""
    if PurePosixPath(path).parent.as_posix() != "tests" or not path.endswith(".rs"):
        raise ValueError(f"{path}: a Rust task's hidden test files are integration tests, tests/NAME.rs")
    return f"tests/test_{token}.rs"


def is_test_file(path: str) -> bool:
    parts = PurePosixPath(path.lower()).parts
    return parts[0] in ("tests", "benches") or (path.endswith(".rs") and "tests" in parts[:-1])


def own_rule(path: str, content: bytes | None) -> str | None:
    """Build scripts and cargo's settings, the toolchain file, compiled outputs."""
    parts = PurePosixPath(path.lower()).parts
    if parts[-1] in CARGO_FILES or ".cargo" in parts:
        return "a build script or cargo setting (changes how the tests are built or run)"
    if "target" in parts or parts[-1].endswith(ARTEFACTS):
        return "a compiled or binary artefact"
    return None


def failure_line(output: str, run: str) -> list[int]:
    """Lines of `run` a panic names (`panicked at 'msg', tests/x.rs:12:5` or, newer, `at tests/x.rs:12:5:`)."""
    return [int(n) for n in re.findall(re.escape(run) + r":(\d+):\d+", output)]


RUST = ProcessLanguage(
    name="rust",
    suffixes=(".rs",),
    test_command="cargo test --offline",
    commands=Commands(
        prepare=["cargo", "build", "--offline", "--quiet"],
        build=["cargo", "test", "--offline", "--quiet", "--test", "{stem}", "--no-run"],
        test=[
            "cargo",
            "test",
            "--offline",
            "--test",
            "{stem}",
            "--",
            "--exact",
            "{test}",
            "--test-threads",
            "1",
        ],
        passed=r"test result: ok\. 1 passed",
        env={
            "CARGO_TARGET_DIR": "{grader}/target",
            "CARGO_HOME": "{grader}/cargo",
            "CARGO_TERM_COLOR": "never",
            "CARGO_INCREMENTAL": "0",
            "RUST_BACKTRACE": "0",
        },
    ),
    tests_in=named_tests,
    assertions_in=assertions_in,
    run_path=run_path,
    is_test_file=is_test_file,
    own_rule=own_rule,
    failure_line=failure_line,
    style=SourceStyle(
        debug=re.compile(r"^\s*(println!|print!|eprintln!|eprint!|dbg!)\s*\("),
        comment="//",
        code=re.compile(r"[;{}]\s*$|^(let|fn|if|for|while|return|match|use|impl|pub)\b.*[;({]"),
    ),
)
