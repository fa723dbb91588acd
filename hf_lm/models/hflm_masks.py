"""Attention masks of hf_lm's Transformer families, built once per forward and shared by the layers:
padding, causality, prefix-LM, packed documents and the sparse patterns (band, dilated, block, global,
random), as a dense mask (`build_attention_mask`, the reference, for eager and SDPA) and as flex_attention's
predicate (`FlexMask`, whose cost follows the pattern's density).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.

Shape legend: B batch, T query length, S key length (past + T), nh heads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .hflm_attention import (
    block_mask_from_predicate,
)
from .hflm_common import (
    ATTENTION_PATTERN_NAMES,
    _attention_pattern,
)
from .hflm_inputs import (
    _padding_mask_is_full,
    _require_integer,
    _require_tensor,
)
from .hflm_positions import (
    real_token_positions,
)

# ----------------------------------------------------------------------------------------------
# Masks. Built once per forward and shared by all layers.
# ----------------------------------------------------------------------------------------------


def build_attention_mask(
    attention_mask: torch.Tensor | None,
    *,
    q_len: int,
    kv_len: int,
    device: torch.device,
    dtype: torch.dtype,
    causal: bool = True,
    prefix_lengths: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    past_len: int | torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None,
    pattern: torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, bool]:
    """Combine padding, causality, an optional fully visible prefix, an optional sparse attention
    pattern and an optional score bias.

    Args:
        attention_mask: (B, S) with 1 for real tokens and 0 for padding (a static cache's empty
            slots included, see `keys_padding_mask`), or None when nothing is padded (callers drop
            all-ones masks so the fast paths apply).
        q_len: T, the number of new queries, at key positions past_len .. past_len + T - 1.
        kv_len: S, the number of keys attention sees: past + T for a dynamic cache, the cache's
            full size for a static one (whose empty slots lie after the queries: causality hides them).
        causal: queries may not look at later keys.
        prefix_lengths: (B,) prefix-LM mask: keys before `prefix_lengths[b]` are visible to every query.
        bias: (1|B, nh, T, S) additive score bias (ALiBi).
        past_len: tokens already in the cache; defaults to `kv_len - q_len`. A 0-dim tensor for a
            static cache (see `cache_lengths`): the mask is then always built, no host read.
        document_ids: (B, S) index of the document each token belongs to, for blocks packed from
            several documents: a query sees only keys of its own document.
        pattern: (1|B, 1, T, S) bool, the keys a sparse attention pattern lets each query see
            (`AttentionPattern`), or None (dense).

    Returns:
        `(mask, is_causal)`. `mask` is None when plain causal attention (or no mask at all) is
        exact, so SDPA can use its fast `is_causal` kernel; otherwise a bool (B, 1, T, S) mask with
        True = attend, or, when `bias` is given, a float (B, nh, T, S) additive mask. A query that
        would see no key sees its own, so no row is empty (no NaN, and the SDPA and eager paths
        agree on padding queries).
    """
    past_len = kv_len - q_len if past_len is None else past_len
    padded = attention_mask is not None  # callers pass None when nothing is padded
    if (
        bias is None
        and not padded
        and prefix_lengths is None
        and document_ids is None
        and pattern is None
        and not torch.is_tensor(past_len)  # a static cache: its empty slots must be masked
        and past_len + q_len == kv_len
    ):
        if not causal or q_len == 1:
            return None, False  # every query sees every key
        if q_len == kv_len:
            return None, True  # plain causal: SDPA's is_causal is exact
    q_idx = (torch.arange(q_len, device=device) + past_len)[:, None]  # (T, 1) key index of each query
    k_idx = torch.arange(kv_len, device=device)[None, :]  # (1, S)
    allowed = (k_idx <= q_idx) if causal else torch.ones(q_len, kv_len, dtype=torch.bool, device=device)
    allowed = allowed[None, None]  # (1, 1, T, S)
    if prefix_lengths is not None:
        allowed = allowed | (
            k_idx[None, None] < prefix_lengths.to(device)[:, None, None, None]
        )  # (B, 1, T, S)
    if padded:
        allowed = allowed & attention_mask.to(device=device, dtype=torch.bool)[:, None, None, :]
    if document_ids is not None:
        docs = document_ids.to(device)
        same_doc = docs[:, q_idx[:, 0], None] == docs[:, None, :]  # (B, T, S)
        allowed = allowed & same_doc[:, None]  # (B, 1, T, S)
    if pattern is not None:
        allowed = allowed & pattern  # (1|B, 1, T, S)
    # a query with nothing to attend to (a padding query of a left-padded causal row, a fully
    # padded sequence) sees itself: no empty softmax row, so no NaN, and SDPA and eager agree
    allowed = allowed | ((k_idx == q_idx)[None, None] & ~allowed.any(dim=-1, keepdim=True))
    if attention_mask is not None:
        allowed = allowed.expand(attention_mask.shape[0], -1, -1, -1)
    if bias is None:
        return allowed, False
    return bias.masked_fill(~allowed, torch.finfo(dtype).min), False


# ----------------------------------------------------------------------------------------------
# Sparse attention patterns: which keys each query may see, on top of causality and padding.
# Each part maps the positions of queries (1|B, T, 1) and keys (1|B, 1, S) to a (1|B, T, S) bool
# mask; a pattern is the union of its parts (`attention_pattern="band+global"`). Positions count
# real tokens (padding aside, as `real_token_positions` does), so a left-padded row gets the
# pattern it has alone.
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PatternPart:
    """One part of a sparse pattern, both of its views side by side.

    `allows(config, q_pos, k_pos, eligible)`: the (1|B, T, S) keys it lets each query see, from the
    positions of queries (1|B, T, 1) and keys (1|B, 1, S). `reach(config, q_lo, q_hi, k_lo, k_hi)`:
    whether a block of queries with positions in [q_lo, q_hi] may see a key of a block with positions
    in [k_lo, k_hi] (a superset: never False where `allows` could be True), which flex_attention's
    `BlockMask` is built from, so that its cost follows the pattern's density.
    """

    allows: Callable
    reach: Callable


def _block_gap(q_lo, q_hi, k_lo, k_hi):
    """The smallest |q - k| between a block of query positions [q_lo, q_hi] and of key positions."""
    return torch.maximum(k_lo - q_hi, q_lo - k_hi).clamp(min=0)


def global_pattern(config, q_pos, k_pos, eligible):
    """Global tokens (Longformer's, Beltagy et al., 2020): the first g tokens see every key and
    every query sees them."""
    g = config.num_global_tokens
    return (q_pos < g) | (k_pos < g)


def global_reach(config, q_lo, q_hi, k_lo, k_hi):
    return (q_lo < config.num_global_tokens) | (k_lo < config.num_global_tokens)


def band_pattern(config, q_pos, k_pos, eligible):
    """A band (sliding window): keys at most w tokens away."""
    return (q_pos - k_pos).abs() <= config.attention_window


def band_reach(config, q_lo, q_hi, k_lo, k_hi):
    return _block_gap(q_lo, q_hi, k_lo, k_hi) <= config.attention_window


def dilated_pattern(config, q_pos, k_pos, eligible):
    """A dilated window (Longformer): every d-th key up to w * d tokens away, so the same number
    of keys as the band reaches d times farther."""
    distance = (q_pos - k_pos).abs()
    d = config.attention_dilation
    return (distance <= config.attention_window * d) & (distance % d == 0)


def dilated_reach(config, q_lo, q_hi, k_lo, k_hi):
    return _block_gap(q_lo, q_hi, k_lo, k_hi) <= config.attention_window * config.attention_dilation


def block_pattern(config, q_pos, k_pos, eligible):
    """Block-local attention: keys in the query's block of b tokens (blocks start at multiples of b)."""
    b = config.attention_block_size
    return q_pos // b == k_pos // b


def block_reach(config, q_lo, q_hi, k_lo, k_hi):
    b = config.attention_block_size
    return (q_lo // b <= k_hi // b) & (k_lo // b <= q_hi // b)


_HASH_BITS = 2**31 - 1


def position_hash(q_pos: torch.Tensor, k_pos: torch.Tensor, seed: int) -> torch.Tensor:
    """A 31-bit hash of (seed, query position, key position) in int64 arithmetic, every product
    below 2**62: no random generator, so it is the same on every device and in plain Python."""
    x = ((seed & _HASH_BITS) ^ q_pos) * 0x2545F491 & _HASH_BITS
    x = (x ^ (x >> 13) ^ k_pos) * 0x5BD1E995 & _HASH_BITS
    x = (x ^ (x >> 16)) * 0x2545F491 & _HASH_BITS
    return x ^ (x >> 15)


def random_rank(config, q_pos, k_pos):
    """The order in which a query picks its random keys: (hash, key position) as one int64, below
    2**55 (positions are taken below 2**24). Elementwise, so flex_attention's mask_mod reads it too."""
    return (position_hash(q_pos, k_pos, config.attention_random_seed) << 24) | (k_pos & (2**24 - 1))


def random_threshold(config, q_pos, k_pos, eligible):
    """(1|B, T, 1) the r-th smallest `random_rank` among each query's eligible keys (int64's max
    when fewer than r are eligible: then all of them)."""
    rank = random_rank(config, q_pos, k_pos).masked_fill(~eligible, torch.iinfo(torch.int64).max)
    r = min(config.num_random_keys, rank.shape[-1])
    return rank.topk(r, dim=-1, largest=False).values[..., -1:]  # (1|B, T, S) -> (1|B, T, 1)


def random_pattern(config, q_pos, k_pos, eligible):
    """Random keys (BigBird's, Zaheer et al., 2020, per key instead of per block): each query sees
    the r eligible keys (real, and not later for a causal query) of smallest
    `position_hash(seed, query, key)`, ties broken by the key's position; all of them when fewer."""
    kth = random_threshold(config, q_pos, k_pos, eligible)  # (1|B, T, 1)
    return eligible & (random_rank(config, q_pos, k_pos) <= kth)


def random_reach(config, q_lo, q_hi, k_lo, k_hi):
    # random keys may be any eligible key: every block the other constraints leave
    return torch.ones_like(_block_gap(q_lo, q_hi, k_lo, k_hi), dtype=torch.bool)


ATTENTION_PATTERNS = {
    "global": PatternPart(global_pattern, global_reach),
    "band": PatternPart(band_pattern, band_reach),
    "dilated": PatternPart(dilated_pattern, dilated_reach),
    "random": PatternPart(random_pattern, random_reach),
    "block": PatternPart(block_pattern, block_reach),
}
assert tuple(ATTENTION_PATTERNS) == ATTENTION_PATTERN_NAMES


class AttentionPattern:
    """A stack's sparse attention pattern (`config.attention_pattern`), its parts looked up once.

    Called once per forward, it gives `build_attention_mask` the (1|B, 1, T, S) keys each query may
    see, None for "dense" (then nothing changes). `active=False` keeps a stack dense whatever the
    config says (an encoder-decoder's decoder). The pattern is read from the config at each call, as
    the cache `generate()` makes reads the config's `sliding_window` then: a window set or removed
    after the model was built (`model.config.sliding_window = None`) changes both alike.
    """

    def __init__(self, config, active: bool = True):
        self.config, self.active = config, active

    @property
    def names(self) -> tuple:
        """The parts' names ("band", "global", ...), empty for "dense" or an inactive stack."""
        return _attention_pattern("attention_pattern", self.config.attention_pattern) if self.active else ()

    @property
    def parts(self) -> list:
        return [ATTENTION_PATTERNS[name] for name in self.names]

    def __call__(
        self,
        attention_mask: torch.Tensor | None,
        past_len: int | torch.Tensor,
        q_len: int,
        kv_len: int,
        causal: bool,
        device: torch.device,
    ) -> torch.Tensor | None:
        """Args as `build_attention_mask`'s: the (B, S) padding mask of the S keys (or None), the
        T queries at key indices past_len .. past_len + T - 1."""
        parts = self.parts
        if not parts:
            return None
        # distances count real tokens (the positions rule of the stack): each real key's index among
        # the real keys, so a left-padded row gets the pattern it has alone
        k_pos = real_token_positions(attention_mask, 0, kv_len, device)  # (1|B, S)
        q_pos = k_pos.index_select(1, torch.arange(q_len, device=device) + past_len)  # (1|B, T)
        real = None if attention_mask is None else attention_mask.to(device).bool()  # (B, S)
        q_pos, k_pos = q_pos[:, :, None], k_pos[:, None, :]  # (1|B, T, 1), (1|B, 1, S)
        eligible = k_pos <= q_pos if causal else torch.ones_like(k_pos, dtype=torch.bool)
        if real is not None:
            eligible = eligible & real[:, None, :]  # (B, T|1, S)
        eligible = eligible.expand(-1, q_len, -1)
        allowed = parts[0].allows(self.config, q_pos, k_pos, eligible)
        for part in parts[1:]:
            allowed = allowed | part.allows(self.config, q_pos, k_pos, eligible)  # the union of the parts
        return allowed[:, None]  # (1|B, 1, T, S)


# ----------------------------------------------------------------------------------------------
# flex_attention's mask: the mask `build_attention_mask` builds, as a predicate on (batch, query,
# key) indices (flex_attention's `mask_mod`) that reads only per-row tensors (B, T) and (B, S), and
# a `BlockMask` whose blocks come from each part's reach, so building the mask and attending cost
# what the pattern's density costs, not T x S.
# ----------------------------------------------------------------------------------------------


#: flex_attention's block size: the per-row tensors are padded to a multiple of it, so the kernel's
#: reads past the last query or key stay inside them
FLEX_BLOCK = 128
#: elements (rows x keys) a chunk of the random pattern's threshold or of the block evaluation holds
FLEX_CHUNK = 2**22


def _pad_to(x: torch.Tensor, size: int, value) -> torch.Tensor:
    """Pad the last dimension of `x` to `size` with `value`."""
    return F.pad(x, (0, size - x.shape[-1]), value=value)


def _block_range(x: torch.Tensor, valid: torch.Tensor, big: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, n*FLEX_BLOCK) values -> their (B, n) min and max per block over the `valid` entries
    (an empty block gets min `big`, max `-big`)."""
    B = x.shape[0]
    lo = x.masked_fill(~valid, big).view(B, -1, FLEX_BLOCK).amin(-1)
    hi = x.masked_fill(~valid, -big).view(B, -1, FLEX_BLOCK).amax(-1)
    return lo, hi


class FlexMask:
    """`build_attention_mask`'s mask (causality, padding, prefix-LM, documents, the sparse pattern
    and the empty-row rule) for flex_attention, from per-row tensors only.

    `allowed(b, q, k)` is the mask as a predicate on index tensors: broadcast tensors when the
    blocks are classified, scalars inside flex_attention's kernel (its `mask_mod`). `blocks()`
    says which (query block, key block) pairs the constraints can reach, from the min/max of
    positions, key indices and document ids per block: only those are evaluated. The random
    pattern's per-query threshold (the r-th smallest rank among the eligible keys) is computed
    in chunks of queries: O(T x S) time, O(FLEX_CHUNK) memory, and its keys can fall in any block.

    Args as `build_attention_mask`'s; `offset` keys at the start were dropped by a sliding-window
    cache: the mask is computed over all `kv_len` keys, the predicate indexes the kept ones.
    """

    def __init__(
        self,
        pattern: AttentionPattern,
        batch: int,
        padding: torch.Tensor | None,
        q_len: int,
        kv_len: int,
        past_len: int | torch.Tensor,
        offset: int,
        causal: bool,
        prefix_lengths: torch.Tensor | None,
        document_ids: torch.Tensor | None,
        device: torch.device,
    ):
        B, T, S = batch, q_len, kv_len - offset
        self.config, self.names, self.causal = pattern.config, pattern.names, causal
        self.batch, self.q_len, self.kv_len = B, T, S
        Tp, Sp = -(-T // FLEX_BLOCK) * FLEX_BLOCK, -(-S // FLEX_BLOCK) * FLEX_BLOCK
        q_full = torch.arange(T, device=device) + past_len  # (T,) key index of each query, all keys counted
        real = (
            torch.ones(B, kv_len, dtype=torch.bool, device=device)
            if padding is None
            else padding.to(device).bool().expand(B, -1)
        )  # (B, kv_len)
        # padded keys are never real; padded queries see nothing (key index -1)
        self.key_real = _pad_to(real[:, offset:], Sp, False)  # (B, Sp)
        self.q_key = _pad_to(q_full - offset, Tp, -1)  # (Tp,) key index among the kept keys
        self.prefix = None if prefix_lengths is None else prefix_lengths.to(device).long() - offset  # (B,)
        self.key_doc = self.query_doc = None
        if document_ids is not None:
            docs = document_ids.to(device).long()  # (B, kv_len)
            self.key_doc = _pad_to(docs[:, offset:], Sp, -3)  # (B, Sp)
            self.query_doc = _pad_to(docs.index_select(1, q_full), Tp, -2)  # (B, Tp)
        self.q_pos = self.k_pos = self.kth = None
        if self.names:
            # positions count real tokens, as `AttentionPattern` does
            k_pos = real_token_positions(padding, 0, kv_len, device).expand(B, -1)  # (B, kv_len)
            q_pos = k_pos.index_select(1, q_full)  # (B, T)
            if "random" in self.names:
                self.kth = _pad_to(self._random_threshold(q_pos, k_pos, real), Tp, -1)  # (B, Tp)
            self.q_pos, self.k_pos = _pad_to(q_pos, Tp, 0), _pad_to(k_pos[:, offset:], Sp, 0)
        self.self_fallback = None  # (B, Tp) queries that see only themselves, set by `block_mask`

    def _random_threshold(self, q_pos, k_pos, real) -> torch.Tensor:
        """(B, T) the random pattern's threshold, chunked over queries (no (T, S) tensor at once)."""
        B, S = k_pos.shape
        rows = max(1, FLEX_CHUNK // (B * S))
        out = []
        for start in range(0, q_pos.shape[1], rows):
            q = q_pos[:, start : start + rows, None]  # (B, c, 1)
            eligible = (k_pos[:, None, :] <= q) if self.causal else torch.ones_like(real[:, None, :])
            eligible = (eligible & real[:, None, :]).expand(-1, q.shape[1], -1)  # (B, c, S)
            out.append(random_threshold(self.config, q, k_pos[:, None, :], eligible)[..., 0])
        return torch.cat(out, dim=1)

    def allowed(self, b, q, k):
        """Whether query q of row b may see key k (indices among the kept keys), before the empty-row rule."""
        ok = self.key_real[b, k]
        if self.causal:
            visible = k <= self.q_key[q]
            if self.prefix is not None:
                visible = visible | (k < self.prefix[b])
            ok = ok & visible
        if self.key_doc is not None:
            ok = ok & (self.key_doc[b, k] == self.query_doc[b, q])
        if self.names:
            q_pos, k_pos = self.q_pos[b, q], self.k_pos[b, k]
            seen = None
            for name in self.names:
                if name == "random":
                    eligible = self.key_real[b, k]
                    if self.causal:
                        eligible = eligible & (k_pos <= q_pos)
                    part = eligible & (random_rank(self.config, q_pos, k_pos) <= self.kth[b, q])
                else:
                    part = ATTENTION_PATTERNS[name].allows(self.config, q_pos, k_pos, None)
                seen = part if seen is None else seen | part
            ok = ok & seen
        return ok

    def mask_mod(self, b, h, q, k):
        """flex_attention's mask_mod: `allowed`, and a query that would see no key sees itself."""
        ok = self.allowed(b, q, k)
        if self.self_fallback is not None:
            ok = ok | (self.self_fallback[b, q] & (k == self.q_key[q]))
        return ok

    def blocks(self) -> torch.Tensor:
        """(B, nqb, nkb) bool: the block pairs where `allowed` may be True (a superset)."""
        B, Tp, Sp = self.batch, self.q_key.shape[0], self.key_real.shape[1]
        big = 2**62
        q_valid = (torch.arange(Tp, device=self.q_key.device) < self.q_len)[None].expand(B, -1)  # (B, Tp)
        reach = self.key_real.view(B, -1, FLEX_BLOCK).any(-1)[:, None, :]  # (B, 1, nkb) some real key
        if self.causal:
            k_first = torch.arange(0, Sp, FLEX_BLOCK, device=self.q_key.device)  # (nkb,)
            q_last = self.q_key.view(-1, FLEX_BLOCK).amax(-1)  # (nqb,)
            visible = k_first[None, None, :] <= q_last[None, :, None]  # (1, nqb, nkb)
            if self.prefix is not None:
                visible = visible | (k_first[None, None, :] < self.prefix[:, None, None])
            reach = reach & visible
        if self.key_doc is not None:
            q_lo, q_hi = _block_range(self.query_doc, q_valid, big)
            k_lo, k_hi = _block_range(self.key_doc, self.key_real, big)
            reach = reach & (q_lo[:, :, None] <= k_hi[:, None, :]) & (k_lo[:, None, :] <= q_hi[:, :, None])
        if self.names:
            q_lo, q_hi = _block_range(self.q_pos, q_valid, big)
            k_lo, k_hi = _block_range(self.k_pos, self.key_real, big)
            q_lo, q_hi, k_lo, k_hi = q_lo[:, :, None], q_hi[:, :, None], k_lo[:, None, :], k_hi[:, None, :]
            parts = [
                ATTENTION_PATTERNS[name].reach(self.config, q_lo, q_hi, k_lo, k_hi) for name in self.names
            ]
            reach = reach & torch.stack(torch.broadcast_tensors(*parts)).any(0)
        return reach.expand(B, Tp // FLEX_BLOCK, -1)

    def block_mask(self):
        """flex_attention's `BlockMask` (see `hflm_attention.block_mask_from_predicate`)."""
        mask, self.self_fallback = block_mask_from_predicate(
            self.allowed,
            self.mask_mod,
            self.blocks(),
            self.q_key,
            self.q_len,
            self.kv_len,
            FLEX_BLOCK,
            FLEX_CHUNK,
        )
        return mask


def widen_to_keys(
    x: torch.Tensor | None,
    name: str,
    batch: int,
    past_len: int | torch.Tensor,
    q_len: int,
    kv_len: int,
    fill: int = 0,
) -> torch.Tensor | None:
    """Check a per-token (B, past + T) tensor (padding mask, document ids) and widen it to the
    (B, kv_len) keys attention sees, `fill` in a static cache's empty slots.

    A tensor already kv_len wide is taken as it is: with a static cache `generate()` passes its
    padding mask that way (`HfLmPreTrainedModel.create_masks_for_generate`), so a compiled
    decoding step sees the same shapes at every step.
    """
    if x is None:
        return None
    _require_tensor(x, name, "one value per token")
    width = x.shape[-1]
    wrong = x.dim() != 2 or x.shape[0] != batch or width > kv_len
    if not wrong and width != kv_len and not torch.compiler.is_compiling():
        wrong = width != int(past_len) + q_len  # a static cache's count: read only outside compiled graphs
    if wrong:
        cached = not isinstance(past_len, int) or past_len > 0 or kv_len > q_len
        expected = f"({batch}, {int(past_len) + q_len})"
        if kv_len != int(past_len) + q_len:
            expected += f" or, with this static cache, ({batch}, {kv_len})"
        raise ValueError(
            f"`{name}` must have shape (batch, {'past + ' if cached else ''}seq_len) = {expected}, got {tuple(x.shape)}."
        )
    return F.pad(x, (0, kv_len - width), value=fill) if width < kv_len else x


def keys_padding_mask(
    attention_mask: torch.Tensor | None,
    batch: int,
    past_len: int | torch.Tensor,
    q_len: int,
    kv_len: int,
    name: str = "attention_mask",
) -> torch.Tensor | None:
    """A cached stack's padding mask: `attention_mask` (B, past + T) checked (shape, 0/1 values) and
    widened to the (B, kv_len) keys attention sees (see `widen_to_keys`), or None when nothing is
    padded (the value check is skipped inside a compiled graph)."""
    mask = widen_to_keys(attention_mask, name, batch, past_len, q_len, kv_len)
    if mask is None or _padding_mask_is_full(attention_mask, name):
        return None
    return mask


def check_4d_mask(mask: torch.Tensor, batch: int, q_len: int, kv_len: int, name: str) -> None:
    """A 4D mask covers every query and every key attention sees: (B|1, 1, T, S)."""
    shape = tuple(mask.shape)
    if shape[0] not in (1, batch) or shape[1:] != (1, q_len, kv_len):
        raise ValueError(
            f"A 4D `{name}` must have shape (batch, 1, seq_len, keys) = ({batch}, 1, {q_len}, {kv_len}) "
            f"(keys: the cached tokens and the new ones), got {shape}."
        )


def check_prefix_lengths(prefix_lengths, batch: int) -> None:
    """(B,) non-negative token counts of a prefix-LM mask (one host read, skipped in compiled graphs)."""
    if prefix_lengths is None:
        return
    _require_tensor(prefix_lengths, "prefix_lengths", "token counts")
    if tuple(prefix_lengths.shape) != (batch,):
        raise ValueError(
            f"`prefix_lengths` must have shape (batch,) = ({batch},), got {tuple(prefix_lengths.shape)}."
        )
    _require_integer(prefix_lengths, "prefix_lengths", "token counts")
    if not torch.compiler.is_compiling() and int(prefix_lengths.min()) < 0:
        raise ValueError(
            f"`prefix_lengths` must be non-negative token counts, got {prefix_lengths.tolist()}."
        )


def fold_bias(mask: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A score bias (1|B, nh, T, S) and a given 4D mask as one additive mask."""
    if mask.dtype == torch.bool:
        return bias.masked_fill(~mask, torch.finfo(bias.dtype).min)
    return bias + mask.to(bias.dtype)
