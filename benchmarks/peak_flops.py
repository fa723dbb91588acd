#!/usr/bin/env python
"""This machine's peak matmul FLOP/s, and the FLOPs of one training step: the two halves of MFU.

Model FLOP/s utilization (MFU; PaLM, Chowdhery et al. 2022, appendix B) is the FLOP/s a training run
achieves, counting only the model's matrix multiplications, divided by the hardware's peak. A CPU
has no datasheet number that a PyTorch matmul reaches (turbo, AVX frequency offsets, the BLAS and
the thread count all move it), so the peak here is measured:

- `measure_peak_flops`: the best FLOP/s of square `torch.mm` (2 n^3 FLOPs each) over a few sizes
  (default 1024, 2048, 4096), on a device (`--device`: the CPU with the benchmarks' thread count,
  or a GPU) in a dtype (`--dtype`: fp32 on a CPU; bf16 for a GPU's tensor cores, the peak that a
  bf16-autocast training step's MFU is measured against). Each size is warmed up, then the number
  of back-to-back multiplications per sample is calibrated so that a sample lasts at least
  `--min-time` seconds; the best of `--repeats` samples counts (the best, not the median: the peak
  is what the machine *can* do, and a shared machine only ever makes a sample slower). On a GPU the
  clock is read only after the queued multiplications are done (`torch.cuda.synchronize`).
- `count_train_step_flops`: the FLOPs of one forward (with `labels`) + backward, counted by
  `torch.utils.flop_counter.FlopCounterMode` (matmuls, convolutions and attention; elementwise
  work such as norms, activations, softmax and the optimizer is not counted, as in MFU's definition).
  The AdamW step is therefore *not* counted, although it is inside the timed training step.
  FlopCounterMode has no formula for CPU's fused attention kernel
  (`aten._scaled_dot_product_flash_attention_for_cpu`, which `F.scaled_dot_product_attention` runs on
  CPU), so it would silently count attention as zero; `CPU_SDPA_FORMULAS` adds torch's own SDPA
  formulas for it. Like torch's GPU formulas they count the full T x T score matrix, causal or not.
- `analytic_decoder_train_flops`: the closed form for a decoder-only Transformer, 6 N T + 14 L T^2 d
  per sequence of T tokens (N: weights inside matmuls, lm head included; Kaplan et al. 2020,
  table 1; attention at full T x T, 14 rather than PaLM's 12 because the fused kernel's backward
  recomputes the scores), which the counter reproduces exactly (tests/test_bench_suite.py).

Usage:
    python -m benchmarks.peak_flops                       # all cores, sizes 1024,2048,4096
    python -m benchmarks.peak_flops --threads 1 --sizes 1024,2048 --output out/peak.json
    python -m benchmarks.peak_flops --device cuda --dtype bfloat16 --sizes 4096,8192   # a GPU's bf16 peak
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from benchmarks.bench_common import available_cores, comma_list, device_synchronizer

logger = logging.getLogger("peak_flops")

aten = torch.ops.aten


def _cpu_sdpa_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_sdpa_backward_flop(
    grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
):
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# FlopCounterMode passes each op's arguments as shapes to these (its `shape_wrapper`)
CPU_SDPA_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flop,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward_flop,
}


def count_flops(fn: Callable[[], object]) -> dict:
    """Run `fn` once under FlopCounterMode (with the CPU attention formulas).

    Returns:
        `{"total": int, "by_op": {op name: int}}`.
    """
    counter = FlopCounterMode(display=False, custom_mapping=CPU_SDPA_FORMULAS)
    with counter:
        fn()
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return {"total": int(counter.get_total_flops()), "by_op": by_op}


def count_train_step_flops(model: torch.nn.Module, batch: dict) -> dict:
    """FLOPs of one training step's forward (with labels) + backward; the optimizer is not counted.

    Gradients are cleared afterwards and no optimizer step is taken, so the model is left as it was.

    Args:
        model: a model whose output has `.loss` when called with `**batch`.
        batch: keyword arguments of the forward, `labels` included.

    Returns:
        `count_flops`'s dict plus `"counted"`, a one-line statement of what is included.
    """
    was_training = model.training
    model.train()

    def step():
        model(**batch).loss.backward()

    result = count_flops(step)
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    result["counted"] = (
        "forward (with labels) + backward, torch.utils.flop_counter.FlopCounterMode (+ CPU SDPA formulas): "
        "matmuls and attention only, full T x T scores; optimizer step not counted"
    )
    return result


def analytic_decoder_train_flops(
    matmul_params: int, num_layers: int, hidden_size: int, batch: int, seq: int, fused_attention: bool = True
) -> int:
    """Forward + backward FLOPs of a decoder-only Transformer as FlopCounterMode counts them.

    Weights: every weight inside a matmul does one multiply-add per token in the forward (2 N per
    token) and two in the backward (the gradients of its input and of itself, when every matmul
    input requires grad): 6 N per token (Kaplan et al. 2020, table 1).

    Attention, per layer and sequence, at full T x T: the forward's Q K^T and (scores) V are two
    matmuls of 2 T^2 d each. An eager backward takes two matmuls per forward matmul (12 T^2 d in
    all, PaLM's 12 L d T^2); the fused CPU kernel's backward recomputes Q K^T first, one matmul more
    (5 in the backward, 14 T^2 d in all), and FlopCounterMode's SDPA formula counts that.

    Args:
        matmul_params: weights that enter a matmul (no embedding lookups, norms or biases); a tied lm
            head counts once more here, since it is a matmul of its own.
        fused_attention: the model runs `F.scaled_dot_product_attention` (14) rather than eager
            matmuls (12).

    Returns:
        6 N B T + (14 or 12) L d B T^2.
    """
    attention = 14 if fused_attention else 12
    return 6 * matmul_params * batch * seq + attention * num_layers * hidden_size * batch * seq * seq


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _time_mm(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, iters: int, synchronize=lambda: None
) -> float:
    synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        torch.mm(a, b, out=out)
    synchronize()  # a GPU queues the multiplications: wait for them before reading the clock
    return time.perf_counter() - t0


def measure_peak_flops(
    sizes: tuple[int, ...] = (1024, 2048, 4096),
    repeats: int = 5,
    min_time: float = 0.25,
    threads: int | None = None,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> dict:
    """Best FLOP/s of square `torch.mm` over `sizes` on `device` in `dtype` (see the module docstring).

    Args:
        threads: torch's CPU thread count for the measurement (None: leave it as it is).
        dtype: the dtype of both operands and the output (bf16 for a GPU's tensor-core peak).
        device: where the matrices live ("cpu", "cuda", "cuda:1", ...).

    Returns:
        `{"peak_flops": float, "best_size": int, "by_size": {n: {"flops": best FLOP/s, "iters":
        multiplications per sample, "samples_s": [...]}}, "threads", "dtype", "device", ...}`.

    Raises:
        ValueError: for an empty `sizes`, a size below 1 or `repeats` below 1.
    """
    if threads is not None:
        torch.set_num_threads(threads)
    if not sizes or min(sizes) < 1 or repeats < 1:
        raise ValueError("sizes must be positive and repeats >= 1")
    device = torch.device(device)
    synchronize = device_synchronizer(device)
    g = torch.Generator().manual_seed(seed)  # on the CPU: the same operands on every device
    by_size = {}
    for n in sizes:
        a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
        b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
        out = torch.empty(n, n, dtype=dtype, device=device)
        once = _time_mm(a, b, out, 1, synchronize)  # warm-up (and a first estimate of one multiplication)
        once = min(once, _time_mm(a, b, out, 1, synchronize))
        iters = max(1, int(min_time / max(once, 1e-9)))
        samples = [_time_mm(a, b, out, iters, synchronize) / iters for _ in range(repeats)]
        flop = 2 * n**3
        by_size[n] = {"flops": flop / min(samples), "iters": iters, "samples_s": samples}
        logger.info("n=%d: %.1f GFLOP/s (best of %d x %d mm)", n, by_size[n]["flops"] / 1e9, repeats, iters)
    best = max(by_size, key=lambda n: by_size[n]["flops"])
    return {
        "peak_flops": by_size[best]["flops"],
        "best_size": best,
        "by_size": by_size,
        "threads": torch.get_num_threads(),
        "dtype": str(dtype).replace("torch.", ""),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "repeats": repeats,
        "min_time_s": min_time,
        "method": "square torch.mm(out=...), 2 n^3 FLOPs; calibrated iterations per sample (device "
        "synchronized before each clock read); best sample per size, best size",
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=str, default="1024,2048,4096", help="comma-separated square sizes")
    p.add_argument("--repeats", type=int, default=5, help="timed samples per size (the best counts)")
    p.add_argument("--min-time", type=float, default=0.25, help="seconds per sample, at least")
    p.add_argument("--threads", type=int, default=available_cores())
    p.add_argument("--device", type=str, default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32", help="operand dtype")
    p.add_argument("--output", type=str, default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    sizes = tuple(int(s) for s in comma_list(args.sizes))
    result = measure_peak_flops(
        sizes, args.repeats, args.min_time, args.threads, DTYPES[args.dtype], device=args.device
    )
    text = json.dumps(result, indent=2)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
