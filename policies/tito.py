"""Token-in, token-out over HTTP: a token policy on an OpenAI-compatible completions server.

The prompt goes out as token ids and the sampled ids come back as ids, never through text, so a trajectory
holds exactly what the sampler saw and drew (DESIGN.md, contract 1). Works with `harness serve` and with
vLLM: `return_token_ids` gives the ids (older vLLM without it: `return_tokens_as_token_ids` gives
"token_id:N" tokens, parsed here). For training on a vLLM server, start it with
`--logprobs-mode processed_logprobs` so its log-probs are those of the sampler's distribution (after
temperature), as `Generation` defines them; by default vLLM returns the raw model's.

New weights reach a server as a Hugging Face folder it can read (`load_weights`), by one of three
requests (`ReloadEndpoint`). For vLLM, which has no public endpoint that reloads weights from a path, the
client uses the development routes of `vllm serve` started with `VLLM_SERVER_DEV_MODE=1`:
`POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": FOLDER}}` runs
`Worker.reload_weights` on every worker, which loads the folder's safetensors in place
(`GPUModelRunner.reload_weights(weights_iterator=None, weights_path=None, is_checkpoint_format=True)` in
vllm/v1/worker/gpu_model_runner.py; used this way in vllm-project/vllm issue 48312 on 0.28.1rc1 and in the
reproduction of PR 48284), then `POST /reset_prefix_cache` drops the KV cache the old weights computed.
Both routes are listed among the development endpoints in https://docs.vllm.ai/en/latest/usage/security/
(docs/usage/security.md; `/collective_rpc` "executes arbitrary RPC methods": never expose it beyond the
cluster network). vLLM's RL weight-transfer routes (`/init_weight_transfer_engine`, `/start_weight_update`,
`/update_weights`, `/finish_weight_update`, https://docs.vllm.ai/en/latest/training/weight_transfer/)
document only NCCL and CUDA-IPC backends, which need the trainer in a process group with the server, not a
folder on disk; they are not used here.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from policies.base import Generation, SamplingParams, Tokenizer

log = logging.getLogger(__name__)

_TOKEN_ID_PREFIX = "token_id:"


class SamplerError(RuntimeError):
    """The completions server failed, or answered something that would break token-exactness."""


class _LogProbs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tokens: list[str]
    token_logprobs: list[float | None]


class _Choice(BaseModel):
    model_config = ConfigDict(extra="ignore")

    finish_reason: Literal["stop", "length"]
    """Anything else (vLLM's "abort", a missing reason) is an error."""
    logprobs: _LogProbs | None = None
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None


class _Completion(BaseModel):
    model_config = ConfigDict(extra="ignore")

    choices: list[_Choice]
    policy_version: int | None = None
    """Sent by `harness serve`; vLLM has no such field."""


class _PromptLogprob(BaseModel):
    model_config = ConfigDict(extra="ignore")

    logprob: float


class _ScoredChoice(BaseModel):
    model_config = ConfigDict(extra="ignore")

    prompt_logprobs: list[dict[str, _PromptLogprob] | None] | None = None
    """vLLM's: None for the first prompt id, then for each id a map from token ids (as strings) to their
    log-probs, the id itself among them."""


class _Scored(BaseModel):
    model_config = ConfigDict(extra="ignore")

    choices: list[_ScoredChoice]


class _ModelCard(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    policy_version: int | None = None
    """Listed by `harness serve`; vLLM has no such field."""


class _ModelList(BaseModel):
    model_config = ConfigDict(extra="ignore")

    data: list[_ModelCard]


ReloadEndpoint = Literal["harness", "sglang", "vllm"]
"""How a server loads new weights from a folder: `harness serve`'s `POST /v1/load_weights`, SGLang's
`POST /update_weights_from_disk`, or vLLM's development routes `POST /collective_rpc` (`reload_weights`)
and `POST /reset_prefix_cache` (module docstring)."""


@dataclass
class _Server:
    """One completions server and what this client knows of it."""

    url: str
    in_flight: int = 0
    down_until: float = 0.0
    """`time.monotonic()` until which it is kept out after a failure; then it is tried again."""
    version: int | None = None
    """The weights version this client loaded on it; None when unknown (never loaded, or it went down)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held while weights load on it."""


class TitoPolicy:
    """Matches `policies.base.TokenPolicy`; samples on the server at `base_url` (e.g. http://host:8000/v1),
    or on several: `base_url` is then a comma-separated list.

    `model` is the server's model name; the tokenizer (for chat templates and stop ids) loads locally from
    `tokenizer_path`, by default `model` read as a local folder. Each request goes to the live server with
    the fewest requests in flight (round-robin among equals). Connection errors, timeouts and 5xx answers
    mark the server down for `probe_after_s` and the request is retried on another one (with backoff when
    none is left), `max_retries` times in all; a 4xx answer raises at once. `load_weights` reaches every
    live server; a server that failed to load them is out of rotation until it has: it is tried again
    after `probe_after_s`, and loads the current weights before it serves again.

    A client that loads no weights itself (a rollout worker, while the trainer's client loads them) is told
    with `follow` which servers hold which version, and sends requests only to those.

    The policy version of a generation is the one the server names in its answer (`harness serve` does);
    with `reload="vllm"` it is always the one this client loaded (or was told of), since vLLM names none.
    """

    kind: Literal["token"] = "token"

    def __init__(
        self,
        model: str,
        base_url: str,
        tokenizer_path: str | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        reload: ReloadEndpoint = "harness",
        probe_after_s: float = 5.0,
    ) -> None:
        self.spec = f"tito:{model}@{base_url}"
        self.model = model
        self.base_url = base_url.rstrip("/")
        urls = [u.strip().rstrip("/") for u in base_url.split(",")]
        if not all(urls):
            raise ValueError(f"{base_url!r}: expected one URL or several separated by commas")
        self.servers = [_Server(u) for u in urls]
        self.max_retries = max_retries
        self.reload = reload
        self.probe_after_s = probe_after_s
        path = tokenizer_path or model
        tokenizer = AutoTokenizer.from_pretrained(path)
        # HF types decode as returning `str | list[str]`; for a list of ids it is a str, as `Tokenizer` says.
        self.tokenizer = cast(Tokenizer, tokenizer)
        self._stop_ids = _stop_ids(tokenizer, Path(path))
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)))
        self._last_version = 0
        self._lock = threading.Lock()
        self._turn = 0
        self._weights: tuple[Path, int] | None = None
        """The last weights given to `load_weights`: what every server must have before it serves."""
        self._following: int | None = None
        """The version given to `follow`: only servers known to hold it serve."""
        try:  # a wrong URL is told now, in one sentence; a server not up yet is left to the episodes
            self._send(self.servers[0], "GET", "/models", None)
        except _Retryable:
            pass

    @property
    def version(self) -> int:
        """The server's policy version (`harness serve` lists it with the model); else the last one seen."""
        answer, server = self._request("GET", "/models")
        try:
            models = _ModelList.model_validate(answer)
        except ValidationError as e:
            raise SamplerError(f"{server.url}/models answered an unexpected body: {e}") from e
        for card in models.data:
            if card.id == self.model and card.policy_version is not None and self.reload != "vllm":
                self._last_version = card.policy_version
        return self._last_version

    def stop_ids(self) -> list[int]:
        return list(self._stop_ids)

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt_ids,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "stop_token_ids": self._stop_ids,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        answer, server = self._request("POST", "/completions", body)
        if self.reload == "vllm":  # a stand-in's own count of reloads is not the learner's step
            answer.pop("policy_version", None)
        # A server that names no version (vLLM) sampled with the weights this client last loaded on it.
        gen = read_completion(
            answer, prompt_ids, self._last_version if server.version is None else server.version
        )
        self._last_version = gen.policy_version
        return gen

    def prompt_logprobs(self, ids: list[int], temperature: float) -> list[float]:
        """`policies.base.Scorer` through the server: vLLM's `prompt_logprobs=0` extension of
        /v1/completions (`harness serve` has it too), one token generated and dropped."""
        body: dict[str, Any] = {
            "model": self.model, "prompt": ids, "max_tokens": 1, "temperature": temperature,
            "prompt_logprobs": 0, "skip_special_tokens": False,
        }  # fmt: skip
        answer, server = self._request("POST", "/completions", body)
        try:
            scored = _Scored.model_validate(answer).choices[0].prompt_logprobs
        except (ValidationError, IndexError) as e:
            raise SamplerError(f"{server.url}/completions: no prompt log-probs in the answer: {e}") from e
        if scored is None or len(scored) != len(ids):
            raise SamplerError(f"{server.url}/completions: prompt log-probs for {len(ids)} ids expected")
        try:
            return [scored[t][str(ids[t])].logprob for t in range(1, len(ids))]  # type: ignore[index]
        except (KeyError, TypeError) as e:
            raise SamplerError(f"{server.url}/completions: a prompt id's own log-prob is missing") from e

    def load_weights(self, checkpoint: Path, version: int) -> None:
        """Has every live server load the weights saved in `checkpoint` (a folder they can read) as
        `version`. A server that fails is logged and kept out of rotation until it has them: it is tried
        again after `probe_after_s`, loading them before it serves. Raises `SamplerError` when no server
        took them."""
        self._weights = (checkpoint, version)
        now = time.monotonic()
        live = [s for s in self.servers if s.down_until <= now] or self.servers
        with ThreadPoolExecutor(max_workers=len(live)) as pool:
            errors = list(pool.map(self._try_sync, live))
        failed = [(s, e) for s, e in zip(live, errors, strict=True) if e is not None]
        if len(failed) == len(live):
            raise SamplerError(f"no server loaded {checkpoint}: {'; '.join(str(e) for _, e in failed)}")
        for server, error in failed:
            log.warning("%s is out of rotation until it loads version %d: %s", server.url, version, error)
        self._last_version = version

    def holding(self, version: int) -> list[str]:
        """The URLs of the servers this client loaded `version` on (or was told hold it)."""
        return [s.url for s in self.servers if s.version == version]

    def follow(self, version: int, urls: list[str]) -> None:
        """Another client loaded `version` on the servers at `urls`: from now on requests go to those only,
        tagged `version`, until the next call. A server that fails meanwhile stays out until then."""
        known = {s.url for s in self.servers}
        if not set(urls) <= known:
            raise ValueError(f"{sorted(set(urls) - known)}: not servers of this client ({sorted(known)})")
        with self._lock:
            self._following = version
            self._last_version = version
            for server in self.servers:
                held = server.url in urls
                server.version = version if held else None
                server.down_until = 0.0 if held else server.down_until

    def close(self) -> None:
        self._client.close()

    def _try_sync(self, server: _Server) -> SamplerError | None:
        """`_sync_weights` with retries; on failure the server is marked down and the error returned."""
        for attempt in range(self.max_retries + 1):
            try:
                self._sync_weights(server)
                return None
            except _Retryable as e:
                if attempt == self.max_retries:
                    self._mark_down(server)
                    return e
            except SamplerError as e:
                self._mark_down(server)
                return e
            time.sleep(min(0.5 * 2**attempt, 8.0))
        raise AssertionError("unreachable: the last attempt returns")

    def _sync_weights(self, server: _Server) -> None:
        """Loads the current weights on `server` unless it has them."""
        if self._weights is None or server.version == self._weights[1]:
            return
        with server.lock:
            weights = self._weights
            if weights is None or server.version == weights[1]:
                return
            checkpoint, version = weights
            for path, body, ok in _reload_requests(self.reload, checkpoint, version):
                answer = self._send(server, "POST", path, body, root=self.reload != "harness")
                if ok is not None and not answer.get(ok):
                    raise SamplerError(f"{server.url}: {path} refused {checkpoint}: {answer}")
            server.version = version

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], _Server]:
        """Sends to a live server, retrying failures on others; returns the answer and who gave it."""
        tried: set[str] = set()
        for attempt in range(self.max_retries + 1):
            server = self._pick(tried)
            try:
                self._ready(server)
                return self._send(server, method, path, body), server
            except _Retryable as e:
                self._mark_down(server)
                tried.add(server.url)
                if attempt == self.max_retries:
                    raise SamplerError(str(e)) from e
            finally:
                with self._lock:
                    server.in_flight -= 1
            if tried >= {s.url for s in self.servers}:  # every one failed once: wait, then try again
                tried.clear()
                time.sleep(min(0.5 * 2**attempt, 8.0))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _ready(self, server: _Server) -> None:
        """Loads the current weights on `server` if it lacks them (back from a failure, or it failed to load
        them); any failure is retryable, so that another server answers meanwhile."""
        try:
            self._sync_weights(server)
        except _Retryable:
            raise
        except SamplerError as e:
            raise _Retryable(str(e)) from e

    def _pick(self, tried: set[str]) -> _Server:
        """The live server with the fewest requests in flight, round-robin among equals; when all are down,
        the one that failed longest ago (its probe). A follower picks only among the servers that hold the
        version it follows."""
        following = self._following
        if following is not None and not any(s.version == following for s in self.servers):
            self._rejoin(following)
        with self._lock:
            now = time.monotonic()
            servers = self.servers
            if self._following is not None:
                servers = [s for s in self.servers if s.version == self._following]
                if not servers:
                    raise SamplerError(
                        f"no server is known to hold weights version {self._following}: the reload failed "
                        "on all of them, or they failed since"
                    )
            fresh = [s for s in servers if s.url not in tried] or servers
            live = [s for s in fresh if s.down_until <= now]
            n = len(self.servers)
            self._turn += 1
            if live:
                order = {s.url: i for i, s in enumerate(self.servers)}
                server = min(live, key=lambda s: (s.in_flight, (order[s.url] - self._turn) % n))
            else:
                server = min(fresh, key=lambda s: s.down_until)
            server.in_flight += 1
            return server

    def _rejoin(self, version: int) -> None:
        """A follower whose every server failed asks each which weights it holds: one whose `/models` names
        `version` (`harness serve` does) serves again. A transient failure on a busy host (a timed-out
        connection) then costs a request, not the step. vLLM names no version: its servers wait for the
        next `follow`."""
        if self.reload == "vllm":
            return
        for server in self.servers:
            try:
                models = _ModelList.model_validate(self._send(server, "GET", "/models", None))
            except (SamplerError, ValidationError):
                continue
            if any(card.id == self.model and card.policy_version == version for card in models.data):
                with self._lock:
                    server.version, server.down_until = version, 0.0

    def _mark_down(self, server: _Server) -> None:
        with self._lock:
            server.down_until = time.monotonic() + self.probe_after_s
            server.version = None  # it may come back restarted, with other weights

    def _send(
        self, server: _Server, method: str, path: str, body: dict[str, Any] | None, root: bool = False
    ) -> dict[str, Any]:
        """One request; `root`: the path is under the server's root, not its /v1."""
        url = (server.url.removesuffix("/v1") if root else server.url) + path
        try:
            response = self._client.request(method, url, json=body)
        except httpx.TransportError as e:
            raise _Retryable(f"{method} {url}: {type(e).__name__}: {e}") from e
        if response.status_code >= 500:
            raise _Retryable(f"{method} {url}: HTTP {response.status_code}: {_error_message(response)}")
        if response.status_code >= 400:
            hint = (
                f" (an OpenAI-compatible server's base URL ends in /v1: try {server.url.rstrip('/')}/v1)"
                if response.status_code == 404 and not root and not server.url.rstrip("/").endswith("/v1")
                else ""
            )
            raise SamplerError(
                f"{method} {url}: HTTP {response.status_code}: {_error_message(response)}{hint}"
            )
        if not response.content:  # vLLM's /reset_prefix_cache answers 200 with no body
            return {}
        data = response.json()
        if not isinstance(data, dict):
            raise SamplerError(f"{method} {url}: expected a JSON object, got {data!r:.200}")
        return data


