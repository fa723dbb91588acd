"""hf_lm's feed-forward neural language model (Bengio, Ducharme, Vincent & Jauvin, 2003, "A Neural
Probabilistic Language Model", JMLR 3), as Hugging Face models (`model_type="hflm_ffnn"`).

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.

The model predicts token t+1 from a fixed window of the `context_size` tokens t-n+2..t:

    x = (C(w_{t-n+2}), ..., C(w_t))            concatenated embeddings, width (n-1) * m
    logits = b + W x + U tanh(d + H x)          (the paper's eq. 1; W = 0 without direct connections)

It is computed for every position of a (B, T) batch at once: the embeddings are padded on the
left and cut into windows with `unfold`. Positions before the start of a row, and padding tokens
(`attention_mask` 0), see a learned *start embedding* instead of a token's embedding: a row start
is then distinguishable from every real token (as a `<s>` symbol would be), and a left-padded
prompt sees exactly what it sees alone, so padding never leaks into the predictions.

Shape legend: B batch, T sequence length, n context_size, m hidden_size (embedding width),
h intermediate_size (tanh units), V vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import GenerationMixin
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput
from transformers.utils import can_return_tuple

from .hflm_configuration_ffnn import HfLmFFNNConfig
from .hflm_inputs import (
    check_padding_mask,
    embed_inputs,
    logits_positions,
    refuse_packed_rows,
)
from .hflm_losses import (
    causal_lm_loss,
)
from .hflm_pretrained import (
    FixedWindowGeneration,
    HfLmPreTrainedModel,
    trainer_shifts_labels,
)


class NoDirectConnection(nn.Module):
    """W = 0: the model without Bengio's direct window-to-output connections (adds nothing)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_zeros(())  # broadcasts against the (B, T, V) logits


class HfLmFFNNPreTrainedModel(HfLmPreTrainedModel):
    config_class = HfLmFFNNConfig
    config: HfLmFFNNConfig
    supports_gradient_checkpointing = False  # one hidden layer: nothing worth recomputing
    _no_split_modules = []

    def _init_weights(self, module):
        """N(0, initializer_range) for every weight and the start embedding, zero biases."""
        super()._init_weights(module)
        if isinstance(module, HfLmFFNNModel):
            init.normal_(module.start_embedding, mean=0.0, std=self.config.initializer_range)

    def _card_fields(self) -> list[tuple[str, object]]:
        cfg = self.config
        return [
            ("model_type", cfg.model_type),
            ("context (n - 1 tokens)", cfg.context_size),
            ("embedding width m", cfg.hidden_size),
            ("tanh units h", cfg.intermediate_size),
            ("direct connections", cfg.direct_connections),
            ("tied embeddings", cfg.tie_word_embeddings),
            ("vocabulary", cfg.vocab_size),
            ("parameters", f"{self.num_parameters():,}"),
        ]


