"""TitoPolicy over two `harness serve` instances on loopback, standing in for two vLLM servers: requests
are spread over both, a stopped one is survived, and a weight reload reaches both (and one that returns),
through `harness serve`'s own route or vLLM's development routes; a server that fails a reload serves
nothing until it has loaded the weights."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
import torch

from harness.serve import create_app, running
from policies.base import SamplingParams
from policies.hf import HFPolicy
from policies.spec import parse_spec
from policies.tito import ReloadEndpoint, SamplerError, TitoPolicy

PROMPT = [5, 6, 7, 8]
GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)
PROBE_S = 0.3


class Server:
    """One `harness serve` on loopback that a test can stop and start again on the same port."""

    def __init__(self, model: Path) -> None:
        self.model = model
        self.policy = HFPolicy(model)
        self.port = 0
        self._running: AbstractContextManager[str] | None = None

    def start(self) -> str:
        self._running = running(create_app(self.policy, model_name="tiny"), port=self.port)
        url = self._running.__enter__()
        self.port = int(url.rsplit(":", 1)[1].split("/")[0])
        return url

    def stop(self) -> None:
        if self._running is not None:
            self._running.__exit__(None, None, None)
            self._running = None

    def restart_fresh(self) -> None:
        """Starts again on the same port with the model's starting weights, like a restarted process."""
        self.policy = HFPolicy(self.model)
        self.start()


@pytest.fixture
def servers(tiny_model_path: Path) -> Iterator[tuple[Server, Server]]:
    pair = (Server(tiny_model_path), Server(tiny_model_path))
    for server in pair:
        server.start()
    yield pair
    for server in pair:
        server.stop()


