#!/usr/bin/env python
"""The language-modeling leaderboard: character-level Tiny Shakespeare, one command.

    python -m benchmarks.leaderboard_lm                        # every entry, 180 s each: ~40 min on CPU
    python -m benchmarks.leaderboard_lm --entries lstm gpt_rope --budget_seconds 60
    python -m benchmarks.leaderboard_lm --smoke                # CI: tiny models and budget, a data slice

The lectures' claim, measured: n-gram < feed-forward < RNN < LSTM/GRU < Transformer in perplexity,
at an equal wall-clock budget, plus nanoGPT's published small CPU configuration run with hf_lm.

Data. nanoGPT's `shakespeare_char` split: the first 90% of the characters of `input.txt` train, the
last 10% validate (`split_text`). Both are written under `--output_dir/data/` and every run reads them
with `--sample_by document --eval_dataset` (each file one character stream). One character
tokenizer (`training.tokenizer.train_tokenizer(kind="char")`, built here once from the training
text with `min_frequency=1`, so a character seen once, like Shakespeare's single "$", is kept) is
passed to every run with `--tokenizer_name_or_path`, so all entries score the same symbols; the
script checks that every validation character is one in-vocabulary token. Its vocabulary is the 65
characters plus `<|endoftext|>` (BOS/EOS/UNK) and `<|pad|>`.

Entries. Each is one `python -m training.train` run in its own subprocess, one after the other:

- `ngram`: modified Kneser-Ney n-gram models of orders `--ngram_orders` (1..5); fitted by counting,
  not trained, so the budget does not apply: the table shows the best order and its fit time.
- `ffnn` (Bengio et al., 2003), `rnn` (Elman, tanh), `lstm`, `gru`, `gpt_learned`,
  `gpt_sinusoidal`, `gpt_rope`, `gpt_alibi`: all under the same `--budget_seconds` of training.
  Sizes (see `ENTRIES`): roughly comparable parameter counts, about 0.8M, the size of nanoGPT's
  small CPU model (4 layers x 128 dims), all with dropout 0, blocks of `block_size` characters and
  the same batch size, AdamW (beta2 0.99, weight decay 0.1), gradient clip 1.0.
- `nanogpt`: nanoGPT's published small CPU configuration (`config/train_shakespeare_char.py` with
  its CPU flags: 4 layers, 4 heads, 128 dims, context 64, batch 12, 2000 iterations, dropout 0, lr
  1e-3, 100 warmup steps, AdamW beta2 0.99, weight decay 0.1, `bias=False`, cosine decay to 1e-4),
  run for its 2000 iterations, not the budget, with nanoGPT's recipe options of the loop: windows at
  random offsets (`--sampling random_windows`) and the best evaluation's model kept (nanoGPT saves
  only improvements), as `training/configs/shakespeare_char_cpu.yaml` (but with nanoGPT's learned
  positions, not the config's rotary ones). Differences, all small:
  hf_lm's LayerNorms keep their bias (`bias=False` removes only the linear biases here: 1.2k
  parameters); the vocabulary has 3 special tokens more; nanoGPT estimates its loss on 200
  random validation batches, this script scores the whole split.

Budget and schedule. A time budget and a cosine schedule do not mix (the schedule needs the step
count up front), so by default (`--schedule cosine`) each budgeted entry is calibrated: a short probe
run (`Settings.probe_steps` steps, one evaluation) measures its step time and evaluation time, then the
real run gets `max_steps = 0.95 * (budget - evals * eval_time) / step_time` (the 5% margin absorbs
noise), `eval_every = max_steps / evals`, warmup `min(100, max_steps / 10)`, and
`--max_train_seconds budget` as the safety net (it stops at a step boundary, then evaluates). With
`--schedule constant` (the smoke default: it needs no probe runs) the runs use a constant rate after
warmup, evaluate every `Settings.constant_eval_every` steps and stop by the budget alone. The
budget counts the training loop of `training.train`, its periodic evaluations included (data
loading, model construction, the final evaluation and saving are outside it); the probe is not
counted.

Evaluation. During a run, the validation curve is measured on the first `curve_eval_blocks` blocks
(cheap, so the curve costs little budget). The leaderboard number is scored afterwards, for every
entry by this script in the same way (`score_validation`): the whole validation text cut into
non-overlapping blocks of the run's block size (the tail that does not fill a block is dropped),
each block's characters 2..T scored given the characters before them in the block: nanoGPT's and
`training.objectives.evaluation.evaluate`'s protocol. The validation text is tokenized without special tokens, so no
EOS/BOS is ever a target and one token is one character: the loss is exactly nats per character,
perplexity its exponential (bits per character = loss / ln 2). The three special tokens stay in the
softmax (they never occur in the text; a trained model gives them almost no mass).

Outputs under `--output_dir` (default `out/leaderboard_lm`): `results.md` (the table), `results.json`
(the same plus hardware, seed, budget, calibration and command lines), `val_loss.png` (bar chart),
`loss_curves.png` (validation loss against training time, from each run's `metrics.csv`), and the
runs themselves under `runs/` (`train.log`, `metrics.csv`, `final_metrics.json`, `final/`). The
committed full results live in `benchmarks/results/leaderboard_lm/` (see its README).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

import hf_lm  # noqa: F401  (registers the Auto classes)
from benchmarks.bench_common import (
    REPO_ROOT,
    available_cores,
    command_line,
    cpu_model,
    load_average,
    pyplot,
    versions,
)
from benchmarks.bench_common import markdown_table as render_table
from training.tokenizer import train_tokenizer

logger = logging.getLogger("leaderboard_lm")

DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
TRAIN_FRACTION = 0.9  # nanoGPT's shakespeare_char/prepare.py: data[:int(n * 0.9)] / data[int(n * 0.9):]
CALIBRATION_MARGIN = 0.95  # share of the predicted budget the calibrated step count aims for
MAX_EVAL_SHARE = 0.25  # periodic evaluations may use at most this share of the budget
NGRAM_FIT_LOG = re.compile(r"Fitted the order-(\d+) (\S+) n-gram model in ([0-9.]+) s")

# nanoGPT's published result for `train_shakespeare_char.py` with the small CPU flags (README):
# "--block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000
# --lr_decay_iters=2000 --dropout=0.0" -> val loss 1.88 in about 3 minutes on a MacBook CPU
NANOGPT_REFERENCE = {
    "name": "nanogpt_published",
    "label": "nanoGPT small CPU config (published)",
    "parameters": 0.80e6,  # nanoGPT prints "number of parameters: 0.80M" (position embeddings excluded)
    "steps": 2000,
    "tokens_seen": 2000 * 12 * 64,
    "train_seconds": 180.0,  # "~3 minutes"
    "val_loss": 1.88,
    "perplexity": math.exp(1.88),
    "source": "https://github.com/karpathy/nanoGPT (README, 'I only have a macbook')",
}


# ----------------------------------------------------------------------------------------------
# Entries
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One leaderboard row: a model family and the `training.train` flags that build it.

    Attributes:
        name: the key of `--entries`.
        label: the row's name in the table.
        kind: "ngram" (fitted, one run per order), "budget" (trained for the wall-clock budget) or
            "reference" (nanoGPT's published configuration, a fixed number of iterations).
        model_args: the architecture flags of the full-size model.
        smoke_model_args: the same for `--smoke` (tiny).
        learning_rate: peak AdamW learning rate.
    """

    name: str
    label: str
    kind: str
    model_args: tuple[str, ...] = ()
    smoke_model_args: tuple[str, ...] = ()
    learning_rate: float = 1e-3


