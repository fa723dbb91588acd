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
    HF_HUB_OFFLINE=1 python benchmarks/bench_gpt.py               # full run, a few minutes
    HF_HUB_OFFLINE=1 python benchmarks/bench_gpt.py --quick       # smoke run
    HF_HUB_OFFLINE=1 python benchmarks/bench_gpt.py --family llama   # Llama-shaped, vs LlamaForCausalLM
    HF_HUB_OFFLINE=1 python benchmarks/bench_gpt.py --profile     # also write profiler tables

Prints a markdown table and writes JSON to `--output` (default `out/bench_gpt.json`, or
`out/bench_llama.json` with `--family llama`).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
for path in (REPO_ROOT, BENCH_DIR):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_common import (  # noqa: E402
    available_cores,
    cpu_model,
    load_average,
    markdown_table,
    measure_peak_rss,
    run_json_worker,
    versions,
)
from peak_flops import count_train_step_flops  # noqa: E402

from hf_lm import HfLmGPTForCausalLM  # noqa: E402
from hf_lm.convert import from_transformers  # noqa: E402

SIDES = ("hf_lm", "transformers")
FAMILIES = ("gpt2", "llama")
REFERENCE_NAMES = {
    "gpt2": "transformers.GPT2LMHeadModel, attn_implementation=sdpa, activation gelu_new",
    "llama": "transformers.LlamaForCausalLM, attn_implementation=sdpa, SwiGLU, RoPE, RMSNorm, GQA",
}

# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------


def cpu_pressure() -> dict | None:
    """Linux PSI for the CPU: `some` = share of time at least one runnable task waited for a CPU.

    On an otherwise idle machine a run with threads == cores keeps it near 0; anything else running
    (other jobs, test suites) shows up here, and it distorts timings, OpenMP-threaded ones badly.
    """
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    fields = dict(kv.split("=") for kv in line.split()[1:])
    return {
        "avg10": float(fields["avg10"]),
        "avg60": float(fields["avg60"]),
        "total_us": int(fields["total"]),
    }


class Contention:
    """Share of a phase's wall time during which some task waited for a CPU (from PSI), and load."""

    def __enter__(self):
        self.p0, self.t0 = cpu_pressure(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t0
        p1 = cpu_pressure()
        self.result = {"wall_s": wall, "loadavg_end": load_average()}
        if self.p0 and p1:
            self.result["cpu_pressure_share"] = (p1["total_us"] - self.p0["total_us"]) / 1e6 / wall
        return False


def wait_for_idle(max_wait_s: float, threshold: float = 5.0) -> float:
    """Wait (at most `max_wait_s`) until PSI cpu `some avg10` drops below `threshold` percent."""
    t0 = time.perf_counter()
    while max_wait_s > 0 and time.perf_counter() - t0 < max_wait_s:
        p = cpu_pressure()
        if p is None or p["avg10"] < threshold:
            break
        time.sleep(2.0)
    return time.perf_counter() - t0


def environment(threads: int) -> dict:
    """Versions, threads, cores, CPU and its load: the `environment` of every A/B benchmark's JSON."""
    return {
        **versions("torch", "transformers"),
        "python": platform.python_version(),
        "threads": threads,
        "cores_available": available_cores(),
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "platform": platform.platform(),
        "loadavg_start": load_average(),
        "cpu_pressure_start": cpu_pressure(),
    }


def environment_line(env: dict) -> str:
    """The line an A/B benchmark prints first: versions, threads and CPU."""
    return (
        f"torch {env['torch']}, transformers {env['transformers']}, {env['threads']} threads, "
        f"{env['cpu_model']} ({env['cpu_capability']})"
    )


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def reference_config(args) -> GPT2Config | LlamaConfig:
    if args.family == "llama":
        return LlamaConfig(
            vocab_size=args.vocab,
            hidden_size=args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            num_key_value_heads=args.kv_heads,
            intermediate_size=args.intermediate,
            hidden_act="silu",  # SwiGLU
            max_position_embeddings=args.context,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-5,
            attention_bias=False,
            mlp_bias=False,
            attention_dropout=0.0,
            tie_word_embeddings=False,
            pad_token_id=None,
            bos_token_id=None,  # Llama's defaults (1, 2) would be real tokens of this random vocabulary
            eos_token_id=None,
        )
    return GPT2Config(
        vocab_size=args.vocab,
        n_positions=args.context,
        n_embd=args.hidden,
        n_layer=args.layers,
        n_head=args.heads,
        n_inner=args.intermediate,
        activation_function="gelu_new",  # GPT-2's own tanh-GELU
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        bos_token_id=None,  # GPT-2's defaults (50256) lie outside this vocabulary
        eos_token_id=None,
    )


def build_reference(args) -> GPT2LMHeadModel | LlamaForCausalLM:
    torch.manual_seed(args.seed)
    cls = LlamaForCausalLM if args.family == "llama" else GPT2LMHeadModel
    model = cls._from_config(reference_config(args), attn_implementation="sdpa")
    model.loss_type = "ForCausalLM"  # what it falls back to anyway, minus a warning
    return model


def build_hflm(args) -> HfLmGPTForCausalLM:
    """hf_lm's GPT computing the reference's function: the reference converted by `from_transformers`."""
    model = from_transformers(build_reference(args))
    model.config._attn_implementation = "sdpa"
    return model.train()


def build_pair(args) -> dict[str, torch.nn.Module]:
    return {"hf_lm": build_hflm(args), "transformers": build_reference(args)}


def build_side(side: str, args) -> torch.nn.Module:
    return build_hflm(args) if side == "hf_lm" else build_reference(args)


def random_ids(batch: int, seq: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq), generator=g)


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
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    step.optimizer = opt
    return step


