"""Arguments of the training loop (`training.train`): three dataclasses parsed by `HfArgumentParser`.

Every field is a `--flag` of the command line; the same names are the keys of a JSON or YAML file:

    python -m training.train --dataset synthetic --max_steps 200 --output_dir out/run
    python -m training.train configs/run.yaml

Each dataclass validates itself in `__post_init__` (a `ValueError` naming the field), so a bad value
fails before any data is loaded, whatever way the arguments came in; what needs several of them (the
family and the objective, the block and the objective, the tokenizer and `init_from`) is checked by
`checks.check_arguments` when the run starts. A file's values are read as their fields' types
(`files.read_argument_file`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field, fields

from hf_lm.families import FAMILIES
from hf_lm.models.hflm_common import (
    _choice,
    _non_negative,
    _non_negative_int,
    _number,
    _positive,
    _positive_int,
    _probability,
)
from hf_lm.models.hflm_configuration_ngram import MAX_ORDER, SMOOTHINGS
from hf_lm.models.hflm_configuration_rnn_seq2seq import ATTENTION_TYPES
from hf_lm.models.hflm_rnn_blocks import RNN_CELLS

from ..data.cleaning import DATA_CLEANINGS, C4Options
from ..data.loading import SAMPLE_BY
from ..data.tokenizer import TOKENIZER_KINDS
from ..models import FAMILY_NAMES, check_config_keys, check_preset, config_flags, parse_overrides
from ..objectives import OBJECTIVES
from ..objectives.scheduled_sampling import SCHEDULES, run_sampling_schedule
from ..sharding import parse_fsdp
from .files import read_argument_file
from .flags import argument_parser

LR_SCHEDULERS = ("cosine", "linear", "constant")
MIXED_PRECISIONS = ("no", "bf16", "fp16")
REPORTERS = ("csv", "tensorboard", "none")
RESUME_VALUES = ("false", "true", "auto")
MASKING_KINDS = ("token", "whole_word", "span")
# "transformer": the objective's own family; the others are the pre-Transformer models (issue 6)
ARCHS = ("transformer", "ngram", "ffnn", "rnn", "rnn_seq2seq")
SCHEDULED_SAMPLING = ("none", *SCHEDULES)
# how training batches are drawn: shuffled packed blocks, or nanoGPT's windows at random offsets
SAMPLINGS = ("blocks", "random_windows")
TORCH_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# how the held-out text is chosen when no eval_dataset is given
EVAL_SPLITS = ("random", "tail")
# streaming defaults: bounded however large the corpus is
STREAMING_TOKENIZER_DOCUMENTS = 100_000
STREAMING_EVAL_BLOCKS = 1_000


def _positive_ints(obj, *names: str) -> None:
    """Raise `ValueError` naming the field unless each of `obj`'s `names` is an int >= 1."""
    for name in names:
        _positive_int(name, getattr(obj, name))


def optional_positive(obj, *names: str) -> None:
    """Raise `ValueError` naming the field unless each of `obj`'s `names` is None or an int >= 1."""
    for name in names:
        _positive_int(name, getattr(obj, name), allow_none=True)


def check_seed(seed: int) -> None:
    """Raise `ValueError` naming `seed` unless numpy takes it (`set_seed` seeds numpy too)."""
    if not 0 <= seed < 2**32:
        raise ValueError(f"`seed` must be in [0, 2**32 - 1], got {seed}.")


def _finite_floats(obj) -> None:
    """Raise `ValueError` naming the first float field of `obj` that is NaN or infinite.

    `float("inf")` passes every `> 0` check (and a NaN fails them with a confusing message), so an
    infinite learning rate would train NaN weights: refused before any other check.
    """
    for f in fields(obj):
        if isinstance(getattr(obj, f.name), float):
            _number(f.name, getattr(obj, f.name))


