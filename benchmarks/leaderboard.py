"""The budgeted leaderboards: train each entry of a board under a budget, score it, write its results.

    python -m benchmarks.leaderboard lm                                  # every entry, 180 s each
    python -m benchmarks.leaderboard lm --entries lstm,gpt_rope --budget_seconds 60
    python -m benchmarks.leaderboard translation --preset gpu --device cuda
    python -m benchmarks.leaderboard sst2 --entries scratch,mlm,electra
    python -m benchmarks.leaderboard mask_predict
    python -m benchmarks.leaderboard ablations --entries swiglu,positions --seeds 0,1
    python -m benchmarks.leaderboard length_extrapolation --entries alibi,xpos
    python -m benchmarks.leaderboard ablations --list                   # a board's entries
    python -m benchmarks.leaderboard lm --smoke                          # tiny models, data and budget

The boards, their entries and settings are data (`benchmarks/leaderboard.yaml`); every setting
is an option (`--budget_seconds 60`) over the preset (`full`, `smoke` with `--smoke`, `gpu` for the
translation board on a GPU). `--data` defaults to the board's folder under `../shared/data`.

- `lm`: character-level Tiny Shakespeare (nanoGPT's 90/10 split, one character tokenizer): the
  n-gram fitted per order, the neural families under one wall-clock budget (a probe run calibrates
  the cosine schedule's step count), nanoGPT's small CPU configuration for its 2,000 iterations;
  every model scored afterwards on the whole validation text, in nats per character.
- `translation`: Multi30k De->En, each family from scratch (`training.finetune_translation`, one
  joint BPE tokenizer) until the budget or the epoch cap; sacrebleu test BLEU, greedy and beam.
- `sst2`: one seeded BERT-style encoder fine-tuned from scratch, after MLM pretraining or as an
  ELECTRA discriminator (the same pretraining time), under one budget; dev and test accuracy.
- `mask_predict`: the autoregressive Transformer against the conditional masked LM (Ghazvininejad
  et al., 2019) trained for the same time; BLEU per number of iterations T, one traced sentence.
- `ablations`: a GPT-2-style baseline and variants one component away (Narang et al., 2021;
  `--entries` takes components too), every seed; a run already done with the same command is reused.
- `length_extrapolation`: one GPT per position scheme trained at context L, perplexity at 1-8x L.

Outputs under `--output_dir` (default `out/<board>`): `results.json`, `README.md` (its rendering,
`markdown`), the plots, and the runs. The committed results live in `benchmarks/results/`.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import functools
import json
import logging
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import yaml

from benchmarks.measure import (
    REPO_ROOT,
    available_cores,
    comma_list,
    cpu_model,
    git_revision,
    load_average,
    resolve_device,
    versions,
)
from benchmarks.render import bar_chart, fmt, markdown_table, millions, pyplot, write_results

logger = logging.getLogger("benchmarks.leaderboard")

SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
TRAIN_FRACTION = 0.9  # nanoGPT's shakespeare_char/prepare.py: data[:int(n * 0.9)] / data[int(n * 0.9):]
CALIBRATION_MARGIN = 0.95  # share of the predicted budget the calibrated step count aims for
MAX_EVAL_SHARE = 0.25  # periodic evaluations may use at most this share of the budget
NEVER = str(10**9)  # a step count no run reaches (`--save_every`, open-ended `--max_steps`)
NGRAM_FIT_LOG = re.compile(r"Fitted the order-\d+ \S+ n-gram model in ([0-9.]+) s")
MULTIPLIERS = (1, 2, 4, 8)  # length_extrapolation's evaluation lengths, in training contexts
BENTREVETT = "https://github.com/bentrevett/pytorch-seq2seq"
ENTRY_FILE = Path(__file__).with_name("leaderboard.yaml")  # the boards as data


def load_boards(path: Path = ENTRY_FILE) -> dict:
    """The boards of `leaderboard.yaml`: settings as `(full, smoke, help)` (lists as tuples), entries as
    namespaces with the board's `entry_defaults`, an LM entry's model flags as `training.train` takes
    them, length_extrapolation's schemes as the ablation variants they name."""
    boards = yaml.safe_load(path.read_text())
    variant_defaults = boards["ablations"]["entry_defaults"]
    for board in boards.values():
        rows = board["settings"].items()
        board["settings"] = {
            k: (*(tuple(v) if isinstance(v, list) else v for v in row[:2]), row[2]) for k, row in rows
        }
        defaults = board.pop("entry_defaults", {})
        board["entries"] = {
            name: SimpleNamespace(**{**defaults, **e}) for name, e in board["entries"].items()
        }
    for e in boards["lm"]["entries"].values():
        e.model_args = _flags(e.model_args, getattr(e, "config_overrides", None))
        e.smoke_model_args = _flags(e.smoke_model_args, getattr(e, "smoke_config_overrides", None))
    variants = boards["ablations"]["entries"]
    for name, e in boards["length_extrapolation"]["entries"].items():
        known = variants.get(e.variant)
        boards["length_extrapolation"]["entries"][name] = known or SimpleNamespace(
            **{**variant_defaults, **vars(e)}
        )
    return boards


def _flags(text: str, overrides: dict | None) -> tuple[str, ...]:
    """`training.train` flags from a whitespace-separated string, plus `--config_overrides` as JSON."""
    return tuple(text.split()) + (("--config_overrides", json.dumps(overrides)) if overrides else ())


BOARDS = load_boards()
# every GPT variant: the ablations' and length_extrapolation's xPos
VARIANTS = {**BOARDS["ablations"]["entries"], "xpos": BOARDS["length_extrapolation"]["entries"]["xpos"]}
BASELINE = BOARDS["ablations"]["baseline_fields"]
NANOGPT_REFERENCE = {
    **BOARDS["lm"]["references"][0],
    "perplexity": math.exp(BOARDS["lm"]["references"][0]["val_loss"]),
}

# ----------------------------------------------------------------------------------------------
# The command line: a board, its entries, its settings
# ----------------------------------------------------------------------------------------------


def setting_value(text: str, full, smoke):
    """A setting's command-line text as the type of its preset values ("none" is None)."""
    like = full if full is not None else smoke
    if text.lower() == "none":
        return None
    if isinstance(like, bool):
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1", "yes")
    if isinstance(like, tuple):
        return tuple(int(item) for item in comma_list(text))
    return (type(like) if like is not None else float)(text)


