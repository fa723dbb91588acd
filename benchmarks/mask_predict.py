#!/usr/bin/env python
"""Mask-Predict (Ghazvininejad et al., 2019) on Multi30k De→En: test BLEU against the number of
refinement iterations T, and against the autoregressive Transformer trained for the same wall time.

    # the CPU run committed in benchmarks/results/mask_predict/ (about 11 minutes)
    python -m benchmarks.mask_predict --data_dir ../shared/data/multi30k
    # CI's smoke version: tiny models, 500 pairs, a 3-second budget (well under a minute)
    python -m benchmarks.mask_predict --data_dir ../shared/data/multi30k --smoke

Protocol: one joint byte-level BPE tokenizer (BART's special tokens, `<mask>` included; every
encoding ends with `</s>`) is trained on both sides of the training pairs and given to both runs.
Two `training.finetune_translation` runs from scratch with the same sizes (`--family transformer`:
sinusoidal positions, post-norm, ReLU), optimizer and wall-clock budget (`--max_train_seconds`):

- `autoregressive`: the usual left-to-right decoder, tested greedily and with beam search;
- `mask_predict` (`--objective mask_predict`): the conditional masked LM with a bidirectional
  decoder and a length head (`HfLmBartForMaskPredict`), trained on the CMLM objective (a uniform
  number of target tokens masked, the loss on those plus the length loss). It is then decoded here
  with T = 1, 2, 4 and 10 iterations (`--iterations`) and `--length_beam` length candidates.

No knowledge distillation (the paper trains on an autoregressive teacher's outputs, which matters
much for non-autoregressive models), no validation (nothing is selected on it). BLEU: sacrebleu
corpus BLEU (13a, cased) of the detokenized outputs against the raw test_2016_flickr references.

The trace (`trace.md`, `trace.png`): one test sentence decoded with `--trace_iterations`
iterations (3: t = 0, 1, 2, as in the course's example), each iteration's tokens with the
re-predicted (masked) ones in brackets, and a heatmap of every token's probability per iteration
(`hf_lm.plots.plot_mask_predict`).

Outputs under `--output_dir` (default `out/mask_predict`): `results.md`, `results.json`,
`bleu_vs_iterations.png`, `trace.md`, `trace.png`, `tokenizer/`, `runs/<entry>/`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from benchmarks.bench_common import (
    command_line,
    fmt,
    leaderboard_footer,
    leaderboard_parser,
    millions,
    parse_leaderboard_args,
    preset_table,
    pyplot,
    resolve,
    run_entry_row,
    start_leaderboard,
    training_fields,
    translation_tokenizer,
    write_results,
)

logger = logging.getLogger("benchmarks.mask_predict")

ENTRIES = {
    "autoregressive": "Transformer, autoregressive",
    "mask_predict": "Transformer, Mask-Predict (CMLM)",
}

PRESETS, HELP = preset_table(
    {
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
        "length_beam": (3, 2, "Mask-Predict's length candidates per source (the paper's ℓ; it uses 5)"),
        "generation_max_length": (64, 20, "Longest translation in tokens"),
        "max_length": (64, 48, "Longest source/target in training, in tokens"),
        "max_train_samples": (None, 500, "Use the first N training pairs; None = all 29,000"),
        "max_test_samples": (None, 24, "Score the first N test pairs; None = all 1,000"),
    }
)
ITERATIONS = (1, 2, 4, 10)


def run_argv(name: str, args, s: dict, tokenizer_dir: Path) -> list[str]:
    """The `training.finetune_translation` arguments of one model."""
    argv = [
        "--data_dir", str(args.data_dir), "--source_lang", "de", "--target_lang", "en",
        "--validation_split", "", "--source_prefix", "", "--from_scratch", "--family", "transformer",
        "--objective", name, "--tokenizer_name_or_path", str(tokenizer_dir),
        "--max_source_length", str(s["max_length"]), "--max_target_length", str(s["max_length"]),
        "--hidden_size", str(s["hidden_size"]), "--num_hidden_layers", str(s["num_layers"]),
        "--num_attention_heads", str(s["num_heads"]), "--intermediate_size", str(s["intermediate_size"]),
        "--hidden_dropout", str(s["dropout"]), "--attention_dropout", str(s["dropout"]),
        "--learning_rate", str(s["learning_rate"]), "--per_device_train_batch_size", str(s["batch_size"]),
        "--lr_scheduler_type", "constant_with_warmup", "--warmup_steps", str(s["warmup_steps"]),
        "--num_train_epochs", str(s["max_epochs"]), "--max_train_seconds", str(s["budget_seconds"]),
        "--eval_strategy", "no", "--save_strategy", "no", "--logging_steps", "50",
        "--generation_num_beams", str(s["num_beams"]), "--generation_max_length", str(s["generation_max_length"]),
        "--report_to", "none", "--disable_tqdm", "true", "--seed", str(args.seed),
        "--output_dir", str(Path(args.output_dir) / "runs" / name),
    ]  # fmt: skip
    if name == "mask_predict":
        argv += ["--test_split", ""]  # decoded below, once per number of iterations
    for key in ("max_train_samples", "max_test_samples"):
        if s[key] is not None:
            argv += [f"--{key}", str(s[key])]
    return argv


def test_pairs(args, s: dict) -> tuple[list[str], list[str]]:
    from training.finetune_translation import TranslationDataArguments, load_translation_dataset, sides

    data_args = TranslationDataArguments(
        data_dir=str(args.data_dir),
        train_split="train",
        validation_split="",
        max_test_samples=s["max_test_samples"],
    )
    test = load_translation_dataset(data_args)["test"]
    return sides(test, "de"), sides(test, "en")


def decode_mask_predict(model, tokenizer, sources: list[str], iterations: int, s: dict, batch: int = 64):
    """Translations of `sources` by Mask-Predict with `iterations` iterations; (texts, seconds)."""
    texts, start = [], time.perf_counter()
    for i in range(0, len(sources), batch):
        enc = tokenizer(
            sources[i : i + batch],
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=s["max_length"],
        )
        ids = model.generate(
            enc["input_ids"],
            enc["attention_mask"],
            num_iterations=iterations,
            length_beam=s["length_beam"],
            max_new_tokens=s["generation_max_length"] - 2,
        )
        texts += [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]
    return texts, time.perf_counter() - start


def write_trace(model, tokenizer, source: str, reference: str, iterations: int, folder: Path) -> list[dict]:
    """One sentence's refinement: `trace.md` (tokens per iteration, re-predicted ones in brackets) and `trace.png`."""
    from hf_lm.plots import plot_mask_predict

    enc = tokenizer([source], return_tensors="pt")
    out = model.generate(**enc, num_iterations=iterations, length_beam=1, return_dict_in_generate=True)
    length = int(out.lengths[0])
    rows, tokens = [], []
    for t in range(iterations):
        ids = out.iteration_tokens[t, 0, :length].tolist()
        words = [tokenizer.decode([i]).strip() or "␣" for i in ids]
        masked = out.iteration_masked[t, 0, :length].tolist()
        tokens.append(words)
        rows.append(
            {
                "iteration": t,
                "masked": sum(masked),
                "tokens": " ".join(f"[{w}]" if m else w for w, m in zip(words, masked)),
                "text": tokenizer.decode(ids, skip_special_tokens=True).strip(),
                "mean_log_prob": float(out.iteration_log_probs[t, 0, :length].mean()),
            }
        )
    plot_mask_predict(out, tokens, folder / "trace.png", title=f"Mask-Predict, T = {iterations}: {source}")
    lines = [
        "# Mask-Predict trace: one test sentence",
        "",
        f"Source: {source}",
        "",
        f"Reference: {reference}",
        "",
        f"Predicted length: {length} tokens; T = {iterations}. Tokens in brackets were masked at the input "
        "of that iteration and re-predicted (iteration 0: all of them; then the n = L·(T−t)/T least "
        "confident).",
        "",
        "| t | masked | tokens | text | mean log p |",
        "|---|---|---|---|---|",
        *[
            f"| {r['iteration']} | {r['masked']} | {r['tokens']} | {r['text']} | {r['mean_log_prob']:.2f} |"
            for r in rows
        ],
        "",
        "![trace](trace.png)",
        "",
    ]
    (folder / "trace.md").write_text("\n".join(lines), encoding="utf-8")
    return rows


