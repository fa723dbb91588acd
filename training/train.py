"""The training loop of hf_lm: one accelerate loop for causal LMs, resumable exactly.

    python -m training.train --dataset synthetic --max_steps 200 --output_dir out/run
    python -m training.train run.yaml
    torchrun --standalone --nproc_per_node 2 -m training.train ...   # gloo DDP on CPU

(`accelerate launch --cpu --num_processes 2` silently runs one process on this CPU; use torchrun or
`accelerate launch --multi_gpu --num_processes 2`.)

What the loop guarantees:

- **One data order for any number of processes.** Each update reads one *global batch* of
  `per_device_batch_size * num_processes * gradient_accumulation_steps` blocks, taken in order
  from a permutation of the training blocks seeded by (seed, epoch). Micro-step m of the update
  takes the m-th slice of `per_device_batch_size * num_processes` indices and rank r its r-th
  contiguous part. So the union of all ranks' micro-batches of an update is the same set of
  blocks whatever the split between processes and accumulation, and 2 processes x b blocks
  follow the same trajectory as 1 process x 2b (up to float rounding).
- **Random windows** (`sampling="random_windows"`, objective clm, in-memory data): nanoGPT's
  `get_batch` instead of the blocks. Update u reads G windows of `block_size + 1` tokens at uniformly
  random offsets of the training token stream (the packed blocks end to end), drawn from a generator
  seeded by (seed, u) (`RandomWindows`) and cut into micro-steps and ranks as the blocks are: the
  same windows for any number of processes, and a pure function of the step, so a resumed run draws
  what the uninterrupted one would. Each row has `block_size` targets (`x = data[i : i + T]`,
  `y = data[i + 1 : i + 1 + T]`); the evaluation stays on the fixed held-out blocks. With
  `document_mask` the windows get their document and position ids as packed blocks do.
  Refused with streaming, tbptt, scheduled sampling and the other objectives.
- **Streaming in bounded memory** (`streaming=True`): the training blocks are read, tokenized
  and packed while training, in the order of the stream passed through a seeded shuffle buffer
  (`training.data.buffered_shuffle`, seeded by (seed, epoch)), and cut into the same global
  batches and per-rank slices as above (`StreamingGlobalBatches`). Every process reads the whole
  stream and keeps its own slice, so the order does not depend on the number of processes.
  Memory holds the shuffle buffer, one global batch, the first `max_eval_blocks` evaluation
  blocks and the tokenizer's training sample (the first `tokenizer_train_documents` documents),
  whatever the size of the corpus.
- **The loss is a plain token mean per micro-batch**, and `accelerator.backward` divides it by
  `gradient_accumulation_steps` inside `accelerator.accumulate`; DDP averages over processes.
  Every block holds exactly `block_size - 1` predicted tokens (packing leaves no padding), so
  this mean of means is exactly the token mean over the global batch.
- **Independent dropout per process.** All processes start from `set_seed(seed)` (same split,
  tokenizer and initial weights); then each re-seeds torch with (seed, rank)
  (`seed_process_rngs`), so the ranks' dropout masks are independent, as those of a single
  process's larger batch are.
- **Exact resume.** A checkpoint (`training.checkpoint`) holds weights, optimizer, scheduler,
  the fp16 loss scaler (if any), the RNG states of *every* process (gathered to the main process,
  each restored by its own rank) and the data position (epoch, updates within the epoch, step;
  streaming re-reads the epoch's stream and skips that many global batches). The data order is a
  pure function of (data, seed, epoch), so a resumed run continues bit for bit as if never
  stopped (CPU, fp32). Checkpoints are written by the main process only, never after a
  non-finite loss. A checkpoint of another model config is refused with the differing fields.
- **Nothing is lost to a kill, a full disk or a damaged file.** Every file the loop writes is
  written aside and renamed into place (`tokenizer/`, checkpoints, `best/`, `final/`, `loss.png`,
  `final_metrics.json`, the rewrites of `metrics.csv`; a `metrics.csv` row cut short by a kill is
  dropped on reading), so a run killed at any moment resumes exactly. Every checkpoint file is
  checksummed (`manifest.json`); a resume walks back past damaged checkpoints, naming the file
  (`training.checkpoint.load_latest_checkpoint`). Checkpoints carry the run's id, kept on resume:
  `keep_last` prunes only this run's, and a resume continues the run that saved last.
- **Divergence stops the run**: a non-finite loss (averaged over processes, so all ranks agree)
  raises `TrainingDivergedError` before the update is applied, and so do non-finite weights
  found before a save or an evaluation (one fused reduction and one host sync): the last
  checkpoint is always the last good one, finite. With `rollback_on_divergence` the run instead
  goes back to that checkpoint and skips the offending batches (PaLM's remedy for loss spikes,
  with `spike_threshold`; `rollback_to_last_good`), deterministically, and `final_metrics.json`
  counts the rollbacks and skipped batches.
- **Evaluation** reports the held-out loss, perplexity and bits per token, character and word
  (`eval_text_units`: the characters and words the scored tokens spell).
- **The best model** (`load_best_model_at_end`): each evaluation better by `metric_for_best_model`
  writes the weights atomically to `best/checkpoint-N/` (`BestModel`); the best so far is recorded
  in every checkpoint, so it survives resume, and a best folder is deleted only when neither the
  current best nor a kept checkpoint records it, so `keep_last` never loses it. `final/` then
  holds the best weights; `final_metrics.json` has their metrics at the top level and under
  "best", the last evaluation under "last"; the card names the step.
- **Speed on a GPU**: `torch_compile` compiles the prepared model for the training forward and the
  plain model for the causal-LM evaluation; checkpoints and `final/` are saved from the plain
  module (no `_orig_mod.` prefixes). AdamW is fused when every parameter is on a CUDA GPU
  (`optimizer_kwargs`), and `tf32` lets float32 matmuls use TF32 there (`configure_tf32`); both
  are logged and named in the card, and neither applies on a CPU.
- **Precision**: bf16 autocast runs on CPU and GPU; fp16 needs a CUDA GPU (on CPU accelerate
  would silently train in fp32, so the run refuses it).

Outputs under `output_dir`: `tokenizer/`, `checkpoints/checkpoint-N/`, `best/checkpoint-N/` (with
`load_best_model_at_end`), `metrics.csv`,
`tensorboard` logs (if requested), `loss.png`, `final_metrics.json`, and `final/`, a folder ready to
push to the Hub as it is (`python -m training.push`): `model.safetensors`, `config.json` with
`auto_map`, the model code, `generation_config.json`, the tokenizer files, `loss.png` and a model card
`README.md` (architecture, data, hyperparameters, training time, `model-index` evaluation results).
It loads with `AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True)` without hf_lm.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import itertools
import json
import logging
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import broadcast_object_list, gather_object, set_seed
from datasets import Dataset, DatasetDict, IterableDataset
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    get_scheduler,
)

import hf_lm  # noqa: F401  (registers the Auto classes)
from hf_lm import (
    HfLmBartConfig,
    HfLmBartForConditionalGeneration,
    HfLmBertConfig,
    HfLmBertForMaskedLM,
    HfLmGPTConfig,
    HfLmGPTForCausalLM,
    HfLmT5Config,
    HfLmT5ForConditionalGeneration,
)
from hf_lm.cards import write_model_card
from hf_lm.metrics.sliding_window import bits_per_unit
from hf_lm.models.hflm_common import lm_loss
from hf_lm.models.hflm_configuration_ffnn import HfLmFFNNConfig
from hf_lm.models.hflm_configuration_ngram import HfLmNGramConfig
from hf_lm.models.hflm_configuration_rnn import HfLmRNNConfig
from hf_lm.models.hflm_configuration_rnn_seq2seq import HfLmRNNSeq2SeqConfig
from hf_lm.models.hflm_modeling_ffnn import HfLmFFNNForCausalLM
from hf_lm.models.hflm_modeling_ngram import HfLmNGramForCausalLM
from hf_lm.models.hflm_modeling_rnn import HfLmRNNForCausalLM
from hf_lm.models.hflm_modeling_rnn_seq2seq import HfLmRNNSeq2SeqForConditionalGeneration
from hf_lm.models.hflm_rnn_blocks import RecurrentCache
from hf_lm.plots import plot_loss_curves
from training.args import (
    CAUSAL_ARCHS,
    STREAMING_EVAL_BLOCKS,
    STREAMING_TOKENIZER_DOCUMENTS,
    DataArguments,
    ModelArguments,
    TrainArguments,
    parse_args,
)
from training.checkpoint import (
    CorruptCheckpointError,
    atomic_folder,
    atomic_write_text,
    checkpoint_name,
    checkpoint_state,
    commit_folder,
    get_rng_state,
    list_checkpoints,
    load_checkpoint,
    load_latest_checkpoint,
    max_abs_weight,
    new_run_id,
    remove_checkpoints_except,
    save_checkpoint,
    staging_folder,
)
from training.collators_mlm import DataCollatorForMaskedLM
from training.collators_seq2seq import DataCollatorForBartDenoising, DataCollatorForT5Pretraining
from training.data import buffered_shuffle, load_text_dataset, tokenize_and_pack, train_eval_split
from training.objectives import (
    SEQ2SEQ_OBJECTIVES,
    evaluate_mlm,
    evaluate_seq2seq,
    mask_seed,
    mlm_inputs,
    seq2seq_inputs,
)
from training.resume_settings import apply_resume_settings, run_settings
from training.run_folder import RunLock, claim_output_dir
from training.tokenizer import (
    BART_SPECIAL_TOKENS,
    BERT_SPECIAL_TOKENS,
    T5_SPECIAL_TOKENS,
    add_sentinel_tokens,
    train_tokenizer,
)

logger = logging.getLogger(__name__)

CSV_FIELDS = (
    "step",
    "epoch",
    "loss",
    "learning_rate",
    "grad_norm",
    "eval_loss",
    "eval_perplexity",
    "eval_bits_per_token",
    "eval_bits_per_character",
    "eval_bits_per_word",
    "eval_mlm_accuracy",
    "eval_pseudo_perplexity",
    "eval_token_accuracy",
    "tokens",
    "seconds",
)


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or infinite; the last checkpoint is the last good state."""


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------


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


class BlockStream:
    """The training blocks of a streamed corpus, re-read from the start for each epoch.

    `epoch(e)` iterates the packed `IterableDataset` (reading, tokenizing and packing lazily) through
    `buffered_shuffle` seeded by `numpy.random.default_rng([seed, e])`. Its order is a pure function
    of (data, seed, buffer size, epoch), so a resumed run re-opens the epoch and skips the blocks it
    had consumed. Memory: `shuffle_buffer_size` blocks, as int64 numpy arrays (T,).
    """

    def __init__(self, packed: IterableDataset, columns: list[str], shuffle_buffer_size: int, seed: int):
        self.packed, self.columns = packed, columns
        self.shuffle_buffer_size, self.seed = shuffle_buffer_size, seed

    def epoch(self, epoch: int):
        """The blocks of epoch `epoch`, each a dict of int64 arrays (T,) keyed by column."""
        rows = ({c: np.asarray(row[c], dtype=np.int64) for c in self.columns} for row in self.packed)
        return buffered_shuffle(rows, self.shuffle_buffer_size, np.random.default_rng([self.seed, epoch]))


