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
import shutil
import sys

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Cache, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import TransformersKwargs, cached_file

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------
# Variant names. Configs validate their string fields against these; the modeling tables
# (`hflm_blocks.FEED_FORWARDS`, `NORMS`, `POSITION_ENCODINGS`, `hflm_rnn_blocks.RNN_CELLS`) are keyed
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


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")


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
    attribute), for `check_fits_in_memory`'s message.
    """

    size_field_names = ()

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


# ----------------------------------------------------------------------------------------------
# Base class shared by every family
# ----------------------------------------------------------------------------------------------


# model-class suffix -> the Hub's pipeline tag for the model card
_PIPELINE_TAGS = {
    "ForCausalLM": "text-generation",
    "ForMaskedLM": "fill-mask",
    "ForPreTraining": "fill-mask",
    "ForSequenceClassification": "text-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMultipleChoice": "multiple-choice",
    "ForConditionalGeneration": "text2text-generation",
    "ForMaskPredict": "text2text-generation",
    "Model": "feature-extraction",
}


# hf_lm's own pipelines (the tasks transformers 5 removed), carried by the folders of the heads they
# serve: task -> (the class in a shipped pipeline file, the Auto class the pipeline loads). A head's
# `save_pretrained` writes them to `config.custom_pipelines` (transformers' format) and copies the
# file, so `pipeline(task, model=folder, trust_remote_code=True)` works where hf_lm is not installed.
_QA = ("hflm_pipelines.HfLmQuestionAnsweringPipeline", "AutoModelForQuestionAnswering")
QA_PIPELINES = {"hflm-question-answering": _QA, "extractive-question-answering": _QA}
_TRANSLATION = ("hflm_pipelines_seq2seq.HfLmTranslationPipeline", "AutoModelForSeq2SeqLM")
SEQ2SEQ_PIPELINES = {
    "hflm-text2text-generation": (
        "hflm_pipelines_seq2seq.HfLmText2TextGenerationPipeline",
        "AutoModelForSeq2SeqLM",
    ),
    "hflm-summarization": ("hflm_pipelines_seq2seq.HfLmSummarizationPipeline", "AutoModelForSeq2SeqLM"),
    "hflm-translation": _TRANSLATION,
    # T5's pairs, read back from the task name by the translation pipeline
    **{f"hflm-translation_en_to_{tgt}": _TRANSLATION for tgt in ("de", "fr", "ro")},
}


def _pipeline_files(model, folder_hint) -> dict[str, str] | None:
    """{file name: source path} of the pipeline files `model`'s class ships, or None if one is missing.

    The files sit next to the modeling file (hf_lm installed); a model loaded with
    `trust_remote_code=True` has only its modeling files in transformers' module cache, so the
    folder it was loaded from is searched too, or, for a Hub repository, its files (from the local
    Hub cache, or downloaded as `from_pretrained` would).
    """
    names = {impl.split(".")[0] + ".py" for impl, _ in model._hflm_pipelines.values()}
    places = [os.path.dirname(sys.modules[type(model).__module__].__file__), folder_hint]
    found = {}
    for name in names:
        paths = [os.path.join(p, name) for p in places if p and os.path.isdir(p)]
        found[name] = next((path for path in paths if os.path.isfile(path)), None)
        if found[name] is None and folder_hint and not os.path.isdir(folder_hint):
            found[name] = _hub_file(folder_hint, name, getattr(model.config, "_commit_hash", None))
        if found[name] is None:
            logger.warning("%s not found next to the model's code: the folder ships no pipeline.", name)
            return None
    return found


def _hub_file(repo_id: str, name: str, revision: str | None) -> str | None:
    """The local path of file `name` of Hub repository `repo_id` (at the loaded revision), or None."""
    try:
        return cached_file(repo_id, name, revision=revision, _raise_exceptions_for_missing_entries=False)
    except (OSError, ValueError):  # not a repository id, offline and not cached, no access
        return None


def without_hflm_pipelines(custom_pipelines: dict | None) -> dict:
    """`config.custom_pipelines` less hf_lm's own entries (those whose code is an `hflm_pipelines*` file)."""
    return {
        task: info
        for task, info in (custom_pipelines or {}).items()
        if not str(info.get("impl", "")).startswith("hflm_pipelines")
    }


def installed_pipelines_dropped(config_class: type, kwargs: dict) -> dict:
    """A config's kwargs without the folder's hf_lm `custom_pipelines` when hf_lm itself is installed.

    `pipeline(task, model=DIR)` runs a folder's `custom_pipelines` before its registry and then asks
    for `trust_remote_code`. With hf_lm installed (the config class lives in the `hf_lm` package),
    `import hf_lm` has already registered the same pipelines, so the folder's copy is dropped and the
    call works as it did before folders carried them; loaded as remote code (no hf_lm), they stay.
    A head's `save_pretrained` writes them again.
    """
    custom = kwargs.get("custom_pipelines")
    if not custom or not config_class.__module__.startswith("hf_lm."):
        return kwargs
    kept = without_hflm_pipelines(custom)
    return (
        {**kwargs, "custom_pipelines": kept}
        if kept
        else {k: v for k, v in kwargs.items() if k != "custom_pipelines"}
    )


