#!/usr/bin/env python
"""hf_lm on one GPU, within a time budget: the entries of `benchmarks/gpu_entries.py`, section by section.

    python -m benchmarks.gpu --budget_s 900 --nanogpt_dir ~/nanoGPT     # every section in turn
    python -m benchmarks.gpu --sections train,decode --output_dir out/gpu
    python -m benchmarks.gpu --entries recipe_hf_lm_rope_1500_steps,decode_b8
    python -m benchmarks.gpu --measure gpt_train,head_loss --set gpt_batch=32   # one measurement, in process
    python -m benchmarks.gpu --smoke                                    # every entry at tiny size on the CPU

Each entry is a subprocess stopped at min(its limit, what is left of `--budget_s`); `--measure` (what
the train, decode and encoders entries run) times hf_lm against transformers and a nanoGPT-shaped
model on the same weights. The sections, the rows and the figures: docs/benchmarks.md, "On a GPU".
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import pickle
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn
from transformers import CompileConfig, GPT2LMHeadModel
from transformers.modeling_outputs import CausalLMOutput

from benchmarks import gpu_entries as spec
from benchmarks import measure
from benchmarks import speed_entries as pairs
from benchmarks.render import table, write_results
from hf_lm.generation_static import static_decode
from hf_lm.models.hflm_layers import VocabProjection
from hf_lm.models.hflm_losses import lm_loss

logger = logging.getLogger("benchmarks.gpu")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = REPO_ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
MULTI30K = REPO_ROOT.parent / "shared" / "data" / "multi30k"
MEASURED = ("gpt_train", "head_loss", "encoders", "decode")
MIN_ENTRY_S = 5.0  # an entry is not started with less time left than this
LOGIT_TOLERANCE = 1e-3  # fp32, same weights: differences come from kernel order and GELU's formula only


class NanoBlock(nn.Module):
    """nanoGPT's pre-norm block, under its module names: one fused q/k/v matmul and SDPA, then GPT-2's
    tanh-GELU MLP."""

    def __init__(self, d: int, heads: int, eps: float):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
        self.attn = nn.ModuleDict(dict(c_attn=nn.Linear(d, 3 * d), c_proj=nn.Linear(d, d)))
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(d, 4 * d), c_proj=nn.Linear(4 * d, d)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        qkv = self.attn.c_attn(self.ln_1(x)).split(C, 2)
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in qkv)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        x = x + self.attn.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class NanoGPT(nn.Module):
    """GPT-2 in the shape of Karpathy's nanoGPT (learned positions, tied head): the side-by-side
    reference of "eager >= nanoGPT"; its loss shifts `labels` as `GPT2LMHeadModel`'s does."""

    def __init__(self, vocab: int, context: int, hidden: int, layers: int, heads: int, eps: float = 1e-5):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(context, hidden)
        self.h = nn.ModuleList(NanoBlock(hidden, heads, eps) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying (Press & Wolf, 2017), as GPT-2

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> CausalLMOutput:
        x = self.wte(input_ids) + self.wpe(torch.arange(input_ids.shape[1], device=input_ids.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = None
        if labels is not None:  # predict token t+1 from positions <= t
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
        return CausalLMOutput(loss=loss, logits=logits)

    @classmethod
    def from_gpt2(cls, ref: GPT2LMHeadModel) -> NanoGPT:
        """`ref`'s weights, under the same names (a KeyError names a missing one): GPT-2's Conv1D stores
        (in, out), an `nn.Linear` (out, in)."""
        c = ref.config
        model = cls(c.vocab_size, c.n_positions, c.n_embd, c.n_layer, c.n_head, c.layer_norm_epsilon)
        state = {key.removeprefix("transformer."): value for key, value in ref.state_dict().items()}
        conv = ("c_attn.weight", "c_proj.weight", "c_fc.weight")
        model.load_state_dict({k: state[k].t() if k.endswith(conv) else state[k] for k in model.state_dict()})
        return model


def plan_rows(s: dict) -> dict[str, dict]:
    """Every row a measurement can fill, by id (`workload/implementation/mode`), status "not run"."""
    decode = [(f"gpt2_decode_b{b}", "decode", f"GPT-2 decoding B={b}", "new tok/s", spec.DECODE_ROWS)
              for b in s["decode_batches"]]  # fmt: skip
    rows = {}
    for prefix, section, workload, unit, keys in spec.PLAN + decode:
        for key in keys:
            impl, mode = key.split("/")
            rows[f"{prefix}/{key}"] = dict(id=f"{prefix}/{key}", section=section, workload=workload,
                                           implementation=impl, mode=mode, unit=unit, status="not run")  # fmt: skip
    return rows


def fail(rows: dict, row_id: str, err: BaseException | str) -> None:
    row = rows[row_id]
    row["status"], row["error"] = "error", err if isinstance(err, str) else measure.error_text(err)
    logger.error("  %s: FAILED: %s", row_id, row["error"])


def dynamo_counts() -> dict:
    from torch._dynamo.utils import counters

    return {key: dict(value) for key, value in counters.items()}


def dynamo_delta(before: dict, after: dict) -> dict:
    """What Dynamo did between two `dynamo_counts()`: graphs compiled, graph breaks, their reasons."""
    graphs = after.get("stats", {}).get("unique_graphs", 0) - before.get("stats", {}).get("unique_graphs", 0)
    breaks_before, breaks = before.get("graph_break", {}), after.get("graph_break", {})
    reasons = [str(r).strip().splitlines()[0][:200] for r, n in breaks.items() if n > breaks_before.get(r, 0)]
    breaks_n = sum(breaks.values()) - sum(breaks_before.values())
    return {"graphs": int(graphs), "graph_breaks": int(breaks_n), "break_reasons": reasons}


def first_call(rows: dict, row_id: str, fn, device: torch.device) -> bool:
    """The first call (where `torch.compile` compiles), timed, with Dynamo's counters; on a GPU one
    more call for the peak memory. A failure (out of memory, compiler error) marks the row: False."""
    sync, row, before = measure.device_synchronizer(device), rows[row_id], dynamo_counts()
    try:
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        row["first_call_s"] = time.perf_counter() - t0
        dynamo = row["dynamo_first_call"] = dynamo_delta(before, dynamo_counts())
        if dynamo["graphs"]:
            logger.info("  %s: torch.compile built %d graphs with %d graph breaks in %.1f s %s", row_id,
                        dynamo["graphs"], dynamo["graph_breaks"], row["first_call_s"], dynamo["break_reasons"])  # fmt: skip
        if device.type == "cuda":
            base = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            fn()
            sync()
            row["peak_memory_above_base_bytes"] = torch.cuda.max_memory_allocated(device) - base
    except Exception as err:  # noqa: BLE001  (a failing row is a result; the others go on)
        fail(rows, row_id, err)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return False
    return True


def time_group(rows: dict, fns: dict, settings: dict, device: torch.device, reps: int, rounds: int) -> dict:
    """First calls, then alternating rounds of the rows whose first call worked: `{row id: [s, ...]}`."""
    ok = {row_id: fn for row_id, fn in fns.items() if first_call(rows, row_id, fn, device)}
    if not ok:
        return {}
    before = dynamo_counts()
    try:
        sync = measure.device_synchronizer(device)
        samples = measure.alternating_rounds(ok, rounds, reps, settings["warmup"], sync)
    except Exception as err:  # noqa: BLE001
        for row_id in ok:
            fail(rows, row_id, f"during the timed rounds: {measure.error_text(err)}")
        return {}
    recompiled = dynamo_delta(before, dynamo_counts())["graphs"]
    for row_id, s in samples.items():
        rows[row_id].update(status="ok", median_s=statistics.median(s), min_s=min(s), max_s=max(s), samples_s=s,
                            reps=reps, graphs_compiled_while_timed=recompiled)  # fmt: skip
        logger.info("  %s: median %.2f ms per call", row_id, 1e3 * statistics.median(s))
    return samples


def make_step(model: nn.Module, loss_fn, device: torch.device, lr: float | None = None, inputs=()):
    """One bf16-autocast step: `loss_fn()` (which may run a compiled twin sharing `model`'s parameters),
    backward, with `lr` a fused AdamW update, then the gradients of `model` and of `inputs` cleared."""
    model.train()
    opt = None if lr is None else torch.optim.AdamW(model.parameters(), lr=lr, fused=True)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn()
        loss.backward()
        if opt is not None:
            opt.step()
        model.zero_grad(set_to_none=True)
        for tensor in inputs:
            tensor.grad = None
        return loss

    return step


def train_step(model: nn.Module, batch: dict, device: torch.device, lr: float, forward=None):
    """A training step of `model` on `batch`: `forward` (default `model`) and a fused AdamW update."""
    forward = model if forward is None else forward
    return make_step(model, lambda: forward(**batch).loss, device, lr)


def unpadded_head(fn):
    """`fn` with hf_lm's head product on the unpadded (V, C) weight: what the padding buys."""
    return mock.patch.object(VocabProjection, "ALIGN", 1)(fn)


def kernel_time_us(events) -> float:
    """The device's busy time in a profile: its kernels' own events (an operator's self device time
    repeats its kernels')."""
    from torch.autograd import DeviceType

    return sum(e.self_device_time_total for e in events if e.device_type != DeviceType.CPU)


def profiled(fn, device: torch.device, **options):
    """torch.profiler's record of one call of `fn` (with a GPU's kernels), the device synchronized."""
    from torch.profiler import ProfilerActivity, profile

    sync, activities = measure.device_synchronizer(device), [ProfilerActivity.CPU]
    sync()
    with profile(
        activities=activities + [ProfilerActivity.CUDA] * (device.type == "cuda"), **options
    ) as prof:
        fn()
        sync()
    return prof


@torch.no_grad()
def logit_check(models: dict, batch: dict, reference: str = "transformers") -> dict:
    """Largest |logit difference| of every implementation against the reference (eval mode, fp32)."""
    logits = {name: m.eval()(**batch).logits.float() for name, m in models.items()}
    diffs = {n: (lg - logits[reference]).abs().max().item() for n, lg in logits.items() if n != reference}
    for m in models.values():
        m.train()
    ok = all(d < LOGIT_TOLERANCE for d in diffs.values())
    return {"max_abs_diff": diffs, "max_abs_logit": logits[reference].abs().max().item(), "ok": ok}


def counted_flops(model: nn.Module, batch: dict) -> int:
    """FlopCounterMode's count of one forward + backward, from the batch's first row (linear in B)."""
    B = next(iter(batch.values())).shape[0]
    return B * measure.count_train_step_flops(model, {k: v[:1] for k, v in batch.items()})["total"]


def gpt_model_flops(model: GPT2LMHeadModel, batch: int, seq: int) -> int:
    """PaLM's model FLOPs of one GPT-2 training step: 6 N + 12 L d T per token (N: 2-D weights but
    the position table; the tied token table once)."""
    cfg = model.config
    n = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and "wpe" not in name)
    return measure.analytic_decoder_train_flops(n, cfg.n_layer, cfg.n_embd, batch, seq, fused_attention=False)


def sizes(s: dict, prefix: str, seed: int, **extra) -> argparse.Namespace:
    """The sizes `{prefix}_*` of `s` under their short names, as `speed_entries`' builders take them."""
    o = {"family": prefix, "seed": seed, "dropout": 0.0, "mask_prob": 0.15, **extra}
    return argparse.Namespace(
        **{k.removeprefix(f"{prefix}_"): v for k, v in s.items() if k.startswith(prefix)}, **o
    )


def gpt_models(s: dict, seed: int, device: torch.device, dtype=torch.float32, nanogpt: bool = True) -> dict:
    """hf_lm, GPT2LMHeadModel and (with `nanogpt`) the nanoGPT-shaped model, one set of weights."""
    o = sizes(s, "gpt", seed, family="gpt2", intermediate=4 * s["gpt_hidden"])
    reference = pairs.build_reference("gpt2", o)
    models = {"hf_lm": pairs.build_hflm("gpt2", o), "transformers": reference}  # the reference, converted
    if nanogpt:
        models["nanogpt"] = NanoGPT.from_gpt2(reference)
    return {name: m.to(device=device, dtype=dtype) for name, m in models.items()}


def time_train(rows: dict, ctx: dict, fns: dict, units: int, flops: int, **extra) -> dict:
    """`time_group` of training steps (and of `fns`' other rows); a step's row gets its throughput
    (`units` per step) and its MFU (`flops` per step against the measured peak)."""
    s, peak = ctx["settings"], ctx["peak_flops"]
    samples = time_group(rows, fns, s, ctx["device"], s["reps"], s["rounds"])
    for row_id in samples:
        if "_train/" in row_id:
            row = rows[row_id]
            mfu = flops / row["median_s"] / peak if peak else None
            row.update(value=units / row["median_s"], model_flops_per_step=flops, mfu=mfu, **extra)
    return samples


def head_loss_fns(ctx: dict, models: dict, ids: torch.Tensor) -> dict:
    """The lm head + cross-entropy forward and backward alone, on the trunk's final hidden states
    (computed once, detached): hf_lm's (eager and compiled) and GPT2LMHeadModel's."""
    device, V = ctx["device"], ctx["settings"]["gpt_vocab"]
    hf, ref = models["hf_lm"], models["transformers"]
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        hf_hidden = hf.model(input_ids=ids).last_hidden_state  # (B, T, C)
        ref_hidden = ref.transformer(input_ids=ids, use_cache=False).last_hidden_state

    def hf_head_loss(h):
        return lm_loss(hf.lm_head(hf.output_projection(h)), ids, shift=True)

    def ref_head_loss(h):
        return ref.loss_function(ref.lm_head(h), ids, vocab_size=V)

    def make(model: nn.Module, head_loss, hidden: torch.Tensor):
        h = hidden.detach().clone().requires_grad_(True)
        return make_step(model, lambda: head_loss(h), device, inputs=(h,))

    fns = {
        "gpt2_head_loss/hf_lm/eager": make(hf, hf_head_loss, hf_hidden),
        "gpt2_head_loss/hf_lm_unpadded/eager": unpadded_head(make(hf, hf_head_loss, hf_hidden)),
        "gpt2_head_loss/transformers/eager": make(ref, ref_head_loss, ref_hidden),
    }
    if ctx["compile"]:
        compiled = torch.compile(hf_head_loss, backend=ctx["compile_backend"])
        fns["gpt2_head_loss/hf_lm/compiled"] = make(hf, compiled, hf_hidden)
    return fns


def run_gpt(rows: dict, ctx: dict) -> None:
    """GPT-2 training steps of the three implementations, eager and compiled; with `head_loss` the
    head + loss alone too, in the same rounds, as a share of the same row's step."""
    s, device, seed = ctx["settings"], ctx["device"], ctx["seed"]
    B, T, lr = s["gpt_batch"], s["gpt_seq"], s["learning_rate"]
    with_head_loss = "head_loss" in ctx["sections"]
    models = gpt_models(s, seed, device)
    check_ids = pairs.random_ids(2, min(64, T), s["gpt_vocab"], seed + 1).to(device)  # drawn on the CPU
    ctx["checks"]["gpt2_logits"] = logit_check(models, {"input_ids": check_ids})
    ids = pairs.random_ids(B, T, s["gpt_vocab"], seed).to(device)
    batch = {"input_ids": ids, "labels": ids}
    model_flops = gpt_model_flops(models["transformers"], B, T)
    try:
        counted = counted_flops(models["transformers"], batch)
    except Exception as err:  # noqa: BLE001
        counted = None
        logger.warning("  FlopCounterMode failed: %s", measure.error_text(err))
    ctx["gpt_flops"] = {"model_flops_per_step": model_flops, "counted_flops_per_step": counted}
    fns = head_loss_fns(ctx, models, ids) if with_head_loss else {}
    for impl in spec.GPT_IMPLS:
        fns[f"gpt2_train/{impl}/eager"] = train_step(models[impl], batch, device, lr)
        if ctx["compile"]:  # a copy: the compiled and eager rows train their own parameters
            twin = copy.deepcopy(models[impl])
            compiled = torch.compile(twin, backend=ctx["compile_backend"])
            fns[f"gpt2_train/{impl}/compiled"] = train_step(twin, batch, device, lr, compiled)
    # the same hf_lm model with the head's product unpadded, eager only (compiled graphs pad it themselves)
    step = train_step(copy.deepcopy(models["hf_lm"]), batch, device, lr)
    fns["gpt2_train/hf_lm_unpadded/eager"] = unpadded_head(step)
    extra = dict(batch=B, seq=T, counted_flops_per_step=counted, optimizer="AdamW(fused=True)")
    for row_id in time_train(rows, ctx, fns, B * T, model_flops, **extra):
        if row_id.startswith("gpt2_head_loss/"):
            row, step_s = rows[row_id], value(rows, row_id.replace("_head_loss/", "_train/"), "median_s")
            row.update(value=row["median_s"], batch=B, seq=T, vocab=s["gpt_vocab"], step_median_s=step_s,
                       share_of_step=measure.ratio(row["median_s"], step_s))  # fmt: skip
    del fns
    if with_head_loss:
        ctx["profile"] = profile_step(train_step(copy.deepcopy(models["hf_lm"]), batch, device, lr), ctx)


def profile_step(step, ctx: dict) -> dict:
    """torch.profiler of one hf_lm GPT-2 training step: the operator table and the share of time in
    operators on vocabulary-sized tensors (head, loss, tied embedding's gradient and AdamW update)."""
    device, s = ctx["device"], ctx["settings"]
    cuda = device.type == "cuda"
    step()  # warm (the AdamW state exists)
    prof = profiled(step, device, record_shapes=True)
    attr = "self_device_time_total" if cuda else "self_cpu_time_total"
    by_shape = prof.key_averages(group_by_input_shape=True)
    total = kernel_time_us(by_shape) if cuda else sum(e.self_cpu_time_total for e in by_shape)
    vocab = sum(getattr(e, attr) for e in by_shape if str(s["gpt_vocab"]) in str(e.input_shapes))
    share = vocab / total if total else None
    path = Path(ctx["output_dir"]) / "profile_gpt2_hf_lm_train.txt"
    path.write_text(
        f"hf_lm GPT-2 training step (B={s['gpt_batch']}, T={s['gpt_seq']}, bf16 autocast, eager), one step on "
        f"{device}.\n{attr} in operators with a dimension of size V={s['gpt_vocab']} (head, loss, tied "
        f"embedding's gradient and AdamW update): {vocab / 1e3:.1f} ms of {total / 1e3:.1f} ms"
        + (f" ({share:.1%})" if share is not None else "") + "\n\n"
        + prof.key_averages().table(sort_by=attr, row_limit=30)
    )  # fmt: skip
    return {"path": str(path), "time_attr": attr, "vocab_ops_share": share, "total_us": total}


def run_encoders(rows: dict, ctx: dict) -> None:
    """BERT (hf_lm, hf_lm sparse, BertForMaskedLM) and T5 training steps, eager."""
    s, device = ctx["settings"], ctx["device"]
    for family in ("bert", "t5"):
        o = sizes(s, family, ctx["seed"])
        models = {side: pairs.build_side(family, side, o).to(device) for side in pairs.sides(family)}
        batch, units, _, _ = pairs.train_batch(family, o)
        batch = {k: v.to(device) for k, v in batch.items()}
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask")} if family == "bert" else batch
        pair = {k: models[k] for k in ("hf_lm", "transformers")}
        ctx["checks"][f"{family}_logits"] = logit_check(pair, inputs)
        flops = counted_flops(models["transformers"], batch)
        fns = {f"{family}_train/{k}/eager": train_step(m, batch, device, s["learning_rate"])
               for k, m in models.items()}  # fmt: skip
        time_train(rows, ctx, fns, units, flops)
        del fns, models, pair
        if device.type == "cuda":
            torch.cuda.empty_cache()


def decode_fn(models: dict, prompt, outputs: dict, row_id: str, ctx: dict):
    """One `generate()` call of a decoding row, as its mode says (`gpu_entries.DECODE_ROWS`); its tokens
    go to `outputs[row_id]`."""
    _, impl, mode = row_id.split("/")
    N, sample = ctx["settings"]["new_tokens"], mode.endswith("_sample")
    kwargs = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=N, min_new_tokens=N, do_sample=sample,
                  pad_token_id=0)  # fmt: skip
    if mode.startswith("static"):
        compiled = (
            {"compile_config": ctx["compile_config"]} if "compiled" in mode else {"disable_compile": True}
        )
        kwargs.update(cache_implementation="static", **compiled)
    if "_loop" in mode:  # hf_lm's own decoding loop for generate(): no per-step input preparation or sync
        kwargs["custom_generate"] = static_decode

    @torch.no_grad()
    def fn():
        if sample:  # every sampling call draws the same tokens (both loops draw them alike)
            torch.manual_seed(ctx["seed"] + 4)
        out = models[impl].generate(prompt, **kwargs)
        assert out.shape == (prompt.shape[0], prompt.shape[1] + N), out.shape
        outputs[row_id] = out
        return out

    return fn


def token_check(outputs: dict, key: str) -> dict:
    """Every greedy static row's tokens against its dynamic row's; both sampling loops' against each other."""
    check = {}
    for row_key in spec.DECODE_ROWS:
        impl, mode = row_key.split("/")
        dyn, out = outputs.get(f"{key}/{impl}/dynamic"), outputs.get(f"{key}/{row_key}")
        if mode.startswith("static") and not mode.endswith("_sample") and dyn is not None and out is not None:
            check[f"{impl} {mode} == dynamic"] = bool(torch.equal(dyn.cpu(), out.cpu()))
    drawn = [outputs.get(f"{key}/hf_lm/static_compiled{loop}_sample") for loop in ("", "_loop")]
    if all(out is not None for out in drawn):
        check[spec.SAMPLED] = bool(torch.equal(drawn[0].cpu(), drawn[1].cpu()))
    a, r = outputs.get(f"{key}/hf_lm/dynamic"), outputs.get(f"{key}/transformers/dynamic")
    if a is not None and r is not None:
        check["hf_lm vs transformers dynamic agreement (informational)"] = (a == r).float().mean().item()
    check["ok"] = all(v for k, v in check.items() if "==" in k)  # rows that failed to run say so themselves
    return check


def run_decode(rows: dict, ctx: dict) -> None:
    """Decoding at each batch size, written after each (its compilation takes minutes on a GPU)."""
    s, device = ctx["settings"], ctx["device"]
    models = gpt_models(s, ctx["seed"], device, getattr(torch, s["decode_dtype"]), nanogpt=False)
    hf, ref = models["hf_lm"].eval(), models["transformers"].eval()
    config = ctx["compile_config"] = CompileConfig(backend=ctx["compile_backend"])
    if ctx["compile_backend"] != "inductor":
        config.mode = None  # modes are Inductor's
    # transformers compiles inside generate only on accelerators unless told to compile everywhere
    config._compile_all_devices = device.type == "cpu" or None
    ctx["decode_compile_config"] = {**config.to_dict(), "_compile_all_devices": config._compile_all_devices}
    ctx["can_compile_fullgraph"] = {"hf_lm": type(hf)._can_compile_fullgraph,
                                    "transformers": type(ref)._can_compile_fullgraph}  # fmt: skip
    graphs = {"hf_lm": 0, "transformers": 0}  # graphs Dynamo built for each model's compiled generate
    outputs: dict[str, torch.Tensor] = {}
    for b in s["decode_batches"]:
        key = f"gpt2_decode_b{b}"
        prompt = pairs.random_ids(b, s["prompt_len"], s["gpt_vocab"], ctx["seed"] + 3).to(device)
        fns = {
            f"{key}/{rk}": decode_fn(models, prompt, outputs, f"{key}/{rk}", ctx) for rk in spec.DECODE_ROWS
        }
        samples = time_group(rows, fns, s, device, 1, s["decode_rounds"])
        if b == 1:
            profiled = {r: fns[r] for r in samples if "static_compiled" in r and not r.endswith("_sample")}
            ctx["decode_profile"] = profile_decode(profiled, rows, ctx)
        check = ctx["checks"][f"decode_b{b}_tokens"] = token_check(outputs, key)
        for row_id in samples:
            row, (_, impl, mode) = rows[row_id], row_id.split("/")
            row.update(value=b * s["new_tokens"] / row["median_s"], batch=b, prompt_len=s["prompt_len"],
                       new_tokens=s["new_tokens"])  # fmt: skip
            if "static" in mode:
                same = spec.SAMPLED if mode.endswith("_sample") else f"{impl} {mode} == dynamic"
                row["tokens_identical_to_dynamic"] = check.get(same)
            if "compiled" in mode:
                graphs[impl] += row["dynamo_first_call"]["graphs"]  # a later batch size may reuse them
                row["compiled"] = hasattr(models[impl], "_compiled_call") and graphs[impl] > 0
                if not row["compiled"]:
                    row["note"] = "generate did NOT compile the forward (no `_compiled_call` or no graph built)"  # fmt: skip
        logger.info("  B=%d: tokens %s", b, check)
        ctx["write_partial"]()


def profile_decode(fns: dict, rows: dict, ctx: dict) -> dict:
    """One call of each compiled decoding row (B=1): the kernels' busy time (torch.profiler) against
    the median wall time, and the host's Python time by part of `generate()`'s loop (cProfile slows
    Python down: shares, not times); the tables go to `profile_gpt2_decode_b1.txt`."""
    import cProfile
    import io
    import pstats

    sync = measure.device_synchronizer(ctx["device"])
    found, text = {}, []
    for row_id, fn in fns.items():
        events = profiled(fn, ctx["device"]).key_averages()
        host = cProfile.Profile()
        host.enable()
        fn()
        sync()
        host.disable()
        stats = pstats.Stats(host).stats
        total = max(ct for _, _, _, ct, _ in stats.values())
        parts = {}
        for part, (suffix, names) in spec.HOST_PARTS.items():
            cum = [ct for (file, _, func), (_, _, _, ct, _) in stats.items()
                   if func in names and (suffix is None or file.endswith(suffix))]  # fmt: skip
            parts[part] = max(cum) / total if cum else None
        p = found[row_id] = {
            "wall_ms": rows[row_id].get("median_s", float("nan")) * 1e3, "gpu_busy_ms": kernel_time_us(events) / 1e3,
            "cuda_graph_launches": sum(e.count for e in events if e.key == "cudaGraphLaunch"), "host_share": parts,
        }  # fmt: skip
        table = io.StringIO()
        pstats.Stats(host, stream=table).sort_stats("cumulative").print_stats(40)
        text += [f"== {row_id}: median {p['wall_ms']:.1f} ms per call; kernels busy {p['gpu_busy_ms']:.1f} ms; "
                 f"{p['cuda_graph_launches']} CUDA graph launches; host shares (cProfile) {parts}", "",
                 events.table(sort_by="self_cpu_time_total", row_limit=25), "", table.getvalue()]  # fmt: skip
    path = Path(ctx["output_dir"]) / "profile_gpt2_decode_b1.txt"
    path.write_text("\n".join(text))
    return {"path": str(path), "rows": found}


def value(rows: dict, row_id: str, key: str = "value"):
    row = rows.get(row_id)
    return row.get(key) if row and row["status"] == "ok" else None


def targets(rows: dict, s: dict) -> list[dict]:
    """Issue 13's targets (`gpu_entries.TARGETS`) with the measured values next to them."""
    hf_eager, dynamic = value(rows, "gpt2_train/hf_lm/eager"), value(rows, "gpt2_decode_b1/transformers/dynamic")  # fmt: skip
    decode = {key: rows.get(f"gpt2_decode_b1/hf_lm/{mode}", {})
              for key, mode in (("static_decode_b1", "static_compiled"), ("static_decode_b1_loop", "static_compiled_loop"))}  # fmt: skip
    transformers_eager = value(rows, "gpt2_train/transformers/eager")
    measured = {
        "eager_vs_nanogpt": measure.ratio(hf_eager, value(rows, "gpt2_train/nanogpt/eager")),
        "eager_vs_transformers": measure.ratio(hf_eager, transformers_eager),
        "compiled_mfu": value(rows, "gpt2_train/hf_lm/compiled", "mfu"),
        **{key: measure.ratio(row.get("value"), dynamic) for key, row in decode.items()},
    }
    unpadded = measure.ratio(value(rows, "gpt2_train/hf_lm_unpadded/eager"), transformers_eager)
    notes = {
        "eager_vs_transformers": "" if unpadded is None else f"{unpadded:.2f}x with the head's product unpadded",
        "compiled_mfu": f"GPT-2 {s['gpt_layers']} x {s['gpt_hidden']}, vocabulary {s['gpt_vocab']}, B={s['gpt_batch']}, "
        f"T={s['gpt_seq']}, bf16 autocast, against the bf16 matmul peak measured in this run",
        **{key: f"prompt {s['prompt_len']}, {s['new_tokens']} new tokens, {s['decode_dtype']} weights; tokens "
           f"identical: {row.get('tokens_identical_to_dynamic')}; compiled: {row.get('compiled')}"
           for key, row in decode.items()},
    }  # fmt: skip
    out = []
    for t in spec.TARGETS:
        got = measured[t["key"]]
        met = None if got is None else got >= t["threshold"]
        if t["key"] in decode and met:  # the same tokens, really compiled
            row = decode[t["key"]]
            met = bool(row.get("tokens_identical_to_dynamic")) and bool(row.get("compiled"))
        out.append({**t, "measured": got, "met": met, "note": notes.get(t["key"], "")})
    return out


def measurement(ctx: dict, rows: dict, finished: bool) -> dict:
    """What a measurement writes: every row, the peak, the checks and the targets."""
    checks = ctx["checks"]
    keep = ("settings", "sections", "seed", "compile_backend", "compile_note", "peak", "gpt_flops", "profile",
            "decode_profile", "decode_compile_config", "can_compile_fullgraph")  # fmt: skip
    return {
        "finished": finished, "smoke": ctx["smoke"], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "git": measure.git_revision(short=True, dirty_mark=" (with uncommitted changes)", missing="unknown"),
        "command": ctx["command"], "environment": ctx["environment"], "accelerator": ctx["accelerator"],
        **{key: ctx.get(key) for key in keep},
        "checks": checks, "checks_ok": all(c.get("ok", True) for c in checks.values()),
        "section_failures": ctx["failures"], "rows": list(rows.values()), "targets": targets(rows, ctx["settings"]),
        "total_seconds": time.perf_counter() - ctx["start"],
    }  # fmt: skip


def run_measure(ctx: dict) -> dict:
    """Run the measured sections in turn (a broken one fails its rows, the others go on), writing the
    results folder after each; returns the last measurement."""
    s, device, sections = ctx["settings"], ctx["device"], ctx["sections"]
    rows = {k: r for k, r in plan_rows(s).items() if r["section"] in sections}
    out = Path(ctx["output_dir"])
    out.mkdir(parents=True, exist_ok=True)

    def write(finished: bool) -> dict:
        m = measurement(ctx, rows, finished)
        write_results(out, {"kind": "gpu", "runs": [], "measurements": [m]})
        return m

    ctx["write_partial"] = lambda: write(False)
    try:  # the bf16 matmul peak the MFU is measured against
        ctx["peak"] = measure.measure_peak_flops(tuple(s["peak_sizes"]), s["peak_repeats"], s["peak_min_time"],
                                         dtype=torch.bfloat16, seed=ctx["seed"], device=device)  # fmt: skip
    except Exception as err:  # noqa: BLE001
        ctx["peak"] = {"error": measure.error_text(err)}
    ctx["peak_flops"] = ctx["peak"].get("peak_flops")
    for section, runner in (("gpt_train", run_gpt), ("encoders", run_encoders), ("decode", run_decode)):
        if section not in sections:  # (`head_loss` brings `gpt_train` along)
            continue
        # Dynamo's caches emptied: code objects compiled before count towards its recompile limit, past
        # which it silently runs eagerly and a "compiled" row would build no graph
        torch._dynamo.reset()
        logger.info("== %s", section)
        try:
            runner(rows, ctx)
        except Exception as err:  # noqa: BLE001  (a broken section must not lose the others)
            logger.exception("section %s failed", section)
            ctx["failures"][section] = measure.error_text(err)
            covered = {section, "head_loss"} if section == "gpt_train" else {section}
            for row in rows.values():
                if row["section"] in covered and row["status"] == "not run":
                    fail(rows, row["id"], f"section failed: {ctx['failures'][section]}")
        write(False)  # a run cut short keeps what it measured
        if device.type == "cuda":
            torch.cuda.empty_cache()
    for row in rows.values():  # what did not run says why
        if row["status"] == "not run" and "compiled" in row["mode"]:
            row.update(status="skipped", reason="--no_compile")
    return write(True)


def read_check(ctx: dict, name: str, summary: dict) -> str:
    """The cuda tests' table (`tests/gpu_summary.py`'s summary.json) in one line."""
    rows = summary.get("rows", [])
    ran = [r for r in rows if r["result"] != "skipped"]
    failed = [f"{r['group']}/{r['check']} ({r['precision']})" for r in ran if r["result"] != "pass"]
    text = f"{len(ran) - len(failed)} of {len(ran)} checks passed"
    text += f", {len(rows) - len(ran)} skipped" if len(ran) < len(rows) else ""
    return text + (f"; failed: {', '.join(failed)}" if failed else "")


def read_measured(ctx: dict, name: str, result: dict) -> str:
    """The targets and rows of a `--measure` entry; its measurement joins this run's results."""
    m = {**result["measurements"][0], "entry": name}
    ctx["measurements"].append(m)
    parts = [f"{t['key']} " + (_pct(t["measured"]) if t["unit"] == "%" else f"{t['measured']:.2f}x")
             + f" ({'met' if t['met'] else 'NOT met'})" for t in m["targets"] if t["measured"] is not None]  # fmt: skip
    failed = [r["id"] for r in m["rows"] if r["status"] == "error"]
    ok = sum(r["status"] == "ok" for r in m["rows"])
    return "; ".join([*parts, f"{ok} rows ok" + (f", failed: {', '.join(failed)}" if failed else "")])


def read_train_run(ctx: dict, name: str, metrics: dict) -> str:
    best = metrics.get("best") or {}
    loss, step = best.get("eval_loss", metrics.get("eval_loss")), best.get("step", metrics.get("step"))
    return f"best eval_loss {loss:.4f} at step {step}; {metrics.get('seconds', 0):.0f} s in the loop"


NANOGPT_EVAL = re.compile(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)")


def read_nanogpt(ctx: dict, name: str, log: str) -> str:
    evals = [(float(v), int(s)) for s, _, v in NANOGPT_EVAL.findall(log)]
    if not evals:
        return "no evaluation in the log"
    best, step = min(evals)
    return f"best val loss {best:.4f} at step {step} (nanoGPT's {2 if ctx['smoke'] else 200}-batch estimate)"


def read_translation(ctx: dict, name: str, result: dict) -> str:
    return "; ".join(
        f"{r['name']}: failed ({r['error'][:80]})" if "error" in r else
        f"{r['name']}: BLEU {r.get('test_bleu_greedy', 0):.2f} greedy / {r.get('test_bleu_beam', 0):.2f} beam, "
        f"{r.get('train_epochs', 0):.1f} epochs in {r.get('train_seconds', 0):.0f} s"
        for r in result.get("entries", [])
    )  # fmt: skip


# an entry's `reads`: the file it writes in its folder ("log": its log beside it) and that file's reader
READERS = {"check": ("summary.json", read_check), "measured": ("results.json", read_measured),
           "train_run": ("final_metrics.json", read_train_run), "nanogpt": ("log", read_nanogpt),
           "translation": ("results.json", read_translation)}  # fmt: skip


def read_entry(ctx: dict, name: str, reads: str) -> str:
    """What an entry wrote, in one line, by its reader `reads` (`READERS`); "no <file>" if it is missing
    (the cuda tests' reader reads no file as no checks)."""
    file, reader = READERS[reads]
    try:
        text = (ctx["out"] / (f"{name}.log" if file == "log" else f"{name}/{file}")).read_text()
        found = text if file == "log" else json.loads(text)
    except (OSError, ValueError):
        found = None
    return reader(ctx, name, found or {}) if found or reads == "check" else f"no {file}"


def prepare_nanogpt(nanogpt_dir: str) -> Path:
    """A working copy of a nanoGPT checkout with `data/shakespeare_char/{train,val}.bin` and
    `meta.pkl` made from the shared text as nanoGPT's `prepare.py` makes them (no download)."""
    import numpy as np

    work = Path(tempfile.mkdtemp(prefix="nanogpt_")) / "nanogpt"
    shutil.copytree(nanogpt_dir, work, ignore=shutil.ignore_patterns(".git"))
    data_dir = work / "data" / "shakespeare_char"
    data_dir.mkdir(parents=True, exist_ok=True)
    text = SHAKESPEARE.read_text(encoding="utf-8")
    stoi = {c: i for i, c in enumerate(sorted(set(text)))}  # one token per character
    split = int(0.9 * len(text))
    for part, piece in (("train", text[:split]), ("val", text[split:])):
        np.array([stoi[c] for c in piece], dtype=np.uint16).tofile(data_dir / f"{part}.bin")
    with open(data_dir / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(stoi), "itos": {i: c for c, i in stoi.items()}, "stoi": stoi}, f)
    return work