@dataclass
class DataArguments:
    """Where the text comes from, how it is tokenized, and how it is cut into blocks."""

    dataset: str = field(
        default="synthetic",
        metadata={
            "help": "A built-in corpus ('synthetic', 'stdlib_docstrings'), a local file/folder/glob, or a Hub name."
        },
    )
    config_name: str | None = field(default=None, metadata={"help": "The Hub dataset's configuration name."})
    split: str = field(
        default="train", metadata={"help": "The split to read (slicing allowed, 'train[:10%%]')."}
    )
    text_column: str = field(default="text", metadata={"help": "The column holding the text."})
    sample_by: str | None = field(
        default=None,
        metadata={
            "help": f"Rows of local text files: one of {list(SAMPLE_BY)} (default paragraph); 'document' "
            "keeps each file one character stream."
        },
    )
    eval_dataset: str | None = field(
        default=None,
        metadata={
            "help": "A separate evaluation corpus (file, folder or Hub name, read like `dataset`); nothing is "
            "then held out of `dataset` and `eval_fraction` is unused."
        },
    )
    streaming: bool = field(
        default=False,
        metadata={
            "help": "Stream the corpus: read, tokenize and pack while training, in bounded memory, for "
            "corpora that do not fit in memory (the data order then comes from a shuffle buffer)."
        },
    )
    shuffle_buffer_size: int = field(
        default=10_000,
        metadata={"help": "With streaming: blocks in the seeded shuffle buffer (0 or 1: stream order)."},
    )
    tokenizer_train_documents: int | None = field(
        default=None,
        metadata={
            "help": "Train the tokenizer on the first N training documents (default: all of them; "
            f"the first {STREAMING_TOKENIZER_DOCUMENTS:,} with streaming)."
        },
    )
    max_eval_blocks: int | None = field(
        default=None,
        metadata={
            "help": "Keep the first N evaluation blocks (default: all; "
            f"{STREAMING_EVAL_BLOCKS:,} with streaming, where they are read into memory)."
        },
    )
    max_documents: int | None = field(default=None, metadata={"help": "Keep only the first N documents."})
    max_chars: int | None = field(
        default=None, metadata={"help": "Keep the first documents up to N characters (not with streaming)."}
    )
    tokenizer_name_or_path: str | None = field(
        default=None, metadata={"help": "A pretrained tokenizer folder/name; if unset one is trained."}
    )
    tokenizer_kind: str = field(
        default="byte_bpe", metadata={"help": f"Kind of tokenizer to train: {TOKENIZER_KINDS}."}
    )
    vocab_size: int = field(default=2000, metadata={"help": "Vocabulary size of the trained tokenizer."})
    tokenizer_min_frequency: int = field(
        default=2,
        metadata={
            "help": "Fewest occurrences of a merge, word or character to enter the trained vocabulary "
            "(1 keeps every character of a char tokenizer, as nanoGPT's vocabulary does)."
        },
    )
    block_size: int = field(default=128, metadata={"help": "Tokens per training block (the context length)."})
    eval_fraction: float = field(
        default=0.05, metadata={"help": "Share of documents held out for evaluation."}
    )
    eval_split: str = field(
        default="random",
        metadata={
            "help": "How `eval_fraction` is held out: 'random', a seeded random share of the documents; "
            "'tail', the last eval_fraction of the corpus's characters, the document it falls in cut there "
            "(nanoGPT's shakespeare_char split: the first 90%% trains, the last 10%% validates)."
        },
    )
    document_mask: bool = field(
        default=False, metadata={"help": "Restart position ids at each document inside a block."}
    )
    num_proc: int | None = field(default=None, metadata={"help": "Processes of the tokenize/pack maps."})
    # C4-style cleaning (training/data/cleaning.py, docs/training.md): one switch, then its settings
    data_cleaning: str = field(
        default="none",
        metadata={
            "help": f"Clean the corpus before splitting it: {list(DATA_CLEANINGS)}; 'c4' applies C4's rules and "
            "deduplication (Raffel et al., 2020) and writes data_cleaning.json in output_dir."
        },
    )
    clean_min_words_per_line: int = field(
        default=C4Options.min_words_per_line, metadata={"help": "C4: keep lines with at least N words."}
    )
    clean_min_sentences: int = field(
        default=C4Options.min_sentences, metadata={"help": "C4: keep pages with at least N sentences."}
    )
    clean_bad_words_file: str | None = field(
        default=None,
        metadata={"help": "C4: drop pages holding a word of this file (one a line); none by default."},
    )
    clean_language: str = field(
        default=C4Options.language,
        metadata={
            "help": "C4: language filter, 'none', 'en' (an English stopword-share heuristic) or 'module:function' "
            "(text -> score in [0, 1])."
        },
    )
    clean_language_threshold: float = field(
        default=C4Options.language_threshold,
        metadata={"help": "C4: keep pages whose language score is >= this."},
    )
    clean_exact_dedup: bool = field(
        default=C4Options.exact_dedup, metadata={"help": "C4: drop pages whose normalized text was seen."}
    )
    clean_near_dedup: bool = field(
        default=C4Options.near_dedup, metadata={"help": "C4: drop near-duplicate pages (MinHash + LSH)."}
    )
    clean_span_dedup: bool = field(
        default=C4Options.span_dedup, metadata={"help": "C4: drop every three-sentence span seen before."}
    )
    clean_minhash_num_perm: int = field(
        default=C4Options.minhash_num_perm, metadata={"help": "C4: MinHash permutations (signature length)."}
    )
    clean_minhash_bands: int = field(
        default=C4Options.minhash_bands, metadata={"help": "C4: LSH bands (divides clean_minhash_num_perm)."}
    )
    clean_minhash_threshold: float = field(
        default=C4Options.minhash_threshold,
        metadata={"help": "C4: estimated Jaccard similarity from which a page is a near duplicate."},
    )
    clean_minhash_ngram: int = field(
        default=C4Options.minhash_ngram, metadata={"help": "C4: words per MinHash shingle."}
    )
    clean_seed: int = field(default=C4Options.seed, metadata={"help": "C4: seed of the MinHash functions."})

    def cleaning_options(self) -> C4Options:
        """The `clean_*` fields as the cleaning's `C4Options` (which validates them)."""
        return C4Options(**{f.name: getattr(self, f"clean_{f.name}") for f in fields(C4Options)})

    def __post_init__(self) -> None:
        _choice("data_cleaning", self.data_cleaning, DATA_CLEANINGS)
        self.cleaning_options()
        _positive_ints(self, "vocab_size", "block_size", "tokenizer_min_frequency")
        optional_positive(
            self, "max_documents", "max_chars", "num_proc", "tokenizer_train_documents", "max_eval_blocks"
        )
        _non_negative_int("shuffle_buffer_size", self.shuffle_buffer_size)
        _choice("tokenizer_kind", self.tokenizer_kind, TOKENIZER_KINDS)
        if self.sample_by is not None:
            _choice("sample_by", self.sample_by, SAMPLE_BY)
        _number("eval_fraction", self.eval_fraction, 0, 1, low_open=True, high_open=True)
        if self.streaming and self.max_chars is not None:
            raise ValueError("`max_chars` is not supported with `streaming`; use `max_documents`.")
        _choice("eval_split", self.eval_split, EVAL_SPLITS)
        if self.eval_split == "tail" and self.streaming:
            raise ValueError(
                "`eval_split`='tail' needs the corpus's length before training: not with `streaming`."
            )
        if self.eval_split == "tail" and self.eval_dataset:
            raise ValueError(
                "`eval_split`='tail' holds out the end of `dataset`; with `eval_dataset` nothing is held out."
            )
        if not self.dataset:
            raise ValueError("`dataset` must be a non-empty string.")


