"""Configuration of hf_lm's GPT-style decoder-only family (`model_type="hflm_gpt"`).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
"""

from __future__ import annotations

from transformers import PreTrainedConfig

from .hflm_common import (
    CACHE_NAMES,
    _attention_pattern,
    _positive_int,
)
from .hflm_configuration_base import HfLmMoETransformerConfig

# the fields that shape a local `attention_pattern`, which `sliding_window` describes too
WINDOW_FIELDS = ("attention_pattern", "attention_window", "attention_dilation", "attention_block_size")


class HfLmGPTConfig(HfLmMoETransformerConfig):
    """A decoder-only causal LM. Defaults are GPT-2 small; every field is validated at construction.

    GPT-2's architecture is the default (learned positions, pre-norm LayerNorm, tanh-GELU, biases,
    tied embeddings); the presets name GPT-2's, Llama's and Mistral's recipes (`PRESETS`, built by
    `from_preset`). See `HfLmTransformerConfig` and `HfLmMoETransformerConfig` for the shared fields.

    Args:
        sliding_window: Mistral's field: each query attends to the `sliding_window` latest keys, itself
            included, and the decoding cache keeps only those (transformers' `DynamicCache` and
            `StaticCache` read this name). It is the band of `attention_pattern` seen from the cache:
            `sliding_window=N` makes a dense config `attention_pattern="band"` with
            `attention_window=N - 1`, and a config whose every pattern part is local ("band",
            "dilated", "block") gets the window its keys lie in (w + 1, w * d + 1, b). `None` = no
            window (setting it on a band config makes it dense). Set after construction
            (`config.sliding_window = 4`, `from_pretrained(folder, sliding_window=4)`) it updates the
            pattern, and changing the pattern updates it; given at construction with a pattern whose
            window differs, it is refused. Stored in config.json.
        xpos_scale_base: xPos's scale base (`position_embedding_type="xpos"`): the decay of a score is
            zeta^(distance / xpos_scale_base) (Sun et al., 2022, use 512).

    ALBERT's options apply too: `embedding_size` E < H gives a V x E token table (positions are
    added at width E) projected up to H; a tied head then maps H -> E with a bias-free Linear
    (`output_projection`) before the V x E embedding matrix, so it scores in the embedding space.
    `num_hidden_groups` < `num_hidden_layers` shares blocks across layers; each layer keeps its own
    slot of the KV cache, since the same block sees different inputs at different depths.

    Example:
        >>> from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM
        >>> config = HfLmGPTConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4)
        >>> model = HfLmGPTForCausalLM(config)
        >>> llama = HfLmGPTConfig.from_preset("llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
        >>> HfLmGPTConfig(sliding_window=4).attention_pattern, HfLmGPTConfig(sliding_window=4).attention_window
        ('band', 3)
    """

    model_type = "hflm_gpt"
    # Named architecture recipes (`from_preset`): the fields `hf_lm.convert` sets when it imports that
    # model (tests/test_presets.py holds them equal). Sizes are the caller's, grouped queries included
    # (`num_key_value_heads`: Llama 2 70B and Mistral 7B use 8 key/value heads for 64 and 32 query heads),
    # and so is `intermediate_size` (Llama's is about 8/3 of the width, where the default is 4x).
    PRESETS = {
        # Radford et al. (2019): learned positions, pre-norm LayerNorm, tanh-GELU, biases, tied
        # embeddings (the defaults), and GPT2Config's dropout of 0.1 (`embd_pdrop`, `resid_pdrop`, `attn_pdrop`)
        "gpt2": {"hidden_dropout": 0.1, "attention_dropout": 0.1},
        # Touvron et al. (2023): RoPE, pre-norm RMSNorm, SwiGLU, no biases, an untied output projection
        "llama": {
            "position_embedding_type": "rope",
            "rope_theta": 10000.0,
            "norm_type": "rmsnorm",
            "norm_eps": 1e-6,
            "hidden_act": "swiglu",
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": False,
        },
    }
    # Jiang et al. (2023): Llama whose queries see the 4096 latest keys (Mistral 7B), a band of 4095
    PRESETS["mistral"] = {**PRESETS["llama"], "sliding_window": 4096}
    # pipeline stages of `HfLmGPTModel` (the modules and what flows between them), as transformers'
    # Llama declares them for pipeline parallelism and vLLM's Transformers backend
    base_model_pp_plan = {
        "embed_tokens": (["input_ids"], ["inputs_embeds"]),
        "layers": (["hidden_states", "attention_mask"], ["hidden_states"]),
        "norm": (["hidden_states"], ["hidden_states"]),
    }
    supports_albert_options = True
    has_bidirectional_stack = False

    @property
    def base_model_tp_plan(self) -> dict[str, str]:
        """Tensor parallelism of `HfLmGPTModel` (`from_pretrained(tp_plan="auto")`, vLLM's and SGLang's
        Transformers backends), for the modules this config builds (`stack_tp_plan`)."""
        return self.stack_tp_plan("layers", getattr(self, "decoder_sparse_step", None))

    keys_to_ignore_at_inference = list(CACHE_NAMES)

    xpos_scale_base: int = 512
    sliding_window: int | None = None

    def __post_init__(self, **kwargs):
        window = self.sliding_window
        if window is None:
            try:
                self.sliding_window = self._pattern_window()
            except (ValueError, TypeError):
                pass  # an invalid pattern field: `validate_hflm` names it
        elif self.attention_pattern == "dense" and _is_window(window):
            # Mistral's field on a dense config: the band it describes
            self.attention_pattern, self.attention_window = "band", window - 1
        super().__post_init__(**kwargs)

    def __setattr__(self, key, value):
        super().__setattr__(key, value)
        # after construction, `sliding_window` and the pattern fields are two views of one window:
        # setting one updates the other (during construction `__post_init__` reconciles them)
        if not self.__dict__.get("_post_init_done"):
            return
        if key == "sliding_window":
            if value is None and self.attention_pattern == "band":
                PreTrainedConfig.__setattr__(self, "attention_pattern", "dense")
            elif _is_window(value) and self.attention_pattern in ("dense", "band"):
                PreTrainedConfig.__setattr__(self, "attention_pattern", "band")
                PreTrainedConfig.__setattr__(self, "attention_window", value - 1)
            # other values and patterns: `validate_hflm` refuses what disagrees
        elif key in WINDOW_FIELDS:
            try:
                window = self._pattern_window()
            except (ValueError, TypeError):
                return  # an invalid pattern field: `validate_hflm` names it
            PreTrainedConfig.__setattr__(self, "sliding_window", window)

    def _pattern_window(self) -> int | None:
        """How many of the latest keys a query can see under `attention_pattern`, itself included, or
        None when a key may lie anywhere before: bounded when every part is local, "band" reaching
        w keys back, "dilated" w * d, "block" b - 1; "global" and "random" keys may lie anywhere."""
        parts = _attention_pattern("attention_pattern", self.attention_pattern)
        reach = {
            "band": lambda: self.attention_window,
            "dilated": lambda: self.attention_window * self.attention_dilation,
            "block": lambda: self.attention_block_size - 1,
        }
        if not parts or not set(parts) <= set(reach):
            return None
        return max(reach[part]() for part in parts) + 1

    def validate_hflm(self) -> None:
        super().validate_hflm()
        _positive_int("xpos_scale_base", self.xpos_scale_base)
        window = self.sliding_window
        if window is not None and not _is_window(window):
            raise ValueError(
                f"`sliding_window` must be None or an integer >= 2 (the keys a query sees, itself included), "
                f"got {window!r}."
            )
        expected = self._pattern_window()
        if window == expected:
            return
        pattern = self.attention_pattern
        if expected is None:
            raise ValueError(
                f"`sliding_window` ({window}) contradicts `attention_pattern`={pattern!r}, whose keys may lie "
                "anywhere before the query: leave sliding_window None, or use attention_pattern='band'."
            )
        if pattern == "band":
            raise ValueError(
                f"`sliding_window` ({window}) contradicts `attention_window` ({self.attention_window}) of "
                f"attention_pattern='band': a causal query sees attention_window + 1 = {expected} keys. Set one "
                "of them (setting either after construction updates the other)."
            )
        raise ValueError(
            f"`sliding_window` ({window}) contradicts `attention_pattern`={pattern!r}, whose keys lie within "
            f"the latest {expected}: the cache must keep them. Leave sliding_window None (it is then {expected}), or use "
            "attention_pattern='dense' for no window."
        )


def _is_window(value) -> bool:
    """A valid `sliding_window` value other than None."""
    return not isinstance(value, bool) and isinstance(value, int) and value >= 2
