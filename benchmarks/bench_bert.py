#!/usr/bin/env python
"""CPU benchmark: hf_lm's BERT-style masked LM against transformers' `BertForMaskedLM`.

Both models get the same BERT-shaped config (default: 4 layers, hidden 256, 4 heads, intermediate
1024, BERT's vocabulary size 30522, 512 learned positions, 2 segment types, exact GELU, post-norm
LayerNorm eps 1e-12, tied decoder, dropout 0, SDPA attention). The reference is built first and
converted with `hf_lm.convert.from_transformers`, so hf_lm runs the same weights. hf_lm is measured
twice, as two separate sides:

- `hf_lm`: `sparse_prediction=False` (the default). Exactly the reference's computation: the
  masked-LM head runs on every position, logits (B, T, V), cross-entropy with -100 ignored.
- `hf_lm sparse`: `sparse_prediction=True`. The same loss (and the same gradients), but in
  training the head runs only on the labelled positions (~15%); logits are then (N, V).

Batches are masked-LM batches as BERT's collator makes them: `[CLS] ... [SEP]` rows, right-padded
(`--pad-fraction` of the rows are shorter than `--seq`, so `attention_mask` is used), ~15% of the
real tokens selected (`--mask-prob`; 80% `[MASK]`, 10% random, 10% kept) with their original ids
as labels and -100 everywhere else.

Sanity checks, printed before timing (the run stops if one fails): the eval-mode logits of hf_lm
and of the reference on the padded batch (max |Δ|), and, for each hf_lm side, the loss of the first
training step and the loss of the second (after one AdamW step, so it also compares gradients)
against the reference's; all must agree within `--tolerance` (1e-4).

Measured, alternating the sides round by round in one process (the order reverses every round),
after warm-up; each metric is the median over rounds:

1. Training throughput, positions/s (B * T, padding included): forward with `labels` + backward +
   `torch.optim.AdamW` step + `zero_grad`. Every sample also records this process's user/system
   CPU time and minor page faults (getrusage).
2. Inference throughput, positions/s: forward only, `eval()` mode, `torch.no_grad()`, no labels,
   full (B, T, V) logits (what `fill-mask` runs). `sparse_prediction` does nothing in eval mode, so
   this compares `hf_lm` with the reference only.
3. Achieved training FLOP/s: the FLOPs of one step's forward + backward, counted per side with
   `torch.utils.flop_counter.FlopCounterMode` (`peak_flops.count_train_step_flops`; the AdamW step
   is not counted), over the median step time. The sparse side does fewer FLOPs (its head runs on
   the labelled positions only), so its FLOP/s is not a speed comparison; its step time is.
4. Memory: each side in a fresh subprocess, peak RSS above the pre-workload RSS (see
   `bench_gpt.py`), for training steps and for one inference forward. Parameter and AdamW state
   bytes are counted exactly from the tensors.

The machine's CPU contention during each timed phase (Linux PSI) is printed and saved; with threads
== cores any other busy process inflates timings (`--wait-idle S` waits for an idle CPU).

Usage:
    HF_HUB_OFFLINE=1 python benchmarks/bench_bert.py               # full run, a few minutes
    HF_HUB_OFFLINE=1 python benchmarks/bench_bert.py --quick       # smoke run
    HF_HUB_OFFLINE=1 python benchmarks/bench_bert.py --profile     # also write profiler tables

Prints a markdown table and writes JSON to `--output` (default `out/bench_bert.json`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import BertConfig, BertForMaskedLM  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
for path in (REPO_ROOT, BENCH_DIR):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_common import markdown_table, measure_peak_rss, run_json_worker  # noqa: E402

# the measurement machinery is the GPT benchmark's: same timing, contention and memory method
from bench_gpt import (  # noqa: E402
    Contention,
    add_machine_options,
    add_warmup_and_memory_options,
    busy_note,
    environment,
    environment_line,
    flops_line,
    fmt,
    make_batch_train_step,
    memory_rows,
    memory_worker_command,
    metric_row,
    optimizer_state_bytes,
    summarize_with_cpu,
    tensor_bytes,
    time_alternating,
    wait_for_idle,
)
from peak_flops import count_train_step_flops  # noqa: E402

from hf_lm import HfLmBertConfig, HfLmBertForMaskedLM  # noqa: E402
from hf_lm.convert import from_transformers  # noqa: E402

SIDES = ("hf_lm", "hf_lm_sparse", "transformers")
SIDE_NAMES = {
    "hf_lm": "hf_lm (sparse_prediction=False: the reference's computation)",
    "hf_lm_sparse": "hf_lm sparse (sparse_prediction=True: same loss, head on labelled positions only)",
    "transformers": "transformers BertForMaskedLM",
}
INFER_SIDES = ("hf_lm", "transformers")  # sparse_prediction only acts in training

# BERT's uncased WordPiece ids; real word pieces start at 1000 in that vocabulary
PAD_ID, CLS_ID, SEP_ID, MASK_ID, FIRST_WORD_ID = 0, 101, 102, 103, 1000

# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def reference_config(args, dropout: float | None = None) -> BertConfig:
    dropout = args.dropout if dropout is None else dropout
    return BertConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.intermediate,
        max_position_embeddings=args.max_positions,
        type_vocab_size=2,
        hidden_act="gelu",
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        layer_norm_eps=1e-12,
        pad_token_id=PAD_ID,
        tie_word_embeddings=True,
    )


def build_reference(args, dropout: float | None = None) -> BertForMaskedLM:
    torch.manual_seed(args.seed)
    model = BertForMaskedLM._from_config(reference_config(args, dropout), attn_implementation="sdpa")
    return model.train()


def build_hflm(args, sparse: bool, dropout: float | None = None) -> HfLmBertForMaskedLM:
    """hf_lm's BERT computing the reference's function: the reference converted by `from_transformers`,
    then (for the sparse side) the same weights in a model whose config has `sparse_prediction=True`."""
    converted = from_transformers(build_reference(args, dropout))
    config = HfLmBertConfig.from_dict({**converted.config.to_dict(), "sparse_prediction": sparse})
    model = HfLmBertForMaskedLM._from_config(config, attn_implementation="sdpa")
    model.load_state_dict(converted.state_dict())
    assert model.lm_head.decoder.weight is model.model.embed_tokens.weight  # still tied
    return model.train()


def build_side(side: str, args, dropout: float | None = None) -> torch.nn.Module:
    if side == "transformers":
        return build_reference(args, dropout)
    return build_hflm(args, sparse=side == "hf_lm_sparse", dropout=dropout)


def build_all(args, dropout: float | None = None) -> dict[str, torch.nn.Module]:
    return {side: build_side(side, args, dropout) for side in SIDES}


def mlm_batch(args, seed: int) -> dict[str, torch.Tensor]:
    """A right-padded masked-LM batch as BERT's collator makes it (see the module docstring)."""
    B, T = args.batch, args.seq
    g = torch.Generator().manual_seed(seed)
    lengths = torch.full((B,), T)
    n_padded = round(B * args.pad_fraction)
    if n_padded:
        # the padded rows are spread over the batch, with lengths uniform in [T/2, T)
        rows = torch.randperm(B, generator=g)[:n_padded]
        lengths[rows] = torch.randint(T // 2, T, (n_padded,), generator=g)
    pos = torch.arange(T)[None]  # (1, T)
    attention_mask = (pos < lengths[:, None]).long()  # (B, T)
    words = torch.randint(FIRST_WORD_ID, args.vocab, (B, T), generator=g)
    ids = torch.where(attention_mask.bool(), words, PAD_ID)
    ids[:, 0] = CLS_ID
    ids[torch.arange(B), lengths - 1] = SEP_ID
    maskable = attention_mask.bool() & (pos > 0) & (pos < (lengths - 1)[:, None])  # real, not special
    selected = maskable & (torch.rand(B, T, generator=g) < args.mask_prob)
    labels = torch.where(selected, ids, -100)
    u = torch.rand(B, T, generator=g)
    random_words = torch.randint(FIRST_WORD_ID, args.vocab, (B, T), generator=g)
    input_ids = torch.where(selected & (u < 0.8), MASK_ID, ids)  # 80% [MASK]
    input_ids = torch.where(selected & (u >= 0.8) & (u < 0.9), random_words, input_ids)  # 10% random
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def batch_stats(batch: dict) -> dict:
    mask = batch["attention_mask"]
    return {
        "positions": mask.numel(),
        "real_tokens": int(mask.sum()),
        "padded_rows": int((mask == 0).any(-1).sum()),
        "labelled": int((batch["labels"] != -100).sum()),
    }


# --------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------


def make_train_step(model: torch.nn.Module, batch: dict, lr: float = 1e-4):
    """`bench_gpt.make_batch_train_step` on `batch` (AdamW, lr 1e-4 by default)."""
    return make_batch_train_step(model, batch, lr)


def make_forward(model: torch.nn.Module, batch: dict):
    model.eval()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}

    @torch.no_grad()
    def forward():
        return model(**inputs).logits

    return forward


