"""The privileged-context credit math against hand-worked cases (harness/training/credit.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from harness.training.credit import (
    dense_advantages,
    dense_weight,
    learnability,
    opsd_signal,
    privileged_header,
    teacher_rewards,
    turn_mean,
)
from harness.training.teacher import CreditConfig
from tasks.model import HiddenTests, Task

TEACHER = torch.tensor([[-0.5, -1.0, -3.0, -0.2, -0.1], [-1.0, -2.0, 0.0, 0.0, 0.0]])
STUDENT = torch.tensor([[-1.0, -0.5, -0.5, -4.0, -0.1], [-1.5, -1.0, 0.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0, 0.0]])


def test_the_signal_is_the_clipped_gap_on_model_tokens_only() -> None:
    # gaps: row 0: 0.5, -0.5, -2.5 (masked), 3.8 -> 1.0 (clipped), 0.0; row 1: 0.5, -1.0, then padding
    expected = torch.tensor([[0.5, -0.5, 0.0, 1.0, 0.0], [0.5, -1.0, 0.0, 0.0, 0.0]])
    assert torch.allclose(opsd_signal(TEACHER, STUDENT, MASK, clip=1.0), expected)
    with pytest.raises(ValueError, match="clip must be positive"):
        opsd_signal(TEACHER, STUDENT, MASK, clip=0.0)


def test_turn_mean_averages_each_generation_apart() -> None:
    signal = torch.tensor([[0.5, -0.5, 0.0, 1.0, 0.0], [0.5, -1.0, 0.0, 0.0, 0.0]])
    # row 0 has two generations (tokens 0-1 and 3-4, a tool result between): means 0.0 and 0.5
    expected = torch.tensor([[0.0, 0.0, 0.0, 0.5, 0.5], [-0.25, -0.25, 0.0, 0.0, 0.0]])
    assert torch.allclose(turn_mean(signal, MASK), expected)


def test_dense_advantages_by_mode() -> None:
    outcome = torch.tensor([0.8, -0.4])
    signal = torch.tensor([[0.5, -0.5, 0.0, 1.0, 0.0], [0.5, -1.0, 0.0, 0.0, 0.0]])
    spread = torch.tensor([[0.8, 0.8, 0.0, 0.8, 0.8], [-0.4, -0.4, 0.0, 0.0, 0.0]])
    assert torch.allclose(dense_advantages(outcome, signal, MASK, "outcome", beta=0.5), spread)
    assert torch.allclose(dense_advantages(outcome, signal, MASK, "opsd", beta=0.5), 0.5 * signal)
    both = dense_advantages(outcome, signal, MASK, "outcome+opsd", beta=0.5)
    assert torch.allclose(both, spread + 0.5 * signal)
    assert float(both[0, 2]) == 0.0  # a tool result's token gets nothing


def test_the_mixed_mode_keeps_the_outcomes_sign_where_the_sum_flips_it() -> None:
    """`outcome*opsd`: A * clip(1 + beta * sign(A) * g, 1 - band, 1 + band), worked by hand. A success
    (A = 0.3) whose tokens the teacher disfavours by a full clip (g = -1): the sum gives 0.3 - 1.0 = -0.7,
    blame for a success; the mix gives 0.3 * 0.8 = 0.24. A failure (A = -0.4) with g = +0.5 and -1.0."""
    outcome = torch.tensor([0.3, -0.4])
    signal = torch.tensor([[-1.0, 0.1, 0.0, 1.0, 0.0], [0.5, -1.0, 0.0, 0.0, 0.0]])
    summed = dense_advantages(outcome, signal, MASK, "outcome+opsd", beta=1.0)
    assert float(summed[0, 0]) == pytest.approx(-0.7)  # the additive form's sign flip
    mixed = dense_advantages(outcome, signal, MASK, "outcome*opsd", beta=1.0, band=0.2)
    expected = torch.tensor(
        [
            [0.3 * 0.8, 0.3 * 1.1, 0.0, 0.3 * 1.2, 0.3 * 1.0],  # 1 - 1.0 -> 0.8; 1.1; 1 + 1.0 -> 1.2; 1.0
            [-0.4 * 0.8, -0.4 * 1.2, 0.0, 0.0, 0.0],  # the teacher favours token 0: less blame; not token 1
        ]
    )
    assert torch.allclose(mixed, expected)
    assert bool(((mixed * outcome.unsqueeze(1)) >= 0).all())  # no token's credit changes sign
    half = dense_advantages(outcome, signal, MASK, "outcome*opsd", beta=0.05, band=0.2)
    assert float(half[0, 3]) == pytest.approx(0.3 * 1.05)  # inside the band, the weight is 1 + beta * g
    with pytest.raises(ValueError, match="band must be in"):
        dense_advantages(outcome, signal, MASK, "outcome*opsd", beta=1.0, band=1.0)


def test_the_dense_weight_decays_to_nothing_over_its_steps() -> None:
    assert [dense_weight(0.5, k, 4) for k in range(6)] == [0.5, 0.375, 0.25, 0.125, 0.0, 0.0]
    assert dense_weight(0.5, 100, 0) == 0.5  # no decay asked


def test_a_served_teacher_that_ignores_the_temperature_is_refused() -> None:
    """vLLM's prompt log-probs are the raw model's whatever temperature is asked (it cannot run here: a
    stand-in scorer answers as it does); `harness serve`'s honour it (the test above)."""
    from harness.training.teacher import served_temperature

    class IgnoresTemperature:
        def prompt_logprobs(self, ids: list[int], temperature: float) -> list[float]:
            return [-1.0 - 0.1 * i for i in range(len(ids) - 1)]

    class Honours:
        def prompt_logprobs(self, ids: list[int], temperature: float) -> list[float]:
            return [(-1.0 - 0.1 * i) / temperature for i in range(len(ids) - 1)]

    with pytest.raises(ValueError, match="ignore the temperature"):
        served_temperature(IgnoresTemperature(), 0.7, [1, 2, 3])
    served_temperature(Honours(), 0.7, [1, 2, 3])
    served_temperature(IgnoresTemperature(), 1.0, [1, 2, 3])  # at 1 there is nothing to ignore


