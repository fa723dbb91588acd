"""The layers of hf_lm's Transformer families: norms, feed-forwards (dense and mixture-of-experts, with
the router losses), the vocabulary projection, and the residual block that composes them with attention.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings. Every
variant is chosen by a validated config string indexing a table (`NORMS`, `FEED_FORWARDS`); modules are
built once in `__init__` and `forward` never branches on variant names.

Shape legend: B batch, T query length, C hidden size, E experts, V vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer

from .hflm_attention import (
    Attention,
    CrossAttention,
)
from .hflm_common import (
    FEED_FORWARD_NAMES,
    NORM_NAMES,
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
    (benchmarks/gpu.py measures both).
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


def add_router_losses(config, loss, stacks, training: bool, wanted: bool):
    """A head's loss with the router losses, and the load-balancing losses: `(loss, aux_loss, aux_losses)`.

    `stacks` holds `(router_logits, attention_mask)` per stack (a decoder's, or an encoder's and a
    decoder's), the router logits one (B*T, E) tensor per sparse layer. In `training` `loss` (None
    without labels) gets each sparse stack's load-balancing loss times `router_aux_loss_coef` and
    z-loss times `router_z_loss_coef`: a regularizer, eval losses stay the head's. With `wanted`
    (`output_router_logits`) the load-balancing losses come back summed over the stacks (as
    SwitchTransformers sums its encoder's and decoder's) and per stack; None otherwise and when dense.
    """
    add = loss is not None and training
    aux_losses, router_loss = [None] * len(stacks), None
    for i, (router_logits, attention_mask) in enumerate(stacks):
        if not router_logits or not (add or wanted):
            continue
        aux = load_balancing_loss(
            router_logits, config.num_local_experts, config.num_experts_per_tok, attention_mask
        )
        aux_losses[i] = aux if wanted else None
        if add:
            total = config.router_aux_loss_coef * aux
            if config.router_z_loss_coef:
                total = total + config.router_z_loss_coef * router_z_loss(router_logits, attention_mask)
            router_loss = total if router_loss is None else router_loss + total
    found = [aux for aux in aux_losses if aux is not None]
    loss = loss if router_loss is None else loss + router_loss
    return loss, sum(found) if found else None, aux_losses


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
