#!/usr/bin/env python
"""CPU benchmark: hf_lm's T5 and BART against transformers' `T5ForConditionalGeneration` and
`BartForConditionalGeneration` computing the same function.

Each family gets one small config (default: d_model 256, 4 encoder + 4 decoder layers, 4 heads,
feed-forward 1024, vocabulary 32,000, dropout 0, SDPA attention):

- T5: v1.0 (ReLU feed-forward, RMSNorm pre-norm, relative position buckets 32 / max distance 128,
  tied and rescaled head), head size d_model / heads.
- BART: exact GELU, LayerNorm post-norm with an embedding norm, learned positions (256), tied head.
  Its generation default `forced_eos_token_id` is switched off on both sides: with
  `min_new_tokens == max_new_tokens` it would fight the minimum-length processor on the last step.

The reference is built first and converted with `hf_lm.convert.from_transformers`, so hf_lm runs
the same weights. Sanity checks, printed before timing (the run stops if one fails): the training
loss of the first step and of the second (after one AdamW step, so it also compares gradients)
within `--tolerance` (1e-4) of the reference's, the eval-mode logits (max |Δ|), and the greedy and
beam-search tokens of a batch of 2 (printed; not a failure if a near-tie flips a token).

Measured, alternating the two sides round by round in one process (the order reverses every
round), after warm-up; each metric is the median over rounds (`bench_common.time_alternating`):

1. Training throughput, tokens/s (source + target tokens, B * (S + T)): forward with
   `input_ids`, an all-ones `attention_mask` and `labels` (the decoder inputs are the shifted
   labels, built inside the model) + backward + `torch.optim.AdamW` step + `zero_grad`.
2. Generation throughput, new tokens/s (B * N): `model.generate(source, attention_mask,
   max_new_tokens=N, min_new_tokens=N, num_beams=1|K, do_sample=False)` at batch 1 and batch B_gen,
   greedy and beam search. Both sides run transformers' own `generate` (EncoderDecoderCache); the
   time includes the encoder pass over the source. Beam search tracks K hypotheses per input;
   only the B * N returned tokens count.

Every timed sample also records this process's user + system CPU time (getrusage): on a shared
machine the CPU time a side spends is steadier than its wall time, which includes waiting for a CPU.
The FLOPs of one training step's forward + backward (the AdamW step is not counted) are counted per
side with `torch.utils.flop_counter.FlopCounterMode` (`peak_flops.count_train_step_flops`) and give
the achieved training FLOP/s (`benchmarks/suite.py` turns it into MFU).

3. Memory: each side in a fresh subprocess, peak RSS above the pre-workload RSS (see
   `bench_common.measure_peak_rss`), measured after `malloc_trim` (see `trim_heap`), for training steps and for one
   batch-B_gen beam-search generation. Parameter and AdamW state bytes are counted exactly from
   the tensors.

Usage:
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_seq2seq               # full run, a few minutes
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_seq2seq --quick       # smoke run
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_seq2seq --profile     # also write profiler tables

Prints a markdown table and writes JSON to `--output` (default `out/bench_seq2seq.json`). With
`--profile` it writes, per family and workload, torch.profiler tables of both sides and a table of
the operators whose self CPU time differs most between them.
"""

from __future__ import annotations

import argparse
import copy
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
    comma_list,
    environment,
    environment_line,
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
from benchmarks.pairs import (
    SEQ2SEQ_FIRST_WORD_ID,
    build_seq2seq_hflm,
    build_seq2seq_reference,
    seq2seq_reference_config,
    seq2seq_train_batch,
)
from benchmarks.pairs import random_ids as any_random_ids
from benchmarks.peak_flops import count_train_step_flops

SIDES = ("hf_lm", "transformers")
FAMILIES = ("t5", "bart")
REFERENCE_NAMES = {"t5": "T5ForConditionalGeneration", "bart": "BartForConditionalGeneration"}

# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def build_side(family: str, side: str, args) -> torch.nn.Module:
    """The reference, or hf_lm's model converted from it (`pairs`)."""
    return build_seq2seq_hflm(family, args) if side == "hf_lm" else build_seq2seq_reference(family, args)


