"""Checkpoint folders: their names and files, the runs that wrote them, their manifests, pruning.

Layout, one folder per step under a root folder (`training.state.checkpoint` writes and reads them):

    root/checkpoint-00001000/
        model.safetensors   weights (safetensors; tied/shared tensors stored once)
        config.json         the model's config (models with a transformers `config` only)
        optimizer.pt        optimizer.state_dict()   (torch.save, loads with weights_only=True)
        scheduler.pt        scheduler.state_dict()   (torch.save, loads with weights_only=True)
        scaler.pt           fp16 GradScaler.state_dict() (loss scale, growth tracker), if one is used
        rng.pt              python `random`, numpy, torch CPU (and CUDA) generator states of process 0
        rng-1.pt, ...       the same for process 1, ... of a multi-process run (gathered to process 0)
        tensors.safetensors named tensors of the run's state (truncated BPTT's carried state), if any
        state.json          {"step", "data_state", "extra", "num_rng_states", "run_id", "saved_at"}
        manifest.json       {"run_id", "step", "saved_at", "files": {name: {"size", "sha256"}}}
        COMPLETE            written last: its presence means every other file is complete

A sharded run (`--fsdp`) writes `shards/` instead of `model.safetensors` and `optimizer.pt`.
Readers skip any folder without `COMPLETE` and the staging folders of killed saves
(`training.state.atomic`).

Integrity: a complete folder can still be damaged later (a bad disk, a truncating copy, a bit
flip). Every file's size and sha256 go to `manifest.json` before `COMPLETE` is written, and
`COMPLETE` records the manifest's own sha256; `verify_checkpoint` recomputes them.

Runs: each checkpoint carries the id of the run that wrote it (`run_id`, kept by a resumed run).
`prune_checkpoints` (`keep_last`) removes only the checkpoints of one run, so a second run in a
reused folder never deletes (nor is pruned by) another run's checkpoints;
`list_checkpoints_with_run_ids` and `checkpoint_record(path)["run_id"]` tell the runs apart.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from .atomic import sha256_file, staging_path

logger = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "checkpoint-"
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

_CHECKPOINT_RE = re.compile(rf"^{re.escape(CHECKPOINT_PREFIX)}(\d+)$")


class CorruptCheckpointError(RuntimeError):
    """A checkpoint (or every checkpoint of a run) is damaged: `problems` maps each folder to what
    is wrong with it, file by file."""

    def __init__(self, message: str, problems: dict[Path, list[str]]) -> None:
        super().__init__(message)
        self.problems = problems


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint at `step` (zero-padded, so names sort by step)."""
    return f"{CHECKPOINT_PREFIX}{step:08d}"


def rng_file(rank: int) -> str:
    """The RNG file of process `rank`: `rng.pt` for process 0 (the single-process name), else `rng-{rank}.pt`."""
    return RNG_FILE if rank == 0 else f"rng-{rank}.pt"


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


def manifest_text(
    folder: Path, run_id: str | None, step: int, saved_at: float, hashing: dict | None = None
) -> str:
    # read back from the page cache right after writing: the hashes are of the bytes on disk.
    # `hashing`: {name: Future} of files already being hashed in the background
    hashing = hashing or {}
    files = {
        name: {
            "size": (folder / name).stat().st_size,
            "sha256": hashing[name].result() if name in hashing else sha256_file(folder / name),
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
    if recorded is not None and sha256_file(path / MANIFEST_FILE) != recorded:
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
        elif sha256_file(file) != expected["sha256"]:
            problems.append(f"{name}: sha256 mismatch (contents changed since the save: corrupt)")
    return problems


def checkpoint_record(directory: str | os.PathLike) -> dict:
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
    run keeps (`training.state.best.BestModel`). Each goes as `keep_last` prunes: renamed, then deleted.
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
