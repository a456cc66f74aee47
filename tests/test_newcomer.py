"""The newcomer test: the README and examples/README.md followed top to bottom, as a new user would, on a
copy of the checkout with a `.venv` of its own made by the Makefile, and every command the READMEs show
checked against the command line it names.

`make demo` and `make test` are the README's first two lines; CI runs the second itself on a fresh clone
and tests/harness/training/test_train_demo.py the first's short version, so this test makes the `.venv`
they both start with (`make setup`) and then goes on with the commands below them, in the READMEs' order,
each as written with only size settings added."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.cli import complete_parser
from tasks.suite import load_suite

ROOT = Path(__file__).resolve().parents[1]
READMES = (ROOT / "README.md", ROOT / "examples" / "README.md")
FENCED = re.compile(r"```[a-z]*\n(.*?)```", re.S)
INDENTED = re.compile(r"(?:^    \S[^\n]*\n?)+", re.M)
INLINE = re.compile(r"`(harness [^`]+)`")
FLAG = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")


def readme_commands(text: str) -> list[str]:
    """Every `harness ...` command a README shows: the lines of its code blocks (a synopsis continued on
    indented lines joined to its first) and its inline code, comments cut."""
    lines: list[str] = []
    blocks = FENCED.findall(text) + [block.replace("\n    ", "\n") for block in INDENTED.findall(text)]
    for block in blocks:
        for line in block.splitlines():
            if line.startswith(" ") and lines and line.strip().startswith("["):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.split("  #")[0].strip())
    lines += INLINE.findall(text)
    return [line for line in lines if line.startswith("harness ")]


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            found: argparse.ArgumentParser = action.choices[name]
            return found
    return None


def unknown_flags(command: str) -> tuple[list[str], list[str]]:
    """The subcommand path of `harness ...` and the flags it shows that the path's parser lacks."""
    parser, path = complete_parser(), []
    words = command.split()[1:]
    while words and (found := subcommand(parser, words[0])) is not None:
        parser, path = found, [*path, words.pop(0)]
    known = {option for action in parser._actions for option in action.option_strings}
    shown = FLAG.findall(command.split(" -- ")[0])
    return path, [flag for flag in shown if flag not in known]


def test_every_command_the_readmes_show_exists_with_every_flag_it_shows() -> None:
    checked = 0
    for readme in READMES:
        for command in readme_commands(readme.read_text()):
            path, unknown = unknown_flags(command)
            assert path, f"{readme.name}: `{command}` names no harness subcommand"
            assert not unknown, (
                f"{readme.name}: `{command}`: {unknown} are not flags of harness {' '.join(path)}"
            )
            checked += 1
    assert checked >= 30, checked


def test_the_check_catches_a_flag_or_command_that_does_not_exist() -> None:
    assert unknown_flags("harness runs RUN --sort reward --desc") == (["runs"], [])
    assert unknown_flags("harness runs RUN --sorted reward") == (["runs"], ["--sorted"])
    assert unknown_flags("harness sandbox run --dir X -- ls --color")[1] == []
    assert unknown_flags("harness rolout --suite builtin")[0] == []
    text = "```\nharness tasks list --suite builtin [--json]\n     [--jsn]\n```\nthen `harness view RUN`"
    assert readme_commands(text) == [
        "harness tasks list --suite builtin [--json] [--jsn]",
        "harness view RUN",
    ]


class Newcomer:
    """A shell in the copy: commands run there, with its own `.venv/bin` first on PATH."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {**os.environ, "PATH": f"{home / '.venv' / 'bin'}:{os.environ['PATH']}"}
        self.env.pop("VIRTUAL_ENV", None)
        self.shown = "\n".join(readme.read_text() for readme in READMES)

    def argv(self, command: str, extra: tuple[str, ...], fill: dict[str, str]) -> list[str]:
        """`command` as a README shows it (checked: it is there), its placeholders (`RUN`, `ID`) filled in
        from `fill`, and `extra` after it."""
        assert command in self.shown, f"the READMEs no longer show `{command}`"
        return [fill.get(word, word) for word in command.split()] + list(extra)

    def run(self, command: str, *extra: str, timeout: float = 600, **fill: str) -> str:
        """Runs `command` (see `argv`) in the copy; its stdout, once it exited 0."""
        proc = subprocess.run(
            self.argv(command, extra, fill), cwd=self.home, env=self.env, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
        assert proc.returncode == 0, (
            f"{command} {' '.join(extra)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
        return proc.stdout

    @contextmanager
    def serving(self, command: str, *extra: str, ready: str, **fill: str) -> Iterator[subprocess.Popen[str]]:
        """`command` (see `argv`) left running while the block runs (a server), once GET `ready` answers."""
        proc = subprocess.Popen(
            self.argv(command, extra, fill), cwd=self.home, env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while True:
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                try:
                    with urllib.request.urlopen(ready, timeout=5):
                        break
                except OSError:
                    assert time.monotonic() < deadline, f"{command} did not answer {ready}"
                    time.sleep(0.5)
            yield proc
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fresh_copy(to: Path) -> Newcomer:
    """The checkout's tracked files (as they are now) in `to`, and `make setup` there: a new `.venv`."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, to / name)
    python = shutil.which("python3.11") or sys.executable
    make = subprocess.run(
        ["make", "setup", f"PY={python}"], cwd=to, capture_output=True, text=True, timeout=1500
    )
    assert make.returncode == 0, make.stderr[-3000:]
    assert (to / ".venv" / "bin" / "harness").exists() and not (to / ".venv").is_symlink()
    return Newcomer(to)


