#!/usr/bin/env python
"""SST-2 leaderboard: a BERT-style classifier fine-tuned from scratch against the same architecture
after masked-LM (or ELECTRA) pretraining on the available text, under the same fine-tuning budget.

    # the full leaderboard (15 min pretraining + 2 x 5 min fine-tuning + evaluation on a CPU)
    python -m benchmarks.leaderboard_sst2 --data_dir ../shared/data/sst2
    # CI's smoke version: a tiny model, 2,000 training phrases, budgets of a few seconds
    python -m benchmarks.leaderboard_sst2 --data_dir ../shared/data/sst2 --smoke
    # also the compute-matched control, with other budgets
    python -m benchmarks.leaderboard_sst2 --entries scratch,mlm,scratch_long \\
        --pretrain_seconds 1800 --budget_seconds 600
    # ELECTRA against MLM pretraining, the same pretraining wall-clock time
    python -m benchmarks.leaderboard_sst2 --entries scratch,mlm,electra

Entries (`--entries`, comma-separated; default `scratch,mlm`):

- `scratch`: fine-tuned from the random initialization (`init/`), i.e. trained from scratch.
- `mlm`: first pretrained with BERT's masked-LM objective (15% of tokens, 80/10/10) on the SST-2
  training sentences for `--pretrain_seconds` (`python -m training.train --objective mlm
  --init_from init/ ...`; the labels are not used), then fine-tuned from its `final/` folder
  exactly like `scratch`.
- `electra` (optional): the same encoder pretrained for the same `--pretrain_seconds` of wall-clock
  time with ELECTRA's replaced-token detection (Clark et al., 2020; `--objective electra`: a
  generator 1/4 as wide sharing the embeddings, loss MLM + 50 x discriminator), then its
  discriminator fine-tuned exactly like `mlm` (`HfLmElectraForSequenceClassification`: ELECTRA's
  GELU classification head on [CLS] instead of BERT's tanh pooler). Same compute means the same
  wall-clock pretraining time on the same machine: an ELECTRA step also runs the generator, so it
  takes fewer (and costlier) steps than MLM in that time; both step counts are reported.
- `scratch_long` (optional control): like `scratch` with the pretraining budget added to its
  fine-tuning budget, so it gets as much training time as `mlm` in all.

Same architecture by construction: one `HfLmBertForMaskedLM` (the "bert" preset: post-norm,
exact GELU, learned positions; default 4 layers, width 256, 4 heads, feed-forward 1024, dropout
0.1) is initialized from the seed and saved to `output_dir/init/`; pretraining starts from it and
`scratch` fine-tunes it directly. `training.finetune_classification` loads either folder with
`AutoModelForSequenceClassification` (the encoder's weights; a new pooler and classifier drawn
from the seed) and trains every parameter. One WordPiece tokenizer ([CLS] sentence [SEP];
[SEP] also separates the sentences packed into pretraining blocks) is trained once on the
training sentences and shared (`output_dir/tokenizer/`, reused while its settings match).

Fine-tuning: AdamW, constant learning rate after a linear warmup (a time budget has no known last
step), batch 32, until `--budget_seconds` of wall-clock training or `--max_epochs`, whichever comes
first; learning rate 5e-4 from scratch and 1e-4 after pretraining (`--scratch_learning_rate`,
`--pretrained_learning_rate`): each start gets its usual rate, the budget is the same. Then
accuracy on the validation split (`dev.tsv`, 6,735 phrases) and on the labelled test split
(`test.tsv`: the 872 GLUE dev sentences, the usual SST-2 benchmark).

Pretraining text: the distinct sentences of `train.tsv` (SST-2's training phrases, many of them
sub-phrases of one another; the dev and test sentences are not used), one per line, packed into
blocks of `--max_seq_length` tokens; 5% of them held out for the masked-LM evaluation.

Reference rows (published, not measured here; from the data README): BERT-base about 93% test
accuracy (GLUE dev), a bag-of-words model about 80%.

Outputs under `--output_dir` (default `out/leaderboard_sst2`): `results.md`, `results.json`
(hardware, seed, budgets, command lines, every metric), `accuracy.png` (dev and test accuracy per
model, published references hatched), `tokenizer/`, `init/`, `pretraining_text.txt` and
`runs/<entry>/` (`runs/mlm_pretrain/` for the pretraining). Committed full results live in
`benchmarks/results/leaderboard_sst2/`.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.bench_common import (
    bar_chart,
    command_line,
    exit_if_failed,
    fmt,
    leaderboard_footer,
    leaderboard_parser,
    markdown_table,
    millions,
    parse_leaderboard_args,
    preset_table,
    resolve,
    reuse_or_train_tokenizer,
    run_entry_row,
    start_leaderboard,
    training_fields,
    write_results,
)

logger = logging.getLogger("leaderboard_sst2")


@dataclass(frozen=True)
class Entry:
    """One leaderboard model: where fine-tuning starts (the `training.train` objective that pretrains
    it, None for the initialization), and whether it gets the pretraining time too."""

    label: str
    pretraining: str | None = None
    extra_time: bool = False

    @property
    def pretrained(self) -> bool:
        return self.pretraining is not None


ENTRIES = {
    "scratch": Entry("BERT-style, from scratch"),
    "mlm": Entry("BERT-style, MLM-pretrained on SST-2 text", pretraining="mlm"),
    "electra": Entry("ELECTRA discriminator, pretrained on SST-2 text", pretraining="electra"),
    "scratch_long": Entry("BERT-style, from scratch, pretraining + fine-tuning time", extra_time=True),
}
DEFAULT_ENTRIES = "scratch,mlm"

# published SST-2 accuracies on the GLUE dev sentences (this test split), from the data README
REFERENCES = [
    ("BERT-base", "BERT-base (Devlin et al., 2019), pretrained on BooksCorpus + Wikipedia", 0.93),
    ("bag of words", "bag-of-words classifier", 0.80),
]

# the full leaderboard and its smoke version, one row per setting: (full, smoke, help);
# command-line flags override single values
PRESETS, HELP = preset_table(
    {
        "budget_seconds": (300.0, 2.0, "Wall-clock fine-tuning budget per entry, in seconds"),
        "pretrain_seconds": (900.0, 3.0, "Wall-clock MLM pretraining budget, in seconds"),
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
        "pretrain_learning_rate": (5e-4, 2e-3, "Peak MLM pretraining learning rate"),
        "pretrain_eval_every": (
            1000,
            1_000_000,
            "Masked-LM evaluation every N pretraining steps (and at the end)",
        ),
        "max_train_samples": (None, 2000, "Use the first N training phrases; None = all"),
        "max_eval_samples": (None, 200, "Evaluate on the first N validation phrases; None = all"),
        "max_test_samples": (None, 200, "Test on the first N test sentences; None = all 872"),
        "logging_steps": (50, 10, "Log the fine-tuning loss every N steps"),
    }
)


def build_parser() -> argparse.ArgumentParser:
    parser = leaderboard_parser(
        "SST-2 leaderboard: a BERT-style classifier from scratch vs after MLM pretraining on the "
        "SST-2 training text, same fine-tuning budget; dev and test accuracy.",
        data_dir="../shared/data/sst2",
        data_help="SST-2 folder (train/dev/test .tsv).",
        output_dir="out/leaderboard_sst2",
        entries=(DEFAULT_ENTRIES, f"Comma-separated subset of {list(ENTRIES)}."),
        smoke_help="Tiny model, data and budgets (CI; under a minute).",
        seed_help="Seed of the initialization, masking and data order.",
        presets=(PRESETS, HELP),
    )
    parser.add_argument(
        "--reuse_pretraining",
        action="store_true",
        help="Reuse a finished pretraining in output_dir/runs/mlm_pretrain made with the same settings.",
    )
    return parser


# ---------------------------------------------------------------------------------------------
# the shared pieces: tokenizer, initialization, pretraining text
# ---------------------------------------------------------------------------------------------


def training_sentences(data_dir: str, max_train_samples: int | None) -> list[str]:
    """The distinct training sentences of SST-2, stripped, in file order (labels unused)."""
    from training.finetune_classification import ClassificationDataArguments, load_classification_dataset

    raw = load_classification_dataset(
        ClassificationDataArguments(data_dir=data_dir, max_train_samples=max_train_samples)
    )
    texts = (text.strip() for text in raw["train"]["sentence"])
    return list(dict.fromkeys(text for text in texts if text))


def shared_tokenizer(sentences: list[str], settings: dict, data_dir: str, folder: Path):
    """Train (or reuse) the WordPiece tokenizer: BERT's specials, [SEP] also as EOS for packing."""
    from training.finetune_classification import SPECIAL_TOKENS
    from training.tokenizer import train_tokenizer

    stamp = {
        "data_dir": str(Path(data_dir).resolve()),
        "kind": "wordpiece",
        "vocab_size": settings["vocab_size"],
        "max_train_samples": settings["max_train_samples"],
        "max_seq_length": settings["max_seq_length"],
    }

    def train():
        tokenizer = train_tokenizer(
            sentences,
            kind="wordpiece",
            vocab_size=settings["vocab_size"],
            special_tokens={**SPECIAL_TOKENS, "eos_token": "[SEP]"},
            model_max_length=settings["max_seq_length"],
            padding_side="right",
        )
        if tokenizer("a")["input_ids"][:1] != [tokenizer.cls_token_id]:
            raise RuntimeError("The WordPiece tokenizer does not start its encodings with [CLS].")
        return tokenizer

    return reuse_or_train_tokenizer(folder, stamp, train)


