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

import math


def _number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"`{name}` must be a finite number, got {value!r}.")
    return float(value)


def _check_step(step) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"`step` must be a non-negative integer (the training step i), got {step!r}.")
    return step


def linear_decay(step: int, k: float = 1.0, c: float = 1e-4, eps_min: float = 0.0) -> float:
    """eps_i = max(eps_min, k - c * i): teacher forcing falls by `c` per step until the floor `eps_min`.

    Args:
        step: the training step i >= 0.
        k: the starting ratio, in (0, 1].
        c: the decrease per step, >= 0.
        eps_min: the floor in [0, 1], "the minimum amount of truth to be given to the model".
    """
    step = _check_step(step)
    k, c, eps_min = _number("k", k), _number("c", c), _number("eps_min", eps_min)
    if not 0.0 < k <= 1.0:
        raise ValueError(f"`k` of the linear schedule must be in (0, 1], got {k!r}.")
    if c < 0:
        raise ValueError(f"`c` of the linear schedule must be >= 0, got {c!r}.")
    if not 0.0 <= eps_min <= 1.0:
        raise ValueError(f"`eps_min` must be in [0, 1], got {eps_min!r}.")
    return max(eps_min, k - c * step)


def exponential_decay(step: int, k: float = 0.9999) -> float:
    """eps_i = k ** i with 0 < k < 1: teacher forcing shrinks by the factor `k` every step."""
    step = _check_step(step)
    k = _number("k", k)
    if not 0.0 < k < 1.0:
        raise ValueError(f"`k` of the exponential schedule must be in (0, 1), got {k!r}.")
    return k**step


def inverse_sigmoid_decay(step: int, k: float = 1000.0) -> float:
    """eps_i = k / (k + exp(i / k)) with k >= 1: flat near k/(k+1) at first, then a sigmoid-shaped
    drop centred at i = k * ln(k), reaching 0 asymptotically."""
    step = _check_step(step)
    k = _number("k", k)
    if k < 1.0:
        raise ValueError(f"`k` of the inverse sigmoid schedule must be >= 1, got {k!r}.")
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


def run_sampling_probability(train_args, step: int) -> float | None:
    """A run's probability of feeding the model's own sample at `step`, from its `scheduled_sampling*`
    arguments (None when it trains with teacher forcing only)."""
    if train_args.scheduled_sampling == "none":
        return None
    params = {} if train_args.scheduled_sampling_k is None else {"k": train_args.scheduled_sampling_k}
    if train_args.scheduled_sampling == "linear":
        params.update(c=train_args.scheduled_sampling_c, eps_min=train_args.scheduled_sampling_min)
    return sampling_probability(step, train_args.scheduled_sampling, **params)


__all__ = [
    "SCHEDULES",
    "exponential_decay",
    "inverse_sigmoid_decay",
    "linear_decay",
    "run_sampling_probability",
    "sampling_probability",
    "teacher_forcing_ratio",
]
