"""Configuration of hf_lm's recurrent encoder-decoder with attention (`model_type="hflm_rnn_seq2seq"`).

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
    _positive_int,
    _probability,
    _token_ids,
)
from .hflm_pretrained import (
    installed_pipelines_dropped,
)

# attention kinds, documented in `HfLmRNNSeq2SeqConfig`; the modeling file maps each to its module
ATTENTION_TYPES = ("none", "bahdanau", "luong_dot", "luong_general")


class HfLmRNNSeq2SeqConfig(HfLmConfigMixin, PreTrainedConfig):
    """A recurrent encoder-decoder (Sutskever et al., 2014; Cho et al., 2014) with optional attention
    (Bahdanau et al., 2015; Luong et al., 2015). Every field is validated at construction.

    Architecture:
        - One token embedding (`vocab_size` x `embedding_size`) shared by the encoder, the decoder
          and, with `tie_word_embeddings`, the output layer: hf_lm's tokenizers are shared.
        - The encoder is a stack of `encoder_layers` recurrent layers over the source; padding is
          skipped by the recurrence (a padded step carries the state unchanged). A bidirectional
          encoder runs `hidden_size // 2` units per direction (OpenNMT's convention), so its
          outputs, `[forward; backward]`, are `hidden_size` wide like a unidirectional one's and
          Luong's dot score needs no projection.
        - The decoder's initial state comes from the encoder's final state through a tanh bridge:
          the top encoder layer's final hidden state (`[forward; backward]` for a bidirectional
          encoder; each direction's state after its last real token) goes through
          `tanh(W h + b)` to the initial hidden state of every decoder layer. An LSTM's cell state
          gets its own bridge from the encoder's final cell state. With `attention="none"` this
          state is the only path from the source to the target: the fixed-size bottleneck of
          Sutskever et al. (2014) and Cho et al. (2014).
        - The decoder runs one token at a time. Each step:
            "bahdanau": scores `v^T tanh(W_q s_{t-1} + W_k h_j)` from the previous top decoder
                state s_{t-1}; the context `c_t` is concatenated to the decoder input; after the
                step the output vector is `tanh(W_c [c_t; s_t])`;
            "luong_dot" / "luong_general": the step runs first; scores `h_t . h_j` or
                `h_t^T W_a h_j` from the current top state h_t; the output vector is Luong's
                attentional hidden state `tanh(W_c [c_t; h_t])`;
            "none": the output vector is the top decoder state itself.
          With `input_feeding` (Luong et al., 2015, section 3.3) the previous output vector is
          concatenated to the next decoder input (zeros at the first step).
        - The output vector goes through dropout to the vocabulary projection; with
          `tie_word_embeddings` it is first projected to `embedding_size` (when the widths differ)
          so the embedding matrix can serve as the output layer (Press & Wolf, 2017).

    Args:
        vocab_size: number of tokens V (one vocabulary for source and target).
        embedding_size: token embedding width E.
        hidden_size: recurrent state width H of the decoder and of the encoder's outputs.
        cell_type: the recurrent cell: "lstm", "gru", "rnn_tanh" or "rnn_relu" (Elman).
        encoder_layers: depth of the encoder stack.
        decoder_layers: depth of the decoder stack.
        bidirectional_encoder: read the source in both directions (needs an even `hidden_size`).
        attention: "none", "bahdanau", "luong_dot" or "luong_general" (see above).
        input_feeding: feed the previous output vector back into the decoder input (needs an
            attention: without one the output vector is the state the decoder already has).
        hidden_dropout: dropout on the embeddings, between stacked layers and on the output vector.
        rnn_implementation: how the recurrent blocks run their layers (`RNN_IMPLEMENTATIONS` of
            `hflm_rnn_blocks`); the decoder always steps one token at a time.
        tie_word_embeddings: the output layer is the (transposed) token embedding.
        initializer_range: every weight starts uniform in [-r, r] (Sutskever et al. used 0.08,
            Luong et al. 0.1), biases at zero.
        use_cache: return the decoder's recurrent state (`past_key_values`) by default outside
            training, so `generate()` runs one token per step.
        pad_token_id, bos_token_id, eos_token_id: special tokens, `None` or ids in the vocabulary.
        decoder_start_token_id: the decoder's first input (default: `bos_token_id`).

    Example:
        >>> from hf_lm import HfLmRNNSeq2SeqConfig, HfLmRNNSeq2SeqForConditionalGeneration
        >>> config = HfLmRNNSeq2SeqConfig(vocab_size=1000, embedding_size=64, hidden_size=128, attention="bahdanau")
        >>> model = HfLmRNNSeq2SeqForConditionalGeneration(config)
    """

    model_type = "hflm_rnn_seq2seq"
    # what the parameter count grows with (`size_fields`)
    size_field_names = (
        "encoder_layers",
        "decoder_layers",
        "hidden_size",
        "embedding_size",
        "vocab_size",
    )
    keys_to_ignore_at_inference = list(CACHE_NAMES)
    # tools that read the generic names (model cards, cache sizing) see the encoder depth
    attribute_map = {"num_hidden_layers": "encoder_layers"}

    vocab_size: int = 32000
    embedding_size: int = 256
    hidden_size: int = 512
    cell_type: str = "lstm"
    encoder_layers: int = 2
    decoder_layers: int = 2
    bidirectional_encoder: bool = True
    attention: str = "luong_general"
    input_feeding: bool = True
    hidden_dropout: float = 0.2
    rnn_implementation: str = "fused"
    tie_word_embeddings: bool = False
    initializer_range: float = 0.1
    use_cache: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = None

    def __post_init__(self, **kwargs):
        self.is_encoder_decoder = True
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.bos_token_id
        super().__post_init__(**installed_pipelines_dropped(type(self), kwargs))
        self.validate_hflm()

    def validate_hflm(self) -> None:
        """Raise `ValueError` naming the field for every invalid value or contradictory combination."""
        for name in ("vocab_size", "embedding_size", "hidden_size", "encoder_layers", "decoder_layers"):
            _positive_int(name, getattr(self, name))
        _choice("cell_type", self.cell_type, RNN_CELL_NAMES)
        _choice("attention", self.attention, ATTENTION_TYPES)
        _choice("rnn_implementation", self.rnn_implementation, RNN_IMPLEMENTATIONS)
        for name in ("bidirectional_encoder", "input_feeding", "tie_word_embeddings", "use_cache"):
            _bool(name, getattr(self, name))
        if self.bidirectional_encoder and self.hidden_size % 2:
            raise ValueError(
                f"`hidden_size` must be even with `bidirectional_encoder=True` (each direction has "
                f"hidden_size // 2 units), got {self.hidden_size}."
            )
        if self.input_feeding and self.attention == "none":
            raise ValueError(
                "`input_feeding=True` needs an `attention` other than 'none': input feeding passes the previous "
                "attentional vector, and without attention the decoder already has its own state. "
                f"Choose attention from {sorted(set(ATTENTION_TYPES) - {'none'})} or set input_feeding=False."
            )
        _probability("hidden_dropout", self.hidden_dropout)
        _non_negative("initializer_range", self.initializer_range)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            _token_ids(name, getattr(self, name), self.vocab_size)

    def estimated_num_parameters(self) -> int:
        """A lower bound of the parameter count (`HfLmPreTrainedModel` refuses what cannot fit in
        memory): the embedding and each stack's gate matrices (attention and input feeding aside)."""
        gates, H, E = RNN_CELL_GATES.get(self.cell_type, 1), self.hidden_size, self.embedding_size
        directions = 2 if self.bidirectional_encoder else 1
        h = H // directions  # each direction's state
        # the first layer of a stack reads the embeddings, the others the layer below
        encoder = directions * gates * h * ((E + h) + (self.encoder_layers - 1) * (H + h))
        decoder = gates * H * ((E + H) + (self.decoder_layers - 1) * 2 * H)
        return self.vocab_size * E + encoder + decoder


__all__ = ["ATTENTION_TYPES", "HfLmRNNSeq2SeqConfig"]
