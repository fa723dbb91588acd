"""The Transformer building blocks of hf_lm's GPT, BERT, T5 and BART families, and their one stack.

Shipped model code: `save_pretrained` copies this file next to the weights, so it imports only torch,
transformers and sibling files (`from .x import Y`). What every family shares, Transformer or not
(the base model class, input checks, losses), is in `hflm_common`; the recurrent, feed-forward and
n-gram families never import this file.

Every variant is chosen by a validated config string that indexes one of the tables (`NORMS`,
`FEED_FORWARDS`, `POSITION_ENCODINGS`, keyed by the names in `hflm_common`); modules are built once
in `__init__` and `forward` never branches on variant names. `TransformerStack` (at the bottom) runs
embeddings -> blocks -> final norm for every family.

Shape legend: B batch, T query length, S key length (past + T), C hidden size, nh query heads,
nkv key/value heads, hs head size, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions

from .hflm_attention import (
    Attention,
    CrossAttention,
    additive_mask,
    block_mask_from_dense,
    block_mask_from_predicate,
    flash_window,
    is_paged_cache,
    mask_kind,
)
from .hflm_common import (
    ATTENTION_PATTERN_NAMES,
    FEED_FORWARD_NAMES,
    NORM_NAMES,
    POSITION_ENCODING_NAMES,
    _attention_pattern,
    _padding_mask_is_full,
    _require_integer,
    _require_tensor,
    cache_lengths,
    check_encoder_states,
    check_padding_mask,
    check_position_ids,
    is_integer_dtype,
    packed_documents,
    returned_cache,
)

# ----------------------------------------------------------------------------------------------
# Norms: computed in fp32 and cast back, as LlamaRMSNorm does, so bf16/fp16 runs stay stable.
# ----------------------------------------------------------------------------------------------


class LayerNorm(nn.Module):
    """LayerNorm (Ba et al., 2016) with a learned gain and bias."""

    init_role = "norm"  # `HfLmPreTrainedModel._init_weights` sets gain 1, bias 0

    def __init__(self, hidden_size: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, T, C) -> (B, T, C); `.float()` is free in fp32 and upcasts half precision.
        out = F.layer_norm(x.float(), x.shape[-1:], self.weight.float(), self.bias.float(), self.eps)
        return out.to(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich, 2019): no mean subtraction, no bias; Llama's and T5's norm."""

    init_role = "norm"

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalize in fp32, cast back, then scale: the order LlamaRMSNorm uses (parity to the last bit).
        normed = F.rms_norm(x.float(), x.shape[-1:], eps=self.eps).to(x.dtype)
        return self.weight * normed


# ----------------------------------------------------------------------------------------------
# Feed-forward networks. Gated variants (Shazeer, 2020, "GLU Variants Improve Transformer") fuse the
# gate and up projections into one matmul: one GEMM is cheaper than two of half the width.
# ----------------------------------------------------------------------------------------------


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    # GPT-2's "gelu_new": one fused kernel instead of the five elementwise ops of the Python formula.
    return F.gelu(x, approximate="tanh")


class MLP(nn.Module):
    """Position-wise feed-forward: `down(act(up(x)))`."""

    def __init__(self, hidden_size: int, intermediate_size: int, act, bias: bool):
        super().__init__()
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.up_proj.init_role, self.down_proj.init_role = "ff_in", "ff_out"  # see _init_weights
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.up_proj(x)))  # (B, T, C) -> (B, T, ff) -> (B, T, C)


class GatedMLP(nn.Module):
    """Gated feed-forward: `down(act(gate(x)) * up(x))` with `gate` and `up` stacked in one Linear."""

    def __init__(self, hidden_size: int, intermediate_size: int, act, bias: bool):
        super().__init__()
        # rows [0, ff) are the gate, rows [ff, 2ff) the up projection
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.gate_up_proj.init_role, self.down_proj.init_role = "ff_in", "ff_out"  # see _init_weights
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # 2 x (B, T, ff)
        return self.down_proj(self.act(gate) * up)


class VocabProjection(nn.Linear):
    """The output projection to the vocabulary (an `nn.Linear`, so tying and resizing work as usual).

    Decoding on a CPU projects a handful of rows per step (greedy on a few prompts, a few beams) through
    a (V, C) matrix of tens of MB: the step is memory-bound, and MKL's GEMM for `x @ W.T` with so few
    rows runs far below memory bandwidth (it repacks the large transposed operand on every call).
    `(W @ x.T).T` computes the same product with W as the untransposed operand and measured 2-5x
    faster for 2-4 rows (V=32k, C=256 and V=50k, C=768, one thread); from about 8 rows up the two
    are on par, so only tiny inputs take that path. Differentiable either way.

    On a CUDA GPU a vocabulary that is not a multiple of 64 (GPT-2's 50257, BERT's 30522) leaves
    the rows of the (N, V) logits, and of their gradient, at unaligned addresses for the three
    matmuls of the head (forward, and the two of its backward), which keeps cuBLAS off its fastest
    kernels; nanoGPT pads its vocabulary to 50304 for that. Here the weight gets zero rows up to a
    multiple of `ALIGN` for the product alone and the logits are cut back to V (`aligned_linear`):
    parameters, checkpoints and outputs keep their shapes. Only for eager training-sized inputs
    (`ALIGN_MIN_ROWS`): torch.compile pads such products itself, and a decoding step's few rows are
    bound by reading the weight, which the padded copy would read twice. `ALIGN = 1` turns it off
    (benchmarks/bench_gpu.py measures both).
    """

    SMALL_ROWS = 4
    ALIGN = 64
    ALIGN_MIN_ROWS = 256

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        # eager only: under torch.compile/torch.export the row count is symbolic, and branching on
        # it would guard the traced graph to (or away from) 2-4 rows
        traced = torch.compiler.is_compiling() or torch.compiler.is_exporting()
        if not traced and x.device.type == "cpu" and 2 <= rows <= self.SMALL_ROWS:
            return self.few_rows_linear(x, rows)
        pad = -self.out_features % self.ALIGN
        if pad and x.device.type == "cuda" and rows >= self.ALIGN_MIN_ROWS and self._plain_weight():
            return self.aligned_linear(x, pad)
        return F.linear(x, self.weight, self.bias)

    def _plain_weight(self) -> bool:
        """Eager, with a plain tensor: compiled graphs pad on their own, and a quantized or sharded
        weight (a tensor subclass: torchao, DTensor) keeps its own kernels."""
        return not torch.compiler.is_compiling() and type(self.weight) in (nn.Parameter, torch.Tensor)

    def few_rows_linear(self, x: torch.Tensor, rows: int) -> torch.Tensor:
        out = (self.weight @ x.reshape(rows, -1).t()).t()  # (V, rows) viewed as (rows, V)
        if self.bias is not None:
            out = out + self.bias
        # contiguous (a copy of a few rows): callers may `.view()` the logits
        return out.contiguous().reshape(*x.shape[:-1], -1)  # (..., V)

    def aligned_linear(self, x: torch.Tensor, pad: int) -> torch.Tensor:
        weight = F.pad(self.weight, (0, 0, 0, pad))  # (V + pad, C): zero rows
        bias = None if self.bias is None else F.pad(self.bias, (0, pad))
        out = F.linear(x, weight, bias)  # (..., V + pad), each row starting aligned
        # contiguous, as F.linear's logits are: callers may `.view()` them
        return out[..., : self.out_features].contiguous()  # (..., V)