def tail_split(dataset: Dataset, eval_fraction: float) -> DatasetDict:
    """Hold out the last `eval_fraction` of the corpus's characters: nanoGPT's shakespeare_char split.

    The documents are read in order as one text of n characters; the first `int(n * (1 -
    eval_fraction))` train and the rest validate, the document holding the cut split there (its head
    trains, its tail validates). One document (`sample_by="document"`) gives nanoGPT's
    `data[:int(n * 0.9)]` / `data[int(n * 0.9):]` exactly.

    Raises:
        ValueError: one side would hold no character.
    """
    texts = [t or "" for t in dataset["text"]]
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    ends = np.cumsum(lengths)  # (D,) character offset of each document's end
    total = int(ends[-1]) if len(ends) else 0
    cut = int(total * (1 - eval_fraction))
    if not 0 < cut < total:
        raise ValueError(
            f"`eval_split`='tail' with eval_fraction={eval_fraction} leaves an empty side of a corpus of "
            f"{total} characters."
        )
    d = int(np.searchsorted(ends, cut, side="right"))  # the document holding character `cut`
    start = cut - (int(ends[d - 1]) if d else 0)  # the cut's offset within document d
    train = texts[:d] + ([texts[d][:start]] if start else [])
    held_out = [texts[d][start:], *texts[d + 1 :]]
    return DatasetDict(
        {"train": Dataset.from_dict({"text": train}), "eval": Dataset.from_dict({"text": held_out})}
    )


def _load_or_train_tokenizer(data_args, train_args, train_docs, accelerator: Accelerator):
    """The tokenizer: given, reloaded from the run folder, or trained on the first training documents.

    It is trained on the first `tokenizer_train_documents` training documents: all of them by
    default, the first `STREAMING_TOKENIZER_DOCUMENTS` when streaming (a stream may not end).
    """
    if data_args.tokenizer_name_or_path:
        return AutoTokenizer.from_pretrained(data_args.tokenizer_name_or_path)
    folder = Path(train_args.output_dir) / "tokenizer"
    # the main process trains and saves (inside `main_process_first`); the others load its files.
    # A resumed run reloads the tokenizer it was trained with.
    reuse = (not accelerator.is_main_process or train_args.resume != "false") and (
        folder / "tokenizer.json"
    ).is_file()
    if reuse:
        try:
            return AutoTokenizer.from_pretrained(folder)
        except Exception as err:  # tokenizers raises a bare Exception for a damaged tokenizer.json
            raise ValueError(
                f"The run's tokenizer {folder} cannot be read ({type(err).__name__}: {err}): damaged, or cut "
                "short by a run killed while writing it (before tokenizer saves were atomic). Its checkpoints "
                "were trained with it: restore the folder from a copy, or start afresh (a new output_dir, or "
                "delete the tokenizer and resume=false)."
            ) from err
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
        special_tokens=OBJECTIVE_SPECIAL_TOKENS.get(train_args.objective),
        min_frequency=data_args.tokenizer_min_frequency,
    )
    if train_args.objective == "span_corruption":
        # T5's sentinels <extra_id_0>, ... on the last ids; a block needs about one per 20 tokens
        add_sentinel_tokens(tokenizer, min(100, max(8, data_args.block_size // 4)))
    if accelerator.is_main_process:
        # all at once: a kill while writing must not leave a truncated tokenizer.json for every
        # later --resume to trip on
        with atomic_folder(folder) as staging:
            tokenizer.save_pretrained(staging)
    return tokenizer


def prepare_data(data_args: DataArguments, train_args: TrainArguments, accelerator: Accelerator):
    """Load, split (by document), tokenize and pack the corpus.

    Returns:
        `(tokenizer, train_blocks, eval_blocks, description)`. `eval_blocks` is a dict of int64
        tensors (N, T) with "input_ids" (and "position_ids", "document_ids" with `document_mask`),
        the first `max_eval_blocks` held-out blocks. `train_blocks` is such a dict too, or with
        `streaming` a `BlockStream` that reads, packs and shuffles the training split lazily.
    """
    streaming = data_args.streaming
    max_eval_blocks = data_args.max_eval_blocks or (STREAMING_EVAL_BLOCKS if streaming else None)
    with accelerator.main_process_first():  # dataset caches and the tokenizer are written once
        dataset = load_text_dataset(
            data_args.dataset,
            config_name=data_args.config_name,
            split=data_args.split,
            text_column=data_args.text_column,
            streaming=streaming,
            sample_by=data_args.sample_by,
        )
        dataset = _limit(dataset, data_args)
        if data_args.eval_dataset:  # a given validation corpus (e.g. the last 10% of a text)
            held_out = load_text_dataset(
                data_args.eval_dataset,
                config_name=data_args.config_name,
                text_column=data_args.text_column,
                streaming=streaming,
                sample_by=data_args.sample_by,
            )
            splits = {"train": dataset, "eval": held_out}
        elif data_args.eval_split == "tail":
            splits = tail_split(dataset, data_args.eval_fraction)
        else:
            splits = train_eval_split(dataset, data_args.eval_fraction, seed=train_args.seed)
        tokenizer = _load_or_train_tokenizer(data_args, train_args, splits["train"], accelerator)
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
            )
        else:
            train_blocks = _to_tensors(packed["train"], data_args.document_mask)
    source = f"`{data_args.dataset}`" + (f" ({data_args.config_name})" if data_args.config_name else "")
    n_eval = len(eval_blocks["input_ids"])
    if streaming:
        description = (
            f"{source}, streamed: {data_args.eval_fraction:.1%} of the documents held out; training "
            f"blocks of {data_args.block_size} tokens (GPT-2 packing) read in a shuffle buffer of "
            f"{data_args.shuffle_buffer_size:,} blocks; {n_eval:,} evaluation blocks."
        )
    elif data_args.eval_dataset:
        description = (
            f"{source}: {len(dataset)} documents; evaluated on `{data_args.eval_dataset}`; "
            f"{len(train_blocks['input_ids']):,} training and {n_eval:,} evaluation "
            f"blocks of {data_args.block_size} tokens (GPT-2 packing)."
        )
    elif data_args.eval_split == "tail":
        description = (
            f"{source}: {len(dataset)} documents; the last {data_args.eval_fraction:.1%} of the characters "
            f"held out; {len(train_blocks['input_ids']):,} training and {n_eval:,} evaluation "
            f"blocks of {data_args.block_size} tokens (GPT-2 packing)."
        )
    else:
        description = (
            f"{source}: {len(dataset)} documents, {data_args.eval_fraction:.1%} held out; "
            f"{len(train_blocks['input_ids']):,} training and {n_eval:,} evaluation "
            f"blocks of {data_args.block_size} tokens (GPT-2 packing)."
        )
    return tokenizer, train_blocks, eval_blocks, description


class GlobalBatchSampler(torch.utils.data.Sampler):
    """This rank's micro-batches of block indices, in the same global order for any world size.

    Epoch e reads the permutation `numpy.random.default_rng([seed, e])` of the N blocks in
    updates of G = b * world * accum indices (the incomplete tail is dropped). Micro-step m of an
    update takes indices [m * b * world, (m + 1) * b * world) of it, and rank r the r-th b of those.
    Infinite; starts at (epoch, update index within the epoch).

    With `lanes=True` (truncated BPTT) the order is the corpus order instead: the first
    U * G blocks are cut into G lanes of U consecutive blocks (U = updates per epoch), and update u
    takes block u of every lane, so a row of one global batch continues the same row of the
    previous one, with the same split between micro-steps and ranks; every epoch reads them again.
    """

    def __init__(
        self,
        num_blocks: int,
        per_device: int,
        world: int,
        rank: int,
        accum: int,
        seed: int,
        lanes: bool = False,
    ) -> None:
        self.per_device, self.world, self.rank, self.accum, self.seed = per_device, world, rank, accum, seed
        self.lanes = lanes
        self.num_blocks = num_blocks
        self.global_batch = per_device * world * accum
        self.updates_per_epoch = num_blocks // self.global_batch
        if self.updates_per_epoch == 0:
            raise ValueError(
                f"The training split has {num_blocks} blocks: fewer than one global batch of {self.global_batch} "
                "(per_device_batch_size * processes * gradient_accumulation_steps); use more data or smaller batches."
            )
        self.epoch, self.update = 0, 0

    def set_position(self, epoch: int, update: int) -> None:
        """Start the next iteration at update `update` of epoch `epoch`."""
        self.epoch, self.update = epoch, update

    def __iter__(self):
        epoch, update = self.epoch, self.update
        b, chunk = self.per_device, self.per_device * self.world
        while True:
            if not self.lanes:
                order = np.random.default_rng([self.seed, epoch]).permutation(self.num_blocks)
            for u in range(update, self.updates_per_epoch):
                if self.lanes:  # block u of each of the G lanes of U blocks
                    batch = np.arange(self.global_batch) * self.updates_per_epoch + u
                else:
                    batch = order[u * self.global_batch : (u + 1) * self.global_batch]
                for m in range(self.accum):
                    yield batch[m * chunk + self.rank * b : m * chunk + (self.rank + 1) * b].tolist()
            epoch, update = epoch + 1, 0


class _Blocks(torch.utils.data.Dataset):
    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors["input_ids"])

    def __getitem__(self, i):
        return {name: t[i] for name, t in self.tensors.items()}


class StreamingGlobalBatches:
    """This rank's micro-batches from a `BlockStream`, cut as `GlobalBatchSampler` cuts its order.

    Each update reads the next G = b * world * accum blocks of the epoch's stream; micro-step m
    takes blocks [m * b * world, (m + 1) * b * world) of them and rank r the r-th b of those. So,
    as with the sampler, the union of an update's micro-batches over ranks is the same for any split
    between processes and accumulation. An epoch ends when its stream holds less than one more
    global batch (that tail is dropped, as the sampler drops its incomplete update), and the next
    one re-opens the stream with the next epoch's shuffle.

    Every process reads every block and keeps its slice: reading and tokenizing are repeated on
    each rank, the price of a data order that does not depend on the number of processes.

    `position` is (epoch, updates consumed in that epoch) after the update whose micro-batches were
    last handed out; `set_position` starts an iteration there by skipping `update * G` blocks of
    the epoch's stream (reading them without training).
    """

    def __init__(self, stream: BlockStream, per_device: int, world: int, rank: int, accum: int) -> None:
        self.stream = stream
        self.per_device, self.world, self.rank, self.accum = per_device, world, rank, accum
        self.global_batch = per_device * world * accum
        self.epoch, self.update = 0, 0
        self.position = (0, 0)

    def set_position(self, epoch: int, update: int) -> None:
        """Start the next iteration after `update` updates of epoch `epoch`."""
        self.epoch, self.update = epoch, update
        self.position = (epoch, update)

    def __iter__(self):
        epoch, update = self.epoch, self.update
        b, chunk, size = self.per_device, self.per_device * self.world, self.global_batch
        while True:
            blocks = self.stream.epoch(epoch)
            skipped = sum(1 for _ in itertools.islice(blocks, update * size))
            if skipped < update * size:
                raise ValueError(
                    f"Cannot resume at update {update} of epoch {epoch}: the stream now holds only {skipped} "
                    f"blocks (< {update} x {size}); the data or the shuffle buffer changed since the checkpoint."
                )
            start = update
            while len(batch := list(itertools.islice(blocks, size))) == size:
                update += 1
                self.position = (epoch, update)
                for m in range(self.accum):
                    rows = batch[m * chunk + self.rank * b : m * chunk + (self.rank + 1) * b]
                    yield {c: torch.from_numpy(np.stack([r[c] for r in rows])) for c in rows[0]}  # (b, T)
            if update == start == 0:
                raise ValueError(
                    f"The streamed training split holds {len(batch)} blocks: fewer than one global batch of "
                    f"{size} (per_device_batch_size * processes * gradient_accumulation_steps); use more data "
                    "or smaller batches."
                )
            epoch, update = epoch + 1, 0


WINDOW_SEED_TAG = 0x77696E64  # "wind": keeps the window seeds apart from every other (seed, step) stream


def window_offsets(seed: int, step: int, count: int, num_tokens: int, block_size: int) -> np.ndarray:
    """The start offsets of update `step`'s `count` random windows: a pure function of its arguments.

    Uniform in [0, num_tokens - block_size), as nanoGPT's `torch.randint(len(data) - block_size, ...)`,
    so a window's `block_size + 1` tokens (inputs and the next-token targets) lie in the stream.

    Returns:
        (count,) int64 offsets.
    """
    rng = np.random.default_rng([WINDOW_SEED_TAG, seed, step])
    return rng.integers(0, num_tokens - block_size, size=count, dtype=np.int64)


def window_document_columns(input_ids: torch.Tensor, eos_token_id: int) -> dict[str, torch.Tensor]:
    """`document_ids` and `position_ids` of windows (B, T), as `tokenize_and_pack` gives its blocks.

    A token after an EOS starts a document (packing appends EOS to every document), and so does a
    window's first token: the window is the model's whole context. A window that is a packed block
    gets that block's columns.
    """
    starts = torch.zeros_like(input_ids, dtype=torch.bool)  # (B, T)
    starts[:, 1:] = input_ids[:, :-1] == eos_token_id
    starts[:, 0] = True
    arange = torch.arange(input_ids.shape[1]).expand_as(input_ids)  # (B, T)
    last_start = torch.where(starts, arange, 0).cummax(dim=1).values  # (B, T)
    return {"document_ids": starts.long().cumsum(dim=1) - 1, "position_ids": arange - last_start}


class RandomWindows:
    """This rank's micro-batches of nanoGPT windows: `block_size + 1` tokens at random offsets.

    Update `step` draws G = b * world * accum offsets into the training token stream (the packed
    blocks end to end) with `window_offsets(seed, step, ...)`; micro-step m takes offsets
    [m * b * world, (m + 1) * b * world) and rank r the r-th b of those, as `GlobalBatchSampler`
    cuts its order. So an update's windows are the same set for any split between processes and
    accumulation, and a pure function of (seed, step): a resumed run draws the windows an
    uninterrupted run would, whatever happened to the global RNG. Each row is nanoGPT's
    `x = data[i : i + T]`, `y = data[i + 1 : i + 1 + T]`: "input_ids" (b, T) and "targets" (b, T),
    T targets per row where a packed block has T - 1 (the window's first token is context only).
    Infinite; starts at `set_position(step)`.
    """

    def __init__(
        self,
        tokens: torch.Tensor,
        block_size: int,
        per_device: int,
        world: int,
        rank: int,
        accum: int,
        seed: int,
        eos_token_id: int | None = None,
    ) -> None:
        if len(tokens) <= block_size:
            raise ValueError(
                f"The training split has {len(tokens)} tokens: too few for one window of block_size + 1 = "
                f"{block_size + 1}; use more data or a smaller block_size."
            )
        self.tokens, self.block_size = tokens, block_size  # (N,) int64
        self.per_device, self.world, self.rank, self.accum, self.seed = per_device, world, rank, accum, seed
        self.eos_token_id = eos_token_id  # set: also give document_ids and position_ids (document_mask)
        self.global_batch = per_device * world * accum
        self.step = 0

    def set_position(self, step: int) -> None:
        """Start the next iteration at update `step` (the updates already done)."""
        self.step = step

    def __iter__(self):
        b, chunk, span = self.per_device, self.per_device * self.world, torch.arange(self.block_size + 1)
        step = self.step
        while True:
            offsets = window_offsets(self.seed, step, self.global_batch, len(self.tokens), self.block_size)
            for m in range(self.accum):
                mine = torch.from_numpy(offsets[m * chunk + self.rank * b : m * chunk + (self.rank + 1) * b])
                windows = self.tokens[mine[:, None] + span]  # (b, T + 1)
                batch = {"input_ids": windows[:, :-1], "targets": windows[:, 1:]}  # (b, T) each
                if self.eos_token_id is not None:
                    batch.update(window_document_columns(batch["input_ids"], self.eos_token_id))
                yield batch
            step += 1


def seed_process_rngs(seed: int, rank: int) -> int:
    """Re-seed torch's global generators (CPU and every GPU) with a seed of process `rank`'s own.

    Called after `set_seed(seed)` has made the split, tokenizer and initial weights the same on
    every process. Without it every rank would draw the same dropout masks, so the masks of a
    global batch would be copies of b-row patterns instead of independent draws as in one
    process's batch. The seed is derived with `numpy.random.SeedSequence([seed, rank])`, which
    spreads nearby (seed, rank) pairs over unrelated streams.

    Returns:
        The derived seed.
    """
    derived = int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])
    torch.manual_seed(derived)  # seeds the CUDA generators too
    return derived


