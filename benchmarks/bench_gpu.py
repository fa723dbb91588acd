#!/usr/bin/env python
"""GPU speed benchmarks: hf_lm against transformers' references (and a nanoGPT-shaped model) on CUDA.

Everything runs side by side in one process, on the same weights (the reference is built first and
converted with `hf_lm.convert.from_transformers`; the nanoGPT-shaped model gets GPT-2's weights
copied in), alternating the implementations round by round after warm-up (the order reverses every
round; `bench_common.alternating_rounds`, which waits for the GPU before every clock read); each
figure is the median over rounds.

Sections (`--sections`, comma-separated; default all):

- `gpt_train`: GPT-2 small (124M: vocabulary 50257, 12 layers x 768, context 1024, dropout 0; nanoGPT
  pads the vocabulary to 50304 for speed, but here every model keeps 50257 to share weights) training
  step = forward with labels + backward + fused AdamW step + `zero_grad`, under bf16 autocast (fp32
  weights, as in mixed-precision training): hf_lm's `HfLmGPTForCausalLM`, transformers'
  `GPT2LMHeadModel` (SDPA) and `NanoGPT` below (a minimal nanoGPT-shaped model written here), each
  eager and `torch.compile`d (default mode, Inductor). Tokens/s and MFU.
- `head_loss`: the share of a GPT-2 training step spent in the 50k-vocabulary head and the
  cross-entropy: the head + loss forward and backward, timed alone on the final hidden states
  (hf_lm eager and compiled, transformers eager), against the whole step of the same model
  timed in the same rounds; and a torch.profiler table of one hf_lm step
  (`profile_gpt2_hf_lm_train.txt`). It tells whether a fused linear-cross-entropy kernel (e.g.
  liger-kernel, not a dependency) would pay.
  Selecting `head_loss` runs the `gpt_train` rows too (its shares are of their step times).
- `encoders`: BERT-base masked-LM training (`HfLmBertForMaskedLM`, also with
  `sparse_prediction=True`, vs `BertForMaskedLM`) and T5-small (v1.0) training
  (`HfLmT5ForConditionalGeneration` vs `T5ForConditionalGeneration`), eager; compiled too with
  `--compile_encoders` (several minutes of compilation on a GPU, so off by default).
- `decode`: cached greedy decoding of GPT-2 small (fp32 weights by default) at batch 1 and 8,
  new tokens/s, the prompt's prefill included: hf_lm with a `DynamicCache`, with a `StaticCache`
  (`cache_implementation="static"`) eager, and with a static cache compiled by `generate` itself
  (transformers 5.23 compiles the forward inside `generate` when the device is a GPU and the cache
  is compileable: `_valid_auto_compile_criteria`; the `CompileConfig` used is recorded), against
  `GPT2LMHeadModel` with a dynamic cache and with a compiled static cache. Whether compilation
  happened (the model's `_compiled_call`, the graphs Dynamo built, its graph breaks) is printed per
  row, and the static-cache tokens must equal the dynamic-cache tokens. hf_lm is also timed with
  its own decoding loop (`custom_generate=static_decode`: no per-step input preparation, a host-device
  sync every 8 steps instead of every step; `hf_lm.generation_static`), and sampling (top-k 50)
  is timed with `generate()`'s loop and with hf_lm's, whose tokens from one seed must be equal
  (hf_lm's loop draws what `torch.multinomial` draws).
  One compiled greedy call of each implementation at B=1 is then profiled
  (`profile_gpt2_decode_b1.txt`): the GPU's busy time against the wall time, and the host's
  Python time by part of `generate()`'s loop.

MFU (PaLM, Chowdhery et al. 2022, appendix B): model FLOPs per step / median step time / the
GPU's bf16 matmul peak *measured in this run* (`peak_flops.measure_peak_flops`, square bf16
`torch.mm`). GPT-2's model FLOPs are PaLM's 6 N + 12 L d T per token (N: weights inside matmuls, lm
head included; attention at the full T x T, as nanoGPT's `estimate_mfu` counts it), the same number
for every implementation; the FlopCounterMode count of the reference is recorded next to it (it
is larger by the fused attention backward's recomputation, 14 instead of 12 L d T). BERT and T5
use the FlopCounterMode count of the reference (`peak_flops.count_train_step_flops`). AdamW is timed,
not counted.

The issue's targets are printed next to the measured values (`TARGETS`): eager training at least
the nanoGPT-shaped model's speed and at least 1.6x `GPT2LMHeadModel`'s; compiled training MFU at
least 40% at the batch size named in the table; static-cache compiled greedy decoding at batch 1 at
least 5x `GPT2LMHeadModel`'s dynamic-cache rate, with identical tokens.

Correctness checks run first and are printed (logit agreement of the implementations, static vs
dynamic tokens); the script exits 1 when one fails or a row failed to run (after writing its
results: a failed row, an out-of-memory say, says why in its status).

`--smoke` runs every section at tiny sizes on any device (CI runs it on the CPU:
tests/test_bench_gpu.py; about 25 s of CPU time, most of it Dynamo tracing). On a CPU the compiled
rows use `torch.compile(backend="eager")`: Dynamo traces the model (graph breaks and graph counts are
real) but Inductor does not generate code, so those rows exercise the code path and say nothing
about speed. The BERT/T5 compiled rows are listed as skipped unless `--compile_encoders`. Without
`--smoke` or `--device cpu` the script needs CUDA: without a GPU it says so and exits 0.

The results are written after every section, so a run stopped by a time limit keeps the sections it
finished. Compilation dominates a full run (GPT-2 training compiled three times, the decoding
forward twice per batch size): where one command may only run for 10 minutes, run the sections
one by one, each into its own `--output_dir`.

Usage:
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_gpu                      # all sections, one GPU
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_gpu --sections gpt_train,head_loss --gpt_batch 32
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_gpu --sections encoders --compile_encoders
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_gpu --sections decode --output_dir out/bench_gpu_decode
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_gpu --smoke --device cpu  # tiny, any machine

Writes `bench_gpu.json` (every row, the peak, the checks, the environment) and `bench_gpu.md` (the
tables) under `--output_dir` (default `out/bench_gpu`).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn
from transformers import CompileConfig, GPT2LMHeadModel
from transformers.modeling_outputs import CausalLMOutput

from benchmarks import speed_entries as pairs
from benchmarks.bench_common import (
    DEVICE_CHOICES,
    accelerator_info,
    add_preset_options,
    alternating_rounds,
    comma_list,
    command_line,
    device_synchronizer,
    environment,
    environment_line,
    error_text,
    git_revision,
    markdown_table,
    ratio,
    resolve,
    resolve_device,
)
from benchmarks.measure import analytic_decoder_train_flops, count_train_step_flops, measure_peak_flops
from hf_lm.generation_static import static_decode
from hf_lm.models.hflm_layers import (
    VocabProjection,
)
from hf_lm.models.hflm_losses import (
    lm_loss,
)

SECTIONS = ("gpt_train", "head_loss", "encoders", "decode")

# the full run (GPT-2 small, BERT-base, T5-small) and the smoke run; flags override single values
PRESETS = {
    "full": dict(
        gpt_batch=16, gpt_seq=1024, gpt_layers=12, gpt_hidden=768, gpt_heads=12, gpt_vocab=50257,
        gpt_context=1024,
        bert_batch=32, bert_seq=512, bert_layers=12, bert_hidden=768, bert_heads=12, bert_intermediate=3072,
        bert_vocab=30522, bert_max_positions=512, bert_pad_fraction=0.0,
        t5_batch=32, t5_source_len=512, t5_target_len=128, t5_layers=6, t5_hidden=512, t5_heads=8,
        t5_intermediate=2048, t5_vocab=32128,
        decode_batches="1,8", prompt_len=32, new_tokens=128, decode_dtype="float32",
        rounds=5, reps=3, warmup=2, decode_rounds=5,
        peak_sizes="2048,4096,8192", peak_repeats=5, peak_min_time=0.25, learning_rate=3e-4,
    ),
    "smoke": dict(
        gpt_batch=2, gpt_seq=32, gpt_layers=2, gpt_hidden=64, gpt_heads=4, gpt_vocab=512, gpt_context=64,
        bert_batch=4, bert_seq=32, bert_layers=2, bert_hidden=64, bert_heads=4, bert_intermediate=128,
        bert_vocab=2000, bert_max_positions=64, bert_pad_fraction=0.5,
        t5_batch=2, t5_source_len=16, t5_target_len=8, t5_layers=2, t5_hidden=64, t5_heads=4,
        t5_intermediate=128, t5_vocab=1000,
        decode_batches="1,8", prompt_len=4, new_tokens=8, decode_dtype="float32",
        rounds=2, reps=1, warmup=0, decode_rounds=2,
        peak_sizes="64,128", peak_repeats=2, peak_min_time=0.02, learning_rate=3e-4,
    ),
}  # fmt: skip
HELP = {
    "gpt_batch": "GPT-2 training batch size (sequences)",
    "gpt_seq": "GPT-2 training sequence length (<= gpt_context)",
    "gpt_layers": "GPT-2 layers",
    "gpt_hidden": "GPT-2 width",
    "gpt_heads": "GPT-2 attention heads",
    "gpt_vocab": "GPT-2 vocabulary size",
    "gpt_context": "GPT-2 context (learned positions)",
    "bert_batch": "BERT training batch size",
    "bert_seq": "BERT sequence length",
    "bert_layers": "BERT layers",
    "bert_hidden": "BERT width",
    "bert_heads": "BERT attention heads",
    "bert_intermediate": "BERT feed-forward width",
    "bert_vocab": "BERT vocabulary size",
    "bert_max_positions": "BERT learned positions",
    "bert_pad_fraction": "Share of BERT rows right-padded (0: packed full rows, as in pretraining)",
    "t5_batch": "T5 training batch size",
    "t5_source_len": "T5 source length",
    "t5_target_len": "T5 target length",
    "t5_layers": "T5 encoder (= decoder) layers",
    "t5_hidden": "T5 d_model",
    "t5_heads": "T5 attention heads",
    "t5_intermediate": "T5 d_ff",
    "t5_vocab": "T5 vocabulary size",
    "decode_batches": "Comma-separated greedy decoding batch sizes",
    "prompt_len": "Decoding prompt length",
    "new_tokens": "Tokens generated per decoding call",
    "decode_dtype": "Weights dtype for decoding (float32 keeps near-tie argmax flips out of the token check)",
    "rounds": "Alternating timed rounds per training workload",
    "reps": "Training steps per round and implementation",
    "warmup": "Untimed warm-up calls per implementation (after the first, compiling, call)",
    "decode_rounds": "Alternating timed rounds per decoding batch size (one generate call each)",
    "peak_sizes": "Comma-separated square sizes of the bf16 matmul peak probe",
    "peak_repeats": "Timed samples per peak size",
    "peak_min_time": "Seconds per peak sample, at least",
    "learning_rate": "AdamW learning rate of the timed steps",
}

# the targets (issue 13); `key` names the measured value in `targets()`
TARGETS = [
    dict(
        key="eager_vs_nanogpt",
        text="eager training tokens/s, hf_lm / nanoGPT-shaped",
        threshold=1.0,
        unit="x",
    ),
    dict(
        key="eager_vs_transformers",
        text="eager training tokens/s, hf_lm / GPT2LMHeadModel",
        threshold=1.6,
        unit="x",
    ),
    dict(key="compiled_mfu", text="compiled training MFU, hf_lm", threshold=0.40, unit="%"),
    dict(
        key="static_decode_b1",
        text="greedy decoding B=1 new tokens/s, hf_lm static cache compiled / GPT2LMHeadModel dynamic cache "
        "(tokens identical to hf_lm's dynamic cache)",
        threshold=5.0,
        unit="x",
    ),
    dict(
        key="static_decode_b1_loop",
        text="the same with hf_lm's decoding loop (`custom_generate=static_decode`)",
        threshold=5.0,
        unit="x",
    ),
]

GPT_IMPLS = ("hf_lm", "transformers", "nanogpt")
IMPL_NAMES = {
    "hf_lm": "hf_lm",
    "hf_lm_sparse": "hf_lm (sparse_prediction=True)",
    "hf_lm_unpadded": "hf_lm, head product not padded (VocabProjection.ALIGN = 1)",
    "transformers": "transformers",
    "nanogpt": "nanoGPT-shaped (this file)",
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LOGIT_TOLERANCE = 1e-3  # fp32, same weights: differences come from kernel order and GELU's formula only


# --------------------------------------------------------------------------------------------
# A minimal nanoGPT-shaped model (GPT-2 architecture; written for this benchmark)
# --------------------------------------------------------------------------------------------


class NanoAttention(nn.Module):
    """Causal self-attention: one fused q/k/v projection and PyTorch's fused attention kernel."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)  # q, k and v in one matmul
        self.c_proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        q, k, v = (
            t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v)
        )  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)


