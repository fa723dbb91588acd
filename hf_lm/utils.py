"""Small utilities around hf_lm configs (not shipped with checkpoints)."""

from __future__ import annotations

import torch


def kv_cache_bytes(config, batch_size: int, seq_len: int, dtype: torch.dtype | str = torch.float16) -> int:
    """Bytes the KV cache of a decoder needs for `batch_size` sequences of `seq_len` tokens.

    Every layer stores keys and values for `num_key_value_heads` heads, so the cache is
    `2 * layers * batch * seq_len * num_key_value_heads * head_dim * bytes_per_element`.
    Grouped-query attention divides it by `num_attention_heads / num_key_value_heads`;
    multi-query attention (one key/value head) by `num_attention_heads`. With a sliding window
    (a GPT config whose `sliding_window` is set, directly or by a local `attention_pattern`) the
    `DynamicCache` generate() makes keeps at most `sliding_window - 1` tokens, however long the
    sequence; the other families' configs have no window.

    Example:
        >>> from hf_lm import HfLmGPTConfig, kv_cache_bytes
        >>> mha = HfLmGPTConfig(hidden_size=4096, num_attention_heads=32, num_hidden_layers=32)
        >>> kv_cache_bytes(mha, batch_size=1, seq_len=4096) / 2**30  # GiB in fp16
        2.0
    """
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if batch_size < 0 or seq_len < 0:
        raise ValueError(f"batch_size and seq_len must be non-negative, got {batch_size} and {seq_len}.")
    per_element = torch.empty((), dtype=dtype).element_size()
    window = getattr(config, "sliding_window", None)
    if window:
        seq_len = min(seq_len, window - 1)  # what DynamicSlidingWindowLayer keeps
    layers = getattr(config, "num_decoder_layers", None) or config.num_hidden_layers
    return 2 * layers * batch_size * seq_len * config.num_key_value_heads * config.head_dim * per_element
