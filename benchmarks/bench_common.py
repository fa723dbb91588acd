"""What the leaderboards share (the measurement helpers moved to `benchmarks.measure`).

- What the translation and SST-2 leaderboards share: `leaderboard_parser`,
  `parse_leaderboard_args`, `start_leaderboard`, `run_entry_row`, `training_fields`,
  `write_results`, `leaderboard_hardware`, `leaderboard_footer`, `exit_if_failed`,
  `reuse_or_train_tokenizer`.
- The helpers of `benchmarks.measure` and `benchmarks.render` that the leaderboards and the GPU
  benchmark import from here, until they import them from there.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

logger = logging.getLogger("bench_common")

from .measure import (  # noqa: E402,F401  (moved)
    DEVICE_CHOICES,
    REPO_ROOT,
    accelerator_info,
    add_preset_options,
    alternating_rounds,
    available_cores,
    comma_list,
    command_line,
    cpu_model,
    device_synchronizer,
    environment,
    environment_line,
    error_text,
    git_revision,
    load_average,
    parse_entries,
    preset_table,
    ratio,
    resolve,
    resolve_device,
    versions,
)
from .render import bar_chart, fmt, label_bars, markdown_table, millions, pyplot  # noqa: E402,F401  (moved)

# --------------------------------------------------------------------------------------------
# What the translation and SST-2 leaderboards share
# --------------------------------------------------------------------------------------------


def leaderboard_hardware() -> dict:
    """The machine and software a leaderboard ran on (recorded in results.json)."""
    import torch

    return {
        "cpu_model": cpu_model(),
        "cores_available": available_cores(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "loadavg_start": load_average(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        **versions("torch", "transformers"),
    }


def leaderboard_footer(result: dict, extra_commands: Sequence[str] = ()) -> list[str]:
    """The last lines of a leaderboard's results.md: the hardware line (`leaderboard_hardware`),
    seed, start and duration, then the commands: the leaderboard's, `extra_commands`, every entry's."""
    hw = result["hardware"]
    return [
        f"Hardware: {hw['cpu_model']}, {hw['cores_available']} cores available, {hw['torch_threads']} torch threads"
        + (f", GPU {hw['gpu']}" if hw["gpu"] else "")
        + f"; torch {hw['torch']}, transformers {hw['transformers']}. Seed {result['seed']}. "
        f"Started {result['started']}, {result['total_seconds']:.0f} s in all.",
        "",
        "## Commands",
        "",
        "```",
        result["command"],
        *extra_commands,
        *[f"{row['name']}: {row['command']}" for row in result["entries"]],
        "```",
        "",
    ]


def leaderboard_parser(
    description: str,
    data_dir: str,
    data_help: str,
    output_dir: str,
    entries: tuple[str | None, str],
    smoke_help: str,
    seed_help: str,
    presets: tuple[dict, dict[str, str]],
) -> argparse.ArgumentParser:
    """A fine-tuning leaderboard's parser with the options they all have: `--data_dir`,
    `--output_dir`, `--entries` (`entries`: its default and help), `--smoke`, `--seed`,
    `--num_threads`, and one per preset setting (`presets`: `preset_table`'s presets and help,
    `add_preset_options`); defaults shown in the help."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--data_dir", default=data_dir, help=data_help)
    parser.add_argument("--output_dir", default=output_dir, help="Where results and runs go.")
    parser.add_argument("--entries", default=entries[0], help=entries[1])
    parser.add_argument("--smoke", action="store_true", help=smoke_help)
    parser.add_argument("--seed", type=int, default=0, help=seed_help)
    parser.add_argument(
        "--num_threads", type=int, default=None, help="torch threads (default: torch's choice)."
    )
    add_preset_options(parser, *presets)
    return parser


def parse_leaderboard_args(
    parser: argparse.ArgumentParser, argv: list[str] | None, entries: Mapping, data_hint: str
) -> tuple[argparse.Namespace, list[str]]:
    """Parse a leaderboard's command line (`leaderboard_parser`) and start its logging.

    Returns:
        `(args, the entries to run)`; `parser.error` for unknown entries or a missing `--data_dir`
        (`data_hint` says where the data lives). `--num_threads` is applied here.
    """
    import torch

    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    try:
        names = parse_entries(args.entries, entries)
    except ValueError as err:
        parser.error(str(err))
    if not Path(args.data_dir).is_dir():
        parser.error(f"--data_dir {args.data_dir!r} is not a folder ({data_hint}).")
    if args.num_threads is not None:
        torch.set_num_threads(args.num_threads)
    return args, names


