"""`harness sft` on a real tiny model: rows are the chat template's own rendering, and the loss falls."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from envs.sandbox import SandboxConfig
from harness.rollouts.config import RolloutConfig
from harness.rollouts.store import RunStore
from harness.training.credit import HEADER_TITLE, privileged_header
from harness.training.critique import CRITIC_ASK, named_turn
from harness.training.learner import LearnerConfig, Row
from harness.training.sft import SFTConfig, demo_critique, demonstration_rows, run_sft, segment_row
from harness.training.teacher import header_ids, teacher_logprobs
from policies.chat_format import ChatFormat, assistant_text
from policies.hf import HFPolicy
from summarizer import SummaryConfig
from tasks.suite import load_suite
from tests.conftest import require_backend
from tools import Toolbox

MINI = Path(__file__).parents[2] / "data" / "suites" / "mini"


def test_sft_rows_render_the_conversation_exactly_and_training_lowers_the_loss(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    require_backend("bwrap")
    losses: list[float] = []
    config = SFTConfig(
        model=tiny_model_path, scripts=["gold"], epochs=6, rows_per_step=4, learner=LearnerConfig(lr=3e-3),
        rollout=RolloutConfig(
            suite=str(MINI), out=tmp_path / "sft", sandbox=SandboxConfig(backend="bwrap"),
            summary=SummaryConfig(trigger_tokens=64, max_summary_tokens=32),
        ),
    )  # fmt: skip
    model = run_sft(config, on_step=lambda _, metrics: losses.append(metrics["loss"]))
    assert (model / "model.safetensors").is_file() and (model / "tokenizer.json").is_file()
    assert sum(losses[-2:]) < 0.8 * sum(losses[:2]), losses

    policy = HFPolicy(tiny_model_path)
    fmt = ChatFormat(policy.tokenizer, policy.stop_ids())
    task = load_suite(str(MINI))[0]
    tools = Toolbox.for_task(task).schemas()
    trajectories = list(RunStore(tmp_path / "sft" / "demonstrations" / "gold").trajectories())
    segments = [segment for t in trajectories for segment in t.segments]
    assert len(segments) > 1  # the budget made the demonstrations summarize, and summaries are rows too
    for segment in segments:
        row = segment_row(segment.messages, tools, fmt)
        as_text = [
            {"role": "assistant", "content": assistant_text(m)} if m["role"] == "assistant" else m
            for m in segment.messages
        ]
        rendered = policy.tokenizer.apply_chat_template(  # type: ignore[attr-defined]
            as_text, tokenize=False, add_generation_prompt=False, tools=tools
        )
        assert policy.tokenizer.decode(row.ids, skip_special_tokens=False) == rendered
        trained = [i for i, m in zip(row.ids, row.mask, strict=True) if m]
        expected = "".join(f"{m['content']}<|im_end|>" for m in as_text if m["role"] == "assistant")
        assert policy.tokenizer.decode(trained, skip_special_tokens=False) == expected


def test_header_demonstrations_sit_where_the_teacher_and_a_hint_rollout_read_the_header_and_are_learnt(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """`header_scripts`: the right fix again after the header (mask 0 on it) and in the statement;
    `repeats`: the wrong fix twice. Trained, the model reads the header: after it, the right fix's
    tokens gain log-prob and the wrong fix's lose it, while without it the model writes either."""
    require_backend("bwrap")
    config = SFTConfig(
        model=tiny_model_path, scripts=["gold-min", "decoy"], solved_only=False, repeats={"decoy": 2},
        header_scripts=["gold-min"], epochs=150, target_loss=0.01, rows_per_step=4,
        learner=LearnerConfig(lr=3e-3),
        rollout=RolloutConfig(
            suite="demo", tasks=["demo-add"], out=tmp_path / "sft", sandbox=SandboxConfig(backend="bwrap"),
            summary=SummaryConfig(trigger_tokens=64, max_summary_tokens=32),
        ),
    )  # fmt: skip
    model = run_sft(config)
    policy = HFPolicy(model)
    fmt = ChatFormat(policy.tokenizer, policy.stop_ids())
    (task,) = [t for t in load_suite("demo") if t.id == "demo-add"]
    tools = Toolbox.for_task(task).schemas()

    def demonstrated(script: str) -> list[Row]:
        return [
            segment_row(segment.messages, tools, fmt)
            for t in RunStore(config.rollout.out / "demonstrations" / script).trajectories()
            for segment in t.segments
        ]

    right, hinted, wrong = demonstrated("gold-min"), demonstrated("gold-min.hint"), demonstrated("decoy")
    rows = demonstration_rows(config, [task], policy.tokenizer, fmt)  # from the demonstrations' folders
    assert right and len(rows) == 2 * len(right) + len(hinted) + 2 * len(wrong)
    header = header_ids(policy.tokenizer, task, ["gold_patch"])
    for own, after in zip(right, rows[len(right) : 2 * len(right)], strict=True):
        assert after.ids == [*header, *own.ids] and after.mask == [0] * len(header) + own.mask
    in_statement = rows[2 * len(right)]
    assert privileged_header(task, ["gold_patch"]).strip() in policy.tokenizer.decode(in_statement.ids)
    assert not any(HEADER_TITLE in policy.tokenizer.decode(r.ids) for r in [*rows[: len(right)], *wrong])
    written = [[i for i, m in zip(r.ids, r.mask, strict=True) if m] for r in (in_statement, right[0])]
    assert written[0] == written[1]  # the same fix, written after the header in the statement

    def gap(row: Row) -> float:
        """log p(row | header) - log p(row), summed over the row's trained tokens."""
        (teacher,) = teacher_logprobs(policy.model, header, [row], 1.0, torch.device("cpu"))
        (student,) = teacher_logprobs(policy.model, [], [row], 1.0, torch.device("cpu"))
        return sum(teacher) - sum(student)

    # Learnt, the right fix's first segment gains about ln 3 after the header, the wrong one's loses more.
    assert gap(right[0]) > 0.5 and gap(wrong[0]) < -0.5, (gap(right[0]), gap(wrong[0]))


