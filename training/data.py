"""Text datasets for language-model training: load, tokenize, pack into fixed blocks, split.

- `load_text_dataset` gives a `datasets.Dataset` (or `IterableDataset` when streaming) with one
  "text" column, from a built-in corpus, local files, or the Hugging Face Hub.
- `tokenize_and_pack` turns it into blocks of exactly `block_size` tokens, GPT-2 style: documents
  are joined with EOS and the stream is cut with no padding (Radford et al., 2019). The packing
  is exact: the blocks, concatenated, are a prefix of the concatenated tokenized documents,
  whatever the number of processes, and streaming gives the same blocks. With
  `document_mask=True` each token also gets its document's index within the block and its
  position within its document, so attention need not cross documents (Krell et al., 2021,
  "Efficient sequence packing without cross-contamination").
- `train_eval_split` holds out a deterministic share of the rows.
- `buffered_shuffle` shuffles a stream too large for memory through a bounded, seeded buffer.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
from collections.abc import Iterable, Iterator
from typing import TypeVar

import numpy as np
from datasets import Dataset, DatasetDict, Features, IterableDataset, List, Value, load_dataset

from training.corpora import BUILTIN_CORPORA, load_builtin_corpus

logger = logging.getLogger(__name__)

# file extension -> (`datasets` packaged builder, extra builder arguments)
FILE_BUILDERS: dict[str, tuple[str, dict]] = {
    ".txt": ("text", {"sample_by": "paragraph"}),
    ".text": ("text", {"sample_by": "paragraph"}),
    ".md": ("text", {"sample_by": "paragraph"}),
    ".json": ("json", {}),
    ".jsonl": ("json", {}),
    ".ndjson": ("json", {}),
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"sep": "\t"}),
    ".parquet": ("parquet", {}),
}
_COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst", ".lz4")
_MAP_BATCH_SIZE = 1000  # documents per batch of the maps; the blocks do not depend on it

_Item = TypeVar("_Item")


class DatasetLoadError(RuntimeError):
    """A Hub dataset could not be loaded (offline, unknown name, missing config, ...)."""


SAMPLE_BY = ("paragraph", "line", "document")  # rows of a local text file


def _builder_for(path: str) -> tuple[str, dict]:
    name = path.lower()
    for ext in _COMPRESSIONS:
        if name.endswith(ext):
            name = name[: -len(ext)]
    ext = os.path.splitext(name)[1]
    if ext not in FILE_BUILDERS:
        raise ValueError(f"Unsupported file type {ext!r} ({path}); supported: {sorted(FILE_BUILDERS)}.")
    return FILE_BUILDERS[ext]


def _local_files(source: str) -> list[str] | None:
    """The sorted files a local path, folder or glob names; None when `source` is not local."""
    if os.path.isfile(source):
        return [source]
    if os.path.isdir(source):
        found = [
            os.path.join(root, f)
            for root, _, files in os.walk(source)
            for f in files
            if not f.startswith(".")
        ]
        return sorted(f for f in found if _is_supported(f))
    if glob.has_magic(source):
        return sorted(f for f in glob.glob(source, recursive=True) if os.path.isfile(f))
    return None


def _is_supported(path: str) -> bool:
    try:
        _builder_for(path)
    except ValueError:
        return False
    return True


def _looks_like_path(source: str) -> bool:
    return source.startswith((".", "/", "~")) or os.sep in source.split("/", 1)[-1] or _is_supported(source)


def _column_names(dataset) -> list[str]:
    names = dataset.column_names
    if names is None:  # a streamed dataset whose features are unknown until read: peek one row
        names = list(next(iter(dataset), {}).keys())
    return list(names)


def load_text_dataset(
    source: str,
    *,
    config_name: str | None = None,
    split: str = "train",
    text_column: str = "text",
    streaming: bool = False,
    data_files=None,
    sample_by: str | None = None,
) -> Dataset | IterableDataset:
    """Load a text corpus as a dataset with a single "text" column.

    `source` is tried, in this order, as:

    1. a built-in corpus name (`training.corpora.BUILTIN_CORPORA`), one "train" split;
    2. a local file, folder (all supported files under it, recursively) or glob: by extension,
       ".txt"/".text"/".md" (one document per paragraph: `datasets`' "text" builder with
       `sample_by="paragraph"` splits at each "\n\n" and keeps the line breaks inside; empty
       rows are skipped by `tokenize_and_pack`), ".json"/".jsonl"/".ndjson", ".csv"/".tsv", ".parquet", optionally
       compressed (".gz", ...). All files must share one format;
    3. a Hub dataset (or a packaged builder such as "json" with `data_files`), loaded with
       `datasets.load_dataset(source, config_name, split=..., streaming=..., data_files=...)`.

    Args:
        source: see above.
        config_name: the Hub dataset's configuration ("wikitext-103-raw-v1", ...).
        split: the split, with slicing for non-streamed datasets ("train[:10%]").
        text_column: the column holding the text; renamed to "text", other columns dropped.
        streaming: return a lazily read `IterableDataset`.
        data_files: data files of a Hub dataset or packaged builder (ignored for local sources).
        sample_by: for local text files, what one row is: "paragraph" (the default), "line" or
            "document" (a whole file: a contiguous character stream, as nanoGPT reads Tiny
            Shakespeare).

    Returns:
        A `Dataset`, or an `IterableDataset` if `streaming`, with one string column "text".

    Raises:
        ValueError: for a missing `text_column` (listing the columns), mixed or unsupported file
            types, or an unknown split of a built-in corpus.
        FileNotFoundError: for a path-like `source` that matches no file.
        DatasetLoadError: when the Hub dataset cannot be loaded (offline, unknown name, ...),
            wrapping the underlying exception.
    """
    if source in BUILTIN_CORPORA:
        if split != "train":
            raise ValueError(f"Built-in corpus {source!r} has only a 'train' split, got split={split!r}.")
        dataset = Dataset.from_dict({"text": load_builtin_corpus(source)})
        return dataset.to_iterable_dataset() if streaming else dataset

    files = _local_files(os.path.expanduser(source))
    if files is not None:
        if not files:
            raise FileNotFoundError(f"No supported file ({sorted(FILE_BUILDERS)}) matches {source!r}.")
        builders = {_builder_for(f)[0] for f in files}
        if len(builders) > 1:
            raise ValueError(f"{source!r} mixes file types ({sorted(builders)}); load them separately.")
        builder, kwargs = _builder_for(files[0])
        if sample_by is not None:
            if sample_by not in SAMPLE_BY:
                raise ValueError(f"`sample_by` must be one of {list(SAMPLE_BY)}, got {sample_by!r}.")
            if builder == "text":
                kwargs = {**kwargs, "sample_by": sample_by}
        logger.info("Loading %d local %s file(s) from %s.", len(files), builder, source)
        dataset = load_dataset(
            builder, data_files={"train": files}, split=split, streaming=streaming, **kwargs
        )
    elif _looks_like_path(source):
        raise FileNotFoundError(f"{source!r} looks like a path but no such file or folder exists.")
    else:
        try:
            dataset = load_dataset(
                source, config_name, split=split, streaming=streaming, data_files=data_files
            )
        except Exception as err:  # the Hub client raises many types; one clear error for all
            from datasets import config as datasets_config

            hint = (
                " HF_HUB_OFFLINE=1 is set: only datasets already in the local cache can be loaded; "
                "use a built-in corpus or local files instead."
                if datasets_config.HF_HUB_OFFLINE
                else ""
            )
            raise DatasetLoadError(
                f"Could not load dataset {source!r} (config {config_name!r}, split {split!r}) with "
                f"datasets.load_dataset: {type(err).__name__}: {err}.{hint} Built-in corpora: "
                f"{list(BUILTIN_CORPORA)}; local files: {sorted(FILE_BUILDERS)}."
            ) from err

    columns = _column_names(dataset)
    if text_column not in columns:
        raise ValueError(f"`text_column`={text_column!r} is not a column of {source!r}; columns: {columns}.")
    dataset = dataset.select_columns([text_column])
    if text_column != "text":
        dataset = dataset.rename_column(text_column, "text")
    return dataset


# ----------------------------------------------------------------------------------------------
# Tokenize and pack
# ----------------------------------------------------------------------------------------------


def _tokenize(batch: dict, tokenizer, text_column: str) -> dict:
    """Tokens of each non-empty document, without special tokens, EOS appended; and their count."""
    texts = [t for t in batch[text_column] if t]
    ids = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] if texts else []
    ids = [[*doc, tokenizer.eos_token_id] for doc in ids]
    return {"input_ids": ids, "num_tokens": [len(doc) for doc in ids]}


def _cut(docs: list[list[int]], skip: int, n_blocks: int, block_size: int, document_mask: bool) -> dict:
    """`n_blocks` blocks from `docs` joined, starting `skip` tokens into the first document.

    The single place where blocks are made, for both the map and the stream, so both agree.
    """
    flat = np.fromiter((t for doc in docs for t in doc), dtype=np.int64)
    out = {}
    if document_mask:
        is_start = np.zeros(len(flat), dtype=bool)
        is_start[np.cumsum([0] + [len(doc) for doc in docs[:-1]])] = True
    flat = flat[skip : skip + n_blocks * block_size].reshape(n_blocks, block_size)  # (N, T)
    out["input_ids"] = flat.tolist()
    out["labels"] = flat.tolist()
    if document_mask:
        starts = is_start[skip : skip + n_blocks * block_size].reshape(n_blocks, block_size)  # (N, T)
        starts[:, 0] = True  # a block is a model's whole context: its first token starts a document
        out["document_ids"] = (np.cumsum(starts, axis=1) - 1).tolist()
        arange = np.broadcast_to(np.arange(block_size), starts.shape)  # (N, T)
        last_start = np.maximum.accumulate(np.where(starts, arange, 0), axis=1)  # (N, T)
        out["position_ids"] = (arange - last_start).tolist()
    return out


def _pack_batch(
    batch: dict, indices: list[int], tokenized: Dataset, offsets: np.ndarray, n_blocks: int, block_size: int,
    document_mask: bool,
) -> dict:  # fmt: skip
    """The blocks that start within this batch of documents (a contiguous range of rows).

    Block k covers the global tokens [k * block_size, (k + 1) * block_size); it belongs to the
    batch holding its first token, and reads the following rows when it runs past the batch. So
    the result depends only on the global offsets, never on batch or shard boundaries.
    """
    i0, i1 = indices[0], indices[-1] + 1
    k_lo = -(-int(offsets[i0]) // block_size)  # ceil
    k_hi = min(-(-int(offsets[i1]) // block_size), n_blocks)
    if k_lo >= k_hi:
        return {name: [] for name in _block_columns(document_mask)}
    first, end = k_lo * block_size, k_hi * block_size
    d0 = int(np.searchsorted(offsets, first, side="right")) - 1  # the row holding token `first`
    docs = list(batch["input_ids"][d0 - i0 :])
    j = int(np.searchsorted(offsets, end, side="left"))  # rows [i1, j) hold the overflow
    if j > i1:
        docs += tokenized[i1:j]["input_ids"]
    return _cut(docs, first - int(offsets[d0]), k_hi - k_lo, block_size, document_mask)


def _block_columns(document_mask: bool) -> list[str]:
    return ["input_ids", "labels"] + (["document_ids", "position_ids"] if document_mask else [])


def _block_features(document_mask: bool) -> Features:
    return Features({name: List(Value("int64")) for name in _block_columns(document_mask)})


def _pack_stream(tokenized: IterableDataset, block_size: int, document_mask: bool):
    """Blocks from a streamed tokenized dataset; the carried-over tail lives in this generator only."""
    docs, skip, total = [], 0, 0  # pending documents, tokens of docs[0] already used, tokens left
    for row in tokenized:
        docs.append(row["input_ids"])
        total += len(row["input_ids"])
        n = total // block_size
        if n == 0:
            continue
        out = _cut(docs, skip, n, block_size, document_mask)
        for i in range(n):
            yield {name: values[i] for name, values in out.items()}
        # keep only the documents that still hold unused tokens
        used = skip + n * block_size
        while docs and used >= len(docs[0]):
            used -= len(docs.pop(0))
        skip, total = used, total - n * block_size


def tokenize_and_pack(
    dataset: Dataset | IterableDataset,
    tokenizer,
    block_size: int,
    *,
    num_proc: int | None = None,
    document_mask: bool = False,
    text_column: str = "text",
) -> Dataset | IterableDataset:
    """Tokenize documents and pack them into blocks of exactly `block_size` tokens.

    Two batched maps: the first tokenizes each document without special tokens and appends EOS
    (empty documents are dropped); the second joins the documents and cuts the stream into
    blocks, dropping the incomplete tail. Blocks cross document boundaries (GPT-2), so no token
    is padding. A streamed dataset is packed by a generator (`num_proc` does not apply) that
    gives the same blocks.

    Args:
        dataset: rows with a string column `text_column`.
        tokenizer: a transformers tokenizer with an `eos_token`.
        block_size: tokens per block, T.
        num_proc: processes of the maps (non-streamed datasets only); the result does not depend on it.
        document_mask: also return "document_ids" (T,), the index of each token's document within
            the block (0, 0, ..., 1, 1, ...; the EOS belongs to the document it ends), and
            "position_ids" (T,), positions restarting at 0 at each document start. A document
            continued from the previous block restarts at 0 too: the block is the whole context.
        text_column: the column with the text.

    Returns:
        A dataset of blocks with int64 sequence columns "input_ids" (T,) and "labels" (T,) (a copy:
        the model shifts them), plus "document_ids" and "position_ids" if `document_mask`.

    Raises:
        ValueError: for a `block_size` that is not a positive integer, a tokenizer without an EOS
            token, a missing text column, or a corpus shorter than one block.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"`block_size` must be a positive integer, got {block_size!r}.")
    if getattr(tokenizer, "eos_token_id", None) is None:
        raise ValueError(
            "`tokenizer` has no eos_token: packing joins documents with EOS; set `tokenizer.eos_token`."
        )
    streaming = isinstance(dataset, IterableDataset)
    columns = _column_names(dataset)
    if text_column not in columns:
        raise ValueError(f"`text_column`={text_column!r} is not a column of the dataset; columns: {columns}.")
    tokenize_kwargs = dict(
        batched=True,
        batch_size=_MAP_BATCH_SIZE,
        fn_kwargs={"tokenizer": tokenizer, "text_column": text_column},
        remove_columns=columns,
    )

    if streaming:
        if num_proc is not None:
            logger.warning("`num_proc` is ignored for a streamed dataset.")
        tokenized = dataset.map(_tokenize, **tokenize_kwargs)
        return IterableDataset.from_generator(
            _pack_stream,
            features=_block_features(document_mask),
            gen_kwargs={"tokenized": tokenized, "block_size": block_size, "document_mask": document_mask},
        )

    tokenized = dataset.map(_tokenize, num_proc=num_proc, desc="Tokenizing", **tokenize_kwargs)
    lengths = np.asarray(tokenized.with_format("numpy")["num_tokens"], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])  # (D + 1,) token offset of each document
    n_blocks = int(offsets[-1]) // block_size
    if n_blocks == 0:
        raise ValueError(f"The corpus has {int(offsets[-1])} tokens: fewer than one block of {block_size}.")
    logger.info(
        "Packing %d documents (%d tokens) into %d blocks of %d; %d tail tokens dropped.",
        len(lengths),
        int(offsets[-1]),
        n_blocks,
        block_size,
        int(offsets[-1]) - n_blocks * block_size,
    )
    # the tokenized dataset rides along as an argument, so fingerprint the step by hand
    fingerprint = hashlib.sha256(
        f"pack-{tokenized._fingerprint}-{block_size}-{document_mask}".encode()
    ).hexdigest()[:16]
    return tokenized.map(
        _pack_batch,
        batched=True,
        batch_size=_MAP_BATCH_SIZE,
        with_indices=True,
        num_proc=num_proc,
        remove_columns=tokenized.column_names,
        features=_block_features(document_mask),
        fn_kwargs={
            "tokenized": tokenized,
            "offsets": offsets,
            "n_blocks": n_blocks,
            "block_size": block_size,
            "document_mask": document_mask,
        },
        new_fingerprint=fingerprint,
        desc="Packing",
    )


