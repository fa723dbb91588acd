"""hf_lm's encoder-decoder families, T5-style (`hflm_t5`) and BART-style (`hflm_bart`), in one implementation.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
The blocks live in `hflm_attention`, `hflm_positions`, `hflm_layers` and `hflm_stack`; this file
composes an encoder stack (bidirectional) and a
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
import torch.nn.functional as F
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
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, can_return_tuple

from .hflm_attention import AttentionBackends
from .hflm_common import (
    _positive_int,
    attention_kwargs,
    cache_argument,
    output_cache,
    returned_cache,
)
from .hflm_configuration_seq2seq import HfLmBartConfig, HfLmEncoderDecoderConfig, HfLmT5Config
from .hflm_inputs import (
    check_input_ids,
    embed_inputs,
    logits_positions,
)
from .hflm_layers import (
    VocabProjection,
    add_router_losses,
)
from .hflm_losses import (
    check_seq2seq_labels,
    classify_last_token,
    lm_loss,
    shift_tokens_right,
    wants_router_logits,
)
from .hflm_pretrained import (
    SEQ2SEQ_PIPELINES,
    HfLmPreTrainedModel,
)
from .hflm_stack import (
    TransformerStack,
)

# `config.decoder_attention` -> whether the decoder's self-attention is causal (and caches)
DECODER_IS_CAUSAL = {"causal": True, "bidirectional": False}


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


def _drop_shared_embedding(stack: nn.Module, state_dict: dict, prefix: str, local_metadata: dict) -> None:
    """State-dict hook of a stack: the shared embedding is saved once, under the parent's name."""
    for key in [key for key in state_dict if key.startswith(prefix + "token_embedding.")]:
        del state_dict[key]


