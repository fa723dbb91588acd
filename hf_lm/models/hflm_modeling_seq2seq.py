"""hf_lm's encoder-decoder families, T5-style (`hflm_t5`) and BART-style (`hflm_bart`), in one implementation.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
The encoder and decoder stacks, the bare model and the vocabulary head are in `hflm_seq2seq_model`,
Mask-Predict in `hflm_seq2seq_mask_predict`; this file holds the generation and classification heads
and the family classes. The encoder-decoder has the shape of the original Transformer (Vaswani et
al., 2017), T5 (Raffel et al., 2020) and BART (Lewis et al., 2020); the two families differ only in
their config defaults.

Conventions are transformers': the model takes unshifted `labels` and builds `decoder_input_ids`
by `shift_tokens_right(labels, pad_token_id, decoder_start_token_id)`; generation caches with an
`EncoderDecoderCache` (the self-attention cache grows, the cross-attention keys and values are
computed once).

Shape legend: B batch, S source length, T new target tokens, P past target tokens, C hidden size,
V vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import EncoderDecoderCache, GenerationMixin
from transformers import initialization as init
from transformers.modeling_outputs import Seq2SeqSequenceClassifierOutput
from transformers.utils import can_return_tuple

from .hflm_common import attention_kwargs, cache_argument, output_cache, returned_cache
from .hflm_configuration_seq2seq import HfLmBartConfig, HfLmEncoderDecoderConfig, HfLmT5Config
from .hflm_inputs import logits_positions
from .hflm_losses import (
    classify_last_token,
    seq2seq_decoder_inputs,
    seq2seq_lm_loss,
    shift_tokens_right,
    wants_router_logits,
)
from .hflm_pretrained import SEQ2SEQ_PIPELINES
from .hflm_seq2seq_mask_predict import _Seq2SeqForMaskPredict
from .hflm_seq2seq_model import (
    HfLmSeq2SeqPreTrainedModel,
    Seq2SeqMoEOutput,
    _Seq2SeqModel,
    _Seq2SeqWithLMHead,
    passed_through,
)


class _Seq2SeqForConditionalGeneration(_Seq2SeqWithLMHead):
    """The encoder-decoder with an LM head on the decoder, generating left to right.

    The family heads list `GenerationMixin` among their own bases, where transformers (and its test
    mixins) look for it.
    """

    def _prepare_decoder_input_ids_for_generation(
        self, batch_size, model_input_name, model_kwargs, decoder_start_token_id, device=None
    ):
        """transformers' rule (prepend the start token, and a 1 to `decoder_attention_mask`, unless
        a row starts with it), judged as if the ids under the mask were the pad token.

        transformers reads column 0's id even where `decoder_attention_mask` marks it as padding, so
        the ids the mask hides decided whether a start token was prepended: a left-padded T5 prompt
        (T5's pad is its start token) got none with pad ids there and one with other ids, and a
        continuation from the returned cache then diverged from one call. Judging the pad-filled ids
        gives transformers' result on well-formed prompts and makes the hidden ids irrelevant; the
        caller's ids are kept in the output.
        """
        mask = model_kwargs.get("decoder_attention_mask")
        ids = model_kwargs.get("decoder_input_ids")
        pad = self.config.pad_token_id
        if not (torch.is_tensor(mask) and torch.is_tensor(ids)) or mask.shape != ids.shape or pad is None:
            return super()._prepare_decoder_input_ids_for_generation(
                batch_size, model_input_name, model_kwargs, decoder_start_token_id, device
            )
        judged = {**model_kwargs, "decoder_input_ids": ids.masked_fill(mask.to(ids.device) == 0, pad)}
        decided, model_kwargs = super()._prepare_decoder_input_ids_for_generation(
            batch_size, model_input_name, judged, decoder_start_token_id, device
        )
        prepended = decided.shape[1] - ids.shape[1]  # 0 or 1: the start token
        return torch.cat([decided[:, :prepended], ids], dim=-1), model_kwargs  # (B, prepended + T)

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
        past_key_values = cache_argument(past_key_values, kwargs)
        n_items = kwargs.get("num_items_in_batch")
        want_router_logits = wants_router_logits(self.config, output_router_logits)
        decoder_input_ids = seq2seq_decoder_inputs(
            self, labels, input_ids, encoder_outputs, decoder_input_ids, decoder_inputs_embeds, n_items
        )
        if decoder_input_ids is None and decoder_inputs_embeds is None:
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
            **attention_kwargs(kwargs),
        )
        hidden_states = outputs.last_hidden_state  # (B, T, C)
        hidden_states = hidden_states[:, logits_positions(logits_to_keep, hidden_states.shape[1])]
        logits = self.token_logits(hidden_states)  # (B, T, V)
        shaped_like = "the decoder's logits (the decoder inputs, all positions: `logits_to_keep` 0)"
        loss = seq2seq_lm_loss(logits, labels, n_items, shaped_like)
        loss, aux_loss, (encoder_aux_loss, decoder_aux_loss) = self._add_router_losses(
            loss, outputs, attention_mask, decoder_attention_mask, want_router_logits
        )
        return Seq2SeqMoEOutput(
            loss=loss,
            aux_loss=aux_loss,
            encoder_aux_loss=encoder_aux_loss,
            decoder_aux_loss=decoder_aux_loss,
            encoder_router_logits=outputs.encoder_router_logits if want_router_logits else None,
            decoder_router_logits=outputs.decoder_router_logits if want_router_logits else None,
            logits=logits,
            **returned_cache(output_cache(outputs)),
            **passed_through(outputs),
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
        decoder_mask = kwargs.get("decoder_attention_mask")
        if (
            decoder_mask is None
            and kwargs.get("decoder_input_ids") is None
            and kwargs.get("decoder_inputs_embeds") is None
        ):
            # the decoder read the source shifted right, under its padding: its router loss skips that too
            decoder_mask = self.model._source_as_decoder_input(input_ids, attention_mask)[1]
        loss, _, _ = self._add_router_losses(loss, outputs, attention_mask, decoder_mask)
        return Seq2SeqSequenceClassifierOutput(
            loss=loss,
            logits=logits,
            **passed_through(outputs),
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
        elif role == "qkv":  # the attention scale lives in the queries' init (rows grouped by key/value head)
            g = cfg.num_attention_heads // cfg.num_key_value_heads
            rows = module.weight.view(cfg.num_key_value_heads, g + 2, cfg.head_dim, -1)  # (nkv, g+2, hs, C)
            init.normal_(rows[:, :g], mean=0.0, std=(d * cfg.head_dim) ** -0.5)
            init.normal_(rows[:, g:], mean=0.0, std=d**-0.5)
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


class HfLmT5ForConditionalGeneration(
    HfLmT5PreTrainedModel, _Seq2SeqForConditionalGeneration, GenerationMixin
):
    """T5-style encoder-decoder with the LM head (`AutoModelForSeq2SeqLM`)."""

    _base_class = HfLmT5Model
    _hflm_pipelines = SEQ2SEQ_PIPELINES


class HfLmT5ForSequenceClassification(HfLmT5PreTrainedModel, _Seq2SeqForSequenceClassification):
    """T5-style encoder-decoder with a classification head on the last decoder state."""

    _base_class = HfLmT5Model


class HfLmT5ForMaskPredict(HfLmT5PreTrainedModel, _Seq2SeqForMaskPredict):
    """T5-style conditional masked LM with length prediction, decoded by Mask-Predict (`AutoModelForMaskedLM`)."""

    _base_class = HfLmT5Model


class HfLmBartPreTrainedModel(HfLmSeq2SeqPreTrainedModel):
    config_class = HfLmBartConfig


class HfLmBartModel(HfLmBartPreTrainedModel, _Seq2SeqModel):
    """BART-style encoder-decoder without a head."""


class HfLmBartForConditionalGeneration(
    HfLmBartPreTrainedModel, _Seq2SeqForConditionalGeneration, GenerationMixin
):
    """BART-style encoder-decoder with the LM head (`AutoModelForSeq2SeqLM`)."""

    _base_class = HfLmBartModel
    _hflm_pipelines = SEQ2SEQ_PIPELINES


class HfLmBartForSequenceClassification(HfLmBartPreTrainedModel, _Seq2SeqForSequenceClassification):
    """BART-style encoder-decoder with a classification head on the last decoder state."""

    _base_class = HfLmBartModel


class HfLmBartForMaskPredict(HfLmBartPreTrainedModel, _Seq2SeqForMaskPredict):
    """BART-style conditional masked LM with length prediction, decoded by Mask-Predict (`AutoModelForMaskedLM`)."""

    _base_class = HfLmBartModel


__all__ = [
    "shift_tokens_right",
    "HfLmT5PreTrainedModel",
    "HfLmT5Model",
    "HfLmT5ForConditionalGeneration",
    "HfLmT5ForSequenceClassification",
    "HfLmT5ForMaskPredict",
    "HfLmBartPreTrainedModel",
    "HfLmBartModel",
    "HfLmBartForConditionalGeneration",
    "HfLmBartForSequenceClassification",
    "HfLmBartForMaskPredict",
]
