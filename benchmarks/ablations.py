"""The ablation runner: a grid of GPT-style variants, each one component away from a baseline.

    python -m benchmarks.ablations                                  # the full grid, 3 seeds
    python -m benchmarks.ablations --variants swiglu,rope,mqa --seeds 0,1
    python -m benchmarks.ablations --variants activation            # a whole component
    python -m benchmarks.ablations --smoke                          # a tiny version for CI
    python -m benchmarks.ablations --list_variants

A miniature of the table of Narang et al. (2021), "Do Transformer Modifications Transfer Across
Implementations and Applications?": every variant changes exactly one component of the baseline
(a GPT-2-style decoder: GELU feed-forward, pre-norm LayerNorm, learned absolute positions, tied
embeddings, multi-head attention, one block per layer, embeddings as wide as the model):

    activation   relu, swiglu, geglu, reglu (Shazeer, 2020)
    norm         rmsnorm (Zhang & Sennrich, 2019), post_norm (Vaswani et al., 2017)
    positions    sinusoidal, rope (Su et al., 2021), alibi (Press et al., 2022), no_positions
    embeddings   untied, factorized_embeddings (ALBERT's E = H/4, Lan et al., 2020)
    attention    gqa (Ainslie et al., 2023: half as many key/value heads), mqa (Shazeer, 2019),
                 band_attention (a sliding window of 16 tokens; Beltagy et al., 2020)
    sharing      shared_blocks (ALBERT's cross-layer sharing: one block run at every layer)
    experts      moe (4 experts, top-2: Shazeer et al., 2017), switch (4 experts, top-1 with capacity
                 factor 1.25: Fedus et al., 2021), in every layer

The gated feed-forwards have three matrices instead of two; as in Shazeer (2020) their width is
2/3 of the baseline's (rounded to a multiple of 8), so that parameters and FLOPs stay about equal
(`--no_match_glu_params` keeps the full width).

Every run is one `python -m training.train` subprocess on the same data, the same tokenizer and
the same budget: Tiny Shakespeare at character level with nanoGPT's split (the first 90% of the
characters train, the last 10% validate), each file one character stream (`--sample_by document`,
`--eval_dataset`), and one character tokenizer trained here once, on the whole text as nanoGPT
builds its vocabulary, and shared by all runs. The budget is a number of optimizer steps
(`--max_steps`), optionally capped in wall-clock time (`--max_train_seconds`, per run). Each
variant is trained with every seed of `--seeds`.

The table reports, per variant, mean +- standard deviation across seeds of: parameters (counted
in the saved weights, so tied and shared tensors count once; all experts count), the forward
FLOPs per token (as in Narang et al.'s table: matmuls at 2 FLOPs per multiply-add over the
active weights, only the k experts a token is routed to, plus attention over the average causal
context; computed from the config, not measured), the median time of one training step
(intervals containing an evaluation are left out), the validation loss early in training (at
`--early_fraction` of the steps: how fast a variant learns) and at the end (nats per character).
Outputs under `--output_dir`: `ablations.md` (the table), `ablations.json` (the table plus
hardware, seeds, budget, the command of every run and each run's numbers), `ablations.png`
(final loss per variant with error bars), and `runs/<variant>/seed<k>/` (each run's folder).
A run whose folder already holds its results from the same command is not run again (so an
interrupted grid continues where it stopped); `--rerun` forces it.

Defaults are nanoGPT's small CPU configuration of `shakespeare_char` (4 layers, 4 heads, 128 wide,
context 64, batch 12, 2000 steps, learning rate 1e-3, dropout 0), about 3-4 minutes per run on one
core of a recent CPU: the full grid (19 variants x 3 seeds) takes a few hours; `--jobs` runs
several at once (with `--threads` each), at the price of noisier step times.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchmarks.bench_common import (
    REPO_ROOT,
    available_cores,
    comma_list,
    command_line,
    cpu_model,
    git_revision,
    load_average,
    pyplot,
    versions,
)
from benchmarks.bench_common import markdown_table as render_table

logger = logging.getLogger("ablations")

DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
TRAIN_FRACTION = 0.9  # nanoGPT's shakespeare_char split: first 90% train, last 10% validation

# ----------------------------------------------------------------------------------------------
# The grid
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


@dataclass(frozen=True)
class Variant:
    """One row of the table: the baseline with the config fields `overrides(size, match_glu)` returns."""

    name: str
    component: str
    description: str
    overrides: Callable[[ModelSize, bool], dict]


def _glu(act: str) -> Callable[[ModelSize, bool], dict]:
    def overrides(size: ModelSize, match_glu: bool) -> dict:
        return {"hidden_act": act} | ({"intermediate_size": size.glu_intermediate_size} if match_glu else {})

    return overrides


def _fixed(**fields) -> Callable[[ModelSize, bool], dict]:
    return lambda size, match_glu: dict(fields)


# The baseline's config fields (a GPT-2-style decoder); every variant changes one component of it.
BASELINE = {
    "hidden_act": "gelu",
    "norm_type": "layernorm",
    "norm_position": "pre",
    "position_embedding_type": "learned",
    "tie_word_embeddings": True,
}

VARIANTS = [
    Variant(
        "baseline",
        "baseline",
        "GELU, pre-norm LayerNorm, learned positions, tied embeddings, multi-head attention",
        _fixed(),
    ),
    Variant("relu", "activation", "ReLU feed-forward", _fixed(hidden_act="relu")),
    Variant("swiglu", "activation", "SwiGLU feed-forward (2/3 width)", _glu("swiglu")),
    Variant("geglu", "activation", "GeGLU feed-forward (2/3 width)", _glu("geglu")),
    Variant("reglu", "activation", "ReGLU feed-forward (2/3 width)", _glu("reglu")),
    Variant("rmsnorm", "norm", "RMSNorm instead of LayerNorm", _fixed(norm_type="rmsnorm")),
    Variant(
        "post_norm", "norm", "post-norm: LayerNorm after each residual sum", _fixed(norm_position="post")
    ),
    Variant(
        "sinusoidal",
        "positions",
        "fixed sinusoidal positions",
        _fixed(position_embedding_type="sinusoidal"),
    ),
    Variant("rope", "positions", "rotary positions (RoPE)", _fixed(position_embedding_type="rope")),
    Variant("alibi", "positions", "ALiBi attention bias", _fixed(position_embedding_type="alibi")),
    Variant(
        "no_positions",
        "positions",
        "no position information (NoPE)",
        _fixed(position_embedding_type="none"),
    ),
    Variant("untied", "embeddings", "separate output projection", _fixed(tie_word_embeddings=False)),
    Variant(
        "factorized_embeddings",
        "embeddings",
        "factorized embeddings, E = H/4 (ALBERT)",
        lambda size, match_glu: {"embedding_size": max(2, size.hidden_size // 4)},
    ),
    Variant(
        "gqa",
        "attention",
        "grouped-query attention, heads/2 key-value heads",
        lambda size, match_glu: {"num_key_value_heads": max(1, size.num_attention_heads // 2)},
    ),
    Variant("mqa", "attention", "multi-query attention, 1 key-value head", _fixed(num_key_value_heads=1)),
    Variant(
        "band_attention",
        "attention",
        "band (sliding-window) attention: each token sees the 16 before it",
        _fixed(attention_pattern="band", attention_window=16),
    ),
    Variant(
        "shared_blocks",
        "sharing",
        "one block shared by all layers (ALBERT)",
        _fixed(num_hidden_groups=1),
    ),
    # capacity factor 1.25 (Switch's training value): each expert takes ceil(1.25 * T * k / E)
    # tokens of a sequence, overflowing ones pass through the residual
    Variant(
        "moe",
        "experts",
        "mixture of 4 experts, top-2 routing, capacity factor 1.25",
        _fixed(num_local_experts=4, num_experts_per_tok=2, capacity_factor=1.25),
    ),
    Variant(
        "switch",
        "experts",
        "Switch: 4 experts, top-1 routing, capacity factor 1.25",
        _fixed(num_local_experts=4, num_experts_per_tok=1, capacity_factor=1.25, norm_topk_prob=False),
    ),
]
VARIANTS_BY_NAME = {v.name: v for v in VARIANTS}
COMPONENTS = sorted({v.component for v in VARIANTS} - {"baseline"})

# config fields that `training.train` has a flag for; the others go through --config_overrides
_TRAIN_FLAGS = {
    "hidden_act",
    "norm_type",
    "norm_position",
    "position_embedding_type",
    "num_key_value_heads",
    "intermediate_size",
}


def select_variants(spec: str | None) -> list[Variant]:
    """The variants named in a comma list of variant or component names, baseline first.

    The baseline is always included: every row is read against it.

    Raises:
        ValueError: for a name that is neither a variant nor a component.
    """
    if not spec:
        return list(VARIANTS)
    chosen = {"baseline"}
    for item in comma_list(spec):
        if item in VARIANTS_BY_NAME:
            chosen.add(item)
        elif item in COMPONENTS:
            chosen.update(v.name for v in VARIANTS if v.component == item)
        else:
            raise ValueError(
                f"Unknown variant or component {item!r}; variants: {', '.join(VARIANTS_BY_NAME)}; "
                f"components: {', '.join(COMPONENTS)}."
            )
    return [v for v in VARIANTS if v.name in chosen]


def variant_fields(variant: Variant, size: ModelSize, match_glu: bool = True) -> dict:
    """All config fields a variant's run sets beyond the sizes: the baseline's, then its overrides."""
    return {**BASELINE, "intermediate_size": size.intermediate_size, **variant.overrides(size, match_glu)}


def variant_config(
    variant: Variant, size: ModelSize, vocab_size: int, block_size: int, match_glu: bool = True
):
    """The `HfLmGPTConfig` `training.train` builds for this variant (special tokens aside)."""
    from hf_lm import HfLmGPTConfig

    return HfLmGPTConfig(
        vocab_size=vocab_size,
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        max_position_embeddings=block_size,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        **variant_fields(variant, size, match_glu),
    )


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
    from hf_lm.models.hflm_layers import (
        SparseMoE,
    )

    with torch.device("meta"):  # shapes only, no memory
        model = HfLmGPTForCausalLM(config)
    macs = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    for moe in (m for m in model.modules() if isinstance(m, SparseMoE)):
        per_expert = sum(m.weight.numel() for m in moe.experts[0].modules() if isinstance(m, nn.Linear))
        macs -= (moe.num_experts - moe.top_k) * per_expert  # the experts a token skips
    width = config.num_attention_heads * config.head_dim
    attention = 2 * 2 * config.num_hidden_layers * width * (context + 1) / 2
    return round(2 * macs + attention)


def variant_flags(variant: Variant, size: ModelSize, match_glu: bool = True) -> list[str]:
    """The `training.train` flags that select a variant's architecture."""
    flags, overrides = [], {}
    for name, value in variant_fields(variant, size, match_glu).items():
        if name == "tie_word_embeddings":
            flags += [] if value else ["--no_tie_word_embeddings"]
        elif name in _TRAIN_FLAGS:
            flags += [f"--{name}", str(value)]
        else:
            overrides[name] = value
    if overrides:
        flags += ["--config_overrides", json.dumps(overrides, sort_keys=True)]
    return flags