def _parser(board: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.leaderboard",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("board", choices=list(BOARDS))
    p.add_argument("--entries", default=None, help="Comma-separated entries (default: the board's).")
    p.add_argument("--smoke", action="store_true", help="Tiny models, data and budget (CI): --preset smoke.")
    p.add_argument("--preset", default=None, help="full, smoke, or a board's own (translation: gpu).")
    p.add_argument("--data", type=Path, default=None, help="The board's data (default under ../shared/data).")
    p.add_argument("--output_dir", type=Path, default=None, help="Default out/<board>[_smoke].")
    p.add_argument("--seed", type=int, default=0, help="Seed of every run (ablations: --seeds).")
    p.add_argument("--list", action="store_true", help="Print the board's entries and exit.")
    if board in BOARDS:
        group = p.add_argument_group(f"{board} settings (default: the preset's)")
        for key, (full, smoke, text) in BOARDS[board]["settings"].items():
            group.add_argument(
                f"--{key}",
                type=lambda value, full=full, smoke=smoke: setting_value(value, full, smoke),
                default=argparse.SUPPRESS,
                nargs="?" if isinstance(full, bool) else None,
                const="true" if isinstance(full, bool) else None,
                help=f"{text} (full: {full}; smoke: {smoke}).",
            )
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The board, its settings (the preset's, then the options given), entries, data and output folder."""
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser(next((arg for arg in argv if arg in BOARDS), None))
    args = parser.parse_args(argv)
    board = BOARDS[args.board]
    table = board["settings"]
    if args.smoke and args.preset not in (None, "smoke"):
        parser.error(f"--smoke contradicts --preset {args.preset}.")
    given = {key: getattr(args, key) for key in table if hasattr(args, key)}
    if args.preset is None:
        device = given.get("device", "auto")
        gpu = "gpu" in board.get("presets", {}) and device != "cpu" and _device(parser, device) == "cuda"
        args.preset = "smoke" if args.smoke else "gpu" if gpu else "full"
    presets = {"full": {k: v[0] for k, v in table.items()}, "smoke": {k: v[1] for k, v in table.items()}}
    presets.update({name: {**presets["full"], **extra} for name, extra in board.get("presets", {}).items()})
    if args.preset not in presets:
        parser.error(f"--preset must be one of {list(presets)}, got {args.preset!r}.")
    args.smoke = args.preset == "smoke"
    args.settings = {**presets[args.preset], **given}
    try:
        args.names = select_entries(args.board, args.entries)
        check_settings(args.board, args.settings)
    except ValueError as err:
        parser.error(str(err))
    if "device" in args.settings:
        args.settings["device"] = _device(parser, args.settings["device"])
    args.data = args.data or SHARED_DATA / board["data"]
    args.output_dir = args.output_dir or REPO_ROOT / "out" / (args.board + ("_smoke" if args.smoke else ""))
    if not args.list and not args.data.exists():
        parser.error(f"--data {str(args.data)!r} does not exist.")
    return args


def _device(parser, name: str) -> str:
    try:
        return resolve_device(name)
    except ValueError as err:
        parser.error(str(err))


def select_entries(board: str, spec: str | None) -> list[str]:
    """The entries named in `spec` (comma-separated; None: the board's default), in the order given.

    `ablations` also takes component names and always runs the baseline, in the grid's order;
    `mask_predict` compares its two models, so it runs both.

    Raises:
        ValueError: an unknown name, or a subset of mask_predict.
    """
    entries = BOARDS[board]["entries"]
    if not spec:
        return list(BOARDS[board].get("default_entries", entries))
    names = list(dict.fromkeys(comma_list(spec)))
    components = {v.component for v in entries.values()} if board == "ablations" else set()
    unknown = [name for name in names if name not in entries and name not in components]
    if unknown or not names:
        groups = f"; components: {sorted(components - {'baseline'})}" if components else ""
        raise ValueError(
            f"--entries: unknown {unknown}; choose from {list(entries)}{groups} (comma-separated)."
        )
    if board == "ablations":
        chosen = {"baseline", *names}
        return [n for n, v in entries.items() if n in chosen or v.component in chosen]
    if board == "mask_predict" and names != list(entries):
        raise ValueError("--entries: mask_predict compares both models; run both.")
    return names


def check_settings(board: str, s: dict) -> None:
    """Refuse settings the runs cannot use, before any training starts."""
    for key in ("budget_seconds", "pretrain_seconds", "max_steps", "block_size", "batch_size", "jobs"):
        if key in s and not s[key] > 0:
            raise ValueError(f"--{key} must be > 0, got {s[key]!r}.")
    if board == "lm" and not all(1 <= n <= 5 for n in s["ngram_orders"]):
        raise ValueError(f"--ngram_orders must be within 1..5, got {s['ngram_orders']}.")
    if board == "lm" and s["schedule"] not in ("cosine", "constant"):
        raise ValueError(f"--schedule must be cosine or constant, got {s['schedule']!r}.")
    if board == "translation":
        from training.trainer_common import BUDGET_SCHEDULES

        if s["cell_type"] not in ("gru", "lstm", "rnn_tanh", "rnn_relu"):
            raise ValueError(f"--cell_type must be gru, lstm, rnn_tanh or rnn_relu, got {s['cell_type']!r}.")
        if s["budget_schedule"] not in BUDGET_SCHEDULES:
            raise ValueError(f"--budget_schedule must be one of {BUDGET_SCHEDULES}.")
        if s["mixed_precision"] not in ("no", "bf16", "fp16"):
            raise ValueError(f"--mixed_precision must be no, bf16 or fp16, got {s['mixed_precision']!r}.")
    if board == "ablations" and (not s["seeds"] or not 0 < s["early_fraction"] <= 1):
        raise ValueError("--seeds must name a seed and --early_fraction be in (0, 1].")
    if board == "length_extrapolation" and s["block_size"] % 2:
        raise ValueError(f"--block_size must be even, got {s['block_size']}.")


# ----------------------------------------------------------------------------------------------
# What the boards share: hardware, data, tokenizers, runs
# ----------------------------------------------------------------------------------------------


def hardware(num_threads: int | None) -> dict:
    """The machine and software a board ran on; `torch_threads`: what each run uses."""
    import torch

    return {
        "cpu_model": cpu_model(),
        "cores_available": available_cores(),
        "torch_threads": num_threads or torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "loadavg_start": load_average(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        **versions("torch", "transformers"),
    }


def split_text(text: str, train_fraction: float = TRAIN_FRACTION) -> tuple[str, str]:
    """nanoGPT's split by characters: the first `int(len(text) * train_fraction)` train, the rest validate.

    Raises:
        ValueError: a fraction outside (0, 1), or a split leaving one side empty.
    """
    if not 0 < train_fraction < 1:
        raise ValueError(f"`train_fraction` must be in (0, 1), got {train_fraction!r}.")
    n = int(len(text) * train_fraction)
    if n == 0 or n == len(text):
        raise ValueError(f"A text of {len(text)} characters leaves an empty split at {train_fraction:.0%}.")
    return text[:n], text[n:]


def write_split(data_file: Path, folder: Path, max_chars=None, train_chars=None, eval_chars=None) -> dict:
    """Split `data_file` (its first `max_chars` characters) and write the halves (their first
    `train_chars` / `eval_chars`), read and written with `newline=""` so the files hold exactly the split."""
    with open(data_file, encoding="utf-8", newline="") as f:
        text = f.read()[:max_chars]
    train, val = split_text(text)
    train, val = train[:train_chars], val[:eval_chars]
    folder.mkdir(parents=True, exist_ok=True)
    files = {"train_file": folder / "train.txt", "val_file": folder / "val.txt"}
    for key, part in (("train_file", train), ("val_file", val)):
        with open(files[key], "w", encoding="utf-8", newline="") as f:
            f.write(part)
    return {
        "source": str(data_file),
        **{key: str(path) for key, path in files.items()},
        "characters": len(text),
        "train_characters": len(train),
        "val_characters": len(val),
    }


def char_tokenizer(text: str, folder: Path, block_size: int, vocab_size: int, check: str | None = None):
    """Train and save the shared character tokenizer on `text`; `check`: a text every character of
    which must be one in-vocabulary token (the validation text, so the loss is per character).

    Raises:
        ValueError: a character of `check` that would not be exactly one known token.
    """
    from training.data.tokenizer import train_tokenizer

    # min_frequency=1: a character seen once (Shakespeare has one "$") is kept
    tokenizer = train_tokenizer(
        [text], kind="char", vocab_size=vocab_size, model_max_length=block_size, min_frequency=1
    )
    if check is not None:
        unknown = sorted(set(check) - set(tokenizer.get_vocab()))
        ids = tokenizer(check, add_special_tokens=False)["input_ids"]
        if unknown or len(ids) != len(check) or tokenizer.unk_token_id in ids:
            raise ValueError(
                f"The character tokenizer does not give one known token per validation character "
                f"(missing {unknown!r}): the loss would not be per character."
            )
    tokenizer.save_pretrained(folder)
    return tokenizer


def reuse_or_train_tokenizer(folder: Path, stamp: dict, train) -> tuple[object, bool]:
    """The tokenizer saved in `folder` if it was trained with the settings `stamp`, else `train()`
    saved there; returns `(tokenizer, reused)`."""
    from transformers import AutoTokenizer

    record = folder / "leaderboard_settings.json"
    if record.is_file() and json.loads(record.read_text()) == stamp:
        logger.info("Reusing the tokenizer in %s (same settings).", folder)
        return AutoTokenizer.from_pretrained(folder), True
    tokenizer = train()
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    record.write_text(json.dumps(stamp, indent=2))
    logger.info("Trained and saved the shared tokenizer (%d tokens) to %s.", len(tokenizer), folder)
    return tokenizer, False


def read_metrics(path: Path) -> list[dict]:
    """The rows of a run's `metrics.csv`, numbers parsed (empty cells are None)."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [
            {k: float(v) if v not in ("", None) else None for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


def train_run(argv: list[str], run_dir: Path, num_threads: int | None, reuse: bool = False) -> dict:
    """`python -m training.train argv` in a fresh process (its output in `run_dir/train.log`).

    With `reuse`, a folder that holds the final metrics of the same command is not run again.

    Returns:
        `{"status": ok/reused/failed, "returncode", "wall_seconds", "command", "final_metrics",
        "rows" (metrics.csv), "loadavg_before", "loadavg_after"}`, and "error_tail" when it failed.
    """
    record, final = run_dir / "leaderboard_command.json", run_dir / "final_metrics.json"
    result = {
        "command": shlex.join(["python", "-m", "training.train", *argv]),
        "loadavg_before": load_average(),
    }
    if reuse and final.is_file() and record.is_file() and json.loads(record.read_text()) == argv:
        result.update(status="reused", returncode=0, wall_seconds=None)
    else:
        shutil.rmtree(run_dir, ignore_errors=True)  # a stale folder's checkpoints must not mix in
        run_dir.mkdir(parents=True)
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        if num_threads:  # None or 0: torch's default
            env.update(OMP_NUM_THREADS=str(num_threads), MKL_NUM_THREADS=str(num_threads))
        start = time.perf_counter()
        with open(run_dir / "train.log", "w") as log:
            command = [sys.executable, "-m", "training.train", *argv]
            returncode = subprocess.run(
                command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            ).returncode
        ok = returncode == 0 and final.is_file()
        result.update(status="ok" if ok else "failed", returncode=returncode)
        result["wall_seconds"] = round(time.perf_counter() - start, 2)
        if ok:
            record.write_text(json.dumps(argv))
        else:
            result["error_tail"] = (run_dir / "train.log").read_text(errors="replace")[-3000:]
            logger.error("%s failed (exit %s); log tail:\n%s", run_dir, returncode, result["error_tail"])
    result["final_metrics"] = json.loads(final.read_text()) if result["status"] != "failed" else None
    result["rows"] = read_metrics(run_dir / "metrics.csv")
    result["loadavg_after"] = load_average()
    return result


def training_fields(metrics: dict) -> dict:
    """The training part of a fine-tuning row: size, steps, epochs, seconds, budget reached, loss."""
    return {
        "num_parameters": metrics["num_parameters"],
        "train_steps": metrics["train_steps"],
        "train_epochs": metrics["train_epochs"],
        "train_seconds": metrics["train_runtime"],
        "train_budget_reached": metrics["train_budget_reached"],
        "train_loss": metrics.get("train_loss"),
    }


def finetune_row(name: str, module: str, argv: list[str], fields: dict) -> dict:
    """Run `module`'s `finetune` in this process; the row (`fields`, the training fields, the metrics
    and the command). A failing entry must not lose the others' results: its row holds the error."""
    import importlib

    command = shlex.join(["python", "-m", module, *argv])
    logger.info("=== %s: %s", name, command)
    row = {"name": name, **fields}
    try:
        script = importlib.import_module(module)
        start = time.perf_counter()
        metrics = script.finetune(*script.parse_args(argv))
        row.update(training_fields(metrics), total_seconds=time.perf_counter() - start, metrics=metrics)
    except Exception as err:  # recorded in the row; the board exits 1 after the others
        logger.exception("Entry %s failed.", name)
        row["error"] = repr(err)
    row["command"] = command
    return row


def translation_tokenizer(data_dir: Path, settings: dict, folder: Path) -> tuple[object, bool]:
    """Train (or reuse) the joint byte-level BPE tokenizer (BART's special tokens, `<mask>` included)
    on both sides of the German-English training pairs; returns `(tokenizer, reused)`."""
    from training.data.tokenizer import BART_SPECIAL_TOKENS, train_tokenizer
    from training.finetune_translation import (
        TranslationDataArguments,
        ensure_eos,
        load_translation_dataset,
        sides,
    )

    keys = ("vocab_size", "max_train_samples", "max_length")
    stamp = {"data_dir": str(Path(data_dir).resolve()), "kind": "byte_bpe", **{k: settings[k] for k in keys}}

    def train():
        data_args = TranslationDataArguments(
            data_dir=str(data_dir),
            validation_split="",
            test_split="",
            max_train_samples=settings["max_train_samples"],
        )
        pairs = load_translation_dataset(data_args)["train"]
        tokenizer = train_tokenizer(
            sides(pairs, "de") + sides(pairs, "en"),
            kind="byte_bpe",
            vocab_size=settings["vocab_size"],
            special_tokens=BART_SPECIAL_TOKENS,
            model_max_length=settings["max_length"],
            padding_side="right",
        )
        ensure_eos(tokenizer)  # saved with it: every entry encodes "... </s>" identically
        return tokenizer

    return reuse_or_train_tokenizer(folder, stamp, train)


def _translation_argv(
    data: Path, s: dict, tokenizer_dir: Path, seed: int, run_dir: Path
) -> tuple[list, list]:
    """The `training.finetune_translation` arguments every translation run shares (no validation):
    the data and sizes part, and the budget and decoding part."""
    argv = [
        "--data_dir", str(data), "--source_lang", "de", "--target_lang", "en", "--validation_split", "",
        "--source_prefix", "", "--from_scratch", "--tokenizer_name_or_path", str(tokenizer_dir),
        "--max_source_length", str(s["max_length"]), "--max_target_length", str(s["max_length"]),
        "--hidden_dropout", str(s["dropout"]),
    ]  # fmt: skip
    tail = [
        "--num_train_epochs", str(s["max_epochs"]), "--max_train_seconds", str(s["budget_seconds"]),
        "--eval_strategy", "no", "--save_strategy", "no", "--logging_steps", str(s.get("logging_steps", 50)),
        "--generation_num_beams", str(s["num_beams"]), "--generation_max_length", str(s["generation_max_length"]),
        "--report_to", "none", "--disable_tqdm", "true", "--seed", str(seed), "--output_dir", str(run_dir),
    ]  # fmt: skip
    return argv, tail


def _sample_caps(s: dict, keys=("max_train_samples", "max_eval_samples", "max_test_samples")) -> list[str]:
    return [arg for key in keys if s.get(key) is not None for arg in (f"--{key}", str(s[key]))]


@dataclass
class Board:
    """One run of a board: its parsed command line and the folder it writes."""

    name: str
    names: list[str]
    settings: dict
    data: Path
    out: Path
    seed: int
    smoke: bool


# ----------------------------------------------------------------------------------------------
# lm: the language-modeling leaderboard
# ----------------------------------------------------------------------------------------------


def train_command(
    entry, s: dict, data: dict, tokenizer_dir: Path, out: Path, seed: int, smoke: bool, **run
) -> list[str]:
    """The `training.train` arguments of one LM run; `run`: max_steps, eval_every, warmup_steps,
    and optionally lr_scheduler ("cosine"), max_train_seconds and ngram_order."""
    reference = entry.kind == "reference"
    block, batch = (64, 12) if reference else (s["block_size"], s["batch_size"])
    model_args = entry.smoke_model_args if smoke and entry.smoke_model_args else entry.model_args
    if entry.kind == "ngram":
        model_args = f"--arch ngram --ngram_order {run['ngram_order']} --ngram_smoothing modified_kn".split()
    eval_batches = max(1, math.ceil(s["curve_eval_blocks"] / batch))
    args = [
        "--dataset", data["train_file"], "--eval_dataset", data["val_file"], "--sample_by", "document",
        "--tokenizer_kind", "char", "--tokenizer_name_or_path", str(tokenizer_dir),
        "--block_size", str(block), "--per_device_batch_size", str(batch),
        *model_args,
        "--hidden_dropout", "0", "--attention_dropout", "0",
        "--learning_rate", str(entry.learning_rate), "--adam_beta2", "0.99", "--weight_decay", "0.1",
        "--max_grad_norm", "1.0", "--lr_scheduler", run.get("lr_scheduler", "cosine"),
        "--warmup_steps", str(run["warmup_steps"]), "--max_steps", str(run["max_steps"]),
        "--eval_every", str(run["eval_every"]), "--eval_batches", str(eval_batches),
        "--log_every", "1", "--save_every", NEVER, "--keep_last", "1",
        "--seed", str(seed), "--output_dir", str(out), "--report_to", "csv",
    ]  # fmt: skip
    if run.get("max_train_seconds") is not None:
        args += ["--max_train_seconds", str(run["max_train_seconds"])]
    if (
        reference
    ):  # nanoGPT's recipe: its get_batch windows, its cosine ending at a tenth, its best model kept
        args += ["--sampling", "random_windows", "--min_lr_rate", "0.1"]
        args += ["--load_best_model_at_end", "true", "--metric_for_best_model", "eval_loss"]
    return args


def step_rows(rows: list[dict]) -> list[dict]:
    """The per-step log rows (training loss and time), one per step, in step order."""
    seen, out = set(), []
    for row in rows:
        if row.get("loss") is not None and row.get("seconds") is not None and row["step"] not in seen:
            seen.add(row["step"])
            out.append(row)
    return sorted(out, key=lambda r: r["step"])


def probe_timings(rows: list[dict], final_seconds: float, skip: int = 2) -> dict:
    """Step and evaluation time of a probe run logged every step and evaluated once, at its end.

    The step time is the mean over the steps after the first `skip` (which pay one-off costs); the
    evaluation time is the time from the last step's row to the end of the run (that evaluation and
    a checkpoint: a slight overestimate, on the safe side).

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
    """The step count that fills `budget_s` with training steps and `evals` evaluations, the
    evaluations thinned to at most `MAX_EVAL_SHARE` of the budget.

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


def score_ids(model, ids, block_size: int, batch_size: int = 64) -> dict:
    """Mean next-token loss over `ids` cut into non-overlapping blocks of `block_size`: the tail that
    does not fill a block is dropped, tokens 2..T of a block scored given the ones before them (as
    `training.objectives.evaluation.evaluate` does). Returns `{"loss", "scored_tokens", "blocks"}`."""
    import torch
    import torch.nn.functional as F

    n_blocks = len(ids) // block_size
    if n_blocks == 0:
        raise ValueError(f"{len(ids)} validation tokens are fewer than one block of {block_size}.")
    blocks = ids[: n_blocks * block_size].view(n_blocks, block_size)  # (N, T)
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, n_blocks, batch_size):
            batch = blocks[start : start + batch_size]  # (b, T)
            logits = model(input_ids=batch).logits[:, :-1].float()  # (b, T - 1, V)
            targets = batch[:, 1:]  # (b, T - 1)
            total += F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"
            ).item()
            count += targets.numel()
    return {"loss": total / count, "scored_tokens": count, "blocks": n_blocks}


