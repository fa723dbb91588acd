"""Attention of hf_lm's Transformer families, dispatched through transformers' `AttentionInterface`.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.

The attention modules project queries, keys and values and update the cache; the product itself is
looked up by `config._attn_implementation` in transformers' `ALL_ATTENTION_FUNCTIONS`, as Llama does:
"sdpa", "flex_attention", the flash-attention versions, "paged|eager" (continuous batching), a
`kernels` hub string, and any function a user registered with `AttentionInterface.register` or put
in place of "sdpa". `eager_attention_forward` below is hf_lm's own reference: "eager" runs it, and
so does every call with `output_attentions` (only it materializes the probabilities).

Backends take their mask in one of three forms (`mask_kind`); the stack builds the one its backend
reads (`TransformerStack.stack_inputs`):

- "dense": a (B, 1|nh, T, S) bool mask (True = attend) or an additive float mask, or None with
  `is_causal` (eager, sdpa, and functions users register: the form transformers' SDPA function
  takes, so a function wrapping it runs as it is);
- "additive": an additive float mask with causality in it (paged|eager, which adds it to the scores);
- "flex": a `BlockMask` and the additive score bias as `position_bias` (flex_attention);
- "flash": the (B, S) padding mask, causality as a flag and a band as `sliding_window`; a bias or
  a sparse pattern other than a band cannot be expressed, and is refused when the model is loaded
  (`check_attention_backend`).

Shape legend: B batch, T query length, S key length (past + T), C hidden size, nh query heads,
nkv key/value heads, hs head size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, create_block_mask
from transformers import Cache
from transformers.conversion_mapping import register_checkpoint_conversion_mapping
from transformers.core_model_loading import ConversionOps, WeightConverter, WeightRenaming
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils.generic import is_flash_attention_requested

# ----------------------------------------------------------------------------------------------
# Rotary embeddings, applied to queries and keys inside attention
# ----------------------------------------------------------------------------------------------


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (B, n, T, hs); cos/sin: (B|1, T, hs) -> broadcast over heads
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


# ----------------------------------------------------------------------------------------------
# Backends: which mask each one reads, and what a config needs of it
# ----------------------------------------------------------------------------------------------

MASK_KINDS = ("dense", "additive", "flex", "flash")
#: backends that add their mask to the scores and know no `is_causal` (transformers' eager ones)
ADDITIVE_BACKENDS = ("paged|eager",)
#: backends for every config; flash-attention versions and `kernels` strings only without a score bias
DENSE_BACKENDS = ("eager", "sdpa", "flex_attention")


def mask_kind(attn_implementation: str | None) -> str:
    """The mask form `attn_implementation` reads: "flash", "flex", "additive" (a float mask added to
    the scores, causality included) or "dense" (see the module docstring)."""
    if attn_implementation and is_flash_attention_requested(
        requested_attention_implementation=attn_implementation
    ):
        return "flash"
    if attn_implementation in ADDITIVE_BACKENDS:
        return "additive"
    return "flex" if attn_implementation == "flex_attention" else "dense"


def additive_mask(allowed: torch.Tensor | None, is_causal: bool, q_len: int, kv_len: int, dtype, device):
    """A dense mask (bool, additive float, or None with `is_causal`) as an additive float mask, for
    backends that add it to the scores and read no `is_causal` (None: every key is visible)."""
    if allowed is None:
        if not is_causal:
            return None
        allowed = torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril(kv_len - q_len)[None, None]
    if allowed.dtype != torch.bool:
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )


def flash_window(config) -> int | None:
    """The `sliding_window` a flash kernel takes for a band `attention_pattern` (keys at most
    `attention_window` tokens away: the window counts the query too), None when dense."""
    pattern = getattr(config, "attention_pattern", "dense")
    return None if pattern == "dense" else config.attention_window + 1


#: position schemes whose scores carry a bias measured between one sequence's queries and keys
SCORE_BIAS_POSITIONS = ("alibi", "relative_buckets")


def backend_problem(config, attn_implementation: str | None) -> str | None:
    """Why `attn_implementation` cannot run a model of `config` (a sentence naming the field), or None."""
    if mask_kind(attn_implementation) != "flash":
        return None
    position = getattr(config, "position_embedding_type", None)
    if position in SCORE_BIAS_POSITIONS:
        return (
            f"position_embedding_type={position!r} adds a bias to the attention scores, which "
            "flash-attention kernels cannot add"
        )
    pattern = getattr(config, "attention_pattern", "dense")
    if pattern not in ("dense", "band"):
        return (
            f"attention_pattern={pattern!r} is not a sliding window, the only sparse pattern "
            "flash-attention kernels take"
        )
    return None


def check_attention_backend(config, attn_implementation: str | None, model_name: str) -> None:
    """Refuse, when a model is built or switched, a backend its config cannot use: a ValueError
    naming the config field and the backends that work, instead of a wrong or failing forward."""
    problem = backend_problem(config, attn_implementation)
    if problem is not None:
        works = ", ".join(repr(name) for name in DENSE_BACKENDS)
        raise ValueError(
            f"attn_implementation={attn_implementation!r} cannot run this {model_name}: {problem}. "
            f"Use {works}, or a function registered with transformers' AttentionInterface."
        )


def is_paged_cache(cache) -> bool:
    """Whether `cache` is continuous batching's `PagedAttentionCache` (not a transformers `Cache`:
    its keys are read through the indices `generate_batch` passes with each forward)."""
    if cache is None or isinstance(cache, Cache):
        return False
    from transformers.generation.continuous_batching import PagedAttentionCache

    return isinstance(cache, PagedAttentionCache)


def block_mask_from_dense(allowed: torch.Tensor | None, is_causal: bool, q_len: int, kv_len: int, device):
    """flex_attention's `BlockMask` for a (1|B, 1, T, S) bool mask (None: dense, or causal with
    `is_causal`). Blocks the mask leaves empty are skipped, so the cost follows its density."""
    if allowed is None:
        if not is_causal:
            return None
        offset = kv_len - q_len  # queries are the last T keys

        def mask_mod(b, h, q, k):
            return k <= q + offset

        return create_block_mask(mask_mod, None, None, q_len, kv_len, device=device)
    batch = allowed.shape[0]

    def mask_mod(b, h, q, k):
        return allowed[b, 0, q, k]

    return create_block_mask(mask_mod, batch, None, q_len, kv_len, device=device)


def block_mask_from_predicate(
    allowed,
    mask_mod,
    reach: torch.Tensor,
    q_key: torch.Tensor,
    q_len: int,
    kv_len: int,
    block: int,
    chunk: int,
):
    """flex_attention's `BlockMask` for a mask given as a predicate, evaluated only where it may hold.

    Args:
        allowed: `(b, q, k) -> bool`, elementwise on broadcast index tensors: the mask before the
            empty-row rule.
        mask_mod: flex_attention's `(b, h, q, k)`, `allowed` with the empty-row rule; it reads the
            (B, Tp) `self_fallback` this returns (set on its owner before the first call).
        reach: (B, nqb, nkb) bool, the block pairs where `allowed` may be True (a superset): only those
            are evaluated, in chunks of `chunk` elements, so the cost follows the pattern's density.
        q_key: (Tp,) the key index of each query (its own key), -1 for the padding up to `block`.
        q_len, kv_len: T and S; `block`: the block size (Tp, Sp multiples of it).

    Returns:
        `(block_mask, self_fallback)`: the `BlockMask` (blocks where all of the elements are allowed
        skip the mask_mod, blocks with none are skipped) and the (B, Tp) bool of the queries that
        would see no key and see their own, as `build_attention_mask`'s dense mask has it (None if none).
    """
    B, nqb, nkb = reach.shape
    device = reach.device
    counts = torch.zeros(B, nqb, nkb, dtype=torch.long, device=device)
    row_hits = torch.zeros(B, nqb * block, dtype=torch.long, device=device)
    pairs = reach.nonzero()  # (N, 3): (b, query block, key block)
    step = max(1, chunk // (block * block))
    offsets = torch.arange(block, device=device)
    for start in range(0, pairs.shape[0], step):
        b, qb, kb = pairs[start : start + step].unbind(-1)  # 3 x (n,)
        q = qb[:, None, None] * block + offsets[None, :, None]  # (n, block, 1)
        k = kb[:, None, None] * block + offsets[None, None, :]  # (n, 1, block)
        ok = allowed(b[:, None, None], q, k) & (q < q_len) & (k < kv_len)  # (n, block, block)
        counts[b, qb, kb] = ok.sum(dim=(1, 2))
        row_hits.index_put_((b[:, None].expand(-1, block), q[..., 0]), ok.any(-1).long(), accumulate=True)
    valid = (torch.arange(nqb * block, device=device) < q_len)[None]  # (1, Tp)
    fallback = (row_hits == 0) & valid  # (B, Tp) queries with no key
    partial = (counts > 0) & (counts < block * block)
    full = counts == block * block
    if bool(fallback.any()):
        # such a query's own key makes its block partial (it had no allowed element: never full)
        rows = fallback.nonzero()  # (M, 2): (b, query)
        partial[rows[:, 0], rows[:, 1] // block, q_key[rows[:, 1]] // block] = True
    else:
        fallback = None

    def kv_blocks(which: torch.Tensor):
        # (B, 1, nqb) counts and (B, 1, nqb, nkb) key block indices, the listed ones first
        order = torch.argsort((~which).to(torch.int8), dim=-1, stable=True)
        return which.sum(-1).to(torch.int32)[:, None], order.to(torch.int32)[:, None]

    mask = BlockMask.from_kv_blocks(
        *kv_blocks(partial),
        *kv_blocks(full),
        BLOCK_SIZE=block,
        mask_mod=mask_mod,
        seq_lengths=(q_len, kv_len),
    )
    return mask, fallback


# ----------------------------------------------------------------------------------------------
# The reference implementation
# ----------------------------------------------------------------------------------------------


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    is_causal: bool = False,
    position_bias: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention written out, in transformers' signature; hf_lm's reference for every backend.

    Args:
        query: (B, nh, T, hs); key, value: (B, nkv, S, hs).
        attention_mask: (B|1, 1|nh, T, S) bool (True = attend) or additive float, or None.
        is_causal: with no mask, each query sees the keys up to its own (the last T keys are the queries).
        position_bias: (1|B, nh, T, S) additive score bias, for callers that keep it apart from the mask.

    Returns:
        `(output, probabilities)`: (B, T, nh, hs) and (B, nh, T, S).
    """
    if key.shape[1] != query.shape[1]:
        # share each key/value head among nh/nkv query heads: (B, nkv, S, hs) -> (B, nh, S, hs)
        key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
        value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
    scores = torch.matmul(query, key.transpose(-2, -1)).float() * scaling  # (B, nh, T, S), softmax in fp32
    if position_bias is not None:
        scores = scores + position_bias.float()
    if is_causal and attention_mask is None:
        T, S = scores.shape[-2:]
        attention_mask = torch.ones(T, S, dtype=torch.bool, device=query.device).tril(S - T)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask.float()
    probs = scores.softmax(dim=-1).to(query.dtype)
    out = torch.matmul(F.dropout(probs, p=dropout, training=dropout > 0), value)  # (B, nh, T, hs)
    return out.transpose(1, 2).contiguous(), probs  # (B, T, nh, hs)