# ----------------------------------------------------------------------------------------------
# Model and optimizer
# ----------------------------------------------------------------------------------------------


# the special tokens each objective's tokenizer needs (None: GPT's defaults)
OBJECTIVE_SPECIAL_TOKENS = {
    # a masked LM needs BERT's [CLS] [SEP] [MASK] [PAD]; [SEP] also separates packed documents
    "mlm": {**BERT_SPECIAL_TOKENS, "eos_token": "[SEP]"},
    "span_corruption": T5_SPECIAL_TOKENS,
    "bart_denoising": BART_SPECIAL_TOKENS,
}
SEQ2SEQ_FAMILIES = {
    "span_corruption": (HfLmT5Config, HfLmT5ForConditionalGeneration),
    "bart_denoising": (HfLmBartConfig, HfLmBartForConditionalGeneration),
}


def build_collator(train_args: TrainArguments, tokenizer):
    """The data collator that turns blocks into the objective's inputs and labels (None for clm)."""
    if train_args.objective == "mlm":
        return DataCollatorForMaskedLM(
            tokenizer, mlm_probability=train_args.mlm_probability, masking=train_args.masking
        )
    if train_args.objective == "span_corruption":
        return DataCollatorForT5Pretraining(tokenizer, objective="span_corruption")
    if train_args.objective == "bart_denoising":
        return DataCollatorForBartDenoising(tokenizer)
    return None


