"""TitoPolicy through `harness serve` on loopback: the same Generation as the model sampled in-process."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.serve import create_app, running
from policies.base import SamplingParams
from policies.chat_format import ChatFormat
from policies.hf import HFPolicy
from policies.spec import make_policy
from policies.tito import SamplerError, TitoPolicy, read_completion

MESSAGES = [
    {"role": "system", "content": "You are a careful coding agent."},
    {"role": "user", "content": "Fix it."},
]


@pytest.fixture(scope="module")
def url(tiny_model_path: Path) -> Iterator[str]:
    with running(create_app(HFPolicy(tiny_model_path), model_name=str(tiny_model_path))) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def tito(tiny_model_path: Path, url: str) -> TitoPolicy:
    policy = make_policy(f"tito:{tiny_model_path}@{url}")
    assert isinstance(policy, TitoPolicy)
    return policy


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0)])
def test_generation_through_the_server_equals_the_local_one(
    tito: TitoPolicy, tiny_policy: HFPolicy, temperature: float, top_p: float
) -> None:
    prompt = ChatFormat(tito.tokenizer, tito.stop_ids()).prompt_ids(MESSAGES, None)
    params = SamplingParams(max_new_tokens=20, temperature=temperature, top_p=top_p, seed=11)
    remote = tito.generate(prompt, params)
    local = tiny_policy.generate(prompt, params)
    assert remote.ids == local.ids
    assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-6)
    assert (remote.finish_reason, remote.policy_version) == (local.finish_reason, local.policy_version)


def test_tokenizer_and_stop_ids_match_the_served_model(tito: TitoPolicy, tiny_policy: HFPolicy) -> None:
    assert tito.stop_ids() == tiny_policy.stop_ids()
    text = "<|im_start|>user\nread x.py<|im_end|>\n"
    assert tito.tokenizer.encode(text, add_special_tokens=False) == tiny_policy.tokenizer.encode(
        text, add_special_tokens=False
    )


def test_version_follows_the_weights_the_server_loads(tiny_model_path: Path) -> None:
    with running(create_app(HFPolicy(tiny_model_path), model_name="tiny")) as base_url:
        tito = TitoPolicy("tiny", base_url, tokenizer_path=str(tiny_model_path))
        assert tito.version == 0
        loaded = httpx.post(f"{base_url}/load_weights", json={"path": str(tiny_model_path), "version": 5})
        assert loaded.json() == {"ok": True, "version": 5}
        assert tito.version == 5
        assert tito.generate([5, 6], SamplingParams(max_new_tokens=2)).policy_version == 5


def test_a_refused_request_is_not_retried(tiny_model_path: Path, url: str) -> None:
    tito = TitoPolicy("no-such-model", url, tokenizer_path=str(tiny_model_path), max_retries=5)
    with pytest.raises(SamplerError, match=r"HTTP 404.*no-such-model"):
        tito.generate([5, 6], SamplingParams(max_new_tokens=2))


def test_an_unreachable_server_is_a_sampler_error(tiny_model_path: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago and that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tito = TitoPolicy(
        "tiny", f"http://127.0.0.1:{port}/v1", tokenizer_path=str(tiny_model_path), max_retries=1
    )
    with pytest.raises(SamplerError, match="ConnectError"):
        tito.generate([5, 6], SamplingParams(max_new_tokens=2))


def vllm_answer(**choice: Any) -> dict[str, Any]:
    """A completions answer laid out as vLLM sends it (logprobs=0, return_tokens_as_token_ids)."""
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "text": "ab",
                "logprobs": {
                    "text_offset": [0, 10],
                    "token_logprobs": [-0.5, -1.25],
                    "tokens": ["token_id:17", "token_id:2"],
                    "top_logprobs": [{"token_id:17": -0.5}, {"token_id:2": -1.25}],
                },
                "finish_reason": "stop",
                "stop_reason": None,
                **choice,
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def test_read_completion_takes_token_ids_or_token_id_strings() -> None:
    with_ids = read_completion(
        vllm_answer(token_ids=[17, 2], prompt_token_ids=[1, 2, 3]), [1, 2, 3], version=4
    )
    older = read_completion(vllm_answer(), [1, 2, 3])
    assert (with_ids.ids, with_ids.logprobs, with_ids.finish_reason, with_ids.policy_version) == (
        [17, 2],
        [-0.5, -1.25],
        "stop",
        4,
    )
    assert older.ids == [17, 2] and older.policy_version == 0


@pytest.mark.parametrize(
    ("choice", "match"),
    [
        ({"prompt_token_ids": [1, 2, 9]}, "other prompt ids than were sent.*first difference at 2"),
        ({"finish_reason": "abort"}, "finish_reason"),
        ({"token_ids": [17]}, "1 token ids but 2 log-probs"),
        ({"logprobs": None}, "no logprobs"),
        (
            {"logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0, -2.0]}},
            "neither token_ids nor 'token_id:N' tokens",
        ),
        (
            {"token_ids": [17, 2], "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0, None]}},
            "left out the log-prob",
        ),
    ],
)
def test_read_completion_refuses_what_breaks_token_exactness(choice: dict[str, Any], match: str) -> None:
    with pytest.raises(SamplerError, match=match):
        read_completion(vllm_answer(**choice), [1, 2, 3])


def test_a_url_without_v1_gets_a_sentence_that_says_so(
    tiny_model_path: Path, url: str, tmp_path: Path
) -> None:
    """Issue 34, item 5: `tito:MODEL@http://HOST:PORT` (no /v1) ended in 49 lines of traceback around an
    HTTP 404 on /models."""
    import subprocess
    import sys

    from policies.spec import PolicySpecError

    bare = url.removesuffix("/v1")
    with pytest.raises(PolicySpecError, match=rf"HTTP 404: .*try {re.escape(bare)}/v1\)"):
        make_policy(f"tito:{tiny_model_path}@{bare}")
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "rollout", "--suite", "demo", "--policy",
         f"tito:{tiny_model_path}@{bare}", "--backend", "bwrap", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and f"try {bare}/v1" in " ".join(proc.stderr.split())
