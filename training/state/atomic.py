"""All-or-nothing writes: a file or a folder is written aside, fsynced, and renamed into place.

A process killed at any moment leaves the old contents or the new ones, never a truncated file or
a half-written folder. Every name written aside (`staging_path`: a staging folder, a replaced
folder moved aside, a pruned one on its way out) is `.tmp-hflm-<name>-<pid>-<8 hex digits>`,
recognisably this project's (`is_staging_name`): the leftovers of killed runs are ignored by the
readers, and the next run that holds the folder's lock deletes them and nothing else
(`training.run.folder.remove_staging_leftovers`).

Checkpoints (`training.state.checkpoint`) are written this way, and so is every other output of a
run: the tokenizer, `final/`, `metrics.csv`'s rewrites, `final_metrics.json` (`atomic_folder`,
`atomic_write_text`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

# every name this project writes aside starts with it (`staging_path`); a user's `.tmp-*` files do not
STAGING_PREFIX = ".tmp-hflm-"
_HASH_CHUNK = 8 << 20  # bytes read at a time when hashing: constant memory for any file size
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


def fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
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


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes, read in chunks (constant memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_text_synced(path: Path, text: str) -> None:
    """Write `text` to `path` (UTF-8), fsynced."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def swap_in(tmp: Path, final: Path) -> None:
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
    fsync_dir(final.parent)
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
            fsync_file(Path(folder) / name)
        fsync_dir(Path(folder))
    swap_in(staging, Path(final))


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
        write_text_synced(tmp, text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
