"""The model a run trains: its family (`--family`), and a fresh model of it from the arguments.

`--family` names the model family (the names of `hf_lm.families.FAMILIES`); `--objective` chooses what
it is trained on, and each family trains only its objectives (`Family.objectives` in the family
table). The older spelling `--arch transformer` means the objective's Transformer family
(`TRANSFORMER_FAMILIES`: GPT for clm, BERT for mlm, T5 for span corruption, BART for BART
denoising); `--arch rnn` and the other pre-Transformer archs are the family of that name. Both
spellings keep working.

A fresh model's config is the family's defaults or its `--preset`, then the config flags
(`ModelArguments.config_flags`: the ones given over the run's defaults), each setting the config
field of its own name in the families that read it (`FLAG_FIELDS`), then the objective's fields,
then `--config_overrides`.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json

import torch
from transformers import PreTrainedConfig

from hf_lm.families import FAMILIES

FAMILY_NAMES = tuple(FAMILIES)
DENOISING = ("span_corruption", "bart_denoising")
# what the old `--arch transformer` means for each objective: the first family of the table that
# trains it (GPT for clm, BERT for mlm, ELECTRA, T5 for span corruption, BART for BART denoising)
TRANSFORMER_FAMILIES = {
    objective: next(f.name for f in FAMILIES.values() if objective in f.objectives)
    for objective in dict.fromkeys(o for f in FAMILIES.values() for o in f.objectives)
}
TRANSFORMERS = tuple(TRANSFORMER_FAMILIES.values())
RECURRENT = ("rnn", "rnn_seq2seq")
VARIANTS = ("gpt", "bert", "electra")  # the Transformers whose flags choose their variants (T5 and BART
# keep their own architecture, or their --preset's; `--config_overrides` changes it)
_SAME = ("{flag}",)  # the config field of the flag's own name


def _fields(families, fields=_SAME) -> dict:
    return dict.fromkeys(families, fields)


# The families that read each config flag (`ModelArguments`), and the config fields it sets there:
# the field of its own name, unless the family names it otherwise (a recurrent encoder-decoder's
# `hidden_size` is its embeddings' and its state's width; the feed-forward LM sees n - 1 tokens).
# A flag given to a family that does not read it is ignored, and the run says so.
FLAG_FIELDS: dict[str, dict] = {
    "num_hidden_layers": _fields((*TRANSFORMERS, "rnn"))
    | {"rnn_seq2seq": ("encoder_layers", "decoder_layers")},
    "hidden_size": _fields((*TRANSFORMERS, "rnn", "ffnn"))
    | {"rnn_seq2seq": ("embedding_size", "hidden_size")},
    "num_attention_heads": _fields(TRANSFORMERS),
    "num_key_value_heads": _fields(TRANSFORMERS),
    "intermediate_size": _fields((*TRANSFORMERS, "ffnn")),
    "max_position_embeddings": _fields(TRANSFORMERS),
    "hidden_dropout": _fields((*TRANSFORMERS, *RECURRENT, "ffnn")),
    "attention_dropout": _fields(TRANSFORMERS),
    "position_embedding_type": _fields(VARIANTS),
    "norm_type": _fields(VARIANTS),
    "norm_position": _fields(VARIANTS),
    "hidden_act": _fields(VARIANTS),
    "tie_word_embeddings": _fields((*TRANSFORMERS, *RECURRENT, "ffnn")),
    "cell_type": _fields(RECURRENT),
    "rnn_attention": {"rnn_seq2seq": ("attention",)},
    "ngram_order": {"ngram": ("order",), "ffnn": lambda n: {"context_size": n - 1}},
    "ngram_smoothing": {"ngram": ("smoothing",)},
}


# The run's defaults of the config flags left unset: a small model that trains in minutes on a CPU,
# whatever the family's own defaults (which are the sizes of the papers); they apply over a --preset.
RUN_DEFAULTS = {
    "num_hidden_layers": 4,
    "hidden_size": 128,
    "num_attention_heads": 4,
    "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
    "ngram_order": 3,
}
# The variant flags a preset sets too, and their values when neither the flag nor a --preset sets
# them: a given flag wins over the preset even where it equals the value here (`--preset llama
# --position_embedding_type learned` has learned positions).
VARIANT_DEFAULTS = {
    "position_embedding_type": "learned",
    "norm_type": "layernorm",
    "norm_position": "pre",
    "hidden_act": "gelu_tanh",
    "tie_word_embeddings": True,
}


def config_flags(model_args) -> dict:
    """The config flags of `model_args` that apply (unset ones left out): the given ones, else the run's
    defaults (`RUN_DEFAULTS`) and, without a preset, the variant defaults (`VARIANT_DEFAULTS`); with
    a preset the variant flags not given are left out, so that the preset's hold."""
    defaults = RUN_DEFAULTS | (VARIANT_DEFAULTS if model_args.preset is None else {})
    flags = {name: getattr(model_args, name) for name in FLAG_FIELDS}
    flags = {name: defaults.get(name) if value is None else value for name, value in flags.items()}
    return {name: value for name, value in flags.items() if value is not None}


