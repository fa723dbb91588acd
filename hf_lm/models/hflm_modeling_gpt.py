"""hf_lm's GPT-style decoder-only family: base model, causal LM head and sequence classifier.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
The blocks (attention, positions, norms, feed-forwards) live in `hflm_blocks`; this file only
composes them, in the shape of GPT-2 (Radford et al., 2019) and its descendants (Llama).

ALBERT's parameter savings (Lan et al., 2020) are config values here too: factorized embeddings
(`embedding_size` E < C) and cross-layer sharing (`num_hidden_groups` < `num_hidden_layers`).

Shape legend: B batch, T new tokens, S past + T, C hidden size, E embedding size, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache, GenerationMixin
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    SequenceClassifierOutputWithPast,
)

from .hflm_blocks import (
    POSITION_ENCODINGS,
    VocabProjection,
    build_attention_mask,
    build_blocks,
    build_embedding_projection,
    build_norm,
    check_positions_in_range,
    check_prefix_lengths,
    keys_padding_mask,
    layer_to_block,
    real_token_positions,
    widen_to_keys,
)
from .hflm_common import (
    HfLmPreTrainedModel,
    cache_lengths,
    check_labels,
    check_position_ids,
    embed_inputs,
    lm_loss,
    logits_positions,
    sequence_classification_loss,
)
from .hflm_configuration_gpt import HfLmGPTConfig


class HfLmGPTPreTrainedModel(HfLmPreTrainedModel):
    config_class = HfLmGPTConfig
    config: HfLmGPTConfig
    # a decoding step with a StaticCache traces as one graph (tests/test_static_cache.py): no
    # host-side check runs under torch.compile, and the cache length stays a device tensor
    _can_compile_fullgraph = True


class HfLmGPTModel(HfLmGPTPreTrainedModel):
    """Token embeddings -> N causal Transformer blocks -> final norm (pre-norm stacks only).

    With `embedding_size` E < C the token and absolute position embeddings are E wide and a Linear
    projects their sum up to C (`embed_proj`); with `num_hidden_groups` G < N, `layers` holds G
    blocks and layer i runs `layers[layer_to_block[i]]`.
    """

    def __init__(self, config: HfLmGPTConfig):
        super().__init__(config)
        E = config.embedding_size
        self.embed_tokens = nn.Embedding(config.vocab_size, E)
        self.positions = POSITION_ENCODINGS[config.position_embedding_type](config, width=E)
        self.embed_proj = build_embedding_projection(config)  # identity unless E != C
        self.dropout = nn.Dropout(config.hidden_dropout)
        # `num_hidden_groups` distinct blocks; layer i runs block layer_to_block[i]
        self.layers = build_blocks(config)
        self.layer_to_block = layer_to_block(config)
        # a post-norm stack already ends in a norm; a pre-norm stack needs one before the head
        self.norm = build_norm(config) if config.norm_position == "pre" else nn.Identity()
        self.gradient_checkpointing = False
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values=None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        prefix_lengths: torch.LongTensor | None = None,
        document_ids: torch.LongTensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast | tuple:
        """Run the decoder stack.

        Args:
            input_ids: (B, T) token ids in [0, vocab_size).
            attention_mask: (B, S) 1 for tokens to attend to, 0 for padding (S = past + T; with a
                static cache also its full length, the empty slots 0, as `generate()` passes it).
            position_ids: (B|1, T) positions; by default past..past+T-1. `generate()` derives them
                from the attention mask, so left padding does not shift a prompt's positions.
            past_key_values: a transformers `Cache` (a `DynamicCache` is made when `use_cache`).
            inputs_embeds: (B, T, E) instead of `input_ids` (E = C unless embeddings are factorized).
            prefix_lengths: (B,) optional prefix-LM mask: the first `prefix_lengths[b]` tokens are
                visible to every position (bidirectional prefix, causal rest).
            document_ids: (B, S) for blocks packed from several documents: the document index of
                each token; attention then stays inside a document (pass the matching restarting
                `position_ids` too, as `training.data.tokenize_and_pack(document_mask=True)` makes).
        """
        cfg = self.config
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        return_dict = cfg.return_dict if return_dict is None else return_dict
        if use_cache is None:
            use_cache = cfg.use_cache and not self.training
        if self.gradient_checkpointing and self.training:
            use_cache = False  # recomputed layers would append to the cache a second time

        width_name = "hidden_size" if cfg.embedding_size == cfg.hidden_size else "embedding_size"
        inputs_embeds = embed_inputs(
            input_ids, inputs_embeds, self.embed_tokens, cfg.vocab_size, width_name
        )  # (B, T, E)
        B, T = inputs_embeds.shape[:2]

        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=cfg)
        # past_len: an int, or a static cache's count tensor; kv_len: the keys attention sees
        past_len, kv_len = cache_lengths(past_key_values, T)

        # both (B, kv_len), a static cache's empty slots padding; the mask None when nothing is padded
        attention_mask = keys_padding_mask(attention_mask, B, past_len, T, kv_len)
        document_ids = widen_to_keys(document_ids, "document_ids", B, past_len, T, kv_len, fill=-1)
        check_prefix_lengths(prefix_lengths, B)
        if position_ids is None:
            # count only real tokens, so a left-padded prompt gets the positions it has alone
            position_ids = real_token_positions(attention_mask, past_len, T, inputs_embeds.device)  # (1|B, T)
            check_positions_in_range(
                self.positions,
                position_ids,
                "The cache counts too: truncate the input or use a shorter generation.",
                past_len,
            )
        else:
            check_position_ids(position_ids, B, T, self.positions.max_positions)

        hidden_states = inputs_embeds
        pos_embeds = self.positions.embed(position_ids, hidden_states.dtype)
        if pos_embeds is not None:
            hidden_states = hidden_states + pos_embeds  # (B, T, E)
        hidden_states = self.dropout(self.embed_proj(hidden_states))  # (B, T, C)
        rotary = self.positions.rotary(position_ids, hidden_states.dtype)
        bias = self.positions.attention_bias(T, kv_len, past_len, hidden_states.device, hidden_states.dtype)
        mask, is_causal = build_attention_mask(
            attention_mask,
            T,
            kv_len,
            hidden_states.device,
            hidden_states.dtype,
            True,
            prefix_lengths,
            bias,
            past_len,
            document_ids,
        )

        all_hidden_states = () if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for i, block in enumerate(self.layer_to_block):
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            hidden_states, weights, _ = self.layers[block](
                hidden_states,
                attention_mask=mask,
                is_causal=is_causal,
                position_embeddings=rotary,
                past_key_values=past_key_values,
                output_attentions=output_attentions,
                layer_idx=i,  # a shared block writes layer i's slot of the cache
            )
            if output_attentions:
                all_attentions += (weights,)
        hidden_states = self.norm(hidden_states)
        if output_hidden_states:
            all_hidden_states += (hidden_states,)

        out = BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            past_key_values=past_key_values if use_cache else None,
            hidden_states=all_hidden_states,
            attentions=all_attentions,
        )
        return out if return_dict else out.to_tuple()


class HfLmGPTForCausalLM(HfLmGPTPreTrainedModel, GenerationMixin):
    """The decoder with a language-modeling head (tied to the input embeddings by default).

    With factorized embeddings (E < C) a tied head maps C -> E -> V: a bias-free Linear
    (`output_projection`, C -> E, learned, not tied) brings the final state into the embedding
    space, where the V x E embedding matrix scores every token. An untied head reads the C-wide
    state directly (`output_projection` is then the identity), as in the RNN family.
    """

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: HfLmGPTConfig):
        super().__init__(config)
        self.model = HfLmGPTModel(config)
        factorized_tied = config.tie_word_embeddings and config.embedding_size != config.hidden_size
        head_width = config.embedding_size if factorized_tied else config.hidden_size
        self.output_projection = (
            nn.Linear(config.hidden_size, head_width, bias=False) if factorized_tied else nn.Identity()
        )
        self.lm_head = VocabProjection(head_width, config.vocab_size, bias=False)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values=None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        prefix_lengths: torch.LongTensor | None = None,
        document_ids: torch.LongTensor | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast | tuple:
        """Next-token logits, and the loss when `labels` are given.

        Args:
            labels: (B, T) targets, shifted inside the model (`labels = input_ids` is right);
                -100 is ignored. With `num_items_in_batch` (passed by `Trainer`, or by your own
                gradient-accumulation loop) the summed loss is divided by it instead of averaged,
                so accumulated gradients equal those of one big batch.
            logits_to_keep: compute logits only for the last `logits_to_keep` positions (0 = all);
                `generate()` passes 1 and so never builds (B, T, V) logits for the prompt.
        """
        return_dict = self.config.return_dict if return_dict is None else return_dict
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            prefix_lengths=prefix_lengths,
            document_ids=document_ids,
        )
        hidden_states = outputs.last_hidden_state
        hidden_states = hidden_states[:, logits_positions(logits_to_keep, hidden_states.shape[1])]
        logits = self.lm_head(self.output_projection(hidden_states))  # (B, T, C) -> (B, T, E) -> (B, T, V)

        loss = None
        if labels is not None:
            n_items = kwargs.get("num_items_in_batch")
            check_labels(labels, hidden_states.shape[:2], self.config.vocab_size, num_items_in_batch=n_items)
            loss = lm_loss(logits, labels, shift=True, num_items_in_batch=n_items)

        out = CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return out if return_dict else out.to_tuple()


class HfLmGPTForSequenceClassification(HfLmGPTPreTrainedModel):
    """The decoder with a classification head on the last real token (the only one that saw the whole text)."""

    def __init__(self, config: HfLmGPTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = HfLmGPTModel(config)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values=None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutputWithPast | tuple:
        """Sequence logits (B, num_labels); loss by `config.problem_type` (regression, single- or multi-label)."""
        return_dict = self.config.return_dict if return_dict is None else return_dict
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        hidden_states = outputs.last_hidden_state  # (B, T, C)
        B, T = hidden_states.shape[:2]
        positions = torch.arange(T, device=hidden_states.device)
        if attention_mask is not None:
            # rightmost attended token: works for left and right padding
            real = attention_mask[:, -T:].to(hidden_states.device).bool()
        elif input_ids is not None and self.config.pad_token_id is not None:
            real = input_ids != self.config.pad_token_id
        else:
            real = torch.ones(B, T, dtype=torch.bool, device=hidden_states.device)
        last = torch.where(real, positions, -1).amax(dim=-1).clamp(min=0)  # (B,)
        pooled = hidden_states[torch.arange(B, device=hidden_states.device), last]  # (B, C)
        logits = self.score(pooled)  # (B, num_labels)

        loss = None
        if labels is not None:
            loss = sequence_classification_loss(self.config, logits, labels, kwargs.get("num_items_in_batch"))

        out = SequenceClassifierOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return out if return_dict else out.to_tuple()


__all__ = [
    "HfLmGPTPreTrainedModel",
    "HfLmGPTModel",
    "HfLmGPTForCausalLM",
    "HfLmGPTForSequenceClassification",
]
