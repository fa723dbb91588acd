"""The argument checks of the data collators and noise functions (`collators_mlm`,
`collators_seq2seq`, `seq2seq_noise`): each raises a ValueError naming the argument."""

from __future__ import annotations

import math
from typing import Any

import torch


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_probability(name: str, value: Any, upper_open: bool = False) -> None:
    ok = is_number(value) and 0.0 <= value and (value < 1.0 if upper_open else value <= 1.0)
    if not ok:
        interval = "[0, 1)" if upper_open else "[0, 1]"
        raise ValueError(f"`{name}` must be a number in {interval}, got {value!r}.")


def check_positive_number(name: str, value: Any) -> None:
    if not is_number(value) or not value > 0 or not math.isfinite(value):
        raise ValueError(f"`{name}` must be a positive number, got {value!r}.")


def check_positive_int(name: str, value: Any, allow_none: bool = False) -> None:
    if allow_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        allowed = "None or a positive integer" if allow_none else "a positive integer"
        raise ValueError(f"`{name}` must be {allowed}, got {value!r}.")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False, got {value!r}.")


def check_seed_and_generator(seed: Any, generator: Any) -> None:
    """A collator's randomness: a non-negative `seed`, a `torch.Generator`, or neither (torch's global stream)."""
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"`seed` must be None or a non-negative integer, got {seed!r}.")
        if generator is not None:
            raise ValueError("`seed` and `generator` are mutually exclusive: give one of them.")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"`generator` must be a torch.Generator, got {type(generator).__name__}.")
