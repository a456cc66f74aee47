"""`harness serve` on loopback with a real tiny model: token-exact completions, chat, errors, weight reload."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from harness.serve import create_app, parse_tool_calls, running
from policies.base import Generation, SamplingParams, Tokenizer
from policies.chat_format import ChatFormat
from policies.hf import HFPolicy, sequence_logprobs
from policies.openai_chat import OpenAIChatPolicy
from policies.tiny import build_tiny_model

MODEL = "tiny"
CONTEXT = 4096
MESSAGES = [
    {"role": "system", "content": "You are a careful coding agent."},
    {"role": "user", "content": "The test fails. Read the file first."},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="module")
def other_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "other", seed=1)


@pytest.fixture(scope="module")
def local(model_path: Path) -> HFPolicy:
    """The same weights, sampled in-process: what the server's answers must equal."""
    return HFPolicy(model_path)


@pytest.fixture(scope="module")
def url(model_path: Path) -> Iterator[str]:
    with running(create_app(HFPolicy(model_path), model_name=MODEL, max_model_len=CONTEXT)) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=60) as c:
        yield c


def prompt_ids(policy: HFPolicy) -> list[int]:
    return ChatFormat(policy.tokenizer, policy.stop_ids()).prompt_ids(MESSAGES, TOOLS)


