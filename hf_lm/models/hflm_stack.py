"""The one Transformer stack of hf_lm's GPT, BERT, T5 and BART families (`TransformerStack`):
embeddings -> blocks -> final norm, with the masks each attention backend reads built once per forward.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings. The
parts live in `hflm_attention` (attention and its backends), `hflm_positions`, `hflm_masks` and
`hflm_layers` (norms, feed-forwards, the residual block); what every family shares, Transformer or not,
in `hflm_common`, `hflm_pretrained`, `hflm_inputs` and `hflm_losses`.

Shape legend: B batch, T query length, S key length (past + T), C hidden size, E embedding size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions

from .hflm_attention import (
    additive_mask,
    block_mask_from_dense,
    check_paged_attention,
    flash_window,
    is_paged_cache,
    mask_kind,
)
from .hflm_common import (
    returned_cache,
)
from .hflm_inputs import (
    cache_lengths,
    check_encoder_states,
    check_padding_mask,
    check_position_ids,
    is_integer_dtype,
    packed_documents,
)
from .hflm_layers import (
    NORMS,
    TransformerBlock,
    build_norm,
)
from .hflm_masks import (
    AttentionPattern,
    FlexMask,
    build_attention_mask,
    check_4d_mask,
    check_prefix_lengths,
    fold_bias,
    keys_padding_mask,
    widen_to_keys,
)
from .hflm_positions import (
    POSITION_ENCODINGS,
    check_positions_in_range,
    key_positions,
    real_token_positions,
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
    position_embeddings: tuple | None  # (cos, sin, key_cos, key_sin) rotating queries and keys (RoPE, xPos)
    position_bias: torch.Tensor | None  # (B, nh, T, S) score bias for flex (elsewhere in the mask)
    cross_attention_mask: object  # the source's padding in the backend's form, or None
    attention_kwargs: dict  # for the backend and the cache: transformers' attention kwargs


@dataclass
class KeyLayout:
    """Where a forward's T new tokens sit among the keys self-attention sees, and what else shapes its
    mask (`TransformerStack.stack_inputs`)."""

    B: int
    T: int
    past_len: int | torch.Tensor  # tokens already cached: an int, or a static cache's count tensor
    kv_len: int  # offset + the keys self-attention sees
    offset: int  # how many of the oldest keys a sliding-window cache has dropped
    padding: (
        torch.Tensor | None
    )  # (B, kv_len) the real keys; None when nothing is padded or the mask is given
    given_mask: bool  # a 4D mask (or continuous batching's) is the whole self-attention mask
    is_causal: bool = False
    prefix_lengths: torch.Tensor | None = None  # (B,) prefix-LM: keys every query sees
    document_ids: torch.Tensor | None = None  # (B, kv_len) packed documents


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
        past_key_values = self._stack_cache(past_key_values, use_cache)
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
        hidden_states, all_hidden, all_self, all_cross, router_logits = self._run_layers(
            inputs, past_key_values, encoder_hidden_states, output_attentions, output_hidden_states
        )
        return StackOutput(
            last_hidden_state=hidden_states,
            **returned_cache(past_key_values if use_cache and not paged else None),
            hidden_states=all_hidden,
            attentions=all_self,
            cross_attentions=all_cross,
            router_logits=router_logits or None,
        )

    def _stack_cache(self, past_key_values, use_cache: bool):
        """The cache the layers write: the given one, a new one when `use_cache` and none is given;
        None for an encoder, whose keys are all of its input."""
        if use_cache and past_key_values is None:
            # with a local attention pattern the config's `sliding_window` makes sliding layers,
            # which keep only the keys a decoding step can see (as generate()'s cache does)
            cfg = self.config
            past_key_values = (
                DynamicCache(config=cfg) if getattr(cfg, "sliding_window", None) else DynamicCache()
            )
            if self.cross_attention:
                past_key_values = EncoderDecoderCache(past_key_values, DynamicCache())
        return past_key_values if self.is_causal else None

    def _run_layers(
        self,
        inputs: LayerInputs,
        past_key_values,
        encoder_hidden_states,
        output_attentions,
        output_hidden_states,
    ) -> tuple:
        """The blocks, then the final norm (and T5's final dropout), on what `stack_inputs` built.

        Returns:
            The last hidden state (B, T, C), and with `output_hidden_states` / `output_attentions`
            every layer's input and the output, the self- and cross-attention weights (else None),
            and the sparse layers' router logits (an empty tuple without a mixture of experts).
        """
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
        return hidden_states, all_hidden, all_self, all_cross, router_logits

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
        keys = self._key_layout(
            attention_mask, past_key_values, paged, kind, B, T, prefix_lengths, document_ids, names_prefix
        )
        keys.is_causal = is_causal
        past_len, kv_len = keys.past_len, keys.kv_len
        # padding-free packing: with positions restarting and neither a mask nor a cache (training),
        # attention stays inside each sequence, as in transformers' decoders (`find_packed_sequence_indices`)
        packed = position_ids is not None and attention_mask is None and past_key_values is None
        document_ids = widen_to_keys(document_ids, "document_ids", B, past_len, T, kv_len, fill=-1)
        check_prefix_lengths(prefix_lengths, B)
        if position_ids is None:
            position_ids = real_token_positions(keys.padding, past_len, T, device)  # (1|B, T)
            check_positions_in_range(self.positions, position_ids, too_long_advice, past_len)
        else:
            check_position_ids(
                position_ids, B, T, self.positions.max_positions, f"{names_prefix}position_ids"
            )
            if packed and document_ids is None and self.is_causal:
                document_ids = packed_documents(position_ids, B)  # (B, T): no cache, so T keys
        keys.prefix_lengths, keys.document_ids = prefix_lengths, document_ids
        cross_mask = self._cross_attention_mask(encoder_hidden_states, encoder_attention_mask, B, T, kind)

        hidden_states = self._embed_positions(inputs_embeds, position_ids, token_type_ids)  # (B, T, C)
        position_embeddings = self.positions.position_embeddings(position_ids, dtype)
        key_position_ids = (
            key_positions(position_ids, keys.padding, past_len, kv_len, device)
            if self.positions.uses_key_positions
            else None
        )
        # flex_attention reads a score bias per score it computes (`score_bias`); the rest a dense one
        flex_scores = kind == "flex" and not keys.given_mask
        bias = (
            None
            if flex_scores
            else self.positions.attention_bias(
                T, kv_len, past_len, device, dtype, position_ids, key_position_ids
            )
        )  # (1|B, nh, T, kv_len) or None
        inputs = LayerInputs(hidden_states, None, False, position_embeddings, None, cross_mask, kwargs)
        if kind == "flash":
            return self._flash_inputs(inputs, keys, attention_mask, position_ids, packed)
        if flex_scores:
            inputs.attention_mask = self._flex_block_mask(keys, device)
            # ALiBi's and T5's biases computed per score, where flex reads them (indexed as a tensor)
            inputs.position_bias = self.positions.score_bias(
                B, past_len, position_ids, key_position_ids, keys.offset
            )
            return inputs
        return self._masked_inputs(inputs, keys, attention_mask, kind, bias, device, dtype)

    def _key_layout(
        self, attention_mask, past_key_values, paged, kind, B, T, prefix_lengths, document_ids, names_prefix
    ) -> KeyLayout:
        """Where the T new tokens sit among the keys, and which keys are padding (see `KeyLayout`)."""
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
            return KeyLayout(B, T, past_len, kv_len, offset, None, given_mask=True)
        # past_len: an int, or a static cache's count tensor; kv_len: the keys self-attention sees;
        # a sliding-window cache (a local `attention_pattern`) has dropped the oldest `offset`
        # keys: masks are built over all offset + kv_len tokens and cut to the keys the cache returns
        past_len, kv_len, offset = cache_lengths(past_key_values, T)
        kv_len = offset + kv_len
        # (B, kv_len), a static cache's empty slots padding; the mask None when nothing is padded
        padding = keys_padding_mask(attention_mask, B, past_len, T, kv_len, f"{names_prefix}attention_mask")
        return KeyLayout(B, T, past_len, kv_len, offset, padding, given_mask=False)

    def _embed_positions(self, inputs_embeds, position_ids, token_type_ids) -> torch.Tensor:
        """(B, T, E) token embeddings -> (B, T, C) the first block's input: plus absolute positions
        and segments, normalized (BERT, BART), dropped out, projected (ALBERT)."""
        B, T = inputs_embeds.shape[:2]
        hidden_states = inputs_embeds
        pos_embeds = self.positions.embed(position_ids, inputs_embeds.dtype)
        if pos_embeds is not None:
            hidden_states = hidden_states + pos_embeds  # (B, T, E)
        if self.token_type_embeddings is not None:
            hidden_states = hidden_states + self.segment_embeddings(
                token_type_ids, B, T, inputs_embeds.device
            )
        return self.embed_proj(self.dropout(self.embed_norm(hidden_states)))  # (B, T, C)

    def _flash_inputs(self, inputs: LayerInputs, keys: KeyLayout, attention_mask, position_ids, packed):
        """flash-attention's inputs: a (B, S) padding mask and causality as a flag; packed rows are
        found by the kernel's wrapper from the restarting `position_ids`, a band is its `sliding_window`."""
        if keys.document_ids is not None and not packed:
            raise ValueError(
                "`document_ids` need a mask flash-attention cannot take: pass restarting `position_ids` "
                "without an attention_mask (padding-free packing), or load the model with "
                "attn_implementation='sdpa' or 'flex_attention'."
            )
        if keys.prefix_lengths is not None:
            raise ValueError(
                "`prefix_lengths` (a prefix-LM mask) cannot run on flash-attention: load the model with "
                "attn_implementation='sdpa' or 'flex_attention'."
            )
        inputs.attention_mask = attention_mask if keys.given_mask else keys.padding
        if keys.padding is not None and keys.offset:
            inputs.attention_mask = keys.padding[:, keys.offset :]
        inputs.is_causal = keys.is_causal
        inputs.attention_kwargs.setdefault("position_ids", position_ids)
        window = flash_window(self.config) if self.attention_pattern.parts else None
        if window is not None:
            inputs.attention_kwargs.setdefault("sliding_window", window)
        return inputs

    def _flex_block_mask(self, keys: KeyLayout, device):
        """flex_attention's BlockMask from a predicate on per-row tensors, evaluated only in the
        blocks the pattern reaches (`FlexMask`); None where every query sees every key."""
        plain = (
            keys.padding is None
            and keys.prefix_lengths is None
            and keys.document_ids is None
            and not self.attention_pattern.names
            and not torch.is_tensor(keys.past_len)
            and keys.past_len + keys.T == keys.kv_len
        )
        if plain and (not keys.is_causal or keys.T == 1):
            return None
        return FlexMask(
            self.attention_pattern,
            keys.B,
            keys.padding,
            keys.T,
            keys.kv_len,
            keys.past_len,
            keys.offset,
            keys.is_causal,
            keys.prefix_lengths,
            keys.document_ids,
            device,
        ).block_mask()

    def _masked_inputs(self, inputs: LayerInputs, keys: KeyLayout, attention_mask, kind, bias, device, dtype):
        """The other backends' inputs: a dense mask (bool, or additive with the position bias folded
        in), or flex's BlockMask built from it, with the score bias apart."""
        T, kv_len, offset = keys.T, keys.kv_len, keys.offset
        if keys.given_mask:
            allowed, inputs.is_causal = attention_mask, keys.is_causal and attention_mask is None
        else:
            allowed, inputs.is_causal = build_attention_mask(
                keys.padding,
                q_len=T,
                kv_len=kv_len,
                device=device,
                dtype=dtype,
                causal=keys.is_causal,
                prefix_lengths=keys.prefix_lengths,
                bias=bias if kind in ("dense", "additive") else None,
                past_len=keys.past_len,
                document_ids=keys.document_ids,
                pattern=self.attention_pattern(
                    keys.padding, keys.past_len, T, kv_len, keys.is_causal, device
                ),
            )
        if offset and allowed is not None:
            allowed = allowed[..., offset:]  # (B, 1|nh, T, kv_len - offset): the keys the cache kept
        if bias is not None and offset:
            bias = bias[..., offset:]
        S = kv_len - offset
        if kind in ("dense", "additive"):
            if keys.given_mask and bias is not None:
                allowed = fold_bias(allowed, bias)
            inputs.attention_mask = allowed
            if kind == "additive":
                inputs.attention_mask = additive_mask(allowed, inputs.is_causal, T, S, dtype, device)
                inputs.is_causal = False
            return inputs
        # flex: a BlockMask (empty blocks skipped) and the score bias apart
        if allowed is not None and allowed.dtype != torch.bool:
            # an additive 4D mask: its values join the bias, its -inf entries the block mask
            keep = allowed > torch.finfo(allowed.dtype).min / 2
            bias = allowed.masked_fill(~keep, 0) if bias is None else bias + allowed.masked_fill(~keep, 0)
            allowed = keep
        inputs.attention_mask = block_mask_from_dense(allowed, inputs.is_causal, T, S, device)
        if bias is not None:
            # flex indexes it by (batch, head, q, k); contiguous: torch 2.13's CPU flex kernel fails to
            # compile a decoding step's broadcast (stride 0) bias
            inputs.position_bias = bias.expand(keys.B, -1, T, S).contiguous()
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
        if paged:  # the refusal `generate_batch` makes up front, for a paged cache passed by hand
            check_paged_attention(self.config, type(self).__name__)
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
