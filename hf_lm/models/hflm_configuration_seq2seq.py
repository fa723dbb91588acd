"""Configurations of hf_lm's encoder-decoder families: T5-style (`hflm_t5`) and BART-style (`hflm_bart`).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
Both families share one implementation (`hflm_modeling_seq2seq`) and differ only in defaults.
"""

from __future__ import annotations

from .hflm_common import (
    CACHE_NAMES,
    DECODER_ATTENTION_NAMES,
    _bool,
    _choice,
    _dropout,
    _positive_int,
    _token_ids,
)
from .hflm_configuration_base import HfLmMoETransformerConfig


class HfLmEncoderDecoderConfig(HfLmMoETransformerConfig):
    """Fields shared by the encoder-decoder families (not registered itself).

    Besides the shared Transformer and mixture-of-experts fields (`num_hidden_layers` is the encoder
    depth; `attention_pattern` shapes the encoder's self-attention, the decoder's attends to every
    earlier key, so there is no `sliding_window`):

    Args:
        decoder_layers: decoder depth; `None` = the encoder depth. (`num_decoder_layers`, T5's name,
            is an alias.) transformers' `generate()` sizes its cache from this name.
        decoder_start_token_id: the token the decoder starts from (T5: pad; BART: eos).
        scale_embedding: multiply token embeddings by sqrt(hidden_size) ("Attention is all you need").
        embedding_norm: normalize the summed embeddings before the first block (BART).
        scale_decoder_output: multiply the decoder output by hidden_size**-0.5 before the tied
            LM head (T5, whose embeddings are not scaled down at the input).
        classifier_dropout: dropout in the sequence-classification head; `None` = `hidden_dropout`.
        decoder_attention: the decoder's self-attention, "causal" (autoregressive generation) or
            "bidirectional": a conditional masked LM, the Mask-Predict head (`...ForMaskPredict`).
        mask_token_id: the token that marks the targets a Mask-Predict decoder predicts.
        encoder_sparse_step: which encoder layers are sparse (`decoder_sparse_step`'s rule).
    """

    is_encoder_decoder: bool = True
    decoder_layers: int | None = None
    decoder_start_token_id: int | None = None
    scale_embedding: bool = False
    embedding_norm: bool = False
    scale_decoder_output: bool = False
    classifier_dropout: float | None = None
    decoder_attention: str = "causal"
    mask_token_id: int | None = None
    encoder_sparse_step: int = 1

    @property
    def base_model_tp_plan(self) -> dict[str, str]:
        """Tensor parallelism of the encoder-decoder (`from_pretrained(tp_plan="auto")`): each stack's
        blocks as `stack_tp_plan` shards them, the decoder's cross-attention included."""
        return {
            **self.stack_tp_plan("encoder.layers", self.encoder_sparse_step),
            **self.stack_tp_plan("decoder.layers", self.decoder_sparse_step, cross_attention=True),
        }

    size_field_names = (*HfLmMoETransformerConfig.size_field_names, "decoder_layers")
    sliding_window_refusal = (
        "its decoder attends to every earlier target token (`attention_pattern` shapes its encoder: "
        "attention_pattern='band' with attention_window=w for a local encoder)"
    )
    attribute_map = {
        **HfLmMoETransformerConfig.attribute_map,
        "num_decoder_layers": "decoder_layers",
        "encoder_layers": "num_hidden_layers",
        # T5's and BART's name for the width, which transformers' seq2seq export recipe reads
        "d_model": "hidden_size",
    }

    def __post_init__(self, **kwargs):
        if self.decoder_layers is None:
            self.decoder_layers = self.num_hidden_layers
        self.is_encoder_decoder = True
        super().__post_init__(**kwargs)

    def validate_hflm(self) -> None:
        super().validate_hflm()
        _positive_int("decoder_layers", self.decoder_layers)
        for name in ("scale_embedding", "embedding_norm", "scale_decoder_output"):
            _bool(name, getattr(self, name))
        _token_ids("decoder_start_token_id", self.decoder_start_token_id, self.vocab_size)
        if self.classifier_dropout is not None:  # None: hidden_dropout
            _dropout("classifier_dropout", self.classifier_dropout)
        _choice("decoder_attention", self.decoder_attention, DECODER_ATTENTION_NAMES)
        _token_ids("mask_token_id", self.mask_token_id, self.vocab_size)

    def _sparse_step_fields(self) -> tuple[str, ...]:
        return ("encoder_sparse_step", "decoder_sparse_step")

    def estimated_num_parameters(self) -> int:
        """The shared embedding, the encoder's blocks and the decoder's (with cross-attention)."""
        sparse = {
            "encoder": self._num_sparse_layers(self.num_hidden_layers, self.encoder_sparse_step),
            "decoder": self._num_sparse_layers(self.decoder_layers, self.decoder_sparse_step),
        }
        total = self.vocab_size * self.hidden_size
        for stack, layers in (("encoder", self.num_hidden_layers), ("decoder", self.decoder_layers)):
            cross = stack == "decoder"
            total += (layers - sparse[stack]) * self._block_parameters(sparse=False, cross_attention=cross)
            total += sparse[stack] * self._block_parameters(sparse=True, cross_attention=cross)
        return total