def test_the_header_holds_what_was_asked_in_a_fixed_order() -> None:
    task = Task(
        id="t", title="t", repo=Path("."), problem_statement="p", gold_patch="--- a/x.py\n+++ b/x.py\n",
        hidden_tests=HiddenTests(fail_to_pass=["tests/test_x.py::test_y"], files={"tests/test_x.py": "def test_y(): ..."}),
    )  # fmt: skip
    header = privileged_header(task, ["hidden_tests", "gold_patch", "hidden_tests"])
    assert header.index("tests that must pass") < header.index("A correct fix")  # as asked, once each
    assert header.count("tests that must pass") == 1
    assert "- tests/test_x.py::test_y" in header and "def test_y(): ..." in header and "+++ b/x.py" in header
    with pytest.raises(ValidationError, match="gold_patch"):  # a part nothing records is no setting
        CreditConfig(privileged=["failing_output"])  # type: ignore[list-item]
    assert privileged_header(task, ["gold_patch"]) == privileged_header(task, ["gold_patch"])  # fixed


def test_the_teacher_scores_the_students_own_tokens_after_the_header(tiny_policy: object) -> None:
    """With no header the teacher's log-probs are the learner's of the same row; with one they are the
    log-probs of the row's tokens at their shifted positions in header + row, computed here by hand."""
    from harness.training.learner import Row, collate, token_logprobs
    from harness.training.teacher import teacher_logprobs

    model = tiny_policy.model  # type: ignore[attr-defined]
    ids = [5, 17, 301, 44, 9, 250, 12]
    row = Row(ids=ids, mask=[0, 0, 1, 1, 0, 1, 1], sampler_logprobs=[0.0] * 7, advantage=1.0)
    cpu = torch.device("cpu")
    batch = collate([row], 0, cpu)
    own, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, 0.7, batch.mask)
    (plain,) = teacher_logprobs(model, [], [row], 0.7, cpu)
    assert torch.allclose(torch.tensor(plain), own[0], atol=1e-5)

    header = [11, 12, 13, 14]
    (scored,) = teacher_logprobs(model, header, [row], 0.7, cpu)
    with torch.no_grad():
        logits = model(torch.tensor([header + ids])).logits[0].float() / 0.7  # (H + T, V)
    by_hand = [
        float(torch.log_softmax(logits[len(header) + t - 1], -1)[ids[t]]) if row.mask[t] else 0.0
        for t in range(1, len(ids))
    ]
    assert scored == pytest.approx(by_hand, abs=1e-4)
    assert scored != pytest.approx(plain, abs=1e-4)  # the header changes what the teacher expects