class HfLmPreTrainedModel(PreTrainedModel):
    """Init, capabilities and saving shared by every hf_lm model. Families set `config_class`."""

    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False
    _no_split_modules = ["TransformerBlock"]
    _skip_keys_device_placement = list(CACHE_NAMES)
    #: hf_lm pipelines this head's folders carry (`QA_PIPELINES`, `SEQ2SEQ_PIPELINES`), or none
    _hflm_pipelines: dict[str, tuple[str, str]] = {}

    def __init__(self, config, *inputs, **kwargs):
        # A config validates itself when it is built, but not when a value is set afterwards, which
        # `AutoConfig.from_pretrained(folder, hidden_act=...)`, `from_pretrained(folder,
        # num_attention_heads=3)`, `config.update({...})` and `config.x = ...` all do. Validating again
        # where the model is built gives those the same ValueError naming the field, instead of a
        # bare KeyError or a size mismatch deep inside the layers.
        validate = getattr(config, "validate_hflm", None)
        if callable(validate):
            validate()
        check_fits_in_memory(config)
        super().__init__(config, *inputs, **kwargs)

    def _resolve_parallel_plans(self, distributed_config):
        """transformers' plans, after checking that tensor parallelism can split the heads: each
        process must hold whole key/value groups (the sharded projections are cut evenly)."""
        tp_size = getattr(distributed_config, "tp_size", 1) or 1
        for name in ("num_key_value_heads", "num_attention_heads"):
            heads = getattr(self.config, name, None)
            if tp_size > 1 and heads and heads % tp_size:
                raise ValueError(
                    f"Tensor parallelism over {tp_size} processes needs `{name}` ({heads}) divisible by "
                    f"{tp_size}: each process holds whole key/value groups."
                )
        return super()._resolve_parallel_plans(distributed_config)

    def _init_weights(self, module):
        """N(0, 0.02) everywhere (BERT, BART); in a pre-norm stack (GPT-2) the residual output
        projections are scaled by 1/sqrt(2 * layers).

        Written per leaf module (Linear, Embedding, norm): for remote-code models transformers 5 skips
        `_init_weights` on modules without parameters of their own (Attention, MLP), so the Linears
        carry their role (`init_role`, set where they are built) instead.
        """
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None:
                init.zeros_(module.weight[module.padding_idx])  # padding embeds to zero, as in BERT
        elif getattr(module, "init_role", None) == "norm":  # LayerNorm, RMSNorm (hflm_blocks)
            init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        pre_norm = getattr(self.config, "norm_position", "pre") == "pre"
        if pre_norm and getattr(module, "init_role", None) in ("attn_out", "ff_out"):
            # each block adds two residual branches to a stream no norm rescales: keep the sum's
            # variance flat in depth (GPT-2, nanoGPT). A post-norm stack renormalizes after every
            # branch, and its references (BERT, BART) do not scale. Scaled, a BART-style model
            # trained from scratch on Multi30k kept every encoder output the same vector; unscaled,
            # it recovered within 200 steps (benchmarks/results/leaderboard_translation)
            init.normal_(module.weight, mean=0.0, std=std / math.sqrt(2 * self.config.num_hidden_layers))

    def create_masks_for_generate(
        self, attention_mask=None, past_key_values=None, inputs_embeds=None, **kwargs
    ):
        """Keep generate()'s (B, S) padding mask 2D; widen it to a static cache's full length.

        transformers calls this for compileable (static) caches only, and would turn the mask into a
        4D one with its own masking utilities; hf_lm models build their masks themselves (padding,
        causality, prefix, ALiBi bias) in one place. Widened (empty slots = padding), the mask has
        the same shape at every decoding step, so a compiled step is not recompiled as it grows.
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        if attention_mask is None or attention_mask.dim() != 2 or past_key_values is None:
            return attention_mask
        _, kv_len, _ = cache_lengths(past_key_values, inputs_embeds.shape[1])
        width = attention_mask.shape[-1]
        return F.pad(attention_mask, (0, kv_len - width)) if kv_len > width else attention_mask

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save as transformers does, with every Auto class of this family in `config.json`'s `auto_map`.

        transformers writes only the saved class's entry; `AutoModel` (and so feature extraction)
        on a folder saved from the LM head would then fail under `trust_remote_code`.
        """
        module = sys.modules[type(self).__module__]
        file_stem = type(self).__module__.rsplit(".", 1)[-1]
        auto_map = dict(getattr(self.config, "auto_map", None) or {})
        for name, obj in vars(module).items():
            if (
                isinstance(obj, type)
                and issubclass(obj, PreTrainedModel)
                and obj.__module__ == module.__name__
                and obj.config_class is type(self.config)  # one modeling file may serve several families
            ):
                if obj._auto_class is not None:
                    auto_map[obj._auto_class] = f"{file_stem}.{name}"
        if auto_map:
            self.config.auto_map = auto_map
        pipeline_files = self._set_custom_pipelines()
        result = super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            for name, source in pipeline_files.items():
                shutil.copyfile(source, os.path.join(save_directory, name))
        card = os.path.join(save_directory, "README.md")
        if kwargs.get("is_main_process", True) and not os.path.exists(card):
            # every saved model gets a card; hf_lm.cards writes a fuller one (data, metrics) over it
            with open(card, "w", encoding="utf-8") as f:
                f.write(self._default_model_card())
        return result

    def _set_custom_pipelines(self) -> dict[str, str]:
        """Name this head's hf_lm pipelines in `config.custom_pipelines`; returns the files to copy.

        A head without pipelines drops hf_lm's entries a config may have kept from another head.
        """
        custom = without_hflm_pipelines(getattr(self.config, "custom_pipelines", None))
        files = _pipeline_files(self, self.name_or_path) if self._hflm_pipelines else None
        for task, (impl, auto_class) in self._hflm_pipelines.items() if files else ():
            custom[task] = {"impl": impl, "pt": [auto_class], "type": "text"}
        if custom or getattr(self.config, "custom_pipelines", None):
            self.config.custom_pipelines = custom
        return files or {}

    def _default_model_card(self) -> str:
        """A minimal Hugging Face model card: front matter the Hub indexes, the architecture, usage."""
        cfg, name = self.config, type(self).__name__
        auto_class = self._auto_class or "AutoModel"
        task = next((tag for suffix, tag in _PIPELINE_TAGS.items() if name.endswith(suffix)), None)
        rows = "\n".join(f"| {k} | {v} |" for k, v in self._card_fields())
        return (
            "---\nlibrary_name: transformers\nlicense: apache-2.0\n"
            + (f"pipeline_tag: {task}\n" if task else "")
            + f"tags:\n- hf_lm\n- {cfg.model_type}\n---\n\n"
            + f"# {name}\n\nAn hf_lm model (`{name}`). Its modeling code ships in this folder: load it with "
            + "`trust_remote_code=True`, no hf_lm install needed.\n\n"
            + f"| | |\n|---|---|\n{rows}\n\n## Usage\n\n```python\n"
            + f"from transformers import {auto_class}\n\n"
            + f'model = {auto_class}.from_pretrained("path/or/hub-id", trust_remote_code=True)\n```\n'
        )

    def _card_fields(self) -> list[tuple[str, object]]:
        """(name, value) rows of the default card's architecture table; non-Transformer families override it."""
        cfg = self.config
        rows = [
            ("model_type", cfg.model_type),
            ("layers", cfg.num_hidden_layers),
            ("hidden_size", cfg.hidden_size),
            ("attention heads / key-value heads", f"{cfg.num_attention_heads} / {cfg.num_key_value_heads}"),
            ("feed-forward", f"{cfg.hidden_act}, {cfg.intermediate_size}"),
            ("positions", cfg.position_embedding_type),
            ("norm", f"{cfg.norm_type}, {cfg.norm_position}-norm"),
            ("vocabulary", cfg.vocab_size),
        ]
        # ALBERT's options, where a family uses them
        embedding_size = getattr(cfg, "embedding_size", None)
        if embedding_size not in (None, cfg.hidden_size):
            rows.append(("embedding_size (factorized)", embedding_size))
        groups = getattr(cfg, "num_hidden_groups", None)
        if groups not in (None, cfg.num_hidden_layers):
            rows.append(("distinct blocks (shared across layers)", groups))
        if getattr(cfg, "attention_pattern", "dense") != "dense":
            rows.append(("sparse attention pattern", cfg.attention_pattern))
        return rows + [("parameters", f"{self.num_parameters():,}")]


