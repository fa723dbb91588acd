"""The speed runner's entries that are not a model pair (`benchmarks.speed`): sparse, flex, ngram,
serve, cleaning. What each measures: docs/benchmarks.md ("How the speed runner measures").
"""

from __future__ import annotations

import gc
import json
import math
import os
import random
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .measure import (
    REPO_ROOT,
    Contention,
    alternating_rounds,
    busy_note,
    device_synchronizer,
    error_text,
    make_train_step,
    peak_rss_bytes,
    ratio,
    reset_peak_rss,
    resolve_device,
    rss_bytes,
    run_json_worker,
    tensor_bytes,
    time_alternating,
)
from .render import fmt, markdown_table, table
from .speed import Entry

# --- sparse: dense against band decoding ---

ROPE_GPT = dict(position_embedding_type="rope", norm_type="rmsnorm", hidden_act="swiglu", attention_bias=False, mlp_bias=False)  # fmt: skip


def gpt_sizes(o, positions: int) -> dict:
    return dict(vocab_size=o.vocab, hidden_size=o.hidden, num_hidden_layers=o.layers, num_attention_heads=o.heads,
                max_position_embeddings=positions, **ROPE_GPT)  # fmt: skip


def decode_run(model, prompt, n: int) -> tuple[dict, object]:
    """A greedy decode as generate() runs it (forward with the cache, one token a step): the
    prefill's wall and CPU seconds (this process's, user + system), the wall and CPU seconds per new
    token, and the cache."""
    import torch

    from hf_lm.models.hflm_common import output_cache

    def clocks() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    with torch.no_grad():
        t0 = clocks()
        out = model(prompt, use_cache=True, logits_to_keep=1)  # makes the config's cache, as generate()
        t1 = clocks()
        cache, token = output_cache(out), out.logits[:, -1:].argmax(-1)
        for _ in range(n):
            out = model(token, past_key_values=cache, use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
        t2 = clocks()
    return {"prefill_s": t1[0] - t0[0], "prefill_cpu_s": t1[1] - t0[1], "decode_s": (t2[0] - t1[0]) / n,
            "decode_cpu_s": (t2[1] - t1[1]) / n}, cache  # fmt: skip


def sparse_context(models: dict, L: int, o) -> dict:
    """Cache bytes and timings of both sides at context L, the sides alternating round by round."""
    import torch

    prompt = torch.randint(3, o.vocab, (1, L), generator=torch.Generator().manual_seed(L))
    names = list(models)
    samples = {
        side: {name: [] for name in ("prefill_s", "prefill_cpu_s", "decode_s", "decode_cpu_s")}
        for side in names
    }
    row = {"context": L}
    with Contention() as busy:
        for r in range(o.warmup + o.rounds):
            for side in names if r % 2 == 0 else names[::-1]:
                gc.collect()
                times, cache = decode_run(models[side], prompt, o.new_tokens)
                for name in samples[side] if r >= o.warmup else ():
                    samples[side][name].append(times[name])
                row[f"{side}_cache_bytes"] = tensor_bytes(
                    t for layer in cache.layers for t in (layer.keys, layer.values)
                )
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


def run_sparse(o) -> dict:
    import torch
    from transformers import DynamicCache

    from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM
    from hf_lm.models.hflm_common import returned_cache

    sizes = gpt_sizes(o, max(o.contexts) + o.new_tokens)
    torch.manual_seed(o.seed)
    dense = HfLmGPTForCausalLM(HfLmGPTConfig(**sizes)).eval()
    band = HfLmGPTForCausalLM(HfLmGPTConfig(**sizes, attention_pattern="band", attention_window=o.window))
    band.load_state_dict(dense.state_dict())
    models = {"dense": dense, "band": band.eval()}
    prompt = torch.randint(3, o.vocab, (1, 4 * o.window), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # the sliding cache changes nothing in the output
        sliding = band.generate(prompt, max_new_tokens=2 * o.window, do_sample=False)
        full = band.generate(
            prompt, **returned_cache(DynamicCache()), max_new_tokens=2 * o.window, do_sample=False
        )
    t0 = time.perf_counter()
    rows = [sparse_context(models, L, o) for L in o.contexts]
    return {
        "sanity_sliding_equals_full_cache": bool(torch.equal(sliding, full)),
        "rows": rows,
        "seconds": time.perf_counter() - t0,
    }


def sparse_report(data: dict, result: dict) -> list[str]:
    o = data["options"]
    header = ["context", "cache dense", "cache band", "band/dense", "decode ms/tok dense", "decode ms/tok band",
              "speedup", "decode CPU ms/tok dense", "decode CPU ms/tok band", "CPU speedup", "prefill s dense",
              "prefill s band"]  # fmt: skip
    cells = [
        [fmt(r["context"]), f"{r['dense_cache_bytes'] / 2**20:.2f} MiB ({r['dense_cache_tokens']} tok)",
         f"{r['band_cache_bytes'] / 2**20:.2f} MiB ({r['band_cache_tokens']} tok)", f"{r['cache_ratio']:.3f}",
         fmt(r["dense_decode_ms_per_token"]), fmt(r["band_decode_ms_per_token"]), f"{r['decode_speedup']:.2f}x",
         fmt(r["dense_decode_cpu_ms_per_token"]), fmt(r["band_decode_cpu_ms_per_token"]),
         f"{r['decode_cpu_speedup']:.2f}x", fmt(r["dense_prefill_s"], 3), fmt(r["band_prefill_s"], 3)]
        for r in data["rows"]
    ]  # fmt: skip
    return [
        "## Dense vs band attention: KV cache and decode speed",
        "",
        f"{o['layers']} layers, hidden {o['hidden']}, {o['heads']} heads, band reach w = {o['window']} "
        f"(sliding_window {o['window'] + 1}), {o['new_tokens']} new tokens, batch 1, fp32; "
        f"{o['warmup']} warm-up and {o['rounds']} timed rounds.",
        "",
        f"Sanity (sliding cache == full cache tokens): {data['sanity_sliding_equals_full_cache']}",
        "",
        markdown_table(header, cells, align="r" * len(header)),
        "",
        "Both sides are the same GPT (same weights); only attention_pattern differs. Cache bytes are counted "
        "from the cache tensors after the decode. Times: an L-token prefill, then N greedy steps through forward "
        "with the cache, timed apart (wall and process CPU time); sides alternating round by round after "
        "warm-up, median over rounds.",
        "",
    ]


# --- flex: sparse patterns on flex_attention against dense SDPA ---

CPU_NO_BACKWARD = "skipped: torch's CPU flex_attention kernel has no backward (training needs a GPU)"


def flex_models(o) -> dict:
    import torch

    from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM

    sizes = {**gpt_sizes(o, max(o.contexts)), "intermediate_size": 4 * o.hidden}
    sparse = dict(attention_window=o.window, num_global_tokens=o.global_tokens, num_random_keys=o.random_keys)
    sides = {
        "dense_sdpa": ({}, "sdpa"),
        "band_flex": (dict(attention_pattern="band", **sparse), "flex_attention"),
        "bigbird_flex": (dict(attention_pattern="band+global+random", **sparse), "flex_attention"),
    }
    if o.with_band_sdpa:  # the band as a dense T x S mask through SDPA: what the band cost before flex
        sides["band_sdpa"] = (dict(attention_pattern="band", **sparse), "sdpa")
    torch.manual_seed(o.seed)
    models, state = {}, None
    for side, (pattern, impl) in sides.items():
        model = HfLmGPTForCausalLM(HfLmGPTConfig(**sizes, **pattern))
        state = model.state_dict() if state is None else state
        model.load_state_dict(state)
        model.set_attn_implementation(impl)
        models[side] = model.to(o.device).eval()
    return models


def prefill(model, ids):
    import torch

    with torch.no_grad():
        return model(ids, use_cache=False, logits_to_keep=1).logits


def mask_build_s(model, L: int, device) -> float | None:
    """Seconds to build the flex mask of an L-token batch-1 prefill (median of 3), None for dense."""
    from hf_lm.models.hflm_masks import FlexMask

    stack = model.model
    if model.config._attn_implementation != "flex_attention" or not stack.attention_pattern.names:
        return None
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        FlexMask(stack.attention_pattern, 1, None, L, L, 0, 0, True, None, None, device).block_mask()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def flex_context(models: dict, L: int, o, t_start: float, train: bool) -> dict:
    import torch

    sync = device_synchronizer(o.device)
    ids = torch.randint(3, o.vocab, (1, L), generator=torch.Generator().manual_seed(L)).to(o.device)
    # compile flex's kernels for this length alone: after a first length torch recompiles with dynamic
    # shapes, and torch 2.13's CPU flex codegen fails on the random part's mask_mod then
    torch._dynamo.reset()
    row = {"context": L}
    fns = {side: (lambda m=m: prefill(m, ids)) for side, m in models.items()}

    def budget_used(r: int) -> bool:  # asked from the second round on
        return time.perf_counter() - t_start > o.budget_s

    with Contention() as busy:  # one warm-up call each: flex compiles its kernel for this shape
        timed = time_alternating(fns, o.rounds, 1, 1, sync, budget_used)
    samples = {side: x["wall_s"] for side, x in timed.items()}
    for side, model in models.items():
        row[f"{side}_prefill_s"] = statistics.median(samples[side])
        row[f"{side}_mask_s"] = mask_build_s(model, L, torch.device(o.device))
    for side in models:
        row[f"{side}_prefill_speedup"] = row["dense_sdpa_prefill_s"] / row[f"{side}_prefill_s"]
    row["rounds"] = len(samples["dense_sdpa"])
    if train:
        batch = {"input_ids": ids, "labels": ids, "use_cache": False}
        fns = {side: make_train_step(m, batch, 1e-5) for side, m in models.items()}
        steps = alternating_rounds(fns, o.rounds, 1, 1, sync)
        for side, m in models.items():
            m.eval()
            row[f"{side}_train_s"] = statistics.median(steps[side])
        for side in models:
            row[f"{side}_train_speedup"] = row["dense_sdpa_train_s"] / row[f"{side}_train_s"]
    row["samples"], row["contention"] = samples, busy.result
    print(f"context {L}: {row['rounds']} rounds{busy_note(busy.result)}", flush=True)
    return row


def run_flex(o) -> dict:
    import torch

    o.device = resolve_device(o.device)
    models = flex_models(o)
    ids = torch.randint(3, o.vocab, (1, 300), generator=torch.Generator().manual_seed(1)).to(o.device)
    same = {}  # each flex side against the same pattern on eager (the reference)
    for side, model in models.items():
        if model.config._attn_implementation == "flex_attention":
            flex = prefill(model, ids)
            model.set_attn_implementation("eager")
            same[side] = float((flex - prefill(model, ids)).abs().max())
            model.set_attn_implementation("flex_attention")
    train = o.device.startswith("cuda") and not o.no_train
    note = "timed" if train else ("skipped: no_train" if o.no_train else CPU_NO_BACKWARD)
    t0 = time.perf_counter()
    rows = [flex_context(models, L, o, t0, train) for L in o.contexts]
    return {"sanity_max_abs_diff": same, "training_step": note, "sides": list(models), "rows": rows, "seconds": time.perf_counter() - t0}  # fmt: skip


def flex_report(data: dict, result: dict) -> list[str]:
    o, names = data["options"], data["sides"]
    flex = [side for side in names if side.endswith("_flex")]
    train = data["training_step"] == "timed"
    columns = [["context", "context", "f0"]]
    for side in names:
        columns.append([f"{side} prefill s", f"{side}_prefill_s", "f3"])
        if side != "dense_sdpa":
            columns.append([f"{side} vs dense", f"{side}_prefill_speedup", "{:.2f}x"])
    columns += [[f"{side} mask build s", f"{side}_mask_s", "f3"] for side in flex]
    columns += [[f"{side} train s", f"{side}_train_s", "f3"] for side in names if train]
    return [
        "## Sparse attention on flex_attention vs dense SDPA: prefill",
        "",
        f"Device {o['device']}; {o['layers']} layers, hidden {o['hidden']}, {o['heads']} heads, band reach "
        f"w = {o['window']}, BigBird: the band + {o['global_tokens']} global tokens + {o['random_keys']} random "
        "keys per query; batch 1, fp32.",
        "",
        f"Sanity (max |flex - eager| at 300 tokens): {data['sanity_max_abs_diff']}",
        "",
        f"Training step: {data['training_step']}",
        "",
        table(columns, data["rows"], "r" * len(columns)),
        "",
        "All sides are the same GPT (same weights); only attention_pattern and attn_implementation differ. "
        "Prefill: a batch-1 forward of L tokens without a cache, logits of the last token; one warm-up call per "
        "side and length (flex compiles per shape), then rounds with the sides alternating, median over rounds. "
        "Ratios are dense_sdpa's time over the side's (above 1: faster than dense). Mask build: "
        "FlexMask(...).block_mask() alone, median of 3.",
        "",
    ]


# --- ngram: fit time, memory and perplexity by order ---


def prepare_corpora(o, folder: Path) -> dict:
    """Tiny Shakespeare's character ids (split 90/10 as nanoGPT does; skipped if the file is absent)
    and a walk of the Markov chain of `training.data.corpora` with an independent validation walk, saved
    as .npy for the fit workers."""
    import numpy as np

    from training.data.corpora import SyntheticCorpus

    corpora = {}
    path = Path(o.shakespeare)
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        chars = sorted(set(text))
        lookup = np.zeros(max(map(ord, chars)) + 1, dtype=np.int64)
        lookup[[ord(c) for c in chars]] = np.arange(len(chars))
        ids = lookup[np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)]
        n = int(0.9 * len(ids))
        np.save(folder / "shakespeare_train.npy", ids[:n])
        np.save(folder / "shakespeare_val.npy", ids[n:])
        corpora["shakespeare"] = {
            "label": "Tiny Shakespeare, chars",
            "vocab_size": len(chars),
            "floor_ppl": None,
        }
    else:
        print(f"Tiny Shakespeare not found at {path}: skipping that corpus.", flush=True)
    if o.markov_tokens > 0:
        corpus = SyntheticCorpus(seed=0)
        np.save(folder / "markov_train.npy", np.array(corpus.sample(o.markov_tokens, seed=0), dtype=np.int64))
        np.save(
            folder / "markov_val.npy", np.array(corpus.sample(o.markov_val_tokens, seed=1), dtype=np.int64)
        )
        corpora["markov"] = {"label": "Markov words", "vocab_size": corpus.vocab_size,
                             "floor_ppl": 2.0**corpus.entropy_rate_bits_per_word}  # fmt: skip
    for name, meta in corpora.items():
        (folder / f"{name}.json").write_text(json.dumps(meta))
    return corpora


def ngram_worker(o, corpus: str, order: str) -> dict:
    """One fit in a fresh process: its time, the peak RSS above the RSS before it, the n-gram counts,
    the table bytes, the validation perplexity."""
    import numpy as np
    import torch

    from hf_lm import HfLmNGramConfig, HfLmNGramForCausalLM
    from hf_lm.metrics import sliding_window_perplexity

    torch.set_num_threads(o.threads)
    folder = Path(o.data_dir)
    meta = json.loads((folder / f"{corpus}.json").read_text())
    train = torch.from_numpy(np.load(folder / f"{corpus}_train.npy"))
    val = torch.from_numpy(np.load(folder / f"{corpus}_val.npy"))
    config = HfLmNGramConfig(vocab_size=meta["vocab_size"], order=int(order), smoothing=o.smoothing)
    reset_ok = reset_peak_rss()
    base = rss_bytes()
    t0 = time.perf_counter()
    model = HfLmNGramForCausalLM.fit([train], config, chunk_tokens=o.chunk_tokens)
    model._levels()  # the derived smoothing tables belong to fitting, not to the first forward
    fit_s = time.perf_counter() - t0
    peak = peak_rss_bytes(reset_ok)
    t0 = time.perf_counter()
    # windows of `eval_block` scored tokens, each with at least its full n - 1 token context
    ppl = sliding_window_perplexity(model, val, o.eval_block + int(order), o.eval_block)["perplexity"]
    return {
        "corpus": corpus, "order": int(order), "smoothing": o.smoothing, "train_tokens": len(train),
        "val_tokens": len(val), "num_ngrams": model.config.num_ngrams,
        "table_bytes": sum(b.numel() * b.element_size() for b in model.buffers()), "fit_s": fit_s,
        "peak_rss_delta_bytes": peak - base,
        "peak_method": "VmHWM after clear_refs" if reset_ok else "ru_maxrss (process lifetime)",
        "val_ppl": ppl, "eval_s": time.perf_counter() - t0,
        "discounts_top_order": model.discounts()[-1] if model.discounts() else None,
    }  # fmt: skip


def run_ngram(o) -> dict:
    rows = []
    with tempfile.TemporaryDirectory(prefix="speed_ngram_") as tmp:
        corpora = prepare_corpora(o, Path(tmp))
        options = json.dumps({**vars(o), "data_dir": tmp})
        for name in corpora:
            for order in sorted(set(o.orders)):
                cmd = [sys.executable, "-m", "benchmarks.speed", "--_worker", "ngram", name, str(order), "--_options", options]  # fmt: skip
                rows.append(run_json_worker(cmd, f"n-gram fit {name} order {order}", timeout=900))
                print(
                    f"{name} order {order}: fit {rows[-1]['fit_s']:.2f}s, val ppl {rows[-1]['val_ppl']:.3f}",
                    flush=True,
                )
    return {"corpora": corpora, "rows": rows}


NGRAM_COLUMNS = [  # `render.table`'s [header, key, format] of a fit (its corpus's label and floor added)
    ["corpus", "label", None],
    ["order", "order", "{}"],
    ["train tokens", "train_tokens", "{:,}"],
    [
        "distinct n-grams (top order / all)",
        lambda r: f"{r['num_ngrams'][-1]:,} / {sum(r['num_ngrams']):,}",
        None,
    ],
    ["table MB", lambda r: r["table_bytes"] / 2**20, "{:.1f}"],
    ["fit s", "fit_s", "{:.2f}"],
    ["Mtokens/s", lambda r: r["train_tokens"] / r["fit_s"] / 1e6, "{:.2f}"],
    ["peak RSS MB", lambda r: r["peak_rss_delta_bytes"] / 2**20, "{:.0f}"],
    ["val ppl", "val_ppl", "{:.3f}"],
    ["floor ppl", lambda r: r["floor_ppl"] or "-", "{:.2f}"],
]


def ngram_report(data: dict, result: dict) -> list[str]:
    rows = [{**data["corpora"][r["corpus"]], **r} for r in data["rows"]]
    title = f"## hf_lm n-gram LM ({data['options']['smoothing']}), {data['options']['threads']} thread(s)"
    return [title, "", table(NGRAM_COLUMNS, rows, 1), ""]


# --- serve: hflm-serve on hf_lm's GPT against the same server on LlamaForCausalLM ---

SERVE_SIDES = ("hf_lm", "llama")
STARTUP_S = 120
ALPHABET = string.ascii_letters + string.digits + " .,;:!?'-"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health(url: str) -> int | None:
    """The status of `GET /health`; None while nothing listens."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


def start_server(folder: Path, log: Path, *flags: str, threads: int = 1, device: str = "cpu"):
    """`python -m hf_lm.serve FOLDER` (what `hflm-serve` runs) on a free port of 127.0.0.1, with
    `threads` torch threads; (process, base url) once `/health` answers (the server loads its model
    before it listens). The tests start theirs with it too."""
    port = free_port()
    cmd = [sys.executable, "-m", "hf_lm.serve", str(folder), "--host", "127.0.0.1", "--port", str(port)]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": str(threads),
        "TOKENIZERS_PARALLELISM": "false",
    }
    with open(log, "w") as out:
        process = subprocess.Popen(
            [*cmd, "--device", device, *flags], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        if health(url) == 200:
            return process, url
        time.sleep(0.5)
    stop_server(process)
    raise RuntimeError(f"the server did not answer within {STARTUP_S} s:\n{log.read_text()[-4000:]}")


def stop_server(process) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def serve_models(o):
    """The random Llama and its hf_lm conversion (same weights), and their character tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from hf_lm.convert import from_transformers
    from training.data.tokenizer import train_tokenizer

    tokenizer = train_tokenizer([ALPHABET * 4], kind="char", vocab_size=128, min_frequency=1)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=o.hidden, num_hidden_layers=o.layers, num_attention_heads=o.heads,
        num_key_value_heads=o.kv_heads, intermediate_size=o.intermediate, max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(o.seed)
    llama = LlamaForCausalLM(config).eval()
    return {"llama": llama, "hf_lm": from_transformers(llama).eval()}, tokenizer


def make_requests(o) -> list[tuple[str, int]]:
    """(prompt, max_tokens) of mixed lengths (16-256 characters, 16-128 new tokens), the same for both sides."""
    rng = random.Random(o.seed)
    return [
        ("".join(rng.choices(ALPHABET, k=rng.randint(16, 256))), rng.randint(16, 128))
        for _ in range(o.requests)
    ]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (Linux `/proc`; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def serve_round(client, model: str, requests: list[tuple[str, int]], pid: int) -> dict:
    """All requests at once; wall seconds to the last answer, the server's CPU seconds meanwhile,
    generated tokens (the server's counts), the texts."""

    def one(prompt: str, n: int):
        response = client.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0)
        return response.choices[0].text, response.usage.completion_tokens

    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    with ThreadPoolExecutor(len(requests)) as pool:
        answers = list(pool.map(lambda r: one(*r), requests))
    seconds, cpu1 = time.perf_counter() - t0, cpu_seconds(pid)
    cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "tokens": sum(n for _, n in answers),
        "texts": [t for t, _ in answers],
    }


