"""`harness demo`: a training run that visibly learns, on a CPU, in minutes.

1. Build a tiny model and a tokenizer locally (no download).
2. Warm-start it briefly on gold trajectories of the `demo` suite (SFT).
3. Measure its pass rate: the warm-start-only baseline.
4. Run GRPO from the warm start, with a small summary budget so every episode summarizes itself and the
   summaries are trained on; print the reward of every step.
5. Measure the pass rate again, with the same evaluation seeds, next to the baseline.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from rich.console import Console
from rich.table import Table

from envs.backends import resolve_backend
from envs.sandbox import SandboxConfig
from harness.agent.conversation import prompt_ids
from harness.agent.loop import SYSTEM_PROMPT
from harness.agent.trajectory import Trajectory
from harness.rollouts.config import RolloutConfig, RolloutSummary, host_concurrency, nest_rollout
from harness.rollouts.local import rollout
from harness.training.learner import LearnerConfig
from harness.training.sft import SFTConfig, run_sft
from harness.training.teacher import CreditConfig
from harness.training.train import TrainConfig, train
from policies.chat_format import ChatFormat
from policies.hf import HFPolicy
from policies.tiny import build_tiny_model
from summarizer import SummaryConfig
from tasks.suite import load_suite
from tools import Toolbox, ToolsConfig

FLAT_ROLLOUT = {
    "backend": "sandbox.backend", "group_size": "group_size", "concurrency": "concurrency",
    "temperature": "sampling.temperature",
}  # fmt: skip
"""The demo's rollout settings that sat at its top level before `rollout` was nested -> their keys in it."""


def demo_rollout() -> dict[str, Any]:
    """The demo's defaults of its rollout settings."""
    return {
        "suite": "demo", "group_size": 6, "concurrency": host_concurrency(),
        "sampling": {"max_new_tokens": 128, "temperature": 0.8},
    }  # fmt: skip


class DemoConfig(BaseModel):
    """The demo's knobs; the defaults finish in a few minutes on 2 cores."""

    model_config = ConfigDict(extra="forbid")

    out: Path = Path("runs/demo")
    """The demo's folder: base/ (the tiny model), sft/, grpo/, eval-warm-start/ and eval-grpo/."""
    seed: int = 0
    """Seeds the tiny model's weights, the warm start and GRPO; the evaluations use seed + 10000."""
    hidden_size: int = 96
    """Width of the tiny model; a multiple of its 4 attention heads."""
    layers: int = 3
    """Decoder layers of the tiny model."""
    sft_epochs: int = 200
    """Warm-start epochs at most."""
    sft_target_loss: float = 0.01
    """The warm start stops once an epoch's mean loss is this low: the model then writes well-formed right
    and wrong fixes alike. A fixed epoch count gave models that wrote broken tool calls on some CPUs."""
    sft_lr: float = 3e-3
    """Learning rate of the warm start."""
    grpo_steps: int = 12
    """GRPO steps; the final evaluation is of the model after the last one."""
    grpo_lr: float = 5e-4
    """Learning rate of GRPO."""
    mode: Literal["sync", "async"] = "sync"
    """GRPO's `mode` (`harness train`'s): `sync` rolls out, then learns (each group learned as soon as it is
    graded); `async` rolls out step n+1 while the learner trains on step n, one policy version behind.
    benchmarks/rollout_throughput.py times both in these settings; `credit.hint_rollouts` needs `sync`."""
    tasks_per_step: int = 6
    """Tasks per GRPO step; 6 is every task of the demo suite."""
    eval_samples: int = 8
    """Rollouts per task in each evaluation (warm start only, then after GRPO)."""
    summary_margin_tokens: int = 48
    """A segment is summarized once it passes its prompt by this many tokens."""
    decoys_per_fix: int = Field(default=1, ge=1)
    """Wrong-fix demonstrations per right one in the warm start (`SFTConfig.repeats`). 1 is the demo; 4 is
    its hard variant: the warm start writes the right fix about one time in five, so that whole groups
    of rollouts fail and GRPO has less to start from."""
    header_demos: bool = False
    """Also warm-start on the right fixes with the privileged header of `credit.privileged`, before the
    conversation and in the statement (`SFTConfig.header_scripts`): a model that reads the header, which
    the OPSD teacher and hint rollouts need. benchmarks/credit_compare.py turns it on."""
    explore_demos: bool = False
    """The warm start's demonstrations look around and run the visible tests before and after their fix
    (scripts `gold` and `decoy-explore` in place of `gold-min` and `decoy`), so that the model learns to call
    `run_tests`: turn-level credit (`credit.turn_weight`) reads the outcomes of those calls and has nothing
    to read without them. benchmarks/credit_compare.py's turn arm needs it."""
    critic_demos: bool = False
    """Also warm-start the critic's role on the wrong fixes (`SFTConfig.critic_scripts`): each one's critic
    prompt with a critique naming its edit's turn and the right edit. Without them the tiny model never
    writes `Turn N:`, and `credit.critique_mode: local` has no turn to teach.
    benchmarks/credit_compare.py's critique arms need it."""
    warm_start_from: Path | None = None
    """The folder of an earlier demo run of the same seed and warm-start settings: GRPO starts from its
    warm-started model (OUT/sft/model) instead of one trained again, which gives the same weights on the
    same machine. benchmarks/credit_compare.py runs every arm of a seed from its first arm's."""
    credit: CreditConfig = Field(default_factory=CreditConfig)
    """Credit finer than the outcome for the GRPO steps (`harness train`'s `credit`): outcome only by
    default; benchmarks/credit_compare.py runs the demo with OPSD and with hint rollouts beside it."""
    rollout: RolloutConfig = Field(default_factory=lambda: RolloutConfig.model_validate(demo_rollout()))
    """How the evaluations' and GRPO's episodes run, as `harness rollout` runs them: `suite` (default
    demo), `group_size` (rollouts per task per GRPO step; default 6), `concurrency` (default
    `host_concurrency()`, which keeps the batched sampler's decode batch full on this host), `sampling`
    (default 128 new tokens at temperature 0.8), `sandbox` (its `backend`: `docker`, `bwrap`, or `auto`),
    and the rest. Its `policy`, `out` and `seed` are each phase's: the model it evaluates or trains,
    OUT/PHASE, and `seed` (+ 10000 in the evaluations)."""

    @model_validator(mode="before")
    @classmethod
    def _nest_rollout(cls, data: Any) -> Any:
        """The rollout settings the demo held at its top level before `rollout` was nested (`backend`,
        `group_size`, `concurrency`, `temperature`) go into it; the demo's own defaults fill the rest."""
        return nest_rollout(data, FLAT_ROLLOUT, demo_rollout())


class DemoResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    baseline_pass_rate: float
    final_pass_rate: float
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    """Wall seconds of each phase: warm start, evaluation before, GRPO, evaluation after."""
    baseline_reward: float
    """Mean reward of the warm-start-only evaluation."""
    final_reward: float
    rewards: list[float]
    """Mean reward of the rollouts of each GRPO step."""
    summaries_per_trajectory: list[float]
    warm_start_epochs: int
    """Epochs the warm start took to reach its target loss (this varies between machines); 0 when it was
    taken from an earlier run (`warm_start_from`)."""


def prompt_tokens(policy: HFPolicy, suite: str, tools: ToolsConfig) -> int:
    """The longest first prompt (system, tools, task) among the suite's tasks, as a rollout with `tools`
    opens it (`conversation.prompt_ids`)."""
    fmt = ChatFormat(policy.tokenizer, policy.stop_ids())
    return max(
        len(prompt_ids(fmt, SYSTEM_PROMPT, task.prompt(), Toolbox.for_task(task, tools).schemas()))
        for task in load_suite(suite)
    )


EVAL_EVERY = 8
"""Evaluation episodes between two progress lines."""


def evaluate(
    model: Path, config: DemoConfig, summary: SummaryConfig, name: str, console: Console | None = None
) -> RolloutSummary:
    """`eval_samples` rollouts of every demo task, with fixed evaluation seeds; a line every
    `EVAL_EVERY` episodes on `console`."""
    started = time.monotonic()

    def done(count: int, total: int, _: Trajectory | None) -> None:
        if console is not None and count and (count % EVAL_EVERY == 0 or count == total):
            console.print(f"   {name}: {count}/{total} episodes ({time.monotonic() - started:.0f}s)")

    settings = {"policy": f"hf:{model}", "group_size": config.eval_samples, "seed": config.seed + 10_000}
    return rollout(phase_rollout(config, name, summary=summary, **settings), on_progress=done)


def phase_rollout(config: DemoConfig, name: str, **update: Any) -> RolloutConfig:
    """The rollout settings of the demo's phase `name`, whose run folder is OUT/NAME: `config.rollout`
    with the demo's seed and `update`."""
    return RolloutConfig.model_validate(
        {**config.rollout.model_dump(), "out": config.out / name, "seed": config.seed, **update}
    )


