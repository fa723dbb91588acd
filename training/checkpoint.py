"""Atomic, verified, resumable training checkpoints: weights, optimizer, scheduler, RNG and data position.

Layout, one folder per step under a root folder:

    root/checkpoint-00001000/
        model.safetensors   weights (safetensors; tied/shared tensors stored once)
        config.json         the model's config (models with a transformers `config` only)
        optimizer.pt        optimizer.state_dict()   (torch.save, loads with weights_only=True)
        scheduler.pt        scheduler.state_dict()   (torch.save, loads with weights_only=True)
        scaler.pt           fp16 GradScaler.state_dict() (loss scale, growth tracker), if one is used
        rng.pt              python `random`, numpy, torch CPU (and CUDA) generator states of process 0
        rng-1.pt, ...       the same for process 1, ... of a multi-process run (gathered to process 0)
        state.json          {"step", "data_state", "extra", "num_rng_states", "run_id", "saved_at"}
        manifest.json       {"run_id", "step", "saved_at", "files": {name: {"size", "sha256"}}}
        COMPLETE            written last: its presence means every other file is complete

A sharded run (`--fsdp`, `training.sharding`) writes, instead of `model.safetensors` and
`optimizer.pt`, `shards/`: the model's and the optimizer's states as `torch.distributed.checkpoint`
writes them, one `__R_0.distcp` file per process and a `.metadata` index (`save_sharded_checkpoint`).
They load on any number of processes (the index maps every shard to its place in the whole tensor),
and into an unsharded model too (`load_checkpoint`).

Every file but `model.safetensors` and `COMPLETE` is optional, so checkpoints written before
`config.json`, `scaler.pt`, `rng-N.pt`, `manifest.json` or run ids existed still load: without
`config.json` the model config is not checked, a process without its own RNG file keeps its
current streams, and a checkpoint without a manifest is loaded unverified.

Atomicity: everything is written into a hidden sibling `root/.tmp-hflm-checkpoint-...`, each file
is fsynced, `COMPLETE` is written last, and only then is the folder renamed to its final name
(`os.replace`, atomic on POSIX within one file system). A process killed at any moment leaves
either no `checkpoint-N` folder or a complete one; `latest_checkpoint` also ignores any folder
without `COMPLETE`. Every name written aside (`staging_path`: staging, a replaced folder moved
aside, a pruned one on its way out) is `.tmp-hflm-<name>-<pid>-<8 hex digits>`, recognisably this
project's (`is_staging_name`): leftovers of killed runs are ignored here, and the next run that
holds the folder's lock deletes them and nothing else (`run.folder.remove_staging_leftovers`).
In distributed training call `save_checkpoint` on the main process only.
`atomic_folder` and `atomic_write_text` give any other output (a tokenizer, a final model, a metrics
file) the same all-or-nothing guarantee.

Integrity: a complete folder can still be damaged later (a bad disk, a truncating copy, a bit
flip). Every file's size and sha256 go to `manifest.json` before `COMPLETE` is written;
`verify_checkpoint` recomputes them, and `load_latest_checkpoint` walks back from the newest
checkpoint to the first intact one, warning with the damaged file's name, or raises
`CorruptCheckpointError` listing what is wrong with each. A file that cannot be read is reported
by name too (also for checkpoints older than manifests).

Runs: each checkpoint carries the id of the run that wrote it (`run_id`, kept by a resumed run).
`keep_last` prunes only the checkpoints of the run being saved, so a second run in a reused folder
never deletes (nor is pruned by) another run's checkpoints; `list_checkpoints_with_run_ids` and
`checkpoint_state(path)["run_id"]` tell the runs apart.

Finite weights only: `save_checkpoint` refuses a model with a NaN or infinite weight
(`NonFiniteWeightsError`, before anything is written), so the newest checkpoint is always one
that training can continue from. The check is one fused reduction (`max_abs_weight`) and one host
sync per save.

Every `.pt` file holds only tensors and Python primitives, so it loads with
`torch.load(..., weights_only=True)` (no arbitrary unpickling): numpy's RNG state is stored as a
list of ints, not as an `ndarray`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import logging
import math
import os
import pickle
import random
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, load_model, save_file, save_model

logger = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "checkpoint-"
# every name this project writes aside starts with it (`staging_path`); a user's `.tmp-*` files do not
STAGING_PREFIX = ".tmp-hflm-"
COMPLETE_MARKER = "COMPLETE"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
SCALER_FILE = "scaler.pt"
RNG_FILE = "rng.pt"
CONFIG_FILE = "config.json"
STATE_FILE = "state.json"
TENSORS_FILE = "tensors.safetensors"
MANIFEST_FILE = "manifest.json"
SHARDS_DIR = "shards"  # a sharded run's model and optimizer states (torch.distributed.checkpoint)
_HASH_CHUNK = 8 << 20  # bytes read at a time when hashing: constant memory for any file size


class CorruptCheckpointError(RuntimeError):
    """A checkpoint (or every checkpoint of a run) is damaged: `problems` maps each folder to what
    is wrong with it, file by file."""

    def __init__(self, message: str, problems: dict[Path, list[str]]) -> None:
        super().__init__(message)
        self.problems = problems


class NonFiniteWeightsError(ValueError):
    """The model holds a NaN or infinite weight: it is not saved as a checkpoint."""


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
# `staging_path`'s names: the prefix, what (a role and) the final name, the writer's pid, 8 hex
# digits, and the final name's suffix again where a writer needs it (a `.png` to draw)
_STAGING_RE = re.compile(rf"^{re.escape(STAGING_PREFIX)}.+-\d+-[0-9a-f]{{8}}(\.[A-Za-z0-9]+)?$")


def staging_path(final: str | os.PathLike, role: str = "", keep_suffix: bool = False) -> Path:
    """A fresh hidden sibling of `final` to write it aside in: `.tmp-hflm-[<role>-]<name>-<pid>-<8 hex>`.

    Every name this project writes aside comes from here, so a leftover of a killed run is told from
    a user's file by its name alone (`is_staging_name`). `role`: "old" for a folder moved aside to be
    replaced, "trash" for one on its way out; `keep_suffix`: end with `final`'s suffix too (a
    plotting library picks the format from it).
    """
    final = Path(final)
    role = f"{role}-" if role else ""
    suffix = final.suffix if keep_suffix else ""
    return final.with_name(f"{STAGING_PREFIX}{role}{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}")


def is_staging_name(name: str) -> bool:
    """Whether `name` is one `staging_path` gives (a user's `.tmp-notes` or `.tmp-draft.txt` is not)."""
    return _STAGING_RE.match(name) is not None


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


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


def _swap_in(tmp: Path, final: Path) -> None:
    """Rename the finished folder `tmp` to `final`, replacing a folder already there.

    A directory rename cannot replace a non-empty directory: the old one is moved aside first and
    put back if the rename fails, so `final` is always either the old folder or the new one.
    """
    old = None
    if final.exists():
        old = staging_path(final, "old")
        os.replace(final, old)
    try:
        os.replace(tmp, final)
    except BaseException:
        if old is not None:
            os.replace(old, final)
        raise
    _fsync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def staging_folder(final: str | os.PathLike) -> Path:
    """A new, empty, hidden sibling of `final` to write a folder into before `commit_folder`.

    A process killed before the commit leaves `final` as it was (absent, or the previous complete
    folder) and the `.tmp-hflm-...` staging folder, which the next run holding the folder deletes.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(final)
    staging.mkdir()
    return staging


def commit_folder(staging: str | os.PathLike, final: str | os.PathLike) -> None:
    """Fsync every file of the finished `staging` folder, then rename it to `final` (replacing it)."""
    staging = Path(staging)
    for folder, _, files in os.walk(staging):
        for name in files:
            _fsync_file(Path(folder) / name)
        _fsync_dir(Path(folder))
    _swap_in(staging, Path(final))


@contextlib.contextmanager
def atomic_folder(final: str | os.PathLike) -> Iterator[Path]:
    """Write a folder all at once: yields a staging folder to fill (`staging_folder`), which
    replaces `final` (`commit_folder`) only when the block ends without an exception; an exception
    removes it, and a kill leaves `final` as it was.

        with atomic_folder(output_dir / "tokenizer") as tmp:
            tokenizer.save_pretrained(tmp)
    """
    staging = staging_folder(final)
    try:
        yield staging
        commit_folder(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Replace the file `path` with `text` all at once (a fsynced temporary sibling, then `os.replace`):
    a reader, or a run resumed after a kill, sees the old contents or the new, never a truncated file."""
    path = Path(path)
    tmp = staging_path(path)
    try:
        _write_text(tmp, text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def max_abs_weight(model: torch.nn.Module) -> float:
    """The largest |weight| of `model` (NaN if any weight is NaN, inf if any is infinite).

    One fused reduction (`torch.nn.utils.get_total_norm` with the max norm: foreach kernels per
    device and dtype) and one host sync, whatever the number of parameters; cheap next to a save.
    Under FSDP each process reduces its shards and the processes gather their maxima (every process
    must call), so all of them get the same answer.
    """
    from torch.distributed.tensor import DTensor

    params = [p.detach() for p in model.parameters()]
    if not params:
        return 0.0
    sharded = isinstance(params[0], DTensor)
    if not sharded:
        return float(torch.nn.utils.get_total_norm(params, norm_type=math.inf))
    # a small parameter may leave a process an empty shard, whose max norm is undefined
    shards = [s for s in (p.to_local() for p in params) if s.numel()]
    local = torch.nn.utils.get_total_norm(shards, norm_type=math.inf) if shards else params[0].new_zeros(())
    local = local.to_local() if isinstance(local, DTensor) else local
    # gathered, not all-reduced with MAX: a reduction's max need not propagate a NaN
    group = params[0].device_mesh.get_group()
    everyone = [torch.empty_like(local) for _ in range(torch.distributed.get_world_size(group))]
    torch.distributed.all_gather(everyone, local, group=group)
    return float(torch.stack(everyone).max())


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
    """The complete checkpoint with the highest step under `root`, or None if there is none.

    Whatever run wrote it, unverified: resume with `load_latest_checkpoint`, which picks the run
    and walks back past damaged checkpoints.
    """
    checkpoints = list_checkpoints(root)
    return checkpoints[-1][1] if checkpoints else None


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, unreadable, not UTF-8, not JSON
        return None
    return value if isinstance(value, dict) else None


def _identity(path: Path) -> tuple[str | None, float]:
    """(run id, save time) of a complete checkpoint: from its manifest, else its state.json (a
    damaged one may still have the other intact), else (None, the COMPLETE marker's mtime)."""
    for name in (MANIFEST_FILE, STATE_FILE):
        data = _read_json(path / name)
        if data is not None and "run_id" in data:
            return data["run_id"], float(data.get("saved_at") or (path / COMPLETE_MARKER).stat().st_mtime)
    return None, (path / COMPLETE_MARKER).stat().st_mtime


def checkpoint_run_id(path: str | os.PathLike) -> str | None:
    """The id of the run that wrote the checkpoint `path` (None: written before run ids, or unreadable)."""
    return _identity(Path(path))[0]


def list_checkpoints_with_run_ids(root: str | os.PathLike) -> list[tuple[int, Path, str | None]]:
    """Complete checkpoints under `root` as (step, path, run id), oldest step first.

    The run id is None for checkpoints written before run ids (or whose manifest and state are both
    unreadable). Reads two small JSON files per checkpoint, no tensor.
    """
    return [(step, path, checkpoint_run_id(path)) for step, path in list_checkpoints(root)]


def latest_run_id(root: str | os.PathLike) -> str | None:
    """The run id of the checkpoint saved last (by its recorded save time) under `root`: the run a
    resume continues. None when there is no checkpoint or the last one predates run ids."""
    stamped = []  # (save time, step, run id)
    for step, path in list_checkpoints(root):
        run_id, saved_at = _identity(path)
        stamped.append((saved_at, step, run_id))
    # a checkpoint whose manifest and state are both unreadable names no run: it cannot decide
    known = [t for t in stamped if t[2] is not None] or stamped
    return max(known)[2] if known else None


def new_run_id() -> str:
    """A fresh run id: 12 random hex digits."""
    return uuid.uuid4().hex[:12]


def _manifest(
    folder: Path, run_id: str | None, step: int, saved_at: float, hashing: dict | None = None
) -> str:
    # read back from the page cache right after writing: the hashes are of the bytes on disk.
    # `hashing`: {name: Future} of files already being hashed in the background
    hashing = hashing or {}
    files = {
        name: {
            "size": (folder / name).stat().st_size,
            "sha256": hashing[name].result() if name in hashing else _sha256(folder / name),
        }
        for name in _file_names(folder)
        if name not in (MANIFEST_FILE, COMPLETE_MARKER)
    }
    return json.dumps({"run_id": run_id, "step": step, "saved_at": saved_at, "files": files}, indent=2)


def _file_names(folder: Path) -> list[str]:
    """Every file under `folder`, as sorted paths relative to it ("shards/__0_0.distcp")."""
    return sorted(str(f.relative_to(folder)) for f in folder.rglob("*") if f.is_file())


def verify_checkpoint(path: str | os.PathLike) -> list[str]:
    """What is wrong with the checkpoint folder `path`, file by file: an empty list if it is intact.

    The manifest must match the sha256 that `COMPLETE` records for it, and every file it lists must
    be there with its recorded size and sha256 (one read of each file; a size mismatch is reported
    without reading). A checkpoint written before manifests is not verified here (`load_checkpoint`
    still names a file it cannot read).
    """
    path = Path(path)
    if not (path / COMPLETE_MARKER).is_file():
        return [f"no {COMPLETE_MARKER} marker (an interrupted save)"]
    try:  # "{step}\nmanifest.json sha256 {hex}\n"; just "{step}\n" before manifests
        marker = (path / COMPLETE_MARKER).read_text(encoding="utf-8", errors="replace").split()
    except OSError as err:
        return [f"{COMPLETE_MARKER}: unreadable ({err})"]
    recorded = marker[3] if len(marker) == 4 and marker[1:3] == [MANIFEST_FILE, "sha256"] else None
    if not (path / MANIFEST_FILE).is_file():
        return [f"{MANIFEST_FILE}: missing"] if recorded is not None else []
    if recorded is not None and _sha256(path / MANIFEST_FILE) != recorded:
        return [
            f"{MANIFEST_FILE}: sha256 differs from the one {COMPLETE_MARKER} records (the manifest is damaged)"
        ]
    manifest = _read_json(path / MANIFEST_FILE)
    entries = manifest.get("files") if manifest is not None else None
    if not isinstance(entries, dict) or not all(
        isinstance(e, dict) and {"size", "sha256"} <= e.keys() for e in entries.values()
    ):
        return [f"{MANIFEST_FILE}: unreadable or not a manifest"]
    problems = []
    for name, expected in sorted(entries.items()):
        file = path / name
        if not file.is_file():
            problems.append(f"{name}: missing")
            continue
        size = file.stat().st_size
        if size != expected["size"]:
            problems.append(f"{name}: {size} bytes, {expected['size']} written (truncated or overwritten)")
        elif _sha256(file) != expected["sha256"]:
            problems.append(f"{name}: sha256 mismatch (contents changed since the save: corrupt)")
    return problems


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
    run_id: str | None = None,
    check_finite: bool = True,
    staged: Path | None = None,
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
        keep_last: if given, afterwards delete all but the `keep_last` newest (by step) complete
            checkpoints of this run (`run_id`): another run's checkpoints in `directory` are never
            touched. This run's checkpoints with a step above `step` are deleted too: they are a
            future the run abandoned (damaged checkpoints it resumed past, or a rollback).
        save_rng: also save the global RNG states (python, numpy, torch, CUDA).
        rng_states: the RNG states of every process, in rank order (`get_rng_state()` on each,
            gathered to the saving process), one file each; default: this process's states only.
            A multi-process run must pass them: each process has its own dropout stream.
        tensors: other named tensors of the run's state (e.g. the recurrent state carried across
            blocks by truncated BPTT), written to `tensors.safetensors`.
        run_id: the id of the run writing it (`new_run_id()`; a resumed run keeps its own), stored
            in `state.json` and the manifest. None: a run without an id (pruned only with others
            without one).
        check_finite: refuse a model with a non-finite weight (one fused reduction and one host
            sync). Pass False only when the caller has just checked (the training loop checks on
            every process, so that all of them agree).
        staged: the staging folder in which every process of a sharded run has written its shards
            of the model and optimizer (`save_sharded_checkpoint`): the rest is written into it and
            it is committed; `model` then only gives the config.

    Returns:
        The final checkpoint folder.

    Raises:
        ValueError: for a negative `step` or `keep_last < 1`.
        NonFiniteWeightsError: a weight is NaN or infinite (nothing is written).
        TypeError: if `data_state`/`extra` are not JSON-serializable (nothing is left behind).
        OSError, SafetensorError: the disk is full or a write fails; the partial folder is removed
            and every earlier checkpoint kept (a note on the error says so).
    """
    _check_save(model, step, keep_last, check_finite)
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
    if save_rng and rng_states is None:
        rng_states = [get_rng_state()]
    saved_at = time.time()
    # serialize the JSON first: a TypeError should not cost a half-written temp folder
    state_json = json.dumps(
        {
            "step": step,
            "data_state": data_state,
            "extra": extra,
            "num_rng_states": len(rng_states) if save_rng else 0,
            "run_id": run_id,
            "saved_at": saved_at,
        },
        indent=2,
    )
    parts = {"optimizer": optimizer, "scheduler": scheduler, "scaler": scaler, "tensors": tensors}
    parts["rng_states"] = rng_states if save_rng else []
    tmp = staged if staged is not None else staging_path(final)
    if staged is None:
        tmp.mkdir()
    try:
        _write_checkpoint_files(tmp, model, parts, state_json, run_id, step, saved_at, staged is None)
        _swap_in(tmp, final)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, Exception):  # a full disk: OSError, or SafetensorError from its writer
            err.add_note(
                f"Could not write the checkpoint of step {step} to {final} (a full disk?): nothing of it is "
                "left behind, and the earlier checkpoints are kept."
            )
        raise
    logger.info("saved checkpoint %s", final)

    if keep_last is not None:
        prune_checkpoints(root, keep_last, run_id=run_id, current_step=step)
    return final


def save_sharded_checkpoint(
    directory: str | os.PathLike, *, model, optimizer, step: int, **save_kwargs
) -> Path:
    """`save_checkpoint` for a sharded model (FSDP2): every process must call it.

    Each process writes its shards of the model and optimizer states into one staging folder (its
    name chosen by process 0), with `torch.distributed.checkpoint`; process 0 then writes the rest
    (scheduler, RNG states of every process, state), checksums every file, shards included, in the
    manifest, writes `COMPLETE` and renames the folder into place. A kill at any moment leaves the
    previous checkpoints and a staging folder the next run removes.

    Args:
        save_kwargs: `save_checkpoint`'s other arguments (`scheduler`, `rng_states`, `run_id`...),
            read on process 0.
    """
    import torch.distributed as dist
    from torch.distributed.checkpoint import FileSystemWriter, save
    from torch.distributed.checkpoint.state_dict import get_state_dict

    root = Path(directory)
    main = dist.get_rank() == 0
    staged = [None]
    if main:
        root.mkdir(parents=True, exist_ok=True)
        staged = [staging_path(root / checkpoint_name(step))]
        staged[0].mkdir()
    dist.broadcast_object_list(staged, src=0)
    tmp = Path(staged[0])
    try:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        writer = FileSystemWriter(tmp / SHARDS_DIR, sync_files=True)
        save({"model": model_state, "optimizer": optimizer_state}, storage_writer=writer)
        dist.barrier()  # every shard and the index are written
        final = None
        if main:  # the weights were checked on every process: a check on one would wait for the others
            save_kwargs = {**save_kwargs, "check_finite": False}
            final = save_checkpoint(root, model=model, step=step, staged=tmp, **save_kwargs)
    except BaseException:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    dist.barrier()  # committed (and pruned) before any process goes on
    return root / checkpoint_name(step) if final is None else final


def _load_shards(path: Path, model: torch.nn.Module, optimizer) -> None:
    """The model's (and optimizer's) states from a sharded checkpoint's `shards/`, resharded to this
    run's processes, or into an unsharded model (each process reads what its tensors need)."""
    from torch.distributed.checkpoint import CheckpointException, FileSystemReader, load
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    if optimizer is None:
        state = {"model": get_model_state_dict(model)}
    else:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
    _read_part(
        path,
        SHARDS_DIR,
        lambda folder: load(state, storage_reader=FileSystemReader(folder)),
        errors=_READ_ERRORS + (CheckpointException,),
    )
    if optimizer is None:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def _check_save(model: torch.nn.Module, step: int, keep_last: int | None, check_finite: bool) -> None:
    """Refuse a save before anything is written (`save_checkpoint`'s ValueError and NonFiniteWeightsError)."""
    if step < 0:
        raise ValueError(f"`step` must be >= 0, got {step}.")
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"`keep_last` must be >= 1 or None, got {keep_last}.")
    if check_finite:
        largest = max_abs_weight(model)
        if not math.isfinite(largest):
            raise NonFiniteWeightsError(
                f"Not saving the checkpoint of step {step}: the model holds a non-finite weight "
                f"(max |w| = {largest}); training diverged."
            )


