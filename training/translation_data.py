"""The parallel data of `training.finetune_translation`: its data arguments, line-aligned files read
into `datasets`, tokenization, and a tokenizer that ends every encoding with EOS.

Data: `--data_dir` holds `<split>.<lang>` files, gzipped (`.gz`) or not, one sentence per line,
line i of the source file translating line i of the target file (Multi30k's layout:
`train.de.gz`/`train.en.gz`, `val.*`, `test_2016_flickr.*`). `--train_split`, `--validation_split`
and `--test_split` name the file stems (comma-separated candidates, the first one found wins; ""
for none). `load_parallel_files` reads any such pair of files into a `datasets.Dataset` with a
`translation` column of `{source_lang: ..., target_lang: ...}` records (the layout of the Hub's
WMT datasets).

Tokenization: the encoder reads `source_prefix + source` (by default T5's "translate German to
English: " for T5-style models, nothing otherwise) and the decoder is trained on the target
(`tokenizer(text_target=...)`); both end with the tokenizer's EOS (T5's and fairseq's
convention, and what hf_lm's denoising pretraining appends). A tokenizer that does not add EOS
itself gets a post-processor that does, saved with it, so the saved folder encodes new inputs
exactly as in training. `DataCollatorForSeq2Seq(model=model)` pads each batch (labels with -100)
and builds the decoder inputs with the model's `prepare_decoder_input_ids_from_labels`.
"""

from __future__ import annotations

import gzip
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from tokenizers import processors

from . import trainer_common as common
from .args import optional_positive

logger = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")


