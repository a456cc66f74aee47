"""`harness serve`: an OpenAI-compatible HTTP server for a token policy, token-exact like vLLM's.

Request and response fields follow vLLM's OpenAI server where they overlap
(vllm/entrypoints/openai/completion/protocol.py and chat_completion/protocol.py): a token-id `prompt`,
`return_token_ids` (the choice carries `prompt_token_ids` and `token_ids`), `return_tokens_as_token_ids`
("token_id:N" tokens in `logprobs`), `stop_token_ids`, `skip_special_tokens`, and vLLM's error body
`{"error": {"message", "type", "param", "code"}}` with status 400 for a bad request. Unknown request
fields are ignored with a warning, as vLLM does. Each response adds `policy_version`, the learner step of
the weights that sampled it; `POST /v1/load_weights` swaps in new weights.

So that it can stand in for `VLLM_SERVER_DEV_MODE=1 vllm serve` in tests, it also answers the two vLLM
development routes `TitoPolicy(reload="vllm")` uses (vllm/entrypoints/serve/dev/rpc/api_router.py and
dev/cache/api_router.py), with vLLM's request and answer bodies: `POST /collective_rpc` for the method
`reload_weights` with `kwargs.weights_path` only (loads the folder; vLLM names no version, so this bumps
its own by one) and `POST /reset_prefix_cache` (nothing is cached here: a no-op).

Log-probs are those of the sampler's distribution (after temperature), as `Generation` defines them.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, TypeVar

import uvicorn
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from jinja2 import TemplateError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policies.base import Generation, SamplingParams, Scorer, TokenPolicy

log = logging.getLogger(__name__)

LOGPROB_FLOOR = -9999.0
"""vLLM's floor for a log-prob in a response: JSON has no -inf."""
DEFAULT_CHAT_MAX_TOKENS = SamplingParams().max_new_tokens
"""Most tokens a chat request without `max_tokens` / `max_completion_tokens` may produce when the
server knows no context length (with one, it is the rest of the context, as in vLLM)."""
_INT64 = 2**63


class ServedPolicy(TokenPolicy, Protocol):
    """A token policy whose weights can be replaced while it serves (`HFPolicy`)."""

    def load_weights(self, checkpoint: Path, version: int) -> None:
        """Loads the weights saved in `checkpoint` and marks them as policy version `version`."""
        ...


# Requests -----------------------------------------------------------------------------------------


class BadRequest(Exception):
    """A request the server refuses; answered with an OpenAI-style error body naming `param`."""

    def __init__(self, message: str, param: str | None = None, status: Literal[400, 404] = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status


class _Request(BaseModel):
    # Types are checked strictly (no "1" for 1); unknown fields are logged and ignored, as vLLM does.
    model_config = ConfigDict(extra="ignore", strict=True)


TokenId = Annotated[int, Field(ge=0)]


class CompletionRequest(_Request):
    """`POST /v1/completions`, the fields this server reads (vLLM's names and defaults)."""

    model: str | None = None
    prompt: list[TokenId] | str
    max_tokens: int | None = Field(default=16, ge=1)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=-_INT64, lt=_INT64)
    logprobs: int | None = Field(default=None, ge=0)
    prompt_logprobs: int | None = Field(default=None, ge=0)
    """vLLM's extension: with 0, each prompt id's own log-prob after the ones before it, at `temperature`
    (1 when not given) as the sampled tokens' are; more than 0 (the top alternatives too) is refused."""
    n: int = 1
    stream: bool | None = False
    echo: bool | None = False
    stop_token_ids: list[TokenId] | None = None
    skip_special_tokens: bool = True
    add_special_tokens: bool = True
    return_token_ids: bool | None = None
    return_tokens_as_token_ids: bool | None = None


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolSpec(_Request):
    type: Literal["function"] = "function"
    function: FunctionSpec


class TextPart(_Request):
    type: Literal["text"]
    text: str


class FunctionCallIn(_Request):
    name: str
    arguments: str | dict[str, Any]


class ToolCallIn(_Request):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ChatMessageIn(BaseModel):
    # Extra keys (tool_call_id, name, reasoning_content...) go through to the chat template.
    model_config = ConfigDict(extra="allow", strict=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCallIn] | None = None


class ChatRequest(_Request):
    """`POST /v1/chat/completions`, the fields this server reads."""

    model: str | None = None
    messages: list[ChatMessageIn] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=-_INT64, lt=_INT64)
    n: int | None = 1
    stream: bool | None = False
    skip_special_tokens: bool = True
    return_token_ids: bool | None = None


