"""Decay schedules of scheduled sampling (Bengio et al., 2015, "Scheduled Sampling for Sequence
Prediction with Recurrent Neural Networks", section 2.4).

At training step i the model is fed the true previous token with probability eps_i (teacher
forcing) and its own sampled prediction otherwise. eps_i starts near 1 (pure teacher forcing, which
learns fast) and decays towards 0 (the model conditions on its own outputs, as at generation time):

    linear:           eps_i = max(eps_min, k - c * i)       0 <= eps_min <= 1, 0 < k <= 1, c >= 0
    exponential:      eps_i = k ** i                        0 < k < 1
    inverse sigmoid:  eps_i = k / (k + exp(i / k))          k >= 1 (larger k decays later)

The model wants the complement, the probability of *sampling*: pass `sampling_probability(step, ...)`
as `scheduled_sampling_probability` to `HfLmRNNForCausalLM.forward`.

Example:
    >>> p = sampling_probability(step, "inverse_sigmoid", k=500.0)
    >>> loss = model(batch, labels=batch, scheduled_sampling_probability=p).loss
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from hf_lm.models.hflm_common import _non_negative, _non_negative_int, _number


def linear_decay(step: int, k: float = 1.0, c: float = 1e-4, eps_min: float = 0.0) -> float:
    """eps_i = max(eps_min, k - c * i): teacher forcing falls by `c` per step until the floor `eps_min`.

    Args:
        step: the training step i >= 0.
        k: the starting ratio, in (0, 1].
        c: the decrease per step, >= 0.
        eps_min: the floor in [0, 1], "the minimum amount of truth to be given to the model".
    """
    _non_negative_int("step", step)
    _number("k", k, 0, 1, low_open=True)
    _non_negative("c", c)
    _number("eps_min", eps_min, 0, 1)
    return float(max(eps_min, k - c * step))


def exponential_decay(step: int, k: float = 0.9999) -> float:
    """eps_i = k ** i with 0 < k < 1: teacher forcing shrinks by the factor `k` every step."""
    _non_negative_int("step", step)
    _number("k", k, 0, 1, low_open=True, high_open=True)
    return k**step


def inverse_sigmoid_decay(step: int, k: float = 1000.0) -> float:
    """eps_i = k / (k + exp(i / k)) with k >= 1: flat near k/(k+1) at first, then a sigmoid-shaped
    drop centred at i = k * ln(k), reaching 0 asymptotically."""
    _non_negative_int("step", step)
    _number("k", k, 1)
    # k / (k + e^(i/k)) = sigmoid(-z) with z = i/k - ln k; evaluated without overflowing exp for large i
    z = step / k - math.log(k)
    if z >= 0:
        e = math.exp(-z)
        return e / (1.0 + e)
    return 1.0 / (1.0 + math.exp(z))


SCHEDULES = {
    "linear": linear_decay,
    "exponential": exponential_decay,
    "inverse_sigmoid": inverse_sigmoid_decay,
}


def teacher_forcing_ratio(step: int, schedule: str, **params) -> float:
    """eps_i, the probability of feeding the true previous token at training step `step`.

    Args:
        step: the training step i >= 0.
        schedule: one of `SCHEDULES` ("linear", "exponential", "inverse_sigmoid").
        **params: the schedule's constants (`k`, and `c`, `eps_min` for "linear"); see each function.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"`schedule` must be one of {sorted(SCHEDULES)}, got {schedule!r}.")
    return SCHEDULES[schedule](step, **params)


def sampling_probability(step: int, schedule: str, **params) -> float:
    """1 - eps_i: the probability of feeding the model's own sampled token, the model's
    `scheduled_sampling_probability`."""
    return 1.0 - teacher_forcing_ratio(step, schedule, **params)


def run_sampling_schedule(train_args) -> Callable[[int], float] | None:
    """A run's schedule, from its `scheduled_sampling*` arguments: training step -> the probability
    of feeding the model's own sample (None when it trains with teacher forcing only)."""
    if train_args.scheduled_sampling == "none":
        return None
    params = {} if train_args.scheduled_sampling_k is None else {"k": train_args.scheduled_sampling_k}
    if train_args.scheduled_sampling == "linear":
        params.update(c=train_args.scheduled_sampling_c, eps_min=train_args.scheduled_sampling_min)
    return functools.partial(sampling_probability, schedule=train_args.scheduled_sampling, **params)


__all__ = [
    "SCHEDULES",
    "exponential_decay",
    "inverse_sigmoid_decay",
    "linear_decay",
    "run_sampling_schedule",
    "sampling_probability",
    "teacher_forcing_ratio",
]
