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
- **The loss is a plain token mean per micro-batch**, and `accelerator.backward` divides it by
  `gradient_accumulation_steps` inside `accelerator.accumulate`; DDP averages over processes.
  Every block holds exactly `block_size - 1` predicted tokens (packing leaves no padding), so
  this mean of means is exactly the token mean over the global batch.
- **Exact resume.** A checkpoint (`training.checkpoint`) holds weights, optimizer, scheduler,
  RNG states and the data position (epoch, update index within the epoch, step); the data order
  is a pure function of (seed, epoch), so a resumed run continues bit for bit as if never stopped
  (CPU, fp32). Checkpoints are written by the main process only, never after a non-finite loss.
- **Divergence stops the run**: a non-finite loss (averaged over processes, so all ranks agree)
  raises `TrainingDivergedError` before the update is applied; the last checkpoint stays the last
  good one.

Outputs under `output_dir`: `tokenizer/`, `checkpoints/checkpoint-N/`, `metrics.csv`,
`tensorboard` logs (if requested), `loss.png`, `final_metrics.json`, and `final/`, a folder ready to
push to the Hub as it is (`python -m training.push`): `model.safetensors`, `config.json` with
`auto_map`, the model code, `generation_config.json`, the tokenizer files, `loss.png` and a model card
`README.md` (architecture, data, hyperparameters, training time, `model-index` evaluation results).
It loads with `AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True)` without hf_lm.
"""

from __future__ import annotations

import csv
import importlib.util
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
from accelerate.utils import set_seed
from datasets import Dataset, IterableDataset
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, get_scheduler

import hf_lm  # noqa: F401  (registers the Auto classes)
from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM
from hf_lm.cards import write_model_card
from hf_lm.plots import plot_loss_curves
from training.args import DataArguments, ModelArguments, TrainArguments, parse_args
from training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from training.data import load_text_dataset, tokenize_and_pack, train_eval_split
from training.tokenizer import train_tokenizer

logger = logging.getLogger(__name__)

CSV_FIELDS = (
    "step",
    "epoch",
    "loss",
    "learning_rate",
    "grad_norm",
    "eval_loss",
    "eval_perplexity",
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


def _to_tensors(packed, with_positions: bool) -> dict[str, torch.Tensor]:
    """The packed blocks as int64 tensors (N, T): the sampler needs random access."""
    # with document masking, positions restart at each document and attention stays inside it
    columns = ["input_ids"] + (["position_ids", "document_ids"] if with_positions else [])
    if isinstance(packed, IterableDataset):
        rows = list(packed)
        return {c: torch.tensor([r[c] for r in rows], dtype=torch.long) for c in columns}
    arrays = packed.with_format("numpy")
    return {c: torch.from_numpy(np.asarray(arrays[c], dtype=np.int64)) for c in columns}


def _load_or_train_tokenizer(data_args, train_args, train_docs, accelerator: Accelerator):
    """The tokenizer: given, reloaded from the run folder, or trained on the training documents."""
    if data_args.tokenizer_name_or_path:
        return AutoTokenizer.from_pretrained(data_args.tokenizer_name_or_path)
    folder = Path(train_args.output_dir) / "tokenizer"
    # the main process trains and saves (inside `main_process_first`); the others load its files.
    # A resumed run reloads the tokenizer it was trained with.
    reuse = (not accelerator.is_main_process or train_args.resume != "false") and (
        folder / "tokenizer.json"
    ).is_file()
    if reuse:
        return AutoTokenizer.from_pretrained(folder)
    texts = (
        (row["text"] for row in train_docs) if isinstance(train_docs, IterableDataset) else train_docs["text"]
    )
    tokenizer = train_tokenizer(
        texts,
        kind=data_args.tokenizer_kind,
        vocab_size=data_args.vocab_size,
        model_max_length=data_args.block_size,
    )
    if accelerator.is_main_process:
        tokenizer.save_pretrained(folder)
    return tokenizer


def prepare_data(data_args: DataArguments, train_args: TrainArguments, accelerator: Accelerator):
    """Load, split (by document), tokenize and pack the corpus.

    Returns:
        `(tokenizer, train_blocks, eval_blocks, description)`; blocks are dicts of int64 tensors
        (N, T) with "input_ids" (and "position_ids", "document_ids" with `document_mask`).
    """
    with accelerator.main_process_first():  # dataset caches and the tokenizer are written once
        dataset = load_text_dataset(
            data_args.dataset,
            config_name=data_args.config_name,
            split=data_args.split,
            text_column=data_args.text_column,
            streaming=data_args.streaming,
        )
        dataset = _limit(dataset, data_args)
        splits = train_eval_split(dataset, data_args.eval_fraction, seed=train_args.seed)
        tokenizer = _load_or_train_tokenizer(data_args, train_args, splits["train"], accelerator)
        blocks = {}
        for name in ("train", "eval"):
            packed = tokenize_and_pack(
                splits[name],
                tokenizer,
                data_args.block_size,
                num_proc=None if data_args.streaming else data_args.num_proc,
                document_mask=data_args.document_mask,
            )
            blocks[name] = _to_tensors(packed, data_args.document_mask)
    n_docs = len(dataset) if isinstance(dataset, Dataset) else "streamed"
    description = (
        f"`{data_args.dataset}`"
        + (f" ({data_args.config_name})" if data_args.config_name else "")
        + f": {n_docs} documents, {data_args.eval_fraction:.1%} held out; "
        f"{len(blocks['train']['input_ids']):,} training and {len(blocks['eval']['input_ids']):,} evaluation "
        f"blocks of {data_args.block_size} tokens (GPT-2 packing)."
    )
    return tokenizer, blocks["train"], blocks["eval"], description


class GlobalBatchSampler(torch.utils.data.Sampler):
    """This rank's micro-batches of block indices, in the same global order for any world size.

    Epoch e reads the permutation `numpy.random.default_rng([seed, e])` of the N blocks in
    updates of G = b * world * accum indices (the incomplete tail is dropped). Micro-step m of an
    update takes indices [m * b * world, (m + 1) * b * world) of it, and rank r the r-th b of those.
    Infinite; starts at (epoch, update index within the epoch).
    """

    def __init__(
        self, num_blocks: int, per_device: int, world: int, rank: int, accum: int, seed: int
    ) -> None:
        self.per_device, self.world, self.rank, self.accum, self.seed = per_device, world, rank, accum, seed
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
            order = np.random.default_rng([self.seed, epoch]).permutation(self.num_blocks)
            for u in range(update, self.updates_per_epoch):
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


# ----------------------------------------------------------------------------------------------
# Model and optimizer
# ----------------------------------------------------------------------------------------------


def build_model(model_args: ModelArguments, data_args: DataArguments, tokenizer):
    """A fresh `HfLmGPTForCausalLM` sized to the tokenizer, or the `init_from` checkpoint."""
    if model_args.init_from:
        return AutoModelForCausalLM.from_pretrained(model_args.init_from, dtype=torch.float32)
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
    kwargs.update(model_args.overrides())
    return HfLmGPTForCausalLM(HfLmGPTConfig(**kwargs))


def build_optimizer(model, train_args: TrainArguments):
    """AdamW decaying the 2-D matrices only; biases and norm gains stay undecayed (nanoGPT).

    Embedding matrices are 2-D and are decayed, as in nanoGPT's `configure_optimizers`.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": train_args.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(
        groups, lr=train_args.learning_rate, betas=(train_args.adam_beta1, train_args.adam_beta2)
    )
    name = {"constant": "constant_with_warmup"}.get(train_args.lr_scheduler, train_args.lr_scheduler)
    scheduler = get_scheduler(
        name, optimizer, num_warmup_steps=train_args.warmup_steps, num_training_steps=train_args.max_steps
    )
    return optimizer, scheduler


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
    n = len(blocks["input_ids"])
    if max_batches is not None:
        n = min(n, max_batches * batch_size * accelerator.num_processes)
    mine = torch.arange(accelerator.process_index, n, accelerator.num_processes)
    total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)  # (loss sum, blocks)
    for start in range(0, len(mine), batch_size):
        idx = mine[start : start + batch_size]
        batch = {k: v[idx].to(accelerator.device) for k, v in blocks.items()}  # (B, T)
        loss = model(**batch, labels=batch["input_ids"]).loss
        total += torch.stack([loss.double() * len(idx), torch.tensor(float(len(idx)), dtype=torch.float64)])
    total = accelerator.reduce(total, reduction="sum")
    model.train()
    mean = (total[0] / total[1]).item() if total[1] > 0 else float("nan")
    return mean, math.exp(mean) if mean < 700 else float("inf")


