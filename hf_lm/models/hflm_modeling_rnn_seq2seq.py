"""hf_lm's recurrent encoder-decoder with attention (`hflm_rnn_seq2seq`).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
The recurrent layers come from `hflm_rnn_blocks`; this file adds the attention mechanisms of
Bahdanau et al. (2015) and Luong et al. (2015), the encoder-to-decoder bridge, input feeding and
scheduled sampling (Bengio et al., 2015), in transformers' seq2seq conventions: unshifted `labels`,
decoder inputs from `shift_tokens_right`, `Seq2SeqLMOutput`, `generate()` with a cache.

The decoder always runs one token at a time, also under teacher forcing: Bahdanau's attention and
input feeding make step t depend on step t-1's attention, and one code path makes a cached
`generate()` (one step per call, the state in a `RecurrentCache`) compute exactly what the full
forward computes.

Shape legend: B batch, S source length, T target steps in this call, E embedding size, H hidden
size, V vocabulary, L decoder layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import GenerationMixin
from transformers import initialization as init
from transformers.modeling_outputs import (
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.utils import ModelOutput, can_return_tuple

from .hflm_common import (
    _number,
    cache_argument,
    output_cache,
    returned_cache,
)
from .hflm_configuration_rnn_seq2seq import HfLmRNNSeq2SeqConfig
from .hflm_inputs import (
    check_cache_type,
    check_encoder_states,
    check_padding_mask,
    embed_inputs,
)
from .hflm_losses import (
    seq2seq_decoder_inputs,
    seq2seq_lm_loss,
    shift_tokens_right,
)
from .hflm_pretrained import (
    SEQ2SEQ_PIPELINES,
    HfLmPreTrainedModel,
)
from .hflm_rnn_blocks import RecurrentCache, StackedRNN


@dataclass
class HfLmRNNSeq2SeqEncoderOutput(ModelOutput):
    """What the encoder hands to the decoder. Every tensor has the batch on dim 0, so `generate()`
    expands all of it for beams and `num_return_sequences` (`_expand_inputs_for_generation`).

    Args:
        last_hidden_state: (B, S, H) the top layer's outputs, `[forward; backward]` when
            bidirectional; zero on padding. The attention's memory.
        final_hidden_state: (B, H) the top layer's final hidden state (`[forward; backward]`,
            each direction's state after its last real token). The bridge's input.
        final_cell_state: (B, H) the same for the LSTM's cell state; None for other cells.
        hidden_states: with `output_hidden_states`, the embeddings (B, S, E) and every layer's
            outputs (B, S, H).
        attentions: always None (the encoder has no attention), kept for transformers' tools.
    """

    last_hidden_state: torch.FloatTensor | None = None
    final_hidden_state: torch.FloatTensor | None = None
    final_cell_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


# ----------------------------------------------------------------------------------------------
# Attention. Every kind answers the same two questions, so the decoder step never asks which kind
# it runs:
#   before_step(s_{t-1}) -> (context fed into the step's input, weights)   Bahdanau; others: empty
#   after_step(h_t, ...) -> (output vector, weights)                        Luong: attends here
# `memory_keys(values)` precomputes what does not depend on the decoder (once per source).
# Scores are masked and normalized in fp32: padding gets weight exactly 0.
# ----------------------------------------------------------------------------------------------


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """Softmax over the source of (B, S) scores, 0 where `mask` (B, S) is False.

    Every source has a real token (the encoder checks it), so the fill value underflows to an exact 0.
    """
    scores = scores.float()
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
    return scores.softmax(dim=-1).to(dtype)


def attend(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The context vector: (B, S) weights x (B, S, H) values -> (B, H)."""
    return torch.bmm(weights[:, None], values).squeeze(1)


class NoAttention(nn.Module):
    """`attention="none"`: the bridged final encoder state is the only context (Sutskever et al., 2014).
    The output vector is the decoder's top state itself."""

    input_context_size = 0

    def __init__(self, config: HfLmRNNSeq2SeqConfig):
        super().__init__()

    def memory_keys(self, values: torch.Tensor) -> torch.Tensor | None:
        return None

    def before_step(self, query, keys, values, mask):
        return query.new_zeros(query.shape[0], 0), None  # (B, 0): nothing joins the step's input

    def after_step(self, output, context, weights, keys, values, mask):
        return output, None