def entry_command(name: str, ctx: dict) -> list[str] | str:
    """The command line of an entry (run from the repository root), or why it is skipped."""
    e, out = spec.ENTRIES[name], ctx["out"] / name
    if ctx["smoke"] and e.get("smoke") is None:
        return "not run at smoke size (its flags change nothing there)"
    if e.get("nanogpt") and not ctx["nanogpt_dir"]:
        return "no --nanogpt_dir given"
    argv = [a.format(multi30k=MULTI30K) for a in e["argv"]] + (e["smoke"] if ctx["smoke"] else e.get("full", []))  # fmt: skip
    if e.get("nanogpt"):  # nanoGPT reads its data and config from its working folder
        cwd = prepare_nanogpt(ctx["nanogpt_dir"])
        return ["env", "-C", str(cwd), sys.executable, *argv, f"--out_dir={cwd / 'out'}"]
    where = ["--gpu-check-dir", str(out)] if e["reads"] == "check" else ["--output_dir", str(out)]
    module = [] if argv[0].endswith(".py") else ["-m"]  # a script path, or a module
    return [sys.executable, *module, *argv, *where]


def entry_row(name: str, status: str, summary: str, seconds: float = 0.0, command: str = "") -> dict:
    section = spec.ENTRIES[name]["section"]
    return dict(name=name, section=section, status=status, seconds=seconds, command=command, summary=summary)


