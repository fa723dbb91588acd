"""Fine-tune a sequence classifier with `Trainer`: SST-2 sentiment, or any labelled TSV/CSV/JSON.

    # from scratch: a WordPiece tokenizer trained on the training sentences and a small BERT
    python -m training.finetune_classification --data_dir ../shared/data/sst2 --from_scratch \\
        --hidden_size 128 --num_hidden_layers 2 --num_attention_heads 4 --learning_rate 1e-3 \\
        --output_dir out/sst2
    # from a pretrained folder (e.g. an MLM-pretrained hf_lm BERT): the classifier head is new
    python -m training.finetune_classification --data_dir ../shared/data/sst2 \\
        --model_name_or_path out/mlm/final --learning_rate 5e-5 --output_dir out/sst2-ft
    python -m training.finetune_classification run.yaml   # the same keys in a JSON/YAML file

Every `transformers.TrainingArguments` flag works (`--num_train_epochs`, `--eval_strategy steps
--eval_steps 200`, `--gradient_accumulation_steps`, `--report_to tensorboard` ...); the defaults
differ in evaluating and saving every epoch, logging every 50 steps, keeping one checkpoint and
reporting to no tracker. On a busy CPU, `OMP_NUM_THREADS=1` can be much faster than 2 threads.

Data: `--data_dir` is a folder holding `train`, `dev` (or `validation`) and `test` files in
`.tsv`, `.csv`, `.jsonl` or `.json` (SST-2's layout: `sentence<TAB>label` with a header line);
`--train_file`/`--validation_file`/`--test_file` name files one by one. The model is evaluated on
the validation split during training (it is what `load_best_model_at_end` would select on) and
once on the test split at the end.

Labels: the training split's labels are the classes. Integer labels 0..K-1 keep their ids; any
other label set (strings, or integers with gaps or from 1, e.g. ratings 1-5) is sorted and
numbered, and the config's `id2label`/`label2id` record the mapping. Names for `config.id2label`
(what `pipeline("text-classification")` returns) come from `--class_names`, else SST-2's
("negative", "positive") for a folder named `sst2`, else `LABEL_<i>` for 0..K-1 integers and the
label values themselves otherwise. Refused with the file and line: a validation or test label
the training labels never show (strings against integers included), an empty text or label cell,
and a negative integer label in the training or validation split: -1 and -100 mark unlabelled
examples (GLUE's test sets); a test split whose labels are all -1/-100 is unlabelled and not scored.

Outputs under `output_dir`: Trainer's `checkpoint-*/`, `metrics.json` (train, `eval_*` on the
validation split, `test_*` on the test split, sizes, time), `trainer_state.json` (the log
history: loss, grad norm, learning rate, evaluations) and `final/`: weights, config with
`auto_map` and the model code, tokenizer and a model card with the test results as `model-index`.
`pipeline("text-classification", model="out/sst2/final", trust_remote_code=True)` loads it
without hf_lm.

Gradient accumulation: `Trainer` passes `num_items_in_batch` to any model whose `forward` takes
`**kwargs` and then stops dividing the loss by the accumulation steps; hf_lm's classification
heads normalize by it (a sum over the examples divided by their count in the whole accumulated
batch), so accumulation equals one batch of the combined size (tested).

Wall-clock budget: `--max_train_seconds S` stops training at the first optimizer-step boundary
after S seconds of `trainer.train()` (evaluations during training included), whatever
`--num_train_epochs`/`--max_steps` say; the final evaluation, test and save then run as usual
(`training.trainer_common.WallClockBudgetCallback`). The learning-rate schedule still spans the
planned steps, so a budgeted run wants a generous `--num_train_epochs` and either
`--lr_scheduler_type constant_with_warmup`, or `--budget_schedule linear`: after the warmup the
rate decays to 0 with the share of the budget spent, reaching 0 where the budget stops training.
`metrics.json` records `train_steps`, `train_epochs` and
`train_budget_reached`.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import evaluate
import numpy as np
from tokenizers import processors
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedModel,
    Trainer,
    TrainingArguments,
    set_seed,
)

import hf_lm
from hf_lm.cards import write_model_card
from hf_lm.families import FAMILIES

from . import trainer_common as common
from .args import optional_positive, parse_dataclasses
from .data.tokenizer import train_tokenizer

logger = logging.getLogger(__name__)

# the offline `evaluate` module of this package (accuracy, precision, recall, F1)
ACCURACY_METRIC = Path(hf_lm.__file__).resolve().parent / "metrics" / "accuracy"

# a fresh model is a BERT (Devlin et al., 2019), its inputs "[CLS] sentence [SEP]": the family's
# tokens, the same as an MLM-pretrained hf_lm BERT's
BERT = FAMILIES["bert"]
SPECIAL_TOKENS = BERT.special_tokens

# GLUE's SST-2: 0 = negative, 1 = positive
SST2_LABEL_NAMES = ("negative", "positive")

# file stems of each split in `--data_dir`, and the `datasets` builder of each extension
SPLIT_STEMS = {"train": ("train",), "validation": ("validation", "dev", "valid", "val"), "test": ("test",)}
BUILDERS = {".tsv": "csv", ".csv": "csv", ".jsonl": "json", ".json": "json"}


@dataclass
class ClassificationDataArguments:
    """Which labelled texts to read, how to name the labels, and how to cut the inputs."""

    data_dir: str | None = field(
        default=None,
        metadata={"help": "A folder with train/dev(validation)/test .tsv/.csv/.jsonl/.json files."},
    )
    train_file: str | None = field(
        default=None, metadata={"help": "The training file (overrides data_dir's)."}
    )
    validation_file: str | None = field(
        default=None, metadata={"help": "The validation file, evaluated during training."}
    )
    test_file: str | None = field(
        default=None, metadata={"help": "The test file, evaluated once at the end."}
    )
    text_column: str = field(default="sentence", metadata={"help": "The column holding the text."})
    text_pair_column: str | None = field(
        default=None, metadata={"help": "A second text column for sentence-pair tasks ([SEP]-joined)."}
    )
    label_column: str = field(default="label", metadata={"help": "The column holding the class label."})
    class_names: str | None = field(
        default=None,
        metadata={"help": "Comma-separated names of class ids 0..K-1, e.g. 'negative,positive'."},
    )
    max_seq_length: int | None = field(
        default=None,
        metadata={
            "help": f"Longest input in tokens; longer is truncated. Default {common.DEFAULT_MAX_SEQ_LENGTH}, at most the "
            "model's max_position_embeddings (a longer request is an error)."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Keep the first N training examples."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Keep the first N validation examples."}
    )
    max_test_samples: int | None = field(default=None, metadata={"help": "Keep the first N test examples."})

    def __post_init__(self) -> None:
        optional_positive(self, "max_seq_length", "max_train_samples", "max_eval_samples", "max_test_samples")
        if self.data_dir is None and self.train_file is None:
            raise ValueError("Pass `data_dir` (a folder with train/dev/test files) or `train_file`.")
        if self.data_dir is not None and not os.path.isdir(self.data_dir):
            raise ValueError(f"`data_dir` {self.data_dir!r} is not a folder.")
        for name in ("train_file", "validation_file", "test_file"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"`{name}` {path!r} is not a file.")
            if path is not None and Path(path).suffix.lower() not in BUILDERS:
                raise ValueError(f"`{name}` must end in one of {list(BUILDERS)}, got {path!r}.")
        names = self.class_name_list() if self.class_names else []
        if "" in names or len(set(names)) < len(names):  # a label2id would merge them
            raise ValueError(f"`class_names` must be distinct non-empty names, got {self.class_names!r}.")

    def class_name_list(self) -> list[str] | None:
        """`class_names` as a list, or the SST-2 names for a folder named sst2, else None."""
        if self.class_names:
            return [name.strip() for name in self.class_names.split(",")]
        if (
            self.data_dir is not None
            and Path(self.data_dir).resolve().name.lower().replace("-", "") == "sst2"
        ):
            return list(SST2_LABEL_NAMES)
        return None


@dataclass
class ClassificationModelArguments:
    """A pretrained folder to start from, or the size of a BERT-style model trained from scratch."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "A saved model folder (e.g. an MLM-pretrained hf_lm BERT)."}
    )
    tokenizer_name_or_path: str | None = field(
        default=None,
        metadata={"help": "The tokenizer folder; default model_name_or_path (from scratch: train one)."},
    )
    ignore_mismatched_sizes: bool = field(
        default=False, metadata={"help": "Re-initialize a pretrained classifier whose label count differs."}
    )
    trust_remote_code: bool = common.trust_remote_code_field()
    from_scratch: bool = field(
        default=False, metadata={"help": "Train a WordPiece tokenizer and a fresh HfLmBert model."}
    )
    preset: str = field(default="bert", metadata={"help": f"From scratch: one of {sorted(BERT.presets)}."})
    vocab_size: int = field(default=8000, metadata={"help": "From scratch: WordPiece vocabulary size."})
    hidden_size: int = field(default=128, metadata={"help": "From scratch: model width."})
    num_hidden_layers: int = field(default=2, metadata={"help": "From scratch: Transformer blocks."})
    num_attention_heads: int = field(default=4, metadata={"help": "From scratch: attention heads."})
    intermediate_size: int | None = field(
        default=None, metadata={"help": "From scratch: feed-forward width; default 4 * hidden."}
    )
    hidden_dropout: float = field(default=0.1, metadata={"help": "From scratch: embedding/residual dropout."})
    attention_dropout: float = field(default=0.1, metadata={"help": "From scratch: attention dropout."})
    classifier_dropout: float | None = field(
        default=None, metadata={"help": "Dropout before the classifier; default hidden_dropout."}
    )

    def __post_init__(self) -> None:
        common.check_model_arguments(self, "hidden_dropout", "attention_dropout", "classifier_dropout")
        if self.preset not in BERT.presets:
            raise ValueError(f"`preset` must be one of {sorted(BERT.presets)}, got {self.preset!r}.")
        optional_positive(
            self, "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"
        )