class CollectiveRpcRequest(BaseModel):
    """`POST /collective_rpc` (vLLM development route): a worker method and its arguments."""

    model_config = ConfigDict(extra="ignore")

    method: str
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    timeout: float | None = None


class LoadWeightsRequest(BaseModel):
    """`POST /v1/load_weights` (harness extension): a `save_pretrained` checkpoint folder and its version."""

    model_config = ConfigDict(extra="forbid", strict=True)

    path: str
    version: int = Field(ge=0)


# Responses ----------------------------------------------------------------------------------------


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "harness"
    root: str
    max_model_len: int | None
    policy_version: int
    """The learner step of the weights now served (harness extension)."""


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class LoadWeightsResponse(BaseModel):
    ok: bool
    version: int


class CollectiveRpcResponse(BaseModel):
    results: list[Any]
    """One result per worker, as vLLM answers; `reload_weights` returns None."""


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogProbs(BaseModel):
    text_offset: list[int]
    token_logprobs: list[float]
    tokens: list[str]
    top_logprobs: list[dict[str, float]]


class PromptLogprob(BaseModel):
    logprob: float
    rank: int | None = None
    """Not computed here (vLLM gives the id's rank among the vocabulary)."""
    decoded_token: str


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogProbs | None
    finish_reason: Literal["stop", "length"]
    stop_reason: int | None
    """The request's stop token id that ended the text; None for the model's own end (vLLM's meaning)."""
    prompt_token_ids: list[int] | None
    token_ids: list[int] | None
    prompt_logprobs: list[dict[str, PromptLogprob] | None] | None = None
    """With `prompt_logprobs=0`: None for the first prompt id, then {id: its log-prob} for each."""


class CompletionResponse(BaseModel):
    id: str = Field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    policy_version: int


class FunctionCall(BaseModel):
    name: str
    arguments: str
    """The arguments object as a JSON string, as OpenAI sends it."""


class ChatToolCall(BaseModel):
    id: str = Field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ChatToolCall]


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    logprobs: None = None
    finish_reason: Literal["stop", "length", "tool_calls"]
    token_ids: list[int] | None


class ChatResponse(BaseModel):
    id: str = Field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    usage: Usage
    prompt_token_ids: list[int] | None
    policy_version: int


# Tool calls in model text -------------------------------------------------------------------------

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


def parse_tool_calls(text: str) -> tuple[str, list[ChatToolCall]]:
    """Splits model text into the text outside `<tool_call>{json}</tool_call>` blocks and the calls.

    A block whose body is not a JSON object with a string `name` stays in the text, so nothing the model
    wrote is lost; an unclosed block at the end (a cut-off message) counts if its JSON is complete.
    """
    calls: list[ChatToolCall] = []
    kept: list[str] = []
    at = 0
    for match in _TOOL_CALL.finditer(text):
        call = _tool_call(match.group(1))
        if call is None:
            continue
        calls.append(call)
        kept.append(text[at : match.start()])
        at = match.end()
    kept.append(text[at:])
    return "".join(kept).strip(), calls


def _tool_call(body: str) -> ChatToolCall | None:
    try:
        call = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    arguments = call.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ChatToolCall(function=FunctionCall(name=call["name"], arguments=arguments))


# The app ------------------------------------------------------------------------------------------

RequestT = TypeVar("RequestT", bound=BaseModel)
T = TypeVar("T")


@dataclass
class Served:
    """The model a server answers with, under its name. A batched policy (`HFPolicy.batched`) takes every
    request at once: it decodes them together and changes weights only between its decode steps; any
    other answers one request at a time, so that weights never change under a sampler."""

    policy: ServedPolicy
    name: str
    max_model_len: int | None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, fn: Callable[[], T]) -> T:
        if getattr(self.policy, "batched", False):
            return fn()
        with self.lock:
            return fn()


