"""Length extrapolation: train short, test long (Press et al., 2022, "Train Short, Test Long").

    python -m benchmarks.length_extrapolation                 # 6 schemes, CPU-sized: 3 layers x 64, L = 64
    python -m benchmarks.length_extrapolation --schemes alibi,xpos --max_steps 2000
    python -m benchmarks.length_extrapolation --smoke         # a tiny version for CI

The same small GPT is trained at context L (`--block_size`, 64) on Tiny Shakespeare at character
level with each position scheme: learned absolute positions (GPT-2), fixed sinusoids (Vaswani et
al., 2017), RoPE (Su et al., 2021), ALiBi (Press et al., 2022), none (NoPE, Haviv et al., 2022) and
xPos (Sun et al., 2022). Everything but the scheme is the ablation runner's baseline, and every run
is one `python -m training.train` subprocess built by `benchmarks/ablations.py`'s helpers (the same
data split, character tokenizer, optimizer and budget).

Each trained model then scores the validation text in non-overlapping windows of 1x, 2x, 4x and
8x L tokens (`sliding_window_perplexity` with stride = window: every window starts from scratch, its
first token only context), as in the ALiBi paper's Figure 1. Learned positions have a table of L
vectors and refuse longer inputs with their clear error: the table says "refuses". Every scheme is
also scored with a sliding window of L tokens and stride L/2, which any model covers, learned
positions included: the number a model of context L gets on a long text without extrapolating.

Outputs under `--output_dir`: `length_extrapolation.md` (the table), `length_extrapolation.json`
(the table, hardware, the commands), `length_extrapolation.png` (perplexity against evaluation
length, one line per scheme, log y), `runs/<scheme>/` (each run's folder).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from benchmarks import ablations
from benchmarks.bench_common import REPO_ROOT, comma_list, command_line, fmt, git_revision, pyplot
from benchmarks.bench_common import markdown_table as render_table

logger = logging.getLogger("length_extrapolation")

MULTIPLIERS = (1, 2, 4, 8)
XPOS = ablations.Variant(
    "xpos",
    "positions",
    "xPos: RoPE with an exponential decay (Sun et al., 2022)",
    ablations._fixed(position_embedding_type="xpos"),
)
# the scheme names of this benchmark -> the ablation runner's variants (learned is its baseline)
SCHEMES = {
    "learned": ablations.VARIANTS_BY_NAME["baseline"],
    "sinusoidal": ablations.VARIANTS_BY_NAME["sinusoidal"],
    "rope": ablations.VARIANTS_BY_NAME["rope"],
    "alibi": ablations.VARIANTS_BY_NAME["alibi"],
    "none": ablations.VARIANTS_BY_NAME["no_positions"],
    "xpos": XPOS,
}

SMOKE = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, block_size=16, batch_size=4, max_steps=6,
    warmup_steps=2, eval_batches=2, train_chars=8_000, eval_chars=3_000, jobs=2, learning_rate=1e-3,
)  # fmt: skip
FULL = dict(
    hidden_size=64, num_hidden_layers=3, num_attention_heads=4, block_size=64, batch_size=16, max_steps=600,
    warmup_steps=50, eval_batches=20, train_chars=None, eval_chars=40_000, jobs=1, learning_rate=2e-3,
)  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", type=Path, default=ablations.DEFAULT_DATA, help="Tiny Shakespeare input.txt.")
    p.add_argument("--output_dir", type=Path, default=None, help="Default out/length_extrapolation[_smoke].")
    p.add_argument("--schemes", default=",".join(SCHEMES), help=f"Comma list of {', '.join(SCHEMES)}.")
    p.add_argument("--smoke", action="store_true", help="A tiny model, data and budget (CI).")
    p.add_argument("--seed", type=int, default=0)
    for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "batch_size", "max_steps"):
        p.add_argument(f"--{name}", type=int, default=None)
    p.add_argument("--block_size", type=int, default=None, help="The training context L (default 64).")
    p.add_argument("--warmup_steps", type=int, default=None)
    p.add_argument("--learning_rate", type=float, default=None, help="Default 2e-3.")
    p.add_argument("--max_train_seconds", type=float, default=None, help="Wall-clock cap per run.")
    p.add_argument(
        "--eval_batches", type=int, default=None, help="Validation batches of the loop's evaluations."
    )
    p.add_argument(
        "--eval_chars", type=int, default=None, help="Validation characters scored (default 40000)."
    )
    p.add_argument("--xpos_scale_base", type=int, default=512, help="xPos's scale base (the paper's 512).")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run and for scoring.")
    p.add_argument("--jobs", type=int, default=None, help="Training runs at once (default 1; smoke: 2).")
    p.add_argument("--rerun", action="store_true", help="Train again even where results exist.")
    args = p.parse_args(argv)
    for name, value in (SMOKE if args.smoke else FULL).items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    unknown = [s for s in comma_list(args.schemes) if s not in SCHEMES]
    if unknown or not comma_list(args.schemes):
        p.error(f"--schemes must name some of {', '.join(SCHEMES)}, got {args.schemes!r}")
    if args.block_size < 2 or args.block_size % 2:
        p.error(f"--block_size must be an even number >= 2, got {args.block_size}")
    args.output_dir = args.output_dir or REPO_ROOT / "out" / (
        "length_extrapolation_smoke" if args.smoke else "length_extrapolation"
    )
    # what the ablation runner's `run_command` reads
    args.intermediate_size, args.no_match_glu_params, args.early_fraction = None, False, 0.5
    args.log_every = max(1, min(10, args.max_steps // 10))
    return args


def scheme_variant(name: str, args) -> ablations.Variant:
    if name != "xpos":
        return SCHEMES[name]
    return ablations.Variant(
        XPOS.name,
        XPOS.component,
        XPOS.description,
        ablations._fixed(position_embedding_type="xpos", xpos_scale_base=args.xpos_scale_base),
    )


def score(folder: Path, stream, block_size: int) -> dict:
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


def validation_stream(data: dict, tokenizer_dir: Path):
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    text = Path(data["validation_file"]).read_text(encoding="utf-8")
    return torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])


def markdown(rows: list[dict], block_size: int) -> str:
    header = ["scheme", *(f"{m}× L = {m * block_size}" for m in MULTIPLIERS), f"sliding window {block_size}, stride {block_size // 2}", "steps"]  # fmt: skip

    def cell(entry: dict) -> str:
        return "refuses" if "refuses" in entry else fmt(entry["perplexity"], 2)

    body = [
        [r["scheme"], *(cell(r["lengths"][str(m)]) for m in MULTIPLIERS), fmt(r["sliding"]["perplexity"], 2), str(r["steps"])]
        if "lengths" in r
        else [r["scheme"], *("failed" for _ in MULTIPLIERS), "failed", "-"]
        for r in rows
    ]  # fmt: skip
    return render_table(header, body)


def plot(rows: list[dict], block_size: int, path: Path, title: str) -> Path:
    """Perplexity against evaluation length, one line per scheme, log y (the ALiBi paper's Figure 1);
    learned positions' sliding-window perplexity as a dashed line over the lengths they refuse."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r in rows:
        if "lengths" not in r:
            continue
        points = [(e["length"], e["perplexity"]) for e in r["lengths"].values() if "perplexity" in e]
        line = ax.plot(*zip(*points), marker="o", label=r["scheme"])[0]
        if any("refuses" in e for e in r["lengths"].values()):
            refused = [e["length"] for e in r["lengths"].values() if "refuses" in e]
            lengths = [points[-1][0], *refused]
            ax.plot(lengths, [r["sliding"]["perplexity"]] * len(lengths), linestyle="--", color=line.get_color(),
                    label=f"{r['scheme']} (refuses; sliding window {block_size})")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([m * block_size for m in MULTIPLIERS], [str(m * block_size) for m in MULTIPLIERS])
    ax.axvline(block_size, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel(f"evaluation length (tokens; trained at L = {block_size})")
    ax.set_ylabel("validation perplexity (per character)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def train_all(args, variants, data: dict, tokenizer_dir: Path) -> list[tuple]:
    """Train (or reuse) one run per scheme with the ablation runner's commands; returns
    `(scheme, output folder, command, status, error)` per scheme."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = []
    for name, variant in variants:
        out = args.output_dir / "runs" / name
        jobs.append((name, out, ablations.run_command(args, variant, args.seed, data, tokenizer_dir, out)))

    def work(job):
        name, out, command = job
        t0 = time.perf_counter()
        status, error = ablations.execute(command, out, args.threads, args.rerun)
        logger.info("%-11s %s in %.0f s", name, status, time.perf_counter() - t0)
        if error:
            logger.warning("%s failed; last lines of %s:\n%s", name, out / "train.log", error)
        return (*job, status, error)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        return list(pool.map(work, jobs))


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    import torch

    torch.set_num_threads(args.threads)
    out_dir: Path = args.output_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    data = ablations.prepare_data(args.data, out_dir / "data", args.train_chars, args.eval_chars)
    tokenizer_dir = out_dir / "tokenizer"
    vocab_size = ablations.prepare_tokenizer(args.data, tokenizer_dir, args.block_size)
    size = ablations.model_size(args)
    variants = [(name, scheme_variant(name, args)) for name in comma_list(args.schemes)]
    for _, variant in variants:  # every scheme must build before training starts
        ablations.variant_config(variant, size, vocab_size, args.block_size)
    start = time.perf_counter()
    runs = train_all(args, variants, data, tokenizer_dir)
    stream = validation_stream(data, tokenizer_dir)
    rows = []
    for name, out, command, status, error in runs:
        row = {"scheme": name, "status": status, "output_dir": str(out), "command": command}
        if status in ("ok", "reused"):
            row.update(score(out / "final", stream, args.block_size))
            row["steps"] = json.loads((out / "final_metrics.json").read_text())["step"]
        else:
            row["error_tail"] = error
        rows.append(row)
    title = (
        f"Tiny Shakespeare (char), GPT {size.num_hidden_layers}L x {size.hidden_size}, trained at L = "
        f"{args.block_size} for {args.max_steps} steps;\n{len(stream)} validation tokens"
    )
    report = {
        "task": "length extrapolation: train at context L, score validation perplexity at 1x-8x L",
        "command": command_line(__spec__.name if __spec__ else "benchmarks.length_extrapolation", argv),
        "smoke": args.smoke,
        "git_revision": git_revision(),
        "hardware": ablations.hardware(args.threads, args.jobs),
        "block_size": args.block_size,
        "validation_tokens": len(stream),
        "xpos_scale_base": args.xpos_scale_base,
        "data": {**data, "vocab_size": vocab_size},
        "wall_seconds": round(time.perf_counter() - start, 1),
        "schemes": rows,
    }
    table = markdown(rows, args.block_size)
    (out_dir / "length_extrapolation.md").write_text(
        f"# Length extrapolation\n\n{title.replace(chr(10), ' ')}.\n\n{table}\n"
    )
    (out_dir / "length_extrapolation.json").write_text(json.dumps(report, indent=2, default=str))
    plot(rows, args.block_size, out_dir / "length_extrapolation.png", title)
    logger.info("Wrote %s", out_dir / "length_extrapolation.md")
    print(table)
    if any(r["status"] == "failed" for r in rows):
        raise SystemExit(f"Some runs failed; see {out_dir}/runs/*/train.log")
    return report


if __name__ == "__main__":
    main()
