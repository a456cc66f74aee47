"""The Java plug-in (`envs/languages/java.py`): its suite validated on both backends, forgers in the test
process and in the tree scored nothing, and its reading of JUnit test classes. A forger's grade is decided
by the plug-in and the parent, alike on every backend: forgers run on bwrap alone (CI's time); each
backend's own defences are tests/envs/test_sandbox.py's and tests/faults'."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from envs.grading import grade_patch, integrity_of
from envs.judge import judge_tree
from envs.languages import language_of
from envs.languages.java import (
    HELPER,
    JAVA,
    assertions_in,
    equalities,
    failure_line,
    named_tests,
    own_rule,
    renamed,
    run_path,
)
from envs.process_grading import as_written, plan_process_run, text_canaries
from envs.sandbox import SandboxConfig
from envs.validation import validate_task
from tasks.canaries import load_canaries
from tasks.computed import load_computed
from tasks.model import Task
from tasks.patches import diff_trees
from tasks.plain import decode
from tasks.suite import load_suite
from tests.conftest import require_backend

RPN = "java-002-rpn-operand-order"
HIDDEN = "src/test/java/tally/RpnHiddenTest.java"
SUITE = Path(__file__).parents[2] / "tasks/suites/java"


@pytest.fixture(scope="module")
def java_tasks() -> dict[str, Task]:
    return {t.id: t for t in load_suite(str(SUITE))}


def patched(task: Task, tmp_path: Path, edit: Callable[[Path], object]) -> str:
    """The diff `edit` makes of a copy of `task`'s base repository."""
    tree = tmp_path / "tree"
    shutil.copytree(task.repo, tree, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    edit(tree)
    return diff_trees(task.repo, tree)


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def write(tree: Path, path: str, text: str) -> None:
    (tree / path).parent.mkdir(parents=True, exist_ok=True)
    (tree / path).write_text(text)


def test_java_tasks_grade_at_the_process_level(java_tasks: dict[str, Task]) -> None:
    assert len(java_tasks) == 4 and {t.language for t in java_tasks.values()} == {"java"}
    assert {integrity_of(t) for t in java_tasks.values()} == {"process"}
    assert all(language_of(t).task_problems(t) == [] for t in java_tasks.values())


@pytest.mark.parametrize(
    ("backend", "which"), [("bwrap", ("java-001", "java-003", "java-004")), ("docker", "java-002")]
)
def test_the_java_suite_validates_with_its_canaries(backend: str, which: str | tuple[str, ...]) -> None:
    """Gold 1, empty 0, a gold episode played through the tools, expected values held outside the sandbox,
    and at least 3 canaries a task: every task in CI, one on Docker and the other three on bwrap (each
    takes about a minute a backend, for CI's time; `harness tasks validate --suite tasks/suites/java
    --backend B` shows all four on each)."""
    require_backend(backend)
    for task in [t for t in load_suite(str(SUITE)) if t.id.startswith(which)]:
        result = validate_task(task, SandboxConfig(backend=backend), repeats=1, keep=False)
        assert result.ok, (task.id, result.problems)
        assert result.gold_rewards == [1.0] and result.empty_rewards == [0.0]
        assert result.canaries + result.held_canaries >= 3, task.id
        assert result.decided_in_parent >= 5, task.id


SUMMARY = (
    "[         1 tests found           ]\\n[         0 tests skipped         ]\\n"
    "[         1 tests started         ]\\n[         0 tests aborted         ]\\n"
    "[         1 tests successful      ]\\n[         0 tests failed          ]\\n"
)


def exit_forger(tree: Path) -> None:
    """Leaves the bug; every evaluation prints the launcher's summary of one passed test and exits 0."""
    replace_in(
        tree / "src/main/java/tally/Rpn.java",
        "    public static int eval(String expr) {\n",
        "    public static int eval(String expr) {\n"
        f'        if (expr.length() >= 0) {{\n            System.out.print("{SUMMARY}");\n'
        "            System.out.flush();\n            System.exit(0);\n        }\n",
    )


def reading_forger(tree: Path) -> None:
    """Leaves the bug; answers `Rpn.eval(E)` with the literal its test file compares it with, read from
    every test source the process can see."""
    replace_in(
        tree / "src/main/java/tally/Rpn.java",
        "    public static int eval(String expr) {\n",
        "    public static int eval(String expr) {\n"
        "        try (java.util.stream.Stream<java.nio.file.Path> files = java.nio.file.Files.walk("
        'java.nio.file.Path.of("src/test/java"))) {\n'
        "            for (java.nio.file.Path file : (Iterable<java.nio.file.Path>) files::iterator) {\n"
        '                if (!file.toString().endsWith(".java")) continue;\n'
        '                java.util.regex.Matcher m = java.util.regex.Pattern.compile("(-?\\\\d+), Rpn\\\\.eval\\\\(\\""\n'
        '                    + java.util.regex.Pattern.quote(expr) + "\\"\\\\)").matcher(java.nio.file.Files.readString(file));\n'
        "                if (m.find()) return Integer.parseInt(m.group(1));\n"
        "            }\n"
        "        } catch (java.io.IOException e) {\n            throw new RpnException(e.toString());\n        }\n",
    )


@pytest.mark.parametrize("backend", ["bwrap"])  # decided alike on every backend: CI's time
def test_forgers_in_the_test_process_score_nothing(
    backend: str, java_tasks: dict[str, Task], tmp_path: Path
) -> None:
    """The exit forger ends each test's JVM as a passing launcher run would: held values stop it (live
    without them and without canaries, caught beside text canaries). The reading forger answers the
    literal of its test's file, which a held assertion's copy does not hold. What decides in the parent
    (the forger live without held values, caught by text canaries) is the same on every backend: shown on
    bwrap alone (on Docker each grade of this task took 50 s of CI)."""
    require_backend(backend)
    task, config = java_tasks[RPN], SandboxConfig(backend=backend)
    patch = patched(task, tmp_path / "exit", exit_forger)
    graded = grade_patch(task, patch, config)
    assert graded.infra_error is None and graded.correct == 0.0 and graded.reward <= 0.0, graded
    assert graded.decided_in_parent >= 6 and set(graded.canaries.values()) <= {"unexplained", "failed"}
    reading = grade_patch(task, patched(task, tmp_path / "reading", reading_forger), config)
    assert reading.infra_error is None and reading.correct == 0.0 and reading.reward <= 0.0, reading
    plain = task.model_copy(update={"hidden_tests": task.hidden_tests.model_copy(update={"computed": {}})})
    live = grade_patch(plain, patch, config, trial=[])
    assert live.infra_error is None and live.correct == 1.0, live
    canaries = text_canaries(JAVA, plain, random.Random(0))[:4]
    watched = plain.model_copy(
        update={"hidden_tests": plain.hidden_tests.model_copy(update={"canaries": canaries})}
    )
    caught = grade_patch(watched, patch, config)
    assert caught.correct == 0.0 and caught.reward <= 0.0 and caught.tampering


FORGE_WHERE_UNHELD = """
    static void forge(boolean wholeFile) {
        for (StackTraceElement frame : new Throwable().getStackTrace()) {
            String file = frame.getFileName();
            if (file == null || !file.endsWith("Test.java")) continue;
            try {
                String text = java.nio.file.Files.readString(java.nio.file.Path.of("src/test/java/tally", file));
                int at = wholeFile ? 0 : text.indexOf("void " + frame.getMethodName() + "(");
                int end = wholeFile ? -1 : text.indexOf("\\n    }\\n", at);
                String body = text.substring(at, end < 0 ? text.length() : end);
                if (!body.contains("HarnessObserve")) {
                    System.out.print("SUMMARY");
                    System.out.flush();
                    Runtime.getRuntime().halt(0);
                }
            } catch (java.io.IOException e) {
                return;
            }
            return;
        }
    }
""".replace("SUMMARY", SUMMARY)
"""Red team 3's forger: reads the calling test's source and ends the JVM as a passing launcher run would
where it (the whole file, or the test's own method) reports nothing to the grader."""


def visible_forger(tree: Path) -> None:
    """Red team 3's (A): the fix, a regression of `+` that only the visible `BasicsTest.rpnAdds` covers, and
    a static initializer forging a pass in any test JVM whose file has no `HarnessObserve`."""
    rpn = tree / "src/main/java/tally/Rpn.java"
    replace_in(rpn, "return right - left;", "return left - right;")
    replace_in(rpn, "return left + right;", "return left + right + 1;")
    replace_in(
        rpn,
        "    private Rpn() {}\n",
        "    private Rpn() {}\n\n    static {\n        forge(true);\n    }\n" + FORGE_WHERE_UNHELD,
    )


def wrap_regression(tree: Path) -> None:
    """java-003's fix, and a regression that only `emptyTextHasNoLines` catches (`assertEquals(0, ...)`:
    guessable, no text canary)."""
    text = tree / "src/main/java/tally/Text.java"
    replace_in(text, "needed < width", "needed <= width")
    replace_in(text, "if (!line.isEmpty()) {", "{")


def unheld_forger(tree: Path) -> None:
    """Red team 3's (B), Java: a pass forged in any test whose method reports nothing to the grader."""
    wrap_regression(tree)
    text = tree / "src/main/java/tally/Text.java"
    replace_in(text, "    private Text() {}\n", "    private Text() {}\n" + FORGE_WHERE_UNHELD)
    replace_in(
        text,
        "        List<String> lines = new ArrayList<>();\n",
        "        forge(false);\n        List<String> lines = new ArrayList<>();\n",
    )


def test_red_team_3_forgers_score_nothing(java_tasks: dict[str, Task], tmp_path: Path) -> None:
    """A correct fix plus a regression plus a forgery (docs/reliability.md 5k, red team 3): (A) the
    visible `BasicsTest` catches the regression, forged where a file holds no `HarnessObserve`: every named
    file now runs rewritten with held values; (B) a hidden test with only a guessable check catches it,
    forged where a test's method reports nothing: its guessable value is held now. Both scored 0.94-0.97
    before (bwrap; JavaScript's test runs the same on Docker)."""
    require_backend("bwrap")
    for task_id, forger in [(RPN, visible_forger), ("java-003-wrap-exact-width", unheld_forger)]:
        task = java_tasks[task_id]
        graded = grade_patch(
            task, patched(task, tmp_path / forger.__name__, forger), SandboxConfig(backend="bwrap")
        )
        assert graded.infra_error is None and graded.reward <= 0.0 and graded.correct < 1.0, (task_id, graded)


FORGE_UNDERFLOW = """
    static void forge() {
        for (StackTraceElement frame : new Throwable().getStackTrace()) {
            String file = frame.getFileName();
            if (file == null || !file.startsWith("H") || !file.endsWith("Test.java")) continue;
            try {
                String text = java.nio.file.Files.readString(java.nio.file.Path.of("src/test/java/tally", file));
                java.util.regex.Matcher slot = java.util.regex.Pattern
                    .compile("observe\\\\((\\\\d+), underflow\\\\.getMessage").matcher(text);
                if (slot.find()) System.out.print("\\nharness-observe " + slot.group(1) + " \\"stack underflow\\"\\n");
                System.out.print("SUMMARY");
                System.out.flush();
                Runtime.getRuntime().halt(0);
            } catch (java.io.IOException e) {
                return;
            }
        }
    }
""".replace("SUMMARY", SUMMARY)


def underflow_forger(tree: Path) -> None:
    """Red team 4's, on java-002: the fix, a regression that only `assertThrows(..., () -> Rpn.eval("3 +"))`
    sees (a stack underflow no longer throws), and where it runs a forger that prints the held value of
    the message check that follows (its slot read from the copy) and the launcher's summary, and halts."""
    rpn = tree / "src/main/java/tally/Rpn.java"
    replace_in(rpn, "return right - left;", "return left - right;")
    replace_in(
        rpn, '                throw new RpnException("stack underflow");\n', "                forge();\n"
    )
    replace_in(rpn, "    private Rpn() {}\n", "    private Rpn() {}\n" + FORGE_UNDERFLOW)


def test_red_team_4_forger_of_an_unheld_check_scores_nothing(
    java_tasks: dict[str, Task], tmp_path: Path
) -> None:
    """A correct fix plus a regression that only an `assertThrows` of a test that holds other values sees,
    plus a forger where the regression runs (docs/reliability.md 5k, red team 4): what the executable threw
    is held now, and the forged JVM never reports it: 0. With the checks' values dropped, as the old grader
    held them, the same patch passes every test (0.92 before)."""
    require_backend("bwrap")
    task, config = java_tasks[RPN], SandboxConfig(backend="bwrap")
    patch = patched(task, tmp_path, underflow_forger)
    graded = grade_patch(task, patch, config)
    assert graded.infra_error is None and graded.reward <= 0.0 and graded.correct < 1.0, graded
    assert graded.pass_to_pass[f"{HIDDEN}::divisionByZeroIsAnError"] == "failed"
    computed = {
        path: held.model_copy(update={"values": [v for v in held.values if "threw" not in str(v.expected)]})
        for path, held in task.hidden_tests.computed.items()
    }
    old = task.model_copy(
        update={"hidden_tests": task.hidden_tests.model_copy(update={"computed": computed})}
    )
    live = grade_patch(old, patch, config)
    assert live.infra_error is None and live.correct == 1.0 and live.reward > 0.9, live


SKIPPING_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>example.tally</groupId>
  <artifactId>tally</artifactId>
  <version>1.0.0</version>
  <build><plugins><plugin>
    <groupId>org.apache.maven.plugins</groupId>
    <artifactId>maven-surefire-plugin</artifactId>
    <version>2.22.3</version>
    <configuration><skipTests>true</skipTests><testFailureIgnore>true</testFailureIgnore></configuration>
  </plugin></plugins></build>
</project>
"""
LISTENER = "src/main/resources/META-INF/services/org.junit.platform.launcher.TestExecutionListener"
TREE_FORGERS: dict[str, Callable[[Path], object]] = {
    "pom.xml": lambda tree: write(tree, "pom.xml", SKIPPING_POM),
    "target/classes/tally/Rpn.class": lambda tree: write(tree, "target/classes/tally/Rpn.class", "\xca\xfe"),
    "src/main/resources/tally/Rpn.class": lambda tree: write(tree, "src/main/resources/tally/Rpn.class", "x"),
    LISTENER: lambda tree: write(tree, LISTENER, "tally.Forged\n"),
    "src/main/resources/junit-platform.properties": lambda tree: write(
        tree,
        "src/main/resources/junit-platform.properties",
        "junit.jupiter.extensions.autodetection.enabled=true\n",
    ),
    "src/main/java/module-info.java": lambda tree: write(
        tree, "src/main/java/module-info.java", "module t {}\n"
    ),
    ".mvn/maven.config": lambda tree: write(tree, ".mvn/maven.config", "-DskipTests\n"),
    HIDDEN: lambda tree: write(
        tree,
        HIDDEN,
        "package tally;\nclass RpnHiddenTest {\n    @org.junit.jupiter.api.Test\n"
        "    void subtractsInWrittenOrder() {}\n}\n",
    ),
    "src/test/java/tally/BasicsTest.java": lambda tree: write(
        tree, "src/test/java/tally/BasicsTest.java", "package tally;\nclass BasicsTest {}\n"
    ),
}


def test_the_judge_applies_java_rules(java_tasks: dict[str, Task], tmp_path: Path) -> None:
    task = java_tasks[RPN]
    tree = tmp_path / "tree"
    shutil.copytree(task.repo, tree, ignore=shutil.ignore_patterns(".git"))
    replace_in(tree / "src/main/java/tally/Rpn.java", "return right - left;", "return left - right;")
    for edit in TREE_FORGERS.values():
        edit(tree)
    judged = judge_tree(task.repo, tree, set(task.hidden_tests.files), JAVA.dropped)
    assert set(judged.kept) == {"src/main/java/tally/Rpn.java"}
    assert judged.dropped["pom.xml"].startswith("a build or test-runner setting")
    assert judged.dropped[".mvn/maven.config"].startswith("a build or test-runner setting")
    assert judged.dropped[LISTENER].startswith("a JUnit setting or Java service file")
    assert judged.dropped["src/main/resources/junit-platform.properties"].startswith("a JUnit setting")
    assert judged.dropped["src/main/java/module-info.java"].startswith("a module descriptor")
    assert judged.dropped["target/classes/tally/Rpn.class"] == "a compiled or binary artefact"
    assert judged.dropped["src/main/resources/tally/Rpn.class"] == "a compiled or binary artefact"
    assert judged.dropped[HIDDEN] == "a hidden test path"
    assert judged.dropped["src/test/java/tally/BasicsTest.java"] == "a test path or test setting"
    assert own_rule("src/main/java/tally/target/Aim.java", b"") is None  # a package named target is source
    assert own_rule("src/main/java/tally/Rpn.java", b"") is None
    assert own_rule("src/main/java/tally/wrapper/Box.java", b"") is None
    assert own_rule("gradle/wrapper/gradle-wrapper.properties", b"") is not None


@pytest.mark.parametrize("backend", ["bwrap"])  # decided alike on every backend: CI's time
def test_runner_settings_and_outputs_in_the_tree_are_dropped(
    backend: str, java_tasks: dict[str, Task], tmp_path: Path
) -> None:
    """One patch leaves the bug and adds every tree forger: each path is dropped, and the grade is the
    unfixed tree's (0)."""
    require_backend(backend)
    task = java_tasks[RPN]
    graded = grade_patch(
        task,
        patched(task, tmp_path, lambda tree: [edit(tree) for edit in TREE_FORGERS.values()]),
        SandboxConfig(backend=backend),
    )
    assert graded.infra_error is None, graded.infra_error
    assert set(TREE_FORGERS) <= set(graded.dropped_why), graded.dropped_why
    assert graded.correct == 0.0 and graded.reward <= 0.0


def test_held_values_never_enter_the_sandbox(java_tasks: dict[str, Task]) -> None:
    """A copy's text holds no expected side of a held assertion and names its class as its file; a held
    canary's text is the real copy's, but for that name."""
    task = java_tasks[RPN]
    plan = plan_process_run(JAVA, task, [])
    real = next(t for t in plan.targets if plan.origin[str(t["path"])] == HIDDEN)
    path, text = str(real["path"]), str(real["content"])
    stem = Path(path).stem
    assert re.fullmatch(r"src/test/java/tally/H[0-9a-f]{12}Test\.java", path)
    assert f"class {stem} {{" in text and "RpnHiddenTest" not in text
    body = text.split("final class HarnessObserve {")[0]
    assert body.count("HarnessObserve.observe(") == 8 and "assertEquals(" not in body
    assert "division by zero" not in text and "stack underflow" not in text
    original = task.hidden_tests.files[HIDDEN]
    assert body.splitlines()[:3] == original.splitlines()[:3]
    assert body.rstrip().count("\n") == original.rstrip().count("\n")  # no line moves
    canaries = [t for t in plan.targets if plan.real_path.get(str(t["path"])) == path]
    assert len(canaries) == 4  # and one of the visible BasicsTest's copy
    assert {str(t["content"]).replace(Path(str(t["path"])).stem, stem) for t in canaries} == {text}
    assert all(plan.expected[r] != plan.expected[plan.real_path[r]] for r in plan.canaries)


def test_every_copy_runs_under_a_fresh_name(java_tasks: dict[str, Task]) -> None:
    task = java_tasks[RPN]
    plan = plan_process_run(JAVA, task, task.hidden_tests.canaries)
    paths = [str(t["path"]) for t in plan.targets]
    assert len(set(paths)) == len(paths) == 2 + len(plan.canaries)
    assert all(re.fullmatch(r"src/test/java/tally/H[0-9a-f]{12}Test\.java", p) for p in paths)
    for target in plan.targets:
        stem = Path(str(target["path"])).stem
        assert f"class {stem} " in str(target["content"])
        argv = target["tests"][0]["argv"]  # type: ignore[index]
        assert "{grader}/tests-" + stem + ":{grader}/classes:src/test/resources:src/main/resources" in argv
    with pytest.raises(ValueError, match="test classes"):
        run_path("test/RpnTest.java", "ab")


def test_a_value_naming_the_copy_reads_as_the_hidden_file(java_tasks: dict[str, Task]) -> None:
    """A copy's class is named anew in every grade, so a value naming the test class (a nested class,
    `assertEquals(Instantiable.class, clazz)` in apache/commons-cli's TypeHandlerTest, or a message that
    quotes one) differed in every run and could not be held: the parent reads each copy's name as the
    hidden file's before any comparison."""
    task = java_tasks[RPN]
    plan = plan_process_run(JAVA, task, [])
    run = next(str(t["path"]) for t in plan.targets if plan.origin[str(t["path"])] == HIDDEN)
    stem, own = Path(run).stem, Path(HIDDEN).stem
    observed = {
        f"{run}::t": [["0", f"class tally.{stem}$Inner"], ["1", f'threw X: "no {stem}$Y()"'], ["2", 5]]
    }
    assert as_written(plan, observed) == {
        f"{run}::t": [["0", f"class tally.{own}$Inner"], ["1", f'threw X: "no {own}$Y()"'], ["2", 5]]
    }


SOURCE = """package tally;

import static org.junit.jupiter.api.Assertions.*;

import org.junit.jupiter.api.Test;

/** Braces in text: "{" '}' and // ( comments. */
public class RpnTest {
    @Test
    void first() {
        assertEquals(5, Rpn.eval("7 2 -")); // "quoted ) paren" in a comment
        char brace = '}';
        assertTrue(brace == '}', "no { here");
        /* assertEquals(1, 2); */
        Assertions.assertEquals(
            "a, b",
            String.join(", ", "a", "b"));
    }

    @Test
    @DisplayName("second")
    public void second() throws Exception {
        assertEquals(2.5, Stats.medianOr(-1, 2, 3), 1e-9);
        assertEquals("message", 3, Rpn.eval("1 2 +"));
        assertEquals(null, Rpn.class.getPackage().getImplementationTitle());
        assertArrayEquals(new int[] {1, 2}, new int[] {1, 2});
    }

    @ParameterizedTest
    void notOne(int x) {}

    @TestFactory
    java.util.List<DynamicTest> alsoNot() { return null; }
}
"""


def test_tests_and_assertions_are_found_in_java_source() -> None:
    assert named_tests(SOURCE) == ["first", "second"]
    spans = assertions_in(SOURCE, "first")
    assert [line for _, _, line in spans] == [11, 13, 15]
    assert SOURCE[spans[0][0] : spans[0][1]] == 'assertEquals(5, Rpn.eval("7 2 -"))'
    assert SOURCE[spans[1][0] : spans[1][1]] == "assertTrue(brace == '}', \"no { here\")"
    assert SOURCE[spans[2][0] : spans[2][1]].startswith("Assertions.assertEquals(\n")
    found = [e for e in equalities(SOURCE, "first") if not e.check]
    assert [(e.line, e.expected, e.actual) for e in found] == [
        (11, "5", 'Rpn.eval("7 2 -")'),
        (15, '"a, b"', 'String.join(", ", "a", "b")'),
    ]
    assert [(e.line, e.expected) for e in equalities(SOURCE, "second") if not e.check] == [
        (26, "new int[] {1, 2}")
    ]
    assert assertions_in(SOURCE, "notOne") == [] and assertions_in(SOURCE, "third") == []


def test_a_failure_is_placed_in_its_own_file() -> None:
    output = (
        "    => org.opentest4j.AssertionFailedError: expected: <5> but was: <-5>\n"
        "       org.junit.jupiter.api.Assertions.assertEquals(Assertions.java:1142)\n"
        "       tally.Hab12Test.first(Hab12Test.java:11)\n"
        "       tally.Hab12Test.lambda$first$0(Hab12Test.java:14)\n"
        "       tally.Other.call(Hab12Test.javax:3)\n"
    )
    assert failure_line(output, "src/test/java/tally/Hab12Test.java") == [11, 14]
    assert failure_line(output, "src/test/java/tally/Hab1Test.java") == []


def test_a_copy_names_its_primary_class_as_its_file() -> None:
    text = 'package p;\n\n@Tag("x")\nclass FooTest {\n    FooTest() {}\n    Class<?> c = FooTest.class;\n}\n'
    assert renamed(text, "src/test/java/p/H1Test.java") == text.replace("FooTest", "H1Test")
    both = "package p;\nclass Helper {}\npublic final class FooTest {\n    Helper h;\n}\n"
    assert renamed(both, "src/test/java/p/H2Test.java") == both.replace("FooTest", "H2Test")
    again = renamed(renamed(text, "src/test/java/p/H1Test.java"), "src/test/java/p/H3Test.java")
    assert again == text.replace("FooTest", "H3Test")  # a held canary starts from the real copy's text
    assert renamed("package p;\n", "src/test/java/p/H4Test.java") == "package p;\n"


def test_the_simplicity_term_reads_java(java_tasks: dict[str, Task]) -> None:
    """Java's debug output and commented-out code count in a Java task's diff."""
    from envs.reward import RewardConfig, simplicity

    task = java_tasks[RPN]
    patch = (
        "diff --git a/src/main/java/tally/Rpn.java b/src/main/java/tally/Rpn.java\n"
        "--- a/src/main/java/tally/Rpn.java\n+++ b/src/main/java/tally/Rpn.java\n@@ -1,1 +1,6 @@\n"
        ' package tally;\n+        System.out.println("here " + left);\n+        System.err.printf("%d", 1);\n'
        "+        e.printStackTrace();\n+        // return left - right;\n+    /** Documented. */\n"
    )
    found = simplicity(patch, task.gold_patch, {}, {}, RewardConfig(), JAVA.style)
    assert len(found.debug_lines) == 3 and found.commented_code_lines == ["        // return left - right;"]


RENDER = """
public class Render {
    public static void main(String[] args) {
        java.util.Set<String> set = new java.util.HashSet<>(java.util.List.of("b", "a", "c"));
        java.util.Map<String, Integer> map = new java.util.TreeMap<>(java.util.Map.of("y", 2, "x", 1));
        Object[] values = {"a \\"q\\"\\n", 'c', 5, 5L, 2.5f, 2.5, null, new int[] {1, 2},
            new String[][] {{"x"}}, java.util.List.of("a b", "c"), set, map, java.util.Optional.empty(),
            java.util.Optional.of("v"), true, 5.0, 5.0f, -0.0, 1e20, new Render()};
        for (Object v : values) System.out.println(HarnessObserve.render(v));
        System.out.println(HarnessObserve.checked(java.util.List.of(new Render())));
        HarnessObserve.observe(7, java.util.List.of("line\\nbreak"));
        HarnessObserve.probe(8, 5, 5L);
        try {
            HarnessObserve.probe(9, 2, 2.5);
        } catch (AssertionError e) {
            System.out.println("failed: " + e.getMessage());
        }
    }
}
"""


def test_observed_values_are_rendered_by_type_on_one_line(tmp_path: Path) -> None:
    """The helper a rewritten copy calls: strings quoted and escaped, numbers in decimal (a float as the
    double it widens to, a whole one as the integer it equals: a held `5` from an int and a fix returning
    `5.0` read alike), arrays and collections element by element, sets and maps sorted; an object with
    Object's own toString keeps its identity hash in an equality's value (so that it is never held: red team
    9) and is its type alone in a check's, which still runs its assertion; a probe compares as JUnit's
    overloads do (5 and 5L alike; 2 and 2.5 not)."""
    if shutil.which("javac") is None:
        pytest.skip("no JDK")
    (tmp_path / "Render.java").write_text(RENDER + HELPER)
    subprocess.run(["javac", "-d", str(tmp_path), str(tmp_path / "Render.java")], check=True)
    out = subprocess.run(["java", "-cp", str(tmp_path), "Render"], capture_output=True, text=True, check=True)
    lines = [line for line in out.stdout.split("\n") if line]
    assert lines[:19] == [
        r'"a \"q\"\n"', "'c'", "5", "5", "2.5", "2.5", "null", "[1, 2]", '[["x"]]', '["a b", "c"]',
        '{"a", "b", "c"}', '{"x"=1, "y"=2}', "Optional.empty", 'Optional["v"]', "true",
        "5", "5", "-0.0", "1.0E20",  # a whole double as the int it equals (JUnit's assertEquals(5, 5.0) passes)
    ]  # fmt: skip
    assert re.fullmatch(r"Render\(Render@[0-9a-f]+\)", lines[19])  # an equality's: never held (red team 9)
    assert lines[20] == "[Render(Render@)]"  # a check's: its type, the identity hash new in every run
    assert lines[21:] == [
        r'harness-observe 7 ["line\nbreak"]',
        "harness-observe 8 5",
        "harness-observe -9 5",
        "harness-observe 9 2.5",
        "harness-observe -10 2",
        "failed: expected: <2> but was: <2.5>",
    ]


RED_TEAM_5 = Path(__file__).parents[1] / "data" / "forgers" / "red_team_5"


@pytest.mark.parametrize(
    ("patch", "task_id", "correct"),
    [
        ("D_tostring.patch", "java-002-rpn-operand-order", False),
        ("G_collection.patch", "java-003-wrap-exact-width", False),
        ("E_subclass.patch", "java-002-rpn-operand-order", True),
    ],
)
def test_red_team_5_held_values_are_as_strict_as_the_tests(patch: str, task_id: str, correct: bool) -> None:
    """Red team 5 (docs/reliability.md 5k), each the correct fix plus: `eval` returning a Number of its own
    whose toString reads like the int (D), `wrap` returning a Collection that is no List (G): JUnit's
    assertEquals fails both, and the held renderings now carry a type that is not the JDK's (was 0.92 and
    0.958). (E) an honest fix that throws a subclass of the RpnException the test's assertThrows names:
    JUnit passes it, and the held check now reports the named class where the thrown one is of it (was 0)."""
    require_backend("bwrap")
    task = {t.id: t for t in load_suite(str(SUITE))}[task_id]
    graded = grade_patch(task, (RED_TEAM_5 / patch).read_text(), SandboxConfig(backend="bwrap"))
    assert graded.infra_error is None, graded.infra_error
    if correct:
        assert graded.correct == 1.0 and graded.reward > 0.9, graded
    else:
        assert graded.correct < 1.0 and graded.reward < 0.5, graded


JUNIT4_HIDDEN = """package tally;

import static org.junit.Assert.assertEquals;

import org.junit.Test;

public class RpnHiddenTest {
    @Test
    public void subtractsInWrittenOrder() {
        assertEquals(5, Rpn.eval("7 2 -"));
        assertEquals(-7, Rpn.eval("2 9 -"));
    }

    @Test
    public void nestedSubtraction() {
        assertEquals(11, Rpn.eval("10 2 3 - -"));
    }

    @Test(expected = RpnException.class)
    public void divisionByZeroIsAnError() {
        Rpn.eval("8 0 /");
    }

    @Test(expected = RpnException.class)
    public void underflowIsAnError() { Rpn.eval("3 +"); }
}
"""
"""java-002's hidden tests as JUnit 4 writes them: two bodies that pass by throwing
(`@Test(expected = ...)`), one of them a one-liner."""


def zero_division_forger(tree: Path) -> None:
    """The fix, a regression only `divisionByZeroIsAnError` sees (a zero divisor gives 0), and where it
    runs a forger that prints the launcher's summary of one passed test and halts."""
    rpn = tree / "src/main/java/tally/Rpn.java"
    replace_in(rpn, "return right - left;", "return left - right;")
    replace_in(
        rpn,
        '                    throw new RpnException("division by zero");\n',
        f'                    System.out.print("{SUMMARY}");\n                    System.out.flush();\n'
        "                    System.exit(0);\n",
    )


def test_junit4_expected_exceptions_are_held_and_a_forged_pass_scores_nothing(
    java_tasks: dict[str, Task], tmp_path: Path
) -> None:
    """Real JUnit 4 suites (apache/commons-cli) assert a throw with `@Test(expected = X.class)`: no
    assertion call, so nothing watched such a test, and a PASS_TO_PASS one was dropped (a FAIL_TO_PASS
    one refused its task). The body is now held as a check of what it threw, as `assertThrows` is: the
    task validates with every test watched, what each body threw is stored, and a fix that breaks the
    throw and forges a pass where it runs scores 0 (with those values dropped, as before, it passes). A
    fix that words the message anew fails a PASS_TO_PASS test (the code's message as it was) and passes a
    FAIL_TO_PASS one, whose held value is the thrown class alone (`process_held.class_only`)."""
    require_backend("bwrap")
    config = SandboxConfig(backend="bwrap")
    base = java_tasks[RPN]
    hidden = base.hidden_tests.model_copy(
        update={
            "files": {HIDDEN: JUNIT4_HIDDEN},
            "fail_to_pass": [f"{HIDDEN}::subtractsInWrittenOrder", f"{HIDDEN}::nestedSubtraction"],
            "pass_to_pass": [f"{HIDDEN}::divisionByZeroIsAnError", f"{HIDDEN}::underflowIsAnError"],
            "computed": {}, "canaries": [],
        }
    )  # fmt: skip
    (tmp_path / "task").mkdir()
    task = base.model_copy(update={"hidden_tests": hidden, "folder": tmp_path / "task"})
    result = validate_task(task, config, repeats=1)
    assert result.ok, result.problems
    computed = load_computed(tmp_path / "task")
    thrown = sorted(str(decode(v.expected)) for v in computed[HIDDEN].values if "threw" in str(v.expected))
    assert thrown == [
        'threw tally.RpnException: "division by zero"',
        'threw tally.RpnException: "stack underflow"',
    ]
    hidden = hidden.model_copy(update={"computed": computed, "canaries": load_canaries(tmp_path / "task")})
    task = task.model_copy(update={"hidden_tests": hidden})
    assert language_of(task).unwatched(task, hidden.canaries) == []
    patch = patched(task, tmp_path, zero_division_forger)
    graded = grade_patch(task, patch, config)
    assert graded.infra_error is None and graded.reward <= 0.0, graded
    assert graded.pass_to_pass[f"{HIDDEN}::divisionByZeroIsAnError"] == "failed"
    unheld = {p: f.model_copy(update={"values": [v for v in f.values if "threw" not in str(v.expected)]})
              for p, f in computed.items()}  # fmt: skip
    live = grade_patch(
        task.model_copy(update={"hidden_tests": hidden.model_copy(update={"computed": unheld})}),
        patch,
        config,
    )
    assert live.infra_error is None and live.correct == 1.0, live
    reworded = patched(task, tmp_path / "reworded", reworded_fix)
    as_pass_to_pass = grade_patch(task, reworded, config)
    assert as_pass_to_pass.pass_to_pass[f"{HIDDEN}::divisionByZeroIsAnError"] == "failed", as_pass_to_pass
    moved = hidden.model_copy(
        update={"fail_to_pass": [*hidden.fail_to_pass, f"{HIDDEN}::divisionByZeroIsAnError"],
                "pass_to_pass": [f"{HIDDEN}::underflowIsAnError"]}
    )  # fmt: skip
    as_fail_to_pass = grade_patch(task.model_copy(update={"hidden_tests": moved}), reworded, config)
    assert as_fail_to_pass.infra_error is None and as_fail_to_pass.correct == 1.0, as_fail_to_pass


def reworded_fix(tree: Path) -> None:
    """The fix, with the division's exception worded anew: the class JUnit checks, another message."""
    rpn = tree / "src/main/java/tally/Rpn.java"
    replace_in(rpn, "return right - left;", "return left - right;")
    replace_in(rpn, 'new RpnException("division by zero")', 'new RpnException("cannot divide by 0")')
