"""The noise of the encoder-decoder pretraining objectives, as plain functions on NumPy arrays.

Usable (and tested) on their own, and what the collators of `training.data.collators_seq2seq`
apply: T5's span masks and sentinels (Raffel et al., 2020: `random_spans_noise_mask`,
`iid_noise_mask`, `noise_spans_to_sentinels`, `span_corruption_lengths`), BART's noising functions
(Lewis et al., 2020: `text_infilling`, `permute_sentences`, `rotate_document`) and Mask-Predict's
target mask (Ghazvininejad et al., 2019: `cmlm_mask`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hf_lm.models.hflm_common import _number, _positive, _positive_int

# ----------------------------------------------------------------------------------------------
# T5's noise masks and sentinels
# ----------------------------------------------------------------------------------------------


def _random_segmentation(num_items: int, num_segments: int, rng: np.random.Generator) -> np.ndarray:
    """Lengths of a uniformly random split of `num_items` items into `num_segments` non-empty runs.

    T5's `_random_segmentation` shuffles `num_segments - 1` "segment starts" among the
    `num_items - 1` gaps between items; choosing those gaps without replacement is the same draw.
    """
    cuts = np.sort(rng.choice(num_items - 1, size=num_segments - 1, replace=False)) + 1
    return np.diff(np.concatenate([[0], cuts, [num_items]]))  # (num_segments,)


def random_spans_noise_mask(
    length: int,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """T5's span-corruption noise: which tokens fall into the corrupted spans.

    Raffel et al. (2020), section 3.3.4, and `random_spans_noise_mask` of the T5 code: exactly
    `round(length * noise_density)` noise tokens (at least 1, at most `length - 1`), in exactly
    `round(num_noise / mean_noise_span_length)` spans (at least 1). The noise tokens and the kept
    tokens are each split into that many non-empty runs at uniformly random points, and the runs
    interleave kept, noise, kept, noise, ... So the lengths of the corrupted input and of the target
    depend only on `length` (`span_corruption_lengths`), and a batch of equal blocks needs no
    padding. As in T5 the text always starts with kept tokens and ends with noise. Sequences
    shorter than 2 are noised as if of length 2 and cut (T5's "avoid degeneracy").

    Deviation from T5 (which fails there): when there are fewer kept tokens than spans (noise
    densities near 1), the number of spans is lowered to the number of kept tokens.

    Args:
        length: the number of tokens, >= 0.
        noise_density: the fraction of tokens to corrupt, in [0, 1).
        mean_noise_span_length: the average span length, > 0.
        rng: the random source (a fresh unseeded generator when None).

    Returns:
        (length,) bool, True for noise tokens.
    """
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise ValueError(f"`length` must be a non-negative integer, got {length!r}.")
    _number("noise_density", noise_density, 0, 1, high_open=True)
    _positive("mean_noise_span_length", mean_noise_span_length)
    rng = np.random.default_rng() if rng is None else rng
    if noise_density == 0.0:
        return np.zeros(length, dtype=bool)
    orig_length, length = int(length), max(int(length), 2)
    # Python's round, like tf.round, rounds halves to even: the same counts as T5
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = max(round(num_noise / mean_noise_span_length), 1)
    num_kept = length - num_noise
    num_spans = min(num_spans, num_kept)
    noise_lengths = _random_segmentation(num_noise, num_spans, rng)  # (S,)
    kept_lengths = _random_segmentation(num_kept, num_spans, rng)  # (S,)
    interleaved = np.stack([kept_lengths, noise_lengths], axis=1).reshape(-1)  # (2S,) kept, noise, ...
    is_noise = np.repeat(np.tile([False, True], num_spans), interleaved)  # (length,)
    return is_noise[:orig_length]


def iid_noise_mask(length: int, noise_density: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """Independent per-token noise: each token is corrupted with probability `noise_density`.

    The "i.i.d." corruption of Raffel et al. (2020), section 3.3.2 (BERT-style, replace spans,
    drop tokens). The number of corrupted tokens is Binomial(length, noise_density).

    Args:
        length: the number of tokens, >= 0.
        noise_density: the corruption probability, in [0, 1].
        rng: the random source (a fresh unseeded generator when None).

    Returns:
        (length,) bool, True for noise tokens.
    """
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise ValueError(f"`length` must be a non-negative integer, got {length!r}.")
    _number("noise_density", noise_density, 0, 1)
    rng = np.random.default_rng() if rng is None else rng
    return rng.random(int(length)) < noise_density


def sentinels_needed(noise: np.ndarray, final_sentinel: bool) -> tuple[np.ndarray, int, int]:
    """(T,) bool first token of each noise span, the number of spans, the number of sentinels needed."""
    starts = noise & ~np.concatenate([[False], noise[:-1]])
    num_spans = int(starts.sum())
    # without `final_sentinel`, a final sentinel stands for trailing kept tokens only (T5's code)
    add_final = final_sentinel or noise.size == 0 or not bool(noise[-1])
    return starts, num_spans, num_spans + int(add_final)


def noise_spans_to_sentinels(
    ids: np.ndarray,
    noise_mask: np.ndarray,
    sentinel_ids: Sequence[int],
    final_sentinel: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Replace each run of noise by one sentinel in the input; list the runs in the target.

    Raffel et al. (2020), Figure 2: "Thank you <X> me to your party <Y> week ." ->
    "<X> for inviting <Y> last <Z>". The i-th noise span (left to right) becomes `sentinel_ids[i]`
    in the input, and the target is `sentinel_ids[i]` followed by span i, for every span, so the
    sentinels appear in increasing order in both. With `final_sentinel` the target always ends
    with one more sentinel `sentinel_ids[k]` (k spans), as in the paper's figure: it marks the end
    of the last span. Without it the final sentinel appears only when the text ends with kept
    tokens, which is exactly T5's code (there a target sentinel stands for each kept run, the same
    numbering whenever the text starts with kept tokens, as `random_spans_noise_mask` guarantees;
    since its texts always end with noise, T5's span-corruption targets have no final sentinel).

    Args:
        ids: (T,) int token ids.
        noise_mask: (T,) bool, True for noise tokens.
        sentinel_ids: the ids of `<extra_id_0>`, `<extra_id_1>`, ... in that order.
        final_sentinel: always end the target with a sentinel (see above).

    Returns:
        inputs: (T - num_noise + num_spans,) int64, kept tokens with one sentinel per span.
        targets: (num_noise + num_spans [+ 1],) int64, each sentinel followed by its span.

    Raises:
        ValueError: fewer sentinels than the text needs (naming `sentinel_ids`).
    """
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    noise = np.asarray(noise_mask, dtype=bool).reshape(-1)
    if noise.shape != ids.shape:
        raise ValueError(f"`noise_mask` has {noise.size} entries for {ids.size} ids.")
    starts, num_spans, needed = sentinels_needed(noise, final_sentinel)
    if needed > len(sentinel_ids):
        raise ValueError(
            f"`sentinel_ids` has {len(sentinel_ids)} sentinel tokens, but this text of {ids.size} tokens "
            f"needs {needed} ({num_spans} noise spans{' + the final one' if needed > num_spans else ''}); "
            "add more with `training.data.tokenizer.add_sentinel_tokens`."
        )
    add_final = needed > num_spans
    sentinels = np.asarray(list(sentinel_ids[:needed]), dtype=np.int64)
    # input: sentinel i in place of span i's first token, the span's other tokens dropped
    inputs = ids.copy()
    inputs[starts] = sentinels[:num_spans]
    inputs = inputs[~noise | starts]
    # target: the noise tokens, with sentinel i inserted before the first token of span i
    targets = np.insert(ids[noise], np.flatnonzero(starts[noise]), sentinels[:num_spans])
    if add_final:
        targets = np.append(targets, sentinels[num_spans])
    return inputs, targets.astype(np.int64)


def span_corruption_lengths(
    inputs_length: int,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
    final_sentinel: bool = True,
    add_eos_token: bool = True,
) -> tuple[int, int]:
    """How long raw blocks must be for span-corrupted inputs of exactly `inputs_length` tokens.

    T5's `random_spans_helper` (Raffel et al., 2020): corruption shortens the input (each span
    becomes one sentinel), so to fill a 512-token encoder T5 packs 568-token blocks, whose targets
    are 114 tokens long (115 here with the final sentinel). The lengths are exact because
    `random_spans_noise_mask` fixes the numbers of noise tokens and spans for a given length.

    Args:
        inputs_length: the wanted length of the corrupted input, EOS included.
        noise_density: as in `random_spans_noise_mask`.
        mean_noise_span_length: as in `random_spans_noise_mask`.
        final_sentinel: whether targets end with a final sentinel (the collator's default).
        add_eos_token: whether an EOS is appended to inputs and targets (the collator's default).

    Returns:
        (tokens_length, targets_length): the largest raw length whose corrupted input fits in
        `inputs_length`, and the length of its targets.
    """
    _positive_int("inputs_length", inputs_length)
    _number("noise_density", noise_density, 0, 1, high_open=True)
    _positive("mean_noise_span_length", mean_noise_span_length)
    eos = int(bool(add_eos_token))

    def lengths(tokens_length: int) -> tuple[int, int]:
        num_noise = min(max(round(tokens_length * noise_density), 1), tokens_length - 1)
        num_spans = min(max(round(num_noise / mean_noise_span_length), 1), tokens_length - num_noise)
        inputs = tokens_length - num_noise + num_spans + eos
        targets = num_noise + num_spans + int(bool(final_sentinel)) + eos
        return inputs, targets

    tokens_length = 2
    if lengths(tokens_length)[0] > inputs_length:
        raise ValueError(f"`inputs_length` {inputs_length} is too short for any span-corrupted input.")
    while lengths(tokens_length + 1)[0] <= inputs_length:
        tokens_length += 1
    return tokens_length, lengths(tokens_length)[1]


# ----------------------------------------------------------------------------------------------
# BART's noising functions
# ----------------------------------------------------------------------------------------------


def _poisson_span_lengths(budget: int, poisson_lambda: float, rng: np.random.Generator) -> np.ndarray:
    """Poisson(λ) span lengths drawn until they cover `budget` tokens; the last one is cut to fit."""
    chunk = max(8, int(2 * budget / poisson_lambda) + 8)
    lengths = rng.poisson(poisson_lambda, size=chunk)
    while lengths.sum() < budget:
        lengths = np.concatenate([lengths, rng.poisson(poisson_lambda, size=chunk)])
    total = np.cumsum(lengths)
    k = int(np.searchsorted(total, budget)) + 1  # first k spans reach the budget
    lengths = lengths[:k].copy()
    lengths[-1] -= int(total[k - 1]) - budget  # > 0: the k - 1 first spans were short of it
    return lengths


def text_infilling(
    ids: np.ndarray,
    mask_token_id: int,
    mask_ratio: float = 0.3,
    poisson_lambda: float = 3.0,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """BART's text infilling: Poisson-length spans, each replaced by a single mask token.

    Lewis et al. (2020), section 2.2: "A number of text spans are sampled, with span lengths drawn
    from a Poisson distribution (λ = 3). Each span is replaced with a single [MASK] token. 0-length
    spans correspond to the insertion of [MASK] tokens." The model must also predict how many
    tokens each mask hides. `mask_ratio` of the tokens are masked (BART-large: 30%, section 5.1);
    the budget `mask_ratio * T` is rounded up or down at random, so the expected rate is exact even
    for short texts. Span lengths are drawn until they cover the budget and the last one is cut to
    fit. The spans are then placed at random without overlapping (every interleaving of the spans
    with the kept tokens equally likely), so exactly the budget is masked and each mask stands for
    one span. (fairseq's implementation picks random span starts and lets spans overlap, which
    masks less than the budget; it also moves 0-length spans to a separate insertion step.)

    Args:
        ids: (T,) int token ids.
        mask_token_id: the mask token.
        mask_ratio: the fraction of tokens to mask, in [0, 1].
        poisson_lambda: the mean span length λ, > 0.
        rng: the random source (a fresh unseeded generator when None).

    Returns:
        noised: (T - masked + num_spans,) int64, with one `mask_token_id` per span.
        spans: (start, length) of each span in `ids`, left to right; the j-th mask of `noised`
            replaces `ids[start:start + length]` (nothing for a 0-length span).
    """
    _number("mask_ratio", mask_ratio, 0, 1)
    _positive("poisson_lambda", poisson_lambda)
    rng = np.random.default_rng() if rng is None else rng
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    T = ids.size
    budget = min(int(np.floor(T * mask_ratio + rng.random())), T)
    if budget == 0:
        return ids.copy(), []
    lengths = _poisson_span_lengths(budget, poisson_lambda, rng)  # (k,)
    k = lengths.size
    # a uniformly random interleaving of the T - budget kept tokens with the k spans: span j comes
    # after slots[j] - j kept tokens
    slots = np.sort(rng.choice(T - budget + k, size=k, replace=False))
    starts = slots - np.arange(k) + np.concatenate([[0], np.cumsum(lengths)[:-1]])  # (k,)
    pieces, spans, position = [], [], 0
    for start, length in zip(starts.tolist(), lengths.tolist()):
        pieces.append(ids[position:start])
        pieces.append(np.array([mask_token_id], dtype=np.int64))
        spans.append((start, length))
        position = start + length
    pieces.append(ids[position:])
    return np.concatenate(pieces), spans


def split_sentences_ids(ids: np.ndarray, sentence_end_ids: Sequence[int]) -> list[np.ndarray]:
    """Split token ids after every sentence-end token; trailing tokens form a last sentence.

    Args:
        ids: (T,) int token ids.
        sentence_end_ids: the ids that end a sentence (kept at the end of their sentence).

    Returns:
        The non-empty sentences, in order; their concatenation is `ids`.
    """
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    ends = np.flatnonzero(np.isin(ids, np.asarray(list(sentence_end_ids), dtype=np.int64))) + 1
    return [s for s in np.split(ids, ends) if s.size]


def permute_sentences(
    ids: np.ndarray,
    sentence_end_ids: Sequence[int],
    ratio: float = 1.0,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """BART's sentence permutation: split the text into sentences and shuffle them.

    Lewis et al. (2020), section 2.2: "A document is divided into sentences based on full stops,
    and these sentences are shuffled in a random order." As in fairseq's `permute_sentences`,
    `ratio` of the sentences (rounded up) are chosen and shuffled among their own places; 1.0
    shuffles all of them (BART-large).

    Args:
        ids: (T,) int token ids.
        sentence_end_ids: the ids that end a sentence (see `split_sentences_ids`).
        ratio: the fraction of sentences to shuffle, in [0, 1].
        rng: the random source (a fresh unseeded generator when None).

    Returns:
        permuted: (T,) int64, the sentences in the new order.
        order: (num_sentences,) int64, permuted = concatenation of sentences[order].
    """
    _number("sentence_permutation_ratio", ratio, 0, 1)
    rng = np.random.default_rng() if rng is None else rng
    sentences = split_sentences_ids(ids, sentence_end_ids)
    n = len(sentences)
    order = np.arange(n)
    num = math.ceil(n * ratio)
    if num > 1:
        chosen = rng.choice(n, size=num, replace=False)
        order[chosen] = chosen[rng.permutation(num)]
    if n == 0:
        return np.asarray(ids, dtype=np.int64).reshape(-1).copy(), order
    return np.concatenate([sentences[i] for i in order]), order


def rotate_document(ids: np.ndarray, rng: np.random.Generator | None = None) -> tuple[np.ndarray, int]:
    """BART's document rotation: make the text start at a uniformly random token.

    Lewis et al. (2020), section 2.2: "A token is chosen uniformly at random, and the document is
    rotated so that it begins with that token", so the model learns to find the document's start.
    As in fairseq, the first token is never chosen, so a rotation always moves the text (texts of
    fewer than 2 tokens are returned unchanged).

    Args:
        ids: (T,) int token ids.
        rng: the random source (a fresh unseeded generator when None).

    Returns:
        rotated: (T,) int64, `ids[offset:] + ids[:offset]`.
        offset: the index in `ids` of the new first token (0 when unchanged).
    """
    rng = np.random.default_rng() if rng is None else rng
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if ids.size < 2:
        return ids.copy(), 0
    offset = int(rng.integers(1, ids.size))
    return np.concatenate([ids[offset:], ids[:offset]]), offset


def cmlm_mask(length: int, rng: np.random.Generator) -> np.ndarray:
    """(length,) bool: the target tokens a conditional masked LM predicts in one training example.

    Ghazvininejad et al. (2019), section 2: "we first sample the number of masked tokens from a
    uniform distribution between one and the sequence's length, and then randomly choose that number
    of tokens" (none for an empty target).
    """
    chosen = np.zeros(length, dtype=bool)
    if length:
        chosen[rng.choice(length, size=int(rng.integers(1, length + 1)), replace=False)] = True
    return chosen
