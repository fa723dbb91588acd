#!/usr/bin/env python
"""Sparse attention on flex_attention against dense SDPA: prefill (and a training step where the
device has flex's backward) of the same GPT at long contexts, in one run.

Sides, all the same GPT (same weights), only the attention differs:

- `dense_sdpa`: dense causal attention through SDPA (its `is_causal` kernel), the baseline;
- `band_flex`: `attention_pattern="band"` (reach `--window`) on `attn_implementation="flex_attention"`:
  a `BlockMask` built from the pattern's predicate, only the blocks the band reaches evaluated
  (`hflm_masks.FlexMask`), so prefill costs O(T x w);
- `bigbird_flex`: `"band+global+random"` (BigBird: the band, `--global-tokens` global tokens and
  `--random-keys` random keys per query) on flex_attention;
- `band_sdpa` (with `--with-band-sdpa`): the band as a dense T x S mask through SDPA's masked path,
  which is what the band cost before flex.

For each context length L (`--contexts`) every side runs a batch-1 L-token prefill (`use_cache=False`,
the logits of the last token), after a warm-up call (flex compiles its kernel per shape); the sides
alternate round by round (the first side alternates too) and the medians over rounds are reported,
with the ratios to `dense_sdpa` measured in the same run. The time to build the flex mask alone
(`FlexMask(...).block_mask()`) is reported apart. `--budget_s` stops adding rounds (after the first)
once the run has used that many seconds. A training step (forward + backward + AdamW) is timed the
same way on a device whose flex_attention has a backward; on a CPU it is skipped, and the report says
why: torch's CPU flex kernel has no backward.

BigBird's random keys are picked per key (hf_lm's `random` part), not per block as in BigBird's
paper: with flex's 128 x 128 blocks nearly every causal block holds a random key, so the random
part makes the blocks partial rather than skipped.

Usage:
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_flex --contexts 4096,8192            # minutes on a CPU
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_flex --quick                         # smoke run

Prints a markdown table and writes JSON and markdown to `--output-dir` (default
`benchmarks/results/flex/`).
"""

from __future__ import annotations

import argparse
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
    resolve_device,
    write_ab_report,
)

METHOD = (
    "All sides are the same GPT (same weights); only attention_pattern and attn_implementation differ. "
    "Prefill: a batch-1 forward of L tokens without a cache, logits of the last token; one warm-up call "
    "per side and length (flex compiles per shape), then rounds with the sides alternating, median over "
    "rounds. Ratios are dense_sdpa's time over the side's (above 1: faster than dense). Mask build: "
    "FlexMask(...).block_mask() alone, median of 3."
)
CPU_NO_BACKWARD = "skipped: torch's CPU flex_attention kernel has no backward (training needs a GPU)"


def build_models(args) -> dict:
    import torch

    from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM

    sizes = dict(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.hidden,
        max_position_embeddings=max(args.contexts),
        position_embedding_type="rope",
        norm_type="rmsnorm",
        hidden_act="swiglu",
        attention_bias=False,
        mlp_bias=False,
    )
    sparse = dict(
        attention_window=args.window, num_global_tokens=args.global_tokens, num_random_keys=args.random_keys
    )
    sides = {
        "dense_sdpa": (dict(), "sdpa"),
        "band_flex": (dict(attention_pattern="band", **sparse), "flex_attention"),
        "bigbird_flex": (dict(attention_pattern="band+global+random", **sparse), "flex_attention"),
    }
    if args.with_band_sdpa:
        sides["band_sdpa"] = (dict(attention_pattern="band", **sparse), "sdpa")
    torch.manual_seed(args.seed)
    models, state = {}, None
    for side, (pattern, impl) in sides.items():
        model = HfLmGPTForCausalLM(HfLmGPTConfig(**sizes, **pattern))
        if state is None:
            state = model.state_dict()
        model.load_state_dict(state)
        model.set_attn_implementation(impl)
        models[side] = model.to(args.device).eval()
    return models


def prefill(model, ids):
    import torch

    with torch.no_grad():
        return model(ids, use_cache=False, logits_to_keep=1).logits


def mask_build_s(model, L: int, device) -> float | None:
    """Seconds to build the flex mask of an L-token batch-1 prefill (median of 3), None for dense."""
    from hf_lm.models.hflm_masks import (
        FlexMask,
    )

    stack = model.model
    if model.config._attn_implementation != "flex_attention" or not stack.attention_pattern.names:
        return None
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        FlexMask(stack.attention_pattern, 1, None, L, L, 0, 0, True, None, None, device).block_mask()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def flex_has_backward(device: str) -> bool:
    return device.startswith("cuda")