def create_app(
    policy: ServedPolicy, model_name: str | None = None, max_model_len: int | None = None
) -> FastAPI:
    """The server's app for `policy`, answering to `model_name` (default: the policy's spec).

    With `max_model_len`, a request whose prompt and completion could outgrow it gets a 400, as in vLLM.
    """
    served = Served(policy, model_name or policy.spec, max_model_len)
    app = FastAPI(title="harness serve")

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, e: BadRequest) -> JSONResponse:
        kind = {400: "BadRequestError", 404: "NotFoundError"}[e.status]
        return _error(e.message, kind, e.param, e.status)

    @app.exception_handler(Exception)
    async def server_error(request: Request, e: Exception) -> JSONResponse:
        # Starlette logs the traceback itself after this answer goes out.
        return _error(f"{type(e).__name__}: {e}", "InternalServerError", None, 500)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> ModelList:
        card = ModelCard(
            id=served.name, root=served.name, max_model_len=max_model_len, policy_version=policy.version
        )
        return ModelList(data=[card])

    @app.post("/v1/completions")
    async def completions(request: Request) -> CompletionResponse:
        return await _complete(served, await _parse(request, CompletionRequest))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> ChatResponse:
        return await _chat(served, await _parse(request, ChatRequest))

    @app.post("/v1/load_weights")
    async def load_weights(request: Request) -> LoadWeightsResponse:
        return await _load_weights(served, await _parse(request, LoadWeightsRequest))

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> CollectiveRpcResponse:
        return await _collective_rpc(served, await _parse(request, CollectiveRpcRequest))

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> Response:
        return Response(status_code=200)

    return app


async def _complete(served: Served, req: CompletionRequest) -> CompletionResponse:
    """POST /v1/completions: token ids (or text) in, token ids and their log-probs out."""
    policy, max_model_len = served.policy, served.max_model_len
    _check_model(req.model, served.name)
    _check_one_choice(req.n, req.stream)
    if req.echo:
        raise BadRequest("echo is not supported", "echo")
    if req.logprobs is not None and req.logprobs > 0:
        raise BadRequest("only logprobs=0 is supported: the sampled tokens' log-probs", "logprobs")
    if isinstance(req.prompt, str):
        prompt_ids = list(policy.tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens))
    else:
        prompt_ids = req.prompt
    if not prompt_ids:
        raise BadRequest("prompt must be non-empty", "prompt")
    max_tokens = req.max_tokens or 16
    _check_length(len(prompt_ids), max_tokens, max_model_len, "prompt")
    params = _sampling(max_tokens, req.temperature, req.top_p, req.seed)
    scored = None if req.prompt_logprobs is None else await _prompt_logprobs(served, prompt_ids, req)
    gen = await _generate(served.run, policy, prompt_ids, params)
    ids, logprobs, finish, stop_reason = _cut_at_stop(gen, req.stop_token_ids or [])
    choice = CompletionChoice(
        text=policy.tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens),
        logprobs=None
        if req.logprobs is None
        else _completion_logprobs(policy, ids, logprobs, bool(req.return_tokens_as_token_ids)),
        finish_reason=finish,
        stop_reason=stop_reason,
        prompt_token_ids=prompt_ids if req.return_token_ids else None,
        token_ids=ids if req.return_token_ids else None,
        prompt_logprobs=scored,
    )
    return CompletionResponse(
        model=served.name, choices=[choice], usage=_usage(prompt_ids, ids), policy_version=gen.policy_version
    )


async def _prompt_logprobs(
    served: Served, prompt_ids: list[int], req: CompletionRequest
) -> list[dict[str, PromptLogprob] | None]:
    """Each prompt id's own log-prob, in vLLM's layout (`CompletionChoice.prompt_logprobs`)."""
    policy = served.policy
    if req.prompt_logprobs:
        raise BadRequest(
            "only prompt_logprobs=0 is supported: each prompt id's own log-prob", "prompt_logprobs"
        )
    if not isinstance(policy, Scorer):
        raise BadRequest("this server's policy cannot score prompts", "prompt_logprobs")
    temperature = 1.0 if req.temperature is None else req.temperature
    values = await run_in_threadpool(served.run, lambda: policy.prompt_logprobs(prompt_ids, temperature))
    texts = [policy.tokenizer.decode([i], skip_special_tokens=False) for i in prompt_ids]
    return [None] + [
        {str(i): PromptLogprob(logprob=v, decoded_token=text)}
        for i, v, text in zip(prompt_ids[1:], values, texts[1:], strict=True)
    ]


