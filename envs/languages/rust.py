"""Rust with `cargo test`, offline: each hidden test in a process of its own (`envs/process_grading.py`).

A task's hidden files are integration tests (`tests/NAME.rs`); its ids are `tests/NAME.rs::TEST`, the
name of a `#[test]` function at the top of the file. Each copy runs as `tests/test_<hex>.rs`: the runner
builds the repository (`cargo build`) before any copy is written, then for each copy builds its test
target (`cargo test --test STEM --no-run`), removes the copy's text, and runs each test alone in the
program cargo built (`STEM --exact TEST`, from the repository's folder, as cargo runs it); exit status 0
with libtest's `1 passed` is a pass. An `assert!` gets text canaries with its condition negated (`negated`). Builds go
to a target folder outside /repo. The judge drops, beside Python's rules, what changes how cargo builds
or which tests run: build scripts, `Cargo.toml` (test targets, profiles, proc-macro crates, `autotests`),
`Cargo.lock`, cargo's settings (`.cargo/`, a `runner` there would run every test binary through the
agent's program), the toolchain file and compiled outputs.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from envs.languages.source_text import arguments, closing, literal_spans, skip_c_family, split_arguments
from envs.process_grading import Commands, ProcessLanguage, negation
from envs.process_held import Equality
from envs.reward import SourceStyle
from envs.sandbox import WORKDIR

TEST_FN = re.compile(
    r"#\[test\]\s*(?:(?:#\[[^\]]*\]|//[^\n]*)\s*)*(?:pub\s+)?(?:async\s+)?fn\s+([A-Za-z_]\w*)"
)
"""A `#[test]` function: other attributes and line comments may come between (`#[cfg(unix)] // why`)."""
LITERAL = re.compile(
    r"None|true|false|-?[\d_]+(?:\.[\d_]+)?\w*|b?\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)+'"
    r"|(?:Some|Ok|Err)\((?:-?[\d_]+(?:\.[\d_]+)?\w*|b?\"(?:[^\"\\]|\\.)*\"|true|false)\)"
)
"""A side of `assert_eq!` that is a constant: `assert_eq!(None, x.upgrade())` compares `x.upgrade()`."""
ASSERT = re.compile(r"\b(?:assert|assert_eq|assert_ne|debug_assert|debug_assert_eq)!\s*\(")
CARGO_FILES = frozenset({"build.rs", "cargo.toml", "cargo.lock", "rust-toolchain", "rust-toolchain.toml"})
ARTEFACTS = (".rlib", ".rmeta", ".o", ".a", ".d")


def named_tests(source: str) -> list[str]:
    """The `#[test]` functions of a test file (those at its top level run under their own names)."""
    return TEST_FN.findall(source)


def assertions_in(source: str, test: str) -> list[tuple[int, int, int]]:
    """(start, end, line) of each assertion macro in the body of `#[test] fn test`."""
    found = [m for m in TEST_FN.finditer(source) if m.group(1) == test]
    if not found:
        return []
    brace = source.find("{", found[0].end())
    if brace < 0:
        return []
    end = closing(source, brace, "{", "}")
    spans = []
    for m in ASSERT.finditer(source, brace, end):
        close = closing(source, m.end() - 1, "(", ")")
        spans.append((m.start(), close, source.count("\n", 0, m.start()) + 1))
    return spans


def equalities(source: str, test: str) -> list[Equality]:
    """Each `assert_eq!(ACTUAL, EXPECTED[, message...])` of `test`: what can be held outside the sandbox."""
    found = []
    for start, end, line in assertions_in(source, test):
        head = ASSERT.match(source, start)
        if head is None or not head.group().startswith("assert_eq"):
            continue
        args = arguments(source[head.end() : end - 1])
        if len(args) >= 2 and all(a.strip() for a in args[:2]):
            actual, expected = args[0].strip(), args[1].strip()
            if LITERAL.fullmatch(actual) and not LITERAL.fullmatch(expected):
                actual, expected = expected, actual  # the computed side is reported, never a constant
            found.append(Equality(start, end, line, actual, expected))
    return found


def negated(source: str, start: int, end: int) -> str | None:
    """`source` with the assertion at `start` (to `end`, past its `)`) negated: `assert!(C, msg..)` as
    `assert!(NEGATED, msg..)` (`negation`), `assert_eq!` as `assert_ne!` and back; lines kept. (Every
    copy then runs with `neutral_messages`: no program holds a condition's text.)"""
    head = ASSERT.match(source, start)
    if head is None:
        return None
    name = head.group()
    for equal, unequal in (("assert_eq", "assert_ne"), ("assert_ne", "assert_eq")):
        if equal in name:
            return source[:start] + name.replace(equal, unequal) + source[head.end() :]
    spans = split_arguments(source[head.end() : end - 1], skip_c_family)
    if not spans:
        return None
    a, b = head.end() + spans[0][0], head.end() + spans[0][1]
    condition = source[a:b]
    core = condition.strip()
    lead = condition[: len(condition) - len(condition.lstrip())]
    return source[:a] + lead + negation(core) + condition[len(lead) + len(core) :] + source[b:]


NEUTRAL = ', "{}", "assertion failed"'
"""The message every `assert!` without one gets in a copy: rustc's own (`assertion failed: C`) would put
the condition's text in the program, where a negated copy's reads `!C`."""


def neutral_messages(source: str) -> str:
    """`source` with each `assert!`/`debug_assert!` of its tests that has no message given `NEUTRAL` right
    after its condition's code (before a trailing comment or comma); lines kept. (`"{}"` and an argument:
    Rust 2015 and 2018 take a lone message literal as it is, 2021 as a format.)"""
    edits, literals = [], literal_spans(source, skip_c_family)
    for test in named_tests(source):
        for start, end, _ in assertions_in(source, test):
            head = ASSERT.match(source, start)
            if head is None or "_eq" in head.group() or "_ne" in head.group():
                continue
            if any(a <= start < b for a, b in literals) or "'" in source[start:end]:
                continue  # `"assert!(x)"` in a string is none; `'"'` or `')'` may end it wrongly (`closing`)
            inside = source[head.end() : end - 1]
            spans = [(a, b) for a, b in split_arguments(inside, skip_c_family) if inside[a:b].strip()]
            if len(spans) == 1:
                edits.append(_code_end(source, head.end() + spans[0][0], head.end() + spans[0][1]))
    for at in sorted(set(edits), reverse=True):
        source = source[:at] + NEUTRAL + source[at:]
    return source


def _code_end(source: str, start: int, end: int) -> int:
    """Just past the last character of code (not a comment, not a space) in `source[start:end]`."""
    last, i = start, start
    while i < end:
        past = skip_c_family(source, i)
        if past != i:
            if not source.startswith(("//", "/*"), i):
                last = past
            i = past
            continue
        if not source[i].isspace():
            last = i + 1
        i += 1
    return last


OBSERVE_FN = (
    "\n#[allow(dead_code)]\nfn harness_observe<T: ::std::fmt::Debug + ?Sized>(slot: i64, value: &T) {\n"
    "    use ::std::io::Write;\n"
    '    let line = format!("\\nharness-observe {} {:?}\\n", slot, value);\n'
    "    let mut out = ::std::io::stdout();\n"
    "    let _ = out.write_all(line.as_bytes());\n"
    "    let _ = out.flush();\n}\n"
)
"""Appended to a rewritten file: reports a value on the test process's own stdout, past libtest's capture."""
PROBE_MACRO = (
    "macro_rules! harness_probe { ($s:expr, $a:expr, $e:expr) => { match (&$a, &$e) { (a, e) => { "
    "harness_observe($s, a); harness_observe(-1 - $s, e); "
    'if !(*a == *e) { panic!("assertion failed: `(left == right)`") } } } }; } '
)
"""Put before the first line of a probe run's file (a macro is known below its definition only): both
sides reported, then compared as `assert_eq!` compares them."""


def observe(slot: int, actual: str, expected: str | None) -> str:
    """The call that replaces an `assert_eq!`: the actual side reported (and, probing, the expected)."""
    if expected is None:
        return f"harness_observe({slot}, &({actual}))"
    return f"harness_probe!({slot}, {actual}, {expected})"


def run_path(path: str, token: str) -> str:
    """`tests/test_<token>.rs`: a copy is an integration test of its own."""
    if PurePosixPath(path).parent.as_posix() != "tests" or not path.endswith(".rs"):
        raise ValueError(f"{path}: a Rust task's hidden test files are integration tests, tests/NAME.rs")
    return f"tests/test_{token}.rs"


def is_test_file(path: str) -> bool:
    parts = PurePosixPath(path.lower()).parts
    return parts[0] in ("tests", "benches") or (path.endswith(".rs") and "tests" in parts[:-1])


BUILD = (
    'out=$(cargo test --offline --quiet --test "$1" --no-run --message-format=json-render-diagnostics)'
    ' || exit $?; exe=$(printf %s "$out" | sed -n \'s/.*"executable":"\\([^"]*\\)".*/\\1/p\' | tail -n 1);'
    ' [ -n "$exe" ] || { echo "cargo named no test program for $1" >&2; exit 1; };'
    ' mkdir -p "$2" && cp "$exe" "$2/$1"'
)
"""Builds one copy's test target (its diagnostics as cargo renders them) and copies the program cargo
names to the grader's `bin/STEM`, which each test then runs alone: cargo would not run a target whose
file is gone (`gone_once_built`)."""


def own_rule(path: str, content: bytes | None) -> str | None:
    """Build scripts and cargo's settings, the toolchain file, compiled outputs."""
    parts = PurePosixPath(path.lower()).parts
    if parts[-1] in CARGO_FILES or ".cargo" in parts:
        return "a build script or cargo setting (changes how the tests are built or run)"
    if "target" in parts or parts[-1].endswith(ARTEFACTS):
        return "a compiled or binary artefact"
    return None


def failure_line(output: str, run: str) -> list[int]:
    """Lines of `run` a panic names (`panicked at 'msg', tests/x.rs:12:5` or, newer, `at tests/x.rs:12:5:`),
    not a compiler diagnostic's (`--> tests/x.rs:1:5`, which cargo replays from its cache)."""
    return [int(n) for n in re.findall(r"(?<!--> )" + re.escape(run) + r":(\d+):\d+", output)]


RUST = ProcessLanguage(
    name="rust",
    suffixes=(".rs",),
    test_command="cargo test --offline",
    commands=Commands(
        prepare=["cargo", "build", "--offline", "--quiet"],
        build=["sh", "-c", BUILD, "build", "{stem}", "{grader}/bin"],
        test=["{grader}/bin/{stem}", "--exact", "{test}", "--test-threads", "1"],
        passed=r"test result: ok\. 1 passed",
        env={
            "CARGO_TARGET_DIR": "{grader}/target",
            "CARGO_HOME": "{grader}/cargo",
            "CARGO_TERM_COLOR": "never",
            "CARGO_INCREMENTAL": "0",
            "RUST_BACKTRACE": "0",
            "RUSTFLAGS": "-Awarnings",  # a rewritten file's unused import is no failure's line
            "CARGO_MANIFEST_DIR": WORKDIR,  # as cargo sets it for a test it runs (tests/ are the root's)
        },
        gone_once_built=True,
        program="{grader}/bin/{stem}",
    ),
    tests_in=named_tests,
    assertions_in=assertions_in,
    run_path=run_path,
    is_test_file=is_test_file,
    own_rule=own_rule,
    failure_line=failure_line,
    equalities=equalities,
    observe=observe,
    decorate=lambda source, probe: ((PROBE_MACRO if probe else "") + source + OBSERVE_FN, ""),
    renamed=lambda text, run: neutral_messages(text),
    helper_path=lambda run: "",
    negated=negated,
    style=SourceStyle(
        debug=re.compile(r"^\s*(println!|print!|eprintln!|eprint!|dbg!)\s*\("),
        comment="//",
        code=re.compile(r"[;{}]\s*$|^(let|fn|if|for|while|return|match|use|impl|pub)\b.*[;({]"),
    ),
)
