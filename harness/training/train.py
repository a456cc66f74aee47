"""`harness train`: sample tasks, roll out groups with the current policy, grade, update, repeat.

Each step: draw `tasks_per_step` tasks, run `group_size` rollouts of each with the current weights
(in-process; every token tagged with the policy version that sampled it), grade them, turn rewards into
group advantages, take one optimizer step, and hand the new weights to the sampler. Metrics go to
metrics.jsonl and TensorBoard, trajectories to trajectories.jsonl, checkpoints to checkpoints/step-N.
`resume=True` continues from the last checkpoint; finished rollouts of the interrupted step are reused
from the run file, so a resumed run on a CPU gives the results of an uninterrupted one.

`mode: async` rolls out step n+1 in a background thread while the learner trains on step n
(`harness/training/async_rollouts.py`): the sampler is a separate copy of the model (or the server), takes the
newest weights between batches, and groups more than `max_staleness` versions old are dropped.

`cluster.address` runs the rollouts on Ray actors (`harness/rollouts/cluster.py`), which get the new weights
through Ray's object store after every step, or, with `sampler`, sample on the servers and are told which
servers hold the new weights; without it nothing imports Ray.

`device` places the model (learner, in-process sampler, KL reference): a GPU when there is one. Under
`torchrun` the learner runs on every process (`harness/training/distributed.py`): rank 0 leads (rollouts, run
directory, servers) and sends each step's rows to the others, which follow, step for step.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envs.grading import refuse_unprotected
from harness.agent.scripted_tokens import ScriptedTokens
from harness.agent.trajectory import Trajectory
from harness.rollouts.config import RolloutConfig, host_concurrency, nest_rollout
from harness.rollouts.episode import Rollouts, SandboxPool, episode_seed
from harness.rollouts.local import LocalRollouts, last_tries, resume_jobs, select
from harness.rollouts.store import (
    CritiqueLine,
    RunStore,
    SegmentAdvantage,
    append_line,
    read_lines,
    write_atomic,
)
from harness.training import distributed
from harness.training.async_rollouts import AsyncRollouts, Handoff, fresh_groups
from harness.training.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    optimizer_state,
    save_checkpoint,
)
from harness.training.credit import dense_weight, privileged_header
from harness.training.critique import (
    Critique,
    Critiqued,
    LocalScoring,
    critique_rows,
    local_rows,
    refined_job,
    refined_sample,
    refined_task,
    sample_critiques,
    to_critique,
)
from harness.training.distributed import Processes
from harness.training.hints import Hinted, failed_groups, hint_rows, hint_task, teacher_rows
from harness.training.learner import Learner, LearnerConfig, Row, rows_from_trajectories
from harness.training.logs import LogConfig, MetricsWriter
from harness.training.streaming import GroupLearner, GroupStream, Roll, merged_stats
from harness.training.sync import WeightSync, cpu_weights, in_place, to_cluster, to_copy, to_servers
from harness.training.teacher import (
    PROBE_TEXT,
    CreditConfig,
    Credited,
    header_ids,
    served_temperature,
    teacher_folder,
    with_dense_credit,
)
from harness.training.turn_credit import with_turn_credit
from policies.base import Scorer, TokenPolicy
from policies.chat_format import ChatFormat
from policies.cpu_threads import async_sampler_threads, cpu_threads, host_cores
from policies.hf import HFPolicy
from policies.spec import parse_spec
from policies.tito import ReloadEndpoint, TitoPolicy
from tasks.model import CRITIQUE_SUFFIX, Task
from tasks.suite import TaskError, load_suite

if TYPE_CHECKING:
    from harness.rollouts.cluster import ClusterRollouts


CRITIC_THREADS = 16
"""Failed rollouts whose critiques are sampled at once (each of their k critiques too)."""
ROLLOUT_KEYS = (
    "suite", "tasks", "group_size", "concurrency", "seed", "out",
    "loop", "sampling", "summary", "sandbox", "reward", "reuse_grades", "cluster", "tools",
)  # fmt: skip
"""The rollout settings a training config held at its top level before they moved into `rollout`."""


class CpuThreads(BaseModel):
    """How a one-process run on the CPU shares the cores between the learner and the in-process sampler:
    each side's threads set its own torch thread count (`policies/cpu_threads.py`). Runs on a GPU, under
    torchrun, with a sampler server or with rollouts on Ray workers leave torch's counts alone."""

    model_config = ConfigDict(extra="forbid")

    learner: int | None = Field(default=None, ge=1)
    """CPU threads of the learner's step (forward, backward, optimizer). None: every core in `sync` mode
    (with `stream_groups` as well, where the learner overlaps the rollouts: a split measured no faster,
    docs/benchmarks.md); in `async` mode, where they run at once, the cores the sampler leaves (at least
    one)."""
    sampler: int | None = Field(default=None, ge=1)
    """CPU threads of the in-process sampler's decode. None: every core in `sync` mode; in `async` mode
    half of them, at least one (`policies.cpu_threads.async_sampler_threads`, measured on the demo)."""