# ----------------------------------------------------------------------------------------------
# Split
# ----------------------------------------------------------------------------------------------


def _unit_hash(seed: int, index: int) -> float:
    """A uniform number in [0, 1) from (seed, index): SplitMix64's finalizer, portable and stateless."""
    z = (seed * 0x9E3779B97F4A7C15 + index + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) / 2.0**64


def train_eval_split(
    dataset: Dataset | IterableDataset, eval_fraction: float, seed: int
) -> DatasetDict | dict:
    """Split rows into "train" and "eval", deterministically for a given seed.

    Split documents before packing, so no text is shared by the two sides.

    Args:
        dataset: a `Dataset` (shuffled split of exactly ceil(eval_fraction * n) eval rows,
            `Dataset.train_test_split`) or an `IterableDataset` (each row goes to "eval" with
            probability `eval_fraction`, decided by a hash of (seed, row index)).
        eval_fraction: share of rows held out, in (0, 1).
        seed: seed of the split.

    Returns:
        A `DatasetDict` (a dict of `IterableDataset`s when streaming) with keys "train" and "eval".
    """
    if isinstance(eval_fraction, bool) or not 0 < eval_fraction < 1:
        raise ValueError(f"`eval_fraction` must be in (0, 1), got {eval_fraction!r}.")
    if isinstance(dataset, IterableDataset):

        def held_out(_, index, keep_eval):
            return (_unit_hash(seed, index) < eval_fraction) == keep_eval

        return {
            "train": dataset.filter(held_out, with_indices=True, fn_kwargs={"keep_eval": False}),
            "eval": dataset.filter(held_out, with_indices=True, fn_kwargs={"keep_eval": True}),
        }
    if len(dataset) < 2:
        raise ValueError(f"Cannot split a dataset of {len(dataset)} row(s) into train and eval.")
    split = dataset.train_test_split(test_size=eval_fraction, seed=seed, shuffle=True)
    return DatasetDict({"train": split["train"], "eval": split["test"]})


