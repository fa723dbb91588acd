"""hf_lm's recurrent language model (Elman RNN, LSTM, GRU): base model and causal LM head.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
The recurrence lives in `hflm_rnn_blocks` (shared with the RNN encoder-decoder); this file composes
embedding -> dropout -> stacked RNN -> dropout -> (projection) -> softmax layer, the recurrent LM of
Mikolov et al. (2010) as regularized by Zaremba et al. (2014), with scheduled sampling (Bengio et
al., 2015) as an optional training mode.

Shape legend: B batch, T new tokens, E embedding size, H hidden size, L layers, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import GenerationMixin
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.utils import can_return_tuple

from .hflm_common import (
    cache_argument,
    output_cache,
    returned_cache,
)
from .hflm_configuration_rnn import HfLmRNNConfig
from .hflm_inputs import (
    check_cache_type,
    check_padding_mask,
    check_position_ids,
    embed_inputs,
    logits_positions,
    refuse_packed_rows,
)
from .hflm_losses import (
    causal_lm_loss,
)
from .hflm_pretrained import (
    HfLmPreTrainedModel,
    trainer_shifts_labels,
)
from .hflm_rnn_blocks import RecurrentCache, RecurrentLayer, StackedRNN


class HfLmRNNPreTrainedModel(HfLmPreTrainedModel):
    config_class = HfLmRNNConfig
    config: HfLmRNNConfig
    _no_split_modules = ["StackedRNN"]
    # the loop has no layer boundaries transformers' checkpointing could wrap; truncated BPTT
    # (`use_cache=True` + `RecurrentCache.detach()`) is how long texts fit in memory
    supports_gradient_checkpointing = False
    # generate() cannot rewind a recurrent state, so assisted decoding refuses it up front
    _is_stateful = True

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        """No `DynamicCache` from generate(): `forward` creates and returns a `RecurrentCache` itself."""
        return False

    def _init_weights(self, module):
        """Uniform U(-r, r) for every weight, r = `initializer_range` (Zaremba et al., 2014); zero biases,
        plus `forget_bias` on the LSTM forget gate (Gers et al., 2000; Jozefowicz et al., 2015)."""
        r = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            init.uniform_(module.weight, -r, r)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, RecurrentLayer):
            init.uniform_(module.weight_ih, -r, r)
            init.uniform_(module.weight_hh, -r, r)
            if module.bias_ih is not None:
                init.zeros_(module.bias_hh)
                bias = torch.zeros_like(module.bias_ih)
                if module.cell_type == "lstm":
                    H = module.hidden_size
                    bias[H : 2 * H] = self.config.forget_bias  # torch's gate order i, f, g, o
                init.copy_(module.bias_ih, bias)

    def _card_fields(self) -> list[tuple[str, object]]:
        cfg = self.config
        return [
            ("model_type", cfg.model_type),
            ("cell", cfg.cell_type),
            ("layers", cfg.num_hidden_layers),
            ("hidden_size / embedding_size", f"{cfg.hidden_size} / {cfg.embedding_size}"),
            ("tied embeddings", cfg.tie_word_embeddings),
            ("vocabulary", cfg.vocab_size),
            ("parameters", f"{self.num_parameters():,}"),
        ]


class HfLmRNNModel(HfLmRNNPreTrainedModel):
    """Token embeddings -> dropout -> L stacked recurrent layers -> dropout.

    Dropout (`hidden_dropout`) touches only the non-recurrent connections, as in Zaremba et al.
    (2014): the embeddings, the outputs between layers (inside `StackedRNN`) and the top outputs;
    the state carried from step to step is never dropped.
    """

    def __init__(self, config: HfLmRNNConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.rnn = StackedRNN(
            config.cell_type,
            config.embedding_size,
            config.hidden_size,
            config.num_hidden_layers,
            dropout=config.hidden_dropout,
            rnn_implementation=config.rnn_implementation,
        )
        self.post_init()

    def prepare_inputs(
        self,
        input_ids: torch.LongTensor | None,
        inputs_embeds: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        position_ids: torch.LongTensor | None,
        past_key_values: RecurrentCache | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, tuple | None]:
        """Check the inputs; return the embeddings (B, T, E), the (B, T) step mask of the new tokens
        (None when nothing is padded) and the state to start from (None = zeros)."""
        inputs_embeds = embed_inputs(
            input_ids, inputs_embeds, self.embed_tokens, self.config.vocab_size, "embedding_size"
        )
        B, T = inputs_embeds.shape[:2]
        check_cache_type(past_key_values, RecurrentCache, "the `RecurrentCache` this model returned")
        past_len = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is not None:
            # accepted for generate(); a recurrence needs no positions, so their values are not read
            check_position_ids(position_ids, B, T, values=False)
            if past_key_values is None:
                refuse_packed_rows(position_ids, attention_mask, type(self).__name__)
        if attention_mask is not None:
            # generate() passes the mask of past + new tokens; the recurrence only needs the new ones
            if (
                not torch.is_tensor(attention_mask)
                or attention_mask.dim() != 2
                or attention_mask.shape[0] != B
                or attention_mask.shape[1] not in (T, past_len + T)
            ):
                got = (
                    tuple(attention_mask.shape)
                    if torch.is_tensor(attention_mask)
                    else type(attention_mask).__name__
                )
                raise ValueError(
                    f"`attention_mask` must have shape (batch, past + seq_len) = ({B}, {past_len + T}) or "
                    f"(batch, seq_len) = ({B}, {T}), got {got}."
                )
            attention_mask = check_padding_mask(attention_mask[:, -T:], B, T)  # None when nothing is padded
            if attention_mask is not None:
                attention_mask = attention_mask.to(inputs_embeds.device).bool()
        state = None
        if past_key_values is not None and past_key_values.state is not None:
            if past_key_values.batch_size != B:
                raise ValueError(
                    f"`past_key_values` holds a state for batch size {past_key_values.batch_size}, but the inputs "
                    f"have batch size {B}."
                )
            state = past_key_values.state
        return inputs_embeds, attention_mask, state

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: RecurrentCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """Run the recurrent stack over the new tokens, starting from the cached state.

        Args:
            input_ids: (B, T) token ids in [0, vocab_size).
            attention_mask: (B, past + T) or (B, T), 1 for real tokens and 0 for padding. Padded steps
                keep the state unchanged (and output zeros), so a left-padded prompt ends in the state
                it has alone and a right-padded row's final state is the one after its last real token.
            position_ids: accepted (and shape-checked) for `generate()`; unused, a recurrence has no positions.
            past_key_values: the `RecurrentCache` of a previous call: the state to continue from. It is
                updated in place and returned when `use_cache`. Also accepted as `cache` (transformers
                5.24's name).
            inputs_embeds: (B, T, E) instead of `input_ids`.
            use_cache: return the final state as a `RecurrentCache`; defaults to `config.use_cache`
                outside training and to False in training (pass True for truncated BPTT).
            output_hidden_states: also return the embeddings and every layer's outputs.
        """
        cfg = self.config
        past_key_values = cache_argument(past_key_values, kwargs)
        output_hidden_states = (
            cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        if use_cache is None:
            use_cache = cfg.use_cache and not self.training

        inputs_embeds, step_mask, state = self.prepare_inputs(
            input_ids, inputs_embeds, attention_mask, position_ids, past_key_values
        )
        hidden_states = self.dropout(inputs_embeds)  # (B, T, E)
        layer_outputs, state = self.rnn.forward_all_layers(hidden_states, state, step_mask)  # L x (B, T, H)
        last_hidden_state = self.dropout(layer_outputs[-1])

        cache = None
        if use_cache:
            cache = past_key_values if past_key_values is not None else RecurrentCache()
            cache.update(state, inputs_embeds.shape[1])
        return BaseModelOutputWithPast(
            last_hidden_state=last_hidden_state,
            **returned_cache(cache),
            hidden_states=(hidden_states, *layer_outputs) if output_hidden_states else None,
        )


@trainer_shifts_labels
class HfLmRNNForCausalLM(HfLmRNNPreTrainedModel, GenerationMixin):
    """The recurrent LM with its softmax layer (tied to the input embeddings by default).

    `generate()` works as for any causal LM (greedy, beam search, sampling); the cache is a
    `RecurrentCache` holding the state after the tokens seen so far, so each new token costs one
    recurrent step.

    Truncated backpropagation through time: `use_cache=True` also works in training mode and
    returns the final state, so a loop over consecutive blocks of one long text can carry it on.
    Cut the graph with `detach()` between blocks, or the backward pass reaches back to the start:

        >>> cache = None
        >>> for block in blocks:  # (B, T) consecutive slices of B long token streams
        ...     out = model(block, labels=block, past_key_values=cache, use_cache=True)
        ...     out.loss.backward()
        ...     optimizer.step()
        ...     optimizer.zero_grad()
        ...     cache = out.past_key_values.detach()

    (Shifted labels score T - 1 predictions per block; pass `labels` one token longer via your data
    pipeline if the boundary token matters.)

    Scheduled sampling (Bengio et al., 2015): `scheduled_sampling_probability=p` in training mode with
    `labels` replaces each input token after the first, with probability p, by a token sampled from
    the model's own (detached) prediction at the previous step, so training sees the model's own
    mistakes as at generation time. This runs the recurrence step by step. p = 0, None or eval mode
    is teacher forcing, exactly the plain forward. `training.objectives.scheduled_sampling` has the paper's
    decay schedules for p.
    """

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: HfLmRNNConfig):
        super().__init__(config)
        self.model = HfLmRNNModel(config)
        if config.tie_word_embeddings and config.embedding_size != config.hidden_size:
            # the tied softmax layer reads E features: project the H-sized state down (or up) first
            self.output_projection = nn.Linear(config.hidden_size, config.embedding_size, bias=False)
            head_width = config.embedding_size
        else:
            self.output_projection = nn.Identity()
            head_width = config.embedding_size if config.tie_word_embeddings else config.hidden_size
        # a bias on the softmax layer, as in the classic RNN LMs: it learns the unigram distribution
        self.lm_head = nn.Linear(head_width, config.vocab_size, bias=True)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def _logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.output_projection(hidden_states))  # (..., H) -> (..., V)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: RecurrentCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        scheduled_sampling_probability: float | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """Next-token logits, and the loss when `labels` are given.

        Args:
            labels: (B, T) targets, shifted inside the model (`labels = input_ids` is right); -100 is
                ignored. With `num_items_in_batch` (passed by `Trainer`) the summed loss is divided by
                it, so gradient accumulation equals one big batch. `shift_labels` (B, T) in their
                place are already aligned with the positions (`hflm_common.causal_lm_loss`).
            scheduled_sampling_probability: p in [0, 1]; see the class docstring. Only active in
                training mode with `labels`; `hidden_states` are not collected on that path.
            logits_to_keep: compute logits only for the last `logits_to_keep` positions (0 = all).
            See `HfLmRNNModel.forward` for the other arguments.
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        p = scheduled_sampling_probability
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0):
            raise ValueError(
                f"`scheduled_sampling_probability` must be a number in [0, 1] or None, got {p!r}."
            )

        if p and self.training and labels is not None:
            hidden_states, logits, cache = self._scheduled_sampling(
                p, input_ids, inputs_embeds, attention_mask, position_ids, past_key_values, use_cache
            )
            all_hidden_states = None
        else:
            outputs = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=past_key_values,
                inputs_embeds=inputs_embeds,
                use_cache=use_cache,
                output_hidden_states=output_hidden_states,
                return_dict=True,
            )
            hidden_states, cache, all_hidden_states = (
                outputs.last_hidden_state,
                output_cache(outputs),
                outputs.hidden_states,
            )
            hidden_states = hidden_states[:, logits_positions(logits_to_keep, hidden_states.shape[1])]
            logits = self._logits(hidden_states)  # (B, T, V)

        loss = causal_lm_loss(logits, labels, self.config.vocab_size, kwargs)
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, **returned_cache(cache), hidden_states=all_hidden_states
        )

    def _scheduled_sampling(
        self, p, input_ids, inputs_embeds, attention_mask, position_ids, past_key_values, use_cache
    ):
        """The step-by-step forward of scheduled sampling; returns (hidden (B, T, H), logits (B, T, V), cache)."""
        model = self.model
        use_cache = False if use_cache is None else use_cache  # training mode: as in the plain forward
        inputs_embeds, step_mask, state = model.prepare_inputs(
            input_ids, inputs_embeds, attention_mask, position_ids, past_key_values
        )
        B, T = inputs_embeds.shape[:2]
        hidden, logits = [], []
        for t in range(T):
            x_t = inputs_embeds[:, t]  # (B, E)
            if t > 0:
                with torch.no_grad():
                    # the model's own guess for token t, sampled from its prediction at step t-1
                    probs = logits[-1].detach().float().softmax(dim=-1)  # (B, V)
                    sampled = torch.multinomial(probs, 1).squeeze(-1)  # (B,)
                    coin = torch.rand(B, device=x_t.device) < p  # one flip per token
                    if step_mask is not None:
                        coin &= step_mask[:, t - 1] & step_mask[:, t]  # only after a real prediction
                x_t = torch.where(coin[:, None], model.embed_tokens(sampled).to(x_t.dtype), x_t)
            out, state = model.rnn.step(
                model.dropout(x_t), state, None if step_mask is None else step_mask[:, t]
            )  # (B, H)
            h_t = model.dropout(out)
            hidden.append(h_t)
            logits.append(self._logits(h_t))  # (B, V)
        cache = None
        if use_cache:
            cache = past_key_values if past_key_values is not None else RecurrentCache()
            cache.update(state, T)
        return torch.stack(hidden, dim=1), torch.stack(logits, dim=1), cache


__all__ = ["HfLmRNNPreTrainedModel", "HfLmRNNModel", "HfLmRNNForCausalLM"]