@pytest.fixture(scope="module")
def other_weights(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with every weight moved: its greedy outputs differ from the original's."""
    policy = HFPolicy(tiny_model_path)
    generator = torch.Generator().manual_seed(1)
    moved = {
        k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in policy.model.state_dict().items()
    }
    policy.load_state_dict(moved, version=0)
    out = tmp_path_factory.mktemp("other")
    policy.model.save_pretrained(out)
    policy.tokenizer.save_pretrained(out)  # type: ignore[attr-defined]
    return out


def urls(servers: tuple[Server, Server]) -> str:
    return ",".join(f"http://127.0.0.1:{s.port}/v1" for s in servers)


def client(
    model: Path, servers: tuple[Server, Server], max_retries: int = 3, reload: ReloadEndpoint = "harness"
) -> TitoPolicy:
    return TitoPolicy(
        "tiny",
        urls(servers),
        tokenizer_path=str(model),
        max_retries=max_retries,
        probe_after_s=PROBE_S,
        reload=reload,
    )


def test_requests_are_spread_over_both_servers(tiny_model_path: Path, servers: tuple[Server, Server]) -> None:
    servers[0].policy.set_version(1)  # the same weights, told apart by the version they report
    servers[1].policy.set_version(2)
    assert parse_spec(f"tito:tiny@{urls(servers)}") == ("tito", ["tiny", urls(servers)])
    tito = client(tiny_model_path, servers)
    answers = [tito.generate(PROMPT, GREEDY) for _ in range(6)]
    assert [a.policy_version for a in answers] == [2, 1, 2, 1, 2, 1]  # round-robin when none is busy
    assert len({tuple(a.ids) for a in answers}) == 1  # and both sample the same thing


def test_a_stopped_server_is_survived(tiny_model_path: Path, servers: tuple[Server, Server]) -> None:
    tito = client(tiny_model_path, servers, max_retries=2)
    expected = HFPolicy(tiny_model_path).generate(PROMPT, GREEDY).ids
    started = time.monotonic()
    assert all(tito.generate(PROMPT, GREEDY).ids == expected for _ in range(6))
    both_up = time.monotonic() - started  # the reference, taken in this run: a busy host slows both
    servers[1].stop()
    started = time.monotonic()
    answers = [tito.generate(PROMPT, GREEDY) for _ in range(6)]
    assert all(a.ids == expected for a in answers)
    one_down = time.monotonic() - started
    # The dead one is skipped, not waited on: a wait is a back-off of 0.5 s or more, a timeout longer.
    assert one_down < 2 * both_up + 0.5, (one_down, both_up)
    servers[0].stop()
    with pytest.raises(SamplerError, match="ConnectError"):
        tito.generate(PROMPT, GREEDY)


def test_a_weight_reload_reaches_both_servers_and_one_that_comes_back(
    tiny_model_path: Path, other_weights: Path, servers: tuple[Server, Server]
) -> None:
    tito = client(tiny_model_path, servers, max_retries=1)
    before = tito.generate(PROMPT, GREEDY).ids
    after = HFPolicy(other_weights).generate(PROMPT, GREEDY).ids
    assert before != after
    tito.load_weights(other_weights, 5)
    assert [s.policy.version for s in servers] == [5, 5]
    answers = [tito.generate(PROMPT, GREEDY) for _ in range(4)]
    assert all(a.ids == after and a.policy_version == 5 for a in answers)

    servers[1].stop()  # down while the next weights are pushed: they reach the other one only
    tito.load_weights(tiny_model_path, 6)
    assert servers[0].policy.version == 6
    servers[1].restart_fresh()  # back with its starting weights (version 0)
    time.sleep(PROBE_S)
    answers = [tito.generate(PROMPT, GREEDY) for _ in range(4)]
    assert servers[1].policy.version == 6  # it loaded the current weights before serving again
    assert all(a.ids == before and a.policy_version == 6 for a in answers)


def test_a_reload_no_server_takes_is_an_error(tiny_model_path: Path, servers: tuple[Server, Server]) -> None:
    tito = client(tiny_model_path, servers, max_retries=0)
    with pytest.raises(SamplerError, match=r"no server loaded.*not a checkpoint folder"):
        tito.load_weights(tiny_model_path / "missing", 1)


def test_harness_serve_answers_vllms_reload_routes_as_vllm_does(
    other_weights: Path, servers: tuple[Server, Server]
) -> None:
    root = f"http://127.0.0.1:{servers[0].port}"
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(other_weights)}}
    answer = httpx.post(f"{root}/collective_rpc", json=rpc)
    assert answer.status_code == 200 and answer.json() == {"results": [None]}
    assert servers[0].policy.version == 1  # vLLM names no version: a reload bumps its own
    reset = httpx.post(f"{root}/reset_prefix_cache")
    assert reset.status_code == 200 and reset.content == b""
    for body in ({"kwargs": {}}, {"method": "sleep"}, {"method": "reload_weights"}):
        assert httpx.post(f"{root}/collective_rpc", json=body).status_code == 400
    rpc["kwargs"]["weights_path"] = str(other_weights / "missing")
    assert httpx.post(f"{root}/collective_rpc", json=rpc).status_code == 500  # vLLM's worker raises


@pytest.mark.timeout(90)
def test_a_vllm_reload_reaches_both_servers(
    tiny_model_path: Path, other_weights: Path, servers: tuple[Server, Server]
) -> None:
    tito = client(tiny_model_path, servers, max_retries=0, reload="vllm")
    before = tito.generate(PROMPT, GREEDY)
    after = HFPolicy(other_weights).generate(PROMPT, GREEDY).ids
    assert before.ids != after and before.policy_version == 0
    tito.load_weights(other_weights, 1)
    assert [s.policy.version for s in servers] == [1, 1]
    assert tito.holding(1) == urls(servers).split(",")
    for server in servers:  # each one's next greedy output is the new weights'
        alone = TitoPolicy("tiny", f"http://127.0.0.1:{server.port}/v1", tokenizer_path=str(tiny_model_path))
        assert alone.generate(PROMPT, GREEDY).ids == after
    answers = [tito.generate(PROMPT, GREEDY) for _ in range(4)]
    assert all(a.ids == after and a.policy_version == 1 for a in answers)
    tito.load_weights(tiny_model_path, 2)
    answers = [tito.generate(PROMPT, GREEDY) for _ in range(4)]
    assert all(a.ids == before.ids and a.policy_version == 2 for a in answers)