def resolved_backend(config: DemoConfig) -> DemoConfig:
    """`config` with its sandbox backend worked out (`auto`: Docker when a daemon answers, else
    bubblewrap), once for every phase of the demo."""
    sandbox = config.rollout.sandbox
    sandbox = sandbox.model_copy(update={"backend": resolve_backend(sandbox.backend)})
    return config.model_copy(update={"rollout": config.rollout.model_copy(update={"sandbox": sandbox})})


def warm_start(
    config: DemoConfig, base: Path, sandbox: SandboxConfig, console: Console
) -> tuple[Path, list[float]]:
    """Step 2 of the demo: SFT of the tiny model on right and wrong scripted fixes; the model's folder and
    the loss of each epoch."""
    epochs: list[float] = []

    started = time.monotonic()

    def epoch_done(epoch: int, loss: float) -> None:
        epochs.append(loss)
        console.print(
            f"   warm-start epoch {epoch + 1:3d}: loss {loss:.4f} ({time.monotonic() - started:.0f}s)"
        )

    def demo_done(what: str, count: int, total: int) -> None:
        console.print(f"   {what}: {count}/{total} episodes ({time.monotonic() - started:.0f}s)")

    console.print(
        "   rolling out scripted demonstrations (right and wrong fixes"
        f"{', right ones with the privileged header' if config.header_demos else ''}), then training on them"
    )

    fix, decoy = ("gold", "decoy-explore") if config.explore_demos else ("gold-min", "decoy")
    sft_model = run_sft(
        SFTConfig(
            model=base, scripts=[fix, decoy], solved_only=False,
            epochs=config.sft_epochs, target_loss=config.sft_target_loss, repeats={decoy: config.decoys_per_fix},
            header_scripts=[fix] if config.header_demos else [], header_parts=config.credit.privileged,
            critic_scripts=[decoy] if config.critic_demos else [],
            rows_per_step=4, learner=LearnerConfig(lr=config.sft_lr),
            rollout=RolloutConfig(
                suite=config.rollout.suite, out=config.out / "sft", seed=config.seed, sandbox=sandbox,
                summary=SummaryConfig(trigger_tokens=64, max_summary_tokens=32),
            ),
        ),
        on_epoch=epoch_done, on_demo=demo_done,
    )  # fmt: skip
    console.print(f"   warm start: {len(epochs)} epochs, last loss {epochs[-1]:.4f} -> {sft_model}")
    return sft_model, epochs


def reused_warm_start(run: Path) -> Path:
    """The warm-started model of an earlier demo run's folder; a clear error if it has none."""
    model = run / "sft" / "model"
    if not (model / "config.json").is_file():
        raise ValueError(f"warm_start_from: {run} holds no warm-started model (no {model / 'config.json'})")
    return model


class Laps:
    """Wall time between calls, by the name of the phase that ended."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> float:
        now = time.monotonic()
        self.laps[name] = round(now - self.last, 1)
        self.last = now
        return self.laps[name]


def grpo_config(config: DemoConfig, sft_model: Path, summary: SummaryConfig) -> TrainConfig:
    """Step 4 of the demo: its GRPO run's settings, from the warm-started model."""
    return TrainConfig(
        model=sft_model, steps=config.grpo_steps, tasks_per_step=config.tasks_per_step,
        checkpoint_every=config.grpo_steps, learner=LearnerConfig(lr=config.grpo_lr), credit=config.credit,
        mode=config.mode, rollout=phase_rollout(config, "grpo", summary=summary),
    )  # fmt: skip


def summary_budget(sft_model: Path, config: DemoConfig) -> SummaryConfig:
    """The demo's self-summary settings: a budget just above its longest first prompt, so that every
    episode summarizes itself."""
    budget = (
        prompt_tokens(HFPolicy(sft_model), config.rollout.suite, config.rollout.tools)
        + config.summary_margin_tokens
    )  # one tokenizer
    return SummaryConfig(trigger_tokens=budget, max_summary_tokens=32)