def score_validation(model_dir: Path, val_ids, block_size: int) -> dict:
    """Score a run's saved model on the whole validation text (`score_ids`), with its perplexity,
    bits per character, parameters (None for an n-gram model, which stores counts) and n-grams."""
    import torch
    from transformers import AutoModelForCausalLM

    import hf_lm  # noqa: F401  (registers the Auto classes)

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    result = score_ids(model, val_ids, block_size)
    num_ngrams = getattr(model.config, "num_ngrams", None)
    return {
        **result,
        "perplexity": math.exp(result["loss"]),
        "bits_per_character": result["loss"] / math.log(2),
        "parameters": None if num_ngrams is not None else sum(p.numel() for p in model.parameters()),
        "ngrams": sum(num_ngrams) if num_ngrams is not None else None,
    }


def _lm_row(b: Board, name: str, run: dict, run_dir: Path, block_size: int, val_ids) -> dict:
    entry = BOARDS["lm"]["entries"][name]
    scored = score_validation(run_dir / "final", val_ids, block_size)
    final = run["final_metrics"]
    return {
        "name": name, "label": entry.label, "kind": entry.kind, "parameters": scored["parameters"],
        "steps": final["step"], "tokens_seen": final["tokens_seen"], "train_seconds": train_seconds(run["rows"]),
        "wall_seconds": run["wall_seconds"], "val_loss": scored["loss"], "perplexity": scored["perplexity"],
        "bits_per_character": scored["bits_per_character"], "scored_characters": scored["scored_tokens"],
        "eval_block_size": block_size, "learning_rate": entry.learning_rate,
        "curve_eval_loss_last": final.get("eval_loss"),  # training.train's own, on the curve subset
        "curve": curve(run["rows"]), "command": run["command"],
        "loadavg_before": run["loadavg_before"], "loadavg_after": run["loadavg_after"],
    }  # fmt: skip


def lm_ngram(b: Board, name: str, ctx: dict) -> dict:
    """Fit every order and score each; the row is the best order."""
    entry, s, orders = BOARDS["lm"]["entries"][name], b.settings, []
    for order in s["ngram_orders"]:
        run_dir = b.out / "runs" / f"ngram_order{order}"
        argv = train_command(entry, s, ctx["data"], ctx["tokenizer"], run_dir, b.seed, b.smoke,
                             max_steps=1, eval_every=1, warmup_steps=0, ngram_order=order)  # fmt: skip
        run = train_run(argv, run_dir, s["num_threads"])
        if run["status"] == "failed":
            raise RuntimeError(
                f"the order-{order} fit exited with {run['returncode']}; see {run_dir / 'train.log'}"
            )
        fit = NGRAM_FIT_LOG.search((run_dir / "train.log").read_text(errors="replace"))
        scored = score_validation(run_dir / "final", ctx["val_ids"], s["block_size"])
        orders.append({
            "order": order, "val_loss": scored["loss"], "perplexity": scored["perplexity"],
            "bits_per_character": scored["bits_per_character"], "ngrams": scored["ngrams"],
            "fit_seconds": float(fit.group(1)) if fit else None,
            "wall_seconds": run["wall_seconds"], "command": run["command"],
        })  # fmt: skip
    best = min(orders, key=lambda o: o["val_loss"])
    return {
        "name": name, "label": f"{entry.label}, order {best['order']}", "kind": entry.kind, "parameters": None,
        "ngrams": best["ngrams"], "best_order": best["order"], "steps": None,
        "tokens_seen": ctx["data"]["train_characters"],  # counted once
        "train_seconds": best["fit_seconds"], "wall_seconds": best["wall_seconds"],
        **{key: best[key] for key in ("val_loss", "perplexity", "bits_per_character")},
        "eval_block_size": s["block_size"], "orders": orders, "command": best["command"],
    }  # fmt: skip


def lm_trained(b: Board, name: str, ctx: dict) -> dict:
    """A budgeted entry (probe and calibrate a cosine schedule, or a constant rate stopped by the
    budget) or nanoGPT's configuration (its fixed iterations); the final model scored."""
    entry, s = BOARDS["lm"]["entries"][name], b.settings
    command = functools.partial(
        train_command, entry, s, ctx["data"], ctx["tokenizer"], seed=b.seed, smoke=b.smoke
    )
    run_dir, budget = b.out / "runs" / name, s["budget_seconds"]
    if entry.kind == "reference":
        plan = {"max_steps": s["nanogpt_iters"], "eval_every": s["nanogpt_eval_every"],
                "warmup_steps": min(100, s["nanogpt_iters"] // 10)}  # fmt: skip
        calibration, budget = None, None
    elif s["schedule"] == "constant":
        plan = {"max_steps": NEVER, "eval_every": s["constant_eval_every"], "warmup_steps": s["constant_warmup_steps"],
                "lr_scheduler": "constant", "max_train_seconds": budget}  # fmt: skip
        calibration = {
            "schedule": "constant",
            "warmup_steps": plan["warmup_steps"],
            "eval_every": plan["eval_every"],
        }
    else:
        probe_dir = b.out / "runs" / f"{name}_probe"
        # the rate only ramps up (a gentle start: the probe measures time, not learning)
        probe = train_run(command(probe_dir, max_steps=s["probe_steps"], eval_every=s["probe_steps"],
                                  warmup_steps=s["probe_steps"], lr_scheduler="constant"), probe_dir, s["num_threads"])  # fmt: skip
        if probe["status"] == "failed":
            raise RuntimeError(f"the probe exited with {probe['returncode']}; see {probe_dir / 'train.log'}")
        timings = probe_timings(probe["rows"], probe["final_metrics"]["seconds"])
        plan = calibrate(budget, timings["step_seconds"], timings["eval_seconds"], s["evals"])
        logger.info(
            "%s: %.3f s/step, %.2f s/evaluation -> %s",
            name,
            timings["step_seconds"],
            timings["eval_seconds"],
            plan,
        )
        calibration = {**{k: round(v, 4) for k, v in timings.items()}, **plan, "schedule": "cosine",
                       "probe_command": probe["command"], "probe_wall_seconds": probe["wall_seconds"]}  # fmt: skip
        plan = {k: plan[k] for k in ("max_steps", "eval_every", "warmup_steps")} | {
            "max_train_seconds": budget
        }
    run = train_run(command(run_dir, **plan), run_dir, s["num_threads"])
    if run["status"] == "failed":
        raise RuntimeError(f"the training run exited with {run['returncode']}; see {run_dir / 'train.log'}")
    row = _lm_row(b, name, run, run_dir, 64 if entry.kind == "reference" else s["block_size"], ctx["val_ids"])
    if calibration is not None:
        seconds = row["train_seconds"]
        calibration["stopped_by_budget"] = (  # the safety net cut the schedule before its end
            True if s["schedule"] == "constant" else row["steps"] < calibration["max_steps"]
        )
        calibration["budget_used"] = None if seconds is None else round(seconds / budget, 3)
        row["calibration"] = calibration
    return row


def run_lm(b: Board) -> dict:
    import torch

    s = b.settings
    data = write_split(b.data, b.out / "data", s["max_chars"])
    train_text, val_text = (Path(data[k]).read_text(encoding="utf-8") for k in ("train_file", "val_file"))
    tokenizer = char_tokenizer(train_text, b.out / "tokenizer", s["block_size"], 10_000, check=val_text)
    data["vocab_size"] = len(tokenizer)
    ids = tokenizer(val_text, add_special_tokens=False)["input_ids"]
    ctx = {"data": data, "tokenizer": b.out / "tokenizer", "val_ids": torch.tensor(ids, dtype=torch.long)}
    rows = []
    for name in b.names:
        kind = BOARDS["lm"]["entries"][name].kind
        rows.append(_guarded(b, name, lm_ngram if kind == "ngram" else lm_trained, ctx))
    result = {"budget_seconds": s["budget_seconds"], "schedule": s["schedule"], "data": data, "entries": rows,
              "reference": [NANOGPT_REFERENCE]}  # fmt: skip
    plot_lm(rows, b.out)
    return result


def _guarded(b: Board, name: str, run, ctx: dict) -> dict:
    """`run(b, name, ctx)`'s row, or a row holding the error: one broken entry must not cost the others."""
    start = time.perf_counter()
    try:
        row = run(b, name, ctx)
    except Exception as err:
        logger.exception("%s failed", name)
        entry = BOARDS[b.name]["entries"][name]
        return {"name": name, "label": getattr(entry, "label", name), "error": repr(err)}
    logger.info("%s: done in %.0f s", name, time.perf_counter() - start)
    return row


def plot_lm(rows: list[dict], folder: Path) -> None:
    """`val_loss.png` (a bar per entry) and `loss_curves.png` (validation loss against training time),
    nanoGPT's published loss as a dashed line in both."""
    plt, ok = pyplot(), [r for r in rows if "error" not in r]
    published = {
        "color": "tab:red",
        "linestyle": "--",
        "label": f"nanoGPT published ({NANOGPT_REFERENCE['val_loss']})",
    }
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(ok) + 2), 4.5))
    bars = ax.bar(range(len(ok)), [r["val_loss"] for r in ok], color="tab:blue")
    ax.bar_label(bars, [f"{r['val_loss']:.3f}" for r in ok], fontsize=8)
    ax.axhline(NANOGPT_REFERENCE["val_loss"], **published)
    ax.set_xticks(range(len(ok)), [r["label"] for r in ok], rotation=35, ha="right", fontsize=8)
    ax.set(ylabel="validation loss (nats/char)", title="Tiny Shakespeare (char): validation loss")
    _save(plt, fig, ax, folder / "val_loss.png")
    fig, ax = plt.subplots(figsize=(8, 5))
    for row in ok:
        if row["kind"] == "ngram":
            ax.axhline(row["val_loss"], color="gray", linestyle=":", label=row["label"])
            continue
        points = [(t, v) for t, v in zip(row["curve"]["seconds"], row["curve"]["eval_loss"]) if t is not None]
        if points:
            ax.plot(*zip(*points), marker=".", label=row["label"])
    ax.axhline(NANOGPT_REFERENCE["val_loss"], **published)
    ax.set(xlabel="training time (s)", ylabel="validation loss (nats/char, curve subset)",
           title="Tiny Shakespeare (char): validation loss during training")  # fmt: skip
    _save(plt, fig, ax, folder / "loss_curves.png", fontsize=7)