def start_leaderboard(output_dir: str | Path) -> tuple[Path, str, float, dict]:
    """Create the output folder and note the start: `(folder, start time (UTC, ISO), perf_counter
    reading, leaderboard_hardware())`."""
    import datetime

    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return folder, started, time.perf_counter(), leaderboard_hardware()


def run_entry_row(name: str, module: str, argv: list[str], run: Callable, failed: Mapping) -> dict:
    """One entry of a leaderboard, run in this process as `run(name, argv)`; its row, with the
    command that reproduces it (`python -m module argv`). A failing entry must not lose the others'
    results: its row is `failed` (name, label, ...) with the error, and the leaderboard goes on."""
    command = command_line(module, argv)
    logger.info("=== %s: %s", name, command)
    try:
        row = run(name, argv)
    except Exception as err:  # recorded in the row; `exit_if_failed` ends the leaderboard after all
        logger.exception("Entry %s failed.", name)
        row = {"name": name, **failed, "error": repr(err)}
    row["command"] = command
    return row


def write_results(output_dir: Path, result: dict, markdown_lines: Callable[[dict], list[str]]) -> str:
    """Write a leaderboard's results.json and results.md (the lines `markdown_lines(result)`);
    returns the markdown."""
    (output_dir / "results.json").write_text(json.dumps(result, indent=2, default=str))
    markdown = "\n".join(markdown_lines(result))
    (output_dir / "results.md").write_text(markdown, encoding="utf-8")
    return markdown


def training_fields(metrics: dict) -> dict:
    """The training part of a leaderboard row, from a fine-tuning run's final metrics: size,
    steps, epochs, seconds, whether the wall-clock budget ended it, and the training loss."""
    return {
        "num_parameters": metrics["num_parameters"],
        "train_steps": metrics["train_steps"],
        "train_epochs": metrics["train_epochs"],
        "train_seconds": metrics["train_runtime"],
        "train_budget_reached": metrics["train_budget_reached"],
        "train_loss": metrics.get("train_loss"),
    }


def exit_if_failed(rows: list[dict], output_dir: Path) -> None:
    """End a leaderboard with `SystemExit` naming the entries that failed (their rows hold `error`)."""
    failed = [row["name"] for row in rows if "error" in row]
    if failed:
        raise SystemExit(f"Entries failed: {failed}; see the log and {output_dir / 'results.json'}.")


def reuse_or_train_tokenizer(
    folder: Path, settings: dict, train: Callable[[], object]
) -> tuple[object, bool]:
    """The tokenizer saved in `folder` if it was trained with `settings`, else `train()` saved there.

    Returns:
        `(tokenizer, reused)`.
    """
    from transformers import AutoTokenizer

    stamp = folder / "leaderboard_settings.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == settings:
        logger.info("Reusing the tokenizer in %s (same settings).", folder)
        return AutoTokenizer.from_pretrained(folder), True
    tokenizer = train()
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    stamp.write_text(json.dumps(settings, indent=2))
    logger.info("Trained and saved the shared tokenizer (%d tokens) to %s.", len(tokenizer), folder)
    return tokenizer, False


def translation_tokenizer(args, settings: dict, folder: Path) -> tuple[object, bool]:
    """Train (or reuse) the joint byte-level BPE tokenizer (BART's special tokens, `<mask>` included)
    on both sides of `args.data_dir`'s German-English training pairs: the translation benchmarks'
    shared tokenizer. `settings`: `vocab_size`, `max_train_samples`, `max_length`. Returns
    `(tokenizer, reused)`."""
    from training.data.tokenizer import BART_SPECIAL_TOKENS, train_tokenizer
    from training.finetune_translation import (
        TranslationDataArguments,
        ensure_eos,
        load_translation_dataset,
        sides,
    )

    data_args = TranslationDataArguments(
        data_dir=str(args.data_dir),
        validation_split="",
        test_split="",
        max_train_samples=settings["max_train_samples"],
    )
    stamp = {
        "data_dir": str(Path(args.data_dir).resolve()),
        "kind": "byte_bpe",
        "vocab_size": settings["vocab_size"],
        "max_train_samples": settings["max_train_samples"],
        "max_length": settings["max_length"],
    }

    def train():
        train_pairs = load_translation_dataset(data_args)["train"]
        tokenizer = train_tokenizer(
            sides(train_pairs, "de") + sides(train_pairs, "en"),
            kind="byte_bpe",
            vocab_size=settings["vocab_size"],
            special_tokens=BART_SPECIAL_TOKENS,
            model_max_length=settings["max_length"],
            padding_side="right",
        )
        ensure_eos(tokenizer)  # saved with it: every entry encodes "... </s>" identically
        return tokenizer

    return reuse_or_train_tokenizer(folder, stamp, train)
