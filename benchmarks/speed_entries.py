"""The speed runner's entries (`benchmarks.speed`) and the model pairs the A/B entries measure: a
transformers reference built from a seed and hf_lm's model converted from it. What each entry
measures: docs/benchmarks.md ("How the speed runner measures").
"""

from __future__ import annotations

import copy
import gc
import math
import time

from . import speed_fsdp, speed_workloads
from .measure import (
    Contention,
    busy_note,
    count_train_step_flops,
    error_text,
    make_train_step,
    measure_peak_flops,
    measure_peak_rss,
    ratio,
    run_json_worker,
    summarize,
    tensor_bytes,
    time_alternating,
    wait_for_idle,
)
from .render import markdown_table
from .speed import Entry

REFERENCES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "bert": "BertForMaskedLM",
    "t5": "T5ForConditionalGeneration",
    "bart": "BartForConditionalGeneration",
}
# BERT's uncased WordPiece ids; real word pieces start at 1000 in that vocabulary
PAD_ID, CLS_ID, SEP_ID, MASK_ID, FIRST_WORD_ID = 0, 101, 102, 103, 1000
# below: T5's pad/eos/unk, BART's bos/pad/eos; random ids never hit them
SEQ2SEQ_FIRST_WORD_ID = 3


# --- The pairs and their inputs ---