def trainer_shifts_labels(model_class: type) -> type:
    """Class decorator of a causal LM head: `Trainer` then shifts its labels under label smoothing.

    With `label_smoothing_factor > 0`, `Trainer.compute_loss` pops `labels`, runs the model without
    them and scores the logits itself. It shifts the labels (position t predicts token t+1) only for
    a model whose class name is a value of transformers' `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`; for any
    other class it compares position t with token t, which silently trains a causal LM to copy its
    input. The documented `AutoModelForCausalLM.register(config_class, model_class)` (which
    `import hf_lm` calls) fills another table, which `Trainer` does not read, and it is not called
    at all when a folder is loaded with `trust_remote_code=True`. So each causal LM adds itself to
    that public table here, in the shipped code, under its own `model_type` (a name transformers
    does not use), without overwriting any entry. Nothing else changes: the Auto mappings built on
    the table skip model types that are not transformers' own configs.
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault(model_class.config_class.model_type, model_class.__name__)
    return model_class


# ----------------------------------------------------------------------------------------------
# Input checks and losses shared by the heads.
#
# Bad input fails here, with a ValueError naming the argument, not as a torch error deep inside
# `forward` (or, worse, as silently wrong numbers). Types, shapes and dtypes are checked always:
# they are static inside a compiled graph. Values are checked outside compiled graphs only (they
# are read on the host, which would break the graph), and the value checks of one call are read
# together: each host read of a GPU tensor (`bool(t)`, `.item()`, `.tolist()`) waits for the
# device to finish all the work queued before it.
# ----------------------------------------------------------------------------------------------


def check_unicode_text(text: str, where: str) -> None:
    """A ValueError naming `where` and the position of a lone surrogate (e.g. "\\ud800", from a bad
    decode): text that is not valid Unicode, which a tokenizer cannot encode (the pipelines' inputs)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"{where} holds {text[err.start]!r} at character {err.start}, a lone surrogate that is not valid "
            "Unicode text; remove it or decode the source with errors='replace'."
        ) from err