def run_entry(name: str, ctx: dict, deadline: float) -> dict:
    """Run one entry with min(its limit, the time left before `deadline`), its process group killed at
    the limit (not run with less than `MIN_ENTRY_S` left); its reader's line is its summary."""
    time_left = deadline - time.perf_counter()
    if time_left < MIN_ENTRY_S:
        return entry_row(name, "not run", "the budget was spent")
    try:
        cmd = entry_command(name, ctx)
    except Exception as err:  # noqa: BLE001 - an entry that cannot even start is that entry's failure
        return entry_row(name, "failed", f"could not start: {err!r}")
    if isinstance(cmd, str):
        return entry_row(name, "skipped", cmd)
    limit = min(spec.ENTRIES[name]["limit"], time_left)
    done = measure.run_process(cmd, ctx["out"] / f"{name}.log", limit)
    timeout = str(done["error"]).startswith("timed out")
    status = "ok" if done["error"] is None else "timeout" if timeout else "failed"
    row = entry_row(name, status, "", done["wall_s"], " ".join(cmd))
    try:
        row["summary"] = read_entry(ctx, name, spec.ENTRIES[name]["reads"])
    except Exception as err:  # noqa: BLE001 - a summary must not lose the other entries' results
        row["summary"] = f"(no summary: {err!r})"
    if timeout:
        row["summary"] = f"stopped at its {limit:.0f} s limit; {row['summary']}"
    return row