class NanoMLP(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.c_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # GPT-2's tanh GELU


class NanoBlock(nn.Module):
    """Pre-norm residual block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, hidden: int, heads: int, eps: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.attn = NanoAttention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.mlp = NanoMLP(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    """GPT-2 in the shape of Karpathy's nanoGPT: learned positions, pre-norm blocks, final LayerNorm
    and an lm head tied to the token embedding; the loss shifts `labels` as transformers does
    (`labels = input_ids` is right), so it computes exactly `GPT2LMHeadModel`'s function."""

    def __init__(self, vocab: int, context: int, hidden: int, layers: int, heads: int, eps: float = 1e-5):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(context, hidden)
        self.h = nn.ModuleList(NanoBlock(hidden, heads, eps) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying (Press & Wolf, 2017), as GPT-2

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> CausalLMOutput:
        B, T = input_ids.shape
        pos = torch.arange(T, device=input_ids.device)  # (T,)
        x = self.wte(input_ids) + self.wpe(pos)  # (B, T, C)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = None
        if labels is not None:  # predict token t+1 from positions <= t
            loss = F.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
            )
        return CausalLMOutput(loss=loss, logits=logits)

    @classmethod
    def from_gpt2(cls, ref: GPT2LMHeadModel) -> NanoGPT:
        """The same weights as `ref`: GPT-2's Conv1D stores (in, out), an `nn.Linear` (out, in)."""
        cfg = ref.config
        model = cls(
            cfg.vocab_size, cfg.n_positions, cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.layer_norm_epsilon
        )
        state = {}
        for key, value in ref.state_dict().items():
            name = key.removeprefix("transformer.")
            if name.split(".")[-2:-1] in (["c_attn"], ["c_proj"], ["c_fc"]) and name.endswith(".weight"):
                value = value.t()
            state[name] = value
        wanted = model.state_dict().keys()
        missing = [k for k in wanted if k not in state]
        if missing:
            raise ValueError(f"GPT-2 weights missing for the nanoGPT-shaped model: {missing}")
        model.load_state_dict({k: state[k] for k in wanted})
        return model


# --------------------------------------------------------------------------------------------
# Building the models (the same weights everywhere)
# --------------------------------------------------------------------------------------------


def gpt_args(s: dict, seed: int) -> SimpleNamespace:
    """The arguments of a GPT-2-shaped pair (`pairs.gpt_reference_config`)."""
    return SimpleNamespace(
        family="gpt2", vocab=s["gpt_vocab"], context=s["gpt_context"], hidden=s["gpt_hidden"],
        layers=s["gpt_layers"], heads=s["gpt_heads"], intermediate=4 * s["gpt_hidden"], seed=seed,
    )  # fmt: skip


def bert_args(s: dict, seed: int) -> SimpleNamespace:
    return SimpleNamespace(
        vocab=s["bert_vocab"], hidden=s["bert_hidden"], layers=s["bert_layers"], heads=s["bert_heads"],
        intermediate=s["bert_intermediate"], max_positions=s["bert_max_positions"], dropout=0.0, seed=seed,
        batch=s["bert_batch"], seq=s["bert_seq"], pad_fraction=s["bert_pad_fraction"], mask_prob=0.15,
    )  # fmt: skip


def t5_args(s: dict, seed: int) -> SimpleNamespace:
    return SimpleNamespace(
        vocab=s["t5_vocab"], hidden=s["t5_hidden"], layers=s["t5_layers"], heads=s["t5_heads"],
        intermediate=s["t5_intermediate"], max_positions=max(s["t5_source_len"], s["t5_target_len"]),
        seed=seed, batch=s["t5_batch"], source_len=s["t5_source_len"], target_len=s["t5_target_len"],
    )  # fmt: skip


def build_gpt(
    s: dict, seed: int, device: torch.device, dtype: torch.dtype = torch.float32, nanogpt: bool = True
) -> dict:
    """hf_lm, GPT2LMHeadModel and (with `nanogpt`) the nanoGPT-shaped model with one set of
    weights, on `device` in `dtype`."""
    ns = gpt_args(s, seed)
    reference = pairs.build_gpt_reference(ns)
    models = {
        "hf_lm": pairs.build_gpt_hflm(ns),  # the same seeded reference, converted
        "transformers": reference,
    }
    if nanogpt:
        models["nanogpt"] = NanoGPT.from_gpt2(reference)
    return {name: m.to(device=device, dtype=dtype) for name, m in models.items()}


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


# --------------------------------------------------------------------------------------------
# Steps, timing, rows
# --------------------------------------------------------------------------------------------


def make_adamw(params, lr: float) -> tuple[torch.optim.Optimizer, str]:
    """AdamW with the fused implementation (one kernel per step for all tensors), or foreach where
    fused is not supported for these parameters."""
    params = list(params)
    try:
        return torch.optim.AdamW(params, lr=lr, fused=True), "AdamW(fused=True)"
    except (RuntimeError, ValueError) as err:
        return torch.optim.AdamW(params, lr=lr, foreach=True), f"AdamW(foreach=True) (fused refused: {err})"


def make_train_step(
    model: nn.Module, batch: dict, device: torch.device, lr: float, compiled: nn.Module | None
):
    """One training step under bf16 autocast: forward (`compiled` if given, sharing `model`'s
    parameters) with labels, backward, AdamW step, `zero_grad`. `step.optimizer_name` says which AdamW."""
    model.train()
    opt, opt_name = make_adamw(model.parameters(), lr)
    forward = compiled if compiled is not None else model

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = forward(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    step.optimizer_name = opt_name
    return step


def dynamo_counts() -> dict:
    """A copy of Dynamo's global counters (graphs built, graph breaks and their reasons)."""
    from torch._dynamo.utils import counters

    return {key: dict(value) for key, value in counters.items()}


def dynamo_delta(before: dict, after: dict) -> dict:
    """What Dynamo did between two `dynamo_counts()`: graphs compiled, graph breaks, their reasons."""

    def total(counts: dict, key: str, sub: str | None = None) -> int:
        values = counts.get(key, {})
        return int(values.get(sub, 0)) if sub else int(sum(values.values()))

    reasons = []
    for reason, n in after.get("graph_break", {}).items():
        if n > before.get("graph_break", {}).get(reason, 0):
            reasons.append(str(reason).strip().splitlines()[0][:200])
    return {
        "graphs": total(after, "stats", "unique_graphs") - total(before, "stats", "unique_graphs"),
        "graph_breaks": total(after, "graph_break") - total(before, "graph_break"),
        "break_reasons": reasons,
    }


class Rows:
    """Every planned row of the run, by id, in order: filled by the sections, never dropped.

    A row is `{"id", "section", "workload", "implementation", "mode", "unit", "status"}` plus what
    was measured; status is "ok", "error" (with `error`) or "skipped" (with `reason`)."""

    def __init__(self):
        self.rows: dict[str, dict] = {}

    def plan(self, row_id: str, section: str, workload: str, implementation: str, mode: str, unit: str):
        self.rows[row_id] = dict(
            id=row_id, section=section, workload=workload, implementation=implementation, mode=mode,
            unit=unit, status="not run",
        )  # fmt: skip

    def __getitem__(self, row_id: str) -> dict:
        return self.rows[row_id]

    def fail(self, row_id: str, err: BaseException | str) -> None:
        row = self.rows[row_id]
        row["status"], row["error"] = "error", err if isinstance(err, str) else error_text(err)
        print(f"  {row_id}: FAILED: {row['error']}", flush=True)

    def skip_unrun(self, reasons: dict[str, str]) -> None:
        for row in self.rows.values():
            if row["status"] == "not run":
                row["status"] = "skipped"
                row["reason"] = reasons.get(row["section"], "not run")


def first_call(rows: Rows, row_id: str, fn, device: torch.device) -> bool:
    """The first call of a row's workload (where `torch.compile` compiles), timed, with Dynamo's
    counters around it; then one more call for the peak GPU memory above what was allocated before.
    A failure (out of memory, a compiler error) marks the row and returns False."""
    sync = device_synchronizer(device)
    before = dynamo_counts()
    try:
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        rows[row_id]["first_call_s"] = time.perf_counter() - t0
        dynamo = rows[row_id]["dynamo_first_call"] = dynamo_delta(before, dynamo_counts())
        if dynamo["graphs"]:
            print(
                f"  {row_id}: torch.compile built {dynamo['graphs']} graphs with {dynamo['graph_breaks']} graph "
                f"breaks in {rows[row_id]['first_call_s']:.1f} s"
                + "".join(f"\n    break: {r}" for r in dynamo["break_reasons"]),
                flush=True,
            )
        if device.type == "cuda":
            base = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            fn()
            sync()
            rows[row_id]["peak_memory_above_base_bytes"] = torch.cuda.max_memory_allocated(device) - base
    except Exception as err:  # noqa: BLE001  (a failing row is a result; the others go on)
        rows.fail(row_id, err)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return False
    return True


def time_group(rows: Rows, fns: dict, settings: dict, device: torch.device, reps: int, rounds: int) -> dict:
    """First calls, then the alternating rounds of the rows whose first call worked.

    Returns:
        `{row id: [seconds per call, ...]}` for the rows that were timed.
    """
    ok = {row_id: fn for row_id, fn in fns.items() if first_call(rows, row_id, fn, device)}
    if not ok:
        return {}
    before = dynamo_counts()
    try:
        samples = alternating_rounds(ok, rounds, reps, settings["warmup"], device_synchronizer(device))
    except Exception as err:  # noqa: BLE001
        for row_id in ok:
            rows.fail(row_id, f"during the timed rounds: {error_text(err)}")
        return {}
    recompiled = dynamo_delta(before, dynamo_counts())["graphs"]
    for row_id, s in samples.items():
        rows[row_id].update(
            status="ok", median_s=statistics.median(s), min_s=min(s), max_s=max(s), samples_s=s, reps=reps,
            graphs_compiled_while_timed=recompiled,
        )  # fmt: skip
        print(f"  {row_id}: median {1e3 * statistics.median(s):.2f} ms per call", flush=True)
    return samples


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


def gpt_model_flops(model: GPT2LMHeadModel, batch: int, seq: int) -> int:
    """PaLM's model FLOPs of one GPT-2 training step (forward + backward): 6 N + 12 L d T per token,
    N the weights inside matmuls (every 2-D weight but the position table; the token table counts
    once, as the tied lm head)."""
    cfg = model.config
    n = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and "wpe" not in name)
    return analytic_decoder_train_flops(n, cfg.n_layer, cfg.n_embd, batch, seq, fused_attention=False)


def counted_flops(model: nn.Module, batch: dict) -> int:
    """FlopCounterMode's count of one forward + backward on `batch`, from its first row times the
    batch size (every matmul and attention FLOP count is linear in the batch)."""
    B = next(iter(batch.values())).shape[0]
    one = {k: v[:1] for k, v in batch.items()}
    return B * count_train_step_flops(model, one)["total"]


@torch.no_grad()
def logit_check(models: dict, batch: dict, reference: str = "transformers") -> dict:
    """Largest |logit difference| of every implementation against the reference (eval mode, fp32)."""
    logits = {name: m.eval()(**batch).logits.float() for name, m in models.items()}
    scale = logits[reference].abs().max().item()
    diffs = {
        name: (lg - logits[reference]).abs().max().item() for name, lg in logits.items() if name != reference
    }
    for m in models.values():
        m.train()
    return {
        "max_abs_diff": diffs,
        "max_abs_logit": scale,
        "ok": all(d < LOGIT_TOLERANCE for d in diffs.values()),
    }


def random_ids(batch: int, seq: int, vocab: int, seed: int, device: torch.device) -> torch.Tensor:
    """`pairs.random_ids` (drawn on the CPU, so every device gets the same ids) moved to `device`."""
    return pairs.random_ids(batch, seq, vocab, seed).to(device)


def unpadded_head(fn):
    """`fn` with hf_lm's vocabulary projection computing F.linear on the unpadded (V, C) weight, as
    before `VocabProjection.aligned_linear`: the same model, to measure what the padding buys."""

    def run():
        saved, VocabProjection.ALIGN = VocabProjection.ALIGN, 1
        try:
            return fn()
        finally:
            VocabProjection.ALIGN = saved

    run.__dict__.update(fn.__dict__)  # optimizer_name
    return run


def head_loss_fns(ctx: dict, ids: torch.Tensor) -> dict:
    """The lm head + cross-entropy forward and backward alone, on the final hidden states the trunk
    hands over (computed once, detached): hf_lm's (eager and compiled) and GPT2LMHeadModel's."""
    device, V = ctx["device"], ctx["settings"]["gpt_vocab"]
    hf, ref = ctx["gpt_models"]["hf_lm"], ctx["gpt_models"]["transformers"]
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        hidden = {
            "hf_lm": hf.model(input_ids=ids).last_hidden_state,  # (B, T, C)
            "transformers": ref.transformer(input_ids=ids, use_cache=False).last_hidden_state,  # (B, T, C)
        }

    def hf_head_loss(h: torch.Tensor) -> torch.Tensor:
        logits = hf.lm_head(hf.output_projection(h))  # (B, T, V)
        return lm_loss(logits, ids, shift=True)

    def ref_head_loss(h: torch.Tensor) -> torch.Tensor:
        return ref.loss_function(ref.lm_head(h), ids, vocab_size=V)  # (B, T, C) -> (B, T, V) -> loss

    def make(model: nn.Module, head_loss, h: torch.Tensor):
        h = h.detach().clone().requires_grad_(True)

        def fn():
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = head_loss(h)
            loss.backward()
            h.grad = None
            model.zero_grad(set_to_none=True)
            return loss

        return fn

    fns = {
        "gpt2_head_loss/hf_lm/eager": make(hf, hf_head_loss, hidden["hf_lm"]),
        "gpt2_head_loss/hf_lm_unpadded/eager": unpadded_head(make(hf, hf_head_loss, hidden["hf_lm"])),
        "gpt2_head_loss/transformers/eager": make(ref, ref_head_loss, hidden["transformers"]),
    }
    if ctx["compile"]:
        compiled = torch.compile(hf_head_loss, backend=ctx["compile_backend"])
        fns["gpt2_head_loss/hf_lm/compiled"] = make(hf, compiled, hidden["hf_lm"])
    return fns


def run_gpt(rows: Rows, ctx: dict, with_head_loss: bool) -> None:
    """GPT-2 training steps of the three implementations, eager and compiled; with `with_head_loss`
    the head + loss alone too, in the same rounds, as a share of the whole step of the same row."""
    s, device, peak = ctx["settings"], ctx["device"], ctx["peak_flops"]
    B, T = s["gpt_batch"], s["gpt_seq"]
    models = ctx["gpt_models"]
    ids = random_ids(B, T, s["gpt_vocab"], ctx["seed"], device)
    batch = {"input_ids": ids, "labels": ids}
    model_flops = gpt_model_flops(models["transformers"], B, T)
    try:
        counted = counted_flops(models["transformers"], batch)
    except Exception as err:  # noqa: BLE001
        counted = None
        print(f"  FlopCounterMode failed: {error_text(err)}")
    ctx["gpt_flops"] = {"model_flops_per_step": model_flops, "counted_flops_per_step": counted}
    print(
        f"  model FLOPs per step (PaLM 6N + 12LdT) {model_flops / 1e12:.4f} T"
        + (f"; FlopCounterMode {counted / 1e12:.4f} T" if counted else ""),
        flush=True,
    )
    fns = head_loss_fns(ctx, ids) if with_head_loss else {}
    for impl in GPT_IMPLS:
        model = models[impl]
        modes = {"eager": (model, None)}
        if ctx["compile"]:
            # a copy: the compiled and eager rows then train separate parameters and optimizers
            twin = copy.deepcopy(model)
            modes["compiled"] = (twin, torch.compile(twin, backend=ctx["compile_backend"]))
        for mode, (base, compiled) in modes.items():
            step = make_train_step(base, batch, device, s["learning_rate"], compiled)
            rows[f"gpt2_train/{impl}/{mode}"]["optimizer"] = step.optimizer_name
            fns[f"gpt2_train/{impl}/{mode}"] = step
    # the same hf_lm model with the head's product unpadded, eager only (compiled graphs pad it themselves)
    step = make_train_step(copy.deepcopy(models["hf_lm"]), batch, device, s["learning_rate"], None)
    rows["gpt2_train/hf_lm_unpadded/eager"]["optimizer"] = step.optimizer_name
    fns["gpt2_train/hf_lm_unpadded/eager"] = unpadded_head(step)
    samples = time_group(rows, fns, s, device, s["reps"], s["rounds"])
    for row_id in samples:
        row = rows[row_id]
        if row_id.startswith("gpt2_train/"):
            row.update(
                value=B * T / row["median_s"], batch=B, seq=T, model_flops_per_step=model_flops,
                counted_flops_per_step=counted, mfu=model_flops / row["median_s"] / peak if peak else None,
            )  # fmt: skip
            continue
        step_s = _value(rows, row_id.replace("gpt2_head_loss/", "gpt2_train/"), "median_s")
        row.update(
            value=row["median_s"], batch=B, seq=T, vocab=s["gpt_vocab"], step_median_s=step_s,
            share_of_step=ratio(row["median_s"], step_s),
        )  # fmt: skip
    del fns
    if with_head_loss:
        step = make_train_step(copy.deepcopy(models["hf_lm"]), batch, device, s["learning_rate"], None)
        ctx["profile"] = profile_step(step, ctx)


def kernel_time_us(events) -> float:
    """The device's busy time in a profile (microseconds): its kernels' own events. An operator's
    `self_device_time_total` is the time of the kernels it launched, so summing every event's
    would count each kernel twice."""
    from torch.autograd import DeviceType

    return sum(e.self_device_time_total for e in events if e.device_type != DeviceType.CPU)


def profile_step(step, ctx: dict) -> dict:
    """torch.profiler of one hf_lm GPT-2 training step: the operator table (by device time on a GPU)
    and the share of time in operators on tensors with a vocabulary-sized dimension (the head, the
    loss, and the tied embedding's gradient and AdamW update)."""
    from torch.profiler import ProfilerActivity, profile

    device, V = ctx["device"], ctx["settings"]["gpt_vocab"]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    step()  # warm (the AdamW state exists)
    device_synchronizer(device)()
    with profile(activities=activities, record_shapes=True) as prof:
        step()
        device_synchronizer(device)()
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    by_shape = prof.key_averages(group_by_input_shape=True)
    # on a GPU the operators' self device time, whose input shapes are known, over the kernels' time
    if device.type == "cuda":
        total = kernel_time_us(by_shape)
    else:
        total = sum(e.self_cpu_time_total for e in by_shape)
    vocab = sum(getattr(e, attr) for e in by_shape if str(V) in str(e.input_shapes))
    path = Path(ctx["output_dir"]) / "profile_gpt2_hf_lm_train.txt"
    share = vocab / total if total else None
    path.write_text(
        f"hf_lm GPT-2 training step (B={ctx['settings']['gpt_batch']}, T={ctx['settings']['gpt_seq']}, bf16 "
        f"autocast, eager), one step on {device}.\n"
        f"{attr} in operators with a dimension of size V={V} (head, loss, tied embedding's gradient and "
        f"AdamW update): {vocab / 1e3:.1f} ms of {total / 1e3:.1f} ms"
        + (f" ({share:.1%})" if share is not None else "")
        + "\n\n"
        + prof.key_averages().table(sort_by=attr, row_limit=30)
    )
    print(f"  profiler: vocabulary-sized operators take {share:.1%} of {attr}; table in {path}", flush=True)
    return {"path": str(path), "time_attr": attr, "vocab_ops_share": share, "total_us": total}


def run_encoders(rows: Rows, ctx: dict) -> None:
    s, device, peak, seed = ctx["settings"], ctx["device"], ctx["peak_flops"], ctx["seed"]
    compile_encoders = ctx["compile"] and ctx["compile_encoders"]
    # BERT: hf_lm, hf_lm sparse (same weights), BertForMaskedLM
    bns = bert_args(s, seed)
    bert = {
        "hf_lm": pairs.build_bert_hflm(bns, sparse=False),
        "hf_lm_sparse": pairs.build_bert_hflm(bns, sparse=True),
        "transformers": pairs.build_bert_reference(bns),
    }
    bert = {k: m.to(device) for k, m in bert.items()}
    batch = to_device(pairs.mlm_batch(bns, seed), device)
    ctx["checks"]["bert_logits"] = logit_check(
        {k: bert[k] for k in ("hf_lm", "transformers")},
        {k: batch[k] for k in ("input_ids", "attention_mask")},
    )
    positions = s["bert_batch"] * s["bert_seq"]
    t5 = {
        side: (pairs.build_seq2seq_hflm if side == "hf_lm" else pairs.build_seq2seq_reference)(
            "t5", t5_args(s, seed)
        ).to(device)
        for side in ("hf_lm", "transformers")
    }
    t5_batch = to_device(pairs.seq2seq_train_batch(t5_args(s, seed), seed), device)
    ctx["checks"]["t5_logits"] = logit_check(t5, t5_batch)
    tokens = s["t5_batch"] * (s["t5_source_len"] + s["t5_target_len"])
    for family, models, b, units in (("bert", bert, batch, positions), ("t5", t5, t5_batch, tokens)):
        flops = counted_flops(models["transformers"], b)
        fns = {}
        for impl, model in models.items():
            fns[f"{family}_train/{impl}/eager"] = make_train_step(model, b, device, s["learning_rate"], None)
            if compile_encoders and impl != "hf_lm_sparse":
                copy_ = copy.deepcopy(model)
                fns[f"{family}_train/{impl}/compiled"] = make_train_step(
                    copy_, b, device, s["learning_rate"], torch.compile(copy_, backend=ctx["compile_backend"])
                )
        samples = time_group(rows, fns, s, device, s["reps"], s["rounds"])
        for row_id in samples:
            row = rows[row_id]
            row.update(
                value=units / row["median_s"], model_flops_per_step=flops,
                mfu=flops / row["median_s"] / peak if peak else None,
            )  # fmt: skip
        del fns, models
        if device.type == "cuda":
            torch.cuda.empty_cache()


# the decoding rows (implementation/mode) and how each calls generate(): the cache, generate()'s own
# compilation, hf_lm's loop (`custom_generate=static_decode`), sampling (top-k 50, as generate()
# samples by default) instead of greedy search
DECODE_ROWS = {
    "hf_lm/dynamic": dict(static=False, compiled=False),
    "hf_lm/static": dict(static=True, compiled=False),
    "hf_lm/static_compiled": dict(static=True, compiled=True),
    "hf_lm/static_compiled_loop": dict(static=True, compiled=True, loop=True),
    "hf_lm/static_compiled_sample": dict(static=True, compiled=True, sample=True),
    "hf_lm/static_compiled_loop_sample": dict(static=True, compiled=True, loop=True, sample=True),
    "transformers/dynamic": dict(static=False, compiled=False),
    "transformers/static_compiled": dict(static=True, compiled=True),
}


def run_decode(rows: Rows, ctx: dict) -> None:
    s, device, seed = ctx["settings"], ctx["device"], ctx["seed"]
    dtype = DTYPES[s["decode_dtype"]]
    models = build_gpt(s, seed, device, dtype, nanogpt=False)
    hf, ref = models["hf_lm"].eval(), models["transformers"].eval()
    compile_config = CompileConfig(backend=ctx["compile_backend"])
    if ctx["compile_backend"] != "inductor":
        compile_config.mode = None  # modes are Inductor's
    if device.type == "cpu":
        # transformers compiles inside generate only on accelerators unless told to compile everywhere
        compile_config._compile_all_devices = True
    ctx["decode_compile_config"] = {
        **compile_config.to_dict(),
        "_compile_all_devices": compile_config._compile_all_devices,
    }
    ctx["can_compile_fullgraph"] = {
        "hf_lm": type(hf)._can_compile_fullgraph,
        "transformers": type(ref)._can_compile_fullgraph,
    }
    N = s["new_tokens"]

    outputs: dict[str, torch.Tensor] = {}  # row id -> the tokens of its last call

    def gen(
        row_id: str, model, prompt, static: bool, compiled: bool, loop: bool = False, sample: bool = False
    ):
        kwargs = dict(
            attention_mask=torch.ones_like(prompt), max_new_tokens=N, min_new_tokens=N, do_sample=sample,
            pad_token_id=0,
        )  # fmt: skip
        if static:
            kwargs["cache_implementation"] = "static"
            if compiled:
                kwargs["compile_config"] = compile_config
            else:
                kwargs["disable_compile"] = True
        if loop:  # hf_lm's own decoding loop for generate(): no per-step input preparation or sync
            kwargs["custom_generate"] = static_decode

        @torch.no_grad()
        def fn():
            if sample:  # every sampling call draws the same tokens (both loops draw them alike)
                torch.manual_seed(seed + 4)
            out = model.generate(prompt, **kwargs)
            assert out.shape == (prompt.shape[0], prompt.shape[1] + N), out.shape
            outputs[row_id] = out
            return out

        return fn

    graphs = {"hf_lm": 0, "transformers": 0}  # graphs Dynamo built for each model's compiled generate
    for b in (int(x) for x in comma_list(s["decode_batches"])):
        prompt = random_ids(b, s["prompt_len"], s["gpt_vocab"], seed + 3, device)
        fns = {}
        for key, how in DECODE_ROWS.items():
            row_id = f"gpt2_decode_b{b}/{key}"
            fns[row_id] = gen(row_id, hf if key.startswith("hf_lm/") else ref, prompt, **how)
        samples = time_group(rows, fns, s, device, 1, s["decode_rounds"])
        if b == 1:
            compiled = {r: fns[r] for r in samples if "static_compiled" in r and not r.endswith("_sample")}
            ctx["decode_profile"] = profile_decode(compiled, rows, ctx)
        for row_id in samples:
            row = rows[row_id]
            row.update(value=b * N / row["median_s"], batch=b, prompt_len=s["prompt_len"], new_tokens=N)
            if "compiled" in row_id:
                impl = row["implementation"]
                model = hf if impl == "hf_lm" else ref
                graphs[impl] += row["dynamo_first_call"]["graphs"]  # a later batch size may reuse them
                row["compiled"] = hasattr(model, "_compiled_call") and graphs[impl] > 0
                if not row["compiled"]:
                    row["note"] = (
                        "generate did NOT compile the forward (no `_compiled_call` or no graph built)"
                    )
        # tokens: every greedy static row (eager, compiled, hf_lm's loop) must equal its dynamic row
        key = f"gpt2_decode_b{b}"
        check = {}
        for row_key, how in DECODE_ROWS.items():
            impl, other = row_key.split("/")
            if how["static"] and not how.get("sample"):
                dyn, out = outputs.get(f"{key}/{impl}/dynamic"), outputs.get(f"{key}/{row_key}")
                if dyn is not None and out is not None:
                    check[f"{impl} {other} == dynamic"] = bool(torch.equal(dyn.cpu(), out.cpu()))
        # sampling from one seed: static_decode draws what torch.multinomial draws, on this device too
        sampled = "hf_lm static_compiled_loop_sample == static_compiled_sample"
        drawn = [outputs.get(f"{key}/hf_lm/static_compiled{loop}_sample") for loop in ("", "_loop")]
        if all(out is not None for out in drawn):
            check[sampled] = bool(torch.equal(drawn[0].cpu(), drawn[1].cpu()))
        a, r = outputs.get(f"{key}/hf_lm/dynamic"), outputs.get(f"{key}/transformers/dynamic")
        if a is not None and r is not None:
            check["hf_lm vs transformers dynamic agreement (informational)"] = (a == r).float().mean().item()
        identical = [v for k, v in check.items() if "==" in k]
        check["ok"] = all(identical)  # rows that failed to run are reported as failed rows, not here
        ctx["checks"][f"decode_b{b}_tokens"] = check
        for row_id in samples:
            if "/static" in row_id:
                impl, other = row_id.split("/")[1:]
                # a sampling row: whether both sampling rows drew the same tokens (none is dynamic)
                name = sampled if other.endswith("_sample") else f"{impl} {other} == dynamic"
                rows[row_id]["tokens_identical_to_dynamic"] = check.get(name)
        print(f"  B={b}: tokens {check}", flush=True)
        ctx["write_partial"]()  # each batch size takes minutes of compilation on a GPU: keep what it measured


# where a compiled decoding call's host time goes: (file suffix or None, function names) in cProfile
HOST_PARTS = {
    "prepare_inputs_for_generation": (None, ("prepare_inputs_for_generation",)),
    "compiled forward": ("eval_frame.py", ("compile_wrapper", "_fn")),  # torch.compile's wrapper
    "update_model_kwargs": (None, ("_update_model_kwargs_for_generation",)),
    "logits processors": ("logits_process.py", ("__call__",)),
    "stopping criteria": ("stopping_criteria.py", ("__call__",)),
}


def profile_decode(fns: dict, rows: Rows, ctx: dict) -> dict:
    """Profile one call of each compiled static-cache decoding row (B=1): the GPU's busy time (the
    kernels' device time, torch.profiler) against the call's median wall time, and the host's
    Python time by part of `generate()`'s loop (cProfile, which slows Python down: shares, not
    times). The tables go to `profile_gpt2_decode_b1.txt`."""
    import cProfile
    import io
    import pstats

    from torch.profiler import ProfilerActivity, profile

    device, sync = ctx["device"], device_synchronizer(ctx["device"])
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    found, text = {}, []
    for row_id, fn in fns.items():
        sync()
        with profile(activities=activities) as prof:
            fn()
            sync()
        events = prof.key_averages()
        busy_ms = kernel_time_us(events) / 1e3
        graph_launches = sum(e.count for e in events if e.key == "cudaGraphLaunch")
        host = cProfile.Profile()
        host.enable()
        fn()
        sync()
        host.disable()
        stats = pstats.Stats(host)
        total = max(ct for _, _, _, ct, _ in stats.stats.values())
        parts = {}
        for part, (suffix, names) in HOST_PARTS.items():
            cum = [
                ct
                for (file, _, func), (_, _, _, ct, _) in stats.stats.items()
                if func in names and (suffix is None or file.endswith(suffix))
            ]
            parts[part] = max(cum) / total if cum else None
        wall_ms = rows[row_id].get("median_s", float("nan")) * 1e3
        found[row_id] = {
            "wall_ms": wall_ms, "gpu_busy_ms": busy_ms, "cuda_graph_launches": graph_launches,
            "host_share": parts,
        }  # fmt: skip
        table = io.StringIO()
        pstats.Stats(host, stream=table).sort_stats("cumulative").print_stats(40)
        text += [
            f"== {row_id}: median {wall_ms:.1f} ms per call; kernels busy {busy_ms:.1f} ms; "
            f"{graph_launches} CUDA graph launches; host shares (cProfile) {parts}",
            "",
            events.table(sort_by="self_cpu_time_total", row_limit=25),
            "",
            table.getvalue(),
        ]
        print(f"  profile {row_id}: kernels busy {busy_ms:.1f} of {wall_ms:.1f} ms; host {parts}", flush=True)
    path = Path(ctx["output_dir"]) / "profile_gpt2_decode_b1.txt"
    path.write_text("\n".join(text))
    return {"path": str(path), "rows": found}


# --------------------------------------------------------------------------------------------
# Plan, targets, report
# --------------------------------------------------------------------------------------------


def plan_rows(s: dict) -> Rows:
    rows = Rows()
    for mode in ("eager", "compiled"):
        for impl in GPT_IMPLS:
            rows.plan(f"gpt2_train/{impl}/{mode}", "gpt_train", "GPT-2 training step", impl, mode, "tok/s")
        if mode == "eager":
            rows.plan(
                "gpt2_train/hf_lm_unpadded/eager",
                "gpt_train",
                "GPT-2 training step",
                "hf_lm_unpadded",
                mode,
                "tok/s",
            )
    for key in ("hf_lm/eager", "hf_lm_unpadded/eager", "hf_lm/compiled", "transformers/eager"):
        impl, mode = key.split("/")
        rows.plan(
            f"gpt2_head_loss/{key}", "head_loss", "GPT-2 lm head + cross-entropy fwd+bwd", impl, mode, "s"
        )
    for impl in ("hf_lm", "hf_lm_sparse", "transformers"):
        rows.plan(
            f"bert_train/{impl}/eager", "encoders", "BERT masked-LM training step", impl, "eager", "pos/s"
        )
    for impl in ("hf_lm", "transformers"):
        rows.plan(
            f"bert_train/{impl}/compiled",
            "encoders",
            "BERT masked-LM training step",
            impl,
            "compiled",
            "pos/s",
        )
    for mode in ("eager", "compiled"):
        for impl in ("hf_lm", "transformers"):
            rows.plan(f"t5_train/{impl}/{mode}", "encoders", "T5 training step", impl, mode, "tok/s")
    for b in (int(x) for x in comma_list(s["decode_batches"])):
        for key in DECODE_ROWS:
            impl, mode = key.split("/")
            rows.plan(f"gpt2_decode_b{b}/{key}", "decode", f"GPT-2 decoding B={b}", impl, mode, "new tok/s")
    return rows


def _value(rows: Rows, row_id: str, key: str = "value"):
    row = rows.rows.get(row_id)
    return row.get(key) if row and row["status"] == "ok" else None


def targets(rows: Rows, s: dict) -> list[dict]:
    """The issue's targets with the measured values next to them."""
    hf_eager = _value(rows, "gpt2_train/hf_lm/eager")
    dynamic = _value(rows, "gpt2_decode_b1/transformers/dynamic")
    decode_rows = {
        key: rows.rows.get(f"gpt2_decode_b1/hf_lm/{mode}", {})
        for key, mode in (
            ("static_decode_b1", "static_compiled"),
            ("static_decode_b1_loop", "static_compiled_loop"),
        )
    }
    measured = {
        "eager_vs_nanogpt": ratio(hf_eager, _value(rows, "gpt2_train/nanogpt/eager")),
        "eager_vs_transformers": ratio(hf_eager, _value(rows, "gpt2_train/transformers/eager")),
        "compiled_mfu": _value(rows, "gpt2_train/hf_lm/compiled", "mfu"),
        **{key: ratio(row.get("value"), dynamic) for key, row in decode_rows.items()},
    }
    unpadded = ratio(
        _value(rows, "gpt2_train/hf_lm_unpadded/eager"), _value(rows, "gpt2_train/transformers/eager")
    )
    notes = {
        "eager_vs_transformers": ""
        if unpadded is None
        else f"{unpadded:.2f}x with the head's product unpadded",
        "compiled_mfu": f"GPT-2 {s['gpt_layers']} x {s['gpt_hidden']}, vocabulary {s['gpt_vocab']}, "
        f"B={s['gpt_batch']}, T={s['gpt_seq']}, bf16 autocast, "
        "against the bf16 matmul peak measured in this run",
        **{
            key: f"prompt {s['prompt_len']}, {s['new_tokens']} new tokens, {s['decode_dtype']} weights; "
            f"tokens identical: {row.get('tokens_identical_to_dynamic')}; compiled: {row.get('compiled')}"
            for key, row in decode_rows.items()
        },
    }
    out = []
    for t in TARGETS:
        value = measured[t["key"]]
        met = None if value is None else value >= t["threshold"]
        if t["key"] in decode_rows and met:
            row = decode_rows[t["key"]]
            met = bool(row.get("tokens_identical_to_dynamic")) and bool(row.get("compiled"))
        out.append({**t, "measured": value, "met": met, "note": notes.get(t["key"], "")})
    return out


def _num(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, float) and abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if isinstance(value, float) else f"{value:,}"


def _pct(value) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _status(row: dict) -> str:
    if row["status"] == "error":
        return f"failed: {row['error']}"
    if row["status"] == "skipped":
        return f"skipped: {row['reason']}"
    if row["status"] == "not run":
        return "not run (yet)"
    return row.get("note", "")


def _dynamo(row: dict) -> str:
    d = row.get("dynamo_first_call")
    if row["mode"] == "eager" or row["mode"] in ("dynamic", "static") or not d:
        return ""
    text = f"{d['graphs']} graphs, {d['graph_breaks']} breaks"
    if row.get("graphs_compiled_while_timed"):
        text += f"; {row['graphs_compiled_while_timed']} recompiled while timed"
    return text


def _intro_lines(result: dict) -> list[str]:
    """The title, the machine, the peak, the compile backend and the issue's targets."""
    env, acc = result["environment"], result["accelerator"]
    peak = result.get("peak") or {}
    device = acc.get("gpu_name") or f"CPU ({env['cpu_model']})"
    lines = [
        f"# hf_lm GPU speed benchmarks{' (smoke run: tiny sizes, not evidence)' if result['smoke'] else ''}"
        + ("" if result["finished"] else " (UNFINISHED: written after a section, the run went on)"),
        "",
        f"{result['date']}; {device}"
        + (f", CUDA {acc['cuda']}, capability {acc['compute_capability']}" if acc.get("cuda") else "")
        + f"; torch {env['torch']}, transformers {env['transformers']}, Python {env['python']}; hf_lm at "
        f"{result['git']}.",
        "",
        (
            f"Measured bf16 matmul peak: **{peak['peak_flops'] / 1e12:.1f} TFLOP/s** (square torch.mm, n="
            f"{peak['best_size']}; MFU below is against this number)."
            if peak.get("peak_flops")
            else f"Peak probe failed: {peak.get('error')}"
        ),
        "",
        f"torch.compile backend: {result['compile_backend']}"
        + (f" ({result['compile_note']})" if result.get("compile_note") else "")
        + ". Medians of alternating rounds after warm-up; a GPU is synchronized before every clock read.",
        "",
        "## The issue's targets",
        "",
    ]
    body = []
    for t in result["targets"]:
        measured = (
            _pct(t["measured"])
            if t["unit"] == "%"
            else _num(t["measured"], 2) + (" x" if t["measured"] else "")
        )
        threshold = f">= {_pct(t['threshold'])}" if t["unit"] == "%" else f">= {t['threshold']:g} x"
        met = "not measured" if t["met"] is None else ("**met**" if t["met"] else "not met")
        body.append([t["text"], threshold, measured, met, t["note"]])
    lines += [markdown_table(["target", "goal", "measured", "", "conditions"], body, align="lrrll"), ""]

    return lines


def _training_lines(result: dict, table) -> list[str]:
    """The training-step table, the head + loss table and the profiler's line."""
    s = result["settings"]
    lines = [
        f"## Training steps (forward + backward + AdamW, bf16 autocast; GPT-2 B={s['gpt_batch']} T={s['gpt_seq']}, "
        f"BERT B={s['bert_batch']} T={s['bert_seq']}, T5 B={s['t5_batch']} S={s['t5_source_len']} "
        f"T={s['t5_target_len']})",
        "",
        table(
            ("gpt2_train", "bert_train", "t5_train"),
            [
                "workload",
                "implementation",
                "mode",
                "throughput",
                "step ms",
                "MFU",
                "peak GPU MiB",
                "first call s",
                "torch.compile",
                "status",
            ],
            lambda r: [
                r["workload"],
                IMPL_NAMES[r["implementation"]],
                r["mode"],
                f"{_num(r.get('value'))} {r['unit']}" if r.get("value") else "—",
                _num(r["median_s"] * 1e3 if r.get("median_s") else None, 1),
                _pct(r.get("mfu")),
                _num(
                    r["peak_memory_above_base_bytes"] / 2**20
                    if r.get("peak_memory_above_base_bytes")
                    else None,
                    0,
                ),
                _num(r.get("first_call_s"), 1),
                _dynamo(r),
                _status(r),
            ],
            "lllrrrrrll",
        ),  # fmt: skip
        "",
        "## GPT-2 lm head + cross-entropy (forward + backward) against the whole training step",
        "",
        table(
            ("gpt2_head_loss",),
            ["implementation", "mode", "head + loss ms", "whole step ms", "share of step", "status"],
            lambda r: [
                IMPL_NAMES[r["implementation"]],
                r["mode"],
                _num(r["median_s"] * 1e3 if r.get("median_s") else None, 1),
                _num(r["step_median_s"] * 1e3 if r.get("step_median_s") else None, 1),
                _pct(r.get("share_of_step")),
                _status(r),
            ],
            "llrrrl",
        ),  # fmt: skip
        "",
    ]
    prof = result.get("profile")
    if prof:
        lines += [
            f"Profiler (one hf_lm eager step): operators on vocabulary-sized tensors take "
            f"{_pct(prof['vocab_ops_share'])} of {prof['time_attr']}; table in `{Path(prof['path']).name}`.",
            "",
        ]
    return lines


def _decode_profile_lines(prof: dict | None) -> list[str]:
    """One line per profiled compiled decoding row: GPU busy time against wall time, host shares."""
    if not prof:
        return []
    lines = ["Profile of one compiled static-cache call at B=1 (`" + Path(prof["path"]).name + "`):", ""]
    for row_id, p in prof["rows"].items():
        shares = ", ".join(f"{k} {_pct(v)}" for k, v in p["host_share"].items())
        lines.append(
            f"- {row_id}: kernels busy {p['gpu_busy_ms']:.1f} ms of {p['wall_ms']:.1f} ms; "
            f"{p['cuda_graph_launches']} CUDA graph launches; host Python time (cProfile): {shares}"
        )
    return lines + [""]


def _decoding_lines(result: dict, table) -> list[str]:
    """The greedy decoding table, the checks and the command."""
    env, s = result["environment"], result["settings"]
    lines = [
        f"## Decoding (prompt {s['prompt_len']}, {s['new_tokens']} new tokens, {s['decode_dtype']} weights, "
        "prefill included)",
        "",
        "Greedy search, except the `_sample` rows (sampling, top-k 50). Same tokens: a greedy static row's "
        "equal the dynamic cache's; the two `_sample` rows, each from the same seed, equal each other "
        "(hf_lm's loop draws what `torch.multinomial` draws).",
        "",
        table(
            ("gpt2_decode",),
            [
                "workload",
                "implementation",
                "cache / mode",
                "new tok/s",
                "ms / call",
                "same tokens",
                "torch.compile",
                "first call s",
                "status",
            ],
            lambda r: [
                r["workload"],
                IMPL_NAMES[r["implementation"]],
                r["mode"],
                _num(r.get("value")),
                _num(r["median_s"] * 1e3 if r.get("median_s") else None, 1),
                ""
                if "tokens_identical_to_dynamic" not in r
                else ("yes" if r["tokens_identical_to_dynamic"] else "**NO**"),
                _dynamo(r),
                _num(r.get("first_call_s"), 1),
                _status(r),
            ],
            "lllrrllrl",
        ),  # fmt: skip
        "",
        f"`_can_compile_fullgraph`: {result.get('can_compile_fullgraph')}. transformers "
        f"{env['transformers']} compiles inside `generate` whenever the cache is a static one on a GPU "
        "(`_valid_auto_compile_criteria`), whatever that flag says; the CompileConfig used: "
        f"`{result.get('decode_compile_config')}`.",
        "",
        *_decode_profile_lines(result.get("decode_profile")),
        "## Checks",
        "",
        "```",
        json.dumps(result["checks"], indent=1, default=str),
        "```",
        "",
        "## Command",
        "",
        "```",
        result["command"],
        "```",
        "",
    ]
    return lines


def render_markdown(result: dict) -> str:
    rows = {r["id"]: r for r in result["rows"]}

    def table(prefixes, header, cells, align):
        selected = [r for rid, r in rows.items() if rid.startswith(prefixes)]
        return markdown_table(header, [cells(r) for r in selected], align=align)

    lines = _intro_lines(result) + _training_lines(result, table) + _decoding_lines(result, table)
    return "\n".join(lines)


def write_outputs(rows: Rows, ctx: dict, run: dict, final: bool) -> dict:
    """Write bench_gpu.json and bench_gpu.md under the output folder (after every section, so that a
    run stopped by a time limit keeps its finished sections; rows not yet run say so)."""
    checks = ctx["checks"]
    result = {
        "benchmark": "bench_gpu",
        "finished": final,
        "smoke": run["smoke"],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git": git_revision(short=True, dirty_mark=" (with uncommitted changes)", missing="unknown"),
        "command": run["command"],
        "environment": run["environment"],
        "accelerator": run["accelerator"],
        "settings": ctx["settings"],
        "sections": run["sections"],
        "seed": run["seed"],
        "compile_backend": run["compile_backend"],
        "compile_note": run["compile_note"],
        "peak": run["peak"],
        "gpt_flops": ctx.get("gpt_flops"),
        "profile": ctx.get("profile"),
        "decode_profile": ctx.get("decode_profile"),
        "decode_compile_config": ctx.get("decode_compile_config"),
        "can_compile_fullgraph": ctx.get("can_compile_fullgraph"),
        "checks": checks,
        "checks_ok": all(c.get("ok", True) for c in checks.values()),
        "section_failures": run["failures"],
        "rows": list(rows.rows.values()),
        "targets": targets(rows, ctx["settings"]),
        "total_seconds": time.perf_counter() - run["start"],
    }
    output_dir = Path(ctx["output_dir"])
    (output_dir / "bench_gpu.json").write_text(json.dumps(result, indent=2, default=str))
    (output_dir / "bench_gpu.md").write_text(render_markdown(result))
    return result


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--device", choices=DEVICE_CHOICES, default="auto", help="auto: CUDA if available (default)"
    )
    p.add_argument("--smoke", action="store_true", help="every section at tiny sizes, any device (CI)")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    p.add_argument("--no_compile", action="store_true", help="skip every torch.compile row")
    p.add_argument(
        "--compile_encoders",
        action="store_true",
        help="also compile BERT and T5 (minutes of compilation on a GPU; tens of seconds of tracing on a CPU)",
    )
    p.add_argument(
        "--compile_backend",
        default=None,
        help="torch.compile backend (default: inductor; eager for a CPU smoke run)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--output_dir", default="out/bench_gpu")
    add_preset_options(p, PRESETS, HELP)
    return p


