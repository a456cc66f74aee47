"""Go with `go test`: each hidden test in a process of its own (`envs/process_grading.py`).

A task's hidden files are test files of a package (`DIR/NAME_test.go`); its ids are `DIR/NAME_test.go::TestX`.
Each copy runs as `DIR/h<hex>_test.go` beside the package's other files (the hidden file's own path removed
while it runs): the runner builds the module (`go build ./...`) before any copy is written, then for each
copy compiles the package's test binary (`go test -c -vet=off`, outside /repo), removes the copy's text,
and runs each test alone in the package's folder (`-test.run '^TestX$' -test.v`); exit status 0 with
`--- PASS:` is a pass. No network
(`GOPROXY=off`) and no cgo. Held assertions: `if got := A; got != E {...}`, `if A != E {...}` and the
`!reflect.DeepEqual(A, E)` forms, each whole `if` rewritten to report A (`%#v`) through a helper file beside
the copy. A check with no value to hold (`if err != nil { t.Fatal(err) }`) gets a text canary with its
condition negated (`negated`). The judge drops, beside Python's rules, the module's files (`go.mod` with
its replace directives, `go.sum`, `go.work`), vendored packages, test files and compiled outputs.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from envs.languages.source_text import arguments, closing, literal_spans, mask, skip_c_family, string_end
from envs.process_grading import Commands, ProcessLanguage, negation
from envs.process_held import Equality
from envs.reward import SourceStyle

TEST_FN = re.compile(r"^func\s+(Test\w*)\s*\(\s*t\s+\*testing\.T\s*\)\s*\{", re.MULTILINE)
FAILS = re.compile(r"\bt\.(?:Error|Errorf|Fatal|Fatalf|Fail|FailNow)\s*\(")
IF = re.compile(r"\bif\s")
BRANCH = re.compile(r"\b(?:if|for|switch|select|return|goto|break|continue|func)\b|\bt\.Skip")
"""A statement of a check's block, before its failing call, that may leave the block without failing."""
INIT = re.compile(r"^(\w+)\s*:=\s*(.+?);\s*(.+)$", re.DOTALL)
NOT_EQUAL = re.compile(r"^(.+?)\s*!=\s*(.+)$", re.DOTALL)
DEEP = re.compile(r"^!\s*reflect\.DeepEqual\s*\((.*)\)$", re.DOTALL)
MODULE_FILES = frozenset({"go.mod", "go.sum", "go.work", "go.work.sum"})
ARTEFACTS = (".a", ".o", ".so", ".test", ".exe")


def named_tests(source: str) -> list[str]:
    return TEST_FN.findall(source)


def _body(source: str, test: str) -> tuple[int, int] | None:
    found = [m for m in TEST_FN.finditer(source) if m.group(1) == test]
    if not found:
        return None
    brace = found[0].end() - 1
    return brace, closing(source, brace, "{", "}")


def _checks(source: str, test: str) -> list[tuple[int, int, int, int, str]]:
    """(if's start, condition's end, block's end, the failing call's line, the condition) of each `if`
    at the top of `test`'s body whose block fails the test and that has no `else`."""
    body = _body(source, test)
    if body is None:
        return []
    found, at = [], body[0] + 1
    while (m := IF.search(source, at, body[1])) is not None:
        brace = _block_brace(source, m.end(), body[1])
        if brace < 0:
            break
        end = closing(source, brace, "{", "}")
        call = FAILS.search(source, brace, end)
        after = source[end : end + 12].lstrip()
        if call is not None and not after.startswith("else"):
            line = source.count("\n", 0, call.start()) + 1
            found.append((m.start(), brace, end, line, source[m.end() : brace].strip()))
        at = end
    return found


def _block_brace(source: str, start: int, end: int) -> int:
    """The `{` that opens an `if`'s block: the first one past `start`, outside strings, that ends its line
    (a composite literal's brace in the condition does not, as gofmt writes it); -1 if none."""
    i = start
    while i < end:
        if source[i] in '"`':
            i = string_end(source, i) if source[i] == '"' else source.find("`", i + 1) + 1
            continue
        if (
            source[i] == "{"
            and not source[i + 1 : source.find("\n", i) if "\n" in source[i:] else end].strip()
        ):
            return i
        i += 1
    return -1


def assertions_in(source: str, test: str) -> list[tuple[int, int, int]]:
    """(start, end, line) of each failing check of `test`: its condition's span, its failing call's line."""
    return [(start, cond_end, line) for start, cond_end, _, line, _ in _checks(source, test)]


