"""hf_lm's encoder-decoder families, T5-style (`hflm_t5`) and BART-style (`hflm_bart`), in one implementation.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
The blocks live in `hflm_blocks`; this file composes an encoder stack (bidirectional) and a
decoder stack (causal, with cross-attention to the last encoder layer) in the shape of the
original Transformer (Vaswani et al., 2017), T5 (Raffel et al., 2020) and BART (Lewis et al., 2020).
The two families differ only in their config defaults.

Conventions are transformers': the model takes unshifted `labels` and builds `decoder_input_ids`
by `shift_tokens_right(labels, pad_token_id, decoder_start_token_id)`; generation caches with an
`EncoderDecoderCache` (the self-attention cache grows, the cross-attention keys and values are
computed once).

Shape legend: B batch, S source length, T new target tokens, P past target tokens, C hidden size,
V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import EncoderDecoderCache, GenerationMixin
from transformers import initialization as init
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    Seq2SeqSequenceClassifierOutput,
)
from transformers.utils import can_return_tuple

from .hflm_blocks import (
    TransformerStack,
    VocabProjection,
    router_losses,
)
from .hflm_common import (
    SEQ2SEQ_PIPELINES,
    HfLmPreTrainedModel,
    check_seq2seq_labels,
    classify_last_token,
    embed_inputs,
    lm_loss,
    logits_positions,
    shift_tokens_right,
)
from .hflm_configuration_seq2seq import HfLmBartConfig, HfLmEncoderDecoderConfig, HfLmT5Config


@dataclass
class MoEEncoderOutput(BaseModelOutput):
    """The encoder's `BaseModelOutput` plus `router_logits`, one (B*S, E) tensor per sparse layer
    (None without a mixture of experts), which the heads' load-balancing loss reads."""

    router_logits: tuple[torch.Tensor, ...] | None = None


@dataclass
class Seq2SeqMoEModelOutput(Seq2SeqModelOutput):
    """`Seq2SeqModelOutput` plus SwitchTransformers' `encoder_router_logits` and
    `decoder_router_logits` (with `output_router_logits`)."""

    encoder_router_logits: tuple[torch.Tensor, ...] | None = None
    decoder_router_logits: tuple[torch.Tensor, ...] | None = None


@dataclass
class Seq2SeqMoEOutput(Seq2SeqLMOutput):
    """`Seq2SeqLMOutput` plus SwitchTransformers' router outputs, with `output_router_logits`: the
    unweighted load-balancing losses of each stack (`encoder_aux_loss`, `decoder_aux_loss`), their sum
    `aux_loss` (Mixtral's name) and the router logits."""

    aux_loss: torch.Tensor | None = None
    encoder_aux_loss: torch.Tensor | None = None
    decoder_aux_loss: torch.Tensor | None = None
    encoder_router_logits: tuple[torch.Tensor, ...] | None = None
    decoder_router_logits: tuple[torch.Tensor, ...] | None = None


