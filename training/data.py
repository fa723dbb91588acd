"""Text datasets for language-model training: load, tokenize, pack into fixed blocks, split.

- `load_text_dataset` gives a `datasets.Dataset` (or `IterableDataset` when streaming) with one
  "text" column, from a built-in corpus, local files, or the Hugging Face Hub. A local file that
  is empty, not UTF-8, malformed (JSON, a CSV stray quote) or has a row without a string text
  raises a `DataFileError` naming the file, the line and the cause.
- `tokenize_and_pack` turns it into blocks of exactly `block_size` tokens, GPT-2 style: documents
  are joined with EOS and the stream is cut with no padding (Radford et al., 2019). The packing
  is exact: the blocks, concatenated, are a prefix of the concatenated tokenized documents,
  whatever the number of processes, and streaming gives the same blocks. Long documents are
  tokenized in pieces cut before a space (`split_long_text`), in bounded memory. With
  `document_mask=True` each token also gets its document's index within the block and its
  position within its document, so attention need not cross documents (Krell et al., 2021,
  "Efficient sequence packing without cross-contamination").
- `train_eval_split` holds out a deterministic share of the rows.
- `buffered_shuffle` shuffles a stream too large for memory through a bounded, seeded buffer.
"""

from __future__ import annotations

import codecs
import csv
import errno
import glob
import hashlib
import json
import logging
import lzma
import os
import stat
import zlib
from collections.abc import Iterable, Iterator
from typing import TypeVar

import fsspec
import numpy as np
from datasets import Dataset, DatasetDict, Features, IterableDataset, List, Value, load_dataset
from fsspec.utils import infer_compression

from .corpora import BUILTIN_CORPORA, load_builtin_corpus
from .tokenizer import split_long_text

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
# A fast tokenizer holds ~200 bytes per character while encoding (offsets, alignments, token
# strings), so a 50 MB document would peak near 10 GB: documents are tokenized in pieces of at
# most PIECE_CHARACTERS, cut before a space (`split_long_text`), and at most
# TOKENIZE_CHARACTERS go through one tokenizer call. Neither changes the blocks.
PIECE_CHARACTERS = 1 << 16
TOKENIZE_CHARACTERS = 1 << 20

_Item = TypeVar("_Item")


class DatasetLoadError(RuntimeError):
    """A Hub dataset could not be loaded (offline, unknown name, missing config, ...)."""


class DataFileError(ValueError):
    """A local data file is not usable text: empty, not UTF-8, malformed, or a row without a string text.

    The message names the file, the line (or row) and the cause.
    """


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