def build_pair(family: str, args) -> dict[str, torch.nn.Module]:
    return {side: build_side(family, side, args) for side in SIDES}


def random_ids(batch: int, seq: int, vocab: int, seed: int) -> torch.Tensor:
    """Random source ids above the special ones (`pairs.SEQ2SEQ_FIRST_WORD_ID`)."""
    return any_random_ids(batch, seq, vocab, seed, low=SEQ2SEQ_FIRST_WORD_ID)


# --------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------


def make_train_step(model: torch.nn.Module, batch: dict, lr: float = 3e-4):
    """`bench_common.make_train_step` on `batch` (AdamW, lr 3e-4 by default)."""
    return make_train_step_on(model, batch, lr)


def generate(model: torch.nn.Module, source: torch.Tensor, new_tokens: int, num_beams: int) -> torch.Tensor:
    out = model.generate(
        source,
        attention_mask=torch.ones_like(source),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        num_beams=num_beams,
        do_sample=False,
    )
    # the decoder start token, then exactly N new tokens
    assert out.shape == (source.shape[0], 1 + new_tokens), out.shape
    return out


def make_generate(model: torch.nn.Module, source: torch.Tensor, new_tokens: int, num_beams: int):
    model.eval()
    return lambda: generate(model, source, new_tokens, num_beams)


def sanity(family: str, args) -> dict:
    """Loss parity over two training steps, eval logit parity, and greedy/beam token agreement."""
    models = build_pair(family, args)
    batch = seq2seq_train_batch(args, args.seed)
    result = {}
    with torch.no_grad():
        logits = {side: m.eval()(**batch).logits for side, m in models.items()}
    result["max_abs_logit_diff"] = (logits["hf_lm"] - logits["transformers"]).abs().max().item()
    result["max_abs_logit"] = logits["transformers"].abs().max().item()
    del logits
    source = random_ids(2, args.source_len, args.vocab, args.seed + 2)
    for name, beams in (("greedy", 1), ("beam", args.num_beams)):
        with torch.no_grad():
            out = {side: generate(m.eval(), source, args.new_tokens, beams) for side, m in models.items()}
        result[f"{name}_token_agreement"] = (out["hf_lm"] == out["transformers"]).float().mean().item()
    losses = {}
    for side, model in models.items():
        step = make_train_step(copy.deepcopy(model), batch)
        losses[side] = [step().item(), step().item()]  # step 1; step 2 after one AdamW update
    result["losses"] = losses
    result["loss_diff_step1"] = abs(losses["hf_lm"][0] - losses["transformers"][0])
    result["loss_diff_step2"] = abs(losses["hf_lm"][1] - losses["transformers"][1])
    result["ok"] = max(result["loss_diff_step1"], result["loss_diff_step2"]) < args.tolerance
    result["params"] = {side: sum(p.numel() for p in m.parameters()) for side, m in models.items()}
    return result


# --------------------------------------------------------------------------------------------
# Memory: one fresh subprocess per family, side and workload
# --------------------------------------------------------------------------------------------


def memory_worker(family: str, side: str, workload: str, args) -> dict:
    """Runs in a fresh process: peak RSS above the pre-workload RSS for one side and workload."""
    torch.set_num_threads(args.threads)
    model = build_side(family, side, args)
    batch = seq2seq_train_batch(args, args.seed)
    source = random_ids(args.gen_batch, args.source_len, args.vocab, args.seed + 3)
    # The hf_lm side is built by converting a reference that is then dropped: the trim hands that
    # dead model's heap pages back first, otherwise they raise the baseline and the workload reuses
    # them, so its peak above baseline reads tens of MiB too low (measured: T5 generation 43 vs
    # 110 MiB untrimmed, with equal absolute peaks).
    return worker_memory(
        model,
        workload,
        lambda: make_train_step(model, batch),
        lambda: torch.no_grad()(make_generate(model, source, args.new_tokens, args.num_beams)),
        args.memory_steps,
        trim=True,
    )


# options a memory worker needs to rebuild the same models and inputs
WORKER_OPTIONS = (
    "layers hidden heads intermediate vocab max_positions batch source_len target_len gen_batch "
    "new_tokens num_beams threads memory_steps seed"
).split()


