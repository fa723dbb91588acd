"""What every hf_lm family shares, Transformer or not: config validators, the variant names configs
validate against, the base model class, input checks and losses.

Shipped model code: `save_pretrained` copies this file next to the weights, so it imports only torch
and transformers. It holds no attention, positions or recurrent cells: configuration files import
only this file (so a config-only load imports no modeling code), and the RNN, feed-forward and
n-gram families ship without the Transformer blocks.

Shape legend: B batch, T query length, S key length, C hidden size, V vocabulary.
"""

from __future__ import annotations

import logging
import math
import os

import torch
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import TransformersKwargs

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------
# Variant names. Configs validate their string fields against these; the modeling tables
# (`hflm_layers.FEED_FORWARDS`, `NORMS`, `hflm_positions.POSITION_ENCODINGS`, `hflm_rnn_blocks.RNN_CELLS`) are keyed
# by exactly these names, which they assert at import.
# ----------------------------------------------------------------------------------------------

FEED_FORWARD_NAMES = ("relu", "gelu", "gelu_tanh", "swiglu", "geglu", "geglu_tanh", "reglu")
NORM_NAMES = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")
POSITION_ENCODING_NAMES = ("learned", "sinusoidal", "rope", "alibi", "none", "relative_buckets", "xpos")
RNN_CELL_NAMES = ("rnn_tanh", "rnn_relu", "lstm", "gru")
# the gate blocks of each cell: its weight matrices are that many H x (input + H) maps (parameter estimates)
RNN_CELL_GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}
# "fused": torch's multi-step kernels (cuDNN on GPU, oneDNN/ATen on CPU) whenever no step needs masking;
# "loop": the step functions in a Python loop, the readable reference (always used with padding).
RNN_IMPLEMENTATIONS = ("fused", "loop")
# sparse attention patterns (`attention_pattern`, "dense" or these joined with "+"), the course's
# figure: global tokens, band (sliding window), dilated window, random keys, block-local
ATTENTION_PATTERN_NAMES = ("global", "band", "dilated", "random", "block")
# an encoder-decoder's decoder self-attention: "causal" (autoregressive), or "bidirectional", the
# conditional masked LM of Mask-Predict (Ghazvininejad et al., 2019), which predicts masked targets
DECODER_ATTENTION_NAMES = ("causal", "bidirectional")


# ----------------------------------------------------------------------------------------------
# The cache's name. transformers 5.24 renamed the cache from `past_key_values` to `cache`: `generate()`
# passes `cache=` to `forward` and reads `outputs["cache"]`, and output classes have a `cache` field
# (the old name still works there, with a deprecation warning). Up to 5.23 both are `past_key_values`.
# hf_lm's forwards accept either name and return the cache under the installed version's, so a
# saved folder's code runs with either version.
# ----------------------------------------------------------------------------------------------

CACHE_NAME = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"
# both names, for the lists transformers reads by key: Trainer's `keys_to_ignore_at_inference` (a
# cache is not a prediction) and `_skip_keys_device_placement`
CACHE_NAMES = ("past_key_values", "cache")


def cache_argument(past_key_values, kwargs: dict):
    """The cache a forward was given as `past_key_values` or as `cache` (popped from its `kwargs`)."""
    cache = kwargs.pop("cache", None)
    if cache is not None and past_key_values is not None:
        raise ValueError("Pass the cache as `cache` or as `past_key_values`, not both.")
    return past_key_values if cache is None else cache


#: what a head's loss reads from its `**kwargs` (Trainer's `num_items_in_batch`, pre-shifted labels)
LOSS_KWARGS = ("num_items_in_batch", "shift_labels")


def attention_kwargs(kwargs: dict, named_only: bool = False) -> dict:
    """A head's `**kwargs` without the loss's: what it passes on to its base model, whose attention
    backends and cache read them. `named_only`: only transformers' `TransformersKwargs` (a head
    whose `**kwargs` also carry its own targets, as BERT's task heads)."""
    return {
        name: value
        for name, value in kwargs.items()
        if name not in LOSS_KWARGS and (not named_only or name in TransformersKwargs.__annotations__)
    }


def returned_cache(cache) -> dict:
    """`{name: cache}` for an output's constructor, under the installed transformers' name."""
    return {CACHE_NAME: cache}


def output_cache(outputs):
    """The cache an output holds (None without one), read under the installed transformers' name."""
    return getattr(outputs, CACHE_NAME, None)


# ----------------------------------------------------------------------------------------------
# Config validators: each raises a ValueError naming the field and what it accepts.
# ----------------------------------------------------------------------------------------------


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {sorted(allowed)}, got {value!r}.")


