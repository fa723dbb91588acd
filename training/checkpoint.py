"""Atomic, resumable training checkpoints: weights, optimizer, scheduler, RNG and data position.

Layout, one folder per step under a root folder:

    root/checkpoint-00001000/
        model.safetensors   weights (safetensors; tied/shared tensors stored once)
        optimizer.pt        optimizer.state_dict()   (torch.save, loads with weights_only=True)
        scheduler.pt        scheduler.state_dict()   (torch.save, loads with weights_only=True)
        rng.pt              python `random`, numpy, torch CPU (and CUDA) generator states
        state.json          {"step", "data_state", "extra"}
        COMPLETE            written last: its presence means every other file is complete

Atomicity: everything is written into a hidden sibling `root/.tmp-checkpoint-...`, each file is
fsynced, `COMPLETE` is written last, and only then is the folder renamed to its final name
(`os.replace`, atomic on POSIX within one file system). A process killed at any moment leaves
either no `checkpoint-N` folder or a complete one; `latest_checkpoint` also ignores any folder
without `COMPLETE`. Leftover `.tmp-checkpoint-*` folders of killed runs are ignored (delete them at
leisure). In distributed training call `save_checkpoint` on the main process only.

Every `.pt` file holds only tensors and Python primitives, so it loads with
`torch.load(..., weights_only=True)` (no arbitrary unpickling): numpy's RNG state is stored as a
list of ints, not as an `ndarray`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model

logger = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "checkpoint-"
TMP_PREFIX = ".tmp-checkpoint-"
COMPLETE_MARKER = "COMPLETE"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
RNG_FILE = "rng.pt"
STATE_FILE = "state.json"

_CHECKPOINT_RE = re.compile(rf"^{re.escape(CHECKPOINT_PREFIX)}(\d+)$")


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint at `step` (zero-padded, so names sort by step)."""
    return f"{CHECKPOINT_PREFIX}{step:08d}"


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    # directory fsync makes the rename/creation durable; not supported on every platform
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _torch_save(obj: Any, path: Path) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def get_rng_state() -> dict:
    """Every global RNG state, as tensors and Python primitives (loadable with weights_only=True)."""
    np_state = np.random.get_state(legacy=False)  # {"bit_generator", "state": {"key", "pos"}, ...}
    state = {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": [int(x) for x in np_state["state"]["key"]],
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore the global RNG states saved by `get_rng_state`."""
    python = state["python"]
    # weights_only unpickling may give lists where `random.setstate` wants tuples
    random.setstate((python[0], tuple(python[1]), python[2]))
    np_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": np_state["bit_generator"],
            "state": {"key": np.asarray(np_state["key"], dtype=np.uint32), "pos": np_state["pos"]},
            "has_gauss": np_state["has_gauss"],
            "gauss": np_state["gauss"],
        }
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda_states)
        else:
            logger.warning(
                "saved %d CUDA RNG states but %d devices are visible: CUDA RNG not restored",
                len(cuda_states),
                torch.cuda.device_count(),
            )


def list_checkpoints(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints under `root` as (step, path), oldest first; temp/incomplete ones skipped."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _CHECKPOINT_RE.match(child.name)
        if match and child.is_dir() and (child / COMPLETE_MARKER).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step under `root`, or None if there is none."""
    checkpoints = list_checkpoints(root)
    return checkpoints[-1][1] if checkpoints else None


def save_checkpoint(
    directory: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    step: int,
    data_state: dict | None = None,
    extra: dict | None = None,
    keep_last: int | None = None,
    save_rng: bool = True,
) -> Path:
    """Atomically write the checkpoint of `step` to `directory/checkpoint-{step:08d}`.

    Args:
        directory: the root folder holding all checkpoints (created if missing).
        model: the model; its `state_dict` goes to `model.safetensors`, shared (tied) tensors once.
        optimizer: optional optimizer, saved with its `state_dict()`.
        scheduler: optional LR scheduler (anything with `state_dict()`).
        step: the global step (optimizer updates done), >= 0.
        data_state: JSON-serializable position in the data (epoch, sample index, sampler seed...).
        extra: JSON-serializable extras (metrics, config, ...).
        keep_last: if given, delete all but the `keep_last` newest complete checkpoints afterwards.
        save_rng: also save the global RNG states (python, numpy, torch, CUDA).

    Returns:
        The final checkpoint folder.

    Raises:
        ValueError: for a negative `step` or `keep_last < 1`.
        TypeError: if `data_state`/`extra` are not JSON-serializable (nothing is left behind).
    """
    if step < 0:
        raise ValueError(f"`step` must be >= 0, got {step}.")
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"`keep_last` must be >= 1 or None, got {keep_last}.")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
    # serialize the JSON first: a TypeError should not cost a half-written temp folder
    state_json = json.dumps({"step": step, "data_state": data_state, "extra": extra}, indent=2)

    tmp = root / f"{TMP_PREFIX}{step:08d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        save_model(model, str(tmp / MODEL_FILE))
        _fsync_file(tmp / MODEL_FILE)
        if optimizer is not None:
            _torch_save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        if scheduler is not None:
            _torch_save(scheduler.state_dict(), tmp / SCHEDULER_FILE)
        if save_rng:
            _torch_save(get_rng_state(), tmp / RNG_FILE)
        _write_text(tmp / STATE_FILE, state_json)
        _write_text(tmp / COMPLETE_MARKER, f"{step}\n")  # last: marks every other file complete
        _fsync_dir(tmp)

        old = None
        if final.exists():
            # a directory rename cannot replace a non-empty directory: move the old one aside first
            old = root / f"{TMP_PREFIX}old-{final.name}-{uuid.uuid4().hex[:8]}"
            os.replace(final, old)
        try:
            os.replace(tmp, final)
        except BaseException:
            if old is not None:
                os.replace(old, final)
            raise
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    logger.info("saved checkpoint %s", final)

    if keep_last is not None:
        for old_step, path in list_checkpoints(root)[:-keep_last]:
            logger.info("pruning checkpoint of step %d", old_step)
            # rename first (atomic), then delete: a kill during the slow, file-by-file rmtree must
            # not leave a half-deleted folder under a checkpoint's name
            trash = path.with_name(f".trash-{path.name}-{uuid.uuid4().hex[:8]}")
            os.replace(path, trash)
            shutil.rmtree(trash, ignore_errors=True)
    return final


