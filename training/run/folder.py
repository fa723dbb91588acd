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
- `remove_staging_leftovers`: every output is written into a hidden sibling and renamed into place
  (`checkpoint.py`); a run killed mid-write leaves that staging folder or file behind. The run that
  next holds the lock deletes them: no live run can be writing them, and none is complete. Only
  names this project gives (`.tmp-hflm-<name>-<pid>-<8 hex digits>`, `checkpoint.is_staging_name`),
  only where it writes (the folder, `checkpoints/`, `best/`), and never through a symbolic link: a
  user's `.tmp-*` files, and whatever a link in the folder points to, are left alone.
- `nothing_to_resume`: a resumed run (`--resume true/auto`) in a folder without a complete
  checkpoint starts afresh when the folder holds only what a run killed before its first checkpoint
  leaves (its tokenizer, `metrics.csv`, best models); otherwise it names the way out.
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

from ..state.atomic import is_staging_name
from ..state.folders import list_checkpoints

logger = logging.getLogger(__name__)

LOCK_FILE = ".run.lock"
# what a finished or interrupted run leaves in its folder (the tokenizer is reused only by a resume)
RUN_OUTPUTS = ("checkpoints", "best", "final", "final_metrics.json", "metrics.csv", "loss.png", "tokenizer")
# the folders a run writes its outputs aside in (the run folder itself, and these in it)
STAGING_PLACES = ("checkpoints", "best")
# what a run killed before its first checkpoint can have left: nothing a resume could continue
BEFORE_FIRST_CHECKPOINT = ("tokenizer", "metrics.csv", "best")


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
    listed = _listing(found)
    if (
        not overwrite
        and not list_checkpoints(Path(output_dir) / "checkpoints")
        and all(_left_before_first_checkpoint(p) for p in found)
    ):
        raise ValueError(
            f"{output_dir} holds what a run stopped before its first checkpoint left ({listed}): nothing to resume. "
            "Run with --resume auto to start that run afresh (deleting them), give this run a new --output_dir, "
            "or pass --overwrite_output_dir."
        )
    if not overwrite:
        raise ValueError(
            f"{output_dir} holds another run's outputs ({listed}). Resume that run with --resume (or --resume "
            "auto), give this run a new --output_dir, or pass --overwrite_output_dir to delete them and start over."
        )
    logger.warning(
        "--overwrite_output_dir: deleting the previous run's outputs in %s: %s.", output_dir, listed
    )
    _delete(found)


def remove_staging_leftovers(output_dir: str | os.PathLike) -> list[Path]:
    """Delete what killed runs left half-written in `output_dir`, `checkpoints/` and `best/`; returns it.

    Only entries named as this project names what it writes aside (`checkpoint.is_staging_name`) go,
    and no symbolic link is followed: a linked `checkpoints/` or `best/` is not looked into, and a
    link named like a staging entry is left as it is (the project writes none). Call it holding the
    run lock: no live run can be writing them, and none is complete.
    """
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    # the folder the user named (it may be a link itself), and its subfolders that are not links
    places = [folder] + [
        p for p in (folder / name for name in STAGING_PLACES) if p.is_dir() and not p.is_symlink()
    ]
    found = sorted(
        entry
        for place in places
        for entry in place.iterdir()
        if is_staging_name(entry.name) and not entry.is_symlink()
    )
    if not found:
        return []
    # said before deleting: a user who reads the log sees what goes, and why
    logger.warning(
        "Deleting what killed runs left half-written in %s: %s.",
        folder,
        ", ".join(str(p.relative_to(folder)) for p in found),
    )
    _delete(found)
    return found


def nothing_to_resume(output_dir: str | os.PathLike, resume: str, overwrite: bool = False) -> bool:
    """Whether a run told to resume (`resume` "true" or "auto") starts afresh: the folder holds no
    complete checkpoint. Call it holding the run lock; a run that starts afresh then claims the
    folder as a new run does (`claim_output_dir`).

    What a run killed before its first checkpoint left (its tokenizer, `metrics.csv`, best models:
    `BEFORE_FIRST_CHECKPOINT`) is deleted, with a warning: nothing trained on it is kept, so the
    fresh run trains its tokenizer again rather than trusting one of unknown settings.

    Raises:
        FileNotFoundError: `resume` is "true" and the folder holds nothing of a run (a mistyped
            `--output_dir`?).
        ValueError: the folder holds a run's other outputs (`final/`, ...) but no checkpoint, and not
            `overwrite`: what to do with them is the user's call (`--overwrite_output_dir`, or another
            folder).
    """
    folder = Path(output_dir)
    checkpoints = folder / "checkpoints"
    if resume == "false" or list_checkpoints(checkpoints):
        return False
    found = previous_run_outputs(folder)
    if not found:
        if resume == "true":
            raise FileNotFoundError(
                f"--resume true: nothing to resume in {folder}: no checkpoint under {checkpoints} and nothing of an "
                "earlier run. Check --output_dir, or start the run with --resume auto (resumes when there is a "
                "checkpoint, else starts afresh) or without --resume."
            )
        return True
    listed = _listing(found)
    others = [p for p in found if not _left_before_first_checkpoint(p)]
    if others and overwrite:
        return True  # `claim_output_dir` deletes them, and says so
    if others:
        raise ValueError(
            f"--resume {resume}: nothing to resume in {folder}: no complete checkpoint under {checkpoints}, but the "
            f"folder holds another run's outputs ({listed}). Pass --overwrite_output_dir to delete them and start "
            "over, or give this run a new --output_dir."
        )
    logger.warning(
        "--resume %s: nothing to resume in %s (no complete checkpoint: the run was stopped before its first "
        "save). Starting the run afresh, deleting what the stopped run left: %s.",
        resume,
        folder,
        listed,
    )
    _delete(found)
    return True


def _left_before_first_checkpoint(path: Path) -> bool:
    """Whether `path` (a run output of `previous_run_outputs`) is one a run killed before its first
    checkpoint leaves: its tokenizer, `metrics.csv`, or `best/` holding only complete best models."""
    if path.name not in BEFORE_FIRST_CHECKPOINT or path.is_symlink():
        return False
    if path.name == "best":
        complete = {p for _, p in list_checkpoints(path)}
        return all(entry in complete for entry in path.iterdir())
    return True


def _listing(paths: list[Path]) -> str:
    """`paths` by name for a message, folders with a trailing slash."""
    return ", ".join(p.name + ("/" if p.is_dir() else "") for p in paths)


def _delete(paths: list[Path]) -> None:
    """Delete files and folders; a symbolic link is removed, never what it points to."""
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