def train_step(model, ids, optimizer):
    out = model(ids, labels=ids, use_cache=False)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure_context(models, L: int, args, t_start: float) -> dict:
    import torch

    from .bench_common import device_synchronizer

    sync = device_synchronizer(args.device)
    ids = torch.randint(3, args.vocab, (1, L), generator=torch.Generator().manual_seed(L)).to(args.device)
    names = list(models)
    row = {"context": L}
    samples = {side: [] for side in names}
    # compile flex's kernels for this length alone: after a first length, torch recompiles with dynamic
    # shapes, and torch 2.13's CPU flex codegen fails on the random part's mask_mod then (a C++ compile
    # error, `cur_kvSplitSize1` undeclared)
    torch._dynamo.reset()
    with Contention() as busy:
        for side in names:  # warm-up: flex compiles its kernel for this shape
            prefill(models[side], ids)
        for r in range(args.rounds):
            if r > 0 and time.perf_counter() - t_start > args.budget_s:
                break
            for side in names if r % 2 == 0 else names[::-1]:
                sync()
                t0 = time.perf_counter()
                prefill(models[side], ids)
                sync()
                samples[side].append(time.perf_counter() - t0)
    for side in names:
        row[f"{side}_prefill_s"] = statistics.median(samples[side])
        row[f"{side}_mask_s"] = mask_build_s(models[side], L, torch.device(args.device))
    for side in names:
        row[f"{side}_prefill_speedup"] = row["dense_sdpa_prefill_s"] / row[f"{side}_prefill_s"]
    row["rounds"] = len(samples[names[0]])
    if flex_has_backward(args.device) and not args.no_train:
        train_samples = {side: [] for side in names}
        states = {side: m.state_dict() for side, m in models.items()}
        optimizers = {side: torch.optim.AdamW(m.parameters(), lr=1e-5) for side, m in models.items()}
        for m in models.values():
            m.train()
        for side in names:
            train_step(models[side], ids, optimizers[side])
        for r in range(args.rounds):
            for side in names if r % 2 == 0 else names[::-1]:
                sync()
                t0 = time.perf_counter()
                train_step(models[side], ids, optimizers[side])
                sync()
                train_samples[side].append(time.perf_counter() - t0)
        for side, m in models.items():
            m.load_state_dict(states[side])
            m.eval()
        for side in names:
            row[f"{side}_train_s"] = statistics.median(train_samples[side])
            row[f"{side}_train_speedup"] = row["dense_sdpa_train_s"] / row[f"{side}_train_s"]
    row["samples"], row["contention"] = samples, busy.result
    print(f"context {L}: {row['rounds']} rounds{busy_note(busy.result)}", flush=True)
    return row


def sanity(models, args) -> dict:
    """Each flex side equals the same pattern on eager (the reference), at a short length."""
    import torch

    ids = torch.randint(3, args.vocab, (1, 300), generator=torch.Generator().manual_seed(1)).to(args.device)
    result = {}
    for side, model in models.items():
        if model.config._attn_implementation != "flex_attention":
            continue
        flex = prefill(model, ids)
        model.set_attn_implementation("eager")
        eager = prefill(model, ids)
        model.set_attn_implementation("flex_attention")
        result[side] = float((flex - eager).abs().max())
    return result


def table(rows: list[dict], names: list[str], train: bool) -> str:
    header = ["context"]
    for side in names:
        header += [f"{side} prefill s"] + ([] if side == "dense_sdpa" else [f"{side} vs dense"])
    flex = [side for side in names if side.endswith("_flex")]
    header += [f"{side} mask build s" for side in flex]
    if train:
        header += [f"{side} train s" for side in names]
    cells = []
    for r in rows:
        row = [fmt(r["context"])]
        for side in names:
            row.append(fmt(r[f"{side}_prefill_s"], 3))
            if side != "dense_sdpa":
                row.append(f"{r[f'{side}_prefill_speedup']:.2f}x")
        row += [fmt(r[f"{side}_mask_s"], 3) for side in flex]
        if train:
            row += [fmt(r.get(f"{side}_train_s"), 3) for side in names]
        cells.append(row)
    return markdown_table(header, cells, align="r" * len(header))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--contexts", type=lambda s: [int(x) for x in s.split(",")], default=[4096, 8192, 16384])
    p.add_argument("--window", type=int, default=256, help="the band's reach w")
    p.add_argument("--global-tokens", type=int, default=16)
    p.add_argument("--random-keys", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budget_s", type=float, default=600.0, help="stop adding rounds past this many seconds")
    p.add_argument("--device", default="cpu")
    p.add_argument("--with-band-sdpa", action="store_true", help="also the band as a dense mask on SDPA")
    p.add_argument("--no-train", action="store_true", help="skip the training step")
    p.add_argument("--output-dir", default="benchmarks/results/flex")
    p.add_argument("--quick", action="store_true", help="tiny sizes, to check that it runs")
    add_machine_options(p)
    args = p.parse_args(argv)
    if args.quick:
        args.contexts, args.window, args.rounds, args.layers, args.hidden, args.vocab = (
            [512],
            64,
            1,
            2,
            64,
            512,
        )
    args.device = resolve_device(args.device)
    return args


def main(argv=None) -> None:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    env = environment(args.threads)
    print(environment_line(env))
    models = build_models(args)
    same = sanity(models, args)
    print(f"sanity: max |flex - eager| at 300 tokens: {same}")
    train = flex_has_backward(args.device) and not args.no_train
    train_note = "timed" if train else ("skipped: --no-train" if args.no_train else CPU_NO_BACKWARD)
    print(f"training step: {train_note}")
    t0 = time.perf_counter()
    rows = [measure_context(models, L, args, t0) for L in args.contexts]
    text = table(rows, list(models), train)
    print(text)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    command = command_line("benchmarks.bench_flex", argv)
    (out / "bench_flex.md").write_text(
        f"# Sparse attention on flex_attention vs dense SDPA: prefill\n\n`{command}`\n\n"
        f"{environment_line(env)}; device {args.device}; {args.layers} layers, hidden {args.hidden}, "
        f"{args.heads} heads, band reach w = {args.window}, BigBird: the band + {args.global_tokens} global "
        f"tokens + {args.random_keys} random keys per query; batch 1, fp32.\n\n"
        f"Sanity (max |flex - eager| at 300 tokens): {same}\n\nTraining step: {train_note}\n\n{text}\n\n{METHOD}\n"
    )
    body = {
        "sanity_max_abs_diff": same,
        "training_step": train_note,
        "rows": rows,
        "seconds": time.perf_counter() - t0,
    }
    write_ab_report(out / "bench_flex.json", env, args, body, [], METHOD)


if __name__ == "__main__":
    main()
