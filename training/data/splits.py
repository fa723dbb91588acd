"""Hold out the evaluation text: a seeded share of the documents (`train_eval_split`), or the last
share of the characters (`tail_split`, nanoGPT's)."""

from __future__ import annotations

import numpy as np
from datasets import Dataset, DatasetDict, IterableDataset


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
    # datasets rounds the held-out rows up: it would say "test_size=0.9 ... train set will be empty"
    if len(dataset) < 2 or np.ceil(eval_fraction * len(dataset)) >= len(dataset):
        raise ValueError(
            f"`eval_fraction` {eval_fraction} of {len(dataset)} document(s) leaves none to train on: use more "
            "documents (--max_documents, --sample_by) or a smaller eval_fraction."
        )
    split = dataset.train_test_split(test_size=eval_fraction, seed=seed, shuffle=True)
    return DatasetDict({"train": split["train"], "eval": split["test"]})


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