# ----------------------------------------------------------------------------------------------
# The attention modules
# ----------------------------------------------------------------------------------------------


class AttentionHeads(nn.Module):
    """What self- and cross-attention share: the head layout, the scale, the projections' set-up,
    the output projection and the call of the backend (`attend`); each keeps its own inputs.

    The attributes are those transformers' attention functions read (`num_key_value_groups`,
    `scaling`, `is_causal`, `layer_idx`, `config`), so every backend runs these modules as it runs
    Llama's.
    """

    def __init__(self, config, layer_idx: int, is_causal: bool):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        # the per-call `is_causal` comes from the mask builder; this records the module's kind (as
        # transformers' own attention modules do) for backends and tools that inspect it
        self.is_causal = is_causal
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_kv_heads
        self.head_dim = config.head_dim
        # T5 folds the 1/sqrt(head_dim) into its init and uses no scale (attention_scale=1.0)
        scale = getattr(config, "attention_scale", None)
        self.scaling = self.head_dim**-0.5 if scale is None else scale
        self.attention_dropout = config.attention_dropout
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim

    def projection(self, in_features: int, out_features: int, init_role: str) -> nn.Linear:
        """A Linear of the attention, its `init_role` read by `_init_weights`. Each subclass builds its
        input projections, then `o_proj`: the registration order is the parameter order, which initial
        weights drawn from a seed and saved optimizer states follow."""
        linear = nn.Linear(in_features, out_features, bias=self.config.attention_bias)
        linear.init_role = init_role
        return linear

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, n*hs) -> (B, n, T, hs); n is read from the width, as tensor parallelism leaves each
        process a slice of the heads."""
        B, T, _ = x.shape
        return x.view(B, T, -1, self.head_dim).transpose(1, 2)

    def local_heads(self, query: torch.Tensor, *tensors):
        """`tensors` (masks or score biases, (B|1, 1|nh, T, S)) cut to the query heads this process
        holds: all of them, or under tensor parallelism (`tp_plan`) the contiguous slice of its rank,
        which `o_proj` (sharded on its input) tells. Anything without a per-head dimension passes."""
        heads = query.shape[1]
        if heads == self.num_heads:
            return tensors
        mesh = getattr(self.o_proj.weight, "device_mesh", None)
        if mesh is None:
            raise ValueError(
                f"{type(self).__name__} got {heads} query heads of its config's {self.num_heads} outside "
                "tensor parallelism"
            )
        start = mesh.get_local_rank() * heads

        def local(t):
            if isinstance(t, torch.Tensor) and t.dim() == 4 and t.shape[1] == self.num_heads:
                return t[:, start : start + heads]
            # a bias computed per score (flex_attention's `ALiBiScores`, `BucketScores`)
            return t.select_heads(start, heads) if hasattr(t, "select_heads") else t

        return tuple(local(t) for t in tensors)

    def attend(self, q, k, v, attention_mask, output_attentions, kwargs, is_causal=False, position_bias=None):
        """The product by the backend `config._attn_implementation` names, on this process's heads
        (`local_heads`), then `o_proj`: what self- and cross-attention share after their projections.

        Args:
            q: (B, nh, T, hs); k, v: (B, nkv, S, hs).
            attention_mask, position_bias: in the forms the backend reads (`mask_kind`), for all heads.
            output_attentions: return the probabilities, which only the reference materializes.
            kwargs: to the backend.

        Returns:
            The (B, T, C) output and, with `output_attentions`, the (B, nh, T, S) probabilities (else None).
        """
        attention_mask, position_bias = self.local_heads(q, attention_mask, position_bias)
        impl = self.config._attn_implementation
        if output_attentions or impl in (None, "eager"):
            interface = eager_attention_forward
        else:
            interface = ALL_ATTENTION_FUNCTIONS.get_interface(impl, eager_attention_forward)
        if position_bias is not None:
            kwargs["position_bias"] = position_bias
        kwargs.update(dropout=self.attention_dropout if self.training else 0.0, scaling=self.scaling)
        out, weights = interface(self, q, k, v, attention_mask, is_causal=is_causal, **kwargs)
        B, T = q.shape[0], q.shape[2]
        return self.o_proj(out.reshape(B, T, -1)), weights if output_attentions else None  # (B, T, C)


def grouped_qkv_order(num_heads: int, num_kv_heads: int, head_dim: int) -> torch.Tensor:
    """Row order taking q, k and v stacked ([all q; all k; all v], `qkv_proj` of checkpoints saved before
    the head-grouped layout) to `Attention.query_key_value`'s: `grouped = stacked[order]` (and
    `stacked = grouped[order.argsort()]`)."""
    g = num_heads // num_kv_heads
    q_size, kv_size = num_heads * head_dim, num_kv_heads * head_dim
    q = torch.arange(q_size).view(num_kv_heads, g * head_dim)  # each group's query heads
    k = q_size + torch.arange(kv_size).view(num_kv_heads, head_dim)
    return torch.cat([q, k, k + kv_size], dim=1).flatten()  # (nkv * (g + 2) * hs,)


class Attention(AttentionHeads):
    """Multi-head attention with `num_key_value_heads` key/value heads.

    nkv == nh is multi-head attention, 1 < nkv < nh grouped-query attention (Ainslie et al., 2023),
    nkv == 1 multi-query attention (Shazeer, 2019). The KV cache stores nkv heads, which is the point
    of GQA/MQA.

    The query, key and value projections are one Linear, `query_key_value`: one GEMM instead of
    three. Its rows are grouped by key/value head, as Falcon's (and for nh == nkv GPT-NeoX's): the g =
    nh/nkv query heads sharing key/value head j, then key j, then value j, for j = 0..nkv-1. A plain
    column-wise split (tensor parallelism's "colwise", `base_model_tp_plan`) then gives each process
    whole groups, and the forward reads the head counts from the projection's width. Checkpoints
    from before this layout stack all queries, then all keys, then all values as `qkv_proj`; a load
    regroups them (`regroup_stacked_qkv`, and `StackedQKVConversion` in `from_pretrained`).
    """

    def __init__(self, config, layer_idx: int, is_causal: bool = True):
        super().__init__(config, layer_idx, is_causal)
        self.query_key_value = self.projection(config.hidden_size, self.q_size + 2 * self.kv_size, "qkv")
        self.o_proj = self.projection(self.q_size, config.hidden_size, "attn_out")
        self.register_load_state_dict_pre_hook(regroup_stacked_qkv)

    def grouped_order(self) -> torch.Tensor:
        """`grouped_qkv_order` for this module's heads."""
        return grouped_qkv_order(self.num_heads, self.num_kv_heads, self.head_dim)

    def query_rows(self) -> torch.Tensor:
        """(q_size + 2 kv_size,) bool: which rows of `query_key_value` project queries."""
        return self.grouped_order() < self.q_size

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask=None,
        is_causal: bool = False,
        position_embeddings: tuple[torch.Tensor, ...] | None = None,
        past_key_values=None,
        output_attentions: bool = False,
        layer_idx: int | None = None,
        position_bias: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`attention_mask` in the form the backend reads (`mask_kind`); `position_embeddings`
        `(cos, sin, key_cos, key_sin)` from the positions module (RoPE, xPos); `layer_idx` overrides the
        module's cache slot: a block shared by several layers (`num_hidden_groups`) runs at several
        depths, each with its own keys and values. `kwargs` go to the cache and the backend
        (continuous batching's indices, flash-attention's packed-sequence lengths)."""
        B, T, _ = hidden_states.shape
        g = self.num_key_value_groups
        # (B, T, n, g+2, hs): per key/value group, its g queries, its key and its value; n = nkv, or
        # this process's share of them under tensor parallelism
        qkv = self.query_key_value(hidden_states).view(B, T, -1, g + 2, self.head_dim)
        q = qkv[:, :, :, :g].reshape(B, T, -1, self.head_dim).transpose(1, 2)  # (B, n*g, T, hs)
        k, v = qkv[:, :, :, g].transpose(1, 2), qkv[:, :, :, g + 1].transpose(1, 2)  # (B, n, T, hs)
        if position_embeddings is not None:
            # queries by (cos, sin), keys by (key_cos, key_sin): the same for RoPE, scaled apart by xPos
            cos, sin, key_cos, key_sin = position_embeddings
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, key_cos, key_sin)
        if past_key_values is not None:
            slot = self.layer_idx if layer_idx is None else layer_idx
            k, v = past_key_values.update(k, v, slot, kwargs=kwargs)  # (B, n, S, hs)
        return self.attend(q, k, v, attention_mask, output_attentions, kwargs, is_causal, position_bias)


def regroup_stacked_qkv(module: Attention, state_dict: dict, prefix: str, *args) -> None:
    """`load_state_dict` pre-hook: a state dict from before the head-grouped layout (`qkv_proj`, rows
    [all q; all k; all v]: old training checkpoints, old adapters, converters) is renamed to
    `query_key_value` and its rows regrouped. Every tensor under the old name whose first dimension
    is the projection's output is reordered (weight, bias, LoRA's B, IA3's and DoRA's vectors); LoRA's
    A, which reads the input, is not."""
    old = prefix + "qkv_proj."
    order = None
    for key in [key for key in state_dict if key.startswith(old)]:
        tensor, rest = state_dict.pop(key), key[len(old) :]
        if tensor.dim() and tensor.shape[0] == module.query_key_value.out_features and "lora_A" not in rest:
            order = module.grouped_order() if order is None else order
            tensor = tensor[order.to(tensor.device)]
        state_dict[prefix + "query_key_value." + rest] = tensor


class RegroupStackedQKV(ConversionOps):
    """`from_pretrained`'s side of `regroup_stacked_qkv`: a checkpoint tensor of `qkv_proj` (rows [all
    q; all k; all v]) becomes `query_key_value` (rows grouped by key/value head).

    Under tensor parallelism transformers reads each process's rows of the checkpoint tensor before
    any conversion, as the target's sharding says: rows of the stacked layout, which hold other
    heads than the process needs. The processes then gather the full tensor, regroup it and keep
    their own rows (every process converts the same keys in the same order, so the collective
    lines up)."""

    @torch.no_grad()
    def convert(self, input_dict, source_patterns, target_patterns, **kwargs):
        tensors = next(iter(input_dict.values()))
        tensor = tensors[0] if isinstance(tensors, list) else tensors
        model, name = kwargs["model"], kwargs["full_layer_name"]
        order = model.get_submodule(name.rsplit(".", 2)[0]).grouped_order().to(tensor.device)
        mesh = getattr(model.get_parameter(name), "device_mesh", None)
        if mesh is None or tensor.shape[0] == order.numel():
            return {target_patterns[0]: tensor[order].contiguous()}
        import torch.distributed as dist

        parts = [torch.empty_like(tensor) for _ in range(mesh.size())]
        dist.all_gather(parts, tensor.contiguous(), group=mesh.get_group())
        rows, rank = tensor.shape[0], mesh.get_local_rank()
        return {target_patterns[0]: torch.cat(parts)[order][rank * rows : (rank + 1) * rows].contiguous()}

    @property
    def reverse_op(self) -> ConversionOps:
        return self  # unused: `StackedQKVConversion` saves the grouped layout


class StackedQKVConversion(WeightConverter):
    """Loads `qkv_proj` of checkpoints from before the head-grouped layout into `query_key_value`.
    Saving keeps the grouped layout (transformers would otherwise write a converted model back in the
    old one), so that a saved folder is the model's own state dict and loads sharded as it is."""

    __slots__ = ()

    def __init__(
        self, source_patterns="self_attn.qkv_proj", target_patterns="self_attn.query_key_value", **kwargs
    ):
        kwargs.setdefault("operations", [RegroupStackedQKV()])
        super().__init__(source_patterns, target_patterns, **kwargs)

    def reverse_transform(self) -> WeightRenaming:
        target = self._original_target_patterns[0]
        return WeightRenaming(target, target)


