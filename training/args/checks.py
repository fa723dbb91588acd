"""The checks of a run's arguments taken together, before any data is read.

Each argument dataclass validates its own fields (`training.args`); what needs two of them (the
family and the objective, the family and the loop options, the overrides and the config class,
the block and the objective, the tokenizer and `init_from`) is checked here, with a `ValueError`
that names the options and what would work.
"""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path

import torch
from transformers import AutoConfig

from hf_lm.families import FAMILIES

from ..data.tokenizer import minimum_vocab_size
from ..models import (
    FLAG_FIELDS,
    RECURRENT,
    TRANSFORMERS,
    check_preset,
    config_flags,
    reads_flag,
    resolve_family,
)
from ..objectives import objective_for
from ..run.folder import RUN_OUTPUTS
from ..sharding import not_shardable

logger = logging.getLogger(__name__)

# the flags of a tokenizer the run trains: unread when it loads one (`tokenizer_name_or_path`, or
# the `init_from` checkpoint's own)
TOKENIZER_TRAINING_FLAGS = (
    "tokenizer_kind",
    "vocab_size",
    "tokenizer_min_frequency",
    "tokenizer_train_documents",
)
# the files of a folder that `AutoTokenizer.from_pretrained` reads a tokenizer from
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


def check_arguments(data_args, model_args, train_args) -> str:
    """Refuse combinations of family, objective and loop options that cannot work together, and
    config overrides the model would not know.

    Returns:
        The family the run trains (`training.models.resolve_family`).
    """
    family = resolve_family(model_args.arch, model_args.family, train_args.objective)
    check_preset(family, model_args.preset)
    if model_args.init_from and model_args.config_overrides:
        raise ValueError(
            "`config_overrides` cannot be combined with `init_from`: the model's config comes from the "
            f"checkpoint {model_args.init_from!r}. Edit its config.json, or train from scratch."
        )
    if model_args.init_from:
        check_model_folder(model_args.init_from, "--init_from")
    _check_inputs_outlive_overwrite(data_args, model_args, train_args)
    model_args.overrides(FAMILIES[family].config_class)  # unknown keys fail here, by name
    if train_args.mixed_precision == "fp16" and not torch.cuda.is_available():
        # accelerate makes no GradScaler and no autocast for fp16 on a CPU: the run would be fp32
        raise ValueError(
            "mixed_precision='fp16' needs a CUDA GPU: on CPU accelerate would silently train in fp32. "
            "Use mixed_precision='bf16', which runs on CPU, or 'no'."
        )
    _check_loop_options(data_args, train_args, family)
    _check_positions(data_args, model_args, family)
    _check_block_size(data_args, train_args)
    _check_tokenizer(data_args, model_args, train_args)
    _warn_unread_flags(model_args, family)
    return family


def check_model_folder(path: str, flag: str) -> None:
    """Refuse a folder that holds no saved model (a run's folder, not its final/), naming `flag`:
    transformers would fail on it with a misleading message ("Should have a `model_type` key in its
    config.json", or advice to install sentencepiece), after the data was read."""
    folder = Path(path)
    if folder.is_dir() and not (folder / "config.json").is_file():
        final = folder / "final"
        hint = f"; the run's model is {final}" if (final / "config.json").is_file() else ""
        raise ValueError(f"{flag} {path!r} is a folder without a config.json, not a saved model{hint}.")


def _check_inputs_outlive_overwrite(data_args, model_args, train_args) -> None:
    """`--overwrite_output_dir` deletes the outputs of `output_dir` (`RUN_OUTPUTS`) before the run
    reads its inputs: a model or tokenizer to start from among them would be deleted, then missed."""
    if not train_args.overwrite_output_dir:
        return
    outputs = [(Path(train_args.output_dir) / name).resolve() for name in RUN_OUTPUTS]
    for flag, path in (
        ("--init_from", model_args.init_from),
        ("--tokenizer_name_or_path", data_args.tokenizer_name_or_path),
    ):
        if path and Path(path).exists() and any(Path(path).resolve().is_relative_to(out) for out in outputs):
            raise ValueError(
                f"{flag} {path!r} is one of {train_args.output_dir}'s outputs, which --overwrite_output_dir deletes "
                "before the run reads it: copy it out of that folder first, or give this run another --output_dir."
            )