class CsvLog:
    """`metrics.csv` written by the main process; a resumed run drops the rows after its step."""

    def __init__(self, path: Path, resume_step: int | None, enabled: bool) -> None:
        self.path, self.enabled, self.rows = path, enabled, []
        if resume_step is not None and path.is_file():
            with open(path, newline="") as f:
                self.rows = [r for r in csv.DictReader(f) if int(r["step"]) <= resume_step]
        if self.enabled:
            with open(path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
                writer.writeheader()
                writer.writerows(self.rows)

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
    out = {}
    for obj in args_objects:
        for key, value in vars(obj).items():
            out[key] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return out


def card_hyperparameters(
    data_args: DataArguments, train_args: TrainArguments, world_size: int, global_batch: int
) -> dict[str, object]:
    """The training settings a reader needs to reproduce the run, for the model card's table."""
    return {
        "training steps (optimizer updates)": train_args.max_steps,
        "per-device batch size (blocks)": train_args.per_device_batch_size,
        "gradient accumulation steps": train_args.gradient_accumulation_steps,
        "world size (processes)": world_size,
        "global batch size (blocks)": global_batch,
        "block size (tokens)": data_args.block_size,
        "tokens per update": global_batch * data_args.block_size,
        "optimizer": f"AdamW (betas {train_args.adam_beta1}, {train_args.adam_beta2})",
        "peak learning rate": train_args.learning_rate,
        "learning-rate schedule": train_args.lr_scheduler,
        "warmup steps": train_args.warmup_steps,
        "weight decay (matrices only)": train_args.weight_decay,
        "gradient clipping (max norm)": train_args.max_grad_norm or "off",
        "precision": "fp32" if train_args.mixed_precision == "no" else f"{train_args.mixed_precision} mixed",
        "seed": train_args.seed,
    }


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


def train(data_args: DataArguments, model_args: ModelArguments, train_args: TrainArguments) -> dict:
    """Train a causal LM; returns the final metrics (also written to `final_metrics.json`).

    Raises:
        TrainingDivergedError: a non-finite training loss with `stop_on_nan`.
        FileNotFoundError: `resume="true"` and no checkpoint in `output_dir/checkpoints`.
    """
    output_dir = Path(train_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_dir = output_dir / "checkpoints"
    trackers = _trackers(train_args)
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
    logger.info("Process %d of %d on %s (%s).", rank, world, accelerator.device, accelerator.distributed_type)
    set_seed(train_args.seed)
    start_time = time.perf_counter()

    tokenizer, train_blocks, eval_blocks, description = prepare_data(data_args, train_args, accelerator)
    model = build_model(model_args, data_args, tokenizer)
    optimizer, scheduler = build_optimizer(model, train_args)

    global_batch = train_args.per_device_batch_size * world * train_args.gradient_accumulation_steps
    # resume before `prepare`: the plain objects load the states, and DDP then broadcasts rank 0's weights
    start_step, epoch, update = 0, 0, 0
    checkpoint = latest_checkpoint(checkpoint_dir) if train_args.resume != "false" else None
    if train_args.resume == "true" and checkpoint is None:
        raise FileNotFoundError(f"resume=true but {checkpoint_dir} holds no complete checkpoint.")
    if checkpoint is not None:
        state = load_checkpoint(
            checkpoint, model=model, optimizer=optimizer, scheduler=scheduler, restore_rng=True
        )
        start_step, data_state = state["step"], state["data_state"]
        epoch, update = data_state["epoch"], data_state["batch_in_epoch"]
        # the data position counts global batches of one size in one seeded order; the split of a
        # global batch between processes and accumulation may change, its size and the seed may not
        for key, now in (("global_batch_size", global_batch), ("seed", train_args.seed)):
            if data_state[key] != now:
                raise ValueError(
                    f"Cannot resume {checkpoint} exactly: it was trained with {key}={data_state[key]}, this run "
                    f"has {now}. Keep per_device_batch_size * processes * gradient_accumulation_steps and seed."
                )
        logger.info("Resumed from %s: step %d, epoch %d, update %d.", checkpoint, start_step, epoch, update)

    sampler = GlobalBatchSampler(
        len(train_blocks["input_ids"]),
        train_args.per_device_batch_size,
        world,
        rank,
        train_args.gradient_accumulation_steps,
        train_args.seed,
    )
    sampler.set_position(epoch, update)
    # a private generator: a DataLoader draws a base seed when it starts iterating, which would
    # otherwise consume the global torch RNG (and the dropout stream) differently after a resume
    loader = torch.utils.data.DataLoader(
        _Blocks(train_blocks), batch_sampler=sampler, generator=torch.Generator().manual_seed(train_args.seed)
    )
    # the loader and the scheduler are not prepared: the sampler shards the data itself, and a
    # prepared scheduler would step `num_processes` times per update
    model, optimizer = accelerator.prepare(model, optimizer)
    if trackers:
        accelerator.init_trackers("tensorboard", config=_hparams(data_args, model_args, train_args))
    csv_log = CsvLog(
        output_dir / "metrics.csv",
        resume_step=start_step if checkpoint is not None else None,
        enabled=accelerator.is_main_process and "csv" in train_args.trackers,
    )
    tokens_per_update = sampler.global_batch * data_args.block_size
    logger.info(
        "%d training blocks, %d eval blocks; global batch %d = %d per device x %d processes x %d accumulation; "
        "%d updates per epoch.",
        len(train_blocks["input_ids"]),
        len(eval_blocks["input_ids"]),
        sampler.global_batch,
        train_args.per_device_batch_size,
        world,
        train_args.gradient_accumulation_steps,
        sampler.updates_per_epoch,
    )

    model.train()
    data = iter(loader)
    step, last_loss, eval_loss, eval_ppl = start_step, float("nan"), None, None
    recent: list[float] = []
    bar = tqdm(
        total=train_args.max_steps,
        initial=start_step,
        desc="training",
        unit="step",
        disable=not accelerator.is_local_main_process,
    )
    with logging_redirect_tqdm(), bar:
        while step < train_args.max_steps:
            micro_losses = []
            for _ in range(train_args.gradient_accumulation_steps):
                batch = {k: v.to(accelerator.device) for k, v in next(data).items()}  # (b, T)
                with accelerator.accumulate(model):
                    loss = model(**batch, labels=batch["input_ids"]).loss  # token mean of this micro-batch
                    accelerator.backward(loss)  # divided by gradient_accumulation_steps
                micro_losses.append(loss.detach().float())
            # every process sees the same mean, so a divergence stops all of them together
            loss = accelerator.reduce(torch.stack(micro_losses).mean(), reduction="mean").item()
            finite = math.isfinite(loss)
            if not finite and train_args.stop_on_nan:
                last = latest_checkpoint(checkpoint_dir)
                raise TrainingDivergedError(
                    f"Non-finite training loss ({loss}) at step {step + 1}; stopped before applying the update. "
                    f"Last good checkpoint: {last if last is not None else 'none'}. Lower the learning rate, "
                    "raise warmup_steps or clip gradients, then resume from it."
                )
            grad_norm = None
            if finite:
                if train_args.max_grad_norm > 0:
                    grad_norm = accelerator.clip_grad_norm_(
                        model.parameters(), train_args.max_grad_norm
                    ).item()
                optimizer.step()
            else:
                logger.warning("Non-finite loss at step %d: update skipped (stop_on_nan=false).", step + 1)
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            update += 1
            if update == sampler.updates_per_epoch:
                epoch, update = epoch + 1, 0
            bar.update(1)

            row = {"step": step, "epoch": round(epoch + update / sampler.updates_per_epoch, 4)}
            if finite:
                last_loss = loss
                recent.append(loss)
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
                eval_loss, eval_ppl = evaluate(
                    accelerator.unwrap_model(model),
                    eval_blocks,
                    accelerator,
                    train_args.per_device_batch_size,
                    train_args.eval_batches,
                )
                row.update(eval_loss=eval_loss, eval_perplexity=eval_ppl)
                logger.info("step %d  eval loss %.4f  perplexity %.2f", step, eval_loss, eval_ppl)
            if len(row) > 2:
                if accelerator.is_main_process:
                    csv_log.write(row)
                if trackers:
                    accelerator.log(
                        {k: v for k, v in row.items() if v is not None and k != "step"}, step=step
                    )
            if step % train_args.save_every == 0 or step == train_args.max_steps:
                if accelerator.is_main_process:
                    save_checkpoint(
                        checkpoint_dir,
                        model=accelerator.unwrap_model(model),
                        optimizer=optimizer,
                        scheduler=scheduler,
                        step=step,
                        data_state={
                            "epoch": epoch,
                            "batch_in_epoch": update,  # global batches of this epoch already consumed
                            "step": step,
                            "global_batch_size": sampler.global_batch,
                            "seed": train_args.seed,
                        },
                        extra={"loss": last_loss, "world_size": world},
                        keep_last=train_args.keep_last,
                    )
                accelerator.wait_for_everyone()

    if eval_loss is None:  # a resumed run that had already finished: evaluate the final weights
        eval_loss, eval_ppl = evaluate(
            accelerator.unwrap_model(model),
            eval_blocks,
            accelerator,
            train_args.per_device_batch_size,
            train_args.eval_batches,
        )
    metrics = {
        "step": step,
        "train_loss": last_loss,
        "eval_loss": eval_loss,
        "eval_perplexity": eval_ppl,
        "world_size": world,
        "global_batch_size": sampler.global_batch,
        "tokens_seen": step * tokens_per_update,
        "seconds": round(time.perf_counter() - start_time, 2),
    }
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        final = output_dir / "final"
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.save_pretrained(final)
        tokenizer.save_pretrained(final)
        curves = csv_log.curves()
        if curves:
            plot_loss_curves(
                curves, output_dir / "loss.png", title=f"{unwrapped.config.model_type}: {data_args.dataset}"
            )
            shutil.copy2(output_dir / "loss.png", final / "loss.png")  # the card shows it on the Hub
        write_model_card(
            unwrapped,
            final,
            dataset=description,
            tokenizer=tokenizer,
            metrics={
                "held-out loss (nats/token)": eval_loss,
                "held-out perplexity": eval_ppl,
                "training steps": step,
                "training tokens seen": metrics["tokens_seen"],
            },
            hyperparameters=card_hyperparameters(data_args, train_args, world, sampler.global_batch),
            training_time_s=metrics["seconds"],
            eval_results={"perplexity": eval_ppl, "loss": eval_loss},
            dataset_name=data_args.dataset + (f" ({data_args.config_name})" if data_args.config_name else ""),
            extra={"model_name": output_dir.resolve().name},  # the run's name, not "final"
        )
        (output_dir / "final_metrics.json").write_text(json.dumps(metrics, indent=2))
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