def run_entries(names: list[str], ctx: dict, budget: float | None, on_row=lambda rows: None) -> list[dict]:
    """The entries in order within `budget` seconds (None: each to its own limit)."""
    deadline, rows = time.perf_counter() + (math.inf if budget is None else budget), []
    for name in names:
        rows.append(run_entry(name, ctx, deadline))
        on_row(rows)
    return rows


def _num(v, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if isinstance(v, float) and abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}" if isinstance(v, float) else f"{v:,}"


def _pct(v) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def _status(r: dict) -> str:
    texts = {"error": f"failed: {r.get('error')}", "skipped": f"skipped: {r.get('reason')}", "not run": "not run (yet)"}  # fmt: skip
    return texts.get(r["status"], r.get("note", ""))


def _dynamo(r: dict) -> str:
    d, n = r.get("dynamo_first_call"), r.get("graphs_compiled_while_timed")
    if "compiled" not in r["mode"] or not d:
        return ""
    return f"{d['graphs']} graphs, {d['graph_breaks']} breaks" + (f"; {n} recompiled while timed" if n else "")  # fmt: skip


def _ms(key: str):
    return lambda r: _num(r[key] * 1e3 if r.get(key) else None, 1)


SAME_TOKENS = {True: "yes", False: "**NO**"}
COLUMNS = {  # header: (alignment, cell)
    "workload": ("l", lambda r: r["workload"]),
    "implementation": ("l", lambda r: spec.IMPL_NAMES.get(r["implementation"], r["implementation"])),
    "mode": ("l", lambda r: r["mode"]),
    "throughput": ("r", lambda r: f"{_num(r.get('value'))} {r['unit']}" if r.get("value") else "—"),
    "ms": ("r", _ms("median_s")),
    "MFU": ("r", lambda r: _pct(r.get("mfu"))),
    "peak GPU MiB": ("r", lambda r: _num((r.get("peak_memory_above_base_bytes") or 0) / 2**20 or None, 0)),
    "first call s": ("r", lambda r: _num(r.get("first_call_s"), 1)),
    "torch.compile": ("l", _dynamo),
    "whole step ms": ("r", _ms("step_median_s")),
    "share of step": ("r", lambda r: _pct(r.get("share_of_step"))),
    "same tokens": ("l", lambda r: SAME_TOKENS.get(r.get("tokens_identical_to_dynamic"), "")),
    "status": ("l", _status),
    "target": ("l", lambda t: t["text"]),  # the targets
    "goal": ("r", lambda t: f">= {_pct(t['threshold'])}" if t["unit"] == "%" else f">= {t['threshold']:g} x"),
    "measured": ("r", lambda t: _pct(t["measured"]) if t["unit"] == "%" else f"{t['measured']:.2f} x"),
    "": ("l", lambda t: "**met**" if t["met"] else "not met"),
    "conditions": ("l", lambda t: t["note"]),
}
RUN_COLUMNS = [["entry", "name", None], ["status", "status", None], ["seconds", "seconds", "{:.0f}"],
               ["result", lambda r: r["summary"].replace("|", "/"), None]]  # fmt: skip


