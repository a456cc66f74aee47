"""OpenAIChatPolicy (and LiteLLMChatPolicy) against the chat endpoint of `harness serve` on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.serve import create_app, running
from policies.base import SamplingParams
from policies.chat_format import ChatFormat
from policies.hf import HFPolicy
from policies.openai_chat import OpenAIChatPolicy
from policies.spec import make_policy

MODEL = "tiny"
MESSAGES = [
    {"role": "system", "content": "You are a careful coding agent."},
    {"role": "user", "content": "Fix it."},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def url(tiny_model_path: Path) -> Iterator[str]:
    with running(create_app(HFPolicy(tiny_model_path), model_name=MODEL)) as base_url:
        yield base_url


def test_reply_carries_the_text_and_the_usage(url: str, tiny_policy: HFPolicy) -> None:
    policy = make_policy(f"openai:{MODEL}@{url}")
    assert isinstance(policy, OpenAIChatPolicy) and policy.kind == "chat"
    params = SamplingParams(max_new_tokens=12, seed=5)
    reply = policy.respond(MESSAGES, TOOLS, params)

    prompt = ChatFormat(tiny_policy.tokenizer, tiny_policy.stop_ids()).prompt_ids(MESSAGES, TOOLS)
    expected = tiny_policy.generate(prompt, params)
    assert reply.prompt_tokens == len(prompt)
    assert reply.completion_tokens == len(expected.ids)
    assert reply.finish_reason == ("tool_calls" if reply.tool_calls else expected.finish_reason)  # length too
    assert reply.content == tiny_policy.tokenizer.decode(expected.ids, skip_special_tokens=True).strip()
    assert policy.respond(MESSAGES, TOOLS, params) == reply


def test_litellm_policy_speaks_to_the_same_server(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's URL is part of the spec (litellm's `api_base`); no environment variable names it."""
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    openai = OpenAIChatPolicy(MODEL, url).respond(MESSAGES, [], SamplingParams(max_new_tokens=6, seed=3))
    policy = make_policy(f"litellm:openai/{MODEL}@{url}")
    assert policy.kind == "chat" and policy.spec == f"litellm:openai/{MODEL}@{url}"
    reply = policy.respond(MESSAGES, [], SamplingParams(max_new_tokens=6, seed=3))
    assert reply == openai


def test_chat_episodes_record_messages_and_usage_and_are_not_trainable(url: str, tmp_path: Path) -> None:
    from harness.rollouts.config import RolloutConfig
    from harness.rollouts.local import rollout
    from harness.rollouts.store import RunStore

    suite = Path(__file__).parents[1] / "data" / "suites" / "mini"
    config = RolloutConfig.model_validate(
        {
            "suite": str(suite),
            "policy": f"openai:{MODEL}@{url}",
            "out": str(tmp_path / "run"),
            "loop": {"max_turns": 2},
            "sampling": {"max_new_tokens": 16},
            "sandbox": {"backend": "bwrap"},
        }
    )
    rollout(config)
    (trajectory,) = RunStore(config.out).trajectories()
    assert not trajectory.trainable and trajectory.status == "limit"
    turns = trajectory.segments[0].turns
    assert len(turns) == 2 and all(t.prompt_tokens > 0 and t.completion_tokens > 0 for t in turns)
    roles = [m["role"] for m in trajectory.segments[0].messages]
    assert roles[:3] == ["system", "user", "assistant"] and not turns[0].generated_ids


def test_litellm_needs_no_key_for_a_server_of_ones_own(url: str, tmp_path: Path) -> None:
    """Issue 34, item 2: with no OPENAI_API_KEY, litellm refused to call a local server that needs none;
    a rollout through the command line then ended every episode in infra_error."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LITELLM_"))}
    suite = Path(__file__).parents[1] / "data" / "suites" / "mini"
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "rollout", "--suite", str(suite), "--policy",
         f"litellm:openai/{MODEL}@{url}", "--backend", "bwrap", "--out", str(out), "--json",
         "loop.max_turns=2", "sampling.max_new_tokens=8"],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["trajectories"] >= 1 and "infra_error" not in summary["statuses"], summary


def test_a_failing_litellm_call_says_why_and_its_episodes_run_again(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """Issue 34, item 2: litellm's retries need tenacity, which litellm does not install (the episode
    said "tenacity import failed", only in `replay`); the summary now names the error, and running the
    same command again runs the failed episodes again instead of printing 0/0."""
    import socket as sockets

    from harness.rollouts.config import RolloutConfig
    from harness.rollouts.local import rollout

    with sockets.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    suite = Path(__file__).parents[1] / "data" / "suites" / "mini"
    config = RolloutConfig.model_validate(
        {
            "suite": str(suite), "policy": f"litellm:openai/{MODEL}@http://127.0.0.1:{port}/v1",
            "out": str(tmp_path / "run"), "loop": {"max_turns": 2}, "sampling": {"max_new_tokens": 8},
            "sandbox": {"backend": "bwrap"},
        }
    )  # fmt: skip
    failed = rollout(config)
    assert failed.statuses == {"infra_error": failed.trajectories}, failed
    (said,) = failed.failure_examples.values()
    assert "tenacity" not in said and "Connection" in said, said  # litellm's own error, not a missing import
    with running(create_app(HFPolicy(tiny_model_path), model_name=MODEL), port=port):
        again = rollout(config)
    assert again.trajectories == failed.trajectories and "infra_error" not in again.statuses, again
    lines = (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 2 * failed.trajectories  # the failed tries are kept, before the new ones