# `tie_word_embeddings=False` as `run_clm.py` takes it: not the string "False" (which no config takes)
PYTHON_WORDS = {"True": "true", "False": "false", "None": "null"}


def parse_overrides(text: str) -> dict:
    """`config_overrides` as a dict: a JSON object, or `name=value,...` as transformers' `run_clm.py`
    takes them, each value read as JSON where it is JSON (`hidden_size=64`, `tie_word_embeddings=false`,
    `sliding_window=null`; Python's `False`, `True` and `None` too, as `run_clm.py` reads them) and as a
    string elsewhere (`hidden_act=swiglu`).

    Raises:
        ValueError: a text that is neither, naming `config_overrides`.
    """
    if text.lstrip().startswith("{"):
        try:
            overrides = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"`config_overrides` is not valid JSON: {err}.") from None
        if not isinstance(overrides, dict):
            raise ValueError(f"`config_overrides` must be a JSON object, got {text!r}.")
        return overrides
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise ValueError(
                f"`config_overrides` must be a JSON object or `name=value,...` (e.g. hidden_size=64,num_hidden_layers=2), "
                f"got {item!r} in {text!r}."
            )
        value = PYTHON_WORDS.get(value.strip(), value)
        try:
            overrides[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[name.strip()] = value.strip()
    return overrides


def reads_flag(family: str, flag: str) -> bool:
    """Whether `family`'s config takes the config flag `flag` (`FLAG_FIELDS`)."""
    return family in FLAG_FIELDS[flag]


def resolve_family(arch: str, family: str | None, objective: str) -> str:
    """The family a run trains, from `--family` (or the older `--arch`) and `--objective`.

    Raises:
        ValueError: the family does not train the objective, or `--arch` names another family.
    """
    if family is None:
        family = TRANSFORMER_FAMILIES[objective] if arch == "transformer" else arch
    elif arch not in ("transformer", family):  # "transformer", the default, defers to --family
        raise ValueError(
            f"`arch`={arch!r} and `family`={family!r} name different families: give only --family."
        )
    objectives = FAMILIES[family].objectives
    if objective not in objectives:
        fitting = [f.name for f in FAMILIES.values() if objective in f.objectives]
        raise ValueError(
            f"family {family!r} is not trained with objective {objective!r}: it trains "
            f"{' or '.join(map(repr, objectives))}, and objective {objective!r} trains the families "
            f"{', '.join(fitting)}. Pass a matching --family and --objective."
        )
    return family


def check_preset(family: str, preset: str | None) -> None:
    """Raise `ValueError` naming `preset` when it is not one of `family`'s presets (None passes)."""
    presets = FAMILIES[family].presets
    if preset is not None and preset not in presets:
        choices = f"choose one of {list(presets)}" if presets else "it has none: leave --preset unset"
        raise ValueError(f"`preset` {preset!r} is not a preset of family {family!r}: {choices}.")


def config_fields(config_class: type) -> set[str]:
    """The keyword arguments a config class knows: its own and its base class's fields, and aliases."""
    known = set(inspect.signature(config_class.__init__).parameters) - {"self", "kwargs"}
    known |= set(config_class().to_dict()) | set(getattr(config_class, "attribute_map", {}))
    if dataclasses.is_dataclass(PreTrainedConfig):
        known |= {f.name for f in dataclasses.fields(PreTrainedConfig)}
    return {name for name in known if not name.startswith("_")}


def check_config_keys(config_class: type, overrides: dict) -> None:
    """Raise `ValueError` for keys of `overrides` that `config_class` does not know, with a did-you-mean."""
    known = config_fields(config_class)
    unknown = [key for key in overrides if key not in known]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(known), n=2, cutoff=0.6)
            hints.append(f"{key!r}" + (f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""))
        raise ValueError(
            f"`config_overrides` has keys that {config_class.__name__} does not know: {', '.join(hints)}."
        )


