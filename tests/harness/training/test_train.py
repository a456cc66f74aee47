"""`harness train` on a real tiny model: metrics and checkpoints are written, and resume changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from harness.rollouts.config import ClusterConfig
from harness.rollouts.store import RunStore
from harness.serve import create_app, running
from harness.training.checkpoint import latest_checkpoint
from harness.training.distributed import Processes
from harness.training.train import CpuThreads, TrainConfig, sampler_options, thread_split, train
from policies.base import SamplingParams
from policies.cpu_threads import async_sampler_threads, host_cores
from policies.hf import HFPolicy
from policies.tito import TitoPolicy
from tests.harness.test_cli import harness

MINI = Path(__file__).parents[2] / "data" / "suites" / "mini"


def config(model: Path, out: Path, steps: int) -> TrainConfig:
    return TrainConfig.model_validate(
        {
            "model": str(model),
            "steps": steps,
            "tasks_per_step": 1,
            "rollout": {
                "suite": str(MINI),
                "out": str(out),
                "group_size": 3,
                "concurrency": 2,
                "loop": {"max_turns": 3},
                "sampling": {"max_new_tokens": 16, "temperature": 1.0},
                "sandbox": {"backend": "bwrap"},
            },
            # Rewards are all 0 for a random model; the entropy term makes the update non-zero anyway.
            "learner": {"lr": 1e-3, "entropy_coef": 0.01},
        }
    )


def weights(run: Path) -> dict[str, torch.Tensor]:
    checkpoint = latest_checkpoint(run / "checkpoints")
    assert checkpoint is not None
    return load_file(str(checkpoint / "model" / "model.safetensors"))


def without_timings(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if not k.startswith("time_")}


def test_a_resumed_run_equals_an_uninterrupted_one(tiny_model_path: Path, tmp_path: Path) -> None:
    """Bit for bit, with generations sampled one at a time (`sampler_batch=1`): batched, which episodes
    share a decode step depends on timing, and log-probs agree to float rounding only."""

    def one_at_a_time(out: Path, steps: int) -> TrainConfig:
        return config(tiny_model_path, out, steps).model_copy(update={"sampler_batch": 1})

    straight = train(one_at_a_time(tmp_path / "straight", 3))
    first = train(one_at_a_time(tmp_path / "resumed", 2))
    rest = train(one_at_a_time(tmp_path / "resumed", 3), resume=True)
    assert len(first) == 2 and len(rest) == 1  # the resumed run only ran the missing step
    assert [without_timings(m) for m in straight] == [without_timings(m) for m in first + rest]
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = load_file(str(tiny_model_path / "model.safetensors"))
    assert any(not torch.equal(a[k], start[k]) for k in a)  # and training did change the weights
    lines = (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2]


def test_train_writes_metrics_tensorboard_checkpoints_and_versions(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    (tmp_path / "train.yaml").write_text(config(tiny_model_path, out, 2).model_dump_json())
    proc = harness("train", "--config", str(tmp_path / "train.yaml"), "learner.clip_high=0.3", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 2/2: reward" in proc.stderr
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for key in ("reward_mean", "pass_rate", "advantage_abs_mean", "loss", "clip_fraction", "approx_kl",
                "is_abs_log_ratio_mean", "is_truncated_fraction", "grad_norm", "tokens_total",
                "summaries_per_trajectory", "time_rollout_s", "time_learn_s"):  # fmt: skip
        assert key in metrics[-1], key
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    for step in (1, 2):
        checkpoint = out / "checkpoints" / f"step-{step}"
        assert {p.name for p in checkpoint.iterdir()} >= {"model", "optimizer.pt", "rng.pt", "trainer.json"}
    versions = set()
    for line in (out / "trajectories.jsonl").read_text().splitlines():
        trajectory = json.loads(line)
        versions.add(trajectory["policy_version"])
        assert trajectory["group_id"].endswith(f"@v{trajectory['policy_version']}")
    assert versions == {0, 1}  # step 2 sampled with the weights of step 1
    # learner.jsonl: per trained segment, the learner's log-prob of each model-produced token; on-policy
    # (ratio 1), so they match the sampler's log-probs of the same tokens.
    trajectories = {
        t["id"]: t for t in map(json.loads, (out / "trajectories.jsonl").read_text().splitlines())
    }
    learned = [json.loads(line) for line in (out / "learner.jsonl").read_text().splitlines()]
    assert {line["step"] for line in learned} == {0, 1}
    for line in learned:
        segment = trajectories[line["trajectory_id"]]["segments"][line["segment"]]
        sampled = [lp for turn in segment["turns"] for lp in turn["logprobs"]]
        assert len(line["learner_logprobs"]) == len(sampled)
        assert max(abs(a - b) for a, b in zip(line["learner_logprobs"], sampled, strict=True)) < 1e-3


def test_bad_train_config_names_the_field(tmp_path: Path) -> None:
    proc = harness("train", f"model={tmp_path}", "learner.lrr=1")
    assert proc.returncode == 2 and "learner.lrr" in proc.stderr


def test_a_server_samples_and_reloads_every_steps_weights(tiny_model_path: Path, tmp_path: Path) -> None:
    """Rollouts sampled by `harness serve` on loopback; after each step it loads the learner's new weights.
    The OPSD teacher scores on the same server (`credit.teacher_via: server`)."""
    from harness.training.teacher import CreditConfig

    out = tmp_path / "run"
    served = HFPolicy(tiny_model_path)  # starts with other weights: train() must load the run's own
    served.load_state_dict({k: v + 0.01 for k, v in served.model.state_dict().items()}, version=7)
    with running(create_app(served, model_name="tiny", max_model_len=4096)) as url:
        spec = f"tito:tiny@{url}"
        credit = CreditConfig(mode="outcome+opsd", teacher_via="server")
        run = config(tiny_model_path, out, 2).model_copy(update={"sampler": spec, "credit": credit})
        history = train(run)
        sampler = TitoPolicy("tiny", url, tokenizer_path=str(tiny_model_path))
        assert sampler.version == 2
        prompt = sampler.tokenizer.encode("def add(a, b):")
        greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
        remote = sampler.generate(prompt, greedy)
    lines = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert {t["policy_version"] for t in lines} == {0, 1} and {t["policy"] for t in lines} == {spec}
    assert [p.name for p in (out / "weights").iterdir()] == ["step-2"]
    final = latest_checkpoint(out / "checkpoints")
    assert final is not None and final.name == "step-2"
    local = HFPolicy(final / "model").generate(prompt, greedy)
    assert remote.ids == local.ids and remote.policy_version == 2
    assert max(abs(a - b) for a, b in zip(remote.logprobs, local.logprobs, strict=True)) < 1e-4
    assert all("credit_gap_mean" in step for step in history)
    records = [json.loads(line) for line in (out / "learner.jsonl").read_text().splitlines()]
    assert records and all(r["teacher_logprobs"] for r in records)


def test_the_sampler_must_be_a_token_server(tmp_path: Path) -> None:
    proc = harness("train", f"model={tmp_path}", "sampler=hf:/x")
    assert proc.returncode == 2 and "token server" in proc.stderr


def test_opsd_credit_trains_on_header_free_rows_with_dense_advantages(
    tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`credit.mode: outcome+opsd`: every row the learner gets is a trajectory segment's own ids (the
    privileged header in none of them), with a per-token advantage; the step logs the signal."""
    from harness.training.credit import privileged_header
    from harness.training.learner import Learner
    from harness.training.teacher import CreditConfig
    from policies.hf import HFPolicy
    from tasks.suite import load_suite

    trained: list[Any] = []
    step = Learner.grpo_step

    def recording(self: Learner, rows: Any) -> dict[str, float]:
        trained.extend(rows)
        return step(self, rows)

    monkeypatch.setattr(Learner, "grpo_step", recording)
    credit = CreditConfig(mode="outcome+opsd", privileged=["gold_patch", "hidden_tests"])
    run = config(tiny_model_path, tmp_path / "run", 1).model_copy(update={"credit": credit})
    (metrics,) = train(run)
    assert {"credit_gap_mean", "credit_gap_p95", "credit_clipped_fraction"} <= set(metrics)
    assert (
        0 < metrics["time_credit_s"] < metrics["time_learn_s"]
    )  # the teacher's pass, inside the learner's time
    segments = {
        (t.id, s.index): s.ids_and_mask()[0]
        for t in RunStore(tmp_path / "run").trajectories()
        for s in t.segments
    }
    tokenizer = HFPolicy(tiny_model_path).tokenizer
    headers = [tokenizer.encode(privileged_header(t, run.credit.privileged)) for t in load_suite(str(MINI))]
    assert trained
    for row in trained:
        assert row.source is not None and row.ids == segments[row.source]
        assert row.token_advantages is not None and len(row.token_advantages) == len(row.ids) - 1
        for header in headers:
            window = header[:32]
            assert not any(row.ids[i : i + len(window)] == window for i in range(len(row.ids)))
    # learner.jsonl keeps what the teacher said and what each token was trained with, for the viewer.
    from harness.inspection.viewer import Decoder, learner_records, token_view

    records = learner_records(tmp_path / "run")
    by_row = {row.source: row for row in trained}
    assert records.keys() == by_row.keys()
    for source, record in records.items():
        row, model_tokens = by_row[source], sum(by_row[source].mask[1:])
        assert record.teacher_logprobs is not None and len(record.teacher_logprobs) == model_tokens
        assert record.token_advantages is not None and len(record.token_advantages) == model_tokens
        on_mask = [v for v, m in zip(row.token_advantages or [], row.mask[1:], strict=True) if m]
        assert record.token_advantages == pytest.approx(on_mask, abs=1e-5)
    trajectory = {t.id: t for t in RunStore(tmp_path / "run").trajectories()}
    source, record = next(iter(records.items()))
    view, note = token_view(trajectory[source[0]].segments[source[1]], record, Decoder(None))
    assert note is None and view.teacher_logprobs is not None and view.token_advantages is not None
    assert [v for v in view.teacher_logprobs if v is not None] == record.teacher_logprobs


