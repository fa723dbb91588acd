"""Tokenize documents and pack them into blocks of exactly `block_size` tokens (`tokenize_and_pack`).

GPT-2 style: documents are joined with EOS and the stream is cut with no padding (Radford et al.,
2019). The packing is exact: the blocks, concatenated, are a prefix of the concatenated tokenized
documents, whatever the number of processes, and streaming gives the same blocks. Long documents
are tokenized in pieces cut before a space (`split_long_text`), in bounded memory. With
`document_mask=True` each token also gets its document's index within the block and its position
within its document, so attention need not cross documents (Krell et al., 2021, "Efficient
sequence packing without cross-contamination").
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np
from datasets import Dataset, Features, IterableDataset, List, Value

from .loading import column_names
from .tokenizer import split_long_text

logger = logging.getLogger(__name__)

_MAP_BATCH_SIZE = 1000  # documents per batch of the maps; the blocks do not depend on it
# A fast tokenizer holds ~200 bytes per character while encoding (offsets, alignments, token
# strings), so a 50 MB document would peak near 10 GB: documents are tokenized in pieces of at
# most PIECE_CHARACTERS, cut before a space (`split_long_text`), and at most
# TOKENIZE_CHARACTERS go through one tokenizer call. Neither changes the blocks.
PIECE_CHARACTERS = 1 << 16
TOKENIZE_CHARACTERS = 1 << 20


def _tokenize(batch: dict, tokenizer, text_column: str, arrow: bool = False):
    """The tokens of each non-empty document, without special tokens, EOS appended.

    A document longer than `PIECE_CHARACTERS` becomes several rows, one per piece
    (`split_long_text`), so that memory stays bounded whatever its length; "document_start" is
    True on the row that starts a document, "num_tokens" counts each row's tokens. With `arrow`,
    an Arrow table (for `Dataset.map`), else a dict of int64 arrays and lists.
    """
    pieces, starts, ends = [], [], []
    for text in batch[text_column]:
        if not text:
            continue
        parts = split_long_text(text, PIECE_CHARACTERS)
        pieces += parts
        starts += [True] + [False] * (len(parts) - 1)
        ends += [False] * (len(parts) - 1) + [True]
    ids, group, size = [], [], 0
    for piece in [*pieces, None]:  # None flushes the last group
        if group and (piece is None or size + len(piece) > TOKENIZE_CHARACTERS):
            encoded = tokenizer(group, add_special_tokens=False, verbose=False)["input_ids"]
            ids += [np.asarray(doc, dtype=np.int64) for doc in encoded]  # 8 bytes a token, not ~36
            group, size = [], 0
        if piece is not None:
            group.append(piece)
            size += len(piece)
    eos = np.asarray([tokenizer.eos_token_id], dtype=np.int64)
    out = {"input_ids": [], "num_tokens": [], "document_start": []}
    start_pending = False
    for doc, start, end in zip(ids, starts, ends):
        start_pending |= start
        if end:
            doc = np.concatenate([doc, eos])
        if len(doc) == 0:  # a piece of only spaces, for tokenizers that drop them: no row
            continue
        out["input_ids"].append(doc)
        out["num_tokens"].append(len(doc))
        out["document_start"].append(start_pending)
        start_pending = False
    if arrow:  # for a map's writer, which would otherwise go through Python lists
        import pyarrow as pa

        lengths = np.asarray(out["num_tokens"], dtype=np.int64)
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        flat = np.concatenate(out["input_ids"]) if out["input_ids"] else np.zeros(0, dtype=np.int64)
        out["input_ids"] = pa.ListArray.from_arrays(offsets, pa.array(flat, type=pa.int64()))
        return pa.table(out)
    return out


def _cut(
    docs: list, starts: list[bool], skip: int, n_blocks: int, block_size: int, document_mask: bool
) -> dict:  # fmt: skip
    """`n_blocks` blocks from the rows `docs` joined, starting `skip` tokens into the first row.

    `starts[i]` tells whether row i starts a document (or continues the previous row's). The
    single place where blocks are made, for both the map and the stream, so both agree.
    """
    flat = np.concatenate([np.asarray(doc, dtype=np.int64) for doc in docs])
    out = {}
    if document_mask:
        is_start = np.zeros(len(flat), dtype=bool)
        row_offsets = np.cumsum([0] + [len(doc) for doc in docs[:-1]])
        is_start[row_offsets[np.asarray(starts, dtype=bool)]] = True
    flat = flat[skip : skip + n_blocks * block_size].reshape(n_blocks, block_size)  # (N, T)
    out["input_ids"] = flat  # numpy: 8 bytes a token, where lists of ints take ~36
    out["labels"] = flat.copy()
    if document_mask:
        starts = is_start[skip : skip + n_blocks * block_size].reshape(n_blocks, block_size)  # (N, T)
        starts[:, 0] = True  # a block is a model's whole context: its first token starts a document
        out["document_ids"] = np.cumsum(starts, axis=1) - 1
        arange = np.broadcast_to(np.arange(block_size), starts.shape)  # (N, T)
        last_start = np.maximum.accumulate(np.where(starts, arange, 0), axis=1)  # (N, T)
        out["position_ids"] = arange - last_start
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
    starts = list(batch["document_start"][d0 - i0 :])
    j = int(np.searchsorted(offsets, end, side="left"))  # rows [i1, j) hold the overflow
    if j > i1:
        overflow = tokenized[i1:j]
        docs += overflow["input_ids"]
        starts += overflow["document_start"]
    out = _cut(docs, starts, first - int(offsets[d0]), k_hi - k_lo, block_size, document_mask)
    return _arrow_blocks(out)


def _arrow_blocks(out: dict):
    """(N, T) blocks by column as an Arrow table for the map's writer, which would otherwise go
    through Python lists (~36 bytes a token instead of 8)."""
    import pyarrow as pa

    columns = {}
    for name, blocks in out.items():
        n, t = blocks.shape
        offsets = pa.array(np.arange(0, (n + 1) * t, t, dtype=np.int32))
        columns[name] = pa.ListArray.from_arrays(offsets, pa.array(blocks.ravel(), type=pa.int64()))
    return pa.table(columns)


def _block_columns(document_mask: bool) -> list[str]:
    return ["input_ids", "labels"] + (["document_ids", "position_ids"] if document_mask else [])


def _block_features(document_mask: bool) -> Features:
    return Features({name: List(Value("int64")) for name in _block_columns(document_mask)})


def _pack_stream(tokenized: IterableDataset, block_size: int, document_mask: bool):
    """Blocks from a streamed tokenized dataset; the carried-over tail lives in this generator only."""
    # pending rows and whether each starts a document, tokens of docs[0] already used, tokens left
    docs, starts, skip, total = [], [], 0, 0
    for row in tokenized:
        docs.append(row["input_ids"])
        starts.append(row["document_start"])
        total += len(row["input_ids"])
        n = total // block_size
        if n == 0:
            continue
        out = _cut(docs, starts, skip, n, block_size, document_mask)
        for i in range(n):
            yield {name: values[i].tolist() for name, values in out.items()}
        # keep only the rows that still hold unused tokens
        used = skip + n * block_size
        while docs and used >= len(docs[0]):
            used -= len(docs.pop(0))
            starts.pop(0)
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

    Memory: a document longer than `PIECE_CHARACTERS` is tokenized piece by piece, cut before a
    space (`split_long_text`: the same tokens for this project's tokenizers), and at most
    `TOKENIZE_CHARACTERS` go through one tokenizer call, so tokenizing never holds more than a
    few hundred MB whatever the longest document; a streamed corpus then needs memory for about
    one map batch of text and its tokens (8 bytes each), no more. (Tokenizing a 50 MB line whole
    peaked at 9 GB.)

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
    columns = column_names(dataset)
    if text_column not in columns:
        raise ValueError(f"`text_column`={text_column!r} is not a column of the dataset; columns: {columns}.")
    tokenize_kwargs = dict(batched=True, batch_size=_MAP_BATCH_SIZE, remove_columns=columns)
    fn_kwargs = {"tokenizer": tokenizer, "text_column": text_column}

    if streaming:
        if num_proc is not None:
            logger.warning("`num_proc` is ignored for a streamed dataset.")
        tokenized = dataset.map(_tokenize, fn_kwargs=fn_kwargs, **tokenize_kwargs)
        return IterableDataset.from_generator(
            _pack_stream,
            features=_block_features(document_mask),
            gen_kwargs={"tokenized": tokenized, "block_size": block_size, "document_mask": document_mask},
        )

    tokenized = dataset.map(
        _tokenize,
        fn_kwargs={**fn_kwargs, "arrow": True},
        num_proc=num_proc,
        desc="Tokenizing",
        **tokenize_kwargs,
    )
    return _pack_tokenized(tokenized, block_size, num_proc, document_mask)


def _pack_tokenized(
    tokenized: Dataset, block_size: int, num_proc: int | None, document_mask: bool
) -> Dataset:
    """The blocks of a tokenized in-memory dataset (`_tokenize`'s rows): a map over batches of rows,
    each cutting the blocks that start within it (`_pack_batch`), in any number of processes."""
    counts = tokenized.with_format("numpy", columns=["num_tokens", "document_start"])[:]
    lengths = np.asarray(counts["num_tokens"], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])  # (R + 1,) token offset of each row
    n_blocks = int(offsets[-1]) // block_size
    if n_blocks == 0:
        raise ValueError(f"The corpus has {int(offsets[-1])} tokens: fewer than one block of {block_size}.")
    logger.info(
        "Packing %d documents (%d tokens) into %d blocks of %d; %d tail tokens dropped.",
        int(np.sum(counts["document_start"])),
        int(offsets[-1]),
        n_blocks,
        block_size,
        int(offsets[-1]) - n_blocks * block_size,
    )
    # the tokenized dataset rides along as an argument, so fingerprint the step by hand
    fingerprint = hashlib.sha256(
        f"pack-{tokenized._fingerprint}-{block_size}-{document_mask}".encode()
    ).hexdigest()[:16]
    # the batches as int64 arrays, not lists of Python ints (8 bytes a token, not ~36)
    packed = tokenized.with_format("numpy").map(
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
    return packed.with_format(None)  # plain lists, as the other maps give
