"""The encoder-decoder body of hf_lm's T5-style (`hflm_t5`) and BART-style (`hflm_bart`) families.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
The blocks live in `hflm_attention`, `hflm_positions`, `hflm_layers` and `hflm_stack`; this file
composes an encoder stack (bidirectional) and a
decoder stack (causal, with cross-attention to the last encoder layer) in the shape of the
original Transformer (Vaswani et al., 2017), T5 (Raffel et al., 2020) and BART (Lewis et al., 2020),
the bare model and the vocabulary head the generation and Mask-Predict heads share. The heads and
the family classes are in `hflm_modeling_seq2seq`, Mask-Predict in `hflm_seq2seq_mask_predict`.

Conventions are transformers': generation caches with an `EncoderDecoderCache` (the self-attention
cache grows, the cross-attention keys and values are computed once).

Shape legend: B batch, S source length, T new target tokens, P past target tokens, C hidden size,
V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import EncoderDecoderCache
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple

from .hflm_attention import AttentionBackends
from .hflm_common import attention_kwargs, cache_argument, output_cache, returned_cache
from .hflm_configuration_seq2seq import HfLmEncoderDecoderConfig
from .hflm_inputs import embed_inputs
from .hflm_layers import VocabProjection, add_router_losses
from .hflm_losses import shift_tokens_right, wants_router_logits
from .hflm_pretrained import HfLmPreTrainedModel
from .hflm_stack import TransformerStack

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


def passed_through(outputs: Seq2SeqModelOutput) -> dict:
    """The bare model's outputs a head returns as they are: both stacks' states and attentions."""
    names = ("decoder_hidden_states", "decoder_attentions", "cross_attentions")
    names += ("encoder_last_hidden_state", "encoder_hidden_states", "encoder_attentions")
    return {name: getattr(outputs, name) for name in names}


def _given_encoder_outputs(encoder_outputs) -> BaseModelOutput:
    """The encoder output a caller passes (`generate()` reuses it), as a `BaseModelOutput`."""
    if isinstance(encoder_outputs, (tuple, list)):
        return BaseModelOutput(*encoder_outputs)
    if not isinstance(encoder_outputs, BaseModelOutput):
        raise ValueError(
            "`encoder_outputs` must be the encoder's output (a `BaseModelOutput` or its tuple), "
            f"got {type(encoder_outputs).__name__}."
        )
    return encoder_outputs


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

    def _decoder_reads_source(self, input_ids, attention_mask, decoder_attention_mask):
        """Feature extraction from the text alone, as transformers' BartModel does it: the decoder
        reads the same text shifted right (`_source_as_decoder_input`). Returns the decoder's
        (B, T) ids and mask (the given `decoder_attention_mask`, if any)."""
        if input_ids is None:
            raise ValueError(
                "Pass `decoder_input_ids` (or `labels`, from which the conditional-generation model builds "
                "them, or `input_ids`, which the decoder then reads shifted right)."
            )
        decoder_input_ids, source_mask = self._source_as_decoder_input(input_ids, attention_mask)
        return decoder_input_ids, source_mask if decoder_attention_mask is None else decoder_attention_mask

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
        else:
            encoder_outputs = _given_encoder_outputs(encoder_outputs)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            decoder_input_ids, decoder_attention_mask = self._decoder_reads_source(
                input_ids, attention_mask, decoder_attention_mask
            )
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

    def token_logits(self, decoder_states: torch.Tensor) -> torch.Tensor:
        """(B, T, C) decoder output -> (B, T, V) token logits."""
        if self.config.scale_decoder_output:
            # T5 ties the head to embeddings that were not scaled at the input: rescale here
            decoder_states = decoder_states * self.config.hidden_size**-0.5
        return self.lm_head(decoder_states)