@dataclass
class ClassificationTrainingArguments(common.ScriptTrainingArguments, TrainingArguments):
    """`transformers.TrainingArguments`: evaluate and save every epoch, log every 50 steps, no trackers."""

    output_dir: str | None = field(
        default="out/classification", metadata={"help": "Run folder: checkpoints, metrics.json, final/."}
    )


ARGUMENT_CLASSES = (
    ClassificationDataArguments,
    ClassificationModelArguments,
    ClassificationTrainingArguments,
)


def parse_args(
    argv: list[str] | None = None,
) -> tuple[ClassificationDataArguments, ClassificationModelArguments, ClassificationTrainingArguments]:
    """Parse the arguments from flags or one .json/.yaml file (`training.args.parse_dataclasses`).

    Returns:
        `(ClassificationDataArguments, ClassificationModelArguments, ClassificationTrainingArguments)`.
    """
    return parse_dataclasses(ARGUMENT_CLASSES, argv)


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


def _split_files(data_args: ClassificationDataArguments) -> dict[str, str]:
    """split name -> file: the explicit `*_file` arguments, else the first match in `data_dir`."""
    files = {}
    for split, stems in SPLIT_STEMS.items():
        explicit = getattr(data_args, f"{split}_file")
        if explicit is not None:
            files[split] = explicit
            continue
        if data_args.data_dir is None:
            continue
        for stem in stems:
            found = [Path(data_args.data_dir) / f"{stem}{ext}" for ext in BUILDERS]
            found = [path for path in found if path.is_file()]
            if found:
                files[split] = str(found[0])
                break
    if "train" not in files:
        raise ValueError(
            f"No training file: expected train{{{','.join(BUILDERS)}}} in {data_args.data_dir!r} or `train_file`."
        )
    return files