def complete(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/completions", json={"model": MODEL, **body})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def test_health_and_models(client: httpx.Client, url: str) -> None:
    assert httpx.get(url.removesuffix("/v1") + "/health").status_code == 200
    models = client.get("/models").json()
    assert [(card["id"], card["object"], card["policy_version"]) for card in models["data"]] == [
        (MODEL, "model", 0)
    ]


def test_token_prompt_samples_what_the_local_policy_samples(client: httpx.Client, local: HFPolicy) -> None:
    prompt = prompt_ids(local)
    data = complete(
        client, prompt=prompt, max_tokens=24, temperature=0.8, seed=7, logprobs=0, return_token_ids=True
    )
    expected = local.generate(prompt, SamplingParams(max_new_tokens=24, temperature=0.8, seed=7))

    choice = data["choices"][0]
    assert data["object"] == "text_completion" and data["model"] == MODEL and data["policy_version"] == 0
    assert choice["prompt_token_ids"] == prompt
    assert choice["token_ids"] == expected.ids
    assert choice["logprobs"]["token_logprobs"] == pytest.approx(expected.logprobs, abs=1e-6)
    assert choice["finish_reason"] == expected.finish_reason
    assert choice["text"] == local.tokenizer.decode(expected.ids, skip_special_tokens=True)
    assert data["usage"] == {
        "prompt_tokens": len(prompt),
        "completion_tokens": len(expected.ids),
        "total_tokens": len(prompt) + len(expected.ids),
    }
    # The learner's teacher-forced recomputation gives the sampler's log-probs back.
    recomputed = sequence_logprobs(local.model, prompt + expected.ids, len(prompt), temperature=0.8)
    assert choice["logprobs"]["token_logprobs"] == pytest.approx(recomputed, abs=1e-4)


def test_tokens_as_token_ids(client: httpx.Client, local: HFPolicy) -> None:
    data = complete(
        client, prompt=[5, 6, 7], max_tokens=6, seed=1, logprobs=0, return_tokens_as_token_ids=True
    )
    choice = data["choices"][0]
    ids = local.generate([5, 6, 7], SamplingParams(max_new_tokens=6, seed=1)).ids
    tokens = [f"token_id:{i}" for i in ids]
    logprobs = choice["logprobs"]
    assert logprobs["tokens"] == tokens
    assert logprobs["top_logprobs"] == [
        {t: lp} for t, lp in zip(tokens, logprobs["token_logprobs"], strict=True)
    ]
    assert logprobs["text_offset"] == [sum(len(t) for t in tokens[:k]) for k in range(len(tokens))]
    # Without return_token_ids the ids are not sent, as in vLLM.
    assert choice["token_ids"] is None and choice["prompt_token_ids"] is None


def test_string_prompt_is_tokenized_and_logprobs_are_off_by_default(
    client: httpx.Client, local: HFPolicy
) -> None:
    data = complete(client, prompt="def add(a, b):", max_tokens=4, temperature=0)
    assert data["usage"]["prompt_tokens"] == len(local.tokenizer.encode("def add(a, b):"))
    assert data["choices"][0]["logprobs"] is None


def test_stop_token_ids_end_the_text_at_the_first_of_them(client: httpx.Client) -> None:
    full = complete(client, prompt=[9, 10, 11], max_tokens=12, seed=3, return_token_ids=True)["choices"][0]
    stop = full["token_ids"][4]
    cut = complete(
        client, prompt=[9, 10, 11], max_tokens=12, seed=3, return_token_ids=True, stop_token_ids=[stop]
    )["choices"][0]
    first = full["token_ids"].index(stop)
    assert cut["token_ids"] == full["token_ids"][: first + 1]
    assert (cut["finish_reason"], cut["stop_reason"]) == ("stop", stop)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"max_tokens": 4}, "prompt"),
        ({"prompt": "x", "max_tokens": "ten"}, "max_tokens"),
        ({"prompt": [1, -2]}, "prompt"),
        ({"prompt": [1, 10**9]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [1], "temperature": -1}, "temperature"),
        ({"prompt": [1], "top_p": 0}, "top_p"),
        ({"prompt": [1], "seed": 1.5}, "seed"),
        ({"prompt": [1], "n": 2}, "n"),
        ({"prompt": [1], "stream": True}, "stream"),
        ({"prompt": [1], "logprobs": 3}, "logprobs"),
        ({"prompt": [1], "stop_token_ids": ["a"]}, "stop_token_ids"),
        ({"prompt": [1, 2], "max_tokens": CONTEXT - 1}, "max_tokens"),
        ({"prompt": [1] * CONTEXT}, "prompt"),
    ],
)
def test_bad_completion_requests_get_400_naming_the_field(
    client: httpx.Client, body: dict[str, Any], param: str
) -> None:
    response = client.post("/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["code"] == 400 and error["type"] == "BadRequestError"
    assert error["message"]


def test_unknown_fields_are_ignored_and_unknown_models_are_404(client: httpx.Client) -> None:
    assert client.post("/completions", json={"prompt": [1], "max_tokens": 1, "best_of": 1}).status_code == 200
    response = client.post("/completions", json={"model": "gpt-9", "prompt": [1]})
    assert response.status_code == 404 and response.json()["error"]["param"] == "model"
    response = client.post("/completions", content=b"{not json")
    assert response.status_code == 400 and "JSON" in response.json()["error"]["message"]


def test_bad_chat_request_names_the_message_field(client: httpx.Client) -> None:
    response = client.post("/chat/completions", json={"messages": [{"role": "bot", "content": "hi"}]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "messages" and "messages.0.role" in error["message"]


def test_chat_renders_the_chat_template_and_reports_usage(client: httpx.Client, local: HFPolicy) -> None:
    body = {
        "model": MODEL,
        "messages": MESSAGES,
        "tools": TOOLS,
        "max_tokens": 8,
        "seed": 2,
        "return_token_ids": True,
    }
    data = client.post("/chat/completions", json=body).json()
    prompt = prompt_ids(local)
    expected = local.generate(prompt, SamplingParams(max_new_tokens=8, seed=2))
    assert data["object"] == "chat.completion" and data["prompt_token_ids"] == prompt
    choice = data["choices"][0]
    assert choice["token_ids"] == expected.ids and choice["message"]["role"] == "assistant"
    assert data["usage"]["prompt_tokens"] == len(prompt)
    assert data["usage"]["completion_tokens"] == len(expected.ids)


def test_chat_takes_an_openai_history_with_tool_calls(client: httpx.Client) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
    }
    history = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
    ]
    response = client.post("/chat/completions", json={"messages": history, "tools": TOOLS, "max_tokens": 2})
    assert response.status_code == 200, response.text
    broken = [*MESSAGES, {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]
    response = client.post("/chat/completions", json={"messages": broken, "max_tokens": 2})
    assert response.status_code == 400
    assert "messages.2.tool_calls.0.function.name" in response.json()["error"]["message"]


class ReplayPolicy:
    """A token policy that answers every prompt with one fixed assistant message: a model that calls tools."""

    kind: Literal["token"] = "token"
    spec = "replay"

    def __init__(self, tokenizer: Tokenizer, stop_id: int, text: str) -> None:
        self.tokenizer = tokenizer
        self._ids = [*tokenizer.encode(text, add_special_tokens=False), stop_id]
        self.version = 0

    def stop_ids(self) -> list[int]:
        return [self._ids[-1]]

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        return Generation(ids=self._ids, logprobs=[0.0] * len(self._ids), finish_reason="stop")

    def load_weights(self, checkpoint: Path, version: int) -> None:
        self.version = version


TOOL_TEXT = (
    "I will read it.\n"
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "src/app.py"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -1"}}\n</tool_call>'
)


def test_chat_returns_tool_calls_from_the_generated_text(local: HFPolicy) -> None:
    replay = ReplayPolicy(local.tokenizer, local.stop_ids()[0], TOOL_TEXT)
    with running(create_app(replay, model_name=MODEL)) as base_url:
        body = {"messages": MESSAGES, "tools": TOOLS}
        data = httpx.post(f"{base_url}/chat/completions", json=body, timeout=30).json()
        choice = data["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] == "I will read it."
        calls = [
            (c["type"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in choice["message"]["tool_calls"]
        ]
        assert calls == [
            ("function", "read_file", {"path": "src/app.py"}),
            ("function", "bash", {"command": "ls -1"}),
        ]
        assert len({c["id"] for c in choice["message"]["tool_calls"]}) == 2

        # The official SDK reads them as native tool calls.
        reply = OpenAIChatPolicy(MODEL, base_url).respond(MESSAGES, TOOLS, SamplingParams(max_new_tokens=8))
        assert [(c.name, json.loads(str(c.arguments))) for c in reply.tool_calls] == [
            ("read_file", {"path": "src/app.py"}),
            ("bash", {"command": "ls -1"}),
        ]
        assert reply.content == "I will read it." and reply.completion_tokens == len(
            replay.generate([], SamplingParams()).ids
        )


def test_parse_tool_calls_keeps_what_is_not_a_call() -> None:
    text = (
        'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n'
        "<tool_call>{not json}</tool_call>\n"
        '<tool_call>{"name": "submit", "arguments": "{}"}'
    )
    content, calls = parse_tool_calls(text)
    assert content == "Let me look.\n\n<tool_call>{not json}</tool_call>"
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("read_file", '{"path": "a.py"}'),
        ("submit", "{}"),
    ]
    assert parse_tool_calls("no calls here") == ("no calls here", [])
    assert parse_tool_calls('<tool_call>{"arguments": {}}</tool_call>')[1] == []


def test_load_weights_swaps_the_model_and_the_version(model_path: Path, other_model_path: Path) -> None:
    prompt = [5, 6, 7, 8]
    with (
        running(create_app(HFPolicy(model_path), model_name=MODEL)) as base_url,
        httpx.Client(base_url=base_url) as c,
    ):
        before = complete(c, prompt=prompt, max_tokens=16, temperature=0, logprobs=0, return_token_ids=True)
        loaded = c.post("/load_weights", json={"path": str(other_model_path), "version": 3})
        assert loaded.json() == {"ok": True, "version": 3}
        after = complete(c, prompt=prompt, max_tokens=16, temperature=0, logprobs=0, return_token_ids=True)
        assert c.get("/models").json()["data"][0]["policy_version"] == 3

        missing = c.post("/load_weights", json={"path": str(model_path / "nowhere"), "version": 4})
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "path"

    # The random tiny models are near uniform and draw alike: their log-probs tell them apart.
    expected = HFPolicy(other_model_path).generate(prompt, SamplingParams(max_new_tokens=16, temperature=0))
    assert (before["policy_version"], after["policy_version"]) == (0, 3)
    assert after["choices"][0]["token_ids"] == expected.ids
    after_logprobs = after["choices"][0]["logprobs"]["token_logprobs"]
    assert after_logprobs == pytest.approx(expected.logprobs, abs=1e-6)
    assert after_logprobs != pytest.approx(before["choices"][0]["logprobs"]["token_logprobs"], abs=1e-3)


def test_python_m_harness_serve_serves(model_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "harness.serve", "--model", str(model_path), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{base}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.1)
        body = {"model": str(model_path), "prompt": [5, 6], "max_tokens": 3, "return_token_ids": True}
        data = httpx.post(f"{base}/v1/completions", json=body, timeout=30).json()
        assert len(data["choices"][0]["token_ids"]) <= 3
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_prompt_logprobs_are_each_prompt_ids_own_in_vllms_layout(tiny_model_path: Path) -> None:
    """vLLM's `prompt_logprobs=0`: None for the first id, then {id: {logprob, ...}} for each; the values
    are the model's own teacher-forced log-probs at the request's temperature."""
    policy = HFPolicy(tiny_model_path)
    ids = [5, 17, 301, 44, 9]
    with running(create_app(policy, model_name="tiny")) as url:
        body = {"model": "tiny", "prompt": ids, "max_tokens": 1, "temperature": 0.7, "prompt_logprobs": 0}
        answer = httpx.post(f"{url}/completions", json=body, timeout=60).json()
        refused = httpx.post(f"{url}/completions", json=body | {"prompt_logprobs": 2}, timeout=60)
    scored = answer["choices"][0]["prompt_logprobs"]
    assert scored[0] is None and [list(entry) for entry in scored[1:]] == [[str(i)] for i in ids[1:]]
    values = [entry[str(i)]["logprob"] for entry, i in zip(scored[1:], ids[1:], strict=True)]
    assert values == pytest.approx(sequence_logprobs(policy.model, ids, 1, 0.7), abs=1e-5)
    assert refused.status_code == 400 and "prompt_logprobs" in refused.text
