"""The settings of a rollout run (saved as its config.yaml) and the summary it prints."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from envs.reward import RewardConfig
from envs.sandbox import SandboxConfig
from harness.agent.loop import LoopConfig
from policies.base import SamplingParams
from summarizer import SummaryConfig


class ClusterConfig(BaseModel):
    """Rollout workers as Ray actors (`harness/rollouts/cluster.py`); without `address` everything runs in this
    process and Ray is not imported."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = None
    """A Ray address: `auto` (a running cluster), `local` (start one here), `ray://HOST:PORT`. None: no Ray."""
    workers: int = Field(default=2, ge=1)
    """Rollout worker actors, each with its own sandbox pool and copy of the policy."""
    worker_concurrency: int = Field(default=1, ge=1)
    """Episodes at once on each worker."""


class RolloutConfig(BaseModel):
    """A rollout run; saved as the run's config.yaml."""

    model_config = ConfigDict(extra="forbid")

    suite: str = "builtin"
    """A built-in suite's name or a suite folder."""
    tasks: list[str] | None = None
    """Task ids to run (default: all of the suite)."""
    policy: str = "scripted:gold"
    """Policy spec: hf:PATH, tito:MODEL@URL, openai:MODEL@URL, litellm:MODEL, scripted:gold, scripted:FILE."""
    group_size: int = Field(default=1, ge=1)
    """Rollouts per task (G)."""
    concurrency: int = Field(default=2, ge=1)
    """Episodes at once (C)."""
    seed: int = 0
    """Base of the episodes' seeds: each episode's seed is a hash of (seed, task id, sample index)."""
    out: Path = Path("runs/rollout")
    """The run folder (config.yaml, trajectories.jsonl). Run again on it to add only the missing rollouts."""
    loop: LoopConfig = Field(default_factory=LoopConfig)
    """How each episode runs."""
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    """How each generation is sampled."""
    summary: SummaryConfig = Field(default_factory=SummaryConfig)
    """When episodes summarize themselves."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """How the sandboxes are made, for the episodes and for grading."""
    reward: RewardConfig = Field(default_factory=RewardConfig)
    """How a grade becomes a reward."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """Rollouts on Ray actors; by default all in this process."""


class RolloutSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks: int
    trajectories: int
    pass_at_1: float
    pass_at_g: float
    mean_reward: float
    mean_turns: float
    mean_summaries: float
    mean_tokens: float
    statuses: dict[str, int]
    failures: dict[str, int]
    suspicious: int = 0
    """Trajectories whose grade found suspect additions (`Grade.suspicion`)."""
    tampered: int = 0
    """Trajectories whose grade found tampering (forged outcomes, a passing canary)."""