def run_mask_predict_decoding(args, s: dict, folder: Path) -> dict:
    """Decode the test split with each number of iterations; BLEU per T, and the trace."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from training.finetune_translation import bleu_metric

    final = folder / "runs" / "mask_predict" / "final"
    model = AutoModelForMaskedLM.from_pretrained(final).eval()
    tokenizer = AutoTokenizer.from_pretrained(final)
    sources, references = test_pairs(args, s)
    metric, rows = bleu_metric(), []
    for T in args.iterations:
        texts, seconds = decode_mask_predict(model, tokenizer, sources, T, s)
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
        (folder / f"test_predictions_T{T}.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    trace = write_trace(model, tokenizer, sources[0], references[0], args.trace_iterations, folder)
    return {"by_iterations": rows, "trace": trace, "test_samples": len(sources)}


def run_entry(name: str, argv: list[str]) -> dict:
    from training.finetune_translation import finetune, parse_args

    metrics = finetune(*parse_args(argv))
    return {"name": name, "label": ENTRIES[name], **training_fields(metrics), "metrics": metrics}


def plot_bleu(result: dict, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = result["mask_predict"]["by_iterations"]
    ax.plot([r["iterations"] for r in rows], [r["test_bleu"] for r in rows], marker="o", label="Mask-Predict")
    ar = result["entries"][0]["metrics"]
    for key, style, label in (
        ("test_greedy_bleu", "--", "autoregressive, greedy"),
        ("test_bleu", ":", "autoregressive, beam"),
    ):
        if key in ar:
            ax.axhline(ar[key], linestyle=style, color="gray", label=label)
    ax.set_xscale("log")
    ax.set_xticks([r["iterations"] for r in rows], [str(r["iterations"]) for r in rows])
    ax.set_xlabel("Mask-Predict iterations T")
    ax.set_ylabel("test BLEU")
    ax.set_title(f"Multi30k De→En, {result['settings']['budget_seconds']:.0f} s of CPU training each")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown_lines(result: dict) -> list[str]:
    s, ar = result["settings"], result["entries"][0]
    mp = result["entries"][1]
    head = "| decoding | test BLEU | decode time (s) | model | parameters | steps | train time (s) | train loss |"
    lines = [
        f"# Mask-Predict vs autoregressive, Multi30k De→En{' (smoke run)' if result['smoke'] else ''}",
        "",
        f"**CPU, small-budget figures** (no GPU was used): both models trained from scratch for at most "
        f"{s['budget_seconds']:.0f} s of wall-clock training each ({s['num_layers']}+{s['num_layers']} layers, "
        f"width {s['hidden_size']}, batch {s['batch_size']}, same tokenizer of {s['vocab_size']} tokens), "
        f"no distillation. Absolute BLEU is low; the point is the curve over T and the comparison at equal "
        f"training time. Test: {result['mask_predict']['test_samples']} test_2016_flickr pairs, sacrebleu "
        "corpus BLEU (13a, cased).",
        "",
        head,
        "|---|---|---|---|---|---|---|---|",
    ]

    def model_cells(row):
        return f"{millions(row.get('num_parameters'))} | {row.get('train_steps')} | {fmt(row.get('train_seconds'), 0)} | {fmt(row.get('train_loss'), 3)}"

    m = ar["metrics"]
    lines.append(
        f"| greedy | {fmt(m.get('test_greedy_bleu'))} | {fmt(m.get('test_greedy_runtime'), 1)} | {ar['label']} | {model_cells(ar)} |"
    )
    lines.append(
        f"| beam {s['num_beams']} | {fmt(m.get('test_bleu'))} | {fmt(m.get('test_runtime'), 1)} | {ar['label']} | {model_cells(ar)} |"
    )
    for r in result["mask_predict"]["by_iterations"]:
        lines.append(
            f"| Mask-Predict T = {r['iterations']}, ℓ = {s['length_beam']} | {fmt(r['test_bleu'])} | "
            f"{fmt(r['decode_seconds'], 1)} | {mp['label']} | {model_cells(mp)} |"
        )
    lines += [
        "",
        "![BLEU against iterations](bleu_vs_iterations.png)",
        "",
        "Trace of one sentence: [trace.md](trace.md).",
        "",
    ]
    return lines + leaderboard_footer(result)


def build_parser():
    parser = leaderboard_parser(
        __doc__.splitlines()[1],
        "../shared/data/multi30k",
        "Multi30k folder (train/val/test_2016_flickr .de/.en, gzipped).",
        "out/mask_predict",
        (None, f"Comma-separated subset of {list(ENTRIES)} (default both)."),
        "Tiny models, data and budget (CI; well under a minute).",
        "Seed of both runs.",
        (PRESETS, HELP),
    )
    parser.add_argument(
        "--iterations", type=lambda v: [int(x) for x in v.split(",")], default=list(ITERATIONS)
    )
    parser.add_argument(
        "--trace_iterations", type=int, default=3, help="T of the traced sentence (3: t = 0, 1, 2)."
    )
    return parser


def main(argv: list[str] | None = None) -> dict:
    parser = build_parser()
    args, names = parse_leaderboard_args(parser, argv, ENTRIES, "see benchmarks/mask_predict.py")
    if names != list(ENTRIES):
        parser.error("--entries: this benchmark compares both models; run both.")
    s = resolve(args, PRESETS["smoke" if args.smoke else "full"])
    folder, started, t0, hardware = start_leaderboard(args.output_dir)
    torch.manual_seed(args.seed)
    tokenizer_dir = folder / "tokenizer"
    translation_tokenizer(args, s, tokenizer_dir)
    rows = []
    for name in names:
        rows.append(
            run_entry_row(
                name,
                "training.finetune_translation",
                run_argv(name, args, s, tokenizer_dir),
                run_entry,
                {"label": ENTRIES[name]},
            )
        )
        if "error" in rows[-1]:
            raise SystemExit(f"{name} failed: {rows[-1]['error']}")
    result = {
        "smoke": args.smoke,
        "settings": s,
        "seed": args.seed,
        "started": started,
        "hardware": hardware,
        "command": command_line("benchmarks.mask_predict", argv),
        "entries": rows,
    }
    result["mask_predict"] = run_mask_predict_decoding(args, s, folder)
    result["total_seconds"] = time.perf_counter() - t0
    plot_bleu(result, folder / "bleu_vs_iterations.png")
    print(write_results(folder, result, markdown_lines))
    return result


if __name__ == "__main__":
    main()