def _read_shared_embedding(stack: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    """Load-state-dict pre-hook of a stack: its (absent) `token_embedding.*` entries are the shared
    module's own tensors, already loaded under the parent's name, so nothing is reported missing."""
    for name, tensor in stack.token_embedding.state_dict(keep_vars=True).items():
        state_dict.setdefault(f"{prefix}token_embedding.{name}", tensor)


class HfLmSeq2SeqStack(nn.Module, TransformerStack):
    """An encoder stack (bidirectional) or a decoder stack (causal + cross-attention): a `TransformerStack`.

    The token embedding is owned by the parent model (`embed_tokens`) and shared by both stacks (and
    the LM head). Each stack registers that same module as `token_embedding`, so the stack alone holds
    every weight it reads: torch.export (transformers' seq2seq ExecuTorch recipe exports the encoder
    and the decoder as separate programs) and module-wide moves see it. The weights keep one name in
    checkpoints, the parent's: a stack leaves `token_embedding.*` out of its state dict and, when
    loading, reads them from the shared module, which the parent loaded first. (Not `embed_tokens`
    here: accelerate's device-map inference matches module names as substrings, and would take
    `encoder.embed_tokens` for a part of the parent's `embed_tokens`.) `generate()` calls the encoder
    stack directly (`get_encoder()`).
    """

    main_input_name = "input_ids"

    def __init__(self, config: HfLmEncoderDecoderConfig, embed_tokens: nn.Embedding, is_decoder: bool):
        super().__init__()
        self.config = config
        self.is_decoder = is_decoder
        self.token_embedding = embed_tokens  # shared with the parent and the other stack (see above)
        self.register_state_dict_post_hook(_drop_shared_embedding)
        self.register_load_state_dict_pre_hook(_read_shared_embedding)
        self.embed_scale = math.sqrt(config.hidden_size) if config.scale_embedding else 1.0
        self.build_stack(
            config,
            config.decoder_layers if is_decoder else config.num_hidden_layers,
            is_causal=is_decoder and DECODER_IS_CAUSAL[config.decoder_attention],
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
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput | BaseModelOutputWithPastAndCrossAttentions:
        """Run the stack.

        Args:
            input_ids: (B, T) token ids (source ids for the encoder, decoder inputs for the decoder).
            attention_mask: (B, P + T) 1 for tokens, 0 for padding (or, with a static cache, its
                full length: the empty slots 0).
            position_ids: (B|1, T); by default each real token's index among the real tokens.
            encoder_hidden_states: (B, S, C) the encoder output (decoder only).
            encoder_attention_mask: (B, S) the source padding mask (decoder only).
            past_key_values: an `EncoderDecoderCache` (decoder only); also accepted as `cache`.
            kwargs: transformers' attention kwargs, passed to the self-attention backend.
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        # the user passed the decoder's arguments to the model under their `decoder_` names
        prefix = "decoder_" if self.is_decoder else ""
        scale = self.embed_scale if input_ids is not None else 1.0  # given embeddings are used as they are
        names = (f"{prefix}input_ids", f"{prefix}inputs_embeds")
        inputs_embeds = embed_inputs(
            input_ids, inputs_embeds, self.token_embedding, self.config.vocab_size, names=names
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
            **kwargs,
        )
        if self.is_decoder:
            return out
        return MoEEncoderOutput(
            last_hidden_state=out.last_hidden_state,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            router_logits=out.router_logits,
        )


class HfLmSeq2SeqPreTrainedModel(AttentionBackends, HfLmPreTrainedModel):
    config_class = HfLmEncoderDecoderConfig
    config: HfLmEncoderDecoderConfig
    # a decoding step with an EncoderDecoderCache of StaticCaches traces as one graph
    # (tests/test_static_cache.py): no host-side check runs under torch.compile
    _can_compile_fullgraph = True

    def _source_as_decoder_input(self, input_ids, attention_mask):
        """The source as the decoder reads it when given no target (BART's classifier and feature
        extraction): the start token, then the source shifted one step right, within each row's real
        tokens, and its (B, T) mask. A left-padded row keeps its padding in front and gets the start
        token where its first real token was, so it reads what it reads alone (relative buckets
        included, which count key indices): [p p s a b] for the source [p p a b c]."""
        pad, start = self.config.pad_token_id, self._start_token_id()
        shifted = shift_tokens_right(input_ids, pad, start)  # (B, T)
        if attention_mask is None:
            return shifted, None
        mask = attention_mask.to(input_ids.device).long()
        idx = torch.arange(input_ids.shape[1], device=input_ids.device)[None]  # (1, T)
        first = mask.argmax(dim=1, keepdim=True)  # (B, 1) each row's first real token
        decoder_ids = torch.where(idx == first, start, torch.where(idx < first, pad, shifted))
        follows_a_real_token = F.pad(mask[:, :-1], (1, 0))  # (B, T): token t-1 is real
        decoder_mask = ((idx == first) | (follows_a_real_token == 1)).to(attention_mask.dtype)
        return decoder_ids, decoder_mask

    def _start_token_id(self) -> int:
        start = self.config.decoder_start_token_id
        if start is None:
            raise ValueError("config.decoder_start_token_id is not set: the decoder needs a start token.")
        return start

    def _add_router_losses(self, loss, outputs, mask, decoder_mask, wanted=False):
        """`add_router_losses` of the encoder's and the decoder's sparse layers."""
        stacks = [(outputs.encoder_router_logits, mask), (outputs.decoder_router_logits, decoder_mask)]
        return add_router_losses(self.config, loss, stacks, self.training, wanted)


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
        self.embed_tokens = self.encoder.token_embedding = self.decoder.token_embedding = value

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        """transformers' {tied name: source name} map, plus the stacks' names of the shared embedding
        whatever `tie_word_embeddings` says: loading with disk offload (accelerate) reads a weight
        under the name of the module that uses it, and finds the stacks' names through this map."""
        tied = super().get_expanded_tied_weights_keys(all_submodels)
        if not all_submodels:  # with all_submodels, super() collects this map from each submodel
            for stack in ("encoder", "decoder"):
                tied[f"{stack}.token_embedding.weight"] = "embed_tokens.weight"
        return tied

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
            past_key_values: an `EncoderDecoderCache` (made when `use_cache`); also accepted as `cache`,
                transformers 5.24's name, which `generate()` then passes.
            output_router_logits: return both stacks' router logits (`num_local_experts`); defaults
                to `config.output_router_logits`.
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        output_router_logits = wants_router_logits(self.config, output_router_logits)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
                **attention_kwargs(kwargs),
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
            # reads the same text shifted right
            decoder_input_ids, source_mask = self._source_as_decoder_input(input_ids, attention_mask)
            if decoder_attention_mask is None:
                decoder_attention_mask = source_mask
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
            **attention_kwargs(kwargs),
        )
        return Seq2SeqMoEModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **returned_cache(output_cache(decoder_outputs)),
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


class _Seq2SeqWithLMHead(HfLmSeq2SeqPreTrainedModel):
    """The encoder-decoder with a vocabulary head on the decoder (tied to the shared embedding by
    default): what the autoregressive head and the Mask-Predict head share."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    # tensor parallelism: each process scores its slice of the vocabulary, the slices are gathered
    _tp_plan = {"lm_head": "colwise_gather_output"}
    # the loss is the model's own, on unshifted labels (transformers would map the class-name suffix
    # ForConditionalGeneration to a causal loss that shifts again)
    accepts_loss_kwargs = True
    # the `config.decoder_attention` the head is built for, and what to use otherwise
    _decoder_attention, _other_decoder = (
        "causal",
        "a bidirectional decoder is the Mask-Predict head's (`...ForMaskPredict`)",
    )

    def __init__(self, config: HfLmEncoderDecoderConfig):
        super().__init__(config)
        if config.decoder_attention != self._decoder_attention:
            raise ValueError(
                f"`decoder_attention` must be {self._decoder_attention!r} for {type(self).__name__}, "
                f"got {config.decoder_attention!r}: {self._other_decoder}."
            )
        self.model = self._base_class(config)
        self.lm_head = VocabProjection(config.hidden_size, config.vocab_size, bias=False)
        self._add_heads(config)
        self.post_init()

    def _add_heads(self, config: HfLmEncoderDecoderConfig) -> None:
        """Register a subclass's other heads (before `post_init` initializes them)."""

    def get_encoder(self):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    @staticmethod
    def passed_through(outputs: Seq2SeqModelOutput) -> dict:
        """The bare model's outputs a head returns as they are: both stacks' states and attentions."""
        names = ("decoder_hidden_states", "decoder_attentions", "cross_attentions")
        names += ("encoder_last_hidden_state", "encoder_hidden_states", "encoder_attentions")
        return {name: getattr(outputs, name) for name in names}

    def token_logits(self, decoder_states: torch.Tensor) -> torch.Tensor:
        """(B, T, C) decoder output -> (B, T, V) token logits."""
        if self.config.scale_decoder_output:
            # T5 ties the head to embeddings that were not scaled at the input: rescale here
            decoder_states = decoder_states * self.config.hidden_size**-0.5
        return self.lm_head(decoder_states)


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
            **attention_kwargs(kwargs),
        )
        hidden_states = outputs.last_hidden_state  # (B, T, C)
        hidden_states = hidden_states[:, logits_positions(logits_to_keep, hidden_states.shape[1])]
        logits = self.token_logits(hidden_states)  # (B, T, V)
        loss = None
        if labels is not None:
            if labels.shape != logits.shape[:2]:
                raise ValueError(
                    f"`labels` must have shape {tuple(logits.shape[:2])} like the decoder's logits (the decoder "
                    f"inputs, all positions: `logits_to_keep` 0), got {tuple(labels.shape)}."
                )
            loss = lm_loss(logits, labels, shift=False, num_items_in_batch=n_items)
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
            **self.passed_through(outputs),
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
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