class HfLmSeq2SeqStack(nn.Module, TransformerStack):
    """An encoder stack (bidirectional) or a decoder stack (causal + cross-attention): a `TransformerStack`.

    The token embedding is owned by the parent model and shared by both stacks (and the LM head):
    the stack keeps a plain reference to it, not a registered submodule, so the weights have one
    name in the state dict. `generate()` calls the encoder stack directly (`get_encoder()`).
    """

    main_input_name = "input_ids"

    def __init__(self, config: HfLmEncoderDecoderConfig, embed_tokens: nn.Embedding, is_decoder: bool):
        super().__init__()
        self.config = config
        self.is_decoder = is_decoder
        object.__setattr__(self, "embed_tokens", embed_tokens)  # shared, not registered (see above)
        self.embed_scale = math.sqrt(config.hidden_size) if config.scale_embedding else 1.0
        self.build_stack(
            config,
            config.decoder_layers if is_decoder else config.num_hidden_layers,
            is_causal=is_decoder,
            cross_attention=is_decoder,
            embedding_norm=config.embedding_norm,
            final_dropout=True,  # T5 drops out the final norm's output too
        )

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput | BaseModelOutputWithPastAndCrossAttentions:
        """Run the stack.

        Args:
            input_ids: (B, T) token ids (source ids for the encoder, decoder inputs for the decoder).
            attention_mask: (B, P + T) 1 for tokens, 0 for padding (or, with a static cache, its
                full length: the empty slots 0).
            position_ids: (B|1, T); by default each real token's index among the real tokens.
            encoder_hidden_states: (B, S, C) the encoder output (decoder only).
            encoder_attention_mask: (B, S) the source padding mask (decoder only).
            past_key_values: an `EncoderDecoderCache` (decoder only).
        """
        # the user passed the decoder's arguments to the model under their `decoder_` names
        prefix = "decoder_" if self.is_decoder else ""
        scale = self.embed_scale if input_ids is not None else 1.0  # given embeddings are used as they are
        names = (f"{prefix}input_ids", f"{prefix}inputs_embeds")
        inputs_embeds = embed_inputs(
            input_ids, inputs_embeds, self.embed_tokens, self.config.vocab_size, names=names
        )
        out = self.run_stack(
            inputs_embeds * scale,  # (B, T, C)
            attention_mask,
            position_ids,
            past_key_values,
            use_cache,
            output_attentions,
            output_hidden_states,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            names_prefix=prefix,
            too_long_advice=f"Truncate the {'target' if self.is_decoder else 'source'} or generate fewer tokens.",
        )
        if self.is_decoder:
            return out
        return MoEEncoderOutput(
            last_hidden_state=out.last_hidden_state,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            router_logits=out.router_logits,
        )


class HfLmSeq2SeqPreTrainedModel(HfLmPreTrainedModel):
    config_class = HfLmEncoderDecoderConfig
    config: HfLmEncoderDecoderConfig
    _skip_keys_device_placement = ["past_key_values"]
    # a decoding step with an EncoderDecoderCache of StaticCaches traces as one graph
    # (tests/test_static_cache.py): no host-side check runs under torch.compile
    _can_compile_fullgraph = True

    def _start_token_id(self) -> int:
        start = self.config.decoder_start_token_id
        if start is None:
            raise ValueError("config.decoder_start_token_id is not set: the decoder needs a start token.")
        return start

    def _router_losses(self, outputs, attention_mask, decoder_attention_mask) -> dict:
        """Each stack's load-balancing loss, their sum and the weighted router loss to add to the
        LM loss (as SwitchTransformers sums its encoder's and decoder's); {} without sparse layers."""
        found, weighted = {}, 0
        for name, logits, mask in (
            ("encoder", outputs.encoder_router_logits, attention_mask),
            ("decoder", outputs.decoder_router_logits, decoder_attention_mask),
        ):
            if logits:
                found[name], stack_loss = router_losses(self.config, logits, mask)
                weighted = weighted + stack_loss
        if not found:
            return {}
        return {**found, "aux_loss": sum(found.values()), "loss": weighted}