def validate(s: dict) -> None:
    """Raise ValueError naming the setting that cannot work."""
    if s["gpt_seq"] > s["gpt_context"] or s["prompt_len"] + s["new_tokens"] > s["gpt_context"]:
        raise ValueError(
            "`gpt_seq` and `prompt_len` + `new_tokens` must fit in `gpt_context` (learned positions)."
        )
    if s["bert_seq"] > s["bert_max_positions"]:
        raise ValueError("`bert_seq` must fit in `bert_max_positions`.")
    for name in ("gpt", "bert", "t5"):
        if s[f"{name}_hidden"] % s[f"{name}_heads"]:
            raise ValueError(f"`{name}_hidden` must be divisible by `{name}_heads`.")
    if s["decode_dtype"] not in DTYPES:
        raise ValueError(f"`decode_dtype` must be one of {list(DTYPES)}, got {s['decode_dtype']!r}.")
    for name in ("rounds", "reps", "decode_rounds"):
        if s[name] < 1:
            raise ValueError(f"`{name}` must be at least 1.")
    if not comma_list(s["decode_batches"]) or not comma_list(s["peak_sizes"]):
        raise ValueError("`decode_batches` and `peak_sizes` must name at least one size.")


def probe_peak(settings: dict, seed: int, device: torch.device, ctx: dict) -> dict:
    """The bf16 matmul peak this run's MFU is measured against (also into `ctx["peak_flops"]`);
    `{"error": ...}` where the probe fails."""
    print("bf16 matmul peak ...", flush=True)
    try:
        peak = measure_peak_flops(
            tuple(int(n) for n in comma_list(settings["peak_sizes"])), settings["peak_repeats"],
            settings["peak_min_time"], dtype=torch.bfloat16, seed=seed, device=device,
        )  # fmt: skip
        ctx["peak_flops"] = peak["peak_flops"]
        print(f"  {peak['peak_flops'] / 1e12:.2f} TFLOP/s (n={peak['best_size']})", flush=True)
    except Exception as err:  # noqa: BLE001
        peak = {"error": error_text(err)}
        print(f"  peak probe failed: {peak['error']}", flush=True)
    return peak