def load_classification_dataset(data_args: ClassificationDataArguments) -> datasets.DatasetDict:
    """Read the train/validation/test files into a `DatasetDict` with `datasets`.

    A `.tsv` is read by the CSV builder with a tab delimiter and no quote character: SST-style
    text holds unbalanced quotes and apostrophes that must stay literal.

    Args:
        data_args: where the files are, which columns hold text and label, how many to keep.

    Returns:
        A `DatasetDict` with "train" and whichever of "validation" and "test" exist, each cut
        to its `max_*_samples` first examples.

    Raises:
        ValueError: no training file, a text/label column missing from a split, or a row whose
            text is empty or not a string or whose label is empty (`check_rows`).
    """
    limits = common.split_limits(data_args)
    splits = {}
    for split, path in _split_files(data_args).items():
        suffix = Path(path).suffix.lower()
        options = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if suffix == ".tsv" else {}
        ds = datasets.load_dataset(BUILDERS[suffix], data_files={split: path}, split=split, **options)
        texts = [data_args.text_column] + ([data_args.text_pair_column] if data_args.text_pair_column else [])
        columns = texts + [data_args.label_column]
        missing = [name for name in columns if name not in ds.column_names]
        if missing:
            raise ValueError(f"{path}: no column {missing}; the columns are {ds.column_names}.")
        if limits[split] is not None:
            ds = ds.select(range(min(limits[split], len(ds))))
        check_rows(ds, path, texts, data_args.label_column)
        logger.info("%s: %d examples from %s", split, len(ds), path)
        splits[split] = ds
    return datasets.DatasetDict(splits)


