"""JavaScript and TypeScript with Node's own test runner (`node:test`): each hidden test in a process of its
own (`envs/process_grading.py`).

One plug-in for both: TypeScript is told by its suffix (`.ts`, `.cts`), and a task's `language` is
`javascript` either way. A task's hidden files are test files (`test/roman.test.js`, `src/x.spec.ts`); its
ids are `PATH::NAME`, where NAME is a `test(...)`/`it(...)` call's string, after the names of the
`describe(...)` blocks around it joined by ` > ` (`PATH::roman > reads back 1994`). Each copy runs as
`DIR/h<hex>.test.EXT` in the hidden file's own folder; a `.ts` copy's build transpiles it once beside
itself (`.js`) with Debian's TypeScript (`transpileModule`: CommonJS, types stripped unchecked, an inline
source map, so a failure names the `.ts` file's line). Each test runs alone: `node -e LAUNCH FILE NAME`,
where LAUNCH (the grader's, below) escapes the test's own name into an anchored `--test-name-pattern` and
starts one Node process with the TAP reporter, source maps and LOAD, which defines what rewritten
assertions call, transpiles the repository's `.ts` modules on `require` and loads the copy (`require`, or
`import()` for ES modules). Exit status 0 with TAP's `# pass 1` then `# fail 0` is a pass: the filter ran
exactly one test (Node 18 and 20 match it against a test's own name, and report the others skipped).
Nothing of the repository configures the run: no `package.json` script, no `--require`/`--import`
(NODE_OPTIONS is emptied), no runner config file is read. Works on Node 18 (the image's Debian `nodejs`)
and 20. A repository whose package.json names mocha, jest or vitest (`runner_of`) runs its tests with that
runner instead, from the `node_modules` its lock file makes at /node_modules (`envs/npm_env.py`): each test
alone under an anchored name filter, with the grader's settings (no configuration file read), passed on
exit status 0 and the runner's own count of one test run and passed (see the runners, below).

Held assertions: `assert.strictEqual(A, E)`, `assert.deepStrictEqual`, `assert.equal`, `assert.deepEqual`
(`node:assert`, called as `assert.X`) and `expect(A).toBe(E)` / `.toEqual` / `.toStrictEqual`, each
rewritten to report A through `harness_observe` (LOAD's; a rendering with sorted keys, strings
JSON-quoted); probing, both sides are reported and compared with `assert.deepStrictEqual`. Every other
`assert...(...)` / `expect(...)...` is a check (`_check`): rewritten in place to report, as one value, the
receiver and arguments (or a comparison's sides) that decide it and its result (`harness_tap`,
`harness_check`), or what a throwing check's function threw (`harness_thrown`: its class, or the class
the check names where the throw is of it, `assert.throws(f, RangeError)` or `toThrow(RangeError)`, as
JUnit's `assertThrows` is reported, so that a fix that throws a subclass passes). The judge drops,
beside Python's rules, the package's and the runners' settings (`package.json`, lock files, `.npmrc`,
`tsconfig*.json`, Jest/Vitest/Mocha/Babel configs), `node_modules/`, test files and compiled outputs.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any

from envs.languages.source_text import PROBE, SLOT, Tapping, given_away, split_arguments, tapped, tolerant
from envs.process_grading import Commands, ProcessLanguage
from envs.process_held import Equality
from envs.reward import SourceStyle
from tasks.model import Task

CALL = re.compile(r"(?<![\w.$])(describe|suite|test|it)(?:\.only|\.skip|\.todo)?\s*\(\s*([\"'`])")
ASSERT = re.compile(r"(?<![\w.$])(?:assert(?:\.\w+)?|expect)\s*\(")
EQUAL = re.compile(r"assert\.(?:strictEqual|deepStrictEqual|equal|deepEqual)\s*\(")
MATCHER = re.compile(r"\s*\.\s*(toBe|toEqual|toStrictEqual)\s*\(")
CHAIN = re.compile(r"\s*\.\s*(?:not\s*\.\s*)?\w+\s*\(")
"""A matcher called on `expect(...)`'s result (`.toBe(`, `.not.toEqual(`)."""
SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".cts")
TEST_NAME = re.compile(r"(^|[./])(test|tests|spec|__tests__)$|\.(test|spec)\.[cm]?[jt]sx?$")
PACKAGE_FILES = frozenset(
    {"package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml",
     ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", ".babelrc", ".nvmrc", ".node-version"}
)  # fmt: skip
CONFIG = re.compile(
    r"^(jest|vitest|vite|babel|ava|karma|playwright|cypress)\.config\.|^vitest\.(workspace|projects)\."
    r"|^\.mocharc|^tsconfig.*\.json$"
    r"|^jsconfig.*\.json$|^\.babelrc|^\.swcrc$"
)
ARTEFACTS = (".map", ".tsbuildinfo", ".node", ".wasm", ".o", ".so")
OUTPUT_DIRS = frozenset({"dist", "coverage", ".nyc_output", ".next"})


def _string_end(source: str, start: int) -> int:
    """The index just past the string literal (`'`, `"` or a template without nesting) at `start`."""
    quote, i = source[start], start + 1
    while i < len(source) and source[i] != quote:
        i += 2 if source[i] == "\\" else 1
    return i + 1


def _skip(source: str, i: int) -> int:
    """The index past a string or comment that starts at `i`; `i` when none does."""
    if source[i] in "\"'`":
        return _string_end(source, i)
    if source.startswith("//", i):
        end = source.find("\n", i)
        return len(source) if end < 0 else end
    if source.startswith("/*", i):
        end = source.find("*/", i + 2)
        return len(source) if end < 0 else end + 2
    return i


def closing(source: str, start: int) -> int:
    """The index just past the bracket that closes the one at `start`, past strings and comments."""
    depth, i = 0, start
    while i < len(source):
        if (past := _skip(source, i)) != i:
            i = past
            continue
        if source[i] in "([{":
            depth += 1
        elif source[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(source)


def arguments(text: str) -> list[str]:
    """A call's arguments (`text` between its parentheses), split at the commas outside brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        if (past := _skip(text, i)) != i:
            i = past
            continue
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
        elif text[i] == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    return [*parts, text[start:]] if text[start:].strip() else parts


def _calls(source: str) -> list[tuple[str, str, int, int]]:
    """(kind, name, start, end) of each `describe`/`test`/`it` call with a literal name, outside strings."""
    found, i = [], 0
    while (m := CALL.search(source, i)) is not None:
        comment = max(source.rfind("//", 0, m.start()), source.rfind("\n", 0, m.start()))
        if source[comment : comment + 2] == "//":
            i = m.end()
            continue
        name_end = _string_end(source, m.end() - 1)
        paren = source.index("(", m.start())
        found.append((m.group(1), source[m.end() : name_end - 1], m.start(), closing(source, paren)))
        i = name_end
    return found


def _tests(source: str) -> dict[str, tuple[int, int]]:
    """Each test's full name (its `describe` blocks' names, then its own, joined by ` > `) -> its call's span."""
    calls = _calls(source)
    suites = [(name, start, end) for kind, name, start, end in calls if kind in ("describe", "suite")]
    tests: dict[str, tuple[int, int]] = {}
    for kind, name, start, end in calls:
        if kind in ("test", "it"):
            parents = [n for n, s, e in suites if s < start and end <= e]
            tests.setdefault(" > ".join([*parents, name]), (start, end))
    return tests


def named_tests(source: str) -> list[str]:
    return list(_tests(source))


def assertions_in(source: str, test: str) -> list[tuple[int, int, int]]:
    """(start, end, line) of each `assert...(...)` / `expect(...).matcher(...)` call in `test`'s body."""
    span = _tests(source).get(test)
    if span is None:
        return []
    found, at = [], source.index("(", span[0]) + 1
    while (m := ASSERT.search(source, at, span[1])) is not None:
        if (past := _skip_to_code(source, at, m.start())) != at:
            at = past
            continue
        end = closing(source, m.end() - 1)
        while (chain := CHAIN.match(source, end)) is not None:
            end = closing(source, chain.end() - 1)
        found.append((m.start(), end, source.count("\n", 0, m.start()) + 1))
        at = end
    return found


def _skip_to_code(source: str, at: int, target: int) -> int:
    """`at` when `target` is code; else the index past the string or comment between them that holds it."""
    i = at
    while i < target:
        past = _skip(source, i)
        if past > target:
            return past
        i = past if past != i else i + 1
    return at


def equalities(source: str, test: str) -> list[Equality]:
    """`assert.strictEqual(A, E[, message])` and its kin, and `expect(A).toBe(E)` and its kin, of `test`;
    and every other `assert...(...)` / `expect(...)...` of it as a check (`_check`)."""
    found = []
    for start, end, line in assertions_in(source, test):
        sides = _sides(source[start:end])
        if sides is not None:
            found.append(Equality(start, end, line, *sides))
        elif (check := _check(source[start:end])) is not None:
            found.append(Equality(start, end, line, check, "", check=True))
    return found


TAPPING = Tapping(
    skip=_skip,
    tap=f"harness_tap({SLOT}, ({{}}))",
    literal=re.compile(
        r"-?\d[\w.]*(?:[eE][+-]?\d+)?|([\"'])(?:\\.|(?!\1).)*\1|`[^`$]*`|true|false|null|undefined|NaN|\[\]|\{\}"
        r"|/(?:\\.|[^/\n])+/[a-z]*|.*=>.*|\.\.\..*|(?:async\s+)?function\b.*|super",
        re.DOTALL,
    ),
    comparisons=re.compile(r"===|!==|==|!=|<=|>=|<|>|\binstanceof\b|\bin\b"),
    no_split=re.compile(r"&&|\|\||\?|=>|(?<![=!<>])=(?!=)|[&|^]|<<|>>|\bnew\b|\btypeof\b|\bawait\b|,"),
)
"""How a check's operands are reported (`envs/languages/source_text.tapped`)."""
THROWING = frozenset({"throws", "rejects", "doesNotThrow", "doesNotReject"})
RANGES = frozenset({"notStrictEqual", "notDeepStrictEqual", "notEqual", "notDeepEqual"})
"""node:assert's assertions that state a range of values (all but one): no check is made of them."""
RANGE_MATCHER = re.compile(r"\.\s*(?:not\s*\.\s*)?(?:toBeCloseTo|toBeGreaterThan\w*|toBeLessThan\w*)\s*\(")
"""Matchers that state a range (`toBeCloseTo(2.5)`, `toBeGreaterThan(0)`): no check is made of them."""


def _check(call: str) -> str | None:
    """A non-equality assertion's text with what decides it reported (`Equality.check`): node:assert's
    first argument (`assert.ok(P(x))`: `x` and the result; `assert.throws(f)`: what `f` threw), or
    `expect(X)`'s `X` (what it threw, for `.toThrow`, `.rejects`, `.resolves`)."""
    plain = re.match(r"assert(?:\s*\.\s*(\w+))?\s*\(", call)
    if plain is not None:
        name = plain.group(1) or "ok"
        inside = call[plain.end() : closing(call, plain.end() - 1) - 1]
        spans = split_arguments(inside, _skip)
        if name == "fail" or name in RANGES or not spans or not inside[slice(*spans[0])].strip():
            return None
        start, end = plain.end() + spans[0][0], plain.end() + spans[0][1]
        throwing = name in THROWING
        second = inside[slice(*spans[1])].strip() if len(spans) > 1 and name in ("throws", "rejects") else ""
        named = second if CLASS_NAME.fullmatch(second) else None
    elif call.startswith("expect"):
        start = call.index("(") + 1
        end = closing(call, start - 1) - 1
        throwing = re.search(r"\.\s*(?:toThrow\w*|rejects|resolves)\b", call[end:]) is not None
        if RANGE_MATCHER.match(call, end + 1):
            return None  # `expect(x).toBeCloseTo(2.5)`: a range, which an exact value would narrow
        matcher = THROW_MATCHER.match(call, end)
        named = matcher.group(1) if matcher is not None else None
    else:
        return None
    if not throwing and (given_away(call[start:end], TAPPING) or tolerant(call[start:end], TAPPING)):
        return None  # `assert.ok(x === 5)`: a value the text gives away; `assert.ok(x < 5)`: a range
    return call[:start] + _reported(call[start:end], throwing, named) + call[end:]


CLASS_NAME = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*")
"""A name the check reads again (`assert.throws(f, RangeError)`, `errors.ParseError`): no call, so reading
it once more to report what was thrown changes nothing."""
THROW_MATCHER = re.compile(
    rf"\)\s*\.\s*(?:rejects\s*\.\s*)?toThrow(?:Error)?\s*\(\s*({CLASS_NAME.pattern})\s*,?\s*\)$"
)
"""`expect(f).toThrow(X)` (or `.rejects.toThrow(X)`) with X a name, after `expect(`'s argument."""


def _reported(operand: str, throwing: bool, named: str | None = None) -> str:
    """`operand` (its spaces kept) wrapped in what reports it; `named`: the class a throwing check names,
    which a throw of it is reported as, by the name the test writes (`harness_thrown`: not the class's own
    `name`, which an anonymous class, an alias or a static `name` would change)."""
    inner = operand.strip()
    at = operand.index(inner)
    wrapped = (
        f"harness_thrown({SLOT}, {PROBE}, {inner}{f', {named}, {json.dumps(named)}' if named else ''})"
        if throwing
        else f"harness_check({SLOT}, {PROBE}, {tapped(inner, TAPPING)})"
    )
    return operand[:at] + wrapped + operand[at + len(inner) :]


def _sides(call: str) -> tuple[str, str] | None:
    plain = EQUAL.match(call)
    if plain is not None:
        args = arguments(call[plain.end() : closing(call, plain.end() - 1) - 1])
        ok = len(args) in (2, 3) and closing(call, plain.end() - 1) == len(call)
        return (args[0].strip(), args[1].strip()) if ok and all(a.strip() for a in args[:2]) else None
    if not call.startswith("expect"):
        return None
    inner_end = closing(call, call.index("("))
    actual = arguments(call[call.index("(") + 1 : inner_end - 1])
    matcher = MATCHER.match(call, inner_end)
    if matcher is None or len(actual) != 1 or closing(call, matcher.end() - 1) != len(call):
        return None
    expected = arguments(call[matcher.end() : len(call) - 1])
    return (actual[0].strip(), expected[0].strip()) if len(expected) == 1 else None


def observe(slot: int, actual: str, expected: str | None) -> str:
    if expected is None:
        return f"harness_observe({slot}, ({actual}))"
    return f"harness_probe({slot}, ({actual}), ({expected}))"


TRANSPILE = r"""
const fs = require("fs");
let ts = null;
const transpiled = (file) => {
  ts = ts || require("/usr/share/nodejs/typescript");
  return ts.transpileModule(fs.readFileSync(file, "utf8"), { fileName: file, compilerOptions: {
    module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2020, esModuleInterop: true,
    inlineSourceMap: true, inlineSources: true } }).outputText;
};
"""
"""Debian's TypeScript (node-typescript), types stripped without a check: CommonJS with an inline source
map, which `--enable-source-maps` reads, so a stack names the `.ts` file's lines."""

BUILD = (
    TRANSPILE
    + r"""
const base = require("path").resolve(process.argv[1]);
for (const [from, to] of [[".ts", ".js"], [".cts", ".cjs"]]) {
  if (fs.existsSync(base + from)) fs.writeFileSync(base + to, transpiled(base + from));
}
"""
)
"""A copy's build: a `.ts` copy transpiled once beside itself (`.js`), not in each test's process."""

LOCK = """for (const k of ["harness_observe", "harness_tap", "harness_check", "harness_thrown", "harness_probe"]) {
  Object.defineProperty(globalThis, k, { writable: false, configurable: false });
}
"""
"""The reporters made read-only in a plain Node process (node:test's, mocha's), once LOAD or PRELUDE defined
them: code under test that wrapped one (`harness_thrown`, to see the class a check names thrown) would
decide what it reports (red team 8). Jest and vitest run the test in a context of their own, where a
reporter so locked is not seen: there they stay writable."""

LOAD = (
    TRANSPILE
    + r"""
const path = require("path"), util = require("util"), assert = require("assert");
const keyed = (v, keys) => "{" + keys.sort().map((k) => JSON.stringify(k) + ": " + render(v[k])).join(", ") + "}";
const listed = (v) => {
  const items = [];
  for (let i = 0; i < v.length; i++) items.push(render(v[i]));
  const proto = Object.getPrototypeOf(v);
  const extra = Object.keys(v).filter((k) => !(String(Number(k)) === k && Number(k) < v.length));
  return (proto === Array.prototype ? "" : String(proto?.constructor?.name) + " ")
    + "[" + items.join(", ") + "]" + (extra.length ? " " + keyed(v, extra) : "");
};
const render = (v) => typeof v === "string" ? JSON.stringify(v)
  : Array.isArray(v) ? listed(v)
  : v !== null && typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype ? keyed(v, Object.keys(v))
  : typeof v === "bigint" ? v + "n" : Object.is(v, -0) ? "-0"
  : util.inspect(v, { depth: null, sorted: true, breakLength: Infinity, maxArrayLength: null, customInspect: false });
const writeSync = fs.writeSync, report = (slot, text) => {
  writeSync(1, "\nharness-observe " + slot + " " + text + "\n");
};
globalThis.harness_observe = (slot, value) => report(slot, render(value));
const taps = new Map(), reported = (slot, probe, text) => {
  text = [...(taps.get(slot) || []), text].join(" | "); taps.delete(slot);
  report(slot, text); if (probe) report(-1 - slot, text);
};
globalThis.harness_tap = (slot, value) => {
  taps.set(slot, [...(taps.get(slot) || []), render(value)]); return value;
};
globalThis.harness_check = (slot, probe, value) => { reported(slot, probe, render(value)); return value; };
globalThis.harness_thrown = (slot, probe, f, named, written) => {
  const named_class = typeof named === "function" && (named === Error || named.prototype instanceof Error);
  const threw = (e) => reported(slot, probe, e instanceof Error
    ? "threw " + (named_class && e instanceof named ? written : e.constructor.name) + ": "
      + JSON.stringify(String(e.message)) : "threw " + render(e));
  const settled = (p) => p.then((v) => { reported(slot, probe, "returned " + render(v)); return v; },
    (e) => { threw(e); throw e; });
  if (typeof f !== "function") return f !== null && typeof f?.then === "function" ? settled(f) : f;
  return function (...args) {
    let r;
    try { r = f.apply(this, args); } catch (e) { threw(e); throw e; }
    if (r !== null && typeof r?.then === "function") return settled(r);
    reported(slot, probe, "returned " + render(r)); return r;
  };
};
globalThis.harness_probe = (slot, actual, expected) => {
  harness_observe(slot, actual); harness_observe(-1 - slot, expected);
  assert.deepStrictEqual(actual, expected);
};
require.extensions[".ts"] = require.extensions[".cts"] = (module, file) => module._compile(transpiled(file), file);
for (const name of ["assert", "assert/strict"]) {
  const m = require(name);
  for (const o of [m, m.strict, m.AssertionError, m.AssertionError.prototype]) Object.freeze(o);
}
const Module = require("module");
for (const [o, k] of [[Module, "_load"], [Module, "_resolveFilename"], [Module.prototype, "require"]]) {
  Object.defineProperty(o, k, { writable: false, configurable: false });
}
const base = path.resolve(process.argv[1]);
"""
    + LOCK
    + r"""const file = [".js", ".cjs", ".mjs", ".ts", ".cts"].map((e) => base + e).find((f) => fs.existsSync(f));
const load = () => import(require("url").pathToFileURL(file).href);
if (file.endsWith(".mjs")) load();
else try { require(file); } catch (e) { if (e.code === "ERR_REQUIRE_ESM") load(); else throw e; }
"""
)
"""Run in the test's process before its copy: what rewritten assertions call, the repository's `.ts`
modules transpiled on `require`, `node:assert` and `node:assert/strict` frozen (the module objects the
test shares with the code under test: a blanket no-op of their functions is refused) as is how a module
is resolved and loaded (no other module handed to the test in their place), then the copy loaded
(`process.argv[1]`: its path without the suffix; a `.ts` copy's build output first)."""

LAUNCH = (
    "const name = process.argv[2].split(' > ').pop().replace(/[.*+?^${}()|[\\]\\\\\\/]/g, '\\\\$&');"
    "const run = require('child_process').spawnSync(process.execPath, ['--enable-source-maps',"
    " '--test-reporter=tap', '--test-name-pattern=^' + name + '$', '-e', LOAD, process.argv[1]],"
    " { stdio: 'inherit' });"
    "process.exit(run.status === null ? 1 : run.status);"
)


def launch() -> str:
    """The `-e` program of a test's command: LOAD in a Node process that runs only the named test."""
    return "const LOAD = " + json.dumps(LOAD) + ";" + LAUNCH


def run_path(path: str, token: str) -> str:
    """`DIR/h<token>.test.EXT`: beside the hidden file, with its suffix (`.ts` stays TypeScript)."""
    suffix = PurePosixPath(path).suffix
    if suffix not in SUFFIXES:
        raise ValueError(
            f"{path}: a JavaScript task's hidden test files end with one of {', '.join(SUFFIXES)}"
        )
    return (PurePosixPath(path).parent / f"h{token}.test{suffix}").as_posix()


def is_test_file(path: str) -> bool:
    """Test folders (`test/`, `__tests__/`, `spec/`) and `*.test.*` / `*.spec.*` files."""
    parts = PurePosixPath(path.lower()).parts
    return any(TEST_NAME.search(p) for p in parts[:-1]) or TEST_NAME.search(parts[-1]) is not None


def own_rule(path: str, content: bytes | None) -> str | None:
    """The package's and the runners' settings, installed packages, compiled outputs."""
    parts = PurePosixPath(path.lower()).parts
    if parts[-1] in PACKAGE_FILES or CONFIG.search(parts[-1]):
        return "a package or test runner setting (changes what the tests load or how they run)"
    if "node_modules" in parts[:-1]:
        return "an installed package (changes what the tests load)"
    if "__mocks__" in parts[:-1]:  # jest loads a root __mocks__/ file in place of the package it names
        return "a module mock (changes what the tests load)"
    if any(p in OUTPUT_DIRS for p in parts[:-1]) or parts[-1].endswith(ARTEFACTS):
        return "a compiled or generated artefact"
    return None


def failure_line(output: str, run: str) -> list[int]:
    """Lines of `run` a failure's stack names (`(/repo/test/h1a2.test.js:12:5)` or `at /repo/...:12:5`),
    not TAP's `location:` of the test's own call."""
    name = re.escape(PurePosixPath(run).name)
    return [int(n) for n in re.findall(r"(?:\(|\bat )(?:file://)?[^\s()']*/" + name + r":(\d+):\d+", output)]


JAVASCRIPT = ProcessLanguage(
    name="javascript",
    suffixes=SUFFIXES,
    test_command="node --test",
    commands=Commands(
        prepare=[],
        build=["node", "-e", BUILD, "{dir}/{stem}"],
        test=["node", "-e", launch(), "{dir}/{stem}", "{test}"],
        passed=r"(?m)^# pass 1\n# fail 0$",
        env={"NODE_OPTIONS": "", "NODE_PATH": "", "NODE_NO_WARNINGS": "1", "FORCE_COLOR": "0"},
    ),
    tests_in=named_tests,
    assertions_in=assertions_in,
    run_path=run_path,
    is_test_file=is_test_file,
    own_rule=own_rule,
    failure_line=failure_line,
    equalities=equalities,
    observe=observe,
    decorate=lambda source, probe: (source, ""),
    helper_path=lambda run: "",
    runner_for=lambda task: runner_language(task),
    style=SourceStyle(
        debug=re.compile(r"^\s*(console\.(log|debug|info|warn|error|trace|dir)\s*\(|debugger\s*;?\s*$)"),
        comment="//",
        code=re.compile(r"[;{}]\s*$|^(const|let|var|if|for|while|return|function|import|export)\b.*[=({;]"),
    ),
)


# The npm runners: mocha, jest and vitest, installed from the repository's lock file at /node_modules
# (envs/npm_env.py). Each test runs alone as with node:test, under an anchored name filter, with settings
# of the grader's own (no configuration file of the repository read), and passes with exit status 0 and
# the runner's own count of exactly one test run and passed. Mocha runs in the process PRELUDE set up (a
# `.ts` file through its `require` hook); jest and vitest run the test in a context of their own, which a
# setup file (SETUP, written by `prepare`) prepares alike. Jest runs with no transform: CommonJS, and
# TypeScript only in test files (BUILD's output); vitest transpiles TypeScript and ES modules itself.

RUNNERS = ("mocha", "jest", "vitest")
PRELUDE = LOAD[: LOAD.index("\nconst base = path.resolve(process.argv[1]);")]
"""LOAD up to where it loads the copy: what rewritten assertions call, `.ts` transpiled on `require`,
`node:assert` and module loading frozen."""
SETUP = "require.extensions = require.extensions || {};\n" + PRELUDE
"""The setup file jest and vitest run in a test's own context before its copy (jest's `require` has no
`extensions`: its own transform, none here, loads files)."""
SETUP_FILE = "{grader}/harness-setup.cjs"
WRITE = "require('fs').writeFileSync(process.argv[1], process.argv[2])"
WRITE_SETUP = ["node", "-e", WRITE, SETUP_FILE, SETUP]
"""The `prepare` command of jest and vitest: the setup file, in the grader's folder."""
FIND = r"""
const copy = [SUFFIXES].map((e) => require("path").resolve(process.argv[1]) + e)
  .find((f) => require("fs").existsSync(f));
const words = process.argv[2].split(" > ").join(" ").replace(/[.*+?^${}()|[\]\\\/]/g, "\\$&");
"""
"""The copy (`process.argv[1]`: its path without the suffix) and the test's full name as the runners
join it (its `describe` blocks' names and its own, by spaces), escaped for a regular expression."""

MOCHA = r"""
{ FIND
  require("/node_modules/mocha/lib/cli/cli.js").main(["--no-config", "--no-package", "--reporter", "tap",
    "--exit", "--grep", "^" + words + "$", copy]);
}
"""
"""Mocha in this process after PRELUDE: no `.mocharc*`, no package.json `mocha` key; TAP's counts."""

JEST = r"""
{ FIND
  const grader = process.argv[3];
  const config = { rootDir: process.cwd(), transform: {}, setupFiles: [grader + "/harness-setup.cjs"],
    testEnvironment: "node", watchman: false, cacheDirectory: grader + "/jest-cache",
    testRegex: "\\.[cm]?[jt]sx?$", haste: {} };
  process.argv = [process.argv[0], "jest", "--ci", "--runInBand", "--forceExit", "--config",
    JSON.stringify(config), "--runTestsByPath", copy, "--testNamePattern", "^" + words + "$"];
  require("/node_modules/jest/bin/jest.js");
}
"""
"""Jest with the grader's configuration given as JSON (`--config`): no `jest.config.*`, no package.json
`jest` key, no transform (CommonJS test files, a `.ts` one after BUILD)."""

VITEST = r"""
{ FIND
  const grader = process.argv[3], file = require("path").relative(process.cwd(), copy);
  const pattern = "^(?:" + file.replace(/[.*+?^${}()|[\]\\\/]/g, "\\$&") + ")? *" + words + "$";
  import("/node_modules/vitest/dist/node.js").then(async ({ startVitest }) => {
    const vitest = await startVitest("test", [copy], { config: false, root: process.cwd(), watch: false,
      run: true, cache: false, globals: true, setupFiles: [grader + "/harness-setup.cjs"],
      testNamePattern: pattern, reporters: ["default"], pool: "forks",
      poolOptions: { forks: { singleFork: true } } }, { configFile: false, cacheDir: grader + "/vite",
      server: { host: "127.0.0.1" } });
    await vitest?.close();
    process.exit(process.exitCode ?? 0);
  }).catch((e) => { console.error(e); process.exit(1); });
}
"""
"""Vitest through its Node API with `config: false` (no `vitest.config.*`/`vite.config.*`); the full name
its filter reads starts with the file's path or a space (an unnamed suite's name; it differs by version)."""

PASSED = {
    "mocha": r"(?m)^# pass 1\n# fail 0$",
    "jest": r"(?m)^Tests:\s+(?:\d+ skipped, )?1 passed, \d+ total$",
    "vitest": r"(?m)^\s*Tests\s+1 passed(?: \| \d+ skipped)? \(\d+\)$",
}
"""What a run of exactly one test that passed prints: mocha's TAP counts, jest's and vitest's summaries."""
TEST_COMMANDS = {
    "mocha": "node /node_modules/mocha/bin/mocha.js",
    "jest": "node /node_modules/jest/bin/jest.js",
    "vitest": "node /node_modules/vitest/vitest.mjs run --no-cache",
}
"""Each runner's own command, the agent's `run_tests` (it reads the repository's settings); vitest's
without its results cache, which it writes into /repo's `node_modules/.vite`, the agent's diff."""


def runner_failure_line(output: str, run: str) -> list[int]:
    """`failure_line`, and vitest's `❯ test/h1a2.test.js:12:5`, and a copy at the repository's root."""
    name = re.escape(PurePosixPath(run).name)
    found = re.findall(r"(?:\(|\bat |❯ )(?:file://)?(?:[^\s()']*/)?" + name + r":(\d+):\d+", output)
    return [int(n) for n in found]


def _runner_language(runner: str) -> ProcessLanguage:
    order = ".ts .mts .cts .js .mjs .cjs" if runner == "vitest" else ".js .cjs .mjs .ts .cts"
    program = MOCHA if runner == "mocha" else JEST if runner == "jest" else VITEST
    program = program.replace("FIND", FIND.replace("[SUFFIXES]", json.dumps(order.split())))
    base = JAVASCRIPT.commands
    commands = Commands(
        prepare=[] if runner == "mocha" else WRITE_SETUP,
        build=[] if runner == "vitest" else base.build,
        test=["node", "-e", PRELUDE + LOCK + program if runner == "mocha" else program, "{dir}/{stem}", "{test}",
              "{grader}"],
        passed=PASSED[runner],
        env={**base.env, "NO_COLOR": "1", "CI": "1"},
    )  # fmt: skip
    return replace(
        JAVASCRIPT, commands=commands, test_command=TEST_COMMANDS[runner], failure_line=runner_failure_line
    )


def runner_of(manifest: dict[str, Any]) -> str | None:
    """The runner a package.json names in its dependencies or devDependencies (the one its `test` script
    runs where it names several); None: Node's own. ValueError where that does not tell one."""
    named = {**(manifest.get("dependencies") or {}), **(manifest.get("devDependencies") or {})}
    found = [r for r in RUNNERS if r in named]
    if len(found) > 1:
        script = str((manifest.get("scripts") or {}).get("test", ""))
        found = [r for r in found if re.search(rf"\b{r}\b", script)]
        if len(found) != 1:
            raise ValueError(
                "package.json names several test runners and its test script not one of them: "
                + ", ".join(r for r in RUNNERS if r in named)
            )
    return found[0] if found else None


def runner_language(task: Task) -> ProcessLanguage | None:
    """The plug-in as it runs `task`'s tests: with the runner its repository's package.json names."""
    manifest = task.repo / "package.json"
    if not manifest.is_file():
        return None
    runner = runner_of(json.loads(manifest.read_text()))
    return None if runner is None else _runner_language(runner)
