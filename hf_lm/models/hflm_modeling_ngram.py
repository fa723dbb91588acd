"""hf_lm's count-based n-gram language model, as a Hugging Face causal LM (`model_type="hflm_ngram"`).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.

An order-n model predicts a token from the previous n - 1 tokens with smoothed relative
frequencies. It has no trainable parameters: it is *fitted* by counting, in one streaming pass
over a tokenized corpus (`HfLmNGramForCausalLM.fit`, or `NGramCounter` for a corpus that arrives in
pieces), and its counts are registered buffers, so it saves as safetensors and loads with
`from_pretrained` like any other model. `forward` returns log-probabilities as `logits`, so the
usual cross-entropy, perplexity evaluation and `generate()` work unchanged.

Count tables (exact, no hashing). The distinct n-grams of order n are stored as one sorted int64
key each, `key = id(prefix) * V + last_token`, where `id(prefix)` is the index of the n-gram's
(n-1)-token prefix in the order n-1 table (the empty prefix of a unigram has id 0, so a unigram's
key is its token). All followers of a context are therefore contiguous in the order-n table and
found with two `searchsorted` calls, and every lookup is exact. The raw counts are stored next to
the keys; the smoothing-specific quantities (continuation counts, discounts, normalizers) are
derived from them when the model is first used and cached.

Shape legend: B batch, T sequence length, N positions scored (B * T), V vocabulary.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from transformers import GenerationMixin
from transformers.modeling_outputs import CausalLMOutput
from transformers.utils import can_return_tuple, logging

from .hflm_configuration_ngram import HfLmNGramConfig
from .hflm_inputs import (
    check_input_ids,
    check_padding_mask,
    logits_positions,
    refuse_packed_rows,
)
from .hflm_losses import (
    causal_lm_loss,
)
from .hflm_pretrained import (
    FixedWindowGeneration,
    HfLmPreTrainedModel,
    trainer_shifts_labels,
)

logger = logging.get_logger(__name__)

# ----------------------------------------------------------------------------------------------
# Counting
# ----------------------------------------------------------------------------------------------


def _as_token_tensor(sequence, vocab_size: int) -> torch.Tensor:
    """A 1-D int64 CPU tensor of token ids from a list, tuple, 1-D tensor or numpy array, checked."""
    ids = torch.as_tensor(sequence)
    if ids.dim() != 1:
        raise ValueError(f"Each sequence must be 1-D (a list of token ids), got shape {tuple(ids.shape)}.")
    if ids.numel() and (ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool):
        raise ValueError(f"Sequences must hold integer token ids, got dtype {ids.dtype}.")
    ids = ids.to(device="cpu", dtype=torch.long)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ValueError(
            f"A sequence contains token id {bad}, outside the vocabulary [0, vocab_size={vocab_size})."
        )
    return ids


def _merge(keys: torch.Tensor, counts: torch.Tensor, new_keys: torch.Tensor):
    """Add the occurrences `new_keys` (unsorted, repeated) to the sorted table (keys, counts).

    Returns:
        The merged sorted table and `remap` (old index -> new index, increasing), with which the
        keys of the next order, which embed these indices, are rewritten.
    """
    chunk_keys, chunk_counts = torch.unique(new_keys, return_counts=True)  # sorted
    merged, inverse = torch.unique(torch.cat((keys, chunk_keys)), return_inverse=True)
    merged_counts = torch.zeros(len(merged), dtype=torch.long)
    merged_counts.scatter_add_(0, inverse, torch.cat((counts, chunk_counts)))
    return merged, merged_counts, inverse[: len(keys)]


class NGramCounter:
    """Exact streaming counts of every n-gram of orders 1..`order` in a corpus of token sequences.

    Sequences are buffered until `chunk_tokens` tokens are waiting, then counted with `torch.unique`
    on the chunk's int64 keys and merged into the sorted tables; a longer sequence is cut into
    pieces that carry the `order - 1` previous tokens along as context, so memory beyond the tables
    themselves is bounded by the chunk size and no n-gram is lost or counted twice. N-grams never
    cross sequence boundaries.

    Args:
        order: the largest n counted (1..5).
        vocab_size: V; every token id must lie in [0, V).
        chunk_tokens: how many tokens are counted at once.

    Example:
        >>> counter = NGramCounter(order=2, vocab_size=3).update([[0, 1, 2], [2, 1]])
        >>> keys, counts = counter.tables()
        >>> keys[1].tolist(), counts[1].tolist()  # bigrams (0,1), (1,2), (2,1): prefix id * 3 + token
        ([1, 5, 7], [1, 1, 1])
    """

    def __init__(self, order: int, vocab_size: int, chunk_tokens: int = 1 << 20):
        for name, value in (("order", order), ("vocab_size", vocab_size), ("chunk_tokens", chunk_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
        self.order, self.vocab_size, self.chunk_tokens = order, vocab_size, chunk_tokens
        self.keys = [torch.empty(0, dtype=torch.long) for _ in range(order)]
        self.counts = [torch.empty(0, dtype=torch.long) for _ in range(order)]
        self.num_tokens = 0  # tokens counted so far (flushed or pending)
        self.num_sequences = 0
        self._pending: list[tuple[torch.Tensor, int]] = []  # (tokens, leading context-only tokens)
        self._pending_tokens = 0

    def update(self, sequences: Iterable) -> NGramCounter:
        """Count the token sequences of an iterable (lists, 1-D tensors or numpy arrays of ids)."""
        if isinstance(sequences, torch.Tensor) and sequences.dim() == 1:
            raise ValueError("Pass an iterable of sequences (e.g. `[ids]`), not a single 1-D tensor.")
        for sequence in sequences:
            self.add(sequence)
        return self

    def add(self, sequence) -> None:
        """Count one token sequence."""
        ids = _as_token_tensor(sequence, self.vocab_size)
        self.num_sequences += 1
        self.num_tokens += len(ids)
        context = self.order - 1
        start = 0
        while start < len(ids):
            stop = min(len(ids), start + self.chunk_tokens - self._pending_tokens)
            first = max(0, start - context)  # carry the previous tokens as context only
            self._pending.append((ids[first:stop], start - first))
            self._pending_tokens += stop - start
            start = stop
            if self._pending_tokens >= self.chunk_tokens:
                self.flush()

    def flush(self) -> None:
        """Count the buffered tokens now (called automatically; `tables()` calls it too)."""
        if not self._pending:
            return
        tokens = torch.cat([piece for piece, _ in self._pending])  # (L,)
        # position of every token inside its piece (a piece that continues a sequence starts with
        # its order - 1 context tokens), and whether its n-grams are new in this chunk
        position = torch.cat([torch.arange(len(p)) for p, _ in self._pending])  # (L,)
        counted = torch.cat([torch.arange(len(p)) >= ctx for p, ctx in self._pending])  # (L,)
        self._pending, self._pending_tokens = [], 0

        V = self.vocab_size
        prev_ids = torch.zeros_like(tokens)  # id of the (n-1)-gram ending at each position; root = 0
        remap = None
        for n in range(1, self.order + 1):
            i = n - 1
            if remap is not None and len(self.keys[i]):
                # the order n-1 table gained entries: rewrite the prefix ids inside this order's keys
                self.keys[i] = remap[self.keys[i] // V] * V + self.keys[i] % V
            valid = position >= n - 1  # the n-gram ending here lies inside its sequence
            prefix = prev_ids if n == 1 else torch.cat((prev_ids.new_full((1,), -1), prev_ids[:-1]))
            keys = prefix * V + tokens  # (L,), meaningful where valid
            self.keys[i], self.counts[i], remap = _merge(self.keys[i], self.counts[i], keys[valid & counted])
            # the context-only positions' n-grams were added with an earlier chunk, so they are found too
            prev_ids = torch.full_like(tokens, -1)
            prev_ids[valid] = torch.searchsorted(self.keys[i], keys[valid])

    def tables(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The sorted keys and the raw counts of each order 1..`order` (index 0 = unigrams)."""
        self.flush()
        return list(self.keys), list(self.counts)