class TrainConfig(BaseModel):
    """A training run; saved as the run's config.yaml."""

    model_config = ConfigDict(extra="forbid")

    model: Path
    """A Hugging Face model folder with the starting weights."""
    sampler: str | None = None
    """`tito:MODEL@URL`: a completions server (`harness serve`, vLLM) samples the rollouts, and after every
    step loads the new weights from RUN/weights/step-N through its load endpoint. Default: the learner's
    own model samples in-process. Several servers: `tito:MODEL@URL1,URL2` (load-balanced)."""
    sampler_reload: ReloadEndpoint = "harness"
    """How the sampler servers load new weights: `harness` (`harness serve`'s POST /v1/load_weights),
    `sglang` (POST /update_weights_from_disk) or `vllm` (`vllm serve` with VLLM_SERVER_DEV_MODE=1:
    POST /collective_rpc reload_weights, then /reset_prefix_cache; docs/scale.md)."""
    sampler_batch: int = Field(default=16, ge=1)
    """The in-process sampler decodes up to this many generations together, one forward pass a token
    (policies/batching.py); 1 samples one generation at a time, the model held for its whole length (the
    sampler before issue 35). `rollout.concurrency` episodes at once is what fills it."""
    threads: CpuThreads = Field(default_factory=CpuThreads)
    """How a one-process CPU run shares the cores between the learner and the in-process sampler."""
    mode: Literal["sync", "async"] = "sync"
    """`sync`: roll out, then learn, in turn. `async`: roll out step n+1 while the learner trains on step n.
    In `async`, a learner that sets neither `ratio_against` nor `importance` takes the ratio against the
    sampler (`ratio_against: sampler, importance: none`), so the clip bounds the staleness; against the
    learner the ratio is 1 and truncated importance weights alone let the demo collapse on one seed of
    three (docs/benchmarks.md, "the training demo in mode: async")."""
    stream_groups: bool | None = None
    """`mode: sync`: the learner takes each group's forward and backward passes as soon as the group is
    graded, while the rest of the batch rolls out, and steps once the batch is whole (the same update, one
    policy version per batch: harness/training/streaming.py); an in-process sampler is then a copy of the
    model, as in `async` mode. None: wherever the settings allow it (`stream_blocker`: one process, group
    advantages, outcome credit, no batch-wide selection); true: required, an error says what prevents
    it; false: the learner waits for the whole batch."""
    max_staleness: int = Field(default=1, ge=0)
    """Async mode: a group is trained only if its oldest token is at most this many policy versions behind
    the learner; older groups are dropped (counted in `groups_dropped_stale`)."""
    rollout: RolloutConfig = Field(
        default_factory=lambda: RolloutConfig(group_size=4, out=Path("runs/train"))
    )
    """How each step's episodes run, as `harness rollout` runs them: `suite`, `tasks`, `group_size` (G, at
    least 2 here: GRPO compares within groups; default 4), `concurrency` (default `host_concurrency()`,
    2 with `script`), `seed` (also the draw of each step's tasks), `out` (the run folder: config.yaml,
    trajectories.jsonl, metrics.jsonl, learner.jsonl, checkpoints/; default runs/train), `loop`,
    `sampling` (the learner computes log-probs at the same temperature), `summary`, `sandbox`, `reward`
    and `cluster`. Its `policy` is set from `sampler` or `model`: the learner's weights sample."""
    steps: int = Field(default=10, ge=1)
    """Training steps; each rolls out `tasks_per_step` x `group_size` episodes and updates the policy once."""
    tasks_per_step: int = Field(default=4, ge=1)
    """Tasks drawn for each step, all different (every task when the suite has fewer)."""
    checkpoint_every: int = Field(default=1, ge=1)
    """Save a checkpoint (weights, optimizer, task draw) every this many steps, and after the last step."""
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    """How the policy is updated from each step's rollouts."""
    script: Literal["gold-or-decoy"] | None = None
    """Instead of sampling, the policy plays scripted fixes as its own tokens, with its own log-probs: the
    gold fix or a wrong one, and sometimes a message with no tool call first, chosen by each episode's seed
    (`harness/agent/scripted_tokens.py`). Every machine gets the same trajectories and rewards, so tests and
    demonstrations of the training path do not depend on what a tiny model happens to sample. In-process,
    synchronous runs only."""
    credit: CreditConfig = Field(default_factory=CreditConfig)
    """Dense credit from the task's privileged context (OPSD); by default the outcome alone."""
    log: LogConfig = Field(default_factory=LogConfig)
    """Where the metrics go besides metrics.jsonl: TensorBoard by default, W&B, MLflow."""
    device: str = "auto"
    """Where the model, the in-process sampler and the KL reference live: `auto` (CUDA when there is a GPU,
    else the CPU), `cpu`, `cuda` or `cuda:N`. Under torchrun `auto` and `cuda` mean cuda:LOCAL_RANK."""

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        return distributed.check_device(value)

    @field_validator("sampler")
    @classmethod
    def _token_server(cls, value: str | None) -> str | None:
        if value is not None:
            backend, _ = parse_spec(value)
            if backend != "tito":
                raise ValueError(f"{value!r}: the sampler must be a token server, tito:MODEL@URL")
        return value

    @model_validator(mode="before")
    @classmethod
    def _nest_rollout(cls, data: Any) -> Any:
        """Rollout settings given at the top level (a config.yaml written before `rollout` was nested, or
        `group_size=8` on the command line) go into `rollout`; the training defaults fill the rest."""
        if not isinstance(data, dict):
            return data
        # The learner's weights sample (a scripted run plays its fixes): episodes enough to fill the batch.
        concurrency = 2 if data.get("script") else host_concurrency()
        defaults = {"group_size": 4, "out": "runs/train", "concurrency": concurrency}
        return nest_rollout(data, {key: key for key in ROLLOUT_KEYS}, defaults)

    @model_validator(mode="after")
    def _groups_and_policy(self) -> TrainConfig:
        if self.rollout.group_size < 2:
            raise ValueError("rollout.group_size must be at least 2: GRPO compares rollouts within a group")
        self.rollout.policy = self.sampler or f"hf:{self.model}"
        return self

    @model_validator(mode="after")
    def _teacher_folder(self) -> TrainConfig:
        if self.credit.teacher not in ("self", "reference"):
            teacher_folder(self.credit.teacher, self.model)  # a folder of a model with the same vocabulary
        return self

    @model_validator(mode="after")
    def _async_ratio(self) -> TrainConfig:
        if self.mode == "async" and not {"ratio_against", "importance"} & self.learner.model_fields_set:
            self.learner = self.learner.model_copy(update={"ratio_against": "sampler", "importance": "none"})
        return self

    @model_validator(mode="after")
    def _hints_in_step(self) -> TrainConfig:
        if self.credit.hint_rollouts and self.mode != "sync":
            raise ValueError("credit.hint_rollouts samples within the step: it needs mode: sync")
        if self.credit.critique and self.mode != "sync":
            raise ValueError("credit.critique samples within the step: it needs mode: sync")
        return self

    @model_validator(mode="after")
    def _teacher_on_a_server(self) -> TrainConfig:
        if self.credit.teacher_via == "server" and (self.sampler is None or self.credit.teacher != "self"):
            raise ValueError(
                "credit.teacher_via: server scores on the run's sampler servers, which hold the current"
                " policy: it needs sampler (tito:MODEL@URL) and credit.teacher: self"
            )
        return self

    @model_validator(mode="after")
    def _comparable_logprobs(self) -> TrainConfig:
        """The dense gap compares the teacher's log-probs with the student's: both over the whole
        vocabulary (a served teacher's temperature is checked when the run opens: `served_temperature`)."""
        top_p = self.rollout.sampling.top_p
        if self.credit.mode != "outcome" and top_p < 1:
            raise ValueError(
                f"credit.mode {self.credit.mode} with sampling.top_p {top_p}: the sampler's log-probs are"
                " renormalised over the nucleus, the teacher's are not, so the gap leans negative; use top_p 1"
            )
        return self

    @model_validator(mode="after")
    def _streamable(self) -> TrainConfig:
        blocker = stream_blocker(self)
        if self.stream_groups and blocker is not None:
            raise ValueError(f"stream_groups: true learns group by group, which {blocker}")
        return self

    @model_validator(mode="after")
    def _script_in_process(self) -> TrainConfig:
        if self.script is not None and (self.sampler or self.rollout.cluster.address or self.mode != "sync"):
            raise ValueError(
                "script plays in-process and synchronously: leave sampler, cluster.address and mode"
            )
        return self