def _table(title: str, names: list[str], rows: list[dict]) -> list[str]:
    """The rows under `title` in the `COLUMNS` named (nothing if there are no rows)."""
    align = "".join(COLUMNS[c][0] for c in names)
    return [title, "", table([(c, COLUMNS[c][1], None) for c in names], rows, align), ""] if rows else []


def _measurement_lines(m: dict) -> list[str]:
    """One measurement: the machine, the peak, the targets, its rows' tables, profiles, checks, command."""
    env, acc, peak, s = m["environment"], m["accelerator"], m.get("peak") or {}, m["settings"]
    title = f"## Measured: {', '.join(m['sections'])}" + (f" (entry `{m['entry']}`)" if m.get("entry") else "")  # fmt: skip
    lines = [
        title + ("" if m["finished"] else " (UNFINISHED: written after a section, the run went on)"), "",
        f"{m['date']}; {acc.get('gpu_name') or 'CPU (' + env['cpu_model'] + ')'}"
        + (f", CUDA {acc['cuda']}, capability {acc['compute_capability']}" if acc.get("cuda") else "")
        + f"; torch {env['torch']}, transformers {env['transformers']}, Python {env['python']}; hf_lm at {m['git']}.",
        "",
        f"Measured bf16 matmul peak: **{peak['peak_flops'] / 1e12:.1f} TFLOP/s** (square torch.mm, n={peak['best_size']}; "
        "MFU is against this number)." if peak.get("peak_flops") else f"Peak probe failed: {peak.get('error')}",
        "",
        f"torch.compile backend: {m['compile_backend']}" + (f" ({m['compile_note']})" if m.get("compile_note") else "")
        + ". Medians of alternating rounds after warm-up; a GPU is synchronized before every clock read. Sizes: "
        f"GPT-2 B={s['gpt_batch']} T={s['gpt_seq']}; BERT B={s['bert_batch']} T={s['bert_seq']}; T5 B={s['t5_batch']} "
        f"S={s['t5_source_len']} T={s['t5_target_len']}; decoding: prompt {s['prompt_len']}, {s['new_tokens']} new "
        f"tokens, {s['decode_dtype']} weights.", "",
        *_table("The issue's targets:", ["target", "goal", "measured", "", "conditions"],
                [t for t in m["targets"] if t["measured"] is not None]),
    ]  # fmt: skip
    rows = [r for r in m["rows"] if "not selected" not in str(r.get("reason"))]
    for heading, prefixes, columns in spec.TABLES:
        lines += _table(f"{heading}:", columns, [r for r in rows if r["id"].startswith(prefixes)])
    if m.get("profile"):
        p = m["profile"]
        lines += [f"Profiler (one hf_lm eager step): operators on vocabulary-sized tensors take "
                  f"{_pct(p['vocab_ops_share'])} of {p['time_attr']}; table in `{Path(p['path']).name}`.", ""]  # fmt: skip
    if m.get("decode_compile_config"):
        lines += [f"`_can_compile_fullgraph`: {m.get('can_compile_fullgraph')}. transformers {env['transformers']} "
                  "compiles inside `generate` whenever the cache is a static one on a GPU "
                  f"(`_valid_auto_compile_criteria`); the CompileConfig used: `{m['decode_compile_config']}`.", ""]  # fmt: skip
    if m.get("decode_profile"):
        lines += [f"Profile of one compiled static-cache call at B=1 (`{Path(m['decode_profile']['path']).name}`):", ""]  # fmt: skip
        for row_id, p in m["decode_profile"]["rows"].items():
            shares = ", ".join(f"{k} {_pct(v)}" for k, v in p["host_share"].items())
            lines.append(f"- {row_id}: kernels busy {p['gpu_busy_ms']:.1f} ms of {p['wall_ms']:.1f} ms; "
                         f"{p['cuda_graph_launches']} CUDA graph launches; host Python time (cProfile): {shares}")  # fmt: skip
        lines.append("")
    checks = json.dumps(m["checks"], indent=1, default=str)
    return lines + ["Checks:", "", "```", checks, "```", "", "Command:", "", "```", m["command"], "```", ""]