def measure_memory(family: str, side: str, workload: str, args) -> dict:
    cmd = memory_worker_command(__spec__.name, [family, side, workload], args, WORKER_OPTIONS)
    return run_json_worker(cmd, f"memory worker {family}/{side}/{workload}")


# --------------------------------------------------------------------------------------------
# Profiling (--profile): operator tables and the operators that differ most, next to the JSON
# --------------------------------------------------------------------------------------------


def op_diff_table(averages: dict, rows: int = 25) -> str:
    """Operators by |hf_lm self CPU - reference self CPU|, with call counts: where the gap is."""
    stats = {}
    for side, events in averages.items():
        for e in events:
            entry = stats.setdefault(e.key, {s: (0.0, 0) for s in SIDES})
            entry[side] = (e.self_cpu_time_total / 1e3, e.count)
    totals = {s: sum(v[s][0] for v in stats.values()) for s in SIDES}
    ranked = sorted(stats.items(), key=lambda kv: -abs(kv[1]["hf_lm"][0] - kv[1]["transformers"][0]))
    lines = [
        f"self CPU total: hf_lm {totals['hf_lm']:.1f} ms, transformers {totals['transformers']:.1f} ms",
        "",
        f"{'operator':<48} {'hf_lm ms':>10} {'calls':>7} {'ref ms':>10} {'calls':>7} {'hf_lm-ref':>10}",
    ]
    for name, v in ranked[:rows]:
        (a, na), (b, nb) = v["hf_lm"], v["transformers"]
        lines.append(f"{name[:48]:<48} {a:>10.1f} {na:>7} {b:>10.1f} {nb:>7} {a - b:>+10.1f}")
    return "\n".join(lines) + "\n"


def profile_family(family: str, args, out_dir: Path) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    written = []
    workloads = {"train": None}
    for b in (1, args.gen_batch):
        workloads[f"greedy_b{b}"] = (b, 1)
        workloads[f"beam_b{b}"] = (b, args.num_beams)
    for workload, gen in workloads.items():
        averages = {}
        for side in SIDES:
            model = build_side(family, side, args)
            if gen is None:
                fn = make_train_step(model, seq2seq_train_batch(args, args.seed))
            else:
                source = random_ids(gen[0], args.source_len, args.vocab, args.seed + 3)
                fn = make_generate(model, source, args.new_tokens, gen[1])
            fn()
            fn()  # warm-up (the first training step allocates the AdamW state)
            with torch.no_grad() if gen else torch.enable_grad():
                with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                    fn()
            averages[side] = prof.key_averages()
            path = out_dir / f"profile_seq2seq_{family}_{workload}_{side}.txt"
            path.write_text(
                averages[side].table(sort_by="self_cpu_time_total", row_limit=40)
                + "\n\nBy input shape:\n"
                + prof.key_averages(group_by_input_shape=True).table(
                    sort_by="self_cpu_time_total", row_limit=30
                )
            )
            written.append(str(path))
        path = out_dir / f"profile_seq2seq_{family}_{workload}_diff.txt"
        path.write_text(f"{family} {workload}: one call per side\n\n" + op_diff_table(averages))
        written.append(str(path))
    return written


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", type=str, default="t5,bart", help="comma-separated: t5, bart")
    p.add_argument("--layers", type=int, default=4, help="encoder layers, and decoder layers")
    p.add_argument("--hidden", type=int, default=256, help="d_model")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=1024, help="feed-forward width (d_ff)")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--max-positions", type=int, default=256, help="BART's learned positions")
    p.add_argument("--batch", type=int, default=16, help="training batch size")
    p.add_argument("--source-len", type=int, default=128)
    p.add_argument("--target-len", type=int, default=32, help="training target length")
    p.add_argument("--gen-batch", type=int, default=8, help="the larger generation batch (the other is 1)")
    p.add_argument("--new-tokens", type=int, default=32, help="max_new_tokens == min_new_tokens")
    p.add_argument("--num-beams", type=int, default=4)
    p.add_argument("--rounds", type=int, default=7, help="alternating A/B rounds per metric")
    p.add_argument("--train-reps", type=int, default=2, help="training steps per round and side")
    add_warmup_and_memory_options(p)
    p.add_argument("--tolerance", type=float, default=1e-4, help="largest allowed training-loss difference")
    add_machine_options(p)
    p.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, 1 rep, 8 new tokens")
    p.add_argument("--profile", action="store_true", help="also write torch.profiler tables")
    p.add_argument("--output", type=str, default="out/bench_seq2seq.json")
    p.add_argument(
        "--_memory-worker", nargs=3, metavar=("FAMILY", "SIDE", "WORKLOAD"), help=argparse.SUPPRESS
    )
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.train_reps, args.warmup = 2, 1, 1
        args.new_tokens, args.memory_steps = 8, 2
    args.families = comma_list(args.families)
    if not set(args.families) <= set(FAMILIES):
        p.error(f"--families must be among {', '.join(FAMILIES)}")
    if args.hidden % args.heads:
        p.error("--hidden must be divisible by --heads")
    if max(args.source_len, args.target_len, args.new_tokens + 1) > args.max_positions:
        p.error("--source-len, --target-len and --new-tokens + 1 must fit in --max-positions (BART)")
    if args.vocab <= SEQ2SEQ_FIRST_WORD_ID:
        p.error(f"--vocab must exceed {SEQ2SEQ_FIRST_WORD_ID}")
    return args