def run_sections(rows: Rows, ctx: dict, run: dict, sections: list[str]) -> None:
    """Run the selected sections in turn; a broken section fails its rows (`run["failures"]`)
    and the others go on. The outputs are rewritten after each section."""
    settings, seed, device = ctx["settings"], ctx["seed"], ctx["device"]
    failures = run["failures"]
    if {"gpt_train", "head_loss"} & set(sections):
        ctx["gpt_models"] = build_gpt(settings, seed, device)
        n_params = sum(p.numel() for p in ctx["gpt_models"]["hf_lm"].parameters())
        print(f"GPT-2 models built ({n_params / 1e6:.1f}M parameters each)", flush=True)
        check_ids = random_ids(2, min(64, settings["gpt_seq"]), settings["gpt_vocab"], seed + 1, device)
        ctx["checks"]["gpt2_logits"] = logit_check(ctx["gpt_models"], {"input_ids": check_ids})
        print(f"  logits vs GPT2LMHeadModel: {ctx['checks']['gpt2_logits']}", flush=True)
    ctx["write_partial"] = lambda: write_outputs(rows, ctx, run, final=False)
    runners = {
        "gpt_train": lambda rows, ctx: run_gpt(rows, ctx, with_head_loss="head_loss" in sections),
        "encoders": run_encoders,
        "decode": run_decode,
    }
    for section in runners:
        if section not in sections and not (section == "gpt_train" and "head_loss" in sections):
            continue
        print(
            f"== {section}" + (" (+ head_loss)" if section == "gpt_train" and "head_loss" in sections else "")
        )
        # each section starts with Dynamo's caches empty: code objects compiled earlier in the process
        # (another section, or whatever ran before main()) count towards its recompile limit, past
        # which it silently runs eagerly and a "compiled" row would build no graph
        torch._dynamo.reset()
        t0 = time.perf_counter()
        try:
            runners[section](rows, ctx)
        except Exception as err:  # noqa: BLE001  (a broken section must not lose the others)
            traceback.print_exc()
            failures[section] = error_text(err)
            covered = {section, "head_loss"} if section == "gpt_train" else {section}
            for row in rows.rows.values():
                if row["section"] in covered and row["status"] == "not run":
                    rows.fail(row["id"], f"section failed: {failures[section]}")
        print(f"   {section} done in {time.perf_counter() - t0:.0f} s", flush=True)
        write_outputs(rows, ctx, run, final=False)  # a run cut short keeps what it measured
        if section == "gpt_train":
            ctx.pop("gpt_models", None)  # free the GPU for the next sections
        if device.type == "cuda":
            torch.cuda.empty_cache()