def test_critic_demonstrations_name_the_wrong_edit_s_turn_and_train_only_the_critique(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """`critic_scripts`: each failed wrong-fix demonstration gives one more row, the critic's prompt of it
    (mask 0) and a critique (mask 1) whose `Turn N:` is the turn of its edit, as `named_turn` reads it,
    and which holds the gold patch's edit; the solved right fixes give none."""
    require_backend("bwrap")
    config = SFTConfig(
        model=tiny_model_path, scripts=["gold", "decoy-explore"], solved_only=False,
        critic_scripts=["decoy-explore"],
        rollout=RolloutConfig(
            suite="demo", tasks=["demo-add", "demo-area"], out=tmp_path / "sft",
            sandbox=SandboxConfig(backend="bwrap"),
            summary=SummaryConfig(trigger_tokens=64, max_summary_tokens=32),
        ),
    )  # fmt: skip
    policy = HFPolicy(tiny_model_path)
    fmt = ChatFormat(policy.tokenizer, policy.stop_ids())
    tasks = [t for t in load_suite("demo") if t.id in ("demo-add", "demo-area")]
    rows = demonstration_rows(config, tasks, policy.tokenizer, fmt)
    critics = [r for r in rows if CRITIC_ASK in policy.tokenizer.decode(r.ids)]
    wrong = list(RunStore(config.rollout.out / "demonstrations" / "decoy-explore").trajectories())
    assert len(critics) == len(wrong) == 2 and all(t.grade and t.grade.correct == 0.0 for t in wrong)
    for t, row in zip(sorted(wrong, key=lambda t: t.task_id), critics, strict=True):
        (task,) = [k for k in tasks if k.id == t.task_id]
        turns = [turn for segment in t.segments for turn in segment.turns]
        written = policy.tokenizer.decode([i for i, m in zip(row.ids, row.mask, strict=True) if m])
        assert written == f"{demo_critique(task, t)}<|im_end|>"
        n = named_turn(written, len(turns))
        assert n is not None and turns[n].tool_call is not None and turns[n].tool_call.name == "edit"
        assert turns[n].tool_call.arguments["new_str"].strip() == "pass"
        assert next(line[1:] for line in task.gold_patch.splitlines() if line.startswith("+ ")) in written
        assert row.mask.index(1) == len(row.ids) - sum(row.mask)  # the prompt untrained, the critique trained


def test_repeats_and_header_scripts_name_scripts_of_the_run(tmp_path: Path) -> None:
    for scripts, bad in (
        (["decoy"], {"repeats": {"gold": 2}}),
        (["gold"], {"header_scripts": ["decoy"]}),
        (["gold"], {"critic_scripts": ["decoy"]}),
        (["gold", "decoy"], {"critic_scripts": ["gold"]}),
        (["decoy"], {"repeats": {"decoy": 0}}),
    ):
        with pytest.raises(ValueError, match=r"repeats|header_scripts|critic_scripts"):
            SFTConfig.model_validate({"model": tmp_path, "scripts": scripts, **bad})


def test_the_rollout_settings_nest_and_the_older_flat_form_still_reads(tmp_path: Path) -> None:
    """SFTConfig holds a RolloutConfig; a file written when it listed the rollout settings itself (with
    `loop.bash_enabled`, older still) reads to the same settings."""
    flat = SFTConfig.model_validate(
        {"model": tmp_path, "suite": "demo", "tasks": ["demo-add"], "out": "runs/x", "seed": 3,
         "loop": {"max_turns": 5, "bash_enabled": False}, "summary": {"trigger_tokens": 64},
         "sandbox": {"backend": "bwrap"}, "tools": {"max_observation_chars": 5000}}
    )  # fmt: skip
    nested = SFTConfig.model_validate(
        {"model": tmp_path, "rollout": {
            "suite": "demo", "tasks": ["demo-add"], "out": "runs/x", "seed": 3, "loop": {"max_turns": 5},
            "summary": {"trigger_tokens": 64}, "sandbox": {"backend": "bwrap"},
            "tools": {"bash_enabled": False, "max_observation_chars": 5000}}}
    )  # fmt: skip
    assert flat == nested and nested.rollout.concurrency == 2
    assert SFTConfig(model=tmp_path).rollout.out == Path("runs/sft")
