"""Configuration of hf_lm's recurrent language model (`model_type="hflm_rnn"`).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
"""

from __future__ import annotations

from transformers import PreTrainedConfig

from .hflm_common import (
    CACHE_NAMES,
    RNN_CELL_GATES,
    RNN_CELL_NAMES,
    RNN_IMPLEMENTATIONS,
    HfLmConfigMixin,
    _bool,
    _choice,
    _non_negative,
    _number,
    _positive_int,
    _probability,
    _token_ids,
)


class HfLmRNNConfig(HfLmConfigMixin, PreTrainedConfig):
    """A recurrent (Elman / LSTM / GRU) language model. Defaults are the "medium" LSTM of Zaremba et al.
    (2014, "Recurrent Neural Network Regularization"), with tied embeddings; every field is validated
    at construction.

    Args:
        vocab_size: number of tokens V.
        cell_type: the recurrent cell, one of `RNN_CELL_NAMES`: "rnn_tanh" (Elman, 1990), "rnn_relu",
            "lstm" (Hochreiter & Schmidhuber, 1997), "gru" (Cho et al., 2014).
        hidden_size: H, the state size of every layer.
        embedding_size: E, the token-embedding size (defaults to `hidden_size`).
        num_hidden_layers: L, stacked recurrent layers.
        hidden_dropout: dropout on the non-recurrent connections only (Zaremba et al., 2014): on the
            embeddings, between layers and on the last layer's outputs; never on the state carried
            from step to step.
        tie_word_embeddings: share the input embedding matrix with the output layer (Press & Wolf,
            2017; Inan et al., 2017). When `embedding_size != hidden_size` a bias-free linear
            projection H -> E sits before the tied output layer (so a small embedding can serve a
            large state); untied heads read the H-sized state directly.
        rnn_implementation: one of `RNN_IMPLEMENTATIONS`: "fused" (torch's fused kernels whenever no
            step is padded; the loop otherwise) or "loop" (the readable reference, always). Same results.
        initializer_range: r of the uniform U(-r, r) init of every weight, as in Zaremba et al.
            (0.05 for their medium model, 0.1 for the small one). Uniform rather than normal because
            that is how these LSTM LMs were trained, and because a bounded init keeps a saturating
            recurrence away from its flat regions at the start; biases start at zero.
        forget_bias: added to the LSTM forget gate's bias at init (Gers et al., 2000; Jozefowicz et
            al., 2015 found 1.0 closes most of the gap to other gated cells). Ignored by other cells.
        use_cache: return the recurrent state (`RecurrentCache`) by default outside training.
        pad_token_id, bos_token_id, eos_token_id: special tokens, `None` or ids inside the vocabulary.

    Example:
        >>> from hf_lm import HfLmRNNConfig, HfLmRNNForCausalLM
        >>> config = HfLmRNNConfig(vocab_size=1000, cell_type="gru", hidden_size=64, num_hidden_layers=2)
        >>> model = HfLmRNNForCausalLM(config)
    """

    model_type = "hflm_rnn"
    # what the parameter count grows with (`size_fields`)
    size_field_names = (
        "num_hidden_layers",
        "hidden_size",
        "embedding_size",
        "vocab_size",
    )
    keys_to_ignore_at_inference = list(CACHE_NAMES)

    vocab_size: int = 10000
    cell_type: str = "lstm"
    hidden_size: int = 650
    embedding_size: int | None = None
    num_hidden_layers: int = 2
    hidden_dropout: float = 0.5
    tie_word_embeddings: bool = True
    rnn_implementation: str = "fused"
    initializer_range: float = 0.05
    forget_bias: float = 1.0
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self, **kwargs):
        _positive_int("hidden_size", self.hidden_size)
        if self.embedding_size is None:
            self.embedding_size = self.hidden_size
        super().__post_init__(**kwargs)
        self.validate_hflm()

    def validate_hflm(self) -> None:
        """Raise `ValueError` naming the field for every invalid value."""
        for name in ("vocab_size", "hidden_size", "embedding_size", "num_hidden_layers"):
            _positive_int(name, getattr(self, name))
        _choice("cell_type", self.cell_type, RNN_CELL_NAMES)
        _choice("rnn_implementation", self.rnn_implementation, RNN_IMPLEMENTATIONS)
        _probability("hidden_dropout", self.hidden_dropout)
        _non_negative("initializer_range", self.initializer_range)
        _number("forget_bias", self.forget_bias)
        for name in ("tie_word_embeddings", "use_cache"):
            _bool(name, getattr(self, name))
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            _token_ids(name, getattr(self, name), self.vocab_size)

    def estimated_num_parameters(self) -> int:
        """A lower bound of the parameter count (`HfLmPreTrainedModel` refuses what cannot fit in
        memory): the embedding and each layer's gate matrices."""
        gates, H = RNN_CELL_GATES.get(self.cell_type, 1), self.hidden_size
        # the first layer reads the embeddings, the others the layer below (no loop: any depth is O(1))
        layers = gates * H * (self.embedding_size + H) + (self.num_hidden_layers - 1) * gates * H * 2 * H
        return self.vocab_size * self.embedding_size + layers


__all__ = ["HfLmRNNConfig"]