def sanity(args, batch: dict) -> dict:
    """Logit parity in eval mode, and the first two training-step losses of every side.

    Dropout is off here whatever `--dropout` says (with dropout the sides draw different masks).
    """
    models = build_all(args, dropout=0.0)
    with torch.no_grad():
        logits = {side: make_forward(models[side], batch)() for side in INFER_SIDES}
    real = batch["attention_mask"].bool()
    diff = (logits["hf_lm"] - logits["transformers"]).abs()
    result = {
        "max_abs_logit_diff": diff.max().item(),
        "max_abs_logit_diff_real_tokens": diff[real].max().item(),
        "max_abs_logit": logits["transformers"].abs().max().item(),
    }
    del logits, diff
    losses = {}
    for side, model in models.items():
        step = make_train_step(model, batch)
        losses[side] = [step().item(), step().item()]  # step 1; step 2 after one AdamW update
    result["losses"] = losses
    for side in ("hf_lm", "hf_lm_sparse"):
        for i in (0, 1):
            result[f"loss_diff_step{i + 1}_{side}"] = abs(losses[side][i] - losses["transformers"][i])
    result["ok"] = max(v for k, v in result.items() if k.startswith(("loss_diff", "max_abs_logit_diff"))) < (
        args.tolerance
    )
    return result


