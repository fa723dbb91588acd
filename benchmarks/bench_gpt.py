#!/usr/bin/env python
"""CPU benchmark: hf_lm's GPT against transformers' `GPT2LMHeadModel` (or `LlamaForCausalLM`)
computing the same function.

`--family gpt2` (the default): both models get the same GPT-2-shaped config (6 layers, hidden 384,
6 heads, context 256, vocab 8192, dropout 0, LayerNorm eps 1e-5, tied embeddings, SDPA attention).
`--family llama`: the same sizes, Llama-shaped: RoPE (theta 10000), RMSNorm (eps 1e-5), SwiGLU
feed-forward of width `--intermediate` (default 1024, about 8/3 of 384), grouped-query attention
with `--kv-heads` key/value heads (default half the heads), no biases, untied lm head.
The reference is built first and converted with `hf_lm.convert.from_transformers`, so hf_lm runs
the same weights. A sanity line prints the largest logit difference; for GPT-2 the only expected
source of difference is its `gelu_new` (the tanh formula written out in Python) vs hf_lm's fused
`F.gelu(approximate="tanh")`.

Measured, alternating the two models round by round in one process (the first model of a round
alternates too, so neither always runs on a "warmer" machine), after warm-up; each metric is the
median over rounds:

1. Training throughput, tokens/s: forward with `labels` + backward + `torch.optim.AdamW` step +
   `zero_grad`, on a (batch, seq) batch of random token ids.
2. Cached greedy generation, new tokens/s: `model.generate(ids, max_new_tokens=N,
   min_new_tokens=N, do_sample=False)` from a short random prompt, at batch 1 and at batch 8.
   Both go through transformers' own `generate` (DynamicCache); the time includes the prefill of
   the prompt.
   Every timed sample also records this process's user/system CPU time and minor page faults
   (getrusage): glibc returns large freed blocks to the kernel, so a model whose step allocates
   more or larger temporaries pays page faults (system time) again on every step.
3. Memory. CPU torch has no allocator statistics, so each side runs in a fresh subprocess that
   builds only its own model, resets the kernel's peak-RSS counter (`/proc/self/clear_refs`, value 5;
   falls back to `ru_maxrss` if that is refused) and reports the peak RSS *above* the RSS it had just
   before the workload (so interpreter, libraries and the model weights themselves are excluded),
   for training steps and for one batch-8 generation. Parameter and AdamW state bytes are counted
   exactly from the tensors.

The FLOPs of one training step (forward + backward; the AdamW step is not counted) are counted per
side with `torch.utils.flop_counter.FlopCounterMode` (`peak_flops.count_train_step_flops`) and give
the achieved training FLOP/s (`benchmarks/suite.py` divides it by the machine's measured peak: MFU).

The machine's CPU contention during each timed phase (Linux PSI, `/proc/pressure/cpu`) goes into
the JSON and is printed: with threads == cores, any other busy process stalls OpenMP regions and
inflates timings (`--wait-idle S` waits up to S seconds per phase for an idle CPU; `--threads 1`
is far less sensitive on a shared machine).

Usage:
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_gpt               # full run, a few minutes
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_gpt --quick       # smoke run
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_gpt --family llama   # Llama-shaped, vs LlamaForCausalLM
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_gpt --profile     # also write profiler tables

Prints a markdown table and writes JSON to `--output` (default `out/bench_gpt.json`, or
`out/bench_llama.json` with `--family llama`).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import io
import json
import pstats
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
    error_text,
    flops_line,
    markdown_table,
    memory_rows,
    memory_worker_command,
    metric_cell,
    metric_row,
    ratio,
    ratio_cell,
    run_json_worker,
    summarize,
    time_alternating,
    timed_phase,
    worker_memory,
    write_ab_report,
)
from benchmarks.bench_common import make_train_step as make_train_step_on
from benchmarks.pairs import build_gpt_hflm, build_gpt_reference, random_ids
from benchmarks.peak_flops import count_train_step_flops

SIDES = ("hf_lm", "transformers")
FAMILIES = ("gpt2", "llama")
REFERENCE_NAMES = {
    "gpt2": "transformers.GPT2LMHeadModel, attn_implementation=sdpa, activation gelu_new",
    "llama": "transformers.LlamaForCausalLM, attn_implementation=sdpa, SwiGLU, RoPE, RMSNorm, GQA",
}

# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def build_pair(args) -> dict[str, torch.nn.Module]:
    """hf_lm's GPT and its reference (`pairs.build_gpt_hflm`, `pairs.build_gpt_reference`)."""
    return {side: build_side(side, args) for side in SIDES}


