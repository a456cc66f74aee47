"""`harness sft` on a real tiny model: rows are the chat template's own rendering, and the loss falls."""

from __future__ import annotations

from pathlib import Path

from envs.sandbox import SandboxConfig
from harness.rollouts.store import RunStore
from harness.training.learner import LearnerConfig
from harness.training.sft import SFTConfig, run_sft, segment_row
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
        model=tiny_model_path, suite=str(MINI), out=tmp_path / "sft", scripts=["gold"], epochs=6,
        rows_per_step=4, summary=SummaryConfig(trigger_tokens=64, max_summary_tokens=32),
        sandbox=SandboxConfig(backend="bwrap"), learner=LearnerConfig(lr=3e-3),
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