class HfLmFFNNModel(HfLmFFNNPreTrainedModel):
    """Embeddings -> window of the last `context_size` embeddings -> tanh(d + H x).

    `last_hidden_state` is the (B, T, h) tanh layer; with `output_hidden_states` the outputs also
    hold `(x, tanh layer)`, x being the (B, T, n * m) concatenated window.
    """

    def __init__(self, config: HfLmFFNNConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)  # the paper's C
        # seen before the row start and at padding; not a vocabulary entry, so no token can imitate it
        self.start_embedding = nn.Parameter(torch.empty(config.hidden_size))
        self.hidden = nn.Linear(config.context_size * config.hidden_size, config.intermediate_size)  # d + H x
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, new_embeddings):
        self.embed_tokens = new_embeddings

    def windows(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x at every position: the (B, T, n * m) concatenated embeddings of tokens t-n+1..t, oldest first."""
        n = self.config.context_size
        emb = embed_inputs(input_ids, inputs_embeds, self.embed_tokens, self.config.vocab_size)  # (B, T, m)
        B, T, m = emb.shape
        start = self.start_embedding.to(emb.dtype)  # (m,)
        attention_mask = check_padding_mask(attention_mask, B, T)  # None when nothing is padded
        if attention_mask is not None:
            keep = attention_mask.to(device=emb.device, dtype=torch.bool)[..., None]  # (B, T, 1)
            emb = torch.where(keep, emb, start)  # padding looks like "before the row start"
        padded = torch.cat((start.expand(B, n - 1, m), emb), dim=1)  # (B, T + n - 1, m)
        windows = padded.unfold(1, n, 1)  # (B, T, m, n): window t covers padded[t : t + n]
        return windows.transpose(2, 3).reshape(B, T, n * m)  # (B, T, n * m)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        """The tanh hidden layer at every position.

        Args:
            input_ids: (B, T) token ids in [0, vocab_size).
            attention_mask: (B, T) 1 for real tokens, 0 for padding (seen as the start embedding).
            inputs_embeds: (B, T, m) instead of `input_ids`.
            output_hidden_states: also return `(x, tanh layer)`.
        """
        cfg = self.config
        output_hidden_states = (
            cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        refuse_packed_rows(kwargs.get("position_ids"), attention_mask, type(self).__name__)
        x = self.windows(input_ids, attention_mask, inputs_embeds)  # (B, T, n * m)
        hidden = self.dropout(torch.tanh(self.hidden(x)))  # (B, T, h)
        return BaseModelOutput(
            last_hidden_state=hidden, hidden_states=(x, hidden) if output_hidden_states else None
        )


@trainer_shifts_labels
class HfLmFFNNForCausalLM(FixedWindowGeneration, HfLmFFNNPreTrainedModel, GenerationMixin):
    """Bengio et al.'s LM: logits = b + W x + U tanh(d + H x) at every position.

    With `tie_word_embeddings` the output matrix is the embedding matrix C, so the tanh layer is
    first projected to the embedding width: logits = b + W x + C (P tanh(d + H x)).
    """

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: HfLmFFNNConfig):
        super().__init__(config)
        self.model = HfLmFFNNModel(config)
        tied = config.tie_word_embeddings
        # P: (h -> m) only when the head shares C, whose rows have width m
        self.output_projection = (
            nn.Linear(config.intermediate_size, config.hidden_size, bias=False) if tied else nn.Identity()
        )
        head_width = config.hidden_size if tied else config.intermediate_size
        self.lm_head = nn.Linear(head_width, config.vocab_size, bias=True)  # U (or C) and the bias b
        self.direct = (
            nn.Linear(config.context_size * config.hidden_size, config.vocab_size, bias=False)  # W
            if config.direct_connections
            else NoDirectConnection()
        )
        self.post_init()

    def resize_token_embeddings(self, *args, **kwargs) -> nn.Embedding:
        """Resize the embeddings and the head as transformers does, and the direct connections W
        (one row per token) with them: a new token's row starts at 0, no direct evidence yet."""
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        old = self.direct
        if isinstance(old, nn.Linear) and old.out_features != embeddings.num_embeddings:
            new = nn.Linear(old.in_features, embeddings.num_embeddings, bias=False)
            new.to(device=old.weight.device, dtype=old.weight.dtype)
            with torch.no_grad():
                new.weight.zero_()
                kept = min(old.out_features, new.out_features)
                new.weight[:kept] = old.weight[:kept]
            self.direct = new
        return embeddings

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutput:
        """Next-token logits and, with `labels`, the cross-entropy.

        Args:
            input_ids: (B, T) token ids in [0, vocab_size).
            attention_mask: (B, T) 1 for real tokens, 0 for padding.
            inputs_embeds: (B, T, m) instead of `input_ids`.
            labels: (B, T) targets, shifted inside the model (`labels = input_ids` is right); -100
                is ignored. With `num_items_in_batch` (passed by `Trainer`) the summed loss is
                divided by it, so gradient accumulation equals one big batch. `shift_labels` (B, T)
                in their place are already aligned with the positions (`hflm_common.causal_lm_loss`).
            logits_to_keep: compute logits only for the last `logits_to_keep` positions (0 = all),
                or the positions of a 1-D index tensor; `generate()` passes 1.
        """
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            position_ids=kwargs.get("position_ids"),  # not read, but packed rows are refused
            output_hidden_states=True,  # the head needs x for the direct connections
            return_dict=True,
        )
        x, hidden = outputs.hidden_states  # (B, T, n * m), (B, T, h)
        keep = logits_positions(logits_to_keep, x.shape[1])
        x, hidden = x[:, keep], hidden[:, keep]
        logits = self.lm_head(self.output_projection(hidden)) + self.direct(x)  # (B, T, V)

        loss = causal_lm_loss(logits, labels, self.config.vocab_size, kwargs)
        want_hidden = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        return CausalLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states if want_hidden else None
        )

    def generation_window(self) -> int:
        return self.config.context_size


__all__ = ["HfLmFFNNPreTrainedModel", "HfLmFFNNModel", "HfLmFFNNForCausalLM", "NoDirectConnection"]