def _save(plt, fig, ax, path: Path, fontsize: int = 8, **legend) -> None:
    ax.legend(fontsize=fontsize, **legend)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------
# translation and mask_predict: Multi30k De->En
# ----------------------------------------------------------------------------------------------


def translation_argv(
    name: str, s: dict, data: Path, tokenizer_dir: Path, run_dir: Path, seed: int
) -> list[str]:
    """The `training.finetune_translation` arguments of one translation entry."""
    entry = BOARDS["translation"]["entries"][name]
    head, tail = _translation_argv(data, s, tokenizer_dir, seed, run_dir)
    if entry.family == "rnn_seq2seq":
        model = [
            "--rnn_attention", entry.attention, "--cell_type", s["cell_type"], "--hidden_size", str(s["rnn_hidden_size"]),
            "--embedding_size", str(s["rnn_embedding_size"]), "--num_hidden_layers", str(s["rnn_layers"]),
            "--learning_rate", str(s["rnn_learning_rate"]),
        ]  # fmt: skip
    else:
        model = [
            "--hidden_size", str(s["hidden_size"]), "--num_hidden_layers", str(s["num_layers"]),
            "--num_attention_heads", str(s["num_heads"]), "--intermediate_size", str(s["intermediate_size"]),
            "--attention_dropout", str(s["dropout"]), "--learning_rate", str(s["transformer_learning_rate"]),
        ]  # fmt: skip
    argv = [*head, "--family", entry.family, *model, "--per_device_train_batch_size", str(s["batch_size"]),
            "--lr_scheduler_type", s["lr_scheduler"], "--budget_schedule", s["budget_schedule"],
            "--warmup_steps", str(s["warmup_steps"]), "--label_smoothing_factor", str(s["label_smoothing"]), *tail]  # fmt: skip
    # "cuda" is Trainer's own default; "cpu" is said, which also lets Trainer autocast bf16 on a CPU
    argv += ["--use_cpu", "true"] if s["device"] == "cpu" else []
    argv += [f"--{s['mixed_precision']}", "true"] if s["mixed_precision"] != "no" else []
    return argv + _sample_caps(s)


def run_translation(b: Board) -> dict:
    s = b.settings
    tokenizer, reused = translation_tokenizer(b.data, s, b.out / "tokenizer")
    rows = []
    for name in b.names:
        entry = BOARDS["translation"]["entries"][name]
        argv = translation_argv(name, s, b.data, b.out / "tokenizer", b.out / "runs" / name, b.seed)
        row = finetune_row(name, "training.finetune_translation", argv,
                           {"label": entry.label, "family": entry.family, "attention": entry.attention})  # fmt: skip
        m = row.get("metrics", {})
        row.update(
            test_bleu_greedy=m.get("test_greedy_bleu", m.get("test_bleu")), test_bleu_beam=m.get("test_bleu"),
            test_bleu_greedy_lowercase=m.get("test_greedy_bleu_lowercase", m.get("test_bleu_lowercase")),
            test_bleu_beam_lowercase=m.get("test_bleu_lowercase"), test_loss=m.get("test_loss"),
            decode_seconds_greedy=m.get("test_greedy_runtime"), decode_seconds_beam=m.get("test_runtime"),
            test_samples=m.get("test_samples"), bleu_signature=m.get("bleu_signature"),
            published_bleu=entry.published, target_bleu=entry.target,
        )  # fmt: skip
        for decoding in ("greedy", "beam"):  # whether the measured BLEU reaches the target
            value = row[f"test_bleu_{decoding}"]
            row[f"target_met_{decoding}"] = (
                None if entry.target is None or value is None else value >= entry.target
            )
        rows.append(row)
    measured = [row for row in rows if "error" not in row]
    bar_chart(
        b.out / "bleu.png",
        [translation_label(row, s["cell_type"]) for row in measured],
        {"greedy": [r["test_bleu_greedy"] for r in measured], f"beam {s['num_beams']}": [r["test_bleu_beam"] for r in measured]},
        title=f"Multi30k De→En test BLEU, {s['budget_seconds']:g} s training budget per model",
        ylabel="sacrebleu BLEU",
        references=[(f"{r['short']} (published)", r["bleu"]) for r in BOARDS["translation"]["references"]],
        reference_name="bentrevett, 10 epochs (published)",
    )  # fmt: skip
    return {
        "task": "Multi30k De->En (test_2016_flickr)", "device": s["device"], "budget_seconds": s["budget_seconds"],
        "cell_type": s["cell_type"], "data_dir": str(b.data),
        "train_pairs": measured[0]["metrics"]["train_samples"] if measured else None,
        "test_pairs": measured[0]["test_samples"] if measured else None,
        "tokenizer": {"path": str(b.out / "tokenizer"), "kind": "byte_bpe", "vocab_size": len(tokenizer), "reused": reused},
        "entries": rows,
        "references": [{**r, "epochs": 10, "source": BENTREVETT, "published": True} for r in BOARDS["translation"]["references"]],
    }  # fmt: skip


def translation_label(row: dict, cell_type: str) -> str:
    return (
        row["label"].replace("RNN", cell_type.upper()) if row.get("family") == "rnn_seq2seq" else row["label"]
    )


def run_mask_predict(b: Board) -> dict:
    s = b.settings
    translation_tokenizer(b.data, s, b.out / "tokenizer")
    rows = []
    for name, entry in BOARDS["mask_predict"]["entries"].items():
        head, tail = _translation_argv(b.data, s, b.out / "tokenizer", b.seed, b.out / "runs" / name)
        argv = [
            *head, "--family", "transformer", "--objective", name, "--hidden_size", str(s["hidden_size"]),
            "--num_hidden_layers", str(s["num_layers"]), "--num_attention_heads", str(s["num_heads"]),
            "--intermediate_size", str(s["intermediate_size"]), "--attention_dropout", str(s["dropout"]),
            "--learning_rate", str(s["learning_rate"]), "--per_device_train_batch_size", str(s["batch_size"]),
            "--lr_scheduler_type", "constant_with_warmup", "--warmup_steps", str(s["warmup_steps"]), *tail,
        ]  # fmt: skip
        argv += ["--test_split", ""] if name == "mask_predict" else []  # decoded below, once per T
        rows.append(
            finetune_row(
                name, "training.finetune_translation", argv + _sample_caps(s), {"label": entry.label}
            )
        )
        if "error" in rows[-1]:
            raise SystemExit(f"{name} failed: {rows[-1]['error']}")
    result = {"entries": rows, "mask_predict": mask_predict_decoding(b)}
    plot_mask_predict_bleu(result, b.out / "bleu_vs_iterations.png", s["budget_seconds"])
    return result


def mask_predict_decoding(b: Board) -> dict:
    """Decode the test split with each number of iterations (BLEU per T), and trace one sentence."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from hf_lm.plots import plot_mask_predict
    from training.finetune_translation import (
        TranslationDataArguments,
        bleu_metric,
        load_translation_dataset,
        sides,
    )

    s, final = b.settings, b.out / "runs" / "mask_predict" / "final"
    model, tokenizer = (
        AutoModelForMaskedLM.from_pretrained(final).eval(),
        AutoTokenizer.from_pretrained(final),
    )
    test = load_translation_dataset(
        TranslationDataArguments(
            data_dir=str(b.data), validation_split="", max_test_samples=s["max_test_samples"]
        )
    )["test"]
    sources, references = sides(test, "de"), sides(test, "en")
    metric, rows = bleu_metric(), []
    for T in s["iterations"]:
        texts, start = [], time.perf_counter()
        for i in range(0, len(sources), 64):
            enc = tokenizer(
                sources[i : i + 64],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=s["max_length"],
            )
            ids = model.generate(enc["input_ids"], enc["attention_mask"], num_iterations=T,
                                 length_beam=s["length_beam"], max_new_tokens=s["generation_max_length"] - 2)  # fmt: skip
            texts += [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]
        seconds = time.perf_counter() - start
        bleu = metric.compute(predictions=texts, references=references)
        rows.append(
            {
                "iterations": T,
                "test_bleu": bleu["score"],
                "decode_seconds": seconds,
                "signature": bleu["signature"],
            }
        )
        logger.info("Mask-Predict T=%d: BLEU %.2f in %.1f s", T, bleu["score"], seconds)
        (b.out / f"test_predictions_T{T}.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    # one sentence's refinement: each iteration's tokens, the re-predicted (masked) ones in brackets
    T = s["trace_iterations"]
    out = model.generate(**tokenizer([sources[0]], return_tensors="pt"), num_iterations=T, length_beam=1,
                         return_dict_in_generate=True)  # fmt: skip
    length, trace, tokens = int(out.lengths[0]), [], []
    for t in range(T):
        ids = out.iteration_tokens[t, 0, :length].tolist()
        words = [tokenizer.decode([i]).strip() or "␣" for i in ids]
        masked = out.iteration_masked[t, 0, :length].tolist()
        tokens.append(words)
        trace.append({
            "iteration": t, "masked": sum(masked), "tokens": " ".join(f"[{w}]" if m else w for w, m in zip(words, masked)),
            "text": tokenizer.decode(ids, skip_special_tokens=True).strip(),
            "mean_log_prob": float(out.iteration_log_probs[t, 0, :length].mean()),
        })  # fmt: skip
    plot_mask_predict(out, tokens, b.out / "trace.png", title=f"Mask-Predict, T = {T}: {sources[0]}")
    return {"by_iterations": rows, "test_samples": len(sources), "trace": trace, "trace_source": sources[0],
            "trace_reference": references[0], "trace_length": length, "trace_iterations": T}  # fmt: skip


def plot_mask_predict_bleu(result: dict, path: Path, budget_seconds: float) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    rows, ar = result["mask_predict"]["by_iterations"], result["entries"][0]["metrics"]
    ax.plot([r["iterations"] for r in rows], [r["test_bleu"] for r in rows], marker="o", label="Mask-Predict")
    for key, style, label in (
        ("test_greedy_bleu", "--", "autoregressive, greedy"),
        ("test_bleu", ":", "autoregressive, beam"),
    ):
        if key in ar:
            ax.axhline(ar[key], linestyle=style, color="gray", label=label)
    ax.set_xscale("log")
    ax.set_xticks([r["iterations"] for r in rows], [str(r["iterations"]) for r in rows])
    ax.set(xlabel="Mask-Predict iterations T", ylabel="test BLEU",
           title=f"Multi30k De→En, {budget_seconds:.0f} s of training each")  # fmt: skip
    ax.grid(alpha=0.3)
    _save(plt, fig, ax, path, fontsize=10)


# ----------------------------------------------------------------------------------------------
# sst2: from scratch against pretrained, the same fine-tuning budget
# ----------------------------------------------------------------------------------------------


def _encoder_config(config_class, tokenizer, s: dict, **extra):
    """The board's encoder ("bert" preset: post-norm, exact GELU, learned positions), as `config_class`."""
    from hf_lm import BERT_PRESETS

    return config_class(
        **BERT_PRESETS["bert"], vocab_size=len(tokenizer), hidden_size=s["hidden_size"],
        num_hidden_layers=s["num_layers"], num_attention_heads=s["num_heads"], intermediate_size=s["intermediate_size"],
        max_position_embeddings=s["max_seq_length"], hidden_dropout=s["dropout"], attention_dropout=s["dropout"],
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
        sparse_prediction=True,  # pretraining runs the MLM head on the masked positions only
        **extra,
    )  # fmt: skip


