"""Masked-language-model and sentence-pair objectives for BERT-style encoders, as data collators.

Models only consume `input_ids`, `attention_mask`, `token_type_ids`, `labels` (-100 = ignored) and,
for pretraining, `next_sentence_label`; every objective lives here:

- `DataCollatorForMaskedLM`: BERT's masked LM (Devlin et al., 2019): select ~15% of the tokens,
  replace 80% of them by `[MASK]`, 10% by a random token, keep 10%, predict the originals.
  Selection by token, by whole word (BERT's later whole-word-masking release), or by spans of whole
  words with geometric lengths (SpanBERT; Joshi et al., 2020). A new mask is drawn at every call,
  which is RoBERTa's dynamic masking (Liu et al., 2019).
- `make_sentence_pairs`: `[CLS] A [SEP] B [SEP]` examples with `token_type_ids` and
  `next_sentence_label` for next-sentence prediction (NSP; Devlin et al., 2019) or sentence-order
  prediction (SOP; ALBERT, Lan et al., 2020), chunked and truncated like BERT's
  `create_pretraining_data.py`. `DataCollatorForMaskedLM` masks these pairs and passes
  `next_sentence_label` through, which is the whole pretraining collator of `BertForPreTraining`.

Example:
    >>> pairs = make_sentence_pairs(documents, tokenizer, objective="nsp", max_length=128, seed=0)
    >>> collator = DataCollatorForMaskedLM(tokenizer, masking="whole_word", seed=0)
    >>> batch = collator(pairs[:32])  # input_ids, attention_mask, token_type_ids, labels, next_sentence_label
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from hf_lm.models.hflm_common import _number, _positive_int

logger = logging.getLogger(__name__)

MASKING_KINDS = ("token", "whole_word", "span")
PAIR_OBJECTIVES = ("nsp", "sop")

# what an example given to the collator may hold; anything else is refused rather than dropped
EXAMPLE_KEYS = (
    "input_ids",
    "attention_mask",
    "token_type_ids",
    "special_tokens_mask",
    "word_ids",
    "next_sentence_label",
)


def check_replace_probs(mask_replace_prob: Any, random_replace_prob: Any) -> None:
    """BERT's 80/10/10 rule as two probabilities of a selected token: replaced by the mask token, by a
    random token; the rest are kept, so the two sum to at most 1."""
    _number("mask_replace_prob", mask_replace_prob, 0, 1)
    _number("random_replace_prob", random_replace_prob, 0, 1)
    if mask_replace_prob + random_replace_prob > 1.0 + 1e-12:
        raise ValueError(
            "`mask_replace_prob` + `random_replace_prob` must be <= 1 (the rest are kept), got "
            f"{mask_replace_prob} + {random_replace_prob}."
        )


def check_seed_and_generator(seed: Any, generator: Any) -> None:
    """A collator's randomness: a non-negative `seed`, a `torch.Generator`, or neither (torch's global stream)."""
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"`seed` must be None or a non-negative integer, got {seed!r}.")
        if generator is not None:
            raise ValueError("`seed` and `generator` are mutually exclusive: give one of them.")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"`generator` must be a torch.Generator, got {type(generator).__name__}.")


# ----------------------------------------------------------------------------------------------
# SpanBERT's span sampler
# ----------------------------------------------------------------------------------------------


def span_length_probs(p: float = 0.2, max_span_length: int = 10) -> np.ndarray:
    """SpanBERT's span-length distribution: Geometric(p) over 1..max_span_length, renormalized.

    Joshi et al. (2020), section 3.1: "ℓ ~ Geo(p) ... clipped at ℓmax = 10", which with p = 0.2
    gives their mean span length of 3.8 words. Their code draws from the geometric probabilities of
    1..ℓmax renormalized (mean 3.797); capping longer draws at ℓmax instead would give a mean of 4.46.

    Args:
        p: success probability of the geometric distribution, in (0, 1].
        max_span_length: the longest span, in words.

    Returns:
        (max_span_length,) float64 probabilities; entry k is P(length = k + 1).
    """
    _number("span_geometric_p", p, 0, 1, low_open=True)
    _positive_int("max_span_length", max_span_length)
    lengths = np.arange(1, max_span_length + 1)
    probs = p * (1.0 - p) ** (lengths - 1)
    return probs / probs.sum()


def sample_span_mask(
    word_index: np.ndarray,
    mlm_probability: float,
    length_probs: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int]]]:
    """Select spans of whole words in one sequence until the masking budget is spent (SpanBERT).

    Joshi et al. (2020), section 3.1: repeatedly sample a span length ℓ (in words) and a starting
    word, select the ℓ complete words from there, until `mlm_probability` of the tokens are selected.
    As in their code, a span may run over already-selected words (those count once) and the last
    span is cut at the token where the budget is reached, so the budget is met exactly. Spans never
    cross a token that cannot be masked (`[CLS]`, `[SEP]`, padding), so they stay inside one segment.
    The budget is `mlm_probability * n` rounded up or down at random (stochastic rounding), so the
    expected rate is exactly `mlm_probability` even for short sequences.

    Args:
        word_index: (T,) int; -1 for tokens that are never masked, otherwise the word each token
            belongs to (the tokens of a word are consecutive and share the number).
        mlm_probability: the fraction of maskable tokens to select.
        length_probs: (L,) probabilities of span lengths 1..L, from `span_length_probs`.
        rng: the random source.

    Returns:
        selected: (T,) bool, the selected tokens.
        span_id: (T,) int64, which span selected each token (-1 where not selected); the 80/10/10
            replacement is decided once per span.
        spans: one (first token, end token exclusive, number of words) per sampled span.
    """
    word_index = np.asarray(word_index)
    T = word_index.shape[0]
    selected = np.zeros(T, dtype=bool)
    span_id = np.full(T, -1, dtype=np.int64)
    spans: list[tuple[int, int, int]] = []
    maskable = np.flatnonzero(word_index >= 0)
    if maskable.size == 0:
        return selected, span_id, spans
    # word boundaries: a new word where the word number changes or a non-maskable token intervenes
    new_word = np.ones(maskable.size, dtype=bool)
    new_word[1:] = (word_index[maskable[1:]] != word_index[maskable[:-1]]) | (np.diff(maskable) != 1)
    starts = maskable[new_word]  # (W,) first token of each word
    ends = np.append(maskable[np.flatnonzero(new_word)[1:] - 1] + 1, maskable[-1] + 1)  # (W,) exclusive
    # words w and w + 1 are in the same segment when no unmaskable token separates them
    joined = starts[1:] == ends[:-1]  # (W - 1,)

    n = maskable.size
    budget = int(np.floor(n * mlm_probability + rng.random()))
    lengths = rng.choice(np.arange(1, length_probs.size + 1), size=max(budget, 1), p=length_probs)
    count = 0
    while count < budget:
        free = np.flatnonzero(~selected[starts])  # words whose first token is still free
        w = int(free[rng.integers(free.size)])
        length = int(lengths[len(spans)])
        k = len(spans)
        first, last, n_words = int(starts[w]), int(starts[w]), 0
        while n_words < length and count < budget:
            for t in range(starts[w], ends[w]):
                if count >= budget:
                    break
                if not selected[t]:
                    selected[t] = True
                    span_id[t] = k
                    count += 1
                last = t
            n_words += 1
            if w + 1 >= starts.size or not joined[w]:
                break  # end of the segment
            w += 1
        spans.append((first, last + 1, n_words))
    return selected, span_id, spans


# ----------------------------------------------------------------------------------------------
# The masked-LM collator
# ----------------------------------------------------------------------------------------------


@dataclass
class DataCollatorForMaskedLM:
    """Pad a batch and apply BERT's masked-LM corruption; `labels` hold the originals to predict.

    Selection (`masking`):

    - "token": each maskable token is selected with probability `mlm_probability`
      (Devlin et al., 2019; the per-token Bernoulli of transformers' DataCollatorForLanguageModeling).
    - "whole_word": each word is selected with probability `mlm_probability`, all its pieces
      together (BERT's whole-word-masking release): with `walk [MASK]` visible, predicting the
      `##ing` of `walking` is too easy. Words come from the examples' `word_ids` (as returned by a
      fast tokenizer's `word_ids()`; None for special tokens) or, without them, from the WordPiece
      continuation prefix (`##`) in the tokenizer's vocabulary.
    - "span": SpanBERT (Joshi et al., 2020): spans of whole words with lengths from a geometric
      distribution (p = `span_geometric_p`, at most `max_span_length` words, mean 3.8), sampled
      until `mlm_probability` of the tokens are selected; see `sample_span_mask`.

    Replacement of the selected tokens (Devlin et al., 2019, section 3.1): `[MASK]` with probability
    `mask_replace_prob`, a random token with probability `random_replace_prob`, else unchanged: the
    model cannot rely on seeing `[MASK]` (absent at fine-tuning), and must keep a good representation
    of every input token. The decision is per token for "token"/"whole_word" and per span for
    "span" (SpanBERT replaces a whole span alike). Random tokens are drawn uniformly from the
    non-special vocabulary (BERT drew from the whole vocabulary, `[SEP]` and `[PAD]` included).

    Special tokens (the tokenizer's, plus any `special_tokens_mask` given) and padding are never
    selected. `labels` are the original ids at selected positions and -100 everywhere else.

    Dynamic masking (RoBERTa; Liu et al., 2019): nothing is cached, every call draws a new mask, so
    each epoch sees the same text masked differently. (BERT masked once during preprocessing and
    duplicated the data 10 times.) `seed` makes the sequence of masks reproducible; without `seed`
    or `generator` torch's global RNG is used, which DataLoader seeds differently in each worker.
    With `seed`, each DataLoader worker gets its own generator seeded from (seed, worker id).

    Padding is on the right (an encoder with learned absolute positions numbers real tokens from 0),
    whatever the tokenizer's `padding_side`.

    Args:
        tokenizer: needs a `mask_token` and a `pad_token`.
        mlm_probability: the fraction of maskable tokens selected for prediction.
        mask_replace_prob: the probability that a selected token becomes `[MASK]`.
        random_replace_prob: the probability that a selected token becomes a random token; the rest
            (1 - mask_replace_prob - random_replace_prob) are kept.
        masking: "token", "whole_word" or "span".
        span_geometric_p: "span" only: p of the geometric span-length distribution.
        max_span_length: "span" only: the longest span, in words.
        continuation_prefix: the vocabulary prefix of word-continuation pieces, used for
            "whole_word"/"span" when the examples carry no `word_ids`.
        pad_to_multiple_of: pad the batch length to a multiple of this (tensor-core friendly).
        seed: seed of a private generator, for reproducible masks.
        generator: a torch.Generator to draw from instead (mutually exclusive with `seed`).

    Call:
        examples: a list of mappings with `input_ids` (list of ints or a 1-D tensor) and optionally
        `attention_mask`, `token_type_ids`, `special_tokens_mask`, `word_ids` (per token, None or
        -1 for tokens outside words) and `next_sentence_label` (an int).

    Returns:
        A dict of tensors: `input_ids` (B, T) corrupted, `attention_mask` (B, T), `labels` (B, T),
        `token_type_ids` (B, T) if the examples had them, `next_sentence_label` (B,) if they had it.

    Note:
        `Trainer` drops dataset columns its model's `forward` does not take: keep `word_ids` or
        `special_tokens_mask` with `remove_unused_columns=False`.
    """

    tokenizer: PreTrainedTokenizerBase
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    masking: str = "token"
    span_geometric_p: float = 0.2
    max_span_length: int = 10
    continuation_prefix: str = "##"
    pad_to_multiple_of: int | None = None
    seed: int | None = None
    generator: torch.Generator | None = None

    _special: torch.Tensor = field(init=False, repr=False)
    _random_ids: torch.Tensor = field(init=False, repr=False)
    _continuation: torch.Tensor | None = field(init=False, repr=False, default=None)
    _span_probs: np.ndarray | None = field(init=False, repr=False, default=None)
    _generators: dict[int, torch.Generator] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        if getattr(self.tokenizer, "mask_token_id", None) is None:
            raise ValueError("`tokenizer` has no mask_token: masked-LM inputs need one (e.g. '[MASK]').")
        if getattr(self.tokenizer, "pad_token_id", None) is None:
            raise ValueError("`tokenizer` has no pad_token: batches of different lengths need one.")
        _number("mlm_probability", self.mlm_probability, 0, 1)
        check_replace_probs(self.mask_replace_prob, self.random_replace_prob)
        if self.masking not in MASKING_KINDS:
            raise ValueError(f"`masking` must be one of {list(MASKING_KINDS)}, got {self.masking!r}.")
        if self.masking == "span":
            self._span_probs = span_length_probs(self.span_geometric_p, self.max_span_length)
        else:  # validated anyway, so a typo never waits for the day someone switches to spans
            span_length_probs(self.span_geometric_p, self.max_span_length)
        if not isinstance(self.continuation_prefix, str) or not self.continuation_prefix:
            raise ValueError(
                f"`continuation_prefix` must be a non-empty string, got {self.continuation_prefix!r}."
            )
        _positive_int("pad_to_multiple_of", self.pad_to_multiple_of, allow_none=True)
        check_seed_and_generator(self.seed, self.generator)

        vocab_size = len(self.tokenizer)
        special = torch.zeros(vocab_size, dtype=torch.bool)  # (V,)
        special[[i for i in self.tokenizer.all_special_ids if i is not None and i < vocab_size]] = True
        self._special = special
        self._random_ids = torch.nonzero(~special).flatten()  # (V - n_special,)
        if self.random_replace_prob > 0 and self._random_ids.numel() == 0:
            raise ValueError("`random_replace_prob` > 0 but the tokenizer has no non-special token to draw.")

    # -- randomness ------------------------------------------------------------------------------

    def _torch_generator(self) -> torch.Generator | None:
        if self.generator is not None:
            return self.generator
        if self.seed is None:
            return None  # torch's global RNG
        # one generator per DataLoader worker: copies of one seeded generator would all draw the
        # same masks in every worker
        info = torch.utils.data.get_worker_info()
        worker = 0 if info is None else info.id
        if worker not in self._generators:
            state = np.random.SeedSequence([self.seed, worker]).generate_state(1, dtype=np.uint64)[0]
            self._generators[worker] = torch.Generator().manual_seed(int(state))
        return self._generators[worker]

    # -- batching --------------------------------------------------------------------------------

    def _continuation_table(self) -> torch.Tensor:
        """(V,) bool: which vocabulary entries continue a word (WordPiece's `##` pieces)."""
        if self._continuation is None:
            table = torch.zeros(len(self.tokenizer), dtype=torch.bool)
            ids = [i for t, i in self.tokenizer.get_vocab().items() if t.startswith(self.continuation_prefix)]
            if ids:
                table[ids] = True
            self._continuation = table
        return self._continuation

    def _pad(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not isinstance(examples, Sequence) or len(examples) == 0:
            raise ValueError("`examples` must be a non-empty list of mappings with 'input_ids'.")
        for example in examples:
            if not isinstance(example, Mapping) or "input_ids" not in example:
                raise ValueError("`examples` must be mappings with an 'input_ids' entry.")
            unknown = set(example) - set(EXAMPLE_KEYS)
            if unknown:
                raise ValueError(
                    f"`examples` have unknown keys {sorted(unknown)}; allowed: {list(EXAMPLE_KEYS)} "
                    "(the collator makes `labels` itself)."
                )
        keys = set(examples[0])
        if any(set(example) != keys for example in examples):
            raise ValueError("`examples` must all have the same keys.")

        ids = [torch.as_tensor(example["input_ids"], dtype=torch.long).flatten() for example in examples]
        B, T = len(ids), max(x.numel() for x in ids)
        if self.pad_to_multiple_of is not None:
            T = -(-T // self.pad_to_multiple_of) * self.pad_to_multiple_of
        vocab_size = len(self.tokenizer)
        batch = {
            "input_ids": torch.full((B, T), self.tokenizer.pad_token_id, dtype=torch.long),  # (B, T)
            "attention_mask": torch.zeros(B, T, dtype=torch.long),
        }
        # padding: type 0 (BERT's), special (never masked), outside any word
        fills = {"token_type_ids": 0, "special_tokens_mask": 1, "word_ids": -1}
        for key in keys & set(fills):
            batch[key] = torch.full((B, T), fills[key], dtype=torch.long)
        for b, (x, example) in enumerate(zip(ids, examples)):
            n = x.numel()
            if n and (int(x.min()) < 0 or int(x.max()) >= vocab_size):
                raise ValueError(f"`input_ids` of example {b} hold ids outside [0, {vocab_size}).")
            batch["input_ids"][b, :n] = x
            batch["attention_mask"][b, :n] = 1
            for key in keys & ({"attention_mask"} | set(fills)):
                values = example[key]
                if key == "word_ids":
                    values = [-1 if v is None else v for v in values]
                values = torch.as_tensor(values, dtype=torch.long).flatten()
                if values.numel() != n:
                    raise ValueError(
                        f"`{key}` of example {b} has {values.numel()} entries for {n} input_ids."
                    )
                batch[key][b, :n] = values
        if "next_sentence_label" in keys:
            batch["next_sentence_label"] = torch.tensor(
                [int(example["next_sentence_label"]) for example in examples], dtype=torch.long
            )  # (B,)
        return batch

    def _word_starts(self, batch: dict[str, torch.Tensor], maskable: torch.Tensor) -> torch.Tensor:
        """(B, T) bool: maskable tokens that begin a word (every maskable token for "token")."""
        if self.masking == "token":
            return maskable
        prev_maskable = torch.zeros_like(maskable)
        prev_maskable[:, 1:] = maskable[:, :-1]
        if "word_ids" in batch:
            word_ids = batch["word_ids"]
            prev = torch.full_like(word_ids, -1)
            prev[:, 1:] = word_ids[:, :-1]
            starts = (word_ids < 0) | (word_ids != prev)
        else:
            table = self._continuation_table()
            if not bool(table.any()):
                raise ValueError(
                    f"masking={self.masking!r} needs word boundaries: give `word_ids` with the examples "
                    f"(no vocabulary entry starts with continuation_prefix={self.continuation_prefix!r})."
                )
            starts = ~table[batch["input_ids"]]
        # a piece after [CLS]/[SEP]/padding starts a word even if it is a `##` piece
        return maskable & (starts | ~prev_maskable)

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self._pad(examples)
        generator = self._torch_generator()
        input_ids = batch["input_ids"]  # (B, T)
        B, T = input_ids.shape

        maskable = batch["attention_mask"].bool() & ~self._special[input_ids]  # (B, T)
        if "special_tokens_mask" in batch:
            maskable &= ~batch.pop("special_tokens_mask").bool()
        starts = self._word_starts(batch, maskable)
        batch.pop("word_ids", None)
        # (B, T) word number of each token within its row, -1 outside words
        word_index = torch.where(maskable, starts.long().cumsum(dim=1) - 1, -1)

        if self.masking == "span":
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            rng = np.random.default_rng(seed)
            rows = [
                sample_span_mask(row, self.mlm_probability, self._span_probs, rng)
                for row in word_index.numpy()
            ]
            selected = torch.from_numpy(np.stack([r[0] for r in rows]))  # (B, T)
            unit = torch.from_numpy(np.stack([r[1] for r in rows]))  # (B, T) span ids
            n_units = max(1, int(unit.max()) + 1)
        else:
            # one Bernoulli draw per word, shared by all its pieces
            n_words = max(1, int(word_index.max()) + 1)
            chosen = torch.rand(B, n_words, generator=generator) < self.mlm_probability  # (B, W)
            selected = maskable & chosen.gather(1, word_index.clamp(min=0))  # (B, T)
            unit = torch.arange(T).expand(B, T)  # the 80/10/10 decision is per token
            n_units = T

        labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))  # (B, T)

        # 80/10/10 (Devlin et al., 2019): one uniform draw per decision unit
        u = torch.rand(B, n_units, generator=generator).gather(1, unit.clamp(min=0))  # (B, T)
        to_mask = selected & (u < self.mask_replace_prob)
        to_random = (
            selected & (u >= self.mask_replace_prob) & (u < self.mask_replace_prob + self.random_replace_prob)
        )
        corrupted = input_ids.clone()
        corrupted[to_mask] = self.tokenizer.mask_token_id
        if bool(to_random.any()):
            draw = torch.randint(self._random_ids.numel(), (int(to_random.sum()),), generator=generator)
            corrupted[to_random] = self._random_ids[draw]

        batch["input_ids"] = corrupted
        batch["labels"] = labels
        return batch


# ----------------------------------------------------------------------------------------------
# Sentence pairs for NSP (BERT) and SOP (ALBERT)
# ----------------------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*")


def split_sentences(text: str) -> list[str]:
    """Split a text into sentences: after `.`, `!` or `?` followed by whitespace, and at line breaks.

    A deliberately simple splitter (no abbreviation handling): NSP/SOP only need segment boundaries
    that are mostly sentence boundaries. Pass lists of sentences to `make_sentence_pairs` to use
    a better one.
    """
    return [s for s in (part.strip() for part in _SENTENCE_END.split(text)) if s]


def _tokenized_documents(documents, tokenizer) -> list[list[list[int]]]:
    """Each document as a list of non-empty sentences of token ids (no special tokens)."""
    if isinstance(documents, str):
        raise ValueError("`documents` must be an iterable of documents, not a single string.")
    out = []
    for d, doc in enumerate(documents):
        sentences = split_sentences(doc) if isinstance(doc, str) else list(doc)
        texts = [s for s in sentences if isinstance(s, str)]
        if len(texts) not in (0, len(sentences)):
            raise ValueError(f"`documents[{d}]` mixes strings and token-id lists.")
        if texts:
            sentences = tokenizer(texts, add_special_tokens=False)["input_ids"]
        ids = []
        for s in sentences:
            if not isinstance(s, (Sequence, np.ndarray, torch.Tensor)) or not all(
                isinstance(i, (int, np.integer)) or (isinstance(i, torch.Tensor) and i.ndim == 0) for i in s
            ):
                raise ValueError(
                    f"`documents[{d}]` must be a text or a list of sentences (strings or lists of token ids)."
                )
            if len(s):
                ids.append([int(i) for i in s])
        if ids:
            out.append(ids)
    return out


def _truncate_pair(
    a: list[int], b: list[int], max_tokens: int, rng: random.Random
) -> tuple[list[int], list[int]]:
    """BERT's `truncate_seq_pair`: drop a token from the longer segment until both fit.

    The token comes from the front or the back at random, "to add more randomness and avoid
    biases" (Devlin et al.'s create_pretraining_data.py).
    """
    a0, a1, b0, b1 = 0, len(a), 0, len(b)
    while (a1 - a0) + (b1 - b0) > max_tokens:
        front = rng.random() < 0.5
        if a1 - a0 > b1 - b0:
            a0, a1 = (a0 + 1, a1) if front else (a0, a1 - 1)
        else:
            b0, b1 = (b0 + 1, b1) if front else (b0, b1 - 1)
    return a[a0:a1], b[b0:b1]


def _check_pair_arguments(
    tokenizer, objective, max_length, seed, negative_prob, short_seq_prob
) -> tuple[int, int]:
    """Check `make_sentence_pairs`' arguments; returns the ids of [CLS] and [SEP]."""
    if objective not in PAIR_OBJECTIVES:
        raise ValueError(f"`objective` must be one of {list(PAIR_OBJECTIVES)}, got {objective!r}.")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 5:
        raise ValueError(
            f"`max_length` must be an integer >= 5 ([CLS] A [SEP] B [SEP] with 1 token each at least), "
            f"got {max_length!r}."
        )
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"`seed` must be an integer, got {seed!r}.")
    _number("negative_prob", negative_prob, 0, 1)
    _number("short_seq_prob", short_seq_prob, 0, 1)
    cls_id, sep_id = getattr(tokenizer, "cls_token_id", None), getattr(tokenizer, "sep_token_id", None)
    if cls_id is None or sep_id is None:
        raise ValueError(
            "`tokenizer` needs a cls_token and a sep_token (e.g. training.data.tokenizer.BERT_SPECIAL_TOKENS)."
        )
    return cls_id, sep_id


def _split_chunk(chunk: list[list[int]], rng: random.Random) -> tuple[list[int], list[int], int]:
    """Cut a chunk of sentences into segments A and B after a random sentence (a lone sentence at a
    random token; none of fewer than 2 tokens). Returns `(a, b, number of B's sentences)`."""
    if len(chunk) >= 2:
        a_end = rng.randint(1, len(chunk) - 1)
        return (
            [t for s in chunk[:a_end] for t in s],
            [t for s in chunk[a_end:] for t in s],
            len(chunk) - a_end,
        )
    if len(chunk[0]) >= 2:
        cut = rng.randint(1, len(chunk[0]) - 1)
        return chunk[0][:cut], chunk[0][cut:], 0
    return [], [], 0


def _random_segment(docs: list[list[list[int]]], d: int, min_tokens: int, rng: random.Random) -> list[int]:
    """NSP's random B: text of a random document other than `d`, from a random sentence on."""
    other = rng.randrange(len(docs) - 1)
    other += other >= d  # any document but this one
    random_doc, b = docs[other], []
    for s in random_doc[rng.randrange(len(random_doc)) :]:
        b.extend(s)
        if len(b) >= min_tokens:
            break
    return b


def _document_pairs(docs, d: int, target: int, objective: str, negative_prob: float, max_tokens: int, rng):
    """The `(a, b, label)` pairs of document `d`: its sentences accumulated into chunks of about
    `target` tokens, each cut into A and B (`make_sentence_pairs`)."""
    doc, pairs = docs[d], []
    chunk: list[list[int]] = []
    length = i = 0
    while i < len(doc):
        chunk.append(doc[i])
        length += len(doc[i])
        if i == len(doc) - 1 or length >= target:
            negative = rng.random() < negative_prob
            a, b, unused = _split_chunk(chunk, rng)
            if a and b:
                if negative and objective == "nsp":
                    b = _random_segment(docs, d, max(1, target - len(a)), rng)
                    i -= unused  # put B's sentences back: they start the next chunk
                elif negative:  # sop
                    a, b = b, a
                pairs.append((*_truncate_pair(a, b, max_tokens, rng), int(negative)))
            chunk, length = [], 0
        i += 1
    return pairs


def _pair_example(a: list[int], b: list[int], label: int, cls_id: int, sep_id: int) -> dict[str, Any]:
    """`[CLS] A [SEP] B [SEP]` with its segment ids (0 for [CLS] A [SEP], 1 for B [SEP]) and label."""
    return {
        "input_ids": [cls_id, *a, sep_id, *b, sep_id],
        "token_type_ids": [0] * (len(a) + 2) + [1] * (len(b) + 1),
        "next_sentence_label": label,
    }


def make_sentence_pairs(
    documents: Iterable[str | Sequence[str] | Sequence[Sequence[int]]],
    tokenizer: PreTrainedTokenizerBase,
    objective: str = "nsp",
    max_length: int = 128,
    seed: int = 0,
    negative_prob: float = 0.5,
    short_seq_prob: float = 0.1,
) -> list[dict[str, Any]]:
    """Build `[CLS] A [SEP] B [SEP]` pretraining examples for NSP or SOP, BERT's way.

    Follows `create_instances_from_document` of BERT's create_pretraining_data.py (Devlin et al.,
    2019): sentences of a document are accumulated into a chunk until it reaches the target length
    (max_length - 3 tokens, or with probability `short_seq_prob` a random shorter one, so the model
    also sees short inputs); the chunk is cut after a random sentence into segment A and segment B.

    - "nsp" (next-sentence prediction; Devlin et al., 2019): with probability `negative_prob`,
      B is replaced by text from a random other document, from a random sentence on
      (`next_sentence_label` 1, "random"); otherwise B is the text that follows A (label 0). The
      sentences of an unused B are put back and start the next chunk, as in BERT.
    - "sop" (sentence-order prediction; ALBERT, Lan et al., 2020, section 4.2): A and B are always
      consecutive text of one document; with probability `negative_prob` they are swapped (label 1),
      otherwise in order (label 0). NSP's negatives differ in topic, which is easy to spot; SOP's
      only differ in order, which forces the model to learn coherence.

    The pair is then truncated to `max_length - 3` tokens like BERT's `truncate_seq_pair`: one token
    at a time from the longer segment, from its front or its back at random.

    Deviation from BERT: a chunk of a single sentence (a document's last one, or one longer than
    the target) is cut inside the sentence at a random token (for a random B, the rest of that
    sentence is dropped), instead of always taking a random B, which skews BERT's labels towards 1
    on corpora of short documents. Sentences of fewer than 2 tokens that form a chunk alone are
    skipped.

    Args:
        documents: texts (split with `split_sentences`), or lists of sentences, each a string or
            a list of token ids without special tokens.
        tokenizer: tokenizes string sentences (without special tokens); gives `cls_token_id` and
            `sep_token_id`.
        objective: "nsp" or "sop".
        max_length: the length of every example, special tokens included; at least 5.
        seed: seed of the random choices; the same arguments give the same pairs.
        negative_prob: the probability of a label-1 pair (a random B for NSP, swapped for SOP).
        short_seq_prob: the probability of a shorter target length for a document (BERT: 0.1).

    Returns:
        One dict per pair, in document order: `input_ids` ([CLS] A [SEP] B [SEP]), `token_type_ids`
        (0 for [CLS] A [SEP], 1 for B [SEP]) and `next_sentence_label` (0 or 1), ready for
        `DataCollatorForMaskedLM` (or `datasets.Dataset.from_list`).

    Raises:
        ValueError: naming the argument, for an unknown objective, a too small max_length,
            probabilities outside [0, 1], a tokenizer without [CLS]/[SEP], or NSP with fewer than
            two non-empty documents.
    """
    cls_id, sep_id = _check_pair_arguments(
        tokenizer, objective, max_length, seed, negative_prob, short_seq_prob
    )
    docs = _tokenized_documents(documents, tokenizer)
    if objective == "nsp" and negative_prob > 0 and len(docs) < 2:
        raise ValueError(
            f"`documents`: NSP draws random segments from other documents, so it needs at least 2 "
            f"non-empty documents, got {len(docs)}."
        )
    rng = random.Random(seed)
    max_tokens = max_length - 3  # [CLS], [SEP], [SEP]
    pairs: list[dict[str, Any]] = []
    for d in range(len(docs)):
        # BERT draws one target length per document
        target = max_tokens if rng.random() >= short_seq_prob else rng.randint(2, max_tokens)
        for a, b, label in _document_pairs(docs, d, target, objective, negative_prob, max_tokens, rng):
            pairs.append(_pair_example(a, b, label, cls_id, sep_id))
    logger.info(
        "Built %d %s pairs from %d documents (%.1f%% label 1).",
        len(pairs),
        objective,
        len(docs),
        100.0 * sum(p["next_sentence_label"] for p in pairs) / max(1, len(pairs)),
    )
    return pairs