def negated(source: str, start: int, end: int) -> str | None:
    """`source` with the condition of the check whose span `assertions_in` gives (`if` to its block's `{`)
    negated (`negation`); an init statement (`if err := f(); err != nil`) is kept, only what follows its
    `;` negated. None where the span is no `if`, or where its block may end without failing (a statement
    that branches before its failing call): negated, a correct fix must fail it however it is written."""
    head = IF.match(source, start)
    call = FAILS.search(source, end, closing(source, end, "{", "}"))
    if head is None or call is None or BRANCH.search(source, end + 1, call.start()):
        return None
    semicolons = [i for i, ch in enumerate(mask(source[head.end() : end], skip_c_family)) if ch == ";"]
    at = head.end() + (semicolons[-1] + 1 if semicolons else 0)
    condition = source[at:end]
    core = condition.strip()
    if not core:
        return None
    lead = condition[: len(condition) - len(condition.lstrip())]
    return source[:at] + lead + negation(core) + condition[len(lead) + len(core) :] + source[end:]


def _sides(condition: str) -> tuple[str, str] | None:
    """(actual, expected) of `got := A; got != E`, `A != E` or `!reflect.DeepEqual(A, E)` (also after an
    init); None for another condition."""
    init = INIT.match(condition)
    name, value, rest = (
        (init.group(1), init.group(2).strip(), init.group(3).strip()) if init else ("", "", condition)
    )
    deep = DEEP.match(rest)
    if deep is not None:
        args = [a.strip() for a in arguments(deep.group(1))]
        left, right = (args[0], args[1]) if len(args) == 2 else ("", "")
    else:
        plain = NOT_EQUAL.match(rest)
        left, right = (plain.group(1).strip(), plain.group(2).strip()) if plain else ("", "")
    if not left or not right or "&&" in rest or "||" in rest:
        return None
    if name:
        return (value, right) if left == name and name not in right else None
    if EXPECTATION.fullmatch(left) and not EXPECTATION.fullmatch(right):
        return right, left  # `if expected != actual`: the computed side is the right one
    return left, right


def equalities(source: str, test: str) -> list[Equality]:
    """Each held form of `test`'s checks (`_sides`), keeping used the variables only the replaced `if`
    used (`_still_used`)."""
    found = []
    for start, _, end, line, condition in _checks(source, test):
        sides = _sides(condition)
        if sides is not None:
            keeps = "".join(f"; _ = {name}" for name in _still_used(source, test, start, end, sides))
            found.append(Equality(start, end, line, *sides, keeps=keeps))
    return found


EXPECTATION = re.compile(r"(?:expected|expect|exp|want|wanted|wants|expectation)\w*", re.IGNORECASE)
"""A variable named as a test's expected value: `if expected != actual` reports `actual`, not the left side."""


DECLARED = re.compile(r"((?:[A-Za-z_]\w*\s*,\s*)*[A-Za-z_]\w*)\s*:=|\bvar\s+([A-Za-z_]\w*)")
NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")


def _still_used(source: str, test: str, start: int, end: int, sides: tuple[str, str]) -> list[str]:
    """The local variables of `test` in scope at `start` that the text `start:end` (an `if` a held check
    replaces) names and its kept actual side does not: `want := ..; if got != want {..}` leaves `want`
    unused, which Go refuses to compile. A variable of the expected side counts only where it is named
    as one (`EXPECTATION`): one that holds what the code computed left unused is refused by the compiler,
    where kept used it would let a check report the test's own constant."""
    body = _body(source, test)
    if body is None:
        return []
    code = _code_only(source[body[0] : start])
    depth, lowest, scoped = 0, [0] * (len(code) + 1), {}
    for i, ch in enumerate(code):
        depth += (ch == "{") - (ch == "}")
        lowest[i + 1] = depth
    for m in DECLARED.finditer(code):
        line_start = code.rfind("\n", 0, m.start()) + 1
        header = re.match(r"\s*(?:if|for|switch)\b", code[line_start : m.start()])
        level = lowest[m.start()] + (1 if header else 0)  # an if's or for's own variables: its blocks only
        if min(lowest[m.start() :]) >= level:
            scoped.update(dict.fromkeys(re.split(r"\s*,\s*", m.group(1) or m.group(2))))
    replaced = set(NAME.findall(_code_only(source[start:end]))) - set(NAME.findall(sides[0]))
    compared = {n for n in NAME.findall(sides[1]) if not EXPECTATION.fullmatch(n)}
    return sorted(n for n in replaced - compared if n in scoped and n not in ("_", "t"))


def _code_only(text: str) -> str:
    """`text` with its strings, runes and comments blanked (lengths kept)."""
    out = list(text)
    for start, end in literal_spans(text, skip_c_family):
        out[start:end] = " " * (end - start)
    return "".join(out)


def observe(slot: int, actual: str, expected: str | None) -> str:
    """The call that replaces a held check; probing, both sides, the expected one given the actual one's
    type as `!=` would give it (`harness_e := harness_a`, then assigned), with no generics: a module whose
    go.mod names a Go older than 1.18 builds it too."""
    if expected is None:
        return f"harness_observe({slot}, {actual})"
    sides = (
        f"harness_a := {actual}; harness_e := harness_a; harness_e = {expected}; return harness_a, harness_e"
    )
    return f"harness_probe(t, {slot})(func() (interface{{}}, interface{{}}) {{ {sides} }}())"


