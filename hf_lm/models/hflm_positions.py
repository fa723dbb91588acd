"""Position information of hf_lm's Transformer families: learned, sinusoidal, RoPE, xPos, ALiBi, T5's
relative buckets and none (`POSITION_ENCODINGS`), and the one rule for the positions of new tokens
(`real_token_positions`: each real token's index among the real tokens).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.

Shape legend: B batch, T query length, S key length (past + T), nh heads, hs head size.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .hflm_common import (
    POSITION_ENCODING_NAMES,
)

# ----------------------------------------------------------------------------------------------
# Positions. Each scheme answers three questions with a default of "nothing":
#   embed(position_ids)        -> vector added to the token embeddings (learned, sinusoidal)
#   position_embeddings(position_ids) -> (cos, sin, key_cos, key_sin) rotating queries and keys
#                                 (RoPE: the keys' are the queries'; xPos scales them apart), under
#                                 this one name from here to the attention function
#   attention_bias(T, S, ...)  -> per-head additive bias on the scores (ALiBi, T5 buckets)
# A scheme whose bias reads the keys' positions (ALiBi) sets `uses_key_positions`; the stack then
# passes the (1|B, S) positions of the keys too (`key_positions`).
# `past_len` (tokens already cached) may be a 0-dim tensor (a static cache's, see `cache_lengths`):
# it only enters tensor arithmetic.
# Nothing is stored in buffers: tables are a few small ops per forward, and this way nothing
# is lost when transformers materializes a model from the meta device.
# ----------------------------------------------------------------------------------------------


class NoPositions(nn.Module):
    """No position information at all (NoPE): causal masking alone leaks order (Haviv et al., 2022)."""

    max_positions: int | None = None  # no limit on the input length
    uses_key_positions = False  # whether `attention_bias` reads `key_position_ids`

    def __init__(self, config, width: int | None = None, causal: bool = True):
        """`width`: size of the vectors `embed` returns (default `hidden_size`; ALBERT's factorized
        embeddings add positions at `embedding_size`). `causal`: the model never looks ahead."""
        super().__init__()

    def embed(self, position_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
        return None

    def position_embeddings(self, position_ids: torch.Tensor, dtype: torch.dtype):
        return None

    def attention_bias(
        self,
        q_len: int,
        kv_len: int,
        past_len: int | torch.Tensor,
        device,
        dtype,
        position_ids: torch.Tensor | None = None,
        key_position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """(1|B, nh, T, S) additive score bias, or None. `position_ids` (1|B, T) are the queries'
        positions, `key_position_ids` (1|B, S) the keys' (given when `uses_key_positions`)."""
        return None

    def score_bias(
        self,
        batch: int,
        past_len: int | torch.Tensor,
        position_ids: torch.Tensor,
        key_position_ids: torch.Tensor | None,
        key_offset: int = 0,
    ):
        """`attention_bias` for flex_attention's `score_mod`: an object indexed `[b, h, q, k]` like the
        (B, nh, T, S) tensor, each score's bias computed where flex reads it instead of stored, so the
        cost follows the scores a `BlockMask` keeps. None without a bias. `key_offset`: the keys
        start at key index `key_offset` (a sliding-window cache dropped the older ones)."""
        return None


class LearnedPositions(NoPositions):
    """Learned absolute positions (GPT-2, BERT): one trained vector per position, hence a length limit."""

    def __init__(self, config, width=None, causal=True):
        super().__init__(config)
        self.embeddings = nn.Embedding(config.max_position_embeddings, width or config.hidden_size)
        self.max_positions = config.max_position_embeddings

    def embed(self, position_ids, dtype):
        return self.embeddings(position_ids)  # (B|1, T) -> (B|1, T, C)


class SinusoidalPositions(NoPositions):
    """Fixed sinusoids of "Attention is all you need": sin on even dims, cos on odd dims."""

    def __init__(self, config, width=None, causal=True):
        super().__init__(config)
        self.hidden_size = width or config.hidden_size

    def embed(self, position_ids, dtype):
        half = self.hidden_size // 2
        inv_freq = 10000.0 ** (-torch.arange(half, device=position_ids.device, dtype=torch.float32) / half)
        angles = position_ids.float()[..., None] * inv_freq  # (B|1, T, C/2)
        # interleave so dim 2i is sin and 2i+1 is cos, as in the paper
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (B|1, T, C)
        return table.to(dtype)


