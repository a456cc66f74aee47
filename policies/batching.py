"""Continuous batching for an in-process Hugging Face causal LM (issue 35).

One thread owns the model. Each step it decodes one token for every live sequence in a single forward
pass over a slot KV cache (`SlotCache`), then prefills one chunk (`prefill_chunk` ids at most) of the
next waiting prompt, so a long prompt holds up the others' decode by one chunk a step, never by its whole
length. A sequence joins the decode batch once its prompt is cached and leaves it when it stops. When
every decoding row begins with the same ids (the system prompt and the tools), a decode step attends to
those once for all rows (`policies/shared_prefix.py`).

What each sequence gets is its own: it samples from its own row of logits with its own
`torch.Generator`, so a request's seed gives the same ids whatever else is in the batch (up to float
rounding between batch shapes, which can flip a near-tie), and the log-prob of each id is taken from the
distribution it was drawn from (`sample_token`). The model changes only between steps: the caller's lock
is held for each step, and whoever loads weights takes it too; each id records the version that sampled
it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from transformers import PreTrainedModel

from policies import shared_prefix
from policies.base import Generation, SamplingParams
from policies.cpu_threads import cpu_threads


def sample_rows(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]
) -> list[tuple[int, float]]:
    """One id per row of `logits` (B, V), row b drawn with `params[b]` from its own `generators[b]`, each
    with its log-prob under the distribution it was drawn from (see policies/hf.py's docstring).

    A draw is one uniform number u from the row's generator and the first id whose cumulative probability
    passes u times the row's total (inverse-CDF sampling), so a row's id depends only on its own logits and
    generator, never on the other rows. The cumulative sum is taken in float64: in float32 its rounding
    differs between batch shapes by up to ~1e-4 over a vocabulary, which moved an id one place about once
    in 3,000 tokens; in float64 only the logits' own rounding (~1e-6) can, at a boundary it falls on."""
    logits = logits.float()
    scale = torch.tensor([[p.temperature or 1.0] for p in params], device=logits.device)  # (B, 1)
    logp = torch.log_softmax(logits / scale, dim=-1)  # (B, V)
    uniform = torch.stack([torch.rand((), generator=g, device=g.device) for g in generators])  # (B,)
    ids = _inverse_cdf(logp, uniform)  # (B,)
    logps = logp.gather(1, ids[:, None])[:, 0].tolist()
    greedy = torch.argmax(logits, dim=-1).tolist()  # (B,)
    out: list[tuple[int, float]] = []
    for b, token in enumerate(ids.tolist()):
        if params[b].temperature == 0:
            out.append((greedy[b], float(logp[b, greedy[b]])))
        elif params[b].top_p < 1:
            out.append(_nucleus_draw(logp[b], params[b].top_p, uniform[b : b + 1]))
        else:
            out.append((token, logps[b]))
    return out


def _inverse_cdf(logp: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Per row of `logp` (B, V), the first id whose float64 cumulative probability exceeds `uniform` (B,)
    times the row's total: (B,) ids."""
    cdf = logp.double().exp().cumsum(dim=-1)  # (B, V)
    target = uniform.double()[:, None] * cdf[:, -1:]  # (B, 1)
    return torch.searchsorted(cdf, target, right=True)[:, 0].clamp(max=logp.shape[1] - 1)


def _nucleus_draw(logp: torch.Tensor, top_p: float, uniform: torch.Tensor) -> tuple[int, float]:
    """An id drawn at `uniform` (1,) from the nucleus of `logp` (V,), with its renormalised log-prob."""
    sorted_logp, order = torch.sort(logp, descending=True)  # (V,), (V,)
    sorted_p = sorted_logp.exp()
    # The nucleus (Holtzman et al. 2020, eq. 2): the most likely ids until their mass reaches top_p.
    outside = sorted_p.cumsum(dim=-1) - sorted_p >= top_p  # (V,)
    nucleus = torch.log_softmax(sorted_logp.masked_fill(outside, float("-inf")), dim=-1)  # (V,)
    i = int(_inverse_cdf(nucleus[None], uniform)[0])
    return int(order[i]), float(nucleus[i])


def sample_token(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator
) -> tuple[int, float]:
    """`sample_rows` of one row `logits` (V,)."""
    params = SamplingParams(temperature=temperature, top_p=top_p)
    return sample_rows(logits[None], [params], [generator])[0]


class SlotCache:
    """Keys and values of the live sequences: per layer one (slots, kv_heads, capacity, head_dim) tensor
    for keys and one for values; the sequence in slot s owns row s's first positions. It answers the one
    call transformers' attention layers make on a cache, `update`, writing where `aim` said."""

    def __init__(self, model: PreTrainedModel) -> None:
        config = model.config
        heads = config.num_attention_heads
        self.kv_heads: int = getattr(config, "num_key_value_heads", None) or heads
        self.head_dim: int = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.layers: int = config.num_hidden_layers
        parameter = next(model.parameters())
        self.dtype, self.device = parameter.dtype, parameter.device
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.slots = self.capacity = 0
        self._rows = slice(0, 0)
        self._index: tuple[torch.Tensor, torch.Tensor] | None = None
        self._length = 0

    def reserve(self, slots: int, capacity: int) -> None:
        """At least `slots` rows of at least `capacity` positions, each grown by doubling, contents kept."""
        if slots <= self.slots and capacity <= self.capacity:
            return
        new_slots = max(slots, 2 * self.slots) if slots > self.slots else self.slots
        new_capacity = max(capacity, 2 * self.capacity) if capacity > self.capacity else self.capacity
        shape = (new_slots, self.kv_heads, new_capacity, self.head_dim)

        def grown(old: torch.Tensor | None) -> torch.Tensor:
            new = torch.zeros(shape, dtype=self.dtype, device=self.device)
            if old is not None:
                new[: self.slots, :, : self.capacity] = old
            return new

        empty: list[torch.Tensor | None] = [None] * self.layers
        old_keys = list(self.keys) or empty
        old_values = list(self.values) or empty
        self.keys = [grown(old) for old in old_keys]
        self.values = [grown(old) for old in old_values]
        self.slots, self.capacity = new_slots, new_capacity

    def move(self, source: int, target: int, length: int) -> None:
        """Slot `source`'s first `length` positions copied to slot `target` (a sequence changing slot)."""
        for tensor in (*self.keys, *self.values):
            tensor[target, :, :length] = tensor[source, :, :length]

    def swap(self, one: int, other: int, length: int) -> None:
        """Slots `one` and `other` exchange their first `length` positions."""
        for tensor in (*self.keys, *self.values):
            tensor[[one, other], :, :length] = tensor[[other, one], :, :length]

    def aim(self, first: int, positions: torch.Tensor, length: int) -> None:
        """The next forward's rows are slots first .. first + B - 1 (B = positions.shape[0]); row b's T new
        keys go to the positions `positions[b]` (B, T); attention reads each row's first `length`."""
        rows = torch.arange(first, first + positions.shape[0], device=self.device)[:, None]  # (B, 1)
        self._index = (rows, positions)
        self._rows = slice(first, first + positions.shape[0])
        self._length = length

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Writes a layer's new keys and values (B, kv_heads, T, head_dim) and returns what its attention
        reads: (B, kv_heads, length, head_dim) each, a view of the rows (no copy)."""
        assert self._index is not None, "aim() comes before a forward"
        rows, positions = self._index  # (B, 1), (B, T)
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        keys[rows, :, positions] = key.transpose(1, 2)  # indexed as (B, T, kv_heads, head_dim)
        values[rows, :, positions] = value.transpose(1, 2)
        return keys[self._rows, :, : self._length], values[self._rows, :, : self._length]


def attention_masks(
    config: Any, positions: torch.Tensor, length: int, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """The additive masks (B, 1, T, length) of `dtype` each kind of layer attends with, 0 where a key is
    seen and -inf where not: the query at `positions[b, t]` sees the keys at positions j <= it, and a
    sliding-window layer only those with j > it - window (transformers' own sliding-window rule). A row's
    positions past its own length are never seen. Additive, as attention turns a boolean mask into this
    very one in every layer at every step (7 % of a decode step of 8 in the profile): made once a step."""
    keys = torch.arange(length, device=positions.device)  # (L,)
    query = positions[:, None, :, None]  # (B, 1, T, 1)
    full = keys <= query  # (B, 1, T, L)
    seen = {"full_attention": full}
    window = getattr(config, "sliding_window", None)
    if window:
        seen["sliding_attention"] = full & (keys > query - window)
    blocked = torch.tensor(float("-inf"), dtype=dtype, device=positions.device)
    return {
        kind: torch.zeros((), dtype=dtype, device=positions.device).where(mask, blocked)
        for kind, mask in seen.items()
    }


class PrefixStore:
    """Keys and values of contexts that left the batch, for a later prompt that starts with the same ids: an
    episode's next turn begins with its whole last context, and every first turn with the system prompt and
    the tools. Such a prompt copies them instead of computing them again (what vLLM calls automatic prefix
    caching). A context that extends a stored one replaces it; the oldest go first past `max_tokens`; all
    go when the weights change (`clear`)."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.tokens = 0
        self.entries: OrderedDict[int, tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]] = (
            OrderedDict()
        )
        """id -> (its ids (n,), per layer keys and values (kv_heads, n, head_dim))."""
        self._next = 0

    def clear(self) -> None:
        self.entries.clear()
        self.tokens = 0

    def keep(self, ids: list[int], keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        if not ids or len(ids) > self.max_tokens:
            return
        held = torch.tensor(ids)
        for key, (other, _, _) in list(self.entries.items()):
            if len(other) <= len(held) and torch.equal(held[: len(other)], other):
                self._drop(key)  # what it held is the start of this one
        self.entries[self._next] = (held, keys, values)
        self._next += 1
        self.tokens += len(held)
        while self.tokens > self.max_tokens:
            self._drop(next(iter(self.entries)))

    def longest(self, ids: list[int]) -> tuple[int, list[torch.Tensor], list[torch.Tensor]]:
        """The most leading ids of `ids` a stored context holds, with that context's keys and values."""
        if not self.entries or not ids:
            return 0, [], []
        wanted = torch.tensor(ids)
        best, found = 0, -1
        for key, (held, _, _) in self.entries.items():
            n = min(len(held), len(wanted))
            differ = torch.nonzero(held[:n] != wanted[:n])
            common = int(differ[0]) if len(differ) else n
            if common > best:
                best, found = common, key
        if not best:
            return 0, [], []
        self.entries.move_to_end(found)  # used: the last to go
        _, keys, values = self.entries[found]
        return best, keys, values

    def _drop(self, key: int) -> None:
        self.tokens -= len(self.entries.pop(key)[0])


@dataclass(eq=False)
class Sequence:
    """One request: its prompt, how to sample, and what it has sampled so far."""

    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    cached: int = 0
    """How many positions of its `context` the cache holds."""
    reused: int | None = None
    """Positions copied from the prefix store when it started prefilling (None: not looked up yet)."""
    finish: Literal["stop", "length"] | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def context(self) -> list[int]:
        """What the cache must hold before the next decode step: every id so far but the last."""
        return (self.prompt + self.ids)[:-1]

    def last(self) -> int:
        """The id the next decode step feeds."""
        return self.ids[-1] if self.ids else self.prompt[-1]

    def generation(self) -> Generation:
        assert self.finish is not None
        mixed = len(set(self.versions)) > 1
        return Generation(
            ids=self.ids, logprobs=self.logprobs, finish_reason=self.finish, policy_version=self.versions[0],
            token_versions=list(self.versions) if mixed else None,
        )  # fmt: skip


class SamplerClosed(RuntimeError):
    """A generation asked of, or left unfinished by, a closed `BatchScheduler`."""


class BatchScheduler:
    """The thread that owns the model and decodes every live sequence together (the module docstring).

    `submit` blocks until its sequence is done. `lock` is held for each step; `version` is read under it
    for every id sampled. At most `max_batch` sequences are in the cache at once; more wait their turn.
    The contexts being prefilled share a step's `prefill_chunk` ids, first come first served."""

    def __init__(
        self,
        model: PreTrainedModel,
        stop_ids: list[int],
        version: Callable[[], int],
        lock: threading.Lock,
        max_batch: int = 16,
        prefill_chunk: int = 1024,
        prefix_tokens: int = 65536,
        threads: int | None = None,
    ) -> None:
        if max_batch < 1 or prefill_chunk < 1:
            raise ValueError(
                f"max_batch and prefill_chunk must be at least 1, got {max_batch}, {prefill_chunk}"
            )
        self.model, self.stop_ids, self.version, self.lock = model, set(stop_ids), version, lock
        self.max_batch, self.prefill_chunk, self.threads = max_batch, prefill_chunk, threads
        self.cache = SlotCache(model)
        self.prefixes = PrefixStore(prefix_tokens)
        self.steps = 0
        """Steps run: each a decode of the batch and/or one chunk of the prompts being prefilled."""
        self._waiting: deque[Sequence] = deque()
        self._decoding: list[Sequence] = []
        """Sequence i sits in slot i."""
        self._filling: list[Sequence] = []
        """Contexts being prefilled: sequence j in slot len(_decoding) + j."""
        self._shared: int | None = None
        """How many leading ids every decoding row shares (None: to count again, the batch changed)."""
        self.shares_prefix = shared_prefix.supported(model)
        """Whether decode steps attend to a prefix all rows share once for all (`policies/shared_prefix.py`)."""
        self.shared_steps = 0
        """Decode steps that did."""
        self._cache_stamp = self._weights_stamp()
        """The weights (version, in-place changes) that computed the cache's keys and values."""
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, sequence: Sequence) -> Generation:
        """Queues `sequence`, waits until it is done, and returns what it sampled."""
        with self._wake:
            if self._closed:
                raise SamplerClosed("the sampler was closed before this generation began")
            self._waiting.append(sequence)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="harness-batch", daemon=True)
                self._thread.start()
            self._wake.notify()
        sequence.done.wait()
        if sequence.error is not None:
            raise sequence.error
        return sequence.generation()

    def run_here(self, sequences: list[Sequence]) -> list[Generation]:
        """Runs `sequences` together to the end in this thread (no other request may be in flight)."""
        self._waiting.extend(sequences)
        while self._admit():
            self._step()
        for sequence in sequences:
            if sequence.error is not None:
                raise sequence.error
        return [s.generation() for s in sequences]

    def close(self, timeout_s: float = 30.0) -> None:
        """Stops the decode thread after its current step; the sequences it had not finished end with
        `SamplerClosed`. A daemon thread left inside the model's forward when the interpreter exits aborts
        the process (CPython ends it where the C++ code below cannot unwind), so a run that ends early,
        by Ctrl-C, closes the sampler first."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _serve(self) -> None:
        with cpu_threads(self.threads):  # the thread's own count: a learner beside it keeps its own
            while True:
                with self._wake:
                    while not self._closed and not self._admit():
                        self._wake.wait()
                    if self._closed:
                        unfinished = [*self._decoding, *self._filling, *self._waiting]
                        self._waiting.clear()
                        self._fail(unfinished, SamplerClosed("the sampler was closed"))
                        return
                self._step()

    def _fail(self, sequences: list[Sequence], error: BaseException) -> None:
        """Every one of `sequences` told why it ends without its generation; the cache let go."""
        for sequence in sequences:
            sequence.error = error
            sequence.done.set()
        self._decoding, self._filling, self._shared = [], [], None
        self.cache = SlotCache(self.model)

    def _admit(self) -> bool:
        """Waiting prompts start prefilling while there is room; whether there is work."""
        while self._waiting and len(self._decoding) + len(self._filling) < self.max_batch:
            self._filling.append(self._waiting.popleft())
        return bool(self._decoding or self._filling)

    def _step(self) -> None:
        try:
            with self.lock, torch.inference_mode():
                self._refill_on_new_weights()
                if self._decoding:
                    self._decode()
                if self._filling:
                    self._prefill()
                self.steps += 1
        except BaseException as e:  # every sequence in the cache is lost with it; they are told why
            self._fail([*self._decoding, *self._filling], e)
        if not self._decoding and not self._filling:
            self.cache = SlotCache(self.model)  # idle: its memory goes back

    def _forward(
        self, inputs: torch.Tensor, positions: torch.Tensor, length: int, shared: int = 0
    ) -> torch.Tensor:
        """The logits (B, V) after the last column of `inputs` (B, T) at `positions` (B, T), with the cache
        aimed already. One query that may see every cached key (a lone decode) needs no mask; the first
        `shared` keys, the same in every row, are attended to once for all of them (a decode step)."""
        config = self.model.config
        if inputs.shape == (1, 1) and not getattr(config, "sliding_window", None):
            masks: dict[str, torch.Tensor | None] = dict.fromkeys(("full_attention", "sliding_attention"))
        else:
            masks = dict(attention_masks(config, positions, length, self.cache.dtype))
        self.shared_steps += bool(shared)
        with shared_prefix.attention_as(self.model, shared_prefix.ATTENTION) if shared else nullcontext():
            out = self.model(
                input_ids=inputs, position_ids=positions, attention_mask=masks, cache=self.cache,
                use_cache=True, logits_to_keep=1, **({"shared_prefix": shared} if shared else {}),
            )  # fmt: skip
        logits: torch.Tensor = out.logits[:, -1]
        return logits

    def _shared_prefix(self) -> int:
        """How many leading cached ids every decoding row shares, when enough to attend to once; else 0."""
        batch = self._decoding
        if not self.shares_prefix or len(batch) < 2:
            return 0
        if self._shared is None:
            self._shared = shared_prefix.common_prefix([s.context()[: s.cached] for s in batch])
        return self._shared if self._shared >= shared_prefix.MIN_SHARED else 0

    def _decode(self) -> None:
        batch = self._decoding
        device = self.cache.device
        positions = torch.tensor([[s.cached] for s in batch], device=device)  # (B, 1)
        inputs = torch.tensor([[s.last()] for s in batch], device=device)  # (B, 1)
        length = max(s.cached for s in batch) + 1
        self.cache.reserve(len(batch) + len(self._filling), length)
        self.cache.aim(0, positions, length)
        logits = self._forward(inputs, positions, length, self._shared_prefix())  # (B, V)
        for sequence in batch:
            sequence.cached += 1
        self._sample(batch, logits)
        for sequence in [s for s in batch if s.finish is not None]:
            self._leave(sequence)

    def _prefill(self) -> None:
        """The step's `prefill_chunk` ids of the contexts being prefilled, first come first served, in one
        forward pass (rows padded on the right: a pad's key lands past its row's context, where no query
        looks before the row's own id overwrites it). A row looks in the prefix store when its turn
        comes, so a prompt admitted beside another with the same start (every first turn: the system
        prompt and the tools) copies it once the other is filled instead of computing it too. A context
        filled joins the decode batch, whose step feeds its last id and samples the next."""
        rows, first = self._filling, len(self._decoding)
        chunks: list[list[int]] = []
        budget = self.prefill_chunk
        for j, sequence in enumerate(rows):
            if budget == 0:
                break
            if sequence.reused is None:
                self._reuse_prefix(sequence, first + j, first + len(rows))
            context = sequence.context()
            chunks.append(context[sequence.cached : sequence.cached + budget])
            budget -= len(chunks[-1])
        width = max(len(c) for c in chunks)
        if width:
            device = self.cache.device
            starts = torch.tensor([[s.cached] for s in rows[: len(chunks)]], device=device)  # (B, 1)
            positions = starts + torch.arange(width, device=device)  # (B, T)
            length = int(positions.max()) + 1
            self.cache.reserve(first + len(rows), length)
            self.cache.aim(first, positions, length)
            pad = [c[-1] if c else 0 for c in chunks]
            inputs = torch.tensor(
                [c + [pad[b]] * (width - len(c)) for b, c in enumerate(chunks)], device=device
            )
            self._forward(inputs, positions, length)  # the keys and values are what it is for
        for sequence, chunk in zip(rows, chunks, strict=False):
            sequence.cached += len(chunk)
        for sequence in [s for s in rows[: len(chunks)] if s.cached == len(s.context())]:
            self._join(sequence)

    def _weights_stamp(self) -> tuple[int, int]:
        return self.version(), sum(p._version for p in self.model.parameters())

    def _reuse_prefix(self, sequence: Sequence, slot: int, slots: int) -> None:
        """`sequence` (in `slot`) copies what the prefix store holds of its context."""
        common, keys, values = self.prefixes.longest(sequence.context())
        sequence.reused = common
        if not common:
            return
        self.cache.reserve(slots, common)
        for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
            self.cache.keys[layer][slot, :, :common] = k[:, :common]
            self.cache.values[layer][slot, :, :common] = v[:, :common]
        sequence.cached = common

    def _remember(self, sequence: Sequence, slot: int) -> None:
        """The prefix store keeps `sequence`'s cached context (in `slot`)."""
        if not self.prefixes.max_tokens:
            return
        held = sequence.cached
        self.prefixes.keep(
            (sequence.prompt + sequence.ids)[:held],
            [k[slot, :, :held].clone() for k in self.cache.keys],
            [v[slot, :, :held].clone() for v in self.cache.values],
        )

    def _join(self, sequence: Sequence) -> None:
        """A context filled: it swaps slots with the first one being filled and joins the batch."""
        first, j = len(self._decoding), self._filling.index(sequence)
        if j:
            other = self._filling[0]
            self.cache.swap(first, first + j, max(sequence.cached, other.cached))
            self._filling[0], self._filling[j] = sequence, other
        self._filling.pop(0)
        self._decoding.append(sequence)
        self._shared = None
        if sequence.reused is not None and sequence.cached - sequence.reused >= 64:  # worth keeping now
            self._remember(sequence, first)

    def _refill_on_new_weights(self) -> None:
        """After a weight update, every cached key and value is the old weights': each live sequence's
        context is prefilled again before its next id, so that every id is sampled wholly by the version it
        records (the learner's recomputation of its log-prob then agrees), and the prefix store is emptied.
        An update is a new version or any in-place change of a parameter (torch counts those per tensor:
        a learner that steps the sampler's own model without a new version is caught too)."""
        stamp = self._weights_stamp()
        if stamp == self._cache_stamp:
            return
        self._cache_stamp = stamp
        self.prefixes.clear()
        self._filling = self._decoding + self._filling  # slots stay as they are
        self._decoding, self._shared = [], None
        for sequence in self._filling:
            sequence.cached, sequence.reused = 0, None

    def _sample(self, batch: list[Sequence], logits: torch.Tensor) -> None:
        """Each sequence's next id from its row of `logits` (B, V)."""
        drawn = sample_rows(logits, [s.params for s in batch], [s.generator for s in batch])
        version = self.version()
        for sequence, (token, logprob) in zip(batch, drawn, strict=True):
            sequence.ids.append(token)
            sequence.logprobs.append(logprob)
            sequence.versions.append(version)
            if token in self.stop_ids:
                sequence.finish = "stop"
            elif len(sequence.ids) >= sequence.params.max_new_tokens:
                sequence.finish = "length"

    def _leave(self, sequence: Sequence) -> None:
        """`sequence` leaves the batch; the last one takes its slot, and the last prompt being filled takes
        the slot that frees, so the batch stays rows 0 .. B - 1 and the prompts the rows after it."""
        slot, last = self._decoding.index(sequence), len(self._decoding) - 1
        self._remember(sequence, slot)
        if slot != last:
            moved = self._decoding[last]
            self.cache.move(last, slot, moved.cached)
            self._decoding[slot] = moved
        self._decoding.pop()
        self._shared = None
        if self._filling:
            self.cache.move(last + len(self._filling), last, self._filling[-1].cached)
            self._filling.insert(0, self._filling.pop())
        sequence.done.set()