@dataclass
class TranslationDataArguments:
    """Which parallel files to read, the language pair, the source prefix and the length limits."""

    data_dir: str | None = field(
        default=None,
        metadata={
            "help": "A folder with <split>.<lang>[.gz] line-aligned files (e.g. ../shared/data/multi30k)."
        },
    )
    source_lang: str = field(default="de", metadata={"help": "Source language: the file suffix, e.g. de."})
    target_lang: str = field(default="en", metadata={"help": "Target language: the file suffix, e.g. en."})
    train_split: str = field(default="train", metadata={"help": "Training file stem(s), comma-separated."})
    validation_split: str = field(
        default="val,valid,validation,dev",
        metadata={"help": "Validation file stem candidates, comma-separated ('' for none)."},
    )
    test_split: str = field(
        default="test_2016_flickr,test",
        metadata={"help": "Test file stem candidates, comma-separated ('' for none)."},
    )
    source_prefix: str | None = field(
        default=None,
        metadata={
            "help": "Put before every source; default T5's 'translate German to English: ' for T5-style "
            "models, none otherwise ('' for none)."
        },
    )
    max_source_length: int | None = field(
        default=None,
        metadata={
            "help": f"Longest source in tokens (prefix and EOS included); longer is cut. Default "
            f"{common.DEFAULT_MAX_SEQ_LENGTH}, at most a pretrained model's learned positions (more is an error)."
        },
    )
    max_target_length: int | None = field(
        default=None,
        metadata={
            "help": f"Longest training target in tokens (EOS included); longer is cut. Default "
            f"{common.DEFAULT_MAX_SEQ_LENGTH}, at most a pretrained model's learned positions (more is an error)."
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep the first N training pairs."})
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Keep the first N validation pairs."}
    )
    max_test_samples: int | None = field(default=None, metadata={"help": "Keep the first N test pairs."})

    def __post_init__(self) -> None:
        optional_positive(
            self,
            "max_source_length",
            "max_target_length",
            "max_train_samples",
            "max_eval_samples",
            "max_test_samples",
        )
        if self.data_dir is None:
            raise ValueError("Pass `data_dir`: a folder with <split>.<lang>[.gz] parallel files.")
        if not os.path.isdir(self.data_dir):
            raise ValueError(f"`data_dir` {self.data_dir!r} is not a folder.")
        for name in ("source_lang", "target_lang"):
            value = getattr(self, name)
            if not value or any(c.isspace() or c in "/\\" for c in value):
                raise ValueError(f"`{name}` must be a language code such as 'de', got {value!r}.")
        if self.source_lang == self.target_lang:
            raise ValueError(f"`source_lang` and `target_lang` are both {self.source_lang!r}.")
        if not _stems(self.train_split):
            raise ValueError("`train_split` must name at least one file stem, e.g. 'train'.")

    def split_stems(self) -> dict[str, list[str]]:
        """split name -> candidate file stems, in order of preference."""
        return {split: _stems(getattr(self, f"{split}_split")) for split in SPLITS}


def _stems(value: str | None) -> list[str]:
    return [stem.strip() for stem in (value or "").split(",") if stem.strip()]


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 text file, gzipped when its name ends in `.gz`, without line ends.

    Splits on "\\n" only (and drops a "\\r" before it): `str.splitlines` would also split on
    characters such as U+2028 inside a sentence and break the line alignment of parallel files.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start an empty one
    return [line.removesuffix("\r") for line in lines]


def load_parallel_files(
    source_file: str | os.PathLike,
    target_file: str | os.PathLike,
    source_lang: str,
    target_lang: str,
    max_samples: int | None = None,
) -> datasets.Dataset:
    """Read two line-aligned files (line i of one translates line i of the other) into a `Dataset`.

    Pairs in which either side is empty or blank are dropped (with a warning): there is nothing
    to translate, or nothing to learn from.

    Args:
        source_file: the source-language sentences, one per line (`.gz` for gzipped).
        target_file: the target-language sentences, aligned line by line.
        source_lang: the source language code, the key of the source side.
        target_lang: the target language code.
        max_samples: keep the first N pairs (after dropping empty ones); None for all.

    Returns:
        A `Dataset` with one column, `translation`: `{source_lang: str, target_lang: str}` records,
        in file order, surrounding whitespace stripped.

    Raises:
        ValueError: the files have different numbers of lines, or no non-empty pair.
    """
    sources, targets = read_lines(source_file), read_lines(target_file)
    if len(sources) != len(targets):
        raise ValueError(
            f"Parallel files differ in length: {source_file} has {len(sources)} lines, "
            f"{target_file} has {len(targets)}; line i of one must translate line i of the other."
        )
    pairs = [(s.strip(), t.strip()) for s, t in zip(sources, targets)]
    kept = [(s, t) for s, t in pairs if s and t]
    if len(kept) < len(pairs):
        logger.warning("%s: dropped %d pairs with an empty side.", source_file, len(pairs) - len(kept))
    if not kept:
        raise ValueError(f"{source_file} and {target_file} hold no pair of non-empty lines.")
    if max_samples is not None:
        kept = kept[:max_samples]
    return datasets.Dataset.from_dict({"translation": [{source_lang: s, target_lang: t} for s, t in kept]})


def _find_file(data_dir: str, stem: str, lang: str) -> Path | None:
    for name in (f"{stem}.{lang}", f"{stem}.{lang}.gz"):
        path = Path(data_dir) / name
        if path.is_file():
            return path
    return None


def parallel_split_files(data_args: TranslationDataArguments) -> dict[str, tuple[Path, Path]]:
    """split -> (source file, target file): the first stem of each split with both files present.

    Raises:
        ValueError: no training pair of files, or a stem with one side only.
    """
    files = {}
    for split, stems in data_args.split_stems().items():
        for stem in stems:
            source = _find_file(data_args.data_dir, stem, data_args.source_lang)
            target = _find_file(data_args.data_dir, stem, data_args.target_lang)
            if (source is None) != (target is None):
                present = source or target
                raise ValueError(
                    f"{present} has no parallel file: expected {stem}.{data_args.target_lang if source else data_args.source_lang}"
                    f"[.gz] next to it in {data_args.data_dir!r}."
                )
            if source is not None:
                files[split] = (source, target)
                break
    if "train" not in files:
        raise ValueError(
            f"No training files in {data_args.data_dir!r}: expected "
            f"{data_args.train_split}.{data_args.source_lang}[.gz] and {data_args.train_split}.{data_args.target_lang}[.gz]."
        )
    return files


def load_translation_dataset(data_args: TranslationDataArguments) -> datasets.DatasetDict:
    """Every split found in `data_dir` as a `DatasetDict` of `translation` pairs.

    Returns:
        "train" and whichever of "validation" and "test" exist, each cut to its `max_*_samples`.
    """
    limits = common.split_limits(data_args)
    splits = {}
    for split, (source, target) in parallel_split_files(data_args).items():
        ds = load_parallel_files(source, target, data_args.source_lang, data_args.target_lang, limits[split])
        logger.info("%s: %d pairs from %s and %s", split, len(ds), source, target)
        splits[split] = ds
    return datasets.DatasetDict(splits)


def sides(ds: datasets.Dataset, lang: str) -> list[str]:
    """One language's side of a `translation` dataset, in order."""
    return [pair[lang] for pair in ds["translation"]]


def tokenize_dataset(
    raw: datasets.DatasetDict, tokenizer, data_args: TranslationDataArguments, prefix: str
) -> datasets.DatasetDict:
    """Tokenize every split: `prefix + source` as the encoder input, the target as `labels`.

    Targets go through `text_target=` (tokenizers with a separate target mode, e.g. mBART's, use
    it). Padding is left to `DataCollatorForSeq2Seq`, per batch.
    """
    src, tgt = data_args.source_lang, data_args.target_lang
    source_length = common.resolve_max_length(data_args.max_source_length, None, "max_source_length")
    target_length = common.resolve_max_length(data_args.max_target_length, None, "max_target_length")

    def encode(batch: dict) -> dict:
        sources = [prefix + pair[src] for pair in batch["translation"]]
        targets = [pair[tgt] for pair in batch["translation"]]
        inputs = tokenizer(sources, max_length=source_length, truncation=True)
        labels = tokenizer(text_target=targets, max_length=target_length, truncation=True)
        # token_type_ids would reach the model as an unexpected argument
        return {
            "input_ids": inputs["input_ids"],
            "attention_mask": inputs["attention_mask"],
            "labels": labels["input_ids"],
        }

    return common.tokenize_splits(raw, encode)


def ensure_eos(tokenizer) -> bool:
    """Make a tokenizer end every encoding with its EOS token, as T5's and BART's tokenizers do.

    The decoder must learn to emit EOS (or generation never stops), and the encoder input ends
    with EOS in T5 and BART pretraining (and hf_lm's denoising collators). `train_tokenizer`
    adds no special tokens, so a template `$A </s>` is appended to the fast tokenizer's
    post-processor (after byte-level BPE's own); it is saved in `tokenizer.json`, so the saved
    folder, and a pipeline on it, encode exactly as training did.

    Args:
        tokenizer: a transformers tokenizer with an `eos_token`; changed in place when needed.

    Returns:
        True when the template was added, False when the tokenizer already ended with EOS.

    Raises:
        ValueError: no eos_token, or a slow tokenizer that does not add EOS.
    """
    eos, eos_id = tokenizer.eos_token, tokenizer.eos_token_id
    if eos_id is None:
        raise ValueError("The tokenizer has no eos_token: translations need one to end.")
    if tokenizer("a")["input_ids"][-1:] == [eos_id]:
        return False
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"{type(tokenizer).__name__} does not end encodings with EOS and is not a fast tokenizer."
        )
    template = processors.TemplateProcessing(
        single=f"$A:0 {eos}:0", pair=f"$A:0 {eos}:0 $B:1 {eos}:1", special_tokens=[(eos, eos_id)]
    )
    backend = tokenizer.backend_tokenizer
    previous = backend.post_processor
    backend.post_processor = template if previous is None else processors.Sequence([previous, template])
    if tokenizer("a")["input_ids"][-1:] != [eos_id]:
        raise ValueError(f"Could not make {type(tokenizer).__name__} end its encodings with {eos!r}.")
    logger.info("The tokenizer now appends %s (id %d) to every encoding.", eos, eos_id)
    return True