def add_rows(results: dict, name: str, raw: dict, unit: str) -> None:
    """A throughput row (wall time) and, under it, the same ratio computed from CPU time."""
    results[f"{name} [{unit}]"] = metric_row({side: raw[side]["throughput"] for side in SIDES}, unit, True)
    results[f"{name}: CPU time per call [ms]"] = metric_row(
        {side: raw[side]["median_cpu_s"] for side in SIDES}, "ms", False
    )


def run_family(family: str, args, contention: dict) -> tuple[dict, dict, dict]:
    print(f"\n{family}: hf_lm vs transformers {REFERENCE_NAMES[family]}", flush=True)
    check = sanity(family, args)
    n = check["params"]
    assert n["hf_lm"] <= n["transformers"], n  # BART's reference has 2 extra position rows per stack
    print(
        f"  sanity: training loss {check['losses']['transformers'][0]:.6f}; |Δloss| step 1 "
        f"{check['loss_diff_step1']:.2e}, step 2 (after AdamW) {check['loss_diff_step2']:.2e} "
        f"(tolerance {args.tolerance:.0e}); max |Δlogits| {check['max_abs_logit_diff']:.2e} "
        f"(max |logit| {check['max_abs_logit']:.2f}); greedy tokens agree {check['greedy_token_agreement']:.0%}, "
        f"beam tokens {check['beam_token_agreement']:.0%}; params {n['hf_lm'] / 1e6:.2f}M "
        f"(reference {n['transformers'] / 1e6:.2f}M)",
        flush=True,
    )
    if not check["ok"]:
        raise SystemExit(
            f"{family}: losses disagree by more than {args.tolerance}; not timing a different function"
        )

    results, raw = {}, {}
    contention = contention.setdefault(family, {"waited_s": {}})

    # generation first, on untrained weights (identical on both sides)
    models = build_pair(family, args)
    for mode, beams in (("greedy", 1), ("beam", args.num_beams)):
        for b in (1, args.gen_batch):
            source = random_ids(b, args.source_len, args.vocab, args.seed + 3)
            fns = {side: make_generate(m, source, args.new_tokens, beams) for side, m in models.items()}
            key = f"{mode}_b{b}"
            with torch.no_grad():
                raw[key] = timed_phase(fns, args, 1, b * args.new_tokens, contention, key)
            label = "greedy" if beams == 1 else f"beam {beams}"
            add_rows(results, f"generate {label}, B={b}", raw[key], "new tok/s")
    del models, fns
    gc.collect()

    models = build_pair(family, args)
    batch = seq2seq_train_batch(args, args.seed)
    flops = {side: count_train_step_flops(m, batch) for side, m in models.items()}
    check["flops"] = flops
    steps = {side: make_train_step(m, batch) for side, m in models.items()}
    tokens = args.batch * (args.source_len + args.target_len)
    raw["train"] = timed_phase(steps, args, args.train_reps, tokens, contention, "train")
    for side in SIDES:
        raw["train"][side]["achieved_gflops"] = flops[side]["total"] / raw["train"][side]["median_s"] / 1e9
    train_rows = {}
    add_rows(
        train_rows,
        f"train (B={args.batch}, S={args.source_len}, T={args.target_len})",
        raw["train"],
        "tok/s",
    )
    train_rows["train achieved GFLOP/s (fwd + bwd FLOPs / step time) [GFLOP/s]"] = metric_row(
        {side: raw["train"][side]["achieved_gflops"] for side in SIDES}, "GFLOP/s", True
    )
    results = {**train_rows, **results}
    del steps, models
    gc.collect()

    if not args.no_memory:
        t0 = time.perf_counter()
        mem = {w: {s: measure_memory(family, s, w, args) for s in SIDES} for w in ("train", "generate")}
        raw["memory"] = mem
        results.update(memory_rows(mem["train"], SIDES, args.memory_steps, suffix=" [MiB]"))
        results[f"generate peak RSS above baseline (beam {args.num_beams}, B={args.gen_batch}) [MiB]"] = (
            metric_row({s: mem["generate"][s]["peak_rss_delta_bytes"] for s in SIDES}, "MiB", False)
        )
        print(
            f"  memory measured in {time.perf_counter() - t0:.0f}s ({mem['train']['hf_lm']['peak_method']})"
        )

    for row in results.values():
        den = row["transformers"]
        # ratio > 1 = hf_lm better: speed ratio for throughputs, reference/hf_lm for costs
        if row["higher_is_better"]:
            row["ratio"] = row["hf_lm"] / den if den else None
        else:
            row["ratio"] = den / row["hf_lm"] if row["hf_lm"] else None
    return check, results, raw


