"""Mask-Predict (Ghazvininejad et al., 2019) on hf_lm's encoder-decoder: a conditional masked LM.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
The decoder reads the target with some tokens replaced by `mask_token_id`, attends to all of it (no
causal mask) and predicts every masked token at once; a length head on the mean-pooled encoder
output predicts the target length. Decoding refines a whole translation in T parallel iterations.
The family classes (`HfLmT5ForMaskPredict`, `HfLmBartForMaskPredict`) are in `hflm_modeling_seq2seq`.

Shape legend: B batch, S source length, L target length, C hidden size, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import ModelOutput, can_return_tuple

from .hflm_common import _positive_int, attention_kwargs
from .hflm_configuration_seq2seq import HfLmEncoderDecoderConfig
from .hflm_inputs import check_input_ids
from .hflm_losses import check_seq2seq_labels, lm_loss
from .hflm_seq2seq_model import _Seq2SeqWithLMHead, passed_through


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
            **passed_through(outputs),
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


__all__ = ["MaskPredictOutput", "MaskPredictGenerateOutput", "lowest_confidence"]