def _flags(text: str, overrides: dict | None = None) -> tuple[str, ...]:
    """`training.train` flags from a whitespace-separated string, plus `--config_overrides` as JSON."""
    return tuple(text.split()) + (("--config_overrides", json.dumps(overrides)) if overrides else ())


def _gpt(position: str) -> Entry:
    # nanoGPT's small CPU model: 4 layers x 4 heads x 128 dims, MLP 512, tied embeddings
    arch = f"--arch transformer --position_embedding_type {position}"
    return Entry(
        name=f"gpt_{position}",
        label=f"GPT ({position} positions)",
        kind="budget",
        model_args=_flags(
            f"{arch} --num_hidden_layers 4 --num_attention_heads 4 --hidden_size 128 --intermediate_size 512"
        ),
        smoke_model_args=_flags(
            f"{arch} --num_hidden_layers 2 --num_attention_heads 2 --hidden_size 32 --intermediate_size 64"
        ),
        learning_rate=1e-3,  # nanoGPT's shakespeare_char rate
    )


def _rnn(name: str, label: str, cell: str, hidden: int, learning_rate: float) -> Entry:
    # two layers, embedding = state size, tied output layer (Press & Wolf, 2017)
    return Entry(
        name=name,
        label=label,
        kind="budget",
        model_args=_flags(f"--arch rnn --cell_type {cell} --num_hidden_layers 2 --hidden_size {hidden}"),
        smoke_model_args=_flags(f"--arch rnn --cell_type {cell} --num_hidden_layers 1 --hidden_size 32"),
        learning_rate=learning_rate,
    )


# Full sizes: about 0.8M parameters each (the size of nanoGPT's small CPU model), so the budget,
# not the capacity, separates the families. Rates: nanoGPT's 1e-3 for the Transformers, char-rnn's
# 2e-3 for the gated RNNs, 1e-3 for the Elman RNN (less stable) and the feed-forward model.
ENTRIES: dict[str, Entry] = {
    e.name: e
    for e in (
        Entry(name="ngram", label="n-gram (modified Kneser-Ney)", kind="ngram"),
        Entry(
            name="ffnn",
            label="Feed-forward (Bengio et al., 2003)",
            kind="budget",
            # a window of 16 characters (n = 17; --ngram_order stops at 5, so the window is set in
            # the config), 64-dim embeddings, 640 tanh units, direct connections: 0.77M parameters
            model_args=_flags(
                "--arch ffnn --ngram_order 5 --hidden_size 64 --intermediate_size 640 --no_tie_word_embeddings",
                {"context_size": 16},
            ),
            smoke_model_args=_flags(
                "--arch ffnn --ngram_order 5 --hidden_size 16 --intermediate_size 64 --no_tie_word_embeddings",
                {"context_size": 8},
            ),
            learning_rate=1e-3,
        ),
        _rnn("rnn", "Elman RNN (tanh)", "rnn_tanh", 448, 1e-3),  # 0.83M
        _rnn("lstm", "LSTM", "lstm", 224, 2e-3),  # 0.82M
        _rnn("gru", "GRU", "gru", 256, 2e-3),  # 0.81M
        _gpt("learned"),  # 0.82M
        _gpt("sinusoidal"),  # 0.80M, as RoPE and ALiBi
        _gpt("rope"),
        _gpt("alibi"),
        Entry(
            name="nanogpt",
            label="nanoGPT small CPU config, run with hf_lm",
            kind="reference",
            # nanoGPT's nn.GELU() is the exact GELU; bias=False drops the linear layers' biases
            model_args=_flags(
                "--arch transformer --position_embedding_type learned --num_hidden_layers 4 "
                "--num_attention_heads 4 --hidden_size 128 --intermediate_size 512 --hidden_act gelu",
                {"attention_bias": False, "mlp_bias": False},
            ),
            learning_rate=1e-3,
        ),
    )
}


