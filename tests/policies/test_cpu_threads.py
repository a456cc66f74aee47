"""Each thread's own torch thread count (policies/cpu_threads.py): the learner and the in-process sampler
of an asynchronous run each get their share, and neither changes the other's."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import pytest
import torch

from policies.base import SamplingParams
from policies.cpu_threads import async_sampler_threads, cpu_threads
from policies.hf import HFPolicy


def mkl_threads() -> int | None:
    """MKL's count for the calling thread (its thread-local one when set), or None without MKL."""
    getter = getattr(ctypes.CDLL(torch._C.__file__), "MKL_Get_Max_Threads", None)
    return None if getter is None else int(getter())


def test_two_threads_hold_different_counts_at_once() -> None:
    both_inside = threading.Barrier(2)
    seen: dict[int, tuple[int, int | None]] = {}

    def hold(threads: int) -> None:
        with cpu_threads(threads):
            both_inside.wait(timeout=10)  # each reads its count while the other holds a different one
            seen[threads] = (torch.get_num_threads(), mkl_threads())
            both_inside.wait(timeout=10)

    workers = [threading.Thread(target=hold, args=(n,)) for n in (1, 3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert seen[1][0] == 1 and seen[3][0] == 3
    if seen[1][1] is not None:  # a torch with MKL: the matrix products follow the thread's count too
        assert seen[1][1] == 1
        assert seen[3][1] is not None and seen[3][1] > 1


def test_the_count_is_put_back_on_leaving() -> None:
    before = torch.get_num_threads()
    with cpu_threads(before + 2):
        assert torch.get_num_threads() == before + 2
    assert torch.get_num_threads() == before
    with cpu_threads(None):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="at least 1"), cpu_threads(0):
        pass


def test_the_async_share_leaves_the_learner_cores() -> None:
    assert [async_sampler_threads(n) for n in (1, 2, 4, 16)] == [1, 1, 2, 8]


@pytest.mark.parametrize("batching", [True, False])
def test_the_sampler_decodes_with_its_own_count(tiny_model_path: Path, batching: bool) -> None:
    """The decode runs with the policy's `threads` (3 here: a count no default gives), batched on the
    scheduler's thread or one at a time on the caller's, and the caller's own count is left alone."""
    policy = HFPolicy(tiny_model_path, batching=batching, threads=3)
    seen: list[int] = []
    policy.model.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    policy.generate([5, 6, 7], SamplingParams(max_new_tokens=4, seed=1))
    decode = seen[-4:]  # the batching check's own steps run on the caller's thread, before these
    assert decode == [3, 3, 3, 3], seen
    assert torch.get_num_threads() == before
