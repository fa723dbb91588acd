"""The console scripts `pip install` puts on the PATH, one per command-line entry point.

    hflm-train                      = python -m training.train
    hflm-finetune-classification    = python -m training.finetune_classification
    hflm-finetune-translation       = python -m training.finetune_translation
    hflm-evaluate                   = python -m training.evaluate_cli
    hflm-push                       = python -m training.push

The scripts' `main` functions return their results (a metrics dict) for callers in Python; a console
script's return value becomes the exit status, so each is wrapped to return 0 (or the script's own
status where it gives one, as `push` does). Arguments, `--help` and errors are the module's own.
"""

from __future__ import annotations

import importlib
import sys


def _run(module: str) -> int:
    """Run this package's `module.main` on the command line's arguments; its exit status (0 unless it
    returns an int). Relative to this package, whatever name it is installed under."""
    result = importlib.import_module(f".{module}", __package__).main(sys.argv[1:])
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def train() -> int:
    return _run("train")


def finetune_classification() -> int:
    return _run("finetune_classification")


def finetune_translation() -> int:
    return _run("finetune_translation")


def evaluate() -> int:
    return _run("evaluate_cli")


def push() -> int:
    return _run("push")