def _write_checkpoint_files(
    tmp: Path,
    model: torch.nn.Module,
    parts: dict,
    state_json: str,
    run_id: str | None,
    step: int,
    saved_at: float,
    weights: bool = True,
) -> None:
    """Every file of a checkpoint into the temporary folder `tmp`, synced; `COMPLETE` last.

    `parts`: the optional "optimizer", "scheduler", "scaler" (each saved with its `state_dict()`),
    "tensors" (named tensors) and "rng_states" (one per process) of `save_checkpoint`. `weights`:
    write `model.safetensors` (False: the shards are in `tmp` already).
    """
    config = _config_dict(model)
    # the weights are hashed (hashlib releases the GIL) while the optimizer state is written
    hasher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="checkpoint-sha256")
    try:
        hashing = {}
        if weights:
            save_model(model, str(tmp / MODEL_FILE))
            _fsync_file(tmp / MODEL_FILE)
            hashing = {MODEL_FILE: hasher.submit(_sha256, tmp / MODEL_FILE)}
        if config is not None:
            _write_text(tmp / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True))
        for name, file in (
            ("optimizer", OPTIMIZER_FILE),
            ("scheduler", SCHEDULER_FILE),
            ("scaler", SCALER_FILE),
        ):
            if parts[name] is not None:
                _torch_save(parts[name].state_dict(), tmp / file)
        for rank, rng_state in enumerate(parts["rng_states"]):
            _torch_save(rng_state, tmp / rng_file(rank))
        if parts["tensors"]:
            tensors = {k: v.detach().cpu().contiguous() for k, v in parts["tensors"].items()}
            save_file(tensors, str(tmp / TENSORS_FILE))
            _fsync_file(tmp / TENSORS_FILE)
        _write_text(tmp / STATE_FILE, state_json)
        # the checksums of every file, before COMPLETE: a complete folder always has its manifest
        _write_text(tmp / MANIFEST_FILE, _manifest(tmp, run_id, step, saved_at, hashing))
        # last: marks every other file complete, and checksums the manifest itself
        _write_text(tmp / COMPLETE_MARKER, f"{step}\n{MANIFEST_FILE} sha256 {_sha256(tmp / MANIFEST_FILE)}\n")
        _fsync_dir(tmp)
    except BaseException:
        hasher.shutdown(cancel_futures=True)
        raise
    hasher.shutdown()


