"""Pretraining objectives for encoder-decoder models (T5, BART), as data collators.

An encoder-decoder model takes `input_ids`, `attention_mask` and `labels` (the unshifted target,
-100 = ignored) and builds its `decoder_input_ids` itself with
`shift_tokens_right(labels, pad_token_id, decoder_start_token_id)`. Every objective is therefore a
way of turning one clean token sequence into an (input, target) pair, and lives here:

- `DataCollatorForT5Pretraining`: the unsupervised objectives compared by T5 (Raffel et al., 2020,
  section 3.3, Tables 4 and 5), chosen by `objective`:

  - "span_corruption" (T5's final choice; "random spans" in Table 4):
    "Thank you <X> me to your party <Y> week ." -> "<X> for inviting <Y> last <Z>"
  - "iid_replace_spans" (i.i.d. noise, replace spans): the same, runs of i.i.d. noise as spans
  - "bert_style": "Thank you <M> <M> me to your party apple week ." -> (original text)
  - "drop_tokens" (i.i.d. noise, drop tokens): "Thank you me to your party week ." ->
    "for inviting last"
  - "deshuffle": "party me for your to . last you inviting week Thank" -> (original text)
  - "prefix_lm": "Thank you for inviting" -> "me to your party last week ."

  MASS-style (Song et al., 2019) is "bert_style" with `mask_replace_prob=1, random_replace_prob=0`.
- `DataCollatorForBartDenoising`: BART's noising functions (Lewis et al., 2020, section 2.2),
  combined by their rates: token masking, token deletion, text infilling (Poisson spans, one mask
  per span), sentence permutation, document rotation. The target is always the original text.

The building blocks are plain functions on NumPy arrays, usable (and tested) on their own
(`training.data.seq2seq_noise`): `random_spans_noise_mask`, `iid_noise_mask`,
`noise_spans_to_sentinels`, `span_corruption_lengths`, `text_infilling`, `permute_sentences`,
`rotate_document`, `cmlm_mask`.

Examples are already-tokenized sequences without special tokens, e.g. the fixed-size blocks of
`training.data.packing.tokenize_and_pack` (their EOS between documents are ordinary tokens here). As in
T5, an EOS token is appended to every input and every target after the noise (`add_eos_token`).
Sentinels come from the tokenizer: `<extra_id_0>`, `<extra_id_1>`, ... (see
`training.data.tokenizer.add_sentinel_tokens`).

Example:
    >>> tok = train_tokenizer(texts, kind="unigram", special_tokens=T5_SPECIAL_TOKENS)
    >>> add_sentinel_tokens(tok, 100)
    >>> collator = DataCollatorForT5Pretraining(tok, objective="span_corruption", seed=0)
    >>> raw_length, _ = span_corruption_lengths(512)  # 568: pack blocks this long
    >>> blocks = tokenize_and_pack(ds, tok, block_size=raw_length)
    >>> batch = collator(blocks[:32]["input_ids"])  # input_ids (32, 512), labels (32, 115)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from hf_lm.models.hflm_common import _bool, _number, _positive, _positive_int

from .collators_mlm import check_replace_probs, check_seed_and_generator
from .seq2seq_noise import (
    cmlm_mask,
    iid_noise_mask,
    noise_spans_to_sentinels,
    permute_sentences,
    random_spans_noise_mask,
    rotate_document,
    sentinels_needed,
    text_infilling,
)
from .tokenizer import sentinel_token_ids

logger = logging.getLogger(__name__)

T5_OBJECTIVES = (
    "span_corruption",
    "iid_replace_spans",
    "bert_style",
    "drop_tokens",
    "deshuffle",
    "prefix_lm",
)
# objectives whose inputs hold one sentinel per noise span
_SPAN_OBJECTIVES = ("span_corruption", "iid_replace_spans")

# what an example given as a mapping may hold; anything else is refused rather than dropped
EXAMPLE_KEYS = ("input_ids", "attention_mask")

# BART's default sentence ends, looked up in the vocabulary (the eos token is added: in packed
# blocks it separates documents, and fairseq's BART splits sentences on it)
SENTENCE_END_TOKENS = (".", "!", "?")


# ----------------------------------------------------------------------------------------------
# The shared collator machinery
# ----------------------------------------------------------------------------------------------


@dataclass
class _Seq2SeqCollator:
    """Reading examples, randomness and padding, shared by the encoder-decoder collators."""

    tokenizer: PreTrainedTokenizerBase
    add_eos_token: bool = field(default=True, kw_only=True)
    pad_to_multiple_of: int | None = field(default=None, kw_only=True)
    seed: int | None = field(default=None, kw_only=True)
    generator: torch.Generator | None = field(default=None, kw_only=True)

    _generators: dict[int, torch.Generator] = field(init=False, repr=False, default_factory=dict)
    _vocab_size: int = field(init=False, repr=False, default=0)

    def _check_common(self) -> None:
        if not isinstance(self.tokenizer, PreTrainedTokenizerBase):
            raise ValueError(
                f"`tokenizer` must be a transformers tokenizer, got {type(self.tokenizer).__name__}."
            )
        if getattr(self.tokenizer, "pad_token_id", None) is None:
            raise ValueError("`tokenizer` has no pad_token: batches of different lengths need one.")
        _bool("add_eos_token", self.add_eos_token)
        if self.add_eos_token and getattr(self.tokenizer, "eos_token_id", None) is None:
            raise ValueError("`tokenizer` has no eos_token, needed with add_eos_token=True.")
        _positive_int("pad_to_multiple_of", self.pad_to_multiple_of, allow_none=True)
        check_seed_and_generator(self.seed, self.generator)
        self._vocab_size = len(self.tokenizer)

    # -- randomness ------------------------------------------------------------------------------

    def _torch_generator(self) -> torch.Generator | None:
        if self.generator is not None:
            return self.generator
        if self.seed is None:
            return None  # torch's global RNG, which DataLoader seeds differently in each worker
        # one generator per DataLoader worker: copies of one seeded generator would all draw the
        # same noise in every worker
        info = torch.utils.data.get_worker_info()
        worker = 0 if info is None else info.id
        if worker not in self._generators:
            state = np.random.SeedSequence([self.seed, worker]).generate_state(1, dtype=np.uint64)[0]
            self._generators[worker] = torch.Generator().manual_seed(int(state))
        return self._generators[worker]

    def _rng(self) -> np.random.Generator:
        """A NumPy generator for this call, seeded from the torch generator (one draw per call)."""
        seed = int(torch.randint(0, 2**62, (1,), generator=self._torch_generator()))
        return np.random.default_rng(seed)

    # -- examples and padding ----------------------------------------------------------------------

    def _example_ids(self, example: Any, b: int) -> np.ndarray:
        """(T,) int64 ids of one example: a mapping with `input_ids`, a string, or a list of ids."""
        if isinstance(example, str):
            ids = self.tokenizer(example, add_special_tokens=False)["input_ids"]
        elif isinstance(example, Mapping):
            if "input_ids" not in example:
                raise ValueError(f"`examples[{b}]` has no 'input_ids' entry.")
            unknown = set(example) - set(EXAMPLE_KEYS)
            if unknown:
                raise ValueError(
                    f"`examples[{b}]` has unknown keys {sorted(unknown)}; allowed: {list(EXAMPLE_KEYS)} "
                    "(the collator makes `labels` itself)."
                )
            ids = example["input_ids"]
        else:
            ids = example
        try:
            array = np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids)
        except (TypeError, ValueError) as err:
            raise ValueError(f"`examples[{b}]` is not a sequence of token ids: {err}") from err
        if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
            raise ValueError(
                f"`examples[{b}]` must be a text, a 1-D sequence of token ids or a mapping with "
                f"'input_ids', got shape {array.shape} of {array.dtype}."
            )
        array = array.astype(np.int64)
        if isinstance(example, Mapping) and "attention_mask" in example:
            keep = np.asarray(example["attention_mask"]).reshape(-1)
            if keep.shape != array.shape:
                raise ValueError(
                    f"`attention_mask` of examples[{b}] has {keep.size} entries for {array.size} ids."
                )
            array = array[keep.astype(bool)]  # padding is not text
        if array.size and (int(array.min()) < 0 or int(array.max()) >= self._vocab_size):
            raise ValueError(f"`input_ids` of examples[{b}] hold ids outside [0, {self._vocab_size}).")
        return array

    def _examples(self, examples: Sequence[Any]) -> list[np.ndarray]:
        if isinstance(examples, (str, Mapping)) or not isinstance(examples, Sequence) or len(examples) == 0:
            raise ValueError("`examples` must be a non-empty list of examples.")
        return [self._example_ids(example, b) for b, example in enumerate(examples)]

    def _pad(self, rows: list[np.ndarray], value: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) right-padded ids (with `value`) and (B, T) attention mask."""
        B, T = len(rows), max(1, max(row.size for row in rows))
        if self.pad_to_multiple_of is not None:
            T = -(-T // self.pad_to_multiple_of) * self.pad_to_multiple_of
        ids = torch.full((B, T), value, dtype=torch.long)
        mask = torch.zeros(B, T, dtype=torch.long)
        for b, row in enumerate(rows):
            ids[b, : row.size] = torch.from_numpy(row)
            mask[b, : row.size] = 1
        return ids, mask

    def _wrap(self, row: np.ndarray, bos: int | None = None) -> np.ndarray:
        """Add the optional BOS in front and the EOS at the end."""
        parts = [row]
        if bos is not None:
            parts.insert(0, np.array([bos], dtype=np.int64))
        if self.add_eos_token:
            parts.append(np.array([self.tokenizer.eos_token_id], dtype=np.int64))
        return np.concatenate(parts)

    def _batch(self, inputs: list[np.ndarray], targets: list[np.ndarray]) -> dict[str, torch.Tensor]:
        # padding on the right: T5 uses relative positions, BART learned absolute ones counted from 0
        input_ids, attention_mask = self._pad(inputs, self.tokenizer.pad_token_id)  # (B, S)
        labels, _ = self._pad(targets, -100)  # (B, L), -100 = ignored by the loss
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


# ----------------------------------------------------------------------------------------------
# T5
# ----------------------------------------------------------------------------------------------


@dataclass
class DataCollatorForT5Pretraining(_Seq2SeqCollator):
    """Batch (input, target) pairs for one of T5's unsupervised objectives (Raffel et al., 2020).

    Objectives (section 3.3, Table 4; see the module docstring for examples):

    - "span_corruption" (T5's final objective, section 3.3.4 and Table 5): `noise_density` of the
      tokens, in spans of mean length `mean_noise_span_length` (`random_spans_noise_mask`); each
      span is replaced by a unique sentinel in the input, the target lists the sentinels each
      followed by its span (`noise_spans_to_sentinels`), then a final sentinel. Short targets make
      pretraining cheap.
    - "iid_replace_spans" (section 3.3.2): each token is noise with probability `noise_density`;
      runs of consecutive noise tokens are replaced like spans.
    - "bert_style" (Devlin et al., 2019, adapted in section 3.3.1): each token is corrupted with
      probability `noise_density`; a corrupted token becomes the mask token with probability
      `mask_replace_prob`, a random non-special token with probability `random_replace_prob`
      (T5: 90% / 10%), else stays; the target is the whole original text. The mask token is the
      tokenizer's `mask_token`, or `<extra_id_0>` as in T5's code (`noise_token_to_sentinel`).
      MASS-style: `mask_replace_prob=1, random_replace_prob=0`.
    - "drop_tokens" (section 3.3.2): each token is dropped from the input with probability
      `noise_density`; the target is the dropped tokens, in order.
    - "deshuffle" (section 3.3.1): the input is the tokens in a random
      order, the target the original text.
    - "prefix_lm" (section 3.3.1): the text is split at a uniformly random point (both parts
      non-empty for texts of 2 tokens or more): the input is the prefix, the target the rest.

    As in T5, an EOS is appended to every input and every target (`add_eos_token`). Inputs are
    padded with the tokenizer's pad token on the right, `labels` with -100. A new noise is drawn at
    every call; `seed` makes the sequence of draws reproducible (one generator per DataLoader worker,
    seeded from (seed, worker id)); without `seed` or `generator` torch's global RNG is used.

    Args:
        tokenizer: needs a `pad_token`, an `eos_token` (with `add_eos_token`), and sentinels
            `<extra_id_0>`, ... for the span objectives (`training.data.tokenizer.add_sentinel_tokens`).
        objective: one of `T5_OBJECTIVES`.
        noise_density: the fraction of corrupted tokens (all objectives but "deshuffle" and
            "prefix_lm"), in [0, 1).
        mean_noise_span_length: "span_corruption" only: the mean span length.
        mask_replace_prob: "bert_style" only: the probability that a corrupted token is masked.
        random_replace_prob: "bert_style" only: the probability that a corrupted token becomes a
            random token; the rest (1 - mask_replace_prob - random_replace_prob) are kept.
        final_sentinel: span objectives: always end targets with a final sentinel (the paper's
            Figure 2); False follows T5's code, see `noise_spans_to_sentinels`.
        add_eos_token: append the tokenizer's EOS to inputs and targets.
        pad_to_multiple_of: pad both lengths to a multiple of this.
        seed: seed of a private generator, for reproducible noise.
        generator: a torch.Generator to draw from instead (mutually exclusive with `seed`).

    Call:
        examples: a list of token-id sequences without special tokens: mappings with `input_ids`
        (and optionally `attention_mask`, whose 0 positions are dropped), lists, 1-D tensors or
        arrays, or strings (tokenized without special tokens).

    Returns:
        A dict of tensors: `input_ids` (B, S), `attention_mask` (B, S), `labels` (B, L) padded
        with -100.

    Raises:
        ValueError: naming the field, for bad arguments, a tokenizer without the tokens the
            objective needs, bad examples, or too few sentinels for an example.
    """

    objective: str = "span_corruption"
    noise_density: float = 0.15
    mean_noise_span_length: float = 3.0
    mask_replace_prob: float = 0.9
    random_replace_prob: float = 0.1
    final_sentinel: bool = True

    _sentinel_ids: list[int] = field(init=False, repr=False, default_factory=list)
    _mask_id: int | None = field(init=False, repr=False, default=None)
    _random_ids: np.ndarray | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if self.objective not in T5_OBJECTIVES:
            raise ValueError(f"`objective` must be one of {list(T5_OBJECTIVES)}, got {self.objective!r}.")
        self._check_common()
        # every field is checked whatever the objective, so a typo never waits for the day
        # someone switches objectives
        _number("noise_density", self.noise_density, 0, 1, high_open=True)
        _positive("mean_noise_span_length", self.mean_noise_span_length)
        check_replace_probs(self.mask_replace_prob, self.random_replace_prob)
        _bool("final_sentinel", self.final_sentinel)

        self._sentinel_ids = sentinel_token_ids(self.tokenizer)
        if self.objective in _SPAN_OBJECTIVES and not self._sentinel_ids:
            raise ValueError(
                f"`tokenizer` has no sentinel tokens (<extra_id_0>, ...), needed by objective="
                f"{self.objective!r}: add them with `training.data.tokenizer.add_sentinel_tokens`."
            )
        if self.objective == "bert_style":
            mask_id = getattr(self.tokenizer, "mask_token_id", None)
            self._mask_id = mask_id if mask_id is not None else (self._sentinel_ids or [None])[0]
            if self._mask_id is None and self.mask_replace_prob > 0:
                raise ValueError(
                    "`tokenizer` has neither a mask_token nor a sentinel <extra_id_0>, needed by "
                    "objective='bert_style'."
                )
            special = set(i for i in self.tokenizer.all_special_ids if i is not None)
            self._random_ids = np.array(
                [i for i in range(self._vocab_size) if i not in special], dtype=np.int64
            )
            if self.random_replace_prob > 0 and self._random_ids.size == 0:
                raise ValueError(
                    "`random_replace_prob` > 0 but the tokenizer has no non-special token to draw."
                )

    def _corrupt(self, ids: np.ndarray, rng: np.random.Generator, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(input, target) of one example, before EOS."""
        objective = self.objective
        if objective in _SPAN_OBJECTIVES:
            if objective == "span_corruption":
                noise = random_spans_noise_mask(
                    ids.size, self.noise_density, self.mean_noise_span_length, rng
                )
            else:
                noise = iid_noise_mask(ids.size, self.noise_density, rng)
            _, num_spans, needed = sentinels_needed(noise, self.final_sentinel)
            if needed > len(self._sentinel_ids):
                raise ValueError(
                    f"`tokenizer` has {len(self._sentinel_ids)} sentinel tokens, but examples[{b}] "
                    f"({ids.size} tokens) needs {needed} ({num_spans} noise spans"
                    f"{' + the final one' if needed > num_spans else ''}): add more with "
                    "`training.data.tokenizer.add_sentinel_tokens` (T5 has 100)."
                )
            return noise_spans_to_sentinels(ids, noise, self._sentinel_ids, self.final_sentinel)
        if objective == "bert_style":
            noise = iid_noise_mask(ids.size, self.noise_density, rng)
            u = rng.random(ids.size)
            corrupted = ids.copy()
            to_mask = noise & (u < self.mask_replace_prob)
            to_random = (
                noise
                & (u >= self.mask_replace_prob)
                & (u < self.mask_replace_prob + self.random_replace_prob)
            )
            if to_mask.any():
                corrupted[to_mask] = self._mask_id
            if to_random.any():
                draw = rng.integers(self._random_ids.size, size=int(to_random.sum()))
                corrupted[to_random] = self._random_ids[draw]
            return corrupted, ids
        if objective == "drop_tokens":
            noise = iid_noise_mask(ids.size, self.noise_density, rng)
            return ids[~noise], ids[noise]
        if objective == "deshuffle":
            return ids[rng.permutation(ids.size)], ids
        # prefix_lm: a split point in 1..T-1, so that input and target are both non-empty
        split = int(rng.integers(1, ids.size)) if ids.size >= 2 else 0
        return ids[:split], ids[split:]

    def __call__(self, examples: Sequence[Any]) -> dict[str, torch.Tensor]:
        rows = self._examples(examples)
        rng = self._rng()
        inputs, targets = [], []
        for b, ids in enumerate(rows):
            source, target = self._corrupt(ids, rng, b)
            inputs.append(self._wrap(source))
            targets.append(self._wrap(target))
        return self._batch(inputs, targets)


# ----------------------------------------------------------------------------------------------
# BART
# ----------------------------------------------------------------------------------------------


@dataclass
class DataCollatorForBartDenoising(_Seq2SeqCollator):
    """Batch BART's denoising examples: noised text in, the original text out (Lewis et al., 2020).

    The noising functions of section 2.2, applied in this order (fairseq's `DenoisingDataset`
    order), each switched off by a zero rate:

    1. sentence permutation: `sentence_permutation_ratio` of the sentences (split after
       `sentence_end_ids`) are shuffled (`permute_sentences`);
    2. token masking: each token becomes the mask token with probability `token_masking_ratio`
       (BERT-style, i.i.d.);
    3. token deletion: each token is deleted with probability `token_deletion_ratio`, so the model
       must find which positions are missing;
    4. text infilling: `text_infilling_ratio` of the tokens are masked in spans of Poisson
       (`poisson_lambda`) lengths, one mask token per span, 0-length spans inserting a mask
       (`text_infilling`);
    5. document rotation: with probability `document_rotation_prob` the text is rotated to start at
       a random token (`rotate_document`).

    The defaults are BART-large's pretraining (section 5.1): "we mask 30% of tokens in each
    document, and permute all sentences", with λ = 3 (section 2.2). The target is the original text
    (before any noise) plus EOS, and the input ends with EOS too (`add_eos_token`); with
    `add_bos_token` both also start with the tokenizer's BOS, fairseq's and transformers' BART
    format `<s> ... </s>` (whose decoder then starts with `</s>`: `decoder_start_token_id` = eos).
    Inputs are padded with the pad token on the right, `labels` with -100. Randomness as in
    `DataCollatorForT5Pretraining` (`seed`, `generator`, per-worker generators).

    Args:
        tokenizer: needs a `pad_token`, a `mask_token` (for masking or infilling), an `eos_token`
            (with `add_eos_token`) and a `bos_token` (with `add_bos_token`).
        text_infilling_ratio: the fraction of tokens masked by text infilling, in [0, 1].
        poisson_lambda: the mean infilling span length, > 0.
        sentence_permutation_ratio: the fraction of sentences shuffled, in [0, 1].
        token_masking_ratio: the probability that a token is masked, in [0, 1].
        token_deletion_ratio: the probability that a token is deleted, in [0, 1].
        document_rotation_prob: the probability that a text is rotated, in [0, 1].
        sentence_end_ids: the token ids that end a sentence. None: the tokens ".", "!" and "?"
            found in the vocabulary, and the eos token (packed blocks separate documents with it).
        add_bos_token: prepend the tokenizer's BOS to inputs and targets.
        add_eos_token: append the tokenizer's EOS to inputs and targets.
        pad_to_multiple_of: pad both lengths to a multiple of this.
        seed: seed of a private generator, for reproducible noise.
        generator: a torch.Generator to draw from instead (mutually exclusive with `seed`).

    Call:
        examples: as for `DataCollatorForT5Pretraining`.

    Returns:
        A dict of tensors: `input_ids` (B, S), `attention_mask` (B, S), `labels` (B, L) padded
        with -100.
    """

    text_infilling_ratio: float = 0.3
    poisson_lambda: float = 3.0
    sentence_permutation_ratio: float = 1.0
    token_masking_ratio: float = 0.0
    token_deletion_ratio: float = 0.0
    document_rotation_prob: float = 0.0
    sentence_end_ids: Sequence[int] | None = None
    add_bos_token: bool = False

    _sentence_end_ids: list[int] = field(init=False, repr=False, default_factory=list)

    def __post_init__(self) -> None:
        self._check_common()
        for name in (
            "text_infilling_ratio",
            "sentence_permutation_ratio",
            "token_masking_ratio",
            "token_deletion_ratio",
            "document_rotation_prob",
        ):
            _number(name, getattr(self, name), 0, 1)
        _positive("poisson_lambda", self.poisson_lambda)
        _bool("add_bos_token", self.add_bos_token)
        if self.add_bos_token and getattr(self.tokenizer, "bos_token_id", None) is None:
            raise ValueError("`tokenizer` has no bos_token, needed with add_bos_token=True.")
        if (self.text_infilling_ratio > 0 or self.token_masking_ratio > 0) and getattr(
            self.tokenizer, "mask_token_id", None
        ) is None:
            raise ValueError(
                "`tokenizer` has no mask_token, needed by text infilling and token masking (e.g. '<mask>')."
            )
        if self.sentence_end_ids is None:
            vocab = self.tokenizer.get_vocab()
            ends = [vocab[t] for t in SENTENCE_END_TOKENS if t in vocab]
            if getattr(self.tokenizer, "eos_token_id", None) is not None:
                ends.append(self.tokenizer.eos_token_id)
        else:
            ends = self.sentence_end_ids
            if isinstance(ends, (str, bytes)) or not isinstance(ends, Sequence):
                raise ValueError(f"`sentence_end_ids` must be None or a list of token ids, got {ends!r}.")
            for i in ends:
                if (
                    isinstance(i, bool)
                    or not isinstance(i, (int, np.integer))
                    or not 0 <= i < self._vocab_size
                ):
                    raise ValueError(
                        f"`sentence_end_ids` must hold ids in [0, {self._vocab_size}), got {i!r}."
                    )
        self._sentence_end_ids = sorted({int(i) for i in ends})
        if self.sentence_permutation_ratio > 0 and not self._sentence_end_ids:
            raise ValueError(
                "`sentence_end_ids`: sentence permutation needs sentence ends, and the tokenizer has "
                f"none of {list(SENTENCE_END_TOKENS)} nor an eos_token; give their ids."
            )

    def _noise(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The noised version of one example, before BOS/EOS."""
        mask_id = self.tokenizer.mask_token_id
        if self.sentence_permutation_ratio > 0:
            ids, _ = permute_sentences(ids, self._sentence_end_ids, self.sentence_permutation_ratio, rng)
        if self.token_masking_ratio > 0:
            ids = np.where(iid_noise_mask(ids.size, self.token_masking_ratio, rng), mask_id, ids)
        if self.token_deletion_ratio > 0:
            ids = ids[~iid_noise_mask(ids.size, self.token_deletion_ratio, rng)]
        if self.text_infilling_ratio > 0:
            ids, _ = text_infilling(ids, mask_id, self.text_infilling_ratio, self.poisson_lambda, rng)
        if self.document_rotation_prob > 0 and rng.random() < self.document_rotation_prob:
            ids, _ = rotate_document(ids, rng)
        return ids

    def __call__(self, examples: Sequence[Any]) -> dict[str, torch.Tensor]:
        rows = self._examples(examples)
        rng = self._rng()
        bos = self.tokenizer.bos_token_id if self.add_bos_token else None
        inputs = [self._wrap(self._noise(ids, rng), bos) for ids in rows]
        targets = [self._wrap(ids, bos) for ids in rows]
        return self._batch(inputs, targets)


# ----------------------------------------------------------------------------------------------
# Mask-Predict
# ----------------------------------------------------------------------------------------------


@dataclass
class DataCollatorForMaskPredict(_Seq2SeqCollator):
    """Batch translation pairs for the conditional masked LM objective of Mask-Predict.

    Each feature holds the tokenized source (`input_ids`) and target (`labels`, e.g. from
    `training.finetune_translation.tokenize_dataset`). The target's final EOS is dropped (the
    length head predicts how many tokens there are; `generate()` appends the EOS), a uniform number
    of its tokens is masked (`cmlm_mask`), and the batch holds the source, `decoder_input_ids` (the
    target with those tokens replaced by the tokenizer's `mask_token`), `decoder_attention_mask`,
    `labels` (the masked tokens, -100 elsewhere) and `length_labels` (each target's length).
    Right padding. A new mask is drawn at every call (`seed`/`generator` as in the other collators).

    Args:
        tokenizer: needs a `pad_token` and a `mask_token` (the model's `config.mask_token_id`).
    """

    add_eos_token: bool = field(default=False, kw_only=True)  # sources and targets arrive tokenized

    def __post_init__(self) -> None:
        self._check_common()
        if getattr(self.tokenizer, "mask_token_id", None) is None:
            raise ValueError("`tokenizer` has no mask_token: Mask-Predict's decoder reads masked targets.")

    def _target(self, feature: Mapping, b: int) -> np.ndarray:
        if not isinstance(feature, Mapping) or "input_ids" not in feature or "labels" not in feature:
            raise ValueError(
                f"`features[{b}]` must be a mapping with 'input_ids' and 'labels' (source, target)."
            )
        target = np.asarray(feature["labels"], dtype=np.int64)
        target = target[target != -100]
        eos = self.tokenizer.eos_token_id
        return target[:-1] if target.size and target[-1] == eos else target

    def __call__(self, features: Sequence[Mapping]) -> dict[str, torch.Tensor]:
        if isinstance(features, Mapping) or not isinstance(features, Sequence) or len(features) == 0:
            raise ValueError("`features` must be a non-empty list of translation pairs.")
        rng = self._rng()
        targets = [self._target(feature, b) for b, feature in enumerate(features)]
        chosen = [cmlm_mask(target.size, rng).astype(np.int64) for target in targets]
        input_ids, attention_mask = self._pad(
            [np.asarray(f["input_ids"], dtype=np.int64) for f in features], self.tokenizer.pad_token_id
        )  # (B, S)
        target_ids, target_mask = self._pad(targets, self.tokenizer.pad_token_id)  # (B, T)
        masked = self._pad(chosen, 0)[0].bool()  # (B, T)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": target_ids.masked_fill(masked, self.tokenizer.mask_token_id),
            "decoder_attention_mask": target_mask,
            "labels": target_ids.masked_fill(~masked, -100),
            "length_labels": target_mask.sum(dim=1),
        }