def serve_samples(o, tmp: Path, requests) -> tuple[dict, dict]:
    """Both servers at once; a warm-up round, then `rounds` rounds alternating which goes first. A
    side whose server fails (a 503 when its continuous-batching worker dies) is an error, not a crash."""
    import openai

    flags = (
        ["--continuous-batching", "--cb-block-size", "32", "--cb-num-blocks", "1024"]
        if o.continuous_batching
        else []
    )
    models, tokenizer = serve_models(o)
    folders = {side: tmp / side for side in SERVE_SIDES}
    for side, model in models.items():
        model.save_pretrained(folders[side])
        tokenizer.save_pretrained(folders[side])
    samples, errors, servers = {side: [] for side in SERVE_SIDES}, {}, {}
    try:
        with ThreadPoolExecutor(len(SERVE_SIDES)) as pool:  # both servers load their models at once
            starting = {side: pool.submit(start_server, folders[side], tmp / f"{side}.log", *flags, threads=o.threads)
                        for side in SERVE_SIDES}  # fmt: skip
        servers = {side: future.result() for side, future in starting.items() if not future.exception()}
        for future in starting.values():
            future.result()  # a server that did not start: the error, once the other is in `servers`
        clients = {side: openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
                   for side, (_, url) in servers.items()}  # fmt: skip
        for r in range(o.rounds + 1):  # round 0: untimed warm-up
            for side in SERVE_SIDES if r % 2 == 0 else SERVE_SIDES[::-1]:
                if side in errors:
                    continue
                try:
                    sample = serve_round(clients[side], str(folders[side]), requests, servers[side][0].pid)
                except openai.APIError as err:
                    errors[side] = error_text(err)
                    print(
                        f"{side} failed: {errors[side]}; its server's log ends:\n{(tmp / f'{side}.log').read_text()[-3000:]}"
                    )
                    continue
                if r:
                    samples[side].append(sample)
    finally:
        for process, _ in servers.values():
            stop_server(process)
    return samples, errors