def is_integer_dtype(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def _require_tensor(x, name: str, what: str) -> None:
    if not torch.is_tensor(x):
        raise ValueError(f"`{name}` must be a tensor of {what}, got {type(x).__name__}.")


def _require_integer(x: torch.Tensor, name: str, what: str) -> None:
    if not is_integer_dtype(x.dtype):
        raise ValueError(f"`{name}` must hold integer {what}, got dtype {x.dtype}.")


def host_read(*flags: torch.Tensor) -> list[bool]:
    """Several 0-dim bool checks read on the host at once: one device sync instead of one per check."""
    device = flags[0].device
    return torch.stack([flag.reshape(()).to(device) for flag in flags]).tolist()


def _min_max(x: torch.Tensor) -> tuple[int, int]:
    """(min, max) of a non-empty integer tensor, in one host read."""
    lo, hi = torch.stack(torch.aminmax(x)).tolist()
    return lo, hi


def check_input_ids(input_ids, vocab_size: int, name: str = "input_ids", values: bool = True) -> None:
    """A (B, T) tensor of token ids in [0, vocab_size): a message a user can act on, not an index
    error deep inside the embedding. `values=False` skips the host read of the values, for ids that
    are checked again where they are embedded."""
    _require_tensor(input_ids, name, "token ids")
    if input_ids.dim() != 2:
        raise ValueError(f"`{name}` must be a (batch, seq_len) tensor, got shape {tuple(input_ids.shape)}.")
    if input_ids.numel() == 0:
        raise ValueError(f"`{name}` is empty (shape {tuple(input_ids.shape)}): pass at least one token.")
    _require_integer(input_ids, name, "token ids")
    if not values or torch.compiler.is_compiling():
        return
    lo, hi = _min_max(input_ids)
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(
            f"`{name}` contains token id {bad}, outside the vocabulary [0, {vocab_size}). "
            "Was the input made with a different tokenizer than this model's?"
        )


def embed_inputs(
    input_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    embed_tokens: nn.Embedding,
    vocab_size: int,
    width_name: str = "hidden_size",
    names: tuple[str, str] = ("input_ids", "inputs_embeds"),
) -> torch.Tensor:
    """The (B, T, width) input embeddings: looked up from checked `input_ids`, or `inputs_embeds` checked.

    `names`: the two arguments as the caller's user passed them (a decoder's are
    `decoder_input_ids` and `decoder_inputs_embeds`), for the error messages.
    """
    ids_name, embeds_name = names
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(f"Pass exactly one of `{ids_name}` or `{embeds_name}`.")
    if input_ids is not None:
        check_input_ids(input_ids, vocab_size, ids_name)
        if input_ids.dtype not in (torch.int64, torch.int32):
            input_ids = input_ids.long()  # the lookup takes int64 or int32 indices (uint8 ids are fine ids)
        return embed_tokens(input_ids)  # (B, T, width)
    width = embed_tokens.embedding_dim
    _require_tensor(inputs_embeds, embeds_name, "embeddings")
    if inputs_embeds.dim() != 3 or 0 in inputs_embeds.shape[:2] or inputs_embeds.shape[2] != width:
        raise ValueError(
            f"`{embeds_name}` must be a non-empty (batch, seq_len, {width_name}={width}) tensor, "
            f"got {tuple(inputs_embeds.shape)}."
        )
    if not inputs_embeds.is_floating_point():
        raise ValueError(
            f"`{embeds_name}` must hold floating-point vectors, got dtype {inputs_embeds.dtype}."
        )
    return inputs_embeds


def _padding_mask_is_full(mask: torch.Tensor, name: str, require_token: bool = False) -> bool:
    """Whether a padding mask is all ones (nothing padded), after checking, in one host read, that it
    holds only 1 (token) and 0 (padding), and with `require_token` a token in every row. A mask
    holding 2 or 0.5 would otherwise pass as "attend" everywhere it is not 0. Inside a compiled
    graph nothing is read and the answer is False (the mask is applied as it is)."""
    if torch.compiler.is_compiling():
        return False
    ones = mask == 1
    binary = ones | (mask == 0)
    flags = [ones.all(), binary.all()]
    if require_token:
        flags.append(ones.any(dim=-1).all())
    full, is_binary, *has_tokens = host_read(*flags)
    if not is_binary:
        raise ValueError(
            f"`{name}` must hold 1 for tokens and 0 for padding, got the value {mask[~binary][0].item()}."
        )
    if has_tokens and not has_tokens[0]:
        row = int((~ones.any(dim=-1)).nonzero()[0, 0])
        raise ValueError(f"`{name}` row {row} has no real token: every source needs at least one.")
    return full


def check_padding_mask(
    attention_mask: torch.Tensor | None,
    batch: int,
    length: int,
    name: str = "attention_mask",
    require_token: bool = False,
) -> torch.Tensor | None:
    """Check a (B, S) padding mask (its shape, and that it holds only 1 and 0); return None when nothing
    is padded, so attention can take its unmasked fast path (the value check and the fast path are
    skipped inside a compiled graph). `require_token`: every row must hold a token (a source the
    decoder attends to)."""
    if attention_mask is None:
        return None
    _require_tensor(attention_mask, name, "1 (token) and 0 (padding) values")
    if tuple(attention_mask.shape) != (batch, length):
        raise ValueError(
            f"`{name}` must have shape (batch, seq_len) = ({batch}, {length}), got {tuple(attention_mask.shape)}."
        )
    return None if _padding_mask_is_full(attention_mask, name, require_token) else attention_mask


def check_cache_type(past_key_values, cache_class: type, what: str) -> None:
    """`past_key_values` is None or a cache of the model's kind (not a legacy tuple, not a stray value)."""
    if past_key_values is not None and not isinstance(past_key_values, cache_class):
        hint = (
            " (tuple caches were removed in transformers 5)"
            if isinstance(past_key_values, (tuple, list))
            else ""
        )
        raise ValueError(f"`past_key_values` must be {what}, got {type(past_key_values).__name__}{hint}.")


def cache_lengths(past_key_values, q_len: int) -> tuple[int | torch.Tensor, int, int]:
    """Where T new tokens sit among the keys attention sees, for any transformers `Cache` (or None).

    Returns:
        `(past_len, kv_len, offset)`. `past_len`: tokens already cached. An int, except for a filled
        `StaticCache`, which counts in a 0-dim tensor on its device so that a compiled decoding
        step neither reads the device nor recompiles as it grows: use it in tensor arithmetic only
        (`torch.arange(T) + past_len`), never in Python branches or slices, and before the layers
        run (it is the cache's own counter, which their `update` increments in place). `kv_len`
        (an int): the keys attention sees, past + T for a dynamic cache and the preallocated length
        for a static one, whose still empty slots follow the new tokens and must be masked.
        `offset` (an int): how many of the oldest keys a sliding-window cache has dropped
        (transformers' `DynamicSlidingWindowLayer` / `StaticSlidingWindowLayer`, made for a config
        with a `sliding_window`): the keys attention sees are tokens `offset .. offset + kv_len - 1`;
        0 for every other cache, and for None.
    """
    if past_key_values is None:
        return 0, q_len, 0
    check_cache_type(
        past_key_values,
        Cache,
        "a transformers `Cache` (a `DynamicCache`, `StaticCache` or `EncoderDecoderCache`, such as an "
        "earlier call with `use_cache=True` returned)",
    )
    # an EncoderDecoderCache answers for its self-attention cache
    past_len = past_key_values.get_seq_length()
    kv_len, offset = past_key_values.get_mask_sizes(q_len, 0)
    # a full static cache would fail inside its own update with an index error; a static count is
    # read on the host, so only outside compiled graphs (a dynamic cache's kv_len is past + T; a
    # sliding-window cache's keys start at `offset`, the older ones dropped)
    if not torch.compiler.is_compiling() and int(past_len) + q_len > kv_len + offset:
        raise ValueError(
            f"The static cache holds {kv_len} tokens: {int(past_len)} cached and {q_len} new ones do not fit. "
            "Give it a larger `max_cache_len`."
        )
    return past_len, kv_len, offset


def packed_documents(position_ids: torch.Tensor, batch: int) -> torch.Tensor | None:
    """(B, T) document index of each token of padding-free packed rows (transformers'
    `DataCollatorWithFlattening`, TRL's `padding_free`: sequences laid end to end, no attention mask,
    positions restarting at each); a document starts wherever a position is not its predecessor's + 1.
    None when no row restarts, as transformers' `find_packed_sequence_indices` (a host read, skipped
    under compile, where the documents are always returned)."""
    positions = position_ids.expand(batch, -1)  # (B, T)
    starts = torch.diff(positions, prepend=positions[:, :1] - 1, dim=-1) != 1
    docs = starts.cumsum(dim=-1)
    if not torch.compiler.is_compiling() and not bool(docs[:, -1].any()):
        return None
    return docs


def first_token_states(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """(B, T, C) -> (B, C): each row's first real token, BERT's [CLS]. Index 0 unless the row is
    left-padded (a tokenizer's `padding_side` is the user's), where [CLS] comes after the padding."""
    if attention_mask is None:
        return hidden_states[:, 0]
    first = attention_mask.to(hidden_states.device).long().argmax(dim=1)  # (B,) the first 1 of each row
    return hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), first]