def register_stacked_qkv_conversion(model_type: str) -> None:
    """Let `from_pretrained` of `model_type` load checkpoints from before the head-grouped layout."""
    register_checkpoint_conversion_mapping(model_type, [StackedQKVConversion()], overwrite=True)


class CrossAttention(AttentionHeads):
    """Decoder-to-encoder attention: queries from the decoder, keys and values from the last encoder
    layer. Keys and values depend only on the encoder output, so during generation they are
    computed once, stored in the `EncoderDecoderCache`'s cross-attention cache, and reused at every
    step (`is_updated[layer_idx]`).

    It takes the `EncoderDecoderCache` itself, not its `is_updated` dict: a hook that moves a
    module's arguments to its device (accelerate's offloading) copies a dict, and the flag set on the
    copy would be lost, recomputing and appending the keys at every step."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx, is_causal=False)
        self.q_proj = self.projection(config.hidden_size, self.q_size, "q")
        # keys and values stacked in one Linear: one GEMM over the encoder states
        self.kv_proj = self.projection(config.hidden_size, 2 * self.kv_size, "kv")
        self.o_proj = self.projection(self.q_size, config.hidden_size, "attn_out")

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask=None,
        cache=None,
        output_attentions: bool = False,
        layer_idx: int | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`attention_mask`: the source's padding in the backend's form; `cache`: the decoder's
        `EncoderDecoderCache` (None without one); `layer_idx` as in `Attention.forward`."""
        layer_idx = self.layer_idx if layer_idx is None else layer_idx
        cross_cache = getattr(cache, "cross_attention_cache", None)
        is_updated = getattr(cache, "is_updated", None)
        q = self.heads(self.q_proj(hidden_states))  # (B, nh, T, hs); a share of nh under tensor parallelism
        if cross_cache is not None and is_updated is not None and is_updated.get(layer_idx):
            layer = cross_cache.layers[layer_idx]
            k, v = layer.keys, layer.values  # (B, nkv, S_enc, hs), computed at the first step
        else:
            k, v = self.kv_proj(encoder_hidden_states).chunk(2, dim=-1)
            k, v = self.heads(k), self.heads(v)  # (B, nkv, S_enc, hs)
            if cross_cache is not None:
                k, v = cross_cache.update(k, v, layer_idx)
                if is_updated is not None:
                    is_updated[layer_idx] = True
        return self.attend(q, k, v, attention_mask, output_attentions, kwargs)