def prune_checkpoints(
    root: str | os.PathLike, keep_last: int, *, run_id: str | None, current_step: int | None = None
) -> list[int]:
    """Delete all but the `keep_last` newest (by step) complete checkpoints of run `run_id`.

    Only checkpoints whose run id equals `run_id` are considered: another run's, in a reused
    folder, are never deleted, and do not count towards `keep_last`. With `current_step`, this
    run's checkpoints of a higher step are deleted as well: the run went back past them (it resumed
    before a damaged checkpoint, or rolled back), so they are a future that will not happen.

    Returns:
        The steps removed, oldest first.
    """
    mine = [(step, path) for step, path, rid in list_checkpoints_with_run_ids(root) if rid == run_id]
    ahead = [(s, p) for s, p in mine if current_step is not None and s > current_step]
    kept = [(s, p) for s, p in mine if (s, p) not in ahead]
    for old_step, path in ahead:
        logger.warning(
            "removing the checkpoint of step %d: the run went back to step %d", old_step, current_step
        )
        _remove(path)
    for old_step, path in kept[:-keep_last]:
        logger.info("pruning checkpoint of step %d", old_step)
        _remove(path)
    return sorted(s for s, _ in ahead + kept[:-keep_last])


def _remove(path: Path) -> None:
    # rename first (atomic), then delete: a kill during the slow, file-by-file rmtree must not
    # leave a half-deleted folder under a checkpoint's name (and what it leaves, the next run deletes)
    trash = staging_path(path, "trash")
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


