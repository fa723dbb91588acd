"""Atomic, resumable training checkpoints: weights, optimizer, scheduler, RNG and data position.

Layout, one folder per step under a root folder:

    root/checkpoint-00001000/
        model.safetensors   weights (safetensors; tied/shared tensors stored once)
        config.json         the model's config (models with a transformers `config` only)
        optimizer.pt        optimizer.state_dict()   (torch.save, loads with weights_only=True)
        scheduler.pt        scheduler.state_dict()   (torch.save, loads with weights_only=True)
        scaler.pt           fp16 GradScaler.state_dict() (loss scale, growth tracker), if one is used
        rng.pt              python `random`, numpy, torch CPU (and CUDA) generator states of process 0
        rng-1.pt, ...       the same for process 1, ... of a multi-process run (gathered to process 0)
        state.json          {"step", "data_state", "extra", "num_rng_states"}
        COMPLETE            written last: its presence means every other file is complete

Every file but `model.safetensors` and `COMPLETE` is optional, so checkpoints written before
`config.json`, `scaler.pt` or `rng-N.pt` existed still load: without `config.json` the model
config is not checked, and a process without its own RNG file keeps its current streams.

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
from safetensors.torch import load_file, load_model, save_file, save_model

logger = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "checkpoint-"
TMP_PREFIX = ".tmp-checkpoint-"
COMPLETE_MARKER = "COMPLETE"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
SCALER_FILE = "scaler.pt"
RNG_FILE = "rng.pt"
CONFIG_FILE = "config.json"
STATE_FILE = "state.json"
TENSORS_FILE = "tensors.safetensors"

# config entries that record where or how a model was loaded or run, not what it computes; they
# may differ between the run that saved a checkpoint and the run resuming it
_CONFIG_BOOKKEEPING = frozenset(
    {
        "transformers_version",
        "_name_or_path",
        "_commit_hash",
        "architectures",
        "auto_map",
        "dtype",
        "torch_dtype",
        "attn_implementation",
        "_attn_implementation",
        "_attn_implementation_autoset",
        "use_cache",
        "return_dict",
        "output_attentions",
        "output_hidden_states",
    }
)

_CHECKPOINT_RE = re.compile(rf"^{re.escape(CHECKPOINT_PREFIX)}(\d+)$")


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint at `step` (zero-padded, so names sort by step)."""
    return f"{CHECKPOINT_PREFIX}{step:08d}"


def rng_file(rank: int) -> str:
    """The RNG file of process `rank`: `rng.pt` for process 0 (the single-process name), else `rng-{rank}.pt`."""
    return RNG_FILE if rank == 0 else f"rng-{rank}.pt"