def build_side(side: str, args) -> torch.nn.Module:
    return build_gpt_hflm(args) if side == "hf_lm" else build_gpt_reference(args)


@torch.no_grad()
def sanity(models: dict, args) -> dict:
    """Largest logit difference on a full-context batch, and greedy-token agreement."""
    for m in models.values():
        m.eval()
    ids = random_ids(2, args.context, args.vocab, args.seed + 1)
    logits = {k: m(input_ids=ids).logits for k, m in models.items()}
    diff = (logits["hf_lm"] - logits["transformers"]).abs().max().item()
    scale = logits["transformers"].abs().max().item()
    prompt = random_ids(1, args.prompt_len, args.vocab, args.seed + 2)
    gens = {k: generate(m, prompt, 32) for k, m in models.items()}
    same = (gens["hf_lm"] == gens["transformers"]).float().mean().item()
    return {"max_abs_logit_diff": diff, "max_abs_logit": scale, "greedy_32_token_agreement": same}


# --------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------


def count_flops(models: dict, ids: torch.Tensor) -> dict:
    """FLOPs of one training step's forward + backward per side (the optimizer is not counted)."""
    return {side: count_train_step_flops(m, {"input_ids": ids, "labels": ids}) for side, m in models.items()}


def make_train_step(model: torch.nn.Module, ids: torch.Tensor, lr: float = 3e-4):
    """`bench_common.make_train_step` on a causal-LM batch: the ids are their own labels."""
    return make_train_step_on(model, {"input_ids": ids, "labels": ids}, lr)


def generate(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    out = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=0,
    )
    assert out.shape[1] == prompt.shape[1] + new_tokens, out.shape
    return out


def make_generate(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int):
    model.eval()
    return lambda: generate(model, prompt, new_tokens)


# --------------------------------------------------------------------------------------------
# Memory: one fresh subprocess per side and workload
# --------------------------------------------------------------------------------------------


def memory_worker(side: str, workload: str, args) -> dict:
    """Runs in a fresh process: peak RSS above the pre-workload RSS for one side and workload."""
    torch.set_num_threads(args.threads)
    model = build_side(side, args)
    ids = random_ids(args.batch, args.seq, args.vocab, args.seed)
    prompt = random_ids(8, args.prompt_len, args.vocab, args.seed)
    return worker_memory(
        model,
        workload,
        lambda: make_train_step(model, ids),
        lambda: make_generate(model, prompt, args.new_tokens),
        args.memory_steps,
    )


# options a memory worker needs to rebuild the same model and inputs
WORKER_OPTIONS = (
    "family intermediate kv_heads layers hidden heads context vocab batch seq prompt_len new_tokens "
    "threads memory_steps seed"
).split()


def measure_memory(side: str, workload: str, args) -> dict:
    cmd = memory_worker_command(__spec__.name, [side, workload], args, WORKER_OPTIONS)
    return run_json_worker(cmd, f"memory worker {side}/{workload}")


# --------------------------------------------------------------------------------------------
# Profiling (--profile): operator tables and Python call profiles, written next to the JSON
# --------------------------------------------------------------------------------------------