# --------------------------------------------------------------------------------------------
# Memory: one fresh subprocess per side and workload
# --------------------------------------------------------------------------------------------


def memory_worker(side: str, workload: str, args) -> dict:
    """Runs in a fresh process: peak RSS above the pre-workload RSS for one side and workload."""
    torch.set_num_threads(args.threads)
    model = build_side(side, args)
    batch = mlm_batch(args, args.seed)
    result = {"param_bytes": tensor_bytes(model.parameters())}
    if workload == "train":
        step = make_train_step(model, batch)
        fn, n = step, args.memory_steps
    else:
        fn, n = make_forward(model, batch), 1
    result.update(measure_peak_rss(fn, n))
    if workload == "train":
        result["optimizer_state_bytes"] = optimizer_state_bytes(step.optimizer)
    return result


# options a memory worker needs to rebuild the same model and batch
WORKER_OPTIONS = (
    "layers hidden heads intermediate vocab max_positions batch seq pad_fraction mask_prob dropout "
    "threads memory_steps seed"
).split()


def measure_memory(side: str, workload: str, args) -> dict:
    cmd = memory_worker_command(__file__, [side, workload], args, WORKER_OPTIONS)
    return run_json_worker(cmd, f"memory worker {side}/{workload}")


# --------------------------------------------------------------------------------------------
# Profiling (--profile): operator tables written next to the JSON
# --------------------------------------------------------------------------------------------


def head_share(prof, args) -> str:
    """One line: the self CPU time of operators on vocabulary-sized tensors (the masked-LM decoder
    and its bias, log-softmax, the loss gradient, the tied embedding's AdamW update) against the total."""
    rows = prof.key_averages(group_by_input_shape=True)
    total = sum(e.self_cpu_time_total for e in rows)
    head = sum(e.self_cpu_time_total for e in rows if str(args.vocab) in str(e.input_shapes))
    return (
        f"self CPU time on tensors with a dimension of size V={args.vocab}: {head / 1e3:.0f} ms of "
        f"{total / 1e3:.0f} ms ({head / max(total, 1):.0%}); everything else {(total - head) / 1e3:.0f} ms\n\n"
    )


