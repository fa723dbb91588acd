"""Configuration of hf_lm's feed-forward neural LM of Bengio et al. (2003) (`model_type="hflm_ffnn"`).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
"""

from __future__ import annotations

from transformers import PreTrainedConfig

from .hflm_common import (
    HfLmConfigMixin,
    _bool,
    _non_negative,
    _positive_int,
    _probability,
    _token_ids,
)


class HfLmFFNNConfig(HfLmConfigMixin, PreTrainedConfig):
    """Bengio et al.'s neural probabilistic LM: a fixed window of `context_size` previous tokens.

    logits = b + W x + U tanh(d + H x), x = the concatenated embeddings of the window.

    Args:
        vocab_size: number of tokens V.
        context_size: n - 1, the number of tokens the model sees (the current one included) to
            predict the next one, as in an n-gram model of order n.
        hidden_size: m, the width of one token embedding (x has `context_size * hidden_size` entries).
        intermediate_size: h, the number of tanh hidden units.
        direct_connections: Bengio's optional linear path W x from the window straight to the
            output (the paper's W; without it W = 0).
        tie_word_embeddings: share the embedding matrix C with the output layer. The tanh layer
            (width h) is then projected to width m by a bias-free linear map and multiplied by
            C^T, so logits = b + W x + C P tanh(d + H x) with a learned (m, h) projection P.
        hidden_dropout: dropout on the tanh layer's output during training.
        initializer_range: std of the normal init of every weight (biases start at 0).
        pad_token_id, bos_token_id, eos_token_id: special tokens, None or ids inside the vocabulary.
        use_cache: declared for `generate()`; the model needs no cache (each step feeds the last
            `context_size` tokens, which is exact), so it must be False.

    Example:
        >>> from hf_lm import HfLmFFNNConfig, HfLmFFNNForCausalLM
        >>> config = HfLmFFNNConfig(vocab_size=1000, context_size=4, hidden_size=32, intermediate_size=64)
        >>> model = HfLmFFNNForCausalLM(config)
    """

    model_type = "hflm_ffnn"
    # what the parameter count grows with (`size_fields`)
    size_field_names = (
        "context_size",
        "hidden_size",
        "intermediate_size",
        "vocab_size",
    )

    vocab_size: int = 10000
    context_size: int = 4
    hidden_size: int = 60
    intermediate_size: int = 100
    direct_connections: bool = True
    tie_word_embeddings: bool = False
    hidden_dropout: float = 0.0
    initializer_range: float = 0.02
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    use_cache: bool = False

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.validate_hflm()

    def validate_hflm(self) -> None:
        """Raise `ValueError` naming the field for every invalid value."""
        for name in ("vocab_size", "context_size", "hidden_size", "intermediate_size"):
            _positive_int(name, getattr(self, name))
        for name in ("direct_connections", "tie_word_embeddings"):
            _bool(name, getattr(self, name))
        _probability("hidden_dropout", self.hidden_dropout)
        _non_negative("initializer_range", self.initializer_range)
        if self.use_cache is not False:
            raise ValueError(
                "`use_cache` must be False: the feed-forward LM keeps no cache (each generation step "
                "feeds the last `context_size` tokens, which is exact)."
            )
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            _token_ids(name, getattr(self, name), self.vocab_size)

    def estimated_num_parameters(self) -> int:
        """A lower bound of the parameter count (`HfLmPreTrainedModel` refuses what cannot fit in
        memory): the embedding table and the tanh layer over the window."""
        m, h = self.hidden_size, self.intermediate_size
        return self.vocab_size * m + self.context_size * m * h


__all__ = ["HfLmFFNNConfig"]
