"""`harness demo`: the most complete end-to-end job so far.

A small repository with a real bug goes into a fresh sandbox; a scripted agent explores it, runs the
failing tests, fixes the bug with the edit tool, runs the tests again and submits, all through the
same tools a model uses. Every step prints what the model would see.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel

from envs.factory import resolve_backend, start_sandbox
from envs.sandbox import SandboxConfig
from tools import Toolbox, ToolsConfig

DEMO_FILES = {
    "textstats/__init__.py": "from textstats.core import longest_word, word_count\n",
    "textstats/core.py": (
        '"""Small text statistics."""\n\n\n'
        "def words(text):\n"
        "    return [w.strip('.,;:!?') for w in text.split() if w.strip('.,;:!?')]\n\n\n"
        "def word_count(text):\n"
        "    return len(words(text))\n\n\n"
        "def longest_word(text):\n"
        '    """The longest word; the first one on ties; None for empty text."""\n'
        "    best = None\n"
        "    for w in words(text)[1:]:\n"
        "        if best is None or len(w) > len(best):\n"
        "            best = w\n"
        "    return best\n"
    ),
    "tests/test_core.py": (
        "from textstats import longest_word, word_count\n\n\n"
        "def test_word_count():\n"
        '    assert word_count("a b, c.") == 3\n\n\n'
        "def test_longest_word():\n"
        '    assert longest_word("Extraordinary claims need evidence") == "Extraordinary"\n\n\n'
        "def test_longest_word_empty():\n"
        '    assert longest_word("") is None\n'
    ),
}

SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("list_dir", {"path": "."}),
    ("run_tests", {}),
    ("search", {"pattern": "def longest_word"}),
    ("read_file", {"path": "textstats/core.py", "start_line": 12, "end_line": 18}),
    ("edit", {"path": "textstats/core.py", "old_str": "words(text)[1:]", "new_str": "words(text)"}),
    ("run_tests", {}),
    ("bash", {"command": "git diff"}),
    ("submit", {}),
]


def make_repo(root: Path) -> Path:
    repo = root / "textstats"
    for name, text in DEMO_FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git = ["git", "-c", "user.name=demo", "-c", "user.email=demo@localhost", "-c", "core.hooksPath=/dev/null"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "base"], check=True)
    return repo


def run_demo(backend: str = "auto") -> int:
    console = Console()
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    toolbox = Toolbox(ToolsConfig())
    with tempfile.TemporaryDirectory(prefix="harness-demo-") as tmp:
        repo = make_repo(Path(tmp))
        started = time.perf_counter()
        sandbox = start_sandbox(config, repo)
        console.print(
            f"[bold]sandbox[/] {sandbox.id} on [bold]{resolve_backend(backend)}[/] "
            f"started in {time.perf_counter() - started:.2f}s (no network, no capabilities)"
        )
        try:
            submitted = False
            passed_before = passed_after = None
            for turn, (name, args) in enumerate(SCRIPT, 1):
                started = time.perf_counter()
                obs = toolbox.call(sandbox, name, args)
                took = (time.perf_counter() - started) * 1000
                style = "red" if obs.is_error else "green"
                console.print(
                    Panel(
                        obs.text.rstrip() or "(empty)",
                        title=f"turn {turn}: {name} {args}",
                        subtitle=f"{took:.0f} ms",
                        border_style=style,
                    )
                )
                if name == "run_tests":
                    passed = "failed" not in obs.text and not obs.is_error
                    if passed_before is None:
                        passed_before = passed
                    else:
                        passed_after = passed
                submitted = submitted or obs.submitted
        finally:
            sandbox.close()
    ok = submitted and passed_before is False and passed_after is True
    verdict = "fixed the bug and submitted" if ok else "did not fix the bug"
    console.print(f"[bold]{'PASS' if ok else 'FAIL'}[/]: the scripted agent {verdict}.")
    return 0 if ok else 1