def _run_lines(run: dict) -> list[str]:
    budget = "no budget" if run.get("budget_s") is None else f"budget {run['budget_s']:.0f} s"
    lines = [f"## Run of {run['date']}: `{run['sections']}`" + (" (smoke, CPU)" if run.get("smoke") else ""), "",
             f"{run['device']}; torch {run['torch']}, transformers {run['transformers']}; git {run['git']}; {budget}.", "",
             table(RUN_COLUMNS, run["entries"], "llrl"), "", "Commands:", ""]  # fmt: skip
    return lines + [f"- `{r['command']}`" for r in run["entries"] if r["command"]] + [""]


def markdown(result: dict, folder: Path) -> list[str]:
    """The README lines of a results folder of kind "gpu" (`benchmarks.render`): its runs, then each
    measurement."""
    title = result.get("title")
    if not title:
        runs, ms = result.get("runs", []), result.get("measurements", [])
        device = runs[0]["device"] if runs else (ms[0]["accelerator"].get("gpu_name") or "CPU") if ms else "?"
        smoke = any(r.get("smoke") for r in runs) or any(m.get("smoke") for m in ms)
        title = f"hf_lm on {device}" + (" (smoke run: tiny sizes, not evidence)" if smoke else "")
    lines = [f"# {title}", ""]
    for run in result.get("runs", []):
        lines += _run_lines(run)
    for m in result.get("measurements", []):
        lines += _measurement_lines(m)
    return lines