def _not_a_file(path: str) -> str | None:
    """Why `path` is no regular file that can be read (a FIFO would block the reader forever, a link
    loop or a dangling link reads as "not found" inside `datasets`); None for a regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a symbolic link loop"
        if os.path.islink(path):
            return f"a symbolic link to {os.readlink(path)!r}, which does not exist"
        return f"unreadable ({err.strerror})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe): reading it would wait for a writer"
    return "a socket" if stat.S_ISSOCK(mode) else "a device or other special file"


def _regular_files(paths: list[str]) -> list[str]:
    """`paths`, sorted, once each is known to be a regular file; else a `DataFileError` naming it."""
    for path in paths:
        problem = _not_a_file(path)
        if problem:
            raise DataFileError(
                f"Cannot load {path}: not a regular file, {problem}. Remove it from the data, or name the "
                "data files themselves."
            )
    return sorted(paths)


def _local_files(source: str) -> list[str] | None:
    """The sorted files a local path, folder or glob names; None when `source` is not local.

    Raises:
        DataFileError: a data file named, or found in the folder or glob, is not a regular file (a
            FIFO, a socket, a symbolic link loop or one to nothing), naming it.
    """
    if os.path.isfile(source):
        return [source]
    if os.path.isdir(source):
        found = [
            os.path.join(root, f)
            for root, _, files in os.walk(source)
            for f in files
            if not f.startswith(".")
        ]
        return _regular_files([f for f in found if _is_supported(f)])
    if os.path.lexists(source):  # neither file nor folder: a FIFO, a link loop, a dangling link
        return _regular_files([source])
    if glob.has_magic(source):
        matches = glob.glob(source, recursive=True)
        return _regular_files([f for f in matches if not os.path.isdir(f) and _is_supported(f)])
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


# ----------------------------------------------------------------------------------------------
# Checking local files: the first problem, named by file and line
# ----------------------------------------------------------------------------------------------

_JSON_TYPES = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}


def _checkable(path: str) -> bool:
    """Whether this module can read `path` itself (fsspec lacks zstd/lz4 without extra packages)."""
    return not path.lower().endswith(_COMPRESSIONS) or infer_compression(path) is not None


def _open(path: str, mode: str = "rt", **kwargs):
    if "t" in mode:
        kwargs.setdefault("encoding", "utf-8")
    return fsspec.open(path, mode, compression=infer_compression(path), **kwargs)


def _value_problem(value, column: str) -> str:
    """Why `value` (not a string) is not a document's text."""
    if value is None:
        return f"`{column}` is null"
    kind = _JSON_TYPES.get(type(value), type(value).__name__)
    return f"`{column}` is a {kind} ({json.dumps(value, default=str)[:40]}), not a string"


class NotUtf8Error(ValueError):
    """Where a file stops being UTF-8: "line L (byte B): not UTF-8 (...)" (the path is the caller's to add)."""