# ----------------------------------------------------------------------------------------------
# Data, tokenizer, hardware
# ----------------------------------------------------------------------------------------------


def prepare_data(data: Path, folder: Path, train_chars: int | None, eval_chars: int | None) -> dict:
    """Write nanoGPT's split of `data` (first 90% of the characters, last 10%) as two files.

    `train_chars`/`eval_chars` keep only the first characters of each part (the smoke run).
    """
    text = data.read_text(encoding="utf-8")
    cut = int(len(text) * TRAIN_FRACTION)
    train, valid = text[:cut], text[cut:]
    if train_chars is not None:
        train = train[:train_chars]
    if eval_chars is not None:
        valid = valid[:eval_chars]
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"train": folder / "train.txt", "validation": folder / "validation.txt"}
    for name, part in (("train", train), ("validation", valid)):
        if not paths[name].is_file() or paths[name].read_text(encoding="utf-8") != part:
            paths[name].write_text(part, encoding="utf-8")
    return {
        "source": str(data),
        "characters": len(text),
        "split": "first 90% of the characters train, last 10% validation (nanoGPT shakespeare_char)",
        "train_file": str(paths["train"]),
        "validation_file": str(paths["validation"]),
        "train_characters": len(train),
        "validation_characters": len(valid),
    }


def prepare_tokenizer(data: Path, folder: Path, block_size: int) -> int:
    """Train the shared character tokenizer on the whole text (as nanoGPT builds its vocabulary:
    every character that occurs, 65 for Tiny Shakespeare) and save it; returns its size."""
    from training.data.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(
        [data.read_text(encoding="utf-8")],
        kind="char",
        vocab_size=512,
        model_max_length=block_size,
        min_frequency=1,  # keep characters that occur once
    )
    tokenizer.save_pretrained(folder)
    return len(tokenizer)


