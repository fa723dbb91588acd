"""The three decay schedules of scheduled sampling (Bengio et al., 2015): formulas, monotonicity, bounds."""

import math

import pytest

from training.objectives.scheduled_sampling import (
    SCHEDULES,
    exponential_decay,
    inverse_sigmoid_decay,
    linear_decay,
    sampling_probability,
    teacher_forcing_ratio,
)

PARAMS = {
    "linear": dict(k=1.0, c=1e-3, eps_min=0.1),
    "exponential": dict(k=0.99),
    "inverse_sigmoid": dict(k=50.0),
}
STEPS = [0, 1, 2, 10, 100, 500, 899, 900, 901, 5000, 10**6, 10**9]


def test_formulas():
    assert linear_decay(0, k=1.0, c=0.01) == 1.0
    assert linear_decay(30, k=0.9, c=0.01, eps_min=0.0) == pytest.approx(0.6)
    assert linear_decay(1000, k=1.0, c=0.01, eps_min=0.25) == 0.25  # the floor
    assert exponential_decay(0, k=0.5) == 1.0
    assert exponential_decay(3, k=0.5) == 0.125
    for i in (0, 7, 100, 300):
        assert inverse_sigmoid_decay(i, k=20.0) == pytest.approx(
            20.0 / (20.0 + math.exp(i / 20.0)), rel=1e-12
        )
    # the midpoint eps = 1/2 is at i = k ln k
    assert inverse_sigmoid_decay(round(50 * math.log(50)), k=50.0) == pytest.approx(0.5, abs=1e-2)


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_monotone_bounded_and_complementary(schedule):
    eps = [teacher_forcing_ratio(i, schedule, **PARAMS[schedule]) for i in STEPS]
    assert all(0.0 <= e <= 1.0 for e in eps)
    assert all(a >= b for a, b in zip(eps, eps[1:]))  # teacher forcing never increases
    assert eps[0] > eps[-1]
    probs = [sampling_probability(i, schedule, **PARAMS[schedule]) for i in STEPS]
    assert all(0.0 <= p <= 1.0 for p in probs)
    assert all(a <= b for a, b in zip(probs, probs[1:]))
    for e, p in zip(eps, probs):
        assert e + p == pytest.approx(1.0)


def test_limits():
    assert linear_decay(10**9, c=1e-3, eps_min=0.1) == 0.1
    assert exponential_decay(10**6, k=0.99) == 0.0
    assert inverse_sigmoid_decay(10**9, k=10.0) == 0.0  # no overflow for huge steps
    assert inverse_sigmoid_decay(0, k=1.0) == pytest.approx(0.5)
    assert inverse_sigmoid_decay(0, k=1000.0) == pytest.approx(1000 / 1001)


def test_validation():
    with pytest.raises(ValueError, match="schedule"):
        teacher_forcing_ratio(0, "cosine")
    with pytest.raises(ValueError, match="step"):
        sampling_probability(-1, "linear")
    with pytest.raises(ValueError, match="step"):
        linear_decay(1.5)
    with pytest.raises(ValueError, match=r"`k` must be a number in \(0, 1\)"):
        exponential_decay(1, k=1.0)
    with pytest.raises(ValueError, match=r"`k` must be a number in \[1, inf\]"):
        inverse_sigmoid_decay(1, k=0.5)
    with pytest.raises(ValueError, match=r"`k` must be a number in \(0, 1\]"):
        linear_decay(1, k=1.5)
    with pytest.raises(ValueError, match="`c`"):
        linear_decay(1, c=-0.1)
    with pytest.raises(ValueError, match="eps_min"):
        linear_decay(1, eps_min=2.0)
    with pytest.raises(ValueError, match="`k`"):  # nan fails every interval
        exponential_decay(1, k=float("nan"))
    with pytest.raises(TypeError):
        teacher_forcing_ratio(1, "exponential", c=0.1)  # a constant of another schedule
    # on the command line the constants are named by their flags too (`k` alone named none)
    from training.args import parse_args

    with pytest.raises(
        ValueError, match=r"--scheduled_sampling_k/_c/_min \(the paper's k, c, eps_min\): `k` must"
    ):
        parse_args(["--family", "rnn", "--scheduled_sampling", "exponential", "--scheduled_sampling_k", "2"])


@pytest.mark.parametrize("schedule", ["none", "linear"])
def test_the_objective_feeds_the_run_schedule_to_the_model(schedule):
    """The loop's one call per micro-batch passes the schedule's probability at the update's step
    (none without scheduled sampling): a run whose flag is silently dropped fails here."""
    from types import SimpleNamespace

    import torch

    from training.args import TrainArguments
    from training.objectives import objective_for

    objective = objective_for(
        TrainArguments(output_dir="unused", scheduled_sampling=schedule, scheduled_sampling_c=0.01)
    )
    seen = {}

    def forward_loss(model, inputs, extra):
        seen.update(extra)

    batch = {"input_ids": torch.zeros(1, 4, dtype=torch.long), "labels": torch.zeros(1, 4, dtype=torch.long)}
    objective.forward(forward_loss, None, batch, SimpleNamespace(step=30), 0, labelled=True)
    if schedule == "none":
        assert seen == {}
    else:  # eps_30 = 1 - 0.01 * 30; the model samples with 1 - eps
        assert seen == {"scheduled_sampling_probability": pytest.approx(0.3)}
