"""How the training blocks reach the loop: one data order for any number of processes.

Each update reads one *global batch* of G = `per_device_batch_size * num_processes *
gradient_accumulation_steps` blocks; micro-step m of the update takes the m-th slice of
`per_device_batch_size * num_processes` of them and rank r its r-th contiguous part. So the union of
all ranks' micro-batches of an update is the same set of blocks whatever the split between
processes and accumulation. Three sources follow that rule: a seeded permutation of in-memory
blocks (`GlobalBatchSampler`), a streamed corpus through a shuffle buffer (`StreamingGlobalBatches`)
and nanoGPT's random windows (`RandomWindows`).

`BatchPlan` is the run's choice among them, made once from the arguments: every flag that shapes a
batch (`per_device_batch_size`, `gradient_accumulation_steps`, `seed`, `sampling`, `streaming`,
`shuffle_buffer_size`, `tbptt`, `document_mask`, `block_size`) is read there and nowhere else in the
loop. The loop asks it for the micro-batches (`batches`) and whether they come labelled
(`labelled`: random windows carry their next-token targets as `shift_labels`), a checkpoint for its
`data_order`, the model card for its `describe`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .streaming import StreamingGlobalBatches


@dataclass
class DataPosition:
    """Where a run is: `step` updates done, `update` global batches into `epoch`, and `offset`
    global batches read but not trained on (skipped by rollbacks; random windows count from
    `step + offset`)."""

    step: int = 0
    epoch: int = 0
    update: int = 0
    offset: int = 0


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
    `x = data[i : i + T]`, `y = data[i + 1 : i + 1 + T]`: "input_ids" (b, T) and "shift_labels" (b, T),
    T targets per row where a packed block has T - 1 (the window's first token is context only);
    `shift_labels` is transformers' name for targets already aligned with the positions, so the model
    takes the batch as it is.
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
                batch = {"input_ids": windows[:, :-1], "shift_labels": windows[:, 1:]}  # (b, T) each
                if self.eos_token_id is not None:
                    batch.update(window_document_columns(batch["input_ids"], self.eos_token_id))
                yield batch
            step += 1


SOURCES = ("blocks", "lanes", "stream", "windows")


@dataclass(frozen=True)
class BatchPlan:
    """How the training blocks become this process's micro-batches, decided once (`from_args`).

    `source` is one of `SOURCES`: "blocks" (a seeded permutation of the in-memory blocks per epoch,
    `GlobalBatchSampler`), "lanes" (truncated BPTT: the blocks in corpus-order lanes), "stream"
    (`--streaming`: `StreamingGlobalBatches`) or "windows" (`--sampling random_windows`:
    `RandomWindows`). Each update reads `global_batch` = `per_device * world * accum` rows, cut
    into micro-steps and ranks the same way whatever the source.
    """

    source: str
    per_device: int
    world: int
    rank: int
    accum: int
    seed: int
    block_size: int
    document_mask: bool = False
    shuffle_buffer_size: int | None = None  # "stream" only

    @classmethod
    def from_args(cls, data_args, train_args, world: int, rank: int) -> BatchPlan:
        """The plan the run's arguments ask for, for process `rank` of `world`."""
        if data_args.streaming:
            source = "stream"
        elif train_args.sampling == "random_windows":
            source = "windows"
        else:
            source = "lanes" if train_args.tbptt else "blocks"
        return cls(
            source,
            train_args.per_device_batch_size,
            world,
            rank,
            train_args.gradient_accumulation_steps,
            train_args.seed,
            data_args.block_size,
            data_args.document_mask,
            data_args.shuffle_buffer_size if source == "stream" else None,
        )

    @property
    def global_batch(self) -> int:
        """Rows of one update, over all processes and micro-steps."""
        return self.per_device * self.world * self.accum

    @property
    def streaming(self) -> bool:
        return self.source == "stream"

    @property
    def labelled(self) -> bool:
        """Whether the micro-batches carry their own targets: random windows hold `shift_labels`
        (B, T), the next token of every input position (transformers' name for targets already
        aligned with the positions); blocks hold only inputs, labelled by the objective."""
        return self.source == "windows"

    def data_order(self) -> dict:
        """What fixes the order of the blocks, for a checkpoint to record and a resume to compare
        (`training.state.resume.DATA_ORDER`)."""
        return {
            "global_batch_size": self.global_batch,
            "seed": self.seed,
            "streaming": self.streaming,
            "sampling": "random_windows" if self.source == "windows" else "blocks",
            "shuffle_buffer_size": self.shuffle_buffer_size,
        }

    def describe(self) -> str:
        """The model card's "data sampling"."""
        if self.source == "windows":
            return f"random windows of {self.block_size} + 1 tokens (nanoGPT's get_batch)"
        return "packed blocks, shuffled each epoch"

    def batches(self, train_blocks, position: DataPosition, eos_token_id: int | None = None):
        """This process's iterator of micro-batches, started at the resumed `position`.

        Args:
            train_blocks: `prepare_data`'s training blocks (a dict of (N, T) tensors, or a `BlockStream`).
            position: the resumed `DataPosition`.
            eos_token_id: the tokenizer's EOS, which starts a document in a window (`document_mask`).

        Returns:
            `(batches, updates_per_epoch, stream)`: `updates_per_epoch` is None when streaming (an
            epoch's length is known only once read); `stream` is the `StreamingGlobalBatches` (None
            otherwise), which knows its own position.
        """
        b, world, rank, accum, seed = self.per_device, self.world, self.rank, self.accum, self.seed
        if self.source == "stream":
            stream = StreamingGlobalBatches(train_blocks, b, world, rank, accum)
            stream.set_position(position.epoch, position.update)
            return iter(stream), None, stream
        if self.source == "windows":
            tokens = train_blocks["input_ids"].reshape(-1)  # (N,) the packed training stream
            eos = eos_token_id if self.document_mask else None
            windows = RandomWindows(tokens, self.block_size, b, world, rank, accum, seed, eos_token_id=eos)
            windows.set_position(position.step + position.offset)
            # no epochs: the "epoch" column counts passes of as many window tokens as the stream holds
            return iter(windows), max(1, len(tokens) // (self.global_batch * self.block_size)), None
        lanes = self.source == "lanes"
        sampler = GlobalBatchSampler(len(train_blocks["input_ids"]), b, world, rank, accum, seed, lanes=lanes)
        sampler.set_position(position.epoch, position.update)
        # a private generator: a DataLoader draws a base seed when it starts iterating, which would
        # otherwise consume the global torch RNG (and the dropout stream) differently after a resume
        loader = torch.utils.data.DataLoader(
            _Blocks(train_blocks), batch_sampler=sampler, generator=torch.Generator().manual_seed(seed)
        )
        return iter(loader), sampler.updates_per_epoch, None