@dataclass(frozen=True)
class Settings:
    """The run-wide sizes of one leaderboard (full or smoke)."""

    budget_seconds: float
    block_size: int = 128  # characters per training/evaluation block of the budgeted entries
    batch_size: int = 16  # blocks per update of the budgeted entries
    evals: int = 10  # periodic evaluations (validation-curve points) per budgeted run
    curve_eval_blocks: int = 128  # validation blocks of each curve point
    probe_steps: int = 30  # steps of the calibration probe
    constant_eval_every: int = 100  # --schedule constant (no probe): evaluate every N steps
    ngram_orders: tuple[int, ...] = (1, 2, 3, 4, 5)
    nanogpt_iters: int = 2000
    nanogpt_eval_every: int = 100
    max_chars: int | None = None  # a slice of the file (the first N characters), then split 90/10
    smoke: bool = False


def make_settings(args: argparse.Namespace) -> Settings:
    """The full or smoke sizes, with the command line's overrides."""
    if args.smoke:
        base = Settings(
            budget_seconds=2.0,
            block_size=32,
            batch_size=8,
            evals=2,
            curve_eval_blocks=16,
            probe_steps=6,
            constant_eval_every=50,
            ngram_orders=(1, 2, 3),
            nanogpt_iters=20,
            nanogpt_eval_every=10,
            max_chars=60_000,
            smoke=True,
        )
    else:
        base = Settings(budget_seconds=180.0)
    overrides = {
        "budget_seconds": args.budget_seconds,
        "ngram_orders": tuple(args.ngram_orders) if args.ngram_orders else None,
        "nanogpt_iters": args.nanogpt_iters,
        "max_chars": args.max_chars,
    }
    return Settings(**{**base.__dict__, **{k: v for k, v in overrides.items() if v is not None}})


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------


def split_text(text: str, train_fraction: float = TRAIN_FRACTION) -> tuple[str, str]:
    """nanoGPT's split by characters: the first `int(len(text) * train_fraction)` train, the rest validate.

    Raises:
        ValueError: an empty text, a fraction outside (0, 1), or a split leaving one side empty.
    """
    if not 0 < train_fraction < 1:
        raise ValueError(f"`train_fraction` must be in (0, 1), got {train_fraction!r}.")
    n = int(len(text) * train_fraction)
    if n == 0 or n == len(text):
        raise ValueError(f"A text of {len(text)} characters leaves an empty split at {train_fraction:.0%}.")
    return text[:n], text[n:]


def write_split(data_file: Path, out_dir: Path, max_chars: int | None = None) -> dict:
    """Read `data_file` (optionally its first `max_chars` characters), split it and write the halves.

    Files are read and written with `newline=""`, so the characters on disk are exactly the split.

    Returns:
        `{"train_file", "val_file", "characters", "train_characters", "val_characters"}`.
    """
    with open(data_file, encoding="utf-8", newline="") as f:
        text = f.read()
    if max_chars is not None:
        text = text[:max_chars]
    train, val = split_text(text)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"train_file": out_dir / "train.txt", "val_file": out_dir / "val.txt"}
    for key, part in (("train_file", train), ("val_file", val)):
        with open(paths[key], "w", encoding="utf-8", newline="") as f:
            f.write(part)
    return {
        "train_file": str(paths["train_file"]),
        "val_file": str(paths["val_file"]),
        "characters": len(text),
        "train_characters": len(train),
        "val_characters": len(val),
    }


def build_char_tokenizer(train_text: str, val_text: str, out_dir: Path, block_size: int):
    """Train the shared character tokenizer on the training text and check it covers the validation text.

    Raises:
        ValueError: a validation character outside the vocabulary, or not exactly one token.
    """
    # min_frequency=1: a character seen once in training (Shakespeare has one "$") is kept
    tokenizer = train_tokenizer(
        [train_text], kind="char", vocab_size=10_000, model_max_length=block_size, min_frequency=1
    )
    unknown = sorted(set(val_text) - set(tokenizer.get_vocab()))
    if unknown:
        raise ValueError(
            f"The training text lacks validation characters {unknown!r}: they would score as UNK."
        )
    ids = tokenizer(val_text, add_special_tokens=False)["input_ids"]
    if len(ids) != len(val_text) or tokenizer.unk_token_id in ids:
        raise ValueError(
            f"The character tokenizer gives {len(ids)} tokens for {len(val_text)} validation characters; "
            "the loss would not be per character."
        )
    tokenizer.save_pretrained(out_dir)
    return tokenizer


# ----------------------------------------------------------------------------------------------
# Runs
# ----------------------------------------------------------------------------------------------


def train_command(
    entry: Entry,
    settings: Settings,
    data: dict,
    tokenizer_dir: Path,
    output_dir: Path,
    seed: int,
    *,
    max_steps: int,
    eval_every: int,
    warmup_steps: int,
    lr_scheduler: str = "cosine",
    max_train_seconds: float | None = None,
    ngram_order: int | None = None,
) -> list[str]:
    """The `python -m training.train` argument list (without the interpreter) of one run."""
    reference = entry.kind == "reference"
    block, batch = (64, 12) if reference else (settings.block_size, settings.batch_size)
    model_args = entry.smoke_model_args if settings.smoke and entry.smoke_model_args else entry.model_args
    if entry.kind == "ngram":
        model_args = _flags(f"--arch ngram --ngram_order {ngram_order} --ngram_smoothing modified_kn")
    eval_batches = max(1, math.ceil(settings.curve_eval_blocks / batch))
    args = [
        "-m", "training.train",
        "--dataset", data["train_file"], "--eval_dataset", data["val_file"], "--sample_by", "document",
        "--tokenizer_kind", "char", "--tokenizer_name_or_path", str(tokenizer_dir),
        "--block_size", str(block), "--per_device_batch_size", str(batch),
        *model_args,
        "--hidden_dropout", "0", "--attention_dropout", "0",
        "--learning_rate", str(entry.learning_rate), "--adam_beta2", "0.99", "--weight_decay", "0.1",
        "--max_grad_norm", "1.0", "--lr_scheduler", lr_scheduler, "--warmup_steps", str(warmup_steps),
        "--max_steps", str(max_steps), "--eval_every", str(eval_every), "--eval_batches", str(eval_batches),
        "--log_every", "1", "--save_every", str(10**9), "--keep_last", "1",
        "--seed", str(seed), "--output_dir", str(output_dir), "--report_to", "csv",
    ]  # fmt: skip
    if max_train_seconds is not None:
        args += ["--max_train_seconds", str(max_train_seconds)]
    return args


