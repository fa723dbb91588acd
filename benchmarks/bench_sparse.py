#!/usr/bin/env python
"""CPU benchmark: decoding at long context with a band (sliding-window) attention pattern against
dense attention, the same GPT and the same weights.

The band model (`attention_pattern="band"`, reach `--window` w) decodes with transformers'
sliding-window cache (`DynamicCache(config=...)` builds `DynamicSlidingWindowLayer`s from the
config's derived `sliding_window` = w + 1), which keeps w keys per layer however long the context;
the dense model's `DynamicCache` keeps them all. For each context length L (`--contexts`):

1. KV cache memory after N = `--new-tokens` greedy steps from an L-token prompt: the bytes of
   the cache's key and value tensors, counted from the tensors themselves.
2. Decode speed: a greedy loop of N steps through `forward` with the cache (what `generate()`
   runs, without its bookkeeping), after an L-token prefill; the prefill and the decoding steps are
   timed apart, in wall time and in this process's CPU time (user + system; with one thread it is
   the work done, steadier than wall time on a shared machine). The two sides alternate round by
   round (the first side of a round alternates too), after warm-up; the medians over rounds are
   reported. The prefill is reported too: the band's
   mask is built dense (T x S) and runs through SDPA's masked path, so the band does not make the
   prefill faster here; the savings are the cache and each decoding step's keys.

A sanity line checks that band decoding with the sliding cache equals band decoding with a full
cache (the same tokens), so the memory saved changes nothing in the output.

Usage:
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_sparse                 # a few minutes on a CPU
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_sparse --quick         # smoke run

Prints a markdown table with the band/dense ratios and writes JSON and markdown to `--output-dir`
(default `benchmarks/results/sparse/`).
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time
from pathlib import Path

from .bench_common import (
    Contention,
    add_machine_options,
    busy_note,
    command_line,
    environment,
    environment_line,
    fmt,
    markdown_table,
    tensor_bytes,
    write_ab_report,
)

SIDES = ("dense", "band")
TIMES = ("prefill_s", "prefill_cpu_s", "decode_s", "decode_cpu_s")
METHOD = (
    "Both sides are the same GPT (same weights); only attention_pattern differs. Cache bytes are "
    "counted from the cache tensors after the decode. Times: an L-token prefill, then N greedy steps "
    "through forward with the cache, timed apart (wall and process CPU time); sides alternating "
    "round by round after warm-up, median over rounds."
)


def build_models(args):
    """The dense GPT and the same weights with the band pattern."""
    import torch

    from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM

    sizes = dict(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        max_position_embeddings=max(args.contexts) + args.new_tokens,
        position_embedding_type="rope",
        norm_type="rmsnorm",
        hidden_act="swiglu",
        attention_bias=False,
        mlp_bias=False,
    )
    torch.manual_seed(args.seed)
    dense = HfLmGPTForCausalLM(HfLmGPTConfig(**sizes)).eval()
    band = HfLmGPTForCausalLM(HfLmGPTConfig(**sizes, attention_pattern="band", attention_window=args.window))
    band.load_state_dict(dense.state_dict())
    return {"dense": dense, "band": band.eval()}


def cache_bytes(cache) -> int:
    """Bytes of a transformers cache's key and value tensors."""
    return tensor_bytes(t for layer in cache.layers for t in (layer.keys, layer.values))


def clocks() -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds, user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), usage.ru_utime + usage.ru_stime