def test_dense_credit_is_the_clipped_gap_and_leaves_the_rows_ids_alone(tiny_policy: object) -> None:
    from harness.training.learner import Row
    from harness.training.teacher import teacher_logprobs, with_dense_credit

    model = tiny_policy.model  # type: ignore[attr-defined]
    cpu = torch.device("cpu")
    row = Row(
        ids=[5, 17, 301, 44, 9, 250, 12], mask=[0, 0, 1, 1, 0, 1, 1],
        sampler_logprobs=[0.0, 0.0, -2.0, -9.0, 0.0, -7.5, -0.1], advantage=0.5, source=("t/0", 0),
    )  # fmt: skip
    header = [11, 12, 13, 14]
    untouched = with_dense_credit([row], [header], model, CreditConfig(), 1.0, cpu)
    assert untouched.rows == [row] and untouched.metrics == {}  # mode: outcome

    config = CreditConfig(mode="opsd", clip=1.0, beta=2.0)
    credited = with_dense_credit([row], [header], model, config, 1.0, cpu)
    (out,) = credited.rows
    assert out.ids == row.ids and out.mask == row.mask  # the student's row, header-free
    (teacher,) = teacher_logprobs(model, header, [row], 1.0, cpu)
    (own,) = teacher_logprobs(model, [], [row], 1.0, cpu)  # the learner's, in the student's context
    expected = [
        2.0 * max(-1.0, min(1.0, t - s)) if m else 0.0
        for t, s, m in zip(teacher, own, row.mask[1:], strict=True)
    ]
    assert out.token_advantages == pytest.approx(expected, abs=1e-5)
    # the sampler's stored log-probs (stale in an async run, another engine's) play no part
    stale = replace(row, sampler_logprobs=[0.0, 0.0, -0.1, -0.1, 0.0, -0.1, -0.1])
    (same,) = with_dense_credit([stale], [header], model, config, 1.0, cpu).rows
    assert same.token_advantages == pytest.approx(out.token_advantages, abs=1e-6)
    assert 0.0 <= credited.metrics["credit_clipped_fraction"] <= 1.0 and "credit_gap_p95" in credited.metrics
    out_opsd = out.token_advantages

    # the mixed form, its weight decayed a quarter of the way (step 1 of 4): beta 2.0 -> 1.5
    mixed = CreditConfig(mode="outcome*opsd", clip=1.0, beta=2.0, band=0.2, decay_steps=4)
    (out,) = with_dense_credit([row], [header], model, mixed, 1.0, cpu, step=1).rows
    weights = [
        max(0.8, min(1.2, 1 + 1.5 * max(-1.0, min(1.0, t - s)))) if m else 0.0
        for t, s, m in zip(teacher, own, row.mask[1:], strict=True)
    ]
    assert out.token_advantages == pytest.approx([0.5 * w for w in weights], abs=1e-5)
    (gone,) = with_dense_credit([row], [header], model, mixed, 1.0, cpu, step=4).rows  # decayed away
    assert gone.token_advantages == pytest.approx([0.5 * m for m in row.mask[1:]], abs=1e-6)
    # a header and row past the model's window are not scored: no signal, the outcome alone, counted
    window = len(header) + len(row.ids) - 1
    cut = with_dense_credit([row], [header], model, config, 1.0, cpu, context=window)
    assert cut.rows[0].token_advantages == pytest.approx(
        [0.0] * (len(row.ids) - 1)
    )  # `opsd`: the signal alone
    assert cut.metrics["credit_rows_too_long"] == 1.0 and cut.rows[0].teacher_logprobs is None
    fits = with_dense_credit([row], [header], model, config, 1.0, cpu, context=window + 1)
    assert fits.metrics["credit_rows_too_long"] == 0.0 and fits.rows[0].token_advantages == out_opsd


def test_a_served_teacher_scores_as_the_in_process_one(tiny_model_path: Path, tiny_policy: object) -> None:
    """`credit.teacher_via: server`: the same row after the same header, scored through `harness serve`'s
    prompt log-probs on loopback by a `tito:` client, gives the in-process teacher's log-probs."""
    from harness.serve import create_app, running
    from harness.training.learner import Row
    from harness.training.teacher import served_teacher_logprobs, teacher_logprobs
    from policies.hf import HFPolicy
    from policies.tito import TitoPolicy

    ids = [5, 17, 301, 44, 9, 250, 12]
    row = Row(ids=ids, mask=[0, 0, 1, 1, 0, 1, 1], sampler_logprobs=[0.0] * 7, advantage=1.0)
    header = [11, 12, 13, 14]
    local = teacher_logprobs(tiny_policy.model, header, [row], 0.7, torch.device("cpu"))  # type: ignore[attr-defined]
    with running(create_app(HFPolicy(tiny_model_path), model_name="tiny")) as url:
        client = TitoPolicy("tiny", url, tokenizer_path=str(tiny_model_path))
        served = served_teacher_logprobs(client, header, [row], 0.7)
        plain = served_teacher_logprobs(client, [], [row], 0.7)
    assert served[0] == pytest.approx(local[0], abs=1e-4)
    assert [v == 0.0 for v in served[0]] == [m == 0 for m in row.mask[1:]]
    assert plain[0] != pytest.approx(served[0], abs=1e-4)


