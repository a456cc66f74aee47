"""Chat trajectories (e.g. `scripted:gold` rollouts) as token rows for supervised warm starts.

Each segment is rendered with the model's own chat format, the same way a token-exact episode grows: the
prompt whole, then every assistant message as the text the model would generate (its content and its
tool call as `<tool_call>{json}</tool_call>`) followed by the stop id (loss mask 1), then the closing and
the next messages as template deltas (loss mask 0). Summaries are assistant messages too, so they are
trained on.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.agent.trajectory import Trajectory
from harness.rollouts.config import RolloutConfig, nest_rollout
from harness.rollouts.local import rollout, select
from harness.rollouts.store import RunStore
from harness.training.credit import Privileged, privileged_header
from harness.training.critique import critic_prompt_ids
from harness.training.hints import hint_task
from harness.training.learner import Learner, LearnerConfig, Row
from harness.training.teacher import header_ids
from policies.chat_format import ChatFormat, assistant_text
from policies.hf import HFPolicy
from policies.scripted import gold_calls
from tasks.model import HINT_SUFFIX, Task
from tasks.suite import load_suite
from tools import Toolbox


def segment_row(messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]], fmt: ChatFormat) -> Row:
    ids = fmt.prompt_ids(list(messages[:2]), tools)
    mask = [0] * len(ids)
    later = list(messages[2:])
    for k, message in enumerate(later):
        if message["role"] == "assistant":
            produced = [*fmt.encode(assistant_text(message)), fmt.stop_ids[0]]
            ids += produced
            mask += [1] * len(produced)
            closing = list(fmt.closing_ids)
            ids += closing
            mask += [0] * len(closing)
        else:  # as a token episode grows: the assistant's opening only before an assistant message
            answered = k + 1 < len(later) and later[k + 1]["role"] == "assistant"
            delta = fmt.message_ids(message, reply=False) + (list(fmt.reply_ids) if answered else [])
            ids += delta
            mask += [0] * len(delta)
    return Row(ids=ids, mask=mask, sampler_logprobs=[0.0] * len(ids), advantage=0.0)


def sft_rows(
    trajectories: Sequence[Trajectory],
    tools_for: Callable[[str], list[dict[str, Any]]],
    fmt: ChatFormat,
    solved_only: bool = True,
) -> list[Row]:
    """One row per segment of every (solved) trajectory; `tools_for(task_id)` gives its tools."""
    rows = []
    for t in trajectories:
        if solved_only and (t.grade is None or t.grade.correct != 1.0):
            continue
        for segment in t.segments:
            if segment.messages:
                rows.append(segment_row(segment.messages, tools_for(t.task_id), fmt))
    return rows


class SFTConfig(BaseModel):
    """A supervised warm start on gold trajectories of a suite."""

    model_config = ConfigDict(extra="forbid")

    model: Path
    """A Hugging Face model folder with the starting weights."""
    rollout: RolloutConfig = Field(default_factory=lambda: RolloutConfig(out=Path("runs/sft")))
    """How the demonstrations run, as `harness rollout` runs them: `suite`, `tasks` (default: the whole
    suite), `seed` (also the order the rows are shuffled into each epoch), `out` (the run folder: the
    demonstrations' rollouts in demonstrations/SCRIPT, the trained model in model/; default runs/sft),
    `loop`, `summary` (the summaries are trained on), `sandbox`, `tools` (also the tools the rows show)
    and the rest. Its `policy` is set from each of `scripts`."""
    scripts: list[str] = Field(default_factory=lambda: ["gold"])
    """Scripted policies that make the demonstrations: `gold`, `gold-min`, `decoy`, or a FILE."""
    solved_only: bool = True
    """Train only on demonstrations that solved their task."""
    repeats: dict[str, int] = Field(default_factory=dict)
    """How many times a script's demonstrations appear in each epoch (1 for a script not named here): with
    scripts `[gold-min, decoy]`, `{decoy: 4}` warm-starts a model that writes the wrong fix about four
    times as often as the right one."""
    header_scripts: list[str] = Field(default_factory=list)
    """Scripts (among `scripts`) whose solved demonstrations are trained on a second and a third time with
    the task's privileged header (`header_parts`), in the two places training puts it: as tokens before
    the conversation, where the OPSD teacher reads it (`teacher.header_ids`), and after the task's
    statement, where a hint rollout reads it (`hints.hint_task`; these demonstrations are rolled out on
    that task). A model warm-started without them has never read a header: the same weights after one
    are no teacher. Empty: none."""
    header_parts: list[Privileged] = Field(default_factory=lambda: list[Privileged](["gold_patch"]))
    """What the header of `header_scripts` holds (`credit.privileged` of the training run that follows)."""
    critic_scripts: list[str] = Field(default_factory=list)
    """Scripts (among `scripts`) whose failed demonstrations are also shown critiqued (`critic_row`): the
    critic's prompt (`critique.critic_prompt_ids`, as `credit.critique` asks it) and, as its reply, a
    critique that names the turn of the first edit (`Turn N:`) and the edit the gold patch makes there.
    A model warm-started without them has never written `Turn N:`: `credit.critique_mode: local` then finds
    no turn to teach. Empty: none."""
    epochs: int = Field(default=10, ge=1)
    """Passes over the demonstrations at most."""
    target_loss: float | None = Field(default=None, gt=0)
    """Stop after the first epoch whose mean loss is at most this: the demonstrations are learnt. How many
    epochs that takes varies between machines (their rounding differs); the model it gives does not."""
    rows_per_step: int = Field(default=8, ge=1)
    """Segment rows per optimizer step; the last step of an epoch takes the rows left."""
    learner: LearnerConfig = Field(default_factory=lambda: LearnerConfig(lr=1e-3))
    """The optimizer and its micro-batches (the GRPO settings do not apply); learning rate 1e-3 by default."""

    @model_validator(mode="before")
    @classmethod
    def _nest_rollout(cls, data: Any) -> Any:
        """Rollout settings given at the top level (a file written before `rollout` was nested, or
        `suite=demo` on the command line) go into `rollout`."""
        return nest_rollout(data, {key: key for key in RolloutConfig.model_fields}, {"out": "runs/sft"})

    @model_validator(mode="after")
    def _named_scripts(self) -> SFTConfig:
        for field in ("repeats", "header_scripts", "critic_scripts"):
            unknown = sorted(set(getattr(self, field)) - set(self.scripts))
            if unknown:
                raise ValueError(f"{field} names {unknown}, which are not among scripts {self.scripts}")
        if any(not script.startswith("decoy") for script in self.critic_scripts):
            raise ValueError(
                f"critic_scripts must be decoy scripts (a critique of a wrong fix), got {self.critic_scripts}"
            )
        if any(n < 1 for n in self.repeats.values()):
            raise ValueError(f"repeats must be at least 1, got {self.repeats}")
        return self


def after_header(header: Sequence[int], row: Row) -> Row:
    """`row` after the header's ids, as the OPSD teacher reads a row (`teacher.teacher_logprobs`); the
    header is not trained on."""
    ids = [*header, *row.ids]
    return Row(ids, [0] * len(header) + row.mask, [0.0] * len(ids), 0.0)


def demo_critique(task: Task, trajectory: Trajectory) -> str | None:
    """What the critic of a wrong-fix demonstration (`scripted:decoy`) is shown to write: the turn of its
    first edit, numbered as the critic reads turns (`critique.turn_lines`), and the edit the gold patch
    makes at that place instead. None when the demonstration made no edit or the gold patch makes none."""
    turns = [turn for segment in trajectory.segments for turn in segment.turns]
    edits = [n for n, turn in enumerate(turns, start=1) if turn.tool_call and turn.tool_call.name == "edit"]
    right = [call.arguments["new_str"] for call in gold_calls(task, explore=False) if call.name == "edit"]
    if not edits or not right:
        return None
    return (
        f"Turn {edits[0]}: this edit replaces the code with `pass`, which does not fix the bug."
        f" Write this there instead:\n{right[0]}"
    )


def critic_row(task: Task, trajectory: Trajectory, fmt: ChatFormat) -> Row | None:
    """A critic demonstration: the critic's prompt of `trajectory` (mask 0) and `demo_critique` with the stop
    id after it (mask 1), as `critique.sample_critiques` samples one; None where there is no critique."""
    critique = demo_critique(task, trajectory)
    if critique is None:
        return None
    prompt = critic_prompt_ids(fmt, task, trajectory)
    reply = [*fmt.encode(critique), fmt.stop_ids[0]]
    ids = [*prompt, *reply]
    return Row(ids, [0] * len(prompt) + [1] * len(reply), [0.0] * len(ids), 0.0)


Progress = Callable[[str, int, int], None]
"""(what is rolled out, episodes done, episodes in all), after each demonstration episode."""


def demonstrations(
    config: SFTConfig, script: str, tasks: list[Task], folder: Path, on_demo: Progress | None = None
) -> list[Trajectory]:
    """One episode of `script` on each task (hint tasks among them), saved in `folder` and taken from it
    where it is there already. The run file is in finishing order, which concurrency makes vary: the
    episodes are returned in (task, sample) order."""
    demos = RolloutConfig.model_validate(
        {**config.rollout.model_dump(), "policy": f"scripted:{script}", "out": folder}
    )

    def done(count: int, total: int, _: Trajectory | None) -> None:
        if on_demo is not None and total:
            on_demo(f"demonstrations of {folder.name}", count, total)

    rollout(demos, tasks=tasks, on_progress=done)
    return sorted(RunStore(folder).trajectories(), key=lambda t: (t.task_id, t.sample_index))


def demonstration_rows(
    config: SFTConfig, tasks: list[Task], tokenizer: Any, fmt: ChatFormat, on_demo: Progress | None = None
) -> list[Row]:
    """Every row of the warm start: each script's demonstrations (`repeats` times), the failed ones of
    `critic_scripts` critiqued (`critic_row`), and those of `header_scripts` with the privileged header
    before the conversation and in the statement."""
    by_id = {t.id: t for t in tasks}

    def tools_for(task_id: str) -> list[dict[str, Any]]:
        return Toolbox.for_task(by_id[task_id.removesuffix(HINT_SUFFIX)], config.rollout.tools).schemas()

    rows: list[Row] = []
    for script in config.scripts:
        own = demonstrations(
            config, script, tasks, config.rollout.out / "demonstrations" / Path(script).name, on_demo
        )
        rows += sft_rows(own, tools_for, fmt, config.solved_only) * config.repeats.get(script, 1)
        if script in config.critic_scripts:
            failed = [t for t in own if t.grade is not None and t.grade.correct < 1.0]
            rows += [row for t in failed if (row := critic_row(by_id[t.task_id], t, fmt)) is not None]
        if script not in config.header_scripts:
            continue
        for t in own:
            header = header_ids(tokenizer, by_id[t.task_id], config.header_parts)
            rows += [after_header(header, row) for row in sft_rows([t], tools_for, fmt, solved_only=True)]
        hinted = [hint_task(t, privileged_header(t, config.header_parts)) for t in tasks]
        folder = config.rollout.out / "demonstrations" / f"{Path(script).name}{HINT_SUFFIX}"
        rows += sft_rows(
            demonstrations(config, script, hinted, folder, on_demo), tools_for, fmt, solved_only=True
        )
    return rows


def run_sft(
    config: SFTConfig,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    on_epoch: Callable[[int, float], None] | None = None,
    on_demo: Progress | None = None,
) -> Path:
    """Rolls out the demonstrations, trains on them, and saves the model to OUT/model; returns that folder.
    `on_epoch` gets each epoch's index and mean loss, `on_demo` each demonstration episode's progress."""
    policy = HFPolicy(config.model, seed=config.rollout.seed)
    fmt = ChatFormat(policy.tokenizer, policy.stop_ids())
    tasks = select(load_suite(config.rollout.suite), config.rollout.tasks)
    rows = demonstration_rows(config, tasks, policy.tokenizer, fmt, on_demo)
    if not rows:
        raise ValueError(f"no demonstration to train on in {config.rollout.out / 'demonstrations'}")
    pad_id = policy.tokenizer.pad_token_id or 0  # type: ignore[attr-defined]
    learner = Learner(policy.model, config.learner, pad_id=pad_id)
    order = random.Random(config.rollout.seed)
    step = 0
    for epoch in range(config.epochs):
        shuffled = list(rows)
        order.shuffle(shuffled)
        losses = []
        for start in range(0, len(shuffled), config.rows_per_step):
            metrics = learner.sft_step(shuffled[start : start + config.rows_per_step])
            losses.append(metrics["loss"])
            if on_step is not None:
                on_step(step, metrics)
            step += 1
        if on_epoch is not None:
            on_epoch(epoch, sum(losses) / len(losses))
        if config.target_loss is not None and sum(losses) / len(losses) <= config.target_loss:
            break
    out = config.rollout.out / "model"
    policy.model.save_pretrained(out, safe_serialization=True)
    policy.tokenizer.save_pretrained(out)  # type: ignore[attr-defined]
    return out