# where a problem is found: the file's line for the formats with one row per line, else the row
_LINE_OFFSET = {".tsv": 2, ".jsonl": 1}  # a TSV's header is line 1
_SHOWN = 3  # problems named per check; the rest are counted


def _row(path: str, index: int) -> str:
    """Where row `index` (0-based, after the header) of `path` is, for a message."""
    offset = _LINE_OFFSET.get(Path(path).suffix.lower())
    return f"{path}, line {index + offset}" if offset else f"{path}, row {index + 1}"


def _raise_problems(what: str, problems: list[str], count: int) -> None:
    if problems:
        more = f"\n  ... and {count - len(problems)} more" if count > len(problems) else ""
        raise ValueError(f"{what}:\n" + "\n".join(f"  - {p}" for p in problems) + more)


def check_rows(ds: datasets.Dataset, path: str, text_columns: list[str], label_column: str) -> None:
    """Refuse rows the model cannot learn from: an empty or missing text (a tokenizer's error that
    names no file otherwise), a text that is not a string, a missing label.

    Raises:
        ValueError: naming the file, the line (or row) and the column of the first few.
    """
    problems, count = [], 0
    for column in text_columns:
        for i, value in enumerate(ds[column]):
            if isinstance(value, str) and value.strip():
                continue
            count += 1
            if len(problems) < _SHOWN:
                problems.append(
                    f"{_row(path, i)}, column {column!r}: "
                    + ("empty text" if value is None or isinstance(value, str) else f"{value!r} is not text")
                )
    for i, value in enumerate(ds[label_column]):
        if value is None:
            count += 1
            if len(problems) < _SHOWN:
                problems.append(f"{_row(path, i)}, column {label_column!r}: no label")
    _raise_problems(f"{path}: {count} row(s) without text or label", problems, count)


# GLUE's and transformers' mark of an example without a label (the labels of a test set kept secret)
UNLABELLED = (-1, -100)


