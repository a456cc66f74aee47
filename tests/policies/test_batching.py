"""Continuous batching (policies/batching.py) keeps the TITO contract: a sequence sampled in a batch gets
the ids and log-probs it gets alone, whatever else is in the batch, its log-probs are the learner's, and
new weights land between decode steps, never under a token."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from policies import shared_prefix
from policies.base import Generation, SamplingParams
from policies.batching import BatchScheduler, SamplerClosed, Sequence, sample_rows
from policies.hf import HFPolicy, sequence_logprobs
from policies.shared_prefix import common_prefix


def prompt(n: int, length: int) -> list[int]:
    """A deterministic prompt of `length` ids, different for each n."""
    return [(37 * n + 11 * i) % 1900 + 20 for i in range(length)]


def alone(policy: HFPolicy, prompt_ids: list[int], params: SamplingParams) -> Generation:
    assert params.seed is not None
    return policy.generate_alone(prompt_ids, params, torch.Generator().manual_seed(params.seed))


def together(
    policy: HFPolicy, requests: list[tuple[list[int], SamplingParams]], chunk: int
) -> list[Generation]:
    """The requests decoded as one batch on a scheduler of their own, prompts prefilled `chunk` ids a step."""
    scheduler = BatchScheduler(
        policy.model, policy.stop_ids(), lambda: policy.version, threading.Lock(), 16, chunk
    )
    sequences = [Sequence(p, s, torch.Generator().manual_seed(s.seed or 0)) for p, s in requests]
    return scheduler.run_here(sequences)


def assert_agree(policy: HFPolicy, prompt_ids: list[int], one: Generation, other: Generation) -> float:
    """The same ids, and log-probs within 1e-5; a flip is reported with the two ids' log-probs where the
    two paths parted (a near-tie that float rounding tipped), not hidden. Returns the largest gap."""
    if one.ids != other.ids:
        at = next(i for i, (a, b) in enumerate(zip(one.ids, other.ids, strict=False)) if a != b)
        scores = sequence_logprobs(
            policy.model, [*prompt_ids, *one.ids[:at], one.ids[at]], len(prompt_ids) + at, 1.0
        )
        rival = sequence_logprobs(
            policy.model, [*prompt_ids, *one.ids[:at], other.ids[at]], len(prompt_ids) + at, 1.0
        )
        raise AssertionError(
            f"ids part at {at}: {one.ids[at]} (log-prob {scores[-1]:.7f}) against {other.ids[at]} ({rival[-1]:.7f})"
        )
    gap = max(abs(a - b) for a, b in zip(one.logprobs, other.logprobs, strict=True))
    assert gap <= 1e-5, gap
    assert one.finish_reason == other.finish_reason
    return gap


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_a_sequence_gets_in_any_batch_what_it_gets_alone(tiny_policy: HFPolicy, temperature: float) -> None:
    """The same seed on the same prompt, alone and in batches of other make-ups (other prompts, longer and
    shorter, other lengths to generate, prompts prefilled in chunks of 7, 64 and 512 ids)."""
    requests = [
        (
            prompt(n, 30 + 97 * n),
            SamplingParams(max_new_tokens=20 + 9 * n, temperature=temperature, seed=100 + n),
        )
        for n in range(8)
    ]
    lone = [alone(tiny_policy, p, s) for p, s in requests]
    makeups = {
        "all eight": list(range(8)),
        "three": [5, 0, 2],
        "one": [3],
        "reversed": list(range(7, -1, -1)),
    }
    for chunk in (7, 64, 512):
        for name, picks in makeups.items():
            batched = together(tiny_policy, [requests[i] for i in picks], chunk)
            for i, generation in zip(picks, batched, strict=True):
                gap = assert_agree(tiny_policy, requests[i][0], lone[i], generation)
                assert gap <= 1e-5, (name, chunk, i)


def test_top_p_sequences_batch_like_the_others(tiny_policy: HFPolicy) -> None:
    requests = [(prompt(n, 40), SamplingParams(max_new_tokens=24, top_p=0.9, seed=n)) for n in range(4)]
    for (p, s), generation in zip(requests, together(tiny_policy, requests, 16), strict=True):
        assert_agree(tiny_policy, p, alone(tiny_policy, p, s), generation)


def test_batched_log_probs_are_the_learners(tiny_policy: HFPolicy) -> None:
    """The sampler-learner gap of batched sampling stays at the one-at-a-time level (<= 1e-4, float32)."""
    requests = [
        (prompt(n, 50 + 40 * n), SamplingParams(max_new_tokens=40, temperature=0.8, seed=n)) for n in range(6)
    ]
    worst = 0.0
    for (p, s), generation in zip(requests, together(tiny_policy, requests, 32), strict=True):
        learner = sequence_logprobs(tiny_policy.model, p + generation.ids, len(p), s.temperature)
        worst = max(worst, *(abs(a - b) for a, b in zip(generation.logprobs, learner, strict=True)))
    assert worst <= 1e-4, worst


def test_generations_from_threads_are_batched_and_equal_lone_ones(tiny_policy: HFPolicy) -> None:
    requests = [(prompt(n, 60), SamplingParams(max_new_tokens=32, seed=n)) for n in range(8)]
    before = tiny_policy._scheduler.steps
    with ThreadPoolExecutor(max_workers=8) as pool:
        batched = list(pool.map(lambda r: tiny_policy.generate(*r), requests))
    for (p, s), generation in zip(requests, batched, strict=True):
        assert_agree(tiny_policy, p, alone(tiny_policy, p, s), generation)
    # decoded together: far fewer steps than the 8 x 32 one-at-a-time forward passes
    assert tiny_policy.batched and tiny_policy._scheduler.steps - before < 3 * 33


def test_rows_are_sampled_from_their_own_generators() -> None:
    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(temperature=t, top_p=p) for t, p in [(1, 1), (0.5, 1), (0, 1), (1, 0.8), (2, 1)]]
    rows = sample_rows(logits, params, [torch.Generator().manual_seed(i) for i in range(5)])
    for b in range(5):
        own = sample_rows(logits[b : b + 1], [params[b]], [torch.Generator().manual_seed(b)])
        assert own == [rows[b]]
    assert rows[2][0] == int(logits[2].argmax())


def test_new_weights_land_between_tokens_and_each_token_records_its_version(tiny_model_path: Path) -> None:
    """A weight update from another thread while four sequences decode: it waits for the step in flight,
    and every token's log-prob is that of the weights its recorded version names, to float rounding: a
    token sampled across the change would match neither."""
    policy = HFPolicy(tiny_model_path)
    old = {k: v.clone() for k, v in policy.model.state_dict().items()}
    torch.manual_seed(1)
    other = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    requests = [
        (prompt(n, 40), SamplingParams(max_new_tokens=300, temperature=1.0, seed=n)) for n in range(4)
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(policy.generate, *r) for r in requests]
        while policy._scheduler.steps < 40:
            time.sleep(0.005)
        policy.load_state_dict(other.state_dict(), version=1)
        generations = [f.result() for f in futures]
    new = {k: v.clone() for k, v in policy.model.state_dict().items()}
    switched = 0
    for (p, s), generation in zip(requests, generations, strict=True):
        versions = generation.token_versions or [generation.policy_version] * len(generation.ids)
        assert versions == sorted(versions) and set(versions) <= {0, 1}
        switched += len(set(versions)) == 2
        by_version = {}
        for version, weights in ((0, old), (1, new)):
            policy.model.load_state_dict(weights)
            by_version[version] = sequence_logprobs(policy.model, p + generation.ids, len(p), s.temperature)
        other = 0  # tokens whose log-prob the other weights give too, to 1e-4: by chance, a few in a thousand
        for t, version in enumerate(versions):
            assert abs(generation.logprobs[t] - by_version[version][t]) <= 1e-4, (t, version)
            other += abs(generation.logprobs[t] - by_version[1 - version][t]) <= 1e-4
        assert other <= len(versions) // 20, other  # the two weights do tell the tokens apart
    assert switched >= 1, "no sequence was in flight when the weights changed"


def test_a_step_that_fails_tells_every_sequence_and_the_next_request_runs(tiny_model_path: Path) -> None:
    policy = HFPolicy(tiny_model_path)
    params = SamplingParams(max_new_tokens=8, seed=0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        policy.generate([10**6], params)
    assert policy.batched  # decided at the first generation, before the forward pass below breaks
    real_forward = policy._scheduler._forward
    policy._scheduler._forward = lambda *a: (_ for _ in ()).throw(RuntimeError("out of memory"))  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="out of memory"):
        policy.generate(prompt(0, 10), params)
    policy._scheduler._forward = real_forward  # type: ignore[method-assign]
    assert_agree(
        policy, prompt(0, 10), alone(policy, prompt(0, 10), params), policy.generate(prompt(0, 10), params)
    )


def test_closing_ends_the_decode_thread_and_fails_what_it_had_not_finished(tiny_policy: HFPolicy) -> None:
    """CI, stop 50: a Ctrl-C'd `harness train` died of SIGABRT ("terminate called without an active
    exception"): its daemon decode thread was still inside the model's forward when the interpreter shut
    down. Closing stops that thread after its current step, and every generation in flight or waiting
    ends with `SamplerClosed` at once instead of decoding on (no stop ids: none can end by itself)."""
    scheduler = BatchScheduler(tiny_policy.model, [], lambda: 0, threading.Lock(), max_batch=2)
    long = SamplingParams(max_new_tokens=3000, seed=0)

    def generate(n: int) -> Generation:
        return scheduler.submit(Sequence(prompt(n, 20), long, torch.Generator().manual_seed(n)))

    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(generate, n) for n in range(3)]  # two decoding, one waiting its turn
        while scheduler.steps < 5:
            time.sleep(0.01)
        thread = scheduler._thread
        assert thread is not None and thread.is_alive()
        started = time.monotonic()
        scheduler.close()
        for future in futures:
            with pytest.raises(SamplerClosed, match="closed"):
                future.result(timeout=30)
    assert not thread.is_alive() and time.monotonic() - started < 10
    with pytest.raises(SamplerClosed, match="before this generation began"):
        generate(0)


def test_a_next_turn_reuses_the_last_context_and_gets_what_it_gets_alone(tiny_model_path: Path) -> None:
    """The prefix store: an episode's next prompt begins with its last context, whose keys and values are
    copied, not computed, and what it samples is what it samples alone; new weights empty the store."""
    policy = HFPolicy(tiny_model_path)
    scheduler = policy._scheduler
    params = SamplingParams(max_new_tokens=24, temperature=1.0, seed=3)
    first = Sequence(prompt(1, 300), params, torch.Generator().manual_seed(3))
    scheduler.run_here([first])
    turn = first.prompt + first.ids + prompt(2, 40)  # the model's reply and a tool's answer appended
    second = Sequence(turn, params, torch.Generator().manual_seed(3))
    scheduler.run_here([second])
    assert second.reused == len(first.prompt) + len(first.ids) - 1
    assert_agree(policy, turn, alone(policy, turn, params), second.generation())
    other = Sequence(prompt(1, 200) + prompt(5, 30), params, torch.Generator().manual_seed(3))  # shares 200
    scheduler.run_here([other])
    assert other.reused == 200
    assert_agree(policy, other.prompt, alone(policy, other.prompt, params), other.generation())
    with torch.no_grad():  # a learner stepping the sampler's own model, no new version said
        next(policy.model.parameters()).mul_(1.01)
    again = Sequence(turn, params, torch.Generator().manual_seed(3))
    scheduler.run_here([again])
    assert again.reused == 0  # the stored keys were the old weights'
    assert_agree(policy, turn, alone(policy, turn, params), again.generation())
    policy.set_version(1)
    after = Sequence(turn, params, torch.Generator().manual_seed(3))
    scheduler.run_here([after])
    assert after.reused == 0


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_rows_that_share_a_prefix_attend_to_it_once_and_get_what_they_get_alone(
    tiny_policy: HFPolicy, temperature: float
) -> None:
    """A batch whose prompts begin alike (a system prompt and tools, a group's task): its decode steps
    read the shared keys once for all rows (`policies/shared_prefix.py`) and every row gets, within
    1e-5, what it gets alone, whichever rows make up the batch and however their prompts were filled."""
    system = prompt(9, 400)
    requests = [
        (system + prompt(n, 5 + 31 * n), SamplingParams(max_new_tokens=24 + 5 * n, temperature=temperature, seed=n))
        for n in range(6)
    ]  # fmt: skip
    lone = [alone(tiny_policy, p, s) for p, s in requests]
    shared_steps = {}
    for chunk, picks in ((64, list(range(6))), (512, [4, 1, 3]), (16, [2, 5, 0, 3])):
        scheduler = BatchScheduler(
            tiny_policy.model, tiny_policy.stop_ids(), lambda: 0, threading.Lock(), 16, chunk
        )
        sequences = [Sequence(*requests[i], torch.Generator().manual_seed(i)) for i in picks]
        for i, generation in zip(picks, scheduler.run_here(sequences), strict=True):
            assert assert_agree(tiny_policy, requests[i][0], lone[i], generation) <= 1e-5, (chunk, i)
        shared_steps[chunk] = scheduler.shared_steps
    assert all(shared_steps.values()) and shared_steps[64] >= 20, shared_steps  # the shared path decoded
    p, s = requests[3]
    generation = together(tiny_policy, requests, 64)[3]
    learner = sequence_logprobs(tiny_policy.model, p + generation.ids, len(p), s.temperature or 1.0)
    if s.temperature:  # the learner's log-probs of what the shared path sampled (TITO), as for any batch
        assert max(abs(a - b) for a, b in zip(generation.logprobs, learner, strict=True)) <= 1e-4


def test_the_shared_prefix_is_the_longest_every_row_has() -> None:
    assert common_prefix([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]]) == 2
    assert common_prefix([[1, 2, 3], [1, 2, 3, 4]]) == 3
    assert common_prefix([[7, 1], [1, 7]]) == 0
    long = list(range(5000))
    assert common_prefix([long, [*long[:4321], -1]]) == 4321


def test_a_model_that_fails_the_shared_prefix_path_still_batches_without_it(
    tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batching check at the first generation tries the shared-prefix decode; where it fails, the
    decode attends as the model does and is checked again, instead of giving up batching."""

    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("no such kernel here")

    monkeypatch.setattr(shared_prefix, "_flash_cpu", broken)
    policy = HFPolicy(tiny_model_path)
    generation = policy.generate(prompt(1, 20), SamplingParams(max_new_tokens=4, seed=0))
    assert policy.batched and not policy._scheduler.shares_prefix
    assert generation.ids == alone(policy, prompt(1, 20), SamplingParams(max_new_tokens=4, seed=0)).ids