# name -> (module class, activation)
FEED_FORWARDS = {
    "relu": (MLP, F.relu),
    "gelu": (MLP, F.gelu),
    "gelu_tanh": (MLP, _gelu_tanh),
    "swiglu": (GatedMLP, F.silu),
    "geglu": (GatedMLP, F.gelu),
    "geglu_tanh": (GatedMLP, _gelu_tanh),  # T5 v1.1's "gated-gelu" (gelu_new in the gate)
    "reglu": (GatedMLP, F.relu),
}

NORMS = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}
assert tuple(FEED_FORWARDS) == FEED_FORWARD_NAMES and tuple(NORMS) == NORM_NAMES  # the configs' names


def build_feed_forward(config) -> nn.Module:
    cls, act = FEED_FORWARDS[config.hidden_act]
    return cls(config.hidden_size, config.intermediate_size, act, config.mlp_bias)


def build_norm(config) -> nn.Module:
    return NORMS[config.norm_type](config.hidden_size, eps=config.norm_eps)


# ----------------------------------------------------------------------------------------------
# Mixture of experts: the feed-forward of a sparse layer is E experts (each one of the feed-forwards
# above) and a router sending each token to k of them (Shazeer et al., 2017, "Outrageously Large
# Neural Networks"; k = 1 is the Switch Transformer, Fedus et al., 2021). Parameters grow E-fold,
# compute per token only k-fold.
# ----------------------------------------------------------------------------------------------


def is_sparse_layer(config, layer_idx: int, decoder: bool) -> bool:
    """Whether layer `layer_idx` of a stack has a mixture of experts: SwitchTransformers' rule, every
    layer for a step of 1, else the layers with `layer_idx % step == 1` (step 2: 1, 3, 5, ...)."""
    if not getattr(config, "num_local_experts", 0):  # BERT's config has no mixture-of-experts fields
        return False
    step = config.decoder_sparse_step if decoder else config.encoder_sparse_step
    return step == 1 or layer_idx % step == 1


