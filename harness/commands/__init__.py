"""The `harness` commands, a module per group: each adds its commands' parsers (`add_commands`) and
holds their handlers; `harness/cli.py` wires the groups together."""

from __future__ import annotations

import argparse
from typing import TypeAlias

from envs.sandbox import BACKENDS

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What `add_subparsers` returns: a group adds its commands to it."""


def backend_choices() -> list[str]:
    """The sandbox backends a `--backend` flag takes: `auto` (Docker when its daemon answers, else
    bubblewrap) and the rows of the backend table, read when the parser is built."""
    return ["auto", *BACKENDS]
