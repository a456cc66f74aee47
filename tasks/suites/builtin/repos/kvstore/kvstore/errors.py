"""Errors that a command can end in; the engine turns them into error replies."""

from __future__ import annotations


class CommandError(Exception):
    """A command that cannot be run. Its message becomes the reply, after the code ``ERR``."""


class ParseError(CommandError):
    """A line that is not a well-formed command (bad quoting, unknown name, wrong argument count)."""