def refuse_packed_rows(position_ids, attention_mask, model_name: str) -> None:
    """A model that reads no positions (a recurrence, a fixed window) cannot keep the sequences of
    padding-free packed rows apart (`position_ids` restarting, no attention mask): refuse them rather
    than let one sequence's state or window run into the next."""
    if not torch.is_tensor(position_ids) or position_ids.dim() != 2 or attention_mask is not None:
        return
    if packed_documents(position_ids, position_ids.shape[0]) is not None:
        raise ValueError(
            f"`position_ids` restart inside a row without an attention mask: a padding-free packed batch "
            f"(transformers' `DataCollatorWithFlattening`, TRL's `padding_free`). {model_name} reads no "
            "positions, so each sequence would continue the previous one: give it padded batches."
        )


def check_position_ids(
    position_ids,
    batch: int,
    length: int,
    max_positions: int | None = None,
    name: str = "position_ids",
    values: bool = True,
) -> None:
    """User-given (B|1, T) positions: integers, non-negative and, for a learned table of
    `max_positions` vectors, below it (one host read, skipped in compiled graphs or with
    `values=False`, for a model that ignores the values)."""
    _require_tensor(position_ids, name, "positions")
    if position_ids.dim() != 2 or position_ids.shape[-1] != length or position_ids.shape[0] not in (1, batch):
        raise ValueError(
            f"`{name}` must have shape ({batch}, {length}) or (1, {length}), got {tuple(position_ids.shape)}."
        )
    _require_integer(position_ids, name, "positions")
    if not values or torch.compiler.is_compiling():
        return
    lo, hi = _min_max(position_ids)
    if lo < 0:
        raise ValueError(f"`{name}` must hold non-negative positions, got {lo}.")
    if max_positions is not None and hi >= max_positions:
        raise ValueError(
            f"`{name}` holds position {hi}, beyond this model's learned positions: "
            f"max_position_embeddings={max_positions} allows 0 to {max_positions - 1}."
        )