@pytest.mark.timeout(900)
def test_a_newcomer_follows_the_readmes_on_a_fresh_venv(tmp_path: Path) -> None:
    me = fresh_copy(tmp_path)
    follow_readme(me, tmp_path)
    follow_examples(me, load_suite("builtin")[0].id)
    follow_inspection(me)
    assert "PASS: reward 1.000" in me.run("harness demo --episode")


def follow_readme(me: Newcomer, scratch: Path) -> None:
    """The README's sandboxes, tasks and grading."""
    sandboxed = json.loads(me.run("harness sandbox run", "--dir", "examples", "--", "ls"))
    assert sandboxed["exit_code"] == 0 and "train.yaml" in sandboxed["output"], sandboxed
    listed = json.loads(me.run("harness tasks list --suite builtin", "--json"))
    assert len(listed) == len(load_suite("builtin"))
    task = load_suite("builtin")[0]
    assert task.gold_patch
    (scratch / "gold.patch").write_text(task.gold_patch)
    graded = me.run(
        "harness grade --suite builtin --task ID --patch FILE", "--json", ID=task.id, FILE="gold.patch"
    )
    assert json.loads(graded)["reward"] == 1.0, graded
    me.run("harness model tiny --out runs/tiny-model")


def follow_examples(me: Newcomer, task_id: str) -> None:
    """examples/README.md's first five lines, then rollouts against `harness serve` (the README's)."""
    small = ("group_size=1", "loop.max_turns=2", "sampling.max_new_tokens=16")
    gold = me.run("harness rollout --config examples/rollout.yaml", f"tasks=[{task_id}]", "--json")
    assert json.loads(gold)["pass_at_1"] == 1.0, gold
    me.run(
        "harness rollout --config examples/rollout.yaml policy=hf:runs/tiny-model out=runs/tiny-rollout",
        f"tasks=[{task_id}]", *small,
    )  # fmt: skip
    me.run("harness sft --config examples/sft.yaml model=runs/tiny-model", "epochs=1")
    demo = load_suite("demo")[0].id
    me.run(
        "harness train --config examples/train.yaml model=runs/sft/model", "steps=1", "tasks_per_step=1",
        f"rollout.tasks=[{demo}]", "rollout.group_size=2", "rollout.sampling.max_new_tokens=16",
        "rollout.loop.max_turns=2",
    )  # fmt: skip
    assert "model: runs/sft/model" in me.run("harness train --config examples/train.yaml --print-config")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with me.serving(
        "harness serve --model PATH", "--port", str(port), ready=f"{url}/v1/models", PATH="runs/tiny-model"
    ):
        served = me.run(
            "harness rollout --suite builtin --policy scripted:gold", "--tasks", task_id, "--out", "runs/served",
            "--json", f"policy=tito:runs/tiny-model@{url}/v1", *small,
        )  # fmt: skip
    assert json.loads(served)["statuses"].get("infra_error", 0) == 0, served


def follow_inspection(me: Newcomer) -> None:
    """The README's terminal and browser inspection of the training run."""
    run = "runs/train"
    assert "reward" in me.run("harness runs RUN", RUN=run)
    first = json.loads(me.run("harness runs RUN", "--json", RUN=run))[0]
    assert "reward" in me.run("harness replay RUN", "--id", first["id"], RUN=run)
    me.run("harness export RUN --format", "jsonl", RUN=run)
    assert list((me.home / run / "export").iterdir())
    port = free_port()
    page = f"http://127.0.0.1:{port}/"
    with (
        me.serving("harness view RUN", "--port", str(port), ready=page, RUN=run),
        urllib.request.urlopen(page) as got,
    ):
        assert got.status == 200 and b"<html" in got.read().lower()
