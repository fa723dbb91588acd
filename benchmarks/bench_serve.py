#!/usr/bin/env python
"""Serving benchmark: `hflm-serve` (transformers' own OpenAI-compatible server) on hf_lm's GPT against
the same server on transformers' `LlamaForCausalLM` of the same size, in one run.

Both folders hold the same function: a random Llama (RoPE, RMSNorm, SwiGLU, grouped-query attention,
`--hidden`/`--layers`/`--heads`/`--kv-heads`/`--intermediate`) and its hf_lm conversion
(`hf_lm.convert.from_transformers`), with one character tokenizer (one token per character, so a
prompt of N characters is N tokens). Both servers run at once, each pinned to its folder, on
127.0.0.1, with `--continuous-batching` unless `--no-continuous-batching`, in fp32 on the CPU.

A round sends `--requests` (32) greedy `/v1/completions` requests of mixed lengths at once (prompts
of 16 to 256 tokens, 16 to 128 new tokens, the same list for both sides) and times them to the last
answer. Rounds alternate which server goes first; after one untimed warm-up round per side, each
figure is the median over `--rounds`. Throughput is generated tokens (the servers' own counts) per
second; the ratio is hf_lm / Llama (above 1: hf_lm is faster). Tokens per CPU second of the server
process (user + system time, from `/proc`) are printed too: on a shared machine another process's
load stretches wall time, hardly a server's CPU time. A sanity line gives the share of requests
whose two answers are the same text. A side whose server fails (a 503 when its continuous-batching
worker dies) is reported as failed, and the run exits 1.

Usage:
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_serve             # 32 requests, 3 rounds
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_serve --quick     # smoke run
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_serve --no-continuous-batching   # one request at a time
    HF_HUB_OFFLINE=1 python -m benchmarks.bench_serve --direct    # generate_batch alone, no server

Prints a markdown table and writes JSON to `--output` (default `out/bench_serve.json`).
"""

from __future__ import annotations

import argparse
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

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from benchmarks.bench_common import (
    environment,
    environment_line,
    error_text,
    markdown_table,
    ratio,
    ratio_cell,
)
from hf_lm.convert import from_transformers
from training.data.tokenizer import train_tokenizer

SIDES = ("hf_lm", "llama")
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
    cmd += ["--device", device, *flags]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": str(threads),
        "TOKENIZERS_PARALLELISM": "false",
    }
    with open(log, "w") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
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


def build_models(args):
    """The random Llama and its hf_lm conversion (same weights), and their character tokenizer."""
    tokenizer = train_tokenizer([ALPHABET * 4], kind="char", vocab_size=128, min_frequency=1)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        intermediate_size=args.intermediate,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(args.seed)
    llama = LlamaForCausalLM(config).eval()
    return {"llama": llama, "hf_lm": from_transformers(llama).eval()}, tokenizer


def save_folders(root: Path, args) -> dict[str, Path]:
    """The Llama and its hf_lm conversion, each saved with the same character tokenizer."""
    models, tokenizer = build_models(args)
    folders = {}
    for side, model in models.items():
        folders[side] = root / side
        model.save_pretrained(folders[side])
        tokenizer.save_pretrained(folders[side])
    return folders


def make_requests(args) -> list[tuple[str, int]]:
    """(prompt, max_tokens) of mixed lengths, the same for both sides."""
    rng = random.Random(args.seed)
    return [
        ("".join(rng.choices(ALPHABET, k=rng.randint(16, 256))), rng.randint(16, 128))
        for _ in range(args.requests)
    ]


