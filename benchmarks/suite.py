#!/usr/bin/env python
"""The speed suite: every hf_lm Transformer family against transformers' reference, in one command.

Each comparison runs in a process of its own (a fresh interpreter, so no family inherits another's
heap, thread pool or warm caches), one after the other, through the existing benchmark scripts and
their measurement method (A/B rounds alternating in one process after warm-up, medians; see
`bench_gpt.py`):

| family | script                                 | reference                          |
|--------|----------------------------------------|------------------------------------|
| gpt2   | `bench_gpt.py --family gpt2`           | `GPT2LMHeadModel`                  |
| llama  | `bench_gpt.py --family llama`          | `LlamaForCausalLM`                 |
| bert   | `bench_bert.py`                        | `BertForMaskedLM`                  |
| t5     | `bench_seq2seq.py --families t5`       | `T5ForConditionalGeneration`       |
| bart   | `bench_seq2seq.py --families bart`     | `BartForConditionalGeneration`     |

Two more processes measure:

- the machine's peak matmul FLOP/s (`peak_flops.py`: best square fp32 `torch.mm`, same thread
  count as the benchmarks), and from it each training benchmark's model FLOP/s utilization:
  MFU = model FLOPs of one training step / median step time / peak. The model FLOPs are those of
  the reference implementation (forward + backward, counted by `FlopCounterMode`; the AdamW step is
  timed but not counted), the same number for both sides, since both compute the same function;
  a side that skips work (hf_lm's BERT runs the vocabulary projection's backward on the masked
  positions only) gets the credit in its MFU. HFU (each side's own counted FLOPs) is in the JSON.
- the `torch.compile` speed-up of hf_lm's GPT-2-shaped model (inductor, CPU; needs a C++
  compiler; `--smoke` uses the aot_eager backend, the plumbing without the code generation): the training step (forward + backward through the compiled module, eager AdamW) and
  the eval forward, compiled vs eager alternating after warm-up (bench_gpt's `--_compile-worker`,
  on bench_gpt's model and inputs). The first compiled call (the compilation) is timed separately. If compilation fails, the table says so with the reason.

Outputs, under `--output_dir` (default `out/suite`): `suite.md` (the tables), `suite.json`
(everything: hardware, versions, peak, per-family numbers, the commands run), and per benchmark its
own JSON and log. Ratios are hf_lm / transformers: above 1, hf_lm is faster.

Usage:
    HF_HUB_OFFLINE=1 python -m benchmarks.suite                 # full run: tens of minutes, idle machine
    HF_HUB_OFFLINE=1 python -m benchmarks.suite --smoke         # tiny models, about a minute
    HF_HUB_OFFLINE=1 python -m benchmarks.suite --families gpt2,llama --threads 1
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bench_common import (
    REPO_ROOT,
    available_cores,
    comma_list,
    environment,
    error_text,
    git_revision,
    markdown_table,
    ratio,
)

logger = logging.getLogger("suite")

FAMILIES = ("gpt2", "llama", "bert", "t5", "bart")
SIDES = ("hf_lm", "transformers")
REFERENCES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "bert": "BertForMaskedLM",
    "t5": "T5ForConditionalGeneration",
    "bart": "BartForConditionalGeneration",
}

# tiny models for --smoke: every path runs, nothing is meaningful but the plumbing. The sanity
# tolerance is looser there: on a 64-wide model one AdamW step (lr * sign(grad) for most weights)
# turns float rounding in near-zero gradients into loss differences around 1e-4.
_SMOKE_GPT = (
    "--layers 2 --hidden 64 --heads 4 --context 64 --vocab 512 --batch 2 --seq 32 --prompt-len 4 "
    "--new-tokens 8 --gen-batches 1,2"
)
_SMOKE_TIMING = "--rounds 2 --train-reps 1 --warmup 1"
SMOKE_ARGS = {
    "gpt2": f"{_SMOKE_GPT} {_SMOKE_TIMING}",
    "llama": f"{_SMOKE_GPT} {_SMOKE_TIMING}",
    "bert": "--layers 2 --hidden 64 --heads 4 --intermediate 128 --vocab 2000 --max-positions 64 --batch 4 "
    f"--seq 32 --tolerance 1e-3 {_SMOKE_TIMING}",
    "t5": "--layers 2 --hidden 64 --heads 4 --intermediate 128 --vocab 1000 --max-positions 64 --batch 2 "
    f"--source-len 16 --target-len 8 --gen-batch 2 --new-tokens 4 --num-beams 2 --tolerance 1e-3 {_SMOKE_TIMING}",
    "compile": f"{_SMOKE_GPT} {_SMOKE_TIMING} --compile-backend aot_eager",
    "peak": "--sizes 512,1024 --repeats 3 --min-time 0.1",
}
SMOKE_ARGS["bart"] = SMOKE_ARGS["t5"]
FULL_ARGS = {"peak": "--sizes 1024,2048,4096 --repeats 5 --min-time 0.25", "compile": ""}

# --------------------------------------------------------------------------------------------
# Running the benchmarks, one process each
# --------------------------------------------------------------------------------------------


def bench_command(family: str, args, json_path: Path) -> list[str]:
    """The command line of one family's benchmark."""
    if family in ("gpt2", "llama"):
        cmd = ["bench_gpt", f"--family={family}"]
    elif family == "bert":
        cmd = ["bench_bert"]
    else:
        cmd = ["bench_seq2seq", f"--families={family}"]
    cmd = [sys.executable, "-m", f"benchmarks.{cmd[0]}", *cmd[1:]]
    cmd += [f"--threads={args.threads}", f"--seed={args.seed}", f"--wait-idle={args.wait_idle}"]
    cmd += [f"--output={json_path}"]
    if args.smoke or args.no_memory:
        cmd.append("--no-memory")
    if args.smoke:
        cmd += shlex.split(SMOKE_ARGS[family])
    return cmd