class _Seq2SeqModel(HfLmSeq2SeqPreTrainedModel):
    """Shared embedding -> encoder stack, and decoder stack attending to the encoder's output."""

    def __init__(self, config: HfLmEncoderDecoderConfig):
        super().__init__(config)
        # a padding row is frozen at zero; T5 starts decoding from <pad>, so there it must learn
        frozen_pad = config.pad_token_id if config.pad_token_id != config.decoder_start_token_id else None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=frozen_pad)
        self.encoder = HfLmSeq2SeqStack(config, self.embed_tokens, is_decoder=False)
        self.decoder = HfLmSeq2SeqStack(config, self.embed_tokens, is_decoder=True)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value
        object.__setattr__(self.encoder, "embed_tokens", value)
        object.__setattr__(self.decoder, "embed_tokens", value)

    def get_encoder(self):
        return self.encoder

    def get_decoder(self):
        return self.decoder

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs=None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_router_logits: bool | None = None,
        **kwargs,
    ) -> Seq2SeqMoEModelOutput:
        """Encode the source (unless `encoder_outputs` are given) and decode the target prefix.

        Args:
            input_ids: (B, S) source ids; attention_mask: (B, S) source padding mask.
            decoder_input_ids: (B, T) decoder inputs (the shifted targets);
            decoder_attention_mask: (B, P + T) target padding mask.
            encoder_outputs: a `BaseModelOutput` (or tuple) from `get_encoder()`, reused by `generate()`.
            past_key_values: an `EncoderDecoderCache` (made when `use_cache`).
            output_router_logits: return both stacks' router logits (`num_local_experts`); defaults
                to `config.output_router_logits`.
        """
        if output_router_logits is None:
            output_router_logits = self.config.output_router_logits
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
            )
        elif isinstance(encoder_outputs, (tuple, list)):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        elif not isinstance(encoder_outputs, BaseModelOutput):
            raise ValueError(
                "`encoder_outputs` must be the encoder's output (a `BaseModelOutput` or its tuple), "
                f"got {type(encoder_outputs).__name__}."
            )
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            if input_ids is None:
                raise ValueError(
                    "Pass `decoder_input_ids` (or `labels`, from which the conditional-generation model builds "
                    "them, or `input_ids`, which the decoder then reads shifted right)."
                )
            # feature extraction from the text alone, as transformers' BartModel does it: the decoder
            # reads the same text shifted right, under the source's padding mask
            decoder_input_ids = shift_tokens_right(
                input_ids, self.config.pad_token_id, self._start_token_id()
            )
            if decoder_attention_mask is None:
                decoder_attention_mask = attention_mask
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            position_ids=decoder_position_ids,
            inputs_embeds=decoder_inputs_embeds,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        return Seq2SeqMoEModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            past_key_values=decoder_outputs.past_key_values,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
            # an encoder output given by the caller (generate()) may be a plain BaseModelOutput
            encoder_router_logits=getattr(encoder_outputs, "router_logits", None)
            if output_router_logits
            else None,
            decoder_router_logits=decoder_outputs.router_logits if output_router_logits else None,
        )


