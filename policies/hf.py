"""An in-process Hugging Face causal LM as a token policy: exact ids in, exact ids and log-probs out.

Sampling is incremental with the KV cache. The log-prob of each sampled id is taken from the very
distribution it was drawn from, so the learner can recompute it with one teacher-forced forward pass
(`sequence_logprobs`) and get the same number up to float rounding:

- temperature > 0, top_p = 1: log_softmax(logits / temperature)[id];
- temperature > 0, top_p < 1: the log-prob under the nucleus, renormalised (what was sampled from), which
  `sequence_logprobs` cannot reproduce: it knows nothing of the truncation;
- temperature = 0 (greedy): log_softmax(logits)[id], the model's own distribution, since the argmax's
  "sampling" distribution puts all mass on one id.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, cast

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, Cache, PreTrainedModel

from policies.base import Generation, SamplingParams, Tokenizer


class HFPolicy:
    """A causal LM and its tokenizer loaded with `from_pretrained`, sampled one token at a time.

    Calls to `generate` from several threads take turns on the model. When `SamplingParams.seed` is None,
    the n-th generation is seeded from (`seed`, n), so a run with a fixed policy seed is reproducible.
    """

    kind: Literal["token"] = "token"

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        spec: str | None = None,
        seed: int = 0,
    ) -> None:
        self.spec = spec or f"hf:{path}"
        self.device = torch.device(device)
        self.seed = seed
        tokenizer = AutoTokenizer.from_pretrained(path)
        # HF types decode as returning `str | list[str]`; for a list of ids it is a str, as `Tokenizer` says.
        self.tokenizer = cast(Tokenizer, tokenizer)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        # PreTrainedModel.to is typed (through functools.wraps) as the unbound Module.to; this is that call.
        self.model: PreTrainedModel = torch.nn.Module.to(model, self.device).eval()
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError(f"the tokenizer at {path} has no eos token to end an assistant message")
        end_of_text = tokenizer.get_vocab().get("<|endoftext|>")
        self._stop_ids = [eos] + ([end_of_text] if end_of_text is not None and end_of_text != eos else [])
        self._version = 0
        self._generations = 0
        self._lock = threading.Lock()

    @property
    def version(self) -> int:
        return self._version

    def set_version(self, version: int) -> None:
        with self._lock:
            self._version = version

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Takes the learner's new weights in place; generations after this carry `version`."""
        own = self.model.state_dict()
        unexpected = sorted(set(state_dict) - set(own))
        # `save_pretrained` leaves out tied weights (the output embedding of a tied model): a tensor may be
        # missing when it shares its storage with one that is given.
        given = {own[name].data_ptr() for name in state_dict if name in own}
        missing = sorted(name for name in own if name not in state_dict and own[name].data_ptr() not in given)
        if missing or unexpected:
            raise ValueError(f"the weights do not fit the model: missing {missing}, unexpected {unexpected}")
        with self._lock:
            self.model.load_state_dict(state_dict, strict=False)
            self._version = version

    def load_weights(self, checkpoint: Path, version: int) -> None:
        """Loads the weights that `save_pretrained` wrote to `checkpoint` (`*.safetensors`, sharded or not)."""
        shards = sorted(Path(checkpoint).glob("*.safetensors"))
        if not shards:
            raise ValueError(f"{checkpoint} holds no *.safetensors file")
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(load_file(shard))
        self.load_state_dict(state, version)

    def stop_ids(self) -> list[int]:
        return list(self._stop_ids)

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        vocab_size = self.model.config.vocab_size
        if not prompt_ids:
            raise ValueError("prompt_ids is empty: a generation needs at least one id to condition on")
        if not all(0 <= i < vocab_size for i in prompt_ids):
            raise ValueError(f"prompt_ids holds an id outside the vocabulary [0, {vocab_size})")
        with self._lock:
            seed = params.seed if params.seed is not None else self._default_seed()
            generator = torch.Generator(device=self.device).manual_seed(seed)
            ids: list[int] = []
            logprobs: list[float] = []
            finish_reason: Literal["stop", "length"] = "length"
            inputs = torch.tensor([prompt_ids], device=self.device)  # (1, T)
            cache: Cache | None = None
            with torch.inference_mode():
                while len(ids) < params.max_new_tokens:
                    out = self.model(input_ids=inputs, cache=cache, use_cache=True, logits_to_keep=1)
                    cache = out.cache
                    next_logits = out.logits[0, -1]  # (V,)
                    token, logprob = sample_token(next_logits, params.temperature, params.top_p, generator)
                    ids.append(token)
                    logprobs.append(logprob)
                    if token in self._stop_ids:
                        finish_reason = "stop"
                        break
                    inputs = torch.tensor([[token]], device=self.device)  # (1, 1)
            return Generation(
                ids=ids, logprobs=logprobs, finish_reason=finish_reason, policy_version=self._version
            )

    def prompt_logprobs(self, ids: list[int], temperature: float) -> list[float]:
        """`policies.base.Scorer`: every id's log-prob after the ones before it, in one forward pass."""
        with self._lock:
            return sequence_logprobs(self.model, ids, 1, temperature)

    def _default_seed(self) -> int:
        self._generations += 1
        digest = hashlib.blake2b(f"{self.seed}:{self._generations}".encode(), digest_size=8).digest()
        return int.from_bytes(digest) >> 1  # torch seeds are at most 2**64 - 1; keep clear of the sign bit


def sample_token(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator
) -> tuple[int, float]:
    """Draws one id from `logits` (V,) and returns it with its log-prob (see the module docstring)."""
    logits = logits.float()
    if temperature == 0:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, dim=-1)[token])
    logp = torch.log_softmax(logits / temperature, dim=-1)  # (V,)
    if top_p < 1:
        sorted_logp, order = torch.sort(logp, descending=True)  # (V,), (V,)
        sorted_p = sorted_logp.exp()
        # The nucleus (Holtzman et al. 2020, eq. 2): the most likely ids until their mass reaches top_p.
        outside = sorted_p.cumsum(dim=-1) - sorted_p >= top_p  # (V,)
        nucleus = torch.log_softmax(sorted_logp.masked_fill(outside, float("-inf")), dim=-1)  # (V,)
        i = int(torch.multinomial(nucleus.exp(), 1, generator=generator))
        return int(order[i]), float(nucleus[i])
    token = int(torch.multinomial(logp.exp(), 1, generator=generator))
    return token, float(logp[token])


def sequence_logprobs(model: PreTrainedModel, ids: list[int], start: int, temperature: float) -> list[float]:
    """log p(ids[t] | ids[:t]) for t >= start, from one teacher-forced forward pass over all of `ids`.

    With temperature > 0 the logits are divided by it, as the sampler did; temperature 0 gives the plain
    log_softmax, as the greedy sampler reports. A top_p truncation is not reproduced.
    """
    if not 1 <= start <= len(ids):
        raise ValueError(f"start must be in [1, {len(ids)}] (the first id has no log-prob), got {start}")
    device = next(model.parameters()).device
    inputs = torch.tensor([ids], device=device)  # (1, T)
    with torch.inference_mode():
        logits = model(input_ids=inputs, use_cache=False).logits[0, start - 1 : -1].float()  # (T - start, V)
        if temperature > 0:
            logits = logits / temperature
        logp = torch.log_softmax(logits, dim=-1)  # (T - start, V)
        targets = inputs[0, start:, None]  # (T - start, 1)
        return logp.gather(-1, targets).squeeze(-1).tolist()