# ----------------------------------------------------------------------------------------------
# Shuffle a stream
# ----------------------------------------------------------------------------------------------


def buffered_shuffle(items: Iterable[_Item], buffer_size: int, rng: np.random.Generator) -> Iterator[_Item]:
    """Yield `items` in a pseudo-random order, holding at most `buffer_size` of them at a time.

    The shuffle buffer of tf.data and `datasets.IterableDataset.shuffle`: fill a buffer, then for
    each new item yield a uniformly chosen buffered one and put the new one in its place; drain
    the buffer in random order at the end. An item moves at most about `buffer_size` places
    earlier, so the order is only as random as the buffer is large compared with the stream, but
    memory stays bounded whatever the stream's length. The order is a pure function of the
    input order and `rng`'s state, so re-running with an equally seeded `rng` gives the same
    order: a resumed run replays it and skips what it had consumed.

    Args:
        items: any iterable, read lazily (at most `buffer_size + 1` items ahead of the output).
        buffer_size: items held at once; 0 or 1 keeps the input order.
        rng: the generator drawing the positions, e.g. `numpy.random.default_rng([seed, epoch])`.

    Yields:
        Every item of `items` exactly once.

    Raises:
        ValueError: for a negative `buffer_size`.
    """
    if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 0:
        raise ValueError(f"`buffer_size` must be a non-negative integer, got {buffer_size!r}.")
    if buffer_size <= 1:
        yield from items
        return
    buffer: list[_Item] = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        i = int(rng.integers(buffer_size))
        buffer[i], item = item, buffer[i]
        yield item
    for i in rng.permutation(len(buffer)):
        yield buffer[i]