def stream_blocker(config: TrainConfig, world: int = 1) -> str | None:
    """Why `config` cannot learn a sync step group by group (`stream_groups`), or None if it can: every
    part of the step must need only the group's own rollouts, and the learner be one process."""
    learner = config.learner
    blockers = {
        "`mode: async` does not do (it overlaps whole batches)": config.mode != "sync",
        "needs one process (under torchrun the ranks learn together)": world > 1,
        "`advantage_scale: batch` cannot (the std of the whole batch)": learner.advantage_scale == "batch",
        "`advantage: gpg` cannot (its scale counts the whole batch)": learner.advantage == "gpg",
        "`importance_batch_normalize` cannot (its mean is over a micro-batch of the whole batch)": (
            learner.importance_batch_normalize
        ),
        "`top_entropy_quantile` < 1 cannot (its quantile is over a micro-batch of the whole batch)": (
            learner.top_entropy_quantile < 1.0
        ),
        "dense credit cannot (it scores the batch's rows together)": config.credit.mode != "outcome",
        "hint rollouts cannot (they follow the groups that all failed)": config.credit.hint_rollouts > 0,
        "critiques cannot (they follow the step's failed rollouts)": config.credit.critique > 0,
    }
    return next((why for why, blocks in blockers.items() if blocks), None)


def streams(config: TrainConfig, processes: Processes) -> bool:
    """Whether this run learns each sync step group by group (`stream_groups`)."""
    blocker = stream_blocker(config, processes.world)
    if config.stream_groups and blocker is not None:
        raise ValueError(f"stream_groups: true learns group by group, which {blocker}")
    return config.stream_groups is not False and blocker is None


def step_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    graded = [t for t in trajectories if t.status != "infra_error"]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    return {
        "reward_mean": mean([t.reward for t in graded]),
        "pass_rate": mean([float(bool(t.grade and t.grade.correct == 1.0)) for t in graded]),
        "infra_errors": float(len(trajectories) - len(graded)),
        "turns_mean": mean([t.metrics.turns for t in trajectories]),
        "summaries_per_trajectory": mean([t.metrics.summaries for t in trajectories]),
        "tokens_generated": float(sum(t.metrics.generated_tokens for t in trajectories)),
        "tokens_total": float(sum(t.metrics.total_tokens for t in trajectories)),
        "parse_errors_mean": mean([t.metrics.parse_errors for t in trajectories]),
        "suspicious_fraction": mean([float(bool(t.grade and t.grade.suspicion)) for t in graded]),
        "tampered_fraction": mean([float(bool(t.grade and t.grade.tampering)) for t in graded]),
        "unprotected_fraction": mean(
            [float(bool(t.grade and t.grade.integrity == "unprotected")) for t in graded]
        ),
    }


def train(
    config: TrainConfig, resume: bool = False, on_step: Callable[[int, dict[str, float]], None] | None = None
) -> list[dict[str, float]]:
    """Runs the training steps not done yet; returns the metrics of the steps it ran (on rank 0; the other
    processes of a torchrun launch return an empty list)."""
    processes = distributed.start(config.device)
    try:
        found = latest_checkpoint(config.rollout.out / "checkpoints") if resume else None
        found = distributed.broadcast(processes, found)  # rank 0's view of the run directory decides
        if not processes.main:
            _follow(config, processes, found)
            return []
        return _lead(config, processes, found, resume, on_step)
    finally:
        distributed.stop(processes)


