"""Load a text corpus as a dataset with one "text" column (`load_text_dataset`).

From a built-in corpus (`training.data.corpora`), local files, or the Hugging Face Hub, as a
`datasets.Dataset` (or `IterableDataset` when streaming). A local file that is empty, not UTF-8,
malformed (JSON, a CSV stray quote) or has a row without a string text raises a `DataFileError`
naming the file, the line and the cause (`training.data.local_files`).
"""

from __future__ import annotations

import logging
import os

from datasets import Dataset, Features, IterableDataset, Value, load_dataset

from .corpora import BUILTIN_CORPORA, load_builtin_corpus
from .local_files import (
    FILE_BUILDERS,
    DataFileError,
    builder_for,
    check_compressed,
    checkable,
    csv_problem,
    empty_error,
    first_problem,
    load_error,
    local_files,
    looks_like_path,
    value_problem,
)

logger = logging.getLogger(__name__)


class DatasetLoadError(RuntimeError):
    """A Hub dataset could not be loaded (offline, unknown name, missing config, ...)."""


SAMPLE_BY = ("paragraph", "line", "document")  # rows of a local text file


def column_names(dataset) -> list[str]:
    """The dataset's columns (a stream's read from its first row when its features are unknown)."""
    names = dataset.column_names
    if names is None:  # a streamed dataset whose features are unknown until read: peek one row
        names = list(next(iter(dataset), {}).keys())
    return list(names)


def _checked_texts(dataset: Dataset, source, files, builder, kwargs, text_column) -> Dataset:
    """`dataset` if its `text_column` holds only strings, else a `DataFileError` naming the first bad row."""
    kind = dataset.features[text_column]
    strings = isinstance(kind, Value) and kind.dtype in ("string", "large_string")
    if strings and dataset.with_format("arrow")[text_column].null_count == 0:
        return dataset
    problem = first_problem(files, builder, kwargs, text_column)
    if problem is None:  # not located in the files (not expected for these formats): say which row
        texts = dataset.with_format("arrow")[text_column].to_pylist()
        index = next(i for i, text in enumerate(texts) if not isinstance(text, str))
        problem = f"{source!r}, row {index}: {value_problem(texts[index], text_column)}"
    raise DataFileError(f"Cannot load {problem}.")


def _checked_stream(dataset: IterableDataset, source, files, builder, kwargs, text_column):
    """The rows of a streamed local dataset as {"text": str}; a read error or a row without a
    string text raises a `DataFileError` naming the file and line (found by re-reading the files)."""
    rows = 0
    try:
        for row in dataset:
            text = row.get(text_column)
            if not isinstance(text, str):
                problem = first_problem(files, builder, kwargs, text_column)
                problem = problem or f"{source!r}, row {rows}: {value_problem(text, text_column)}"
                raise DataFileError(f"Cannot load {problem}.")
            rows += 1
            yield {"text": text}
    except DataFileError:
        raise
    except OSError as err:
        problem = first_problem(files, builder, kwargs, text_column)
        if problem is None:
            raise
        raise DataFileError(f"Cannot load {problem}.") from err
    except Exception as err:  # the readers fail lazily, deep inside `datasets`
        raise load_error(source, files, builder, kwargs, text_column, err) from err
    if rows == 0:
        raise empty_error(source, files)


def _load_local(
    source: str, files: list[str], *, split: str, text_column: str, streaming: bool, sample_by: str | None
) -> Dataset | IterableDataset:
    """Local files through `datasets`' packaged builders, checked so that a bad file gives a
    `DataFileError` naming it, the line and the cause, never a raw reader error or silent damage."""
    builders = {builder_for(f)[0] for f in files}
    if len(builders) > 1:
        raise ValueError(f"{source!r} mixes file types ({sorted(builders)}); load them separately.")
    builder, kwargs = builder_for(files[0])
    check_compressed(files)
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
            problem = csv_problem(path, kwargs.get("sep", ","), multiline) if checkable(path) else None
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
        columns = column_names(dataset)  # a streamed dataset reads its first row here
    except OSError as err:  # a damaged compressed file deep inside; else the system's own error
        problem = first_problem(files, builder, kwargs, text_column)
        if problem is None:
            raise
        raise DataFileError(f"Cannot load {problem}.") from err
    except Exception as err:  # DatasetGenerationError, ArrowInvalid, UnicodeDecodeError, ...
        raise load_error(source, files, builder, kwargs, text_column, err) from err
    if not columns or (not streaming and len(dataset) == 0):
        raise empty_error(source, files)
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

    1. a built-in corpus name (`training.data.corpora.BUILTIN_CORPORA`), one "train" split;
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

    files = local_files(os.path.expanduser(source))
    if files is not None:
        if not files:
            raise FileNotFoundError(f"No supported file ({sorted(FILE_BUILDERS)}) matches {source!r}.")
        return _load_local(
            source, files, split=split, text_column=text_column, streaming=streaming, sample_by=sample_by
        )
    if looks_like_path(source):
        raise FileNotFoundError(f"{source!r} looks like a path but no such file or folder exists.")
    return _load_hub(source, config_name, split, text_column, streaming, data_files)


def _load_hub(source: str, config_name, split: str, text_column: str, streaming: bool, data_files):
    """A Hub dataset (or a packaged builder with `data_files`) with its `text_column` as "text"."""
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

    columns = column_names(dataset)
    if text_column not in columns:
        raise ValueError(f"`text_column`={text_column!r} is not a column of {source!r}; columns: {columns}.")
    dataset = dataset.select_columns([text_column])
    if text_column != "text":
        dataset = dataset.rename_column(text_column, "text")
    return dataset
