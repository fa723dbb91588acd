"""Configuration of hf_lm's BERT-style bidirectional encoder family (`model_type="hflm_bert"`).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
"""

from __future__ import annotations

from .hflm_common import (
    _dropout,
)
from .hflm_configuration_base import HfLmTransformerConfig


class HfLmBertConfig(HfLmTransformerConfig):
    """A bidirectional Transformer encoder. Defaults are BERT-base; validated at construction.

    Besides the shared fields of `HfLmTransformerConfig` (BERT defaults: post-norm LayerNorm with
    eps 1e-12, exact GELU, learned positions up to 512, dropout 0.1; ALBERT's `embedding_size`,
    the width of the token, position and segment embeddings, and `num_hidden_groups`):

    Args:
        type_vocab_size: number of segment (token type) embeddings; 2 for BERT's sentence pairs,
            0 for none (RoBERTa).
        classifier_dropout: dropout before the classification heads; `None` = `hidden_dropout`.
        sparse_prediction: during training with `labels`, run the masked-LM head only on the
            positions that have a label (about 15%) and return logits for those positions only,
            shape (N, V); the loss is unchanged. Off by default: `logits` are then (B, T, V).

    Example:
        >>> from hf_lm import HfLmBertConfig, HfLmBertForMaskedLM
        >>> config = HfLmBertConfig.from_preset("roberta", vocab_size=1000, hidden_size=64,
        ...                                     num_hidden_layers=2, num_attention_heads=4)
        >>> model = HfLmBertForMaskedLM(config)
    """

    model_type = "hflm_bert"
    # Three named starting points (`from_preset`), each a handful of overrides of the BERT-base
    # defaults. Sizes are left to the caller (`HfLmBertConfig.from_preset("roberta", hidden_size=256, ...)`).
    PRESETS = {
        # Devlin et al. (2019): segment embeddings, post-norm, GELU, MLM + next-sentence prediction
        "bert": {},
        # Liu et al. (2019): no NSP and no segment embeddings; dynamic masking lives in the collator
        "roberta": {"type_vocab_size": 0, "norm_eps": 1e-5, "pad_token_id": 1},
        # Lan et al. (2020): factorized embeddings E < H, one block shared by all layers, SOP
        "albert": {"embedding_size": 128, "num_hidden_groups": 1, "hidden_act": "gelu_tanh"},
    }
    supports_albert_options = True
    sliding_window_refusal = (
        "an encoder keeps no cache to slide; for local attention set attention_pattern='band' with "
        "attention_window=w (each token then sees the tokens at most w away on either side)"
    )

    # BERT-base
    vocab_size: int = 30522
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    norm_position: str = "post"
    norm_eps: float = 1e-12
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    use_cache: bool = False  # an encoder has no incremental decoding
    pad_token_id: int | None = 0
    type_vocab_size: int = 2
    classifier_dropout: float | None = None
    sparse_prediction: bool = False

    def validate_hflm(self) -> None:
        super().validate_hflm()
        if (
            isinstance(self.type_vocab_size, bool)
            or not isinstance(self.type_vocab_size, int)
            or self.type_vocab_size < 0
        ):
            raise ValueError(
                f"`type_vocab_size` must be a non-negative integer (0 = no segment embeddings), got {self.type_vocab_size!r}."
            )
        if self.classifier_dropout is not None:
            _dropout("classifier_dropout", self.classifier_dropout)
        if not isinstance(self.sparse_prediction, bool):
            raise ValueError(f"`sparse_prediction` must be True or False, got {self.sparse_prediction!r}.")


# the table's older name
BERT_PRESETS = HfLmBertConfig.PRESETS