def _suffix_ids(keys: list[torch.Tensor], vocab_size: int) -> list[torch.Tensor]:
    """For every entry of every table, the index of its suffix (the n-gram minus its first token)
    in the order n-1 table; unigrams have the empty suffix 0. Every seen n-gram's suffix was seen."""
    V = vocab_size
    suffixes = [torch.zeros(len(keys[0]), dtype=torch.long)]
    for n in range(2, len(keys) + 1):
        table, lower = keys[n - 1], keys[n - 2]
        # suffix of (u1..un) = suffix of its prefix (u1..u(n-1)), extended by un
        suffix_keys = suffixes[n - 2][table // V] * V + table % V
        suffixes.append(torch.searchsorted(lower, suffix_keys))
    return suffixes


def continuation_counts(keys: list[torch.Tensor], vocab_size: int) -> list[torch.Tensor]:
    """N1+(. g) for every n-gram g of orders 1..n-1: the number of distinct tokens seen before it,
    i.e. of distinct (n+1)-grams whose suffix is g (Kneser & Ney, 1995). Index 0 = unigrams."""
    suffixes = _suffix_ids(keys, vocab_size)
    return [torch.bincount(suffixes[n], minlength=len(keys[n - 1])) for n in range(1, len(keys))]


# ----------------------------------------------------------------------------------------------
# Smoothing. Each method turns one order's counts into, per entry (context h, token w), a
# numerator a(h, w) and, per context h, a normalizer Z(h) and an interpolation weight g(h):
#
#     p_n(w | h) = a(h, w) / Z(h) + g(h) * base(w)
#
# with base = p_{n-1}(w | h minus its first token) for Kneser-Ney and the uniform 1/V for add-k.
# An unseen context (or one never followed by a token) has no numerators and g = 1.
# ----------------------------------------------------------------------------------------------

# KenLM's `--discount_fallback` values, used where a count-of-counts makes an estimate undefined
_FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)