def flag_fields(family: str, model_args, block_size: int) -> dict:
    """The config fields of `family` that the config flags set (`FLAG_FIELDS`), the flags' values
    being `ModelArguments.config_flags`' and, unset, the run's: a feed-forward 4 times the width,
    and learned positions for the block (twice it, and 16 more than it for a short block, for an
    encoder-decoder's noised source: sentinels, <s> and </s>, a mask for each of BART's 0-length
    spans; 4 tokens and 3 inserted masks would pass 2 x 4 every few thousand blocks)."""
    flags = config_flags(model_args)
    if flags.get("intermediate_size") is None:
        flags["intermediate_size"] = 4 * flags["hidden_size"]
    if flags.get("max_position_embeddings") is None:
        encoder_decoder = FAMILIES[family].is_encoder_decoder
        flags["max_position_embeddings"] = (
            max(2 * block_size, block_size + 16) if encoder_decoder else block_size
        )
    fields = {}
    for flag, value in flags.items():
        target = FLAG_FIELDS[flag].get(family)
        if target is None or value is None:
            continue
        if callable(target):
            fields |= target(value)
        else:
            fields |= {name.format(flag=flag): value for name in target}
    return fields


def family_config(family: str, model_args, data_args, tokenizer, objective_config: dict):
    """The config of a fresh model of `family` sized to the tokenizer: the family's `--preset` (or its
    defaults), then the config flags (`flag_fields`), then `objective_config`, then `config_overrides`.

    Args:
        objective_config: the config fields the objective sets (`Objective.model_config`), applied
            before `config_overrides`, which come last.

    Raises:
        ValueError: naming `preset`, when it is not one of the family's presets (`check_preset`), or
            a key of `config_overrides` the family's config does not know.
    """
    check_preset(family, model_args.preset)
    family_ = FAMILIES[family]
    specials = dict(
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    fields = {
        "vocab_size": len(tokenizer),
        **specials,
        **flag_fields(family, model_args, data_args.block_size),
    }
    overrides = model_args.overrides(family_.config_class)
    size = overrides.get("vocab_size")
    if isinstance(size, int) and size < len(tokenizer):  # a larger one pads the table, as nanoGPT's 50304
        raise ValueError(
            f"`config_overrides` vocab_size={size} is smaller than the tokenizer's {len(tokenizer)} tokens: its ids "
            "would index past the embeddings. Leave vocab_size out (the model is sized to the tokenizer), or set "
            "--vocab_size for a trained tokenizer."
        )
    return family_.config_from_preset(model_args.preset, **{**fields, **objective_config, **overrides})


def build_family_model(
    family: str, auto_class, model_args, data_args, tokenizer, objective_config: dict
) -> torch.nn.Module:
    """A fresh model of `family` sized to the tokenizer (`family_config`): the family's head behind
    `auto_class` (`hf_lm.families.FAMILIES`)."""
    model_cls = FAMILIES[family].head(auto_class)
    return model_cls(family_config(family, model_args, data_args, tokenizer, objective_config))