def _lead(
    config: TrainConfig,
    processes: Processes,
    found: Path | None,
    resume: bool,
    on_step: Callable[[int, dict[str, float]], None] | None,
) -> list[dict[str, float]]:
    """The whole run on one process, or rank 0's part of it: everything but the learner's other shares."""
    run = _open_run(config, processes, found, resume)
    history: list[dict[str, float]] = []
    learner_threads, _ = thread_split(config, processes)
    try:
        with cpu_threads(learner_threads):  # this thread learns; the sampler's thread keeps its own count
            for step in run.steps:
                history.append(_step(run, step))
                if on_step is not None:
                    on_step(step, history[-1])
    finally:
        run.close()
    return history


def _step(run: TrainingRun, step: int) -> dict[str, float]:
    """One step: roll out, rows, learn, publish the weights, log, checkpoint."""
    config = run.config
    learn_step = _learn_streamed if run.streamed else _learn_whole
    batch, rows, learned, stats, learn_s = learn_step(run, step)
    published = time.monotonic()
    _record_token_stats(run.store, step, rows, learned.logprobs)
    run.policy.set_version(step + 1)
    run.batches.learned(step + 1)
    metrics = {
        **step_metrics(batch.rolled),
        **stats,
        **learned.metrics,
        **batch.staleness,
        "policy_version": float(step + 1),
        **batch.timings,
        "time_learn_s": learn_s + time.monotonic() - published,
    }
    # The step's metrics before its checkpoint: a crash between the two redoes the step, whose lines a
    # resume drops; the other way round, it would lose them.
    run.writer.write(step, metrics)
    if learned.optimizer is not None:
        state = {"order": run.plan[step - run.steps.start][1]}
        save_checkpoint(
            config.rollout.out / "checkpoints",
            step + 1,
            run.policy.model if run.learner.master is None else run.learner.master,  # float32 master weights
            run.policy.tokenizer,
            learned.optimizer,
            state,
        )
    return metrics


LearnedStep = tuple["Batch", list[Row], "Learned", dict[str, float], float]
"""A step's batch, the rows learned, the update, the rows' statistics, and the seconds spent learning."""


def _learn_whole(run: TrainingRun, step: int) -> LearnedStep:
    """The step's whole batch rolled out, then its rows (with dense credit and hint rows, if asked for)
    learned in one go."""
    batch = run.batches.next(step)
    rolled = time.monotonic()
    rows, advantage_stats = _rows(run, batch.trained)
    scoring = time.monotonic()
    credit = run.credit(rows, batch.trained, step)  # dense credit from the privileged context, if asked for
    credit_s = time.monotonic() - scoring
    turned, turn_stats = _turn_credit(run, credit.rows, batch.trained)
    credit = replace(credit, rows=turned, metrics=credit.metrics | turn_stats)
    hinted = run.hints(step, batch.trained)  # learnable successes for groups that all failed, if asked for
    critiqued = run.critiques(step, batch.trained)  # critiques of failed rollouts and their refinements
    rows = credit.rows + hinted.rows + hinted.teacher_rows  # the teacher's own track, if it is trained
    rows += critiqued.rows  # after every plain group's advantage is taken
    learned = learn(run.processes, run.learner, run.policy, rows, step + 1, _checkpoint_due(run.config, step))
    stats = {
        **advantage_stats,
        **credit.metrics,
        **hinted.metrics,
        **critiqued.metrics,
        **({"hint_share": len(hinted.rows) / len(rows) if rows else 0.0} if hinted.metrics else {}),
        **({"time_credit_s": credit_s} if credit.metrics else {}),  # the teacher's share of time_learn_s
    }
    return batch, rows, learned, stats, time.monotonic() - rolled


def _learn_streamed(run: TrainingRun, step: int) -> LearnedStep:
    """The step's groups learned one by one as they are graded, while the rest roll out; one update
    once the batch is whole (harness/training/streaming.py)."""
    assert isinstance(run.batches, SyncBatches)
    stream = run.batches.stream(step)
    learner = GroupLearner(run.learner)
    rows: list[Row] = []
    parts: list[tuple[dict[str, float], int]] = []
    spans: list[tuple[float, float]] = []  # when each group was learned
    try:
        for group in stream:
            started = time.monotonic()
            group_rows, group_stats = _rows(run, group)
            group_rows, turn_stats = _turn_credit(run, group_rows, group)
            group_stats |= turn_stats
            learner.add(group_rows)
            spans.append((started, time.monotonic()))
            rows += group_rows
            parts.append((group_stats, len(group)))
    except BaseException:
        stream.close()
        raise
    started = time.monotonic()
    metrics = learner.finish()
    due = _checkpoint_due(run.config, step)
    optimizer = optimizer_state(run.learner.trained, run.learner.optimizer) if due else None
    learned = Learned(metrics, dict(run.learner.learner_logprobs), optimizer)
    batch = Batch(stream.rolled, stream.rolled, {"time_rollout_s": stream.rollout_s}, {})
    overlapped = sum(max(0.0, min(end, stream.ended) - start) for start, end in spans)
    stats = merged_stats(parts) | {"time_learn_overlapped_s": overlapped}  # of time_learn_s
    return batch, rows, learned, stats, sum(end - start for start, end in spans) + time.monotonic() - started


@dataclass
class Batch:
    """A step's rollouts: all of them (for the step's metrics) and those trained on."""

    rolled: list[Trajectory]
    trained: list[Trajectory]
    timings: dict[str, float]
    staleness: dict[str, float]