def _check_block_size(data_args, train_args) -> None:
    """Blocks too short for the objective to predict anything would train on an empty (NaN) loss and
    stop as a "divergence": refuse them now, naming `block_size` (`Objective.block_size_problem`)."""
    micro_batches = train_args.max_steps * train_args.gradient_accumulation_steps
    problem = objective_for(train_args).block_size_problem(data_args.block_size, micro_batches)
    if problem:
        raise ValueError(problem)


def _check_tokenizer(data_args, model_args, train_args) -> None:
    """The tokenizer the run will use: the flags of a trained one that a loaded one leaves unread
    (logged), a checkpoint without the tokenizer its ids come from, a vocabulary too small to train.

    With `init_from` the run uses the checkpoint's own tokenizer unless `tokenizer_name_or_path`
    names another (`training.data.prepare.tokenizer_source`), as transformers' `run_clm.py` does: the
    weights were trained on its ids, and a new tokenizer would give every token another id.
    """
    loaded_from = data_args.tokenizer_name_or_path or model_args.init_from
    if loaded_from:
        unread = _flags_set(data_args, TOKENIZER_TRAINING_FLAGS)
        if unread:
            whose = (
                "the `init_from` checkpoint's own tokenizer (its weights were trained on its ids)"
                if not data_args.tokenizer_name_or_path
                else f"the tokenizer {data_args.tokenizer_name_or_path!r}"
            )
            logger.warning(
                "Ignored: %s. They train a new tokenizer, and this run uses %s. To train on another tokenizer's ids, "
                "start from scratch (no --init_from) or pass it with --tokenizer_name_or_path.",
                ", ".join(unread),
                whose,
            )
        folder = Path(loaded_from)
        if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
            flag = "--tokenizer_name_or_path" if data_args.tokenizer_name_or_path else "--init_from"
            raise ValueError(
                f"{flag} {loaded_from!r} holds no tokenizer (none of {list(TOKENIZER_FILES)}). The run must read its "
                "text with the tokenizer the checkpoint was trained with: pass it with --tokenizer_name_or_path (a "
                "run's `tokenizer/` or `final/` folder)."
            )
        return
    objective = objective_for(train_args)
    minimum = minimum_vocab_size(data_args.tokenizer_kind, objective.special_tokens)
    if data_args.vocab_size < minimum:
        raise ValueError(
            f"--vocab_size {data_args.vocab_size} cannot hold a {data_args.tokenizer_kind} tokenizer for objective "
            f"{train_args.objective!r}: its special tokens"
            + (" and the 256 bytes" if data_args.tokenizer_kind == "byte_bpe" else " and one symbol")
            + f" need {minimum}. Use --vocab_size {minimum} or more (far more for a useful vocabulary)."
        )


def _flags_set(args, names) -> list[str]:
    """`--name value` for each of the fields `names` of the dataclass `args` set away from its default."""
    defaults = {f.name: f.default for f in fields(args)}
    return [f"--{name} {getattr(args, name)}" for name in names if getattr(args, name) != defaults[name]]


def _warn_unread_flags(model_args, family: str) -> None:
    """Log the config flags given that the run does not read (`FLAG_FIELDS`): those `family` does
    not read, or with `init_from` all of them (the checkpoint's config is the model's)."""
    if model_args.init_from:
        unread = _flags_set(model_args, FLAG_FIELDS)
        if unread:
            logger.warning(
                "Ignored: %s (the model's config comes from the `init_from` checkpoint %r).",
                ", ".join(unread),
                model_args.init_from,
            )
        return
    unread = _flags_set(model_args, [name for name in FLAG_FIELDS if not reads_flag(family, name)])
    if unread:
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
    elif reads_flag(family, "position_embedding_type") and model_args.max_position_embeddings:
        # the flag's positions, else the --preset's
        position = (
            config_flags(model_args).get("position_embedding_type")
            or FAMILIES[family].config_from_preset(model_args.preset).position_embedding_type
        )
        limit = model_args.max_position_embeddings if position == "learned" else None
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
    if train_args.fsdp and family not in TRANSFORMERS:
        raise ValueError(f"{not_shardable(family)} Families that shard: {', '.join(TRANSFORMERS)}.")
    if train_args.gradient_checkpointing and family not in TRANSFORMERS:
        raise ValueError(
            f"`--gradient_checkpointing` recomputes Transformer blocks in the backward; family {family!r} has none. "
            "Drop the flag."
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