def random_ids(batch: int, seq: int, vocab: int, seed: int, low: int = 0):
    """(batch, seq) token ids uniform in [low, vocab), from their own generator seeded with `seed`."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab, (batch, seq), generator=g)


def reference_config(family: str, o, dropout: float | None = None):
    """The transformers config of `family`'s reference at the entry's sizes (`dropout`: BERT's, else `o.dropout`)."""
    import transformers

    if family == "llama":
        return transformers.LlamaConfig(
            vocab_size=o.vocab, hidden_size=o.hidden, num_hidden_layers=o.layers, num_attention_heads=o.heads,
            num_key_value_heads=o.kv_heads, intermediate_size=o.intermediate, hidden_act="silu",  # SwiGLU
            max_position_embeddings=o.context, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False, attention_dropout=0.0,
            tie_word_embeddings=False, pad_token_id=None,
            bos_token_id=None, eos_token_id=None,  # Llama's defaults would be real tokens of this vocabulary
        )  # fmt: skip
    if family == "gpt2":
        return transformers.GPT2Config(
            vocab_size=o.vocab, n_positions=o.context, n_embd=o.hidden, n_layer=o.layers, n_head=o.heads,
            n_inner=o.intermediate, activation_function="gelu_new",  # GPT-2's own tanh-GELU
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True,
            bos_token_id=None, eos_token_id=None,  # GPT-2's defaults (50256) lie outside this vocabulary
        )  # fmt: skip
    if family == "bert":
        dropout = o.dropout if dropout is None else dropout
        return transformers.BertConfig(
            vocab_size=o.vocab, hidden_size=o.hidden, num_hidden_layers=o.layers, num_attention_heads=o.heads,
            intermediate_size=o.intermediate, max_position_embeddings=o.max_positions, type_vocab_size=2,
            hidden_act="gelu", hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
            layer_norm_eps=1e-12, pad_token_id=PAD_ID, tie_word_embeddings=True,
        )  # fmt: skip
    if family == "t5":
        return transformers.T5Config(
            vocab_size=o.vocab, d_model=o.hidden, d_kv=o.hidden // o.heads, d_ff=o.intermediate,
            num_layers=o.layers, num_decoder_layers=o.layers, num_heads=o.heads,
            relative_attention_num_buckets=32, relative_attention_max_distance=128,
            feed_forward_proj="relu",  # T5 v1.0
            dropout_rate=0.0, layer_norm_epsilon=1e-6, tie_word_embeddings=True,
            pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
        )  # fmt: skip
    return transformers.BartConfig(
        vocab_size=o.vocab, d_model=o.hidden, encoder_layers=o.layers, decoder_layers=o.layers,
        encoder_attention_heads=o.heads, decoder_attention_heads=o.heads, encoder_ffn_dim=o.intermediate,
        decoder_ffn_dim=o.intermediate, max_position_embeddings=o.max_positions, activation_function="gelu",
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, scale_embedding=False,
        tie_word_embeddings=True, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        forced_eos_token_id=None,
    )  # fmt: skip


def build_reference(family: str, o, dropout: float | None = None):
    """transformers' `REFERENCES[family]` from the seed `o.seed`, SDPA attention, in training mode."""
    import torch
    import transformers

    torch.manual_seed(o.seed)
    cls = getattr(transformers, REFERENCES[family])
    model = cls._from_config(reference_config(family, o, dropout), attn_implementation="sdpa")
    if kind(family) == "gpt":
        model.loss_type = "ForCausalLM"  # what it falls back to anyway, minus a warning
    elif kind(family) == "seq2seq":
        # off: with min_new_tokens == max_new_tokens it would fight the minimum-length processor
        model.generation_config.forced_eos_token_id = None
    return model.train()


def build_hflm(family: str, o, sparse: bool = False, dropout: float | None = None):
    """hf_lm's model computing the reference's function: the reference converted by `from_transformers`
    (which copies its generation config); BERT's the same weights in a model whose config has
    `sparse_prediction=sparse`."""
    from hf_lm import HfLmBertConfig, HfLmBertForMaskedLM
    from hf_lm.convert import from_transformers

    model = from_transformers(build_reference(family, o, dropout))
    if family == "bert":
        config = HfLmBertConfig.from_dict({**model.config.to_dict(), "sparse_prediction": sparse})
        converted, model = model, HfLmBertForMaskedLM._from_config(config, attn_implementation="sdpa")
        model.load_state_dict(converted.state_dict())
        assert model.lm_head.decoder.weight is model.model.embed_tokens.weight  # still tied
    assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
    return model.train()


def mlm_batch(o, seed: int) -> dict:
    """A right-padded masked-LM batch as BERT's collator makes it: `[CLS] ... [SEP]` rows,
    `pad_fraction` of them shorter than `seq`, `mask_prob` of the real tokens labelled (80% [MASK],
    10% random, 10% kept), -100 elsewhere."""
    import torch

    B, T = o.batch, o.seq
    g = torch.Generator().manual_seed(seed)
    lengths = torch.full((B,), T)
    n_padded = round(B * o.pad_fraction)
    if n_padded:  # the padded rows are spread over the batch, with lengths uniform in [T/2, T)
        rows = torch.randperm(B, generator=g)[:n_padded]
        lengths[rows] = torch.randint(T // 2, T, (n_padded,), generator=g)
    pos = torch.arange(T)[None]  # (1, T)
    attention_mask = (pos < lengths[:, None]).long()  # (B, T)
    words = torch.randint(FIRST_WORD_ID, o.vocab, (B, T), generator=g)
    ids = torch.where(attention_mask.bool(), words, PAD_ID)
    ids[:, 0] = CLS_ID
    ids[torch.arange(B), lengths - 1] = SEP_ID
    maskable = attention_mask.bool() & (pos > 0) & (pos < (lengths - 1)[:, None])  # real, not special
    selected = maskable & (torch.rand(B, T, generator=g) < o.mask_prob)
    labels = torch.where(selected, ids, -100)
    u = torch.rand(B, T, generator=g)
    random_words = torch.randint(FIRST_WORD_ID, o.vocab, (B, T), generator=g)
    input_ids = torch.where(selected & (u < 0.8), MASK_ID, ids)  # 80% [MASK]
    input_ids = torch.where(selected & (u >= 0.8) & (u < 0.9), random_words, input_ids)  # 10% random
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def seq2seq_train_batch(o, seed: int) -> dict:
    import torch

    source = random_ids(o.batch, o.source_len, o.vocab, seed, low=SEQ2SEQ_FIRST_WORD_ID)
    return {
        "input_ids": source,
        "attention_mask": torch.ones_like(source),  # what a tokenizer returns for unpadded rows
        "labels": random_ids(o.batch, o.target_len, o.vocab, seed + 1, low=SEQ2SEQ_FIRST_WORD_ID),
    }


# --- Each family's sides, batches, workloads and sanity checks ---


def kind(family: str) -> str:
    return {"gpt2": "gpt", "llama": "gpt", "bert": "bert"}.get(family, "seq2seq")


def sides(family: str) -> tuple[str, ...]:
    return ("hf_lm", "hf_lm_sparse", "transformers") if family == "bert" else ("hf_lm", "transformers")


def build_side(family: str, side: str, o, dropout: float | None = None):
    if side == "transformers":
        return build_reference(family, o, dropout)
    return build_hflm(family, o, sparse=side == "hf_lm_sparse", dropout=dropout)


def train_batch(family: str, o) -> tuple[dict, int, str, str]:
    """The training batch (labels included), the units it holds, their name, and the row's label."""
    if kind(family) == "gpt":
        ids = random_ids(o.batch, o.seq, o.vocab, o.seed)
        return {"input_ids": ids, "labels": ids}, o.batch * o.seq, "tok/s", f"train (B={o.batch}, T={o.seq})"
    if family == "bert":  # positions, padding included
        label = f"train masked LM (B={o.batch}, T={o.seq})"
        return mlm_batch(o, o.seed), o.batch * o.seq, "pos/s", label
    units, label = (
        o.batch * (o.source_len + o.target_len),
        f"train (B={o.batch}, S={o.source_len}, T={o.target_len})",
    )
    return seq2seq_train_batch(o, o.seed), units, "tok/s", label


def generate(model, ids, new_tokens: int, num_beams: int = 1):
    """Greedy (or beam) `generate()` of exactly `new_tokens` tokens."""
    import torch

    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
        num_beams=num_beams, do_sample=False, **({} if model.config.is_encoder_decoder else {"pad_token_id": 0}),
    )  # fmt: skip
    # a decoder returns the prompt and N new tokens; an encoder-decoder the start token and N
    expected = 1 + new_tokens if model.config.is_encoder_decoder else ids.shape[1] + new_tokens
    assert out.shape == (ids.shape[0], expected), out.shape
    return out


def make_generate(model, ids, new_tokens: int, num_beams: int = 1):
    import torch

    model.eval()
    return torch.no_grad()(lambda: generate(model, ids, new_tokens, num_beams))


def make_forward(model, batch: dict, keys: tuple[str, ...] = ("input_ids", "attention_mask")):
    import torch

    model.eval()
    inputs = {key: batch[key] for key in keys}
    return torch.no_grad()(lambda: model(**inputs).logits)


def eval_workloads(family: str, models: dict, o) -> list[dict]:
    """The timed workloads besides training: `key`, `name`, `short`, `unit`, `fns` (side -> call),
    `units` per call, `reps` calls per sample."""
    if family == "bert":  # sparse_prediction only acts in training: no sparse side here
        batch = mlm_batch(o, o.seed)
        fns = {side: make_forward(models[side], batch) for side in ("hf_lm", "transformers")}
        name = f"inference forward (eval, B={o.batch}, T={o.seq})"
        return [dict(key="infer", name=name, short="inference fwd", unit="pos/s", fns=fns, units=o.batch * o.seq, reps=o.infer_reps)]  # fmt: skip
    if kind(family) == "gpt":
        runs = [(b, 1, "greedy") for b in o.gen_batches]
        length, low = (o.prompt_len, f"prompt {o.prompt_len}"), 0
    else:
        runs = [(b, beams, "greedy" if beams == 1 else f"beam {beams}") for beams in (1, o.num_beams) for b in (1, o.gen_batch)]  # fmt: skip
        length, low = (o.source_len, f"source {o.source_len}"), SEQ2SEQ_FIRST_WORD_ID
    workloads = []
    for b, beams, label in runs:
        ids = random_ids(b, length[0], o.vocab, o.seed + 3, low=low)
        key = f"generate_b{b}" if kind(family) == "gpt" else f"{'greedy' if beams == 1 else 'beam'}_b{b}"
        short = f"B={b}" if kind(family) == "gpt" else f"{label} B={b}"
        fns = {side: make_generate(m, ids, o.new_tokens, beams) for side, m in models.items()}
        name = f"generate {label} B={b} ({length[1]}, new {o.new_tokens})"
        workloads.append(dict(key=key, name=name, short=short, unit="new tok/s", fns=fns, units=b * o.new_tokens, reps=1))  # fmt: skip
    return workloads


def sanity(family: str, o) -> dict:
    """Largest logit difference (eval), the first two training losses (the second after one AdamW
    step, so it compares gradients too) and the generated tokens' agreement; `ok` when the
    differences are within `tolerance`. BERT's dropout is off here (the sides would draw other masks)."""
    import torch

    names = sides(family)
    models = {side: build_side(family, side, o, dropout=0.0) for side in names}
    batch = train_batch(family, o)[0]
    inputs = {k: v for k, v in batch.items() if k != "labels" or kind(family) == "seq2seq"}
    with torch.no_grad():
        logits = {side: models[side].eval()(**inputs).logits for side in ("hf_lm", "transformers")}
    diff = (logits["hf_lm"] - logits["transformers"]).abs()
    result = {
        "max_abs_logit_diff": diff.max().item(),
        "max_abs_logit": logits["transformers"].abs().max().item(),
    }
    if family != "bert":
        prompt = random_ids(
            2, o.prompt_len if kind(family) == "gpt" else o.source_len, o.vocab, o.seed + 2, low=3
        )
        modes = [("greedy", 1)] + ([] if kind(family) == "gpt" else [("beam", o.num_beams)])
        for mode, beams in modes:
            out = {side: make_generate(models[side], prompt, o.new_tokens, beams)() for side in names}
            result[f"{mode}_token_agreement"] = (out["hf_lm"] == out["transformers"]).float().mean().item()
    losses = {}
    for side in names:
        step = make_train_step(copy.deepcopy(models[side]), batch, o.lr)
        losses[side] = [step().item(), step().item()]  # step 1; step 2 after one AdamW update
    result["losses"] = losses
    for side in names[:-1]:
        for i in (0, 1):
            result[f"loss_diff_step{i + 1}_{side}"] = abs(losses[side][i] - losses["transformers"][i])
    checked = [
        v
        for k, v in result.items()
        if k.startswith("loss_diff") or (family == "bert" and k == "max_abs_logit_diff")
    ]
    result["ok"] = max(checked) < o.tolerance
    result["params"] = {side: sum(p.numel() for p in m.parameters()) for side, m in models.items()}
    return result


# --- An A/B entry: sanity, FLOPs, the timed phases, memory in fresh processes ---


def timed_phase(fns: dict, o, reps: int, units: float, contention: dict, key: str) -> dict:
    """Wait for an idle CPU (`wait_idle`), time the sides alternately (`rounds`, `reps` calls per
    sample, `warmup`), note the contention under `contention[key]`; `{side: summarize(...)}`."""
    t0 = time.perf_counter()
    contention["waited_s"][key] = wait_for_idle(o.wait_idle)
    with Contention() as c:
        samples = time_alternating(fns, o.rounds, reps, o.warmup)
    contention[key] = c.result
    print(f"  {key} timed in {time.perf_counter() - t0:.0f}s{busy_note(c.result)}", flush=True)
    return {side: summarize(s, units) for side, s in samples.items()}


def metric(values: dict, unit: str, higher_is_better: bool) -> dict:
    """One row of an A/B entry's metrics: a value per side, its unit and which way is better."""
    return {**values, "unit": unit, "higher_is_better": higher_is_better}


def phase_metrics(name: str, phase: dict, unit: str, flops: dict | None = None, per: int = 1) -> dict:
    """The metric rows of a timed phase: throughput, time per call (or per `per` tokens), CPU time
    (user + sys, and sys alone), page faults, and with `flops` the achieved FLOP/s."""
    rows = {
        name: metric({s: r["throughput"] for s, r in phase.items()}, unit, True),
        f"{name}: time per {'call' if per == 1 else 'new token'}": metric({s: r["median_s"] / per for s, r in phase.items()}, "ms", False),
        f"{name}: CPU time (user + sys, all threads)": metric({s: r["median_cpu_s"] for s, r in phase.items()}, "ms", False),
        f"{name}: kernel (sys) CPU time": metric({s: r["median_sys_s"] for s, r in phase.items()}, "ms", False),
        f"{name}: minor page faults": metric({s: r["median_minor_faults"] for s, r in phase.items()}, "count", False),
    }  # fmt: skip
    if flops:
        rows[f"{name}: achieved GFLOP/s (own fwd + bwd FLOPs / step time)"] = metric(
            {s: flops[s]["total"] / r["median_s"] / 1e9 for s, r in phase.items()}, "GFLOP/s", True
        )
    return rows


def run_pair(o) -> dict:
    """An A/B entry: check the sides agree, count FLOPs, time the workloads then training, measure
    memory in fresh processes. Raises SystemExit when the sides disagree (a different function)."""
    family, names = o.family, sides(o.family)
    check = sanity(family, o)
    print(f"{family} sanity: {sanity_text(check)}", flush=True)
    if not check["ok"]:
        raise SystemExit(
            f"{family}: the sides disagree by more than {o.tolerance}; not timing a different function"
        )
    gc.collect()
    models = {side: build_side(family, side, o) for side in names}
    contention, raw, metrics = {"waited_s": {}}, {}, {}
    generate_rows = []
    for w in eval_workloads(family, models, o):  # on the untrained weights, identical on both sides
        raw[w["key"]] = phase = timed_phase(w["fns"], o, w["reps"], w["units"], contention, w["key"])
        per = o.new_tokens if w["unit"] == "new tok/s" else 1
        metrics.update(phase_metrics(w["name"], phase, w["unit"], per=per))
        generate_rows.append({k: w[k] for k in ("name", "short", "unit")} | pair_values(phase))
    batch, units, unit, label = train_batch(family, o)
    flops = {side: count_train_step_flops(m, batch) for side, m in models.items()}
    steps = {side: make_train_step(m, batch, o.lr) for side, m in models.items()}
    raw["train"] = phase = timed_phase(steps, o, o.train_reps, units, contention, "train")
    metrics = {**phase_metrics(label, phase, unit, flops), **metrics}
    del steps, models
    gc.collect()
    memory = {} if o.no_memory else measure_memory(o, metrics)
    if o.profile:
        profile_pair(o)
    shares = [v.get("cpu_pressure_share") for v in contention.values() if isinstance(v, dict)]
    return {
        "reference": f"transformers.{REFERENCES[family]}",
        "params": check["params"]["hf_lm"],
        "sanity": check,
        "train": {"name": label, "unit": unit, **pair_values(phase)},
        "generate": generate_rows,
        "step_s": {side: r["median_s"] for side, r in phase.items()},
        "flops_per_step": {side: f["total"] for side, f in flops.items()},
        "flops_counted": flops["hf_lm"]["counted"],
        "max_cpu_pressure_share": max([s for s in shares if s is not None], default=None),
        "metrics": metrics,
        "memory": memory,
        "raw": raw,
        "contention": contention,
    }


def pair_values(phase: dict) -> dict:
    """Each side's throughput, and hf_lm's (and the sparse side's) ratio to the reference's."""
    values = {side: r["throughput"] for side, r in phase.items()}
    values["ratio"] = ratio(values["hf_lm"], values["transformers"])
    if "hf_lm_sparse" in values:
        values["ratio_hf_lm_sparse"] = ratio(values["hf_lm_sparse"], values["transformers"])
    return values


def sanity_text(check: dict) -> str:
    return "; ".join(
        f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in check.items()
        if k not in ("losses", "params")
    )


MEMORY_WORKLOADS = {"gpt": "generate", "bert": "infer", "seq2seq": "generate"}


def memory_worker(o, side: str, workload: str) -> dict:
    """In a fresh process: the parameter bytes, then the peak RSS above the pre-workload RSS of
    `memory_steps` training steps (and the AdamW state's bytes) or of one batch-8 greedy generation
    (GPT), eval forward (BERT) or beam search at `gen_batch` (T5, BART; heap trimmed first: the
    reference it was converted from is dropped)."""
    import torch

    torch.set_num_threads(o.threads)
    model = build_side(o.family, side, o)
    trim = kind(o.family) == "seq2seq"
    result = {"param_bytes": tensor_bytes(model.parameters())}
    if workload == "train":
        step = make_train_step(model, train_batch(o.family, o)[0], o.lr)
        result.update(measure_peak_rss(step, o.memory_steps, trim=trim))
        result["optimizer_state_bytes"] = tensor_bytes(
            t for s in step.optimizer.state.values() for t in s.values()
        )
        return result
    if o.family == "bert":
        fn = make_forward(model, mlm_batch(o, o.seed))
    elif trim:
        fn = make_generate(
            model,
            random_ids(o.gen_batch, o.source_len, o.vocab, o.seed + 3, low=3),
            o.new_tokens,
            o.num_beams,
        )
    else:
        fn = make_generate(model, random_ids(8, o.prompt_len, o.vocab, o.seed), o.new_tokens)
    result.update(measure_peak_rss(fn, 1, trim=trim))
    return result


def measure_memory(o, metrics: dict) -> dict:
    """Each side and workload in a fresh process (`memory_worker`); adds the metric rows."""
    import json
    import sys

    names = sides(o.family)
    other = MEMORY_WORKLOADS[kind(o.family)]
    memory = {"train": {}, other: {}}
    for workload, side in [("train", s) for s in names] + [(other, s) for s in ("hf_lm", "transformers")]:
        cmd = [sys.executable, "-m", "benchmarks.speed", "--_worker", o.family, side, workload]
        memory[workload][side] = run_json_worker(
            [*cmd, "--_options", json.dumps(vars(o))], f"memory {side}/{workload}"
        )
    train = memory["train"]
    metrics["parameters + AdamW state"] = metric({s: train[s]["param_bytes"] + train[s]["optimizer_state_bytes"] for s in names}, "MiB", False)  # fmt: skip
    metrics[f"train peak RSS above baseline ({o.memory_steps} steps)"] = metric({s: train[s]["peak_rss_delta_bytes"] for s in names}, "MiB", False)  # fmt: skip
    label = {"gpt": "generate (B=8)", "bert": "inference", "seq2seq": f"generate (beam {getattr(o, 'num_beams', 0)}, B={getattr(o, 'gen_batch', 0)})"}[kind(o.family)]  # fmt: skip
    metrics[f"{label} peak RSS above baseline"] = metric({s: r["peak_rss_delta_bytes"] for s, r in memory[other].items()}, "MiB", False)  # fmt: skip
    return memory


def profile_pair(o) -> None:
    """Where the time goes, in the folder `o.profile`: per side, profiler tables of a training step and
    of the first other workload (with the self CPU time on vocabulary-sized tensors), a cProfile of the
    latter, and per workload the operators whose self CPU time differs most between the sides."""
    import cProfile
    import io
    import pstats
    from pathlib import Path

    import torch
    from torch.profiler import ProfilerActivity, profile

    folder = Path(o.profile)
    folder.mkdir(parents=True, exist_ok=True)
    for workload in ("train", "eval"):
        averages = {}
        for side in ("hf_lm", "transformers"):
            model = build_side(o.family, side, o)
            if workload == "train":
                fn = make_train_step(model, train_batch(o.family, o)[0], o.lr)
            else:
                fn = eval_workloads(o.family, dict.fromkeys(sides(o.family), model), o)[0]["fns"][side]
            fn()
            fn()  # warm-up (the first training step allocates the AdamW state)
            with torch.enable_grad() if workload == "train" else torch.no_grad():
                with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                    fn()
            averages[side], by_shape = prof.key_averages(), prof.key_averages(group_by_input_shape=True)
            total = sum(e.self_cpu_time_total for e in by_shape)
            head = sum(e.self_cpu_time_total for e in by_shape if str(o.vocab) in str(e.input_shapes))
            (folder / f"profile_{o.family}_{workload}_{side}.txt").write_text(
                f"self CPU time on tensors with a dimension of size V={o.vocab}: {head / 1e3:.0f} of {total / 1e3:.0f} ms\n\n"
                + averages[side].table(sort_by="self_cpu_time_total", row_limit=40) + "\n\nBy input shape:\n"
                + by_shape.table(sort_by="self_cpu_time_total", row_limit=30)
            )  # fmt: skip
            if workload == "eval":
                calls = cProfile.Profile()
                calls.runcall(fn)
                text = io.StringIO()
                pstats.Stats(calls, stream=text).sort_stats("tottime").print_stats(45)
                pstats.Stats(calls, stream=text).sort_stats("cumulative").print_stats(60)
                (folder / f"cprofile_{o.family}_{workload}_{side}.txt").write_text(text.getvalue())
        (folder / f"profile_{o.family}_{workload}_diff.txt").write_text(op_diff_table(averages))


def op_diff_table(averages: dict, rows: int = 25) -> str:
    """Operators by |hf_lm self CPU - reference self CPU|, with call counts: where the gap is."""
    stats: dict = {}
    for side, events in averages.items():
        for e in events:
            stats.setdefault(e.key, {s: (0.0, 0) for s in averages})[side] = (
                e.self_cpu_time_total / 1e3,
                e.count,
            )
    ranked = sorted(stats.items(), key=lambda kv: -abs(kv[1]["hf_lm"][0] - kv[1]["transformers"][0]))
    lines = [f"{'operator':<48} {'hf_lm ms':>10} {'calls':>7} {'ref ms':>10} {'calls':>7} {'hf_lm-ref':>10}"]
    for name, v in ranked[:rows]:
        (a, na), (b, nb) = v["hf_lm"], v["transformers"]
        lines.append(f"{name[:48]:<48} {a:>10.1f} {na:>7} {b:>10.1f} {nb:>7} {a - b:>+10.1f}")
    return "\n".join(lines) + "\n"


# --- torch.compile and the peak ---


def run_compile(o) -> dict:
    """Eager against `torch.compile` of hf_lm's GPT-2-shaped model (the `gpt2` entry's config and
    inputs): training step and forward, alternating after warm-up; the first compiled call (the
    compilation) timed apart; graph breaks. A failure is a result, not a crash."""
    import torch
    from torch._dynamo.utils import counters

    eager = build_hflm(o.family, o)
    ids = random_ids(o.batch, o.seq, o.vocab, o.seed)
    result = {"backend": o.compile_backend, "phases": {}}
    batch = {"input_ids": ids, "labels": ids}
    result["flops_per_step"] = count_train_step_flops(eager, batch)["total"]
    try:
        models = {"eager": eager, "compiled": torch.compile(copy.deepcopy(eager), backend=o.compile_backend)}
    except Exception as exc:  # noqa: BLE001  (any failure is a result to report)
        return {**result, "error": error_text(exc)}

    makers = {
        "train": lambda m: make_train_step(m, batch, o.lr),
        "forward": lambda m: make_forward(m, batch, ("input_ids",)),
    }
    for name, make in makers.items():
        fns = {side: make(m) for side, m in models.items()}
        try:
            t0 = time.perf_counter()
            fns["compiled"]()  # the first call compiles
            compile_s = time.perf_counter() - t0
            summary = {s: summarize(x, o.batch * o.seq) for s, x in time_alternating(fns, o.rounds, o.train_reps, o.warmup).items()}  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            result["phases"][name] = {"error": error_text(exc)}
            continue
        result["phases"][name] = {
            "compile_s": compile_s, "unit": "tok/s",
            "eager": summary["eager"]["throughput"], "compiled": summary["compiled"]["throughput"],
            "speedup": ratio(summary["compiled"]["throughput"], summary["eager"]["throughput"]),
            "step_s": {side: summary[side]["median_s"] for side in summary}, "raw": summary,
        }  # fmt: skip
    result["graph_breaks"] = sum(counters["graph_break"].values())
    result["unique_graphs"] = counters["stats"].get("unique_graphs")
    return result


def run_peak(o) -> dict:
    import torch

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[o.dtype]
    return measure_peak_flops(tuple(o.sizes), o.repeats, o.min_time, o.threads, dtype, o.seed, o.device)


def peak_report(data: dict, result: dict) -> list[str]:
    return [
        "## Peak matmul FLOP/s",
        "",
        f"{data['peak_flops'] / 1e9:.1f} GFLOP/s, {data['dtype']} on {data['device_name'] or data['device']} "
        f"(square torch.mm n={data['best_size']}, {data['threads']} thread(s); "
        + ", ".join(f"n={n}: {v['flops'] / 1e9:.1f}" for n, v in data["by_size"].items())
        + ").",
        "",
    ]


# --- Reports ---


def _na(value: float | None, form: str = "{:.3f}") -> str:
    """`value` in `form`, "n/a" where it is missing or not finite."""
    return "n/a" if value is None or not math.isfinite(value) else form.format(value)


def _pct(value: float | None) -> str:
    return _na(value, "{:.1%}")


def utilization(rec: dict, peak_flops: float | None) -> dict:
    """MFU (the reference's FLOPs for every side) and HFU (each side's own FLOPs), fractions of the
    peak, and the model FLOP/s (the reference's FLOPs over each side's step time)."""
    model_flops = rec["flops_per_step"]["transformers"]
    use = {"achieved_flops": {}, "mfu": {}, "hfu": {}}
    for side, step_s in rec["step_s"].items():
        use["achieved_flops"][side] = model_flops / step_s
        if peak_flops:
            use["mfu"][side] = model_flops / step_s / peak_flops
            use["hfu"][side] = rec["flops_per_step"][side] / step_s / peak_flops
    return use


def suite_tables(result: dict) -> list[str]:
    """The A/B entries side by side: a summary row per family, then every workload's numbers."""
    families = {name: rec for name, rec in result["entries"].items() if name in REFERENCES}
    if not families:
        return []
    peak = result["entries"].get("peak") or {}
    summary, details = [], []
    for family, rec in families.items():
        if rec.get("error"):
            summary.append([family, REFERENCES[family], "", f"failed: {rec['error']}", "", "", ""])
            details.append([family, "(all)", "", f"failed: {rec['error']}", "", ""])
            continue
        use = utilization(rec, peak.get("peak_flops"))
        mfu, hfu, ach, fl = use["mfu"], use["hfu"], use["achieved_flops"], rec["flops_per_step"]
        t = rec["train"]
        gen = "; ".join(f"{g['short']} {_na(g['ratio'])}" for g in rec["generate"])
        summary.append([family, REFERENCES[family], f"{rec['params'] / 1e6:.2f}M", _na(t["ratio"]), gen,
                        _pct(mfu.get("hf_lm")), _pct(mfu.get("transformers"))])  # fmt: skip
        rows = [t, *rec["generate"]]
        if "hf_lm_sparse" in t:
            name = "train, hf_lm with sparse_prediction=True"
            rows.append({**t, "name": name, "hf_lm": t["hf_lm_sparse"], "ratio": t["ratio_hf_lm_sparse"]})
        for r in rows:
            details.append([family, r["name"], r["unit"], _na(r["hf_lm"], "{:,.0f}"), _na(r["transformers"], "{:,.0f}"), _na(r["ratio"])])  # fmt: skip
        details += [
            [family, "training FLOPs per step (fwd + bwd, counted)", "GFLOP", f"{fl['hf_lm'] / 1e9:.3f}",
             f"{fl['transformers'] / 1e9:.3f}", _na(ratio(fl["hf_lm"], fl["transformers"]))],
            [family, "train model FLOP/s (reference FLOPs / step time)", "GFLOP/s", f"{ach['hf_lm'] / 1e9:.2f}",
             f"{ach['transformers'] / 1e9:.2f}", _na(ratio(ach["hf_lm"], ach["transformers"]))],
            [family, "train MFU (HFU)", "% of peak", f"{_pct(mfu.get('hf_lm'))} ({_pct(hfu.get('hf_lm'))})",
             f"{_pct(mfu.get('transformers'))} ({_pct(hfu.get('transformers'))})", ""],
        ]  # fmt: skip
    header = ["family", "reference (transformers)", "params", "train throughput ratio",
              "generation / inference throughput ratios", "train MFU hf_lm", "train MFU transformers"]  # fmt: skip
    busy = {
        f: r["max_cpu_pressure_share"]
        for f, r in families.items()
        if (r.get("max_cpu_pressure_share") or 0) > 0.05
    }
    lines = [
        "Ratios are hf_lm / transformers throughput (above 1: hf_lm faster), medians of alternating A/B rounds, "
        "each family in a fresh process. MFU: the reference's training FLOPs per step (forward + backward, "
        "FlopCounterMode; AdamW timed, not counted) / median step time / measured peak.",
        "",
        markdown_table(header, summary, align="llrrlrr"),
        "",
    ]
    if busy:
        lines += ["Note: the CPU was busy during timing (share of time a task waited for a CPU: "
                  + ", ".join(f"{f} {v:.0%}" for f, v in busy.items())
                  + "); absolute numbers are noisy, ratios from alternating rounds less so.", ""]  # fmt: skip
    header = ["family", "workload", "unit", "hf_lm", "transformers", "ratio hf_lm / transformers"]
    return lines + ["## Details", "", markdown_table(header, details, align="lllrrr"), ""]


def metric_cell(value: float | None, unit: str) -> str:
    """A value in its unit: bytes as MiB, seconds as ms, GFLOP/s with two decimals, counts whole."""
    if value is None:
        return ""
    if unit == "MiB":
        return f"{value / 2**20:.1f}"
    if unit == "ms":
        return f"{value * 1e3:.1f}"
    return f"{value:.2f}" if unit == "GFLOP/s" else f"{value:,.0f}"


def pair_report(data: dict, result: dict) -> list[str]:
    """An A/B entry's own section: its sanity checks and every metric of every side (what the suite's
    tables leave out: times, CPU time, page faults, memory)."""
    family = next(name for name, rec in result["entries"].items() if rec is data)
    lines = [
        f"## {family}: hf_lm against {data['reference']}",
        "",
        f"Sanity: {sanity_text(data['sanity'])}.",
        "",
    ]
    if not data.get("metrics"):
        return lines
    names = [s for s in sides(family) if s != "transformers"]
    header = ["metric", "transformers", *(c for s in names for c in (s, f"ratio {s}/transformers"))]
    body = []
    for name, row in data["metrics"].items():
        cells = [f"{name} [{row['unit']}, {'higher' if row['higher_is_better'] else 'lower'} is better]",
                 metric_cell(row["transformers"], row["unit"])]  # fmt: skip
        for s in names:
            cells += [
                metric_cell(row.get(s), row["unit"]),
                "" if s not in row else _na(ratio(row[s], row["transformers"])),
            ]
        body.append(cells)
    return lines + [markdown_table(header, body, align="l" + "r" * (len(header) - 1)), ""]


def compile_report(data: dict, result: dict) -> list[str]:
    peak = (result["entries"].get("peak") or {}).get("peak_flops")
    header = ["model", "workload", "eager tok/s", "compiled tok/s", "speed-up", "first call (compilation)", "MFU eager / compiled"]  # fmt: skip
    name, body = "hf_lm GPT-2-shaped", []
    for phase, label in (
        ("train", "training step (fwd + bwd + AdamW)"),
        ("forward", "forward (eval, no_grad)"),
    ):
        r = data.get("phases", {}).get(phase)
        if r is None or r.get("error") or data.get("error"):
            why = f"failed: {data.get('error') or r['error']}" if data.get("error") or r else "not run"
            body.append([name, label, why, "", "", "", ""])
            continue
        mfu = ""
        if peak and phase == "train":
            mfu = " / ".join(
                _pct(data["flops_per_step"] / r["step_s"][s] / peak) for s in ("eager", "compiled")
            )
        body.append([name, label, _na(r["eager"], "{:,.0f}"), _na(r["compiled"], "{:,.0f}"), _na(r["speedup"]), f"{r['compile_s']:.1f} s", mfu])  # fmt: skip
    lines = [
        f"## torch.compile (CPU, {data.get('backend', 'inductor')})",
        "",
        markdown_table(header, body, align="llrrrrr"),
    ]
    if "graph_breaks" in data:
        lines += ["", f"Graph breaks: {data['graph_breaks']}; graphs compiled: {data.get('unique_graphs')}."]
    return lines + [""]


# --- The entries ---

TIMING = {"rounds": 7, "warmup": 2, "train_reps": 2, "memory_steps": 3}
SMOKE_TIMING = {"rounds": 2, "warmup": 1, "train_reps": 1, "memory_steps": 2, "tolerance": 1e-3}
GPT = {"family": "gpt2", "layers": 6, "hidden": 384, "heads": 6, "intermediate": 1536, "kv_heads": 3,
       "context": 256, "vocab": 8192, "batch": 8, "seq": 256, "prompt_len": 16, "new_tokens": 128,
       "gen_batches": [1, 8], "lr": 3e-4, "tolerance": 1e-3, **TIMING}  # fmt: skip
GPT_SMOKE = {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 256, "kv_heads": 2, "context": 64,
             "vocab": 512, "batch": 2, "seq": 32, "prompt_len": 4, "new_tokens": 8, "gen_batches": [1, 2], **SMOKE_TIMING}  # fmt: skip
BERT = {"family": "bert", "layers": 4, "hidden": 256, "heads": 4, "intermediate": 1024, "vocab": 30522,
        "max_positions": 512, "dropout": 0.0, "mask_prob": 0.15, "pad_fraction": 0.5, "batch": 16, "seq": 128,
        "lr": 1e-4, "tolerance": 1e-4, **TIMING, "rounds": 9, "train_reps": 1, "infer_reps": 2}  # fmt: skip
SEQ2SEQ = {"family": "t5", "layers": 4, "hidden": 256, "heads": 4, "intermediate": 1024, "vocab": 32000,
           "max_positions": 256, "batch": 16, "source_len": 128, "target_len": 32, "gen_batch": 8,
           "new_tokens": 32, "num_beams": 4, "lr": 3e-4, "tolerance": 1e-4, **TIMING}  # fmt: skip
SMALL = {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128, "max_positions": 64, **SMOKE_TIMING}
SEQ2SEQ_SMOKE = {**SMALL, "vocab": 1000, "batch": 2, "source_len": 16, "target_len": 8, "gen_batch": 2, "new_tokens": 4, "num_beams": 2}  # fmt: skip


def pair_entry(family: str, options: dict, smoke: dict) -> Entry:
    return Entry(
        f"hf_lm against transformers' {REFERENCES[family]}: training, {'inference' if family == 'bert' else 'generation'}, memory",
        run_pair, pair_report, {**options, "family": family}, smoke, memory_worker,
    )  # fmt: skip


ENTRIES = {
    "peak": Entry(
        "the machine's peak matmul FLOP/s (MFU's denominator)",
        run_peak,
        peak_report,
        {"sizes": [1024, 2048, 4096], "repeats": 5, "min_time": 0.25, "device": "cpu", "dtype": "float32"},
        {"sizes": [512, 1024], "repeats": 3, "min_time": 0.1},
    ),
    "gpt2": pair_entry("gpt2", GPT, GPT_SMOKE),
    "llama": pair_entry("llama", {**GPT, "intermediate": 1024}, {**GPT_SMOKE, "intermediate": 192}),
    "bert": pair_entry("bert", BERT, {**SMALL, "vocab": 2000, "batch": 4, "seq": 32, "infer_reps": 1}),
    "t5": pair_entry("t5", SEQ2SEQ, SEQ2SEQ_SMOKE),
    "bart": pair_entry("bart", SEQ2SEQ, SEQ2SEQ_SMOKE),
    "compile": Entry(
        "eager against torch.compile of hf_lm's GPT-2-shaped model",
        run_compile,
        compile_report,
        {**GPT, "compile_backend": "inductor"},
        {**GPT_SMOKE, "compile_backend": "aot_eager"},
    ),
    **speed_workloads.ENTRIES,
    "fsdp": speed_fsdp.ENTRY,
}
