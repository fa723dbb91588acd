"""A corpus too large for memory, read while training (`--streaming`).

`buffered_shuffle` shuffles a stream through a bounded, seeded buffer; `BlockStream` re-reads the
packed training blocks for each epoch through it; `StreamingGlobalBatches` cuts them into this
rank's micro-batches as `training.data.batches.GlobalBatchSampler` cuts its order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import TypeVar

import numpy as np
import torch
from datasets import IterableDataset

_Item = TypeVar("_Item")


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


class BlockStream:
    """The training blocks of a streamed corpus, re-read from the start for each epoch.

    `epoch(e)` iterates the packed `IterableDataset` (reading, tokenizing and packing lazily) through
    `buffered_shuffle` seeded by `numpy.random.default_rng([seed, e])`. Its order is a pure function
    of (data, seed, buffer size, epoch), so a resumed run re-opens the epoch and skips the blocks it
    had consumed. Memory: `shuffle_buffer_size` blocks, as int64 numpy arrays (T,). `fingerprint`:
    that of the text read (`data_fingerprint`; None when not known).
    """

    def __init__(
        self,
        packed: IterableDataset,
        columns: list[str],
        shuffle_buffer_size: int,
        seed: int,
        fingerprint: dict | None = None,
    ):
        self.packed, self.columns = packed, columns
        self.shuffle_buffer_size, self.seed = shuffle_buffer_size, seed
        self.fingerprint = fingerprint

    def epoch(self, epoch: int):
        """The blocks of epoch `epoch`, each a dict of int64 arrays (T,) keyed by column."""
        rows = ({c: np.asarray(row[c], dtype=np.int64) for c in self.columns} for row in self.packed)
        return buffered_shuffle(rows, self.shuffle_buffer_size, np.random.default_rng([self.seed, epoch]))


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