class BahdanauAttention(nn.Module):
    """Additive attention (Bahdanau et al., 2015): `e_tj = v^T tanh(W_q s_{t-1} + W_k h_j)`.

    The scores come from the PREVIOUS decoder state, so the context is ready before the step and
    joins its input; after the step the output vector is `tanh(W_c [c_t; s_t])`, Luong's
    attentional layer (Bahdanau's deep maxout output is replaced by it, as in most toolkits).
    `W_k h_j` does not depend on the decoder: it is computed once per source.
    """

    def __init__(self, config: HfLmRNNSeq2SeqConfig):
        super().__init__()
        H = config.hidden_size
        self.input_context_size = H
        self.key_proj = nn.Linear(H, H, bias=False)  # W_k
        self.query_proj = nn.Linear(H, H)  # W_q (its bias is the additive score's bias)
        self.score_proj = nn.Linear(H, 1, bias=False)  # v
        self.combine = nn.Linear(2 * H, H, bias=False)  # W_c

    def memory_keys(self, values: torch.Tensor) -> torch.Tensor:
        return self.key_proj(values)  # (B, S, H)

    def before_step(self, query, keys, values, mask):
        energy = torch.tanh(keys + self.query_proj(query)[:, None])  # (B, S, H)
        weights = masked_softmax(self.score_proj(energy).squeeze(-1), mask, values.dtype)  # (B, S)
        return attend(weights, values), weights  # (B, H), (B, S)

    def after_step(self, output, context, weights, keys, values, mask):
        return torch.tanh(self.combine(torch.cat([context, output], dim=-1))), weights  # (B, H)


class LuongAttention(nn.Module):
    """Multiplicative attention (Luong et al., 2015): scores `h_t . k_j` from the CURRENT decoder
    state after the step, then the attentional hidden state `tanh(W_c [c_t; h_t])`.

    "luong_dot": k_j = h_j. "luong_general": k_j = W_a h_j, so `h_t . k_j = h_t^T W_a h_j`, the
    bilinear score, with W_a applied once per source instead of once per step.
    """

    input_context_size = 0

    def __init__(self, config: HfLmRNNSeq2SeqConfig, bilinear: bool):
        super().__init__()
        H = config.hidden_size
        self.key_proj = nn.Linear(H, H, bias=False) if bilinear else nn.Identity()  # W_a
        self.combine = nn.Linear(2 * H, H, bias=False)  # W_c

    def memory_keys(self, values: torch.Tensor) -> torch.Tensor:
        return self.key_proj(values)  # (B, S, H)

    def before_step(self, query, keys, values, mask):
        return query.new_zeros(query.shape[0], 0), None

    def after_step(self, output, context, weights, keys, values, mask):
        scores = torch.bmm(keys, output[:, :, None]).squeeze(-1)  # (B, S)
        weights = masked_softmax(scores, mask, values.dtype)
        context = attend(weights, values)  # (B, H)
        return torch.tanh(self.combine(torch.cat([context, output], dim=-1))), weights


ATTENTIONS = {
    "none": NoAttention,
    "bahdanau": BahdanauAttention,
    "luong_dot": lambda config: LuongAttention(config, bilinear=False),
    "luong_general": lambda config: LuongAttention(config, bilinear=True),
}


# ----------------------------------------------------------------------------------------------
# Encoder and decoder
# ----------------------------------------------------------------------------------------------


