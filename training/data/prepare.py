"""The run's data: load, split (by document), tokenize and pack the corpus (`prepare_data`).

The tokenizer is given, the `init_from` checkpoint's, reloaded from the run folder, or trained on the
first training documents with the objective's special tokens. The eval blocks are held in memory;
the training blocks too (`TrainingBlocks`), or with `streaming` a `BlockStream` that reads, packs
and shuffles them lazily, in bounded memory. Both carry the `fingerprint` of the text they were cut
from, which checkpoints record so that a resume refuses a changed corpus (`training.state.resume`).
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from datasets import IterableDataset
from transformers import AutoTokenizer

from ..args import STREAMING_EVAL_BLOCKS, STREAMING_TOKENIZER_DOCUMENTS, DataArguments, TrainArguments
from ..objectives import objective_for
from ..state.atomic import atomic_folder
from .cleaning import clean_corpus
from .fingerprint import data_fingerprint
from .loading import load_text_dataset
from .packing import tokenize_and_pack
from .splits import tail_split, train_eval_split
from .streaming import BlockStream
from .tokenizer import train_tokenizer, unk_shared_role, unknown_token_id

logger = logging.getLogger(__name__)

# shares of the tokens a run trains on that may be the unknown token: above the first it warns,
# above the second it refuses (the model would mostly learn to predict "unknown")
UNKNOWN_WARN_SHARE = 0.01
UNKNOWN_REFUSE_SHARE = 0.5


def _limit(dataset, data_args: DataArguments):
    """The first `max_documents` documents, then the first ones up to `max_chars` characters."""
    if data_args.max_documents is not None:
        if isinstance(dataset, IterableDataset):
            dataset = dataset.take(data_args.max_documents)
        else:
            dataset = dataset.select(range(min(data_args.max_documents, len(dataset))))
    if data_args.max_chars is not None:
        lengths = np.fromiter((len(t or "") for t in dataset["text"]), dtype=np.int64, count=len(dataset))
        keep = max(1, int(np.searchsorted(np.cumsum(lengths), data_args.max_chars, side="right")))
        dataset = dataset.select(range(min(keep, len(dataset))))
    return dataset


def _clean(dataset, data_args: DataArguments, train_args: TrainArguments, accelerator: Accelerator):
    """With `data_cleaning`='c4', the corpus cleaned and deduplicated by C4's rules (`training.data.cleaning`).

    It runs before the split, so no page is a duplicate of one on the other side. The report goes to
    `output_dir/data_cleaning.json` (main process) and the log; for a stream, when a read of it ends.
    A given `eval_dataset` is read as it is: runs with and without cleaning are scored on one text.
    """
    if data_args.data_cleaning == "none":
        return dataset
    path = Path(train_args.output_dir) / "data_cleaning.json" if accelerator.is_main_process else None
    streaming = isinstance(dataset, IterableDataset)
    cleaned, report = clean_corpus(
        dataset,
        data_args.cleaning_options(),
        num_proc=None if streaming else data_args.num_proc,
        report_path=path,
    )
    if report is not None:
        logger.info("C4-style cleaning (written to %s):\n%s", path, report.table())
        if not len(cleaned):
            raise ValueError("C4-style cleaning removed every page of the corpus; see data_cleaning.json.")
    return cleaned


def _block_columns(document_mask: bool) -> list[str]:
    # with document masking, positions restart at each document and attention stays inside it
    return ["input_ids"] + (["position_ids", "document_ids"] if document_mask else [])


def _to_tensors(packed, with_positions: bool, limit: int | None = None) -> dict[str, torch.Tensor]:
    """The first `limit` (all if None) packed blocks as int64 tensors (N, T), for random access.

    A streamed dataset is read only up to `limit` blocks, so a bounded prefix of an unbounded
    stream can be materialized.

    Raises:
        ValueError: the (streamed) split holds no block at all.
    """
    columns = _block_columns(with_positions)
    if isinstance(packed, IterableDataset):
        rows = list(itertools.islice(packed, limit))
        if not rows:
            raise ValueError(
                "The streamed split holds no complete block: too little text for one block_size; "
                "raise eval_fraction (or max_documents), or lower block_size."
            )
        return {c: torch.tensor([r[c] for r in rows], dtype=torch.long) for c in columns}
    if limit is not None and limit < len(packed):
        packed = packed.select(range(limit))
    arrays = packed.with_format("numpy")
    return {c: torch.from_numpy(np.asarray(arrays[c], dtype=np.int64)) for c in columns}


class TrainingBlocks(dict):
    """The training blocks held in memory: int64 tensors (N, T) by column ("input_ids", ...), with
    the `fingerprint` of the text they were cut from (`data_fingerprint`; None when not known)."""

    def __init__(self, columns: dict[str, torch.Tensor], fingerprint: dict | None = None):
        super().__init__(columns)
        self.fingerprint = fingerprint


def tokenizer_source(data_args: DataArguments, init_from: str | None) -> str | None:
    """Where the run's tokenizer is loaded from: `tokenizer_name_or_path`, else the `init_from`
    checkpoint's own (as transformers' `run_clm.py` does: its ids are the ones the weights were
    trained on, so a new tokenizer would scramble them), else None (trained by the run)."""
    return data_args.tokenizer_name_or_path or init_from or None


def _load_tokenizer(source: str, init_from: str | None):
    """`AutoTokenizer.from_pretrained(source)`, or a `ValueError` that says which tokenizer is missing."""
    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as err:
        if source == init_from:
            raise ValueError(
                f"The `init_from` checkpoint {init_from!r} holds no tokenizer that loads ({type(err).__name__}: "
                f"{err}). Its weights expect the token ids of the tokenizer it was trained with: pass that one "
                "with --tokenizer_name_or_path (a run's `tokenizer/` folder, or its `final/`)."
            ) from err
        raise ValueError(
            f"`tokenizer_name_or_path`={source!r} does not load with AutoTokenizer ({type(err).__name__}: {err})."
        ) from err


def _tokenizer_folder(train_args: TrainArguments) -> Path:
    return Path(train_args.output_dir) / "tokenizer"


def _load_or_train_tokenizer(data_args, train_args, train_docs, accelerator: Accelerator, init_from=None):
    """The tokenizer: given, the `init_from` checkpoint's (`tokenizer_source`), reloaded from the run
    folder, or trained on the first training documents.

    It is trained on the first `tokenizer_train_documents` training documents: all of them by
    default, the first `STREAMING_TOKENIZER_DOCUMENTS` when streaming (a stream may not end).

    Returns:
        `(tokenizer, trained)`: `trained` when this process trained it (for `prepare_data` to save
        it, once the data it gives has been checked).
    """
    source = tokenizer_source(data_args, init_from)
    folder = _tokenizer_folder(train_args)
    resuming = train_args.resume != "false"
    if init_from and source == init_from and resuming and (folder / "tokenizer.json").is_file():
        # a run started before `init_from` brought its tokenizer trained one: its checkpoints hold
        # that tokenizer's ids, so it goes on reading with it
        logger.warning(
            "%s holds the tokenizer this run trained when it started (before --init_from read with the "
            "checkpoint's own): its checkpoints were trained on its ids, so the resumed run keeps it.",
            folder,
        )
        source = None
    if source:
        tokenizer = _load_tokenizer(source, init_from)
        logger.info("Tokenizer: %s's (%d tokens).", source, len(tokenizer))
        return tokenizer, False
    # the main process trains and saves (inside `main_process_first`); the others load its files.
    # A resumed run reloads the tokenizer it was trained with.
    reuse = (not accelerator.is_main_process or resuming) and (folder / "tokenizer.json").is_file()
    if reuse:
        try:
            return AutoTokenizer.from_pretrained(folder), False
        except Exception as err:  # tokenizers raises a bare Exception for a damaged tokenizer.json
            raise ValueError(
                f"The run's tokenizer {folder} cannot be read ({type(err).__name__}: {err}): damaged, or cut "
                "short by a run killed while writing it (before tokenizer saves were atomic). Its checkpoints "
                "were trained with it: restore the folder from a copy, or start afresh (a new output_dir, or "
                "delete the tokenizer and resume=false)."
            ) from err
    objective = objective_for(train_args)  # its special tokens, and what it adds to them
    limit = data_args.tokenizer_train_documents
    if isinstance(train_docs, IterableDataset):
        limit = limit or STREAMING_TOKENIZER_DOCUMENTS
        # lazily: the stream is read only up to the limit, and the texts are never held together
        texts = (row["text"] for row in itertools.islice(train_docs, limit))
    else:
        if limit is not None and limit < len(train_docs):
            train_docs = train_docs.select(range(limit))
        texts = train_docs["text"]
    tokenizer = train_tokenizer(
        texts,
        kind=data_args.tokenizer_kind,
        vocab_size=data_args.vocab_size,
        model_max_length=data_args.block_size,
        special_tokens=objective.special_tokens,
        min_frequency=data_args.tokenizer_min_frequency,
    )
    objective.prepare_tokenizer(tokenizer, data_args.block_size)  # T5's sentinels
    return tokenizer, True


def check_unknown_share(
    tokenizer, input_ids: torch.Tensor, data_args: DataArguments, source: str | None
) -> float | None:
    """Warn when more than `UNKNOWN_WARN_SHARE` of the tokens `input_ids` are the unknown token, and
    refuse more than `UNKNOWN_REFUSE_SHARE`, naming what to change.

    A tokenizer that maps unseen text to another role's token (a "char", "unigram" or "wordpiece"
    tokenizer trained before unk had an id of its own: `<|endoftext|>`) cannot be measured: the run
    says so instead.

    Args:
        input_ids: the blocks the run trains on (N, T), or its held-out ones when streaming.
        source: where a given tokenizer came from (`tokenizer_source`); None for one the run trained.

    Returns:
        The unknown share, or None when it cannot be told.
    """
    role = unk_shared_role(tokenizer)
    if role is not None:
        logger.warning(
            "The tokenizer%s gives unseen text %r, its %s, so unseen characters read as that token (a tokenizer "
            "trained before unknown text had an id of its own). Retrain it to give unseen text its own id.",
            f" {source!r}" if source else "",
            tokenizer.unk_token,
            role,
        )
    unk = unknown_token_id(tokenizer)
    if unk is None or input_ids.numel() == 0:
        return None
    share = float((input_ids == unk).sum()) / input_ids.numel()
    if share <= UNKNOWN_WARN_SHARE:
        return share
    if source:
        fix = (
            f"the tokenizer {source!r} does not cover this text: use one trained on such text (--tokenizer_name_or_path), "
            "or train one (neither --tokenizer_name_or_path nor --init_from)"
        )
    else:
        fix = (
            f"raise --vocab_size (now {data_args.vocab_size})"
            + (", lower --tokenizer_min_frequency to 1" if data_args.tokenizer_min_frequency > 1 else "")
            + ", or use --tokenizer_kind byte_bpe, which has no unknown token"
        )
    which = "held-out" if data_args.streaming else "training"  # a stream is measured on its held-out part
    message = f"{share:.1%} of the {which} tokens are the unknown token {tokenizer.unk_token!r}: {fix}."
    if share > UNKNOWN_REFUSE_SHARE:
        raise ValueError(f"Refusing to train on mostly unknown tokens: {message}")
    logger.warning(message)
    return share


def _load_and_split(data_args: DataArguments, train_args: TrainArguments, accelerator: Accelerator):
    """The corpus loaded, limited and cleaned, then split by document (or the given `eval_dataset`).

    Returns:
        `(dataset, splits, fingerprint)`: the corpus the training side comes from, the "train" and
        "eval" splits, and the fingerprint of the text read (`data_fingerprint`).
    """
    streaming = data_args.streaming
    dataset = load_text_dataset(
        data_args.dataset,
        config_name=data_args.config_name,
        split=data_args.split,
        text_column=data_args.text_column,
        streaming=streaming,
        sample_by=data_args.sample_by,
    )
    held_out = None
    if data_args.eval_dataset:  # a given validation corpus (e.g. the last 10% of a text)
        held_out = load_text_dataset(
            data_args.eval_dataset,
            config_name=data_args.config_name,
            text_column=data_args.text_column,
            streaming=streaming,
            sample_by=data_args.sample_by,
        )
    fingerprint = data_fingerprint(data_args, dataset, held_out)
    dataset = _limit(dataset, data_args)
    dataset = _clean(dataset, data_args, train_args, accelerator)
    if held_out is not None:
        splits = {"train": dataset, "eval": held_out}
    elif data_args.eval_split == "tail":
        splits = tail_split(dataset, data_args.eval_fraction)
    else:
        splits = train_eval_split(dataset, data_args.eval_fraction, seed=train_args.seed)
    return dataset, splits, fingerprint


def prepare_data(
    data_args: DataArguments,
    train_args: TrainArguments,
    accelerator: Accelerator,
    init_from: str | None = None,
):
    """Load, split (by document), tokenize and pack the corpus.

    Args:
        init_from: the checkpoint the model starts from, whose tokenizer the run uses unless
            `tokenizer_name_or_path` names one (`tokenizer_source`).

    Returns:
        `(tokenizer, train_blocks, eval_blocks, description)`. `eval_blocks` is a dict of int64
        tensors (N, T) with "input_ids" (and "position_ids", "document_ids" with `document_mask`),
        the first `max_eval_blocks` held-out blocks. `train_blocks` is such a dict too
        (`TrainingBlocks`), or with `streaming` a `BlockStream` that reads, packs and shuffles the
        training split lazily; either has the `fingerprint` of the text read (`data_fingerprint`).

    Raises:
        ValueError: most training tokens are the unknown token (`check_unknown_share`), or the
            tokenizer cannot be loaded; the data's own errors (`training.data`).
    """
    streaming = data_args.streaming
    max_eval_blocks = data_args.max_eval_blocks or (STREAMING_EVAL_BLOCKS if streaming else None)
    with accelerator.main_process_first():  # dataset caches and the tokenizer are written once
        dataset, splits, fingerprint = _load_and_split(data_args, train_args, accelerator)
        tokenizer, trained = _load_or_train_tokenizer(
            data_args, train_args, splits["train"], accelerator, init_from
        )
        packed = {
            name: tokenize_and_pack(
                splits[name],
                tokenizer,
                data_args.block_size,
                num_proc=None if streaming else data_args.num_proc,
                document_mask=data_args.document_mask,
            )
            for name in ("train", "eval")
        }
        eval_blocks = _to_tensors(packed["eval"], data_args.document_mask, limit=max_eval_blocks)
        if streaming:
            train_blocks = BlockStream(
                packed["train"],
                _block_columns(data_args.document_mask),
                data_args.shuffle_buffer_size,
                train_args.seed,
                fingerprint,
            )
        else:
            train_blocks = TrainingBlocks(_to_tensors(packed["train"], data_args.document_mask), fingerprint)
        measured = eval_blocks if streaming else train_blocks  # a stream is not held: its held-out part
        check_unknown_share(
            tokenizer, measured["input_ids"], data_args, tokenizer_source(data_args, init_from)
        )
        if trained and accelerator.is_main_process:
            # once its data is known to be usable (a refused run leaves no tokenizer/ behind), and all
            # at once: a kill while writing must not leave a truncated tokenizer.json for every later
            # --resume to trip on. The other processes load it when this block ends.
            with atomic_folder(_tokenizer_folder(train_args)) as staging:
                tokenizer.save_pretrained(staging)
    n_docs = None if streaming else len(dataset)
    return tokenizer, train_blocks, eval_blocks, _describe(data_args, n_docs, train_blocks, eval_blocks)


def _describe(data_args: DataArguments, num_documents: int | None, train_blocks, eval_blocks) -> str:
    """The model card's sentence on the data."""
    source = f"`{data_args.dataset}`" + (f" ({data_args.config_name})" if data_args.config_name else "")
    n_eval = len(eval_blocks["input_ids"])
    if data_args.streaming:
        description = (
            f"{source}, streamed: {data_args.eval_fraction:.1%} of the documents held out; training "
            f"blocks of {data_args.block_size} tokens (GPT-2 packing) read in a shuffle buffer of "
            f"{data_args.shuffle_buffer_size:,} blocks; {n_eval:,} evaluation blocks."
        )
    elif data_args.eval_dataset:
        description = (
            f"{source}: {num_documents} documents; evaluated on `{data_args.eval_dataset}`; "
            f"{len(train_blocks['input_ids']):,} training and {n_eval:,} evaluation "
            f"blocks of {data_args.block_size} tokens (GPT-2 packing)."
        )
    elif data_args.eval_split == "tail":
        description = (
            f"{source}: {num_documents} documents; the last {data_args.eval_fraction:.1%} of the characters "
            f"held out; {len(train_blocks['input_ids']):,} training and {n_eval:,} evaluation "
            f"blocks of {data_args.block_size} tokens (GPT-2 packing)."
        )
    else:
        description = (
            f"{source}: {num_documents} documents, {data_args.eval_fraction:.1%} held out; "
            f"{len(train_blocks['input_ids']):,} training and {n_eval:,} evaluation "
            f"blocks of {data_args.block_size} tokens (GPT-2 packing)."
        )
    if data_args.data_cleaning == "c4":  # the counts above are of the cleaned corpus
        description += (
            " The corpus was first cleaned and deduplicated C4-style (Raffel et al., 2020); what each rule "
            "removed is in the run's `data_cleaning.json`."
        )
    return description