@pytest.mark.timeout(90)
def test_a_server_that_fails_a_vllm_reload_serves_nothing_until_it_has_loaded(
    tiny_model_path: Path,
    other_weights: Path,
    servers: tuple[Server, Server],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tito = client(tiny_model_path, servers, max_retries=1, reload="vllm")
    after = HFPolicy(other_weights).generate(PROMPT, GREEDY).ids
    attempts: list[int] = []

    def broken(checkpoint: Path, version: int) -> None:
        attempts.append(version)
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(servers[1].policy, "load_weights", broken)
    tito.load_weights(other_weights, 1)  # one server took them: the step goes on
    good, bad = urls(servers).split(",")
    assert tito.holding(1) == [good] and servers[1].policy.version == 0
    assert f"{bad} is out of rotation until it loads version 1" in caplog.text
    assert "CUDA out of memory" in caplog.text
    # The old weights' server never answers under the new version: every answer is the new weights'.
    answers = [tito.generate(PROMPT, GREEDY) for _ in range(4)]
    assert all(a.ids == after and a.policy_version == 1 for a in answers)
    tried = len(attempts)
    time.sleep(PROBE_S)  # its probe: it is asked to load them again before serving, fails, stays out
    answers = [tito.generate(PROMPT, GREEDY) for _ in range(4)]
    assert all(a.ids == after and a.policy_version == 1 for a in answers)
    assert len(attempts) > tried and set(attempts) == {1}

    # A rollout worker's client follows the trainer's: it samples only where version 1 is.
    worker = client(tiny_model_path, servers, reload="vllm")
    worker.follow(1, tito.holding(1))
    answers = [worker.generate(PROMPT, GREEDY) for _ in range(4)]
    assert all(a.ids == after and a.policy_version == 1 for a in answers) and worker.version == 1

    monkeypatch.undo()  # fixed: the next reload reaches both, and both serve again
    time.sleep(PROBE_S)
    tito.load_weights(tiny_model_path, 2)
    assert tito.holding(2) == [good, bad] and [s.policy.version for s in servers] == [2, 1]
    answers = [tito.generate(PROMPT, GREEDY) for _ in range(4)]  # the learner's version, not a server's count
    assert all(a.policy_version == 2 for a in answers)

    servers[0].stop()  # the only holder of version 1 for the worker is gone: a clear error, no old weights
    with pytest.raises(SamplerError, match="no server is known to hold weights version 1"):
        worker.generate(PROMPT, GREEDY)


def test_a_follower_takes_back_a_server_that_failed_once_and_still_holds_its_version(
    tiny_model_path: Path, servers: tuple[Server, Server], other_weights: Path
) -> None:
    """On a busy host a follower's request can time out once: the server is marked down and forgets its
    version. When no server is left for the followed version, the follower asks them which weights they
    hold (`/models`), and one that names it serves again; one that names another stays out."""
    tito = client(tiny_model_path, servers)
    tito.load_weights(other_weights, 1)
    worker = client(tiny_model_path, servers)
    worker.follow(1, tito.holding(1))
    for server in worker.servers:
        worker._mark_down(server)  # what a timed-out request does
    answer = worker.generate(PROMPT, GREEDY)
    assert answer.policy_version == 1 and all(s.version == 1 for s in worker.servers)
    for server in worker.servers:
        worker._mark_down(server)
    worker.follow(2, [])  # version 2 is on no server: asking cannot bring one back
    with pytest.raises(SamplerError, match="no server is known to hold weights version 2"):
        worker.generate(PROMPT, GREEDY)
