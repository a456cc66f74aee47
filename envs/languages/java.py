"""Java with JUnit (Jupiter, or JUnit 4 through the Vintage engine): each hidden test in a process of its
own (`envs/process_grading.py`).

A task's repository has Maven's layout (`src/main/java`, `src/test/java`, a `pom.xml`); its hidden files
are test classes (`src/test/java/PKG/NameTest.java`) and its ids `src/test/java/PKG/NameTest.java::method`,
a `@Test` method without parameters. Each copy runs as `src/test/java/PKG/H<hex>Test.java`, its primary
class renamed to match (`renamed`). The runner compiles `src/main/java` with `javac` into the grader's
folder before any copy is written; for each copy `javac` compiles it against those classes and the JUnit
jar, taking the other test sources it uses from `src/test/java` (`-sourcepath`); each test runs alone in
a JVM of its own under JUnit's console launcher (`--select-method PKG.H<hex>Test#method`). Exit status 0
with the launcher's summary of exactly one test found, started and successful is a pass. Nothing of the
repository configures the run: no `pom.xml`, no annotation processor (`-proc:none`), and the judge drops
JUnit's properties and service files.

Why not Maven: Debian's local repository (`/usr/share/maven-repo`, all a sandbox has offline) holds
Surefire but neither maven-compiler-plugin nor maven-resources-plugin, so `mvn -o compile` cannot build
there; and `mvn -o surefire:test -Dtest=Class#method` on a tree built beforehand took 13 s a test where
the launcher takes under 1 s (both on the same loaded 2-core host). Debian's
`junit-platform-console-standalone.jar` (JUnit Platform 1.9, with Jupiter 5.9, Vintage and JUnit 4.13
inside) is the one jar both builds and runs. The JVMs of javac and of the launcher map class-data archives
made at `prepare` (`PREPARE`). Not supported: dependencies beyond JUnit (nothing is resolved), several
modules, `@Nested` classes and parameterized or repeated tests (a hidden id is one plain `@Test`).

Held assertions: `assertEquals(EXPECTED, ACTUAL)` and `assertArrayEquals(EXPECTED, ACTUAL)` with two
arguments (JUnit's order: the expected value first; a message or a delta makes a third, and such calls are
left alone, as is an expected `null`), each rewritten to report ACTUAL through `HarnessObserve`, a class
appended after the copy's last line: a rendering by the value's runtime type (strings quoted, numbers
in decimal, a whole floating one as the integer it equals, arrays and collections element by element, sets and maps sorted), printed on the process's
own standard output (not `System.out`, which the code under test can replace). Probing, both sides are
reported and compared as JUnit compares them. Every other assertion with a value is a check (`_check`):
its operands reported in place as one value (`HarnessObserve.tap`, `check`), or, for `assertThrows`, what
its executable threw (`thrown`); so is JUnit 4's `@Test(expected = X.class)`, its body wrapped to report
what it threw (`expected`). The judge drops, beside Python's rules, Maven's and
Gradle's build files (`pom.xml`: Surefire's `skipTests`, `testFailureIgnore`, plugins, dependencies),
`.mvn/` and the wrappers, test sources (`src/test/`), JUnit's settings and Java service files
(`junit-platform.properties`, `META-INF/services/`: an extension, listener or engine in every test's JVM),
module descriptors, and compiled outputs (`*.class`, `*.jar`, `target/`).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from envs.languages.source_text import (
    PROBE,
    SLOT,
    Tapping,
    arguments,
    given_away,
    split_arguments,
    tapped,
    tolerant,
)
from envs.process_grading import Commands, ProcessLanguage
from envs.process_held import Equality
from envs.reward import SourceStyle

JUNIT = "/usr/share/java/junit-platform-console-standalone.jar"
"""Debian's JUnit console launcher (package junit5): JUnit Platform, Jupiter, Vintage and JUnit 4."""
TESTS_ROOT = "src/test/java"
JVM = ["-XX:-UsePerfData", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx512m"]
"""A short-lived JVM's options: no perf data file in /tmp, one GC thread, the quick compiler only."""
JAVAC = ["javac", *(f"-J{o}" for o in JVM), "-proc:none", "-nowarn", "-encoding", "UTF-8"]
LAUNCHER = ["-jar", JUNIT, "--disable-banner", "--disable-ansi-colors", "--details=tree"]

TEST_METHOD = re.compile(
    r"@(?:[\w.]+\.)?Test\b(?:\s*\([^)]*\))?\s+(?:@[\w.]+(?:\([^)]*\))?\s+)*"
    r"(?:(?:public|protected|private|static|final)\s+)*void\s+([A-Za-z_$][\w$]*)\s*\(\s*\)"
)
"""A `@Test` method without parameters (`@Test(expected = ...)` of JUnit 4 too; not `@TestFactory`,
`@ParameterizedTest` nor `@RepeatedTest`, whose runs are not one test)."""
ASSERT = re.compile(r"(?<![\w.$])(?:(?:Assertions|Assert)\s*\.\s*)?(assert[A-Z]\w*|fail)\s*\(")
EQUAL = frozenset({"assertEquals", "assertArrayEquals"})
PRIMARY = re.compile(
    r"^(?:@[\w.]+(?:\([^)]*\))?\s+)*((?:public\s+)?)(?:(?:final|abstract|sealed|strictfp)\s+)*"
    r"(?:class|interface|enum|record)\s+([A-Za-z_$][\w$]*)",
    re.MULTILINE,
)
"""A top-level type's declaration (at the start of its line, as Java is written)."""
BUILD_FILES = frozenset(
    {"pom.xml", "mvnw", "mvnw.cmd", "build.gradle", "build.gradle.kts", "settings.gradle",
     "settings.gradle.kts", "gradle.properties", "gradlew", "gradlew.bat", "build.xml"}
)  # fmt: skip
ARTEFACTS = (".class", ".jar", ".war", ".ear")


def _skip(source: str, i: int) -> int:
    """The index past a string, text block, character literal or comment that starts at `i`; `i` if none."""
    if source.startswith('"""', i):
        end = source.find('"""', i + 3)
        return len(source) if end < 0 else end + 3
    if source[i] in "\"'":
        j = i + 1
        while j < len(source) and source[j] not in (source[i], "\n"):
            j += 2 if source[j] == "\\" else 1
        return j + 1
    if source.startswith("//", i):
        end = source.find("\n", i)
        return len(source) if end < 0 else end
    if source.startswith("/*", i):
        end = source.find("*/", i + 2)
        return len(source) if end < 0 else end + 2
    return i


def closing(source: str, start: int) -> int:
    """The index just past the bracket that closes the one at `start`, past strings and comments."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    open_, close = source[start], pairs[source[start]]
    depth, i = 0, start
    while i < len(source):
        if (past := _skip(source, i)) != i:
            i = past
            continue
        if source[i] == open_:
            depth += 1
        elif source[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(source)


def named_tests(source: str) -> list[str]:
    """The `@Test` methods of a test class, by name (each runs alone as `Class#name`)."""
    return TEST_METHOD.findall(source)


def _body(source: str, test: str) -> tuple[int, int] | None:
    found = [m for m in TEST_METHOD.finditer(source) if m.group(1) == test]
    brace = source.find("{", found[0].end()) if found else -1
    return None if brace < 0 else (brace, closing(source, brace))


def _line(source: str, at: int) -> int:
    return source.count("\n", 0, at) + 1


EXPECTED = re.compile(r"\bexpected\s*=\s*([\w.]+\.class)")
"""JUnit 4's `@Test(expected = X.class)`: the test passes where its body throws an X."""


def _expected(source: str, test: str) -> tuple[int, int, str] | None:
    """(start, end, class literal) of `test`'s `@Test(expected = X.class)` annotation, if it has one."""
    found = [m for m in TEST_METHOD.finditer(source) if m.group(1) == test]
    annotation = source[found[0].start() : source.find(")", found[0].start()) + 1] if found else ""
    named = EXPECTED.search(annotation) if annotation.startswith(("@Test(", "@org.junit.Test(")) else None
    if not found or named is None:
        return None
    return found[0].start(), found[0].start() + len(annotation), named.group(1)


def assertions_in(source: str, test: str) -> list[tuple[int, int, int]]:
    """(start, end, line) of each `assertX(...)`/`fail(...)` call in `test`'s body: the call's span, and
    the line of its `(`, which javac gives the call (the line a failure's stack frame names); first, the
    span and line of a JUnit 4 `@Test(expected = X.class)` annotation, which asserts the body throws."""
    body = _body(source, test)
    if body is None:
        return []
    expected = _expected(source, test)
    spans = [] if expected is None else [(expected[0], expected[1], _line(source, expected[0]))]
    at = body[0]
    while (m := ASSERT.search(source, at, body[1])) is not None:
        if _inside_literal(source, body[0], m.start()):
            at = m.end()
            continue
        end = closing(source, m.end() - 1)
        spans.append((m.start(), end, _line(source, m.end() - 1)))
        at = end
    return spans


def _inside_literal(source: str, start: int, at: int) -> bool:
    """Whether `at` lies in a string or comment of the text that starts at `start` (outside any)."""
    i = start
    while i < at:
        past = _skip(source, i)
        if past > at:
            return True
        i = past if past != i else i + 1
    return False


def equalities(source: str, test: str) -> list[Equality]:
    """Each two-argument `assertEquals(EXPECTED, ACTUAL)` or `assertArrayEquals` of `test`; every other
    assertion of it as a check (`_check`)."""
    found = [] if (thrown := _expected_check(source, test)) is None else [thrown]
    for start, end, line in assertions_in(source, test):
        head = ASSERT.match(source, start)
        if head is None:
            continue
        args = [a.strip() for a in arguments(source[head.end() : end - 1])]
        if head.group(1) in EQUAL and len(args) == 2 and all(args) and args[0] != "null":
            found.append(Equality(start, end, line, actual=args[1], expected=args[0]))
        elif (check := _check(source[start:end], head.end() - start, head.group(1))) is not None:
            found.append(Equality(start, end, line, check, "", check=True))
    return found


def _expected_check(source: str, test: str) -> Equality | None:
    """A JUnit 4 `@Test(expected = X.class)` held as a check of what the body threw, as `assertThrows` is
    (`thrown`): the body wrapped in `try {` (after its opening brace) and a `catch` (at its closing brace)
    that reports the throwable and throws it on, both on their own lines' ends, so that no line moves and
    the assertions inside keep their rewrites. A body that throws nothing fails under JUnit and reports
    nothing."""
    expected, body = _expected(source, test), _body(source, test)
    if expected is None or body is None:
        return None
    closing_text = (
        f"}} catch (Throwable harnessThrown) {{ HarnessObserve.expected({SLOT}, {PROBE}, {expected[2]}, "
        "harnessThrown); throw harnessThrown; } }"
    )
    return Equality(
        body[1] - 1, body[1], _line(source, expected[0]), closing_text, "", check=True,
        opening=(body[0] + 1, " try {"),
    )  # fmt: skip


TAPPING = Tapping(
    skip=_skip,
    tap=f"HarnessObserve.tap({SLOT}, {{}})",
    literal=re.compile(
        r"-?(?:0[xXbB])?[\d_]*\.?[\d_]+(?:[eE][+-]?\d+)?[lLfFdD]?|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])+'"
        r"|true|false|null|super|.*->.*|.*::.*|[\w.]+\.class|\"\"\".*|new\b.*|.*<>.*",
        re.DOTALL,
    ),
    comparisons=re.compile(r"==|!=|<=|>=|<|>|\binstanceof\b"),
    no_split=re.compile(r"&&|\|\||\?|->|(?<![=!<>])=(?!=)|[&|^]|<<|>>|<>|\bnew\b|,"),
)
"""How a check's operands are reported (`envs/languages/source_text.tapped`)."""
NO_VALUE = re.compile(
    r"-?(?:0[xXbB])?[\d_]*\.?[\d_]+(?:[eE][+-]?\d+)?[lLfFdD]?|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])+'|true|false"
    r"|null|(?:\([\w\s,]*\)|\w+)\s*->.*|[\w.]+::\w+|[\w.]+\.class|\"\"\".*",
    re.DOTALL,
)
"""An assertion's argument that is no value to report: a literal (a message), a lambda, a method
reference, a class literal."""
NO_SUBJECT = frozenset(
    {"fail", "assertAll", "assertDoesNotThrow", "assertTimeout", "assertTimeoutPreemptively"}
)
"""Assertions with no value to report: their operands are lambdas, or nothing."""


def _ranged(name: str, inside: str) -> bool:
    """An assertion that states a range of values: `assertNotEquals`, or an `assertEquals` with a delta
    (three or four arguments, the last no message): holding its value exactly would fail a correct fix
    within the delta."""
    if name.startswith("assertNotEquals"):
        return True
    spans = split_arguments(inside, _skip)
    last = inside[slice(*spans[-1])].strip() if spans else ""
    return name in EQUAL and len(spans) >= 3 and not last.startswith('"')


def _check(call: str, inside_at: int, name: str) -> str | None:
    """A non-equality assertion's text with what decides it reported (`Equality.check`): for
    `assertThrows`, what its executable threw; else its operands that are not literals, lambdas or class
    literals (a message literal is one), the last one's own operands reported as `tapped` says
    (`assertTrue(x.isEmpty())`: `x` and the result)."""
    inside = call[inside_at : len(call) - 1]
    if name in NO_SUBJECT or _ranged(name, inside):
        return None
    spans = [(a, b) for a, b in split_arguments(inside, _skip) if not NO_VALUE.fullmatch(inside[a:b].strip())]
    expected = "null"
    if name.startswith("assertThrows"):
        parts = split_arguments(inside, _skip)
        spans = [(a, b) for a, b in parts if "->" in inside[a:b] or "::" in inside[a:b]]
        classes = [inside[a:b].strip() for a, b in parts if inside[a:b].strip().endswith(".class")]
        expected = classes[0] if classes else "null"
    if (
        not spans
        or given_away(inside[slice(*spans[-1])], TAPPING)
        or tolerant(inside[slice(*spans[-1])], TAPPING)
    ):
        return None  # `assertTrue(x == 5)`: a value the text gives away; `assertTrue(x < 5)`: a range
    for n, (a, b) in sorted(enumerate(spans), reverse=True):
        inner = inside[a:b].strip()
        at = inside.index(inner, a)
        wrapped = (
            f"HarnessObserve.thrown({SLOT}, {PROBE}, {expected}, {inner})" if name.startswith("assertThrows")
            else f"HarnessObserve.check({SLOT}, {PROBE}, {tapped(inner, TAPPING)})" if n == len(spans) - 1
            else TAPPING.tap.replace("{}", inner)
        )  # fmt: skip
        inside = inside[:at] + wrapped + inside[at + len(inner) :]
    return call[:inside_at] + inside + call[len(call) - 1 :]


def observe(slot: int, actual: str, expected: str | None) -> str:
    """The call that replaces an equality assertion (the expected side evaluated first, as JUnit's is)."""
    if expected is None:
        return f"HarnessObserve.observe({slot}, {actual})"
    return f"HarnessObserve.probe({slot}, {expected}, {actual})"


HELPER = r"""
final class HarnessObserve {
    private static final java.io.PrintStream OUT = new java.io.PrintStream(
        new java.io.FileOutputStream(java.io.FileDescriptor.out), true, java.nio.charset.StandardCharsets.UTF_8);

    private HarnessObserve() {}

    static void observe(int slot, Object value) {
        report(slot, render(value));
    }

    private static void report(int slot, String text) {
        OUT.print("\nharness-observe " + slot + " " + text + "\n");
        OUT.flush();
    }

    private static final java.util.Map<Integer, java.util.List<String>> TAPS = new java.util.HashMap<>();

    private static void note(int s, Object v) {
        TAPS.computeIfAbsent(s, k -> new java.util.ArrayList<>()).add(checked(v));
    }

    private static boolean typeOnly;

    static String checked(Object v) {
        // A check's operand or result, its assertion still run: an object with Object's own toString by its
        // type alone (`Name@`, its identity hash new in every run). An equality's value keeps the hash, so it
        // is never held: held, its assertEquals would no longer run, and the type would pass any object of it.
        typeOnly = true;
        try {
            return render(v);
        } finally {
            typeOnly = false;
        }
    }

    private static void seen(int s, boolean p, String text) {
        java.util.List<String> parts = TAPS.getOrDefault(s, new java.util.ArrayList<>());
        TAPS.remove(s);
        parts.add(text);
        report(s, String.join(" | ", parts));
        if (p) report(-1 - s, String.join(" | ", parts));
    }

    static <T> T tap(int s, T v) { note(s, v); return v; }
    static int tap(int s, int v) { note(s, v); return v; }
    static long tap(int s, long v) { note(s, v); return v; }
    static double tap(int s, double v) { note(s, v); return v; }
    static float tap(int s, float v) { note(s, v); return v; }
    static char tap(int s, char v) { note(s, v); return v; }
    static short tap(int s, short v) { note(s, v); return v; }
    static byte tap(int s, byte v) { note(s, v); return v; }
    static boolean tap(int s, boolean v) { note(s, v); return v; }

    static <T> T check(int s, boolean p, T v) { seen(s, p, checked(v)); return v; }
    static int check(int s, boolean p, int v) { seen(s, p, render(v)); return v; }
    static long check(int s, boolean p, long v) { seen(s, p, render(v)); return v; }
    static double check(int s, boolean p, double v) { seen(s, p, render(v)); return v; }
    static float check(int s, boolean p, float v) { seen(s, p, render(v)); return v; }
    static char check(int s, boolean p, char v) { seen(s, p, render(v)); return v; }
    static short check(int s, boolean p, short v) { seen(s, p, render(v)); return v; }
    static byte check(int s, boolean p, byte v) { seen(s, p, render(v)); return v; }
    static boolean check(int s, boolean p, boolean v) { seen(s, p, render(v)); return v; }

    static void expected(int s, boolean p, Class<?> expected, Throwable t) { seen(s, p, threw(expected, t)); }

    private static String threw(Class<?> expected, Throwable t) {
        // The class the assertion names where the thrown one is of it (assertThrows takes a subclass).
        Class<?> shown = expected != null && expected.isInstance(t) ? expected : t.getClass();
        return "threw " + shown.getName() + ": " + render(t.getMessage());
    }

    static void probe(int slot, Object expected, Object actual) {
        observe(slot, actual);
        observe(-1 - slot, expected);
        if (!same(expected, actual)) {
            throw new AssertionError("expected: <" + render(expected) + "> but was: <" + render(actual) + ">");
        }
    }

    private static boolean same(Object e, Object a) {
        if (e instanceof Number && a instanceof Number && (floating(e) || floating(a))) {
            return Double.doubleToLongBits(((Number) e).doubleValue())
                == Double.doubleToLongBits(((Number) a).doubleValue());
        }
        if (integral(e) && integral(a)) {
            return ((Number) e).longValue() == ((Number) a).longValue();
        }
        return java.util.Arrays.deepEquals(new Object[] {e}, new Object[] {a});
    }

    private static boolean floating(Object v) {
        return v instanceof Double || v instanceof Float;
    }

    private static boolean integral(Object v) {
        return v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte;
    }

    static String render(Object v) {
        if (v == null) return "null";
        if (v instanceof String) return quote((String) v, '"');
        if (v instanceof Character) return quote(v.toString(), '\'');
        if (floating(v)) {
            double d = ((Number) v).doubleValue();
            boolean whole = d == Math.rint(d) && Math.abs(d) < 1e15 && Double.doubleToLongBits(d) != Long.MIN_VALUE;
            return whole ? Long.toString((long) d) : Double.toString(d);
        }
        if (v.getClass().isArray()) {
            java.util.List<Object> items = new java.util.ArrayList<>();
            for (int i = 0; i < java.lang.reflect.Array.getLength(v); i++) items.add(java.lang.reflect.Array.get(v, i));
            return all(items, "[", "]", false);
        }
        if (v instanceof java.util.Map) {
            java.util.List<String> entries = new java.util.ArrayList<>();
            for (java.util.Map.Entry<?, ?> e : ((java.util.Map<?, ?>) v).entrySet()) {
                entries.add(render(e.getKey()) + "=" + render(e.getValue()));
            }
            java.util.Collections.sort(entries);
            return "{" + String.join(", ", entries) + "}";
        }
        if (v instanceof java.util.Set) return all((java.util.Set<?>) v, "{", "}", true);
        if (v instanceof java.util.List) return all((java.util.List<?>) v, "[", "]", false);
        if (v instanceof java.util.Optional) {
            java.util.Optional<?> o = (java.util.Optional<?>) v;
            return o.isPresent() ? "Optional[" + render(o.get()) + "]" : "Optional.empty";
        }
        String text = String.valueOf(v).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r");
        // A value of the JDK's own types reads as its text; any other (a Number or Collection of the code
        // under test's own, a class whose toString says 5) with its class, as equals would tell them apart.
        String type = v.getClass().getName();
        if (typeOnly && text.equals(type + "@" + Integer.toHexString(System.identityHashCode(v)))) text = type + "@";
        if (v instanceof java.util.Collection) return type + all((java.util.Collection<?>) v, "[", "]", false);
        return type.startsWith("java.") ? text : type + "(" + text + ")";
    }

    private static String all(Iterable<?> items, String open, String close, boolean sorted) {
        java.util.List<String> parts = new java.util.ArrayList<>();
        for (Object item : items) parts.add(render(item));
        if (sorted) java.util.Collections.sort(parts);
        return open + String.join(", ", parts) + close;
    }

    private static String quote(String s, char mark) {
        StringBuilder out = new StringBuilder().append(mark);
        for (char c : s.toCharArray()) {
            if (c == mark || c == '\\') out.append('\\').append(c);
            else if (c == '\n') out.append("\\n");
            else if (c == '\r') out.append("\\r");
            else if (c == '\t') out.append("\\t");
            else if (c < 0x20 || c == 0x7f) out.append(String.format("\\u%04x", (int) c));
            else out.append(c);
        }
        return out.append(mark).toString();
    }
}
"""
"""Appended after a rewritten copy's last line (a second top-level class of its file, in its package):
reports a value on the test's own standard output, past `System.setOut`."""


THROWN = {
    "org.junit.jupiter.api.function.Executable": "execute",
    "org.junit.function.ThrowingRunnable": "run",
}
"""What `assertThrows` takes, JUnit 5's and JUnit 4's, -> its method."""
THROWN_METHOD = """
    static KIND thrown(int s, boolean p, Class<?> expected, KIND e) {
        return () -> {
            try { e.RUN(); } catch (Throwable t) { seen(s, p, threw(expected, t)); throw t; }
            seen(s, p, "returned");
        };
    }
"""


def decorate(source: str, probe: bool) -> tuple[str, str]:
    """The copy with `HarnessObserve` after its last line (no line moves); no helper file. Its `thrown`
    takes JUnit 5's executable where the copy imports Jupiter, else JUnit 4's runnable."""
    del probe
    kind = next(iter(THROWN)) if "org.junit.jupiter" in source else list(THROWN)[1]
    thrown = THROWN_METHOD.replace("KIND", kind).replace("RUN", THROWN[kind])
    helper = HELPER.rstrip()[:-1] + thrown + "}\n"  # before the class's closing brace
    return source.rstrip("\n") + "\n" + helper, ""


def renamed(text: str, run: str) -> str:
    """`text` with its primary class (the public top-level one, else the first) named as `run`'s file:
    every whole-word use of the name, so that `Name.class` and its constructors follow."""
    found = list(PRIMARY.finditer(text))
    if not found:
        return text
    name = next((m for m in found if m.group(1)), found[0]).group(2)
    return re.sub(rf"(?<![\w$]){re.escape(name)}(?![\w$])", PurePosixPath(run).stem, text)


def run_path(path: str, token: str) -> str:
    """`src/test/java/PKG/H<token>Test.java`: a copy is a test class of the hidden file's own package."""
    if not path.startswith(f"{TESTS_ROOT}/") or not path.endswith(".java"):
        raise ValueError(
            f"{path}: a Java task's hidden test files are test classes, {TESTS_ROOT}/PKG/NAME.java"
        )
    return (PurePosixPath(path).parent / f"H{token}Test.java").as_posix()


def is_test_file(path: str) -> bool:
    """Test sources and resources (`src/test/` of the project or of a module)."""
    return "/src/test/" in f"/{path}"


def own_rule(path: str, content: bytes | None) -> str | None:
    """Build files and wrappers, JUnit's settings and service files, module descriptors, compiled outputs."""
    del content
    parts = PurePosixPath(path).parts
    name = parts[-1].lower()
    if name in BUILD_FILES or ".mvn" in parts or parts[:2] == ("gradle", "wrapper"):
        return (
            "a build or test-runner setting (Maven's or Gradle's: plugins, Surefire's settings, dependencies)"
        )
    if name == "junit-platform.properties" or "/META-INF/services/" in f"/{path}":
        return "a JUnit setting or Java service file (an extension, listener or engine in every test's JVM)"
    if name == "module-info.java":
        return "a module descriptor (changes how the sources compile and which services load)"
    folders = parts[:-1]
    before_src = folders[: folders.index("src")] if "src" in folders else folders
    if name.endswith(ARTEFACTS) or "target" in before_src:
        return "a compiled or binary artefact"
    return None


def failure_line(output: str, run: str) -> list[int]:
    """Lines of `run` a failure's stack names (`at tally.H1a2bTest.four(H1a2bTest.java:12)`)."""
    return [int(n) for n in re.findall(r"\(" + re.escape(PurePosixPath(run).name) + r":(\d+)\)", output)]


PREPARE = (
    f'g=$1; mkdir -p "$g/classes" "$g/none" || exit 1; java {" ".join(JVM)} -XX:ArchiveClassesAtExit="$g/junit.jsa" '
    f'{" ".join(LAUNCHER)} -cp "$g/none" --scan-classpath >/dev/null 2>&1; '
    'find src/main/java -name "*.java" > "$g/main-sources" 2>/dev/null; [ -s "$g/main-sources" ] || exit 0; '
    f'exec {" ".join(JAVAC)} -J-XX:ArchiveClassesAtExit="$g/javac.jsa" -d "$g/classes" "@$g/main-sources"'
)
"""Compiles the repository's main sources into `{grader}/classes` ($1), and keeps what the JVMs of javac
and of the launcher (on an empty class path: no code of the repository) loaded as class-data archives,
which every later build and test maps instead of loading it again (a third less CPU a JVM; a missing or
stale archive is ignored)."""
LAUNCH = (
    'p=${1#src/test/java}; p=${p#/}; c=$(printf %s "$p" | tr / .); s=$2; t=$3; shift 3; '
    'exec "$@" --select-method "${c:+$c.}$s#$t"'
)
"""Runs the launcher's argv ($4 on) on one method: `PKG.STEM#TEST`, PKG from the copy's folder ($1)."""
PASSED = (
    r"\[\s+1 tests found\s+\]\s*\n\[\s+0 tests skipped\s+\]\s*\n\[\s+1 tests started\s+\]\s*\n"
    r"\[\s+0 tests aborted\s+\]\s*\n\[\s+1 tests successful\s+\]\s*\n\[\s+0 tests failed\s+\]"
)
"""The launcher's summary of a run that found, started and passed exactly one test."""
TEST_COMMAND = (
    "sh -c 'o=/tmp/java-tests; rm -rf $o; mkdir -p $o/classes $o/test-classes"
    ' && find src/main/java -name "*.java" > $o/main && javac -proc:none -nowarn -d $o/classes @$o/main'
    ' && find src/test/java -name "*.java" > $o/test'
    " && javac -proc:none -nowarn -cp $o/classes:$0 -d $o/test-classes @$o/test"
    " && java -jar $0 --disable-banner --disable-ansi-colors --details=tree"
    " -cp $o/test-classes:$o/classes:src/test/resources:src/main/resources"
    " $(if [ $# = 0 ]; then echo --scan-classpath; fi; for a; do c=${a%%::*}; t=${a#*::}; c=${c%/};"
    ' c=${c#src/test/java}; c=${c#/}; c=$(echo ${c%.java} | tr / .); if [ -d "${a%%::*}" ];'
    ' then echo --select-package=$c; elif [ "$t" = "$a" ]; then echo --select-class=$c;'
    f" else echo --select-method=$c#$t; fi; done)' {JUNIT}"
)
"""Builds everything into /tmp/java-tests and runs every test, or the given files, folders and
`FILE::method` ids (what `run_tests` appends)."""


JAVA = ProcessLanguage(
    name="java",
    suffixes=(".java",),
    test_command=TEST_COMMAND,
    commands=Commands(
        prepare=["sh", "-c", PREPARE, "prepare", "{grader}"],
        build=[
            *JAVAC,
            "-J-XX:SharedArchiveFile={grader}/javac.jsa",
            "-implicit:class",
            "-cp",
            f"{{grader}}/classes:{JUNIT}",
            "-sourcepath",
            TESTS_ROOT,
            "-d",
            "{grader}/tests-{stem}",
            "{dir}/{stem}.java",
        ],
        test=[
            "sh",
            "-c",
            LAUNCH,
            "launch",
            "{dir}",
            "{stem}",
            "{test}",
            "java",
            *JVM,
            "-XX:SharedArchiveFile={grader}/junit.jsa",
            *LAUNCHER,
            "--fail-if-no-tests",
            "-cp",
            "{grader}/tests-{stem}:{grader}/classes:src/test/resources:src/main/resources",
        ],
        passed=PASSED,
        env={"CLASSPATH": ""},  # javac of the main sources takes no -cp
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
    helper_path=lambda run: "",
    renamed=renamed,
    style=SourceStyle(
        debug=re.compile(
            r"^\s*(System\s*\.\s*(out|err)\s*\.\s*print(ln|f)?\s*\(|[\w.]*printStackTrace\s*\()"
        ),
        comment="//",
        code=re.compile(
            r"[;{}]\s*$|^(if|for|while|return|new|import|package|public|private|static)\b.*[;({]"
        ),
    ),
)