_ANY_RUN = object()


def remove_checkpoints_except(root: str | os.PathLike, keep_steps, run_id: Any = _ANY_RUN) -> list[int]:
    """Delete the complete checkpoints under `root` whose step is not in `keep_steps`.

    For folders of checkpoints that must outlive `keep_last`'s count, such as the best models a
    run keeps (`training.best.BestModel`). Each goes as `keep_last` prunes: renamed, then deleted.
    With `run_id` given, only that run's checkpoints are candidates (another run's are kept).

    Returns:
        The steps removed, oldest first.
    """
    keep = set(keep_steps)
    removed = []
    for step, path, rid in list_checkpoints_with_run_ids(root):
        if step not in keep and (run_id is _ANY_RUN or rid == run_id):
            _remove(path)
            removed.append(step)
    return removed


def checkpoint_state(directory: str | os.PathLike) -> dict:
    """The `state.json` of a complete checkpoint: `step`, `data_state`, `extra`, `num_rng_states`,
    `run_id` (None for checkpoints written before run ids) and `saved_at` (a Unix time, or None).

    Reads no tensor, so it is cheap enough to inspect every kept checkpoint.

    Raises:
        CorruptCheckpointError: `state.json` is missing or unreadable (the message names it).
    """
    path = Path(directory) / STATE_FILE
    state = _read_json(path)
    if state is None:
        raise CorruptCheckpointError(
            f"{path}: missing or unreadable", {Path(directory): [f"{STATE_FILE}: unreadable"]}
        )
    state.setdefault("run_id", None)
    state.setdefault("saved_at", None)
    return state


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
    verify: bool = True,
) -> dict:
    """Restore a checkpoint written by `save_checkpoint` into existing objects.

    The files are first checked against the manifest (`verify_checkpoint`), so a damaged
    checkpoint fails before anything is loaded, naming the file. The model's config is then
    compared with the checkpoint's `config.json`, so a model built with other settings fails with
    the list of differing fields rather than inside `load_state_dict` with tensor shapes.

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
        verify: check every file against the manifest first (one read of each file). False when
            the caller has just verified the folder (`load_latest_checkpoint`).

    Returns:
        A dict with `step`, `data_state`, `extra`, `run_id`, `tensors` (the named tensors saved
        with `tensors=`, on the CPU; empty if none) and `path`.

    Raises:
        FileNotFoundError: if the folder is not a complete checkpoint, or a requested part
            (optimizer/scheduler state) is missing.
        CorruptCheckpointError: a file differs from the manifest or cannot be read (named in
            the message). Some objects may then hold part of the checkpoint: load another one.
        ValueError: `model`'s config differs from the one saved with the checkpoint (the message
            lists each field as saved → current).
    """
    path = Path(directory)
    if not (path / COMPLETE_MARKER).is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {COMPLETE_MARKER} marker).")
    problems = verify_checkpoint(path) if verify else []
    if problems:
        raise CorruptCheckpointError(
            f"Checkpoint {path} is damaged: {'; '.join(problems)}.", {path: problems}
        )
    state = _read_part(path, STATE_FILE, lambda f: json.loads(f.read_text(encoding="utf-8")))
    current = _config_dict(model)
    if current is not None and (path / CONFIG_FILE).is_file():
        saved = _with_current_defaults(
            _read_part(path, CONFIG_FILE, lambda f: json.loads(f.read_text(encoding="utf-8"))), model.config
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
    if (path / SHARDS_DIR).is_dir():
        _load_shards(path, model, optimizer)
    else:
        _load_whole(path, model, optimizer, strict)
    for obj, name in ((scheduler, SCHEDULER_FILE),):
        if obj is None:
            continue
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path / name} is missing: this checkpoint was saved without it.")
        obj.load_state_dict(_read_part(path, name, _torch_load))
    if scaler is not None:
        if (path / SCALER_FILE).is_file():
            scaler.load_state_dict(_read_part(path, SCALER_FILE, _torch_load))
        else:
            logger.warning("%s has no GradScaler state: the fp16 loss scale starts afresh", path)

    if restore_rng:
        if (path / rng_file(rank)).is_file():
            set_rng_state(_read_part(path, rng_file(rank), _torch_load))
        else:
            logger.warning("%s has no RNG state for process %d: random streams not restored", path, rank)

    logger.info("loaded checkpoint %s (step %d)", path, state["step"])
    tensors = (
        _read_part(path, TENSORS_FILE, lambda f: load_file(str(f))) if (path / TENSORS_FILE).is_file() else {}
    )
    return {
        "step": state["step"],
        "data_state": state["data_state"],
        "extra": state["extra"],
        "run_id": state.get("run_id"),
        "tensors": tensors,
        "path": path,
    }