def paged_attention_problem(config) -> str | None:
    """Why continuous batching (`generate_batch`, a paged cache holding many sequences side by side)
    cannot run a model of `config`, or None."""
    position = getattr(config, "position_embedding_type", None)
    if position in SCORE_BIAS_POSITIONS:
        return (
            f"position_embedding_type={position!r} measures distances between the keys of one sequence, "
            "which the paged cache does not keep apart"
        )
    pattern = getattr(config, "attention_pattern", "dense")
    if pattern != "dense":
        return f"attention_pattern={pattern!r} needs hf_lm's own masks, which the paged cache does not take"
    for name in ("expert_capacity", "capacity_factor"):
        if getattr(config, name, None) is not None:
            return (
                f"{name}={getattr(config, name)!r} drops tokens by what else is in the batch, so a request's "
                "tokens would depend on the other requests"
            )
    return None


def check_paged_attention(config, model_name: str) -> None:
    """Refuse continuous batching up front for a config it cannot run (instead of failed requests)."""
    problem = paged_attention_problem(config)
    if problem is not None:
        raise ValueError(
            f"Continuous batching cannot run this {model_name}: {problem}. Use generate() for this model."
        )


class AttentionBackends:
    """Mixin for the pretrained classes of the Transformer families: every attention backend
    transformers has (`_supports_attention_backend`, what vLLM's and SGLang's Transformers backends
    check), and a backend the config cannot use refused when the model is built or switched
    (`from_pretrained(attn_implementation=...)`, `set_attn_implementation`)."""

    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_flash_attn = True
    _supports_attention_backend = True

    def _check_and_adjust_attn_implementation(
        self, attn_implementation, is_init_check: bool = False, allow_all_kernels: bool = False
    ):
        if isinstance(attn_implementation, str):
            check_attention_backend(self.config, attn_implementation, type(self).__name__)
        return super()._check_and_adjust_attn_implementation(
            attn_implementation, is_init_check=is_init_check, allow_all_kernels=allow_all_kernels
        )