def profile_models(models: dict, args, out_dir: Path) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    written = []
    ids = random_ids(args.batch, args.seq, args.vocab, args.seed)
    prompt = random_ids(1, args.prompt_len, args.vocab, args.seed)
    for side, model in models.items():
        step = make_train_step(model, ids)
        step()
        step()  # warm-up (the first step allocates the AdamW state)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            step()
        path = out_dir / f"profile_{side}_train.txt"
        path.write_text(
            prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
            + "\n\nBy input shape:\n"
            + prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=30)
        )
        written.append(str(path))

        gen = make_generate(model, prompt, args.profile_tokens)
        gen()  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            gen()
        path = out_dir / f"profile_{side}_generate_b1.txt"
        path.write_text(
            f"generate(batch=1, prompt={args.prompt_len}, new={args.profile_tokens}); "
            "divide totals by the token count for per-token cost\n\n"
            + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=50)
        )
        written.append(str(path))

        pr = cProfile.Profile()
        pr.enable()
        gen()
        pr.disable()
        buf = io.StringIO()
        st = pstats.Stats(pr, stream=buf)
        buf.write(f"cProfile of generate(batch=1, new={args.profile_tokens}), by tottime\n")
        st.sort_stats("tottime").print_stats(45)
        buf.write("\n\nby cumulative time\n")
        st.sort_stats("cumulative").print_stats(60)
        path = out_dir / f"cprofile_{side}_generate_b1.txt"
        path.write_text(buf.getvalue())
        written.append(str(path))
    return written


# --------------------------------------------------------------------------------------------
# torch.compile (`--_compile-worker OUT.json`, run by suite.py): eager vs compiled hf_lm
# --------------------------------------------------------------------------------------------


def compile_phase(name: str, models: dict, make, args, tokens: int, result: dict) -> None:
    """Time `make(model)` eager against compiled (the first compiled call compiles, timed apart)
    into `result["phases"][name]`; a failure is recorded there, not raised."""
    fns = {side: make(m) for side, m in models.items()}
    try:
        t0 = time.perf_counter()
        fns["compiled"]()  # the first call compiles
        compile_s = time.perf_counter() - t0
        samples = time_alternating(fns, args.rounds, args.train_reps, args.warmup)
    except Exception as exc:  # noqa: BLE001  (any failure is a result to report, not a crash)
        result["phases"][name] = {"error": error_text(exc)}
        print(f"torch.compile {name} failed: {error_text(exc)}", flush=True)
        return
    summary = {side: summarize(s, tokens) for side, s in samples.items()}
    result["phases"][name] = {
        "compile_s": compile_s,
        "unit": "tok/s",
        "eager": summary["eager"]["throughput"],
        "compiled": summary["compiled"]["throughput"],
        "speedup": ratio(summary["compiled"]["throughput"], summary["eager"]["throughput"]),
        "step_s": {side: summary[side]["median_s"] for side in summary},
        "raw": summary,
    }
    speedup = result["phases"][name]["speedup"] or float("nan")
    print(f"{name}: compiled in {compile_s:.1f}s; speed-up {speedup:.3f}", flush=True)