def check_encoder_states(states, batch: int, width: int) -> None:
    """The encoder output a decoder attends to: (B, S, width), with the decoder's batch B."""
    if not torch.is_tensor(states) or states.dim() != 3 or states.shape[1] == 0 or states.shape[2] != width:
        got = tuple(states.shape) if torch.is_tensor(states) else type(states).__name__
        raise ValueError(
            f"`encoder_outputs` must hold the encoder's (batch, source_len, {width}) last_hidden_state, got {got}."
        )
    if states.shape[0] != batch:
        raise ValueError(
            f"The decoder inputs (`decoder_input_ids`, or the `labels` they are made from) have batch size {batch}, "
            f"but the encoder output (of `input_ids`, or the `encoder_outputs` given) has {states.shape[0]}: "
            "pass one target row per source row."
        )


def logits_positions(logits_to_keep, length: int) -> slice | torch.Tensor:
    """The sequence index of the positions that get logits (`hidden_states[:, index]`): the last
    `logits_to_keep` (0 = all; `generate()` passes 1, so the prompt's (B, T, V) logits are never
    built), or those of a 1-D tensor of positions."""
    if torch.is_tensor(logits_to_keep):
        if logits_to_keep.dim() != 1 or not is_integer_dtype(logits_to_keep.dtype):
            raise ValueError(
                "`logits_to_keep` as a tensor must be a 1-D tensor of integer positions, got a "
                f"{logits_to_keep.dtype} tensor of shape {tuple(logits_to_keep.shape)}."
            )
        if logits_to_keep.numel() and not torch.compiler.is_compiling():
            lo, hi = _min_max(logits_to_keep)
            if lo < -length or hi >= length:
                raise ValueError(
                    f"`logits_to_keep` holds position {lo if lo < -length else hi}, outside the input's "
                    f"{length} positions."
                )
        return logits_to_keep
    if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or logits_to_keep < 0:
        raise ValueError(
            "`logits_to_keep` must be a non-negative int (score the last that many positions, 0 = all) or a "
            f"1-D tensor of positions, got {logits_to_keep!r}."
        )
    return slice(-logits_to_keep, None) if logits_to_keep else slice(None)


def pool_last_token(
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None,
    input_ids: torch.Tensor | None,
    pad_token_id,
) -> torch.Tensor:
    """(B, C) the state of each row's last real token, the only one a causal stack showed the whole
    text: the rightmost 1 of `attention_mask` (left or right padding), else the last id that is not
    `pad_token_id`, else the last position.

    Args:
        hidden_states: (B, T, C); attention_mask: (B, S >= T) checked by the model, or None.
    """
    B, T = hidden_states.shape[:2]
    device = hidden_states.device
    if attention_mask is not None:
        real = attention_mask[:, -T:].to(device).bool()  # the last T keys are the new tokens
    elif input_ids is not None and pad_token_id is not None:
        real = input_ids.to(device) != pad_token_id
    else:
        real = torch.ones(B, T, dtype=torch.bool, device=device)
    last = torch.where(real, torch.arange(T, device=device), -1).amax(dim=-1).clamp(min=0)  # (B,)
    return hidden_states[torch.arange(B, device=device), last]  # (B, C)


