#!/usr/bin/env python
"""CPU benchmark of hf_lm's n-gram LM: fit time, peak memory and validation perplexity by order.

Two corpora, each fitted with orders 1..5 (modified Kneser-Ney by default):

1. Tiny Shakespeare at character level (`../shared/data/tinyshakespeare/input.txt`; skipped with a
   log line if absent). Vocabulary: the sorted distinct characters of the whole file, as in
   nanoGPT's `shakespeare_char`; train on the first 90 %, validate on the last 10 % (nanoGPT's split).
2. A few million tokens of the word-level Markov corpus of `training/data/corpora.py`
   (`SyntheticCorpus(seed=0)`; its chain states are the token ids), validated on an independent
   walk. The source's entropy rate is known, so the table also shows the perplexity floor
   2^H that no model can beat on average.

Every fit runs in a fresh subprocess that loads the tokens, resets the kernel's peak-RSS counter
(`/proc/self/clear_refs`, value 5; falls back to `ru_maxrss` where that is refused) and reports the
peak RSS *above* the RSS it had just before fitting (interpreter, libraries and the corpus itself
excluded), the fit time, the number of distinct n-grams and the bytes of the saved count tables.
Validation perplexity is measured after the timing: every validation token but the first is
scored with its full n - 1 token context (blocks overlap by n - 1 tokens).

Usage:
    python -m benchmarks.bench_ngram                  # both corpora, orders 1-5: a few minutes
    python -m benchmarks.bench_ngram --quick          # smaller Markov corpus, orders 1-3
    python -m benchmarks.bench_ngram --markov-tokens 5000000 --orders 2 3

Prints a markdown table to stdout (logs go to stderr) and writes JSON to `--output`.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from benchmarks.bench_common import (
    REPO_ROOT,
    available_cores,
    peak_rss_bytes,
    reset_peak_rss,
    rss_bytes,
    run_json_worker,
)
from benchmarks.bench_common import markdown_table as render_table
from hf_lm import HfLmNGramConfig, HfLmNGramForCausalLM

logger = logging.getLogger("bench_ngram")
DEFAULT_SHAKESPEARE = REPO_ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"


# --------------------------------------------------------------------------------------------
# Corpora (prepared once by the parent, saved as .npy for the workers)
# --------------------------------------------------------------------------------------------


def prepare_shakespeare(path: Path, folder: Path) -> dict | None:
    """Character ids of Tiny Shakespeare, split 90/10 as nanoGPT does; None if the file is absent."""
    if not path.is_file():
        logger.warning("Tiny Shakespeare not found at %s: skipping that corpus.", path)
        return None
    text = path.read_text(encoding="utf-8")
    chars = sorted(set(text))
    lookup = np.zeros(max(map(ord, chars)) + 1, dtype=np.int64)
    lookup[[ord(c) for c in chars]] = np.arange(len(chars))
    ids = lookup[np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)]
    n = int(0.9 * len(ids))
    np.save(folder / "shakespeare_train.npy", ids[:n])
    np.save(folder / "shakespeare_val.npy", ids[n:])
    return {
        "name": "shakespeare",
        "label": "Tiny Shakespeare, chars",
        "vocab_size": len(chars),
        "floor_ppl": None,
    }


def prepare_markov(num_tokens: int, num_val: int, folder: Path) -> dict:
    """A walk of the word-level Markov chain of `training.data.corpora` (train) and an independent one (val)."""
    from training.data.corpora import SyntheticCorpus

    corpus = SyntheticCorpus(seed=0)
    logger.info("sampling %d + %d Markov words", num_tokens, num_val)
    np.save(folder / "markov_train.npy", np.array(corpus.sample(num_tokens, seed=0), dtype=np.int64))
    np.save(folder / "markov_val.npy", np.array(corpus.sample(num_val, seed=1), dtype=np.int64))
    return {
        "name": "markov",
        "label": "Markov words",
        "vocab_size": corpus.vocab_size,
        "floor_ppl": 2.0**corpus.entropy_rate_bits_per_word,
    }


# --------------------------------------------------------------------------------------------
# Worker: one fit in a fresh process
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def perplexity(model: HfLmNGramForCausalLM, ids: torch.Tensor, block: int) -> float:
    """exp(mean NLL) of ids[1:], each token with its full n - 1 token context."""
    context = model.config.order - 1
    total, count = 0.0, 0
    for start in range(1, len(ids), block):
        stop = min(start + block, len(ids))
        first = max(0, start - context)
        x = ids[first:stop][None]  # (1, L)
        labels = x.clone()
        labels[:, : start - first] = -100  # context only: scored by the previous block
        loss = model(x, labels=labels).loss
        total += loss.item() * (stop - start)
        count += stop - start
    return math.exp(total / count)


def worker(corpus: str, order: int, args) -> dict:
    torch.set_num_threads(args.threads)
    folder = Path(args.data_dir)
    meta = json.loads((folder / f"{corpus}.json").read_text())
    train = torch.from_numpy(np.load(folder / f"{corpus}_train.npy"))
    val = torch.from_numpy(np.load(folder / f"{corpus}_val.npy"))
    config = HfLmNGramConfig(vocab_size=meta["vocab_size"], order=order, smoothing=args.smoothing)

    reset_ok = reset_peak_rss()
    base = rss_bytes()
    t0 = time.perf_counter()
    model = HfLmNGramForCausalLM.fit([train], config, chunk_tokens=args.chunk_tokens)
    model._levels()  # the derived smoothing tables belong to fitting, not to the first forward
    fit_s = time.perf_counter() - t0
    peak = peak_rss_bytes(reset_ok)

    t0 = time.perf_counter()
    ppl = perplexity(model.eval(), val, args.eval_block)
    eval_s = time.perf_counter() - t0
    return {
        "corpus": corpus,
        "order": order,
        "smoothing": args.smoothing,
        "train_tokens": len(train),
        "val_tokens": len(val),
        "num_ngrams": model.config.num_ngrams,
        "table_bytes": sum(b.numel() * b.element_size() for b in model.buffers()),
        "fit_s": fit_s,
        "peak_rss_delta_bytes": peak - base,
        "peak_method": "VmHWM after clear_refs" if reset_ok else "ru_maxrss (process lifetime)",
        "val_ppl": ppl,
        "eval_s": eval_s,
        "discounts_top_order": model.discounts()[-1] if model.discounts() else None,
    }


def run_worker(corpus: str, order: int, args) -> dict:
    cmd = [sys.executable, "-m", __spec__.name, "--worker", corpus, str(order), "--data-dir", args.data_dir]
    cmd += ["--smoothing", args.smoothing, "--chunk-tokens", str(args.chunk_tokens)]
    cmd += ["--threads", str(args.threads), "--eval-block", str(args.eval_block)]
    return run_json_worker(cmd, f"worker {corpus} order {order}", timeout=900)


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def markdown_table(rows: list[dict], corpora: dict) -> str:
    header = [
        "corpus", "order", "train tokens", "distinct n-grams (top order / all)", "table MB", "fit s", "Mtokens/s",
        "peak RSS MB", "val ppl", "floor ppl",
    ]  # fmt: skip
    body = []
    for r in rows:
        meta = corpora[r["corpus"]]
        body.append(
            [
                meta["label"],
                str(r["order"]),
                f"{r['train_tokens']:,}",
                f"{r['num_ngrams'][-1]:,} / {sum(r['num_ngrams']):,}",
                f"{r['table_bytes'] / 2**20:.1f}",
                f"{r['fit_s']:.2f}",
                f"{r['train_tokens'] / r['fit_s'] / 1e6:.2f}",
                f"{r['peak_rss_delta_bytes'] / 2**20:.0f}",
                f"{r['val_ppl']:.3f}",
                f"{meta['floor_ppl']:.2f}" if meta["floor_ppl"] else "-",
            ]
        )
    return render_table(header, body, align="l" + "r" * 9)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="orders to fit (1-5)")
    parser.add_argument(
        "--smoothing",
        default="modified_kn",
        choices=["add_k", "interpolated_kn", "modified_kn"],
        help="smoothing",
    )
    parser.add_argument(
        "--shakespeare", type=Path, default=DEFAULT_SHAKESPEARE, help="Tiny Shakespeare input.txt"
    )
    parser.add_argument(
        "--markov-tokens", type=int, default=3_000_000, help="Markov training words (0 = skip)"
    )
    parser.add_argument("--markov-val-tokens", type=int, default=200_000, help="Markov validation words")
    parser.add_argument("--chunk-tokens", type=int, default=1 << 20, help="tokens counted at once")
    parser.add_argument("--eval-block", type=int, default=8192, help="tokens scored per forward")
    parser.add_argument("--threads", type=int, default=available_cores(), help="torch threads")
    parser.add_argument("--quick", action="store_true", help="orders 1-3 and 300k Markov words")
    parser.add_argument(
        "--output", type=Path, default=REPO_ROOT / "out" / "bench_ngram.json", help="JSON output"
    )
    parser.add_argument("--worker", nargs=2, metavar=("CORPUS", "ORDER"), help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.orders = [o for o in args.orders if o <= 3]
        args.markov_tokens = min(args.markov_tokens, 300_000)
        args.markov_val_tokens = min(args.markov_val_tokens, 50_000)
    if any(not 1 <= o <= 5 for o in args.orders):
        parser.error(f"--orders must lie in 1..5, got {args.orders}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if args.worker:
        corpus, order = args.worker
        print(json.dumps(worker(corpus, int(order), args)))
        return

    with tempfile.TemporaryDirectory(prefix="bench_ngram_") as tmp:
        args.data_dir = tmp
        folder = Path(tmp)
        corpora = {}
        shakespeare = prepare_shakespeare(args.shakespeare, folder)
        if shakespeare:
            corpora["shakespeare"] = shakespeare
        if args.markov_tokens > 0:
            corpora["markov"] = prepare_markov(args.markov_tokens, args.markov_val_tokens, folder)
        if not corpora:
            logger.warning("No corpus to benchmark.")
            return
        for name, meta in corpora.items():
            (folder / f"{name}.json").write_text(json.dumps(meta))

        jobs = [(name, order) for name in corpora for order in sorted(set(args.orders))]
        rows = []
        for name, order in tqdm(jobs, desc="fits", file=sys.stderr):
            row = run_worker(name, order, args)
            logger.info(
                "%s order %d: fit %.2fs, peak +%.0f MB, val ppl %.3f",
                name,
                order,
                row["fit_s"],
                row["peak_rss_delta_bytes"] / 2**20,
                row["val_ppl"],
            )
            rows.append(row)

    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "rows": rows,
                "corpora": corpora,
                "threads": args.threads,
                "torch": torch.__version__,
                "chunk_tokens": args.chunk_tokens,
            },
            indent=2,
        )
    )
    logger.info("wrote %s", args.output)
    print(f"## hf_lm n-gram LM ({args.smoothing}), {args.threads} thread(s)\n")
    print(markdown_table(rows, corpora))


if __name__ == "__main__":
    main()