def build_model(model_args: ModelArguments, data_args: DataArguments, tokenizer, objective: str = "clm"):
    """A fresh model sized to the tokenizer, or the `init_from` checkpoint.

    `objective="clm"` builds an `HfLmGPTForCausalLM`, `"mlm"` an `HfLmBertForMaskedLM` (with
    `sparse_prediction`: the head runs on the ~15% masked positions only; same loss, less work).
    """
    if model_args.init_from:
        auto = {"mlm": AutoModelForMaskedLM, "clm": AutoModelForCausalLM}.get(
            objective, AutoModelForSeq2SeqLM
        )
        return auto.from_pretrained(model_args.init_from, dtype=torch.float32)
    if model_args.arch != "transformer":
        return build_pretransformer_model(model_args, data_args, tokenizer, objective)
    if objective in SEQ2SEQ_FAMILIES:
        # the family's own architecture (T5: RMSNorm pre-norm, relative buckets; BART: post-norm,
        # learned positions): only sizes come from the arguments, variants from --config_overrides
        config_cls, model_cls = SEQ2SEQ_FAMILIES[objective]
        sizes = dict(
            vocab_size=len(tokenizer),
            hidden_size=model_args.hidden_size,
            num_hidden_layers=model_args.num_hidden_layers,
            num_attention_heads=model_args.num_attention_heads,
            num_key_value_heads=model_args.num_key_value_heads,
            intermediate_size=model_args.intermediate_size,
            hidden_dropout=model_args.hidden_dropout,
            attention_dropout=model_args.attention_dropout,
            tie_word_embeddings=model_args.tie_word_embeddings,
            # a noised source is a little longer than its block (sentinels, EOS)
            max_position_embeddings=model_args.max_position_embeddings or 2 * data_args.block_size,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=tokenizer.bos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id
            if objective == "span_corruption"
            else tokenizer.eos_token_id,
        )
        return model_cls(config_cls(**{**sizes, **model_args.overrides(config_cls)}))
    kwargs = dict(
        vocab_size=len(tokenizer),
        hidden_size=model_args.hidden_size,
        num_hidden_layers=model_args.num_hidden_layers,
        num_attention_heads=model_args.num_attention_heads,
        num_key_value_heads=model_args.num_key_value_heads,
        intermediate_size=model_args.intermediate_size,
        position_embedding_type=model_args.position_embedding_type,
        norm_type=model_args.norm_type,
        norm_position=model_args.norm_position,
        hidden_act=model_args.hidden_act,
        hidden_dropout=model_args.hidden_dropout,
        attention_dropout=model_args.attention_dropout,
        tie_word_embeddings=model_args.tie_word_embeddings,
        max_position_embeddings=model_args.max_position_embeddings or data_args.block_size,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if objective == "mlm":
        kwargs.update(sparse_prediction=True, bos_token_id=None)
        kwargs.update(model_args.overrides(HfLmBertConfig))
        return HfLmBertForMaskedLM(HfLmBertConfig(**kwargs))
    kwargs.update(model_args.overrides(HfLmGPTConfig))
    return HfLmGPTForCausalLM(HfLmGPTConfig(**kwargs))


def build_pretransformer_model(
    model_args: ModelArguments, data_args: DataArguments, tokenizer, objective: str
) -> torch.nn.Module:
    """A fresh n-gram (unfitted), feed-forward, recurrent or recurrent encoder-decoder model.

    The shared size arguments map onto each family: `hidden_size` is the embedding width (and the
    recurrent state size), `intermediate_size` the feed-forward LM's tanh layer, `num_hidden_layers`
    the recurrent layers (of the encoder and of the decoder); `config_overrides` sets the rest.
    """
    specials = dict(
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    arch, vocab = model_args.arch, len(tokenizer)
    if arch == "ngram":
        config_cls, model_cls = HfLmNGramConfig, HfLmNGramForCausalLM
        kwargs = dict(order=model_args.ngram_order, smoothing=model_args.ngram_smoothing)
    elif arch == "ffnn":
        config_cls, model_cls = HfLmFFNNConfig, HfLmFFNNForCausalLM
        kwargs = dict(
            context_size=model_args.ngram_order - 1,
            hidden_size=model_args.hidden_size,
            intermediate_size=model_args.intermediate_size or 4 * model_args.hidden_size,
            hidden_dropout=model_args.hidden_dropout,
            tie_word_embeddings=model_args.tie_word_embeddings,
        )
    elif arch == "rnn":
        config_cls, model_cls = HfLmRNNConfig, HfLmRNNForCausalLM
        kwargs = dict(
            cell_type=model_args.cell_type,
            hidden_size=model_args.hidden_size,
            num_hidden_layers=model_args.num_hidden_layers,
            hidden_dropout=model_args.hidden_dropout,
            tie_word_embeddings=model_args.tie_word_embeddings,
        )
    else:  # rnn_seq2seq, trained on a denoising objective (T5's or BART's noise and special tokens)
        config_cls, model_cls = HfLmRNNSeq2SeqConfig, HfLmRNNSeq2SeqForConditionalGeneration
        kwargs = dict(
            cell_type=model_args.cell_type,
            embedding_size=model_args.hidden_size,
            hidden_size=model_args.hidden_size,
            encoder_layers=model_args.num_hidden_layers,
            decoder_layers=model_args.num_hidden_layers,
            attention=model_args.rnn_attention,
            hidden_dropout=model_args.hidden_dropout,
            tie_word_embeddings=model_args.tie_word_embeddings,
            decoder_start_token_id=tokenizer.pad_token_id
            if objective == "span_corruption"
            else tokenizer.eos_token_id,
        )
    return model_cls(
        config_cls(**{"vocab_size": vocab, **specials, **kwargs, **model_args.overrides(config_cls)})
    )


def config_class_for(model_args: ModelArguments, objective: str) -> type:
    """The config class `build_model` makes for this architecture and objective."""
    if model_args.arch != "transformer":
        return {
            "ngram": HfLmNGramConfig,
            "ffnn": HfLmFFNNConfig,
            "rnn": HfLmRNNConfig,
            "rnn_seq2seq": HfLmRNNSeq2SeqConfig,
        }[model_args.arch]
    if objective in SEQ2SEQ_FAMILIES:
        return SEQ2SEQ_FAMILIES[objective][0]
    return HfLmBertConfig if objective == "mlm" else HfLmGPTConfig


def check_arch(data_args: DataArguments, model_args: ModelArguments, train_args: TrainArguments) -> None:
    """Refuse combinations of architecture, objective and loop options that cannot work together,
    and config overrides the model would not know (before any data is read)."""
    arch, objective = model_args.arch, train_args.objective
    if model_args.init_from and model_args.config_overrides:
        raise ValueError(
            "`config_overrides` cannot be combined with `init_from`: the model's config comes from the "
            f"checkpoint {model_args.init_from!r}. Edit its config.json, or train from scratch."
        )
    model_args.overrides(config_class_for(model_args, objective))  # unknown keys fail here, by name
    if objective != "clm" and data_args.document_mask:
        raise ValueError(
            "`document_mask` applies to causal LMs (objective='clm'); the other objectives see their whole "
            "block, with a separator between documents. Drop --document_mask or use objective='clm'."
        )
    if train_args.mixed_precision == "fp16" and not torch.cuda.is_available():
        # accelerate makes no GradScaler and no autocast for fp16 on a CPU: the run would be fp32
        raise ValueError(
            "mixed_precision='fp16' needs a CUDA GPU: on CPU accelerate would silently train in fp32. "
            "Use mixed_precision='bf16', which runs on CPU, or 'no'."
        )
    if objective == "clm" and arch not in CAUSAL_ARCHS:
        raise ValueError(
            f"arch={arch!r} is not a causal LM: objective 'clm' trains one of {list(CAUSAL_ARCHS)}. "
            "Train rnn_seq2seq with objective 'span_corruption' or 'bart_denoising'."
        )
    if objective == "mlm" and arch != "transformer":
        raise ValueError(f"objective 'mlm' trains the BERT family (arch='transformer'), not arch={arch!r}.")
    if objective in SEQ2SEQ_OBJECTIVES and arch not in ("transformer", "rnn_seq2seq"):
        raise ValueError(
            f"objective {objective!r} trains an encoder-decoder: arch 'transformer' or 'rnn_seq2seq', not {arch!r}."
        )
    if train_args.tbptt and (arch != "rnn" or data_args.streaming):
        raise ValueError(
            "`tbptt` carries a recurrent state from one block to the next: it needs arch='rnn' and the "
            f"in-memory data (no --streaming); got arch={arch!r}, streaming={data_args.streaming}."
        )
    if train_args.scheduled_sampling != "none" and arch not in ("rnn", "rnn_seq2seq"):
        raise ValueError(
            f"`scheduled_sampling` feeds a recurrent model its own samples: it needs arch 'rnn' or 'rnn_seq2seq', "
            f"not {arch!r}."
        )
    if data_args.document_mask and arch != "transformer":
        raise ValueError(
            f"`document_mask` is an attention mask: it applies to arch='transformer', not {arch!r}."
        )
    if train_args.sampling == "random_windows" and (arch == "ngram" or data_args.streaming):
        raise ValueError(
            "`sampling`='random_windows' reads windows at random offsets of the whole training token stream, "
            "held in memory, for gradient training: not with --streaming (use sampling='blocks', which "
            f"shuffles the stream in a buffer) nor arch 'ngram' (fitted by counting); got arch={arch!r}, "
            f"streaming={data_args.streaming}."
        )


def write_final_folder(model, tokenizer, folder: Path, loss_png: Path | None) -> None:
    """The weights, config, model code, tokenizer files and loss curve of `final/` into `folder`
    (a staging folder: the caller renames it to `final/`; the model card goes in last)."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if loss_png is not None:
        shutil.copy2(loss_png, folder / "loss.png")  # the card shows it on the Hub


def forget_previous_run_settings() -> None:
    """Let this run choose its own precision and accumulation in a process that already trained.

    accelerate keeps them process-wide: a second `train()` with another `mixed_precision` (a
    notebook, the GPU sweep, the tests) would fail with "AcceleratorState has already been
    initialized". The distributed state (`PartialState`: process group, rank, device) is kept.
    """
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()


def budget_spent(start: float, budget_s: float, accelerator: Accelerator) -> bool:
    """Whether `budget_s` seconds have passed since `start`, as the main process sees it (every
    process stops at the same step)."""
    spent = torch.tensor(float(time.perf_counter() - start >= budget_s), device=accelerator.device)
    if accelerator.num_processes > 1:
        spent = accelerator.reduce(spent, reduction="sum") > 0
    return bool(spent)


def projected_steps(start_step: int, step: int, max_steps: int, elapsed: float, budget_s: float) -> int:
    """The step at which a run with a wall-clock budget will stop, at the pace so far (evaluations
    included): `max_steps` if that comes first. The progress bar's total, so its ETA is the budget's."""
    done = step - start_step
    if done <= 0 or elapsed <= 0:
        return max_steps
    return max(step, min(max_steps, start_step + int(done * budget_s / elapsed)))


def fit_ngram(model: HfLmNGramForCausalLM, train_blocks, streaming: bool) -> HfLmNGramForCausalLM:
    """Count the n-grams of the training blocks in one streaming pass (`HfLmNGramForCausalLM.fit`).

    The in-memory blocks are the packed corpus in order, so they are counted as one sequence and
    n-grams span block boundaries as they span the text; streamed blocks are counted block by block.
    """
    start = time.perf_counter()
    if streaming:
        sequences = (block["input_ids"] for block in train_blocks.epoch(0))
    else:
        sequences = [train_blocks["input_ids"].reshape(-1)]
    fitted = HfLmNGramForCausalLM.fit(tqdm(sequences, desc="counting n-grams", unit="seq"), model.config)
    logger.info(
        "Fitted the order-%d %s n-gram model in %.1f s: %s n-grams by order.",
        fitted.config.order,
        fitted.config.smoothing,
        time.perf_counter() - start,
        fitted.config.num_ngrams,
    )
    return fitted


def carried_state_tensors(carried: list[RecurrentCache | None], rank: int) -> dict[str, torch.Tensor]:
    """This process's truncated-BPTT states as named CPU tensors, for the checkpoint."""
    tensors = {}
    for micro, cache in enumerate(carried):
        if cache is None or cache.state is None:
            continue
        for i, part in enumerate(cache.state):
            tensors[f"tbptt.rank{rank}.micro{micro}.state{i}"] = part.detach().cpu()
        tensors[f"tbptt.rank{rank}.micro{micro}.seen_tokens"] = torch.tensor(cache.seen_tokens)
    return tensors


def restore_carried_states(
    tensors: dict[str, torch.Tensor], rank: int, accum: int, device: torch.device
) -> list[RecurrentCache | None]:
    """The inverse of `carried_state_tensors` for this process (None where a lane had no state yet)."""
    carried: list[RecurrentCache | None] = [None] * accum
    for micro in range(accum):
        prefix = f"tbptt.rank{rank}.micro{micro}."
        parts = sorted(
            (int(k[len(prefix) + len("state") :]), v)
            for k, v in tensors.items()
            if k.startswith(prefix + "state")
        )
        if parts:
            carried[micro] = RecurrentCache(
                tuple(v.to(device) for _, v in parts), int(tensors[prefix + "seen_tokens"])
            )
    return carried


def optimizer_kwargs(devices) -> dict:
    """AdamW's implementation for parameters on `devices` (an iterable of `torch.device`).

    The fused kernel (one launch updates every parameter; nanoGPT's `configure_optimizers`) when
    every parameter is on a CUDA GPU; otherwise torch's default (foreach on CPU).
    """
    types = {torch.device(d).type for d in devices}
    return {"fused": True} if types == {"cuda"} else {}


def build_optimizer(model, train_args: TrainArguments):
    """AdamW decaying the 2-D matrices only; biases and norm gains stay undecayed (nanoGPT).

    Embedding matrices are 2-D and are decayed, as in nanoGPT's `configure_optimizers`. Fused
    (`optimizer_kwargs`) when the model is on a CUDA GPU: build it on its device first. The cosine
    schedule ends at `min_lr_rate` times the peak rate (nanoGPT's min_lr; 0 by default).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": train_args.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    kwargs = optimizer_kwargs(p.device for p in params)
    logger.info("AdamW: %s.", "fused (CUDA)" if kwargs.get("fused") else "torch's default implementation")
    optimizer = torch.optim.AdamW(
        groups, lr=train_args.learning_rate, betas=(train_args.adam_beta1, train_args.adam_beta2), **kwargs
    )
    return optimizer, build_scheduler(optimizer, train_args)


def build_scheduler(optimizer, train_args: TrainArguments):
    """Linear warmup, then the `lr_scheduler` schedule to `max_steps`, from each group's `initial_lr`."""
    name = {"constant": "constant_with_warmup"}.get(train_args.lr_scheduler, train_args.lr_scheduler)
    specific = None
    if name == "cosine" and train_args.min_lr_rate > 0:
        name, specific = "cosine_with_min_lr", {"min_lr_rate": train_args.min_lr_rate}
    return get_scheduler(
        name,
        optimizer,
        num_warmup_steps=train_args.warmup_steps,
        num_training_steps=train_args.max_steps,
        scheduler_specific_kwargs=specific,
    )


def configure_tf32(enabled: bool, device: torch.device) -> bool:
    """Let float32 matrix products (and cuDNN convolutions) run in TF32 on a CUDA device.

    TF32 keeps fp32's range with a 10-bit mantissa: on Ampere and later GPUs fp32 matmuls run on
    tensor cores, several times faster (nanoGPT sets the same flags). A process-wide setting of
    torch; nothing changes on a CPU. Returns whether TF32 is on.
    """
    if not (enabled and torch.device(device).type == "cuda"):
        return False
    torch.backends.cuda.matmul.allow_tf32 = True  # = torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    return True


def compile_model(model: torch.nn.Module, train_args: TrainArguments) -> torch.nn.Module:
    """`torch.compile(model)` with the run's backend and mode; the compiled module shares `model`'s
    parameters (its state_dict names carry an `_orig_mod.` prefix: save `model`, never it)."""
    kwargs = {"backend": train_args.torch_compile_backend}
    if train_args.torch_compile_mode is not None:
        kwargs["mode"] = train_args.torch_compile_mode
    return torch.compile(model, **kwargs)


def forward_loss(model, batch: dict[str, torch.Tensor], extra_inputs: dict):
    """The model's outputs on a micro-batch, `loss` its token mean.

    A batch of random windows (`RandomWindows`) carries "targets" (B, T), the next token of every
    input position: the loss is scored against them without a shift (`lm_loss`, the model's own
    fp32 cross-entropy). Other batches carry `labels` and the model computes its loss.
    """
    targets = batch.get("targets")
    if targets is None:
        return model(**batch, **extra_inputs)
    outputs = model(**{k: v for k, v in batch.items() if k != "targets"}, **extra_inputs)
    outputs.loss = lm_loss(outputs.logits, targets, shift=False)
    return outputs


# ----------------------------------------------------------------------------------------------
# Evaluation and logging
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def evaluate(
    model, blocks: dict[str, torch.Tensor], accelerator: Accelerator, batch_size: int, max_batches=None
):
    """Mean next-token loss over the eval blocks, sharded round-robin over processes and gathered.

    Every block has `block_size - 1` predicted tokens, so the block-weighted mean of per-batch
    means is the token mean.
    """
    model.eval()
    n = eval_block_count(len(blocks["input_ids"]), batch_size, accelerator.num_processes, max_batches)
    mine = torch.arange(accelerator.process_index, n, accelerator.num_processes)
    total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)  # (loss sum, blocks)
    for start in range(0, len(mine), batch_size):
        idx = mine[start : start + batch_size]
        batch = {k: v[idx].to(accelerator.device) for k, v in blocks.items()}  # (B, T)
        loss = model(**batch, labels=batch["input_ids"]).loss
        total[0] += loss.double() * len(idx)  # stays on the device: no host sync per batch
        total[1] += len(idx)
    total = accelerator.reduce(total, reduction="sum")
    model.train()
    mean = (total[0] / total[1]).item() if total[1] > 0 else float("nan")
    return mean, math.exp(mean) if mean < 700 else float("inf")


def eval_block_count(num_blocks: int, batch_size: int, world: int, max_batches: int | None) -> int:
    """How many of the eval blocks `evaluate` scores: the first ones, up to `max_batches` per process."""
    return num_blocks if max_batches is None else min(num_blocks, max_batches * batch_size * world)


def _characters_and_words(tokenizer, sequences: list[list[int]]) -> tuple[list[int], list[int]]:
    texts = tokenizer.batch_decode(sequences, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    specials = sorted(set(tokenizer.all_special_tokens), key=len, reverse=True)
    out_chars, out_words = [], []
    for text in texts:
        for token in specials:  # a document break: one separator character, and no word
            text = text.replace(token, "\n")
        out_chars.append(len(text))
        out_words.append(len(text.split()))
    return out_chars, out_words


def eval_text_units(tokenizer, blocks: dict[str, torch.Tensor], num_blocks: int) -> dict[str, int]:
    """The scored tokens of the first `num_blocks` eval blocks, and the characters and words they spell.

    A block's loss scores its tokens 1..T-1 (token 0 is context only). Their text is the decoded
    block minus its decoded first token: characters are counted as the difference of the two
    lengths, words as the difference of the two whitespace-split counts. So a word is counted in
    the block where it starts, once, even when its tokens run on into the next block (whose token
    0 is context). A special token (the EOS between documents) counts as one separator
    character, as the blank line between two paragraphs of a text file is one document break.
    Exact for byte-level BPE and character tokenizers (but for a multi-byte character split by
    the first token); for WordPiece and Unigram the decoded spacing makes it a close estimate.

    Returns:
        `{"tokens": num_blocks * (T - 1), "characters": ..., "words": ...}`.
    """
    ids = blocks["input_ids"][:num_blocks].tolist()
    chars, words = _characters_and_words(tokenizer, ids)
    first_chars, first_words = _characters_and_words(tokenizer, [block[:1] for block in ids])
    block_size = blocks["input_ids"].shape[1]
    return {
        "tokens": num_blocks * (block_size - 1),
        "characters": sum(chars) - sum(first_chars),
        "words": sum(words) - sum(first_words),
    }


def bits_metrics(loss: float, units: dict[str, int]) -> dict[str, float | None]:
    """Held-out bits per token, character and word from the mean loss (nats per scored token).

    The total information is `loss * tokens / ln 2` bits, shared out over the characters and words
    those tokens spell (None where there are none).
    """
    nll_sum = loss * units["tokens"]
    return {
        "eval_bits_per_token": bits_per_unit(nll_sum, units["tokens"]),
        "eval_bits_per_character": bits_per_unit(nll_sum, units["characters"]),
        "eval_bits_per_word": bits_per_unit(nll_sum, units["words"]),
    }


class CsvLog:
    """`metrics.csv` written by the main process; a resumed run drops the rows after its step.

    Rows are appended as they come; the file is rewritten (atomically) only when rows are dropped,
    at a resume or a rollback. A row cut short by a kill while it was appended is dropped on reading.
    """

    def __init__(self, path: Path, resume_step: int | None, enabled: bool) -> None:
        self.path, self.enabled, self.rows = path, enabled, []
        if resume_step is not None and path.is_file():
            self.rows = [r for r in _read_csv_rows(path) if int(r["step"]) <= resume_step]
        self._rewrite()

    def _rewrite(self) -> None:
        if self.enabled:
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=CSV_FIELDS)
            writer.writeheader()
            writer.writerows(self.rows)
            atomic_write_text(self.path, text.getvalue())

    def truncate(self, step: int) -> None:
        """Drop the rows after `step` (a rollback to the checkpoint of `step`)."""
        self.rows = [r for r in self.rows if int(r["step"]) <= step]
        self._rewrite()

    def write(self, row: dict) -> None:
        row = {k: row.get(k, "") for k in CSV_FIELDS}
        self.rows.append(row)
        if self.enabled:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=CSV_FIELDS).writerow(row)

    def curves(self) -> dict[str, tuple[list[int], list[float]]]:
        curves = {}
        for name, column in (("train", "loss"), ("eval", "eval_loss")):
            points = [
                (int(r["step"]), float(r[column])) for r in self.rows if r.get(column) not in ("", None)
            ]
            if points:
                curves[name] = ([s for s, _ in points], [v for _, v in points])
        return curves