class SyncBatches:
    """`mode: sync`: a step's batch is rolled out when the learner asks for it, whole (`next`) or a group
    at a time (`stream`), and the new weights reach the sampler before the next one."""

    def __init__(
        self,
        roll: Roll,
        sync: WeightSync[Any],
        order: Callable[[int], list[str]],
        group_size: int,
        stop: threading.Event,
    ) -> None:
        """`order(step)`: the ids of the step's tasks, in the order their jobs are handed out."""
        self.roll, self.sync, self.order, self.group_size, self.stop = roll, sync, order, group_size, stop

    def next(self, step: int) -> Batch:
        started = time.monotonic()
        rolled = self.roll(step, lambda _trajectory: None)
        return Batch(rolled, rolled, {"time_rollout_s": time.monotonic() - started}, {})

    def stream(self, step: int) -> GroupStream:
        return GroupStream(self.roll, step, self.order(step), self.group_size, self.stop)

    def learned(self, version: int) -> None:
        self.sync.publish(version)

    def close(self) -> None:
        pass


class AsyncBatches:
    """`mode: async`: batches rolled out one step ahead (`AsyncRollouts`); groups too stale are dropped."""

    def __init__(self, rollouts: AsyncRollouts, max_staleness: int) -> None:
        self.rollouts, self.max_staleness = rollouts, max_staleness

    def next(self, step: int) -> Batch:
        started = time.monotonic()
        rolled, rollout_s = self.rollouts.next_batch()
        waited = time.monotonic() - started
        trained, staleness = fresh_groups(rolled, step, self.max_staleness)
        return Batch(rolled, trained, {"time_rollout_s": rollout_s, "time_wait_s": waited}, staleness)

    def learned(self, version: int) -> None:
        self.rollouts.learned(version)

    def close(self) -> None:
        self.rollouts.close()


@dataclass
class TrainingRun:
    """What rank 0 holds from a run's start to its end."""

    config: TrainConfig
    processes: Processes
    steps: range
    store: RunStore
    policy: HFPolicy
    learner: Learner
    plan: list[tuple[list[Task], object]]
    batches: SyncBatches | AsyncBatches
    writer: MetricsWriter
    closers: list[Callable[[], None]]
    """Called in order at the end: the batches, the rollouts, the writer, the servers."""
    tasks: dict[str, Task]
    teacher: Any
    """The model that scores with the privileged header (`credit.teacher`); None for `credit.mode: outcome`."""
    hint_roll: Callable[[list[tuple[Task, int]]], list[Trajectory]]
    """Rolls out (task, sample index) jobs within the step, saved to the run like the rest."""
    streamed: bool
    """Each sync step's groups are learned as they are graded (`TrainConfig.stream_groups`)."""
    critic: TokenPolicy
    """What samples the critiques (`credit.critique`): the sampler servers, or the learner's own model
    (which samples the rollouts in a synchronous in-process run)."""

    def hints(self, step: int, trajectories: list[Trajectory]) -> Hinted:
        """Learnable successes for the groups that all failed (`credit.hint_rollouts`, hints.py)."""
        config = self.config.credit
        failed = failed_groups(trajectories) if config.hint_rollouts else {}
        if not failed:
            return Hinted([], {"hint_rollouts": 0.0} if config.hint_rollouts else {})
        jobs = [
            (hint_task(self.tasks[task_id], privileged_header(self.tasks[task_id], config.privileged)), k)
            for task_id in failed
            for k in range(step * config.hint_rollouts, (step + 1) * config.hint_rollouts)
        ]
        fmt = ChatFormat(self.policy.tokenizer, self.policy.stop_ids())
        rolled = self.hint_roll(jobs)
        hinted = hint_rows(
            rolled, trajectories, self.config.learner, self.tasks, fmt, self.config.rollout,
            self.policy.model, config, self.processes.device,
        )  # fmt: skip
        if config.teacher_training == "off":
            return hinted
        taught, metrics = teacher_rows(rolled, hinted.learnable, self.config.learner, config)
        return replace(hinted, metrics=hinted.metrics | metrics, teacher_rows=taught)

    def critiques(self, step: int, trajectories: list[Trajectory]) -> Critiqued:
        """Critiques of the step's failed rollouts and the refined rollouts they start (`credit.critique`,
        critique.py), rolled out within the step and saved to the run like the rest; or, with
        `critique_mode: local`, each critique's turn scored with it inserted there."""
        config, k = self.config.credit, self.config.credit.critique
        failed = to_critique(trajectories, config.critique_per_group) if k else []
        if not failed:
            return Critiqued([], [], {"critique_count": 0.0} if k else {})
        params = self.config.rollout.sampling.model_copy(update={"max_new_tokens": config.critique_tokens})

        def of(t: Trajectory) -> list[Critique]:
            seed = episode_seed(self.config.rollout.seed, t.task_id + CRITIQUE_SUFFIX, t.sample_index)
            return sample_critiques(self.critic, self.tasks[t.task_id], t, k, params, seed * k)

        with ThreadPoolExecutor(max_workers=min(len(failed), CRITIC_THREADS)) as pool:  # sampled together
            critiques = [critique for made in pool.map(of, failed) for critique in made]
        _record_critiques(self.store, step, critiques, k, config.critique_mode == "refine")
        if config.critique_mode == "local":  # the critique as the teacher's context on the turn it names
            fmt = ChatFormat(self.policy.tokenizer, self.policy.stop_ids())
            weight = dense_weight(config.beta, step, config.decay_steps) / k
            scoring = LocalScoring(
                self.policy.model, params.temperature, config.clip, weight, self.processes.device
            )
            return local_rows(critiques, fmt, scoring)
        jobs = [
            (
                refined_task(self.tasks[c.failed.task_id], c.text),
                refined_sample(c.failed.sample_index, k, c.index),
            )
            for c in critiques
        ]
        return critique_rows(critiques, self.hint_roll(jobs), k, self.config.learner)

    def close(self) -> None:
        for close in self.closers:
            close()

    def credit(self, rows: list[Row], trajectories: list[Trajectory], step: int) -> Credited:
        """`rows` with dense advantages when `credit.mode` asks for them (`harness/training/teacher.py`), the
        dense weight as it stands at `step` (0-based)."""
        config = self.config.credit
        if config.mode == "outcome" or not rows:
            return Credited(rows, {})
        task_of = {t.id: t.task_id for t in trajectories}
        headers: dict[str, list[int]] = {}
        for task_id in {task_of[row.source[0]] for row in rows if row.source is not None}:
            headers[task_id] = header_ids(self.policy.tokenizer, self.tasks[task_id], config.privileged)
        return with_dense_credit(
            rows,
            [headers[task_of[row.source[0]]] if row.source is not None else [] for row in rows],
            self.teacher,
            config,
            self.config.rollout.sampling.temperature,
            self.processes.device,
            step,
            self.teacher if isinstance(self.teacher, Scorer) else self.policy.model,
            getattr(self.policy.model.config, "max_position_embeddings", None),  # the teacher's window too
        )


