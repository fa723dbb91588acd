"""Local data files: which `datasets` builder reads each, and the first problem of one.

`local_files` finds the files a path, folder or glob names (refusing FIFOs, sockets and broken
links). The checks read a file the way `datasets` would, and name the file, the line (or row) and
the cause of the first problem it would fail on or silently get wrong: not UTF-8 (`utf8_blocks`),
malformed JSON, a CSV stray quote that pandas would forgive by merging lines, a Parquet column of
nulls, a compressed file that does not decompress.
"""

from __future__ import annotations

import codecs
import csv
import errno
import glob
import json
import lzma
import os
import stat
import zlib
from collections.abc import Iterator

import fsspec
from fsspec.utils import infer_compression

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


class DataFileError(ValueError):
    """A local data file is not usable text: empty, not UTF-8, malformed, or a row without a string text.

    The message names the file, the line (or row) and the cause.
    """


def builder_for(path: str) -> tuple[str, dict]:
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


def local_files(source: str) -> list[str] | None:
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
        builder_for(path)
    except ValueError:
        return False
    return True


def looks_like_path(source: str) -> bool:
    return source.startswith((".", "/", "~")) or os.sep in source.split("/", 1)[-1] or _is_supported(source)


# ----------------------------------------------------------------------------------------------
# Checking local files: the first problem, named by file and line
# ----------------------------------------------------------------------------------------------

_JSON_TYPES = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}


def checkable(path: str) -> bool:
    """Whether this module can read `path` itself (fsspec lacks zstd/lz4 without extra packages)."""
    return not path.lower().endswith(_COMPRESSIONS) or infer_compression(path) is not None


def _open(path: str, mode: str = "rt", **kwargs):
    if "t" in mode:
        kwargs.setdefault("encoding", "utf-8")
    return fsspec.open(path, mode, compression=infer_compression(path), **kwargs)


def value_problem(value, column: str) -> str:
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
    return None if isinstance(value, str) else value_problem(value, text_column)


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


def csv_problem(path: str, delimiter: str, multiline: list[int] | None = None) -> str | None:
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
    if not checkable(path):
        return None
    try:
        if builder == "parquet":
            return _parquet_problem(path, text_column)
        if builder == "csv":
            return csv_problem(path, kwargs.get("sep", ","))
        return _utf8_problem(path) or (_json_problem(path, text_column) if builder == "json" else None)
    except DECOMPRESSION_ERRORS as err:  # a fake or damaged .gz/.bz2/.xz: read through its decompressor
        if infer_compression(path) is None:
            raise
        return _decompression_problem(path, err)


def check_compressed(files: list[str]) -> None:
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


def first_problem(files, builder: str, kwargs: dict, text_column: str) -> str | None:
    for path in files:
        problem = _file_problem(path, builder, kwargs, text_column)
        if problem:
            return f"{path}, {problem}"
    return None


def empty_error(source: str, files) -> DataFileError:
    where = f"{files[0]} is empty" if len(files) == 1 else f"the {len(files)} files of {source!r} are empty"
    return DataFileError(f"No text to load: {where} (no rows).")


def load_error(source: str, files, builder: str, kwargs: dict, text_column: str, err) -> DataFileError:
    """A clear error for a local source that `datasets` could not read: the file, line and cause."""
    problem = first_problem(files, builder, kwargs, text_column)
    if problem is not None:
        return DataFileError(f"Cannot load {problem}.")
    if all(checkable(f) and os.path.getsize(f) == 0 for f in files):
        return empty_error(source, files)
    root = err
    while root.__cause__ is not None:  # DatasetGenerationError hides the reader's own error
        root = root.__cause__
    return DataFileError(
        f"Cannot load {source!r} ({len(files)} {builder} file(s), e.g. {files[0]}): "
        f"{type(root).__name__}: {root}"
    )
