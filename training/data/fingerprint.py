"""What identifies the text a run read: a checkpoint records it, so that a resume refuses a changed corpus."""

from __future__ import annotations

import hashlib
import os

from datasets import IterableDataset

from ..args import DataArguments
from .corpora import BUILTIN_CORPORA, load_builtin_corpus
from .local_files import local_files


def file_sha256(path: str) -> str:
    """The SHA-256 of the bytes of the file `path`, read in chunks (bounded memory)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _stream_files(dataset: IterableDataset) -> list[str] | None:
    """The data files a streamed Hub dataset reads (their hf:// URLs name the revision), if known."""
    iterable = getattr(dataset, "_ex_iterable", None)
    while iterable is not None:
        files = (getattr(iterable, "kwargs", None) or {}).get("base_files")
        if files:
            return [str(f) for f in files]
        iterable = getattr(iterable, "ex_iterable", None)
    return None


def source_fingerprint(source: str, dataset=None) -> dict:
    """What identifies the text read from `source` (`load_text_dataset`'s), for a resumed run to
    compare with its checkpoint's: a name or path says where the text was, not what it was.

    - a built-in corpus: the SHA-256 of its documents;
    - local files: the SHA-256 of each file's bytes, read in chunks (a size and a modification time
      miss a file rewritten in the same second, or copied back with its old times);
    - a Hub dataset (`dataset`, as loaded): `datasets`' fingerprint of the split (its builder, config
      and data files' revisions), or for a stream the data files it reads, whose URLs carry the
      revision.

    Returns:
        A JSON-ready dict, equal for the same text; `describe_fingerprint_change` says what differs.
    """
    if source in BUILTIN_CORPORA:
        digest = hashlib.sha256()
        for document in load_builtin_corpus(source):
            digest.update(document.encode("utf-8") + b"\0")
        return {"builtin": source, "sha256": digest.hexdigest()}
    files = local_files(os.path.expanduser(source))
    if files is not None:
        return {"files": {path: file_sha256(path) for path in files}}
    if isinstance(dataset, IterableDataset):
        return {"hub": source, "files": _stream_files(dataset)}
    return {"hub": source, "fingerprint": getattr(dataset, "_fingerprint", None)}


def describe_fingerprint_change(before: dict, now: dict) -> str | None:
    """What differs between two `source_fingerprint`s, naming the files; None when they are equal."""
    if before == now:
        return None
    old, new = before.get("files"), now.get("files")
    if isinstance(old, dict) and isinstance(new, dict):
        changes = [f"{path} (its contents changed)" for path in old if path in new and old[path] != new[path]]
        changes += [f"{path} (removed)" for path in old if path not in new]
        changes += [f"{path} (new)" for path in new if path not in old]
        return ", ".join(changes)
    if before.get("builtin") and before.get("builtin") == now.get("builtin"):
        return f"the built-in corpus {before['builtin']!r} (its text changed with this version of the code)"
    return (
        f"{before.get('hub') or before.get('builtin') or 'the source'} (another revision or another dataset)"
    )


def data_fingerprint(data_args: DataArguments, dataset, held_out=None) -> dict:
    """What identifies the text a run reads (`training.data.fingerprint.source_fingerprint`): `dataset` as loaded,
    the `eval_dataset` (`held_out`), and the bad-words file of the C4 cleaning, which decides pages."""
    fingerprint = {"dataset": source_fingerprint(data_args.dataset, dataset)}
    if data_args.eval_dataset:
        fingerprint["eval_dataset"] = source_fingerprint(data_args.eval_dataset, held_out)
    if data_args.data_cleaning != "none" and data_args.clean_bad_words_file:
        path = data_args.clean_bad_words_file
        fingerprint["clean_bad_words_file"] = {"files": {path: file_sha256(path)}}
    return fingerprint