def format_table(all_results: dict) -> str:
    header = ["family", "metric", "hf_lm", "transformers", "ratio (>1: hf_lm better)"]
    body = [
        [
            family,
            name,
            metric_cell(row["hf_lm"], row["unit"]),
            metric_cell(row["transformers"], row["unit"]),
            ratio_cell(row["ratio"]),
        ]
        for family, results in all_results.items()
        for name, row in results.items()
    ]
    return "\n" + markdown_table(header, body, align="llrrr")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args._memory_worker:
        family, side, workload = args._memory_worker
        print(json.dumps(memory_worker(family, side, workload, args)))
        return 0

    torch.set_num_threads(args.threads)
    env = environment(torch.get_num_threads())
    print(environment_line(env), flush=True)
    print(
        f"config: d_model {args.hidden}, {args.layers}+{args.layers} layers, {args.heads} heads, "
        f"d_ff {args.intermediate}, vocab {args.vocab}; train B={args.batch} S={args.source_len} "
        f"T={args.target_len}; generate S={args.source_len}, {args.new_tokens} new tokens, "
        f"B=1 and {args.gen_batch}, greedy and beam {args.num_beams}; {args.rounds} rounds",
        flush=True,
    )
    checks, all_results, raw, contention = {}, {}, {}, {}
    for family in args.families:
        checks[family], all_results[family], raw[family] = run_family(family, args, contention)

    print(format_table(all_results))
    print(
        "(ratios: throughput hf_lm / transformers, CPU time and memory transformers / hf_lm; "
        "throughput from median wall time per call, CPU time = median user + sys)"
    )

    out_path = Path(args.output)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    profiles = []
    if args.profile:
        for family in args.families:
            profiles += profile_family(family, args, out_path.parent)
        print("profiles written:\n  " + "\n  ".join(profiles))

    models = {
        f: {
            "reference": f"transformers.{REFERENCE_NAMES[f]}, attn_implementation=sdpa",
            "reference_config": seq2seq_reference_config(f, args).to_dict(),
        }
        for f in args.families
    }
    body = {"models": models, "sanity": checks, "contention": contention, "results": all_results, "raw": raw}
    method = AB_METHOD.format(
        design="A/B", order="the first side alternates each round", memory="family/side/workload"
    )
    write_ab_report(out_path, env, args, body, profiles, method)
    return 0


if __name__ == "__main__":
    sys.exit(main())