def is_unlabelled(ds: datasets.Dataset, label_column: str) -> bool:
    """Whether every label of `ds` is -1 or -100: a split without labels (GLUE's test sets)."""
    return len(ds) > 0 and set(ds.unique(label_column)) <= set(UNLABELLED)


def _kind(values) -> str:
    kinds = {"strings" if isinstance(v, str) else "integers" for v in values}
    return " and ".join(sorted(kinds))


def _where(split: str, sources: dict[str, str]) -> str:
    """A split, named by its file when it has one, for messages."""
    return f"{sources[split]} ({split} split)" if split in sources else f"the {split} split"


def _split_labels(ds: datasets.Dataset, label_column: str, split: str, sources: dict[str, str]) -> set:
    """The label values of one labelled split, refused when they are not class labels (floats,
    missing, negative, or strings mixed with integers)."""
    column = ds[label_column]
    values = set(column)
    if any(isinstance(v, float) for v in values) or None in values:
        raise ValueError(
            f"{_where(split, sources)}: column {label_column!r} must hold class labels (integers or strings), "
            f"got e.g. {sorted(map(str, values))[:5]}."
        )
    negative = [i for i, v in enumerate(column) if isinstance(v, int) and v < 0]
    if negative:
        row = f"{_row(sources[split], negative[0])}" if split in sources else f"row {negative[0] + 1}"
        raise ValueError(
            f"{_where(split, sources)}: {len(negative)} label(s) below 0, the first at {row} ({column[negative[0]]}). "
            f"Class labels are integers from 0 or strings; -1 and -100 mark unlabelled examples, which only a "
            f"test split may hold (all of its labels then)."
        )
    if len({type(v) is str for v in values}) > 1:
        raise ValueError(f"{_where(split, sources)}: column {label_column!r} mixes strings and integers.")
    return values


def label_mapping(
    raw: datasets.DatasetDict,
    label_column: str,
    class_names: list[str] | None = None,
    sources: dict[str, str] | None = None,
) -> tuple[dict, dict[int, str]]:
    """Class ids and names from the training labels; every other split's labels must be among them.

    The classes are the training split's labels: a validation or test label the training data
    never shows is refused rather than given a class no example trains. Integer labels must be
    non-negative: -1 and -100 mark unlabelled examples (GLUE's test sets), refused in the training
    and validation splits; a test split whose labels are all -1/-100 is unlabelled and skipped here
    (`is_unlabelled`; `finetune` then does not score it).

    Args:
        raw: the splits, each with a `label_column` ("train" required).
        label_column: the label column.
        class_names: names of the ids 0..K-1, or None for generic names.
        sources: split -> file, to name the file in messages.

    Returns:
        `(value_to_id, id2label)`: integer labels 0..K-1 keep their ids, any other label set (strings,
        integers with gaps or not starting at 0) is sorted and numbered, and the run records it in the
        config's `id2label`/`label2id`; names are `class_names`, else `LABEL_<i>` for 0..K-1 integers,
        else the label values as strings.

    Raises:
        ValueError: float, missing or negative labels, fewer than two classes, a validation/test
            label not among the training labels, or a `class_names` list whose length is not the
            number of classes; each naming the split (file) and the labels or rows.
    """
    sources = sources or {}
    values_of = {
        split: _split_labels(ds, label_column, split, sources)
        for split, ds in raw.items()
        if not (split == "test" and is_unlabelled(ds, label_column))
    }
    ordered = sorted(values_of["train"])
    if len(ordered) < 2:
        raise ValueError(f"Classification needs at least two classes; column {label_column!r} has {ordered}.")
    for split, values in values_of.items():
        unseen = values - set(ordered)
        if unseen:
            raise ValueError(
                f"{_where(split, sources)}: label(s) {sorted(unseen, key=str)} ({_kind(unseen)}) never occur in the training "
                f"labels {ordered} ({_kind(ordered)}): no example would train their class. Use the same label set "
                "in every split (the training labels define the classes)."
            )
    ids_kept = all(isinstance(v, int) for v in ordered) and ordered == list(range(len(ordered)))
    value_to_id = {value: i for i, value in enumerate(ordered)}
    if class_names is not None:
        if len(class_names) != len(ordered):
            raise ValueError(
                f"`class_names` names {len(class_names)} classes but the labels are {ordered} ({len(ordered)} classes)."
            )
        names = list(class_names)
    else:
        names = [f"LABEL_{i}" if ids_kept else str(value) for i, value in enumerate(ordered)]
    return value_to_id, dict(enumerate(names))