def warm_model(config: DemoConfig, console: Console, clock: Laps) -> tuple[Path, list[float]]:
    """Steps 1 and 2 of the demo: a tiny model built and warm-started, or the one an earlier run
    warm-started (`warm_start_from`); the model's folder and the loss of each warm-start epoch."""
    sandbox = config.rollout.sandbox
    if config.warm_start_from is not None:
        sft_model = reused_warm_start(config.warm_start_from)
        console.print(f"[bold]1-2.[/] the tiny model as an earlier run warm-started it: {sft_model}")
        return sft_model, []
    base = build_tiny_model(
        config.out / "base", seed=config.seed, hidden_size=config.hidden_size, layers=config.layers
    )
    console.print(f"[bold]1.[/] built a tiny model and tokenizer in {base}")
    console.print("[bold]2.[/] warm start on right and wrong scripted fixes of the demo tasks")
    sft_model, epochs = warm_start(config, base, sandbox, console)
    console.print(f"   ({clock.lap('warm start'):.0f}s)")
    return sft_model, epochs


def train_grpo(
    config: DemoConfig, sft_model: Path, summary: SummaryConfig, console: Console
) -> tuple[list[float], list[float]]:
    """Step 4 of the demo: GRPO from the warm start, a line per step; the mean reward and the summaries
    per trajectory of each step."""
    rewards: list[float] = []
    summaries: list[float] = []

    def show(step: int, metrics: dict[str, float]) -> None:
        rewards.append(metrics["reward_mean"])
        summaries.append(metrics["summaries_per_trajectory"])
        console.print(
            f"   GRPO step {step + 1:2d}: reward {metrics['reward_mean']:.3f}  pass {metrics['pass_rate']:.3f}  "
            f"summaries/traj {metrics['summaries_per_trajectory']:.2f}  loss {metrics.get('loss', 0.0):+.4f}"
        )

    console.print(
        f"[bold]4.[/] GRPO, {config.grpo_steps} steps, summary budget {summary.trigger_tokens} tokens"
    )
    train(grpo_config(config, sft_model, summary), on_step=show)
    return rewards, summaries


def print_results(
    config: DemoConfig, baseline: RolloutSummary, final: RolloutSummary, console: Console
) -> None:
    """The demo's last lines: both evaluations side by side, and how to inspect the training run."""
    table = Table("policy", "pass rate (demo suite)", "mean reward", title="same evaluation seeds")
    table.add_row("warm start only", f"{baseline.pass_at_1:.3f}", f"{baseline.mean_reward:.3f}")
    table.add_row(
        f"warm start + {config.grpo_steps} GRPO steps", f"{final.pass_at_1:.3f}", f"{final.mean_reward:.3f}"
    )
    console.print(table)
    run = config.out / "grpo"
    console.print(
        f"The training run is in {run} (trajectories, metrics, learner.jsonl, checkpoints; TensorBoard: "
        f"{run / 'tensorboard'}). Inspect it with:\n"
        f"  harness runs {run} --sort reward --desc     # every rollout, one line each\n"
        f"  harness replay {run} --id demo-add/0        # the turns, summaries, diff and grade of one\n"
        f"  harness view {run}                          # the web viewer: tokens, advantages, plots"
    )


def run_training_demo(config: DemoConfig, console: Console | None = None) -> DemoResult:
    console = console or Console()
    clock = Laps()
    config = resolved_backend(config)
    sft_model, epochs = warm_model(config, console, clock)
    summary = summary_budget(sft_model, config)
    console.print("[bold]3.[/] the warm-started model evaluated")
    baseline = evaluate(sft_model, config, summary, "eval-warm-start", console)
    console.print(
        f"   warm start only: pass rate {baseline.pass_at_1:.3f}, mean reward {baseline.mean_reward:.3f} "
        f"({clock.lap('evaluation before'):.0f}s)"
    )
    rewards, summaries = train_grpo(config, sft_model, summary, console)
    console.print(f"   ({clock.lap('GRPO'):.0f}s)")
    final_model = config.out / "grpo" / "checkpoints" / f"step-{config.grpo_steps}" / "model"
    console.print("[bold]5.[/] the trained model evaluated on the same seeds")
    final = evaluate(final_model, config, summary, "eval-grpo", console)
    clock.lap("evaluation after")
    console.print("   time per phase: " + ", ".join(f"{k} {v:.0f}s" for k, v in clock.laps.items()))
    print_results(config, baseline, final, console)
    return DemoResult(
        baseline_pass_rate=baseline.pass_at_1,
        final_pass_rate=final.pass_at_1,
        baseline_reward=baseline.mean_reward,
        final_reward=final.mean_reward,
        rewards=rewards,
        summaries_per_trajectory=summaries,
        warm_start_epochs=len(epochs),
        phase_seconds=clock.laps,
    )