HELPER = """package {package}

import (
\t"fmt"
\t"os"
\t"reflect"
\t"testing"
)

func harness_observe(slot int, value interface{{}}) {{
\tfmt.Fprintf(os.Stdout, "\\nharness-observe %d %#v\\n", slot, value)
}}

func harness_probe(t *testing.T, slot int) func(interface{{}}, interface{{}}) {{
\tt.Helper()
\treturn func(actual, expected interface{{}}) {{
\t\tt.Helper()
\t\tharness_observe(slot, actual)
\t\tharness_observe(-1-slot, expected)
\t\tif !reflect.DeepEqual(actual, expected) {{
\t\t\tt.Errorf("not equal: %#v != %#v", actual, expected)
\t\t}}
\t}}
}}
"""
"""Written beside a rewritten copy, in its package: reports a value on the test's own stdout."""


IMPORT_LINE = re.compile(r'^(\s*(?:import\s+)?)"([\w./-]+)"\s*$', re.MULTILINE)
"""An unaliased import spec on a line of its own (in an import block, or `import "x"`)."""


def _unused_imports_blank(source: str) -> str:
    """Each unaliased import whose package the (rewritten) file no longer names made a blank import
    (`_ "reflect"`): what a removed check alone used would not compile otherwise. Lines stay."""

    def blank(m: re.Match[str]) -> str:
        name = m.group(2).rsplit("/", 1)[-1]
        rest = source[: m.start()] + source[m.end() :]
        return m.group(0) if re.search(rf"\b{re.escape(name)}\.", rest) else f'{m.group(1)}_ "{m.group(2)}"'

    return IMPORT_LINE.sub(blank, source)


def decorate(source: str, probe: bool) -> tuple[str, str]:
    del probe
    package = re.search(r"^package\s+(\w+)", source, re.MULTILINE)
    return _unused_imports_blank(source), HELPER.format(package=package.group(1) if package else "main")


def run_path(path: str, token: str) -> str:
    """`DIR/h<token>_test.go`: a copy is a test file of the hidden file's own package."""
    if not path.endswith("_test.go"):
        raise ValueError(f"{path}: a Go task's hidden test files are DIR/NAME_test.go")
    return (PurePosixPath(path).parent / f"h{token}_test.go").as_posix()


def helper_path(run: str) -> str:
    return run.removesuffix("_test.go") + "_harness_test.go"


def is_test_file(path: str) -> bool:
    parts = PurePosixPath(path.lower()).parts
    return parts[-1].endswith("_test.go") or "testdata" in parts[:-1]


def own_rule(path: str, content: bytes | None) -> str | None:
    """The module's files, vendored packages, compiled outputs."""
    parts = PurePosixPath(path.lower()).parts
    if parts[-1] in MODULE_FILES or "vendor" in parts[:-1]:
        return "a module setting or vendored package (changes what the tests build against)"
    if parts[-1].endswith(ARTEFACTS):
        return "a compiled or binary artefact"
    return None


def failure_line(output: str, run: str) -> list[int]:
    """Lines of `run` a failure names (`    h1a2b_test.go:12: message`)."""
    return [
        int(n) for n in re.findall(r"(?<![\w/.])" + re.escape(PurePosixPath(run).name) + r":(\d+):", output)
    ]


GO = ProcessLanguage(
    name="go",
    suffixes=(".go",),
    test_command="go test ./...",
    commands=Commands(
        prepare=["go", "build", "./..."],
        # -vet=off: `go test` vets the package first, and a vet finding (a Printf verb, say) would fail
        # the build of a copy whose tests run fine; the grader runs tests, not a linter.
        build=["go", "test", "-c", "-vet=off", "-o", "{grader}/bin/{stem}.test", "./{dir}"],
        test=["{grader}/bin/{stem}.test", "-test.run", "^{test}$", "-test.v", "-test.count=1"],
        passed=r"(?m)^--- PASS: \w+ \(",
        cwd="{dir}",
        env={
            "GOCACHE": "{grader}/go-cache",
            "GOPATH": "{grader}/go",
            "GOPROXY": "off",
            "GOFLAGS": "-mod=mod",
            "GOTOOLCHAIN": "local",
            "CGO_ENABLED": "0",
        },
        gone_once_built=True,
        program="{grader}/bin/{stem}.test",
    ),
    tests_in=named_tests,
    assertions_in=assertions_in,
    run_path=run_path,
    is_test_file=is_test_file,
    own_rule=own_rule,
    failure_line=failure_line,
    equalities=equalities,
    observe=observe,
    decorate=decorate,
    helper_path=helper_path,
    negated=negated,
    style=SourceStyle(
        debug=re.compile(r"^\s*(fmt\.Print(ln|f)?|println|print|log\.Print(ln|f)?)\s*\("),
        comment="//",
        code=re.compile(r"[{}]\s*$|:=|^(if|for|return|func|var|go|defer)\b.*[({]"),
    ),
)