def _add_cls_sep(tokenizer) -> None:
    """Make a fast tokenizer add `[CLS] A [SEP]` (`[CLS] A [SEP] B [SEP]` for pairs) itself.

    The pooler classifies from the first position, which must be `[CLS]` in training and in the
    saved tokenizer alike: the template goes into `tokenizer.json`, so a pipeline on the saved
    folder builds the same inputs.
    """
    cls, sep = tokenizer.cls_token, tokenizer.sep_token
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.cls_token_id), (sep, tokenizer.sep_token_id)],
    )


def _starts_with_cls(tokenizer) -> bool:
    return tokenizer.cls_token_id is not None and tokenizer("a")["input_ids"][:1] == [tokenizer.cls_token_id]


def tokenize_dataset(
    raw: datasets.DatasetDict,
    tokenizer,
    data_args: ClassificationDataArguments,
    value_to_id: dict,
) -> datasets.DatasetDict:
    """Tokenize every split (batched `map`), truncating to `max_seq_length`; labels become ids.

    Padding is left to `DataCollatorWithPadding`, per batch, so short SST-2 phrases cost little.
    """
    pair = data_args.text_pair_column

    def encode(batch: dict) -> dict:
        encoded = tokenizer(
            batch[data_args.text_column],
            batch[pair] if pair else None,
            truncation=True,
            max_length=data_args.max_seq_length or common.DEFAULT_MAX_SEQ_LENGTH,
        )
        encoded["labels"] = [value_to_id[value] for value in batch[data_args.label_column]]
        return encoded

    return common.tokenize_splits(raw, encode)


# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------


def _scratch_tokenizer(model_args: ClassificationModelArguments, train_texts: list[str], max_length: int):
    """`tokenizer_name_or_path`, else a WordPiece tokenizer trained on `train_texts`, adding [CLS] ... [SEP]."""
    if model_args.tokenizer_name_or_path:
        return common.load_tokenizer(model_args)
    tokenizer = train_tokenizer(
        train_texts,
        kind="wordpiece",
        vocab_size=model_args.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        model_max_length=max_length,
        padding_side="right",  # encoders pad on the right; [CLS] stays at position 0
    )
    if not _starts_with_cls(tokenizer):
        _add_cls_sep(tokenizer)
    return tokenizer


def _scratch_model(
    model_args: ClassificationModelArguments, tokenizer, max_length: int, id2label: dict[int, str]
) -> PreTrainedModel:
    config = BERT.config_from_preset(
        model_args.preset,
        vocab_size=len(tokenizer),
        hidden_size=model_args.hidden_size,
        num_hidden_layers=model_args.num_hidden_layers,
        num_attention_heads=model_args.num_attention_heads,
        intermediate_size=model_args.intermediate_size or 4 * model_args.hidden_size,
        max_position_embeddings=max_length,
        hidden_dropout=model_args.hidden_dropout,
        attention_dropout=model_args.attention_dropout,
        classifier_dropout=model_args.classifier_dropout,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=len(id2label),
        id2label=id2label,
        label2id={name: i for i, name in id2label.items()},
    )
    model = BERT.head(AutoModelForSequenceClassification)(config)
    logger.info(
        "From scratch: %s preset, %d layers x %d wide, %s parameters, %d-token WordPiece vocabulary.",
        model_args.preset,
        config.num_hidden_layers,
        config.hidden_size,
        f"{model.num_parameters():,}",
        len(tokenizer),
    )
    return model


