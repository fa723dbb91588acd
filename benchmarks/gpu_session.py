#!/usr/bin/env python
"""Issue 13's GPU measurements as parts, each run in one command on a GPU machine.

The whole sweep (the cuda tests in three precisions, the speed benchmarks with their compilations,
nanoGPT's recipe side by side, Multi30k) takes far longer than any one of them, so it is cut into
parts of a few minutes each. `--budget_s` bounds a run's wall-clock time (useful to any user with a
short GPU slot): the step running at its end is stopped, the steps after it are not run. Run the
parts in the order below:

    python -m benchmarks.gpu_session --part check --output_dir out/gpu_session

| part | what | the issue's target |
|---|---|---|
| `check` | `pytest -m cuda` (`tests/test_cuda.py`): the loop, every family, the pipelines and the tools in fp32, bf16, fp16 | everything runs on CUDA |
| `train` | `benchmarks.bench_gpu --sections gpt_train,head_loss`: GPT-2 small, eager (first alone) and compiled | eager >= nanoGPT-shaped and >= 1.6x GPT2LMHeadModel; compiled MFU >= 40% |
| `recipe` | nanoGPT's `train_shakespeare_char`: `training/configs/shakespeare_char.yaml` (its cosine ends at step 2,000), then nanoGPT's own code (`--nanogpt_dir`) on the same GPU, then the config with nanoGPT's 5,000 steps, and with rotary positions ending at step 1,500 | best val loss <= 1.46 in less wall time than nanoGPT |
| `decode` | `bench_gpu --sections decode`, with hf_lm's loop (`static_decode`) greedy and sampled | static compiled greedy B=1 >= 5x GPT2LMHeadModel's dynamic cache, same tokens |
| `translation` | `benchmarks.leaderboard_translation --entries transformer --preset gpu` (420 s at most; its 10 epochs on a CPU: BLEU 38.5 / 39.7); on demand, the same for 420 s with `--budget_schedule linear --label_smoothing 0.1` | test BLEU >= 37 within 10 minutes of training |
| `leaderboards` | `pytest -m cuda -k leaderboards/` (the smoke leaderboards, ablations; they set their own precision) | everything runs on CUDA |
| `encoders` | `bench_gpu --sections encoders`: BERT-base masked LM and T5-small training | (measured against their references) |
| `rnn_translation` | Multi30k LSTM without attention, then GRU + Bahdanau (200 s of training each; their 10 epochs on a CPU: BLEU 16.2 / 17.7 and 35.2 / 36.6) | measured against 13.76 and 28.30 |

`--part recipe,decode` runs several parts in turn (under one budget), `--part all` every part;
`--steps a,b` only the named steps of the parts (what an earlier session
measured need not run again), on-demand steps included, which run only when named (`decode`'s
batch 8 alone, `bench_gpu_decode_b8`; `translation`'s decaying rate,
`multi30k_transformer_budget_linear`). Measured on an H100 (2026-11-27): `check` 267 s, `train` 168 s
(eager 37 s, then eager and compiled 131 s), hf_lm's recipe about 120 s with a cold compile and
nanoGPT's about 150 s. On an H200: `bench_gpu_train` 141 s, `decode` 142 s, nanoGPT 143 s, each
2,500-step recipe run about 100 s. On a second H100: nanoGPT 166 s, the 2,000-step recipe 81 s,
RoPE at 1,500 steps 72 s, and `decode` more than 181 s (its batch-1 rows, with the static_decode
rows and their profile, about 150 s).

Each step is a subprocess (a crash or a hang stays in its step) with its own time limit, cut to
what is left of `--budget_s`; at the limit its whole process group is killed and it is marked
`timeout`, and the steps that no longer fit are marked `not run`. After every step `summary.md` and
`summary.json` are rewritten under `--output_dir`, next to each step's log and outputs
(`<step>.log`, `<step>/`), and the summary is printed. The exit status is 1 when a step failed or
timed out. With `--work_dir` the steps write there and `--output_dir` gets only the summaries and
`results.tar.gz`, every small log, table, metrics file and plot of the steps (no weights, no
checkpoints), rewritten after each step: one small archive to copy off the machine.

nanoGPT (karpathy/nanoGPT, MIT) is not part of hf_lm and is never committed: clone it anywhere and
pass `--nanogpt_dir`. Its data is written from `../shared/data/tinyshakespeare/input.txt` as its
`prepare.py` would (a character vocabulary, the first 90% to train.bin), without the download.

`--smoke` runs every step at tiny size on the CPU (CI: tests/test_gpu_session.py), to check the
commands and the summaries, not the GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = REPO_ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
MULTI30K = REPO_ROOT.parent / "shared" / "data" / "multi30k"
KILL_GRACE = 10.0  # seconds a step gets after SIGTERM before SIGKILL
MIN_STEP_SECONDS = 5.0  # a step is not started with less time left than this


@dataclass
class Step:
    """One command of a part: `argv(ctx)` (after `python -m`), its own time limit, and a one-line
    summary of what it wrote (`summarize(ctx)`, from its output folder)."""

    name: str
    argv: Callable[[dict], list[str] | None]  # None: skipped, with `skip_reason`
    limit: float
    summarize: Callable[[dict], str] = lambda ctx: ""
    skip_reason: str = ""
    on_demand: bool = False  # run only when `--steps` names it (a rerun of part of another step)


@dataclass
class StepResult:
    name: str
    status: str  # ok, failed, timeout, skipped, not run
    seconds: float = 0.0
    command: str = ""
    summary: str = ""
    returncode: int | None = None
    extra: dict = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# What each step reads back
# --------------------------------------------------------------------------------------------


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def summarize_gpu_check(ctx: dict, name: str) -> str:
    """The cuda tests' table (`tests/gpu_summary.py`'s summary.json) in one line."""
    rows = (_json(ctx["out"] / name / "summary.json") or {}).get("rows", [])
    ran = [r for r in rows if r["result"] != "skipped"]
    failed = [f"{r['group']}/{r['check']} ({r['precision']})" for r in ran if r["result"] != "pass"]
    text = f"{len(ran) - len(failed)} of {len(ran)} checks passed"
    if len(ran) < len(rows):
        text += f", {len(rows) - len(ran)} skipped"
    return text + (f"; failed: {', '.join(failed)}" if failed else "")


def summarize_bench_gpu(ctx: dict, name: str) -> str:
    result = _json(ctx["out"] / name / "bench_gpu.json")
    if not result:
        return "no bench_gpu.json"
    parts = []
    for t in result.get("targets", []):
        if t.get("measured") is not None:
            value = f"{100 * t['measured']:.1f}%" if t["unit"] == "%" else f"{t['measured']:.2f}x"
            parts.append(f"{t['key']} {value} ({'met' if t['met'] else 'NOT met'})")
    ok = sum(r["status"] == "ok" for r in result.get("rows", []))
    failed = [r["id"] for r in result.get("rows", []) if r["status"] == "error"]
    parts.append(f"{ok} rows ok" + (f", failed: {', '.join(failed)}" if failed else ""))
    return "; ".join(parts)


def summarize_train_run(ctx: dict, name: str) -> str:
    metrics = _json(ctx["out"] / name / "final_metrics.json")
    if not metrics:
        return "no final_metrics.json"
    best = metrics.get("best") or {}
    loss = best.get("eval_loss", metrics.get("eval_loss"))
    step = best.get("step", metrics.get("step"))
    return f"best eval_loss {loss:.4f} at step {step}; {metrics.get('seconds', 0):.0f} s in the loop"


NANOGPT_EVAL = re.compile(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)")


def summarize_nanogpt(ctx: dict, name: str) -> str:
    try:
        log = (ctx["out"] / f"{name}.log").read_text(errors="replace")
    except OSError:
        return "no log"
    evals = [(float(v), int(s)) for s, _, v in NANOGPT_EVAL.findall(log)]
    if not evals:
        return "no evaluation in the log"
    best, step = min(evals)
    return f"best val loss {best:.4f} at step {step} (nanoGPT's {ctx['nanogpt_eval_iters']}-batch estimate)"


def summarize_translation(ctx: dict, name: str) -> str:
    result = _json(ctx["out"] / name / "results.json")
    if not result:
        return "no results.json"
    parts = []
    for row in result.get("entries", []):
        if "error" in row:
            parts.append(f"{row['name']}: failed ({row['error'][:80]})")
            continue
        parts.append(
            f"{row['name']}: BLEU {row.get('test_bleu_greedy', 0):.2f} greedy / {row.get('test_bleu_beam', 0):.2f} "
            f"beam, {row.get('train_epochs', 0):.1f} epochs in {row.get('train_seconds', 0):.0f} s"
        )
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------
# The parts
# --------------------------------------------------------------------------------------------


def gpu_check_step(name: str, select: str, limit: float, smoke_select: str) -> Step:
    """The cuda tests picked by `-k select` (`make gpu-check`'s table in `<step>/summary.json`); at
    smoke size `-k smoke_select` on the CPU."""

    def argv(ctx):
        cmd = ["pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "tests/test_cuda.py"]
        cmd += ["--gpu-check-dir", str(ctx["out"] / name)]
        if ctx["smoke"]:
            return [*cmd, "--gpu-check-device", "cpu", "-k", smoke_select]
        return [*cmd, "-k", select]

    return Step(name, argv, limit, lambda ctx: summarize_gpu_check(ctx, name))


def bench_gpu_step(
    name: str, sections: str, limit: float, extra: tuple[str, ...] = (), on_demand: bool = False
) -> Step:
    def argv(ctx):
        cmd = ["benchmarks.bench_gpu", "--sections", sections, "--output_dir", str(ctx["out"] / name)]
        if ctx["smoke"]:
            return [*cmd, "--smoke", "--device", "cpu", "--no_compile"]
        return [*cmd, "--device", ctx["device"], *extra]

    return Step(name, argv, limit, lambda ctx: summarize_bench_gpu(ctx, name), on_demand=on_demand)


# the recipe at tiny size (CI): the same config file, overridden
RECIPE_SMOKE = (
    "--max_steps 4 --eval_every 2 --save_every 2 --num_hidden_layers 1 --hidden_size 32 --num_attention_heads 2 "
    "--intermediate_size 64 --per_device_batch_size 4 --block_size 32 --torch_compile false --tf32 false "
    "--mixed_precision no --log_every 1 --eval_batches 2"
).split()


def recipe_step(name: str, limit: float, extra: tuple[str, ...] = ()) -> Step:
    """The recipe's config file with `extra` flags; at smoke size only without them (a variant would
    train the same tiny run again: the smoke sizes override what the variants change)."""

    def argv(ctx):
        if ctx["smoke"] and extra:
            return None
        cmd = ["training.train", "training/configs/shakespeare_char.yaml", *extra]
        cmd += ["--output_dir", str(ctx["out"] / name), "--report_to", "csv"]
        return [*cmd, *RECIPE_SMOKE] if ctx["smoke"] else cmd

    skip = "a variant of recipe_hf_lm: at smoke size the same run"
    return Step(name, argv, limit, lambda ctx: summarize_train_run(ctx, name), skip_reason=skip)


# nanoGPT's own train.py at tiny size on a CPU (CI has no nanoGPT checkout: the step is skipped there)
NANOGPT_SMOKE = (
    "--device=cpu --compile=False --dtype=float32 --max_iters=10 --lr_decay_iters=10 --eval_interval=5 "
    "--eval_iters=2 --log_interval=5 --batch_size=4 --block_size=32 --n_layer=1 --n_head=2 --n_embd=32"
).split()


def prepare_nanogpt(ctx: dict) -> Path:
    """A working copy of `--nanogpt_dir` with `data/shakespeare_char/{train,val}.bin` and `meta.pkl`
    made from the shared text as nanoGPT's `prepare.py` makes them (no download)."""
    import numpy as np

    work = Path(tempfile.mkdtemp(prefix="nanogpt_"))
    shutil.copytree(ctx["nanogpt_dir"], work / "nanogpt", ignore=shutil.ignore_patterns(".git"))
    data_dir = work / "nanogpt" / "data" / "shakespeare_char"
    data_dir.mkdir(parents=True, exist_ok=True)
    text = SHAKESPEARE.read_text(encoding="utf-8")
    chars = sorted(set(text))  # one token per character, as nanoGPT's prepare.py
    stoi = {c: i for i, c in enumerate(chars)}
    split = int(0.9 * len(text))
    for part, piece in (("train", text[:split]), ("val", text[split:])):
        np.array([stoi[c] for c in piece], dtype=np.uint16).tofile(data_dir / f"{part}.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    with open(data_dir / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)
    return work / "nanogpt"


def nanogpt_step(name: str, limit: float) -> Step:
    def argv(ctx):
        if ctx["nanogpt_dir"] is None:
            return None
        ctx["nanogpt_cwd"] = prepare_nanogpt(ctx)
        cmd = ["train.py", "config/train_shakespeare_char.py", f"--out_dir={ctx['nanogpt_cwd'] / 'out'}"]
        ctx["nanogpt_eval_iters"] = 2 if ctx["smoke"] else 200
        return [*cmd, *NANOGPT_SMOKE] if ctx["smoke"] else cmd

    return Step(
        name, argv, limit, lambda ctx: summarize_nanogpt(ctx, name), skip_reason="no --nanogpt_dir given"
    )


# the translation part's second run: the whole budget, the rate decaying to 0 over it, label smoothing
BUDGET_LINEAR = ("--max_epochs", "1000", "--budget_schedule", "linear", "--label_smoothing", "0.1")


def translation_step(
    name: str,
    entries: str,
    limit: float,
    extra: tuple[str, ...] = (),
    recipe: tuple[str, ...] = (),
    on_demand: bool = False,
) -> Step:
    """The translation leaderboard's GPU preset with `extra` (sizes, budget) and `recipe` flags; at
    smoke size the smoke preset with the `recipe` flags alone (so that they run end to end in CI)."""

    def argv(ctx):
        cmd = ["benchmarks.leaderboard_translation", "--data_dir", str(MULTI30K), "--entries", entries]
        cmd += ["--output_dir", str(ctx["out"] / name)]
        if ctx["smoke"]:
            return [*cmd, "--smoke", "--device", "cpu", *recipe]
        return [*cmd, "--device", ctx["device"], "--preset", "gpu", *extra, *recipe]

    return Step(name, argv, limit, lambda ctx: summarize_translation(ctx, name), on_demand=on_demand)


PARTS: dict[str, list[Step]] = {
    "check": [gpu_check_step("gpu_check", "not leaderboards/", 540, "tools/evaluate_cli/fp32")],
    # bench_gpu writes its results after each section: the eager rows first, so that a compilation
    # slower than expected cannot take the eager figures with it
    "train": [
        bench_gpu_step("bench_gpu_train_eager", "gpt_train", 200, ("--no_compile",)),
        bench_gpu_step("bench_gpu_train", "gpt_train,head_loss", 540),
    ],
    # the config ends its cosine at step 2,000: on an H100 best 1.4541 in 81 s, nanoGPT 1.4697 in 166 s.
    # The variants: nanoGPT's full 5,000-step schedule (H100: 1.4737 in about 115 s), and rotary
    # positions ending at step 1,500 (H100: 1.4660, best at 1,250)
    "recipe": [
        recipe_step("recipe_hf_lm", 150),
        nanogpt_step("recipe_nanogpt", 220),
        recipe_step("recipe_hf_lm_5000_steps", 200, ("--max_steps", "5000")),
        recipe_step("recipe_hf_lm_rope_1500_steps", 100, ("--max_steps", "1500", "--position_embedding_type", "rope")),
    ],
    # batch 1 then 8 (an H100: more than 181 s; batch 1 with its profile about 150 s). The second step,
    # batch 8 alone, runs only when named, for a session that measured batch 1 before
    # (`--part decode --steps bench_gpu_decode_b8`)
    "decode": [
        bench_gpu_step("bench_gpu_decode", "decode", 540),
        bench_gpu_step("bench_gpu_decode_b8", "decode", 540, ("--decode_batches", "8"), on_demand=True),
    ],
    # the preset (bentrevett's 10 epochs at a constant rate; run on the CPU, its 10 epochs reach test
    # BLEU 38.5 greedy / 39.7 beam), its budget cut to 420 s so that training, the set-up and the
    # decoding fit the step's 520 s. On demand: the same model trained for a budget with the rate decaying over it and
    # label smoothing 0.1 (Vaswani et al.), for a session that measured the preset before
    "translation": [
        translation_step("multi30k_transformer", "transformer", 520, ("--budget_seconds", "420")),
        translation_step(
            "multi30k_transformer_budget_linear", "transformer", 520, ("--budget_seconds", "420"), BUDGET_LINEAR,
            on_demand=True,
        ),
    ],
    "leaderboards": [gpu_check_step("gpu_check_leaderboards", "leaderboards/", 540, "tools/demo/fp32")],
    "encoders": [bench_gpu_step("bench_gpu_encoders", "encoders", 540)],
    "rnn_translation": [
        translation_step("multi30k_lstm", "rnn", 265, ("--cell_type", "lstm", "--budget_seconds", "200")),
        translation_step("multi30k_bahdanau", "rnn_bahdanau", 265, ("--budget_seconds", "200")),
    ],
}  # fmt: skip


# --------------------------------------------------------------------------------------------
# Running steps under one budget
# --------------------------------------------------------------------------------------------


def run_step(step: Step, ctx: dict, time_left: float) -> StepResult:
    """Run one step as `python -m ...` (or nanoGPT's script) with min(its limit, time left)."""
    try:
        argv = step.argv(ctx)
    except Exception as err:  # noqa: BLE001 - a step that cannot even start is that step's failure
        return StepResult(step.name, "failed", summary=f"could not start: {err!r}")
    if argv is None:
        return StepResult(step.name, "skipped", summary=step.skip_reason)
    script = argv[0].endswith(".py")
    cmd = [sys.executable, *argv] if script else [sys.executable, "-m", *argv]
    cwd = ctx.pop("nanogpt_cwd", None) if script else REPO_ROOT
    limit = min(step.limit, time_left)
    log_path = ctx["out"] / f"{step.name}.log"
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = proc.wait(timeout=limit)
            status = "ok" if returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            _stop(proc)
            returncode, status = None, "timeout"
    seconds = time.perf_counter() - start
    result = StepResult(step.name, status, seconds, " ".join(cmd), returncode=returncode)
    try:
        result.summary = step.summarize(ctx)
    except Exception as err:  # noqa: BLE001 - a summary must not lose the other steps' results
        result.summary = f"(no summary: {err!r})"
    if status == "timeout":
        result.summary = f"stopped at its {limit:.0f} s limit; " + result.summary
    return result


def _stop(proc: subprocess.Popen) -> None:
    """End a step's whole process group (its workers and compilers too): SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_steps(steps: list[Step], ctx: dict, budget: float | None, on_result=None) -> list[StepResult]:
    """Run `steps` in order within `budget` seconds (None: each step to its own limit); the steps that
    no longer fit are `not run`."""
    deadline = time.perf_counter() + (math.inf if budget is None else budget)
    results = []
    for step in steps:
        time_left = deadline - time.perf_counter()
        if time_left < MIN_STEP_SECONDS:
            results.append(StepResult(step.name, "not run", summary="the part's budget was spent"))
        else:
            results.append(run_step(step, ctx, time_left))
        if on_result is not None:
            on_result(results)
    return results


def render(results: list[StepResult], header: dict) -> str:
    budget = "no budget" if header["budget"] is None else f"budget {header['budget']:.0f} s"
    lines = [
        f"# GPU session: part `{header['part']}`" + (" (smoke, CPU)" if header["smoke"] else ""),
        "",
        f"{header['device']}; torch {header['torch']}, transformers {header['transformers']}; "
        f"git {header['git']}; {budget}; {header['date']}.",
        "",
        "| step | status | seconds | result |",
        "|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r.name} | {r.status} | {r.seconds:.0f} | {r.summary.replace('|', '/')} |")
    lines += ["", "Commands:", ""] + [f"- `{r.command}`" for r in results if r.command]
    return "\n".join(lines) + "\n"


def session_header(args, device: str) -> dict:
    import torch
    import transformers

    from benchmarks.bench_common import git_revision

    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    return {
        "part": ",".join(args.part),
        "smoke": args.smoke,
        "device": name,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "git": git_revision(short=True, dirty_mark=" (uncommitted changes)", missing="unknown"),
        "budget": args.budget_s,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


RESULTS_ARCHIVE = "results.tar.gz"
PACKED_SUFFIXES = (".log", ".json", ".md", ".txt", ".csv", ".png")
PACKED_MAX_BYTES = 4 * 2**20  # per file: logs, tables, metrics and plots, never weights or checkpoints


def pack_results(work: Path, archive: Path) -> list[str]:
    """Write the steps' small result files under `work` into the gzipped tar `archive` (atomically);
    returns their paths relative to `work`. Checkpoint folders and weights are left out."""
    import tarfile

    names = sorted(
        str(path.relative_to(work))
        for path in work.rglob("*")
        if path.is_file()
        and path.suffix in PACKED_SUFFIXES
        and path.stat().st_size <= PACKED_MAX_BYTES
        and not {"checkpoints", "best"} & set(path.relative_to(work).parts)
    )
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for name in names:
            tar.add(work / name, arcname=name)
    partial.replace(archive)
    return names


def parse_parts(value: str) -> list[str]:
    """`--part`: a part, several joined by commas (run in that order under one budget), or `all`."""
    names = list(PARTS) if value == "all" else [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in PARTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown part(s) {unknown or value!r}; the parts: {', '.join(PARTS)}, all"
        )
    return names


def select_steps(parts: list[str], names: str | None) -> list[Step]:
    """The steps of `parts` in their order, but for the on-demand ones; with `names` (comma-separated)
    only those, each of which must belong to one of the parts (on-demand steps included)."""
    steps = [s for part in parts for s in PARTS[part]]
    if names is None:
        return [s for s in steps if not s.on_demand]
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = wanted - {s.name for s in steps}
    if unknown or not wanted:
        raise ValueError(
            f"`--steps`: {sorted(unknown) or names!r} not in part(s) {','.join(parts)}; "
            f"its steps: {', '.join(s.name for s in steps)}"
        )
    return [s for s in steps if s.name in wanted]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--part",
        required=True,
        type=parse_parts,
        help=f"What to run: one of {', '.join(PARTS)}, several joined by commas (in turn, one budget), or all.",
    )
    p.add_argument(
        "--output_dir", default="out/gpu_session", help="Logs, outputs and summary.md/json go here."
    )
    p.add_argument(
        "--budget_s",
        type=float,
        default=None,
        help="Wall-clock budget of the whole run, in seconds (for a short GPU slot): the step running at "
        "its end is stopped, the later ones are not run. Default: none, each step runs to its own limit.",
    )
    p.add_argument(
        "--work_dir",
        default=None,
        help="Where the steps write (default: --output_dir). When set, --output_dir gets only summary.md, "
        f"summary.json and {RESULTS_ARCHIVE}: every log, table and metrics file of the steps, no weights "
        "(one small archive to copy off the machine).",
    )
    p.add_argument(
        "--steps",
        default=None,
        help="Only these steps of the parts, comma-separated (e.g. a recipe variant measured before).",
    )
    p.add_argument("--nanogpt_dir", default=None, help="A karpathy/nanoGPT checkout (the recipe part).")
    p.add_argument("--smoke", action="store_true", help="Every step at tiny size on the CPU (CI).")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    if device == "cpu" and not args.smoke:
        print(
            "gpu_session: no CUDA device here; run it on a GPU machine, or with --smoke to check the commands."
        )
        return 0
    if args.nanogpt_dir is not None and not (Path(args.nanogpt_dir) / "train.py").is_file():
        raise ValueError(f"`--nanogpt_dir` {args.nanogpt_dir} holds no nanoGPT checkout (no train.py).")
    out = Path(args.output_dir).resolve()
    work = Path(args.work_dir).resolve() if args.work_dir else out
    for folder in (out, work):
        folder.mkdir(parents=True, exist_ok=True)
    steps = select_steps(args.part, args.steps)
    ctx = {"out": work, "device": device, "smoke": args.smoke, "nanogpt_dir": args.nanogpt_dir}
    header = session_header(args, device)

    def write(results):
        (out / "summary.json").write_text(
            json.dumps({**header, "steps": [asdict(r) for r in results]}, indent=2)
        )
        (out / "summary.md").write_text(render(results, header))
        if work != out:
            pack_results(work, out / RESULTS_ARCHIVE)

    results = run_steps(steps, ctx, args.budget_s, on_result=write)
    print(render(results, header))
    return 0 if all(r.status in ("ok", "skipped") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
