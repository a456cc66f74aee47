"""An in-process Hugging Face causal LM as a token policy: exact ids in, exact ids and log-probs out.

Generations from several threads are decoded together, one forward pass per step for all of them
(`policies/batching.py`); a model whose forward pass does not take the batched cache, found by
comparing a few batched steps with the one-at-a-time path at its first generation, is sampled one
generation at a time. Sampling is incremental with the KV cache. The log-prob of each sampled id is taken from the very
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
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, cast

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, Cache, PreTrainedModel

from policies.base import Generation, SamplingParams, Tokenizer
from policies.batching import BatchScheduler, Sequence, sample_rows, sample_token
from policies.cpu_threads import cpu_threads
from policies.shared_prefix import MIN_SHARED

__all__ = ["HFPolicy", "sample_token", "sequence_logprobs"]


class HFPolicy:
    """A causal LM and its tokenizer loaded with `from_pretrained`.

    Calls to `generate` from several threads are decoded together (`max_batch` at once, prompts prefilled
    `prefill_chunk` ids a step, what the last `prefix_tokens` ids of finished contexts share with a new
    prompt copied, not computed) unless `batching` is False or the model does not take the batched cache
    (`batched` says which). When `SamplingParams.seed` is None, the n-th generation is seeded from
    (`seed`, n), so a run with a fixed policy seed is reproducible.
    """

    kind: Literal["token"] = "token"

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        spec: str | None = None,
        seed: int = 0,
        batching: bool = True,
        max_batch: int = 16,
        prefill_chunk: int = 1024,
        prefix_tokens: int = 65536,
        threads: int | None = None,
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
        self._seed_lock = threading.Lock()
        self._scheduler = BatchScheduler(
            self.model,
            self._stop_ids,
            lambda: self._version,
            self._lock,
            max_batch,
            prefill_chunk,
            prefix_tokens,
            threads,
        )
        self.threads = threads
        """CPU threads of the sampler's decode (`policies/cpu_threads.py`), its thread's alone; None: torch's
        default, one per core."""
        self._batched: bool | None = None if batching else False
        """Whether generations are decoded together; None: not known until the first generation asks (a
        policy made only for its `.model`, a reference or a teacher, never pays for the check)."""

    @property
    def batched(self) -> bool:
        """Whether generations are decoded together: asked for, and the model takes the batched cache."""
        if self._batched is None:
            with self._seed_lock:
                if self._batched is None:
                    self._batched = self._batching_agrees()
        return self._batched

    @batched.setter
    def batched(self, value: bool) -> None:
        self._batched = value

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

    def close(self) -> None:
        """Ends the batched sampler's thread (`BatchScheduler.close`); generations still waiting fail."""
        self._scheduler.close()

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        vocab_size = self.model.config.vocab_size
        if not prompt_ids:
            raise ValueError("prompt_ids is empty: a generation needs at least one id to condition on")
        if not all(0 <= i < vocab_size for i in prompt_ids):
            raise ValueError(f"prompt_ids holds an id outside the vocabulary [0, {vocab_size})")
        with self._seed_lock:
            seed = params.seed if params.seed is not None else self._default_seed()
        generator = torch.Generator(device=self.device).manual_seed(seed)
        if self.batched:
            return self._scheduler.submit(Sequence(list(prompt_ids), params, generator))
        return self.generate_alone(prompt_ids, params, generator)

    def generate_alone(
        self, prompt_ids: list[int], params: SamplingParams, generator: torch.Generator
    ) -> Generation:
        """One generation with the model to itself (the lock held throughout): the path of a model that
        does not batch, and the reference the batched one is checked against."""
        with self._lock, cpu_threads(self.threads):
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
                    ((token, logprob),) = sample_rows(next_logits[None], [params], [generator])
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

    def _batching_agrees(self) -> bool:
        """Whether a few greedy steps of two prompts decoded together (one prefilled in chunks, the two
        sharing their first `MIN_SHARED` ids) give the ids and log-probs of the one-at-a-time path: a
        model whose forward pass does not take the batched cache or masks fails here, and is sampled one
        generation at a time, with a warning. Where attending to the shared prefix once fails or disagrees
        the decode attends as the model does, checked again."""
        common = [(7 * i) % 97 + 1 for i in range(MIN_SHARED)]
        prompts = [[*common, 1, 2, 3, 4, 5], [*common, 6, 7, 8]]
        params = SamplingParams(max_new_tokens=8, temperature=0)
        alone = [self.generate_alone(p, params, torch.Generator(device=self.device)) for p in prompts]
        failure = self._together_differs(prompts, params, alone)
        if failure and self._scheduler.shares_prefix:
            self._scheduler.shares_prefix = False
            failure = self._together_differs(prompts, params, alone)
        if failure:
            warnings.warn(
                f"{self.spec}: sampled one generation at a time: batched decoding {failure}", stacklevel=2
            )
        return not failure

    def _together_differs(
        self, prompts: list[list[int]], params: SamplingParams, alone: list[Generation]
    ) -> str | None:
        """How `prompts` decoded together differ from `alone` (None: they agree)."""
        chunk = self._scheduler.prefill_chunk
        self._scheduler.prefill_chunk = 100  # the first prompt in two chunks, the second joining it later
        try:
            together = self._scheduler.run_here(
                [Sequence(list(p), params, torch.Generator(device=self.device)) for p in prompts]
            )
        except Exception as e:  # any failure of an architecture not known to batch: it does not batch
            return f"failed ({e})"
        finally:
            self._scheduler.prefill_chunk = chunk
        agrees = all(
            a.ids == b.ids and max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-3
            for a, b in zip(alone, together, strict=True)
        )
        return None if agrees else "disagrees"

    def _default_seed(self) -> int:
        self._generations += 1
        digest = hashlib.blake2b(f"{self.seed}:{self._generations}".encode(), digest_size=8).digest()
        return int.from_bytes(digest) >> 1  # torch seeds are at most 2**64 - 1; keep clear of the sign bit


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