def _encoder_config(config_class, tokenizer, settings: dict, **extra):
    """The leaderboard's encoder ("bert" preset: post-norm, exact GELU, learned positions), as `config_class`."""
    from hf_lm import BERT_PRESETS

    return config_class(
        **BERT_PRESETS["bert"],
        vocab_size=len(tokenizer),
        hidden_size=settings["hidden_size"],
        num_hidden_layers=settings["num_layers"],
        num_attention_heads=settings["num_heads"],
        intermediate_size=settings["intermediate_size"],
        max_position_embeddings=settings["max_seq_length"],
        hidden_dropout=settings["dropout"],
        attention_dropout=settings["dropout"],
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        sparse_prediction=True,  # pretraining runs the MLM head on the masked positions only
        **extra,
    )


def save_initialization(folder: Path, tokenizer, settings: dict, seed: int) -> int:
    """Save the seed's fresh `HfLmBertForMaskedLM` (and the tokenizer) to `folder`; returns its size."""
    from hf_lm import HfLmBertConfig, HfLmBertForMaskedLM

    torch.manual_seed(seed)
    model = HfLmBertForMaskedLM(_encoder_config(HfLmBertConfig, tokenizer, settings))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model.num_parameters()


def save_electra_initialization(folder: Path, tokenizer, settings: dict, seed: int) -> None:
    """Save the seed's fresh ELECTRA pair (the discriminator, the same encoder as
    `save_initialization`'s with embeddings as wide as the hidden size, and its 1/4-wide generator
    in `generator/`) and the tokenizer to `folder`, where `--objective electra --init_from` reads it."""
    from hf_lm import HfLmElectraConfig
    from training.objectives.electra import ElectraPretrainingModel

    config = _encoder_config(HfLmElectraConfig, tokenizer, settings, embedding_size=settings["hidden_size"])
    torch.manual_seed(seed)
    ElectraPretrainingModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def pretrain_argv(
    settings: dict,
    args,
    text_file: Path,
    init_dir: Path,
    tokenizer_dir: Path,
    run_dir: Path,
    objective: str = "mlm",
) -> list[str]:
    """The `training.train` arguments of the pretraining with `objective` ("mlm" or "electra")."""
    s = settings
    return [
        "--objective", objective, "--arch", "transformer", "--init_from", str(init_dir),
        "--tokenizer_name_or_path", str(tokenizer_dir), "--dataset", str(text_file), "--sample_by", "line",
        "--block_size", str(s["max_seq_length"]), "--eval_fraction", "0.05", "--eval_batches", "20",
        "--pseudo_perplexity_blocks", "0",
        "--per_device_batch_size", str(s["pretrain_batch_size"]),
        "--learning_rate", str(s["pretrain_learning_rate"]), "--lr_scheduler", "constant",
        "--warmup_steps", str(s["pretrain_warmup_steps"]),
        "--max_steps", "100000000", "--max_train_seconds", str(s["pretrain_seconds"]),
        "--eval_every", str(s["pretrain_eval_every"]), "--save_every", "100000000", "--keep_last", "1",
        "--log_every", str(s["logging_steps"]), "--seed", str(args.seed), "--output_dir", str(run_dir),
    ]  # fmt: skip