class HfLmT5Config(HfLmEncoderDecoderConfig):
    """T5-style encoder-decoder (Raffel et al., 2020). Defaults are T5-small (v1.0).

    RMSNorm pre-norm without biases, ReLU feed-forward (`hidden_act="geglu_tanh"` and untied
    embeddings for v1.1), a bucketed relative position bias per stack shared by its layers,
    unscaled attention, tied embeddings with the output scaled by hidden_size**-0.5.

    Example:
        >>> from hf_lm import HfLmT5Config, HfLmT5ForConditionalGeneration
        >>> config = HfLmT5Config(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4)
        >>> model = HfLmT5ForConditionalGeneration(config)
    """

    model_type = "hflm_t5"
    keys_to_ignore_at_inference = list(CACHE_NAMES)
    PRESETS = {
        "t5": {},
        # T5 v1.1: gated-GELU, no dropout in pretraining, untied and unscaled output projection
        "t5_v1_1": {"hidden_act": "geglu_tanh", "tie_word_embeddings": False, "scale_decoder_output": False},
    }

    vocab_size: int = 32128
    hidden_size: int = 512
    num_hidden_layers: int = 6
    num_attention_heads: int = 8
    intermediate_size: int | None = None  # 4 * hidden_size: 2048 for T5-small
    hidden_act: str = "relu"
    position_embedding_type: str = "relative_buckets"
    max_position_embeddings: int = 512
    norm_type: str = "rmsnorm"
    norm_position: str = "pre"
    norm_eps: float = 1e-6
    attention_bias: bool = False
    mlp_bias: bool = False
    attention_scale: float | None = 1.0
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.0
    scale_decoder_output: bool = True
    pad_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 1
    decoder_start_token_id: int | None = 0


class HfLmBartConfig(HfLmEncoderDecoderConfig):
    """BART-style encoder-decoder (Lewis et al., 2020). Defaults are BART-base.

    Learned positions, post-norm LayerNorm with a norm on the embeddings, GELU, biases, tied
    embeddings. The preset "transformer" is the original Transformer of Vaswani et al. (2017):
    sinusoidal positions, post-norm, ReLU, embeddings scaled by sqrt(hidden_size).
    """

    model_type = "hflm_bart"
    keys_to_ignore_at_inference = list(CACHE_NAMES)
    PRESETS = {
        "bart": {},
        "transformer": {
            "position_embedding_type": "sinusoidal",
            "hidden_act": "relu",
            "embedding_norm": False,
            "scale_embedding": True,
            "hidden_dropout": 0.1,
            "attention_dropout": 0.0,
        },
    }

    vocab_size: int = 50265
    hidden_size: int = 768
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int | None = None  # 4 * hidden_size: 3072 for BART-base
    hidden_act: str = "gelu"
    position_embedding_type: str = "learned"
    max_position_embeddings: int = 1024
    norm_type: str = "layernorm"
    norm_position: str = "post"
    norm_eps: float = 1e-5
    embedding_norm: bool = True
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.0
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 2