def setting(text: str) -> tuple[str, object]:
    """`--set key=value`: a size, typed like its value in `gpu_entries.SIZES["full"]` (lists: commas)."""
    key, _, raw = text.partition("=")
    if key not in spec.SIZES["full"] or raw.lower() in ("", "none"):  # no size is None
        raise argparse.ArgumentTypeError(f"`--set key=value` with a key of {sorted(spec.SIZES['full'])}, got {text!r}")  # fmt: skip
    return key, measure.typed(raw, spec.SIZES["full"][key])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--sections", default="all", help=f"comma-separated sections of {spec.SECTIONS}, or all")
    p.add_argument("--entries", default=None, help="only these entries, comma-separated (on-demand ones too)")
    p.add_argument("--budget_s", type=float, default=None,
                   help="wall-clock budget of the whole run: the entry running at its end is stopped, the later "
                   "ones are not run (default: none, each entry runs to its own limit)")  # fmt: skip
    p.add_argument("--output_dir", help="default out/gpu[_measure][_smoke]: one folder per kind of run")
    p.add_argument("--nanogpt_dir", default=None, help="a karpathy/nanoGPT checkout (the recipe's side by side)")  # fmt: skip
    p.add_argument("--smoke", action="store_true", help="every entry (measurement) at tiny size on the CPU (CI)")  # fmt: skip
    p.add_argument("--device", choices=measure.DEVICE_CHOICES, default="auto", help="auto: CUDA if available")
    group = p.add_argument_group("one measurement in this process (what the train, decode and encoders entries run)")  # fmt: skip
    group.add_argument("--measure", default=None, help=f"comma-separated subset of {MEASURED}")
    group.add_argument("--set", action="append", type=setting, default=[], metavar="KEY=VALUE",
                       help="a size of gpu_entries.SIZES (repeatable), e.g. gpt_batch=32 or decode_batches=1,8")  # fmt: skip
    group.add_argument("--no_compile", action="store_true", help="no torch.compile training rows")
    group.add_argument("--seed", type=int, default=None, help="default 0")
    group.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    return p