def make_batch_train_step(model: torch.nn.Module, batch: dict, lr: float):
    """bench_bert's and bench_seq2seq's training step on a fixed batch (which holds the labels):
    forward, backward, AdamW step, `zero_grad`; returns the detached loss. `step.optimizer` is the
    AdamW, for its state's size."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def step():
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    step.optimizer = opt
    return step


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


def time_alternating(fns: dict, rounds: int, reps: int, warmup: int) -> dict[str, dict]:
    """Per call of each function, one sample per round (the order alternates every round):
    wall seconds, and this process's user/system CPU seconds and minor page faults (getrusage)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    names = list(fns)
    samples = {name: {"wall_s": [], "user_s": [], "sys_s": [], "minor_faults": []} for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            gc.collect()
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            for _ in range(reps):
                fns[name]()
            wall = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            s = samples[name]
            s["wall_s"].append(wall / reps)
            s["user_s"].append((ru1.ru_utime - ru0.ru_utime) / reps)
            s["sys_s"].append((ru1.ru_stime - ru0.ru_stime) / reps)
            s["minor_faults"].append((ru1.ru_minflt - ru0.ru_minflt) / reps)
    return samples


def summarize(samples: dict, units_per_call: float) -> dict:
    wall = samples["wall_s"]
    med = statistics.median(wall)
    return {
        "median_s": med,
        "min_s": min(wall),
        "max_s": max(wall),
        "throughput": units_per_call / med,
        "median_user_s": statistics.median(samples["user_s"]),
        "median_sys_s": statistics.median(samples["sys_s"]),
        "median_minor_faults": statistics.median(samples["minor_faults"]),
        "samples": samples,
    }


def summarize_with_cpu(samples: dict, units_per_call: float) -> dict:
    """`summarize` plus the median CPU time (user + sys) per call: on a shared machine the work a
    side does is steadier than its wall time, which includes waiting for a CPU."""
    result = summarize(samples, units_per_call)
    result["median_cpu_s"] = statistics.median(u + s for u, s in zip(samples["user_s"], samples["sys_s"]))
    return result


def metric_row(values: dict, unit: str, higher_is_better: bool) -> dict:
    """One row of an A/B benchmark's `results`: a value per side, its unit and which way is better."""
    return {**values, "unit": unit, "higher_is_better": higher_is_better}


def flops_line(flops: dict) -> str:
    """The printed FLOPs of one training step per side (`count_train_step_flops` results)."""
    return "FLOPs per training step (forward + backward, optimizer not counted): " + ", ".join(
        f"{side} {counted['total'] / 1e9:.2f} G" for side, counted in flops.items()
    )


# --------------------------------------------------------------------------------------------
# Memory: one fresh subprocess per side and workload
# --------------------------------------------------------------------------------------------


def tensor_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if torch.is_tensor(t) and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of an optimizer's state tensors (AdamW: both moments and the step counts)."""
    return tensor_bytes(t for state in optimizer.state.values() for t in state.values())


def memory_rows(train: dict, sides, steps: int, suffix: str = "") -> dict:
    """The `results` rows of the training memory workers (`train`: side -> worker result):
    parameters + AdamW state, and the peak RSS of `steps` training steps above baseline."""
    return {
        f"parameters + AdamW state{suffix}": metric_row(
            {s: train[s]["param_bytes"] + train[s]["optimizer_state_bytes"] for s in sides}, "MiB", False
        ),
        f"train peak RSS above baseline ({steps} steps){suffix}": metric_row(
            {s: train[s]["peak_rss_delta_bytes"] for s in sides}, "MiB", False
        ),
    }


def memory_worker_command(script: str, workload: list[str], args, options: list[str]) -> list[str]:
    """The command that reruns `script` as a memory worker for `workload` (`--_memory-worker ...`),
    passing on the `options` of `args` (the ones it needs to rebuild the same model and inputs)."""
    cmd = [sys.executable, os.path.abspath(script), "--_memory-worker", *workload]
    return cmd + [f"--{name.replace('_', '-')}={getattr(args, name)}" for name in options]


def add_warmup_and_memory_options(p: argparse.ArgumentParser) -> None:
    """`--warmup`, `--memory-steps`, `--no-memory`: the same in every A/B benchmark."""
    p.add_argument("--warmup", type=int, default=2, help="warm-up calls per side before timing")
    p.add_argument("--memory-steps", type=int, default=3, help="training steps in the memory subprocess")
    p.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")


def add_machine_options(p: argparse.ArgumentParser) -> None:
    """`--threads`, `--seed`, `--wait-idle`: the same in every A/B benchmark."""
    p.add_argument("--threads", type=int, default=available_cores())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        help="before each timed phase wait up to this many seconds for the CPU to go idle (PSI avg10 < 5%%)",
    )