def build_tokenizer_and_model(
    model_args: ClassificationModelArguments,
    data_args: ClassificationDataArguments,
    train_texts: list[str],
    id2label: dict[int, str],
) -> tuple[object, PreTrainedModel]:
    """The tokenizer and the `...ForSequenceClassification` model, pretrained or fresh.

    Args:
        model_args: a folder to load, or the size of a fresh model.
        data_args: `max_seq_length` (the learned positions of a fresh model; default
            `DEFAULT_MAX_SEQ_LENGTH`).
        train_texts: the training texts, for a fresh WordPiece tokenizer (labels are not used)
            when `from_scratch` has no `tokenizer_name_or_path`.
        id2label: class id -> name, stored in the config (the pipeline's labels).

    Returns:
        `(tokenizer, model)`.
    """
    if model_args.from_scratch:
        max_seq_length = common.resolve_max_length(data_args.max_seq_length, None, "max_seq_length")
        tokenizer = _scratch_tokenizer(model_args, train_texts, max_seq_length)
        return tokenizer, _scratch_model(model_args, tokenizer, max_seq_length, id2label)

    path = model_args.model_name_or_path
    tokenizer = common.load_tokenizer(model_args, path)
    model = AutoModelForSequenceClassification.from_pretrained(
        path,
        num_labels=len(id2label),
        id2label=id2label,
        label2id={name: i for i, name in id2label.items()},
        ignore_mismatched_sizes=model_args.ignore_mismatched_sizes,
        trust_remote_code=model_args.trust_remote_code,
    )
    if tokenizer.cls_token_id is not None and not _starts_with_cls(tokenizer):
        logger.warning(
            "The tokenizer of %s does not start its encodings with %s; the pooled first position is then "
            "an ordinary token. Kept as pretrained.",
            path,
            tokenizer.cls_token,
        )
    return tokenizer, model


def accuracy_metric() -> evaluate.EvaluationModule:
    """This package's accuracy/F1 `evaluate` module, loaded from its folder (no download, no cache file)."""
    return evaluate.load(str(ACCURACY_METRIC), keep_in_memory=True)


def make_compute_metrics(metric: evaluate.EvaluationModule):
    """`Trainer`'s `compute_metrics`: argmax of the logits against the labels."""

    def compute_metrics(eval_pred) -> dict[str, float]:
        logits, labels = eval_pred.predictions, eval_pred.label_ids
        logits = logits[0] if isinstance(logits, tuple) else logits  # (N, K), hidden states dropped
        return metric.compute(predictions=np.argmax(logits, axis=-1), references=labels)

    return compute_metrics


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------


def _write_card(
    trainer, tokenizer, final: Path, data_args, model_args, metrics: dict, encoded, id2label
) -> None:
    """The model card: the data and labels, validation/test metrics, hyperparameters, `model-index`."""
    reported = common.reported_split(encoded)
    source = data_args.data_dir or data_args.train_file
    write_model_card(
        trainer.model,
        final,
        dataset=(
            f"`{source}`: {common.split_sizes(encoded, 'examples')}"
            + f"; labels {', '.join(f'{i} = {name}' for i, name in id2label.items())}."
        ),
        tokenizer=tokenizer,
        metrics={
            f"{split} {name}": metrics[f"{prefix}_{name}"]
            for prefix, split in (("eval", "validation"), ("test", "test"))
            for name in ("accuracy", "f1", "precision", "recall", "loss")
            if f"{prefix}_{name}" in metrics
        },
        hyperparameters=common.card_hyperparameters(
            trainer.args,
            head={
                "start": "from scratch" if model_args.from_scratch else model_args.model_name_or_path,
                "training examples": len(encoded["train"]),
            },
            tail={"max sequence length": data_args.max_seq_length},
        ),
        training_time_s=metrics["train_runtime"],
        eval_results=(
            {
                name: metrics[f"{reported}_{name}"]
                for name in ("accuracy", "f1")
                if f"{reported}_{name}" in metrics
            }
            if reported
            else None
        ),
        dataset_name=Path(source).resolve().name if data_args.data_dir else Path(source).stem,
        extra={"model_name": final.parent.resolve().name},  # the run's name, not "final"
    )


