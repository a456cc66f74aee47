"""The settings commands' flags are made from their models: a new setting is a flag, its docstring the
help, with no command-line edit; what the flags give reaches the settings as the overrides would."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from harness.cli import build_parser
from harness.commands.settings import CommandParser, add_settings, given_settings, resolved
from harness.config import ConfigError


class InnerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: str = "auto"
    """Where the episodes run."""
    limits: dict[str, int] = Field(default_factory=dict)
    """Limits by name."""


class ThrowawayConfig(BaseModel):
    """A settings model no command uses: what a new one, or a new setting, gets without a CLI edit."""

    model_config = ConfigDict(extra="forbid")

    warmup_steps: int = 0
    """Steps at 100% of the learning rate's ramp."""
    rate: float | None = None
    """How fast, in steps a second."""
    name: str = "run"
    """The run's name."""
    folder: Path = Path("runs")
    """Where it is written."""
    kind: Literal["sync", "async"] = "sync"
    """How it runs."""
    tags: list[str] = Field(default_factory=list)
    """Labels of the run."""
    verbose: bool = False
    """Say more."""
    inner: InnerConfig = Field(default_factory=InnerConfig)
    """A section: reached with key=value, or a flag the command names."""


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(prog="throwaway")
    add_settings(made, ThrowawayConfig, {"backend": "inner.backend"})
    return made


def test_every_setting_of_a_simple_type_is_a_flag_with_its_docstring_as_help() -> None:
    made = parser()
    by_flag = {o: a for a in made._actions for o in a.option_strings}
    assert {"--warmup-steps", "--rate", "--name", "--folder", "--kind", "--tags", "--verbose"} <= set(by_flag)
    assert "--no-verbose" in by_flag and "--inner" not in by_flag and "--limits" not in by_flag
    assert by_flag["--kind"].choices == ["sync", "async"]
    assert by_flag["--backend"].help == "Where the episodes run. (inner.backend)"
    text = made.format_help()
    assert "Steps at 100% of the learning rate's ramp." in text and "How fast, in steps a second." in text


def test_the_flags_given_and_only_those_reach_the_settings_under_the_overrides() -> None:
    args = parser().parse_args(
        ["--warmup-steps", "3", "--tags", "a, b", "--verbose", "--backend", "bwrap", "name=x", "folder=out"]
    )
    assert given_settings(args) == {
        "warmup_steps": 3, "tags": ["a", "b"], "verbose": True, "inner": {"backend": "bwrap"},
    }  # fmt: skip
    config = resolved(args, ThrowawayConfig)
    assert (config.warmup_steps, config.tags, config.verbose, config.name, config.folder) == (
        3, ["a", "b"], True, "x", Path("out"),
    )  # fmt: skip
    assert config.inner.backend == "bwrap" and config.rate is None
    over = parser().parse_args(["--warmup-steps", "3", "warmup_steps=5", "inner.limits={a: 1}"])
    assert resolved(over, ThrowawayConfig).warmup_steps == 5
    assert resolved(over, ThrowawayConfig).inner.limits == {"a": 1}
    with pytest.raises(ConfigError, match="warmup_step"):
        resolved(parser().parse_args(["warmup_step=1"]), ThrowawayConfig)
    with pytest.raises(SystemExit):
        parser().parse_args(["--kind", "sometimes"])


def test_a_command_imports_its_settings_model_only_when_it_is_run() -> None:
    """`harness tasks list` does not import torch through the training commands' models."""
    harness = build_parser()
    commands = next(a for a in harness._actions if isinstance(a, argparse._SubParsersAction))
    train = commands.choices["train"]
    assert isinstance(train, CommandParser) and not train.filled
    args = harness.parse_args(["train", "--steps", "3", "--group-size", "8", "model=m"])
    assert train.filled and given_settings(args) == {"steps": 3, "rollout": {"group_size": 8}}


def test_the_settings_commands_keep_the_flags_the_docs_show() -> None:
    cases = {
        ("rollout", "--suite", "demo", "--policy", "scripted:decoy", "--tasks", "a,b", "--group-size", "2",
         "--concurrency", "3", "--backend", "bwrap", "--out", "runs/x"):
        {"suite": "demo", "policy": "scripted:decoy", "tasks": ["a", "b"], "group_size": 2, "concurrency": 3,
         "sandbox": {"backend": "bwrap"}, "out": Path("runs/x")},
        ("demo", "--backend", "bwrap", "--out", "runs/d", "--grpo-steps", "2"):
        {"rollout": {"sandbox": {"backend": "bwrap"}}, "out": Path("runs/d"), "grpo_steps": 2},
        ("sft", "--model", "m", "--suite", "demo", "--scripts", "gold-min,decoy"):
        {"model": Path("m"), "rollout": {"suite": "demo"}, "scripts": ["gold-min", "decoy"]},
    }  # fmt: skip
    for argv, expected in cases.items():
        assert given_settings(build_parser().parse_args(list(argv))) == expected, argv
