"""Configuration of hf_lm's count-based n-gram language model (`model_type="hflm_ngram"`).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
"""

from __future__ import annotations

from transformers import PreTrainedConfig

from .hflm_common import (
    HfLmConfigMixin,
    _choice,
    _positive,
    _positive_int,
    _token_ids,
)

# The smoothing methods `HfLmNGramForCausalLM` implements (the formulas are in its modeling file),
# with the number of discounts each needs per order when given explicitly.
SMOOTHINGS = {"add_k": 0, "interpolated_kn": 1, "modified_kn": 3}
MAX_ORDER = 5


class HfLmNGramConfig(HfLmConfigMixin, PreTrainedConfig):
    """An n-gram LM: p(w_t | the previous `order - 1` tokens), smoothed; every field validated.

    The model has no trainable parameters: it is fitted by counting (see
    `HfLmNGramForCausalLM.fit`), which also fills `num_ngrams`.

    Args:
        vocab_size: number of tokens V.
        order: n, from 1 (unigram) to 5; the model conditions on the previous n - 1 tokens.
        smoothing: "add_k" (additive, `add_k` = 1 is Laplace), "interpolated_kn" (interpolated
            Kneser-Ney, one discount per order) or "modified_kn" (Chen & Goodman's modified
            Kneser-Ney, three discounts D1, D2, D3+ per order).
        add_k: the pseudo-count k > 0 of "add_k" smoothing (ignored by the other methods).
        discounts: Kneser-Ney discounts by order (index 0 = unigrams), or None to estimate them
            from the count-of-counts when the counts are used: `order` numbers in (0, 1] for
            "interpolated_kn", `order` triples (D1, D2, D3+) with 0 < Dk <= k for "modified_kn".
        num_ngrams: the number of distinct n-grams of each order 1..n in the fitted counts (the
            shapes of the count buffers, so `from_pretrained` rebuilds them); None = not fitted.
        pad_token_id, bos_token_id, eos_token_id: special tokens, None or ids inside the vocabulary.
        use_cache: declared for `generate()`; an n-gram model needs no cache, so it is always False.

    Example:
        >>> from hf_lm import HfLmNGramConfig, HfLmNGramForCausalLM
        >>> config = HfLmNGramConfig(vocab_size=4, order=2, smoothing="modified_kn")
        >>> model = HfLmNGramForCausalLM.fit([[0, 1, 2, 3, 0, 1, 2]], config)
        >>> model.config.num_ngrams
        [4, 4]
    """

    model_type = "hflm_ngram"

    vocab_size: int = 256
    order: int = 3
    smoothing: str = "modified_kn"
    add_k: float = 1.0
    discounts: list | None = None
    num_ngrams: list[int] | None = None
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    use_cache: bool = False
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.validate_hflm()

    def validate_hflm(self) -> None:
        """Raise `ValueError` naming the field for every invalid value or contradictory combination."""
        _positive_int("vocab_size", self.vocab_size)
        _positive_int("order", self.order)
        if self.order > MAX_ORDER:
            raise ValueError(f"`order` must be between 1 and {MAX_ORDER}, got {self.order!r}.")
        _choice("smoothing", self.smoothing, SMOOTHINGS)
        _positive("add_k", self.add_k)  # 1 = Laplace
        self._validate_discounts()
        if self.num_ngrams is not None:
            if not isinstance(self.num_ngrams, (list, tuple)) or len(self.num_ngrams) != self.order:
                raise ValueError(
                    f"`num_ngrams` must be None (not fitted) or a list of {self.order} counts (one per order), "
                    f"got {self.num_ngrams!r}."
                )
            if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in self.num_ngrams):
                raise ValueError(f"`num_ngrams` must hold non-negative integers, got {self.num_ngrams!r}.")
            self.num_ngrams = list(self.num_ngrams)
        if self.use_cache is not False:
            raise ValueError("`use_cache` must be False: an n-gram model keeps no cache between steps.")
        if self.tie_word_embeddings is not False:
            raise ValueError("`tie_word_embeddings` must be False: an n-gram model has no embeddings.")
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            _token_ids(name, getattr(self, name), self.vocab_size)

    def _validate_discounts(self) -> None:
        if self.discounts is None:
            return
        per_order = SMOOTHINGS[self.smoothing]
        if per_order == 0:
            raise ValueError(
                f"`discounts` is only used by Kneser-Ney smoothing; set it to None for smoothing={self.smoothing!r}."
            )
        if not isinstance(self.discounts, (list, tuple)) or len(self.discounts) != self.order:
            raise ValueError(
                f"`discounts` must be None or a list of {self.order} entries (one per order), got {self.discounts!r}."
            )
        normalized = []
        for n, entry in enumerate(self.discounts, start=1):
            values = list(entry) if isinstance(entry, (list, tuple)) else [entry]
            if len(values) != per_order or any(
                isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 < d <= k  # refuses nan, inf
                for k, d in enumerate(values, start=1)
            ):
                expected = (
                    "a number in (0, 1]" if per_order == 1 else "a triple (D1, D2, D3+) with 0 < Dk <= k"
                )
                raise ValueError(
                    f"`discounts[{n - 1}]` (order {n}) must be {expected} for smoothing={self.smoothing!r}, "
                    f"got {entry!r}."
                )
            normalized.append(float(values[0]) if per_order == 1 else [float(d) for d in values])
        self.discounts = normalized


__all__ = ["HfLmNGramConfig", "SMOOTHINGS", "MAX_ORDER"]