def compile_worker(args) -> dict:
    """Eager vs `torch.compile` hf_lm GPT-2-shaped model (this benchmark's config and inputs):
    training and forward throughput, compile time, graph breaks."""
    from torch._dynamo.utils import counters

    torch.set_num_threads(args.threads)
    result = {
        "environment": environment(torch.get_num_threads()),
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "model": f"hf_lm GPT (bench_gpt --family gpt2 config), torch.compile(model) default mode, {args.compile_backend}",
        "phases": {},
    }
    eager = build_gpt_hflm(args)
    ids = random_ids(args.batch, args.seq, args.vocab, args.seed)
    result["flops_per_step"] = count_train_step_flops(eager, {"input_ids": ids, "labels": ids})["total"]
    try:
        models = {
            "eager": eager,
            "compiled": torch.compile(copy.deepcopy(eager), backend=args.compile_backend),
        }
    except Exception as exc:  # noqa: BLE001
        result["error"] = error_text(exc)
        return result

    def make_forward(model):
        model.eval()

        @torch.no_grad()
        def forward():
            return model(input_ids=ids).logits

        return forward

    tokens = args.batch * args.seq
    compile_phase("train", models, lambda m: make_train_step(m, ids), args, tokens, result)
    compile_phase("forward", models, make_forward, args, tokens, result)
    result["graph_breaks"] = sum(counters["graph_break"].values())
    result["unique_graphs"] = counters["stats"].get("unique_graphs")
    return result


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--family", choices=FAMILIES, default="gpt2", help="reference: GPT2LMHeadModel or LlamaForCausalLM"
    )
    p.add_argument("--batch", type=int, default=8, help="training batch size")
    p.add_argument("--seq", type=int, default=256, help="training sequence length (<= --context)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument(
        "--intermediate",
        type=int,
        default=None,
        help="feed-forward width (default: 4 * hidden for gpt2; 1024, about 8/3 * 384, for llama)",
    )
    p.add_argument("--kv-heads", type=int, default=None, help="llama's key/value heads (default: heads // 2)")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--gen-batches", type=str, default="1,8", help="comma-separated generation batch sizes")
    p.add_argument("--rounds", type=int, default=7, help="alternating A/B rounds per metric")
    p.add_argument("--train-reps", type=int, default=2, help="training steps per round and side")
    add_warmup_and_memory_options(p)
    add_machine_options(p)
    p.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, 1 rep, 32 new tokens")
    p.add_argument("--profile", action="store_true", help="also write torch.profiler/cProfile tables")
    p.add_argument("--profile-tokens", type=int, default=64, help="new tokens in the profiled generation")
    p.add_argument(
        "--output", type=str, default=None, help="default: out/bench_gpt.json (gpt2) or out/bench_llama.json"
    )
    p.add_argument("--_memory-worker", nargs=2, metavar=("SIDE", "WORKLOAD"), help=argparse.SUPPRESS)
    p.add_argument("--_compile-worker", metavar="OUT_JSON", help=argparse.SUPPRESS)
    p.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile's backend in the compile worker (the suite's --smoke: aot_eager, which traces "
        "and partitions the graphs as inductor does, without its minute of C++ code generation on a CPU)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.train_reps, args.warmup = 2, 1, 1
        args.new_tokens, args.memory_steps, args.profile_tokens = 32, 2, 16
    if args.intermediate is None:
        args.intermediate = (
            4 * args.hidden if args.family == "gpt2" else max(1, round(8 * args.hidden / 3 / 64)) * 64
        )
    if args.kv_heads is None:
        args.kv_heads = max(1, args.heads // 2) if args.heads % 2 == 0 else args.heads
    if args.output is None:
        args.output = "out/bench_gpt.json" if args.family == "gpt2" else "out/bench_llama.json"
    if args.hidden % args.heads or args.heads % args.kv_heads:
        p.error("--hidden must be divisible by --heads, and --heads by --kv-heads")
    if args.seq > args.context or args.prompt_len + args.new_tokens > args.context:
        p.error("--seq and --prompt-len + --new-tokens must fit in --context (learned positions)")
    return args


def time_training(models: dict, ids: torch.Tensor, flops: dict, args, contention: dict, raw: dict) -> dict:
    """Training throughput, step time, kernel CPU time, achieved FLOP/s and page faults per side."""
    steps = {side: make_train_step(m, ids) for side, m in models.items()}
    tokens = args.batch * args.seq
    train = raw["train"] = timed_phase(
        steps, args, args.train_reps, tokens, contention, "train", "training", summary=summarize
    )
    for step in steps.values():  # the AdamW moments would otherwise stay resident for generation
        step.optimizer.state.clear()
    return {
        f"train tokens/s (B={args.batch}, T={args.seq})": metric_row(
            {side: train[side]["throughput"] for side in SIDES}, "tok/s", True
        ),
        "train step time": metric_row({side: train[side]["median_s"] for side in SIDES}, "ms", False),
        "train step: kernel (sys) CPU time": metric_row(
            {side: train[side]["median_sys_s"] for side in SIDES}, "ms", False
        ),
        "train achieved GFLOP/s (fwd + bwd FLOPs / step time)": metric_row(
            {side: flops[side]["total"] / train[side]["median_s"] / 1e9 for side in SIDES}, "GFLOP/s", True
        ),
        "train step: minor page faults": metric_row(
            {side: train[side]["median_minor_faults"] for side in SIDES}, "count", False
        ),
    }


def time_generation(models: dict, args, contention: dict, raw: dict) -> dict:
    """Cached greedy generation, new tokens/s and ms per new token, at each `--gen-batches` size."""
    results = {}
    for b in (int(x) for x in args.gen_batches.split(",")):
        prompt = random_ids(b, args.prompt_len, args.vocab, args.seed + 3)
        fns = {side: make_generate(m, prompt, args.new_tokens) for side, m in models.items()}
        key = f"generate_b{b}"
        gen = raw[key] = timed_phase(
            fns, args, 1, b * args.new_tokens, contention, key, f"generation B={b}", summary=summarize
        )
        results[f"generate new tok/s (B={b}, prompt {args.prompt_len}, new {args.new_tokens})"] = metric_row(
            {side: gen[side]["throughput"] for side in SIDES}, "tok/s", True
        )
        results[f"generate ms/new token (B={b})"] = metric_row(
            {side: gen[side]["median_s"] / args.new_tokens for side in SIDES}, "ms", False
        )
    return results


def memory_results(args, raw: dict) -> dict:
    """Parameters + AdamW state and the peak RSS of training and of a batch-8 generation, each side
    and workload in a fresh process."""
    t0 = time.perf_counter()
    mem = raw["memory"] = {
        w: {side: measure_memory(side, w, args) for side in SIDES} for w in ("train", "generate")
    }
    results = memory_rows(mem["train"], SIDES, args.memory_steps)
    results["generate peak RSS above baseline (B=8)"] = metric_row(
        {s: mem["generate"][s]["peak_rss_delta_bytes"] for s in SIDES}, "MiB", False
    )
    print(f"memory measured in {time.perf_counter() - t0:.0f}s ({mem['train']['hf_lm']['peak_method']})")
    return results


def ratio_table(results: dict) -> str:
    """The printed table: each metric's two values and hf_lm / transformers (stored in the rows)."""
    body = []
    for name, row in results.items():
        den = row["transformers"]
        row["ratio_hf_lm_over_transformers"] = row["hf_lm"] / den if den else None
        better = "higher is better" if row["higher_is_better"] else "lower is better"
        body.append(
            [
                f"{name} [{row['unit']}]",
                metric_cell(row["hf_lm"], row["unit"]),
                metric_cell(row["transformers"], row["unit"]),
                f"{ratio_cell(row['ratio_hf_lm_over_transformers'])} ({better})",
            ]
        )
    header = ["metric", "hf_lm", "transformers", "ratio hf_lm/transformers"]
    return "\n" + markdown_table(header, body, align="lrrr")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args._memory_worker:
        side, workload = args._memory_worker
        print(json.dumps(memory_worker(side, workload, args)))
        return 0
    if args._compile_worker:
        Path(args._compile_worker).write_text(json.dumps(compile_worker(args), indent=2, default=str))
        return 0

    torch.set_num_threads(args.threads)
    env = environment(torch.get_num_threads())
    print(environment_line(env), flush=True)
    models = build_pair(args)
    n_params = sum(p.numel() for p in models["hf_lm"].parameters())
    n_params_ref = sum(p.numel() for p in models["transformers"].parameters())
    assert n_params == n_params_ref, (n_params, n_params_ref)
    check = sanity(models, args)
    print(
        f"sanity: max |Δlogits| = {check['max_abs_logit_diff']:.3e} (max |logit| {check['max_abs_logit']:.2f}); "
        f"greedy 32-token agreement {check['greedy_32_token_agreement']:.0%}; {n_params / 1e6:.2f}M params",
        flush=True,
    )
    ids = random_ids(args.batch, args.seq, args.vocab, args.seed)
    flops = count_flops(models, ids)
    print(flops_line(flops), flush=True)

    raw: dict[str, dict] = {}
    contention: dict = {"waited_s": {}}
    results = time_training(models, ids, flops, args, contention, raw)  # metric -> {side: value, ...}
    gc.collect()
    results.update(time_generation(models, args, contention, raw))
    if not args.no_memory:
        results.update(memory_results(args, raw))
    print(ratio_table(results))

    out_path = Path(args.output)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    profiles = []
    if args.profile:
        profiles = profile_models(models, args, out_path.parent)
        print("profiles written:\n  " + "\n  ".join(profiles))
    model = {
        "family": args.family,
        "params": n_params,
        "hf_lm_config": models["hf_lm"].config.to_dict(),
        "reference": REFERENCE_NAMES[args.family],
    }
    body = {"model": model, "sanity": check, "flops": flops, "contention": contention, "results": results}
    method = AB_METHOD.format(
        design="A/B", order="the first side alternates each round", memory="side/workload"
    )
    write_ab_report(out_path, env, args, {**body, "raw": raw}, profiles, method)
    return 0


if __name__ == "__main__":
    sys.exit(main())