async def _chat(served: Served, req: ChatRequest) -> ChatResponse:
    """POST /v1/chat/completions: messages and tools in, a message with its tool calls out."""
    policy, max_model_len = served.policy, served.max_model_len
    _check_model(req.model, served.name)
    _check_one_choice(req.n, req.stream)
    prompt_ids = _chat_prompt_ids(policy, req)
    max_tokens = req.max_completion_tokens or req.max_tokens
    if max_tokens is None:
        max_tokens = DEFAULT_CHAT_MAX_TOKENS if max_model_len is None else max_model_len - len(prompt_ids)
    _check_length(len(prompt_ids), max_tokens, max_model_len, "messages")
    params = _sampling(max_tokens, req.temperature, req.top_p, req.seed)
    gen = await _generate(served.run, policy, prompt_ids, params)
    text = policy.tokenizer.decode(gen.ids, skip_special_tokens=req.skip_special_tokens)
    content, calls = parse_tool_calls(text)
    choice = ChatChoice(
        message=ChatMessageOut(content=content or None, tool_calls=calls),
        finish_reason="tool_calls" if calls else gen.finish_reason,
        token_ids=gen.ids if req.return_token_ids else None,
    )
    return ChatResponse(
        model=served.name,
        choices=[choice],
        usage=_usage(prompt_ids, gen.ids),
        prompt_token_ids=prompt_ids if req.return_token_ids else None,
        policy_version=gen.policy_version,
    )


async def _load_weights(served: Served, req: LoadWeightsRequest) -> LoadWeightsResponse:
    """POST /v1/load_weights: a checkpoint folder becomes the weights of `req.version`."""
    checkpoint = Path(req.path)
    if not checkpoint.is_dir():
        raise BadRequest(f"{checkpoint} is not a checkpoint folder", "path")
    try:
        await run_in_threadpool(served.run, lambda: served.policy.load_weights(checkpoint, req.version))
    except (OSError, ValueError, RuntimeError) as e:
        raise BadRequest(f"could not load weights from {checkpoint}: {e}", "path") from e
    return LoadWeightsResponse(ok=True, version=served.policy.version)


async def _collective_rpc(served: Served, req: CollectiveRpcRequest) -> CollectiveRpcResponse:
    """POST /collective_rpc, as vLLM's dev mode: only `reload_weights` with a folder."""
    weights_path = req.kwargs.get("weights_path")
    if req.method != "reload_weights" or req.args or not isinstance(weights_path, str):
        raise BadRequest(
            "harness serve runs only reload_weights with kwargs {'weights_path': FOLDER}", "method"
        )
    checkpoint = Path(weights_path)
    policy = served.policy
    # Like vLLM, whose worker raises: a folder that does not load is a server error.
    await run_in_threadpool(served.run, lambda: policy.load_weights(checkpoint, policy.version + 1))
    return CollectiveRpcResponse(results=[None])


async def _generate(
    run: Callable[[Callable[[], Generation]], Generation],
    policy: TokenPolicy,
    prompt_ids: list[int],
    params: SamplingParams,
) -> Generation:
    try:
        gen: Generation = await run_in_threadpool(run, lambda: policy.generate(prompt_ids, params))
    except ValueError as e:  # the policy refuses the prompt (an id outside the vocabulary)
        raise BadRequest(str(e), "prompt") from e
    return gen


async def _parse(request: Request, model: type[RequestT]) -> RequestT:
    body = await request.body()
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise BadRequest(f"the request body is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    unknown = data.keys() - model.model_fields.keys()
    if unknown:
        log.warning("The following fields were present in the request but ignored: %s", sorted(unknown))
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        param = str(errors[0]["loc"][0]) if errors[0]["loc"] else None
        problems = "; ".join(f"{_where(error['loc'])}: {error['msg']}" for error in errors[:3])
        raise BadRequest(problems, param) from e


def _where(loc: tuple[int | str, ...]) -> str:
    """`messages.0.content` for a pydantic error location, without the union members it tried (`str`,
    `list[TextPart]`)."""
    return ".".join(str(part) for part in loc if not (isinstance(part, str) and _UNION_MEMBER.match(part)))


_UNION_MEMBER = re.compile(r"^(str|int|float|bool|\w+\[.*\])$")


def _check_model(requested: str | None, served: str) -> None:
    if requested is not None and requested != served:
        raise BadRequest(
            f"The model `{requested}` does not exist; this server serves `{served}`.", "model", 404
        )


def _check_length(prompt_tokens: int, max_tokens: int, max_model_len: int | None, prompt_field: str) -> None:
    if max_model_len is None:
        return
    if prompt_tokens >= max_model_len:
        raise BadRequest(
            f"This model's maximum context length is {max_model_len} tokens; the prompt has {prompt_tokens}.",
            prompt_field,
        )
    if prompt_tokens + max_tokens > max_model_len:
        raise BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, {max_tokens} in the "
            "completion). Please reduce the length of the prompt or completion.",
            "max_tokens",
        )