class _Seq2SeqForConditionalGeneration(HfLmSeq2SeqPreTrainedModel, GenerationMixin):
    """The encoder-decoder with an LM head on the decoder (tied to the shared embedding by default)."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    # the loss is the model's own, on unshifted labels (transformers would map this class-name suffix
    # to a causal loss that shifts again)
    accepts_loss_kwargs = True

    def __init__(self, config: HfLmEncoderDecoderConfig):
        super().__init__(config)
        self.model = self._base_class(config)
        self.lm_head = VocabProjection(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_encoder(self):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def _reorder_cache(self, past_key_values, beam_idx: torch.LongTensor):
        """Beam search's cache reordering (the hook `generate()` calls when a model defines it).

        `beam_idx` only permutes the beams of each source among themselves, and all beams of one
        source hold the same encoder keys and values: reordering the cross-attention cache would
        copy identical tensors at every step. Only the self-attention cache is reordered.
        """
        if isinstance(past_key_values, EncoderDecoderCache):
            past_key_values.self_attention_cache.reorder_cache(beam_idx)
        else:
            past_key_values.reorder_cache(beam_idx)
        return past_key_values

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """What `DataCollatorForSeq2Seq(model=...)` calls to add `decoder_input_ids` to a batch."""
        return shift_tokens_right(labels, self.config.pad_token_id, self._start_token_id())

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs=None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        logits_to_keep: int = 0,
        output_router_logits: bool | None = None,
        **kwargs,
    ) -> Seq2SeqMoEOutput:
        """Next-token logits of the decoder (B, T, V), and the loss when `labels` are given.

        Args:
            labels: (B, T) target ids, NOT shifted (-100 ignored): the decoder inputs are built from
                them by `shift_tokens_right` when `decoder_input_ids` are not given, and position t
                is scored against `labels[:, t]`. With `num_items_in_batch` (from `Trainer`) the
                loss is a sum divided by it, so gradient accumulation equals one big batch.
            output_router_logits: return the router logits and load-balancing losses of both stacks.
                With a mixture of experts and labels, the training-mode loss includes
                `router_aux_loss_coef` times the encoder's plus the decoder's load-balancing loss (and
                the z-losses), as Switch does; in eval mode the loss is the LM's alone.
        """
        n_items = kwargs.get("num_items_in_batch")
        want_router_logits = (
            self.config.output_router_logits if output_router_logits is None else output_router_logits
        )
        if labels is not None:
            check_seq2seq_labels(labels, input_ids, encoder_outputs, self.config.vocab_size, n_items)
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        elif decoder_input_ids is None and decoder_inputs_embeds is None:
            # the bare model would decode the source itself (feature extraction): here that is a
            # forgotten `labels`, not a request for logits over the source
            raise ValueError(
                "Pass `decoder_input_ids` (or `labels`, from which the conditional-generation model builds them)."
            )
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            decoder_position_ids=decoder_position_ids,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            output_router_logits=True,  # the load-balancing loss needs them
            return_dict=True,
        )
        hidden_states = outputs.last_hidden_state  # (B, T, C)
        if self.config.scale_decoder_output:
            # T5 ties the head to embeddings that were not scaled at the input: rescale here
            hidden_states = hidden_states * self.config.hidden_size**-0.5
        hidden_states = hidden_states[:, logits_positions(logits_to_keep, hidden_states.shape[1])]
        logits = self.lm_head(hidden_states)  # (B, T, V)
        loss = None
        if labels is not None:
            if labels.shape != logits.shape[:2]:
                raise ValueError(
                    f"`labels` must have shape {tuple(logits.shape[:2])} like the decoder's logits (the decoder "
                    f"inputs, all positions: `logits_to_keep` 0), got {tuple(labels.shape)}."
                )
            loss = lm_loss(logits, labels, shift=False, num_items_in_batch=n_items)
        aux = {}
        if labels is not None or want_router_logits:
            aux = self._router_losses(outputs, attention_mask, decoder_attention_mask)
        if aux and loss is not None and self.training:  # a regularizer: eval losses stay the LM's
            loss = loss + aux["loss"]
        if not want_router_logits:
            aux = {}  # returned on request, as in transformers
        return Seq2SeqMoEOutput(
            loss=loss,
            aux_loss=aux.get("aux_loss"),
            encoder_aux_loss=aux.get("encoder"),
            decoder_aux_loss=aux.get("decoder"),
            encoder_router_logits=outputs.encoder_router_logits if want_router_logits else None,
            decoder_router_logits=outputs.decoder_router_logits if want_router_logits else None,
            logits=logits,
            past_key_values=outputs.past_key_values,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


class _Seq2SeqForSequenceClassification(HfLmSeq2SeqPreTrainedModel):
    """BART's classifier: the whole text goes to both stacks; the decoder state of the last EOS
    (which has seen every token) feeds a dense-tanh-dense head."""

    def __init__(self, config: HfLmEncoderDecoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = self._base_class(config)
        p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout
        self.classifier = nn.Sequential(
            nn.Dropout(p),
            nn.Linear(config.hidden_size, config.hidden_size),
            nn.Tanh(),
            nn.Dropout(p),
            nn.Linear(config.hidden_size, config.num_labels),
        )
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqSequenceClassifierOutput:
        """Logits (B, num_labels) from the decoder state at the last real token of `input_ids`.

        Without `decoder_input_ids` the decoder reads the same text, shifted right (BART). The other
        arguments are the bare model's (`decoder_input_ids`, `decoder_attention_mask`, `output_*`)."""
        if input_ids is None:
            raise ValueError("Sequence classification needs `input_ids`.")
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        kwargs["output_router_logits"] = True  # the load-balancing loss needs them
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=True, **kwargs
        )
        # the decoder state at the last real token (BART's last EOS)
        logits, loss = classify_last_token(
            self.classifier,
            self.config,
            outputs.last_hidden_state,
            attention_mask,
            input_ids,
            labels,
            num_items_in_batch,
        )
        aux = self._router_losses(outputs, attention_mask, kwargs.get("decoder_attention_mask"))
        if aux and loss is not None and self.training:
            loss = loss + aux["loss"]
        return Seq2SeqSequenceClassifierOutput(
            loss=loss,
            logits=logits,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


# The two families: the same classes with their own config (Auto classes key on the config class).


class HfLmT5PreTrainedModel(HfLmSeq2SeqPreTrainedModel):
    config_class = HfLmT5Config

    def _init_weights(self, module):
        """T5's initialization (Mesh TensorFlow, as transformers' T5 does it), not GPT-2's.

        T5 folds the 1/sqrt(head_dim) attention scale into the query init and rescales the decoder
        output by hidden_size**-0.5 before the tied head, assuming N(0, 1) embeddings. Under GPT-2's
        N(0, 0.02) its attention logits and output logits start ~50x too small and training from
        scratch crawls (a Multi30k run stayed near the unigram loss for hundreds of steps).
        """
        super()._init_weights(module)
        cfg = self.config
        d, ff, q_size = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads * cfg.head_dim
        role = getattr(module, "init_role", None)
        if isinstance(module, nn.Embedding):
            std = d**-0.5 if role == "relative_bias" else 1.0
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None:
                init.zeros_(module.weight[module.padding_idx])
        elif role == "qkv":  # rows [0, q_size) are the queries: the attention scale lives in their init
            init.normal_(module.weight[:q_size], mean=0.0, std=(d * cfg.head_dim) ** -0.5)
            init.normal_(module.weight[q_size:], mean=0.0, std=d**-0.5)
        elif role in ("q", "kv", "attn_out", "ff_in", "ff_out"):
            std = {
                "q": (d * cfg.head_dim) ** -0.5,
                "kv": d**-0.5,
                "attn_out": q_size**-0.5,
                "ff_in": d**-0.5,
                "ff_out": ff**-0.5,
            }[role]
            init.normal_(module.weight, mean=0.0, std=std)


class HfLmT5Model(HfLmT5PreTrainedModel, _Seq2SeqModel):
    """T5-style encoder-decoder without a head."""


class HfLmT5ForConditionalGeneration(HfLmT5PreTrainedModel, _Seq2SeqForConditionalGeneration):
    """T5-style encoder-decoder with the LM head (`AutoModelForSeq2SeqLM`)."""

    _base_class = HfLmT5Model
    _hflm_pipelines = SEQ2SEQ_PIPELINES


class HfLmT5ForSequenceClassification(HfLmT5PreTrainedModel, _Seq2SeqForSequenceClassification):
    """T5-style encoder-decoder with a classification head on the last decoder state."""

    _base_class = HfLmT5Model


class HfLmBartPreTrainedModel(HfLmSeq2SeqPreTrainedModel):
    config_class = HfLmBartConfig


class HfLmBartModel(HfLmBartPreTrainedModel, _Seq2SeqModel):
    """BART-style encoder-decoder without a head."""


class HfLmBartForConditionalGeneration(HfLmBartPreTrainedModel, _Seq2SeqForConditionalGeneration):
    """BART-style encoder-decoder with the LM head (`AutoModelForSeq2SeqLM`)."""

    _base_class = HfLmBartModel
    _hflm_pipelines = SEQ2SEQ_PIPELINES


class HfLmBartForSequenceClassification(HfLmBartPreTrainedModel, _Seq2SeqForSequenceClassification):
    """BART-style encoder-decoder with a classification head on the last decoder state."""

    _base_class = HfLmBartModel


__all__ = [
    "shift_tokens_right",
    "HfLmT5PreTrainedModel",
    "HfLmT5Model",
    "HfLmT5ForConditionalGeneration",
    "HfLmT5ForSequenceClassification",
    "HfLmBartPreTrainedModel",
    "HfLmBartModel",
    "HfLmBartForConditionalGeneration",
    "HfLmBartForSequenceClassification",
]