def count_of_counts(counts: torch.Tensor) -> list[int]:
    """[n1, n2, n3, n4]: how many n-grams have count exactly 1, 2, 3 and 4."""
    return [int((counts == k).sum()) for k in (1, 2, 3, 4)]


def kn_discount(coc: list[int]) -> list[float]:
    """Interpolated Kneser-Ney's single discount D = n1 / (n1 + 2 n2) (Ney, Essen & Kneser, 1994,
    the estimate Kneser & Ney, 1995 use), returned as [D, D, D] for counts 1, 2 and 3+.

    Falls back to 0.5 (logged) when the estimate is undefined or not in (0, 1] (no singletons).
    """
    n1, n2 = coc[0], coc[1]
    d = n1 / (n1 + 2 * n2) if n1 > 0 else float("nan")
    if not 0 < d <= 1:
        logger.warning(f"Kneser-Ney discount undefined for count-of-counts {coc}: using 0.5.")
        d = _FALLBACK_DISCOUNTS[0]
    return [d, d, d]


def modified_kn_discounts(coc: list[int]) -> list[float]:
    """Modified Kneser-Ney's discounts (Chen & Goodman, 1998, eq. 26), Y = n1 / (n1 + 2 n2):

        D1 = 1 - 2 Y n2 / n1,    D2 = 2 - 3 Y n3 / n2,    D3+ = 3 - 4 Y n4 / n3.

    A discount that is undefined (a zero count-of-counts in a denominator) or outside (0, k] is
    replaced by KenLM's fallback 0.5, 1.0, 1.5 (logged): tiny corpora produce such counts.
    """
    n1, n2, n3, n4 = coc
    y = n1 / (n1 + 2 * n2) if n1 + 2 * n2 > 0 else float("nan")
    estimates = [
        1 - 2 * y * n2 / n1 if n1 > 0 else float("nan"),
        2 - 3 * y * n3 / n2 if n2 > 0 else float("nan"),
        3 - 4 * y * n4 / n3 if n3 > 0 else float("nan"),
    ]
    out = [
        d if 0 < d <= k else fallback
        for k, (d, fallback) in enumerate(zip(estimates, _FALLBACK_DISCOUNTS), 1)
    ]
    replaced = [f"D{k}={d}" for k, (d, e) in enumerate(zip(out, estimates), 1) if d != e]  # nan != nan too
    if replaced:
        logger.warning(
            f"Modified Kneser-Ney discounts undefined for count-of-counts {coc}: using {', '.join(replaced)}."
        )
    return out