def finetune_argv(
    name: str, settings: dict, args, start_dir: Path, tokenizer_dir: Path, run_dir: Path
) -> list[str]:
    """The `training.finetune_classification` arguments of one entry."""
    entry, s = ENTRIES[name], settings
    budget = s["budget_seconds"] + (s["pretrain_seconds"] if entry.extra_time else 0.0)
    lr = s["pretrained_learning_rate"] if entry.pretrained else s["scratch_learning_rate"]
    argv = [
        "--data_dir", str(args.data_dir), "--model_name_or_path", str(start_dir),
        "--tokenizer_name_or_path", str(tokenizer_dir), "--max_seq_length", str(s["max_seq_length"]),
        "--per_device_train_batch_size", str(s["batch_size"]), "--learning_rate", str(lr),
        "--lr_scheduler_type", "constant_with_warmup", "--warmup_steps", str(s["warmup_steps"]),
        "--num_train_epochs", str(s["max_epochs"]), "--max_train_seconds", str(budget),
        "--eval_strategy", "no", "--save_strategy", "no", "--logging_steps", str(s["logging_steps"]),
        "--per_device_eval_batch_size", "128",
        "--report_to", "none", "--disable_tqdm", "true", "--seed", str(args.seed), "--output_dir", str(run_dir),
    ]  # fmt: skip
    for key in ("max_train_samples", "max_eval_samples", "max_test_samples"):
        if s[key] is not None:
            argv += [f"--{key}", str(s[key])]
    return argv