def _error(message: str, kind: str, param: str | None, status: int) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}}, status)


def _check_one_choice(n: int | None, stream: bool | None) -> None:
    if n not in (None, 1):
        raise BadRequest("this server samples one choice per request; n must be 1", "n")
    if stream:
        raise BadRequest("streaming is not supported", "stream")


def _sampling(
    max_tokens: int, temperature: float | None, top_p: float | None, seed: int | None
) -> SamplingParams:
    return SamplingParams(
        max_new_tokens=max_tokens,
        temperature=1.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        seed=seed,
    )


def _cut_at_stop(
    gen: Generation, stop_token_ids: list[int]
) -> tuple[list[int], list[float], Literal["stop", "length"], int | None]:
    """The generation up to and including the first of the request's own stop ids, if any comes.

    The sampler draws each token from the ones before it, so the cut sequence is exactly what a sampler
    stopping at that id would have produced.
    """
    for i, token in enumerate(gen.ids):
        if token in stop_token_ids:
            return gen.ids[: i + 1], gen.logprobs[: i + 1], "stop", token
    return gen.ids, gen.logprobs, gen.finish_reason, None


def _completion_logprobs(
    policy: TokenPolicy, ids: list[int], logprobs: list[float], as_token_ids: bool
) -> CompletionLogProbs:
    """vLLM's completion log-probs for logprobs=0: each sampled token and its log-prob."""
    tokens = [
        f"token_id:{i}" if as_token_ids else policy.tokenizer.decode([i], skip_special_tokens=False)
        for i in ids
    ]
    floored = [max(lp, LOGPROB_FLOOR) for lp in logprobs]
    offsets, at = [], 0
    for token in tokens:
        offsets.append(at)
        at += len(token)
    return CompletionLogProbs(
        text_offset=offsets,
        token_logprobs=floored,
        tokens=tokens,
        top_logprobs=[{t: lp} for t, lp in zip(tokens, floored, strict=True)],
    )


def _chat_prompt_ids(policy: TokenPolicy, req: ChatRequest) -> list[int]:
    """The prompt rendered with the tokenizer's chat template, as `ChatFormat.prompt_ids` renders it."""
    messages = [_template_message(m) for m in req.messages]
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    try:
        text = policy.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False
        )
    except TemplateError as e:
        raise BadRequest(f"the chat template cannot render these messages: {e}", "messages") from e
    return list(policy.tokenizer.encode(str(text), add_special_tokens=False))


def _template_message(message: ChatMessageIn) -> dict[str, Any]:
    out = message.model_dump(exclude_none=True)
    content = message.content
    out["content"] = "".join(p.text for p in content) if isinstance(content, list) else content or ""
    # Templates (Qwen's among them) expect tool-call arguments as an object, as vLLM passes them.
    for call, dumped in zip(message.tool_calls or [], out.get("tool_calls", []), strict=True):
        if isinstance(call.function.arguments, str):
            try:
                dumped["function"]["arguments"] = json.loads(call.function.arguments)
            except json.JSONDecodeError:
                pass
    return out


def _usage(prompt_ids: list[int], ids: list[int]) -> Usage:
    return Usage(
        prompt_tokens=len(prompt_ids), completion_tokens=len(ids), total_tokens=len(prompt_ids) + len(ids)
    )


# Running it ---------------------------------------------------------------------------------------


@contextmanager
def running(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serves `app` from a background thread while the block runs; yields its base URL, `http://HOST:PORT/v1`.

    Port 0 takes a free port. For tests, and for a trainer that samples through its own server.
    """
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="harness-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def serve(model_path: str | Path, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Loads the model at `model_path` with `HFPolicy` and serves it until interrupted."""
    from policies.hf import HFPolicy  # here, so that importing this module does not load torch

    policy = HFPolicy(str(model_path))
    app = create_app(
        policy, model_name=str(model_path), max_model_len=policy.model.config.max_position_embeddings
    )
    uvicorn.run(app, host=host, port=port, log_level="info")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.serve", description=__doc__)
    parser.add_argument("--model", required=True, help="a Hugging Face model folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    serve(args.model, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