def skip_unrun(rows: Rows, sections: list[str], no_compile: bool) -> None:
    """Give every row that did not run its reason: section not selected, compilation off."""
    reasons = {
        section: "section not selected (--sections)" for section in SECTIONS if section not in sections
    }
    if no_compile:
        for row in rows.rows.values():
            if "compiled" in row["mode"] and row["status"] == "not run":
                row.update(status="skipped", reason="--no_compile")
    for row in rows.rows.values():
        if row["section"] == "encoders" and row["mode"] == "compiled" and row["status"] == "not run":
            if "encoders" in sections:
                row.update(status="skipped", reason="BERT/T5 compilation is off (--compile_encoders)")
    rows.skip_unrun(reasons)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    sections = comma_list(args.sections)
    if not sections or set(sections) - set(SECTIONS):
        parser.error(f"--sections must be a comma-separated subset of {SECTIONS}, got {args.sections!r}")
    try:
        device = torch.device(resolve_device(args.device))
    except ValueError as err:
        parser.error(str(err))
    if device.type != "cuda" and not args.smoke and args.device != "cpu":
        print(
            "bench_gpu.py measures GPU speed and needs CUDA, but torch sees no CUDA GPU: nothing measured. "
            "Run it on a GPU machine, or with --smoke (tiny sizes, any device) or --device cpu (full sizes on "
            "the CPU, very slow)."
        )
        return 0
    settings = resolve(args, PRESETS["smoke" if args.smoke else "full"])
    try:
        validate(settings)
    except ValueError as err:
        parser.error(str(err))
    backend = args.compile_backend or ("eager" if args.smoke and device.type == "cpu" else "inductor")
    compile_note = None
    if backend == "eager":
        compile_note = (
            "Dynamo traces the models (graphs and graph breaks are real) but no code is generated: the "
            "compiled rows exercise the code path and say nothing about compiled speed"
        )
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    env = environment(torch.get_num_threads())
    acc = accelerator_info(device)
    print(environment_line(env), flush=True)
    print(
        f"device: {acc.get('gpu_name', device)}; sections {sections}; compile backend {backend}", flush=True
    )
    if compile_note:
        print(f"note: torch.compile(backend='eager') on the CPU smoke run: {compile_note}.", flush=True)

    ctx = dict(
        settings=settings, device=device, seed=args.seed, output_dir=output_dir, checks={}, peak_flops=None,
        compile=not args.no_compile, compile_encoders=args.compile_encoders,
        compile_backend=backend,
    )  # fmt: skip
    rows = plan_rows(settings)
    command = command_line(__spec__.name, argv)
    run = dict(
        smoke=args.smoke, command=command, environment=env, accelerator=acc, sections=sections, seed=args.seed,
        compile_backend=backend, compile_note=compile_note, start=start, failures={},
    )  # fmt: skip

    run["peak"] = probe_peak(settings, args.seed, device, ctx)
    run_sections(rows, ctx, run, sections)
    skip_unrun(rows, sections, args.no_compile)

    result = write_outputs(rows, ctx, run, final=True)
    print("\n" + render_markdown(result))
    print(
        f"wrote {output_dir / 'bench_gpu.json'} and {output_dir / 'bench_gpu.md'} in {result['total_seconds']:.0f} s"
    )
    failed = [row["id"] for row in result["rows"] if row["status"] == "error"]
    if failed:
        print(f"Rows failed (see their status): {failed}.")
    if not result["checks_ok"]:
        print("A CORRECTNESS CHECK FAILED (see ## Checks).")
    return 1 if failed or not result["checks_ok"] else 0


if __name__ == "__main__":
    sys.exit(main())