def pretrain(argv: list[str], run_dir: Path, stamp: dict, reuse: bool) -> tuple[dict, bool]:
    """Run (or reuse) the masked-LM pretraining; returns `(final metrics, reused)`."""
    stamp_file = run_dir / "leaderboard_settings.json"
    metrics_file = run_dir / "final_metrics.json"
    if (
        reuse
        and stamp_file.is_file()
        and metrics_file.is_file()
        and json.loads(stamp_file.read_text()) == stamp
    ):
        logger.info("Reusing the pretraining in %s (same settings).", run_dir)
        return json.loads(metrics_file.read_text()), True
    from training.train import main as train_main

    metrics = train_main(argv)
    stamp_file.write_text(json.dumps(stamp, indent=2))
    return metrics, False


def run_pretraining(objective: str, settings: dict, args, output_dir: Path, sentences, tokenizer) -> dict:
    """Pretrain with `objective` on the training sentences for `--pretrain_seconds` (ELECTRA from its
    own seeded initialization, `init_electra/`) into `runs/<objective>_pretrain/`; its record."""
    tokenizer_dir, init_dir = output_dir / "tokenizer", output_dir / "init"
    if objective == "electra":
        init_dir = output_dir / "init_electra"
        save_electra_initialization(init_dir, tokenizer, settings, args.seed)
    text_file = output_dir / "pretraining_text.txt"
    text_file.write_text("".join(sentence + "\n" for sentence in sentences), encoding="utf-8")
    run_dir = output_dir / "runs" / f"{objective}_pretrain"
    run_argv = pretrain_argv(settings, args, text_file, init_dir, tokenizer_dir, run_dir, objective)
    command = command_line("training.train", run_argv)
    logger.info("=== %s pretraining: %s", objective, command)
    stamp = {
        "argv": run_argv,
        "tokenizer": json.loads((tokenizer_dir / "leaderboard_settings.json").read_text()),
    }
    metrics, reused = pretrain(run_argv, run_dir, stamp, args.reuse_pretraining)
    keys = (
        "train_loss",
        "eval_loss",
        "eval_mlm_accuracy",
        "eval_disc_loss",
        "eval_disc_accuracy",
        "tokens_seen",
    )
    return {
        "objective": objective,
        "command": command,
        "reused": reused,
        "steps": metrics["step"],
        "seconds": metrics["seconds"],
        "budget_seconds": settings["pretrain_seconds"],
        **{key: metrics.get(key) for key in keys},
        "metrics": metrics,
    }


