"""The house's measures (issue 36), kept true: file and function sizes, the rooms a training step
crosses, and how many files read each training flag."""

from __future__ import annotations

import ast
import dataclasses
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import training.args as training_args
from training.args import parse_args
from training.train import train

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80
MAX_ROOMS = 8  # training modules or subpackages whose functions run before the first optimizer step
MAX_READERS = 3  # training files that read one flag
# one update, from the loop's `update()` to optimizer.step(): the loop, the batches, the objective's
# forward and the divergence guard
MAX_UPDATE_FILES = 4
# separate command lines with arguments of their own (transformers' TrainingArguments, the demo's parser)
OTHER_CLIS = ("finetune_", "trainer_common", "demo")


def _python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_no_file_or_function_is_too_long():
    too_long = []
    for path in _python_files("hf_lm", "training"):
        source = path.read_text()
        name = path.relative_to(ROOT)
        if source.count("\n") > MAX_FILE_LINES:
            too_long.append(f"{name}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, "over the size targets:\n" + "\n".join(too_long)


def _room(path: str) -> str | None:
    """training/x.py -> 'x.py'; training/pkg/y.py -> 'pkg/'; anything else -> None."""
    parts = Path(path).resolve().relative_to(ROOT).parts if path.startswith(str(ROOT)) else ()
    if len(parts) < 2 or parts[0] != "training":
        return None
    return parts[1] if len(parts) == 2 else parts[1] + "/"


class _FirstStep(Exception):
    pass


def test_a_training_step_crosses_few_rooms(tmp_path):
    """From `train()` to the first optimizer.step() of `--family gpt`, functions of at most 8 rooms run;
    within the update itself, functions of at most 4 training files."""
    flags = [
        "--family",
        "gpt",
        "--dataset",
        "synthetic",
        "--max_documents",
        "60",
        "--vocab_size",
        "300",
        "--block_size",
        "32",
        "--num_hidden_layers",
        "1",
        "--hidden_size",
        "32",
        "--num_attention_heads",
        "4",
        "--max_steps",
        "1",
        "--output_dir",
        str(tmp_path / "run"),
    ]
    arguments = parse_args(flags)
    rooms: dict[str, set[str]] = defaultdict(set)
    functions: dict[str, set[str]] = defaultdict(set)
    update_files: set[str] = set()

    def tracer(frame, event, arg):
        code = frame.f_code
        if code.co_name == "update" and code.co_filename.endswith(str(Path("training", "train.py"))):
            update_files.add("train.py")
        # the optimizer's step, not the LR scheduler's (LambdaLR steps once when it is built)
        if (
            code.co_name == "step"
            and "lr_scheduler" not in code.co_filename
            and ("torch/optim" in code.co_filename or "accelerate/optimizer" in code.co_filename)
        ):
            raise _FirstStep
        room = _room(code.co_filename)
        if room is not None and code.co_name != "<module>":
            rooms[room].add(Path(code.co_filename).name)
            functions[room].add(code.co_name)
            if update_files:  # inside the update
                update_files.add(str(Path(code.co_filename).resolve().relative_to(ROOT / "training")))

    sys.settrace(tracer)
    try:
        with pytest.raises(_FirstStep):
            train(*arguments)
    finally:
        sys.settrace(None)
    listing = "; ".join(f"{room} ({', '.join(sorted(files))})" for room, files in sorted(rooms.items()))
    # the loop ran a micro-batch: the objective's forward and the batches were reached
    assert "forward_backward" in functions["train.py"] and "forward" in functions["objectives/"], listing
    assert len(rooms) <= MAX_ROOMS, f"{len(rooms)} rooms: {listing}"
    assert len(update_files) <= MAX_UPDATE_FILES, f"one update runs code of {sorted(update_files)}"


def test_no_flag_is_read_in_more_than_three_files():
    fields = {
        f.name
        for cls in (training_args.DataArguments, training_args.ModelArguments, training_args.TrainArguments)
        for f in dataclasses.fields(cls)
    }
    readers: dict[str, set[str]] = defaultdict(set)
    for path in _python_files("training"):
        if path.parent.name == "args" or path.name.startswith(OTHER_CLIS):  # args/ declares and checks them
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in fields and isinstance(node.ctx, ast.Load):
                owner = (
                    node.value.attr
                    if isinstance(node.value, ast.Attribute)
                    else getattr(node.value, "id", "")
                )
                if owner.endswith("args"):
                    readers[node.attr].add(str(path.relative_to(ROOT / "training")))
    over = {flag: sorted(files) for flag, files in readers.items() if len(files) > MAX_READERS}
    assert not over, "flags read in more than 3 training files: " + str(over)