def hardware(threads: int | None, jobs: int) -> dict:
    import torch

    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cores": available_cores(),
        "torch_threads_per_run": threads if threads is not None else torch.get_num_threads(),
        "concurrent_runs": jobs,
        "load_average_start": load_average(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        **versions("torch", "transformers", "accelerate"),
    }


# ----------------------------------------------------------------------------------------------
# Runs
# ----------------------------------------------------------------------------------------------


def run_command(args, variant: Variant, seed: int, data: dict, tokenizer_dir: Path, out: Path) -> list[str]:
    """The `python -m training.train` command of one (variant, seed) run."""
    size = model_size(args)
    early_step = early_step_of(args.max_steps, args.early_fraction)
    command = [
        sys.executable,
        "-m",
        "training.train",
        "--dataset", data["train_file"],
        "--eval_dataset", data["validation_file"],
        "--sample_by", "document",
        "--tokenizer_kind", "char",
        "--tokenizer_name_or_path", str(tokenizer_dir),
        "--block_size", str(args.block_size),
        "--hidden_size", str(size.hidden_size),
        "--num_hidden_layers", str(size.num_hidden_layers),
        "--num_attention_heads", str(size.num_attention_heads),
        "--hidden_dropout", "0.0",
        "--attention_dropout", "0.0",
        "--max_steps", str(args.max_steps),
        "--per_device_batch_size", str(args.batch_size),
        "--learning_rate", str(args.learning_rate),
        "--warmup_steps", str(args.warmup_steps),
        "--lr_scheduler", "cosine",
        "--weight_decay", "0.1",
        "--adam_beta2", "0.99",
        "--seed", str(seed),
        "--eval_every", str(early_step),  # so the early loss is an evaluation
        "--log_every", str(args.log_every),
        "--save_every", str(args.max_steps),
        "--keep_last", "1",
        "--report_to", "csv",
        "--output_dir", str(out),
    ]  # fmt: skip
    if args.eval_batches is not None:
        command += ["--eval_batches", str(args.eval_batches)]
    if args.max_train_seconds is not None:
        command += ["--max_train_seconds", str(args.max_train_seconds)]
    return command + variant_flags(variant, size, not args.no_match_glu_params)


