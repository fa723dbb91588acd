"""hf_lm's GPT-style decoder-only family: base model, causal LM head and sequence classifier.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
The blocks live in `hflm_attention`, `hflm_positions`, `hflm_layers` and `hflm_stack`; this file only
composes them, in the shape of GPT-2 (Radford et al., 2019) and its descendants (Llama).

ALBERT's parameter savings (Lan et al., 2020) are config values here too: factorized embeddings
(`embedding_size` E < C) and cross-layer sharing (`num_hidden_groups` < `num_hidden_layers`).

Shape legend: B batch, T new tokens, S past + T, C hidden size, E embedding size, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import GenerationMixin
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    SequenceClassifierOutputWithPast,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple

from .hflm_attention import AttentionBackends, check_paged_attention
from .hflm_common import (
    attention_kwargs,
    cache_argument,
    output_cache,
    returned_cache,
)
from .hflm_configuration_gpt import HfLmGPTConfig
from .hflm_inputs import (
    embed_inputs,
    logits_positions,
)
from .hflm_layers import (
    VocabProjection,
    add_router_losses,
)
from .hflm_losses import (
    causal_lm_loss,
    classify_last_token,
    wants_router_logits,
)
from .hflm_pretrained import (
    HfLmPreTrainedModel,
    trainer_shifts_labels,
)
from .hflm_stack import (
    TransformerStack,
)


@dataclass
class MoeModelOutputWithPast(BaseModelOutputWithPast):
    """`BaseModelOutputWithPast` plus Mixtral's `router_logits`: one (B*T, E) tensor per sparse
    layer, with `output_router_logits` (None otherwise, and without a mixture of experts)."""

    router_logits: tuple[torch.Tensor, ...] | None = None


@dataclass
class MoeCausalLMOutputWithPast(CausalLMOutputWithPast):
    """`CausalLMOutputWithPast` plus Mixtral's `aux_loss` (the load-balancing loss, unweighted) and
    `router_logits`, both with `output_router_logits` as in transformers."""

    aux_loss: torch.Tensor | None = None
    router_logits: tuple[torch.Tensor, ...] | None = None


@dataclass
class MoeSequenceClassifierOutputWithPast(SequenceClassifierOutputWithPast):
    """`SequenceClassifierOutputWithPast` plus `aux_loss` and `router_logits`, as above."""

    aux_loss: torch.Tensor | None = None
    router_logits: tuple[torch.Tensor, ...] | None = None


class HfLmGPTPreTrainedModel(AttentionBackends, HfLmPreTrainedModel):
    config_class = HfLmGPTConfig
    config: HfLmGPTConfig
    # a decoding step with a StaticCache traces as one graph (tests/test_static_cache.py): no
    # host-side check runs under torch.compile, and the cache length stays a device tensor
    _can_compile_fullgraph = True


class HfLmGPTModel(HfLmGPTPreTrainedModel, TransformerStack):
    """Token embeddings -> N causal Transformer blocks -> final norm (`TransformerStack`).

    With `embedding_size` E < C the token and absolute position embeddings are E wide and a Linear
    projects their sum up to C (`embed_proj`); with `num_hidden_groups` G < N, `layers` holds G
    blocks and layer i runs `layers[layer_to_block[i]]`.
    """

    def __init__(self, config: HfLmGPTConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size)
        self.build_stack(config, config.num_hidden_layers, is_causal=True)
        self.post_init()

    @can_return_tuple
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
        prefix_lengths: torch.LongTensor | None = None,
        document_ids: torch.LongTensor | None = None,
        output_router_logits: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MoeModelOutputWithPast:
        """Run the decoder stack.

        Args:
            input_ids: (B, T) token ids in [0, vocab_size).
            attention_mask: (B, S) 1 for tokens to attend to, 0 for padding (S = past + T; with a
                static cache also its full length, the empty slots 0, as `generate()` passes it).
            position_ids: (B|1, T) positions; by default each real token's index among the real
                tokens (past..past+T-1 without left padding).
            past_key_values: a transformers `Cache` (a `DynamicCache` is made when `use_cache`); also
                accepted as `cache`, transformers 5.24's name, which `generate()` then passes.
            inputs_embeds: (B, T, E) instead of `input_ids` (E = C unless embeddings are factorized).
            prefix_lengths: (B,) optional prefix-LM mask: the first `prefix_lengths[b]` tokens are
                visible to every position (bidirectional prefix, causal rest).
            document_ids: (B, S) for blocks packed from several documents: the document index of
                each token; attention then stays inside a document (pass the matching restarting
                `position_ids` too, as `training.data.packing.tokenize_and_pack(document_mask=True)` makes).
            output_router_logits: return the router logits of the sparse layers (`num_local_experts`);
                defaults to `config.output_router_logits`.
            kwargs: transformers' attention kwargs, passed to the attention backend and the cache
                (continuous batching's indices, flash-attention's packed-sequence lengths).
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        cfg = self.config
        width_name = "hidden_size" if cfg.embedding_size == cfg.hidden_size else "embedding_size"
        inputs_embeds = embed_inputs(input_ids, inputs_embeds, self.embed_tokens, cfg.vocab_size, width_name)
        out = self.run_stack(
            inputs_embeds,
            attention_mask,
            position_ids,
            past_key_values,
            use_cache,
            output_attentions,
            output_hidden_states,
            prefix_lengths=prefix_lengths,
            document_ids=document_ids,
            too_long_advice="The cache counts too: truncate the input or use a shorter generation.",
            **kwargs,
        )
        return MoeModelOutputWithPast(
            last_hidden_state=out.last_hidden_state,
            **returned_cache(output_cache(out)),
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            router_logits=out.router_logits if wants_router_logits(cfg, output_router_logits) else None,
        )


