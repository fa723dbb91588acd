"""The budgeted leaderboards: train each entry of a board under a budget, score it, write its results.

    python -m benchmarks.leaderboard lm --entries lstm,gpt_rope --budget_seconds 60
    python -m benchmarks.leaderboard ablations --entries swiglu,positions --seeds 0,1
    python -m benchmarks.leaderboard translation --list          # a board's entries
    python -m benchmarks.leaderboard sst2 --smoke                # tiny models, data and budget

The boards (lm, translation, sst2, mask_predict, ablations, length_extrapolation), their entries,
settings, presets and README tables are data (`benchmarks/leaderboard.yaml`); what each measures
and how: docs/benchmarks.md. Outputs under `--output_dir` (default `out/<board>`): `results.json`,
its rendering `README.md`, the plots and the runs; the committed results are in `benchmarks/results/`.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import functools
import json
import logging
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import yaml

from benchmarks import measure
from benchmarks.measure import REPO_ROOT, git_revision, load_average, resolve_device
from benchmarks.render import bar_chart, fmt, percent, pyplot, table, write_results

logger = logging.getLogger("benchmarks.leaderboard")

SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
EVAL_FRACTION = 0.1  # nanoGPT's shakespeare_char/prepare.py: data[:int(n * 0.9)] / data[int(n * 0.9):]
CALIBRATION_MARGIN = 0.95  # share of the predicted budget the calibrated step count aims for
MAX_EVAL_SHARE = 0.25  # periodic evaluations may use at most this share of the budget
NEVER = str(10**9)  # a step count no run reaches (`--save_every`, open-ended `--max_steps`)
NGRAM_FIT_LOG = re.compile(r"Fitted the order-\d+ \S+ n-gram model in ([0-9.]+) s")
MULTIPLIERS = (1, 2, 4, 8)  # length_extrapolation's evaluation lengths, in training contexts
BENTREVETT = "https://github.com/bentrevett/pytorch-seq2seq"
ENTRY_FILE = Path(__file__).with_name("leaderboard.yaml")  # the boards as data


def load_boards(path: Path = ENTRY_FILE) -> dict:
    """`leaderboard.yaml`: settings as `(full, smoke, help)` tuples, entries as namespaces over the board's
    `entry_defaults`, LM model flags as `training.train` takes them, length schemes as their variants."""
    boards = yaml.safe_load(path.read_text())
    variant_defaults = boards["ablations"]["entry_defaults"]
    for board in boards.values():
        rows = board["settings"].items()
        board["settings"] = {k: (*(tuple(v) if isinstance(v, list) else v for v in row[:2]), row[2]) for k, row in rows}  # fmt: skip
        defaults = board.pop("entry_defaults", {})
        board["entries"] = {name: SimpleNamespace(**{**defaults, **e}) for name, e in board["entries"].items()}  # fmt: skip
    for e in boards["lm"]["entries"].values():
        e.model_args = _flags(e.model_args, getattr(e, "config_overrides", None))
        e.smoke_model_args = _flags(e.smoke_model_args, getattr(e, "smoke_config_overrides", None))
    variants, schemes = boards["ablations"]["entries"], boards["length_extrapolation"]["entries"]
    for name, e in schemes.items():
        schemes[name] = variants.get(e.variant) or SimpleNamespace(**{**variant_defaults, **vars(e)})
    return boards


def _flags(text: str, overrides: dict | None) -> tuple[str, ...]:
    return tuple(text.split()) + (("--config_overrides", json.dumps(overrides)) if overrides else ())


BOARDS = load_boards()
# every GPT variant: the ablations' and length_extrapolation's xPos
VARIANTS = {**BOARDS["ablations"]["entries"], "xpos": BOARDS["length_extrapolation"]["entries"]["xpos"]}
BASELINE = BOARDS["ablations"]["baseline_fields"]
NANOGPT_REFERENCE = {**BOARDS["lm"]["references"][0], "perplexity": math.exp(BOARDS["lm"]["references"][0]["val_loss"])}  # fmt: skip

# ---- The command line: a board, its entries, its settings


def setting_value(text: str, full, smoke):
    """A setting's command-line text as the type of its preset values (`measure.typed`)."""
    try:
        return measure.typed(text, full if full is not None else smoke)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _parser(board: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.leaderboard", description=__doc__.split("\n\n")[0])
    p.add_argument("board", choices=list(BOARDS))
    p.add_argument("--entries", default=None, help="Comma-separated entries (default: the board's).")
    p.add_argument("--smoke", action="store_true", help="Tiny models, data and budget (CI): --preset smoke.")
    p.add_argument("--preset", default=None, help="full, smoke, or a board's own (translation: gpu).")
    p.add_argument("--data", type=Path, default=None, help="The board's data (default under ../shared/data).")
    p.add_argument("--output_dir", type=Path, default=None, help="Default out/<board>[_smoke].")
    p.add_argument("--seed", type=int, default=None, help="Seed of every run (ablations: --seeds).")
    p.add_argument("--list", action="store_true", help="Print the board's entries and exit.")
    group = p.add_argument_group(f"{board} settings (default: the preset's)")
    for key, (full, smoke, text) in BOARDS[board]["settings"].items() if board in BOARDS else ():
        flag = isinstance(full, bool)  # `--rerun` alone is true
        group.add_argument(f"--{key}", type=functools.partial(setting_value, full=full, smoke=smoke),
                       default=argparse.SUPPRESS, nargs="?" if flag else None, const="true" if flag else None,
                       help=f"{text} (full: {full}; smoke: {smoke}).")  # fmt: skip
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The board, its settings (the preset's, then the options given), entries, data and output folder."""
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser(next((arg for arg in argv if arg in BOARDS), None))
    args = parser.parse_args(argv)
    board = BOARDS[args.board]
    table = board["settings"]
    if args.smoke and args.preset not in (None, "smoke"):
        parser.error(f"--smoke contradicts --preset {args.preset}.")
    if args.seed is not None and "seeds" in table:  # it would be ignored, and results.json would claim it
        parser.error(f"--seed: {args.board} runs every seed of --seeds (e.g. --seeds {args.seed}).")
    args.seed = args.seed or 0
    given = {key: getattr(args, key) for key in table if hasattr(args, key)}
    if args.preset is None:
        device = given.get("device", "auto")
        gpu = "gpu" in board.get("presets", {}) and device != "cpu" and _device(parser, device) == "cuda"
        args.preset = "smoke" if args.smoke else "gpu" if gpu else "full"
    presets = {"full": {k: v[0] for k, v in table.items()}, "smoke": {k: v[1] for k, v in table.items()}}
    presets.update({name: {**presets["full"], **extra} for name, extra in board.get("presets", {}).items()})
    if args.preset not in presets:
        parser.error(f"--preset must be one of {list(presets)}, got {args.preset!r}.")
    args.smoke = args.preset == "smoke"
    args.settings = {**presets[args.preset], **given}
    try:
        args.names = select_entries(args.board, args.entries)
        check_settings(args.board, args.settings)
    except ValueError as err:
        parser.error(str(err))
    if "device" in args.settings:
        args.settings["device"] = _device(parser, args.settings["device"])
    args.data = args.data or SHARED_DATA / board["data"]
    args.output_dir = args.output_dir or REPO_ROOT / "out" / (args.board + ("_smoke" if args.smoke else ""))
    kind = "file" if Path(board["data"]).suffix else "folder"  # as its default: input.txt, multi30k
    if not args.list and not (args.data.is_file() if kind == "file" else args.data.is_dir()):
        parser.error(f"--data {str(args.data)!r} is not a {kind} (the board reads one: {board['data']}).")
    return args


def _device(parser, name: str) -> str:
    try:
        return resolve_device(name)
    except ValueError as err:
        parser.error(str(err))


def select_entries(board: str, spec: str | None) -> list[str]:
    """The entries named in `spec` (comma-separated; None: the board's default), in the order given;
    `ablations` takes components too and always runs the baseline, `mask_predict` runs both models."""
    entries = BOARDS[board]["entries"]
    if not spec:
        return list(BOARDS[board].get("default_entries", entries))
    components = {v.component: None for v in entries.values()} if board == "ablations" else {}
    names = measure.parse_entries(spec, {**entries, **components})  # a component: its variants
    if board == "ablations":
        chosen = {"baseline", *names}
        return [n for n, v in entries.items() if n in chosen or v.component in chosen]
    if board == "mask_predict" and set(names) != set(entries):  # in either order
        raise ValueError("--entries: mask_predict compares both models; run both.")
    return names


POSITIVE = ("budget_seconds", "pretrain_seconds", "max_steps", "block_size", "batch_size", "jobs", "evals",
            "ngram_orders", "iterations", "trace_iterations", "length_beam", "num_beams")  # fmt: skip


def check_settings(board: str, s: dict) -> None:
    """Refuse settings the runs cannot use (`choices` in leaderboard.yaml), before any training starts."""
    for key in POSITIVE:  # a list: every item, and not empty
        values = s.get(key, 1) if isinstance(s.get(key), tuple) else (s.get(key, 1),)
        if not values or not all((v or 0) > 0 for v in values):  # `none` too
            raise ValueError(f"--{key} must be > 0, got {s[key]!r}.")
    for key in ("max_chars", "train_chars", "eval_chars", *SAMPLE_CAPS, "max_train_seconds"):
        if s.get(key) is not None and not s[key] > 0:  # a negative cap would cut from the end
            raise ValueError(f"--{key} must be > 0 or none, got {s[key]!r}.")
    if (s.get("num_threads") or 0) < 0:  # none or 0: torch's default
        raise ValueError(f"--num_threads must be >= 0, got {s['num_threads']}.")
    for key, allowed in BOARDS[board].get("choices", {}).items():
        if not set(s[key] if isinstance(s[key], tuple) else [s[key]]) <= set(allowed):
            raise ValueError(f"--{key} must be within {allowed}, got {s[key]!r}.")
    if board == "ablations" and (not s["seeds"] or not 0 < s["early_fraction"] <= 1):
        raise ValueError("--seeds must name a seed and --early_fraction be in (0, 1].")
    if board == "length_extrapolation" and s["block_size"] % 2:
        raise ValueError(f"--block_size must be even, got {s['block_size']}.")


# ---- What the boards share: hardware, data, tokenizers, runs


def hardware(num_threads: int | None) -> dict:
    """`measure.environment` (`threads`: what each run uses) and the GPU torch sees."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {**measure.environment(num_threads or torch.get_num_threads()), "gpu": gpu}


def write_split(data_file: Path, folder: Path, max_chars=None, train_chars=None, eval_chars=None) -> dict:
    """Split `data_file`'s first `max_chars` characters as nanoGPT does (`training.data.splits.tail_split`),
    write the halves' first `train_chars` / `eval_chars` (`newline=""`: the files hold exactly the split)."""
    from datasets import Dataset

    from training.data.splits import tail_split

    with open(data_file, encoding="utf-8", newline="") as f:
        text = f.read()[:max_chars]
    parts = tail_split(Dataset.from_dict({"text": [text]}), EVAL_FRACTION)
    train, val = parts["train"]["text"][0][:train_chars], parts["eval"]["text"][0][:eval_chars]
    folder.mkdir(parents=True, exist_ok=True)
    files = {"train_file": folder / "train.txt", "val_file": folder / "val.txt"}
    for key, part in (("train_file", train), ("val_file", val)):
        files[key].write_text(part, encoding="utf-8", newline="")
    return {"source": str(data_file), **{key: str(path) for key, path in files.items()}, "characters": len(text),
            "train_characters": len(train), "val_characters": len(val)}  # fmt: skip


def char_tokenizer(text: str, folder: Path, block_size: int, vocab_size: int, check: str | None = None):
    """Train and save the character tokenizer on `text`; every character of `check` (the validation
    text) must be one known token, so the loss is per character (ValueError otherwise)."""
    from training.data.tokenizer import train_tokenizer

    # min_frequency=1: a character seen once (Shakespeare has one "$") is kept
    tokenizer = train_tokenizer([text], kind="char", vocab_size=vocab_size, model_max_length=block_size, min_frequency=1)  # fmt: skip
    if check is not None:
        unknown = sorted(set(check) - set(tokenizer.get_vocab()))
        ids = tokenizer(check, add_special_tokens=False)["input_ids"]
        if unknown or len(ids) != len(check) or tokenizer.unk_token_id in ids:
            raise ValueError(f"The character tokenizer does not give one known token per validation character "
                             f"(missing {unknown!r}): the loss would not be per character.")  # fmt: skip
    tokenizer.save_pretrained(folder)
    return tokenizer


def shared_tokenizer(b: Board, kind: str, texts, length_key: str, finish, **options) -> tuple[object, bool]:
    """`(tokenizer, reused)`: the one in `out/tokenizer` if trained on the same data with the same
    settings, else one trained on `texts()` (right padding), passed to `finish` and saved there."""
    from transformers import AutoTokenizer

    from training.data.tokenizer import train_tokenizer

    s, folder = b.settings, b.out / "tokenizer"
    keys = ("vocab_size", "max_train_samples", length_key)
    stamp = {"data_dir": str(Path(b.data).resolve()), "kind": kind, **{k: s[k] for k in keys}}
    record = folder / "leaderboard_settings.json"
    if record.is_file() and json.loads(record.read_text()) == stamp:
        logger.info("Reusing the tokenizer in %s (same settings).", folder)
        return AutoTokenizer.from_pretrained(folder), True
    options.update(model_max_length=s[length_key], padding_side="right")
    tokenizer = train_tokenizer(texts(), kind, s["vocab_size"], **options)
    finish(tokenizer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    record.write_text(json.dumps(stamp, indent=2))
    logger.info("Trained and saved the shared tokenizer (%d tokens) to %s.", len(tokenizer), folder)
    return tokenizer, False


def read_metrics(path: Path) -> list[dict]:
    """The rows of a run's `metrics.csv`, numbers parsed (empty cells are None)."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [{k: float(v) if v not in ("", None) else None for k, v in row.items()} for row in csv.DictReader(f)]  # fmt: skip


def train_run(argv: list[str], run_dir: Path, num_threads: int | None, reuse=False, stamp=None) -> dict:
    """`python -m training.train argv` in a fresh process, logged to `run_dir/train.log` (with `reuse`, a
    folder holding the final metrics of the same `stamp`, default the command, is kept): status
    ok/reused/failed, metrics, rows."""
    record, final, stamp = run_dir / "leaderboard_command.json", run_dir / "final_metrics.json", stamp or argv
    result = {"command": measure.command_line("training.train", argv), "loadavg_before": load_average()}
    if reuse and final.is_file() and record.is_file() and json.loads(record.read_text()) == stamp:
        result.update(status="reused", returncode=0, wall_seconds=None)
    else:
        shutil.rmtree(run_dir, ignore_errors=True)  # a stale folder's checkpoints must not mix in
        run_dir.mkdir(parents=True)
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        if num_threads:  # None or 0: torch's default
            env.update(OMP_NUM_THREADS=str(num_threads), MKL_NUM_THREADS=str(num_threads))
        start = time.perf_counter()
        with open(run_dir / "train.log", "w") as log:
            command = [sys.executable, "-m", "training.train", *argv]
            returncode = subprocess.run(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode  # fmt: skip
        ok = returncode == 0 and final.is_file()
        result.update(status="ok" if ok else "failed", returncode=returncode)
        result["wall_seconds"] = round(time.perf_counter() - start, 2)
        if ok:
            record.write_text(json.dumps(stamp))
        else:
            result["error_tail"] = (run_dir / "train.log").read_text(errors="replace")[-3000:]
            logger.error("%s failed (exit %s); log tail:\n%s", run_dir, returncode, result["error_tail"])
    result["final_metrics"] = json.loads(final.read_text()) if result["status"] != "failed" else None
    result["rows"] = read_metrics(run_dir / "metrics.csv")
    result["loadavg_after"] = load_average()
    return result


def finetune_row(name: str, module: str, argv: list[str], fields: dict) -> dict:
    """Run `module`'s `finetune` in this process: the row (`fields`, the training fields, the metrics, the
    command); a failing entry's row holds the error, so the others' results are kept."""
    import importlib

    command = measure.command_line(module, argv)
    logger.info("=== %s: %s", name, command)
    row = {"name": name, **fields}
    try:
        script = importlib.import_module(module)
        start = time.perf_counter()
        m = script.finetune(*script.parse_args(argv))
        row.update(num_parameters=m["num_parameters"], train_steps=m["train_steps"], train_epochs=m["train_epochs"],
                   train_seconds=m["train_runtime"], train_budget_reached=m["train_budget_reached"],
                   train_loss=m.get("train_loss"), total_seconds=time.perf_counter() - start, metrics=m)  # fmt: skip
    except Exception as err:  # recorded in the row; the board exits 1 after the others
        logger.exception("Entry %s failed.", name)
        row["error"] = repr(err)
    row["command"] = command
    return row


def command_line(template: str, values: dict, caps=(), **lists) -> list[str]:
    """A command line from a leaderboard.yaml `argv` template: each (shell-quoted) word formatted with
    `values`, a word `*name` replaced by the list `lists[name]`; then `--key value` for each of the `caps`
    keys whose value is not None."""
    words = []
    for word in shlex.split(template):
        words += list(lists[word[1:]]) if word.startswith("*") else [word.format(**values)]
    given = [key for key in caps if values.get(key) is not None]
    return words + [arg for key in given for arg in (f"--{key}", str(values[key]))]


SAMPLE_CAPS = ("max_train_samples", "max_eval_samples", "max_test_samples")


# one run of a board: its parsed command line (`parse_args`), the board as `name`, its folder as `out`
Board = argparse.Namespace


def run_values(b: Board, run: str) -> dict:
    """What the command lines of the board's run `run` are formatted with: the settings, data, seed and folders."""
    folders = {"tokenizer_dir": b.out / "tokenizer", "run_dir": b.out / "runs" / run}
    return {**b.settings, "data": b.data, **folders, "seed": b.seed}


# ---- lm: the language-modeling leaderboard


def train_command(entry, s: dict, data: dict, tokenizer_dir: Path, out: Path, seed: int, smoke: bool, **run):
    """One LM run's `training.train` arguments; `run`: max_steps, eval_every, warmup_steps, and optionally
    lr_scheduler ("cosine"), max_train_seconds and ngram_order."""
    reference = entry.kind == "reference"
    block, batch = (64, 12) if reference else (s["block_size"], s["batch_size"])
    model_args = entry.smoke_model_args if smoke and entry.smoke_model_args else entry.model_args
    if entry.kind == "ngram":
        model_args = f"--arch ngram --ngram_order {run['ngram_order']} --ngram_smoothing modified_kn".split()
    values = {**data, "tokenizer_dir": tokenizer_dir, "block": block, "batch": batch, "never": NEVER,
              "learning_rate": entry.learning_rate, "lr_scheduler": "cosine", **run, "seed": seed, "out": out,
              "eval_batches": max(1, math.ceil(s["curve_eval_blocks"] / batch))}  # fmt: skip
    args = command_line(BOARDS["lm"]["argv"], values, ["max_train_seconds"], model_args=model_args)
    if reference:  # nanoGPT's recipe: its get_batch windows, its cosine ending at a tenth, its best model
        args += ["--sampling", "random_windows", "--min_lr_rate", "0.1"]
        args += ["--load_best_model_at_end", "true", "--metric_for_best_model", "eval_loss"]
    return args


def step_rows(rows: list[dict]) -> list[dict]:
    """The per-step log rows (training loss and time), one per step, in step order."""
    seen, out = set(), []
    for row in rows:
        if row.get("loss") is not None and row.get("seconds") is not None and row["step"] not in seen:
            seen.add(row["step"])
            out.append(row)
    return sorted(out, key=lambda r: r["step"])


def probe_timings(rows: list[dict], final_seconds: float, skip: int = 2) -> dict:
    """Step time (mean after the first `skip` steps, which pay one-off costs) and evaluation time (last
    step's row to the run's end: slightly over, on the safe side) of a probe logged every step."""
    logged = step_rows(rows)
    if len(logged) < skip + 2:
        raise ValueError(f"The probe logged {len(logged)} steps; calibration needs at least {skip + 2}.")
    first, last = logged[skip], logged[-1]
    step_s = (last["seconds"] - first["seconds"]) / (last["step"] - first["step"])
    return {"step_seconds": step_s, "eval_seconds": max(0.0, final_seconds - last["seconds"])}


def calibrate(budget_s: float, step_s: float, eval_s: float, evals: int, margin=CALIBRATION_MARGIN) -> dict:
    """The `max_steps`, `eval_every`, `warmup_steps` and `evals` that fill `budget_s` with steps and
    evaluations, the evaluations thinned to at most `MAX_EVAL_SHARE` of the budget."""
    if not budget_s > 0 or not step_s > 0:
        raise ValueError(f"Need a positive budget and step time, got {budget_s!r} s and {step_s!r} s.")
    if eval_s > 0:
        evals = min(evals, max(1, int(MAX_EVAL_SHARE * budget_s / eval_s)))
    max_steps = max(1, int(margin * max(0.0, budget_s - evals * eval_s) / step_s))
    return {"max_steps": max_steps, "eval_every": max(1, math.ceil(max_steps / evals)),
            "warmup_steps": min(100, max_steps // 10), "evals": evals}  # fmt: skip


def train_seconds(rows: list[dict]) -> float | None:
    """The training loop's time from the per-step rows: first to last step, plus one mean step."""
    logged = step_rows(rows)
    if len(logged) < 2:
        return None
    span = logged[-1]["seconds"] - logged[0]["seconds"]
    return span + span / (logged[-1]["step"] - logged[0]["step"])


def curve(rows: list[dict]) -> dict:
    """The validation-loss curve of a run: steps, training seconds (from the first step) and losses."""
    logged = step_rows(rows)
    if not logged:
        return {"steps": [], "seconds": [], "eval_loss": []}
    mean_step = train_seconds(rows) / len(logged) if len(logged) > 1 else 0.0
    origin = logged[0]["seconds"] - mean_step  # about when the first step began
    points = {}
    for row in rows:  # the last row of a step wins (a budget stop re-evaluates after the loop)
        if row.get("eval_loss") is not None:
            points[int(row["step"])] = (row["seconds"], row["eval_loss"])
    steps = sorted(points)
    return {"steps": steps, "seconds": [None if points[s][0] is None else round(points[s][0] - origin, 2) for s in steps],
            "eval_loss": [points[s][1] for s in steps]}  # fmt: skip


def score_validation(model_dir: Path, val_ids, block_size: int) -> dict:
    """A saved model's mean next-token loss over `val_ids` in non-overlapping blocks (the tail that fills
    none dropped, as `training.objectives.evaluation.evaluate` scores), with perplexity, bits per
    token (a character here), parameters (None for an n-gram model, which stores counts) and n-grams."""
    import torch
    from transformers import AutoModelForCausalLM

    import hf_lm  # noqa: F401  (registers the Auto classes)
    from hf_lm.metrics.sliding_window import sliding_window_perplexity

    n_blocks = len(val_ids) // block_size
    if n_blocks == 0:
        raise ValueError(f"{len(val_ids)} validation tokens are fewer than one block of {block_size}.")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    scored = sliding_window_perplexity(
        model, val_ids[: n_blocks * block_size], block_size, block_size, batch_size=64
    )
    num_ngrams = getattr(model.config, "num_ngrams", None)
    parameters = None if num_ngrams is not None else sum(p.numel() for p in model.parameters())
    return {**scored, "parameters": parameters, "ngrams": sum(num_ngrams) if num_ngrams is not None else None}


def _lm_row(b: Board, name: str, run: dict, run_dir: Path, block_size: int, val_ids) -> dict:
    entry = BOARDS["lm"]["entries"][name]
    scored = score_validation(run_dir / "final", val_ids, block_size)
    final = run["final_metrics"]
    return {
        "name": name, "label": entry.label, "kind": entry.kind, "parameters": scored["parameters"],
        "steps": final["step"], "tokens_seen": final["tokens_seen"], "train_seconds": train_seconds(run["rows"]),
        "wall_seconds": run["wall_seconds"], "val_loss": scored["loss"], "perplexity": scored["perplexity"],
        "bits_per_character": scored["bits_per_token"], "scored_characters": scored["n_tokens"],
        "eval_block_size": block_size, "learning_rate": entry.learning_rate,
        "curve_eval_loss_last": final.get("eval_loss"),  # training.train's own, on the curve subset
        "curve": curve(run["rows"]), "command": run["command"],
        "loadavg_before": run["loadavg_before"], "loadavg_after": run["loadavg_after"],
    }  # fmt: skip


def _checked(run: dict, run_dir: Path, what: str) -> dict:
    if run["status"] == "failed":
        raise RuntimeError(f"{what} exited with {run['returncode']}; see {run_dir / 'train.log'}")
    return run


def lm_ngram(b: Board, name: str, ctx: dict) -> dict:
    """Fit every order and score each; the row is the best order."""
    entry, s, orders = BOARDS["lm"]["entries"][name], b.settings, []
    for order in s["ngram_orders"]:
        run_dir = b.out / "runs" / f"ngram_order{order}"
        argv = train_command(entry, s, ctx["data"], ctx["tokenizer"], run_dir, b.seed, b.smoke,
                             max_steps=1, eval_every=1, warmup_steps=0, ngram_order=order)  # fmt: skip
        run = _checked(train_run(argv, run_dir, s["num_threads"]), run_dir, f"the order-{order} fit")
        fit = NGRAM_FIT_LOG.search((run_dir / "train.log").read_text(errors="replace"))
        scored = score_validation(run_dir / "final", ctx["val_ids"], s["block_size"])
        orders.append({
            "order": order, "val_loss": scored["loss"], "perplexity": scored["perplexity"],
            "bits_per_character": scored["bits_per_token"], "ngrams": scored["ngrams"],
            "fit_seconds": float(fit.group(1)) if fit else None,
            "wall_seconds": run["wall_seconds"], "command": run["command"],
        })  # fmt: skip
    best = min(orders, key=lambda o: o["val_loss"])
    return {
        "name": name, "label": f"{entry.label}, order {best['order']}", "kind": entry.kind, "parameters": None,
        "ngrams": best["ngrams"], "best_order": best["order"], "steps": None,
        "tokens_seen": ctx["data"]["train_characters"],  # counted once
        "train_seconds": best["fit_seconds"], "wall_seconds": best["wall_seconds"],
        **{key: best[key] for key in ("val_loss", "perplexity", "bits_per_character")},
        "eval_block_size": s["block_size"], "orders": orders, "command": best["command"],
    }  # fmt: skip


def lm_trained(b: Board, name: str, ctx: dict) -> dict:
    """A budgeted entry (a probe calibrates a cosine schedule, or a constant rate stopped by the budget) or
    nanoGPT's configuration (its fixed iterations); the final model scored."""
    entry, s = BOARDS["lm"]["entries"][name], b.settings
    command = functools.partial(train_command, entry, s, ctx["data"], ctx["tokenizer"], seed=b.seed, smoke=b.smoke)  # fmt: skip
    run_dir, budget = b.out / "runs" / name, s["budget_seconds"]
    if entry.kind == "reference":
        plan = {"max_steps": s["nanogpt_iters"], "eval_every": s["nanogpt_eval_every"],
                "warmup_steps": min(100, s["nanogpt_iters"] // 10)}  # fmt: skip
        calibration, budget = None, None
    elif s["schedule"] == "constant":
        plan = {"max_steps": NEVER, "eval_every": s["constant_eval_every"], "warmup_steps": s["constant_warmup_steps"],
                "lr_scheduler": "constant", "max_train_seconds": budget}  # fmt: skip
        calibration = {"schedule": "constant", "warmup_steps": plan["warmup_steps"], "eval_every": plan["eval_every"]}  # fmt: skip
    else:
        probe_dir, n = b.out / "runs" / f"{name}_probe", s["probe_steps"]
        # the rate only ramps up (a gentle start: the probe measures time, not learning)
        probe = train_run(command(probe_dir, max_steps=n, eval_every=n, warmup_steps=n, lr_scheduler="constant"),
                          probe_dir, s["num_threads"])  # fmt: skip
        timings = probe_timings(_checked(probe, probe_dir, "the probe")["rows"], probe["final_metrics"]["seconds"])  # fmt: skip
        step_s, eval_s = timings["step_seconds"], timings["eval_seconds"]
        plan = calibrate(budget, step_s, eval_s, s["evals"])
        logger.info("%s: %.3f s/step, %.2f s/evaluation -> %s", name, step_s, eval_s, plan)
        calibration = {**{k: round(v, 4) for k, v in timings.items()}, **plan, "schedule": "cosine",
                       "probe_command": probe["command"], "probe_wall_seconds": probe["wall_seconds"]}  # fmt: skip
        plan = {k: plan[k] for k in ("max_steps", "eval_every", "warmup_steps")} | {
            "max_train_seconds": budget
        }
    run = _checked(train_run(command(run_dir, **plan), run_dir, s["num_threads"]), run_dir, "the training run")  # fmt: skip
    row = _lm_row(b, name, run, run_dir, 64 if entry.kind == "reference" else s["block_size"], ctx["val_ids"])
    if calibration is not None:
        seconds = row["train_seconds"]
        calibration["stopped_by_budget"] = (  # the safety net cut the schedule before its end
            True if s["schedule"] == "constant" else row["steps"] < calibration["max_steps"]
        )
        calibration["budget_used"] = None if seconds is None else round(seconds / budget, 3)
        row["calibration"] = calibration
    return row


def run_lm(b: Board) -> dict:
    import torch

    s = b.settings
    data = write_split(b.data, b.out / "data", s["max_chars"])
    train_text, val_text = (Path(data[k]).read_text(encoding="utf-8") for k in ("train_file", "val_file"))
    tokenizer = char_tokenizer(train_text, b.out / "tokenizer", s["block_size"], 10_000, check=val_text)
    data["vocab_size"] = len(tokenizer)
    ids = tokenizer(val_text, add_special_tokens=False)["input_ids"]
    ctx = {"data": data, "tokenizer": b.out / "tokenizer", "val_ids": torch.tensor(ids, dtype=torch.long)}
    rows = []
    for name in b.names:
        entry, start = BOARDS["lm"]["entries"][name], time.perf_counter()
        try:  # one broken entry must not cost the others: its row holds the error
            rows.append((lm_ngram if entry.kind == "ngram" else lm_trained)(b, name, ctx))
            logger.info("%s: done in %.0f s", name, time.perf_counter() - start)
        except Exception as err:
            logger.exception("%s failed", name)
            rows.append({"name": name, "label": entry.label, "error": repr(err)})
    result = {"budget_seconds": s["budget_seconds"], "schedule": s["schedule"], "data": data, "entries": rows,
              "reference": [NANOGPT_REFERENCE]}  # fmt: skip
    plot_lm(rows, b.out)
    return result


def plot_lm(rows: list[dict], folder: Path) -> None:
    """`val_loss.png` (a bar per entry) and `loss_curves.png` (validation loss against training time),
    nanoGPT's published loss as a dashed line in both."""
    plt, ok = pyplot(), [r for r in rows if "error" not in r]
    published = {
        "color": "tab:red",
        "linestyle": "--",
        "label": f"nanoGPT published ({NANOGPT_REFERENCE['val_loss']})",
    }
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(ok) + 2), 4.5))
    bars = ax.bar(range(len(ok)), [r["val_loss"] for r in ok], color="tab:blue")
    ax.bar_label(bars, [f"{r['val_loss']:.3f}" for r in ok], fontsize=8)
    ax.axhline(NANOGPT_REFERENCE["val_loss"], **published)
    ax.set_xticks(range(len(ok)), [r["label"] for r in ok], rotation=35, ha="right", fontsize=8)
    ax.set(ylabel="validation loss (nats/char)", title="Tiny Shakespeare (char): validation loss")
    _save(plt, fig, ax, folder / "val_loss.png")
    fig, ax = plt.subplots(figsize=(8, 5))
    for row in ok:
        if row["kind"] == "ngram":
            ax.axhline(row["val_loss"], color="gray", linestyle=":", label=row["label"])
            continue
        points = [(t, v) for t, v in zip(row["curve"]["seconds"], row["curve"]["eval_loss"]) if t is not None]
        if points:
            ax.plot(*zip(*points), marker=".", label=row["label"])
    ax.axhline(NANOGPT_REFERENCE["val_loss"], **published)
    ax.set(xlabel="training time (s)", ylabel="validation loss (nats/char, curve subset)",
           title="Tiny Shakespeare (char): validation loss during training")  # fmt: skip
    _save(plt, fig, ax, folder / "loss_curves.png", fontsize=7)


def _save(plt, fig, ax, path: Path, fontsize: int = 8, **legend) -> None:
    ax.legend(fontsize=fontsize, **legend)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---- translation and mask_predict: Multi30k De->En


def translation_argv(b: Board, name: str) -> list[str]:
    """The `training.finetune_translation` arguments of a translation entry or a mask_predict model: the
    board's template with the shared head and tail (no validation)."""
    argv, model, extra, board, s = BOARDS["translation"]["argv"], [], [], b.name, b.settings
    values = {"logging_steps": 50, **run_values(b, name), "name": name}
    if board == "translation":
        entry = BOARDS[board]["entries"][name]
        values.update(attention=entry.attention, family=entry.family)
        model = command_line(argv["rnn_seq2seq" if entry.family == "rnn_seq2seq" else "transformer"], values)
        # "cuda" is Trainer's own default; "cpu" is said, which also lets Trainer autocast bf16 on a CPU
        extra += ["--use_cpu", "true"] if s["device"] == "cpu" else []
        extra += [f"--{s['mixed_precision']}", "true"] if s["mixed_precision"] != "no" else []
    extra += ["--test_split", ""] if name == "mask_predict" else []  # mask_predict_decoding: once per T
    head, tail = (command_line(argv[part], values) for part in ("head", "tail"))
    template = argv["entry"] if board == "translation" else BOARDS[board]["argv"]
    return command_line(template, values, SAMPLE_CAPS, head=head, tail=tail, model=model) + extra


def metric_fields(board: str, metrics: dict) -> dict:
    """A row's fields from the fine-tuning metrics (leaderboard.yaml `metrics`: the first key present)."""
    return {
        f: next((metrics[k] for k in keys if k in metrics), None)
        for f, keys in BOARDS[board]["metrics"].items()
    }


def translation_tokenizer(b: Board) -> tuple[object, bool]:
    """The joint byte-level BPE tokenizer (BART's specials, `<mask>` included) of both sides of the
    training pairs, saved with EOS appended: every entry encodes "... </s>" identically."""
    from training.data.tokenizer import BART_SPECIAL_TOKENS
    from training.translation_data import TranslationDataArguments as DataArgs
    from training.translation_data import ensure_eos, load_translation_dataset, sides

    def texts():
        data_args = DataArgs(data_dir=str(b.data), validation_split="", test_split="", max_train_samples=b.settings["max_train_samples"])  # fmt: skip
        pairs = load_translation_dataset(data_args)["train"]
        return sides(pairs, "de") + sides(pairs, "en")

    return shared_tokenizer(
        b, "byte_bpe", texts, "max_length", ensure_eos, special_tokens=BART_SPECIAL_TOKENS
    )


def run_translation(b: Board) -> dict:
    s, references = b.settings, BOARDS["translation"]["references"]
    tokenizer, reused = translation_tokenizer(b)
    rows = []
    for name in b.names:
        entry = BOARDS["translation"]["entries"][name]
        argv = translation_argv(b, name)
        row = finetune_row(name, "training.finetune_translation", argv,
                           {"label": entry.label, "family": entry.family, "attention": entry.attention})  # fmt: skip
        row.update(metric_fields("translation", row.get("metrics", {})), published_bleu=entry.published)
        row["target_bleu"] = entry.target
        for decoding in ("greedy", "beam"):  # whether the measured BLEU reaches the target
            value = row[f"test_bleu_{decoding}"]
            row[f"target_met_{decoding}"] = None if entry.target is None or value is None else value >= entry.target  # fmt: skip
        rows.append(row)
    measured = [row for row in rows if "error" not in row]
    bar_chart(
        b.out / "bleu.png", [translation_label(row, s["cell_type"]) for row in measured],
        {"greedy": [r["test_bleu_greedy"] for r in measured], f"beam {s['num_beams']}": [r["test_bleu_beam"] for r in measured]},
        title=f"Multi30k De→En test BLEU, {s['budget_seconds']:g} s training budget per model", ylabel="sacrebleu BLEU",
        references=[(f"{r['short']} (published)", r["bleu"]) for r in references], reference_name="bentrevett, 10 epochs (published)",
    )  # fmt: skip
    return {
        "task": "Multi30k De->En (test_2016_flickr)", "device": s["device"], "budget_seconds": s["budget_seconds"],
        "cell_type": s["cell_type"], "data_dir": str(b.data),
        "train_pairs": measured[0]["metrics"]["train_samples"] if measured else None,
        "test_pairs": measured[0]["test_samples"] if measured else None,
        "tokenizer": {"path": str(b.out / "tokenizer"), "kind": "byte_bpe", "vocab_size": len(tokenizer), "reused": reused},
        "entries": rows, "references": [{**r, "epochs": 10, "source": BENTREVETT, "published": True} for r in references],
    }  # fmt: skip


def translation_label(row: dict, cell_type: str) -> str:
    rnn = row.get("family") == "rnn_seq2seq"
    return row["label"].replace("RNN", cell_type.upper()) if rnn else row["label"]


def run_mask_predict(b: Board) -> dict:
    translation_tokenizer(b)
    rows = []
    for name, entry in BOARDS["mask_predict"]["entries"].items():
        argv = translation_argv(b, name)
        rows.append(finetune_row(name, "training.finetune_translation", argv, {"label": entry.label}))
        if "error" in rows[-1]:
            raise SystemExit(f"{name} failed: {rows[-1]['error']}")
    result = {"entries": rows, "mask_predict": mask_predict_decoding(b)}
    plot_mask_predict_bleu(result, b.out / "bleu_vs_iterations.png", b.settings["budget_seconds"])
    return result


def mask_predict_decoding(b: Board) -> dict:
    """Decode the test split with each number of iterations (BLEU per T), and trace one sentence."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from hf_lm.plots import plot_mask_predict
    from training.finetune_translation import bleu_metric
    from training.translation_data import TranslationDataArguments as DataArgs
    from training.translation_data import load_translation_dataset, sides

    s, final = b.settings, b.out / "runs" / "mask_predict" / "final"
    model, tokenizer = AutoModelForMaskedLM.from_pretrained(final).eval(), AutoTokenizer.from_pretrained(final)  # fmt: skip
    data_args = DataArgs(data_dir=str(b.data), validation_split="", max_test_samples=s["max_test_samples"])
    test = load_translation_dataset(data_args)["test"]
    sources, references = sides(test, "de"), sides(test, "en")
    metric, rows = bleu_metric(), []
    for T in s["iterations"]:
        texts, start = [], time.perf_counter()
        for i in range(0, len(sources), 64):
            enc = tokenizer(sources[i : i + 64], return_tensors="pt", padding=True, truncation=True, max_length=s["max_length"])  # fmt: skip
            ids = model.generate(enc["input_ids"], enc["attention_mask"], num_iterations=T,
                                 length_beam=s["length_beam"], max_new_tokens=s["generation_max_length"] - 2)  # fmt: skip
            texts += [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]
        seconds = time.perf_counter() - start
        bleu = metric.compute(predictions=texts, references=references)
        rows.append({"iterations": T, "test_bleu": bleu["score"], "decode_seconds": seconds, "signature": bleu["signature"]})  # fmt: skip
        logger.info("Mask-Predict T=%d: BLEU %.2f in %.1f s", T, bleu["score"], seconds)
        (b.out / f"test_predictions_T{T}.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    # one sentence's refinement: each iteration's tokens, the re-predicted (masked) ones in brackets
    T = s["trace_iterations"]
    out = model.generate(**tokenizer([sources[0]], return_tensors="pt"), num_iterations=T, length_beam=1,
                         return_dict_in_generate=True)  # fmt: skip
    length, trace, tokens = int(out.lengths[0]), [], []
    for t in range(T):
        ids = out.iteration_tokens[t, 0, :length].tolist()
        words = [tokenizer.decode([i]).strip() or "␣" for i in ids]
        masked = out.iteration_masked[t, 0, :length].tolist()
        tokens.append(words)
        trace.append({
            "iteration": t, "masked": sum(masked), "tokens": " ".join(f"[{w}]" if m else w for w, m in zip(words, masked)),
            "text": tokenizer.decode(ids, skip_special_tokens=True).strip(),
            "mean_log_prob": float(out.iteration_log_probs[t, 0, :length].mean()),
        })  # fmt: skip
    plot_mask_predict(out, tokens, b.out / "trace.png", title=f"Mask-Predict, T = {T}: {sources[0]}")
    return {"by_iterations": rows, "test_samples": len(sources), "trace": trace, "trace_source": sources[0],
            "trace_reference": references[0], "trace_length": length, "trace_iterations": T}  # fmt: skip


def plot_mask_predict_bleu(result: dict, path: Path, budget_seconds: float) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    rows, ar = result["mask_predict"]["by_iterations"], result["entries"][0]["metrics"]
    ax.plot([r["iterations"] for r in rows], [r["test_bleu"] for r in rows], marker="o", label="Mask-Predict")
    for key, style, label in (("test_greedy_bleu", "--", "autoregressive, greedy"), ("test_bleu", ":", "autoregressive, beam")):  # fmt: skip
        if key in ar:
            ax.axhline(ar[key], linestyle=style, color="gray", label=label)
    ax.set_xscale("log")
    ax.set_xticks([r["iterations"] for r in rows], [str(r["iterations"]) for r in rows])
    ax.set(xlabel="Mask-Predict iterations T", ylabel="test BLEU",
           title=f"Multi30k De→En, {budget_seconds:.0f} s of training each")  # fmt: skip
    ax.grid(alpha=0.3)
    _save(plt, fig, ax, path, fontsize=10)


# ---- sst2: from scratch against pretrained, the same fine-tuning budget


def _encoder_config(config_class, tokenizer, s: dict, **extra):
    """The board's encoder ("bert" preset: post-norm, exact GELU, learned positions), as `config_class`."""
    from hf_lm import BERT_PRESETS

    return config_class(
        **BERT_PRESETS["bert"], vocab_size=len(tokenizer), hidden_size=s["hidden_size"],
        num_hidden_layers=s["num_layers"], num_attention_heads=s["num_heads"], intermediate_size=s["intermediate_size"],
        max_position_embeddings=s["max_seq_length"], hidden_dropout=s["dropout"], attention_dropout=s["dropout"],
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
        sparse_prediction=True,  # pretraining runs the MLM head on the masked positions only
        **extra,
    )  # fmt: skip


def save_initialization(folder: Path, tokenizer, s: dict, seed: int, objective: str = "mlm") -> int:
    """Save the seed's fresh masked LM (or ELECTRA's discriminator and 1/4-wide generator) and the
    tokenizer to `folder`; returns the parameters."""
    import torch

    from hf_lm import HfLmBertConfig, HfLmBertForMaskedLM, HfLmElectraConfig
    from training.objectives.electra import ElectraPretrainingModel

    config_class, model_class, extra = {
        "mlm": (HfLmBertConfig, HfLmBertForMaskedLM, {}),
        "electra": (HfLmElectraConfig, ElectraPretrainingModel, {"embedding_size": s["hidden_size"]}),
    }[objective]
    torch.manual_seed(seed)
    model = model_class(_encoder_config(config_class, tokenizer, s, **extra))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def _starts_with_cls(tokenizer) -> None:
    if tokenizer("a")["input_ids"][:1] != [tokenizer.cls_token_id]:
        raise RuntimeError("The WordPiece tokenizer does not start its encodings with [CLS].")


def pretrain_argv(b: Board, objective: str, text_file: Path, init_dir: Path) -> list[str]:
    """The `training.train` arguments of the pretraining with `objective` ("mlm" or "electra")."""
    values = {**run_values(b, f"{objective}_pretrain"), "objective": objective, "init_dir": init_dir}
    return command_line(BOARDS["sst2"]["argv"]["pretrain"], {**values, "text_file": text_file})


def sst2_finetune_argv(b: Board, name: str, start_dir: Path) -> list[str]:
    """The `training.finetune_classification` arguments of one entry."""
    entry, s = BOARDS["sst2"]["entries"][name], b.settings
    budget = s["budget_seconds"] + (s["pretrain_seconds"] if entry.extra_time else 0.0)
    lr = s["pretrained_learning_rate"] if entry.pretraining else s["scratch_learning_rate"]
    values = {**run_values(b, name), "start_dir": start_dir, "lr": lr, "budget": budget}
    return command_line(BOARDS["sst2"]["argv"]["finetune"], values, SAMPLE_CAPS)


def sst2_pretraining(b: Board, objective: str, sentences: list[str], tokenizer) -> dict:
    """Pretrain with `objective` for `pretrain_seconds` into `runs/<objective>_pretrain/` in a fresh process
    (or reuse one made with the same command and tokenizer); its record."""
    s, tokenizer_dir, init_dir = b.settings, b.out / "tokenizer", b.out / "init"
    if objective == "electra":
        init_dir = b.out / "init_electra"
        save_initialization(init_dir, tokenizer, s, b.seed, "electra")
    text_file = b.out / "pretraining_text.txt"
    text_file.write_text("".join(sentence + "\n" for sentence in sentences), encoding="utf-8")
    run_dir, argv = b.out / "runs" / f"{objective}_pretrain", pretrain_argv(b, objective, text_file, init_dir)
    stamp = {"argv": argv, "tokenizer": json.loads((tokenizer_dir / "leaderboard_settings.json").read_text())}
    run = train_run(argv, run_dir, s["num_threads"], s["reuse_pretraining"], stamp)
    metrics = _checked(run, run_dir, "the pretraining")["final_metrics"]
    keys = "train_loss eval_loss eval_mlm_accuracy eval_disc_loss eval_disc_accuracy tokens_seen".split()
    return {"objective": objective, "command": run["command"], "reused": run["status"] == "reused",
            "steps": metrics["step"], "seconds": metrics["seconds"], "budget_seconds": s["pretrain_seconds"],
            **{key: metrics.get(key) for key in keys}, "metrics": metrics}  # fmt: skip


def run_sst2(b: Board) -> dict:
    from training.finetune_classification import (
        SPECIAL_TOKENS,
        ClassificationDataArguments,
        load_classification_dataset,
    )

    s, entries = b.settings, BOARDS["sst2"]["entries"]
    data_args = ClassificationDataArguments(data_dir=str(b.data), max_train_samples=s["max_train_samples"])
    raw = load_classification_dataset(data_args)["train"]["sentence"]  # labels unused
    sentences = list(dict.fromkeys(t for t in (text.strip() for text in raw) if t))
    # WordPiece with BERT's specials, [SEP] also as EOS for packing
    special = {"special_tokens": {**SPECIAL_TOKENS, "eos_token": "[SEP]"}}
    tokenizer, reused = shared_tokenizer(
        b, "wordpiece", lambda: sentences, "max_seq_length", _starts_with_cls, **special
    )
    num_parameters = save_initialization(b.out / "init", tokenizer, s, b.seed)
    objectives = dict.fromkeys(entries[name].pretraining for name in b.names if entries[name].pretraining)
    pretrainings = {obj: sst2_pretraining(b, obj, sentences, tokenizer) for obj in objectives}
    rows = []
    for name in b.names:
        objective = entries[name].pretraining
        start = b.out / "runs" / f"{objective}_pretrain" / "final" if objective else b.out / "init"
        argv = sst2_finetune_argv(b, name, start)
        fields = {"label": entries[name].label, "pretrained": bool(objective)}
        row = finetune_row(name, "training.finetune_classification", argv, fields)
        row.update(metric_fields("sst2", row.get("metrics", {})))
        rows.append(row)
    measured = [row for row in rows if "error" not in row]
    bar_chart(
        b.out / "accuracy.png", [row["label"] for row in measured],
        {split: [None if r[f"{split}_accuracy"] is None else 100 * r[f"{split}_accuracy"] for r in measured] for split in ("dev", "test")},
        title=f"SST-2 accuracy, {s['budget_seconds']:g} s fine-tuning budget per model", ylabel="accuracy (%)",
        references=[(f"{r['short']} (published)", 100 * r["accuracy"]) for r in BOARDS["sst2"]["references"]],
        reference_name="published (≈, GLUE dev)",
    )  # fmt: skip
    first = measured[0]["metrics"] if measured else {}
    return {
        "task": "SST-2 binary sentiment (test = GLUE dev sentences)", "budget_seconds": s["budget_seconds"],
        "pretrain_seconds": s["pretrain_seconds"], "data_dir": str(b.data), "train_examples": first.get("train_samples"),
        "dev_examples": first.get("eval_samples"), "test_examples": first.get("test_samples"),
        "pretraining_sentences": len(sentences),
        "tokenizer": {"path": str(b.out / "tokenizer"), "kind": "wordpiece", "vocab_size": len(tokenizer), "reused": reused},
        "initialization": {"path": str(b.out / "init"), "num_parameters_masked_lm": num_parameters, "preset": "bert"},
        "pretraining": pretrainings.get("mlm"), "pretrainings": pretrainings, "entries": rows,
        "references": [{**r, "approximate": True, "published": True} for r in BOARDS["sst2"]["references"]],
    }  # fmt: skip


# ---- ablations and length_extrapolation: GPT variants on Tiny Shakespeare


def model_size(s: dict) -> dict:
    """The baseline's sizes, from which some variants derive theirs (GQA's heads, E, GLU width)."""
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads")
    return {
        **{k: s[k] for k in keys},
        "intermediate_size": s.get("intermediate_size") or 4 * s["hidden_size"],
    }


def glu_width(size: dict) -> int:
    # Shazeer (2020): a gated feed-forward has 3 matrices, so 2/3 of the width keeps the parameters
    return max(8, round(2 * size["intermediate_size"] / 3 / 8) * 8)


def variant_fields(variant: SimpleNamespace, size: dict, match_glu: bool = True) -> dict:
    """All config fields a variant's run sets beyond the sizes: the baseline's, then its own."""
    fields = dict(variant.fields)
    if variant.glu and match_glu:
        fields["intermediate_size"] = glu_width(size)
    if variant.derived == "kv_half":
        fields["num_key_value_heads"] = max(1, size["num_attention_heads"] // 2)
    elif variant.derived == "embedding_quarter":
        fields["embedding_size"] = max(2, size["hidden_size"] // 4)
    return {**BASELINE, "intermediate_size": size["intermediate_size"], **fields}


def variant_config(variant, size: dict, vocab_size: int, block_size: int, match_glu: bool = True):
    """The `HfLmGPTConfig` `training.train` builds for this variant (special tokens aside)."""
    from hf_lm import HfLmGPTConfig

    fields = {
        **size,
        **variant_fields(variant, size, match_glu),
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
    }
    return HfLmGPTConfig(vocab_size=vocab_size, max_position_embeddings=block_size, **fields)


def forward_flops_per_token(config, context: int) -> int:
    """Forward FLOPs per token (Narang et al.'s "Ops"): 2 per multiply-add of each weight matrix a token
    meets (only its k routed experts), plus attention's 4 * width per key over (context + 1) / 2 keys."""
    import torch
    from torch import nn

    from hf_lm import HfLmGPTForCausalLM
    from hf_lm.models.hflm_layers import SparseMoE

    with torch.device("meta"):  # shapes only, no memory
        model = HfLmGPTForCausalLM(config)
    macs = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    for moe in (m for m in model.modules() if isinstance(m, SparseMoE)):
        per_expert = sum(m.weight.numel() for m in moe.experts[0].modules() if isinstance(m, nn.Linear))
        macs -= (moe.num_experts - moe.top_k) * per_expert  # the experts a token skips
    width = config.num_attention_heads * config.head_dim
    attention = 2 * 2 * config.num_hidden_layers * width * (context + 1) / 2
    return round(2 * macs + attention)


def variant_flags(variant: SimpleNamespace, size: dict, match_glu: bool = True) -> list[str]:
    """The `training.train` flags that select a variant's architecture: a field's own flag where
    `training.train` has one, the others through `--config_overrides`."""
    from training.args import as_flags
    from training.models import FLAG_FIELDS

    fields = variant_fields(variant, size, match_glu)
    flags = {name: value for name, value in fields.items() if name in FLAG_FIELDS}
    overrides = {name: value for name, value in fields.items() if name not in FLAG_FIELDS}
    return as_flags({**flags, "config_overrides": overrides or None})


def variant_argv(
    s: dict, variant, seed: int, data: dict, tokenizer_dir: Path, out: Path, early_step: int, log_every: int
) -> list[str]:
    """The `training.train` arguments of one (variant, seed) run; it evaluates at `early_step` for the early loss."""
    values = {**s, **data, "tokenizer_dir": tokenizer_dir, "seed": seed, "early_step": early_step}
    values.update(log_every=log_every, out=out)
    argv = command_line(BOARDS["ablations"]["argv"], values, ["eval_batches", "max_train_seconds"])
    return argv + variant_flags(variant, model_size(s), s.get("match_glu_params", True))


def read_run(out: Path, early_step: int) -> dict:
    """A finished run's final and early validation loss, steps, parameters (in the saved weights: tied
    tensors once) and median step time over the logging intervals holding no evaluation (the loop
    records `seconds` before it evaluates, so an interval starting at an evaluation step holds it)."""
    from safetensors import safe_open

    final = json.loads((out / "final_metrics.json").read_text())
    rows = read_metrics(out / "metrics.csv")
    evals = [r for r in rows if r.get("eval_loss") is not None]
    eval_steps = [int(r["step"]) for r in evals]
    early = next((r for r in evals if r["step"] >= early_step), None)  # a capped run may stop before it
    timed = [r for r in rows if r.get("loss") is not None and r.get("seconds") is not None]
    logged = [(int(r["step"]), r["seconds"]) for r in timed]
    per_step = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(logged, logged[1:])
                if s1 > s0 and not any(s0 <= e < s1 for e in eval_steps)]  # fmt: skip
    parameters = 0
    for file in sorted((out / "final").glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            parameters += sum(math.prod(f.get_slice(key).get_shape()) for key in f.keys())
    return {
        "final_loss": final["eval_loss"], "early_loss": early["eval_loss"] if early else None,
        "early_loss_step": int(early["step"]) if early else None,
        "step_time_ms": round(1000 * statistics.median(per_step), 3) if per_step else None,
        "steps": final["step"], "seconds": final["seconds"], "parameters": parameters,
    }  # fmt: skip


def mean_std(values: list) -> dict:
    """Mean and sample standard deviation of the values that exist (std None below two values)."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    if not present:
        return {"mean": None, "std": None, "n": 0}
    std = statistics.stdev(present) if len(present) > 1 else None
    return {"mean": statistics.fmean(present), "std": std, "n": len(present)}


def run_grid(b: Board, jobs: list, variants: dict, data: dict, early_step: int, log_every: int) -> list:
    """Train (or reuse) every `(name, seed, folder)` job of `variants`, `jobs` at a time; each one's `train_run`."""
    s = b.settings

    def work(job):
        name, seed, out = job
        argv = variant_argv(s, variants[name], seed, data, b.out / "tokenizer", out, early_step, log_every)
        run = train_run(argv, out, s["num_threads"], reuse=not s["rerun"])
        logger.info("%-22s seed %d: %s", name, seed, run["status"])
        return run

    with ThreadPoolExecutor(max_workers=s["jobs"]) as pool:
        return list(pool.map(work, jobs))


def _gpt_data(b: Board) -> dict:
    """The split (first characters of each part kept) and the character tokenizer, trained on the whole
    text as nanoGPT builds its vocabulary."""
    s = b.settings
    data = write_split(b.data, b.out / "data", None, s["train_chars"], s["eval_chars"])
    whole = Path(b.data).read_text(encoding="utf-8")
    vocab_size = len(char_tokenizer(whole, b.out / "tokenizer", s["block_size"], 512))
    return {**data, "tokenizer": str(b.out / "tokenizer"), "vocab_size": vocab_size}


def run_ablations(b: Board) -> dict:
    s, size, start = b.settings, model_size(b.settings), time.perf_counter()
    data, variants = _gpt_data(b), {name: VARIANTS[name] for name in b.names}
    configs = {n: variant_config(v, size, data["vocab_size"], s["block_size"], s["match_glu_params"]) for n, v in variants.items()}  # fmt: skip
    early_step = max(1, round(s["max_steps"] * s["early_fraction"]))
    # at most every 10 steps, and at least 5 logs before the early evaluation, so steps can be timed
    log_every = s["log_every"] or max(1, min(10, early_step // 5))
    jobs = [(name, seed, b.out / "runs" / name / f"seed{seed}") for name in variants for seed in s["seeds"]]
    runs = run_grid(b, jobs, variants, data, early_step, log_every)
    rows = []
    for name, variant in variants.items():
        seeds = [
            {"seed": seed, "status": run["status"], "output_dir": str(out), "command": run["command"],
             **(read_run(out, early_step) if run["status"] != "failed" else {"error_tail": run["error_tail"]})}
            for (job_name, seed, out), run in zip(jobs, runs) if job_name == name
        ]  # fmt: skip
        rows.append({
            "name": name, "component": variant.component, "description": variant.description,
            "config_fields": variant_fields(variant, size, s["match_glu_params"]),
            **{key: mean_std([r.get(key) for r in seeds]) for key in ("parameters", "step_time_ms", "early_loss", "final_loss", "steps")},
            "runs": seeds, "flops_per_token": forward_flops_per_token(configs[name], s["block_size"]),
        })  # fmt: skip
    result = {
        "task": "Tiny Shakespeare, character level: GPT-style ablations, one component at a time",
        "seeds": list(s["seeds"]),
        "budget": {
            "max_steps": s["max_steps"], "max_train_seconds_per_run": s["max_train_seconds"], "batch_size": s["batch_size"],
            "block_size": s["block_size"], "tokens_per_step": s["batch_size"] * s["block_size"],
            "learning_rate": s["learning_rate"], "warmup_steps": s["warmup_steps"], "lr_scheduler": "cosine",
            "early_loss_step": early_step, "eval_batches": s["eval_batches"],
        },
        "baseline": {**size, "glu_intermediate_size": glu_width(size) if s["match_glu_params"] else None, **BASELINE},
        "data": data, "wall_seconds": round(time.perf_counter() - start, 1), "variants": rows,
    }  # fmt: skip
    plot_ablations(rows, b.out / "ablations.png", ablations_title(result))
    return result


def plot_ablations(rows: list[dict], path: Path, title: str) -> None:
    """Final validation loss per variant (mean, error bars one std), the baseline as a line."""
    plt = pyplot()
    shown = [r for r in rows if r["final_loss"]["mean"] is not None]
    colors = {c: plt.cm.tab10(i % 10) for i, c in enumerate(sorted({r["component"] for r in rows}))}
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(shown) + 1.5))
    y = list(range(len(shown)))[::-1]
    for yi, r in zip(y, shown):
        loss = r["final_loss"]
        ax.errorbar(
            loss["mean"], yi, xerr=loss["std"] or 0.0, fmt="o", capsize=3, color=colors[r["component"]]
        )
    base = next((r for r in shown if r["name"] == "baseline"), None)
    if base is not None:
        ax.axvline(base["final_loss"]["mean"], color="gray", linestyle="--", linewidth=1, label="baseline")
    ax.set_yticks(y, [f"{r['name']} ({r['component']})" for r in shown])
    ax.set_xlabel("final validation loss (nats/char), mean ± std across seeds")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    _save(plt, fig, ax, path)


def extrapolation_scores(folder: Path, stream, block_size: int) -> dict:
    """Perplexity on `stream` in windows of each multiple of `block_size` ("refuses" where the model will
    not take them) and in a sliding window of `block_size`, stride `block_size / 2`."""
    from hf_lm import HfLmGPTForCausalLM
    from hf_lm.metrics.sliding_window import sliding_window_perplexity

    model = HfLmGPTForCausalLM.from_pretrained(folder).eval()
    result = {"lengths": {}}
    for m in MULTIPLIERS:
        length = m * block_size
        try:
            scored = sliding_window_perplexity(model, stream, length, stride=length, batch_size=8)
            result["lengths"][str(m)] = {"length": length, "perplexity": scored["perplexity"], "n_tokens": scored["n_tokens"]}  # fmt: skip
        except ValueError as e:  # learned positions beyond their table
            result["lengths"][str(m)] = {"length": length, "refuses": str(e)}
    sliding = sliding_window_perplexity(model, stream, block_size, stride=block_size // 2, batch_size=8)
    result["sliding"] = {"window": block_size, "stride": block_size // 2, "perplexity": sliding["perplexity"]}
    return result


def run_length_extrapolation(b: Board) -> dict:
    import torch
    from transformers import AutoTokenizer

    s, size, start = b.settings, model_size(b.settings), time.perf_counter()
    torch.set_num_threads(s["num_threads"] or torch.get_num_threads())
    data, variants = _gpt_data(b), {name: BOARDS["length_extrapolation"]["entries"][name] for name in b.names}
    if "xpos" in variants:
        xpos = variants["xpos"]
        variants["xpos"] = SimpleNamespace(**{**vars(xpos), "fields": {**xpos.fields, "xpos_scale_base": s["xpos_scale_base"]}})  # fmt: skip
    for variant in variants.values():  # every scheme must build before training starts
        variant_config(variant, size, data["vocab_size"], s["block_size"])
    early_step, log_every = max(1, round(s["max_steps"] * 0.5)), max(1, min(10, s["max_steps"] // 10))
    jobs = [(name, b.seed, b.out / "runs" / name) for name in variants]
    runs = run_grid(b, jobs, variants, data, early_step, log_every)
    text = Path(data["val_file"]).read_text(encoding="utf-8")
    stream = torch.tensor(AutoTokenizer.from_pretrained(data["tokenizer"])(text, add_special_tokens=False)["input_ids"])  # fmt: skip
    rows = []
    for (name, _, out), run in zip(jobs, runs):
        row = {"scheme": name, "status": run["status"], "output_dir": str(out), "command": run["command"]}
        if run["status"] == "failed":
            row["error_tail"] = run["error_tail"]
        else:
            row.update(extrapolation_scores(out / "final", stream, s["block_size"]), steps=run["final_metrics"]["step"])  # fmt: skip
        rows.append(row)
    result = {
        "task": "length extrapolation: train at context L, score validation perplexity at 1x-8x L",
        "block_size": s["block_size"], "validation_tokens": len(stream), "xpos_scale_base": s["xpos_scale_base"],
        "model": {"hidden_size": s["hidden_size"], "num_hidden_layers": s["num_hidden_layers"], "max_steps": s["max_steps"]},
        "data": data, "wall_seconds": round(time.perf_counter() - start, 1), "schemes": rows,
    }  # fmt: skip
    plot_length_extrapolation(rows, s["block_size"], b.out / "length_extrapolation.png", extrapolation_title(result))  # fmt: skip
    return result


def plot_length_extrapolation(rows: list[dict], block_size: int, path: Path, title: str) -> None:
    """Perplexity against evaluation length, one line per scheme, log y (the ALiBi paper's Figure 1);
    learned positions' sliding-window perplexity as a dashed line over the lengths they refuse."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r in (r for r in rows if "lengths" in r):
        points = [(e["length"], e["perplexity"]) for e in r["lengths"].values() if "perplexity" in e]
        line = ax.plot(*zip(*points), marker="o", label=r["scheme"])[0]
        refused = [e["length"] for e in r["lengths"].values() if "refuses" in e]
        if refused:
            lengths = [points[-1][0], *refused]
            ax.plot(lengths, [r["sliding"]["perplexity"]] * len(lengths), linestyle="--", color=line.get_color(),
                    label=f"{r['scheme']} (refuses; sliding window {block_size})")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([m * block_size for m in MULTIPLIERS], [str(m * block_size) for m in MULTIPLIERS])
    ax.axvline(block_size, color="grey", linewidth=0.8, linestyle=":")
    ax.set(xlabel=f"evaluation length (tokens; trained at L = {block_size})", ylabel="validation perplexity (per character)")  # fmt: skip
    ax.set_title(title, fontsize=10)
    _save(plt, fig, ax, path, loc="upper left", bbox_to_anchor=(1.01, 1.0))


# ---- The README of a results folder: `markdown(result, folder)` (benchmarks/render.py calls it)


def _pm(stat: dict, digits: int) -> str:
    if stat["mean"] is None:
        return "n/a"
    std = "" if stat["std"] is None else f" ± {stat['std']:.{digits}f}"
    return f"{stat['mean']:.{digits}f}{std}"


def board_table(board: str, name: str, rows: list[dict], drop=(), **context) -> str:
    """leaderboard.yaml's `<board>.tables.<name>`: its column list (`render.table`), each header
    formatted with `context`; `drop` leaves keys out; a failed entry shows its error after its label."""
    spec = BOARDS[board]["tables"][name]
    columns = [(h.format(**context), key, form) for h, key, form in spec["columns"] if key not in drop]
    return table(columns, rows, spec.get("left"), failed=True)


def prose(board: str, name: str, **values) -> str:
    """A paragraph of leaderboard.yaml's `<board>.prose`, formatted with `values`."""
    return BOARDS[board]["prose"][name].format(**values)


def hardware_line(result: dict) -> str:
    hw = result["hardware"]
    threads = hw.get("threads", hw.get("torch_threads_per_run", hw.get("torch_threads")))
    cores, gpu = hw.get("cores_available", hw.get("usable_cores")), f", GPU {hw['gpu']}" if hw.get("gpu") else ""  # fmt: skip
    started = f" Started {result['started']}, {result['total_seconds']:.0f} s in all." if "started" in result else ""  # fmt: skip
    return (f"Hardware: {hw['cpu_model']}, {cores} cores available, {threads} torch threads{gpu}; torch {hw['torch']}, "
            f"transformers {hw['transformers']}. Seed {result.get('seed', 0)}.{started}")  # fmt: skip


def settings_line(result: dict) -> str:
    items = ", ".join(f"`{key}` {value}" for key, value in result["settings"].items())
    preset = f" (preset `{result['preset']}`)" if "preset" in result else ""
    return f"Settings{preset}: {items}."


def page(title: str, result: dict, folder: Path, *items, tail: bool = True, extra=()) -> list[str]:
    """A README: the title, then each item (a paragraph or table, a blank line after it; a
    `(png, alt)` tuple: the image if it is in the folder), then the hardware and the commands."""
    lines = [f"# {title}{' (smoke run)' if result.get('smoke') else ''}", ""]
    for item in items:  # an image only if it is in the folder (a re-run of a subset may have written none)
        name, alt = item if isinstance(item, tuple) else (None, None)
        lines += [item, ""] if name is None else [f"![{alt}]({name})", ""] * (Path(folder) / name).exists()
    commands = [result["command"], *extra, *[f"{r['name']}: {r['command']}" for r in result.get("entries", [])]]  # fmt: skip
    return lines + ([hardware_line(result), "", "## Commands", "", "```", *commands, "```", ""] if tail else [])  # fmt: skip


def lm_markdown(result: dict, folder: Path) -> list[str]:
    s, data, ref = result["settings"], result["data"], NANOGPT_REFERENCE
    rows = [r if "error" in r else {
        **r, "steps": fmt(r.get("steps")).replace("—", "-"),
        "size": f"{r['ngrams']:,} n-grams" if r.get("ngrams") is not None else fmt(r.get("parameters")),
        "time": fmt(r.get("train_seconds"), 1) + (" (fit)" if r["kind"] == "ngram" else "")}
        for r in result["entries"]]  # fmt: skip
    rows.append({**ref, "size": f"~{ref['parameters'] / 1e6:.2f}M", "time": f"~{ref['train_seconds']:.0f}",
                 "val_loss": f"{ref['val_loss']:.2f}"})  # fmt: skip
    probe = " (step count calibrated by a probe run)" * (result["schedule"] == "cosine")
    notes = [f"- {note}" for note in result.get("notes", [])]  # e.g. a row re-run later, and why
    orders = [text for r in result["entries"] if r.get("kind") == "ngram" and "orders" in r
              for text in (f"## n-gram by order (best: {r['best_order']})", board_table("lm", "orders", r["orders"]))]  # fmt: skip
    return page(
        "Language-modeling leaderboard: Tiny Shakespeare, character level", result, folder,
        f"Generated {result.get('created', result.get('started'))} by `{result['command']}`.",
        "\n".join([prose("lm", "data", data=data), prose("lm", "budget", s=s, r=result, probe=probe),
                   f"- {hardware_line(result)}", *notes]),
        board_table("lm", "main", rows), *orders,
        ("val_loss.png", "validation loss"), ("loss_curves.png", "validation curves"), tail=False,
    )  # fmt: skip


def translation_markdown(result: dict, folder: Path) -> list[str]:
    s, cell, rows = result["settings"], result["cell_type"], []
    for row in result["entries"]:
        met = ["—" if m is None else fmt(m) for m in (row.get("target_met_greedy"), row.get("target_met_beam"))]  # fmt: skip
        goal = "—" if row.get("target_bleu") is None else f"≥ {row['target_bleu']:g}: {met[0]} / {met[1]}"
        rows.append({**row, "label": translation_label(row, cell), "source": "measured", "goal": goal})
    rows += [{"label": f"{ref['model']} (bentrevett)", "source": "published, not measured here", "train_epochs": "10",
              "test_bleu_greedy": ref["bleu"]} for ref in result["references"]]  # fmt: skip
    device = f" Device: {result['device']} (preset `{result['preset']}`)." if "device" in result else ""
    return page(
        "Multi30k De→En translation leaderboard", result, folder,
        prose("translation", "intro", s=s, r=result, cell=cell.upper(), device=device), settings_line(result),
        board_table("translation", "main", rows, beams=s["num_beams"]), prose("translation", "published"),
        ("bleu.png", "test BLEU per model"),
    )  # fmt: skip


def _pretraining_note(name: str, run: dict | None, s: dict) -> str:
    if not run:
        return ""
    accuracy = {key: percent(run.get(f"eval_{key}")) for key in ("mlm_accuracy", "disc_accuracy")}
    return prose("sst2", name, s=s, run=run, space=" ", **accuracy)


def sst2_markdown(result: dict, folder: Path) -> list[str]:
    s, pre = result["settings"], result.get("pretraining")
    pretrainings = result.get("pretrainings") or ({"mlm": pre} if pre is not None else {})
    rows = []
    for row in result["entries"]:
        run = pretrainings.get(BOARDS["sst2"]["entries"][row["name"]].pretraining)
        pretrained = f"{run['steps']:,} steps, {run['seconds']:.0f} s" if run else "none"
        rows.append({**row, "source": "measured", "pretraining": pretrained})
    rows += [{"label": ref["model"], "source": "published, not measured here", "test_accuracy": f"≈{percent(ref['accuracy'])}"}
             for ref in result["references"]]  # fmt: skip
    plural = lambda n, word: f"{n} {word}{'' if n == 1 else 's'}"  # noqa: E731
    return page(
        "SST-2 leaderboard", result, folder,
        prose("sst2", "intro", s=s, r=result, layers=plural(s["num_layers"], "layer"), heads=plural(s["num_heads"], "head"),
              mlm=_pretraining_note("mlm", pre, s), electra=_pretraining_note("electra", pretrainings.get("electra"), s)),
        board_table("sst2", "main", rows), ("accuracy.png", "dev and test accuracy per model"),
        extra=[f"{name} pretraining: {run['command']}" for name, run in pretrainings.items()],
    )  # fmt: skip


def mask_predict_markdown(result: dict, folder: Path) -> list[str]:
    s, (ar, mp), decoded = result["settings"], result["entries"], result["mask_predict"]
    m = ar["metrics"]
    rows = [{**ar, "decoding": "greedy", "bleu": m.get("test_greedy_bleu"), "seconds": m.get("test_greedy_runtime")},
            {**ar, "decoding": f"beam {s['num_beams']}", "bleu": m.get("test_bleu"), "seconds": m.get("test_runtime")}]  # fmt: skip
    rows += [{**mp, "decoding": f"Mask-Predict T = {r['iterations']}, ℓ = {s['length_beam']}", "bleu": r["test_bleu"],
              "seconds": r["decode_seconds"]} for r in decoded["by_iterations"]]  # fmt: skip
    trace = [
        "## Mask-Predict trace: one test sentence", f"Source: {decoded['trace_source']}",
        f"Reference: {decoded['trace_reference']}", prose("mask_predict", "trace", d=decoded),
        board_table("mask_predict", "trace", decoded["trace"]), ("trace.png", "trace"),
    ] if decoded.get("trace") else []  # fmt: skip
    return page(
        "Mask-Predict vs autoregressive, Multi30k De→En", result, folder, prose("mask_predict", "intro", s=s, d=decoded),
        board_table("mask_predict", "main", rows), ("bleu_vs_iterations.png", "BLEU against iterations"), *trace,
    )  # fmt: skip


def ablations_title(result: dict) -> str:
    base, budget = result["baseline"], result["budget"]
    return (f"Tiny Shakespeare (char): {base['num_hidden_layers']}L x {base['hidden_size']}, {budget['max_steps']} steps, "
            f"seeds {','.join(map(str, result['seeds']))}")  # fmt: skip


def ablations_markdown(result: dict, folder: Path) -> list[str]:
    """The Narang-style table: one row per variant, mean ± std across seeds (docs/benchmarks.md)."""
    hw, rows = result["hardware"], []
    base = next((r["final_loss"]["mean"] for r in result["variants"] if r["name"] == "baseline"), None)
    for r in result["variants"]:
        loss, params = r["final_loss"]["mean"], r["parameters"]["mean"]
        delta = "" if loss is None or base is None or r["name"] == "baseline" else f"{loss - base:+.3f}"
        rows.append({
            **r, "parameters": "n/a" if params is None else f"{params:,.0f}",
            "flops_per_token": f"{r['flops_per_token']:,}" if r.get("flops_per_token") else "n/a",
            **{key: _pm(r[key], digits) for key, digits in (("step_time_ms", 1), ("early_loss", 3), ("final_loss", 3), ("steps", 0))},
            "delta": r.get("delta_vs_baseline", delta),  # as measured, where only rounded means were kept
            "seeds": f"{r['final_loss']['n']}/{len(r['runs'])}",
        })  # fmt: skip
    drop = () if any(r.get("flops_per_token") for r in result["variants"]) else ("flops_per_token",)
    threads = hw.get("threads", hw.get("torch_threads_per_run", hw.get("torch_threads")))
    return page(
        "GPT-style ablations on Tiny Shakespeare (character level)", result, folder,
        f"{ablations_title(result)}; mean ± std across seeds. Validation loss in nats per character; step time is the "
        f"median training step on {hw['cpu_model']} with {threads} thread(s) per run, {hw['concurrent_runs']} run(s) "
        "at a time.",
        board_table("ablations", "main", rows, drop=drop, early=result["budget"]["early_loss_step"]),
        ("ablations.png", "final validation loss per variant"), tail=False,
    )  # fmt: skip


def extrapolation_title(result: dict) -> str:
    m = result["model"]
    return (f"Tiny Shakespeare (char), GPT {m['num_hidden_layers']}L x {m['hidden_size']}, trained at L = "
            f"{result['block_size']} for {m['max_steps']} steps; {result['validation_tokens']} validation tokens")  # fmt: skip


def length_extrapolation_markdown(result: dict, folder: Path) -> list[str]:
    L, rows = result["block_size"], []
    for r in result["schemes"]:
        scores = {str(m): {"perplexity": "failed"} for m in MULTIPLIERS} | r.get("lengths", {})
        cells = {f"x{m}": "refuses" if "refuses" in scores[str(m)] else scores[str(m)]["perplexity"] for m in MULTIPLIERS}  # fmt: skip
        rows.append({**cells, "label": r["scheme"], "sliding": r["sliding"]["perplexity"] if "lengths" in r else "failed",
                     "steps": str(r["steps"]) if "lengths" in r else "-"})  # fmt: skip
    lengths = {f"L{m}": m * L for m in MULTIPLIERS}
    return page(
        "Length extrapolation", result, folder, f"{extrapolation_title(result)}.",
        board_table("length_extrapolation", "main", rows, L=L, half=L // 2, **lengths),
        ("length_extrapolation.png", "perplexity against evaluation length"), tail=False,
    )  # fmt: skip


# each board's runner `run_<board>(b)` and README `<board>_markdown(result, folder)`
RUNNERS = {board: (globals()[f"run_{board}"], globals()[f"{board}_markdown"]) for board in BOARDS}


def markdown(result: dict, folder: Path) -> list[str]:
    """The README lines of a leaderboard's results (the notes follow them, `benchmarks/render.py`)."""
    return RUNNERS[result["board"]][1](result, folder)


# ---- Main


def failures(result: dict) -> list[str]:
    """The entries (or runs) of a result that failed."""
    failed = [r["name"] for r in result.get("entries", []) if "error" in r]
    runs = [(r["name"], run) for r in result.get("variants", []) for run in r["runs"]]
    failed += [f"{name} seed {run['seed']}" for name, run in runs if run["status"] == "failed"]
    return failed + [r["scheme"] for r in result.get("schemes", []) if r["status"] == "failed"]


def main(argv: list[str] | None = None) -> dict:
    """Run one board; returns what its results.json holds (exit 1 after writing it if an entry failed)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    b = parse_args(argv)
    if b.list:  # the board's entries: their kind or component, what they are
        for name, e in BOARDS[b.board]["entries"].items():
            what = getattr(e, "description", getattr(e, "label", e))
            extra = e.fields if hasattr(e, "fields") else " ".join(getattr(e, "model_args", ()))
            sys.stdout.write(f"{name:22s} {getattr(e, 'component', getattr(e, 'kind', ''))}: {what} {extra}\n")  # fmt: skip
        return {}
    s, b.name, b.out = b.settings, b.board, b.output_dir
    if s.get("num_threads") and b.board in ("translation", "sst2", "mask_predict"):  # trained in this process
        import torch

        torch.set_num_threads(s["num_threads"])
    b.out.mkdir(parents=True, exist_ok=True)
    start, started = time.perf_counter(), datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")  # fmt: skip
    logger.info("%s: entries %s, preset %s, under %s", b.board, b.names, b.preset, b.out)
    command = measure.command_line("benchmarks.leaderboard", argv)
    result = {"kind": "leaderboard", "board": b.board, "preset": b.preset, "smoke": b.smoke, "seed": b.seed, "settings": s,
              "started": started, "command": command, "hardware": hardware(s.get("num_threads")), "git_revision": git_revision()}  # fmt: skip
    hw = result["hardware"]
    if s.get("device") == "cpu" and hw["gpu"]:  # a GPU this run did not use is not its hardware
        hw["gpu_present_unused"], hw["gpu"] = hw["gpu"], None
    if "jobs" in s:
        hw["concurrent_runs"] = s["jobs"]
    result.update(RUNNERS[b.board][0](b))
    hw["loadavg_end"], result["total_seconds"] = load_average(), time.perf_counter() - start
    logger.info("Wrote %s", write_results(b.out, result))
    if failures(result):
        raise SystemExit(f"Failed: {failures(result)}; see the log and {b.out / 'results.json'}.")
    return result


if __name__ == "__main__":
    main()
