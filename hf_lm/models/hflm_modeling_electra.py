"""hf_lm's ELECTRA models: BERT's encoder with the replaced-token-detection head, and the generator.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
ELECTRA (Clark et al., 2020) is an extension of the BERT family, so this file reuses
`hflm_modeling_bert` instead of copying it: the encoder is `HfLmBertModel` without the pooler (the
embeddings are E wide and projected to C when E != C, its `embed_proj`, ELECTRA's
`embeddings_project`), the generator is BERT's masked LM, and only the discriminator's head and
ELECTRA's classification head are new. A saved ELECTRA folder ships the BERT files and these two.

The joint pretraining of a generator and a discriminator (shared embeddings, sampled replacements,
the λ = 50 loss weighting) is a training objective (`training.objectives.electra`): each model here is one
half, saved and loaded on its own, as transformers' `ElectraForPreTraining` and `ElectraForMaskedLM`.

Shape legend: B batch, T sequence length, C hidden size, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import TokenClassifierOutput

from .hflm_configuration_electra import HfLmElectraConfig
from .hflm_inputs import (
    first_token_states,
)
from .hflm_layers import (
    FEED_FORWARDS,
)
from .hflm_losses import (
    check_labels,
)
from .hflm_modeling_bert import (
    HfLmBertForMaskedLM,
    HfLmBertForTokenClassification,
    HfLmBertModel,
    HfLmBertTaskModel,
    _classifier_dropout,
    classifier_output,
)


class HfLmElectraModel(HfLmBertModel):
    """ELECTRA's encoder: BERT's, without the pooler (ELECTRA has no next-sentence task to train one)."""

    config_class = HfLmElectraConfig

    def __init__(self, config: HfLmElectraConfig, add_pooling_layer: bool = False):
        super().__init__(config, add_pooling_layer=add_pooling_layer)


class HfLmElectraTaskModel(HfLmBertTaskModel):
    """The encoder (no pooler) with a task head; see `HfLmBertTaskModel`."""

    config_class = HfLmElectraConfig
    add_pooling_layer = False


class HfLmElectraForMaskedLM(HfLmBertForMaskedLM):
    """ELECTRA's generator: a (small) masked LM, BERT's head tied to the input embeddings.

    transformers' `ElectraForMaskedLM` always uses GELU in its head; this one uses `hidden_act`'s
    activation, the same for ELECTRA's "gelu".
    """

    config_class = HfLmElectraConfig


class HfLmElectraDiscriminatorHead(nn.Module):
    """dense (C -> C) -> activation -> dense_prediction (C -> 1): one "replaced?" score per token."""

    def __init__(self, config: HfLmElectraConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = FEED_FORWARDS[config.hidden_act][1]  # the elementwise activation of the family
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.act(self.dense(hidden_states))).squeeze(-1)  # (B, T, C) -> (B, T)


class HfLmElectraForPreTraining(HfLmElectraTaskModel):
    """ELECTRA's discriminator (`AutoModelForPreTraining`): for every token, was it replaced?

    Its output has the fields of transformers' `ElectraForPreTrainingOutput`: `loss`, `logits` (B, T)
    (> 0: replaced), `hidden_states`, `attentions` (a `TokenClassifierOutput`).

    This is the model that is fine-tuned after pretraining (its encoder loads into
    `HfLmElectraForSequenceClassification` and `HfLmElectraForTokenClassification`).
    """

    def __init__(self, config: HfLmElectraConfig):
        super().__init__(config)
        self.discriminator_head = HfLmElectraDiscriminatorHead(config)
        self.post_init()

    def head(
        self, outputs, labels, attention_mask=None, num_items_in_batch=None, **kwargs
    ) -> TokenClassifierOutput:
        """Logits (B, T). `labels` (B, T): 1 = replaced, 0 = original, -100 = not counted; the loss is
        the binary cross-entropy averaged over the tokens that have a label and are not padding
        (transformers averages over the unpadded tokens: the same when every label is 0 or 1).
        ELECTRA's paper counts every token, the unreplaced included. With `num_items_in_batch`
        (Trainer's count of labels other than -100: label padding -100) it is the sum divided by
        that count."""
        logits = self.discriminator_head(outputs.last_hidden_state)  # (B, T)
        loss = None
        if labels is not None:
            n = num_items_in_batch
            what = "replaced-token labels (1 replaced, 0 original)"
            check_labels(labels, logits.shape, 2, num_items_in_batch=n, what=what)
            labels = labels.to(logits.device)
            counted = labels != -100  # (B, T)
            if attention_mask is not None:  # padding never counts
                counted = counted & (attention_mask.to(logits.device) != 0)
            scores, targets = logits[counted].float(), labels[counted].float()  # (N,) each
            if n is None:
                loss = F.binary_cross_entropy_with_logits(scores, targets)
            else:
                loss = F.binary_cross_entropy_with_logits(scores, targets, reduction="sum")
                loss = loss / (n.to(loss.device).reshape(()) if torch.is_tensor(n) else n)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class HfLmElectraForSequenceClassification(HfLmElectraTaskModel):
    """ELECTRA's sentence classifier on the `[CLS]` state: dropout -> dense -> GELU -> dropout ->
    classifier (transformers' `ElectraClassificationHead`; BERT's tanh pooler was pretrained by NSP,
    which ELECTRA does not have, so the head learns its own projection)."""

    def __init__(self, config: HfLmElectraConfig):
        super().__init__(config)
        self.dropout = _classifier_dropout(config)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def head(self, outputs, labels, num_items_in_batch=None, **kwargs):
        """Logits (B, num_labels); `labels` as `HfLmBertForSequenceClassification` takes them."""
        cls = first_token_states(outputs.last_hidden_state, kwargs.get("attention_mask"))  # (B, C)
        hidden = self.dropout(F.gelu(self.dense(self.dropout(cls))))  # (B, C)
        logits = self.classifier(hidden)  # (B, num_labels)
        return classifier_output(self.config, logits, outputs, labels, num_items_in_batch)


class HfLmElectraForTokenClassification(HfLmBertForTokenClassification):
    """A classifier on every token (NER, POS tagging), as `HfLmBertForTokenClassification`."""

    config_class = HfLmElectraConfig


__all__ = [
    "HfLmElectraModel",
    "HfLmElectraTaskModel",
    "HfLmElectraForMaskedLM",
    "HfLmElectraForPreTraining",
    "HfLmElectraForSequenceClassification",
    "HfLmElectraForTokenClassification",
]
