"""Configuration of hf_lm's GPT-style decoder-only family (`model_type="hflm_gpt"`).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
"""

from __future__ import annotations

from .hflm_common import CACHE_NAMES
from .hflm_configuration_base import HfLmTransformerConfig


class HfLmGPTConfig(HfLmTransformerConfig):
    """A decoder-only causal LM. Defaults are GPT-2 small; every field is validated at construction.

    GPT-2 is the default (learned positions, pre-norm LayerNorm, tanh-GELU, biases, tied
    embeddings); Llama is `position_embedding_type="rope", norm_type="rmsnorm", hidden_act="swiglu",
    attention_bias=False, mlp_bias=False, tie_word_embeddings=False` with `num_key_value_heads` for
    GQA. See `HfLmTransformerConfig` for the fields.

    ALBERT's options apply too: `embedding_size` E < H gives a V x E token table (positions are
    added at width E) projected up to H; a tied head then maps H -> E with a bias-free Linear
    (`output_projection`) before the V x E embedding matrix, so it scores in the embedding space.
    `num_hidden_groups` < `num_hidden_layers` shares blocks across layers; each layer keeps its own
    slot of the KV cache, since the same block sees different inputs at different depths.

    Example:
        >>> from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM
        >>> config = HfLmGPTConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4)
        >>> model = HfLmGPTForCausalLM(config)
    """

    model_type = "hflm_gpt"
    supports_albert_options = True
    supports_moe = True
    has_bidirectional_stack = False
    # a local `attention_pattern` ("band", "dilated", "block") decodes with a sliding-window cache
    attention_pattern_in_cache = True
    keys_to_ignore_at_inference = list(CACHE_NAMES)