def _load_whole(path: Path, model: torch.nn.Module, optimizer, strict: bool) -> None:
    """The weights (and optimizer state) of an unsharded checkpoint, on every process."""
    from torch.distributed.tensor import DTensor

    param = next(model.parameters(), None)
    if isinstance(param, DTensor):
        raise ValueError(
            f"{path} was saved by an unsharded run (model.safetensors), and this run shards the model (--fsdp): "
            "resume it as it was saved (without --fsdp), or start a sharded run from its weights with "
            "--init_from on a finished model (a run's final/)."
        )
    device = param.device if param is not None else torch.device("cpu")
    missing, unexpected = _read_part(
        path,
        MODEL_FILE,
        lambda f: load_model(model, str(f), strict=strict, device=str(device)),
        errors=(OSError, SafetensorError),
    )
    if missing or unexpected:
        logger.warning("non-strict load: missing %s, unexpected %s", missing, unexpected)
    if optimizer is not None:
        if not (path / OPTIMIZER_FILE).is_file():
            raise FileNotFoundError(
                f"{path / OPTIMIZER_FILE} is missing: this checkpoint was saved without it."
            )
        optimizer.load_state_dict(_read_part(path, OPTIMIZER_FILE, _torch_load))
        _regroup_stacked_qkv_moments(model, optimizer, path / MODEL_FILE)


