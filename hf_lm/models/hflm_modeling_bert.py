"""hf_lm's BERT-style bidirectional encoder family: base model, pretraining and task heads.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
The blocks live in `hflm_attention`, `hflm_positions`, `hflm_layers` and `hflm_stack`; this file composes
them in the shape of BERT (Devlin et al., 2019), with RoBERTa's and ALBERT's options as config
values (no segment embeddings; factorized embeddings and cross-layer sharing).

Objectives live in the data collators (`training.data.collators_mlm`): the heads only consume labels.

Shape legend: B batch, T sequence length, C hidden size, E embedding size, V vocabulary,
nc number of choices.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, can_return_tuple

from .hflm_attention import AttentionBackends
from .hflm_common import (
    attention_kwargs,
)
from .hflm_configuration_bert import HfLmBertConfig
from .hflm_inputs import (
    embed_inputs,
    first_token_states,
    host_read,
    is_integer_dtype,
)
from .hflm_layers import (
    FEED_FORWARDS,
    NORMS,
    VocabProjection,
)
from .hflm_losses import (
    check_labels,
    lm_loss,
    num_items_error,
    num_items_flag,
    sequence_classification_loss,
)
from .hflm_pretrained import (
    QA_PIPELINES,
    HfLmPreTrainedModel,
)
from .hflm_stack import (
    TransformerStack,
)


@dataclass
class HfLmBertForPreTrainingOutput(ModelOutput):
    """Outputs of `HfLmBertForPreTraining`.

    Args:
        loss: masked-LM loss plus sentence-pair loss, when labels are given.
        prediction_logits: (B, T, V) masked-LM logits ((N, V) with `sparse_prediction` in training).
        seq_relationship_logits: (B, 2) next-sentence (or sentence-order) logits.
    """

    loss: torch.FloatTensor | None = None
    prediction_logits: torch.FloatTensor | None = None
    seq_relationship_logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


class HfLmBertPreTrainedModel(AttentionBackends, HfLmPreTrainedModel):
    config_class = HfLmBertConfig
    config: HfLmBertConfig


class HfLmBertModel(HfLmBertPreTrainedModel, TransformerStack):
    """Embeddings (token + segment + position, normalized) -> N bidirectional blocks -> pooler.

    The stack is `TransformerStack`. The pooler (a tanh layer on the first token, `[CLS]`) feeds the
    sentence-level heads; the masked-LM head does not need it (`add_pooling_layer=False`), as in
    transformers' BERT.
    """

    def __init__(self, config: HfLmBertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        E, C = config.embedding_size, config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        # BERT normalizes the summed embeddings even though its blocks are post-norm: the sum of
        # three embeddings would otherwise enter the first block at an arbitrary scale
        self.build_stack(
            config,
            config.num_hidden_layers,
            is_causal=False,
            embedding_norm=True,
            type_vocab_size=config.type_vocab_size,
        )
        self.pooler = nn.Sequential(nn.Linear(C, C), nn.Tanh()) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPooling:
        """Encode a batch; every position sees every non-padding position.

        Args:
            input_ids: (B, T) token ids in [0, vocab_size).
            attention_mask: (B, T) 1 for tokens, 0 for padding.
            token_type_ids: (B, T) segment ids in [0, type_vocab_size); default all 0. Ignored by a
                model without segment embeddings (`type_vocab_size=0`, RoBERTa-style).
            position_ids: (B|1, T); by default each real token's index among the real tokens, so
                a left-padded sequence gets the positions it has alone (with right padding, the
                usual for encoders, this is BERT's 0..T-1).
            inputs_embeds: (B, T, E) instead of `input_ids`.
            kwargs: transformers' attention kwargs, passed to the attention backend.

        Returns:
            `last_hidden_state` (B, T, C) and `pooler_output` (B, C) (None without the pooler).
        """
        cfg = self.config
        inputs_embeds = embed_inputs(
            input_ids, inputs_embeds, self.embed_tokens, cfg.vocab_size, "embedding_size"
        )
        out = self.run_stack(
            inputs_embeds,
            attention_mask,
            position_ids,
            token_type_ids=token_type_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            too_long_advice="Truncate the input (tokenizer(..., truncation=True, max_length=...)).",
            **kwargs,
        )
        hidden_states = out.last_hidden_state  # (B, T, C)
        return BaseModelOutputWithPooling(
            last_hidden_state=hidden_states,
            pooler_output=(  # (B, C), from [CLS]
                self.pooler(first_token_states(hidden_states, attention_mask))
                if self.pooler is not None
                else None
            ),
            hidden_states=out.hidden_states,
            attentions=out.attentions,
        )


class HfLmBertLMHead(nn.Module):
    """BERT's masked-LM head: dense -> activation -> norm -> decoder tied to the input embeddings.

    The transform maps C to E so that ALBERT's factorized embeddings can be tied too.
    """

    def __init__(self, config: HfLmBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_size)
        self.act = FEED_FORWARDS[config.hidden_act][1]  # the elementwise activation of the family
        self.norm = NORMS[config.norm_type](config.embedding_size, eps=config.norm_eps)
        self.decoder = VocabProjection(config.embedding_size, config.vocab_size, bias=True)

    @can_return_tuple
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.act(self.dense(hidden_states))))  # (..., C) -> (..., V)


def _masked_lm(
    head: HfLmBertLMHead, hidden_states: torch.Tensor, labels, vocab_size: int, sparse: bool, n_items=None
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(loss, logits) of the masked-LM head. Labels are not shifted: position t predicts itself.

    Only the ~15% labelled positions enter the loss, so the loss is always computed from the head
    run on those rows alone: its backward never touches the (B, T, V) logits, whose backward (a
    vocabulary-sized matmul and softmax over every position) is most of a BERT training step. The
    returned logits are the full (B, T, V) ones, equal to a dense head and still differentiable;
    with `sparse` (config.sparse_prediction, in training) they are skipped too and the (N, V)
    logits of the labelled rows are returned instead.
    """
    if labels is None:
        return None, head(hidden_states)  # (B, T, V)
    check_labels(labels, hidden_states.shape[:2], vocab_size, num_items_in_batch=n_items)
    labels = labels.to(hidden_states.device)
    selected = labels != -100  # (B, T)
    targets = labels[selected][None]  # (1, N)
    if sparse:
        logits = head(hidden_states[selected])  # (N, V)
        return lm_loss(logits[None], targets, shift=False, num_items_in_batch=n_items), logits
    logits = head(hidden_states)  # (B, T, V)
    # with gradients, a separate head pass on the labelled rows keeps the loss's backward small;
    # without, the rows are read from the logits already computed
    picked = head(hidden_states[selected]) if torch.is_grad_enabled() else logits[selected]  # (N, V)
    return lm_loss(picked[None], targets, shift=False, num_items_in_batch=n_items), logits


class HfLmBertTaskModel(HfLmBertPreTrainedModel):
    """The encoder with a task head: `forward` is written once here.

    A head class builds its modules in `__init__` (after `super().__init__`, then `self.post_init()`)
    and maps the encoder's output to its own output in `head(outputs, labels, ...)`; a head whose
    targets have other names (`start_positions`, `next_sentence_label`) names them in its `forward`
    signature, where `Trainer` finds them, and passes them on.
    """

    add_pooling_layer = True  # the sentence-level heads read the pooled `[CLS]`

    def __init__(self, config: HfLmBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = HfLmBertModel(config, add_pooling_layer=self.add_pooling_layer)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> ModelOutput:
        """Encode the inputs (see `HfLmBertModel.forward`) and run the head on them.

        `labels` and the other targets are those the head's `head` documents. With
        `num_items_in_batch` (passed by `Trainer`) a loss is a sum divided by it instead of a mean,
        so gradient accumulation equals one big batch.
        """
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **attention_kwargs(kwargs, named_only=True),
        )
        # the mask goes to the head too: a head that scores every token leaves padding out (ELECTRA's)
        return self.head(outputs, labels, attention_mask=attention_mask, **kwargs)

    def head(self, outputs: BaseModelOutputWithPooling, labels, **kwargs) -> ModelOutput:
        raise NotImplementedError


class HfLmBertForMaskedLM(HfLmBertTaskModel):
    """The encoder with the masked-LM head (`AutoModelForMaskedLM`, the `fill-mask` pipeline)."""

    _tied_weights_keys = {"lm_head.decoder.weight": "model.embed_tokens.weight"}
    add_pooling_layer = False

    def __init__(self, config: HfLmBertConfig):
        super().__init__(config)
        self.lm_head = HfLmBertLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def head(self, outputs, labels, num_items_in_batch=None, **kwargs) -> MaskedLMOutput:
        """Token logits (B, T, V), and the loss when `labels` (B, T) are given (-100 = not masked)."""
        sparse = self.config.sparse_prediction and self.training
        loss, logits = _masked_lm(
            self.lm_head,
            outputs.last_hidden_state,
            labels,
            self.config.vocab_size,
            sparse,
            num_items_in_batch,
        )
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class HfLmBertForPreTraining(HfLmBertTaskModel):
    """Masked LM plus a sentence-pair head on the pooled `[CLS]`: BERT's next-sentence prediction
    (label 1 = B is a random sentence) or ALBERT's sentence-order prediction (label 1 = swapped).
    Which one is decided by the data collator, not the model."""

    _tied_weights_keys = {"lm_head.decoder.weight": "model.embed_tokens.weight"}
    # two losses normalized differently (masked tokens, sentence pairs): Trainer must not pass
    # `num_items_in_batch` (it counts the MLM labels only) and divides by the accumulation steps itself
    accepts_loss_kwargs = False

    def __init__(self, config: HfLmBertConfig):
        super().__init__(config)
        self.lm_head = HfLmBertLMHead(config)
        self.sentence_head = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        next_sentence_label: torch.LongTensor | None = None,
        **kwargs,
    ) -> HfLmBertForPreTrainingOutput:
        """`HfLmBertTaskModel.forward` with the sentence-pair target (named here, where `Trainer` looks
        for targets): `labels` (B, T) masked-LM targets (-100 = not masked); `next_sentence_label`
        (B,) in {0, 1}."""
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, labels)
        return super().forward(*inputs, next_sentence_label=next_sentence_label, **kwargs)

    def head(self, outputs, labels, next_sentence_label=None, num_items_in_batch=None, **kwargs):
        """The loss is the sum of the two losses given (as in BERT)."""
        sparse = self.config.sparse_prediction and self.training
        loss, logits = _masked_lm(
            self.lm_head,
            outputs.last_hidden_state,
            labels,
            self.config.vocab_size,
            sparse,
            num_items_in_batch,
        )
        sentence_logits = self.sentence_head(outputs.pooler_output)  # (B, 2)
        if next_sentence_label is not None:
            nsp = F.cross_entropy(
                sentence_logits.float(),
                _checked_sentence_labels(next_sentence_label, sentence_logits.shape[0]),
            )
            loss = nsp if loss is None else loss + nsp
        return HfLmBertForPreTrainingOutput(
            loss=loss,
            prediction_logits=logits,
            seq_relationship_logits=sentence_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


def _checked_sentence_labels(labels, B: int) -> torch.Tensor:
    """(B,) sentence-pair labels in {0, 1}, or a ValueError saying what was given."""
    if (
        not torch.is_tensor(labels)
        or tuple(labels.shape) not in ((B,), (B, 1))
        or not is_integer_dtype(labels.dtype)
        or bool(((labels < 0) | (labels > 1)).any())
    ):
        got = (
            f"a {labels.dtype} tensor of shape {tuple(labels.shape)} with values {labels.unique().tolist()}"
            if torch.is_tensor(labels)
            else type(labels).__name__
        )
        raise ValueError(f"`next_sentence_label` must be ({B},) integer labels in {{0, 1}}, got {got}.")
    return labels.view(-1)


def _classifier_dropout(config: HfLmBertConfig) -> nn.Dropout:
    p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout
    return nn.Dropout(p)


class HfLmBertForSequenceClassification(HfLmBertTaskModel):
    """A classifier (or regressor) on the pooled `[CLS]` state; loss by `config.problem_type`."""

    def __init__(self, config: HfLmBertConfig):
        super().__init__(config)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def head(self, outputs, labels, num_items_in_batch=None, **kwargs) -> SequenceClassifierOutput:
        """Logits (B, num_labels). `labels`: (B,) class ids, (B,) floats for regression
        (num_labels=1), or (B, num_labels) multi-hot floats for multi-label classification."""
        logits = self.classifier(self.dropout(outputs.pooler_output))  # (B, num_labels)
        return classifier_output(self.config, logits, outputs, labels, num_items_in_batch)


def classifier_output(config, logits, outputs, labels, num_items_in_batch=None) -> SequenceClassifierOutput:
    """A sentence classifier's output from its logits (B, num_labels), with the loss when `labels`
    are given (`sequence_classification_loss`: regression, single- or multi-label)."""
    loss = None
    if labels is not None:
        loss = sequence_classification_loss(config, logits, labels, num_items_in_batch)
    return SequenceClassifierOutput(
        loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
    )


class HfLmBertForTokenClassification(HfLmBertTaskModel):
    """A classifier on every token (NER, POS tagging); `labels` (B, T) with -100 ignored."""

    add_pooling_layer = False

    def __init__(self, config: HfLmBertConfig):
        super().__init__(config)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def head(self, outputs, labels, num_items_in_batch=None, **kwargs) -> TokenClassifierOutput:
        """Logits (B, T, num_labels); the loss is the mean cross-entropy over labelled tokens."""
        logits = self.classifier(self.dropout(outputs.last_hidden_state))  # (B, T, num_labels)
        loss = None
        if labels is not None:
            n_items = num_items_in_batch
            check_labels(
                labels, logits.shape[:2], self.num_labels, num_items_in_batch=n_items, what="class ids"
            )
            loss = lm_loss(logits, labels, shift=False, num_items_in_batch=n_items)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class HfLmBertForQuestionAnswering(HfLmBertTaskModel):
    """Extractive QA (SQuAD): start and end logits for every token of `[CLS] question [SEP] context [SEP]`."""

    add_pooling_layer = False
    _hflm_pipelines = QA_PIPELINES

    def __init__(self, config: HfLmBertConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput:
        """`HfLmBertTaskModel.forward` with the answer span as targets (named here, where `Trainer`
        looks for targets): `start_positions` and `end_positions` (B,) token indices."""
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return super().forward(
            *inputs, start_positions=start_positions, end_positions=end_positions, **kwargs
        )

    def head(self, outputs, labels, start_positions=None, end_positions=None, **kwargs):
        """`start_logits`, `end_logits`: (B, T). With `start_positions` and `end_positions` (B,)
        the loss is the mean of the two cross-entropies; positions outside [0, T) are ignored
        (as in transformers: an answer cut off by truncation does not count)."""
        logits = self.qa_outputs(outputs.last_hidden_state)  # (B, T, 2)
        start_logits, end_logits = (
            x.squeeze(-1).contiguous() for x in logits.split(1, dim=-1)
        )  # (B, T) each
        loss = None
        if (start_positions is None) != (end_positions is None):
            raise ValueError("Pass both `start_positions` and `end_positions`, or neither.")
        if start_positions is not None:
            B, T = start_logits.shape
            for name, positions in (("start_positions", start_positions), ("end_positions", end_positions)):
                if not torch.is_tensor(positions) or positions.numel() != B:
                    got = tuple(positions.shape) if torch.is_tensor(positions) else type(positions).__name__
                    raise ValueError(f"`{name}` must hold one position per example ({B}), got {got}.")
                if not is_integer_dtype(positions.dtype):
                    raise ValueError(
                        f"`{name}` must hold integer token positions, got dtype {positions.dtype}."
                    )
            # out-of-range positions (the answer was truncated away) become T and are ignored
            start = start_positions.view(-1).to(start_logits.device).clamp(0, T)
            end = end_positions.view(-1).to(end_logits.device).clamp(0, T)
            loss = (
                F.cross_entropy(start_logits.float(), start, ignore_index=T)
                + F.cross_entropy(end_logits.float(), end, ignore_index=T)
            ) / 2
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class HfLmBertForMultipleChoice(HfLmBertTaskModel):
    """SWAG-style multiple choice: each (context, choice) pair is encoded and scored by one Linear
    on its pooled `[CLS]`; the scores of the choices are compared by a softmax."""

    def __init__(self, config: HfLmBertConfig):
        super().__init__(config)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ):
        """Inputs are (B, nc, T) (`inputs_embeds` (B, nc, T, E)); logits (B, nc); `labels` (B,) the
        index of the right choice. Every pair is encoded as one row of a (B * nc, T) batch."""
        source = input_ids if input_ids is not None else inputs_embeds
        if not torch.is_tensor(source) or source.dim() != (3 if input_ids is not None else 4):
            raise ValueError(
                "Multiple choice takes `input_ids` of shape (batch, num_choices, seq_len) (or `inputs_embeds` "
                f"(batch, num_choices, seq_len, embedding_size)), got "
                f"{tuple(source.shape) if torch.is_tensor(source) else type(source).__name__}."
            )
        B, nc = source.shape[:2]

        def flat(x):  # (B, nc, T, ...) -> (B * nc, T, ...)
            if x is None:
                return None
            if tuple(x.shape[:2]) != (B, nc):
                raise ValueError(
                    f"Every input must start with (batch, num_choices) = ({B}, {nc}), got {tuple(x.shape)}."
                )
            return x.reshape(B * nc, *x.shape[2:])

        position_ids = (
            flat(position_ids) if position_ids is not None and position_ids.dim() == 3 else position_ids
        )
        return super().forward(
            flat(input_ids),
            flat(attention_mask),
            flat(token_type_ids),
            position_ids,
            flat(inputs_embeds),
            labels,
            num_choices=nc,
            **kwargs,
        )

    def head(self, outputs, labels, num_choices: int, num_items_in_batch=None, **kwargs):
        nc = num_choices
        logits = self.classifier(self.dropout(outputs.pooler_output)).view(-1, nc)  # (B, nc)
        B = logits.shape[0]
        loss = None
        if labels is not None:
            n = num_items_in_batch  # Trainer's count of labels in the accumulated batch
            count_ok = num_items_flag(n)
            if not torch.is_tensor(labels) or labels.numel() != B or not is_integer_dtype(labels.dtype):
                raise ValueError(
                    f"`labels` must be ({B},) integer choice indices in [0, {nc}), got {labels!r}."
                )
            ok = host_read(((labels >= 0) & (labels < nc)).all(), *([] if count_ok is None else [count_ok]))
            if not ok[0]:
                raise ValueError(
                    f"`labels` must be ({B},) choice indices in [0, {nc}), got {labels.tolist()}."
                )
            if not all(ok):
                raise num_items_error(n)
            loss = F.cross_entropy(
                logits.float(),
                labels.view(-1).to(logits.device).long(),
                reduction="mean" if n is None else "sum",
            )
            if n is not None:
                loss = loss / (n.to(loss.device).reshape(()) if torch.is_tensor(n) else n)
        return MultipleChoiceModelOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


__all__ = [
    "HfLmBertPreTrainedModel",
    "HfLmBertModel",
    "HfLmBertTaskModel",
    "HfLmBertForMaskedLM",
    "HfLmBertForPreTraining",
    "HfLmBertForSequenceClassification",
    "HfLmBertForTokenClassification",
    "HfLmBertForQuestionAnswering",
    "HfLmBertForMultipleChoice",
    "HfLmBertForPreTrainingOutput",
]