class _Level:
    """One order's derived tables: keys (E,), numerators a (E,), and per context (C + 1,) the
    normalizer Z and weight g, the last slot being the unseen context (no followers, g = 1)."""

    def __init__(self, keys, numerators, normalizer, lower_weight, discounts=None):
        self.keys, self.numerators = keys, numerators
        self.normalizer, self.lower_weight = normalizer, lower_weight
        self.discounts = discounts


class AddKSmoothing:
    """Additive smoothing (Lidstone; Laplace for k = 1), no interpolation:

        p(w | h) = (c(h w) + k) / (c(h) + k V),    c(h) = sum_w c(h w),

    so a = c(h w), Z = c(h) + k V, g = k V / Z against the uniform 1/V; an unseen context gets 1/V.
    Every order uses raw counts (the shorter contexts at the start of a row too).
    """

    interpolates = False

    def levels(self, config, keys, counts):
        V, k = config.vocab_size, float(config.add_k)
        out = []
        for n in range(1, len(keys) + 1):
            num_contexts = 1 if n == 1 else len(keys[n - 2])
            totals = torch.zeros(num_contexts + 1, dtype=torch.float64)
            totals.scatter_add_(0, keys[n - 1] // V, counts[n - 1].double())
            normalizer = totals + k * V
            out.append(_Level(keys[n - 1], counts[n - 1].double(), normalizer, k * V / normalizer))
        return out


class KneserNeySmoothing:
    """Interpolated Kneser-Ney (Kneser & Ney, 1995; Chen & Goodman, 1998, sections 3.4 and 3.5).

    For the highest order n, with raw counts c and c(h) = sum_w c(h w):

        p_n(w | h) = max(c(h w) - D(c(h w)), 0) / c(h)  +  g(h) p_{n-1}(w | h'),
        g(h) = sum_w D(c(h w)) / c(h) = (D1 N1(h .) + D2 N2(h .) + D3+ N3+(h .)) / c(h),

    where h' drops the first token of h and Nk(h .) counts the tokens seen exactly k times after h
    (k or more for 3+). Every lower order uses the same formula on *continuation counts*
    c'(g) = N1+(. g), the number of distinct tokens seen before g, instead of raw counts, and the
    unigram level is interpolated with the uniform distribution 1/V, so no token has probability 0.
    D(c) is one discount per order for "interpolated_kn" (D = n1 / (n1 + 2 n2)) and D1, D2, D3+
    for "modified_kn" (Chen & Goodman's eq. 26), each estimated from that order's count-of-counts
    (of the continuation counts for lower orders), unless `config.discounts` fixes them.
    An unseen context (or one never followed by a token) backs off entirely: p_n = p_{n-1}.
    """

    interpolates = True

    def __init__(self, estimate):
        self.estimate = estimate

    def levels(self, config, keys, counts):
        V, order = config.vocab_size, len(keys)
        used = continuation_counts(keys, V) + [counts[-1]]  # lower orders: continuation counts
        out = []
        for n in range(1, order + 1):
            c = used[n - 1]
            if config.discounts is not None:
                given = config.discounts[n - 1]
                d = [float(given)] * 3 if not isinstance(given, (list, tuple)) else [float(x) for x in given]
            else:
                d = self.estimate(count_of_counts(c))
            table = torch.tensor([0.0] + d, dtype=torch.float64)  # D(0) = 0, D(1), D(2), D(3+)
            discount = table[c.clamp(max=3)]  # (E,); validation keeps Dk <= k, so c - D >= 0
            num_contexts = 1 if n == 1 else len(keys[n - 2])
            prefix = keys[n - 1] // V
            totals = torch.zeros(num_contexts + 1, dtype=torch.float64).scatter_add_(0, prefix, c.double())
            mass = torch.zeros(num_contexts + 1, dtype=torch.float64).scatter_add_(0, prefix, discount)
            seen = totals > 0
            normalizer = torch.where(seen, totals, torch.ones_like(totals))
            lower_weight = torch.where(seen, mass / normalizer, torch.ones_like(totals))
            out.append(_Level(keys[n - 1], c.double() - discount, normalizer, lower_weight, d))
        return out


# name -> method; `config.smoothing` is validated against these names
SMOOTHING_METHODS = {
    "add_k": AddKSmoothing(),
    "interpolated_kn": KneserNeySmoothing(kn_discount),
    "modified_kn": KneserNeySmoothing(modified_kn_discounts),
}


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------


class HfLmNGramPreTrainedModel(HfLmPreTrainedModel):
    config_class = HfLmNGramConfig
    config: HfLmNGramConfig
    base_model_prefix = ""
    supports_gradient_checkpointing = False
    _no_split_modules = []

    def _init_weights(self, module):
        """Nothing to initialize: the only state is the count tables, set by fitting or loading."""

    def _card_fields(self) -> list[tuple[str, object]]:
        cfg = self.config
        return [
            ("model_type", cfg.model_type),
            ("order", cfg.order),
            ("smoothing", cfg.smoothing + (f" (k={cfg.add_k})" if cfg.smoothing == "add_k" else "")),
            ("vocabulary", cfg.vocab_size),
            ("distinct n-grams by order", cfg.num_ngrams if cfg.num_ngrams is not None else "not fitted"),
            ("parameters", "0 (counts are buffers)"),
        ]


@trainer_shifts_labels
class HfLmNGramForCausalLM(FixedWindowGeneration, HfLmNGramPreTrainedModel, GenerationMixin):
    """An n-gram LM whose `logits` are next-token log-probabilities; fitted by counting, not trained.

    Fitting:
        >>> model = HfLmNGramForCausalLM.fit(token_id_sequences, HfLmNGramConfig(vocab_size=V, order=3))
        >>> model.save_pretrained("my-trigram")   # counts saved as safetensors buffers

    or, for a corpus that arrives in batches, `counter = NGramCounter(order, V)`, then
    `counter.update(batch)` per batch and `model.set_counts(*counter.tables())` at the end.
    `model.parameters()` is empty: there is nothing for an optimizer to do.

    Context: position t of a row is scored with the previous `order - 1` tokens of the same row up
    to and including t; at the start of a row (or just after a padding token, `attention_mask` 0)
    fewer tokens are available and the model uses the level of its recursion that matches the
    shorter context (the order-k distribution that the higher orders interpolate with: for
    Kneser-Ney this is the continuation-count distribution, for add-k the raw order-k counts).
    """

    def __init__(self, config: HfLmNGramConfig):
        super().__init__(config)
        # an unfitted model still has (empty) tables, so it saves and loads like a fitted one
        sizes = config.num_ngrams if config.num_ngrams is not None else [0] * config.order
        self._register_tables([torch.zeros(n, dtype=torch.long) for n in sizes])
        self._derived = None  # (signature, levels): recomputed whenever the counts change
        self.post_init()

    # ------------------------------------------------------------------ fitting and tables

    @classmethod
    def fit(
        cls, sequences: Iterable, config: HfLmNGramConfig, chunk_tokens: int = 1 << 20
    ) -> HfLmNGramForCausalLM:
        """Count the n-grams of a corpus in one streaming pass and return the fitted model.

        Args:
            sequences: an iterable of token-id sequences (lists, 1-D tensors or numpy arrays);
                n-grams do not cross sequence boundaries. It is consumed once.
            config: the model's config; a copy with `num_ngrams` filled in is used.
            chunk_tokens: tokens counted at once (bounds the memory used beyond the tables).

        Raises:
            ValueError: for a token id outside [0, vocab_size), a sequence that is not 1-D, or an
                empty corpus.
        """
        counter = NGramCounter(config.order, config.vocab_size, chunk_tokens).update(sequences)
        config = copy.deepcopy(config)
        config.num_ngrams = None  # sized by `set_counts` (a fitted config's old sizes would be stale)
        model = cls(config)
        model.set_counts(*counter.tables())
        return model

    def set_counts(self, keys: list[torch.Tensor], counts: list[torch.Tensor]) -> None:
        """Replace the count tables (as `NGramCounter.tables()` returns them) and `config.num_ngrams`."""
        order = self.config.order
        if len(keys) != order or len(counts) != order:
            raise ValueError(f"Expected {order} key and count tables (orders 1..{order}), got {len(keys)}.")
        if len(keys[0]) == 0:
            raise ValueError("The corpus is empty: there is nothing to fit an n-gram model on.")
        for n, (k, c) in enumerate(zip(keys, counts), start=1):
            if k.shape != c.shape or k.dim() != 1:
                raise ValueError(f"The keys and counts of order {n} must be 1-D tensors of one length.")
        self._register_tables(keys, counts)
        self.config.num_ngrams = [len(k) for k in keys]
        self._derived = None
        self._levels()  # check the tables now rather than at the first forward

    def _register_tables(self, keys, counts=None) -> None:
        counts = counts if counts is not None else [torch.zeros_like(k) for k in keys]
        for n, (k, c) in enumerate(zip(keys, counts), start=1):
            self.register_buffer(f"ngram_keys_{n}", k.to(torch.long).contiguous())
            self.register_buffer(f"ngram_counts_{n}", c.to(torch.long).contiguous())

    def _tables(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        if self.config.num_ngrams is None:
            raise ValueError(
                f"This {type(self).__name__} has no counts: it was never fitted. Fit it with "
                "`HfLmNGramForCausalLM.fit(sequences, config)` (or `model.set_counts(*NGramCounter(...)"
                ".update(sequences).tables())`), or load a fitted checkpoint."
            )
        n = self.config.order
        keys = [getattr(self, f"ngram_keys_{i}") for i in range(1, n + 1)]
        counts = [getattr(self, f"ngram_counts_{i}") for i in range(1, n + 1)]
        return keys, counts

    def _levels(self) -> list[_Level]:
        """The smoothing's derived tables, cached until the counts, the device or the smoothing change."""
        keys, counts = self._tables()
        cfg = self.config
        signature = tuple((t.data_ptr(), t._version, t.shape, t.device) for t in keys + counts) + (
            cfg.smoothing,
            cfg.add_k,
            repr(cfg.discounts),
        )
        if self._derived is not None and self._derived[0] == signature:
            return self._derived[1]
        device = keys[0].device
        keys_cpu, counts_cpu = [k.cpu() for k in keys], [c.cpu() for c in counts]
        self._check_tables(keys_cpu, counts_cpu)
        levels = SMOOTHING_METHODS[cfg.smoothing].levels(cfg, keys_cpu, counts_cpu)
        for level in levels:
            level.keys = level.keys.to(device)
            level.numerators = level.numerators.to(device)
            level.normalizer = level.normalizer.to(device)
            level.lower_weight = level.lower_weight.to(device)
        self._derived = (signature, levels)
        return levels

    def _check_tables(self, keys, counts) -> None:
        V = self.config.vocab_size
        for n, (k, c) in enumerate(zip(keys, counts), start=1):
            num_contexts = 1 if n == 1 else len(keys[n - 2])
            if len(k) == 0 and n == 1:
                raise ValueError("The unigram table is empty: fit the model on a non-empty corpus.")
            ok = bool((k[1:] > k[:-1]).all()) and bool((c > 0).all())
            if len(k):
                ok = ok and int(k[0]) >= 0 and int(k[-1]) < num_contexts * V
            if not ok:
                raise ValueError(
                    f"The count table of order {n} is not a fitted table (keys must be strictly increasing "
                    "and inside the vocabulary, counts positive): fit the model with "
                    "`HfLmNGramForCausalLM.fit` or load a fitted checkpoint."
                )

    def discounts(self) -> list[list[float]] | None:
        """The Kneser-Ney discounts in use, [D(1), D(2), D(3+)] per order (index 0 = unigrams);
        None for add-k smoothing."""
        levels = self._levels()
        return None if levels[0].discounts is None else [list(level.discounts) for level in levels]

    def ngram_counts(self, n: int, continuation: bool = False) -> dict[tuple[int, ...], int]:
        """The n-grams of order n with their raw counts (or, for n < order, their continuation
        counts N1+(. g)), decoded to token tuples. For inspection and tests: builds Python objects."""
        keys, counts = self._tables()
        if not 1 <= n <= len(keys):
            raise ValueError(f"`n` must be between 1 and order={len(keys)}, got {n!r}.")
        V = self.config.vocab_size
        keys = [k.cpu() for k in keys]
        tokens = keys[0][:, None] % V  # (E1, 1)
        for i in range(2, n + 1):
            tokens = torch.cat((tokens[keys[i - 1] // V], (keys[i - 1] % V)[:, None]), dim=1)  # (Ei, i)
        if continuation:
            if n == len(keys):
                raise ValueError("Continuation counts exist for orders below the model's order only.")
            values = continuation_counts(keys, V)[n - 1]
        else:
            values = counts[n - 1].cpu()
        return {tuple(row): int(v) for row, v in zip(tokens.tolist(), values.tolist())}

    # ------------------------------------------------------------------ device / dtype without parameters

    @property
    def device(self) -> torch.device:
        buffer = next(self.buffers(), None)
        return buffer.device if buffer is not None else torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32  # the dtype of the log-probabilities `forward` returns

    # ------------------------------------------------------------------ scoring

    def _context_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, levels):
        """For each level n >= 2, the index (B, T) in the order n-1 table of the n-1 tokens ending
        at each position (-1 when unseen or when the row has fewer real tokens there), and the
        (B, T) number of real tokens available as context (capped at order - 1)."""
        B, T = input_ids.shape
        V, order = self.config.vocab_size, len(levels)
        index = torch.arange(T, device=input_ids.device)
        if attention_mask is None:
            run = (index + 1).expand(B, T)  # (B, T) tokens since the row start, inclusive
        else:
            # a padding token breaks the context: count real tokens since the last padding position
            breaks = torch.where(attention_mask.bool(), -1, index)  # (B, T)
            run = index - breaks.cummax(dim=1).values  # (B, T); 0 on padding itself
        available = run.clamp(max=order - 1)  # (B, T)
        ids = []
        prev = torch.zeros(B, T, dtype=torch.long, device=input_ids.device)  # the empty context, id 0
        for j in range(1, order):  # context of j tokens ends at t: its (j-1)-prefix ends at t-1
            shifted = prev if j == 1 else torch.nn.functional.pad(prev[:, :-1], (1, 0), value=-1)
            key = shifted * V + input_ids  # (B, T)
            table = levels[j - 1].keys
            pos = torch.searchsorted(table, key).clamp(max=max(len(table) - 1, 0))
            found = (shifted >= 0) & (available >= j) & (table[pos] == key if len(table) else False)
            prev = torch.where(found, pos, -1)
            ids.append(prev)
        return ids, available

    def _probabilities(self, context_ids, available, levels) -> torch.Tensor:
        """(N, V) next-token distributions from the (N,) context ids of each level, built from the
        lowest order up: each level scatters its contiguous follower numerators and adds the
        interpolation weight times the level below (Kneser-Ney) or the uniform (add-k)."""
        V, N = self.config.vocab_size, available.shape[0]
        device = available.device
        method = SMOOTHING_METHODS[self.config.smoothing]
        uniform = torch.full((V,), 1.0 / V, dtype=torch.float64, device=device)

        root = levels[0]  # unigrams: one context shared by every position
        row = root.lower_weight[0] * uniform
        row[root.keys % V] += root.numerators / root.normalizer[0]
        probs = row.to(torch.float32).expand(N, V).clone()  # (N, V)

        for n in range(2, len(levels) + 1):
            level = levels[n - 1]
            selected = (available >= n - 1).nonzero().squeeze(1)  # (S,) positions with n-1 tokens of context
            if selected.numel() == 0:
                continue
            ctx = context_ids[n - 2][selected]  # (S,), -1 = unseen
            slot = torch.where(ctx >= 0, ctx, len(level.normalizer) - 1)  # unseen -> the empty last slot
            base = probs[selected] if method.interpolates else uniform.to(torch.float32).expand(len(ctx), V)
            rows = level.lower_weight[slot].to(torch.float32)[:, None] * base  # (S, V)
            # followers of each context: keys in [ctx * V, (ctx + 1) * V), contiguous in the sorted table
            lo = torch.searchsorted(level.keys, ctx * V)  # unseen (-1) gives an empty range at 0
            hi = torch.searchsorted(level.keys, (ctx + 1) * V)
            lo = torch.where(ctx >= 0, lo, hi)
            lengths = hi - lo  # (S,)
            owner = torch.repeat_interleave(torch.arange(len(ctx), device=device), lengths)  # (F,)
            starts = torch.cumsum(lengths, 0) - lengths
            entry = torch.arange(len(owner), device=device) - starts[owner] + lo[owner]  # (F,)
            values = (level.numerators[entry] / level.normalizer[slot[owner]]).to(torch.float32)
            rows.index_put_((owner, level.keys[entry] % V), values, accumulate=True)
            probs[selected] = rows
        return probs

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutput:
        """Next-token log-probabilities and, with `labels`, the cross-entropy.

        Args:
            input_ids: (B, T) token ids in [0, vocab_size).
            attention_mask: (B, T) 1 for real tokens, 0 for padding; padding is never context.
            labels: (B, T) targets, shifted inside the model (`labels = input_ids` is right); -100
                is ignored. With `num_items_in_batch` (Trainer) the summed loss is divided by it.
                `shift_labels` (B, T) in their place are already aligned with the positions.
            logits_to_keep: score only the last `logits_to_keep` positions (0 = all), or the
                positions of a 1-D index tensor; `generate()` passes 1.

        Returns:
            `CausalLMOutput` with `logits` (B, T, V) = log p(token t+1 | tokens up to t) (a proper
            distribution: `logits.exp().sum(-1) == 1`) and `loss` when labels are given.
        """
        if input_ids is None:
            raise ValueError("Pass `input_ids`: an n-gram model scores token ids (it has no embeddings).")
        check_input_ids(input_ids, self.config.vocab_size)
        levels = self._levels()
        input_ids = input_ids.to(self.device)
        B, T = input_ids.shape
        refuse_packed_rows(kwargs.get("position_ids"), attention_mask, type(self).__name__)
        attention_mask = check_padding_mask(attention_mask, B, T)
        if attention_mask is not None:
            attention_mask = attention_mask.to(input_ids.device)
        context_ids, available = self._context_ids(input_ids, attention_mask, levels)

        keep = torch.arange(T, device=input_ids.device)[
            logits_positions(logits_to_keep, T)
        ]  # (Tk,) positions
        Tk = len(keep)
        context_ids = [c[:, keep].reshape(-1) for c in context_ids]  # each (N,) with N = B * Tk
        probs = self._probabilities(context_ids, available[:, keep].reshape(-1), levels)  # (N, V)
        logits = probs.log().view(B, Tk, -1)  # (B, Tk, V)

        if Tk != T and (labels is not None or kwargs.get("shift_labels") is not None):
            raise ValueError("`labels` need the logits of every position: leave `logits_to_keep` at 0.")
        loss = causal_lm_loss(logits, labels, self.config.vocab_size, kwargs)
        return CausalLMOutput(loss=loss, logits=logits)

    # ------------------------------------------------------------------ generation

    def generation_window(self) -> int:
        return max(self.config.order - 1, 1)  # the whole context of an order-n model (a unigram: one token)


__all__ = [
    "HfLmNGramPreTrainedModel",
    "HfLmNGramForCausalLM",
    "NGramCounter",
    "SMOOTHING_METHODS",
    "continuation_counts",
    "count_of_counts",
    "kn_discount",
    "modified_kn_discounts",
]