def test_groups_that_all_failed_get_hint_rollouts_outside_their_baseline(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """`credit.hint_rollouts: 2`: the random tiny model fails every rollout, so each step's group gets two
    more rollouts of its task with the privileged header (`TASK.hint`), saved with the run; the step's
    reward statistics are of the group's own rollouts only."""
    from pydantic import ValidationError

    from harness.training.teacher import CreditConfig

    out = tmp_path / "run"
    run = config(tiny_model_path, out, 2).model_copy(update={"credit": CreditConfig(hint_rollouts=2)})
    history = train(run)
    trajectories = list(RunStore(out).trajectories())
    hints = [t for t in trajectories if t.task_id.endswith(".hint")]
    own = [t for t in trajectories if not t.task_id.endswith(".hint")]
    assert all(t.grade is not None and t.grade.correct == 0 for t in own)  # every group failed
    assert [step["hint_rollouts"] for step in history] == [2.0, 2.0] and len(hints) == 4
    assert sorted(t.sample_index for t in hints) == [0, 1, 2, 3] and len(own) == 2 * 3
    assert all(step["hint_success_rate"] == 0.0 and step["hint_share"] == 0.0 for step in history)
    for step, version in zip(history, (0, 1), strict=True):  # the step's statistics: its own group only
        rewards = [t.reward for t in own if t.policy_version == version]
        assert step["reward_mean"] == pytest.approx(sum(rewards) / len(rewards))
    # An export of the run's trajectories holds the student's own only: the hints' prompts had the fix.
    from harness.inspection.export import export
    from harness.inspection.runs import Selection

    exported = [json.loads(line) for line in export(out, "jsonl", Selection()).path.read_text().splitlines()]
    assert len(exported) == len(own) and not any(r["task_id"].endswith(".hint") for r in exported)
    with pytest.raises(ValidationError, match="mode: sync"):
        TrainConfig.model_validate(
            {"model": str(tiny_model_path), "mode": "async", "credit": {"hint_rollouts": 1}}
        )


def test_async_takes_the_ratio_against_the_sampler_unless_the_learner_says_otherwise(tmp_path: Path) -> None:
    """In `mode: async` the clip must see the staleness: the default learner's ratio is against the
    sampler's log-probs; a learner that names `ratio_against` or `importance` keeps what it named, and
    `sync` keeps the learner's defaults."""
    base = {"model": str(tmp_path)}
    plain = TrainConfig.model_validate({**base, "mode": "async", "learner": {"lr": 1e-5}}).learner
    assert (plain.ratio_against, plain.importance, plain.lr) == ("sampler", "none", 1e-5)
    saved = TrainConfig.model_validate({**base, "mode": "async"}).model_dump(mode="json")
    assert TrainConfig.model_validate(saved).learner.ratio_against == "sampler"  # a resume reads the same
    chosen = TrainConfig.model_validate({**base, "mode": "async", "learner": {"importance": "mask"}}).learner
    assert (chosen.ratio_against, chosen.importance) == ("learner", "mask")
    sync = TrainConfig.model_validate(base).learner
    assert (sync.ratio_against, sync.importance) == ("learner", "truncate")


def test_the_learner_and_the_sampler_get_their_thread_counts(tiny_model_path: Path, tmp_path: Path) -> None:
    """`threads` reaches each side on a one-process CPU run; the async default leaves the learner cores;
    a GPU, torchrun or a sampler server leaves torch's counts alone."""
    cpu = Processes(rank=0, world=1, device=torch.device("cpu"))
    run = config(tiny_model_path, tmp_path / "run", 1)
    assert thread_split(run, cpu) == (None, None)  # sync: each side takes every core
    share = async_sampler_threads(host_cores())
    assert thread_split(run.model_copy(update={"mode": "async"}), cpu) == (
        max(1, host_cores() - share),
        share,
    )
    split = run.model_copy(update={"threads": CpuThreads(learner=3, sampler=2)})
    assert thread_split(split, cpu) == (3, 2)
    assert sampler_options(split, cpu)["threads"] == 2
    assert thread_split(split, Processes(rank=0, world=1, device=torch.device("cuda"))) == (None, None)
    assert thread_split(split, Processes(rank=0, world=2, device=torch.device("cpu"))) == (None, None)
    served = split.model_copy(update={"sampler": "tito:m@http://127.0.0.1:1/v1"})
    assert thread_split(served, cpu) == (None, None)
    on_ray = split.model_copy(
        update={"rollout": split.rollout.model_copy(update={"cluster": ClusterConfig(address="auto")})}
    )
    assert thread_split(on_ray, cpu) == (None, None)

    seen: list[int] = []
    before = torch.get_num_threads()
    train(split, on_step=lambda _step, _metrics: seen.append(torch.get_num_threads()))
    assert seen == [3]  # the step learned on this thread with the learner's count
    assert torch.get_num_threads() == before
