"""`harness train`, `harness sft` and `harness demo`, their flags made from their settings models
(`TrainConfig`, `SFTConfig`, `DemoConfig`); `harness model tiny` and `harness serve`, the models they
start from."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from harness.commands import Commands
from harness.commands.settings import printed_config, resolved
from harness.config import ConfigError

ROLLOUT_FLAGS = {
    "suite": "rollout.suite", "tasks": "rollout.tasks", "seed": "rollout.seed", "out": "rollout.out",
    "backend": "rollout.sandbox.backend",
}  # fmt: skip
"""The flags of `harness train` and `harness sft` for their most used rollout settings, as `harness
rollout` names them."""


def add_commands(sub: Commands) -> None:
    p = sub.add_parser(
        "train",
        help="GRPO: roll out groups with the current policy, grade, update, repeat",
        settings="harness.training.train:TrainConfig",
        flags={**ROLLOUT_FLAGS, "group-size": "rollout.group_size", "concurrency": "rollout.concurrency"},
    )
    p.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    p.add_argument(
        "--allow-changes",
        action="store_true",
        help="resume with settings other than the run's, on purpose (recorded in RUN/changes.jsonl)",
    )
    p.set_defaults(func=cmd_train)
    p = sub.add_parser(
        "sft",
        help="supervised warm start on gold trajectories of a suite",
        settings="harness.training.sft:SFTConfig",
        flags=ROLLOUT_FLAGS,
    )
    p.set_defaults(func=cmd_sft)
    add_demo_command(sub)
    add_model_command(sub)
    p = sub.add_parser(
        "serve", help="serve a Hugging Face model over an OpenAI-compatible API (token ids in and out)"
    )
    p.add_argument("--model", required=True, help="a Hugging Face model folder")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    p.set_defaults(func=cmd_serve)


def add_demo_command(sub: Commands) -> None:
    p = sub.add_parser(
        "demo",
        help="the main job on built-in defaults: build a tiny model, warm-start it, train it with GRPO",
        settings="harness.training.train_demo:DemoConfig",
        flags={
            "backend": "rollout.sandbox.backend", "group-size": "rollout.group_size",
            "concurrency": "rollout.concurrency",
        },
    )  # fmt: skip
    p.add_argument(
        "--episode",
        action="store_true",
        help="instead: one scripted episode of a built-in task, every tool call and observation shown",
    )
    p.set_defaults(func=cmd_demo)


def add_model_command(sub: Commands) -> None:
    model = sub.add_parser("model", help="make a model folder to serve, roll out or train")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    p = model_sub.add_parser(
        "tiny",
        help="a tiny Qwen2-shaped model from random weights and a tokenizer trained here (no download): "
        "for trying serve, tito:, rollouts and training on a CPU",
    )
    p.add_argument("--out", type=Path, required=True, help="the model folder to write")
    p.add_argument(
        "--seed", type=int, default=0, help="the weights' seed; the same seed gives the same files"
    )
    p.add_argument("--hidden-size", type=int, default=64, help="width of the model (default: 64)")
    p.add_argument("--layers", type=int, default=2, help="transformer layers (default: 2)")
    p.set_defaults(func=cmd_model_tiny)


def cmd_model_tiny(args: argparse.Namespace) -> int:
    from policies.tiny import build_tiny_model

    if args.out.exists() and any(args.out.iterdir()):
        raise ConfigError(f"--out {args.out}: not empty; a model is written only into a new or empty folder")
    try:
        path = build_tiny_model(args.out, seed=args.seed, hidden_size=args.hidden_size, layers=args.layers)
    except ValueError as e:
        raise ConfigError(f"harness model tiny: {e}") from e
    print(f"{path}: a tiny model (random weights, {args.layers} layers, width {args.hidden_size}). Try:")
    print(f"  harness serve --model {path} --port 8000")
    print(f"  harness rollout --policy hf:{path} --suite demo --out runs/tiny-rollout")
    print(f"  harness train --config examples/train.yaml model={path}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from harness.serve import serve

    if not Path(args.model).is_dir():
        raise SystemExit(f"harness serve: --model {args.model}: not a model folder")
    serve(args.model, host=args.host, port=args.port)
    return 0


def check_model_folder(model: Path, config: Path | None) -> None:
    if not model.is_dir():
        where = f"config {config}" if config else "config"
        raise ConfigError(f"{where}: model: {model} is not a folder (a Hugging Face model folder is needed)")


def cmd_train(args: argparse.Namespace) -> int:
    from harness.training.checkpoint import latest_checkpoint
    from harness.training.continuation import check_continues, resume_command
    from harness.training.train import TrainConfig, train

    config = resolved(args, TrainConfig)
    if args.print_config:
        return printed_config(config)
    check_model_folder(config.model, args.config)
    console = Console(stderr=True)
    for change in check_continues(config, config.rollout.out, args.resume, args.allow_changes):
        console.print(f"changed on purpose (recorded in {config.rollout.out / 'changes.jsonl'}): {change}")

    def show(step: int, metrics: dict[str, float]) -> None:
        console.print(
            f"step {step + 1}/{config.steps}: reward {metrics['reward_mean']:.3f} pass {metrics['pass_rate']:.3f} "
            f"loss {metrics.get('loss', 0.0):+.4f} grad {metrics.get('grad_norm', 0.0):.3f} "
            f"rollout {metrics['time_rollout_s']:.1f}s learn {metrics['time_learn_s']:.1f}s"
        )

    out = config.rollout.out
    try:
        train(config, resume=args.resume, on_step=show)
    except KeyboardInterrupt:
        saved = latest_checkpoint(out / "checkpoints")
        where = f"its last checkpoint is {saved}" if saved else "it has no checkpoint yet"
        go_on = resume_command(sys.argv[1:])
        print(f"interrupted: {out} keeps what was done, and {where}; go on with: {go_on}", file=sys.stderr)
        return 130
    console.print(f"metrics: {out / 'metrics.jsonl'}; checkpoints: {out / 'checkpoints'}")
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from harness.training.continuation import check_fresh
    from harness.training.sft import SFTConfig, run_sft

    config = resolved(args, SFTConfig)
    if args.print_config:
        return printed_config(config)
    check_model_folder(config.model, args.config)
    check_fresh(
        config.rollout.out, ["model"], "a warm-started model (model/)",
        "choose another out (its demonstrations are reused from the same folder only while model/ is not there)",
    )  # fmt: skip
    console = Console(stderr=True)
    model = run_sft(
        config, on_step=lambda step, m: console.print(f"sft step {step + 1}: loss {m['loss']:.4f}")
    )
    console.print(f"warm-started model: {model}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from harness.training import train_demo
    from harness.training.continuation import check_fresh

    config = resolved(args, train_demo.DemoConfig)
    if args.print_config:
        return printed_config(config)
    if args.episode:
        from harness.demo import run_demo

        return run_demo(config.rollout.sandbox.backend)
    check_fresh(
        config.out, ["*"], "a run",
        f"pass --out {config.out}-2 (or another new folder); warm_start_from={config.out} reuses its warm start",
    )  # fmt: skip
    result = train_demo.run_training_demo(config)
    if result.final_pass_rate > result.baseline_pass_rate:
        return 0
    Console(stderr=True).print(
        f"The pass rate did not rise ({result.baseline_pass_rate:.3f} after the warm start, "
        f"{result.final_pass_rate:.3f} after GRPO), so the demo exits 1. With few steps and samples a run "
        "can miss: the defaults (`harness demo`) rose on 10 of 10 seeds; more `grpo_steps` or "
        "`group_size` help. The run folder above holds every rollout to look at."
    )
    return 1