def _flag(help: str, unset: str | None = None):
    """A config flag: None (unset) takes the run's default (`RUN_DEFAULTS`, `VARIANT_DEFAULTS`), or
    the family's (or its --preset's) where the run has none."""
    return field(default=None, metadata={"help": help + (f" Unset: {unset}." if unset else "")})


@dataclass
class ModelArguments:
    """The model a run trains: a family, optionally one of its presets, and config overrides; or a
    checkpoint to start from.

    A fresh model's config is the family's defaults or its `preset`, then the config flags (each a
    short form of a config override, `--hidden_size 64` for `--config_overrides hidden_size=64`: it
    sets the field of its name in the families that read it, `training.models.FLAG_FIELDS`; unset,
    the run's default), then the objective's fields, then `config_overrides`.
    """

    init_from: str | None = field(
        default=None, metadata={"help": "Start from this pretrained folder/name instead of a fresh model."}
    )
    family: str | None = field(
        default=None,
        metadata={
            "help": f"The model family, one of {list(FAMILY_NAMES)}: gpt, rnn, ffnn and ngram (fitted by "
            "counting, no gradient steps) train objective clm, bert mlm, electra electra, t5 span_corruption, bart bart_denoising, "
            "rnn_seq2seq span_corruption or bart_denoising. Unset: from --arch."
        },
    )
    arch: str = field(
        default="transformer",
        metadata={
            "help": "The older spelling of --family: transformer is the objective's Transformer family (gpt for "
            "clm, bert for mlm, t5 for span_corruption, bart for bart_denoising); ngram, ffnn, rnn and "
            "rnn_seq2seq are the family of that name."
        },
    )
    preset: str | None = field(
        default=None,
        metadata={
            "help": "From scratch: a named recipe of the family (hf_lm.families.FAMILIES[family].presets: "
            + "; ".join(f"{f.name}: {', '.join(f.presets)}" for f in FAMILIES.values() if f.presets)
            + "). The config flags given apply on top, and so do the size and dropout defaults; "
            "config_overrides come last. Unset: the family's defaults with the variant flags' defaults."
        },
    )
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": "Config fields of the family's config class, applied last: name=value,... "
            "(hidden_size=64,num_hidden_layers=2) or a JSON object. An unknown field is refused, naming it."
        },
    )
    # the config flags (FLAG_FIELDS: the families that read each, and the fields it sets there)
    num_hidden_layers: int | None = _flag("Transformer blocks; recurrent layers (encoder and decoder).", "4")
    hidden_size: int | None = _flag("Model width (a recurrent model's state and embeddings).", "128")
    num_attention_heads: int | None = _flag("Query heads.", "4")
    num_key_value_heads: int | None = _flag("Key/value heads (GQA/MQA).", "as many as query heads")
    intermediate_size: int | None = _flag("Feed-forward width.", "4 * hidden_size")
    max_position_embeddings: int | None = _flag(
        "Longest input of learned positions.",
        "block_size (an encoder-decoder: twice it, for its noised source)",
    )
    hidden_dropout: float | None = _flag("Dropout on embeddings and residual branches.", "0")
    attention_dropout: float | None = _flag("Dropout on attention probabilities.", "0")
    position_embedding_type: str | None = _flag(
        "learned, sinusoidal, rope, alibi, xpos or none.", "learned, or the --preset's"
    )
    norm_type: str | None = _flag("layernorm or rmsnorm.", "layernorm, or the --preset's")
    norm_position: str | None = _flag("pre or post.", "pre, or the --preset's")
    hidden_act: str | None = _flag(
        "Feed-forward variant (gelu_tanh, swiglu, ...).", "gelu_tanh, or the --preset's"
    )
    tie_word_embeddings: bool | None = _flag(
        "Share input embedding and output projection (--no_tie_word_embeddings: untied).",
        "true, or the --preset's",
    )
    ngram_order: int | None = _flag(
        f"ngram: the order n (1..{MAX_ORDER}); ffnn: n - 1 previous tokens as input.", "3"
    )
    ngram_smoothing: str | None = _flag(f"ngram: smoothing, one of {sorted(SMOOTHINGS)}.", "modified_kn")
    cell_type: str | None = _flag(f"rnn, rnn_seq2seq: recurrent cell, one of {sorted(RNN_CELLS)}.", "lstm")
    rnn_attention: str | None = _flag(
        f"rnn_seq2seq: decoder attention, one of {list(ATTENTION_TYPES)}.", "luong_general"
    )

    def __post_init__(self) -> None:
        _choice("arch", self.arch, ARCHS)
        if self.family is not None:
            _choice("family", self.family, FAMILY_NAMES)
        flags = config_flags(self)
        optional_positive(self, "num_key_value_heads", "intermediate_size", "max_position_embeddings")
        for name in ("num_hidden_layers", "hidden_size", "num_attention_heads", "ngram_order"):
            _positive_int(name, flags[name])
        for name, kinds in (
            ("ngram_smoothing", SMOOTHINGS),
            ("cell_type", RNN_CELLS),
            ("rnn_attention", ATTENTION_TYPES),
        ):
            if flags.get(name) is not None:
                _choice(name, flags[name], kinds)
        if "ngram" in (self.arch, self.family) and flags["ngram_order"] > MAX_ORDER:  # ffnn's has no bound
            raise ValueError(f"`ngram_order` must be in 1..{MAX_ORDER}, got {flags['ngram_order']}.")
        if "ffnn" in (self.arch, self.family) and flags["ngram_order"] < 2:
            raise ValueError("`ngram_order` must be >= 2 for family 'ffnn' (it sees ngram_order - 1 tokens).")
        if self.preset is not None:
            if self.init_from:
                raise ValueError(
                    f"`preset` ({self.preset!r}) cannot be combined with `init_from`: the model's config comes "
                    f"from the checkpoint {self.init_from!r}. Drop --preset, or train from scratch."
                )
            # the family, where it is known before the objective (`--arch transformer` waits for it)
            family = self.family or (self.arch if self.arch != "transformer" else None)
            if family is not None:
                check_preset(family, self.preset)
        for name in ("hidden_dropout", "attention_dropout"):
            _probability(name, flags[name])
        if isinstance(self.config_overrides, dict):  # from a JSON/YAML file: keep the string form
            self.config_overrides = json.dumps(self.config_overrides)
        if self.config_overrides is not None:
            parse_overrides(self.config_overrides)

    def overrides(self, config_class: type | None = None) -> dict:
        """`config_overrides` as a dict (empty when unset; `parse_overrides`).

        Args:
            config_class: the config the overrides go to; each key must be one of its fields (or
                an alias in its `attribute_map`), else a `ValueError` names the key and the nearest
                fields. transformers' configs keep any unknown keyword as an attribute, so a typo
                ("num_hiden_layers") would otherwise train the default and be saved in config.json.
        """
        overrides = parse_overrides(self.config_overrides) if self.config_overrides else {}
        if config_class is not None:
            check_config_keys(config_class, overrides)
        return overrides