def classify_last_token(
    classifier, config, hidden_states, attention_mask, input_ids, labels, num_items_in_batch=None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits (B, num_labels), loss or None) of `classifier` on each row's last real token
    (`pool_last_token`); the loss by `config.problem_type` (`sequence_classification_loss`)."""
    logits = classifier(pool_last_token(hidden_states, attention_mask, input_ids, config.pad_token_id))
    if labels is None:
        return logits, None
    return logits, sequence_classification_loss(config, logits, labels, num_items_in_batch)


def num_items_error(num_items_in_batch) -> ValueError:
    value = num_items_in_batch.item() if torch.is_tensor(num_items_in_batch) else num_items_in_batch
    return ValueError(
        f"`num_items_in_batch` must be a finite positive count of the target items the summed loss is divided "
        f"by, got {value!r}. (An accumulated batch whose labels are all -100 has nothing to learn from: "
        "skip it rather than divide by 0.)"
    )


def num_items_flag(num_items_in_batch) -> torch.Tensor | None:
    """Check `num_items_in_batch` (the count `Trainer`, or a gradient-accumulation loop, divides a
    summed loss by; 0 would make the loss 0/0 = nan): a Python number now; for a tensor, its shape and
    dtype now and its value as a returned 0-dim bool flag, for the caller to read with its own value
    checks in one host read (raise `num_items_error` when it is False)."""
    n = num_items_in_batch
    if n is None:
        return None
    if torch.is_tensor(n):
        if n.numel() != 1 or n.dtype == torch.bool or n.dtype.is_complex:
            raise ValueError(
                "`num_items_in_batch` must be a number or a one-element tensor, got a "
                f"{n.dtype} tensor of shape {tuple(n.shape)}."
            )
        n = n.reshape(())
        return torch.isfinite(n) & (n > 0)
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not (math.isfinite(n) and n > 0):
        raise num_items_error(n)
    return None


def wants_router_logits(config, output_router_logits: bool | None) -> bool:
    """Whether a forward returns a mixture of experts' router logits: its argument, else the config's."""
    return config.output_router_logits if output_router_logits is None else bool(output_router_logits)


def check_labels(
    labels,
    expected_shape,
    num_classes: int,
    ignore_index: int = -100,
    num_items_in_batch=None,
    what: str = "token ids",
    name: str = "labels",
) -> None:
    """Token-level `labels`: the expected shape (None: any non-empty (batch, length)), integer ids in
    [0, num_classes) or `ignore_index`; `num_items_in_batch` is checked in the same host read.
    `name`: the argument as the user passed it (`shift_labels`), for the error messages."""
    _require_tensor(labels, name, what)
    if expected_shape is None:
        if labels.dim() != 2:
            raise ValueError(
                f"`{name}` must be a (batch, target_len) tensor, got shape {tuple(labels.shape)}."
            )
    elif tuple(labels.shape) != tuple(expected_shape):
        raise ValueError(
            f"`{name}` must have shape {tuple(expected_shape)} like the inputs, got {tuple(labels.shape)}."
        )
    if labels.numel() == 0:
        raise ValueError(f"`{name}` is empty (shape {tuple(labels.shape)}).")
    _require_integer(labels, name, what)
    count_ok = num_items_flag(num_items_in_batch)
    if torch.compiler.is_compiling():
        return
    valid = (labels == ignore_index) | ((labels >= 0) & (labels < num_classes))
    flags = host_read(valid.all(), *([] if count_ok is None else [count_ok]))
    if not flags[0]:
        raise ValueError(
            f"`{name}` contains {int(labels[~valid][0])}: labels must be {what} in [0, {num_classes}) "
            f"or {ignore_index} (ignored)."
        )
    if not all(flags):
        raise num_items_error(num_items_in_batch)


def causal_lm_loss(logits: torch.Tensor, labels, vocab_size: int, kwargs: dict) -> torch.Tensor | None:
    """A causal LM head's loss, from `labels` or from `kwargs["shift_labels"]`; None without either.

    `labels` (B, T) are shifted inside (`labels = input_ids` is right: position t is scored against
    labels[t + 1], T - 1 predictions). `shift_labels` (B, T), transformers' name for targets already
    aligned with the positions, are scored as they are: every position predicts, as nanoGPT's
    `(x, y)` windows do, and the loss stays inside the forward (inside a compiled graph with it).
    They win over `labels`, as in transformers' `ForCausalLMLoss`. `kwargs["num_items_in_batch"]`
    turns the mean into a sum divided by it.
    """
    shift_labels = kwargs.get("shift_labels")
    targets, name = (labels, "labels") if shift_labels is None else (shift_labels, "shift_labels")
    if targets is None:
        return None
    n_items = kwargs.get("num_items_in_batch")
    check_labels(targets, logits.shape[:2], vocab_size, num_items_in_batch=n_items, name=name)
    return lm_loss(logits, targets, shift=shift_labels is None, num_items_in_batch=n_items)


def check_seq2seq_labels(
    labels: torch.Tensor,
    input_ids: torch.Tensor | None,
    encoder_outputs,
    vocab_size: int,
    num_items_in_batch=None,
) -> None:
    """Check an encoder-decoder's `labels` before they become decoder inputs, so a bad label is
    reported as a label (and an empty or malformed source, read first by the encoder, as the source)."""
    if input_ids is not None and encoder_outputs is None:
        check_input_ids(input_ids, vocab_size, values=False)
    check_labels(labels, None, vocab_size, num_items_in_batch=num_items_in_batch)


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs from targets (every encoder-decoder family): the start token, then the targets
    moved one step right.

    Args:
        labels: (B, T) target ids, -100 where ignored.

    Returns:
        (B, T) decoder input ids, -100 replaced by the pad id (the decoder never reads them as
        targets, and an embedding lookup of -100 would fail).
    """
    shifted = labels.new_full(labels.shape, decoder_start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


class FixedWindowGeneration:
    """Generation for models that read a fixed window of the last tokens and nothing else (the
    n-gram model, Bengio's feed-forward LM): there is no cache, and each step feeds only the window,
    which is the whole context of the next prediction, so a step costs the same at any length.

    Mix in before `GenerationMixin`; the model names its window in `generation_window()`.
    """

    def generation_window(self) -> int:
        raise NotImplementedError

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # nothing to cache: rescoring the window is exact and cheap

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, inputs_embeds=None, **kwargs):
        if inputs_embeds is not None:
            raise ValueError(f"{type(self).__name__} generates from `input_ids` only, not `inputs_embeds`.")
        window = self.generation_window()
        inputs = {"input_ids": input_ids[:, -window:], "logits_to_keep": 1}
        if attention_mask is not None:
            inputs["attention_mask"] = attention_mask[:, -window:]
        # generate(output_hidden_states=True, ...) asks each step for them through these
        for name in ("output_hidden_states", "output_attentions"):
            if kwargs.get(name):
                inputs[name] = kwargs[name]
        return inputs


def lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    shift: bool,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Token-level cross-entropy in fp32.

    Args:
        logits: (B, T, V).
        labels: (B, T); with `shift` position t is scored against label t+1 (causal LMs).
        num_items_in_batch: the number of target tokens in the whole accumulated batch; when given
            the loss is a sum divided by it, so gradient accumulation equals one large batch.
        label_smoothing: ε of a target mixed with the uniform distribution over the vocabulary
            (transformers' `LabelSmoother` computes the same).

    The labels (and `num_items_in_batch`) are those `check_labels` accepted.
    """
    if shift:
        # shift the (small) labels rather than the (large) logits: no copy of the (B, T, V) tensor
        labels = F.pad(labels, (0, 1), value=ignore_index)[:, 1:]
    logits = logits.reshape(-1, logits.shape[-1]).float()
    labels = labels.reshape(-1).to(device=logits.device, dtype=torch.long)  # int32 ids are ids too
    if num_items_in_batch is None:
        return F.cross_entropy(logits, labels, ignore_index=ignore_index, label_smoothing=label_smoothing)
    total = F.cross_entropy(
        logits, labels, ignore_index=ignore_index, reduction="sum", label_smoothing=label_smoothing
    )
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device).reshape(())  # a (1,) count: a 0-dim loss
    return total / num_items_in_batch


def sequence_classification_loss(
    config, logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: torch.Tensor | int | None = None
) -> torch.Tensor:
    """Regression (MSE), single-label (cross-entropy) or multi-label (BCE), as transformers decides it.

    With `num_items_in_batch` (Trainer passes the number of label values in the whole accumulated
    batch: examples, or examples x labels for multi-label and multi-output regression) the loss is a
    sum divided by it, so gradient accumulation equals one big batch instead of being
    `gradient_accumulation_steps` times too large.
    """
    reduction = "mean" if num_items_in_batch is None else "sum"

    def reduce(loss: torch.Tensor) -> torch.Tensor:
        if num_items_in_batch is None:
            return loss
        n = num_items_in_batch
        return loss / (n.to(loss.device).reshape(()) if torch.is_tensor(n) else n)

    _require_tensor(labels, "labels", "class ids or targets")
    count_ok = num_items_flag(num_items_in_batch)
    flags = [] if count_ok is None else [count_ok]  # value checks, read on the host together
    num_labels = logits.shape[-1]
    if config.problem_type is None:
        if num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    labels = labels.to(logits.device)
    B = logits.shape[0]
    if config.problem_type == "single_label_classification":
        if labels.dim() != 1 or labels.shape[0] != B:
            raise ValueError(f"`labels` must have shape ({B},) of class ids, got {tuple(labels.shape)}.")
        _require_integer(labels, "labels", "class ids")
        flags.insert(0, ((labels >= 0) & (labels < num_labels)).all())
    elif labels.dtype.is_complex:
        raise ValueError(f"`labels` must hold real targets, got dtype {labels.dtype}.")
    elif config.problem_type == "regression" and num_labels == 1:
        if labels.numel() != B:
            raise ValueError(
                f"`labels` must hold one target per example ({B}), got shape {tuple(labels.shape)}."
            )
    elif tuple(labels.shape) != tuple(logits.shape):
        kind = "regression" if config.problem_type == "regression" else "multi-label"
        raise ValueError(f"{kind} `labels` must have shape {tuple(logits.shape)}, got {tuple(labels.shape)}.")
    if flags and not torch.compiler.is_compiling():
        ok = host_read(*flags)
        if not ok[0] and config.problem_type == "single_label_classification":
            raise ValueError(f"`labels` must be class ids in [0, {num_labels}), got {labels.tolist()}.")
        if not all(ok):
            raise num_items_error(num_items_in_batch)
    if config.problem_type == "regression":
        return reduce(
            F.mse_loss(logits.squeeze(-1).float(), labels.float().view(-1), reduction=reduction)
            if num_labels == 1
            else F.mse_loss(logits.float(), labels.float(), reduction=reduction)
        )
    if config.problem_type == "single_label_classification":
        return reduce(F.cross_entropy(logits.float(), labels.long(), reduction=reduction))
    return reduce(F.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction=reduction))