def _integer(name: str, value, low: int, allow_none: bool = False) -> None:
    """An int (not a bool) >= `low`; None too with `allow_none`."""
    if allow_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        allowed = {1: "a positive integer", 0: "a non-negative integer"}.get(low, f"an integer >= {low}")
        raise ValueError(f"`{name}` must be {'None or ' if allow_none else ''}{allowed}, got {value!r}.")


def _positive_int(name: str, value, allow_none: bool = False) -> None:
    _integer(name, value, 1, allow_none)


def _non_negative_int(name: str, value) -> None:
    _integer(name, value, 0)


def _number(
    name: str, value, low: float = -math.inf, high: float = math.inf, *, low_open=False, high_open=False
) -> None:
    """A finite real number in [low, high] (`low_open`/`high_open` exclude the bound).

    nan and inf are refused whatever the interval: a non-finite init scale, RoPE base or pseudo-count
    is accepted by every comparison with nan, or by an open bound with inf, and only surfaces later as
    non-finite weights or logits.
    """
    finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    above = finite and (value > low if low_open else value >= low)
    if above and (value < high if high_open else value <= high):
        return
    if (low, high, low_open) == (0, math.inf, True):
        what = "a finite positive number"
    elif (low, high) == (0, math.inf):
        what = "a finite non-negative number"
    elif (low, high) == (-math.inf, math.inf):
        what = "a finite number"
    else:
        what = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    raise ValueError(f"`{name}` must be {what}, got {value!r}.")


def _positive(name: str, value) -> None:
    _number(name, value, 0, low_open=True)


def _non_negative(name: str, value) -> None:
    _number(name, value, 0)


def _probability(name: str, value) -> None:
    _number(name, value, 0, 1, high_open=True)


def _dropout(name: str, value) -> None:
    """A dropout probability in [0, 1]: 1 drops everything, which torch's dropout and SDPA compute
    (zeros, no nan): unusual, not invalid, as transformers has it."""
    _number(name, value, 0, 1)


def _bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False, got {value!r}.")


def _attention_pattern(name: str, value) -> tuple[str, ...]:
    """The parts of an `attention_pattern`: "dense" (none), or distinct names of
    `ATTENTION_PATTERN_NAMES` joined with "+" ("band+global" is Longformer's, "band+global+random"
    BigBird's)."""
    parts = tuple(value.split("+")) if isinstance(value, str) else ()
    if value != "dense" and (
        not parts or len(set(parts)) != len(parts) or not set(parts) <= set(ATTENTION_PATTERN_NAMES)
    ):
        raise ValueError(
            f"`{name}` must be 'dense' or distinct names of {list(ATTENTION_PATTERN_NAMES)} joined "
            f"with '+' (e.g. 'band+global'), got {value!r}."
        )
    return () if value == "dense" else parts


def _token_ids(name: str, value, vocab_size: int) -> None:
    """A special token field: None, an id in [0, vocab_size), or (eos) a list of such ids."""
    for token_id in value if isinstance(value, list) else [value]:
        if token_id is not None and (
            isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < vocab_size
        ):
            raise ValueError(
                f"`{name}` must be None or an id in [0, vocab_size={vocab_size}), got {value!r}."
            )


# ----------------------------------------------------------------------------------------------
# What every family's config shares
# ----------------------------------------------------------------------------------------------