@dataclass
class TrainArguments:
    """The optimization, evaluation, logging and checkpointing of one run."""

    output_dir: str = field(
        default="out/train", metadata={"help": "Run folder: checkpoints, logs, final model."}
    )
    max_steps: int = field(default=1000, metadata={"help": "Optimizer updates of the whole run."})
    per_device_batch_size: int = field(default=16, metadata={"help": "Blocks per micro-batch per process."})
    gradient_accumulation_steps: int = field(
        default=1, metadata={"help": "Micro-batches per optimizer update."}
    )
    learning_rate: float = field(default=3e-3, metadata={"help": "Peak AdamW learning rate."})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW decay, applied to matrices only."})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1."})
    adam_beta2: float = field(default=0.95, metadata={"help": "AdamW beta2."})
    warmup_steps: int = field(default=100, metadata={"help": "Linear warmup updates before the schedule."})
    lr_scheduler: str = field(default="cosine", metadata={"help": f"Schedule after warmup: {LR_SCHEDULERS}."})
    min_lr_rate: float = field(
        default=0.0,
        metadata={
            "help": "cosine: the last learning rate as a share of the peak (nanoGPT decays to min_lr = lr / 10: 0.1)."
        },
    )
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient-norm clip; 0 disables clipping."})
    mixed_precision: str = field(
        default="no",
        metadata={"help": f"Autocast dtype: {MIXED_PRECISIONS} (bf16 runs on CPU; fp16 needs a GPU)."},
    )
    seed: int = field(
        default=0, metadata={"help": "Seed of the split, init, data order and (with the rank) dropout."}
    )
    eval_every: int = field(default=100, metadata={"help": "Evaluate every N updates (and at the end)."})
    eval_batches: int | None = field(
        default=None, metadata={"help": "Eval micro-batches per process (all eval blocks if unset)."}
    )
    log_every: int = field(default=10, metadata={"help": "Log the training loss every N updates."})
    save_every: int = field(default=500, metadata={"help": "Save a resumable checkpoint every N updates."})
    keep_last: int | None = field(default=3, metadata={"help": "Checkpoints kept (none: all of them)."})
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start over in an output_dir that holds another run's outputs (checkpoints, final/, ...), "
            "deleting them; without it such a run is refused (transformers' name)."
        },
    )
    load_best_model_at_end: bool = field(
        default=False,
        metadata={
            "help": "Keep the weights of the best evaluation (by metric_for_best_model) in output_dir/best/ and "
            "make them final/: nanoGPT's 'save only when validation improves'. The best so far survives "
            "checkpoint pruning and resume."
        },
    )
    metric_for_best_model: str = field(
        default="eval_loss",
        metadata={
            "help": "The evaluation metric that picks the best model (the 'eval_' prefix may be left out): "
            "one of the objective's metrics, e.g. eval_loss, eval_bits_per_character, eval_mlm_accuracy."
        },
    )
    greater_is_better: bool | None = field(
        default=None,
        metadata={"help": "Whether a higher metric_for_best_model is better (default: only for accuracies)."},
    )
    sampling: str = field(
        default="blocks",
        metadata={
            "help": f"How training batches are drawn, one of {list(SAMPLINGS)}. blocks: the packed blocks in a "
            "seeded permutation per epoch. random_windows (objective clm): nanoGPT's get_batch, windows of "
            "block_size + 1 tokens at uniformly random offsets of the training token stream, inputs the first "
            "block_size tokens and targets the last block_size; the offsets of each update are a pure "
            "function of (seed, step), so a resumed run draws the same windows."
        },
    )
    torch_compile: bool = field(
        default=False,
        metadata={
            "help": "torch.compile the model for training (and a compiled copy of the plain model for the "
            "causal-LM evaluation); checkpoints and final/ hold the plain model's weights."
        },
    )
    torch_compile_backend: str = field(
        default="inductor",
        metadata={"help": "torch.compile's backend (inductor; aot_eager or eager compile fast, run slower)."},
    )
    torch_compile_mode: str | None = field(
        default=None,
        metadata={"help": "torch.compile's mode: default, reduce-overhead, max-autotune (unset: default)."},
    )
    fsdp: str = field(
        default="",
        metadata={
            "help": "Shard parameters, gradients and optimizer state over the processes with FSDP2 "
            "(transformers' Trainer words): full_shard (parameters freed after each block's forward), "
            "shard_grad_op (kept until the backward), plus offload (shards on the CPU). Empty: DDP. An "
            "accelerate config with distributed_type FSDP and fsdp_version 2 does the same."
        },
    )
    gradient_checkpointing: bool = field(
        default=False,
        metadata={
            "help": "Activation checkpointing: recompute each Transformer block in the backward instead of "
            "keeping its activations (transformers' name; with or without --fsdp)."
        },
    )
    tf32: bool = field(
        default=True,
        metadata={
            "help": "On a CUDA GPU, run float32 matrix products in TF32 (torch.backends.cuda.matmul.allow_tf32, "
            "as nanoGPT does); no effect on CPU."
        },
    )
    resume: str = field(
        default="false",
        metadata={
            "help": "Resume from the latest checkpoint: true (required), auto (if any), false.",
            "nargs": "?",
            "const": "true",
        },
    )
    report_to: list[str] = field(
        default_factory=lambda: ["csv"], metadata={"help": f"Trackers among {REPORTERS}."}
    )
    max_train_seconds: float | None = field(
        default=None,
        metadata={
            "help": "A wall-clock budget for the training steps of this process (evaluation included): "
            "stop at the first step boundary past it, then evaluate and save as at max_steps."
        },
    )
    stop_on_nan: bool = field(
        default=True, metadata={"help": "Raise on a non-finite loss; if false, skip that update."}
    )
    rollback_on_divergence: bool = field(
        default=False,
        metadata={
            "help": "On a non-finite loss, a loss spike (spike_threshold) or non-finite weights at a save, reload "
            "the run's last good checkpoint and skip the offending batches instead of stopping (PaLM's restart "
            "before a spike): the data continues after the offending batch (plus rollback_skip_batches). "
            "Deterministic, logged, and counted in final_metrics.json."
        },
    )
    spike_threshold: float | None = field(
        default=None,
        metadata={
            "help": "With rollback_on_divergence: a training loss above this many times the mean of the last "
            "spike_window losses is a spike, rolled back before its update (e.g. 2.0; unset: only non-finite "
            "values roll back)."
        },
    )
    spike_window: int = field(
        default=20,
        metadata={"help": "The number of recent training losses whose mean a spike is measured against."},
    )
    rollback_skip_batches: int = field(
        default=0,
        metadata={
            "help": "Global batches skipped after the offending one on a rollback, besides those read between "
            "the checkpoint and it (PaLM skipped 200-500 batches in all)."
        },
    )
    max_rollbacks: int = field(
        default=3, metadata={"help": "Rollbacks allowed in a run; one more divergence stops it."}
    )
    objective: str = field(
        default="clm",
        metadata={
            "help": "clm: causal LM (hflm_gpt); mlm: masked LM (hflm_bert); electra: ELECTRA's replaced-token "
            "detection, a small masked-LM generator and a discriminator trained jointly (hflm_electra); span_corruption: T5's "
            "objective (hflm_t5); bart_denoising: BART's text infilling + sentence permutation (hflm_bart)."
        },
    )
    mlm_probability: float = field(
        default=0.15,
        metadata={"help": "mlm, electra: share of tokens selected for prediction (80/10/10 rule)."},
    )
    electra_generator_size: float = field(
        default=0.25,
        metadata={
            "help": "electra: the generator's width (hidden size, heads, feed-forward) as a fraction of the "
            "discriminator's; 1/4 in Clark et al. (2020). Its depth and embeddings are the discriminator's."
        },
    )
    electra_disc_weight: float = field(
        default=50.0,
        metadata={
            "help": "electra: λ, the weight of the discriminator loss in MLM loss + λ · disc loss (50 in the paper)."
        },
    )
    masking: str = field(
        default="token", metadata={"help": f"mlm: what is masked together: {MASKING_KINDS}."}
    )
    pseudo_perplexity_blocks: int = field(
        default=8,
        metadata={"help": "mlm: eval blocks scored by pseudo-perplexity (one forward per token); 0 = off."},
    )
    tbptt: bool = field(
        default=False,
        metadata={
            "help": "arch rnn: truncated backpropagation through time. The blocks are read in corpus order in "
            "global-batch-many lanes, and each batch row carries the recurrent state of the previous block "
            "of its lane (gradients stop at block boundaries)."
        },
    )
    scheduled_sampling: str = field(
        default="none",
        metadata={
            "help": f"arch rnn, rnn_seq2seq: scheduled sampling (Bengio et al. 2015), one of {list(SCHEDULED_SAMPLING)}; "
            "the probability of feeding the model's own sample rises with the step (none = teacher forcing)."
        },
    )
    scheduled_sampling_k: float | None = field(
        default=None,
        metadata={
            "help": "The schedule's k (default: linear 1.0, exponential 0.9999, inverse_sigmoid 1000)."
        },
    )
    scheduled_sampling_c: float = field(
        default=1e-4, metadata={"help": "linear schedule: teacher-forcing decrease per step."}
    )
    scheduled_sampling_min: float = field(
        default=0.0, metadata={"help": "linear schedule: the floor of the teacher-forcing probability."}
    )

    def __post_init__(self) -> None:
        _finite_floats(self)
        if isinstance(self.resume, bool):  # JSON/YAML booleans
            self.resume = "true" if self.resume else "false"
        self.resume = {"yes": "true", "no": "false", "1": "true", "0": "false"}.get(
            str(self.resume).lower(), str(self.resume).lower()
        )
        _choice("resume", self.resume, RESUME_VALUES)
        _positive_ints(
            self,
            "max_steps",
            "per_device_batch_size",
            "gradient_accumulation_steps",
            "eval_every",
            "log_every",
            "save_every",
        )
        optional_positive(self, "eval_batches", "keep_last")
        _choice("lr_scheduler", self.lr_scheduler, LR_SCHEDULERS)
        _choice("mixed_precision", self.mixed_precision, MIXED_PRECISIONS)
        _choice("objective", self.objective, list(OBJECTIVES))
        _choice("masking", self.masking, MASKING_KINDS)
        _choice("scheduled_sampling", self.scheduled_sampling, SCHEDULED_SAMPLING)
        _choice("sampling", self.sampling, SAMPLINGS)
        if self.sampling == "random_windows" and self.objective != "clm":
            raise ValueError(
                f"`sampling`='random_windows' draws next-token windows for objective 'clm', not {self.objective!r}."
            )
        if self.sampling == "random_windows" and (self.tbptt or self.scheduled_sampling != "none"):
            raise ValueError(
                "`sampling`='random_windows' draws unrelated windows with their own targets: `tbptt` (a state "
                "carried across consecutive blocks) and `scheduled_sampling` (which needs labels) read blocks; "
                "use sampling='blocks'."
            )
        if not self.metric_for_best_model.startswith("eval_"):
            self.metric_for_best_model = f"eval_{self.metric_for_best_model}"
        _choice("metric_for_best_model", self.metric_for_best_model, OBJECTIVES[self.objective].metrics)
        if self.load_best_model_at_end and self.metric_for_best_model == "eval_pseudo_perplexity":
            if not self.pseudo_perplexity_blocks:  # the last weights would be kept, silently
                raise ValueError(
                    "`metric_for_best_model`='eval_pseudo_perplexity' is never computed with `pseudo_perplexity_blocks`=0: "
                    "no best model would be kept. Score some blocks, or pick another metric."
                )
        if self.greater_is_better is None:
            self.greater_is_better = self.metric_for_best_model.endswith("accuracy")
        if self.torch_compile_mode is not None:
            _choice("torch_compile_mode", self.torch_compile_mode, TORCH_COMPILE_MODES)
        self.fsdp = " ".join(parse_fsdp(self.fsdp))
        if not self.torch_compile_backend:
            raise ValueError("`torch_compile_backend` must be a non-empty backend name, e.g. 'inductor'.")
        if self.scheduled_sampling != "none":
            try:  # the schedule checks its constants, named as the paper names them: say whose flags they are
                run_sampling_schedule(self)(0)
            except ValueError as err:
                raise ValueError(
                    f"--scheduled_sampling_k/_c/_min (the paper's k, c, eps_min): {err}"
                ) from None
        _number("mlm_probability", self.mlm_probability, 0, 1, low_open=True, high_open=True)
        _number("electra_generator_size", self.electra_generator_size, 0, 1, low_open=True)
        _non_negative("electra_disc_weight", self.electra_disc_weight)
        _non_negative_int("pseudo_perplexity_blocks", self.pseudo_perplexity_blocks)
        if isinstance(self.report_to, str):
            self.report_to = [self.report_to]
        for name in self.report_to:
            if name not in REPORTERS:
                raise ValueError(f"`report_to` entries must be among {list(REPORTERS)}, got {name!r}.")
        self._check_optimization()

    def _check_optimization(self) -> None:
        """The schedule, the optimizer, the output folder and the divergence handling."""
        _non_negative_int("warmup_steps", self.warmup_steps)
        check_seed(self.seed)
        _positive("learning_rate", self.learning_rate)
        if self.max_train_seconds is not None:
            _positive("max_train_seconds", self.max_train_seconds)
        _probability("min_lr_rate", self.min_lr_rate)
        if self.min_lr_rate > 0 and self.lr_scheduler != "cosine":
            raise ValueError(
                f"`min_lr_rate` sets the end of the cosine schedule; lr_scheduler={self.lr_scheduler!r} has none."
            )
        for name in ("weight_decay", "max_grad_norm"):
            _non_negative(name, getattr(self, name))
        for name in ("adam_beta1", "adam_beta2"):
            _probability(name, getattr(self, name))
        if not self.output_dir:
            raise ValueError("`output_dir` must be a non-empty path.")
        _positive_ints(self, "spike_window", "max_rollbacks")
        _non_negative_int("rollback_skip_batches", self.rollback_skip_batches)
        if self.spike_threshold is not None:
            if not self.spike_threshold > 1:
                raise ValueError(
                    f"`spike_threshold` is a ratio to the recent mean loss: it must be > 1, got {self.spike_threshold!r}."
                )
            if not self.rollback_on_divergence:
                raise ValueError(
                    "`spike_threshold` detects spikes to roll back: it needs --rollback_on_divergence."
                )

    @property
    def trackers(self) -> list[str]:
        """The requested trackers, "none" removed."""
        return [name for name in self.report_to if name != "none"]


