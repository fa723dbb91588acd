"""A run owns its output folder: one live run at a time, and a new run never mixes with an old one.

- `RunLock`: an exclusive `fcntl` lock on `output_dir/.run.lock`, held by the main process for the
  whole run. A second run started in the same folder while the first is alive fails at once with
  the holder's pid and start time; the operating system drops the lock when its process ends, so
  a killed run leaves no stale lock behind.
- `claim_output_dir`: a run that does not resume (`--resume false`, the default) refuses a folder
  holding another run's work (checkpoints, `final/`, `best/`, metrics), listing what it found,
  unless it is told to replace it (`--overwrite_output_dir`, transformers' name): then that work
  is removed first, and the removal logged. Without this, a second run's checkpoints were pruned by the first run's higher
  step numbers, and `--resume` then returned the other run's model.
- `remove_staging_leftovers`: every output is written into a hidden `.tmp-*` sibling and renamed into
  place (`checkpoint.py`); a run killed mid-write leaves that staging folder or file behind. The run
  that next holds the lock deletes them: no live run can be writing them, and none is complete.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import logging
import os
import shutil
import socket
from pathlib import Path

logger = logging.getLogger(__name__)

LOCK_FILE = ".run.lock"
STAGING_PREFIX = ".tmp-"  # the hidden siblings outputs are written into before their rename
# what a finished or interrupted run leaves in its folder (the tokenizer is reused only by a resume)
RUN_OUTPUTS = ("checkpoints", "best", "final", "final_metrics.json", "metrics.csv", "loss.png", "tokenizer")


class RunFolderBusyError(RuntimeError):
    """Another live run holds the output folder."""


class RunLock:
    """An exclusive lock on a run folder, held until `release()` (or the process ends)."""

    def __init__(self, output_dir: str | os.PathLike):
        self.path = Path(output_dir) / LOCK_FILE
        self._file = None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115  (held open for the whole run)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise RunFolderBusyError(
                f"{self.path.parent} is in use by another run ({holder}). Wait for it to finish, stop it, "
                "or give this run another --output_dir."
            ) from None
        handle.seek(0)
        handle.truncate()
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started}))
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def previous_run_outputs(output_dir: str | os.PathLike) -> list[Path]:
    """The outputs of an earlier run found in `output_dir` (empty folders do not count)."""
    folder = Path(output_dir)
    found = []
    for name in RUN_OUTPUTS:
        path = folder / name
        if path.is_file() or (path.is_dir() and any(path.iterdir())):
            found.append(path)
    return found


def claim_output_dir(output_dir: str | os.PathLike, resuming: bool, overwrite: bool) -> None:
    """Make `output_dir` this run's: refuse, or with `overwrite` clear, another run's outputs.

    Args:
        output_dir: the run folder.
        resuming: this run continues the folder's own run (`--resume true/auto`): its outputs are its own.
        overwrite: replace another run's outputs (`--overwrite_output_dir`).

    Raises:
        ValueError: the folder holds another run's outputs and `overwrite` is false.
    """
    if resuming:
        return
    found = previous_run_outputs(output_dir)
    if not found:
        return
    listed = ", ".join(p.name + ("/" if p.is_dir() else "") for p in found)
    if not overwrite:
        raise ValueError(
            f"{output_dir} holds another run's outputs ({listed}). Resume that run with --resume, "
            "give this run a new --output_dir, or pass --overwrite_output_dir to delete them and start over."
        )
    logger.warning(
        "--overwrite_output_dir: deleting the previous run's outputs in %s: %s.", output_dir, listed
    )
    for path in found:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def remove_staging_leftovers(output_dir: str | os.PathLike) -> list[Path]:
    """Delete the `.tmp-*` staging folders and files of killed runs in `output_dir` and its direct
    subfolders (`checkpoints/`, `best/`, ...); returns what was deleted. Call it holding the run lock."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    places = [folder] + [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(STAGING_PREFIX)]
    removed = sorted(p for place in places for p in place.glob(f"{STAGING_PREFIX}*"))
    for path in removed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    if removed:
        logger.warning(
            "Deleted what killed runs left half-written in %s: %s.",
            folder,
            ", ".join(str(p.relative_to(folder)) for p in removed),
        )
    return removed