def _config_dict(model) -> dict | None:
    """The model's transformers config as JSON-normalized data (int dict keys become strings), or None."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_json_string"):
        return None
    return json.loads(config.to_json_string(use_diff=False))


def _with_current_defaults(saved: dict, config) -> dict:
    """The saved config as this version of its class reads it: fields added since the checkpoint
    was written take their defaults (derived as a fresh config derives them), so they are not
    reported as differences; a saved config the class refuses is compared as it is."""
    try:
        upgraded = type(config).from_dict(saved)
    except (TypeError, ValueError):
        return saved
    return json.loads(upgraded.to_json_string(use_diff=False))


def config_differences(saved: dict, current: dict) -> dict[str, tuple[Any, Any]]:
    """The config fields that differ, as `{field: (saved value, current value)}`, bookkeeping ignored.

    A field present on one side only is reported with `None` on the other.
    """
    keys = (saved.keys() | current.keys()) - _CONFIG_BOOKKEEPING
    return {k: (saved.get(k), current.get(k)) for k in sorted(keys) if saved.get(k) != current.get(k)}


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
    scaler: Any | None = None,
    step: int,
    data_state: dict | None = None,
    extra: dict | None = None,
    keep_last: int | None = None,
    save_rng: bool = True,
    rng_states: list[dict] | None = None,
    tensors: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Atomically write the checkpoint of `step` to `directory/checkpoint-{step:08d}`.

    Args:
        directory: the root folder holding all checkpoints (created if missing).
        model: the model; its `state_dict` goes to `model.safetensors`, shared (tied) tensors once.
        optimizer: optional optimizer, saved with its `state_dict()`.
        scheduler: optional LR scheduler (anything with `state_dict()`).
        scaler: optional fp16 loss scaler (`torch.amp.GradScaler`; accelerate's `accelerator.scaler`,
            None without fp16): its scale and growth tracker, so a resumed run scales the loss as the
            uninterrupted one would.
        step: the global step (optimizer updates done), >= 0.
        data_state: JSON-serializable position in the data (epoch, sample index, sampler seed...).
        extra: JSON-serializable extras (metrics, config, ...).
        keep_last: if given, delete all but the `keep_last` newest complete checkpoints afterwards.
        save_rng: also save the global RNG states (python, numpy, torch, CUDA).
        rng_states: the RNG states of every process, in rank order (`get_rng_state()` on each,
            gathered to the saving process), one file each; default: this process's states only.
            A multi-process run must pass them: each process has its own dropout stream.
        tensors: other named tensors of the run's state (e.g. the recurrent state carried across
            blocks by truncated BPTT), written to `tensors.safetensors`.

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
    if save_rng and rng_states is None:
        rng_states = [get_rng_state()]
    num_rng_states = len(rng_states) if save_rng else 0
    # serialize the JSON first: a TypeError should not cost a half-written temp folder
    state_json = json.dumps(
        {"step": step, "data_state": data_state, "extra": extra, "num_rng_states": num_rng_states}, indent=2
    )
    config = _config_dict(model)

    tmp = root / f"{TMP_PREFIX}{step:08d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        save_model(model, str(tmp / MODEL_FILE))
        _fsync_file(tmp / MODEL_FILE)
        if config is not None:
            _write_text(tmp / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True))
        if optimizer is not None:
            _torch_save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        if scheduler is not None:
            _torch_save(scheduler.state_dict(), tmp / SCHEDULER_FILE)
        if scaler is not None:
            _torch_save(scaler.state_dict(), tmp / SCALER_FILE)
        for rank in range(num_rng_states):
            _torch_save(rng_states[rank], tmp / rng_file(rank))
        if tensors:
            save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp / TENSORS_FILE))
            _fsync_file(tmp / TENSORS_FILE)
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
            _remove(path)
    return final


def _remove(path: Path) -> None:
    # rename first (atomic), then delete: a kill during the slow, file-by-file rmtree must not
    # leave a half-deleted folder under a checkpoint's name
    trash = path.with_name(f".trash-{path.name}-{uuid.uuid4().hex[:8]}")
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def remove_checkpoints_except(root: str | os.PathLike, keep_steps) -> list[int]:
    """Delete the complete checkpoints under `root` whose step is not in `keep_steps`.

    For folders of checkpoints that must outlive `keep_last`'s count, such as the best models a
    run keeps (`training.train.BestModel`). Each goes as `keep_last` prunes: renamed, then deleted.

    Returns:
        The steps removed, oldest first.
    """
    keep = set(keep_steps)
    removed = []
    for step, path in list_checkpoints(root):
        if step not in keep:
            _remove(path)
            removed.append(step)
    return removed


def checkpoint_state(directory: str | os.PathLike) -> dict:
    """The `state.json` of a complete checkpoint: `step`, `data_state`, `extra`, `num_rng_states`.

    Reads no tensor, so it is cheap enough to inspect every kept checkpoint.
    """
    return json.loads((Path(directory) / STATE_FILE).read_text(encoding="utf-8"))


def load_checkpoint(
    directory: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    scaler: Any | None = None,
    restore_rng: bool = True,
    strict: bool = True,
    rank: int = 0,
) -> dict:
    """Restore a checkpoint written by `save_checkpoint` into existing objects.

    The model's config is compared with the checkpoint's `config.json` first, so a model built
    with other settings fails with the list of differing fields rather than inside
    `load_state_dict` with tensor shapes.

    Args:
        directory: a `checkpoint-N` folder (see `latest_checkpoint`).
        model: the model to load the weights into (on any device; tensors are moved to it).
        optimizer: optional optimizer built over `model`'s parameters, in the same order.
        scheduler: optional scheduler built over `optimizer`.
        scaler: optional fp16 `GradScaler`; restored when the checkpoint has `scaler.pt` (a
            warning otherwise: the loss scale then restarts from its initial value).
        restore_rng: restore the global RNG states, so random draws continue as after the save.
        strict: require the weights to match the model's keys exactly.
        rank: this process's index: it restores the RNG states saved for it (`rng_file(rank)`).

    Returns:
        A dict with `step`, `data_state`, `extra`, `tensors` (the named tensors saved with
        `tensors=`, on the CPU; empty if none) and `path`.

    Raises:
        FileNotFoundError: if the folder is not a complete checkpoint, or a requested part
            (optimizer/scheduler state) is missing.
        ValueError: `model`'s config differs from the one saved with the checkpoint (the message
            lists each field as saved → current).
    """
    path = Path(directory)
    if not (path / COMPLETE_MARKER).is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {COMPLETE_MARKER} marker).")
    current = _config_dict(model)
    if current is not None and (path / CONFIG_FILE).is_file():
        saved = _with_current_defaults(
            json.loads((path / CONFIG_FILE).read_text(encoding="utf-8")), model.config
        )
        differences = config_differences(saved, current)
        if differences:
            listed = "; ".join(f"{k}: {old!r} → {new!r}" for k, (old, new) in differences.items())
            raise ValueError(
                f"Cannot resume from {path}: the model differs from the checkpoint's ({listed}; "
                "checkpoint → this run). Resume with the model settings the run was started with (the same "
                "ModelArguments, config_overrides and tokenizer), or start a new run: a fresh output_dir, or "
                "resume=false to train from scratch in this one."
            )
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
    if scaler is not None:
        if (path / SCALER_FILE).is_file():
            scaler.load_state_dict(torch.load(path / SCALER_FILE, map_location="cpu", weights_only=True))
        else:
            logger.warning("%s has no GradScaler state: the fp16 loss scale starts afresh", path)

    if restore_rng:
        if (path / rng_file(rank)).is_file():
            set_rng_state(torch.load(path / rng_file(rank), map_location="cpu", weights_only=True))
        else:
            logger.warning("%s has no RNG state for process %d: random streams not restored", path, rank)

    state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    logger.info("loaded checkpoint %s (step %d)", path, state["step"])
    tensors = load_file(str(path / TENSORS_FILE)) if (path / TENSORS_FILE).is_file() else {}
    return {
        "step": state["step"],
        "data_state": state["data_state"],
        "extra": state["extra"],
        "tensors": tensors,
        "path": path,
    }