def _read_csv_rows(path: Path) -> list[dict]:
    """The rows of a `metrics.csv`, without a last line cut short (no newline: a kill mid-append) or
    a row whose step is not an integer."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return [r for r in csv.DictReader(io.StringIO(text, newline="")) if (r.get("step") or "").isdigit()]


def _trackers(train_args: TrainArguments) -> list[str]:
    trackers = []
    if "tensorboard" in train_args.trackers:
        if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
            trackers.append("tensorboard")
        else:
            logger.warning("report_to has 'tensorboard' but the package is not installed: skipped.")
    return trackers


def _hparams(*args_objects) -> dict:
    """Flat scalar hyperparameters for the trackers (tensorboard takes scalars and strings only)."""
    return {
        key: value if isinstance(value, (int, float, str, bool)) else str(value)
        for key, value in run_settings(*args_objects).items()
    }


class BestModel:
    """The best evaluation so far by `metric_for_best_model`, its weights kept under `root`.

    `root` is `output_dir/best`. Every better evaluation (strictly: a tie keeps the earlier one,
    as nanoGPT's `<`) writes the plain model's weights and config atomically to
    `root/checkpoint-{step}` with `save_checkpoint` (no optimizer, no RNG; its `state.json` extra is
    the record). The record `{"step", "metric", "value", "greater_is_better", "metrics"}` rides in
    every training checkpoint (`extra["best"]`), so a resumed run starts from the best of its own
    past, not from a best the interrupted run wrote after the checkpoint it resumes from (that
    future is replayed, and its evaluations decide again).

    `prune` keeps the best folders still needed: the current best, and the best recorded by each
    kept training checkpoint (any of them may be resumed). It runs after every new best, after
    every checkpoint save (whose `keep_last` may drop a checkpoint and with it the need of an old
    best) and at resume. So pruning checkpoints never loses the weights of a best that a run, the
    current one or a resumed one, may still hand to `final/`. Only the main process writes.
    """

    def __init__(
        self,
        root: Path,
        checkpoint_dir: Path,
        metric: str,
        greater_is_better: bool,
        is_main_process: bool,
        run_id: str | None = None,
    ) -> None:
        self.root, self.checkpoint_dir = root, checkpoint_dir
        self.metric, self.greater_is_better, self.is_main_process = metric, greater_is_better, is_main_process
        self.run_id = run_id  # its best folders are tagged with it; another run's are never pruned
        self.record: dict | None = None

    def improves(self, value: float | None) -> bool:
        """Whether `value` of the metric beats the best so far (a non-finite or missing value never does)."""
        if value is None or not math.isfinite(value):
            return False
        if self.record is None:
            return True
        best = self.record["value"]
        return value > best if self.greater_is_better else value < best

    def update(self, step: int, evaluation: dict, model: torch.nn.Module) -> bool:
        """Record `evaluation` of the weights of `model` at `step` if it is the best so far; returns whether."""
        value = evaluation.get(self.metric)
        if not self.improves(value):
            return False
        self.record = {
            "step": step,
            "metric": self.metric,
            "value": value,
            "greater_is_better": self.greater_is_better,
            "metrics": dict(evaluation),
        }
        if self.is_main_process:
            save_checkpoint(
                self.root, model=model, step=step, save_rng=False, extra=self.record, run_id=self.run_id
            )
            self.prune()
        logger.info("New best model at step %d: %s %.4f (saved to %s).", step, self.metric, value, self.path)
        return True

    def restore(self, record: dict | None) -> None:
        """Continue from the best recorded in the resumed checkpoint (None: none yet), then prune."""
        if record is not None and (record["metric"], record["greater_is_better"]) != (
            self.metric,
            self.greater_is_better,
        ):
            logger.warning(
                "The checkpoint's best model was picked by %s (greater_is_better=%s), this run picks by %s "
                "(greater_is_better=%s): the best is chosen afresh from the resumed step on.",
                record["metric"],
                record["greater_is_better"],
                self.metric,
                self.greater_is_better,
            )
            record = None
        self.record = record
        if self.is_main_process:
            self.prune()

    def prune(self) -> None:
        """Delete the best folders that neither the current best nor any kept checkpoint records."""
        keep = {self.record["step"]} if self.record is not None else set()
        for _, path in list_checkpoints(self.checkpoint_dir):
            try:
                recorded = (checkpoint_state(path).get("extra") or {}).get("best")
            except CorruptCheckpointError:
                continue  # a damaged checkpoint is never resumed: its best is not needed
            if recorded is not None:
                keep.add(recorded["step"])
        for step in remove_checkpoints_except(self.root, keep, run_id=self.run_id):
            logger.info("Removed the best model of step %d: no checkpoint records it any more.", step)

    @property
    def path(self) -> Path | None:
        """The folder of the best weights (None before the first evaluation)."""
        return None if self.record is None else self.root / checkpoint_name(self.record["step"])


def card_metrics(evaluation: dict, step: int, tokens_seen: int, objective: str) -> dict[str, object]:
    """The evaluation table of the model card."""
    if objective in SEQ2SEQ_OBJECTIVES:
        rows = {
            "held-out denoising loss (nats/target token)": evaluation["eval_loss"],
            "held-out target-token accuracy (teacher forced)": evaluation["eval_token_accuracy"],
        }
    elif objective == "mlm":
        rows = {
            "held-out masked-token loss (nats/token)": evaluation["eval_loss"],
            "held-out masked-token accuracy": evaluation["eval_mlm_accuracy"],
            "held-out pseudo-perplexity (Salazar et al., 2020)": evaluation["eval_pseudo_perplexity"],
        }
    else:
        rows = {
            "held-out loss (nats/token)": evaluation["eval_loss"],
            "held-out perplexity": evaluation["eval_perplexity"],
            "held-out bits per token": evaluation["eval_bits_per_token"],
            "held-out bits per character": evaluation["eval_bits_per_character"],
            "held-out bits per word (whitespace-separated)": evaluation["eval_bits_per_word"],
        }
    return {**rows, "training steps": step, "training tokens seen": tokens_seen}


def best_card_rows(best: BestModel | None, step: int, last: dict) -> dict[str, object]:
    """The card's rows on which weights final/ holds: the best evaluation's (and the last one's
    metric beside it), or none when the last weights are kept."""
    if best is None or best.record is None:
        return {}
    return {
        "weights kept": f"the best evaluation by {best.metric}, at step {best.record['step']} of {step}",
        f"last evaluation (step {step}): {best.metric}": last.get(best.metric),
    }


def card_hyperparameters(
    data_args: DataArguments,
    train_args: TrainArguments,
    world_size: int,
    global_batch: int,
    runtime: dict[str, bool] | None = None,
    history: list[dict] | None = None,
) -> dict[str, object]:
    """The training settings a reader needs to reproduce the run, for the model card's table.

    `runtime`: the device-dependent settings the run chose (fused AdamW, TF32), name -> on/off.
    `history`: settings changed when the run was resumed (`{"step", "changed": {name: [old, new]}}`);
    the table then shows the values the run ended with and, in one row, the earlier ones.
    """
    changes = "; ".join(
        f"{name} {old} until step {entry['step']}, then {new}"
        for entry in history or []
        for name, (old, new) in entry["changed"].items()
    )
    return ({"settings changed on resume": changes} if changes else {}) | {
        "training steps (optimizer updates)": train_args.max_steps,
        "per-device batch size (blocks)": train_args.per_device_batch_size,
        "gradient accumulation steps": train_args.gradient_accumulation_steps,
        "world size (processes)": world_size,
        "global batch size (blocks)": global_batch,
        "block size (tokens)": data_args.block_size,
        "tokens per update": global_batch * data_args.block_size,
        "optimizer": f"AdamW (betas {train_args.adam_beta1}, {train_args.adam_beta2})",
        "peak learning rate": train_args.learning_rate,
        "learning-rate schedule": train_args.lr_scheduler
        + (f" to {train_args.min_lr_rate:g} x peak" if train_args.min_lr_rate else ""),
        "warmup steps": train_args.warmup_steps,
        "weight decay (matrices only)": train_args.weight_decay,
        "gradient clipping (max norm)": train_args.max_grad_norm or "off",
        "precision": "fp32" if train_args.mixed_precision == "no" else f"{train_args.mixed_precision} mixed",
        "seed": train_args.seed,
        "data sampling": (
            f"random windows of {data_args.block_size} + 1 tokens (nanoGPT's get_batch)"
            if train_args.sampling == "random_windows"
            else "packed blocks, shuffled each epoch"
        ),
        "torch.compile": (
            f"{train_args.torch_compile_backend}, mode {train_args.torch_compile_mode or 'default'}"
            if train_args.torch_compile
            else "off"
        ),
        **{name: "on" if value else "off" for name, value in (runtime or {}).items()},
        "objective": (
            f"masked LM ({train_args.mlm_probability:.0%} of tokens, {train_args.masking} masking, 80/10/10 rule, "
            "a fresh mask per batch)"
            if train_args.objective == "mlm"
            else {
                "span_corruption": "T5 span corruption (15% noise, mean span 3, sentinels)",
                "bart_denoising": "BART denoising (text infilling 30%, Poisson(3) spans; sentence permutation)",
            }.get(train_args.objective, "causal LM (next token)")
        ),
    }


# ----------------------------------------------------------------------------------------------
# Divergence
# ----------------------------------------------------------------------------------------------


def shared_run_id(accelerator: Accelerator) -> str:
    """A fresh run id (`training.checkpoint.new_run_id`), the main process's on every process."""
    run_id = [new_run_id()]
    if accelerator.num_processes > 1:
        broadcast_object_list(run_id, from_process=0)
    return run_id[0]


class DivergenceGuard:
    """Whether an update's loss may be applied, and the record of the run's rollbacks.

    `problem(loss)` names what is wrong with a loss: non-finite, or (with `spike_threshold`) above
    `spike_threshold` times the mean of the last `spike_window` applied losses (a spike is judged
    only once that many have been seen). The losses of applied updates go to `record`. With
    `rollback_on_divergence` the loop rolls back on a problem (`rollback_to_last_good`), at most
    `max_rollbacks` times in the run.

    The loss window and the rollbacks ride in every checkpoint (`state()`, restored by `restore`),
    so a resumed run judges its losses and counts its rollbacks as the uninterrupted run does. A
    rollback restores the window of the checkpoint it goes back to, but keeps the rollbacks: they
    happened, and are counted in `final_metrics.json`.
    """

    def __init__(self, train_args: TrainArguments) -> None:
        self.rollback = train_args.rollback_on_divergence
        self.threshold, self.window = train_args.spike_threshold, train_args.spike_window
        self.skip, self.max_rollbacks = train_args.rollback_skip_batches, train_args.max_rollbacks
        self.losses: list[float] = []  # the last `window` applied losses, oldest first
        self.events: list[dict] = []  # one per rollback: step, problem, restored step, skipped batches

    def problem(self, loss: float) -> str | None:
        """Why the update of this (process-averaged) loss must not be applied; None if it may."""
        if not math.isfinite(loss):
            return f"Non-finite training loss ({loss})"
        if self.threshold is not None and len(self.losses) == self.window:
            mean = sum(self.losses) / self.window
            if loss > self.threshold * mean:
                return f"Loss spike ({loss:.4f} > {self.threshold:g} x {mean:.4f}, the mean of the last {self.window})"
        return None

    def record(self, loss: float) -> None:
        """The loss of an applied update."""
        if self.threshold is not None:
            self.losses = [*self.losses, loss][-self.window :]

    @property
    def skipped_batches(self) -> int:
        """Global batches read but not trained on, over every rollback."""
        return sum(event["skipped_batches"] for event in self.events)

    def state(self) -> dict:
        """What a checkpoint keeps (nothing when rollbacks are off)."""
        return {"rollbacks": self.events, "loss_window": self.losses} if self.rollback else {}

    def restore(self, extra: dict) -> None:
        """Continue from a checkpoint's `extra` (a resume)."""
        self.events = list(extra.get("rollbacks", []))
        self.losses = list(extra.get("loss_window", []))


def rollback_to_last_good(
    guard: DivergenceGuard,
    problem: str,
    offending_step: int,
    *,
    checkpoint_dir: Path,
    run_id: str | None,
    model: torch.nn.Module,
    optimizer,
    scheduler,
    scaler,
    rank: int,
    data,
    accum: int,
) -> dict:
    """Reload this run's last good checkpoint and read `guard.skip` global batches past the offending one.

    PaLM (Chowdhery et al., 2022, section 5.1) restarted ~100 steps before a loss spike and skipped
    the 200-500 batches around it. Here the run goes back to its newest intact checkpoint (weights,
    optimizer, scheduler, loss scale, RNG streams, loss window) but not its data: the data goes on
    from the batch after the offending one, `guard.skip` batches further. So every batch read since
    the checkpoint, the offending one included, is skipped, and which ones is a pure function of
    the data position: a resumed run skips the same ones. `data` is this process's micro-batch
    iterator, just past the offending update.

    Returns:
        `load_checkpoint`'s dict plus "skipped": the global batches read since the checkpoint that
        were not trained on (the rollback's share of `data_state["skipped_batches"]`).

    Raises:
        TrainingDivergedError: rollbacks are used up, or this run has no checkpoint to go back to.
    """
    if len(guard.events) >= guard.max_rollbacks:
        raise TrainingDivergedError(
            f"{problem} at step {offending_step}, after {len(guard.events)} rollbacks (max_rollbacks): stopped. "
            "Lower the learning rate, raise warmup_steps or clip gradients."
        )
    optimizer.zero_grad(set_to_none=True)  # the offending update's gradients
    back = load_latest_checkpoint(
        checkpoint_dir,
        run_id=run_id,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
        restore_rng=True,
        rank=rank,
    )
    if back is None:
        raise TrainingDivergedError(
            f"{problem} at step {offending_step}, before this run's first checkpoint: nothing to roll back to. "
            "Lower the learning rate or raise warmup_steps (or save_every sooner)."
        )
    for _ in range(guard.skip * accum):
        next(data)
    skipped = offending_step - back["step"] + guard.skip
    guard.losses = list((back["extra"] or {}).get("loss_window", []))
    guard.events.append(
        {
            "step": offending_step,
            "problem": problem,
            "restored_step": back["step"],
            "skipped_batches": skipped,
        }
    )
    logger.warning(
        "%s at step %d: rolled back to %s (step %d), skipping %d global batches (rollback %d of at most %d).",
        problem,
        offending_step,
        back["path"],
        back["step"],
        skipped,
        len(guard.events),
        guard.max_rollbacks,
    )
    return back | {"skipped": skipped}


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


def train(data_args: DataArguments, model_args: ModelArguments, train_args: TrainArguments) -> dict:
    """Train a model; returns the final metrics (also written to `final_metrics.json`).

    The run owns `output_dir` while it runs (`training.run_folder`): the main process holds its
    lock, and a run that does not resume refuses a folder holding another run's outputs unless
    `overwrite_output_dir`.

    Raises:
        TrainingDivergedError: a non-finite training loss with `stop_on_nan`.
        FileNotFoundError: `resume="true"` and no checkpoint in `output_dir/checkpoints`.
        RunFolderBusyError: another live run holds `output_dir`.
        ValueError: fp16 without a CUDA GPU; a folder with another run's outputs; a checkpoint that
            cannot be resumed exactly (another model config, global batch size, seed, data mode,
            data or objective settings, or `max_steps` below its step).
    """
    check_arch(data_args, model_args, train_args)
    output_dir = Path(train_args.output_dir)
    if int(os.environ.get("RANK", "0")) != 0:  # the other processes follow the main one
        return _train(data_args, model_args, train_args)
    with RunLock(output_dir):
        # --resume true/auto continues the folder's own run (or, killed before its first
        # checkpoint, starts it again): only a run told not to resume must not mix with one
        claim_output_dir(output_dir, train_args.resume != "false", train_args.overwrite_output_dir)
        return _train(data_args, model_args, train_args)


def _train(data_args: DataArguments, model_args: ModelArguments, train_args: TrainArguments) -> dict:
    """The run of `train`, in a folder it owns."""
    output_dir = Path(train_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_dir = output_dir / "checkpoints"
    trackers = _trackers(train_args)
    forget_previous_run_settings()
    accelerator = Accelerator(
        # without `cpu=True` accelerate ignores torchrun's WORLD_SIZE on a machine with no GPU and
        # every process trains alone; with it, they join one gloo process group (MULTI_CPU)
        cpu=not torch.cuda.is_available(),
        mixed_precision=train_args.mixed_precision,
        gradient_accumulation_steps=train_args.gradient_accumulation_steps,
        log_with=trackers or None,
        project_dir=str(output_dir),
    )
    world, rank = accelerator.num_processes, accelerator.process_index
    streaming = data_args.streaming
    logger.info("Process %d of %d on %s (%s).", rank, world, accelerator.device, accelerator.distributed_type)
    set_seed(train_args.seed)  # the same split, tokenizer and initial weights on every process
    start_time = time.perf_counter()
    tf32 = configure_tf32(train_args.tf32, accelerator.device)
    logger.info("TF32 matmuls: %s.", "on" if tf32 else f"off ({accelerator.device.type})")

    tokenizer, train_blocks, eval_blocks, description = prepare_data(data_args, train_args, accelerator)
    model = build_model(model_args, data_args, tokenizer, train_args.objective)
    mlm = train_args.objective == "mlm"
    seq2seq = train_args.objective in SEQ2SEQ_OBJECTIVES
    # an n-gram model is fitted by counting, in one pass: no optimizer, steps or checkpoints
    ngram = model_args.arch == "ngram" and not model_args.init_from
    tbptt = train_args.tbptt
    collator = build_collator(train_args, tokenizer)
    seed_process_rngs(train_args.seed, rank)  # then a dropout stream of each process's own
    if ngram:
        model = fit_ngram(model, train_blocks, streaming).to(accelerator.device)
        optimizer = scheduler = None
    else:
        # on its device before the optimizer is built, which picks its implementation for it (fused
        # on a GPU); `prepare` would move it there anyway
        model = model.to(accelerator.device)
        optimizer, scheduler = build_optimizer(model, train_args)
    # the characters and words the causal loss scores (bits per character/word); other objectives
    # report their own metrics, so their eval blocks are not decoded
    eval_units = (
        eval_text_units(
            tokenizer,
            eval_blocks,
            eval_block_count(
                len(eval_blocks["input_ids"]),
                train_args.per_device_batch_size,
                world,
                train_args.eval_batches,
            ),
        )
        if train_args.objective == "clm"
        else None
    )

    global_batch = train_args.per_device_batch_size * world * train_args.gradient_accumulation_steps
    # resume before `prepare`: the plain objects load the states, and DDP then broadcasts rank 0's weights
    start_step, epoch, update, data_offset = 0, 0, 0, 0
    # the newest intact checkpoint of the run that saved last: a damaged one is passed over with a
    # warning naming its file (CorruptCheckpointError when none is intact)
    state = (
        load_latest_checkpoint(
            checkpoint_dir,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            scaler=accelerator.scaler,  # None unless fp16 on a GPU
            restore_rng=True,
            rank=rank,  # each process restores its own random streams
        )
        if train_args.resume != "false" and not ngram
        else None
    )
    checkpoint = state["path"] if state is not None else None
    kept = (state["extra"] or {}) if state is not None else {}  # what the loop keeps in a checkpoint
    settings_history: list[dict] = []  # settings changed on resume: what the card must report
    carried: list[RecurrentCache | None] = [None] * train_args.gradient_accumulation_steps  # tbptt states
    if train_args.resume == "true" and checkpoint is None:
        raise FileNotFoundError(f"resume=true but {checkpoint_dir} holds no complete checkpoint.")
    # a resumed run keeps its id: its checkpoints are pruned with (and only with) those it wrote before
    run_id = state["run_id"] if state is not None else shared_run_id(accelerator)
    guard = DivergenceGuard(train_args)
    best = (
        BestModel(
            output_dir / "best",
            checkpoint_dir,
            train_args.metric_for_best_model,
            train_args.greater_is_better,
            accelerator.is_main_process,
            run_id=run_id,
        )
        if train_args.load_best_model_at_end and not ngram
        else None
    )
    if checkpoint is not None:
        start_step, data_state = state["step"], state["data_state"]
        data_offset = data_state.get("skipped_batches", 0)  # batches skipped by rollbacks
        guard.restore(kept)
        if tbptt:
            carried = restore_carried_states(
                state["tensors"], rank, train_args.gradient_accumulation_steps, accelerator.device
            )
        epoch, update = data_state["epoch"], data_state["batch_in_epoch"]
        # the data position counts global batches of one size in one seeded order; the split of a
        # global batch between processes and accumulation may change, its size, the seed and the
        # kind of data order (a permutation, or a stream through a shuffle buffer) may not
        for key, saved, now in (
            ("global_batch_size", data_state["global_batch_size"], global_batch),
            ("seed", data_state["seed"], train_args.seed),
            ("streaming", data_state.get("streaming", False), streaming),
            ("sampling", data_state.get("sampling", "blocks"), train_args.sampling),
            (
                "shuffle_buffer_size",
                data_state.get("shuffle_buffer_size"),
                data_args.shuffle_buffer_size if streaming else None,
            ),
        ):
            if saved != now:
                raise ValueError(
                    f"Cannot resume {checkpoint} exactly: it was trained with {key}={saved}, this run has {now}. "
                    "Keep per_device_batch_size * processes * gradient_accumulation_steps, seed, streaming, "
                    "sampling and shuffle_buffer_size, or start a new run (a fresh output_dir, or resume=false)."
                )
        scheduler, applied = apply_resume_settings(
            kept.get("settings"),
            train_args,
            data_args,
            optimizer,
            scheduler,
            start_step,
            checkpoint,
        )
        settings_history = list(kept.get("settings_history", []))
        if applied:
            settings_history.append({"step": start_step, "changed": {k: list(v) for k, v in applied.items()}})
        logger.info("Resumed from %s: step %d, epoch %d, update %d.", checkpoint, start_step, epoch, update)
    if best is not None:
        # the best of the resumed run's own past (none for a fresh run); drops best folders the
        # interrupted run wrote after its checkpoint
        best.restore(kept.get("best"))

    if streaming:
        stream = StreamingGlobalBatches(
            train_blocks,
            train_args.per_device_batch_size,
            world,
            rank,
            train_args.gradient_accumulation_steps,
        )
        stream.set_position(epoch, update)
        data, updates_per_epoch = iter(stream), None  # an epoch's length is known only once read
    elif train_args.sampling == "random_windows":
        tokens = train_blocks["input_ids"].reshape(-1)  # (N,) the packed training stream
        windows = RandomWindows(
            tokens,
            data_args.block_size,
            train_args.per_device_batch_size,
            world,
            rank,
            train_args.gradient_accumulation_steps,
            train_args.seed,
            eos_token_id=tokenizer.eos_token_id if data_args.document_mask else None,
        )
        windows.set_position(start_step + data_offset)
        # no epochs: the "epoch" column counts passes of as many window tokens as the stream holds
        data, updates_per_epoch = iter(windows), max(1, len(tokens) // (global_batch * data_args.block_size))
    else:
        sampler = GlobalBatchSampler(
            len(train_blocks["input_ids"]),
            train_args.per_device_batch_size,
            world,
            rank,
            train_args.gradient_accumulation_steps,
            train_args.seed,
            lanes=tbptt,
        )
        sampler.set_position(epoch, update)
        # a private generator: a DataLoader draws a base seed when it starts iterating, which would
        # otherwise consume the global torch RNG (and the dropout stream) differently after a resume
        loader = torch.utils.data.DataLoader(
            _Blocks(train_blocks),
            batch_sampler=sampler,
            generator=torch.Generator().manual_seed(train_args.seed),
        )
        data, updates_per_epoch = iter(loader), sampler.updates_per_epoch
    # the loader and the scheduler are not prepared: the sampler shards the data itself, and a
    # prepared scheduler would step `num_processes` times per update
    if not ngram:
        model, optimizer = accelerator.prepare(model, optimizer)
    # the plain module (no DDP, no compile wrapper) for evaluation, checkpoints and final/; the
    # compiled module only runs the training forward. (`accelerator.unwrap_model` of a compiled
    # DDP model would re-point the compiled module at the plain one, dropping DDP's gradient sync.)
    raw_model = accelerator.unwrap_model(model)
    compiled = train_args.torch_compile and not ngram
    if compiled:
        logger.info(
            "torch.compile: backend %s, mode %s (the first steps compile).",
            train_args.torch_compile_backend,
            train_args.torch_compile_mode or "default",
        )
    forward_model = compile_model(model, train_args) if compiled else model
    eval_model = compile_model(raw_model, train_args) if compiled else raw_model
    if trackers:
        accelerator.init_trackers("tensorboard", config=_hparams(data_args, model_args, train_args))
    csv_log = CsvLog(
        output_dir / "metrics.csv",
        resume_step=start_step if checkpoint is not None else None,
        enabled=accelerator.is_main_process and "csv" in train_args.trackers,
    )
    tokens_per_update = global_batch * data_args.block_size
    logger.info(
        "%s training blocks, %d eval blocks; global batch %d = %d per device x %d processes x %d accumulation; "
        "%s updates per epoch.",
        "streamed" if streaming else f"{len(train_blocks['input_ids']):,}",
        len(eval_blocks["input_ids"]),
        global_batch,
        train_args.per_device_batch_size,
        world,
        train_args.gradient_accumulation_steps,
        "unknown (streamed)" if updates_per_epoch is None else updates_per_epoch,
    )

    def run_evaluation() -> dict[str, float | None]:
        if seq2seq:
            return evaluate_seq2seq(
                accelerator.unwrap_model(model),
                eval_blocks,
                collator,
                accelerator,
                train_args.per_device_batch_size,
                eval_block_count(
                    len(eval_blocks["input_ids"]),
                    train_args.per_device_batch_size,
                    world,
                    train_args.eval_batches,
                ),
                train_args.seed,
            )
        if mlm:
            return evaluate_mlm(
                accelerator.unwrap_model(model),
                eval_blocks,
                collator,
                accelerator,
                train_args.per_device_batch_size,
                eval_block_count(
                    len(eval_blocks["input_ids"]),
                    train_args.per_device_batch_size,
                    world,
                    train_args.eval_batches,
                ),
                train_args.seed,
                train_args.pseudo_perplexity_blocks,
            )
        loss, perplexity = evaluate(
            eval_model,  # compiled with --torch_compile: (b, T) batches, a smaller last one
            eval_blocks,
            accelerator,
            train_args.per_device_batch_size,
            train_args.eval_batches,
        )
        return {"eval_loss": loss, "eval_perplexity": perplexity, **bits_metrics(loss, eval_units)}

    model.train()
    step, last_loss, evaluation = start_step, kept.get("loss", float("nan")), None
    loop_start = time.perf_counter()
    evaluated_at = None
    recent: list[float] = []
    last_good = checkpoint  # the newest checkpoint of this run known to be good (finite, intact)

    def roll_back(problem: str, offending_step: int, position_counted: bool) -> None:
        """Back to the last good checkpoint, the data past the offending batch (`rollback_to_last_good`).

        `position_counted`: whether the loop has already moved epoch/update past the offending batch."""
        nonlocal step, epoch, update, data_offset, carried, last_good
        nonlocal last_loss, recent, evaluation, evaluated_at
        back = rollback_to_last_good(
            guard,
            problem,
            offending_step,
            checkpoint_dir=checkpoint_dir,
            run_id=run_id,
            model=raw_model,
            optimizer=optimizer,
            scaler=accelerator.scaler,
            scheduler=scheduler,
            rank=rank,
            data=data,
            accum=train_args.gradient_accumulation_steps,
        )
        consumed = guard.skip + (0 if position_counted else 1)  # global batches read past the position
        if streaming:
            epoch, update = stream.position
        else:
            epoch, update = divmod(epoch * updates_per_epoch + update + consumed, updates_per_epoch)
        step, last_good, data_offset = back["step"], back["path"], data_offset + back["skipped"]
        last_loss = (back["extra"] or {}).get("loss", float("nan"))
        recent, evaluation, evaluated_at = [], None, None
        if tbptt:  # the skipped blocks break every lane's continuity: each starts afresh
            carried = [None] * train_args.gradient_accumulation_steps
        if best is not None:
            best.restore((back["extra"] or {}).get("best"))  # drops the best folders of the abandoned steps
        csv_log.truncate(step)
        bar.n = step
        bar.refresh()

    bar = tqdm(
        total=train_args.max_steps,
        initial=start_step,
        desc="training",
        unit="step",
        disable=not accelerator.is_local_main_process,
    )
    with logging_redirect_tqdm(), bar:
        while step < train_args.max_steps and not ngram:
            if train_args.max_train_seconds is not None and budget_spent(
                loop_start, train_args.max_train_seconds, accelerator
            ):
                logger.info(
                    "Training-time budget of %.0f s reached at step %d.", train_args.max_train_seconds, step
                )
                break
            micro_losses = []
            sampling_p = train_args.sampling_probability(step)  # None without scheduled sampling
            extra_inputs = {} if sampling_p is None else {"scheduled_sampling_probability": sampling_p}
            if tbptt and update == 0:
                carried = [None] * train_args.gradient_accumulation_steps  # an epoch starts every lane afresh
            for micro in range(train_args.gradient_accumulation_steps):
                batch = next(data)
                if mlm:
                    # a fresh mask per micro-batch (dynamic masking), a pure function of the data position
                    batch = mlm_inputs(batch, collator, mask_seed(train_args.seed, step, micro, rank))
                elif seq2seq:
                    batch = seq2seq_inputs(batch, collator, mask_seed(train_args.seed, step, micro, rank))
                elif "targets" not in batch:  # random windows carry their own targets
                    batch = {**batch, "labels": batch["input_ids"]}
                batch = {k: v.to(accelerator.device) for k, v in batch.items()}  # (b, T)
                if tbptt:  # continue each lane from the state its previous block left
                    extra_inputs.update(past_key_values=carried[micro], use_cache=True)
                with accelerator.accumulate(model):
                    outputs = forward_loss(forward_model, batch, extra_inputs)
                    loss = outputs.loss  # token mean of this micro-batch
                    accelerator.backward(loss)  # divided by gradient_accumulation_steps
                if tbptt:
                    carried[micro] = outputs.past_key_values.detach()  # gradients stop at the block edge
                micro_losses.append(loss.detach().float())
            # every process sees the same mean, so a divergence stops all of them together
            loss = accelerator.reduce(torch.stack(micro_losses).mean(), reduction="mean").item()
            finite = math.isfinite(loss)
            problem = guard.problem(loss)  # a non-finite loss, or a spike (spike_threshold)
            if problem is not None and guard.rollback:
                roll_back(problem, step + 1, position_counted=False)  # the update is not applied
                continue
            if not finite and train_args.stop_on_nan:
                raise TrainingDivergedError(
                    f"Non-finite training loss ({loss}) at step {step + 1}; stopped before applying the update. "
                    f"Last good checkpoint: {last_good if last_good is not None else 'none'}. Lower the learning "
                    "rate, raise warmup_steps or clip gradients, then resume from it (or use "
                    "--rollback_on_divergence)."
                )
            grad_norm = None
            if finite:
                if train_args.max_grad_norm > 0:
                    grad_norm = accelerator.clip_grad_norm_(
                        model.parameters(), train_args.max_grad_norm
                    ).item()
                optimizer.step()  # with fp16, the prepared optimizer unscales and skips inf/NaN gradients
            else:
                logger.warning("Non-finite loss at step %d: update skipped (stop_on_nan=false).", step + 1)
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if streaming:
                epoch, update = stream.position  # the stream finds an epoch's end when it reads it
            else:
                update += 1
                if update == updates_per_epoch:
                    epoch, update = epoch + 1, 0
            if train_args.max_train_seconds is not None:
                bar.total = projected_steps(
                    start_step,
                    step,
                    train_args.max_steps,
                    time.perf_counter() - loop_start,
                    train_args.max_train_seconds,
                )
            bar.update(1)
            saving = step % train_args.save_every == 0 or step == train_args.max_steps
            if saving or step % train_args.eval_every == 0:
                # only finite weights are evaluated and saved as good: one fused reduction and one host
                # sync, on every process (they hold the same weights, so they agree)
                largest = max_abs_weight(raw_model)
                if not math.isfinite(largest):
                    problem = f"Non-finite weights (max |w| = {largest}) after the update of step {step}"
                    if guard.rollback:
                        roll_back(problem, step, position_counted=True)
                        continue
                    raise TrainingDivergedError(
                        f"{problem}: not checkpointed. Last good checkpoint: "
                        f"{last_good if last_good is not None else 'none'}. Lower the learning rate, raise "
                        "warmup_steps or clip gradients, then resume from it (or use --rollback_on_divergence)."
                    )

            # fractional epochs where an epoch's length is known; completed epochs when streaming
            row = {
                "step": step,
                "epoch": round(epoch + update / updates_per_epoch, 4) if updates_per_epoch else epoch,
            }
            if finite:
                last_loss = loss
                recent.append(loss)
                guard.record(loss)
            if step % train_args.log_every == 0 or step == train_args.max_steps:
                mean = sum(recent) / len(recent) if recent else float("nan")
                recent = []
                row.update(
                    loss=mean,
                    learning_rate=scheduler.get_last_lr()[0],
                    grad_norm=grad_norm,
                    tokens=step * tokens_per_update,
                    seconds=round(time.perf_counter() - start_time, 2),
                )
                bar.set_postfix(loss=f"{mean:.4f}")
                logger.info(
                    "step %d/%d  loss %.4f  lr %.2e", step, train_args.max_steps, mean, row["learning_rate"]
                )
            if step % train_args.eval_every == 0 or step == train_args.max_steps:
                evaluation, evaluated_at = run_evaluation(), step
                if best is not None:
                    best.update(step, evaluation, raw_model)
                row.update(evaluation)
                logger.info(
                    "step %d  %s",
                    step,
                    "  ".join(
                        f"{k.removeprefix('eval_')} {v:.4f}" for k, v in evaluation.items() if v is not None
                    ),
                )
            if len(row) > 2:
                if accelerator.is_main_process:
                    csv_log.write(row)
                if trackers:
                    accelerator.log(
                        {k: v for k, v in row.items() if v is not None and k != "step"}, step=step
                    )
            if saving:
                # each process has its own random streams: the main process saves them all
                rng_states = gather_object([get_rng_state()]) if world > 1 else None
                carried_tensors = None
                if tbptt:
                    mine = carried_state_tensors(carried, rank)
                    carried_tensors = (
                        {k: v for part in gather_object([mine]) for k, v in part.items()}
                        if world > 1
                        else mine
                    )
                if accelerator.is_main_process:
                    save_checkpoint(
                        checkpoint_dir,
                        model=accelerator.unwrap_model(model),
                        optimizer=optimizer,
                        scheduler=scheduler,
                        scaler=accelerator.scaler,
                        step=step,
                        data_state={
                            "epoch": epoch,
                            "batch_in_epoch": update,  # global batches of this epoch already consumed
                            "blocks_in_epoch": update * global_batch,
                            "step": step,
                            "global_batch_size": global_batch,
                            "seed": train_args.seed,
                            "streaming": streaming,
                            "shuffle_buffer_size": data_args.shuffle_buffer_size if streaming else None,
                            "sampling": train_args.sampling,
                            "skipped_batches": data_offset,  # read but not trained on (rollbacks)
                        },
                        extra={"loss": last_loss, "world_size": world, "max_abs_weight": largest}
                        | {
                            "settings": run_settings(data_args, train_args),
                            "settings_history": settings_history,
                        }
                        | ({"best": best.record} if best is not None else {})
                        | guard.state(),
                        keep_last=train_args.keep_last,
                        rng_states=rng_states,
                        tensors=carried_tensors,
                        run_id=run_id,
                        check_finite=False,  # just checked, on every process
                    )
                    if best is not None:
                        best.prune()  # keep_last may have dropped the last need of an old best
                last_good = checkpoint_dir / checkpoint_name(step)
                accelerator.wait_for_everyone()

    stopped_by_budget = evaluated_at != step and step > start_step
    largest = max_abs_weight(raw_model) if not ngram else 0.0
    if not math.isfinite(largest):  # a run stopped by its budget between two checks
        raise TrainingDivergedError(
            f"Non-finite weights (max |w| = {largest}) at step {step}: final/ not written. Last good "
            f"checkpoint: {last_good if last_good is not None else 'none'}."
        )
    if evaluation is None or stopped_by_budget:
        # a fitted n-gram model, a resumed run that had already finished, or a run stopped by
        # its time budget after its last evaluation
        evaluation = run_evaluation()
        if best is not None:
            best.update(step, evaluation, raw_model)
        if (ngram or stopped_by_budget) and accelerator.is_main_process:
            csv_log.write(
                {"step": step, "epoch": 1 if ngram else None, **evaluation}
                | {"seconds": round(time.perf_counter() - start_time, 2)}
            )
    metrics = {
        "step": step,
        "train_loss": last_loss,
        **evaluation,
        "world_size": world,
        "global_batch_size": global_batch,
        "tokens_seen": step * tokens_per_update,
        "seconds": round(time.perf_counter() - start_time, 2),
    }
    if settings_history:
        metrics["settings_changes"] = settings_history
    if guard.rollback:  # every rollback of the run's history, a resumed run's included
        metrics.update(
            rollbacks=len(guard.events), skipped_batches=guard.skipped_batches, rollback_log=guard.events
        )
    # final/ holds the last weights, or with load_best_model_at_end those of the best evaluation
    final_eval, final_step = evaluation, step
    if best is not None and best.record is not None:
        final_eval, final_step = best.record["metrics"], best.record["step"]
        metrics.update(final_eval)  # the top-level metrics describe final/
        metrics["best"] = {"step": final_step, "metric": best.metric, **final_eval}
        metrics["last"] = {"step": step, **evaluation}
    eval_loss, eval_ppl = final_eval["eval_loss"], final_eval["eval_perplexity"]
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        final = output_dir / "final"
        unwrapped = accelerator.unwrap_model(model)
        if final_step != step:
            # verified against its manifest: a damaged best model fails naming its file
            load_checkpoint(best.path, model=unwrapped, restore_rng=False)
            logger.info("final/ holds the best model, of step %d (%s).", final_step, best.path)
        curves = csv_log.curves()
        if curves:
            # drawn aside, then renamed: a kill never leaves a half-written loss.png
            drawn = output_dir / f".tmp-loss-{os.getpid()}.png"
            plot_loss_curves(curves, drawn, title=f"{unwrapped.config.model_type}: {data_args.dataset}")
            os.replace(drawn, output_dir / "loss.png")
        # written aside and renamed at once: final/ is the previous complete folder or the new one
        staging = staging_folder(final)
        write_final_folder(unwrapped, tokenizer, staging, output_dir / "loss.png" if curves else None)
        write_model_card(
            unwrapped,
            staging,
            dataset=description,
            tokenizer=tokenizer,
            metrics=card_metrics(final_eval, final_step, final_step * tokens_per_update, train_args.objective)
            | best_card_rows(best, step, evaluation),
            hyperparameters=card_hyperparameters(
                data_args,
                train_args,
                world,
                global_batch,
                runtime={
                    "fused AdamW": bool(optimizer_kwargs(p.device for p in raw_model.parameters()))
                    and not ngram,
                    "TF32 matmuls": tf32,
                },
                history=settings_history,
            ),
            training_time_s=metrics["seconds"],
            eval_results=(
                {
                    "loss": eval_loss,
                    "accuracy": final_eval["eval_mlm_accuracy"],
                    **(
                        {"pseudo-perplexity": final_eval["eval_pseudo_perplexity"]}
                        if final_eval["eval_pseudo_perplexity"] is not None
                        else {}
                    ),
                }
                if mlm
                else {"loss": eval_loss, "accuracy": final_eval["eval_token_accuracy"]}
                if seq2seq
                else {"perplexity": eval_ppl, "loss": eval_loss}
            ),
            dataset_name=data_args.dataset + (f" ({data_args.config_name})" if data_args.config_name else ""),
            # the run's name, not "final"; the usage snippet's path is final/, not the staging folder
            extra={"model_name": output_dir.resolve().name, "model_id": final.as_posix()},
        )
        commit_folder(staging, final)
        atomic_write_text(output_dir / "final_metrics.json", json.dumps(metrics, indent=2))
    if trackers:
        accelerator.end_training()
    accelerator.wait_for_everyone()
    return metrics


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point: parse the arguments (flags or one .json/.yaml file) and train."""
    data_args, model_args, train_args = parse_args(argv)
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO if int(os.environ.get("RANK", "0")) == 0 else logging.WARNING,
    )
    return train(data_args, model_args, train_args)


if __name__ == "__main__":
    main(sys.argv[1:])