def save_initialization(folder: Path, tokenizer, s: dict, seed: int, objective: str = "mlm") -> int:
    """Save the seed's fresh model and the tokenizer to `folder`: the masked LM (`scratch` fine-tunes
    it, MLM pretraining starts from it) or, for "electra", the discriminator (the same encoder with
    embeddings as wide as the model) and its 1/4-wide generator; returns the parameters."""
    import torch

    from hf_lm import HfLmBertConfig, HfLmBertForMaskedLM, HfLmElectraConfig
    from training.objectives.electra import ElectraPretrainingModel

    if objective == "electra":
        config = _encoder_config(HfLmElectraConfig, tokenizer, s, embedding_size=s["hidden_size"])
        torch.manual_seed(seed)
        model = ElectraPretrainingModel(config)
    else:
        torch.manual_seed(seed)
        model = HfLmBertForMaskedLM(_encoder_config(HfLmBertConfig, tokenizer, s))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters()) if objective == "electra" else model.num_parameters()


def sst2_tokenizer(sentences: list[str], s: dict, data: Path, folder: Path):
    """Train (or reuse) the WordPiece tokenizer: BERT's specials, [SEP] also as EOS for packing."""
    from training.data.tokenizer import train_tokenizer
    from training.finetune_classification import SPECIAL_TOKENS

    keys = ("vocab_size", "max_train_samples", "max_seq_length")
    stamp = {"data_dir": str(Path(data).resolve()), "kind": "wordpiece", **{k: s[k] for k in keys}}

    def train():
        tokenizer = train_tokenizer(sentences, kind="wordpiece", vocab_size=s["vocab_size"],
                                    special_tokens={**SPECIAL_TOKENS, "eos_token": "[SEP]"},
                                    model_max_length=s["max_seq_length"], padding_side="right")  # fmt: skip
        if tokenizer("a")["input_ids"][:1] != [tokenizer.cls_token_id]:
            raise RuntimeError("The WordPiece tokenizer does not start its encodings with [CLS].")
        return tokenizer

    return reuse_or_train_tokenizer(folder, stamp, train)


def pretrain_argv(
    s: dict, text_file: Path, init_dir: Path, tokenizer_dir: Path, run_dir: Path, objective: str, seed: int
) -> list[str]:
    """The `training.train` arguments of the pretraining with `objective` ("mlm" or "electra")."""
    return [
        "--objective", objective, "--arch", "transformer", "--init_from", str(init_dir),
        "--tokenizer_name_or_path", str(tokenizer_dir), "--dataset", str(text_file), "--sample_by", "line",
        "--block_size", str(s["max_seq_length"]), "--eval_fraction", "0.05", "--eval_batches", "20",
        "--pseudo_perplexity_blocks", "0", "--per_device_batch_size", str(s["pretrain_batch_size"]),
        "--learning_rate", str(s["pretrain_learning_rate"]), "--lr_scheduler", "constant",
        "--warmup_steps", str(s["pretrain_warmup_steps"]), "--max_steps", "100000000",
        "--max_train_seconds", str(s["pretrain_seconds"]), "--eval_every", str(s["pretrain_eval_every"]),
        "--save_every", "100000000", "--keep_last", "1", "--log_every", str(s["logging_steps"]),
        "--seed", str(seed), "--output_dir", str(run_dir),
    ]  # fmt: skip


def sst2_finetune_argv(
    name: str, s: dict, data: Path, start_dir: Path, tokenizer_dir: Path, run_dir: Path, seed: int
) -> list[str]:
    """The `training.finetune_classification` arguments of one entry."""
    entry = BOARDS["sst2"]["entries"][name]
    budget = s["budget_seconds"] + (s["pretrain_seconds"] if entry.extra_time else 0.0)
    lr = s["pretrained_learning_rate"] if entry.pretraining else s["scratch_learning_rate"]
    return [
        "--data_dir", str(data), "--model_name_or_path", str(start_dir), "--tokenizer_name_or_path", str(tokenizer_dir),
        "--max_seq_length", str(s["max_seq_length"]), "--per_device_train_batch_size", str(s["batch_size"]),
        "--learning_rate", str(lr), "--lr_scheduler_type", "constant_with_warmup", "--warmup_steps", str(s["warmup_steps"]),
        "--num_train_epochs", str(s["max_epochs"]), "--max_train_seconds", str(budget),
        "--eval_strategy", "no", "--save_strategy", "no", "--logging_steps", str(s["logging_steps"]),
        "--per_device_eval_batch_size", "128", "--report_to", "none", "--disable_tqdm", "true",
        "--seed", str(seed), "--output_dir", str(run_dir), *_sample_caps(s),
    ]  # fmt: skip


def sst2_pretraining(b: Board, objective: str, sentences: list[str], tokenizer) -> dict:
    """Pretrain with `objective` for `pretrain_seconds` (ELECTRA from its own seeded initialization)
    into `runs/<objective>_pretrain/`, or reuse a finished one with the same settings; its record."""
    s, tokenizer_dir, init_dir = b.settings, b.out / "tokenizer", b.out / "init"
    if objective == "electra":
        init_dir = b.out / "init_electra"
        save_initialization(init_dir, tokenizer, s, b.seed, "electra")
    text_file = b.out / "pretraining_text.txt"
    text_file.write_text("".join(sentence + "\n" for sentence in sentences), encoding="utf-8")
    run_dir = b.out / "runs" / f"{objective}_pretrain"
    argv = pretrain_argv(s, text_file, init_dir, tokenizer_dir, run_dir, objective, b.seed)
    stamp = {"argv": argv, "tokenizer": json.loads((tokenizer_dir / "leaderboard_settings.json").read_text())}
    record, final = run_dir / "leaderboard_settings.json", run_dir / "final_metrics.json"
    reused = (
        s["reuse_pretraining"]
        and record.is_file()
        and final.is_file()
        and json.loads(record.read_text()) == stamp
    )
    if reused:
        logger.info("Reusing the pretraining in %s (same settings).", run_dir)
        metrics = json.loads(final.read_text())
    else:
        from training.train import main as train_main

        metrics = train_main(argv)
        run_dir.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(stamp, indent=2))
    keys = "train_loss eval_loss eval_mlm_accuracy eval_disc_loss eval_disc_accuracy tokens_seen".split()
    return {"objective": objective, "command": shlex.join(["python", "-m", "training.train", *argv]), "reused": reused,
            "steps": metrics["step"], "seconds": metrics["seconds"], "budget_seconds": s["pretrain_seconds"],
            **{key: metrics.get(key) for key in keys}, "metrics": metrics}  # fmt: skip


def run_sst2(b: Board) -> dict:
    from training.finetune_classification import ClassificationDataArguments, load_classification_dataset

    s, entries = b.settings, BOARDS["sst2"]["entries"]
    raw = load_classification_dataset(
        ClassificationDataArguments(data_dir=str(b.data), max_train_samples=s["max_train_samples"])
    )
    sentences = list(
        dict.fromkeys(t for t in (text.strip() for text in raw["train"]["sentence"]) if t)
    )  # labels unused
    tokenizer, reused = sst2_tokenizer(sentences, s, b.data, b.out / "tokenizer")
    num_parameters = save_initialization(b.out / "init", tokenizer, s, b.seed)
    objectives = dict.fromkeys(entries[name].pretraining for name in b.names if entries[name].pretraining)
    pretrainings = {
        objective: sst2_pretraining(b, objective, sentences, tokenizer) for objective in objectives
    }
    rows = []
    for name in b.names:
        objective = entries[name].pretraining
        start = b.out / "runs" / f"{objective}_pretrain" / "final" if objective else b.out / "init"
        argv = sst2_finetune_argv(name, s, b.data, start, b.out / "tokenizer", b.out / "runs" / name, b.seed)
        row = finetune_row(
            name,
            "training.finetune_classification",
            argv,
            {"label": entries[name].label, "pretrained": bool(objective)},
        )
        m = row.get("metrics", {})
        row.update(dev_accuracy=m.get("eval_accuracy"), test_accuracy=m.get("test_accuracy"), test_f1=m.get("test_f1"),
                   dev_samples=m.get("eval_samples"), test_samples=m.get("test_samples"))  # fmt: skip
        rows.append(row)
    measured = [row for row in rows if "error" not in row]
    bar_chart(
        b.out / "accuracy.png", [row["label"] for row in measured],
        {split: [None if r[f"{split}_accuracy"] is None else 100 * r[f"{split}_accuracy"] for r in measured] for split in ("dev", "test")},
        title=f"SST-2 accuracy, {s['budget_seconds']:g} s fine-tuning budget per model", ylabel="accuracy (%)",
        references=[(f"{r['short']} (published)", 100 * r["accuracy"]) for r in BOARDS["sst2"]["references"]],
        reference_name="published (≈, GLUE dev)",
    )  # fmt: skip
    first = measured[0]["metrics"] if measured else {}
    return {
        "task": "SST-2 binary sentiment (test = GLUE dev sentences)", "budget_seconds": s["budget_seconds"],
        "pretrain_seconds": s["pretrain_seconds"], "data_dir": str(b.data), "train_examples": first.get("train_samples"),
        "dev_examples": first.get("eval_samples"), "test_examples": first.get("test_samples"),
        "pretraining_sentences": len(sentences),
        "tokenizer": {"path": str(b.out / "tokenizer"), "kind": "wordpiece", "vocab_size": len(tokenizer), "reused": reused},
        "initialization": {"path": str(b.out / "init"), "num_parameters_masked_lm": num_parameters, "preset": "bert"},
        "pretraining": pretrainings.get("mlm"), "pretrainings": pretrainings, "entries": rows,
        "references": [{**r, "approximate": True, "published": True} for r in BOARDS["sst2"]["references"]],
    }  # fmt: skip


# ----------------------------------------------------------------------------------------------
# ablations and length_extrapolation: GPT variants on Tiny Shakespeare
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSize:
    """The baseline's sizes, from which some variants derive theirs (GQA's heads, E, GLU width)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int

    @property
    def glu_intermediate_size(self) -> int:
        # Shazeer (2020): a gated feed-forward has 3 matrices, so 2/3 of the width keeps the parameters
        return max(8, round(2 * self.intermediate_size / 3 / 8) * 8)


def model_size(s: dict) -> ModelSize:
    hidden = s["hidden_size"]
    return ModelSize(
        hidden, s["num_hidden_layers"], s["num_attention_heads"], s.get("intermediate_size") or 4 * hidden
    )


def variant_fields(variant: SimpleNamespace, size: ModelSize, match_glu: bool = True) -> dict:
    """All config fields a variant's run sets beyond the sizes: the baseline's, then its own."""
    fields = dict(variant.fields)
    if variant.glu and match_glu:
        fields["intermediate_size"] = size.glu_intermediate_size
    if variant.derived == "kv_half":
        fields["num_key_value_heads"] = max(1, size.num_attention_heads // 2)
    elif variant.derived == "embedding_quarter":
        fields["embedding_size"] = max(2, size.hidden_size // 4)
    return {**BASELINE, "intermediate_size": size.intermediate_size, **fields}


def variant_config(
    variant: SimpleNamespace, size: ModelSize, vocab_size: int, block_size: int, match_glu: bool = True
):
    """The `HfLmGPTConfig` `training.train` builds for this variant (special tokens aside)."""
    from hf_lm import HfLmGPTConfig

    return HfLmGPTConfig(
        vocab_size=vocab_size, hidden_size=size.hidden_size, num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads, max_position_embeddings=block_size,
        hidden_dropout=0.0, attention_dropout=0.0, **variant_fields(variant, size, match_glu),
    )  # fmt: skip


def forward_flops_per_token(config, context: int) -> int:
    """Forward FLOPs per token of a GPT config, Narang et al.'s "Ops" column in per-token form.

    2 FLOPs per multiply-add of every weight matrix a token goes through (attention projections,
    feed-forward, router, LM head; embeddings are lookups): with a mixture of experts only the k
    experts it is routed to count. Plus attention itself, 2 * 2 * heads * head_dim FLOPs per key for
    scores and values, over the (context + 1) / 2 keys a causal token sees on average.
    """
    import torch
    from torch import nn

    from hf_lm import HfLmGPTForCausalLM
    from hf_lm.models.hflm_layers import SparseMoE

    with torch.device("meta"):  # shapes only, no memory
        model = HfLmGPTForCausalLM(config)
    macs = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    for moe in (m for m in model.modules() if isinstance(m, SparseMoE)):
        per_expert = sum(m.weight.numel() for m in moe.experts[0].modules() if isinstance(m, nn.Linear))
        macs -= (moe.num_experts - moe.top_k) * per_expert  # the experts a token skips
    width = config.num_attention_heads * config.head_dim
    attention = 2 * 2 * config.num_hidden_layers * width * (context + 1) / 2
    return round(2 * macs + attention)


# config fields that `training.train` has a flag for; the others go through --config_overrides
_TRAIN_FLAGS = set(
    "hidden_act norm_type norm_position position_embedding_type num_key_value_heads intermediate_size".split()
)


def variant_flags(variant: SimpleNamespace, size: ModelSize, match_glu: bool = True) -> list[str]:
    """The `training.train` flags that select a variant's architecture."""
    flags, overrides = [], {}
    for name, value in variant_fields(variant, size, match_glu).items():
        if name == "tie_word_embeddings":
            flags += [] if value else ["--no_tie_word_embeddings"]
        elif name in _TRAIN_FLAGS:
            flags += [f"--{name}", str(value)]
        else:
            overrides[name] = value
    return flags + (["--config_overrides", json.dumps(overrides, sort_keys=True)] if overrides else [])


