"""The checks of a run's arguments taken together, before any data is read.

Each argument dataclass validates its own fields (`training.args`); what needs two of them (the
family and the objective, the family and the loop options, the overrides and the config class)
is checked here, with a `ValueError` that names the options and what would work.
"""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path

import torch
from transformers import AutoConfig

from hf_lm.families import FAMILIES

from .models import RECURRENT, TRANSFORMERS, resolve_family

logger = logging.getLogger(__name__)

# the model flags only some families read (the T5 and BART families take their variants from
# --config_overrides); a value other than the default elsewhere is ignored, and the run says so
FAMILY_FLAGS = {
    "position_embedding_type": ("gpt", "bert", "electra"),
    "norm_type": ("gpt", "bert", "electra"),
    "norm_position": ("gpt", "bert", "electra"),
    "hidden_act": ("gpt", "bert", "electra"),
    "num_attention_heads": TRANSFORMERS,
    "num_key_value_heads": TRANSFORMERS,
    "attention_dropout": TRANSFORMERS,
    "max_position_embeddings": TRANSFORMERS,
    "cell_type": RECURRENT,
    "rnn_attention": ("rnn_seq2seq",),
    "ngram_smoothing": ("ngram",),
}


def check_arguments(data_args, model_args, train_args) -> str:
    """Refuse combinations of family, objective and loop options that cannot work together, and
    config overrides the model would not know.

    Returns:
        The family the run trains (`training.models.resolve_family`).
    """
    family = resolve_family(model_args.arch, model_args.family, train_args.objective)
    if model_args.init_from and model_args.config_overrides:
        raise ValueError(
            "`config_overrides` cannot be combined with `init_from`: the model's config comes from the "
            f"checkpoint {model_args.init_from!r}. Edit its config.json, or train from scratch."
        )
    model_args.overrides(FAMILIES[family].config_class)  # unknown keys fail here, by name
    if train_args.mixed_precision == "fp16" and not torch.cuda.is_available():
        # accelerate makes no GradScaler and no autocast for fp16 on a CPU: the run would be fp32
        raise ValueError(
            "mixed_precision='fp16' needs a CUDA GPU: on CPU accelerate would silently train in fp32. "
            "Use mixed_precision='bf16', which runs on CPU, or 'no'."
        )
    _check_loop_options(data_args, train_args, family)
    _check_positions(data_args, model_args, family)
    _warn_unread_flags(model_args, family)
    return family


def _warn_unread_flags(model_args, family: str) -> None:
    """Log the model flags set away from their defaults that `family` does not read."""
    defaults = {f.name: f.default for f in fields(model_args)}
    unread = [
        f"--{name} {getattr(model_args, name)}"
        for name, families in FAMILY_FLAGS.items()
        if family not in families and getattr(model_args, name) != defaults[name]
    ]
    if unread and not model_args.init_from:
        logger.warning("Ignored: %s (not read by family %r).", ", ".join(unread), family)


def learned_position_limit(config) -> int | None:
    """The longest input a model with a learned position table takes (None: any length)."""
    if getattr(config, "position_embedding_type", None) == "learned":
        return config.max_position_embeddings
    return None


def _check_positions(data_args, model_args, family: str) -> None:
    """A block longer than a learned position table would fail at the first step, after the tokenizer
    and the data: refuse it now, naming `block_size`."""
    if family not in TRANSFORMERS:
        return
    if model_args.init_from:
        if not (Path(model_args.init_from) / "config.json").is_file():
            return  # loading it says what is missing
        limit = learned_position_limit(AutoConfig.from_pretrained(model_args.init_from))
        source = f"the `init_from` checkpoint {model_args.init_from!r}"
    elif family in ("gpt", "bert", "electra") and model_args.max_position_embeddings:
        limit = (
            model_args.max_position_embeddings if model_args.position_embedding_type == "learned" else None
        )
        source = "`max_position_embeddings`"
    else:
        return  # a fresh model's table is sized to the block
    if limit is not None and data_args.block_size > limit:
        raise ValueError(
            f"`block_size` ({data_args.block_size}) is longer than the {limit} learned positions of {source}: "
            f"use --block_size {limit} or less."
        )


def _check_loop_options(data_args, train_args, family: str) -> None:
    """The loop options that only some families or objectives can use."""
    if data_args.document_mask and train_args.objective != "clm":
        raise ValueError(
            "`document_mask` applies to causal LMs (objective='clm'); the other objectives see their whole "
            "block, with a separator between documents. Drop --document_mask or use objective='clm'."
        )
    if data_args.document_mask and family not in TRANSFORMERS:
        raise ValueError(f"`document_mask` is an attention mask: it applies to family 'gpt', not {family!r}.")
    if train_args.tbptt and (family != "rnn" or data_args.streaming):
        raise ValueError(
            "`tbptt` carries a recurrent state from one block to the next: it needs family 'rnn' and the "
            f"in-memory data (no --streaming); got family={family!r}, streaming={data_args.streaming}."
        )
    if train_args.scheduled_sampling != "none" and family not in RECURRENT:
        raise ValueError(
            "`scheduled_sampling` feeds a recurrent model its own samples: it needs family 'rnn' or "
            f"'rnn_seq2seq', not {family!r}."
        )
    if train_args.sampling == "random_windows" and (family == "ngram" or data_args.streaming):
        raise ValueError(
            "`sampling`='random_windows' reads windows at random offsets of the whole training token stream, "
            "held in memory, for gradient training: not with --streaming (use sampling='blocks', which "
            f"shuffles the stream in a buffer) nor family 'ngram' (fitted by counting); got family={family!r}, "
            f"streaming={data_args.streaming}."
        )
