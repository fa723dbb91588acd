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
   `bench_common.measure_peak_rss`), for training steps and for one inference forward. Parameter and AdamW state
   bytes are counted exactly from the tensors.

The machine's CPU contention during each timed phase (Linux PSI) is printed and saved; with threads
== cores any other busy process inflates timings (`--wait-idle S` waits for an idle CPU).

Usage:
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_bert               # full run, a few minutes
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_bert --quick       # smoke run
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_bert --profile     # also write profiler tables

Prints a markdown table and writes JSON to `--output` (default `out/bench_bert.json`).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import torch

from benchmarks.bench_common import (
    AB_METHOD,
    add_machine_options,
    add_warmup_and_memory_options,
    environment,
    environment_line,
    flops_line,
    markdown_table,
    memory_rows,
    memory_worker_command,
    metric_cell,
    metric_row,
    ratio_cell,
    run_json_worker,
    timed_phase,
    worker_memory,
    write_ab_report,
)
from benchmarks.bench_common import make_train_step as make_train_step_on
from benchmarks.pairs import FIRST_WORD_ID, build_bert_hflm, build_bert_reference, mlm_batch
from benchmarks.peak_flops import count_train_step_flops

SIDES = ("hf_lm", "hf_lm_sparse", "transformers")
SIDE_NAMES = {
    "hf_lm": "hf_lm (sparse_prediction=False: the reference's computation)",
    "hf_lm_sparse": "hf_lm sparse (sparse_prediction=True: same loss, head on labelled positions only)",
    "transformers": "transformers BertForMaskedLM",
}
INFER_SIDES = ("hf_lm", "transformers")  # sparse_prediction only acts in training

# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def build_side(side: str, args, dropout: float | None = None) -> torch.nn.Module:
    """The reference, or hf_lm's BERT converted from it (`pairs`), dense or sparse prediction."""
    if side == "transformers":
        return build_bert_reference(args, dropout)
    return build_bert_hflm(args, sparse=side == "hf_lm_sparse", dropout=dropout)


def build_all(args, dropout: float | None = None) -> dict[str, torch.nn.Module]:
    return {side: build_side(side, args, dropout) for side in SIDES}


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
    """`bench_common.make_train_step` on `batch` (AdamW, lr 1e-4 by default)."""
    return make_train_step_on(model, batch, lr)


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
    return worker_memory(
        model,
        workload,
        lambda: make_train_step(model, batch),
        lambda: make_forward(model, batch),
        args.memory_steps,
    )


# options a memory worker needs to rebuild the same model and batch
WORKER_OPTIONS = (
    "layers hidden heads intermediate vocab max_positions batch seq pad_fraction mask_prob dropout "
    "threads memory_steps seed"
).split()


def measure_memory(side: str, workload: str, args) -> dict:
    cmd = memory_worker_command(__spec__.name, [side, workload], args, WORKER_OPTIONS)
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
        cells = [f"{name} [{row['unit']}, {better}]", metric_cell(row["transformers"], row["unit"])]
        for s in cols:
            if s not in row:
                cells += ["", ""]
                continue
            ratio = row.get(f"ratio_{s}")
            cells += [metric_cell(row[s], row["unit"]), ratio_cell(ratio)]
        body.append(cells)
    return "\n" + markdown_table(header, body, align="l" + "r" * (1 + 2 * len(cols)))


def time_training(models: dict, batch: dict, flops: dict, args, contention: dict, raw: dict) -> dict:
    """Training throughput, step time, CPU and kernel time, achieved FLOP/s and page faults per side."""
    steps = {side: make_train_step(m, batch) for side, m in models.items()}
    positions = args.batch * args.seq
    train = raw["train"] = timed_phase(
        steps, args, args.train_reps, positions, contention, "train", "training"
    )
    for side in SIDES:
        train[side]["achieved_gflops"] = flops[side]["total"] / train[side]["median_s"] / 1e9
    for step in steps.values():  # the AdamW moments would otherwise stay resident for inference
        step.optimizer.state.clear()
    rows = (
        (f"train positions/s (B={args.batch}, T={args.seq})", "throughput", "pos/s", True),
        ("train step time", "median_s", "ms", False),
        ("train step: CPU time (user + sys, all threads)", "median_cpu_s", "ms", False),
        ("train step: kernel (sys) CPU time", "median_sys_s", "ms", False),
        ("train achieved GFLOP/s (fwd + bwd FLOPs / step time)", "achieved_gflops", "GFLOP/s", True),
        ("train step: minor page faults", "median_minor_faults", "count", False),
    )
    return {
        name: metric_row({side: train[side][key] for side in SIDES}, unit, higher)
        for name, key, unit, higher in rows
    }


def time_inference(models: dict, batch: dict, args, contention: dict, raw: dict) -> dict:
    """Eval-mode forward throughput, time and CPU time (no sparse side: it only acts in training)."""
    fns = {side: make_forward(models[side], batch) for side in INFER_SIDES}
    positions = args.batch * args.seq
    infer = raw["infer"] = timed_phase(
        fns, args, args.infer_reps, positions, contention, "infer", "inference"
    )
    rows = (
        (f"inference positions/s (eval, no_grad, B={args.batch}, T={args.seq})", "throughput", "pos/s", True),
        ("inference forward time", "median_s", "ms", False),
        ("inference forward: CPU time (user + sys, all threads)", "median_cpu_s", "ms", False),
    )
    return {
        name: metric_row({side: infer[side][key] for side in INFER_SIDES}, unit, higher)
        for name, key, unit, higher in rows
    }


def memory_results(args, raw: dict) -> dict:
    """Parameters + AdamW state and the peak RSS of training and of inference, each side and
    workload in a fresh process."""
    t0 = time.perf_counter()
    mem = raw["memory"] = {
        "train": {side: measure_memory(side, "train", args) for side in SIDES},
        "infer": {side: measure_memory(side, "infer", args) for side in INFER_SIDES},
    }
    results = memory_rows(mem["train"], SIDES, args.memory_steps)
    results["inference peak RSS above baseline"] = metric_row(
        {s: mem["infer"][s]["peak_rss_delta_bytes"] for s in INFER_SIDES}, "MiB", False
    )
    print(f"memory measured in {time.perf_counter() - t0:.0f}s ({mem['train']['hf_lm']['peak_method']})")
    return results


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

    raw: dict[str, dict] = {}
    contention: dict = {"waited_s": {}}
    results = time_training(models, batch, flops, args, contention, raw)  # metric -> {side: value, ...}
    gc.collect()
    results.update(time_inference(models, batch, args, contention, raw))
    if not args.no_memory:
        results.update(memory_results(args, raw))
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
    model = {
        "params": n_params["hf_lm"],
        "hf_lm_config": models["hf_lm"].config.to_dict(),
        "reference": "transformers.BertForMaskedLM, attn_implementation=sdpa, hidden_act gelu",
        "sides": SIDE_NAMES,
    }
    body = {"model": model, "batch": stats, "sanity": check, "flops": flops, "contention": contention}
    method = AB_METHOD.format(design="A/B/C", order="the order reverses each round", memory="side/workload")
    write_ab_report(out_path, env, args, {**body, "results": results, "raw": raw}, profiles, method)
    return 0


if __name__ == "__main__":
    sys.exit(main())