class RouterLinear(nn.Linear):
    """A router's linear map, computed in at least fp32 whatever the weights' dtype: a bf16 router
    would flip close top-k choices. A module called like any other, so that offloading hooks
    (accelerate's `device_map`) load its weight and adapters (LoRA on `gate`) change its output."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(x.dtype, torch.float32)
        bias = None if self.bias is None else self.bias.to(dtype)
        return F.linear(x.to(dtype), self.weight.to(dtype), bias)


class SparseMoE(nn.Module):
    """A mixture-of-experts feed-forward with top-k routing and a per-sequence expert capacity.

    The router (`gate`, Mixtral's name) scores the E experts in fp32 (Switch's "selective
    precision"); each token goes to its k best experts, weighted by their softmax probabilities
    (renormalized over the k with `norm_topk_prob`, as Mixtral and Shazeer's top-k softmax; raw for
    Switch top-1). Each sequence is a group: an expert takes at most `capacity` of its tokens, queued
    first choices before second choices (GShard) and in sequence order (Switch), so whether a token
    is dropped depends only on earlier tokens and the layer stays causal. A dropped assignment adds
    nothing: with k = 1 the token passes through the residual unchanged.

    Expert-parallel-ready: tokens are scattered into a dense (E, B, capacity, C) tensor, one slice
    per expert, with no loop over tokens. Under expert parallelism each device holds E/P experts and
    an all-to-all over the first dimension sends every slice to its expert's device (and a second one
    brings the outputs back): the shapes are static, fixed by the capacity, as all-to-all needs.

    Returns `(output (B, T, C), router_logits (B*T, E))`, the logits (Mixtral's layout) for the
    load-balancing loss (`load_balancing_loss`) and `output_router_logits`.
    """

    def __init__(self, config):
        super().__init__()
        E, C = config.num_local_experts, config.hidden_size
        self.num_experts, self.top_k = E, config.num_experts_per_tok
        self.expert_capacity, self.capacity_factor = config.expert_capacity, config.capacity_factor
        self.norm_topk_prob, self.jitter = config.norm_topk_prob, config.router_jitter_noise
        self.gate = RouterLinear(C, E, bias=False)  # (E, C), Mixtral's router
        # Shazeer et al.'s noisy top-k: learned per-expert noise scale softplus(x W_noise)
        self.noise = RouterLinear(C, E, bias=False) if config.noisy_gating else None
        self.experts = nn.ModuleList(build_feed_forward(config) for _ in range(E))

    def capacity(self, tokens: int) -> int:
        """Slots per expert for a group of `tokens`: without a limit every token fits (k picks are distinct)."""
        if self.expert_capacity is not None:
            return self.expert_capacity
        if self.capacity_factor is not None:  # Switch: capacity_factor * tokens * k / E
            return max(1, math.ceil(self.capacity_factor * tokens * self.top_k / self.num_experts))
        return tokens

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, T, C) -> router logits (B, T, E) in fp32 (fp64 in a fp64 model), the k weights (B, T, k)
        and experts (B, T, k). Outside autocast: a bf16 router would flip close top-k choices."""
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        device = x.device.type
        if not (torch.amp.is_autocast_available(device) and torch.is_autocast_enabled(device)):
            return self._route(h)
        with torch.autocast(device, enabled=False):
            return self._route(h)

    def _route(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.training and self.jitter > 0:  # Switch: multiplicative jitter on the router's input
            h = h * torch.empty_like(h).uniform_(1.0 - self.jitter, 1.0 + self.jitter)
        logits = self.gate(h)  # (B, T, E)
        if self.noise is not None and self.training:  # Shazeer et al. (2017), eq. 4
            logits = logits + torch.randn_like(logits) * F.softplus(self.noise(h))
        weights, experts = logits.softmax(dim=-1).topk(self.top_k, dim=-1)  # 2 x (B, T, k)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return logits, weights, experts

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, C = x.shape
        E, k = self.num_experts, self.top_k
        logits, weights, experts = self.route(x)
        cap = self.capacity(T)
        # the k*T assignments of each sequence, choice-major: every first choice queues before any second
        choice = experts.transpose(1, 2).reshape(B, k * T)  # (B, kT)
        onehot = F.one_hot(choice, E)  # (B, kT, E)
        place = ((onehot.cumsum(dim=1) - 1) * onehot).sum(dim=-1)  # (B, kT) place in its expert's queue
        # slot e * cap + place in the dispatch buffer; an overflowing assignment goes to the spare slot E * cap
        slot = torch.where(place < cap, choice * cap + place, E * cap).unsqueeze(-1).expand(B, k * T, C)
        tokens = x.unsqueeze(1).expand(B, k, T, C).reshape(B, k * T, C)
        buffer = x.new_zeros(B, E * cap + 1, C).scatter(1, slot, tokens)  # (B, E*cap + 1, C)
        dispatched = buffer[:, : E * cap].view(B, E, cap, C).transpose(0, 1)  # (E, B, cap, C)
        # expert parallelism: all-to-all over dim 0 here, each device runs its experts, all-to-all back
        expert_out = torch.stack([expert(dispatched[e]) for e, expert in enumerate(self.experts)])
        combined = torch.cat([expert_out.transpose(0, 1).reshape(B, E * cap, C), x.new_zeros(B, 1, C)], dim=1)
        picked = combined.gather(1, slot).view(B, k, T, C)  # dropped assignments read the zero slot
        out = (picked * weights.transpose(1, 2).unsqueeze(-1).to(x.dtype)).sum(dim=1)  # (B, T, C)
        return out, logits.reshape(B * T, E)


def build_mlp(config, layer_idx: int, decoder: bool) -> nn.Module:
    """The feed-forward of a block: a mixture of experts in a sparse layer, else the dense one."""
    return SparseMoE(config) if is_sparse_layer(config, layer_idx, decoder) else build_feed_forward(config)


def _router_token_weights(router_logits, attention_mask) -> torch.Tensor:
    """(L*B*T,) 1 for the real tokens of every layer's router logits, 0 for padding (Mixtral's masking)."""
    rows = router_logits[0].shape[0]
    if attention_mask is None or attention_mask.dim() != 2 or attention_mask.numel() < rows:
        return router_logits[0].new_ones(rows * len(router_logits))
    # the last columns are the tokens of this call (with a cache the mask also covers the past)
    mask = attention_mask[:, -(rows // attention_mask.shape[0]) :].reshape(-1)
    return mask.to(device=router_logits[0].device, dtype=router_logits[0].dtype).repeat(len(router_logits))


def load_balancing_loss(router_logits, num_experts: int, top_k: int, attention_mask=None) -> torch.Tensor:
    """Switch's load-balancing loss `E * sum_i f_i * P_i` (Fedus et al., 2021, eqs. 4-6).

    f_i is the fraction of tokens with expert i among their top k (a fraction of all k*N assignments
    times k, so it sums to k, as Mixtral counts it), P_i the mean router probability of expert i,
    both over the real tokens of all the sparse layers together (transformers' Mixtral
    `load_balancing_loss_func`). It is k when routing is uniform and approaches E as it collapses.

    Args:
        router_logits: one (B*T, E) tensor per sparse layer.
        attention_mask: (B, T) (or (B, past + T)) padding mask; padding tokens do not count.
    """
    logits = torch.cat(router_logits, dim=0)  # (L*B*T, E), fp32 (fp64 in a fp64 model)
    probs = logits.softmax(dim=-1)
    chosen = F.one_hot(probs.topk(top_k, dim=-1).indices, num_experts).sum(dim=1)  # (L*B*T, E) 0/1
    w = _router_token_weights(router_logits, attention_mask)[:, None]  # (L*B*T, 1)
    n = w.sum().clamp(min=1)  # no real token (a static cache's empty slots): a loss of 0, not nan
    tokens_per_expert = (chosen * w).sum(dim=0) / n  # f_i
    prob_per_expert = (probs * w).sum(dim=0) / n  # P_i
    return num_experts * (tokens_per_expert * prob_per_expert).sum()


def router_z_loss(router_logits, attention_mask=None) -> torch.Tensor:
    """The router z-loss (Zoph et al., 2022, ST-MoE): mean over real tokens of logsumexp(logits)^2."""
    z = torch.logsumexp(torch.cat(router_logits, dim=0), dim=-1) ** 2  # (L*B*T,)
    w = _router_token_weights(router_logits, attention_mask)
    return (z * w).sum() / w.sum().clamp(min=1)


def router_losses(config, router_logits, attention_mask=None):
    """`(aux_loss, the weighted sum to add to the loss)`: the load-balancing loss times
    `router_aux_loss_coef` plus the z-loss times `router_z_loss_coef`. `(None, 0)` without sparse layers."""
    if not router_logits:
        return None, 0
    aux = load_balancing_loss(
        router_logits, config.num_local_experts, config.num_experts_per_tok, attention_mask
    )
    total = config.router_aux_loss_coef * aux
    if config.router_z_loss_coef:
        total = total + config.router_z_loss_coef * router_z_loss(router_logits, attention_mask)
    return aux, total


# ----------------------------------------------------------------------------------------------
# Positions. Each scheme answers three questions with a default of "nothing":
#   embed(position_ids)        -> vector added to the token embeddings (learned, sinusoidal)
#   rotary(position_ids)       -> (cos, sin) applied to queries and keys (RoPE), or
#                                 (cos, sin, key_cos, key_sin) when keys differ (xPos)
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

    def rotary(self, position_ids: torch.Tensor, dtype: torch.dtype):
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

    def rotary(self, position_ids, dtype):
        emb = self.angles(position_ids)
        return emb.cos().to(dtype), emb.sin().to(dtype)


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

    def rotary(self, position_ids, dtype):
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


# ----------------------------------------------------------------------------------------------
# Masks. Built once per forward and shared by all layers.
# ----------------------------------------------------------------------------------------------


def build_attention_mask(
    attention_mask: torch.Tensor | None,
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


def global_pattern(config, q_pos, k_pos, eligible):
    """Global tokens (Longformer's, Beltagy et al., 2020): the first g tokens see every key and
    every query sees them."""
    g = config.num_global_tokens
    return (q_pos < g) | (k_pos < g)


def band_pattern(config, q_pos, k_pos, eligible):
    """A band (sliding window): keys at most w tokens away."""
    return (q_pos - k_pos).abs() <= config.attention_window


def dilated_pattern(config, q_pos, k_pos, eligible):
    """A dilated window (Longformer): every d-th key up to w * d tokens away, so the same number
    of keys as the band reaches d times farther."""
    distance = (q_pos - k_pos).abs()
    d = config.attention_dilation
    return (distance <= config.attention_window * d) & (distance % d == 0)


def block_pattern(config, q_pos, k_pos, eligible):
    """Block-local attention: keys in the query's block of b tokens (blocks start at multiples of b)."""
    b = config.attention_block_size
    return q_pos // b == k_pos // b


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


ATTENTION_PATTERNS = {
    "global": global_pattern,
    "band": band_pattern,
    "dilated": dilated_pattern,
    "random": random_pattern,
    "block": block_pattern,
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
        allowed = parts[0](self.config, q_pos, k_pos, eligible)
        for part in parts[1:]:
            allowed = allowed | part(self.config, q_pos, k_pos, eligible)  # the union of the parts
        return allowed[:, None]  # (1|B, 1, T, S)


# ----------------------------------------------------------------------------------------------
# flex_attention's mask: the mask `build_attention_mask` builds, as a predicate on (batch, query,
# key) indices (flex_attention's `mask_mod`) that reads only per-row tensors (B, T) and (B, S), and
# a `BlockMask` whose blocks come from each part's reach, so building the mask and attending cost
# what the pattern's density costs, not T x S.
# ----------------------------------------------------------------------------------------------


def _block_gap(q_lo, q_hi, k_lo, k_hi):
    """The smallest |q - k| between a block of query positions [q_lo, q_hi] and of key positions."""
    return torch.maximum(k_lo - q_hi, q_lo - k_hi).clamp(min=0)


# Each part's reach between blocks: whether a query block with positions in [q_lo, q_hi] may see a
# key of a key block with positions in [k_lo, k_hi] (never False where the predicate could be True).
PATTERN_REACH = {
    "global": lambda config, q_lo, q_hi, k_lo, k_hi: (
        (q_lo < config.num_global_tokens) | (k_lo < config.num_global_tokens)
    ),
    "band": lambda config, q_lo, q_hi, k_lo, k_hi: (
        _block_gap(q_lo, q_hi, k_lo, k_hi) <= config.attention_window
    ),
    "dilated": lambda config, q_lo, q_hi, k_lo, k_hi: (
        _block_gap(q_lo, q_hi, k_lo, k_hi) <= config.attention_window * config.attention_dilation
    ),
    "block": lambda config, q_lo, q_hi, k_lo, k_hi: (
        (q_lo // config.attention_block_size <= k_hi // config.attention_block_size)
        & (k_lo // config.attention_block_size <= q_hi // config.attention_block_size)
    ),
    # random keys may be any eligible key: every block the other constraints leave
    "random": lambda config, q_lo, q_hi, k_lo, k_hi: torch.ones_like(
        _block_gap(q_lo, q_hi, k_lo, k_hi), dtype=torch.bool
    ),
}
assert set(PATTERN_REACH) == set(ATTENTION_PATTERN_NAMES)

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
                    part = ATTENTION_PATTERNS[name](self.config, q_pos, k_pos, None)
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
            parts = [PATTERN_REACH[name](self.config, q_lo, q_hi, k_lo, k_hi) for name in self.names]
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


# ----------------------------------------------------------------------------------------------
# The residual block
# ----------------------------------------------------------------------------------------------


class TransformerBlock(GradientCheckpointingLayer):
    """Self-attention, optional cross-attention and feed-forward, each in a residual branch.

    Pre-norm (GPT-2, Llama, T5): `x + f(norm(x))`, stable for deep stacks. Post-norm (the original
    Transformer, BERT, BART): `norm(x + f(x))`. With `cross_attention` (an encoder-decoder's
    decoder) a branch attending to the encoder output sits between the two.

    In a sparse layer (`num_local_experts`) the feed-forward is a `SparseMoE`.

    Returns `(hidden_states, self-attention weights, cross-attention weights, router logits)`; the
    weights are None unless `output_attentions`, the (B*T, E) router logits None in a dense layer.
    """

    def __init__(self, config, layer_idx: int, is_causal: bool = True, cross_attention: bool = False):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.attn_norm = build_norm(config)
        self.self_attn = Attention(config, layer_idx, is_causal=is_causal)
        if cross_attention:
            self.cross_attn_norm = build_norm(config)
            self.cross_attn = CrossAttention(config, layer_idx)
        else:
            self.cross_attn = None
        self.mlp_norm = build_norm(config)
        # a decoder block (causal, or a Mask-Predict decoder's bidirectional one) follows the decoder's step
        self.mlp = build_mlp(config, layer_idx, decoder=is_causal or cross_attention)
        self.sparse = isinstance(self.mlp, SparseMoE)  # its branch also returns router logits
        self.dropout = nn.Dropout(config.hidden_dropout)

    def _residual(self, x: torch.Tensor, norm: nn.Module, branch) -> torch.Tensor:
        out = branch(norm(x) if self.pre_norm else x)
        x = x + self.dropout(out)
        return x if self.pre_norm else norm(x)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask=None,
        is_causal: bool = False,
        position_embeddings=None,
        past_key_values=None,
        output_attentions: bool = False,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask=None,
        layer_idx: int | None = None,
        position_bias: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """Masks come in the form the attention backend reads (`hflm_attention.mask_kind`);
        `position_bias` is flex_attention's score bias (other backends have it in the mask).
        `layer_idx`: the depth this call runs at, when it differs from the block's own (a block
        shared by several layers, `num_hidden_groups`): it picks the layer's slot of the cache.
        `kwargs` reach the self-attention backend and the cache (continuous batching's indices)."""
        # an EncoderDecoderCache holds one cache per attention kind
        self_cache = getattr(past_key_values, "self_attention_cache", past_key_values)
        weights = {}

        def self_branch(x):
            y, weights["self"] = self.self_attn(
                x,
                attention_mask,
                is_causal,
                position_embeddings,
                self_cache,
                output_attentions,
                layer_idx,
                position_bias,
                **kwargs,
            )
            return y

        def cross_branch(x):
            y, weights["cross"] = self.cross_attn(
                x,
                encoder_hidden_states,
                encoder_attention_mask,
                past_key_values,
                output_attentions,
                layer_idx,
            )
            return y

        x = self._residual(hidden_states, self.attn_norm, self_branch)  # (B, T, C)
        if self.cross_attn is not None:
            x = self._residual(x, self.cross_attn_norm, cross_branch)

        def mlp_branch(x):
            if not self.sparse:
                return self.mlp(x)
            y, weights["router"] = self.mlp(x)
            return y

        x = self._residual(x, self.mlp_norm, mlp_branch)
        return x, weights.get("self"), weights.get("cross"), weights.get("router")


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


# ----------------------------------------------------------------------------------------------
# The Transformer stack: GPT's and BERT's base models and the encoder and decoder of T5/BART
# ----------------------------------------------------------------------------------------------


@dataclass
class LayerInputs:
    """What every block of a stack reads, built once per forward (`TransformerStack.stack_inputs`)."""

    hidden_states: torch.Tensor  # (B, T, C) the embedded input
    attention_mask: object  # self-attention's mask in the backend's form (`hflm_attention.mask_kind`)
    is_causal: bool  # with no mask: plain causal attention (SDPA's fast kernel), or none
    position_embeddings: tuple | None  # RoPE's (cos, sin), xPos's (cos, sin, key_cos, key_sin)
    position_bias: torch.Tensor | None  # (B, nh, T, S) score bias for flex (elsewhere in the mask)
    cross_attention_mask: object  # the source's padding in the backend's form, or None
    attention_kwargs: dict  # for the backend and the cache: transformers' attention kwargs


def fold_bias(mask: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A score bias (1|B, nh, T, S) and a given 4D mask as one additive mask."""
    if mask.dtype == torch.bool:
        return bias.masked_fill(~mask, torch.finfo(bias.dtype).min)
    return bias + mask.to(bias.dtype)


@dataclass
class StackOutput(BaseModelOutputWithPastAndCrossAttentions):
    """`TransformerStack`'s output: transformers' fields plus `router_logits`, one (B*T, E) tensor
    per sparse layer (None without a mixture of experts)."""

    router_logits: tuple[torch.Tensor, ...] | None = None


class TransformerStack:
    """Embeddings in, N blocks, final norm out: the one stack of every Transformer family.

    A mixin for the module that owns the parts (`HfLmGPTModel`, `HfLmBertModel`, `HfLmSeq2SeqStack`),
    so the parameter names stay those of saved checkpoints (`layers.0.self_attn...`, `norm.weight`).
    `build_stack` registers the parts in `__init__`; `run_stack` runs them on embedded tokens:

        positions -> + absolute position embeddings -> embed_norm -> dropout -> embed_proj
        -> for each layer: block (self-attention, cross-attention, feed-forward) -> norm

    ALBERT's options: with `embedding_size` E < C the embeddings are E wide and `embed_proj` maps them
    to C (V*E + E*C parameters instead of V*C); with `num_hidden_groups` G < N, `layers` holds G
    blocks and layer i runs `layers[layer_to_block[i]]`, block `i * G // N` (cross-layer sharing).
    """

    def build_stack(
        self,
        config,
        num_layers: int,
        is_causal: bool,
        cross_attention: bool = False,
        embedding_norm: bool = False,
        final_dropout: bool = False,
        type_vocab_size: int = 0,
    ) -> None:
        """Register the stack's parts on `self` (an `nn.Module` whose `config` is `config`).

        Args:
            num_layers: N (an encoder-decoder's decoder may differ from its encoder).
            is_causal: a decoder (causal self-attention, a cache) or an encoder (bidirectional).
            cross_attention: every block also attends to an encoder's output.
            embedding_norm: normalize the summed embeddings (BERT, BART).
            final_dropout: dropout after the final norm too (T5).
            type_vocab_size: BERT's segment (token type) embeddings, `token_type_embeddings`; 0: none.
        """
        C = config.hidden_size
        E = getattr(config, "embedding_size", None) or C
        groups = getattr(config, "num_hidden_groups", None) or num_layers
        self.is_causal, self.cross_attention, self.final_dropout = is_causal, cross_attention, final_dropout
        self.positions = POSITION_ENCODINGS[config.position_embedding_type](config, width=E, causal=is_causal)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, E) if type_vocab_size > 0 else None
        self.embed_norm = NORMS[config.norm_type](E, eps=config.norm_eps) if embedding_norm else nn.Identity()
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.embed_proj = nn.Linear(E, C) if E != C else nn.Identity()  # (B, T, E) -> (B, T, C)
        self.layers = nn.ModuleList(
            TransformerBlock(config, i, is_causal=is_causal, cross_attention=cross_attention)
            for i in range(groups)
        )
        self.layer_to_block = [i * groups // num_layers for i in range(num_layers)]
        # a sparse `attention_pattern` shapes the self-attention of GPT, BERT and an encoder; an
        # encoder-decoder's decoder (the stack with cross-attention) stays dense
        self.attention_pattern = AttentionPattern(config, active=not cross_attention)
        # a post-norm stack already ends in a norm; a pre-norm stack needs one
        self.norm = build_norm(config) if config.norm_position == "pre" else nn.Identity()
        self.gradient_checkpointing = False

    def stack_use_cache(self, use_cache: bool | None) -> bool:
        """The one cache policy: a decoder caches by default in eval mode (`config.use_cache`); an
        encoder never does, nor does a layer recomputed by activation checkpointing (its attention
        would append to the cache a second time)."""
        if not self.is_causal or (self.gradient_checkpointing and self.training):
            return False
        return self.config.use_cache and not self.training if use_cache is None else bool(use_cache)

    def run_stack(
        self,
        inputs_embeds: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values=None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        prefix_lengths: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        names_prefix: str = "",
        too_long_advice: str = "Truncate the input.",
        **kwargs,
    ) -> StackOutput:
        """Run the stack on embedded tokens.

        Args:
            inputs_embeds: (B, T, E) checked token embeddings (plus segment embeddings, BERT).
            attention_mask: (B, S) 1 for tokens, 0 for padding, S = past + T (with a static cache
                also its full length, the empty slots 0, as `generate()` passes it). Or a 4D mask,
                as transformers' decoders accept it: (B|1, 1, T, S), bool (True = attend) or
                additive float, the whole self-attention mask (packed documents, shared prefixes,
                tree attention); positions then default to past..past+T-1.
            position_ids: (B|1, T); by default each real token's index among the real tokens, so a
                left-padded sequence gets the positions it has alone (right padding: past..past+T-1).
            past_key_values: a transformers `Cache` (an `EncoderDecoderCache` with cross-attention),
                made when `use_cache` and None; static or dynamic, masks are sized by it. Or
                continuous batching's `PagedAttentionCache` (`generate_batch`), with its 4D mask
                (or none, for flash-attention), `position_ids` and indices in `kwargs`.
            prefix_lengths: (B,) prefix-LM: the first `prefix_lengths[b]` keys are visible to every query.
            document_ids: (B, S) for packed documents: attention stays inside each document.
            encoder_hidden_states, encoder_attention_mask: (B, S_enc, C) and (B, S_enc), cross-attention only.
            token_type_ids: (B, T) segment ids, with segment embeddings (BERT); ignored without.
            names_prefix: the prefix of the user's argument names in error messages ("decoder_").
            too_long_advice: what an error about positions beyond a learned table tells the user to do.
            kwargs: transformers' attention kwargs (`TransformersKwargs`), passed to every
                self-attention backend and to the cache's `update`.
        """
        cfg = self.config
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        use_cache = self.stack_use_cache(use_cache)
        paged = is_paged_cache(past_key_values)
        if use_cache and past_key_values is None:
            # with a local attention pattern the config's `sliding_window` makes sliding layers,
            # which keep only the keys a decoding step can see (as generate()'s cache does)
            past_key_values = (
                DynamicCache(config=cfg) if getattr(cfg, "sliding_window", None) else DynamicCache()
            )
            if self.cross_attention:
                past_key_values = EncoderDecoderCache(past_key_values, DynamicCache())
        if not self.is_causal:
            past_key_values = None  # an encoder's keys are all of its input
        inputs = self.stack_inputs(
            inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            paged=paged,
            prefix_lengths=prefix_lengths,
            document_ids=document_ids,
            token_type_ids=token_type_ids,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            output_attentions=output_attentions,
            names_prefix=names_prefix,
            too_long_advice=too_long_advice,
            kwargs=kwargs,
        )
        hidden_states = inputs.hidden_states

        all_hidden = () if output_hidden_states else None
        all_self = () if output_attentions else None
        all_cross = () if output_attentions and self.cross_attention else None
        router_logits = ()  # (B*T, E) per sparse layer: the heads' load-balancing loss reads them
        for i, block in enumerate(self.layer_to_block):
            if output_hidden_states:
                all_hidden += (hidden_states,)
            # every tensor argument positional, in `TransformerBlock.forward`'s order: reentrant
            # gradient checkpointing (`use_reentrant=True`) only gives gradients to tensors passed
            # positionally, and the encoder states and the masks (T5's learned position bias) need them
            hidden_states, self_weights, cross_weights, layer_router_logits = self.layers[block](
                hidden_states,
                inputs.attention_mask,
                inputs.is_causal,
                inputs.position_embeddings,
                past_key_values,
                output_attentions,
                encoder_hidden_states,
                inputs.cross_attention_mask,  # encoder_attention_mask
                i,  # layer_idx: a block shared by several layers writes layer i's slot of the cache
                inputs.position_bias,
                **inputs.attention_kwargs,
            )
            if layer_router_logits is not None:
                router_logits += (layer_router_logits,)
            if output_attentions:
                all_self += (self_weights,)
                if self.cross_attention:
                    all_cross += (cross_weights,)
        hidden_states = self.norm(hidden_states)
        if self.final_dropout:
            hidden_states = self.dropout(hidden_states)
        if output_hidden_states:
            all_hidden += (hidden_states,)
        return StackOutput(
            last_hidden_state=hidden_states,
            **returned_cache(past_key_values if use_cache and not paged else None),
            hidden_states=all_hidden,
            attentions=all_self,
            cross_attentions=all_cross,
            router_logits=router_logits or None,
        )

    def stack_inputs(
        self,
        inputs_embeds: torch.Tensor,
        *,
        attention_mask,
        position_ids,
        past_key_values,
        paged: bool,
        prefix_lengths,
        document_ids,
        token_type_ids,
        encoder_hidden_states,
        encoder_attention_mask,
        output_attentions: bool,
        names_prefix: str,
        too_long_advice: str,
        kwargs: dict,
    ) -> LayerInputs:
        """What the blocks read, from checked inputs (see `run_stack`), with the masks in the form
        the attention backend reads (`mask_kind`). Masks are sized by the cache, static or dynamic
        (`cache_lengths`)."""
        B, T = inputs_embeds.shape[:2]
        device, dtype = inputs_embeds.device, inputs_embeds.dtype
        # output_attentions runs hf_lm's eager reference, which reads dense masks
        kind = "dense" if output_attentions else mask_kind(self.config._attn_implementation)
        kwargs = dict(kwargs)
        is_causal = self._causality(kwargs.pop("is_causal", None), paged)
        given_mask = paged or (torch.is_tensor(attention_mask) and attention_mask.dim() == 4)
        if given_mask:
            self._check_given_mask(attention_mask, kind, paged, prefix_lengths, document_ids)
            # continuous batching's cache holds many sequences: the mask it gives is all there is
            past_len, offset = 0, 0
            kv_len = T if attention_mask is None else attention_mask.shape[-1]
            if not paged:
                past_len, kv_len, offset = cache_lengths(past_key_values, T)
                kv_len = offset + kv_len
                check_4d_mask(attention_mask, B, T, kv_len, f"{names_prefix}attention_mask")
            padding = None
        else:
            # past_len: an int, or a static cache's count tensor; kv_len: the keys self-attention sees;
            # a sliding-window cache (a local `attention_pattern`) has dropped the oldest `offset`
            # keys: masks are built over all offset + kv_len tokens and cut to the keys the cache returns
            past_len, kv_len, offset = cache_lengths(past_key_values, T)
            kv_len = offset + kv_len
            # (B, kv_len), a static cache's empty slots padding; the mask None when nothing is padded
            padding = keys_padding_mask(
                attention_mask, B, past_len, T, kv_len, f"{names_prefix}attention_mask"
            )
        # padding-free packing: with positions restarting and neither a mask nor a cache (training),
        # attention stays inside each sequence, as in transformers' decoders (`find_packed_sequence_indices`)
        packed = position_ids is not None and attention_mask is None and past_key_values is None
        document_ids = widen_to_keys(document_ids, "document_ids", B, past_len, T, kv_len, fill=-1)
        check_prefix_lengths(prefix_lengths, B)
        if position_ids is None:
            position_ids = real_token_positions(padding, past_len, T, device)  # (1|B, T)
            check_positions_in_range(self.positions, position_ids, too_long_advice, past_len)
        else:
            check_position_ids(
                position_ids, B, T, self.positions.max_positions, f"{names_prefix}position_ids"
            )
            if packed and document_ids is None and self.is_causal:
                document_ids = packed_documents(position_ids, B)  # (B, T): no cache, so T keys
        cross_mask = self._cross_attention_mask(encoder_hidden_states, encoder_attention_mask, B, T, kind)

        hidden_states = inputs_embeds
        pos_embeds = self.positions.embed(position_ids, dtype)
        if pos_embeds is not None:
            hidden_states = hidden_states + pos_embeds  # (B, T, E)
        if self.token_type_embeddings is not None:
            hidden_states = hidden_states + self.segment_embeddings(token_type_ids, B, T, device)
        hidden_states = self.embed_proj(self.dropout(self.embed_norm(hidden_states)))  # (B, T, C)
        position_embeddings = self.positions.rotary(position_ids, dtype)
        key_position_ids = (
            key_positions(position_ids, padding, past_len, kv_len, device)
            if self.positions.uses_key_positions
            else None
        )
        bias = self.positions.attention_bias(
            T, kv_len, past_len, device, dtype, position_ids, key_position_ids
        )  # (1|B, nh, T, kv_len) or None
        inputs = LayerInputs(hidden_states, None, False, position_embeddings, None, cross_mask, kwargs)

        if kind == "flash":
            # a (B, S) padding mask and causality as a flag; packed rows are found by the kernel's
            # wrapper from the restarting `position_ids`, a band is its `sliding_window`
            if document_ids is not None and not packed:
                raise ValueError(
                    "`document_ids` need a mask flash-attention cannot take: pass restarting `position_ids` "
                    "without an attention_mask (padding-free packing), or load the model with "
                    "attn_implementation='sdpa' or 'flex_attention'."
                )
            if prefix_lengths is not None:
                raise ValueError(
                    "`prefix_lengths` (a prefix-LM mask) cannot run on flash-attention: load the model with "
                    "attn_implementation='sdpa' or 'flex_attention'."
                )
            inputs.attention_mask = attention_mask if given_mask else padding
            if padding is not None and offset:
                inputs.attention_mask = padding[:, offset:]
            inputs.is_causal = is_causal
            inputs.attention_kwargs.setdefault("position_ids", position_ids)
            window = flash_window(self.config) if self.attention_pattern.parts else None
            if window is not None:
                inputs.attention_kwargs.setdefault("sliding_window", window)
            return inputs

        if kind == "flex" and not given_mask:
            # a BlockMask from a predicate on per-row tensors, evaluated only in the blocks the
            # pattern reaches (`FlexMask`); the score bias apart, as `position_bias`
            S = kv_len - offset
            plain = (
                padding is None
                and prefix_lengths is None
                and document_ids is None
                and not self.attention_pattern.names
                and not torch.is_tensor(past_len)
                and past_len + T == kv_len
            )
            if not (plain and (not is_causal or T == 1)):  # else every query sees every key: no mask
                inputs.attention_mask = FlexMask(
                    self.attention_pattern,
                    B,
                    padding,
                    T,
                    kv_len,
                    past_len,
                    offset,
                    is_causal,
                    prefix_lengths,
                    document_ids,
                    device,
                ).block_mask()
            if bias is not None:
                if offset:
                    bias = bias[..., offset:]
                # flex indexes it by (batch, head, q, k); contiguous: torch 2.13's CPU flex kernel fails
                # to compile a decoding step's broadcast (stride 0) bias
                inputs.position_bias = bias.expand(B, -1, T, S).contiguous()
            return inputs
        if given_mask:
            allowed, inputs.is_causal = attention_mask, is_causal and attention_mask is None
        else:
            allowed, inputs.is_causal = build_attention_mask(
                padding,
                T,
                kv_len,
                device,
                dtype,
                is_causal,
                prefix_lengths,
                bias if kind in ("dense", "additive") else None,
                past_len,
                document_ids,
                self.attention_pattern(padding, past_len, T, kv_len, is_causal, device),
            )
        if offset and allowed is not None:
            allowed = allowed[..., offset:]  # (B, 1|nh, T, kv_len - offset): the keys the cache kept
        if bias is not None and offset:
            bias = bias[..., offset:]
        if kind in ("dense", "additive"):
            if given_mask and bias is not None:
                allowed = fold_bias(allowed, bias)
            inputs.attention_mask = allowed
            if kind == "additive":
                S = kv_len - offset
                inputs.attention_mask = additive_mask(allowed, inputs.is_causal, T, S, dtype, device)
                inputs.is_causal = False
            return inputs
        # flex: a BlockMask (empty blocks skipped) and the score bias apart
        if allowed is not None and allowed.dtype != torch.bool:
            # an additive 4D mask: its values join the bias, its -inf entries the block mask
            keep = allowed > torch.finfo(allowed.dtype).min / 2
            bias = allowed.masked_fill(~keep, 0) if bias is None else bias + allowed.masked_fill(~keep, 0)
            allowed = keep
        S = kv_len - offset
        inputs.attention_mask = block_mask_from_dense(allowed, inputs.is_causal, T, S, device)
        if bias is not None:
            # flex indexes it by (batch, head, q, k); contiguous: torch 2.13's CPU flex kernel fails to
            # compile a decoding step's broadcast (stride 0) bias
            inputs.position_bias = bias.expand(B, -1, T, S).contiguous()
        return inputs

    def _causality(self, requested: bool | None, paged: bool) -> bool:
        """The stack's causality. Continuous batching says per call whether its mask is the whole
        story (`is_causal=False`) or the kernel must be causal (flash); elsewhere a different
        `is_causal` than the stack's kind is refused (a causal LM cannot be run bidirectionally)."""
        if requested is None:
            return self.is_causal
        if paged:
            return bool(requested)
        if bool(requested) != self.is_causal:
            raise ValueError(
                f"`is_causal={requested}` contradicts this stack, which is "
                f"{'causal' if self.is_causal else 'bidirectional'} by its config."
            )
        return self.is_causal

    def _check_given_mask(self, attention_mask, kind: str, paged: bool, prefix_lengths, document_ids) -> None:
        """A 4D mask (or continuous batching's) is the whole self-attention mask: nothing else shapes it."""
        what = "continuous batching's paged cache" if paged else "a 4D attention_mask"
        others = [
            name
            for name, value in (
                ("prefix_lengths", prefix_lengths),
                ("document_ids", document_ids),
                (
                    f"attention_pattern={self.config.attention_pattern!r}",
                    self.attention_pattern.parts or None,
                ),
            )
            if value is not None
        ]
        if others:
            raise ValueError(
                f"With {what} the mask is the whole attention pattern: it cannot be combined with "
                f"{', '.join(others)}. Build those into the mask, or pass a (batch, seq_len) attention_mask."
            )
        if paged and (
            self.positions.uses_key_positions or isinstance(self.positions, RelativeBucketPositions)
        ):
            raise ValueError(
                f"position_embedding_type={self.config.position_embedding_type!r} measures distances between "
                "the keys of one sequence, which continuous batching's paged cache does not keep apart. "
                "Use generate() for this model."
            )
        if attention_mask is None:
            return
        if kind == "flash" and not paged:
            raise ValueError(
                "flash-attention takes a (batch, seq_len) padding mask, not a 4D one: load the model with "
                "attn_implementation='eager', 'sdpa' or 'flex_attention' to pass a 4D attention_mask."
            )
        if attention_mask.dtype != torch.bool and not attention_mask.is_floating_point():
            raise ValueError(
                "A 4D `attention_mask` must be bool (True = attend) or an additive float mask "
                f"(0 = attend, a large negative value = masked), got dtype {attention_mask.dtype}."
            )

    def segment_embeddings(self, token_type_ids, B: int, T: int, device: torch.device) -> torch.Tensor:
        """The (B, T, E) segment embeddings of checked `token_type_ids` (row 0, segment A, by default).

        A model without them (RoBERTa-style, `type_vocab_size=0`) ignores the ids a BERT-style
        tokenizer sends: they mean nothing there."""
        if token_type_ids is None:
            # segment A everywhere: adding row 0 is the same as looking it up for every token; looked
            # up through the module, whose offloading hook loads the weight
            return self.token_type_embeddings(torch.zeros((), dtype=torch.long, device=device))  # (E,)
        num_types = self.token_type_embeddings.num_embeddings
        if not torch.is_tensor(token_type_ids) or tuple(token_type_ids.shape) != (B, T):
            got = (
                tuple(token_type_ids.shape)
                if torch.is_tensor(token_type_ids)
                else type(token_type_ids).__name__
            )
            raise ValueError(f"`token_type_ids` must be a ({B}, {T}) tensor like the input, got {got}.")
        if not is_integer_dtype(token_type_ids.dtype):
            raise ValueError(
                f"`token_type_ids` must hold integer segment ids, got dtype {token_type_ids.dtype}."
            )
        if not torch.compiler.is_compiling() and bool(
            ((token_type_ids < 0) | (token_type_ids >= num_types)).any()
        ):
            raise ValueError(
                f"`token_type_ids` must be segment ids in [0, type_vocab_size={num_types}), "
                f"got values {sorted(set(token_type_ids.unique().tolist()))}."
            )
        return self.token_type_embeddings(token_type_ids)

    def _cross_attention_mask(
        self, encoder_hidden_states, encoder_attention_mask, batch: int, q_len: int, kind: str
    ):
        """The source tokens cross-attention sees, in the backend's form (None: all of them): a
        (B, 1, 1, S_enc) bool mask, flex's `BlockMask`, or flash's (B, S_enc) padding mask."""
        if not self.cross_attention:
            return None
        if encoder_hidden_states is None:
            raise ValueError("The decoder needs `encoder_hidden_states` (run the encoder first).")
        check_encoder_states(encoder_hidden_states, batch, self.config.hidden_size)
        # the source's padding mask, which the model received as `attention_mask`
        source_mask = check_padding_mask(encoder_attention_mask, batch, encoder_hidden_states.shape[1])
        if source_mask is None:
            return None
        source_mask = source_mask.to(encoder_hidden_states.device).bool()  # (B, S_enc)
        if kind == "flash":
            return source_mask
        mask = source_mask[:, None, None, :]  # (B, 1, 1, S_enc)
        S = source_mask.shape[-1]
        if kind == "flex":
            return block_mask_from_dense(mask.expand(-1, -1, q_len, -1), False, q_len, S, mask.device)
        if kind == "additive":
            return additive_mask(mask, False, q_len, S, encoder_hidden_states.dtype, mask.device)
        return mask