def run_training(args: list[str], run_dir: Path, num_threads: int | None) -> dict:
    """Run `training.train` in a fresh subprocess (output to `run_dir/train.log`) and read its results.

    Returns:
        `{"returncode", "wall_seconds", "command", "final_metrics" (or None), "rows" (metrics.csv),
        "loadavg_before", "loadavg_after"}`.
    """
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a stale folder's checkpoints or final/ must not mix in
    run_dir.mkdir(parents=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if num_threads is not None:
        env.update(OMP_NUM_THREADS=str(num_threads), MKL_NUM_THREADS=str(num_threads))
    command = [sys.executable, *args]
    before = load_average()
    start = time.perf_counter()
    with open(run_dir / "train.log", "w") as log:
        returncode = subprocess.run(
            command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        ).returncode
    wall = time.perf_counter() - start
    final = run_dir / "final_metrics.json"
    return {
        "returncode": returncode,
        "wall_seconds": round(wall, 2),
        "command": " ".join(["python", *args]),
        "final_metrics": json.loads(final.read_text()) if returncode == 0 and final.is_file() else None,
        "rows": read_metrics(run_dir / "metrics.csv"),
        "loadavg_before": before,
        "loadavg_after": load_average(),
    }


def read_metrics(path: Path) -> list[dict]:
    """The rows of a run's `metrics.csv`, numbers parsed (empty cells are None)."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [
            {k: (float(v) if v not in ("", None) else None) for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


def step_rows(rows: list[dict]) -> list[dict]:
    """The per-step log rows (training loss and time), one per step, in step order."""
    seen, out = set(), []
    for row in rows:
        if row.get("loss") is not None and row.get("seconds") is not None and row["step"] not in seen:
            seen.add(row["step"])
            out.append(row)
    return sorted(out, key=lambda r: r["step"])


def probe_timings(rows: list[dict], final_seconds: float, skip: int = 2) -> dict:
    """Step and evaluation time of a probe run logged every step and evaluated once, at its last step.

    The step time is the mean over the steps after the first `skip` (which pay one-off costs); the
    evaluation time is the time between the last step's log row and the end of the run (that
    evaluation, plus a checkpoint save: a slight overestimate, on the safe side).

    Raises:
        ValueError: fewer than `skip + 2` logged steps.
    """
    logged = step_rows(rows)
    if len(logged) < skip + 2:
        raise ValueError(f"The probe logged {len(logged)} steps; calibration needs at least {skip + 2}.")
    first, last = logged[skip], logged[-1]
    step_s = (last["seconds"] - first["seconds"]) / (last["step"] - first["step"])
    return {"step_seconds": step_s, "eval_seconds": max(0.0, final_seconds - last["seconds"])}


def calibrate(
    budget_s: float, step_s: float, eval_s: float, evals: int, margin: float = CALIBRATION_MARGIN
) -> dict:
    """The step count that fills `budget_s` with training steps and `evals` evaluations.

    The evaluations are thinned so that they take at most `MAX_EVAL_SHARE` of the budget.

    Returns:
        `{"max_steps", "eval_every", "warmup_steps", "evals"}`.

    Raises:
        ValueError: a non-positive budget or step time.
    """
    if not budget_s > 0 or not step_s > 0:
        raise ValueError(f"Need a positive budget and step time, got {budget_s!r} s and {step_s!r} s.")
    if eval_s > 0:
        evals = min(evals, max(1, int(MAX_EVAL_SHARE * budget_s / eval_s)))
    max_steps = max(1, int(margin * max(0.0, budget_s - evals * eval_s) / step_s))
    return {
        "max_steps": max_steps,
        "eval_every": max(1, math.ceil(max_steps / evals)),
        "warmup_steps": min(100, max_steps // 10),
        "evals": evals,
    }


def train_seconds(rows: list[dict]) -> float | None:
    """The training loop's time from the per-step rows: first to last step, plus one mean step."""
    logged = step_rows(rows)
    if len(logged) < 2:
        return None
    span = logged[-1]["seconds"] - logged[0]["seconds"]
    return span + span / (logged[-1]["step"] - logged[0]["step"])


def curve(rows: list[dict]) -> dict:
    """The validation-loss curve of a run: steps, training seconds (from the first step) and losses."""
    logged = step_rows(rows)
    if not logged:
        return {"steps": [], "seconds": [], "eval_loss": []}
    mean_step = train_seconds(rows) / len(logged) if len(logged) > 1 else 0.0
    origin = logged[0]["seconds"] - mean_step  # about when the first step began
    points = {}
    for row in rows:  # the last row of a step wins (a budget stop re-evaluates after the loop)
        if row.get("eval_loss") is not None:
            points[int(row["step"])] = (row["seconds"], row["eval_loss"])
    steps = sorted(points)
    return {
        "steps": steps,
        "seconds": [None if points[s][0] is None else round(points[s][0] - origin, 2) for s in steps],
        "eval_loss": [points[s][1] for s in steps],
    }


# ----------------------------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def score_ids(model, ids: torch.Tensor, block_size: int, batch_size: int = 64) -> dict:
    """Mean next-token loss over `ids` cut into non-overlapping blocks of `block_size`.

    The tail that does not fill a block is dropped; in each block tokens 2..T are scored given the
    tokens before them in the block (token 1 is context only), as `training.objectives.evaluation.evaluate` does.

    Returns:
        `{"loss": nats per scored token, "scored_tokens": N * (T - 1), "blocks": N}`.
    """
    n_blocks = len(ids) // block_size
    if n_blocks == 0:
        raise ValueError(f"{len(ids)} validation tokens are fewer than one block of {block_size}.")
    blocks = ids[: n_blocks * block_size].view(n_blocks, block_size)  # (N, T)
    model.eval()
    total, count = 0.0, 0
    for start in range(0, n_blocks, batch_size):
        batch = blocks[start : start + batch_size]  # (b, T)
        logits = model(input_ids=batch).logits[:, :-1].float()  # (b, T - 1, V)
        targets = batch[:, 1:]  # (b, T - 1)
        total += F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"
        ).item()
        count += targets.numel()
    return {"loss": total / count, "scored_tokens": count, "blocks": n_blocks}