def profile_models(models: dict, batch: dict, args, out_dir: Path) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    written = []
    for side, model in models.items():
        step = make_train_step(model, batch)
        step()
        step()  # warm-up (the first step allocates the AdamW state)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(args.profile_steps):
                step()
        path = out_dir / f"profile_bert_{side}_train.txt"
        path.write_text(
            f"{SIDE_NAMES[side]}: {args.profile_steps} training steps (divide totals by that)\n"
            + head_share(prof, args)
            + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
            + "\n\nBy input shape:\n"
            + prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=40)
        )
        written.append(str(path))
        step.optimizer.state.clear()
        if side not in INFER_SIDES:
            continue
        fwd = make_forward(model, batch)
        fwd()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(args.profile_steps):
                fwd()
        path = out_dir / f"profile_bert_{side}_infer.txt"
        path.write_text(
            f"{SIDE_NAMES[side]}: {args.profile_steps} inference forwards (divide totals by that)\n"
            + head_share(prof, args)
            + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
        )
        written.append(str(path))
    return written


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=16, help="batch size (training and inference)")
    p.add_argument("--seq", type=int, default=128, help="sequence length (<= --max-positions)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=30522, help="vocabulary size (BERT's: 30522)")
    p.add_argument("--max-positions", type=int, default=512)
    p.add_argument("--dropout", type=float, default=0.0, help="hidden and attention dropout (BERT: 0.1)")
    p.add_argument("--mask-prob", type=float, default=0.15, help="share of real tokens given a label")
    p.add_argument("--pad-fraction", type=float, default=0.5, help="share of rows right-padded to --seq")
    p.add_argument("--rounds", type=int, default=9, help="alternating rounds per metric")
    p.add_argument("--train-reps", type=int, default=1, help="training steps per round and side")
    p.add_argument("--infer-reps", type=int, default=2, help="inference forwards per round and side")
    add_warmup_and_memory_options(p)
    p.add_argument("--tolerance", type=float, default=1e-4, help="largest allowed sanity difference")
    add_machine_options(p)
    p.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, 1 rep, 1 warm-up")
    p.add_argument("--profile", action="store_true", help="also write torch.profiler tables")
    p.add_argument("--profile-steps", type=int, default=3, help="steps per profiled workload")
    p.add_argument("--output", type=str, default="out/bench_bert.json")
    p.add_argument("--_memory-worker", nargs=2, metavar=("SIDE", "WORKLOAD"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.train_reps, args.infer_reps, args.warmup = 2, 1, 1, 1
        args.memory_steps, args.profile_steps = 2, 1
    if args.seq > args.max_positions:
        p.error("--seq must fit in --max-positions (learned positions)")
    if args.vocab <= FIRST_WORD_ID:
        p.error(f"--vocab must exceed {FIRST_WORD_ID} (BERT's special and unused ids come first)")
    return args


def print_table(results: dict, sides: tuple[str, ...]) -> str:
    cols = [s for s in sides if s != "transformers"]
    header = ["metric", "transformers", *(cell for s in cols for cell in (s, f"ratio {s}/transformers"))]
    body = []
    for name, row in results.items():
        better = "higher is better" if row["higher_is_better"] else "lower is better"
        cells = [f"{name} [{row['unit']}, {better}]", fmt(row["transformers"], row["unit"])]
        for s in cols:
            if s not in row:
                cells += ["", ""]
                continue
            ratio = row.get(f"ratio_{s}")
            cells += [fmt(row[s], row["unit"]), "n/a" if ratio is None else f"{ratio:.3f}"]
        body.append(cells)
    return "\n" + markdown_table(header, body, align="l" + "r" * (1 + 2 * len(cols)))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args._memory_worker:
        side, workload = args._memory_worker
        print(json.dumps(memory_worker(side, workload, args)))
        return 0

    torch.set_num_threads(args.threads)
    env = environment(torch.get_num_threads())
    print(environment_line(env), flush=True)
    for side in SIDES:
        print(f"  {side:13s} = {SIDE_NAMES[side]}")
    batch = mlm_batch(args, args.seed)
    stats = batch_stats(batch)
    print(
        f"batch: {args.batch} x {args.seq} = {stats['positions']} positions, {stats['real_tokens']} real tokens, "
        f"{stats['padded_rows']} right-padded rows, {stats['labelled']} labelled positions "
        f"({stats['labelled'] / stats['real_tokens']:.1%} of real tokens)",
        flush=True,
    )

    check = sanity(args, batch)
    print(
        f"sanity (dropout off): max |Δlogits| eval = {check['max_abs_logit_diff']:.2e} "
        f"(max |logit| {check['max_abs_logit']:.2f})",
        flush=True,
    )
    for side in ("hf_lm", "hf_lm_sparse"):
        print(
            f"  {side:13s} loss step 1: {check['losses'][side][0]:.6f} vs {check['losses']['transformers'][0]:.6f}"
            f" (|Δ| {check[f'loss_diff_step1_{side}']:.2e}); step 2 (after one AdamW update): "
            f"|Δ| {check[f'loss_diff_step2_{side}']:.2e}",
            flush=True,
        )
    if not check["ok"]:
        print(f"sanity check FAILED: a difference exceeds --tolerance {args.tolerance:g}", file=sys.stderr)
        return 1
    print(f"sanity check passed (all differences < {args.tolerance:g})", flush=True)
    gc.collect()

    models = build_all(args)
    n_params = {side: sum(p.numel() for p in m.parameters()) for side, m in models.items()}
    assert len(set(n_params.values())) == 1, n_params
    print(f"{n_params['hf_lm'] / 1e6:.2f}M parameters", flush=True)
    flops = {side: count_train_step_flops(m, batch) for side, m in models.items()}
    print(flops_line(flops), flush=True)

    results: dict[str, dict] = {}  # metric -> {side: value, unit, higher_is_better}
    raw: dict[str, dict] = {}
    contention: dict = {"waited_s": {}}
    positions = args.batch * args.seq

    # 1. training
    steps = {side: make_train_step(m, batch) for side, m in models.items()}
    t0 = time.perf_counter()
    contention["waited_s"]["train"] = wait_for_idle(args.wait_idle)
    with Contention() as c:
        samples = time_alternating(steps, args.rounds, args.train_reps, args.warmup)
    contention["train"] = c.result
    raw["train"] = {side: summarize_with_cpu(s, positions) for side, s in samples.items()}
    for side in SIDES:
        raw["train"][side]["achieved_gflops"] = flops[side]["total"] / raw["train"][side]["median_s"] / 1e9
    for name, key, unit, higher in (
        (f"train positions/s (B={args.batch}, T={args.seq})", "throughput", "pos/s", True),
        ("train step time", "median_s", "ms", False),
        ("train step: CPU time (user + sys, all threads)", "median_cpu_s", "ms", False),
        ("train step: kernel (sys) CPU time", "median_sys_s", "ms", False),
        ("train achieved GFLOP/s (fwd + bwd FLOPs / step time)", "achieved_gflops", "GFLOP/s", True),
        ("train step: minor page faults", "median_minor_faults", "count", False),
    ):
        results[name] = metric_row({side: raw["train"][side][key] for side in SIDES}, unit, higher)
    print(f"training timed in {time.perf_counter() - t0:.0f}s{busy_note(c.result)}", flush=True)
    for step in steps.values():
        step.optimizer.state.clear()
    del steps
    gc.collect()

    # 2. inference
    fns = {side: make_forward(models[side], batch) for side in INFER_SIDES}
    t0 = time.perf_counter()
    contention["waited_s"]["infer"] = wait_for_idle(args.wait_idle)
    with Contention() as c:
        samples = time_alternating(fns, args.rounds, args.infer_reps, args.warmup)
    contention["infer"] = c.result
    raw["infer"] = {side: summarize_with_cpu(s, positions) for side, s in samples.items()}
    for name, key, unit, higher in (
        (f"inference positions/s (eval, no_grad, B={args.batch}, T={args.seq})", "throughput", "pos/s", True),
        ("inference forward time", "median_s", "ms", False),
        ("inference forward: CPU time (user + sys, all threads)", "median_cpu_s", "ms", False),
    ):
        results[name] = metric_row({side: raw["infer"][side][key] for side in INFER_SIDES}, unit, higher)
    print(f"inference timed in {time.perf_counter() - t0:.0f}s{busy_note(c.result)}", flush=True)

    # 3. memory
    if not args.no_memory:
        t0 = time.perf_counter()
        mem = {
            "train": {side: measure_memory(side, "train", args) for side in SIDES},
            "infer": {side: measure_memory(side, "infer", args) for side in INFER_SIDES},
        }
        raw["memory"] = mem
        results.update(memory_rows(mem["train"], SIDES, args.memory_steps))
        results["inference peak RSS above baseline"] = metric_row(
            {s: mem["infer"][s]["peak_rss_delta_bytes"] for s in INFER_SIDES}, "MiB", False
        )
        print(f"memory measured in {time.perf_counter() - t0:.0f}s ({mem['train']['hf_lm']['peak_method']})")

    for row in results.values():
        den = row["transformers"]
        for side in SIDES[:-1]:
            if side in row:
                row[f"ratio_{side}"] = row[side] / den if den else None
    print(print_table(results, SIDES))

    out_path = Path(args.output)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    profiles = []
    if args.profile:
        profiles = profile_models(models, batch, args, out_path.parent)
        print("profiles written:\n  " + "\n  ".join(profiles))

    report = {
        "environment": env,
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "model": {
            "params": n_params["hf_lm"],
            "hf_lm_config": models["hf_lm"].config.to_dict(),
            "reference": "transformers.BertForMaskedLM, attn_implementation=sdpa, hidden_act gelu",
            "sides": SIDE_NAMES,
        },
        "batch": stats,
        "sanity": check,
        "flops": flops,
        "contention": contention,
        "results": results,
        "raw": raw,
        "profiles": profiles,
        "method": (
            "A/B/C alternating rounds in one process after warm-up, median per side; the order reverses "
            "each round. Contention: share of each phase's wall time with a task waiting for a CPU "
            "(/proc/pressure/cpu). Memory: fresh subprocess per side/workload, peak RSS above the "
            "pre-workload RSS (VmHWM reset via /proc/self/clear_refs)."
        ),
    }
    out_path.write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