def decode_run(model, prompt, n: int) -> tuple[dict, object]:
    """A greedy decode as generate() runs it (forward with the cache, one token a step): the
    prefill's wall and CPU seconds, the wall and CPU seconds per new token, and the cache."""
    import torch

    from hf_lm.models.hflm_common import (
        output_cache,
    )

    with torch.no_grad():
        t0 = clocks()
        out = model(prompt, use_cache=True, logits_to_keep=1)  # makes the config's cache, as generate()
        t1 = clocks()
        cache, token = output_cache(out), out.logits[:, -1:].argmax(-1)
        for _ in range(n):
            out = model(token, past_key_values=cache, use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
        t2 = clocks()
    times = {
        "prefill_s": t1[0] - t0[0],
        "prefill_cpu_s": t1[1] - t0[1],
        "decode_s": (t2[0] - t1[0]) / n,
        "decode_cpu_s": (t2[1] - t1[1]) / n,
    }
    return times, cache


def measure_context(models, L: int, args) -> dict:
    """Cache bytes and timings of both sides at context L, the sides alternating round by round."""
    import torch

    prompt = torch.randint(3, args.vocab, (1, L), generator=torch.Generator().manual_seed(L))
    samples = {side: {name: [] for name in TIMES} for side in models}
    row = {"context": L}
    names = list(models)
    with Contention() as busy:
        for r in range(args.warmup + args.rounds):
            for side in names if r % 2 == 0 else names[::-1]:
                gc.collect()
                times, cache = decode_run(models[side], prompt, args.new_tokens)
                for name in TIMES if r >= args.warmup else ():
                    samples[side][name].append(times[name])
                row[f"{side}_cache_bytes"] = cache_bytes(cache)
                row[f"{side}_cache_tokens"] = cache.layers[0].keys.shape[-2]
                del cache
    for side in names:
        row[f"{side}_prefill_s"] = statistics.median(samples[side]["prefill_s"])
        row[f"{side}_decode_ms_per_token"] = 1000 * statistics.median(samples[side]["decode_s"])
        row[f"{side}_decode_cpu_ms_per_token"] = 1000 * statistics.median(samples[side]["decode_cpu_s"])
    row["cache_ratio"] = row["band_cache_bytes"] / row["dense_cache_bytes"]
    row["decode_speedup"] = row["dense_decode_ms_per_token"] / row["band_decode_ms_per_token"]
    row["decode_cpu_speedup"] = row["dense_decode_cpu_ms_per_token"] / row["band_decode_cpu_ms_per_token"]
    row["contention"], row["samples"] = busy.result, samples
    print(f"context {L}: done{busy_note(busy.result)}", flush=True)
    return row


def sanity(models, args) -> bool:
    """Band decoding with its sliding cache gives the tokens of band decoding with a full cache."""
    import torch
    from transformers import DynamicCache

    from hf_lm.models.hflm_common import (
        returned_cache,
    )

    band = models["band"]
    prompt = torch.randint(3, args.vocab, (1, 4 * args.window), generator=torch.Generator().manual_seed(1))
    kwargs = dict(max_new_tokens=2 * args.window, do_sample=False)
    with torch.no_grad():
        sliding = band.generate(prompt, **kwargs)
        full = band.generate(prompt, **returned_cache(DynamicCache()), **kwargs)
    return bool(torch.equal(sliding, full))


def table(rows: list[dict]) -> str:
    header = [
        "context",
        "cache dense",
        "cache band",
        "band/dense",
        "decode ms/tok dense",
        "decode ms/tok band",
        "speedup",
        "decode CPU ms/tok dense",
        "decode CPU ms/tok band",
        "CPU speedup",
        "prefill s dense",
        "prefill s band",
    ]
    cells = [
        [
            fmt(r["context"]),
            f"{r['dense_cache_bytes'] / 2**20:.2f} MiB ({r['dense_cache_tokens']} tok)",
            f"{r['band_cache_bytes'] / 2**20:.2f} MiB ({r['band_cache_tokens']} tok)",
            f"{r['cache_ratio']:.3f}",
            fmt(r["dense_decode_ms_per_token"]),
            fmt(r["band_decode_ms_per_token"]),
            f"{r['decode_speedup']:.2f}x",
            fmt(r["dense_decode_cpu_ms_per_token"]),
            fmt(r["band_decode_cpu_ms_per_token"]),
            f"{r['decode_cpu_speedup']:.2f}x",
            fmt(r["dense_prefill_s"], 3),
            fmt(r["band_prefill_s"], 3),
        ]
        for r in rows
    ]
    return markdown_table(header, cells, align="r" * len(header))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--contexts", type=lambda s: [int(x) for x in s.split(",")], default=[512, 2048, 4096])
    p.add_argument("--window", type=int, default=128, help="the band's reach w (sliding_window = w + 1)")
    p.add_argument("--new-tokens", type=int, default=64, help="N greedy decoding steps per round")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--output-dir", default="benchmarks/results/sparse")
    p.add_argument("--quick", action="store_true", help="tiny sizes, to check that it runs")
    add_machine_options(p)
    args = p.parse_args(argv)
    if args.quick:
        args.contexts, args.window, args.new_tokens, args.rounds, args.warmup = [128, 256], 16, 9, 1, 0
        args.layers, args.hidden, args.vocab = 2, 64, 512
    return args


def main(argv=None) -> None:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    env = environment(args.threads)
    print(environment_line(env))
    models = build_models(args)
    same = sanity(models, args)
    print(f"sanity: band decoding with the sliding cache == with a full cache: {same}")
    t0 = time.perf_counter()
    rows = [measure_context(models, L, args) for L in args.contexts]
    text = table(rows)
    print(text)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    command = command_line("benchmarks.bench_sparse", argv)
    (out / "bench_sparse.md").write_text(
        f"# Dense vs band attention: KV cache and decode speed\n\n`{command}`\n\n"
        f"{environment_line(env)}; {args.layers} layers, hidden {args.hidden}, {args.heads} heads, "
        f"band reach w = {args.window} (sliding_window {args.window + 1}), {args.new_tokens} new tokens, "
        f"batch 1, fp32.\n\nSanity (sliding cache == full cache tokens): {same}\n\n{text}\n\n{METHOD}\n"
    )
    body = {"sanity_sliding_equals_full_cache": same, "rows": rows, "seconds": time.perf_counter() - t0}
    write_ab_report(out / "bench_sparse.json", env, args, body, [], METHOD)


if __name__ == "__main__":
    main()