def _open_run(config: TrainConfig, processes: Processes, found: Path | None, resume: bool) -> TrainingRun:
    """The run's store, learner, sampler, rollouts and weight hand-over, at the step it resumes from."""
    tasks = select(load_suite(config.rollout.suite), config.rollout.tasks)
    try:
        refuse_unprotected(tasks, config.rollout.reward)
    except ValueError as e:
        raise TaskError(str(e)) from e
    store = RunStore(config.rollout.out)
    # Rollouts already in the run file (an interrupted step of a resumed run): read once, reused below.
    saved = last_tries(store.create(config))
    weights_at = found / "model" if found else config.model
    policy, learner, saved_state = _start_learner(config, processes, weights_at, found)
    server = _server(config.sampler, config.model, config.sampler_reload) if config.sampler else None
    order = random.Random(config.rollout.seed)
    start = 0
    if saved_state is not None:
        start = saved_state["step"]
        order.setstate(_tuple_state(saved_state["order"]))
        policy.set_version(start)
        _drop_metrics_from(store, start)
    elif resume:
        _drop_metrics_from(store, 0)
    if server is not None:  # the server samples with the weights the learner starts from
        server.load_weights(weights_at.resolve(), start)
    steps = range(start, config.steps)
    plan = _plan(order, tasks, config.tasks_per_step, steps)
    rollouts, sync = _rollouts(config, processes, policy, tasks, server, weights_at, start)
    stop = threading.Event()
    run_jobs = ResumingRollouts(rollouts, store, saved, stop)

    def roll(step: int, each: Callable[[Trajectory], object] = lambda _trajectory: None) -> list[Trajectory]:
        size = config.rollout.group_size
        jobs = [(t, step * size + k) for t in plan[step - start][0] for k in range(size)]
        return sorted(run_jobs(jobs, each), key=lambda t: (t.task_id, t.sample_index))

    def task_ids(step: int) -> list[str]:
        return [t.id for t in plan[step - start][0]]

    batches: SyncBatches | AsyncBatches = SyncBatches(roll, sync, task_ids, config.rollout.group_size, stop)
    if config.mode == "async":
        batches = AsyncBatches(
            AsyncRollouts(steps, roll, Handoff(sync.pack, sync.load), stop), config.max_staleness
        )
    writer = MetricsWriter(config.rollout.out, config.log, config.model_dump(mode="json"))
    closers = [stop.set, policy.close, batches.close, rollouts.close, writer.close]
    closers += [server.close] if server is not None else []  # stop, then the sampler: no thread in a model
    teacher: Any = None
    if config.credit.mode != "outcome" and config.credit.teacher_via == "server":
        teacher = server  # the sampler's servers hold the current policy's weights
        served_temperature(teacher, config.rollout.sampling.temperature, policy.tokenizer.encode(PROBE_TEXT))
    elif config.credit.mode != "outcome":  # the current policy, or the starting weights, frozen
        folder = teacher_folder(config.credit.teacher, config.model)
        teacher = policy.model if folder is None else _frozen(folder, processes)
    return TrainingRun(
        config, processes, steps, store, policy, learner, plan, batches, writer, closers,
        {t.id: t for t in tasks}, teacher, run_jobs, streams(config, processes),
        server if server is not None else policy,
    )  # fmt: skip


@dataclass(frozen=True)
class ResumingRollouts:
    """Rolls (task, sample index) jobs out into the run file, each once: a job the run file held when the
    run opened (an interrupted step of a resumed run, an infra error included) is given back as it was."""

    rollouts: Rollouts
    store: RunStore
    saved: dict[tuple[str, int], Trajectory]
    stop: threading.Event

    def __call__(
        self, jobs: list[tuple[Task, int]], each: Callable[[Trajectory], object] = lambda _trajectory: None
    ) -> list[Trajectory]:
        """The jobs' trajectories, the saved ones first; `each` gets every one, saved or new, as it comes."""
        resumed = resume_jobs(jobs, self.saved, retry_infra_errors=False)
        for trajectory in resumed.done:
            each(trajectory)

        def save(trajectory: Trajectory) -> None:
            self.store.append_trajectory(trajectory)
            each(trajectory)

        return resumed.done + self.rollouts.run_batch(resumed.todo, save, self.stop)