# ----------------------------------------------------------------------------------------------
# Mask-Predict (Ghazvininejad et al., 2019): a conditional masked LM (CMLM). The decoder reads the
# target with some tokens replaced by `mask_token_id`, attends to all of it (no causal mask) and
# predicts every masked token at once; a length head on the mean-pooled encoder output predicts
# the target length. Decoding refines a whole translation in T parallel iterations.
# ----------------------------------------------------------------------------------------------


@dataclass
class MaskPredictOutput(ModelOutput):
    """The CMLM's output.

    Attributes:
        loss: the token loss on the masked targets plus `length_loss_factor` times the length loss.
        logits: (B, T, V) token logits at every target position (position t predicts token t: no shift).
        length_logits: (B, max_position_embeddings + 1) scores of the target lengths 0..max.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    length_logits: torch.FloatTensor | None = None
    decoder_hidden_states: tuple[torch.FloatTensor, ...] | None = None
    decoder_attentions: tuple[torch.FloatTensor, ...] | None = None
    cross_attentions: tuple[torch.FloatTensor, ...] | None = None
    encoder_last_hidden_state: torch.FloatTensor | None = None
    encoder_hidden_states: tuple[torch.FloatTensor, ...] | None = None
    encoder_attentions: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class MaskPredictGenerateOutput(ModelOutput):
    """`generate(..., return_dict_in_generate=True)` of a Mask-Predict head: the tokens and the trace.

    Attributes:
        sequences: (B, 1 + L + 1) `decoder_start_token_id`, the L target tokens, EOS, then padding
            (L the longest chosen length), like an autoregressive `generate()`.
        lengths: (B,) the chosen target lengths.
        scores: (B,) the chosen candidate's average log-probability (what picks among the length beam).
        iteration_tokens: (I, B, L) the target after each of the I iterations (padding beyond the length).
        iteration_masked: (I, B, L) bool, the positions masked (re-predicted) at each iteration.
        iteration_log_probs: (I, B, L) each token's log-probability when it was last predicted
            (the confidence that picks the next iteration's masks); 0 beyond the length.
    """

    sequences: torch.LongTensor | None = None
    lengths: torch.LongTensor | None = None
    scores: torch.FloatTensor | None = None
    iteration_tokens: torch.LongTensor | None = None
    iteration_masked: torch.BoolTensor | None = None
    iteration_log_probs: torch.FloatTensor | None = None


def mean_pool(states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """(B, S, C) -> (B, C): the mean over the real tokens (all of them when `attention_mask` is None)."""
    if attention_mask is None:
        return states.mean(dim=1)
    weights = attention_mask.to(device=states.device, dtype=states.dtype)[..., None]  # (B, S, 1)
    return (states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)


def lowest_confidence(
    log_probs: torch.Tensor, target_mask: torch.Tensor, counts: torch.Tensor
) -> torch.Tensor:
    """(B, L) bool: in each row b, the `counts[b]` real positions of lowest `log_probs` (ties: leftmost first).

    Mask-Predict's re-masking step: "we mask the n tokens with the lowest probability scores".
    """
    L = log_probs.shape[1]
    scores = log_probs.masked_fill(~target_mask, math.inf)  # padding is never chosen
    order = scores.argsort(dim=1, stable=True)  # (B, L) positions, least confident first
    ranks = torch.empty_like(order).scatter_(
        1, order, torch.arange(L, device=order.device).expand_as(order)
    )  # (B, L) each position's rank
    return ranks < counts[:, None]


def check_length_labels(length_labels, batch: int, num_lengths: int) -> None:
    """`length_labels`: (B,) integer target lengths in [0, num_lengths)."""
    if not torch.is_tensor(length_labels) or tuple(length_labels.shape) != (batch,):
        got = tuple(length_labels.shape) if torch.is_tensor(length_labels) else type(length_labels).__name__
        raise ValueError(f"`length_labels` must be a ({batch},) tensor of target lengths, got {got}.")
    if length_labels.dtype.is_floating_point or length_labels.dtype == torch.bool:
        raise ValueError(f"`length_labels` must hold integer lengths, got dtype {length_labels.dtype}.")
    if not torch.compiler.is_compiling() and bool(
        ((length_labels < 0) | (length_labels >= num_lengths)).any()
    ):
        raise ValueError(
            f"`length_labels` must be lengths in [0, max_position_embeddings + 1 = {num_lengths}), "
            f"got {length_labels.tolist()}."
        )


class _Seq2SeqForMaskPredict(_Seq2SeqWithLMHead):
    """The encoder-decoder as a conditional masked LM with a length head (Mask-Predict).

    Needs `config.decoder_attention="bidirectional"` and a `config.mask_token_id`. Training batches
    (`DataCollatorForMaskPredict` in hf_lm's training package) hold the source, `decoder_input_ids`
    (the target with a uniformly drawn number of tokens masked), `labels` (the masked tokens, -100
    elsewhere) and `length_labels` (each target's length). `generate()` runs Mask-Predict.
    """

    _decoder_attention, _other_decoder = "bidirectional", "this head is a conditional masked LM"
    # the length loss's weight: fairseq's CMLM default (`--length-loss-factor 0.1`)
    length_loss_factor = 0.1
    # ε of the token loss's label smoothing (the paper's 0.1). Set it here, not with transformers'
    # `label_smoothing_factor`: Trainer's smoother scores `logits` alone and drops the length loss
    label_smoothing = 0.0

    def _add_heads(self, config: HfLmEncoderDecoderConfig) -> None:
        if config.mask_token_id is None:
            raise ValueError(
                f"`mask_token_id` must be set for {type(self).__name__}: it marks the targets to predict."
            )
        # one class per target length 0..max_position_embeddings (the paper's length prediction)
        self.length_head = nn.Linear(config.hidden_size, config.max_position_embeddings + 1)

    def length_logits(
        self, encoder_states: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """(B, S, C) encoder output -> (B, max_position_embeddings + 1) target-length logits."""
        return self.length_head(mean_pool(encoder_states, attention_mask))

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs=None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        length_labels: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> MaskPredictOutput:
        """Token logits (B, T, V) at every target position and length logits; the loss with labels.

        Args:
            decoder_input_ids: (B, T) the target, the tokens to predict replaced by `mask_token_id`
                (NOT shifted: position t predicts token t), padded with `pad_token_id`.
            decoder_attention_mask: (B, T) 1 on the target's tokens, 0 on its padding.
            labels: (B, T) the masked positions' tokens, -100 elsewhere (the CMLM loss is on the
                masked tokens only). With `num_items_in_batch` (from `Trainer`) the token loss is a
                sum divided by it.
            length_labels: (B,) the target lengths; their cross-entropy, times `length_loss_factor`,
                is added to the loss.
        """
        n_items = kwargs.get("num_items_in_batch")
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "Pass `decoder_input_ids`: the target with the tokens to predict replaced by `mask_token_id` "
                "(hf_lm's `DataCollatorForMaskPredict` builds them with `labels` and `length_labels`)."
            )
        if labels is not None:
            check_seq2seq_labels(labels, input_ids, encoder_outputs, self.config.vocab_size, n_items)
        elif length_labels is not None:
            raise ValueError(
                "`length_labels` without `labels`: the loss would be the length loss alone. transformers' "
                "`label_smoothing_factor` does this (Trainer removes `labels` and smooths `logits` only, "
                f"dropping the length loss); set `model.label_smoothing` (used by {type(self).__name__}'s own "
                "CMLM loss) instead, as hf_lm's `MaskPredictTrainer` does."
            )
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=False,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            output_router_logits=True,  # a mixture of experts' load-balancing loss needs them
            return_dict=True,
            **attention_kwargs(kwargs),
        )
        logits = self.token_logits(outputs.last_hidden_state)  # (B, T, V)
        length_logits = self.length_logits(outputs.encoder_last_hidden_state, attention_mask)  # (B, N + 1)
        if labels is not None and labels.shape != logits.shape[:2]:
            raise ValueError(
                f"`labels` must have shape {tuple(logits.shape[:2])} like `decoder_input_ids`, got {tuple(labels.shape)}."
            )
        if length_labels is not None:
            check_length_labels(length_labels, logits.shape[0], length_logits.shape[-1])
        loss = self.cmlm_loss(logits, labels, length_logits, length_labels, n_items)
        loss, _, _ = self._add_router_losses(loss, outputs, attention_mask, decoder_attention_mask)
        return MaskPredictOutput(
            loss=loss,
            logits=logits,
            length_logits=length_logits,
            **self.passed_through(outputs),
        )

    def cmlm_loss(self, logits, labels, length_logits, length_labels, num_items_in_batch=None):
        """(Σ masked-token cross-entropy + λ · Σ length cross-entropy) / number of masked tokens.

        λ = `length_loss_factor`; the token cross-entropy has `label_smoothing`. Both sums are divided
        by one count (`num_items_in_batch`, from `Trainer`, when given: the masked tokens of the whole
        accumulated batch), so gradient accumulation equals one big batch for the length term too.
        None without labels (`forward` refuses `length_labels` alone).
        """
        if labels is None:
            return None
        count = labels.ne(-100).sum()
        total = lm_loss(
            logits, labels, shift=False, num_items_in_batch=1, label_smoothing=self.label_smoothing
        )
        if length_labels is not None:
            length_ce = F.cross_entropy(
                length_logits.float(), length_labels.to(length_logits.device).long(), reduction="sum"
            )
            total = total + self.length_loss_factor * length_ce
        if num_items_in_batch is not None:
            count = num_items_in_batch
        if torch.is_tensor(count):
            count = count.to(total.device).reshape(())
        return total / count

    def _predict(self, encoder_states, attention_mask, tokens, target_mask) -> torch.Tensor:
        """(N, L, V) fp32 log-probabilities of the decoder reading `tokens` (N, L) (masks included).

        The pad and mask tokens are never predicted (their probability is 0)."""
        outputs = self.model(
            attention_mask=attention_mask,
            encoder_outputs=BaseModelOutput(last_hidden_state=encoder_states),
            decoder_input_ids=tokens,
            decoder_attention_mask=target_mask.long(),
            use_cache=False,
            return_dict=True,
        )
        logits = self.token_logits(outputs.last_hidden_state).float()  # (N, L, V)
        banned = [t for t in (self.config.pad_token_id, self.config.mask_token_id) if t is not None]
        banned = torch.tensor(banned, dtype=torch.long, device=logits.device)
        return logits.index_fill(-1, banned, -math.inf).log_softmax(dim=-1)

    def _length_candidates(self, length_logits: torch.Tensor, length_beam: int, max_new_tokens: int):
        """(B, ℓ) the ℓ most likely target lengths in [1, max_new_tokens], most likely first."""
        scores = length_logits.float().clone()  # (B, N + 1)
        scores[:, 0] = -math.inf  # an empty translation is never a candidate
        scores[:, max_new_tokens + 1 :] = -math.inf
        return scores.topk(length_beam, dim=-1).indices

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        num_iterations: int = 10,
        length_beam: int = 1,
        max_new_tokens: int | None = None,
        return_dict_in_generate: bool = False,
    ) -> torch.LongTensor | MaskPredictGenerateOutput:
        """Mask-Predict decoding (Ghazvininejad et al., 2019, section 3).

        The length head proposes the `length_beam` most likely target lengths per source; for each
        candidate, iteration 0 masks every target token and predicts all of them at once (argmax);
        iteration t = 1..T-1 re-masks the n = L·(T−t)/T tokens of lowest probability and re-predicts
        them, keeping the others and their probabilities. Among a source's candidates the one with
        the highest average log-probability wins. The decoder runs T times per candidate, whatever L.

        Args:
            input_ids: (B, S) source ids; attention_mask: (B, S) source padding mask.
            num_iterations: T.
            length_beam: ℓ, the length candidates decoded per source.
            max_new_tokens: the longest target considered (default and at most `max_position_embeddings`).
            return_dict_in_generate: return a `MaskPredictGenerateOutput` (with each iteration's
                tokens, masks and confidences) instead of the sequences.

        Returns:
            (B, 1 + L + 1) `decoder_start_token_id`, the tokens, EOS, padding.
        """
        cfg = self.config
        max_new_tokens = cfg.max_position_embeddings if max_new_tokens is None else max_new_tokens
        for name, value in (("num_iterations", num_iterations), ("length_beam", length_beam)):
            _positive_int(name, value)
        _positive_int("max_new_tokens", max_new_tokens)
        if max_new_tokens > cfg.max_position_embeddings or length_beam > max_new_tokens:
            raise ValueError(
                f"Need length_beam ({length_beam}) <= max_new_tokens ({max_new_tokens}) <= "
                f"max_position_embeddings ({cfg.max_position_embeddings})."
            )
        check_input_ids(input_ids, cfg.vocab_size)
        encoder = self.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        lengths = self._length_candidates(
            self.length_logits(encoder.last_hidden_state, attention_mask), length_beam, max_new_tokens
        ).reshape(-1)  # (B·ℓ,) the candidates of source b are rows b·ℓ .. b·ℓ + ℓ - 1
        states = encoder.last_hidden_state.repeat_interleave(length_beam, dim=0)  # (B·ℓ, S, C)
        source_mask = None if attention_mask is None else attention_mask.repeat_interleave(length_beam, dim=0)
        tokens, log_probs, trace = self._refine(states, source_mask, lengths, num_iterations)
        target_mask = tokens != cfg.pad_token_id  # (B·ℓ, L)
        scores = (log_probs * target_mask).sum(dim=1) / lengths  # (B·ℓ,) average log-probability
        B = input_ids.shape[0]
        rows = torch.arange(B, device=tokens.device) * length_beam + scores.view(B, length_beam).argmax(dim=1)
        L = int(lengths[rows].max())  # the longest chosen target (other candidates may be longer)
        sequences = self._sequences(tokens[rows, :L], lengths[rows])
        if not return_dict_in_generate:
            return sequences
        return MaskPredictGenerateOutput(
            sequences=sequences,
            lengths=lengths[rows],
            scores=scores[rows],
            **{name: torch.stack(steps)[:, rows, :L] for name, steps in trace.items()},  # (I, B, L) each
        )

    def _refine(self, states, source_mask, lengths: torch.Tensor, num_iterations: int):
        """Mask-Predict's T iterations on N candidates of the given `lengths` (N,).

        Returns the tokens (N, L), their log-probabilities (N, L) (0 on padding) and the trace
        (each iteration's tokens, masks and log-probabilities)."""
        cfg = self.config
        L = int(lengths.max())
        target_mask = torch.arange(L, device=lengths.device) < lengths[:, None]  # (N, L)
        tokens = torch.full_like(target_mask, cfg.pad_token_id, dtype=torch.long)
        log_probs = torch.zeros(target_mask.shape, device=states.device, dtype=torch.float32)
        trace = {"iteration_tokens": [], "iteration_masked": [], "iteration_log_probs": []}
        for t in range(num_iterations):
            if t == 0:
                masked = target_mask  # iteration 0: every target token is masked
            else:
                masked = lowest_confidence(
                    log_probs, target_mask, lengths * (num_iterations - t) // num_iterations
                )
            tokens = tokens.masked_fill(masked, cfg.mask_token_id)
            best_log_probs, best = self._predict(states, source_mask, tokens, target_mask).max(
                dim=-1
            )  # (N, L)
            # only the masked tokens, and their probabilities, are updated
            tokens = torch.where(masked, best, tokens)
            log_probs = torch.where(masked, best_log_probs, log_probs)
            for name, value in zip(trace, (tokens, masked, log_probs)):
                trace[name].append(value)
        return tokens, log_probs, trace

    def _sequences(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, L) targets (padding beyond each length) -> (B, 1 + L + 1) start, tokens, EOS, padding."""
        cfg = self.config
        B, L = tokens.shape
        out = torch.full((B, L + 2), cfg.pad_token_id, dtype=torch.long, device=tokens.device)
        out[:, 0] = self._start_token_id()
        out[:, 1 : L + 1] = tokens
        eos = cfg.eos_token_id[0] if isinstance(cfg.eos_token_id, list) else cfg.eos_token_id
        if eos is not None:
            out.scatter_(1, (lengths + 1)[:, None], eos)  # right after each target
        return out


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
    "MaskPredictOutput",
    "MaskPredictGenerateOutput",
]