def utf8_blocks(path: str, block_bytes: int = 1 << 20, decompress: bool = True) -> Iterator[str]:
    """The text of the file `path`, decoded as UTF-8 a block of `block_bytes` bytes at a time (never
    the whole file): decompressed first by its extension (`.gz`, ...) unless not `decompress`.

    Raises:
        NotUtf8Error: naming the line and byte where the bytes stop being UTF-8.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    read = newlines = 0  # bytes and line breaks read before `chunk`
    with _open(path, "rb") if decompress else open(path, "rb") as f:
        while True:
            chunk = f.read(block_bytes)
            pending = decoder.getstate()[0]  # an incomplete character held back (never a line break)
            try:
                text = decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as err:  # err.object is `pending + chunk`
                line = newlines + err.object[: err.start].count(b"\n") + 1
                bad = " ".join(f"0x{b:02x}" for b in err.object[err.start : err.end])
                raise NotUtf8Error(
                    f"line {line} (byte {read - len(pending) + err.start}): not UTF-8 ({err.reason}: {bad}); "
                    "convert the file to UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
                ) from err
            if text:
                yield text
            if not chunk:
                return
            read += len(chunk)
            newlines += chunk.count(b"\n")


def _utf8_problem(path: str) -> str | None:
    """Where `path` stops being UTF-8: "line L (byte B): ...", or None if all of it decodes."""
    try:
        for _ in utf8_blocks(path):
            pass
    except NotUtf8Error as err:
        return str(err)
    return None


def _record_problem(record, text_column: str) -> str | None:
    if not isinstance(record, dict):
        return f"a JSON {_JSON_TYPES.get(type(record), type(record).__name__)} where an object was expected"
    if text_column not in record:
        return f"no `{text_column}` field (fields: {sorted(record)[:10]})"
    value = record[text_column]
    return None if isinstance(value, str) else _value_problem(value, text_column)


def _json_problem(path: str, text_column: str) -> str | None:
    """The first line of a JSON-lines file (or item of a JSON array) that is not valid JSON or has
    no string `text_column`."""
    with _open(path, encoding="utf-8-sig") as f:  # a leading BOM is tolerated, as by `datasets`
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            if line.lstrip().startswith("["):  # one JSON array, of objects or of strings
                try:
                    items = json.loads(line + f.read())
                except json.JSONDecodeError as err:
                    return f"not valid JSON ({err.msg}, line {number + err.lineno - 1})"
                for index, item in enumerate(items):
                    problem = _record_problem(item if isinstance(item, dict) else {"text": item}, text_column)
                    if problem:
                        return f"item {index} of the JSON array: {problem}"
                return None
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                return f"line {number}: not valid JSON ({err.msg}, column {err.colno})"
            problem = _record_problem(record, text_column)
            if problem:
                return f"line {number}: {problem}"
    return None


def _csv_problem(path: str, delimiter: str, multiline: list[int] | None = None) -> str | None:
    """The first malformed record of a CSV/TSV file, read by Python's strict csv parser.

    pandas (behind `datasets`' CSV builder) forgives a quote that closes a field early or late and
    silently merges the lines in between into one field; the strict parser stops there. Records
    that legitimately span lines (quoted line breaks) go to `multiline` (their first line).
    """
    limit = csv.field_size_limit(2**31 - 1)  # a document may be longer than the default 128 KiB
    try:
        with _open(path, newline="") as f:
            reader = csv.reader(f, delimiter=delimiter, strict=True)
            start = 1  # the line the next record starts on
            try:
                header = next(reader, None)
                if header is None:
                    return None  # empty: reported as such by the loader
                start = reader.line_num + 1
                for row in reader:
                    if row and len(row) != len(header):  # blank lines are skipped, as pandas does
                        return (
                            f"line {start}: {len(row)} field(s) where the header has {len(header)} "
                            "(an unquoted delimiter, or a stray quote?)"
                        )
                    if reader.line_num > start and multiline is not None:
                        multiline.append(start)
                    start = reader.line_num + 1
            except csv.Error as err:
                return (
                    f"line {reader.line_num}: malformed CSV ({err}) in the record starting on line {start}: "
                    "a stray quote? A field that starts with a double quote must end with one followed by "
                    'the delimiter or the line end, inner quotes doubled ("")'
                )
    except UnicodeDecodeError:
        return _utf8_problem(path)
    finally:
        csv.field_size_limit(limit)
    return None


def _parquet_problem(path: str, text_column: str) -> str | None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        with _open(path, "rb") as f:
            parquet = pq.ParquetFile(f)
            if text_column not in parquet.schema_arrow.names:
                return None  # reported with the column list by the loader
            kind = parquet.schema_arrow.field(text_column).type
            if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
                return f"`{text_column}` holds {kind}, not strings"
            row = 0
            for group in range(parquet.num_row_groups):
                column = parquet.read_row_group(group, columns=[text_column]).column(0)
                if column.null_count:
                    first = pc.index(pc.is_null(column), True).as_py()
                    return f"row {row + first}: `{text_column}` is null"
                row += len(column)
    except Exception as err:  # pyarrow raises several types for a damaged file
        return f"not a readable Parquet file ({type(err).__name__}: {err})"
    return None


# what the decompressors raise for data that is not what the file's extension says
DECOMPRESSION_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)


def _decompression_problem(path: str, err: Exception) -> str:
    compression = infer_compression(path)
    return (
        f"not a valid {compression} file ({type(err).__name__}: {err}); decompress it or rename it to what "
        "it holds (a plain text file without the compression extension)"
    )


def _file_problem(path: str, builder: str, kwargs: dict, text_column: str) -> str | None:
    """The first problem of one local file that `datasets` would fail on or silently get wrong."""
    if not _checkable(path):
        return None
    try:
        if builder == "parquet":
            return _parquet_problem(path, text_column)
        if builder == "csv":
            return _csv_problem(path, kwargs.get("sep", ","))
        return _utf8_problem(path) or (_json_problem(path, text_column) if builder == "json" else None)
    except DECOMPRESSION_ERRORS as err:  # a fake or damaged .gz/.bz2/.xz: read through its decompressor
        if infer_compression(path) is None:
            raise
        return _decompression_problem(path, err)


def _check_compressed(files: list[str]) -> None:
    """A `DataFileError` naming the first compressed file whose start does not decompress (a `.txt.gz`
    that is plain text would reach `datasets` as a bare `BadGzipFile` naming no file)."""
    for path in files:
        if infer_compression(path) is None:
            continue
        try:
            with _open(path, "rb") as f:
                f.read(1 << 16)
        except DECOMPRESSION_ERRORS as err:
            raise DataFileError(f"Cannot load {path}, {_decompression_problem(path, err)}.") from err


def _first_problem(files, builder: str, kwargs: dict, text_column: str) -> str | None:
    for path in files:
        problem = _file_problem(path, builder, kwargs, text_column)
        if problem:
            return f"{path}, {problem}"
    return None


def _empty_error(source: str, files) -> DataFileError:
    where = f"{files[0]} is empty" if len(files) == 1 else f"the {len(files)} files of {source!r} are empty"
    return DataFileError(f"No text to load: {where} (no rows).")


def _load_error(source: str, files, builder: str, kwargs: dict, text_column: str, err) -> DataFileError:
    """A clear error for a local source that `datasets` could not read: the file, line and cause."""
    problem = _first_problem(files, builder, kwargs, text_column)
    if problem is not None:
        return DataFileError(f"Cannot load {problem}.")
    if all(_checkable(f) and os.path.getsize(f) == 0 for f in files):
        return _empty_error(source, files)
    root = err
    while root.__cause__ is not None:  # DatasetGenerationError hides the reader's own error
        root = root.__cause__
    return DataFileError(
        f"Cannot load {source!r} ({len(files)} {builder} file(s), e.g. {files[0]}): "
        f"{type(root).__name__}: {root}"
    )


def _checked_texts(dataset: Dataset, source, files, builder, kwargs, text_column) -> Dataset:
    """`dataset` if its `text_column` holds only strings, else a `DataFileError` naming the first bad row."""
    kind = dataset.features[text_column]
    strings = isinstance(kind, Value) and kind.dtype in ("string", "large_string")
    if strings and dataset.with_format("arrow")[text_column].null_count == 0:
        return dataset
    problem = _first_problem(files, builder, kwargs, text_column)
    if problem is None:  # not located in the files (not expected for these formats): say which row
        texts = dataset.with_format("arrow")[text_column].to_pylist()
        index = next(i for i, text in enumerate(texts) if not isinstance(text, str))
        problem = f"{source!r}, row {index}: {_value_problem(texts[index], text_column)}"
    raise DataFileError(f"Cannot load {problem}.")


def _checked_stream(dataset: IterableDataset, source, files, builder, kwargs, text_column):
    """The rows of a streamed local dataset as {"text": str}; a read error or a row without a
    string text raises a `DataFileError` naming the file and line (found by re-reading the files)."""
    rows = 0
    try:
        for row in dataset:
            text = row.get(text_column)
            if not isinstance(text, str):
                problem = _first_problem(files, builder, kwargs, text_column)
                problem = problem or f"{source!r}, row {rows}: {_value_problem(text, text_column)}"
                raise DataFileError(f"Cannot load {problem}.")
            rows += 1
            yield {"text": text}
    except DataFileError:
        raise
    except OSError as err:
        problem = _first_problem(files, builder, kwargs, text_column)
        if problem is None:
            raise
        raise DataFileError(f"Cannot load {problem}.") from err
    except Exception as err:  # the readers fail lazily, deep inside `datasets`
        raise _load_error(source, files, builder, kwargs, text_column, err) from err
    if rows == 0:
        raise _empty_error(source, files)


def _load_local(
    source: str, files: list[str], *, split: str, text_column: str, streaming: bool, sample_by: str | None
) -> Dataset | IterableDataset:
    """Local files through `datasets`' packaged builders, checked so that a bad file gives a
    `DataFileError` naming it, the line and the cause, never a raw reader error or silent damage."""
    builders = {_builder_for(f)[0] for f in files}
    if len(builders) > 1:
        raise ValueError(f"{source!r} mixes file types ({sorted(builders)}); load them separately.")
    builder, kwargs = _builder_for(files[0])
    _check_compressed(files)
    if sample_by is not None:
        if sample_by not in SAMPLE_BY:
            raise ValueError(f"`sample_by` must be one of {list(SAMPLE_BY)}, got {sample_by!r}.")
        if builder == "text":
            kwargs = {**kwargs, "sample_by": sample_by}
    if builder == "csv":
        # pandas would read "NA", "null" or an empty cell as missing, and "42" as a number
        kwargs = {**kwargs, "na_filter": False, "converters": {text_column: str}}
        for path in files:  # and would silently merge the lines swallowed by a stray quote
            multiline: list[int] = []
            problem = _csv_problem(path, kwargs.get("sep", ","), multiline) if _checkable(path) else None
            if problem:
                raise DataFileError(f"Cannot load {path}, {problem}.")
            if multiline:
                logger.info(
                    "%s: %d record(s) span several lines (quoted line breaks), the first on line %d.",
                    path,
                    len(multiline),
                    multiline[0],
                )
    logger.info("Loading %d local %s file(s) from %s.", len(files), builder, source)
    try:
        dataset = load_dataset(
            builder, data_files={"train": files}, split=split, streaming=streaming, **kwargs
        )
        columns = _column_names(dataset)  # a streamed dataset reads its first row here
    except OSError as err:  # a damaged compressed file deep inside; else the system's own error
        problem = _first_problem(files, builder, kwargs, text_column)
        if problem is None:
            raise
        raise DataFileError(f"Cannot load {problem}.") from err
    except Exception as err:  # DatasetGenerationError, ArrowInvalid, UnicodeDecodeError, ...
        raise _load_error(source, files, builder, kwargs, text_column, err) from err
    if not columns or (not streaming and len(dataset) == 0):
        raise _empty_error(source, files)
    if text_column not in columns:
        raise ValueError(f"`text_column`={text_column!r} is not a column of {source!r}; columns: {columns}.")
    if streaming:
        return IterableDataset.from_generator(
            _checked_stream,
            features=Features({"text": Value("string")}),
            # tuples: `from_generator` would shard a list across workers
            gen_kwargs={
                "dataset": dataset,
                "source": source,
                "files": tuple(files),
                "builder": builder,
                "kwargs": kwargs,
                "text_column": text_column,
            },
        )
    dataset = _checked_texts(
        dataset.select_columns([text_column]), source, files, builder, kwargs, text_column
    )
    return dataset.rename_column(text_column, "text") if text_column != "text" else dataset


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
       compressed (".gz", ...). All files must share one format. Every row must hold a string
       text (a JSON null or number is an error, not a skipped row). CSV/TSV files are first read
       by Python's strict csv parser, since pandas silently merges the lines after a stray
       quote; their text cells are kept verbatim (pandas alone reads "NA", "null" or an empty
       cell as missing and "42" as a number);
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
        DataFileError: (a ValueError) for a local file that is empty, not UTF-8, malformed, or has
            a row without a string text, naming the file, the line (or row) and the cause; when
            streaming, raised as the stream is read.
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
        return _load_local(
            source, files, split=split, text_column=text_column, streaming=streaming, sample_by=sample_by
        )
    if _looks_like_path(source):
        raise FileNotFoundError(f"{source!r} looks like a path but no such file or folder exists.")
    try:
        dataset = load_dataset(source, config_name, split=split, streaming=streaming, data_files=data_files)
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
# Fingerprints: what identifies the text a run read
# ----------------------------------------------------------------------------------------------


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
    files = _local_files(os.path.expanduser(source))
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


# ----------------------------------------------------------------------------------------------
# Tokenize and pack
# ----------------------------------------------------------------------------------------------


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
    columns = _column_names(dataset)
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