class _Retryable(SamplerError):
    """The server did not answer, or answered 5xx: another server, or a later try, may do better."""


def _reload_requests(
    reload: ReloadEndpoint, checkpoint: Path, version: int
) -> list[tuple[str, dict[str, Any] | None, str | None]]:
    """(path, body, the answer's success field or None: any 2xx) of the requests, in order, that make a
    server of each kind load the folder `checkpoint`."""
    if reload == "sglang":
        return [("/update_weights_from_disk", {"model_path": str(checkpoint)}, "success")]
    if reload == "vllm":  # vLLM raises, hence answers 5xx, when a worker fails to load
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(checkpoint)}}
        return [("/collective_rpc", rpc, None), ("/reset_prefix_cache", None, None)]
    return [("/load_weights", {"path": str(checkpoint), "version": version}, "ok")]


def read_completion(answer: dict[str, Any], prompt_ids: list[int], version: int = 0) -> Generation:
    """The `Generation` in a completions answer to `prompt_ids`; `version` when the server names none."""
    try:
        completion = _Completion.model_validate(answer)
    except ValidationError as e:
        raise SamplerError(f"the completions server answered an unexpected body: {e}") from e
    if len(completion.choices) != 1:
        raise SamplerError(f"expected one choice, got {len(completion.choices)}")
    choice = completion.choices[0]
    if choice.prompt_token_ids is not None and choice.prompt_token_ids != prompt_ids:
        raise SamplerError(
            "the server sampled from other prompt ids than were sent "
            f"({len(choice.prompt_token_ids)} ids back, {len(prompt_ids)} sent; "
            f"first difference at {_first_difference(choice.prompt_token_ids, prompt_ids)})"
        )
    ids, logprobs = _ids_and_logprobs(choice)
    return Generation(
        ids=ids,
        logprobs=logprobs,
        finish_reason=choice.finish_reason,
        policy_version=version if completion.policy_version is None else completion.policy_version,
    )