def finetune(
    data_args: ClassificationDataArguments,
    model_args: ClassificationModelArguments,
    training_args: TrainingArguments,
) -> dict[str, float]:
    """Fine-tune (or train from scratch) a sequence classifier with `Trainer` and save it.

    Args:
        data_args: the labelled files and how to read them.
        model_args: a pretrained folder or the size of a fresh model.
        training_args: `Trainer`'s arguments (`output_dir`, epochs, batch size, evaluation ...).

    Returns:
        The metrics also written to `output_dir/metrics.json`: Trainer's `train_*`, `eval_*` on
        the validation split and `test_*` on the test split (`*_accuracy`, `*_f1`, ...), plus
        `train_samples`, `eval_samples`, `test_samples`, `num_parameters`, `train_steps`,
        `train_epochs`, `train_budget_reached` and `seconds` (the whole call).

    Raises:
        ValueError: no validation split while `eval_strategy` is not "no", or bad data/labels.
    """
    start = time.perf_counter()
    output_dir = Path(training_args.output_dir)
    raw = load_classification_dataset(data_args)
    common.require_validation(raw, training_args, "a dev/validation file")
    sources = _split_files(data_args)
    value_to_id, id2label = label_mapping(
        raw, data_args.label_column, data_args.class_name_list(), sources=sources
    )
    if "test" in raw and is_unlabelled(raw["test"], data_args.label_column):
        logger.warning(
            "%s: every label is -1/-100 (an unlabelled test set, as GLUE's): the test split is not scored.",
            sources["test"],
        )
        del raw["test"]
    logger.info("%d classes: %s", len(id2label), id2label)

    set_seed(training_args.seed)  # the fresh model's init, before Trainer seeds the data order
    train_texts = list(raw["train"][data_args.text_column])
    if data_args.text_pair_column:
        train_texts += raw["train"][data_args.text_pair_column]
    tokenizer, model = build_tokenizer_and_model(model_args, data_args, train_texts, id2label)
    # truncate to what the model takes, checked before training rather than failing at a long batch
    limit = common.position_limit(model.config)
    max_seq_length = common.resolve_max_length(data_args.max_seq_length, limit, "max_seq_length")
    data_args = dataclasses.replace(data_args, max_seq_length=max_seq_length)
    logger.info(
        "Inputs truncated to %d tokens (the model's positions: %s).", max_seq_length, limit or "any length"
    )

    encoded = tokenize_dataset(raw, tokenizer, data_args, value_to_id)
    trainer, metrics = common.train_with_budget(
        Trainer,
        training_args,
        encoded,
        model=model,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=make_compute_metrics(accuracy_metric()),
    )
    if "validation" in encoded:
        metrics.update(trainer.evaluate(metric_key_prefix="eval"), eval_samples=len(encoded["validation"]))
    if "test" in encoded:
        metrics.update(
            trainer.evaluate(eval_dataset=encoded["test"], metric_key_prefix="test"),
            test_samples=len(encoded["test"]),
        )
    metrics["seconds"] = time.perf_counter() - start
    common.log_metrics(metrics)

    if trainer.is_world_process_zero():
        final = common.save_final(trainer, tokenizer, output_dir)
        _write_card(trainer, tokenizer, final, data_args, model_args, metrics, encoded, id2label)
        common.save_run_summary(trainer, output_dir, metrics, final)
    return metrics


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Command-line entry point: parse the arguments (flags or one .json/.yaml file) and fine-tune."""
    return common.script_main(parse_args, finetune, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