def selected_entries(sections: str, names: str | None) -> list[str]:
    """`--entries` (in the table's order), else every entry of the sections but the on-demand ones."""
    if names:
        if sections != "all":  # it would be ignored
            raise ValueError("`--entries` names entries of any section: give it or `--sections`, not both")
        wanted = measure.parse_entries(names, spec.ENTRIES)
        return [n for n in spec.ENTRIES if n in wanted]
    picked = spec.SECTIONS if sections == "all" else measure.comma_list(sections)
    if not picked or set(picked) - set(spec.SECTIONS):
        raise ValueError(f"`--sections`: {sections!r}; the sections: {', '.join(spec.SECTIONS)}, all")
    return [n for n, e in spec.ENTRIES.items() if e["section"] in picked and not e.get("on_demand")]


def main_measure(args, parser, device: torch.device) -> int:
    sections = measure.comma_list(args.measure)
    if not sections or set(sections) - set(MEASURED):
        parser.error(f"--measure: a comma-separated subset of {MEASURED}, got {args.measure!r}")
    if "head_loss" in sections and "gpt_train" not in sections:
        sections.insert(0, "gpt_train")  # its shares are of the training rows' step times
    s = {**spec.SIZES["smoke" if args.smoke else "full"], **dict(args.set)}
    if s["gpt_seq"] > s["gpt_context"] or s["prompt_len"] + s["new_tokens"] > s["gpt_context"]:
        parser.error("`gpt_seq` and `prompt_len` + `new_tokens` must fit in `gpt_context` (learned positions).")  # fmt: skip
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    backend = "eager" if args.smoke and device.type == "cpu" else "inductor"
    note = ("Dynamo traces the models (graphs and graph breaks are real) but no code is generated: the compiled "
            "rows exercise the code path and say nothing about compiled speed") if backend == "eager" else None  # fmt: skip
    ctx = dict(
        settings=s, sections=sections, device=device, seed=args.seed, output_dir=Path(args.output_dir), checks={},
        failures={}, compile=not args.no_compile, compile_backend=backend,
        compile_note=note, smoke=args.smoke, command=measure.command_line(__spec__.name if __spec__ else "benchmarks.gpu", args.argv),
        environment=measure.environment(torch.get_num_threads()), accelerator=measure.accelerator_info(device),
        start=time.perf_counter(),
    )  # fmt: skip
    m = run_measure(ctx)
    failed = [r["id"] for r in m["rows"] if r["status"] == "error"]
    if failed or not m["checks_ok"]:
        logger.error("Rows failed: %s; checks ok: %s (see %s).", failed, m["checks_ok"], args.output_dir)
    return 1 if failed or not m["checks_ok"] else 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    # a flag of one mode given to the other would be ignored: the entries run with their own flags
    of_measure = {"--set": args.set, "--no_compile": args.no_compile, "--seed": args.seed is not None, "--threads": args.threads is not None}  # fmt: skip
    of_entries = {"--entries": args.entries, "--sections": args.sections != "all", "--budget_s": args.budget_s is not None, "--nanogpt_dir": args.nanogpt_dir}  # fmt: skip
    ignored = [flag for flag, given in (of_entries if args.measure else of_measure).items() if given]
    if ignored:
        parser.error(f"{', '.join(ignored)}: {'a run of entries' if args.measure else '--measure'} only.")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}.")
    args.seed = args.seed or 0
    args.output_dir = args.output_dir or "out/gpu" + "_measure" * bool(args.measure) + "_smoke" * args.smoke
    try:
        device = torch.device(measure.resolve_device(args.device))
        names = selected_entries(args.sections, args.entries)
    except ValueError as err:
        parser.error(str(err))
    if device.type != "cuda" and not args.smoke and not (args.measure and args.device == "cpu"):
        logger.info("benchmarks.gpu measures a GPU and needs CUDA, but torch sees none: nothing run. Run it on a GPU "
                    "machine, or with --smoke (tiny sizes on the CPU; `--measure ... --device cpu`: full sizes on "
                    "the CPU, slowly).")  # fmt: skip
        return 0
    if args.measure:
        return main_measure(args, parser, device)
    if args.nanogpt_dir is not None and not (Path(args.nanogpt_dir) / "train.py").is_file():
        parser.error(f"`--nanogpt_dir` {args.nanogpt_dir} holds no nanoGPT checkout (no train.py).")
    out = Path(args.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ctx = {"out": out, "smoke": args.smoke, "nanogpt_dir": args.nanogpt_dir, "measurements": []}
    run = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "smoke": args.smoke,
           "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU",
           **measure.versions("torch", "transformers"), "budget_s": args.budget_s,
           "sections": args.entries or args.sections,
           "git": measure.git_revision(short=True, dirty_mark=" (uncommitted changes)", missing="unknown")}  # fmt: skip

    def write(rows: list[dict]) -> None:
        write_results(out, {"kind": "gpu", "runs": [{**run, "entries": rows}], "measurements": ctx["measurements"]})  # fmt: skip

    rows = run_entries(names, ctx, args.budget_s, on_row=write)
    return 0 if all(r["status"] in ("ok", "skipped") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