def score_validation(model_dir: Path, val_ids: torch.Tensor, block_size: int) -> dict:
    """Load a run's `final/` model and score the whole validation text (`score_ids`).

    Returns:
        `score_ids`'s result plus "perplexity", "bits_per_character" and "parameters" (unique
        trainable tensors' elements; None for an n-gram model, which stores counts) and "ngrams".
    """
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    result = score_ids(model, val_ids, block_size)
    loss = result["loss"]
    num_ngrams = getattr(model.config, "num_ngrams", None)
    parameters = sum(p.numel() for p in model.parameters())
    return {
        **result,
        "perplexity": math.exp(loss),
        "bits_per_character": loss / math.log(2),
        "parameters": None if num_ngrams is not None else parameters,
        "ngrams": sum(num_ngrams) if num_ngrams is not None else None,
    }


# ----------------------------------------------------------------------------------------------
# The leaderboard
# ----------------------------------------------------------------------------------------------


@dataclass
class Context:
    """What every run of one leaderboard shares."""

    settings: Settings
    data: dict
    tokenizer_dir: Path
    runs_dir: Path
    val_ids: torch.Tensor
    seed: int
    schedule: str
    num_threads: int | None
    failures: list[str] = field(default_factory=list)


def _failed(ctx: Context, entry: Entry, run: dict, run_dir: Path, what: str) -> dict:
    tail = (
        (run_dir / "train.log").read_text(errors="replace")[-3000:]
        if (run_dir / "train.log").is_file()
        else ""
    )
    logger.error("%s: the %s run failed (exit %s); log tail:\n%s", entry.name, what, run["returncode"], tail)
    ctx.failures.append(entry.name)
    return {
        "name": entry.name,
        "label": entry.label,
        "kind": entry.kind,
        "error": f"{what} run exited with {run['returncode']}; see {run_dir / 'train.log'}",
        "command": run["command"],
    }


def _trained_row(ctx: Context, entry: Entry, run: dict, run_dir: Path, block_size: int) -> dict:
    start = time.perf_counter()
    scored = score_validation(run_dir / "final", ctx.val_ids, block_size)
    logger.info("%s: scored the validation text in %.1f s", entry.name, time.perf_counter() - start)
    final = run["final_metrics"]
    return {
        "name": entry.name,
        "label": entry.label,
        "kind": entry.kind,
        "parameters": scored["parameters"],
        "steps": final["step"],
        "tokens_seen": final["tokens_seen"],
        "train_seconds": train_seconds(run["rows"]),
        "wall_seconds": run["wall_seconds"],
        "val_loss": scored["loss"],
        "perplexity": scored["perplexity"],
        "bits_per_character": scored["bits_per_character"],
        "scored_characters": scored["scored_tokens"],
        "eval_block_size": block_size,
        "learning_rate": entry.learning_rate,
        "curve_eval_loss_last": final.get("eval_loss"),  # training.train's own, on the curve subset
        "curve": curve(run["rows"]),
        "command": run["command"],
        "loadavg_before": run["loadavg_before"],
        "loadavg_after": run["loadavg_after"],
    }


def run_ngram(ctx: Context, entry: Entry) -> dict:
    """Fit every order, score each on the validation text; the row is the best order."""
    orders = []
    for order in ctx.settings.ngram_orders:
        run_dir = ctx.runs_dir / f"ngram_order{order}"
        args = train_command(
            entry, ctx.settings, ctx.data, ctx.tokenizer_dir, run_dir, ctx.seed,
            max_steps=1, eval_every=1, warmup_steps=0, ngram_order=order,
        )  # fmt: skip
        logger.info("ngram: fitting order %d", order)
        run = run_training(args, run_dir, ctx.num_threads)
        if run["returncode"] != 0:
            return _failed(ctx, entry, run, run_dir, f"order-{order} fit")
        log = (run_dir / "train.log").read_text(errors="replace")
        fitted = NGRAM_FIT_LOG.search(log)
        scored = score_validation(run_dir / "final", ctx.val_ids, ctx.settings.block_size)
        orders.append(
            {
                "order": order,
                "val_loss": scored["loss"],
                "perplexity": scored["perplexity"],
                "bits_per_character": scored["bits_per_character"],
                "ngrams": scored["ngrams"],
                "fit_seconds": float(fitted.group(3)) if fitted else None,
                "wall_seconds": run["wall_seconds"],
                "command": run["command"],
            }
        )
        logger.info("ngram order %d: val loss %.4f nats/char", order, scored["loss"])
    best = min(orders, key=lambda o: o["val_loss"])
    return {
        "name": entry.name,
        "label": f"{entry.label}, order {best['order']}",
        "kind": entry.kind,
        "parameters": None,
        "ngrams": best["ngrams"],
        "best_order": best["order"],
        "steps": None,
        "tokens_seen": ctx.data["train_characters"],  # counted once
        "train_seconds": best["fit_seconds"],  # the fit (counting) time
        "wall_seconds": best["wall_seconds"],
        "val_loss": best["val_loss"],
        "perplexity": best["perplexity"],
        "bits_per_character": best["bits_per_character"],
        "eval_block_size": ctx.settings.block_size,
        "orders": orders,
        "command": best["command"],
    }


