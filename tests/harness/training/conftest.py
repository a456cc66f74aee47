"""Fixtures of the training tests."""

from __future__ import annotations

import pytest

from harness.training.learner import Learner, Row


@pytest.fixture
def learner_rows(monkeypatch: pytest.MonkeyPatch) -> list[Row]:
    """Every row the learner's whole steps (`Learner.grpo_step`) are given during the test; the real step
    runs on them."""
    trained: list[Row] = []
    step = Learner.grpo_step

    def recording(self: Learner, rows: list[Row]) -> dict[str, float]:
        trained.extend(rows)
        return step(self, rows)

    monkeypatch.setattr(Learner, "grpo_step", recording)
    return trained