def memory_worker(side: str, workload: str, args) -> dict:
    """Runs in a fresh process: peak RSS above the pre-workload RSS for one side and workload."""
    torch.set_num_threads(args.threads)
    model = build_side(side, args)
    result = {"param_bytes": tensor_bytes(model.parameters())}
    if workload == "train":
        ids = random_ids(args.batch, args.seq, args.vocab, args.seed)
        step = make_train_step(model, ids)
        fn, n = step, args.memory_steps
    else:
        prompt = random_ids(8, args.prompt_len, args.vocab, args.seed)
        fn, n = make_generate(model, prompt, args.new_tokens), 1
    result.update(measure_peak_rss(fn, n))
    if workload == "train":
        result["optimizer_state_bytes"] = optimizer_state_bytes(step.optimizer)
    return result


# options a memory worker needs to rebuild the same model and inputs
WORKER_OPTIONS = (
    "family intermediate kv_heads layers hidden heads context vocab batch seq prompt_len new_tokens "
    "threads memory_steps seed"
).split()


def measure_memory(side: str, workload: str, args) -> dict:
    cmd = memory_worker_command(__file__, [side, workload], args, WORKER_OPTIONS)
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


def busy_note(result: dict) -> str:
    share = result.get("cpu_pressure_share")
    if share is None:
        return ""
    note = f" (CPU pressure {share:.0%} of the time"
    if share > 0.05:
        note += "; the machine was busy: timings are noisy, ratios from alternating rounds less so"
    return note + ")"