def run_budget(ctx: Context, entry: Entry) -> dict:
    """Probe and calibrate (cosine) or not (constant), then train for the budget; score the final model."""
    if ctx.schedule == "constant":
        return run_budget_constant(ctx, entry)
    s = ctx.settings
    probe_dir = ctx.runs_dir / f"{entry.name}_probe"
    probe_args = train_command(
        entry, s, ctx.data, ctx.tokenizer_dir, probe_dir, ctx.seed,
        # the rate only ramps up (a gentle start: the probe measures time, not learning)
        max_steps=s.probe_steps, eval_every=s.probe_steps, warmup_steps=s.probe_steps, lr_scheduler="constant",
    )  # fmt: skip
    logger.info("%s: probe run of %d steps", entry.name, s.probe_steps)
    probe = run_training(probe_args, probe_dir, ctx.num_threads)
    if probe["returncode"] != 0:
        return _failed(ctx, entry, probe, probe_dir, "probe")
    timings = probe_timings(probe["rows"], probe["final_metrics"]["seconds"])
    plan = calibrate(s.budget_seconds, timings["step_seconds"], timings["eval_seconds"], s.evals)
    logger.info(
        "%s: %.3f s/step, %.2f s/evaluation -> max_steps %d, eval_every %d, warmup %d",
        entry.name, timings["step_seconds"], timings["eval_seconds"],
        plan["max_steps"], plan["eval_every"], plan["warmup_steps"],
    )  # fmt: skip
    run_dir = ctx.runs_dir / entry.name
    args = train_command(
        entry, s, ctx.data, ctx.tokenizer_dir, run_dir, ctx.seed,
        max_steps=plan["max_steps"], eval_every=plan["eval_every"], warmup_steps=plan["warmup_steps"],
        lr_scheduler="cosine", max_train_seconds=s.budget_seconds,
    )  # fmt: skip
    run = run_training(args, run_dir, ctx.num_threads)
    if run["returncode"] != 0:
        return _failed(ctx, entry, run, run_dir, "budget")
    row = _trained_row(ctx, entry, run, run_dir, s.block_size)
    row["calibration"] = {
        **{k: round(v, 4) for k, v in timings.items()},
        **plan,
        "schedule": "cosine",
        "probe_command": probe["command"],
        "probe_wall_seconds": probe["wall_seconds"],
        # the safety net fired: the schedule was cut before its end (the calibration overshot)
        "stopped_by_budget": row["steps"] < plan["max_steps"],
        "budget_used": _share(row["train_seconds"], s.budget_seconds),
    }
    return row


def run_budget_constant(ctx: Context, entry: Entry) -> dict:
    """A constant rate after warmup, stopped by the budget alone: no probe is needed."""
    s = ctx.settings
    run_dir = ctx.runs_dir / entry.name
    warmup = 10 if s.smoke else 100
    args = train_command(
        entry, s, ctx.data, ctx.tokenizer_dir, run_dir, ctx.seed,
        max_steps=10**9, eval_every=s.constant_eval_every, warmup_steps=warmup,
        lr_scheduler="constant", max_train_seconds=s.budget_seconds,
    )  # fmt: skip
    logger.info("%s: constant schedule for %.0f s", entry.name, s.budget_seconds)
    run = run_training(args, run_dir, ctx.num_threads)
    if run["returncode"] != 0:
        return _failed(ctx, entry, run, run_dir, "budget")
    row = _trained_row(ctx, entry, run, run_dir, s.block_size)
    row["calibration"] = {
        "schedule": "constant",
        "warmup_steps": warmup,
        "eval_every": s.constant_eval_every,
        "stopped_by_budget": True,
        "budget_used": _share(row["train_seconds"], s.budget_seconds),
    }
    return row


def run_reference(ctx: Context, entry: Entry) -> dict:
    """nanoGPT's small CPU configuration: a fixed number of iterations, no budget."""
    s = ctx.settings
    run_dir = ctx.runs_dir / entry.name
    args = train_command(
        entry, s, ctx.data, ctx.tokenizer_dir, run_dir, ctx.seed,
        max_steps=s.nanogpt_iters, eval_every=s.nanogpt_eval_every,
        warmup_steps=min(100, s.nanogpt_iters // 10),
    )  # fmt: skip
    # nanoGPT's recipe (as training/configs/shakespeare_char_cpu.yaml, positions aside): its get_batch windows, its
    # cosine ending at a tenth of the peak, and the best evaluation's model kept (it saves only
    # when its validation estimate improves)
    args += ["--sampling", "random_windows", "--min_lr_rate", "0.1"]
    args += ["--load_best_model_at_end", "true", "--metric_for_best_model", "eval_loss"]
    logger.info("%s: %d iterations", entry.name, s.nanogpt_iters)
    run = run_training(args, run_dir, ctx.num_threads)
    if run["returncode"] != 0:
        return _failed(ctx, entry, run, run_dir, "reference")
    return _trained_row(ctx, entry, run, run_dir, 64)


def _share(seconds: float | None, budget: float) -> float | None:
    """The share of the budget a run's training loop used (a calibration that undershot shows < 1)."""
    return None if seconds is None else round(seconds / budget, 3)


RUNNERS = {"ngram": run_ngram, "budget": run_budget, "reference": run_reference}


# ----------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------


def hardware(num_threads: int | None) -> dict:
    """CPU, cores, the torch threads a run uses, accelerator and library versions."""
    env = dict(os.environ)
    if num_threads is not None:
        env.update(OMP_NUM_THREADS=str(num_threads))
    # what a fresh `training.train` process gets (this process's setting may differ)
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        env=env,
        capture_output=True,
        text=True,
    )
    return {
        "cpu_model": cpu_model(),
        "cores_available": available_cores(),
        "torch_threads_per_run": int(probe.stdout.strip()) if probe.returncode == 0 else None,
        "device": f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "cpu",
        "platform": platform.platform(),
        "python": platform.python_version(),
        **versions("torch", "transformers", "accelerate", "datasets"),
        "loadavg_start": load_average(),
    }


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _params(row: dict) -> str:
    if row.get("ngrams") is not None:
        return f"{row['ngrams']:,} n-grams"
    return _fmt(row.get("parameters"), ",")


