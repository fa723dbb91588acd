"""The budgeted leaderboards as data: each board's settings, entries and published reference rows.

`benchmarks/leaderboard.py` runs them. A board's `settings` table holds one row per setting,
`name: (full value, smoke value, help)`; `presets` adds named presets on top of "full"; every
setting is also a command-line option (`--name value`) that overrides the preset.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

SHAKESPEARE = "tinyshakespeare/input.txt"  # under ../shared/data

# ----------------------------------------------------------------------------------------------
# lm: Tiny Shakespeare, character level, every family under one wall-clock budget
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LmEntry:
    """One row of the LM leaderboard: "ngram" (fitted, one run per order), "budget" (trained for
    the wall-clock budget) or "reference" (nanoGPT's configuration, a fixed number of iterations)."""

    label: str
    kind: str
    model_args: tuple[str, ...] = ()
    smoke_model_args: tuple[str, ...] = ()
    learning_rate: float = 1e-3


def _flags(text: str, overrides: dict | None = None) -> tuple[str, ...]:
    """`training.train` flags from a whitespace-separated string, plus `--config_overrides` as JSON."""
    return tuple(text.split()) + (("--config_overrides", json.dumps(overrides)) if overrides else ())


def _gpt(position: str) -> LmEntry:
    # nanoGPT's small CPU model: 4 layers x 4 heads x 128 dims, MLP 512, tied embeddings; its rate 1e-3
    arch = f"--arch transformer --position_embedding_type {position}"
    return LmEntry(
        f"GPT ({position} positions)",
        "budget",
        _flags(
            f"{arch} --num_hidden_layers 4 --num_attention_heads 4 --hidden_size 128 --intermediate_size 512"
        ),
        _flags(
            f"{arch} --num_hidden_layers 2 --num_attention_heads 2 --hidden_size 32 --intermediate_size 64"
        ),
    )


def _rnn(label: str, cell: str, hidden: int, learning_rate: float) -> LmEntry:
    # two layers, embedding = state size, tied output layer (Press & Wolf, 2017)
    return LmEntry(
        label,
        "budget",
        _flags(f"--arch rnn --cell_type {cell} --num_hidden_layers 2 --hidden_size {hidden}"),
        _flags(f"--arch rnn --cell_type {cell} --num_hidden_layers 1 --hidden_size 32"),
        learning_rate,
    )


# About 0.8M parameters each (nanoGPT's small CPU model), so the budget, not the capacity, separates
# the families. Rates: nanoGPT's 1e-3 for the Transformers, char-rnn's 2e-3 for the gated RNNs, 1e-3
# for the Elman RNN (less stable) and the feed-forward model.
LM_ENTRIES = {
    "ngram": LmEntry("n-gram (modified Kneser-Ney)", "ngram"),
    # a window of 16 characters (n = 17; --ngram_order stops at 5, so the window is set in the config),
    # 64-dim embeddings, 640 tanh units, direct connections: 0.77M parameters
    "ffnn": LmEntry(
        "Feed-forward (Bengio et al., 2003)",
        "budget",
        _flags(
            "--arch ffnn --ngram_order 5 --hidden_size 64 --intermediate_size 640 --no_tie_word_embeddings",
            {"context_size": 16},
        ),
        _flags(
            "--arch ffnn --ngram_order 5 --hidden_size 16 --intermediate_size 64 --no_tie_word_embeddings",
            {"context_size": 8},
        ),
    ),
    "rnn": _rnn("Elman RNN (tanh)", "rnn_tanh", 448, 1e-3),  # 0.83M
    "lstm": _rnn("LSTM", "lstm", 224, 2e-3),  # 0.82M
    "gru": _rnn("GRU", "gru", 256, 2e-3),  # 0.81M
    "gpt_learned": _gpt("learned"),  # 0.82M
    "gpt_sinusoidal": _gpt("sinusoidal"),  # 0.80M, as RoPE and ALiBi
    "gpt_rope": _gpt("rope"),
    "gpt_alibi": _gpt("alibi"),
    # nanoGPT's `config/train_shakespeare_char.py` with its CPU flags; its nn.GELU() is the exact GELU,
    # bias=False drops the linear layers' biases (hf_lm's LayerNorms keep theirs)
    "nanogpt": LmEntry(
        "nanoGPT small CPU config, run with hf_lm",
        "reference",
        _flags(
            "--arch transformer --position_embedding_type learned --num_hidden_layers 4 "
            "--num_attention_heads 4 --hidden_size 128 --intermediate_size 512 --hidden_act gelu",
            {"attention_bias": False, "mlp_bias": False},
        ),
    ),
}

# nanoGPT's README for `train_shakespeare_char.py` with the small CPU flags: val loss 1.88 in about
# 3 minutes on a MacBook CPU
NANOGPT_REFERENCE = {
    "name": "nanogpt_published",
    "label": "nanoGPT small CPU config (published)",
    "parameters": 0.80e6,  # nanoGPT prints "number of parameters: 0.80M" (positions excluded)
    "steps": 2000,
    "tokens_seen": 2000 * 12 * 64,
    "train_seconds": 180.0,
    "val_loss": 1.88,
    "perplexity": math.exp(1.88),
    "source": "https://github.com/karpathy/nanoGPT (README, 'I only have a macbook')",
}

# ----------------------------------------------------------------------------------------------
# translation and mask_predict: Multi30k De->En from scratch
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TranslationEntry:
    """One `training.finetune_translation` family (and its RNN attention), the bentrevett BLEU it is
    measured against and the target test BLEU (the Transformer: >= 37 within 10 minutes on one GPU)."""

    label: str
    family: str
    attention: str | None = None
    published: float | None = None
    target: float | None = None


TRANSLATION_ENTRIES = {
    "rnn": TranslationEntry("RNN seq2seq, no attention", "rnn_seq2seq", "none", published=13.76),
    "rnn_bahdanau": TranslationEntry(
        "RNN seq2seq + Bahdanau attention", "rnn_seq2seq", "bahdanau", published=28.30
    ),
    "rnn_luong": TranslationEntry("RNN seq2seq + Luong (general) attention", "rnn_seq2seq", "luong_general"),
    "transformer": TranslationEntry(
        "Transformer (Vaswani et al.)", "transformer", published=36.52, target=37.0
    ),
    "t5": TranslationEntry("T5-style Transformer", "t5"),
    "bart": TranslationEntry("BART-style Transformer", "bart"),
}
BENTREVETT = "https://github.com/bentrevett/pytorch-seq2seq"
# bentrevett/pytorch-seq2seq, Multi30k De->En test BLEU after 10 epochs: (short name, model, BLEU)
TRANSLATION_REFERENCES = [
    ("LSTM", "LSTM seq2seq (2 layers, no attention)", 13.76),
    ("GRU", "GRU seq2seq (no attention, context fed to every step)", 20.61),
    ("GRU + Bahdanau", "GRU + Bahdanau attention", 28.30),
    ("ConvS2S", "Convolutional seq2seq", 34.14),
    ("Transformer", "Transformer (3+3 layers, 256 hidden)", 36.52),
]
MASK_PREDICT_ENTRIES = {
    "autoregressive": "Transformer, autoregressive",
    "mask_predict": "Transformer, Mask-Predict (CMLM)",
}

# ----------------------------------------------------------------------------------------------
# sst2: a BERT-style classifier from scratch against the same encoder after pretraining
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sst2Entry:
    """Where fine-tuning starts (the objective that pretrains the initialization, None for the
    initialization itself) and whether the entry also gets the pretraining time."""

    label: str
    pretraining: str | None = None
    extra_time: bool = False


SST2_ENTRIES = {
    "scratch": Sst2Entry("BERT-style, from scratch"),
    "mlm": Sst2Entry("BERT-style, MLM-pretrained on SST-2 text", pretraining="mlm"),
    "electra": Sst2Entry("ELECTRA discriminator, pretrained on SST-2 text", pretraining="electra"),
    "scratch_long": Sst2Entry("BERT-style, from scratch, pretraining + fine-tuning time", extra_time=True),
}
# published accuracies on the GLUE dev sentences (this test split), from the data README
SST2_REFERENCES = [
    ("BERT-base", "BERT-base (Devlin et al., 2019), pretrained on BooksCorpus + Wikipedia", 0.93),
    ("bag of words", "bag-of-words classifier", 0.80),
]

# ----------------------------------------------------------------------------------------------
# ablations and length_extrapolation: GPT variants one component away from a baseline
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """The baseline with `fields` changed; `glu`: a gated feed-forward at 2/3 of the width (Shazeer,
    2020: three matrices instead of two keep parameters and FLOPs about equal); `derived`: fields
    computed from the baseline's sizes ("kv_half": heads/2 key-value heads, "embedding_quarter": E = H/4)."""

    component: str
    description: str
    fields: dict = field(default_factory=dict)
    glu: bool = False
    derived: str | None = None


# The baseline's config fields: a GPT-2-style decoder
BASELINE = {
    "hidden_act": "gelu",
    "norm_type": "layernorm",
    "norm_position": "pre",
    "position_embedding_type": "learned",
    "tie_word_embeddings": True,
}
VARIANTS = {
    "baseline": Variant(
        "baseline", "GELU, pre-norm LayerNorm, learned positions, tied embeddings, multi-head attention"
    ),
    "relu": Variant("activation", "ReLU feed-forward", {"hidden_act": "relu"}),
    "swiglu": Variant("activation", "SwiGLU feed-forward (2/3 width)", {"hidden_act": "swiglu"}, glu=True),
    "geglu": Variant("activation", "GeGLU feed-forward (2/3 width)", {"hidden_act": "geglu"}, glu=True),
    "reglu": Variant("activation", "ReGLU feed-forward (2/3 width)", {"hidden_act": "reglu"}, glu=True),
    "rmsnorm": Variant("norm", "RMSNorm instead of LayerNorm", {"norm_type": "rmsnorm"}),
    "post_norm": Variant("norm", "post-norm: LayerNorm after each residual sum", {"norm_position": "post"}),
    "sinusoidal": Variant(
        "positions", "fixed sinusoidal positions", {"position_embedding_type": "sinusoidal"}
    ),
    "rope": Variant("positions", "rotary positions (RoPE)", {"position_embedding_type": "rope"}),
    "alibi": Variant("positions", "ALiBi attention bias", {"position_embedding_type": "alibi"}),
    "no_positions": Variant(
        "positions", "no position information (NoPE)", {"position_embedding_type": "none"}
    ),
    "untied": Variant("embeddings", "separate output projection", {"tie_word_embeddings": False}),
    "factorized_embeddings": Variant(
        "embeddings", "factorized embeddings, E = H/4 (ALBERT)", derived="embedding_quarter"
    ),
    "gqa": Variant("attention", "grouped-query attention, heads/2 key-value heads", derived="kv_half"),
    "mqa": Variant("attention", "multi-query attention, 1 key-value head", {"num_key_value_heads": 1}),
    "band_attention": Variant(
        "attention",
        "band (sliding-window) attention: each token sees the 16 before it",
        {"attention_pattern": "band", "attention_window": 16},
    ),
    "shared_blocks": Variant("sharing", "one block shared by all layers (ALBERT)", {"num_hidden_groups": 1}),
    # capacity factor 1.25 (Switch's training value): each expert takes ceil(1.25 * T * k / E) tokens of
    # a sequence, overflowing ones pass through the residual
    "moe": Variant(
        "experts",
        "mixture of 4 experts, top-2 routing, capacity factor 1.25",
        {"num_local_experts": 4, "num_experts_per_tok": 2, "capacity_factor": 1.25},
    ),
    "switch": Variant(
        "experts",
        "Switch: 4 experts, top-1 routing, capacity factor 1.25",
        {"num_local_experts": 4, "num_experts_per_tok": 1, "capacity_factor": 1.25, "norm_topk_prob": False},
    ),
    # length_extrapolation's sixth scheme (its scale base is the board's `xpos_scale_base`)
    "xpos": Variant(
        "positions",
        "xPos: RoPE with an exponential decay (Sun et al., 2022)",
        {"position_embedding_type": "xpos"},
    ),
}
ABLATION_VARIANTS = [name for name in VARIANTS if name != "xpos"]
# length_extrapolation's scheme names -> the variants (learned positions are the baseline)
SCHEMES = {
    "learned": "baseline",
    "sinusoidal": "sinusoidal",
    "rope": "rope",
    "alibi": "alibi",
    "none": "no_positions",
    "xpos": "xpos",
}
MULTIPLIERS = (1, 2, 4, 8)  # length_extrapolation's evaluation lengths, in training contexts

# ----------------------------------------------------------------------------------------------
# The boards: settings (full, smoke, help), presets, default entries, data
# ----------------------------------------------------------------------------------------------

_GPT_SIZES = {
    "block_size": "The training context L, in characters",
    "batch_size": "Blocks per optimizer step",
    "max_steps": "Optimizer steps per run",
    "max_train_seconds": "Optional wall-clock cap per run, in seconds",
    "learning_rate": "Peak AdamW learning rate (cosine decay)",
    "warmup_steps": "Linear warmup steps",
    "eval_batches": "Validation batches of the loop's evaluations; None = all",
    "train_chars": "Keep the first N training characters; None = all",
    "eval_chars": "Keep the first N validation characters; None = all",
    "jobs": "Training runs at once",
    "num_threads": "torch threads per run (OMP_NUM_THREADS); None = torch's default",
    "rerun": "Train again where a run's folder holds results of the same command",
}


def _gpt_table(values: dict) -> dict:
    return {name: (*values[name], _GPT_SIZES.get(name, name.replace("_", " "))) for name in values}


BOARDS = {
    "lm": {
        "title": "character-level Tiny Shakespeare: n-gram, feed-forward, RNN, LSTM, GRU, GPT (4 position "
        "schemes) under one wall-clock budget, plus nanoGPT's small CPU configuration",
        "data": SHAKESPEARE,
        "entries": LM_ENTRIES,
        "settings": {
            "budget_seconds": (180.0, 2.0, "Training seconds per budgeted entry"),
            "schedule": ("cosine", "constant", "cosine (a probe run calibrates max_steps) or constant"),
            "block_size": (128, 32, "Characters per block of the budgeted entries"),
            "batch_size": (16, 8, "Blocks per update of the budgeted entries"),
            "evals": (10, 2, "Validation-curve points per budgeted run"),
            "curve_eval_blocks": (128, 16, "Validation blocks of each curve point"),
            "probe_steps": (30, 6, "Steps of the calibration probe"),
            "constant_eval_every": (100, 50, "Schedule constant: evaluate every N steps"),
            "constant_warmup_steps": (100, 10, "Schedule constant: warmup steps"),
            "ngram_orders": ((1, 2, 3, 4, 5), (1, 2, 3), "n-gram orders to fit, within 1..5"),
            "nanogpt_iters": (2000, 20, "Iterations of the nanoGPT row"),
            "nanogpt_eval_every": (100, 10, "Evaluation interval of the nanoGPT row"),
            "max_chars": (None, 60_000, "Use the first N characters of the file, then split; None = all"),
            "num_threads": (None, None, "OMP_NUM_THREADS of every run; None = torch's choice"),
        },
    },
    "translation": {
        "title": "Multi30k De->En: RNN seq2seq (no attention, Bahdanau, Luong), Transformer, T5-style and "
        "BART-style from scratch under one wall-clock budget; sacrebleu test BLEU",
        "data": "multi30k",
        "entries": TRANSLATION_ENTRIES,
        "settings": {
            "budget_seconds": (600.0, 2.0, "Wall-clock training budget per entry, in seconds"),
            "max_epochs": (10.0, 10.0, "Epoch cap per entry (whichever of budget and epochs ends first)"),
            "device": ("auto", "auto", "auto (the GPU when torch sees one), cuda or cpu"),
            "cell_type": ("gru", "gru", "Recurrent cell of the RNN entries: gru, lstm, rnn_tanh, rnn_relu"),
            "vocab_size": (8000, 400, "Joint BPE vocabulary size"),
            "hidden_size": (256, 32, "Transformer width"),
            "num_layers": (3, 1, "Transformer encoder (= decoder) layers"),
            "num_heads": (8, 2, "Transformer attention heads"),
            "intermediate_size": (512, 64, "Transformer feed-forward width"),
            "rnn_hidden_size": (512, 32, "RNN state width (the bidirectional encoder splits it)"),
            "rnn_embedding_size": (256, 32, "RNN token embedding width"),
            "rnn_layers": (1, 1, "RNN encoder (= decoder) layers"),
            "dropout": (0.1, 0.1, "Dropout of every entry"),
            "batch_size": (64, 32, "Training pairs per batch"),
            "warmup_steps": (100, 5, "Linear learning-rate warmup steps"),
            # constant suits a wall-clock budget, which has no known last step for a decay to aim at
            "lr_scheduler": (
                "constant_with_warmup",
                "constant_with_warmup",
                "transformers lr_scheduler_type",
            ),
            "budget_schedule": ("none", "none", "linear: decay the rate to 0 over the wall-clock budget"),
            "label_smoothing": (0.0, 0.0, "Label smoothing of the training loss"),
            "rnn_learning_rate": (1e-3, 3e-3, "Peak AdamW learning rate of the RNN entries"),
            "transformer_learning_rate": (5e-4, 3e-3, "Peak AdamW learning rate of the Transformer entries"),
            "num_beams": (5, 2, "Beam size of the beam-search test decoding"),
            "generation_max_length": (64, 20, "Longest generated translation in tokens"),
            "max_length": (128, 48, "Longest source/target in training, in tokens"),
            "max_train_samples": (None, 1000, "Use the first N training pairs; None = all"),
            "max_test_samples": (None, 32, "Score the first N test pairs; None = all 1,000"),
            "logging_steps": (50, 10, "Log the training loss every N steps"),
            "mixed_precision": ("no", "no", "Autocast of training and decoding: no, bf16 or fp16"),
            "num_threads": (None, None, "torch threads; None = torch's choice"),
        },
        # one GPU: the same models and budget with bentrevett's batch of 128 (these models are too small
        # to be limited by a GPU's arithmetic). A linear decay with label smoothing 0.1 lost clearly on a
        # CPU at 2 epochs (test BLEU 13.4 / 15.6 against 22.8 / 25.5), so it is an option, not the preset.
        "presets": {"gpu": {"batch_size": 128}},
    },
    "sst2": {
        "title": "SST-2: a BERT-style classifier from scratch vs after MLM (or ELECTRA) pretraining on the "
        "SST-2 training text, same fine-tuning budget; dev and test accuracy",
        "data": "sst2",
        "entries": SST2_ENTRIES,
        "default_entries": ("scratch", "mlm"),
        "settings": {
            "budget_seconds": (300.0, 2.0, "Wall-clock fine-tuning budget per entry, in seconds"),
            "pretrain_seconds": (900.0, 3.0, "Wall-clock pretraining budget, in seconds"),
            "max_epochs": (10.0, 10.0, "Fine-tuning epoch cap (whichever of budget and epochs ends first)"),
            "vocab_size": (8000, 500, "WordPiece vocabulary size"),
            "hidden_size": (256, 32, "Model width"),
            "num_layers": (4, 1, "Transformer blocks"),
            "num_heads": (4, 2, "Attention heads"),
            "intermediate_size": (1024, 64, "Feed-forward width"),
            "dropout": (0.1, 0.1, "Hidden and attention dropout"),
            "max_seq_length": (128, 64, "Longest input (fine-tuning) and pretraining block, in tokens"),
            "batch_size": (32, 32, "Fine-tuning batch size"),
            "pretrain_batch_size": (32, 16, "Pretraining blocks per batch"),
            "warmup_steps": (100, 5, "Fine-tuning linear warmup steps (then constant)"),
            "pretrain_warmup_steps": (200, 5, "Pretraining linear warmup steps (then constant)"),
            "scratch_learning_rate": (5e-4, 2e-3, "Peak fine-tuning learning rate from scratch"),
            "pretrained_learning_rate": (1e-4, 2e-3, "Peak fine-tuning learning rate after pretraining"),
            "pretrain_learning_rate": (5e-4, 2e-3, "Peak pretraining learning rate"),
            "pretrain_eval_every": (1000, 1_000_000, "Masked-LM evaluation every N pretraining steps"),
            "max_train_samples": (None, 2000, "Use the first N training phrases; None = all"),
            "max_eval_samples": (None, 200, "Evaluate on the first N validation phrases; None = all"),
            "max_test_samples": (None, 200, "Test on the first N test sentences; None = all 872"),
            "logging_steps": (50, 10, "Log the fine-tuning loss every N steps"),
            "reuse_pretraining": (False, False, "Reuse a finished pretraining made with the same settings"),
            "num_threads": (None, None, "torch threads; None = torch's choice"),
        },
    },
    "mask_predict": {
        "title": "Multi30k De->En: Mask-Predict's BLEU against its iterations T, and the autoregressive "
        "Transformer trained for the same wall time",
        "data": "multi30k",
        "entries": MASK_PREDICT_ENTRIES,
        "settings": {
            "budget_seconds": (270.0, 3.0, "Wall-clock training budget per model, in seconds"),
            "max_epochs": (20.0, 2.0, "Epoch cap per model (whichever of budget and epochs ends first)"),
            "vocab_size": (4000, 400, "Joint BPE vocabulary size"),
            "hidden_size": (128, 32, "Model width"),
            "num_layers": (2, 1, "Encoder (= decoder) layers"),
            "num_heads": (4, 2, "Attention heads"),
            "intermediate_size": (256, 64, "Feed-forward width"),
            "dropout": (0.1, 0.0, "Dropout"),
            "batch_size": (32, 32, "Training pairs per batch"),
            "learning_rate": (1.5e-3, 3e-3, "Peak AdamW learning rate"),
            "warmup_steps": (50, 5, "Linear warmup steps (then constant)"),
            "num_beams": (4, 2, "Beam size of the autoregressive beam-search decoding"),
            "length_beam": (3, 2, "Mask-Predict's length candidates per source (the paper's 5)"),
            "iterations": ((1, 2, 4, 10), (1, 2, 4, 10), "Mask-Predict iterations T to decode with"),
            "trace_iterations": (3, 3, "T of the traced sentence (3: t = 0, 1, 2)"),
            "generation_max_length": (64, 20, "Longest translation in tokens"),
            "max_length": (64, 48, "Longest source/target in training, in tokens"),
            "max_train_samples": (None, 500, "Use the first N training pairs; None = all 29,000"),
            "max_test_samples": (None, 24, "Score the first N test pairs; None = all 1,000"),
            "num_threads": (None, None, "torch threads; None = torch's choice"),
        },
    },
    "ablations": {
        "title": "GPT variants one component away from a baseline (Narang et al., 2021), several seeds",
        "data": SHAKESPEARE,
        "entries": {name: VARIANTS[name] for name in ABLATION_VARIANTS},
        "settings": _gpt_table(
            {
                "hidden_size": (128, 32),
                "num_hidden_layers": (4, 2),
                "num_attention_heads": (4, 4),
                "intermediate_size": (None, None),  # None: 4 x hidden_size
                "match_glu_params": (True, True),
                "block_size": (64, 32),
                "batch_size": (12, 4),
                "max_steps": (2000, 8),
                "max_train_seconds": (None, None),
                "learning_rate": (1e-3, 1e-3),
                "warmup_steps": (100, 2),
                "early_fraction": (0.25, 0.25),
                "eval_batches": (None, 2),
                "log_every": (
                    None,
                    1,
                ),  # None: at least 5 logs before the early evaluation, at most 10 steps apart
                "train_chars": (None, 20_000),
                "eval_chars": (None, 4_000),
                "seeds": ((0, 1, 2), (0,)),
                "jobs": (1, 2),
                "num_threads": (1, 1),
                "rerun": (False, False),
            }
        ),
    },
    "length_extrapolation": {
        "title": "train short, test long (Press et al., 2022): one GPT per position scheme, validation "
        "perplexity at 1x, 2x, 4x, 8x the training context",
        "data": SHAKESPEARE,
        "entries": SCHEMES,
        "settings": _gpt_table(
            {
                "hidden_size": (64, 32),
                "num_hidden_layers": (3, 2),
                "num_attention_heads": (4, 4),
                "block_size": (64, 16),
                "batch_size": (16, 4),
                "max_steps": (600, 6),
                "max_train_seconds": (None, None),
                "learning_rate": (2e-3, 1e-3),
                "warmup_steps": (50, 2),
                "eval_batches": (20, 2),
                "train_chars": (None, 8_000),
                "eval_chars": (40_000, 3_000),
                "xpos_scale_base": (512, 512),
                "jobs": (1, 2),
                "num_threads": (1, 1),
                "rerun": (False, False),
            }
        ),
    },
}