#: tensor-parallel style of a projection stacking two equal halves (gate/up, cross-attention's k/v) with a
#: bias: transformers' "packed_colwise" splits such a weight half by half, but its bias in one piece
#: (a process would add the gate's biases to its up rows); this one splits the bias like the weight
PACKED_COLWISE_WITH_BIAS = "hflm_packed_colwise"

if torch.distributed.is_available():
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard
    from transformers.distributed.parallel_utils import ALL_PARALLEL_STYLES
    from transformers.distributed.tensor_parallel import PackedColwiseParallel

    class PackedColwiseWithBias(PackedColwiseParallel):
        """ "packed_colwise" whose bias is split half by half too (`PACKED_COLWISE_WITH_BIAS`)."""

        def shard_param(self, module, param, mesh):
            meta = module._parameters.get(param)
            if meta is None or meta.ndim != 1:
                return super().shard_param(module, param, mesh)
            placement = _StridedShard(dim=0, split_factor=self.split_factor)
            module._parameters[param] = nn.Parameter(
                distribute_tensor(meta, mesh, [placement], src_data_rank=None),
                requires_grad=meta.requires_grad,
            )

    ALL_PARALLEL_STYLES.register(PACKED_COLWISE_WITH_BIAS, PackedColwiseWithBias())


# the families whose self-attention is `Attention`: their checkpoints from before the head-grouped
# layout load through `from_pretrained` (every Transformer family's modeling file imports this module)
for _model_type in ("hflm_gpt", "hflm_bert", "hflm_electra", "hflm_t5", "hflm_bart"):
    register_stacked_qkv_conversion(_model_type)