@trainer_shifts_labels
class HfLmGPTForCausalLM(HfLmGPTPreTrainedModel, GenerationMixin):
    """The decoder with a language-modeling head (tied to the input embeddings by default).

    With factorized embeddings (E < C) a tied head maps C -> E -> V: a bias-free Linear
    (`output_projection`, C -> E, learned, not tied) brings the final state into the embedding
    space, where the V x E embedding matrix scores every token. An untied head reads the C-wide
    state directly (`output_projection` is then the identity), as in the RNN family.
    """

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    _pp_plan = {"lm_head": (["hidden_states"], ["logits"])}
    # tensor parallelism: each process scores its slice of the vocabulary, the slices are gathered
    _tp_plan = {"lm_head": "colwise_gather_output"}

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

    def init_continuous_batching(self, *args, **kwargs):
        """transformers' continuous batching, refused up front for a config it cannot run."""
        check_paged_attention(self.config, type(self).__name__)
        return super().init_continuous_batching(*args, **kwargs)

    def generate_batch(self, *args, **kwargs):
        """transformers' `generate_batch`, refused up front for a config it cannot run (it would
        otherwise fail every request and return them empty)."""
        check_paged_attention(self.config, type(self).__name__)
        return super().generate_batch(*args, **kwargs)

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    @can_return_tuple
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
        logits_to_keep: int | torch.Tensor = 0,
        prefix_lengths: torch.LongTensor | None = None,
        document_ids: torch.LongTensor | None = None,
        output_router_logits: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MoeCausalLMOutputWithPast:
        """Next-token logits, and the loss when `labels` are given.

        Args:
            labels: (B, T) targets, shifted inside the model (`labels = input_ids` is right);
                -100 is ignored. With `num_items_in_batch` (passed by `Trainer`, or by your own
                gradient-accumulation loop) the summed loss is divided by it instead of averaged,
                so accumulated gradients equal those of one big batch. `shift_labels` (B, T) in
                their place are already aligned with the positions and scored as they are
                (`hflm_common.causal_lm_loss`).
            logits_to_keep: compute logits only for the last `logits_to_keep` positions (0 = all);
                `generate()` passes 1 and so never builds (B, T, V) logits for the prompt.
            output_router_logits: return the sparse layers' `router_logits` and `aux_loss` (defaults
                to `config.output_router_logits`). With a
                mixture of experts (`num_local_experts`) and labels, the training-mode loss includes
                `router_aux_loss_coef` times the load-balancing loss (and the z-loss), as in Mixtral;
                in eval mode the loss is the LM's alone (perplexity), `aux_loss` is still returned.
        """
        want_router_logits = wants_router_logits(self.config, output_router_logits)
        past_key_values = cache_argument(past_key_values, kwargs)
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
            output_router_logits=True,  # the load-balancing loss needs them
            **attention_kwargs(kwargs),
        )
        hidden_states = outputs.last_hidden_state
        hidden_states = hidden_states[:, logits_positions(logits_to_keep, hidden_states.shape[1])]
        logits = self.lm_head(self.output_projection(hidden_states))  # (B, T, C) -> (B, T, E) -> (B, T, V)

        loss = causal_lm_loss(logits, labels, self.config.vocab_size, kwargs)
        loss, aux_loss, _ = add_router_losses(
            self.config, loss, [(outputs.router_logits, attention_mask)], self.training, want_router_logits
        )

        return MoeCausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            **returned_cache(output_cache(outputs)),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            aux_loss=aux_loss,
            router_logits=outputs.router_logits if want_router_logits else None,
        )


class HfLmGPTForSequenceClassification(HfLmGPTPreTrainedModel):
    """The decoder with a classification head on the last real token (the only one that saw the whole text)."""

    def __init__(self, config: HfLmGPTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = HfLmGPTModel(config)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutputWithPast:
        """Sequence logits (B, num_labels); loss by `config.problem_type` (regression, single- or
        multi-label). The other arguments are `HfLmGPTModel.forward`'s."""
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        want_router_logits = wants_router_logits(self.config, kwargs.pop("output_router_logits", None))
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            return_dict=True,
            output_router_logits=True,
            **kwargs,
        )
        # the last real token, the only one that saw the whole text
        logits, loss = classify_last_token(
            self.score,
            self.config,
            outputs.last_hidden_state,
            attention_mask,
            input_ids,
            labels,
            num_items_in_batch,
        )
        loss, aux_loss, _ = add_router_losses(
            self.config, loss, [(outputs.router_logits, attention_mask)], self.training, want_router_logits
        )

        return MoeSequenceClassifierOutputWithPast(
            loss=loss,
            logits=logits,
            **returned_cache(output_cache(outputs)),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            aux_loss=aux_loss,
            router_logits=outputs.router_logits if want_router_logits else None,
        )


__all__ = [
    "HfLmGPTPreTrainedModel",
    "HfLmGPTModel",
    "HfLmGPTForCausalLM",
    "HfLmGPTForSequenceClassification",
]