def markdown_table(rows: list[dict]) -> str:
    """The leaderboard table: one line per entry, then nanoGPT's published reference row."""
    header = [
        "model",
        "parameters",
        "steps",
        "tokens seen",
        "train time (s)",
        "val loss (nats/char)",
        "perplexity",
    ]
    body = []
    for row in rows:
        if "error" in row:
            body.append([row["label"], f"failed: {row['error']}", "", "", "", "", ""])
            continue
        time_s = _fmt(row.get("train_seconds"), ".1f")
        if row["kind"] == "ngram":
            time_s += " (fit)"
        body.append(
            [
                row["label"], _params(row), _fmt(row.get("steps"), ","), _fmt(row.get("tokens_seen"), ","), time_s,
                f"{row['val_loss']:.4f}", f"{row['perplexity']:.2f}",
            ]
        )  # fmt: skip
    ref = NANOGPT_REFERENCE
    body.append(
        [
            ref["label"], f"~{ref['parameters'] / 1e6:.2f}M", f"{ref['steps']:,}", f"{ref['tokens_seen']:,}",
            f"~{ref['train_seconds']:.0f}", f"{ref['val_loss']:.2f}", f"{ref['perplexity']:.2f}",
        ]
    )  # fmt: skip
    return render_table(header, body, align="lrrrrrr")


def ngram_table(row: dict) -> str:
    header = ["order", "n-grams", "fit time (s)", "val loss (nats/char)", "perplexity"]
    body = [
        [
            str(o["order"]), _fmt(o["ngrams"], ","), _fmt(o["fit_seconds"], ".1f"), f"{o['val_loss']:.4f}",
            f"{o['perplexity']:.2f}",
        ]
        for o in row["orders"]
    ]  # fmt: skip
    return render_table(header, body, align="rrrrr")


def results_markdown(report: dict) -> str:
    """`results.md`: settings, the table, the n-gram orders and the protocol notes."""
    s, hw, data = report["settings"], report["hardware"], report["data"]
    rows = report["entries"]
    parts = [
        "# Language-modeling leaderboard: Tiny Shakespeare, character level",
        "",
        f"Generated {report['created']} by `{report['command']}`"
        + (" (**smoke run**: tiny models and budget, a slice of the data)" if s["smoke"] else "")
        + ".",
        "",
        f"- Data: `{data['source']}` ({data['characters']:,} characters), nanoGPT's split: first "
        f"{data['train_characters']:,} train, last {data['val_characters']:,} validate; one character vocabulary of "
        f"{data['vocab_size']} tokens (the characters plus `<|endoftext|>` and `<|pad|>`).",
        f"- Budget: {s['budget_seconds']:g} s of training per neural entry (the nanoGPT row runs its "
        f"{s['nanogpt_iters']:,} iterations; the n-gram is fitted); schedule: {report['schedule']}"
        + (" (step count calibrated by a probe run)" if report["schedule"] == "cosine" else "")
        + f"; seed {report['seed']}.",
        f"- Hardware: {hw['cpu_model']}, {hw['cores_available']} cores, torch threads per run: {hw['torch_threads_per_run']}"
        f", {hw['device']}; torch {hw['torch']}, transformers {hw['transformers']}.",
        *[f"- {note}" for note in report.get("notes", [])],  # e.g. a row re-run later, and why
        "",
        markdown_table(rows),
        "",
        "Validation loss: the whole validation text in non-overlapping blocks (the budgeted entries and the "
        f"n-gram: {s['block_size']} characters; the nanoGPT rows: 64), every character of a block but its first "
        "scored given the ones before it in the block; no special token is ever a target, so the loss is nats "
        "per character and the perplexity its exponential. Train time: the training loop, its periodic "
        "validation-curve evaluations included (for the n-gram: the counting time of the best order). "
        "The published nanoGPT row is quoted, not run. Its hf_lm run uses nanoGPT's recipe (windows at random "
        "offsets, the cosine ending at 1e-4, the best evaluation's model kept) and differs slightly: hf_lm's "
        "LayerNorms keep their bias, the vocabulary has 3 special tokens more, and nanoGPT estimates its loss on "
        "200 random validation batches.",
    ]
    for row in rows:
        if row.get("kind") == "ngram" and "orders" in row:
            parts += ["", f"## n-gram by order (best: {row['best_order']})", "", ngram_table(row)]
    parts += ["", "![validation loss](val_loss.png)", "", "![validation curves](loss_curves.png)", ""]
    return "\n".join(parts)