def _frozen(folder: Path, processes: Processes) -> Any:
    return HFPolicy(folder, device=str(processes.device)).model.eval().requires_grad_(False)


def _rollouts(
    config: TrainConfig,
    processes: Processes,
    policy: HFPolicy,
    tasks: list[Task],
    server: TitoPolicy | None,
    weights_at: Path,
    version: int,
) -> tuple[Rollouts, WeightSync[Any]]:
    """What rolls out each step's batch, and how the learner's weights reach what samples it."""
    rollout_config = config.rollout.model_copy(update={"policy": config.sampler or f"hf:{config.model}"})
    pool = SandboxPool(config.rollout.sandbox)  # made even when unused: it reaps what dead runs left
    if config.rollout.cluster.address is not None:
        pool.close_all()
        cluster = _cluster(rollout_config, policy, version, server, config)
        if server is not None:
            return cluster, to_servers(policy, server, config.rollout.out / "weights", cluster)
        return cluster, to_cluster(policy, cluster)
    if server is not None:
        return LocalRollouts(server, rollout_config, pool), to_servers(
            policy, server, config.rollout.out / "weights", None
        )
    if config.mode == "async" or streams(config, processes):
        # The in-process sampler is a copy: the learner's weights change under it (async), or the learner
        # runs the same model at once with its own attention and train mode (streamed groups).
        own = HFPolicy(
            weights_at,
            device=str(processes.device),
            seed=config.rollout.seed,
            **sampler_options(config, processes),
        )
        own.set_version(version)
        sampler: TokenPolicy = ScriptedTokens(own, scripted(config, tasks)) if config.script else own
        return LocalRollouts(sampler, rollout_config, pool), to_copy(policy, own)
    sampler = ScriptedTokens(policy, scripted(config, tasks)) if config.script else policy
    return LocalRollouts(sampler, rollout_config, pool), in_place()


def scripted(config: TrainConfig, tasks: list[Task]) -> list[Task]:
    """The tasks a scripted policy plays: the run's, and with `credit.hint_rollouts` their hint tasks
    (the privileged header in the statement), whose prompts it must recognise as well."""
    if not config.credit.hint_rollouts:
        return tasks
    return [*tasks, *(hint_task(t, privileged_header(t, config.credit.privileged)) for t in tasks)]


def _follow(config: TrainConfig, processes: Processes, found: Path | None) -> None:
    """Every process of a torchrun launch but rank 0: its share of each step's learning, nothing else."""
    _, learner, saved_state = _start_learner(
        config, processes, found / "model" if found else config.model, found
    )
    start = saved_state["step"] if saved_state is not None else 0
    for step in range(start, config.steps):
        learn(processes, learner, None, [], step + 1, _checkpoint_due(config, step))


@dataclass(frozen=True)
class Learned:
    metrics: dict[str, float]
    """The learner's metrics of the step (empty when the batch gave no rows)."""
    logprobs: dict[tuple[str, int], list[float]]
    """The learner's log-probs of every sourced row, from all processes (on rank 0)."""
    optimizer: dict[str, Any] | None
    """When a checkpoint is due: the whole optimizer state (on rank 0)."""


def _rows(run: TrainingRun, trained: list[Trajectory]) -> tuple[list[Row], dict[str, float]]:
    """The step's rows and advantage statistics; with `learner.kl_in_reward`, each reward first loses
    coef x its trajectory's KL to the reference."""
    if not trained:
        return [], {}
    coef = run.config.learner.kl_in_reward
    if coef == 0:
        return rows_from_trajectories(trained, run.config.learner)
    kl = run.learner.trajectory_kl(trained)
    rows, stats = rows_from_trajectories(trained, run.config.learner, [coef * k for k in kl])
    return rows, stats | {"kl_in_reward_mean": sum(kl) / len(kl)}


def _turn_credit(
    run: TrainingRun, rows: list[Row], trained: list[Trajectory]
) -> tuple[list[Row], dict[str, float]]:
    """`rows` with turn-level credit from the agent's own test runs, when `credit.turn_weight` asks."""
    config = run.config.credit
    return with_turn_credit(rows, trained, config.turn_weight, config.turn_clip)


def learn(
    processes: Processes,
    learner: Learner,
    policy: HFPolicy | None,
    rows: list[Row],
    version: int,
    checkpoint: bool,
) -> Learned:
    """One learner step, which every process takes with the same collectives in the same order: rank 0's
    rows to all, the update on each one's share, the learner's log-probs back to rank 0, under FSDP the
    whole new weights into rank 0's `policy` (which samples and is saved), and the optimizer state when
    a checkpoint is due. In one process: `learner.grpo_step(rows)`."""
    rows = distributed.broadcast(processes, rows)
    metrics = learner.grpo_step(rows) if rows else {}
    logprobs = distributed.merge_on_main(processes, learner.learner_logprobs)
    if learner.sharded:
        weights = distributed.full_weights(learner.model)
        if policy is not None:
            policy.load_state_dict(weights, version)
    optimizer = optimizer_state(learner.trained, learner.optimizer) if checkpoint else None
    return Learned(metrics, logprobs, optimizer)


def sampler_options(config: TrainConfig, processes: Processes) -> dict[str, Any]:
    """The in-process sampler's batching and thread settings (`HFPolicy`'s keywords)."""
    _, sampler = thread_split(config, processes)
    return {"batching": config.sampler_batch > 1, "max_batch": config.sampler_batch, "threads": sampler}