def load_checkpoint(
    directory: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    restore_rng: bool = True,
    strict: bool = True,
) -> dict:
    """Restore a checkpoint written by `save_checkpoint` into existing objects.

    Args:
        directory: a `checkpoint-N` folder (see `latest_checkpoint`).
        model: the model to load the weights into (on any device; tensors are moved to it).
        optimizer: optional optimizer built over `model`'s parameters, in the same order.
        scheduler: optional scheduler built over `optimizer`.
        restore_rng: restore the global RNG states, so random draws continue as after the save.
        strict: require the weights to match the model's keys exactly.

    Returns:
        A dict with `step`, `data_state`, `extra` and `path`.

    Raises:
        FileNotFoundError: if the folder is not a complete checkpoint, or a requested part
            (optimizer/scheduler state) is missing.
    """
    path = Path(directory)
    if not (path / COMPLETE_MARKER).is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {COMPLETE_MARKER} marker).")
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    missing, unexpected = load_model(model, str(path / MODEL_FILE), strict=strict, device=str(device))
    if missing or unexpected:
        logger.warning("non-strict load: missing %s, unexpected %s", missing, unexpected)

    for obj, name in ((optimizer, OPTIMIZER_FILE), (scheduler, SCHEDULER_FILE)):
        if obj is None:
            continue
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path / name} is missing: this checkpoint was saved without it.")
        obj.load_state_dict(torch.load(path / name, map_location="cpu", weights_only=True))

    if restore_rng:
        if (path / RNG_FILE).is_file():
            set_rng_state(torch.load(path / RNG_FILE, map_location="cpu", weights_only=True))
        else:
            logger.warning("%s has no RNG state: random streams not restored", path)

    state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    logger.info("loaded checkpoint %s (step %d)", path, state["step"])
    return {"step": state["step"], "data_state": state["data_state"], "extra": state["extra"], "path": path}