def variant_argv(
    s: dict,
    variant: SimpleNamespace,
    seed: int,
    data: dict,
    tokenizer_dir: Path,
    out: Path,
    early_step: int,
    log_every: int,
) -> list[str]:
    """The `training.train` arguments of one (variant, seed) run."""
    size = model_size(s)
    argv = [
        "--dataset", data["train_file"], "--eval_dataset", data["val_file"], "--sample_by", "document",
        "--tokenizer_kind", "char", "--tokenizer_name_or_path", str(tokenizer_dir), "--block_size", str(s["block_size"]),
        "--hidden_size", str(size.hidden_size), "--num_hidden_layers", str(size.num_hidden_layers),
        "--num_attention_heads", str(size.num_attention_heads), "--hidden_dropout", "0.0", "--attention_dropout", "0.0",
        "--max_steps", str(s["max_steps"]), "--per_device_batch_size", str(s["batch_size"]),
        "--learning_rate", str(s["learning_rate"]), "--warmup_steps", str(s["warmup_steps"]), "--lr_scheduler", "cosine",
        "--weight_decay", "0.1", "--adam_beta2", "0.99", "--seed", str(seed),
        "--eval_every", str(early_step),  # so the early loss is an evaluation
        "--log_every", str(log_every), "--save_every", str(s["max_steps"]), "--keep_last", "1",
        "--report_to", "csv", "--output_dir", str(out),
    ]  # fmt: skip
    for key in ("eval_batches", "max_train_seconds"):
        argv += [f"--{key}", str(s[key])] if s[key] is not None else []
    return argv + variant_flags(variant, size, s.get("match_glu_params", True))