def _ids_and_logprobs(choice: _Choice) -> tuple[list[int], list[float]]:
    if choice.logprobs is None:
        raise SamplerError("the server returned no logprobs (was `logprobs: 0` ignored?)")
    ids = choice.token_ids
    if ids is None:  # vLLM before `return_token_ids`: the tokens are "token_id:N" strings
        if not all(t.startswith(_TOKEN_ID_PREFIX) for t in choice.logprobs.tokens):
            raise SamplerError("the server returned neither token_ids nor 'token_id:N' tokens")
        ids = [int(t.removeprefix(_TOKEN_ID_PREFIX)) for t in choice.logprobs.tokens]
    logprobs = choice.logprobs.token_logprobs
    if len(logprobs) != len(ids):
        raise SamplerError(f"{len(ids)} token ids but {len(logprobs)} log-probs")
    if any(lp is None for lp in logprobs):
        raise SamplerError("the server left out the log-prob of a sampled token")
    return ids, [float(lp) for lp in logprobs if lp is not None]


def _stop_ids(tokenizer: PreTrainedTokenizerBase, path: Path) -> list[int]:
    """The eos id, `<|endoftext|>` where the vocabulary has it (as `HFPolicy` stops), and the eos ids of
    `generation_config.json` (which vLLM stops on too)."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    end_of_text = tokenizer.get_vocab().get("<|endoftext|>")
    if end_of_text is not None:
        ids.append(int(end_of_text))
    config = path / "generation_config.json"
    if config.is_file():
        eos = json.loads(config.read_text()).get("eos_token_id")
        ids += [int(i) for i in (eos if isinstance(eos, list) else [eos]) if isinstance(i, int)]
    if not ids:
        raise ValueError(f"the tokenizer at {path} has no eos token to end an assistant message")
    return list(dict.fromkeys(ids))


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:500]