def thread_split(config: TrainConfig, processes: Processes) -> tuple[int | None, int | None]:
    """CPU threads of the learner and of the in-process sampler (`CpuThreads`); None leaves torch's count."""
    sampled_here = config.sampler is None and config.rollout.cluster.address is None
    if processes.device.type != "cpu" or processes.world > 1 or not sampled_here:
        return None, None
    learner, sampler = config.threads.learner, config.threads.sampler
    if config.mode == "async":  # they run at once: each a share of the cores, not both all of them
        cores = host_cores()
        sampler = sampler or async_sampler_threads(cores)
        learner = learner or max(1, cores - sampler)
    return learner, sampler


def _start_learner(
    config: TrainConfig, processes: Processes, weights_at: Path, found: Path | None
) -> tuple[HFPolicy, Learner, dict[str, Any] | None]:
    """The policy on this process's device, its learner, and the trainer state of checkpoint `found`
    (whose optimizer state the learner takes)."""
    device = str(processes.device)
    policy = HFPolicy(
        weights_at, device=device, seed=config.rollout.seed, **sampler_options(config, processes)
    )
    model = policy.model
    if processes.main and processes.world > 1 and config.learner.parallel == "fsdp":
        model = HFPolicy(weights_at, device=device).model  # sharding takes it apart; rank 0 keeps a whole one
    pad_id = policy.tokenizer.pad_token_id or 0  # type: ignore[attr-defined]
    reference = None
    if config.learner.kl_coef > 0 or config.learner.kl_in_reward > 0:  # the KL anchor: the starting weights
        reference = HFPolicy(config.model, device=device).model.eval().requires_grad_(False)
    learner = Learner(
        model,
        config.learner,
        pad_id=pad_id,
        temperature=config.rollout.sampling.temperature,
        reference=reference,
    )
    saved_state = load_checkpoint(found, learner.trained, learner.optimizer) if found is not None else None
    return policy, learner, saved_state


def _checkpoint_due(config: TrainConfig, step: int) -> bool:
    return (step + 1) % config.checkpoint_every == 0 or step + 1 == config.steps


def _server(spec: str, tokenizer: Path, reload: ReloadEndpoint) -> TitoPolicy:
    _, (model, url) = parse_spec(spec)
    return TitoPolicy(model, url, tokenizer_path=str(tokenizer), reload=reload)


def _plan(
    order: random.Random, tasks: list[Task], per_step: int, steps: range
) -> list[tuple[list[Task], object]]:
    """The tasks of each step, and the state of `order` after drawing them (saved with the checkpoint)."""
    plan: list[tuple[list[Task], object]] = []
    for _ in steps:
        plan.append((order.sample(tasks, min(per_step, len(tasks))), order.getstate()))
    return plan


def _cluster(
    config: RolloutConfig, policy: HFPolicy, version: int, server: TitoPolicy | None, train: TrainConfig
) -> ClusterRollouts:
    """The rollout workers, sampling with the learner's weights of `version`; with `server`, on its servers
    that hold them, each worker through a client of its own."""
    from harness.rollouts.cluster import ClusterRollouts

    if server is None or train.sampler is None:
        cluster = ClusterRollouts(config)
        cluster.load_state_dict(cpu_weights(policy), version)
    else:
        cluster = ClusterRollouts(config, partial(_server, train.sampler, train.model, train.sampler_reload))
        cluster.use_servers(version, server.holding(version))
    return cluster


def _record_token_stats(
    store: RunStore, step: int, rows: list[Row], learner_logprobs: dict[tuple[str, int], list[float]]
) -> None:
    """One line per trained segment in learner.jsonl: its advantage and the learner's log-prob of each
    model-produced token (in order; the sampler's are in the trajectory), for the viewer's token view."""
    lines = []
    for row in rows:
        if row.source is None or row.source not in learner_logprobs:
            continue
        trajectory_id, segment = row.source
        line = SegmentAdvantage(
            step=step,
            trajectory_id=trajectory_id,
            segment=segment,
            advantage=row.advantage,
            learner_logprobs=[round(v, 5) for v in learner_logprobs[row.source]],
            teacher_logprobs=_on_mask(row.teacher_logprobs, row.mask),
            token_advantages=_on_mask(row.token_advantages, row.mask),
        )
        lines.append(line.model_dump_json())
    if lines:  # the step's lines in one write
        append_line(store.learner_path, "\n".join(lines))


def _record_critiques(store: RunStore, step: int, critiques: list[Critique], k: int, refined: bool) -> None:
    """One line per critique in critiques.jsonl, in one write: the critic's tokens are no trajectory's."""
    lines = [
        CritiqueLine(
            step=step, failed_id=c.failed.id, index=c.index, text=c.text, ids=c.ids, logprobs=c.logprobs,
            refined_id="{}/{}".format(*refined_job(c, k)) if refined else None,
        ).model_dump_json()
        for c in critiques
    ]  # fmt: skip
    if lines:
        append_line(store.critiques_path, "\n".join(lines))


def _on_mask(values: list[float] | None, mask: list[int]) -> list[float] | None:
    """Values aligned to ids[1:], kept where the token is the model's own, in order (rounded)."""
    if values is None:
        return None
    return [round(v, 5) for v, m in zip(values, mask[1:], strict=True) if m]


def _tuple_state(state: list[object]) -> tuple[object, ...]:
    """random.Random state from JSON (lists back to tuples)."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)  # type: ignore[arg-type]


def _drop_metrics_from(store: RunStore, step: int) -> None:
    """A resumed run rewrites the metrics of steps after its checkpoint; the older lines stay."""
    critiques = [store.critiques_path] if store.critiques_path.exists() else []  # `credit.critique` runs'
    for path in (store.metrics_path, store.learner_path, *critiques):
        kept = [line for _, line in read_lines(path) if json.loads(line)["step"] < step]
        write_atomic(path, "".join(kept).encode())
