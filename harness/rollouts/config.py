"""The settings of a rollout run (saved as its config.yaml) and the summary it prints."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envs.reward import RewardConfig
from envs.sandbox import SandboxConfig
from harness.agent.loop import LoopConfig
from harness.config import merged, set_key
from policies.base import SamplingParams
from policies.cpu_threads import host_cores
from policies.spec import parse_spec
from summarizer import SummaryConfig
from tools import ToolsConfig


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


def host_concurrency() -> int:
    """Episodes at once that keep a batched in-process sampler busy on this host while the others run
    tools or are graded: 6 per CPU core, at least 4 and at most 16 (measured on 2 cores, the demo's GRPO:
    12 batched against 3 one at a time, 29.2 s to 20.2 s a step; docs/benchmarks.md 2026-12-05)."""
    return max(4, min(16, 6 * host_cores()))


def samples(policy: str) -> bool:
    """Whether a policy spec samples from a model (not `scripted:`), so more episodes at once fill its batch."""
    return bool(policy) and not policy.startswith("scripted:")


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
    """Episodes at once (C). Default: for a policy that samples from a model (`hf:`, `tito:`, `openai:`,
    `litellm:`), `host_concurrency()`, 6 per CPU core (4 to 16), which keeps a batching sampler's batch
    full while the other episodes run tools or are graded; 2 for a scripted policy, which has no sampler
    to fill."""
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
    reuse_grades: bool = True
    """Rollouts of one batch (a training step's, a rollout command's, in one process) whose patches for a
    task are the same text share one grade (`Grade.reused`) when it was decided cleanly, instead of
    grading the same tree again (harness/rollouts/grade_cache.py); false grades every rollout. Rollouts on
    Ray workers are graded each."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """Rollouts on Ray actors; by default all in this process."""
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    """The tools' settings: bash offered or not, observation and search limits, command timeouts. Each
    task sets its own `test_command` and `allowed` tools over these."""

    @model_validator(mode="before")
    @classmethod
    def _older(cls, data: Any) -> Any:
        return tools_from_loop(data)

    @model_validator(mode="before")
    @classmethod
    def _host_concurrency(cls, data: Any) -> Any:
        if isinstance(data, dict) and "concurrency" not in data and samples(str(data.get("policy", ""))):
            return {**data, "concurrency": host_concurrency()}
        return data

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        parse_spec(value)  # a bad spec fails here, before a run folder is made
        return value


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
    failure_examples: dict[str, str] = Field(default_factory=dict)
    """Each failure cause -> what its first episode said (`Trajectory.status_reason`, 300 characters)."""
    suspicious: int = 0
    """Trajectories whose grade found suspect additions (`Grade.suspicion`)."""
    tampered: int = 0
    """Trajectories whose grade found tampering (forged outcomes, a passing canary)."""


def tools_from_loop(data: Any) -> Any:
    """Settings written when `bash_enabled` was a loop setting (`loop.bash_enabled`): moved to
    `tools.bash_enabled`, so older run folders and files still read."""
    loop = data.get("loop") if isinstance(data, dict) else None
    if not isinstance(loop, dict) or "bash_enabled" not in loop:
        return data
    loop = dict(loop)
    tools = dict(data.get("tools") or {})
    tools.setdefault("bash_enabled", loop.pop("bash_enabled"))
    return {**data, "loop": loop, "tools": tools}


def nest_rollout(data: Any, moved: Mapping[str, str], defaults: Mapping[str, Any]) -> Any:
    """`data` of a settings model that holds a `RolloutConfig` as `rollout`, with the rollout settings it
    held at its top level before (`moved`: the old key -> its dotted key in `rollout`) moved in, so that an
    older file and a flat `group_size=8` on the command line still read; `defaults` (the model's own
    rollout defaults) under what was given, what was given in `rollout` over what was moved."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    given = data.get("rollout") or {}
    if isinstance(given, BaseModel):
        given = given.model_dump(exclude_unset=True)
    flat: dict[str, Any] = {}
    for old, key in moved.items():
        if old in data:
            set_key(flat, key, data.pop(old))
    data["rollout"] = merged(merged(dict(defaults), flat), given)
    return data


PRODUCERS = ("suite", "policy", "seed", "loop", "sampling", "summary", "reward", "tools")
"""The settings that make a rollout run's trajectories what they are: a run folder that holds trajectories
is continued only with the same ones. The tasks, G, C, the sandbox backend and the Ray workers may change."""


def changed_producers(before: RolloutConfig, now: RolloutConfig) -> list[str]:
    """`key: before -> now` for each setting under the PRODUCERS that differs (each leaf, so that a long
    system prompt that did not change is not printed)."""
    old, new = ({k: c.model_dump(mode="json")[k] for k in PRODUCERS} for c in (before, now))
    return changed_settings(old, new)


def flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` as `{"a.b": 1}`; lists and scalars are leaves."""
    if not isinstance(data, dict) or not data:
        return {prefix: data}
    found: dict[str, Any] = {}
    for key, value in data.items():
        found |= flat(value, f"{prefix}.{key}" if prefix else str(key))
    return found


def changed_settings(before: dict[str, Any], now: dict[str, Any], free: tuple[str, ...] = ()) -> list[str]:
    """`key: before -> now` for each leaf setting that differs, outside the keys `free` names (and what
    is under them)."""
    old, new = flat(before), flat(now)
    keys = sorted(old.keys() | new.keys())
    fixed = [k for k in keys if not any(k == c or k.startswith(f"{c}.") for c in free)]
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in fixed if old.get(k) != new.get(k)]