def run_entry(name: str, argv: list[str]) -> dict:
    """Fine-tune and test one entry in this process; returns its row for results.json."""
    from training.finetune_classification import finetune, parse_args

    entry = ENTRIES[name]
    start = time.perf_counter()
    metrics = finetune(*parse_args(argv))
    return {
        "name": name,
        "label": entry.label,
        "pretrained": entry.pretrained,
        **training_fields(metrics),
        "dev_accuracy": metrics.get("eval_accuracy"),
        "test_accuracy": metrics.get("test_accuracy"),
        "test_f1": metrics.get("test_f1"),
        "dev_samples": metrics.get("eval_samples"),
        "test_samples": metrics.get("test_samples"),
        "total_seconds": time.perf_counter() - start,
        "metrics": metrics,
    }


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def electra_sentence(run: dict | None) -> str:
    """results.md's words on the ELECTRA pretraining, when there is one."""
    if run is None:
        return ""
    return (
        f"; the ELECTRA entry was pretrained for the same wall-clock budget by replaced-token detection "
        f"({run['steps']:,} steps in {run['seconds']:.0f} s; held-out discriminator accuracy "
        f"{percent(run.get('eval_disc_accuracy'))}%, generator masked-token accuracy "
        f"{percent(run.get('eval_mlm_accuracy'))}%)"
    )


def markdown_lines(result: dict) -> list[str]:
    """results.md, line by line."""
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
        objective = ENTRIES[row["name"]].pretraining
        run = pretrainings.get(objective) if objective else None
        pretraining = f"{run['steps']:,} steps, {run['seconds']:.0f} s" if run is not None else "none"
        rows.append(
            [
                row["label"],
                "measured",
                millions(row["num_parameters"]),
                pretraining,
                fmt(row["train_steps"]),
                fmt(row["train_epochs"]),
                fmt(row["train_seconds"], 0),
                percent(row["dev_accuracy"]),
                percent(row["test_accuracy"]),
                percent(row["test_f1"]),
            ]
        )
    for ref in result["references"]:
        rows.append(
            [
                ref["model"],
                "published, not measured here",
                *["—"] * 5,
                "—",
                f"≈{percent(ref['accuracy'])}",
                "—",
            ]
        )
    text = [
        f"# SST-2 leaderboard{' (smoke run)' if result['smoke'] else ''}",
        "",
        f"A BERT-style encoder ({plural(s['num_layers'], 'layer')}, width {s['hidden_size']}, "
        f"{plural(s['num_heads'], 'head')}, "
        f"feed-forward {s['intermediate_size']}; {result['tokenizer']['vocab_size']:,}-token WordPiece) fine-tuned "
        f"on {result['train_examples']:,} SST-2 training phrases for at most **{s['budget_seconds']:g} s** of "
        f"wall-clock training or {s['max_epochs']:g} epochs, from scratch or after masked-LM pretraining on the "
        f"{result['pretraining_sentences']:,} distinct training phrases"
        + (
            f" ({pre['steps']:,} steps in {pre['seconds']:.0f} s, budget {s['pretrain_seconds']:g} s; held-out "
            f"masked-token accuracy {percent(pre.get('eval_mlm_accuracy'))}%)"
            if pre is not None
            else ""
        )
        + electra_sentence(pretrainings.get("electra"))
        + f". Accuracy on the validation split ({result['dev_examples']:,} phrases) and the test split "
        f"({result['test_examples']:,} GLUE dev sentences).",
        "",
        markdown_table(header, rows),
        "",
        "Published rows (from the data README): approximate accuracies on the GLUE dev sentences, with far larger "
        "models and pretraining corpora (BERT-base) or none (bag of words): context, not measured here.",
        "",
        *leaderboard_footer(
            result, [f"{name} pretraining: {run['command']}" for name, run in pretrainings.items()]
        ),
    ]
    return text