def plot_val_loss(rows: list[dict], path: Path) -> None:
    """A bar per entry (validation nats/char), the published nanoGPT loss as a dashed line."""
    plt = pyplot()
    ok = [r for r in rows if "error" not in r]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(ok) + 2), 4.5))
    bars = ax.bar(range(len(ok)), [r["val_loss"] for r in ok], color="tab:blue")
    for bar, row in zip(bars, ok):
        ax.annotate(f"{row['val_loss']:.3f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)  # fmt: skip
    ax.axhline(
        NANOGPT_REFERENCE["val_loss"], color="tab:red", linestyle="--", label="nanoGPT published (1.88)"
    )
    ax.set_xticks(range(len(ok)), [r["label"] for r in ok], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("validation loss (nats/char)")
    ax.set_title("Tiny Shakespeare (char): validation loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_curves(rows: list[dict], path: Path) -> None:
    """Validation loss (curve subset) against training seconds for every trained entry; the n-gram flat."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for row in rows:
        if "error" in row:
            continue
        if row["kind"] == "ngram":
            ax.axhline(row["val_loss"], color="gray", linestyle=":", label=row["label"])
            continue
        c = row["curve"]
        points = [(t, v) for t, v in zip(c["seconds"], c["eval_loss"]) if t is not None]
        if points:
            ax.plot(*zip(*points), marker=".", label=row["label"])
    ax.axhline(
        NANOGPT_REFERENCE["val_loss"], color="tab:red", linestyle="--", label="nanoGPT published (1.88)"
    )
    ax.set_xlabel("training time (s)")
    ax.set_ylabel("validation loss (nats/char, curve subset)")
    ax.set_title("Tiny Shakespeare (char): validation loss during training")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Tiny Shakespeare character-level LM leaderboard: n-gram, feed-forward, RNN, LSTM, GRU and "
        "GPT (four position schemes) under one wall-clock budget, plus nanoGPT's small CPU configuration.",
    )
    parser.add_argument(
        "--data_file",
        type=Path,
        default=DEFAULT_DATA,
        help="Tiny Shakespeare's input.txt (default: ../shared/data/tinyshakespeare/input.txt).",
    )
    parser.add_argument(
        "--output_dir",
        type=Path,
        default=REPO_ROOT / "out" / "leaderboard_lm",
        help="Where the split, tokenizer, runs, tables and plots go (default: out/leaderboard_lm).",
    )
    parser.add_argument(
        "--entries",
        nargs="+",
        choices=list(ENTRIES),
        default=list(ENTRIES),
        help="The entries to run, in order (default: all).",
    )
    parser.add_argument(
        "--budget_seconds",
        type=float,
        default=None,
        help="Training seconds per budgeted entry (default: 180; smoke: 2).",
    )
    parser.add_argument(
        "--schedule",
        choices=("cosine", "constant"),
        default=None,
        help="cosine (default): a probe run calibrates max_steps to the budget; constant (the smoke default: no "
        "probe runs): a constant rate after warmup, stopped by the budget.",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="Seed of every run: init and data order (default: 0)."
    )
    parser.add_argument(
        "--ngram_orders",
        type=int,
        nargs="+",
        default=None,
        help="n-gram orders to fit, within 1..5 (default: 1-5; smoke: 1-3).",
    )
    parser.add_argument(
        "--nanogpt_iters",
        type=int,
        default=None,
        help="Iterations of the nanoGPT row (default: 2000; smoke: 20).",
    )
    parser.add_argument(
        "--max_chars",
        type=int,
        default=None,
        help="Use the first N characters of the file, then split (default: all; smoke: 60,000).",
    )
    parser.add_argument(
        "--num_threads",
        type=int,
        default=None,
        help="OMP_NUM_THREADS of every run (default: torch's choice).",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CI size: tiny models, a 2 s budget, n-gram orders 1-3, 20 nanoGPT iterations, the first 60,000 "
        "characters, and the constant schedule unless --schedule is given.",
    )
    args = parser.parse_args(argv)
    if args.schedule is None:
        args.schedule = "constant" if args.smoke else "cosine"
    if args.ngram_orders and not all(1 <= n <= 5 for n in args.ngram_orders):
        parser.error(f"--ngram_orders must be in 1..5, got {args.ngram_orders}.")
    if args.budget_seconds is not None and not args.budget_seconds > 0:
        parser.error(f"--budget_seconds must be > 0, got {args.budget_seconds}.")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    args = parse_args(argv)
    settings = make_settings(args)
    if not args.data_file.is_file():
        logger.error("No data file %s (pass --data_file).", args.data_file)
        return 2
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    data = write_split(args.data_file, out / "data", settings.max_chars)
    train_text = Path(data["train_file"]).read_text(encoding="utf-8")
    val_text = Path(data["val_file"]).read_text(encoding="utf-8")
    tokenizer = build_char_tokenizer(train_text, val_text, out / "tokenizer", settings.block_size)
    data.update(source=str(args.data_file), vocab_size=len(tokenizer))
    ctx = Context(
        settings=settings,
        data=data,
        tokenizer_dir=out / "tokenizer",
        runs_dir=out / "runs",
        val_ids=torch.tensor(tokenizer(val_text, add_special_tokens=False)["input_ids"], dtype=torch.long),
        seed=args.seed,
        schedule=args.schedule,
        num_threads=args.num_threads,
    )
    logger.info(
        "%d train / %d validation characters, %d-token vocabulary; budget %.0f s; entries %s",
        data["train_characters"], data["val_characters"], len(tokenizer), settings.budget_seconds, args.entries,
    )  # fmt: skip
    report = {
        "benchmark": "leaderboard_lm",
        "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": command_line(__spec__.name, argv),
        "seed": args.seed,
        "budget_seconds": settings.budget_seconds,
        "schedule": args.schedule,
        "settings": {**settings.__dict__, "ngram_orders": list(settings.ngram_orders)},
        "hardware": hardware(args.num_threads),
        "data": data,
        "entries": [],
        "reference": [NANOGPT_REFERENCE],
    }
    for name in args.entries:
        entry = ENTRIES[name]
        start = time.perf_counter()
        try:
            row = RUNNERS[entry.kind](ctx, entry)
        except Exception as error:  # one broken entry must not cost the others' results
            logger.exception("%s failed", name)
            ctx.failures.append(name)
            row = {"name": name, "label": entry.label, "kind": entry.kind, "error": repr(error)}
        report["entries"].append(row)
        if "error" not in row:
            logger.info(
                "%s: val loss %.4f nats/char (perplexity %.2f) in %.0f s", name, row["val_loss"], row["perplexity"],
                time.perf_counter() - start,
            )  # fmt: skip
    report["hardware"]["loadavg_end"] = load_average()
    (out / "results.json").write_text(json.dumps(report, indent=2))
    (out / "results.md").write_text(results_markdown(report))
    plot_val_loss(report["entries"], out / "val_loss.png")
    plot_curves(report["entries"], out / "loss_curves.png")
    sys.stdout.write(markdown_table(report["entries"]) + "\n")
    logger.info("Wrote %s/results.{md,json}, val_loss.png, loss_curves.png", out)
    if ctx.failures:
        logger.error("Failed entries: %s", ctx.failures)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
