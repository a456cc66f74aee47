"""What a run of a task's hidden tests decided, as every language's runner reports it to grading."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

Outcome = Literal["passed", "failed", "error", "skipped", "missing"]


class Probe(BaseModel):
    """Both sides of one computed assertion as one test (or case) of a probe run saw them."""

    path: str
    """The hidden file, as the task names it."""
    test: str
    line: int
    node: str
    actual: Any
    expected: Any


@dataclass
class HiddenRun:
    """What a run of the hidden tests (or the verifier) decided."""

    fail_to_pass: dict[str, Outcome]
    pass_to_pass: dict[str, Outcome]
    score: float
    """The fraction of hidden ids that passed."""
    timed_out: bool
    tampering: list[str] = field(default_factory=list)
    canaries: dict[str, str] = field(default_factory=dict)
    collect_errors: dict[str, str] = field(default_factory=dict)
    decided_in_parent: int = 0
    hidden_assertions: int = 0
    suspicion: list[str] = field(default_factory=list)
    """What the children's audit hooks saw the repository's code do."""
    forged: bool = False
    """A canary passed: its changed expectation was met, which only forged outcomes do."""
    probes: list[Probe] = field(default_factory=list)