def serve_direct(o) -> dict:
    """transformers' `generate_batch` (continuous batching) in this process, no server: the same
    requests as token ids, 64 new tokens each (one generation config), one warm-up call per side."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    models, tokenizer = serve_models(o)
    prompts = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt, _ in make_requests(o)]
    config = GenerationConfig(max_new_tokens=64, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cache = ContinuousBatchingConfig(num_blocks=1024, page_size=32)

    def run(side) -> tuple[float, list]:
        t0 = time.perf_counter()
        out = models[side].generate_batch(
            prompts, config, continuous_batching_config=cache, progress_bar=False
        )
        return time.perf_counter() - t0, [
            r.generated_tokens for r in sorted(out.values(), key=lambda r: r.request_id)
        ]

    answers = {side: run(side)[1] for side in SERVE_SIDES}  # warm-up
    times = {side: [] for side in SERVE_SIDES}
    for r in range(o.rounds):
        for side in SERVE_SIDES if r % 2 == 0 else SERVE_SIDES[::-1]:
            times[side].append(run(side)[0])
    seconds = {side: statistics.median(times[side]) for side in SERVE_SIDES}
    same = statistics.mean(a == b for a, b in zip(answers["hf_lm"], answers["llama"], strict=True))
    return {"mode": "generate_batch, 64 new tokens each", "seconds": seconds, "ratio": ratio(seconds["llama"], seconds["hf_lm"]), "same_text_share": same, "errors": {}}  # fmt: skip


def run_serve(o) -> dict:
    if o.direct:
        return serve_direct(o)
    requests = make_requests(o)
    with tempfile.TemporaryDirectory() as tmp:
        samples, errors = serve_samples(o, Path(tmp), requests)

    def median(key) -> dict:
        return {
            side: None if side in errors else statistics.median(map(key, samples[side]))
            for side in SERVE_SIDES
        }

    throughput = median(lambda s: s["tokens"] / s["seconds"])
    same = None
    if not errors:
        same = statistics.mean(a == b for a, b in zip(samples["hf_lm"][0]["texts"], samples["llama"][0]["texts"], strict=True))  # fmt: skip
    return {
        "mode": "continuous batching" if o.continuous_batching else "sequential generate()",
        "tokens_per_s": throughput, "seconds": median(lambda s: s["seconds"]),
        "tokens_per_cpu_s": median(lambda s: s["tokens"] / s["cpu_seconds"] if s["cpu_seconds"] else math.nan),
        "ratio": ratio(throughput["hf_lm"], throughput["llama"]), "same_text_share": same, "errors": errors,
        "samples": {side: [{k: s[k] for k in ("seconds", "cpu_seconds", "tokens")} for s in samples[side]] for side in SERVE_SIDES},
    }  # fmt: skip


def serve_report(data: dict, result: dict) -> list[str]:
    o, errors = data["options"], data["errors"]

    def cell(side, values, digits):
        return f"failed: {errors[side]}" if side in errors else f"{values[side]:,.{digits}f}"

    def ratio_cell(a, b):
        r = ratio(a, b)
        return "n/a" if r is None else f"{r:.3f}"

    rows = [["seconds to the last answer", *(cell(s, data["seconds"], 2) for s in SERVE_SIDES),
             ratio_cell(data["seconds"]["llama"], data["seconds"]["hf_lm"])]]  # fmt: skip
    if "tokens_per_s" in data:
        t, c = data["tokens_per_s"], data["tokens_per_cpu_s"]
        rows = [["generated tokens/s", *(cell(s, t, 0) for s in SERVE_SIDES), ratio_cell(t["hf_lm"], t["llama"])], *rows,
                ["generated tokens per server CPU second", *(cell(s, c, 0) for s in SERVE_SIDES), ratio_cell(c["hf_lm"], c["llama"])]]  # fmt: skip
    share = data["same_text_share"]
    return [
        "## Serving: hflm-serve on hf_lm's GPT against LlamaForCausalLM",
        "",
        f"{o['requests']} concurrent greedy completions, {data['mode']}, median of {o['rounds']} rounds; "
        f"same text on both sides: {'n/a' if share is None else f'{share:.0%}'}.",
        "",
        markdown_table(["metric", "hf_lm GPT", "LlamaForCausalLM", "ratio (>1: hf_lm faster)"], rows, "lrrr"),
        "",
    ]


# --- cleaning: C4-style cleaning's speed, and the LSH S-curve ---

BOILERPLATE = "Sign up for our letter today. It comes every week. You can stop it at any time."
MENU = "Home | News | Sport | Contact"


def web_pages(n: int, seed: int = 0) -> list[str]:
    """`n` web-like pages: synthetic prose in lines of two sentences, with junk at fixed rates."""
    import numpy as np

    from training.data.corpora import load_builtin_corpus

    rng = np.random.default_rng(seed)
    sentences = [s.strip() + "." for d in load_builtin_corpus("synthetic") for s in d.split(".") if s.strip()]
    pages: list[str] = []
    for _ in range(n):
        if pages and rng.random() < 0.05:  # an exact copy
            pages.append(pages[int(rng.integers(len(pages)))])
            continue
        if pages and rng.random() < 0.05:  # a copy with one word changed
            words = pages[int(rng.integers(len(pages)))].split(" ")
            words[int(rng.integers(len(words)))] = "changed"
            pages.append(" ".join(words))
            continue
        picked = [
            sentences[i].capitalize() for i in rng.integers(len(sentences), size=int(rng.integers(4, 16)))
        ]
        lines = [MENU] + [" ".join(picked[i : i + 2]) for i in range(0, len(picked), 2)]
        if rng.random() < 0.3:
            lines.insert(2, BOILERPLATE)
        for rate, junk in ((0.2, "Please turn on JavaScript to see the comments."),
                           (0.2, "This site uses cookies to count its visitors."),
                           (0.02, "Lorem ipsum dolor sit amet."), (0.02, "var page = { title: 1 };")):  # fmt: skip
            if rng.random() < rate:
                lines.append(junk)
        pages.append("\n".join(lines))
    return pages


def s_curve(options, pairs: int, seed: int = 0) -> list[dict]:
    """Per Jaccard similarity s: the share of `pairs` page pairs that are LSH candidates (sharing one
    of b bands of r rows; theory 1 - (1 - s^r)^b), and the share dropped (estimate >= the threshold)."""
    import numpy as np

    from training.data.cleaning import CorpusState, jaccard_estimate

    rng = np.random.default_rng(seed)
    state = CorpusState(options)
    r, b = state.rows, len(state.bands)
    rows = []
    for s in np.round(np.arange(0.3, 1.0001, 0.05), 2):
        union = 400
        shared = int(round(s * union))  # |A & B| = shared, |A | B| = union: Jaccard exactly s
        candidates = dropped = 0
        for _ in range(pairs):
            tokens = [f"t{i}" for i in rng.permutation(10**6)[:union]]
            split = shared + (union - shared) // 2
            a, c = tokens[:split], tokens[:shared] + tokens[split:]
            sig_a, sig_c = state.minhash.signature(" ".join(a)), state.minhash.signature(" ".join(c))
            candidates += any(x == y for x, y in zip(state.band_keys(sig_a), state.band_keys(sig_c)))
            dropped += jaccard_estimate(sig_a, sig_c) >= options.minhash_threshold
        exact = shared / union
        rows.append({"jaccard": exact, "candidate_share": candidates / pairs, "theory": 1 - (1 - exact**r) ** b,
                     "dropped_share": dropped / pairs})  # fmt: skip
    return rows


def run_cleaning(o) -> dict:
    """Pages per second in memory and streamed (one process; they must agree), the report, the S-curve."""
    from datasets import Dataset

    from training.data.cleaning import C4Options, clean_corpus

    pages = web_pages(o.pages, o.seed)
    start = time.perf_counter()
    cleaned, report = clean_corpus(Dataset.from_dict({"text": pages}))
    in_memory = time.perf_counter() - start
    start = time.perf_counter()
    stream, _ = clean_corpus(Dataset.from_dict({"text": pages}).to_iterable_dataset())
    streamed_texts = [row["text"] for row in stream]
    streamed = time.perf_counter() - start
    if streamed_texts != cleaned["text"]:
        raise AssertionError("the streamed cleaning differs from the in-memory one")
    options = C4Options(minhash_ngram=1)  # single words as shingles: the pages' shingle sets are their tokens
    return {
        "pages": len(pages), "pages_per_second_in_memory": len(pages) / in_memory,
        "pages_per_second_streamed": len(pages) / streamed, "report": report.as_dict(),
        "s_curve": s_curve(options, o.pairs), "s_curve_options": {"num_perm": options.minhash_num_perm, "bands": options.minhash_bands},
    }  # fmt: skip


def rule_rows(report: dict) -> list[dict]:
    """What each rule removed (pages, lines, chars), between the input and the output."""
    counts = {"input": report["input"], **report["removed"], "output": report["output"]}
    return [{"rule": rule, **c} for rule, c in counts.items()]


RULE_COLUMNS = [["rule", "rule", None], *([name, name, "{:,}"] for name in ("pages", "lines", "chars"))]
S_CURVE_COLUMNS = [
    ["Jaccard", "jaccard", "{:.2f}"],
    ["candidates", "candidate_share", "{:.2f}"],
    ["theory", "theory", "{:.2f}"],
    ["dropped", "dropped_share", "{:.2f}"],
]


def cleaning_report(data: dict, result: dict) -> list[str]:
    return [
        "## C4-style cleaning: speed, what each rule removed, the LSH S-curve",
        "",
        f"{data['pages']:,} pages: {data['pages_per_second_in_memory']:,.0f} pages/s in memory, "
        f"{data['pages_per_second_streamed']:,.0f} pages/s streamed (same pages).",
        "",
        table(RULE_COLUMNS, rule_rows(data["report"]), 1),
        "",
        f"Near duplicates ({data['s_curve_options']['num_perm']} hash functions, "
        f"{data['s_curve_options']['bands']} bands, single words as shingles), {data['options']['pairs']} page "
        "pairs per Jaccard similarity: the share found as LSH candidates, the theory 1 - (1 - s^r)^b, the share dropped.",
        "",
        table(S_CURVE_COLUMNS, data["s_curve"], 0),
        "",
    ]


ENTRIES = {
    "sparse": Entry(
        "dense against band (sliding-window) attention: KV cache and decoding at long contexts", run_sparse,
        sparse_report, {"contexts": [512, 2048, 4096], "window": 128, "new_tokens": 64, "layers": 4, "hidden": 256,
                        "heads": 4, "vocab": 8192, "rounds": 5, "warmup": 1},
        {"contexts": [128, 256], "window": 16, "new_tokens": 9, "rounds": 1, "warmup": 0, "layers": 2, "hidden": 64, "vocab": 512},
    ),
    "flex": Entry(
        "sparse attention on flex_attention against dense SDPA: prefill at long contexts", run_flex, flex_report,
        {"contexts": [4096, 8192, 16384], "window": 256, "global_tokens": 16, "random_keys": 4, "layers": 4,
         "hidden": 256, "heads": 4, "vocab": 8192, "rounds": 3, "budget_s": 600.0, "device": "cpu",
         "with_band_sdpa": False, "no_train": False},
        {"contexts": [512], "window": 64, "rounds": 1, "layers": 2, "hidden": 64, "vocab": 512},
    ),
    "ngram": Entry(
        "the n-gram LM by order: fit time, peak memory, validation perplexity", run_ngram, ngram_report,
        {"orders": [1, 2, 3, 4, 5], "smoothing": "modified_kn",
         "shakespeare": str(REPO_ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"),
         "markov_tokens": 3_000_000, "markov_val_tokens": 200_000, "chunk_tokens": 1 << 20, "eval_block": 8192},
        {"orders": [1, 2, 3], "markov_tokens": 300_000, "markov_val_tokens": 50_000}, ngram_worker,
    ),
    "serve": Entry(
        "hflm-serve on hf_lm's GPT against the same server on LlamaForCausalLM", run_serve, serve_report,
        {"requests": 32, "rounds": 3, "hidden": 256, "layers": 4, "heads": 4, "kv_heads": 2, "intermediate": 688,
         "threads": 1, "continuous_batching": True, "direct": False},
        {"requests": 8, "rounds": 1},
    ),
    "cleaning": Entry(
        "C4-style cleaning: pages/s in memory and streamed, the LSH S-curve", run_cleaning, cleaning_report,
        {"pages": 5000, "pairs": 100}, {"pages": 300, "pairs": 10},
    ),
}  # fmt: skip