class RotaryPositions(NoPositions):
    """RoPE (Su et al., 2021) in the "rotate half" layout used by GPT-NeoX and Llama checkpoints."""

    def __init__(self, config, width=None, causal=True):
        super().__init__(config)
        self.head_dim = config.head_dim
        self.theta = config.rope_theta

    def angles(self, position_ids: torch.Tensor) -> torch.Tensor:
        """(B|1, T, hs) fp32 rotation angles: frequency i appears at dims i and i + hs/2."""
        inv_freq = 1.0 / (
            self.theta
            ** (
                torch.arange(0, self.head_dim, 2, device=position_ids.device, dtype=torch.float32)
                / self.head_dim
            )
        )
        freqs = position_ids.float()[..., None] * inv_freq  # (B|1, T, hs/2)
        return torch.cat((freqs, freqs), dim=-1)  # (B|1, T, hs)

    def position_embeddings(self, position_ids, dtype):
        emb = self.angles(position_ids)
        cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
        return cos, sin, cos, sin  # keys rotate as queries do


class XPosPositions(RotaryPositions):
    """xPos (Sun et al., 2022, "A Length-Extrapolatable Transformer"): RoPE whose rotation of
    frequency i is also scaled by zeta_i^(n / scale_base) on the query at position n and by
    zeta_i^(-m / scale_base) on the key at position m, with zeta_i = (2i/hs + gamma) / (1 + gamma),
    gamma = 0.4. A query-key score is then scaled by zeta_i^((n - m) / scale_base): an exponential
    decay with distance (zeta_i < 1), stronger for the fast-rotating low dims, which the paper
    finds keeps attention stable beyond the training length.

    `rotary` returns `(cos, sin, key_cos, key_sin)`: queries and keys are scaled inversely, and each
    key is scaled once, at its own position, before it enters the cache. The scale depends on the
    distance only in one direction, so only causal stacks use xPos. Positions are not centred as in
    the paper's code: at thousands of tokens the key scale reaches ~1e4 (fine in fp32/bf16).
    """

    gamma = 0.4

    def __init__(self, config, width=None, causal=True):
        super().__init__(config)
        if not causal:
            raise ValueError(
                "position_embedding_type='xpos' is for causal stacks (GPT, a decoder): its decay grows "
                "for keys after the query, so a bidirectional encoder cannot use it."
            )
        self.scale_base = config.xpos_scale_base

    def position_embeddings(self, position_ids, dtype):
        emb = self.angles(position_ids)
        dims = torch.arange(0, self.head_dim, 2, device=position_ids.device, dtype=torch.float32)
        zeta = (dims / self.head_dim + self.gamma) / (1 + self.gamma)  # (hs/2,) in [0.29, 1)
        power = position_ids.float()[..., None] / self.scale_base  # (B|1, T, 1)
        scale = zeta**power  # (B|1, T, hs/2)
        scale = torch.cat((scale, scale), dim=-1)  # (B|1, T, hs), the layout of `angles`
        cos, sin = emb.cos(), emb.sin()
        return (
            (cos * scale).to(dtype),
            (sin * scale).to(dtype),
            (cos / scale).to(dtype),
            (sin / scale).to(dtype),
        )


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """Head slopes of ALiBi (Press et al., 2022): a geometric sequence starting at 2^(-8/n).

    For a head count that is not a power of two the paper interleaves the slopes of the next power.
    """

    def power_of_2(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_2(closest)
    if closest < num_heads:
        slopes += power_of_2(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBiPositions(NoPositions):
    """ALiBi: a linear penalty `-slope_h * (n - m)` on the scores instead of position vectors.

    Distances are measured between the positions of the query (n) and the key (m), not between
    their indices: a block packed from documents whose `position_ids` restart at each document
    start gives every document the biases it has alone, and so do left padding and explicit
    `position_ids`. Cached keys keep the positions they had when they were new (`key_positions`).
    A bidirectional encoder penalizes `|n - m|` symmetrically, as the paper suggests for encoders.
    """

    uses_key_positions = True

    def __init__(self, config, width=None, causal=True):
        super().__init__(config)
        self.num_heads = config.num_attention_heads
        self.causal = causal

    def attention_bias(
        self, q_len, kv_len, past_len, device, dtype, position_ids=None, key_position_ids=None
    ):
        slopes = alibi_slopes(self.num_heads).to(device)  # (nh,)
        distance = (
            position_ids.to(device)[:, :, None] - key_position_ids.to(device)[:, None, :]
        )  # (1|B, T, S)
        # causal: future keys are masked anyway; bidirectional: the penalty is symmetric
        distance = (distance.clamp(min=0) if self.causal else distance.abs()).float()
        return (-slopes[None, :, None, None] * distance[:, None]).to(dtype)  # (1|B, nh, T, S)

    def score_bias(self, batch, past_len, position_ids, key_position_ids, key_offset=0):
        slopes = alibi_slopes(self.num_heads).to(position_ids.device)
        q_pos = position_ids.expand(batch, -1).contiguous()  # (B, T): flex indexes every row
        k_pos = (
            key_position_ids[:, key_offset:].to(position_ids.device).expand(batch, -1).contiguous()
        )  # (B, S)
        return ALiBiScores(slopes, q_pos, k_pos, self.causal)


class ALiBiScores:
    """ALiBi's bias indexed `[b, h, q, k]` as flex_attention's score_mod reads a (B, nh, T, S) tensor:
    `-slope_h * distance`, computed per score from the (B, T) and (B, S) positions."""

    def __init__(self, slopes: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor, causal: bool):
        self.slopes, self.q_pos, self.k_pos, self.causal = slopes, q_pos, k_pos, causal

    def __getitem__(self, index):
        b, h, q, k = index
        distance = self.q_pos[b, q] - self.k_pos[b, k]
        distance = distance.clamp(min=0) if self.causal else distance.abs()
        return -self.slopes[h] * distance

    def select_heads(self, start: int, count: int) -> ALiBiScores:
        """The bias of heads start .. start + count - 1 (a process's share under tensor parallelism)."""
        return ALiBiScores(self.slopes[start : start + count], self.q_pos, self.k_pos, self.causal)


def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """T5's bucket of each key-minus-query distance (Raffel et al., 2020, section 2.1).

    Half of the buckets hold exact small distances; the other half cover distances up to
    `max_distance` on a log scale, and everything farther shares the last bucket. A bidirectional
    stack spends half of its buckets on each direction; a causal one sees no future keys.
    """
    bucket = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        bucket += (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = -relative_position.clamp(max=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # log-spaced buckets for max_exact <= distance < max_distance (the clamp avoids log(0) for small ones)
    log_ratio = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return bucket + torch.where(is_small, distance, large)


class RelativeBucketPositions(NoPositions):
    """T5's relative position bias: a learned per-head scalar for each bucket of key-query distance,
    added to the attention scores of every layer (computed once per stack, shared by its layers)."""

    def __init__(self, config, width=None, causal=True):
        super().__init__(config)
        self.causal = causal
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.bias = nn.Embedding(self.num_buckets, config.num_attention_heads)
        self.bias.init_role = "relative_bias"

    def attention_bias(
        self, q_len, kv_len, past_len, device, dtype, position_ids=None, key_position_ids=None
    ):
        q_pos = (torch.arange(q_len, device=device) + past_len)[:, None]  # (T, 1)
        k_pos = torch.arange(kv_len, device=device)[None, :]  # (1, S)
        buckets = relative_position_bucket(
            k_pos - q_pos, not self.causal, self.num_buckets, self.max_distance
        )
        values = self.bias(buckets)  # (T, S, nh)
        return values.permute(2, 0, 1)[None].to(dtype)  # (1, nh, T, S)

    def score_bias(self, batch, past_len, position_ids, key_position_ids, key_offset=0):
        # the table's transpose: flex reads one head's row per score, (nh, num_buckets)
        table = self.bias.weight.t()
        return BucketScores(
            table, past_len - key_offset, not self.causal, self.num_buckets, self.max_distance
        )


class BucketScores:
    """T5's bias indexed `[b, h, q, k]` as flex_attention's score_mod reads a (B, nh, T, S) tensor: the
    bucket of the key-minus-query distance, looked up in the (nh, num_buckets) table per score.
    Query q is at key index `past_len + q` (less a sliding cache's dropped keys), as in
    `RelativeBucketPositions.attention_bias`."""

    def __init__(self, table, past_len, bidirectional: bool, num_buckets: int, max_distance: int):
        self.table, self.past_len = table, past_len
        self.bidirectional, self.num_buckets, self.max_distance = bidirectional, num_buckets, max_distance

    def __getitem__(self, index):
        b, h, q, k = index
        bucket = relative_position_bucket(
            k - (q + self.past_len), self.bidirectional, self.num_buckets, self.max_distance
        )
        return self.table[h, bucket]

    def select_heads(self, start: int, count: int) -> BucketScores:
        """The bias of heads start .. start + count - 1 (a process's share under tensor parallelism)."""
        return BucketScores(
            self.table[start : start + count],
            self.past_len,
            self.bidirectional,
            self.num_buckets,
            self.max_distance,
        )


POSITION_ENCODINGS = {
    "learned": LearnedPositions,
    "sinusoidal": SinusoidalPositions,
    "rope": RotaryPositions,
    "alibi": ALiBiPositions,
    "none": NoPositions,
    "relative_buckets": RelativeBucketPositions,
    "xpos": XPosPositions,
}
assert tuple(POSITION_ENCODINGS) == POSITION_ENCODING_NAMES


def real_token_positions(
    attention_mask: torch.Tensor | None, past_len: int | torch.Tensor, q_len: int, device: torch.device
) -> torch.Tensor:
    """(1|B, T) positions of the T new tokens, which follow `past_len` cached ones: each real
    token's index among the real tokens, so a left-padded sequence gets the positions it has
    alone (with right padding this is 0..T-1); padding keeps its index (it is never attended to).

    Args:
        attention_mask: (B, W) padding mask of the cached and new tokens (W = past + T, or a
            static cache's full length, its empty slots 0), or None.
        past_len: an int, or a static cache's 0-dim count tensor (see `cache_lengths`).
    """
    new = torch.arange(q_len, device=device) + past_len  # (T,) key index of each new token
    if attention_mask is None:
        return new[None]  # (1, T)
    mask = attention_mask.to(device).long()
    index = torch.arange(mask.shape[-1], device=device)
    positions = torch.where(mask.bool(), mask.cumsum(-1) - 1, index)  # (B, W)
    return positions.index_select(1, new)  # (B, T); an index, not a slice: `past_len` may be a tensor


def key_positions(
    position_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    past_len: int | torch.Tensor,
    kv_len: int,
    device: torch.device,
) -> torch.Tensor:
    """(1|B, S) positions of the S keys attention sees, for a bias measured between positions (ALiBi).

    The T new keys are the queries, at key slots past_len .. past_len + T - 1: they take the
    queries' `position_ids`. The cached keys (and a static cache's empty slots) are numbered as
    the new tokens are: by the real-token rule (`real_token_positions`, what the default and
    `generate()` give) shifted by the row's offset from that rule at its first new token, so
    positions that start elsewhere than 0 keep every distance. A cache does not record positions
    that restart inside it (packed documents): those must be run without a cache.

    Args:
        position_ids: (1|B, T) the new tokens' positions.
        attention_mask: (B, S) padding mask widened to the keys (`keys_padding_mask`), or None.
    """
    rule = real_token_positions(attention_mask, 0, kv_len, device)  # (1|B, S)
    new = torch.arange(position_ids.shape[-1], device=device) + past_len  # (T,) key slot of each query
    position_ids = position_ids.to(device=device, dtype=rule.dtype)
    shift = position_ids[:, :1] - rule.index_select(1, new[:1])  # (1|B, 1), 0 with the rule's positions
    keys = rule + shift  # (1|B, S)
    return keys.index_copy(1, new, position_ids.expand(keys.shape[0], -1))  # (1|B, S)


def check_positions_in_range(
    positions: nn.Module, position_ids: torch.Tensor, advice: str, past_len: int | torch.Tensor = 0
) -> None:
    """A clear error, not an index error inside the embedding, when the positions a model made
    itself (`real_token_positions`) run beyond its learned table: the input is too long.

    They never exceed `past_len + T - 1`, so with an int `past_len` that fits nothing is read.
    """
    max_positions = positions.max_positions
    if torch.compiler.is_compiling() or max_positions is None:
        return
    if isinstance(past_len, int) and past_len + position_ids.shape[-1] <= max_positions:
        return
    top = int(position_ids.max())
    if top >= max_positions:
        raise ValueError(
            f"Position {top} is out of range: this model's learned positions allow "
            f"sequences of at most max_position_embeddings={max_positions} tokens. {advice}"
        )