def _regroup_stacked_qkv_moments(model: torch.nn.Module, optimizer, weights: Path) -> None:
    """A checkpoint from before the head-grouped attention layout holds `qkv_proj` with rows [all q;
    all k; all v]. Loading the weights regroups them (`Attention`'s load hook); the optimizer's
    per-parameter moments (Adam's averages) are row-aligned with the weight, so they are regrouped
    alike here, or the resumed run would update each row with another row's history."""
    with safe_open(str(weights), "pt") as f:
        stacked = [key for key in f.keys() if ".qkv_proj." in key]  # noqa: SIM118 (safe_open has no __iter__)
    if not stacked:
        return
    params = dict(model.named_parameters())
    for key in stacked:
        name = key.replace(".qkv_proj.", ".query_key_value.")
        param = params.get(name)
        state = optimizer.state.get(param) if param is not None else None
        if not state:
            continue
        order = model.get_submodule(name.rsplit(".", 2)[0]).grouped_order()
        for field, value in state.items():
            if torch.is_tensor(value) and value.shape == param.shape:
                state[field] = value[order.to(value.device)]


def _torch_load(path: Path):
    return torch.load(path, map_location="cpu", weights_only=True)


# what reading a damaged file raises: torch.load (a truncated zip: RuntimeError or OSError; empty:
# EOFError; garbage: UnpicklingError), json (ValueError), safetensors (SafetensorError)
_READ_ERRORS = (OSError, EOFError, ValueError, RuntimeError, pickle.UnpicklingError, SafetensorError)