class HfLmConfigMixin:
    """Mixed into every hf_lm config class: a saved config of another model type is refused by name.

    transformers only warns when `HfLmGPTConfig.from_pretrained(folder)` (or a model class's
    `from_pretrained`) reads a folder of another type, then builds the wrong model from the fields
    the two share; and a config.json whose `model_type` disagrees with the code its `auto_map` names
    ends in transformers' advice to pass `trust_remote_code=True`, which would run that code. Both
    say here what the folder holds and how to load it.

    It also names the fields a config's parameter count grows with (`size_field_names`, a class
    attribute), for `check_fits_in_memory`'s message, and holds the one `from_preset`, which reads
    the family's own table of named recipes (`PRESETS`, kept next to the family's fields so that a
    checkpoint's folder carries only its own family's files; `hf_lm.families.FAMILIES[name].presets`
    lists them all).
    """

    size_field_names = ()
    # preset name -> the field values of that recipe over the family's defaults (a class attribute,
    # not a field); a family without presets keeps this empty one
    PRESETS = {}

    @classmethod
    def from_preset(cls, name: str, **overrides):
        """A config from the family's preset `name` (one of `cls.PRESETS`), with `overrides` on top.

        Presets name an architecture recipe (positions, norms, feed-forward, biases, tying), not a
        size, except where the recipe is a size (ELECTRA's): sizes come with `overrides`.

            >>> config = HfLmGPTConfig.from_preset("llama", hidden_size=256, num_attention_heads=4)

        Raises:
            ValueError: `name` is not one of the family's presets (the message lists them).
        """
        if name not in cls.PRESETS:
            family = cls.model_type or cls.__name__
            choices = f"choose one of {list(cls.PRESETS)}" if cls.PRESETS else "it has none"
            raise ValueError(f"Unknown preset {name!r} for {family}: {choices}.")
        return cls(**{**cls.PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        check_saved_model_type(cls, config_dict, kwargs.get("name_or_path"))
        return super().from_dict(config_dict, **kwargs)

    def size_fields(self) -> dict:
        """The fields the parameter count grows with and their values (those set), for messages."""
        return {
            name: value for name in self.size_field_names if (value := getattr(self, name, None)) is not None
        }


def check_saved_model_type(config_class: type, config_dict: dict, name_or_path=None) -> None:
    """Raise a ValueError when a saved config (`config_dict`, read from config.json) is not one of
    `config_class`: another `model_type`, or an `auto_map` naming another hf_lm config class."""
    saved_type = config_dict.get("model_type")
    auto_config = (config_dict.get("auto_map") or {}).get("AutoConfig")
    written_by = auto_config.rsplit(".", 1)[-1] if isinstance(auto_config, str) else None
    where = f"{name_or_path}" if name_or_path else "This config.json"
    architectures = config_dict.get("architectures") or []
    named = f" ({', '.join(map(str, architectures))})" if architectures else ""
    if saved_type and saved_type != config_class.model_type:
        if str(saved_type).startswith("hflm_"):
            advice = (
                "load it with its own classes: AutoConfig.from_pretrained / AutoModel.from_pretrained"
                + (f", or {architectures[0]}.from_pretrained" if architectures else "")
            )
        else:
            advice = (
                "load it with transformers' own classes, and convert it with "
                "hf_lm.convert.from_transformers(model) if it is a supported architecture"
            )
        raise ValueError(
            f"{where} holds a `{saved_type}` model{named}, not a `{config_class.model_type}` one: "
            f"{config_class.__name__} cannot read it. To use it, {advice}."
        )
    if written_by and written_by.startswith("HfLm") and written_by != config_class.__name__:
        raise ValueError(
            f"{where} is inconsistent: its model_type is `{saved_type}` ({config_class.__name__}) but its "
            f"auto_map names {written_by}, another hf_lm config{named}. The file was edited or mixed from "
            f"two models; restore the model_type of the model that wrote the weights (or save it again from "
            f"that model). Loading it with trust_remote_code=True would not fix this."
        )


def device_memory_bytes(device: torch.device | str | int) -> int | None:
    """The memory of `device`: a GPU's total memory, the host's physical memory for the CPU, None
    where it is not known."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type == "cpu":
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):  # not a POSIX system
            return None
    return None


def memory_capacity(device: torch.device) -> int | None:
    """The bytes a model built on `device` could ever occupy there, or None when unknown: the GPU's
    memory, or the machine's RAM plus swap (Linux's /proc/meminfo; elsewhere twice the RAM, the
    swap being unknown). A bound on what can be allocated at all, not on what is free now."""
    memory = device_memory_bytes(device)
    if memory is None or device.type != "cpu":
        return memory
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            swap = next((int(line.split()[1]) * 1024 for line in f if line.startswith("SwapTotal:")), 0)
    except (OSError, ValueError):
        swap = memory
    return memory + swap


def check_fits_in_memory(config) -> None:
    """Refuse, before allocating anything, a model whose weights alone cannot fit in the memory of
    the device it is built on (a config of 200,000 layers or 100,000 experts would otherwise fill
    the memory and swap for minutes before the process is killed).

    The weights are counted from the config (`estimated_num_parameters`, a lower bound) at the dtype
    the model is built in; a build on the meta device (`from_pretrained`, `init_empty_weights`,
    `with torch.device("meta")`) allocates nothing and is never refused.
    """
    estimate = getattr(config, "estimated_num_parameters", None)
    if not callable(estimate):
        return
    device = torch.get_default_device()
    if device.type == "meta":
        return
    capacity = memory_capacity(device)
    if capacity is None:
        return
    dtype = torch.get_default_dtype()
    params = estimate()
    needed = params * torch.empty((), dtype=dtype, device="meta").element_size()
    if needed <= capacity:
        return
    fields = ", ".join(f"{k}={v:,}" for k, v in config.size_fields().items())
    raise ValueError(
        f"This {getattr(config, 'model_type', 'hf_lm')} config describes at least {params:,} parameters, "
        f"{needed / 2**30:,.1f} GiB in {str(dtype).removeprefix('torch.')}, more than the {capacity / 2**30:,.1f} GiB "
        f"this {device.type} device can hold ({fields}). Lower these sizes, or build the model on the meta "
        "device (`with torch.device('meta'):`) to inspect it without weights."
    )