def fmt(value: float, unit: str) -> str:
    if unit == "MiB":
        return f"{value / 2**20:.1f}"
    if unit == "ms":
        return f"{value * 1e3:.1f}"
    if unit == "GFLOP/s":
        return f"{value:.2f}"
    return f"{value:,.0f}"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args._memory_worker:
        side, workload = args._memory_worker
        print(json.dumps(memory_worker(side, workload, args)))
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

    results: dict[str, dict] = {}  # metric -> {side: value, unit, higher_is_better}
    raw: dict[str, dict] = {}
    contention: dict = {"waited_s": {}}

    # 1. training
    steps = {side: make_train_step(m, ids) for side, m in models.items()}
    t0 = time.perf_counter()
    contention["waited_s"]["train"] = wait_for_idle(args.wait_idle)
    with Contention() as c:
        samples = time_alternating(steps, args.rounds, args.train_reps, args.warmup)
    contention["train"] = c.result
    tokens = args.batch * args.seq
    raw["train"] = {side: summarize(s, tokens) for side, s in samples.items()}
    train = raw["train"]
    results[f"train tokens/s (B={args.batch}, T={args.seq})"] = metric_row(
        {side: train[side]["throughput"] for side in SIDES}, "tok/s", True
    )
    results["train step time"] = metric_row({side: train[side]["median_s"] for side in SIDES}, "ms", False)
    results["train step: kernel (sys) CPU time"] = metric_row(
        {side: train[side]["median_sys_s"] for side in SIDES}, "ms", False
    )
    results["train achieved GFLOP/s (fwd + bwd FLOPs / step time)"] = metric_row(
        {side: flops[side]["total"] / train[side]["median_s"] / 1e9 for side in SIDES}, "GFLOP/s", True
    )
    results["train step: minor page faults"] = metric_row(
        {side: train[side]["median_minor_faults"] for side in SIDES}, "count", False
    )
    print(f"training timed in {time.perf_counter() - t0:.0f}s{busy_note(c.result)}", flush=True)
    for step in steps.values():
        step.optimizer.state.clear()
    del steps
    gc.collect()

    # 2. generation
    for b in (int(x) for x in args.gen_batches.split(",")):
        prompt = random_ids(b, args.prompt_len, args.vocab, args.seed + 3)
        fns = {side: make_generate(m, prompt, args.new_tokens) for side, m in models.items()}
        t0 = time.perf_counter()
        key = f"generate_b{b}"
        contention["waited_s"][key] = wait_for_idle(args.wait_idle)
        with Contention() as c:
            samples = time_alternating(fns, args.rounds, 1, args.warmup)
        contention[key] = c.result
        raw[key] = {side: summarize(s, b * args.new_tokens) for side, s in samples.items()}
        results[f"generate new tok/s (B={b}, prompt {args.prompt_len}, new {args.new_tokens})"] = metric_row(
            {side: raw[key][side]["throughput"] for side in SIDES}, "tok/s", True
        )
        results[f"generate ms/new token (B={b})"] = metric_row(
            {side: raw[key][side]["median_s"] / args.new_tokens for side in SIDES}, "ms", False
        )
        print(f"generation B={b} timed in {time.perf_counter() - t0:.0f}s{busy_note(c.result)}", flush=True)

    # 3. memory
    if not args.no_memory:
        t0 = time.perf_counter()
        mem = {w: {side: measure_memory(side, w, args) for side in SIDES} for w in ("train", "generate")}
        raw["memory"] = mem
        results.update(memory_rows(mem["train"], SIDES, args.memory_steps))
        results["generate peak RSS above baseline (B=8)"] = metric_row(
            {s: mem["generate"][s]["peak_rss_delta_bytes"] for s in SIDES}, "MiB", False
        )
        print(f"memory measured in {time.perf_counter() - t0:.0f}s ({mem['train']['hf_lm']['peak_method']})")

    for row in results.values():
        den = row["transformers"]
        row["ratio_hf_lm_over_transformers"] = row["hf_lm"] / den if den else None

    body = []
    for name, row in results.items():
        better = "higher is better" if row["higher_is_better"] else "lower is better"
        ratio = row["ratio_hf_lm_over_transformers"]
        ratio = "n/a" if ratio is None else f"{ratio:.3f}"
        body.append(
            [
                f"{name} [{row['unit']}]",
                fmt(row["hf_lm"], row["unit"]),
                fmt(row["transformers"], row["unit"]),
                f"{ratio} ({better})",
            ]
        )
    header = ["metric", "hf_lm", "transformers", "ratio hf_lm/transformers"]
    print("\n" + markdown_table(header, body, align="lrrr"))

    out_path = Path(args.output)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    profiles = []
    if args.profile:
        profiles = profile_models(models, args, out_path.parent)
        print("profiles written:\n  " + "\n  ".join(profiles))

    report = {
        "environment": env,
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "model": {
            "family": args.family,
            "params": n_params,
            "hf_lm_config": models["hf_lm"].config.to_dict(),
            "reference": REFERENCE_NAMES[args.family],
        },
        "sanity": check,
        "flops": flops,
        "contention": contention,
        "results": results,
        "raw": raw,
        "profiles": profiles,
        "method": (
            "A/B alternating rounds in one process after warm-up, median per side; the first side "
            "alternates each round. Contention: share of each phase's wall time with a task waiting for a CPU "
            "(/proc/pressure/cpu). Memory: fresh subprocess per side/workload, peak RSS above the "
            "pre-workload RSS (VmHWM reset via /proc/self/clear_refs)."
        ),
    }
    out_path.write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
