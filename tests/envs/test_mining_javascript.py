"""`harness tasks mine --language javascript`: a mined task names the test command its repository's own
runner runs (mocha's, from package.json), not Node's `node --test`, which runs no mocha suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.languages import language_named
from envs.languages.javascript import TEST_COMMANDS
from envs.mining_programs import program_rules, provisional_task, repository_test_command
from envs.process_grading import ProcessLanguage
from tasks.mining import split_change

PATCH = """diff --git a/index.js b/index.js
--- a/index.js
+++ b/index.js
@@ -1 +1 @@
-module.exports = 1;
+module.exports = 2;
diff --git a/test/index.js b/test/index.js
--- a/test/index.js
+++ b/test/index.js
@@ -1 +1 @@
-it("is one", () => {});
+it("is two", () => {});
"""


@pytest.mark.parametrize("runner", [None, "mocha", "jest", "vitest"])
def test_a_mined_task_names_its_repositorys_runner(tmp_path: Path, runner: str | None) -> None:
    language = language_named("javascript")
    assert isinstance(language, ProcessLanguage)
    manifest = {"name": "x", "devDependencies": {runner: "1.0.0"} if runner else {}}
    (tmp_path / "package.json").write_text(json.dumps(manifest))
    change = split_change(PATCH, program_rules(language))
    task = provisional_task(
        language, tmp_path, change, {"test/index.js": 'it("is two", () => {});\n'}, ["test/index.js::is two"]
    )
    expected = TEST_COMMANDS[runner] if runner else "node --test"
    assert repository_test_command(language, task) == expected