def main(argv: list[str] | None = None) -> dict:
    """Run the leaderboard; returns what results.json holds."""
    parser = build_parser()
    args, names = parse_leaderboard_args(parser, argv, ENTRIES, "SST-2: ../shared/data/sst2")
    settings = resolve(args, PRESETS["smoke" if args.smoke else "full"])
    for key in ("budget_seconds", "pretrain_seconds"):
        if not settings[key] > 0:
            parser.error(f"--{key} must be > 0.")
    output_dir, started, start, hw = start_leaderboard(args.output_dir)

    sentences = training_sentences(args.data_dir, settings["max_train_samples"])
    tokenizer_dir, init_dir = output_dir / "tokenizer", output_dir / "init"
    tokenizer, reused_tokenizer = shared_tokenizer(sentences, settings, args.data_dir, tokenizer_dir)
    num_parameters = save_initialization(init_dir, tokenizer, settings, args.seed)
    logger.info("Initialization: %s parameters (masked LM) saved to %s.", f"{num_parameters:,}", init_dir)

    # objective -> its pretraining's record, one run each for the entries that start from it
    pretrainings = {}
    for objective in dict.fromkeys(ENTRIES[name].pretraining for name in names if ENTRIES[name].pretrained):
        pretrainings[objective] = run_pretraining(objective, settings, args, output_dir, sentences, tokenizer)

    rows = []
    for name in names:
        objective = ENTRIES[name].pretraining
        start_dir = output_dir / "runs" / f"{objective}_pretrain" / "final" if objective else init_dir
        run_argv = finetune_argv(name, settings, args, start_dir, tokenizer_dir, output_dir / "runs" / name)
        failed = {"label": ENTRIES[name].label, "pretrained": ENTRIES[name].pretrained}
        row = run_entry_row(name, "training.finetune_classification", run_argv, run_entry, failed)
        rows.append(row)
        logger.info("=== %s: test accuracy %s%%", name, percent(row.get("test_accuracy")))

    measured = [row for row in rows if "error" not in row]
    first = measured[0]["metrics"] if measured else {}
    result = {
        "leaderboard": "sst2",
        "task": "SST-2 binary sentiment (test = GLUE dev sentences)",
        "smoke": args.smoke,
        "seed": args.seed,
        "budget_seconds": settings["budget_seconds"],
        "pretrain_seconds": settings["pretrain_seconds"],
        "settings": settings,
        "started": started,
        "total_seconds": time.perf_counter() - start,
        "hardware": hw,
        "data_dir": str(args.data_dir),
        "train_examples": first.get("train_samples"),
        "dev_examples": first.get("eval_samples"),
        "test_examples": first.get("test_samples"),
        "pretraining_sentences": len(sentences),
        "tokenizer": {
            "path": str(tokenizer_dir),
            "kind": "wordpiece",
            "vocab_size": len(tokenizer),
            "reused": reused_tokenizer,
        },
        "initialization": {
            "path": str(init_dir),
            "num_parameters_masked_lm": num_parameters,
            "preset": "bert",
        },
        # the MLM pretraining (as before ELECTRA's entry), and every pretraining by objective
        "pretraining": pretrainings.get("mlm"),
        "pretrainings": pretrainings,
        "command": command_line(__spec__.name, argv),
        "entries": rows,
        "references": [
            {"model": model, "short": short, "accuracy": accuracy, "approximate": True, "published": True}
            for short, model, accuracy in REFERENCES
        ],
    }
    markdown = write_results(output_dir, result, markdown_lines)
    bar_chart(
        output_dir / "accuracy.png",
        [row["label"] for row in measured],
        {
            "dev": [None if row["dev_accuracy"] is None else 100 * row["dev_accuracy"] for row in measured],
            "test": [
                None if row["test_accuracy"] is None else 100 * row["test_accuracy"] for row in measured
            ],
        },
        title=f"SST-2 accuracy, {settings['budget_seconds']:g} s fine-tuning budget per model",
        ylabel="accuracy (%)",
        references=[(f"{short} (published)", 100 * accuracy) for short, _, accuracy in REFERENCES],
        reference_name="published (≈, GLUE dev)",
    )
    print(markdown)
    exit_if_failed(rows, output_dir)
    return result


if __name__ == "__main__":
    main()