def read_run(out: Path, early_step: int) -> dict:
    """One finished run's numbers: final and early validation loss, median step time, steps and
    parameters (counted in the saved weights: tied and shared tensors once).

    The step time is the median over logging intervals that hold no evaluation (the loop records
    `seconds` before it evaluates, so an interval starting at an evaluation step holds it).
    """
    from safetensors import safe_open

    final = json.loads((out / "final_metrics.json").read_text())
    rows = read_metrics(out / "metrics.csv")
    evals = [r for r in rows if r.get("eval_loss") is not None]
    eval_steps = [int(r["step"]) for r in evals]
    early = next((r for r in evals if r["step"] >= early_step), None)  # a capped run may stop before it
    logged = [
        (int(r["step"]), r["seconds"])
        for r in rows
        if r.get("loss") is not None and r.get("seconds") is not None
    ]
    per_step = [
        (t1 - t0) / (s1 - s0)
        for (s0, t0), (s1, t1) in zip(logged, logged[1:])
        if s1 > s0 and not any(s0 <= e < s1 for e in eval_steps)
    ]
    parameters = 0
    for file in sorted((out / "final").glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            parameters += sum(math.prod(f.get_slice(key).get_shape()) for key in f.keys())
    return {
        "final_loss": final["eval_loss"], "early_loss": early["eval_loss"] if early else None,
        "early_loss_step": int(early["step"]) if early else None,
        "step_time_ms": round(1000 * statistics.median(per_step), 3) if per_step else None,
        "steps": final["step"], "seconds": final["seconds"], "parameters": parameters,
    }  # fmt: skip


def mean_std(values: list) -> dict:
    """Mean and sample standard deviation of the values that exist (std None below two values)."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    if not present:
        return {"mean": None, "std": None, "n": 0}
    return {
        "mean": statistics.fmean(present),
        "std": statistics.stdev(present) if len(present) > 1 else None,
        "n": len(present),
    }


def run_grid(jobs: list[tuple], s: dict) -> list[dict]:
    """Train (or reuse) every `(name, seed, folder, argv)` job, `jobs` at a time; each one's `train_run`."""

    def work(job):
        name, seed, out, argv = job
        run = train_run(argv, out, s["num_threads"], reuse=not s["rerun"])
        logger.info("%-22s seed %d: %s", name, seed, run["status"])
        return run

    with ThreadPoolExecutor(max_workers=s["jobs"]) as pool:
        return list(pool.map(work, jobs))


def _gpt_data(b: Board) -> tuple[dict, Path, int]:
    """The split (first characters of each part kept) and the character tokenizer, trained on the whole
    text as nanoGPT builds its vocabulary; returns (data, tokenizer folder, vocabulary size)."""
    s = b.settings
    data = write_split(b.data, b.out / "data", None, s["train_chars"], s["eval_chars"])
    whole = Path(b.data).read_text(encoding="utf-8")
    vocab_size = len(char_tokenizer(whole, b.out / "tokenizer", s["block_size"], 512))
    return (
        {**data, "tokenizer": str(b.out / "tokenizer"), "vocab_size": vocab_size},
        b.out / "tokenizer",
        vocab_size,
    )


def run_ablations(b: Board) -> dict:
    s, size, start = b.settings, model_size(b.settings), time.perf_counter()
    data, tokenizer_dir, vocab_size = _gpt_data(b)
    variants = {name: VARIANTS[name] for name in b.names}
    configs = {
        n: variant_config(v, size, vocab_size, s["block_size"], s["match_glu_params"])
        for n, v in variants.items()
    }
    early_step = max(1, round(s["max_steps"] * s["early_fraction"]))
    # at most every 10 steps, and at least 5 logs before the early evaluation, so steps can be timed
    log_every = s["log_every"] or max(1, min(10, early_step // 5))
    jobs = [
        (name, seed, out, variant_argv(s, variant, seed, data, tokenizer_dir, out, early_step, log_every))
        for name, variant in variants.items()
        for seed in s["seeds"]
        for out in [b.out / "runs" / name / f"seed{seed}"]
    ]
    runs = run_grid(jobs, s)
    rows = []
    for name, variant in variants.items():
        seeds = [
            {"seed": seed, "status": run["status"], "output_dir": str(out), "command": run["command"],
             **(read_run(out, early_step) if run["status"] != "failed" else {"error_tail": run["error_tail"]})}
            for (job_name, seed, out, _), run in zip(jobs, runs) if job_name == name
        ]  # fmt: skip
        rows.append({
            "name": name, "component": variant.component, "description": variant.description,
            "config_fields": variant_fields(variant, size, s["match_glu_params"]),
            **{key: mean_std([r.get(key) for r in seeds]) for key in ("parameters", "step_time_ms", "early_loss", "final_loss", "steps")},
            "runs": seeds, "flops_per_token": forward_flops_per_token(configs[name], s["block_size"]),
        })  # fmt: skip
    result = {
        "task": "Tiny Shakespeare, character level: GPT-style ablations, one component at a time",
        "seeds": list(s["seeds"]),
        "budget": {
            "max_steps": s["max_steps"], "max_train_seconds_per_run": s["max_train_seconds"], "batch_size": s["batch_size"],
            "block_size": s["block_size"], "tokens_per_step": s["batch_size"] * s["block_size"],
            "learning_rate": s["learning_rate"], "warmup_steps": s["warmup_steps"], "lr_scheduler": "cosine",
            "early_loss_step": early_step, "eval_batches": s["eval_batches"],
        },
        "baseline": {**size.__dict__, "glu_intermediate_size": size.glu_intermediate_size if s["match_glu_params"] else None, **BASELINE},
        "data": data, "wall_seconds": round(time.perf_counter() - start, 1), "variants": rows,
    }  # fmt: skip
    plot_ablations(rows, b.out / "ablations.png", ablations_title(result))
    return result


def plot_ablations(rows: list[dict], path: Path, title: str) -> None:
    """Final validation loss per variant (mean, error bars one std), the baseline as a line."""
    plt = pyplot()
    shown = [r for r in rows if r["final_loss"]["mean"] is not None]
    colors = {c: plt.cm.tab10(i % 10) for i, c in enumerate(sorted({r["component"] for r in rows}))}
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(shown) + 1.5))
    y = list(range(len(shown)))[::-1]
    for yi, r in zip(y, shown):
        loss = r["final_loss"]
        ax.errorbar(
            loss["mean"], yi, xerr=loss["std"] or 0.0, fmt="o", capsize=3, color=colors[r["component"]]
        )
    base = next((r for r in shown if r["name"] == "baseline"), None)
    if base is not None:
        ax.axvline(base["final_loss"]["mean"], color="gray", linestyle="--", linewidth=1, label="baseline")
    ax.set_yticks(y, [f"{r['name']} ({r['component']})" for r in shown])
    ax.set_xlabel("final validation loss (nats/char), mean ± std across seeds")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    _save(plt, fig, ax, path)


def extrapolation_scores(folder: Path, stream, block_size: int) -> dict:
    """Perplexity of the model saved in `folder` on the token `stream`: non-overlapping windows of
    each multiple of `block_size` ("refuses" and the error when the model will not take them),
    and a sliding window of `block_size` tokens, stride `block_size / 2`."""
    from hf_lm import HfLmGPTForCausalLM
    from hf_lm.metrics.sliding_window import sliding_window_perplexity

    model = HfLmGPTForCausalLM.from_pretrained(folder).eval()
    result = {"lengths": {}}
    for m in MULTIPLIERS:
        length = m * block_size
        try:
            scored = sliding_window_perplexity(model, stream, length, stride=length, batch_size=8)
            result["lengths"][str(m)] = {
                "length": length,
                "perplexity": scored["perplexity"],
                "n_tokens": scored["n_tokens"],
            }
        except ValueError as e:  # learned positions beyond their table
            result["lengths"][str(m)] = {"length": length, "refuses": str(e)}
    sliding = sliding_window_perplexity(model, stream, block_size, stride=block_size // 2, batch_size=8)
    result["sliding"] = {"window": block_size, "stride": block_size // 2, "perplexity": sliding["perplexity"]}
    return result


def run_length_extrapolation(b: Board) -> dict:
    import torch
    from transformers import AutoTokenizer

    s, size, start = b.settings, model_size(b.settings), time.perf_counter()
    torch.set_num_threads(s["num_threads"] or torch.get_num_threads())
    data, tokenizer_dir, vocab_size = _gpt_data(b)
    variants = {name: BOARDS["length_extrapolation"]["entries"][name] for name in b.names}
    if "xpos" in variants:
        xpos = variants["xpos"]
        variants["xpos"] = SimpleNamespace(
            **{**vars(xpos), "fields": {**xpos.fields, "xpos_scale_base": s["xpos_scale_base"]}}
        )
    for variant in variants.values():  # every scheme must build before training starts
        variant_config(variant, size, vocab_size, s["block_size"])
    early_step, log_every = max(1, round(s["max_steps"] * 0.5)), max(1, min(10, s["max_steps"] // 10))
    jobs = [(name, b.seed, b.out / "runs" / name, variant_argv(s, variant, b.seed, data, tokenizer_dir, b.out / "runs" / name, early_step, log_every))
            for name, variant in variants.items()]  # fmt: skip
    runs = run_grid(jobs, s)
    text = Path(data["val_file"]).read_text(encoding="utf-8")
    stream = torch.tensor(
        AutoTokenizer.from_pretrained(tokenizer_dir)(text, add_special_tokens=False)["input_ids"]
    )
    rows = []
    for (name, _, out, _), run in zip(jobs, runs):
        row = {"scheme": name, "status": run["status"], "output_dir": str(out), "command": run["command"]}
        if run["status"] != "failed":
            row.update(
                extrapolation_scores(out / "final", stream, s["block_size"]),
                steps=run["final_metrics"]["step"],
            )
        else:
            row["error_tail"] = run["error_tail"]
        rows.append(row)
    result = {
        "task": "length extrapolation: train at context L, score validation perplexity at 1x-8x L",
        "block_size": s["block_size"], "validation_tokens": len(stream), "xpos_scale_base": s["xpos_scale_base"],
        "model": {"hidden_size": size.hidden_size, "num_hidden_layers": size.num_hidden_layers, "max_steps": s["max_steps"]},
        "data": data, "wall_seconds": round(time.perf_counter() - start, 1), "schemes": rows,
    }  # fmt: skip
    plot_length_extrapolation(
        rows, s["block_size"], b.out / "length_extrapolation.png", extrapolation_title(result)
    )
    return result


def plot_length_extrapolation(rows: list[dict], block_size: int, path: Path, title: str) -> None:
    """Perplexity against evaluation length, one line per scheme, log y (the ALiBi paper's Figure 1);
    learned positions' sliding-window perplexity as a dashed line over the lengths they refuse."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r in (r for r in rows if "lengths" in r):
        points = [(e["length"], e["perplexity"]) for e in r["lengths"].values() if "perplexity" in e]
        line = ax.plot(*zip(*points), marker="o", label=r["scheme"])[0]
        refused = [e["length"] for e in r["lengths"].values() if "refuses" in e]
        if refused:
            lengths = [points[-1][0], *refused]
            ax.plot(lengths, [r["sliding"]["perplexity"]] * len(lengths), linestyle="--", color=line.get_color(),
                    label=f"{r['scheme']} (refuses; sliding window {block_size})")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([m * block_size for m in MULTIPLIERS], [str(m * block_size) for m in MULTIPLIERS])
    ax.axvline(block_size, color="grey", linewidth=0.8, linestyle=":")
    ax.set(
        xlabel=f"evaluation length (tokens; trained at L = {block_size})",
        ylabel="validation perplexity (per character)",
    )
    ax.set_title(title, fontsize=10)
    _save(plt, fig, ax, path, loc="upper left", bbox_to_anchor=(1.01, 1.0))


# ----------------------------------------------------------------------------------------------
# The README of a results folder: `markdown(result, folder)` (benchmarks/render.py calls it)
# ----------------------------------------------------------------------------------------------


def _title(text: str, result: dict) -> list[str]:
    return [f"# {text}{' (smoke run)' if result.get('smoke') else ''}", ""]


def _images(folder: Path, *images: tuple[str, str]) -> list[str]:
    """Links to the plots that are in the folder (a re-run of a subset may have written none)."""
    return [
        line for name, alt in images if (Path(folder) / name).exists() for line in (f"![{alt}]({name})", "")
    ]


def hardware_line(result: dict) -> str:
    hw = result["hardware"]
    threads = hw.get("torch_threads_per_run", hw.get("torch_threads"))
    cores = hw.get("cores_available", hw.get("usable_cores"))
    return (
        f"Hardware: {hw['cpu_model']}, {cores} cores available, {threads} torch threads"
        + (f", GPU {hw['gpu']}" if hw.get("gpu") else "")
        + f"; torch {hw['torch']}, transformers {hw['transformers']}. Seed {result.get('seed', 0)}."
        + (
            f" Started {result['started']}, {result['total_seconds']:.0f} s in all."
            if "started" in result
            else ""
        )
    )


def settings_line(result: dict) -> str:
    """Every setting of the run, as `name` value (the figures behind the prose of the notes)."""
    items = ", ".join(f"`{key}` {value}" for key, value in result["settings"].items())
    preset = f" (preset `{result['preset']}`)" if "preset" in result else ""
    return f"Settings{preset}: {items}."


def _commands(result: dict, extra=()) -> list[str]:
    entries = result.get("entries", [])
    commands = [result["command"], *extra, *[f"{r['name']}: {r['command']}" for r in entries]]
    return ["## Commands", "", "```", *commands, "```", ""]


def lm_markdown(result: dict, folder: Path) -> list[str]:
    s, data, rows, ref = result["settings"], result["data"], result["entries"], NANOGPT_REFERENCE
    table = []
    for row in rows:
        if "error" in row:
            table.append([row["label"], f"failed: {row['error']}", "", "", "", "", ""])
            continue
        size = f"{row['ngrams']:,} n-grams" if row.get("ngrams") is not None else fmt(row.get("parameters"))
        time_s = fmt(row.get("train_seconds"), 1) + (" (fit)" if row["kind"] == "ngram" else "")
        table.append([row["label"], size, fmt(row.get("steps")).replace("—", "-"), fmt(row.get("tokens_seen")), time_s,
                      f"{row['val_loss']:.4f}", f"{row['perplexity']:.2f}"])  # fmt: skip
    table.append([ref["label"], f"~{ref['parameters'] / 1e6:.2f}M", f"{ref['steps']:,}", f"{ref['tokens_seen']:,}",
                  f"~{ref['train_seconds']:.0f}", f"{ref['val_loss']:.2f}", f"{ref['perplexity']:.2f}"])  # fmt: skip
    header = "model|parameters|steps|tokens seen|train time (s)|val loss (nats/char)|perplexity".split("|")
    lines = _title("Language-modeling leaderboard: Tiny Shakespeare, character level", result) + [
        f"Generated {result.get('created', result.get('started'))} by `{result['command']}`.",
        "",
        f"- Data: `{data['source']}` ({data['characters']:,} characters), nanoGPT's split: first "
        f"{data['train_characters']:,} train, last {data['val_characters']:,} validate; one character vocabulary of "
        f"{data['vocab_size']} tokens (the characters plus `<|endoftext|>` and `<|pad|>`).",
        f"- Budget: {s['budget_seconds']:g} s of training per neural entry (the nanoGPT row runs its "
        f"{s['nanogpt_iters']:,} iterations; the n-gram is fitted); schedule: {result['schedule']}"
        + (" (step count calibrated by a probe run)" if result["schedule"] == "cosine" else "")
        + f"; seed {result['seed']}.",
        f"- {hardware_line(result)}",
        *[f"- {note}" for note in result.get("notes", [])],  # e.g. a row re-run later, and why
        "",
        markdown_table(header, table, align="lrrrrrr"),
    ]
    for row in rows:
        if row.get("kind") == "ngram" and "orders" in row:
            orders = [[str(o["order"]), fmt(o["ngrams"]), fmt(o["fit_seconds"], 1), f"{o['val_loss']:.4f}",
                       f"{o['perplexity']:.2f}"] for o in row["orders"]]  # fmt: skip
            header = ["order", "n-grams", "fit time (s)", "val loss (nats/char)", "perplexity"]
            lines += [
                "",
                f"## n-gram by order (best: {row['best_order']})",
                "",
                markdown_table(header, orders, align="rrrrr"),
            ]
    return (
        lines
        + [""]
        + _images(folder, ("val_loss.png", "validation loss"), ("loss_curves.png", "validation curves"))
    )


def translation_markdown(result: dict, folder: Path) -> list[str]:
    s, cell, beams = result["settings"], result["cell_type"], result["settings"]["num_beams"]
    header = [
        "model", "source", "parameters", "steps", "epochs", "train time (s)", "train loss", "test BLEU greedy",
        f"test BLEU beam {beams}", "greedy BLEU lowercased", "published (bentrevett)", "issue target (greedy / beam)",
    ]  # fmt: skip
    rows = []
    for row in result["entries"]:
        target = row.get("target_bleu")
        met = [
            "—" if m is None else fmt(m) for m in (row.get("target_met_greedy"), row.get("target_met_beam"))
        ]
        goal = "—" if target is None else f"≥ {target:g}: {met[0]} / {met[1]}"
        label = translation_label(row, cell)
        if "error" in row:
            rows.append(
                [
                    label,
                    "measured",
                    *["—"] * 5,
                    f"failed: {row['error']}",
                    "—",
                    "—",
                    fmt(row.get("published_bleu")),
                    goal,
                ]
            )
            continue
        rows.append([
            label, "measured", millions(row["num_parameters"]), fmt(row["train_steps"]), fmt(row["train_epochs"]),
            fmt(row["train_seconds"], 0), fmt(row["train_loss"], 3), fmt(row["test_bleu_greedy"]),
            fmt(row["test_bleu_beam"]), fmt(row["test_bleu_greedy_lowercase"]), fmt(row.get("published_bleu")), goal,
        ])  # fmt: skip
    for ref in result["references"]:
        rows.append([f"{ref['model']} (bentrevett)", "published, not measured here", "—", "—", "10", "—", "—",
                     fmt(ref["bleu"]), "—", "—", "—", "—"])  # fmt: skip
    device = f" Device: {result['device']} (preset `{result['preset']}`)." if "device" in result else ""
    return _title("Multi30k De→En translation leaderboard", result) + [
        f"Every model trained from scratch on {result['train_pairs']:,} training pairs for at most "
        f"**{s['budget_seconds']:g} s** of wall-clock training or {s['max_epochs']:g} epochs, whichever came first; "
        f"test BLEU (sacrebleu corpus BLEU, 13a, cased) on {result['test_pairs']:,} test_2016_flickr pairs, greedy "
        f"and beam {beams}. One joint byte-level BPE tokenizer ({result['tokenizer']['vocab_size']:,} tokens) for all. "
        f"RNN entries: {cell.upper()} cells.{device}",
        "",
        settings_line(result),
        "",
        markdown_table(header, rows),
        "",
        "Published rows: bentrevett's 10-epoch test BLEU, with their own tokenization and BLEU: indicative only. "
        "The target: the Transformer at test BLEU ≥ 37 within 10 minutes of training on one GPU.",
        "",
        *_images(folder, ("bleu.png", "test BLEU per model")),
        hardware_line(result),
        "",
        *_commands(result),
    ]


def _pct(value) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def sst2_markdown(result: dict, folder: Path) -> list[str]:
    s, pre = result["settings"], result.get("pretraining")
    pretrainings = result.get("pretrainings") or ({"mlm": pre} if pre is not None else {})
    header = [
        "model", "source", "parameters", "pretraining", "fine-tuning steps", "epochs", "fine-tuning time (s)",
        "dev accuracy (%)", "test accuracy (%)", "test F1 (%)",
    ]  # fmt: skip
    rows = []
    for row in result["entries"]:
        if "error" in row:
            rows.append([row["label"], "measured", *["—"] * 5, f"failed: {row['error']}", "—", "—"])
            continue
        run = pretrainings.get(BOARDS["sst2"]["entries"][row["name"]].pretraining)
        rows.append([
            row["label"], "measured", millions(row["num_parameters"]),
            f"{run['steps']:,} steps, {run['seconds']:.0f} s" if run else "none", fmt(row["train_steps"]),
            fmt(row["train_epochs"]), fmt(row["train_seconds"], 0), _pct(row["dev_accuracy"]),
            _pct(row["test_accuracy"]), _pct(row["test_f1"]),
        ])  # fmt: skip
    for ref in result["references"]:
        rows.append(
            [ref["model"], "published, not measured here", *["—"] * 6, f"≈{_pct(ref['accuracy'])}", "—"]
        )
    electra = pretrainings.get("electra")
    plural = lambda n, word: f"{n} {word}{'' if n == 1 else 's'}"  # noqa: E731
    return _title("SST-2 leaderboard", result) + [
        f"A BERT-style encoder ({plural(s['num_layers'], 'layer')}, width {s['hidden_size']}, "
        f"{plural(s['num_heads'], 'head')}, feed-forward {s['intermediate_size']}; "
        f"{result['tokenizer']['vocab_size']:,}-token WordPiece) fine-tuned on {result['train_examples']:,} SST-2 "
        f"training phrases for at most **{s['budget_seconds']:g} s** of wall-clock training or {s['max_epochs']:g} "
        f"epochs, from scratch or after masked-LM pretraining on the {result['pretraining_sentences']:,} distinct "
        "training phrases"
        + (f" ({pre['steps']:,} steps in {pre['seconds']:.0f} s, budget {s['pretrain_seconds']:g} s; held-out "
           f"masked-token accuracy {_pct(pre.get('eval_mlm_accuracy'))}%)" if pre else "")
        + (f"; the ELECTRA entry was pretrained for the same wall-clock budget by replaced-token detection "
           f"({electra['steps']:,} steps in {electra['seconds']:.0f} s; held-out discriminator accuracy "
           f"{_pct(electra.get('eval_disc_accuracy'))}%, generator masked-token accuracy "
           f"{_pct(electra.get('eval_mlm_accuracy'))}%)" if electra else "")
        + f". Accuracy on the validation split ({result['dev_examples']:,} phrases) and the test split "
        f"({result['test_examples']:,} GLUE dev sentences).",
        "",
        markdown_table(header, rows),
        "",
        *_images(folder, ("accuracy.png", "dev and test accuracy per model")),
        hardware_line(result),
        "",
        *_commands(result, [f"{name} pretraining: {run['command']}" for name, run in pretrainings.items()]),
    ]  # fmt: skip


def mask_predict_markdown(result: dict, folder: Path) -> list[str]:
    s, (ar, mp), decoded = result["settings"], result["entries"], result["mask_predict"]

    def cells(row: dict, decoding: str, bleu, seconds) -> list[str]:
        return [decoding, fmt(bleu), fmt(seconds, 1), row["label"], millions(row.get("num_parameters")),
                fmt(row.get("train_steps")), fmt(row.get("train_seconds"), 0), fmt(row.get("train_loss"), 3)]  # fmt: skip

    m = ar["metrics"]
    rows = [cells(ar, "greedy", m.get("test_greedy_bleu"), m.get("test_greedy_runtime")),
            cells(ar, f"beam {s['num_beams']}", m.get("test_bleu"), m.get("test_runtime"))]  # fmt: skip
    rows += [cells(mp, f"Mask-Predict T = {r['iterations']}, ℓ = {s['length_beam']}", r["test_bleu"], r["decode_seconds"])
             for r in decoded["by_iterations"]]  # fmt: skip
    header = "decoding|test BLEU|decode time (s)|model|parameters|steps|train time (s)|train loss".split("|")
    lines = _title("Mask-Predict vs autoregressive, Multi30k De→En", result) + [
        f"Both models trained from scratch for at most {s['budget_seconds']:.0f} s of wall-clock training each "
        f"({s['num_layers']}+{s['num_layers']} layers, width {s['hidden_size']}, batch {s['batch_size']}, same "
        f"tokenizer of {s['vocab_size']} tokens), no distillation. Absolute BLEU is low; the point is the curve over T "
        f"and the comparison at equal training time. Test: {decoded['test_samples']} test_2016_flickr pairs, "
        "sacrebleu corpus BLEU (13a, cased).",
        "",
        markdown_table(header, rows),
        "",
        *_images(folder, ("bleu_vs_iterations.png", "BLEU against iterations")),
    ]
    if decoded.get("trace"):
        trace = [
            [str(r["iteration"]), str(r["masked"]), r["tokens"], r["text"], f"{r['mean_log_prob']:.2f}"]
            for r in decoded["trace"]
        ]
        lines += [
            "## Mask-Predict trace: one test sentence", "", f"Source: {decoded['trace_source']}", "",
            f"Reference: {decoded['trace_reference']}", "",
            f"Predicted length: {decoded['trace_length']} tokens; T = {decoded['trace_iterations']}. Tokens in brackets "
            "were masked at the input of that iteration and re-predicted (iteration 0: all of them; then the "
            "n = L·(T−t)/T least confident).",
            "", markdown_table(["t", "masked", "tokens", "text", "mean log p"], trace), "",
            *_images(folder, ("trace.png", "trace")),
        ]  # fmt: skip
    return lines + [hardware_line(result), "", *_commands(result)]


def _pm(stat: dict, digits: int) -> str:
    if stat["mean"] is None:
        return "n/a"
    if stat["std"] is None:
        return f"{stat['mean']:.{digits}f}"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def ablations_title(result: dict) -> str:
    base, budget = result["baseline"], result["budget"]
    return (f"Tiny Shakespeare (char): {base['num_hidden_layers']}L x {base['hidden_size']}, {budget['max_steps']} steps, "
            f"seeds {','.join(map(str, result['seeds']))}")  # fmt: skip


def ablations_markdown(result: dict, folder: Path) -> list[str]:
    """The Narang-style table: one row per variant, mean ± std across seeds; `steps` is what the runs
    did (`max_steps`, or fewer under a wall-clock cap). FLOPs/token where the result has them."""
    rows, hw = result["variants"], result["hardware"]
    flops = any(r.get("flops_per_token") for r in rows)
    base = next((r["final_loss"]["mean"] for r in rows if r["name"] == "baseline"), None)
    header = ["variant", "component", "parameters", *(["FLOPs/token"] if flops else []), "step time (ms)",
              f"val loss @ step {result['budget']['early_loss_step']}", "final val loss", "Δ vs baseline", "steps", "seeds"]  # fmt: skip
    body = []
    for r in rows:
        loss, params = r["final_loss"]["mean"], r["parameters"]["mean"]
        delta = "" if loss is None or base is None or r["name"] == "baseline" else f"{loss - base:+.3f}"
        delta = r.get("delta_vs_baseline", delta)  # as measured, where only rounded means were kept
        body.append([
            r["name"], r["component"], "n/a" if params is None else f"{params:,.0f}",
            *([f"{r['flops_per_token']:,}" if r.get("flops_per_token") else "n/a"] if flops else []),
            _pm(r["step_time_ms"], 1), _pm(r["early_loss"], 3), _pm(r["final_loss"], 3), delta, _pm(r["steps"], 0),
            f"{r['final_loss']['n']}/{len(r['runs'])}",
        ])  # fmt: skip
    threads = hw.get("torch_threads_per_run", hw.get("torch_threads"))
    return _title("GPT-style ablations on Tiny Shakespeare (character level)", result) + [
        f"{ablations_title(result)}; mean ± std across seeds. Validation loss in nats per character; step time is the "
        f"median training step on {hw['cpu_model']} with {threads} thread(s) per run, {hw['concurrent_runs']} run(s) "
        "at a time.",
        "",
        markdown_table(header, body, align="ll" + "r" * (len(header) - 2)),
        "",
        *_images(folder, ("ablations.png", "final validation loss per variant")),
    ]


def extrapolation_title(result: dict) -> str:
    m = result["model"]
    return (f"Tiny Shakespeare (char), GPT {m['num_hidden_layers']}L x {m['hidden_size']}, trained at L = "
            f"{result['block_size']} for {m['max_steps']} steps; {result['validation_tokens']} validation tokens")  # fmt: skip


def length_extrapolation_markdown(result: dict, folder: Path) -> list[str]:
    L = result["block_size"]
    header = [
        "scheme",
        *(f"{m}× L = {m * L}" for m in MULTIPLIERS),
        f"sliding window {L}, stride {L // 2}",
        "steps",
    ]

    def cell(entry: dict) -> str:
        return "refuses" if "refuses" in entry else fmt(entry["perplexity"], 2)

    body = [
        [r["scheme"], *(cell(r["lengths"][str(m)]) for m in MULTIPLIERS), fmt(r["sliding"]["perplexity"], 2), str(r["steps"])]
        if "lengths" in r
        else [r["scheme"], *("failed" for _ in MULTIPLIERS), "failed", "-"]
        for r in result["schemes"]
    ]  # fmt: skip
    return _title("Length extrapolation", result) + [
        f"{extrapolation_title(result)}.", "", markdown_table(header, body), "",
        *_images(folder, ("length_extrapolation.png", "perplexity against evaluation length")),
    ]  # fmt: skip


RUNNERS = {
    "lm": (run_lm, lm_markdown),
    "translation": (run_translation, translation_markdown),
    "sst2": (run_sst2, sst2_markdown),
    "mask_predict": (run_mask_predict, mask_predict_markdown),
    "ablations": (run_ablations, ablations_markdown),
    "length_extrapolation": (run_length_extrapolation, length_extrapolation_markdown),
}


def markdown(result: dict, folder: Path) -> list[str]:
    """The README lines of a leaderboard's results (the notes follow them, `benchmarks/render.py`)."""
    return RUNNERS[result["board"]][1](result, folder)


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------


def failures(result: dict) -> list[str]:
    """The entries (or runs) of a result that failed."""
    failed = [r["name"] for r in result.get("entries", []) if "error" in r]
    failed += [
        f"{r['name']} seed {run['seed']}"
        for r in result.get("variants", [])
        for run in r["runs"]
        if run["status"] == "failed"
    ]
    return failed + [r["scheme"] for r in result.get("schemes", []) if r["status"] == "failed"]


def main(argv: list[str] | None = None) -> dict:
    """Run one board; returns what its results.json holds (exit 1 after writing it if an entry failed)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    args = parse_args(argv)
    entries = BOARDS[args.board]["entries"]
    if args.list:  # the board's entries: their kind or component, what they are
        for name, e in entries.items():
            what = getattr(e, "description", getattr(e, "label", e))
            extra = e.fields if hasattr(e, "fields") else " ".join(getattr(e, "model_args", ()))
            sys.stdout.write(
                f"{name:22s} {getattr(e, 'component', getattr(e, 'kind', ''))}: {what} {extra}\n"
            )
        return {}
    s = args.settings
    if s.get("num_threads") and args.board in (
        "translation",
        "sst2",
        "mask_predict",
    ):  # they train in this process
        import torch

        torch.set_num_threads(s["num_threads"])
    board = Board(args.board, args.names, s, args.data, args.output_dir, args.seed, args.smoke)
    board.out.mkdir(parents=True, exist_ok=True)
    start, started = (
        time.perf_counter(),
        datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    logger.info("%s: entries %s, preset %s, under %s", args.board, args.names, args.preset, board.out)
    result = {
        "kind": "leaderboard", "board": args.board, "preset": args.preset, "smoke": args.smoke, "seed": args.seed,
        "settings": s, "started": started, "command": shlex.join(["python", "-m", "benchmarks.leaderboard", *(sys.argv[1:] if argv is None else argv)]),
        "hardware": hardware(s.get("num_threads")), "git_revision": git_revision(),
    }  # fmt: skip
    if (
        s.get("device") == "cpu" and result["hardware"]["gpu"]
    ):  # a GPU this run did not use is not its hardware
        result["hardware"]["gpu_present_unused"], result["hardware"]["gpu"] = result["hardware"]["gpu"], None
    if "jobs" in s:
        result["hardware"]["concurrent_runs"] = s["jobs"]
    result.update(RUNNERS[args.board][0](board))
    result["hardware"]["loadavg_end"] = load_average()
    result["total_seconds"] = time.perf_counter() - start
    readme = write_results(board.out, result)
    logger.info("Wrote %s", readme)
    if failures(result):
        raise SystemExit(f"Failed: {failures(result)}; see the log and {board.out / 'results.json'}.")
    return result


if __name__ == "__main__":
    main()