ARGUMENT_CLASSES = (DataArguments, ModelArguments, TrainArguments)


def as_flags(values: dict) -> list[str]:
    """Argument values as the command-line flags that say the same: lists as several values, bools
    as true/false, a dict (config_overrides) as its JSON string; None and empty lists left out."""
    flags = []
    for key, value in values.items():
        if value is None or value == []:
            continue
        if isinstance(value, dict):  # config_overrides: its JSON string form
            value = json.dumps(value)
        items = value if isinstance(value, list) else [value]
        flags += [f"--{key}", *(str(v).lower() if isinstance(v, bool) else str(v) for v in items)]
    return flags


def parse_dataclasses(classes, argv: list[str] | None = None) -> tuple:
    """Parse `classes` (dataclasses) from command-line flags, or from a `.json`/`.yaml`/`.yml` file
    holding the same keys, optionally followed by flags that override the file's values
    (`run.yaml --learning_rate 3e-4 --output_dir out/other`). Shared by every CLI of the project.

    Args:
        classes: the argument dataclasses, in order.
        argv: the arguments (without the program name); `sys.argv[1:]` if None.

    A file's values are read as their fields' types (`read_argument_file`): `learning_rate: 1e-3`
    is a float, although YAML 1.1 (PyYAML) reads it as a string.

    Raises:
        ValueError: an invalid value (naming the field), a file that holds no mapping, unknown keys
            or values of the wrong kind in a file (naming it), or a first argument that is neither
            a flag nor a .json/.yaml file.
    """
    parser = argument_parser(classes)
    argv = sys.argv[1:] if argv is None else argv
    if argv and not argv[0].startswith("-"):
        path = os.path.abspath(argv[0])
        if not path.endswith((".json", ".yaml", ".yml")):
            raise ValueError(f"The first argument must be a flag or a .json/.yaml file, got {argv[0]!r}.")
        values = read_argument_file(path, classes)
        if len(argv) == 1:
            return tuple(parser.parse_dict(values))
        # the file's values stand in for the defaults, and the given flags override them: a value no
        # flag spells (a null, an empty list) is kept, as without flags
        for action in parser._actions:
            action.required = action.required and action.dest not in values
        parser.set_defaults(**values)
        argv = list(argv[1:])
    return tuple(parser.parse_args_into_dataclasses(args=argv))


def parse_args(argv: list[str] | None = None) -> tuple[DataArguments, ModelArguments, TrainArguments]:
    """Parse the training loop's arguments from flags or one .json/.yaml file (`parse_dataclasses`).

    Returns:
        `(DataArguments, ModelArguments, TrainArguments)`, validated.
    """
    return parse_dataclasses(ARGUMENT_CLASSES, argv)