def run_process(cmd: list[str], log_path: Path, timeout: float) -> dict:
    """Run `cmd` in its own session, output to `log_path`; on timeout the whole group is killed
    (the benchmarks start memory subprocesses of their own)."""
    t0 = time.perf_counter()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    with open(log_path, "w") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout)
            error = None if rc == 0 else f"exit status {rc}: {last_error_line(log_path)}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc, error = None, f"timed out after {timeout:.0f}s"
    return {
        "command": shlex.join(cmd),
        "log": str(log_path),
        "wall_s": time.perf_counter() - t0,
        "error": error,
    }


def last_error_line(log_path: Path) -> str:
    """The most telling line of a failed run's log: the exception, or else the last line."""
    lines = [line.strip() for line in Path(log_path).read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line or "FAILED" in line or "disagree" in line:
            return line[:300]
    return lines[-1][:300] if lines else "no output"


# --------------------------------------------------------------------------------------------
# Reading the benchmarks' JSON into one record per family
# --------------------------------------------------------------------------------------------


def _pair(raw_phase: dict, key: str = "throughput", sides=SIDES) -> dict:
    values = {side: raw_phase[side][key] for side in sides}
    values["ratio"] = ratio(values["hf_lm"], values["transformers"])
    return values


def _max_pressure(contention: dict) -> float | None:
    shares = [v.get("cpu_pressure_share") for v in contention.values() if isinstance(v, dict)]
    shares = [s for s in shares if s is not None]
    return max(shares) if shares else None


def collect_family(family: str, report: dict) -> dict:
    """One family's record from its benchmark's JSON: training and generation (or, for BERT,
    inference) throughput of both sides with ratios, step times, FLOPs per step, sanity."""
    args = report["args"]
    rec = {
        "family": family,
        "reference": f"transformers.{REFERENCES[family]}",
        "environment": report["environment"],
    }
    if family in ("gpt2", "llama"):
        raw, flops, contention = report["raw"], report["flops"], report["contention"]
        rec["params"] = report["model"]["params"]
        rec["train"] = {
            "name": f"train (B={args['batch']}, T={args['seq']})",
            "unit": "tok/s",
            **_pair(raw["train"]),
        }
        rec["generate"] = [
            {
                "name": f"generate greedy B={b} (prompt {args['prompt_len']}, new {args['new_tokens']})",
                "short": f"B={b}",
                "unit": "new tok/s",
                **_pair(raw[f"generate_b{b}"]),
            }
            for b in (int(x) for x in str(args["gen_batches"]).split(","))
        ]
        rec["sanity"] = report["sanity"]
    elif family == "bert":
        raw, flops, contention = report["raw"], report["flops"], report["contention"]
        rec["params"] = report["model"]["params"]
        rec["train"] = {
            "name": f"train masked LM (B={args['batch']}, T={args['seq']})",
            "unit": "pos/s",
            **_pair(raw["train"]),
            "hf_lm_sparse": raw["train"]["hf_lm_sparse"]["throughput"],
        }
        rec["train"]["ratio_hf_lm_sparse"] = ratio(rec["train"]["hf_lm_sparse"], rec["train"]["transformers"])
        rec["generate"] = [
            {
                "name": f"inference forward (eval, B={args['batch']}, T={args['seq']})",
                "short": "inference fwd",
                "unit": "pos/s",
                **_pair(raw["infer"]),
            }
        ]
        rec["sanity"] = report["sanity"]
    else:
        raw, sanity = report["raw"][family], report["sanity"][family]
        flops, contention = sanity["flops"], report["contention"][family]
        rec["params"] = sanity["params"]["hf_lm"]
        rec["train"] = {
            "name": f"train (B={args['batch']}, S={args['source_len']}, T={args['target_len']})",
            "unit": "tok/s",
            **_pair(raw["train"]),
        }
        rec["generate"] = []
        for mode, beams in (("greedy", 1), ("beam", args["num_beams"])):
            for b in (1, args["gen_batch"]):
                label = "greedy" if beams == 1 else f"beam {beams}"
                rec["generate"].append(
                    {
                        "name": f"generate {label} B={b} (source {args['source_len']}, new {args['new_tokens']})",
                        "short": f"{label} B={b}",
                        "unit": "new tok/s",
                        **_pair(raw[f"{mode}_b{b}"]),
                    }
                )
        rec["sanity"] = {k: v for k, v in sanity.items() if k != "flops"}
    rec["step_s"] = {side: raw["train"][side]["median_s"] for side in raw["train"]}
    rec["flops_per_step"] = {side: flops[side]["total"] for side in flops}
    rec["flops_counted"] = next(iter(flops.values()))["counted"]
    rec["max_cpu_pressure_share"] = _max_pressure(contention)
    return rec


def add_utilization(rec: dict, peak_flops: float | None) -> None:
    """MFU (the reference's FLOPs for every side) and HFU (each side's own FLOPs), fractions of the peak."""
    model_flops = rec["flops_per_step"]["transformers"]
    rec["model_flops_per_step"] = model_flops
    rec["mfu"], rec["hfu"], rec["achieved_flops"] = {}, {}, {}
    for side, step_s in rec["step_s"].items():
        rec["achieved_flops"][side] = model_flops / step_s
        if peak_flops:
            rec["mfu"][side] = model_flops / step_s / peak_flops
            rec["hfu"][side] = rec["flops_per_step"][side] / step_s / peak_flops


# --------------------------------------------------------------------------------------------
# torch.compile: bench_gpt's worker process (`--_compile-worker`)
# --------------------------------------------------------------------------------------------


def compile_command(args, json_path: Path) -> list[str]:
    """bench_gpt's torch.compile worker: eager vs compiled hf_lm GPT, written to `json_path`."""
    cmd = [sys.executable, "-m", "benchmarks.bench_gpt", f"--_compile-worker={json_path}"]
    cmd += [f"--threads={args.threads}", f"--seed={args.seed}"]
    cmd += shlex.split(SMOKE_ARGS["compile"] if args.smoke else FULL_ARGS["compile"])
    return cmd


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{100 * value:.1f}%"


def _threads(n: int) -> str:
    return f"{n} thread" + ("" if n == 1 else "s")


def _count(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def summary_table(families: dict) -> str:
    header = [
        "family", "reference (transformers)", "params", "train throughput ratio",
        "generation / inference throughput ratios", "train MFU hf_lm", "train MFU transformers",
    ]  # fmt: skip
    body = []
    for family, rec in families.items():
        ref = REFERENCES[family]
        if rec.get("error"):
            body.append([family, ref, "", f"failed: {rec['error']}", "", "", ""])
            continue
        gen = "; ".join(f"{g['short']} {_num(g['ratio'])}" for g in rec["generate"])
        body.append(
            [
                family, ref, f"{rec['params'] / 1e6:.2f}M", _num(rec["train"]["ratio"]), gen,
                _pct(rec["mfu"].get("hf_lm")), _pct(rec["mfu"].get("transformers")),
            ]
        )  # fmt: skip
    return markdown_table(header, body, align="llrrlrr")


def details_table(families: dict) -> str:
    header = ["family", "workload", "unit", "hf_lm", "transformers", "ratio hf_lm / transformers"]
    body = []
    for family, rec in families.items():
        if rec.get("error"):
            body.append([family, "(all)", "", f"failed: {rec['error']}", "", ""])
            continue
        for row in [rec["train"], *rec["generate"]]:
            body.append(
                [
                    family, row["name"], row["unit"], _count(row["hf_lm"]), _count(row["transformers"]),
                    _num(row["ratio"]),
                ]
            )  # fmt: skip
        if "hf_lm_sparse" in rec["train"]:
            train = rec["train"]
            body.append(
                [
                    family, "train, hf_lm with sparse_prediction=True", "pos/s", _count(train["hf_lm_sparse"]),
                    _count(train["transformers"]), _num(train["ratio_hf_lm_sparse"]),
                ]
            )  # fmt: skip
        fl, ach, mfu, hfu = rec["flops_per_step"], rec["achieved_flops"], rec["mfu"], rec["hfu"]
        body += [
            [
                family, "training FLOPs per step (fwd + bwd, counted)", "GFLOP", f"{fl['hf_lm'] / 1e9:.3f}",
                f"{fl['transformers'] / 1e9:.3f}", _num(ratio(fl["hf_lm"], fl["transformers"])),
            ],
            [
                family, "train model FLOP/s (reference FLOPs / step time)", "GFLOP/s", f"{ach['hf_lm'] / 1e9:.2f}",
                f"{ach['transformers'] / 1e9:.2f}", _num(ratio(ach["hf_lm"], ach["transformers"])),
            ],
            [
                family, "train MFU (HFU)", "% of peak", f"{_pct(mfu.get('hf_lm'))} ({_pct(hfu.get('hf_lm'))})",
                f"{_pct(mfu.get('transformers'))} ({_pct(hfu.get('transformers'))})", "",
            ],
        ]  # fmt: skip
    return markdown_table(header, body, align="lllrrr")


def compile_table(result: dict | None) -> str:
    header = [
        "model", "workload", "eager tok/s", "compiled tok/s", "speed-up", "first call (compilation)",
        "MFU eager / compiled",
    ]  # fmt: skip
    name = "hf_lm GPT-2-shaped"
    if result is None or result.get("error"):
        status = "not run" if result is None else f"failed: {result['error']}"
        return markdown_table(header, [[name, "(all)", status, "", "", "", ""]], align="llrrrrr")
    body = []
    for phase in ("train", "forward"):
        r = result.get("phases", {}).get(phase)
        label = "training step (fwd + bwd + AdamW)" if phase == "train" else "forward (eval, no_grad)"
        if r is None or r.get("error"):
            body.append([name, label, "not run" if r is None else f"failed: {r['error']}", "", "", "", ""])
        else:
            mfu = r.get("mfu", {})
            mfu = f"{_pct(mfu['eager'])} / {_pct(mfu['compiled'])}" if mfu else ""
            body.append(
                [
                    name, label, _count(r["eager"]), _count(r["compiled"]), _num(r["speedup"]),
                    f"{r['compile_s']:.1f} s", mfu,
                ]
            )  # fmt: skip
    table = markdown_table(header, body, align="llrrrrr")
    if "graph_breaks" in result:
        table += (
            f"\n\nGraph breaks: {result['graph_breaks']}; graphs compiled: {result.get('unique_graphs')}."
        )
    return table


def render_markdown(suite: dict) -> str:
    env, peak = suite["environment"], suite.get("peak") or {}
    compile_backend = ((suite.get("compile") or {}).get("args") or {}).get("compile_backend", "inductor")
    peak_line = (
        f"peak fp32 matmul {peak['peak_flops'] / 1e9:.1f} GFLOP/s (square torch.mm n={peak['best_size']}, "
        f"{_threads(peak['threads'])})"
        if peak.get("peak_flops")
        else f"peak probe failed: {peak.get('error', 'not run')}"
    )
    parts = [
        f"# hf_lm vs transformers: speed suite ({suite['mode']} run)",
        "",
        f"{suite['date']}; {env['cpu_model']} ({env['cpu_capability']}), {_threads(env['threads'])} of "
        f"{env['cores_available']} cores; torch {env['torch']}, transformers {env['transformers']}, "
        f"Python {env['python']}; hf_lm at {suite['git']}; {peak_line}.",
        "",
        "Ratios are hf_lm / transformers throughput (above 1: hf_lm faster), medians of alternating A/B rounds, "
        "each family in a fresh process. MFU: the reference's training FLOPs per step (forward + backward, "
        "FlopCounterMode; AdamW timed, not counted) / median step time / measured peak.",
        "",
        summary_table(suite["families"]),
        "",
        "## Details",
        "",
        details_table(suite["families"]),
        "",
        f"## torch.compile (CPU, {compile_backend})",
        "",
        compile_table(suite.get("compile")),
    ]
    busy = {
        f: rec["max_cpu_pressure_share"]
        for f, rec in suite["families"].items()
        if (rec.get("max_cpu_pressure_share") or 0) > 0.05
    }
    if busy:
        parts += [
            "",
            "Note: the CPU was busy during timing (share of time a task waited for a CPU: "
            + ", ".join(f"{f} {v:.0%}" for f, v in busy.items())
            + "); absolute numbers are noisy, ratios from alternating rounds less so.",
        ]
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--families",
        type=str,
        default=",".join(FAMILIES),
        help="comma-separated subset of: " + ", ".join(FAMILIES),
    )
    p.add_argument(
        "--smoke", "--quick", action="store_true", help="tiny models, 2 rounds, no memory: about a minute"
    )
    p.add_argument("--threads", type=int, default=available_cores(), help="torch threads everywhere")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-memory", action="store_true", help="skip the benchmarks' memory subprocesses")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile measurement")
    p.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        help="passed to the benchmarks: wait up to this many seconds per phase for an idle CPU (PSI avg10 < 5%%)",
    )
    p.add_argument(
        "--timeout", type=float, default=None, help="seconds per process (default 3600; smoke 300)"
    )
    p.add_argument("--output_dir", "--output-dir", type=str, default="out/suite")
    args = p.parse_args(argv)
    args.families = comma_list(args.families)
    if not args.families or not set(args.families) <= set(FAMILIES):
        p.error(f"--families must be a non-empty subset of {', '.join(FAMILIES)}")
    if args.threads < 1:
        p.error("--threads must be at least 1")
    if args.timeout is None:
        args.timeout = 300.0 if args.smoke else 3600.0
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    args = parse_args(argv)

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    suite = {
        "mode": "smoke" if args.smoke else "full",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git": git_revision(short=True, dirty_mark=" (with uncommitted changes)", missing="unknown"),
        "environment": environment(torch.get_num_threads()),
        "args": vars(args),
        "runs": {},
        "families": {},
    }

    # 1. the peak, in a process of its own like everything else
    peak_json = out / "peak.json"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.peak_flops",
        f"--threads={args.threads}",
        f"--output={peak_json}",
    ]
    cmd += shlex.split(SMOKE_ARGS["peak"] if args.smoke else FULL_ARGS["peak"])
    logger.info("peak matmul FLOP/s probe")
    suite["runs"]["peak"] = run_process(cmd, out / "peak.log", args.timeout)
    if suite["runs"]["peak"]["error"] is None:
        suite["peak"] = json.loads(peak_json.read_text())
        logger.info("peak %.1f GFLOP/s", suite["peak"]["peak_flops"] / 1e9)
    else:
        suite["peak"] = {"error": suite["runs"]["peak"]["error"]}
        logger.warning("peak probe failed: %s", suite["peak"]["error"])
    peak_flops = suite["peak"].get("peak_flops")

    # 2. one process per family
    for family in args.families:
        json_path = out / f"bench_{family}.json"
        json_path.unlink(missing_ok=True)
        logger.info("%s vs transformers.%s", family, REFERENCES[family])
        run = run_process(bench_command(family, args, json_path), out / f"bench_{family}.log", args.timeout)
        suite["runs"][family] = run
        rec = {"family": family, "reference": f"transformers.{REFERENCES[family]}", "json": str(json_path)}
        if run["error"] is None:
            try:
                rec.update(collect_family(family, json.loads(json_path.read_text())))
                add_utilization(rec, peak_flops)
            except (OSError, KeyError, TypeError, ValueError) as exc:
                rec["error"] = f"could not read {json_path.name}: {error_text(exc)}"
        else:
            rec["error"] = run["error"]
        if rec.get("error"):
            logger.warning("%s failed: %s (log: %s)", family, rec["error"], run["log"])
        else:
            logger.info(
                "%s: train ratio %s, MFU hf_lm %s / transformers %s (%.0fs)",
                family,
                _num(rec["train"]["ratio"]),
                _pct(rec["mfu"].get("hf_lm")),
                _pct(rec["mfu"].get("transformers")),
                run["wall_s"],
            )
        suite["families"][family] = rec

    # 3. torch.compile
    if not args.no_compile:
        json_path = out / "compile.json"
        json_path.unlink(missing_ok=True)
        logger.info("torch.compile vs eager (hf_lm GPT)")
        run = run_process(compile_command(args, json_path), out / "compile.log", args.timeout)
        suite["runs"]["compile"] = run
        if run["error"] is None:
            suite["compile"] = json.loads(json_path.read_text())
            train = suite["compile"].get("phases", {}).get("train", {})
            if peak_flops and "step_s" in train:  # MFU of the training step, eager and compiled
                flops = suite["compile"]["flops_per_step"]
                train["mfu"] = {side: flops / s / peak_flops for side, s in train["step_s"].items()}
        else:
            suite["compile"] = {"error": run["error"]}
        for phase in ("train", "forward"):
            r = suite["compile"].get("phases", {}).get(phase, {})
            if "speedup" in r:
                logger.info("torch.compile %s speed-up %s", phase, _num(r["speedup"]))
    suite["wall_s"] = time.perf_counter() - t_start

    markdown = render_markdown(suite)
    (out / "suite.md").write_text(markdown)
    (out / "suite.json").write_text(json.dumps(suite, indent=2, default=str))
    print(markdown)
    logger.info("wrote %s and %s in %.0fs", out / "suite.md", out / "suite.json", suite["wall_s"])
    return 0 if all(not rec.get("error") for rec in suite["families"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