def test_a_served_teacher_needs_the_runs_servers_and_the_current_policy(tiny_model_path: Path) -> None:
    from pydantic import ValidationError

    from harness.training.train import TrainConfig

    base = {"model": str(tiny_model_path), "credit": {"mode": "opsd", "teacher_via": "server"}}
    with pytest.raises(ValidationError, match="needs sampler"):
        TrainConfig.model_validate(base)
    with pytest.raises(ValidationError, match="needs sampler"):
        TrainConfig.model_validate(
            base
            | {"sampler": "tito:m@http://127.0.0.1:1/v1", "credit": base["credit"] | {"teacher": "reference"}}  # type: ignore[operator]
        )


def test_dense_credit_refuses_a_nucleus_sampler(tiny_model_path: Path) -> None:
    from pydantic import ValidationError

    from harness.training.train import TrainConfig

    base = {"model": str(tiny_model_path), "sampling": {"top_p": 0.9}}
    with pytest.raises(ValidationError, match="renormalised over the nucleus"):
        TrainConfig.model_validate(base | {"credit": {"mode": "outcome*opsd"}})
    TrainConfig.model_validate(base)  # plain GRPO compares nothing across contexts


def test_the_teacher_may_be_another_model_that_reads_the_same_ids(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    import json

    from pydantic import ValidationError

    from harness.training.teacher import teacher_folder
    from harness.training.train import TrainConfig

    assert teacher_folder("self", tiny_model_path) is None
    assert teacher_folder("reference", tiny_model_path) == tiny_model_path
    assert teacher_folder(str(tiny_model_path), tiny_model_path) == tiny_model_path  # a folder, same ids
    other = tmp_path / "other"
    other.mkdir()
    config = json.loads((tiny_model_path / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config))
    assert teacher_folder(str(other), tiny_model_path) == other
    (other / "config.json").write_text(json.dumps(config | {"vocab_size": config["vocab_size"] + 1}))
    with pytest.raises(ValueError, match="vocabulary size"):
        teacher_folder(str(other), tiny_model_path)
    with pytest.raises(ValidationError, match=r"holds no config\.json"):
        TrainConfig.model_validate(
            {"model": str(tiny_model_path), "credit": {"teacher": str(tmp_path / "none")}}
        )


def test_learnability_is_the_mean_surprisal_with_a_penalty_on_the_one_largest_spike() -> None:
    """Row 0: surprisals 1, 3, 9 (the 4th token off the mask): mean 13/3, the spike 9 - cap 8 = 1, times
    lambda 0.5: exp(-(13/3 + 0.5)) = exp(-4.8333) = 0.0079599. Row 1: surprisals 0.5, 1.5, none above the
    cap: exp(-1) = 0.36788. Row 2: surprisals 1, 10, 12 (two spikes, only the largest costs): mean 23/3,
    spike 12 - 8 = 4: exp(-(23/3 + 2)) = exp(-9.6667) = 6.3361e-5. Row 3: no token, nothing to learn: 0."""
    student = torch.tensor(
        [[-1.0, -3.0, -9.0, -20.0], [-0.5, -1.5, 0.0, 0.0], [-1.0, -10.0, -12.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    )
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
    got = learnability(student, mask, spike_cap=8.0, spike_penalty=0.5)
    assert got.tolist() == pytest.approx([0.0079599, 0.36788, 6.3361e-5, 0.0], rel=1e-4)
    # Without the penalty only the mean counts: row 0 is exp(-13/3) = 0.013124.
    assert float(learnability(student, mask, 8.0, 0.0)[0]) == pytest.approx(0.013124, rel=1e-4)
    with pytest.raises(ValueError, match="spike_penalty"):
        learnability(student, mask, 8.0, -1.0)


def test_the_teachers_reward_is_success_times_learnability() -> None:
    # A failure earns 0 however learnable; successes earn their learnability.
    rewards = teacher_rewards(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0.4, 0.9, 0.1]))
    assert rewards.tolist() == pytest.approx([0.4, 0.0, 0.1])


def test_a_trained_teacher_needs_groups_of_two() -> None:
    assert CreditConfig().teacher_training == "off"
    with pytest.raises(ValidationError, match="hint_rollouts of at least 2"):
        CreditConfig(teacher_training="learnability", hint_rollouts=1)
    assert CreditConfig(teacher_training="learnability", hint_rollouts=2).teacher_weight == 1.0