def early_step_of(max_steps: int, fraction: float) -> int:
    return max(1, round(max_steps * fraction))


def model_size(args) -> ModelSize:
    return ModelSize(
        args.hidden_size,
        args.num_hidden_layers,
        args.num_attention_heads,
        args.intermediate_size or 4 * args.hidden_size,
    )


def _float(value: str | None) -> float | None:
    return float(value) if value not in (None, "") else None


def read_run(out: Path, early_step: int) -> dict:
    """One finished run's numbers from its folder: final and early validation loss, median step
    time, steps done and parameters (counted in the saved weights: tied and shared tensors once).

    The step time is the median over logging intervals that contain no evaluation (the loop
    records `seconds` before it evaluates, so an interval starting at an evaluation step holds it).
    """
    final = json.loads((out / "final_metrics.json").read_text())
    with open(out / "metrics.csv", newline="") as f:
        rows = [{k: _float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    eval_steps = [int(r["step"]) for r in rows if r.get("eval_loss") is not None]
    # the first evaluation at or after the early step (a budget-capped run may stop before it)
    early = next((r for r in rows if r.get("eval_loss") is not None and r["step"] >= early_step), None)
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
    return {
        "final_loss": final["eval_loss"],
        "early_loss": early["eval_loss"] if early else None,
        "early_loss_step": int(early["step"]) if early else None,
        "step_time_ms": round(1000 * statistics.median(per_step), 3) if per_step else None,
        "steps": final["step"],
        "seconds": final["seconds"],
        "parameters": count_saved_parameters(out / "final"),
    }


def count_saved_parameters(folder: Path) -> int:
    from safetensors import safe_open

    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            for key in f.keys():
                total += math.prod(f.get_slice(key).get_shape())
    return total


def execute(command: list[str], out: Path, threads: int | None, rerun: bool) -> tuple[str, str | None]:
    """Run one training subprocess (or reuse its finished results); returns (status, error tail)."""
    record = out / "ablation_command.json"
    done = (out / "final_metrics.json").is_file() and record.is_file()
    if done and not rerun and json.loads(record.read_text()) == command:
        return "reused", None
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("final_metrics.json", "metrics.csv"):
        (out / stale).unlink(missing_ok=True)
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with open(out / "train.log", "w") as log:
        result = subprocess.run(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0 or not (out / "final_metrics.json").is_file():
        tail = (out / "train.log").read_text(errors="replace")[-2000:]
        return "failed", tail
    record.write_text(json.dumps(command))
    return "ok", None


def mean_std(values: list[float | None]) -> dict:
    """Mean and sample standard deviation of the values that exist (std None below two values)."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    if not present:
        return {"mean": None, "std": None, "n": 0}
    std = statistics.stdev(present) if len(present) > 1 else None
    return {"mean": statistics.fmean(present), "std": std, "n": len(present)}


# ----------------------------------------------------------------------------------------------
# Table, JSON, plot
# ----------------------------------------------------------------------------------------------


def _pm(stat: dict, digits: int) -> str:
    if stat["mean"] is None:
        return "n/a"
    if stat["std"] is None:
        return f"{stat['mean']:.{digits}f}"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def markdown_table(rows: list[dict], early_step: int) -> str:
    """The Narang-style table: one row per variant, mean ± std across seeds.

    `steps` is the optimizer steps the runs did: `max_steps`, or fewer under a wall-clock cap.
    """
    base = next((r for r in rows if r["name"] == "baseline"), None)
    base_loss = base["final_loss"]["mean"] if base else None
    header = [
        "variant", "component", "parameters", "FLOPs/token", "step time (ms)", f"val loss @ step {early_step}",
        "final val loss", "Δ vs baseline", "steps", "seeds",
    ]  # fmt: skip
    body = []
    for r in rows:
        loss = r["final_loss"]["mean"]
        delta = (
            "" if loss is None or base_loss is None or r["name"] == "baseline" else f"{loss - base_loss:+.3f}"
        )
        params = r["parameters"]["mean"]
        body.append(
            [
                r["name"],
                r["component"],
                "n/a" if params is None else f"{params:,.0f}",
                f"{r['flops_per_token']:,}" if r.get("flops_per_token") else "n/a",
                _pm(r["step_time_ms"], 1),
                _pm(r["early_loss"], 3),
                _pm(r["final_loss"], 3),
                delta,
                _pm(r["steps"], 0),
                f"{r['final_loss']['n']}/{len(r['runs'])}",
            ]
        )
    return render_table(header, body, align="llrrrrrrrr")


def plot_final_losses(rows: list[dict], path: Path, title: str) -> Path:
    """Final validation loss per variant (mean, error bars one std), the baseline as a line."""
    plt = pyplot()
    shown = [r for r in rows if r["final_loss"]["mean"] is not None]
    components = sorted({r["component"] for r in rows})
    colors = {c: plt.cm.tab10(i % 10) for i, c in enumerate(components)}
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(shown) + 1.5))
    y = list(range(len(shown)))[::-1]
    for yi, r in zip(y, shown):
        ax.errorbar(
            r["final_loss"]["mean"],
            yi,
            xerr=r["final_loss"]["std"] or 0.0,
            fmt="o",
            capsize=3,
            color=colors[r["component"]],
        )
    base = next((r for r in shown if r["name"] == "baseline"), None)
    if base is not None:
        ax.axvline(base["final_loss"]["mean"], color="gray", linestyle="--", linewidth=1, label="baseline")
    ax.set_yticks(y, [f"{r['name']} ({r['component']})" for r in shown])
    ax.set_xlabel("final validation loss (nats/char), mean ± std across seeds")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------

SMOKE = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    block_size=32,
    batch_size=4,
    max_steps=8,
    warmup_steps=2,
    eval_batches=2,
    log_every=1,
    train_chars=20_000,
    eval_chars=4_000,
    seeds="0",
    jobs=2,
)
FULL = dict(
    hidden_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    block_size=64,
    batch_size=12,
    max_steps=2000,
    warmup_steps=100,
    eval_batches=None,
    log_every=None,  # derived: frequent enough to time steps between evaluations
    train_chars=None,
    eval_chars=None,
    seeds="0,1,2",
    jobs=1,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Variants: "
        + ", ".join(f"{v.name} ({v.component})" for v in VARIANTS)
        + ". Unset size and budget options take the full defaults (nanoGPT's small CPU config) "
        "or, with --smoke, tiny ones.",
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="Tiny Shakespeare input.txt.")
    parser.add_argument(
        "--output_dir", type=Path, default=None, help="Default out/ablations (out/ablations_smoke)."
    )
    parser.add_argument(
        "--variants",
        default=None,
        help="Comma list of variant and/or component names (default: all); the baseline is always run.",
    )
    parser.add_argument("--seeds", default=None, help="Comma list of seeds (default 0,1,2; smoke: 0).")
    parser.add_argument("--smoke", action="store_true", help="A tiny model, data and budget: about a minute.")
    parser.add_argument("--list_variants", action="store_true", help="Print the grid and exit.")
    size = parser.add_argument_group("baseline size (default: 4 layers, 4 heads, 128 wide)")
    size.add_argument("--hidden_size", type=int, default=None)
    size.add_argument("--num_hidden_layers", type=int, default=None)
    size.add_argument("--num_attention_heads", type=int, default=None)
    size.add_argument("--intermediate_size", type=int, default=None, help="Default 4 * hidden_size.")
    size.add_argument(
        "--no_match_glu_params",
        action="store_true",
        help="Give gated feed-forwards the full width instead of 2/3 of it (more parameters).",
    )
    budget = parser.add_argument_group("budget and optimization (the same for every run)")
    budget.add_argument("--max_steps", type=int, default=None, help="Optimizer steps per run (default 2000).")
    budget.add_argument(
        "--max_train_seconds", type=float, default=None, help="Optional wall-clock cap per run, in seconds."
    )
    budget.add_argument("--block_size", type=int, default=None, help="Context length (default 64).")
    budget.add_argument("--batch_size", type=int, default=None, help="Blocks per step (default 12).")
    budget.add_argument("--learning_rate", type=float, default=1e-3)
    budget.add_argument("--warmup_steps", type=int, default=None, help="Default 100.")
    budget.add_argument(
        "--early_fraction",
        type=float,
        default=0.25,
        help="Where the early loss is read, as a fraction of max_steps (default 0.25 = 25%%).",
    )
    budget.add_argument(
        "--eval_batches", type=int, default=None, help="Validation batches per evaluation (default: all)."
    )
    budget.add_argument(
        "--log_every",
        type=int,
        default=None,
        help="Training-loss log interval (default: 10, less in short runs).",
    )
    execution = parser.add_argument_group("execution")
    execution.add_argument(
        "--threads", type=int, default=1, help="torch threads per run (OMP_NUM_THREADS); 0 = torch's default."
    )
    execution.add_argument("--jobs", type=int, default=None, help="Runs at once (default 1; smoke: 2).")
    execution.add_argument("--rerun", action="store_true", help="Run again even where results exist.")
    args = parser.parse_args(argv)

    defaults = SMOKE if args.smoke else FULL
    for name, value in defaults.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    if args.output_dir is None:
        args.output_dir = REPO_ROOT / "out" / ("ablations_smoke" if args.smoke else "ablations")
    try:
        args.seed_list = [int(s) for s in comma_list(str(args.seeds))]
    except ValueError:
        parser.error(f"--seeds must be a comma list of integers, got {args.seeds!r}")
    if not args.seed_list:
        parser.error("--seeds is empty")
    try:
        args.selected = select_variants(args.variants)
    except ValueError as e:
        parser.error(str(e))
    if not 0 < args.early_fraction <= 1:
        parser.error(f"--early_fraction must be in (0, 1], got {args.early_fraction}")
    for name in (
        "max_steps",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "block_size",
        "batch_size",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    if args.jobs < 1 or args.threads < 0:
        parser.error("--jobs must be >= 1 and --threads >= 0")
    if args.threads == 0:
        args.threads = None
    if args.log_every is None:
        # at most every 10 steps, and at least 5 logs between evaluations, so steps can be timed
        args.log_every = max(1, min(10, early_step_of(args.max_steps, args.early_fraction) // 5))
    return args


def run_jobs(jobs: list[tuple], commands: dict, args) -> list[tuple[str, str | None]]:
    """Run (or reuse) every `(variant, seed, output folder)` job, `--jobs` at a time; returns each
    job's `(status, error tail)` in order."""

    def work(job):
        variant, seed, out = job
        t0 = time.perf_counter()
        status, error = execute(commands[(variant.name, seed)], out, args.threads, args.rerun)
        logger.info("%-22s seed %d: %s in %.0f s", variant.name, seed, status, time.perf_counter() - t0)
        if error:
            logger.warning(
                "%s seed %d failed; last lines of %s:\n%s", variant.name, seed, out / "train.log", error
            )
        return status, error

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        return list(pool.map(work, jobs))


def variant_row(
    variant: Variant, args, jobs: list[tuple], statuses: list[tuple], commands: dict, early_step: int, size
) -> dict:
    """One variant's row of the report: its runs (one per seed) and their mean ± std."""
    runs = []
    for (v, seed, out), (status, error) in zip(jobs, statuses):
        if v is not variant:
            continue
        run = {
            "seed": seed,
            "status": status,
            "output_dir": str(out),
            "command": shlex.join(commands[(v.name, seed)]),
        }
        if status in ("ok", "reused"):
            run.update(read_run(out, early_step))
        else:
            run["error_tail"] = error
        runs.append(run)
    return {
        "name": variant.name,
        "component": variant.component,
        "description": variant.description,
        "config_fields": variant_fields(variant, size, not args.no_match_glu_params),
        "parameters": mean_std([r.get("parameters") for r in runs]),
        "step_time_ms": mean_std([r.get("step_time_ms") for r in runs]),
        "early_loss": mean_std([r.get("early_loss") for r in runs]),
        "final_loss": mean_std([r.get("final_loss") for r in runs]),
        "steps": mean_std([r.get("steps") for r in runs]),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if args.list_variants:
        size = model_size(args)
        for v in VARIANTS:
            print(
                f"{v.name:24s} {v.component:11s} {v.description}  {v.overrides(size, not args.no_match_glu_params)}"
            )
        return {}
    if not args.data.is_file():
        raise SystemExit(f"No data at {args.data}: pass --data path/to/tinyshakespeare/input.txt")

    out_dir: Path = args.output_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    size = model_size(args)
    data = prepare_data(args.data, out_dir / "data", args.train_chars, args.eval_chars)
    tokenizer_dir = out_dir / "tokenizer"
    vocab_size = prepare_tokenizer(args.data, tokenizer_dir, args.block_size)
    # every variant must build before hours of training start
    for variant in args.selected:
        variant_config(variant, size, vocab_size, args.block_size, not args.no_match_glu_params)
    early_step = early_step_of(args.max_steps, args.early_fraction)
    env = hardware(args.threads, args.jobs)

    jobs = [
        (variant, seed, out_dir / "runs" / variant.name / f"seed{seed}")
        for variant in args.selected
        for seed in args.seed_list
    ]
    commands = {(v.name, s): run_command(args, v, s, data, tokenizer_dir, out) for v, s, out in jobs}
    logger.info(
        "%d variants x %d seeds = %d runs of %d steps, %d at a time, under %s",
        len(args.selected),
        len(args.seed_list),
        len(jobs),
        args.max_steps,
        args.jobs,
        out_dir,
    )
    start = time.perf_counter()
    statuses = run_jobs(jobs, commands, args)
    rows = [
        variant_row(variant, args, jobs, statuses, commands, early_step, size) for variant in args.selected
    ]
    for row, variant in zip(rows, args.selected):
        config = variant_config(variant, size, vocab_size, args.block_size, not args.no_match_glu_params)
        row["flops_per_token"] = forward_flops_per_token(config, args.block_size)

    table = markdown_table(rows, early_step)
    env["load_average_end"] = load_average()
    report = {
        "task": "Tiny Shakespeare, character level: GPT-style ablations, one component at a time",
        "command": command_line(__spec__.name, argv),
        "smoke": args.smoke,
        "runs_working_directory": str(REPO_ROOT),  # every run's command is run from here
        "git_revision": git_revision(),
        "hardware": env,
        "seeds": args.seed_list,
        "budget": {
            "max_steps": args.max_steps,
            "max_train_seconds_per_run": args.max_train_seconds,
            "batch_size": args.batch_size,
            "block_size": args.block_size,
            "tokens_per_step": args.batch_size * args.block_size,
            "learning_rate": args.learning_rate,
            "warmup_steps": args.warmup_steps,
            "lr_scheduler": "cosine",
            "early_loss_step": early_step,
            "eval_batches": args.eval_batches,
        },
        "baseline": {
            "hidden_size": size.hidden_size,
            "num_hidden_layers": size.num_hidden_layers,
            "num_attention_heads": size.num_attention_heads,
            "intermediate_size": size.intermediate_size,
            "glu_intermediate_size": None if args.no_match_glu_params else size.glu_intermediate_size,
            **BASELINE,
        },
        "data": {**data, "tokenizer": str(tokenizer_dir), "vocab_size": vocab_size},
        "wall_seconds": round(time.perf_counter() - start, 1),
        "variants": rows,
    }
    title = (
        f"Tiny Shakespeare (char): {size.num_hidden_layers}L x {size.hidden_size}, "
        f"{args.max_steps} steps, seeds {','.join(map(str, args.seed_list))}"
    )
    header = (
        f"# GPT-style ablations on Tiny Shakespeare (character level)\n\n{title}; mean ± std across seeds. "
        f"Validation loss in nats per character; step time is the median training step on "
        f"{env['cpu_model']} with {env['torch_threads_per_run']} thread(s) per run, "
        f"{args.jobs} run(s) at a time.\n\n"
    )
    (out_dir / "ablations.md").write_text(header + table + "\n")
    (out_dir / "ablations.json").write_text(json.dumps(report, indent=2))
    plot_final_losses(rows, out_dir / "ablations.png", title)
    failed = sum(r["status"] == "failed" for row in rows for r in row["runs"])
    logger.info(
        "Wrote %s, %s and %s%s",
        out_dir / "ablations.md",
        out_dir / "ablations.json",
        out_dir / "ablations.png",
        f" ({failed} failed runs)" if failed else "",
    )
    print(table)
    return report


if __name__ == "__main__":
    main()