def direct(args) -> dict:
    """`generate_batch` on both models in this process, no server: the same requests (as token ids),
    greedy, one warm-up call each, then `--rounds` alternating rounds; the median seconds per side."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    torch.set_num_threads(args.threads)
    models, tokenizer = build_models(args)
    requests = make_requests(args)
    prompts = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt, _ in requests]
    # one length for every request: generate_batch takes one generation config
    config = GenerationConfig(max_new_tokens=64, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cache = ContinuousBatchingConfig(num_blocks=1024, page_size=32)

    def run(side) -> tuple[float, list]:
        t0 = time.perf_counter()
        out = models[side].generate_batch(
            prompts, config, continuous_batching_config=cache, progress_bar=False
        )
        tokens = [r.generated_tokens for r in sorted(out.values(), key=lambda r: r.request_id)]
        return time.perf_counter() - t0, tokens

    times: dict[str, list[float]] = {side: [] for side in SIDES}
    answers = {side: run(side)[1] for side in SIDES}  # warm-up
    for r in range(args.rounds):
        for side in SIDES if r % 2 == 0 else SIDES[::-1]:
            times[side].append(run(side)[0])
    seconds = {side: statistics.median(times[side]) for side in SIDES}
    same = statistics.mean(a == b for a, b in zip(answers["hf_lm"], answers["llama"], strict=True))
    print(f"generate_batch, {len(prompts)} prompts x 64 new tokens, median of {args.rounds} rounds")
    print(f"same tokens on both sides: {same:.0%}")
    rows = [["seconds", f"{seconds['hf_lm']:.2f}", f"{seconds['llama']:.2f}",
             ratio_cell(ratio(seconds["llama"], seconds["hf_lm"]))]]  # fmt: skip
    print(
        markdown_table(["metric", "hf_lm GPT", "LlamaForCausalLM", "ratio (>1: hf_lm faster)"], rows, "lrrr")
    )
    return {
        "seconds": seconds,
        "ratio": ratio(seconds["llama"], seconds["hf_lm"]),
        "same": same,
        "errors": {},
    }


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (Linux `/proc`; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def run_round(client, model: str, requests: list[tuple[str, int]], pid: int) -> dict:
    """All requests at once; wall seconds to the last answer, the server's CPU seconds meanwhile,
    generated tokens, the texts."""

    def one(prompt: str, n: int):
        response = client.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0)
        return response.choices[0].text, response.usage.completion_tokens

    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    with ThreadPoolExecutor(len(requests)) as pool:
        answers = list(pool.map(lambda r: one(*r), requests))
    seconds, cpu1 = time.perf_counter() - t0, cpu_seconds(pid)
    cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    tokens = sum(n for _, n in answers)
    return {"seconds": seconds, "cpu_seconds": cpu, "tokens": tokens, "texts": [t for t, _ in answers]}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=688)
    p.add_argument("--threads", type=int, default=1, help="torch threads of each server")
    p.add_argument("--continuous-batching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="8 requests, 1 round")
    p.add_argument("--output", default="out/bench_serve.json")
    p.add_argument("--direct", action="store_true", help="generate_batch in this process, no server")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.rounds = 8, 1
    if args.direct:
        print(environment_line(environment(args.threads)))
        return direct(args)
    import openai

    env = environment(args.threads)
    print(environment_line(env))
    flags = ["--continuous-batching", "--cb-block-size", "32", "--cb-num-blocks", "1024"]
    flags = flags if args.continuous_batching else []
    requests = make_requests(args)
    samples: dict[str, list[dict]] = {side: [] for side in SIDES}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = save_folders(Path(tmp), args)
        servers = {}
        try:
            for side in SIDES:
                servers[side] = start_server(
                    folders[side], Path(tmp) / f"{side}.log", *flags, threads=args.threads
                )
            clients = {
                side: openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
                for side, (_, url) in servers.items()
            }
            for r in range(args.rounds + 1):  # round 0: untimed warm-up
                for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                    if side in errors:
                        continue
                    try:
                        sample = run_round(clients[side], str(folders[side]), requests, servers[side][0].pid)
                    except openai.APIError as err:  # e.g. 503: the continuous-batching worker died
                        errors[side] = error_text(err)
                        log = (Path(tmp) / f"{side}.log").read_text()[-3000:]
                        print(f"{side} failed: {errors[side]}; the end of its server's log:\n{log}")
                        continue
                    if r:
                        samples[side].append(sample)
        finally:
            for process, _ in servers.values():
                stop_server(process)

    def median(key) -> dict[str, float | None]:
        return {
            side: None if side in errors else statistics.median(map(key, samples[side])) for side in SIDES
        }

    throughput = median(lambda s: s["tokens"] / s["seconds"])
    seconds = median(lambda s: s["seconds"])
    per_cpu = median(lambda s: s["tokens"] / s["cpu_seconds"] if s["cpu_seconds"] else math.nan)
    mode = "continuous batching" if args.continuous_batching else "sequential generate()"
    print(f"{args.requests} concurrent greedy completions, {mode}, median of {args.rounds} rounds")
    same = None
    if not errors:
        pairs = zip(samples["hf_lm"][0]["texts"], samples["llama"][0]["texts"], strict=True)
        same = statistics.mean(a == b for a, b in pairs)
        print(f"same text on both sides: {same:.0%}")

    def cell(side, values, digits):
        return f"failed: {errors[side]}" if side in errors else f"{values[side]:,.{digits}f}"

    rows = [
        ["generated tokens/s", *(cell(side, throughput, 0) for side in SIDES),
         ratio_cell(ratio(throughput["hf_lm"], throughput["llama"]))],
        ["seconds to the last answer", *(cell(side, seconds, 2) for side in SIDES),
         ratio_cell(ratio(seconds["llama"], seconds["hf_lm"]))],
        ["generated tokens per server CPU second", *(cell(side, per_cpu, 0) for side in SIDES),
         ratio_cell(ratio(per_cpu["hf_lm"], per_cpu["llama"]))],
    ]  # fmt: skip
    print(
        markdown_table(["metric", "hf_lm GPT", "LlamaForCausalLM", "ratio (>1: hf_lm faster)"], rows, "lrrr")
    )
    result = {
        "environment": env,
        "args": vars(args),
        "tokens_per_s": throughput,
        "seconds": seconds,
        "tokens_per_cpu_s": per_cpu,
        "ratio": ratio(throughput["hf_lm"], throughput["llama"]),
        "same_text_share": same,
        "errors": errors,
        "samples": {
            side: [{k: s[k] for k in ("seconds", "cpu_seconds", "tokens")} for s in samples[side]]
            for side in SIDES
        },
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    sys.exit(1 if main()["errors"] else 0)