def _real_token_mask(attention_mask: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | None:
    """The (B, S) bool source mask, None when nothing is padded; every source needs a real token."""
    mask = check_padding_mask(attention_mask, batch, length, require_token=True)
    return None if mask is None else mask.bool()


class HfLmRNNSeq2SeqEncoder(nn.Module):
    """Embedding -> dropout -> a stacked (bidirectional) RNN over the source, padding skipped.

    The token embedding belongs to the parent model and is shared with the decoder: the encoder
    keeps a plain reference, not a registered submodule, so the weight has one state-dict name.
    `generate()` calls this module directly (`get_encoder()`).
    """

    main_input_name = "input_ids"

    def __init__(self, config: HfLmRNNSeq2SeqConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.config = config
        object.__setattr__(self, "embed_tokens", embed_tokens)  # shared, not registered (see above)
        directions = 2 if config.bidirectional_encoder else 1
        # hidden_size // 2 per direction: [forward; backward] is hidden_size wide (OpenNMT's convention)
        self.rnn = StackedRNN(
            config.cell_type,
            config.embedding_size,
            config.hidden_size // directions,
            config.encoder_layers,
            dropout=config.hidden_dropout,
            bidirectional=config.bidirectional_encoder,
            rnn_implementation=config.rnn_implementation,
        )
        self.dropout = nn.Dropout(config.hidden_dropout)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> HfLmRNNSeq2SeqEncoderOutput:
        """Encode a source batch.

        Args:
            input_ids: (B, S) source ids (or `inputs_embeds` (B, S, E)).
            attention_mask: (B, S) 1 for tokens, 0 for padding (left or right).
        """
        cfg = self.config
        output_hidden_states = (
            cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        embeds = embed_inputs(input_ids, inputs_embeds, self.embed_tokens, cfg.vocab_size, "embedding_size")
        B, S = embeds.shape[:2]
        mask = _real_token_mask(attention_mask, B, S)
        # every layer's outputs [(B, S, H)] and the final state ((L*D, B, H/D), ...)
        layer_outputs, state = self.rnn.forward_all_layers(self.dropout(embeds), None, mask)
        D = self.rnn.num_directions
        # the top layer's directions are the last D rows of torch's layer-major state
        finals = [s[-D:].transpose(0, 1).reshape(B, D * self.rnn.hidden_size) for s in state]  # (B, H) each
        return HfLmRNNSeq2SeqEncoderOutput(
            last_hidden_state=layer_outputs[-1],
            final_hidden_state=finals[0],
            final_cell_state=finals[1] if len(finals) > 1 else None,
            hidden_states=(embeds, *layer_outputs) if output_hidden_states else None,
        )


def _decoder_step_mask(attention_mask, B: int, T: int, past: int) -> torch.Tensor | None:
    """The (B, T) padding mask of the T new target steps, from a (B, T) or (B, past + T) mask; None
    when nothing is padded."""
    if attention_mask is None:
        return None
    if (
        not torch.is_tensor(attention_mask)
        or attention_mask.dim() != 2
        or attention_mask.shape[0] != B
        or attention_mask.shape[1] not in (T, past + T)
    ):
        got = (
            tuple(attention_mask.shape) if torch.is_tensor(attention_mask) else type(attention_mask).__name__
        )
        raise ValueError(
            f"`decoder_attention_mask` must have shape ({B}, {T}) or ({B}, {past + T}), got {got}."
        )
    return check_padding_mask(attention_mask[:, -T:], B, T, "decoder_attention_mask")


class HfLmRNNSeq2SeqDecoder(nn.Module):
    """The attentional decoder, run one token at a time (see the module docstring).

    Step t: `[embed(y_{t-1}); pre-step context (Bahdanau); previous output vector (input feeding)]`
    -> stacked RNN -> output vector (after-step attention for Luong; the top state for "none").
    """

    def __init__(self, config: HfLmRNNSeq2SeqConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.config = config
        object.__setattr__(self, "embed_tokens", embed_tokens)  # shared, not registered
        H, L = config.hidden_size, config.decoder_layers
        self.attention = ATTENTIONS[config.attention](config)
        self.feed_size = H if config.input_feeding else 0
        self.rnn = StackedRNN(
            config.cell_type,
            config.embedding_size + self.attention.input_context_size + self.feed_size,
            H,
            L,
            dropout=config.hidden_dropout,
            rnn_implementation=config.rnn_implementation,
        )
        # the tanh bridge: the encoder's final state (h, and c for an LSTM) -> every decoder layer's initial state
        self.bridge = nn.ModuleList(nn.Linear(H, L * H) for _ in range(self.rnn.cell.num_states))
        self.dropout = nn.Dropout(config.hidden_dropout)

    def initial_state(self, encoder_outputs: HfLmRNNSeq2SeqEncoderOutput) -> tuple[torch.Tensor, ...]:
        """((L, B, H), ...) decoder state: `tanh(W h_enc + b)` per state tensor, reshaped to the layers."""
        finals = (encoder_outputs.final_hidden_state, encoder_outputs.final_cell_state)
        B, H = encoder_outputs.last_hidden_state.shape[0], self.config.hidden_size
        state = []
        for bridge, final in zip(self.bridge, finals):
            if final is None:
                raise ValueError(
                    "`encoder_outputs` lacks the encoder's final states: pass the output of this model's encoder."
                )
            if not torch.is_tensor(final) or tuple(final.shape) != (B, H):
                got = tuple(final.shape) if torch.is_tensor(final) else type(final).__name__
                raise ValueError(
                    f"`encoder_outputs` must hold the encoder's ({B}, {H}) final states, got {got}: pass the "
                    "output of this model's encoder."
                )
            state.append(
                torch.tanh(bridge(final)).view(B, self.config.decoder_layers, -1).transpose(0, 1).contiguous()
            )
        return tuple(state)  # ((L, B, H), ...)

    def resume(self, cache: RecurrentCache | None, encoder_outputs, B: int):
        """(state, input-feeding vector, attention memory keys) to decode from: the cache's after
        earlier steps, else the bridged encoder state, a zero feed and keys computed once."""
        check_cache_type(cache, RecurrentCache, "the `RecurrentCache` this model returned")
        if cache is not None and cache.is_initialized:
            return (
                self.rnn.check_state(cache.state, B),
                cache.extras["input_feed"],
                cache.extras["memory_keys"],
            )
        values = encoder_outputs.last_hidden_state  # (B, S, H)
        feed = values.new_zeros(B, self.feed_size)  # (B, H) or (B, 0): no attentional vector yet
        return (
            self.initial_state(encoder_outputs),
            feed,
            self.attention.memory_keys(values),
        )  # keys (B, S, H) or None

    def sampled_input(self, x_t: torch.Tensor, previous_output: torch.Tensor, p: float, next_token_logits):
        """Scheduled sampling (Bengio et al., 2015): with probability p a row reads the model's own
        (detached) guess for the previous token instead of the true one. x_t: (B, E)."""
        with torch.no_grad():
            probs = next_token_logits(previous_output).float().softmax(dim=-1)  # (B, V)
            sampled = torch.multinomial(probs, 1).squeeze(1)  # (B,)
        coin = torch.rand(x_t.shape[0], device=x_t.device) < p  # (B,)
        return torch.where(coin[:, None], self.dropout(self.embed_tokens(sampled)), x_t)

    def read_inputs(self, input_ids, inputs_embeds, encoder_outputs, encoder_attention_mask):
        """The checked inputs of `forward`: the target's embeddings (B, T, E), the encoder outputs
        the attention reads (B, S, H) and the source's real tokens (B, S) (None: nothing padded)."""
        if encoder_outputs is None:
            raise ValueError("The decoder needs `encoder_outputs` (run the encoder first).")
        embeds = embed_inputs(
            input_ids,
            inputs_embeds,
            self.embed_tokens,
            self.config.vocab_size,
            "embedding_size",
            names=("decoder_input_ids", "decoder_inputs_embeds"),
        )
        values = encoder_outputs.last_hidden_state  # (B, S, H)
        check_encoder_states(values, embeds.shape[0], self.config.hidden_size)
        return embeds, values, _real_token_mask(encoder_attention_mask, embeds.shape[0], values.shape[1])

    def step(self, x_t, state, feed, keys, values, src_mask, real):
        """One target step: input x_t (B, E), the state before it, the input-feeding vector (B, H|0)
        and the attention memory -> (output vector (B, H), state after it, attention weights (B, S)
        or None). Rows where `real` (B, 1) is False keep their state and feed (None: all real)."""
        context, weights = self.attention.before_step(state[0][-1], keys, values, src_mask)
        rnn_out, new_state = self.rnn.step(torch.cat([x_t, context, feed], dim=-1), state)  # (B, H)
        out, weights = self.attention.after_step(rnn_out, context, weights, keys, values, src_mask)
        if real is not None:
            new_state = tuple(torch.where(real, new, old) for new, old in zip(new_state, state))
            if self.feed_size:
                out = torch.where(real, out, feed)
        return out, new_state, weights

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_outputs: HfLmRNNSeq2SeqEncoderOutput | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: RecurrentCache | None = None,
        use_cache: bool = False,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        scheduled_sampling_probability: float = 0.0,
        next_token_logits=None,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """Decode T target steps.

        Args:
            input_ids: (B, T) decoder inputs (the shifted targets), or `inputs_embeds` (B, T, E).
            attention_mask: (B, T) or (B, P + T) target padding mask; a padded step keeps the
                state and the input-feeding vector unchanged.
            encoder_outputs: the encoder's output for the same batch.
            encoder_attention_mask: (B, S) source padding mask.
            past_key_values: a `RecurrentCache` from an earlier call (the state after P steps);
                a new one is made when `use_cache` and None.
            scheduled_sampling_probability: each input after the first is replaced, with this
                probability, by a token sampled from the model's (detached) prediction at the
                previous step; needs `next_token_logits`, a (B, H) -> (B, V) function.

        Returns:
            `last_hidden_state` (B, T, H) output vectors; `cross_attentions` a one-tuple of
            (B, T, S) attention weights with `output_attentions` (None for "none"); `hidden_states`
            the embeddings (B, T, E), each layer's states (B, T, H) and the output vectors.
        """
        embeds, values, src_mask = self.read_inputs(
            input_ids, inputs_embeds, encoder_outputs, encoder_attention_mask
        )
        B, T = embeds.shape[:2]

        cache = past_key_values
        state, feed, keys = self.resume(cache, encoder_outputs, B)
        past = cache.get_seq_length() if cache is not None else 0
        step_mask = _decoder_step_mask(attention_mask, B, T, past)  # (B, T), None when nothing is padded

        sampling = scheduled_sampling_probability > 0.0 and next_token_logits is not None
        x = self.dropout(embeds)  # (B, T, E)
        outputs, all_weights, layer_states = [], [], []
        for t in range(T):
            x_t = x[:, t]  # (B, E)
            if sampling and t > 0:
                x_t = self.sampled_input(x_t, outputs[-1], scheduled_sampling_probability, next_token_logits)
            # a padded target step changes nothing (a left-padded decoder prompt starts later)
            real = None if step_mask is None else step_mask[:, t].bool()[:, None]  # (B, 1)
            out, state, weights = self.step(x_t, state, feed, keys, values, src_mask, real)
            if self.feed_size:
                feed = out  # Luong's input feeding: the next step sees this attentional vector
            outputs.append(out)
            if output_attentions and weights is not None:
                all_weights.append(weights)
            if output_hidden_states:
                layer_states.append(state[0])  # (L, B, H): every layer's output at this step
        hidden = torch.stack(outputs, dim=1)  # (B, T, H)

        if use_cache:
            cache = RecurrentCache() if cache is None else cache
            cache.update(state, T)
            cache.extras.update(input_feed=feed, memory_keys=keys)
        hidden_states = None
        if output_hidden_states:
            per_layer = torch.stack(layer_states, dim=2)  # (L, B, T, H)
            hidden_states = (embeds, *per_layer.unbind(0), hidden)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden,
            **returned_cache(cache if use_cache else None),
            hidden_states=hidden_states,
            cross_attentions=(torch.stack(all_weights, dim=1),) if all_weights else None,  # ((B, T, S),)
        )


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------


def _as_encoder_output(encoder_outputs, config: HfLmRNNSeq2SeqConfig) -> HfLmRNNSeq2SeqEncoderOutput:
    """Accept this model's encoder output, or its `to_tuple()`: (last_hidden_state, final_hidden_state,
    [final_cell_state for an LSTM], ...)."""
    if isinstance(encoder_outputs, HfLmRNNSeq2SeqEncoderOutput):
        return encoder_outputs
    if isinstance(encoder_outputs, ModelOutput):
        fields = {k: encoder_outputs.get(k) for k in HfLmRNNSeq2SeqEncoderOutput.__dataclass_fields__}
        return HfLmRNNSeq2SeqEncoderOutput(**fields)
    if isinstance(encoder_outputs, (tuple, list)):
        n = 3 if config.cell_type == "lstm" else 2
        if len(encoder_outputs) < n:
            raise ValueError(
                f"`encoder_outputs` as a tuple needs (last_hidden_state, final_hidden_state"
                f"{', final_cell_state' if n == 3 else ''}): got {len(encoder_outputs)} item(s)."
            )
        out = HfLmRNNSeq2SeqEncoderOutput(
            last_hidden_state=encoder_outputs[0], final_hidden_state=encoder_outputs[1]
        )
        if n == 3:
            out.final_cell_state = encoder_outputs[2]
        return out
    raise ValueError(
        f"`encoder_outputs` must be this model's encoder output, got {type(encoder_outputs).__name__}."
    )


class HfLmRNNSeq2SeqPreTrainedModel(HfLmPreTrainedModel):
    """Init, capabilities and saving of the recurrent encoder-decoder."""

    config_class = HfLmRNNSeq2SeqConfig
    config: HfLmRNNSeq2SeqConfig
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _supports_sdpa = False
    _no_split_modules = ["HfLmRNNSeq2SeqEncoder", "HfLmRNNSeq2SeqDecoder"]
    # the recurrent state cannot be cropped: assisted decoding is refused clearly
    _is_stateful = True

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        # the decoder's state lives in a RecurrentCache made by `forward`, not in a DynamicCache
        return False

    def _init_weights(self, module):
        """The classic NMT init: every weight uniform in [-r, r] (Sutskever et al., 2014; Luong et al.,
        2015), biases zero, the padding embedding zero."""
        r = self.config.initializer_range
        for name, param in module.named_parameters(recurse=False):
            if name.startswith("bias"):
                init.zeros_(param)
            else:
                init.uniform_(param, -r, r)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            init.zeros_(module.weight[module.padding_idx])

    def _card_fields(self) -> list[tuple[str, object]]:
        cfg = self.config
        return [
            ("model_type", cfg.model_type),
            ("cell", cfg.cell_type),
            (
                "encoder",
                f"{cfg.encoder_layers} layer(s){', bidirectional' if cfg.bidirectional_encoder else ''}",
            ),
            ("decoder", f"{cfg.decoder_layers} layer(s)"),
            ("attention", cfg.attention + (", input feeding" if cfg.input_feeding else "")),
            ("embedding / hidden size", f"{cfg.embedding_size} / {cfg.hidden_size}"),
            ("vocabulary", cfg.vocab_size),
            ("parameters", f"{self.num_parameters():,}"),
        ]


class HfLmRNNSeq2SeqModel(HfLmRNNSeq2SeqPreTrainedModel):
    """The shared embedding, the encoder and the attentional decoder, without the output layer.

    `last_hidden_state` holds the decoder's output vectors (B, T, H): Luong's attentional hidden
    states, or the top decoder state with `attention="none"`.
    """

    def __init__(self, config: HfLmRNNSeq2SeqConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(
            config.vocab_size, config.embedding_size, padding_idx=config.pad_token_id
        )
        self.encoder = HfLmRNNSeq2SeqEncoder(config, self.embed_tokens)
        self.decoder = HfLmRNNSeq2SeqDecoder(config, self.embed_tokens)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value
        object.__setattr__(self.encoder, "embed_tokens", value)
        object.__setattr__(self.decoder, "embed_tokens", value)

    def get_encoder(self, modality: str | None = None):
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
        past_key_values: RecurrentCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        scheduled_sampling_probability: float = 0.0,
        next_token_logits=None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        """Encode the source (unless `encoder_outputs` are given) and decode the target prefix.

        Args:
            input_ids: (B, S) source ids; attention_mask: (B, S) source padding mask.
            decoder_input_ids: (B, T) decoder inputs (the shifted targets);
            decoder_attention_mask: (B, T) target padding mask.
            encoder_outputs: `get_encoder()`'s output (or its tuple), reused by `generate()`.
            past_key_values: the `RecurrentCache` of an earlier call (made when `use_cache`); also
                accepted as `cache` (transformers 5.24's name).
            scheduled_sampling_probability, next_token_logits: the scheduled-sampling hooks the
                conditional-generation head passes (see `HfLmRNNSeq2SeqDecoder.forward`).
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        cfg = self.config
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        if use_cache is None:
            use_cache = cfg.use_cache and not self.training
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_hidden_states=output_hidden_states,
                return_dict=True,
            )
        else:
            encoder_outputs = _as_encoder_output(encoder_outputs, cfg)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "Pass `decoder_input_ids` (or `labels`, from which the conditional-generation model builds them)."
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            inputs_embeds=decoder_inputs_embeds,
            attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            scheduled_sampling_probability=scheduled_sampling_probability,
            next_token_logits=next_token_logits,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **returned_cache(output_cache(decoder_outputs)),
            decoder_hidden_states=decoder_outputs.hidden_states,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
        )


def _check_sampling_probability(p) -> float:
    if p is None:
        return 0.0
    if torch.is_tensor(p) and p.numel() == 1:
        p = p.item()
    _number("scheduled_sampling_probability", p, 0, 1)
    return float(p)


class HfLmRNNSeq2SeqForConditionalGeneration(HfLmRNNSeq2SeqPreTrainedModel, GenerationMixin):
    """The recurrent encoder-decoder with its output layer (`AutoModelForSeq2SeqLM`).

    Output layer: dropout on the output vector, then (with `tie_word_embeddings` and
    `hidden_size != embedding_size`) a projection to `embedding_size`, then `lm_head`, whose
    weight is then the token embedding.
    """

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    _hflm_pipelines = SEQ2SEQ_PIPELINES
    # the loss is the model's own, on unshifted labels (transformers would map this class-name suffix
    # to a causal loss that shifts again)
    accepts_loss_kwargs = True

    def __init__(self, config: HfLmRNNSeq2SeqConfig):
        super().__init__(config)
        self.model = HfLmRNNSeq2SeqModel(config)
        H, E = config.hidden_size, config.embedding_size
        project = config.tie_word_embeddings and H != E
        self.output_projection = nn.Linear(H, E, bias=False) if project else nn.Identity()
        self.lm_head = nn.Linear(E if config.tie_word_embeddings else H, config.vocab_size)
        self.output_dropout = nn.Dropout(config.hidden_dropout)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def get_encoder(self, modality: str | None = None):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """What `DataCollatorForSeq2Seq(model=...)` calls to add `decoder_input_ids` to a batch."""
        start = self.config.decoder_start_token_id
        if start is None:
            raise ValueError(
                "config.decoder_start_token_id (or bos_token_id) is not set: the decoder needs a start token."
            )
        pad = self.config.pad_token_id
        return shift_tokens_right(labels, start if pad is None else pad, start)

    def _next_token_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) output vectors -> (..., V) logits, without dropout (scheduled sampling's guesses)."""
        return self.lm_head(self.output_projection(hidden))

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs=None,
        past_key_values: RecurrentCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        scheduled_sampling_probability: float | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """Next-token logits (B, T, V), and the loss when `labels` are given.

        Args:
            input_ids: (B, S) source ids; attention_mask: (B, S) its padding mask.
            decoder_input_ids: (B, T) decoder inputs; made from `labels` by `shift_tokens_right`
                when not given.
            labels: (B, T) target ids, NOT shifted (-100 ignored): position t is scored against
                `labels[:, t]`. With `num_items_in_batch` (from `Trainer`) the loss is a sum
                divided by it, so gradient accumulation equals one big batch.
            past_key_values: the `RecurrentCache` returned by an earlier call (`generate()`).
            scheduled_sampling_probability: p in [0, 1]; in training mode with `labels`, each
                decoder input after the first is, with probability p (one coin per token), the
                token sampled from the model's own detached prediction at the previous step
                (Bengio et al., 2015). None, 0, or eval mode: teacher forcing.

        Returns:
            `Seq2SeqLMOutput`; `cross_attentions` is a one-tuple holding the (B, T, S) attention
            weights with `output_attentions` (rows sum to 1 over the real source tokens, 0 on
            padding; None for `attention="none"`).
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        p = _check_sampling_probability(scheduled_sampling_probability)
        n_items = kwargs.get("num_items_in_batch")
        decoder_input_ids = seq2seq_decoder_inputs(
            self, labels, input_ids, encoder_outputs, decoder_input_ids, decoder_inputs_embeds, n_items
        )
        sampling = p > 0.0 and self.training and labels is not None
        outputs = self.model(
            return_dict=True,
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            scheduled_sampling_probability=p if sampling else 0.0,
            next_token_logits=self._next_token_logits if sampling else None,
        )
        hidden = self.output_dropout(outputs.last_hidden_state)  # (B, T, H)
        logits = self.lm_head(self.output_projection(hidden))  # (B, T, V)
        loss = seq2seq_lm_loss(logits, labels, n_items, "the decoder inputs")
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **returned_cache(output_cache(outputs)),
            decoder_hidden_states=outputs.decoder_hidden_states,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
        )


__all__ = [
    "ATTENTIONS",
    "HfLmRNNSeq2SeqEncoderOutput",
    "HfLmRNNSeq2SeqPreTrainedModel",
    "HfLmRNNSeq2SeqModel",
    "HfLmRNNSeq2SeqForConditionalGeneration",
    "shift_tokens_right",
]