def _read_part(folder: Path, name: str, read, errors: tuple[type[BaseException], ...] = _READ_ERRORS):
    """`read(folder / name)`, a failure to parse the file (truncated, empty, garbage) raised as a
    `CorruptCheckpointError` naming it. Only the errors of reading are caught (for the weights,
    whose reader also loads them, not the RuntimeError of a state that does not fit the model)."""
    try:
        return read(folder / name)
    except errors as err:
        problem = f"{name}: unreadable ({type(err).__name__}: {err})"
        raise CorruptCheckpointError(
            f"Checkpoint {folder} is damaged: {problem}.", {folder: [problem]}
        ) from err


def load_latest_checkpoint(
    root: str | os.PathLike, *, run_id: str | None = None, **load_kwargs
) -> dict | None:
    """Load the newest intact checkpoint of a run under `root`, walking back past damaged ones.

    Each candidate, newest step first, is verified against its manifest (`verify_checkpoint`: one
    read of each file) and then loaded (`load_checkpoint(..., verify=False)`, so nothing is hashed
    twice). A damaged one is reported with a warning naming the file and the previous one tried;
    a later load overwrites everything an earlier, failed one may have put in the objects.

    Args:
        root: the folder of the `checkpoint-N` folders.
        run_id: whose checkpoints to consider; None: the run that saved last (`latest_run_id`),
            which is the run a resume continues (another run's checkpoints are never loaded instead).
        **load_kwargs: `model`, `optimizer`, `scheduler`, ... as for `load_checkpoint`.

    Returns:
        `load_checkpoint`'s dict plus `"damaged"`: {path: problems} of the newer checkpoints passed
        over; None when the run has no checkpoint.

    Raises:
        CorruptCheckpointError: the run has checkpoints but none is intact; the message lists what
            is wrong with each.
        ValueError: the newest intact checkpoint belongs to another model config (as `load_checkpoint`).
    """
    run = latest_run_id(root) if run_id is None else run_id
    checkpoints = list_checkpoints_with_run_ids(root)
    candidates = [path for _, path, rid in reversed(checkpoints) if rid == run]
    for _, path, rid in checkpoints:
        if rid is None and run is not None:
            logger.warning(
                "Checkpoint %s names no run (written before run ids, or its manifest and state.json are unreadable): not considered.",
                path,
            )
    damaged: dict[Path, list[str]] = {}
    for path in candidates:
        problems = verify_checkpoint(path)
        if not problems:
            try:
                state = load_checkpoint(path, verify=False, **load_kwargs)
            except (
                CorruptCheckpointError
            ) as err:  # unreadable though its sizes and hashes match (or no manifest)
                problems = err.problems[path]
            else:
                return state | {"damaged": damaged}
        damaged[path] = problems
        logger.warning("Checkpoint %s is damaged (%s): trying the previous one.", path, "; ".join(problems))
    if damaged:
        listed = "\n".join(f"  {path.name}: {'; '.join(problems)}" for path, problems in damaged.items())
        raise CorruptCheckpointError(
            f"No intact checkpoint of run {run} under {root}; what is wrong with each:\n{listed}\n"
            "Restore the files from a copy, or start the run afresh (resume=false).",
            damaged,
        )
    return None
