"""C4-style cleaning (`training.data.cleaning`): its speed on a web-like corpus, and the LSH S-curve.

1. A corpus of `--pages` web-like pages is built from the synthetic corpus's sentences with junk
   put in at known rates (menus, JavaScript and cookie notices, lorem ipsum and code pages, a
   shared three-sentence boilerplate, exact copies, copies with one word changed); it is cleaned
   in memory and streamed, and the two must agree. Pages per second and the report are written.
2. The near-duplicate rule's S-curve: for pairs of pages of known Jaccard similarity s, the share
   found as LSH candidates (sharing one of b bands of r rows) against the theory 1 - (1 - s^r)^b,
   and the share dropped (MinHash estimate >= the threshold).

    python -m benchmarks.bench_cleaning --output_dir benchmarks/results/c4_cleaning
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from datasets import Dataset

from training.data.cleaning import C4Options, CorpusState, clean_corpus, jaccard_estimate
from training.data.corpora import load_builtin_corpus

BOILERPLATE = "Sign up for our letter today. It comes every week. You can stop it at any time."
MENU = "Home | News | Sport | Contact"


def web_pages(n: int, seed: int = 0) -> list[str]:
    """`n` web-like pages: synthetic prose in lines of two sentences, with junk at fixed rates."""
    rng = np.random.default_rng(seed)
    sentences = [s.strip() + "." for d in load_builtin_corpus("synthetic") for s in d.split(".") if s.strip()]
    pages: list[str] = []
    for _ in range(n):
        if pages and rng.random() < 0.05:  # an exact copy
            pages.append(pages[int(rng.integers(len(pages)))])
            continue
        if pages and rng.random() < 0.05:  # a copy with one word changed
            words = pages[int(rng.integers(len(pages)))].split(" ")
            words[int(rng.integers(len(words)))] = "changed"
            pages.append(" ".join(words))
            continue
        picked = [
            sentences[i].capitalize() for i in rng.integers(len(sentences), size=int(rng.integers(4, 16)))
        ]
        lines = [MENU] + [" ".join(picked[i : i + 2]) for i in range(0, len(picked), 2)]
        if rng.random() < 0.3:
            lines.insert(2, BOILERPLATE)
        if rng.random() < 0.2:
            lines.append("Please turn on JavaScript to see the comments.")
        if rng.random() < 0.2:
            lines.append("This site uses cookies to count its visitors.")
        if rng.random() < 0.02:
            lines.append("Lorem ipsum dolor sit amet.")
        if rng.random() < 0.02:
            lines.append("var page = { title: 1 };")
        pages.append("\n".join(lines))
    return pages


def speed(pages: list[str]) -> dict:
    """Pages per second in memory and streamed (one process), and the report."""
    start = time.perf_counter()
    cleaned, report = clean_corpus(Dataset.from_dict({"text": pages}))
    in_memory = time.perf_counter() - start
    start = time.perf_counter()
    stream, _ = clean_corpus(Dataset.from_dict({"text": pages}).to_iterable_dataset())
    streamed_texts = [row["text"] for row in stream]
    streamed = time.perf_counter() - start
    if streamed_texts != cleaned["text"]:
        raise AssertionError("the streamed cleaning differs from the in-memory one")
    return {
        "pages": len(pages),
        "pages_per_second_in_memory": len(pages) / in_memory,
        "pages_per_second_streamed": len(pages) / streamed,
        "report": report.as_dict(),
        "table": report.table(),
    }


def s_curve(options: C4Options, pairs: int, seed: int = 0) -> list[dict]:
    """Per Jaccard similarity s: the share of `pairs` page pairs that are LSH candidates, and dropped."""
    rng = np.random.default_rng(seed)
    state = CorpusState(options)
    r, b = state.rows, len(state.bands)
    rows = []
    for s in np.round(np.arange(0.3, 1.0001, 0.05), 2):
        union = 400
        shared = int(round(s * union))  # |A & B| = shared, |A | B| = union: Jaccard exactly s
        candidates = dropped = 0
        for _ in range(pairs):
            tokens = [f"t{i}" for i in rng.permutation(10**6)[:union]]
            split = shared + (union - shared) // 2
            a, c = tokens[:split], tokens[:shared] + tokens[split:]
            sig_a, sig_c = state.minhash.signature(" ".join(a)), state.minhash.signature(" ".join(c))
            candidates += any(x == y for x, y in zip(state.band_keys(sig_a), state.band_keys(sig_c)))
            dropped += jaccard_estimate(sig_a, sig_c) >= options.minhash_threshold
        exact = shared / union
        rows.append(
            {
                "jaccard": exact,
                "candidate_share": candidates / pairs,
                "theory": 1 - (1 - exact**r) ** b,
                "dropped_share": dropped / pairs,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--pairs", type=int, default=100, help="page pairs per similarity of the S-curve")
    parser.add_argument("--output_dir", default="out/bench_cleaning")
    args = parser.parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = speed(web_pages(args.pages))
    # single words as shingles, so the pages' shingle sets are the token sets built above
    options = C4Options(minhash_ngram=1)
    result["s_curve"] = s_curve(options, args.pairs)
    result["s_curve_options"] = {"num_perm": options.minhash_num_perm, "bands": options.minhash_bands}
    (out / "bench_cleaning.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"{result['pages']} pages: {result['pages_per_second_in_memory']:,.0f} pages/s in memory, "
        f"{result['pages_per_second_streamed']:,.0f} pages/s streamed (same pages)",
        "",
        result["table"],
        "",
        "jaccard  candidates  theory  dropped",
        *(
            f"{row['jaccard']:.2f}     {row['candidate_share']:.2f}        {row['theory']:.2f}    "
            f"{row['dropped_share']:.2f}"
            for row in result["s_curve"]
        ),
    ]
    (out / "bench_cleaning.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
