"""Weight import from transformers' BERT and RoBERTa with matching hidden states and logits."""

import pytest
import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertModel,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaModel,
)

from hf_lm.convert import from_transformers

V = 113
SIZES = dict(
    vocab_size=V,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=40,
)


def batch():
    """Right padding (the encoders' convention) and two segments."""
    x = torch.randint(3, V, (3, 11))
    mask = torch.ones_like(x)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    token_types = torch.zeros_like(x)
    token_types[:, 6:] = 1
    return x, mask, token_types


def compare(ref, new, names, x, mask, token_types=None, real_only=False):
    with torch.no_grad():
        a = ref(x, attention_mask=mask, token_type_ids=token_types)
        b = new(x, attention_mask=mask, token_type_ids=token_types)
    for name in names:
        expected, got = a[name], b[name]
        if real_only and expected.dim() == 3:
            keep = mask.bool()
            expected, got = expected[keep], got[keep]
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4, msg=name)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_bert_model_matches(impl, act):
    ref = BertModel(BertConfig(**SIZES, hidden_act=act, attn_implementation=impl)).eval()
    new = from_transformers(ref)
    x, mask, tt = batch()
    compare(ref, new, ["last_hidden_state", "pooler_output"], x, mask, tt)  # padding positions too


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_bert_masked_lm_matches(impl):
    ref = BertForMaskedLM(BertConfig(**SIZES, attn_implementation=impl)).eval()
    new = from_transformers(ref)
    assert new.lm_head.decoder.weight is new.model.embed_tokens.weight
    x, mask, tt = batch()
    compare(ref, new, ["logits"], x, mask, tt)
    labels = torch.where(torch.rand(x.shape) < 0.3, x, -100)
    labels[0, 1] = x[0, 1]
    with torch.no_grad():
        torch.testing.assert_close(
            new(x, attention_mask=mask, token_type_ids=tt, labels=labels).loss,
            ref(x, attention_mask=mask, token_type_ids=tt, labels=labels).loss,
            atol=1e-5,
            rtol=1e-5,
        )


def test_bert_for_pretraining_matches():
    ref = BertForPreTraining(BertConfig(**SIZES)).eval()
    new = from_transformers(ref)
    x, mask, tt = batch()
    compare(ref, new, ["prediction_logits", "seq_relationship_logits"], x, mask, tt)


def test_bert_sequence_classification_matches():
    ref = BertForSequenceClassification(BertConfig(**SIZES, num_labels=3)).eval()
    new = from_transformers(ref)
    assert new.config.num_labels == 3 and new.config.id2label == ref.config.id2label
    x, mask, tt = batch()
    compare(ref, new, ["logits"], x, mask, tt)


@pytest.mark.parametrize("type_vocab_size", [1, 2])
def test_roberta_masked_lm_matches_on_real_tokens(type_vocab_size):
    """RoBERTa numbers positions from padding_idx + 1 and gives padding the padding row; hf_lm drops
    those unused rows, so outputs match on every real token (padding outputs are never used)."""
    config = RobertaConfig(
        **{**SIZES, "max_position_embeddings": 42}, type_vocab_size=type_vocab_size, pad_token_id=1
    )
    ref = RobertaForMaskedLM(config).eval()
    new = from_transformers(ref)
    assert new.config.max_position_embeddings == 40
    x, mask, _ = batch()
    x = x.masked_fill(mask == 0, 1)  # RoBERTa derives positions from the pad id
    compare(ref, new, ["logits"], x, mask, real_only=True)
    base = from_transformers(RobertaModel(config, add_pooling_layer=True).eval())
    assert base.pooler is not None


def test_unconvertible_bert_configs_are_refused():
    with pytest.raises(ValueError, match="hidden_act"):
        from_transformers(BertModel(BertConfig(**SIZES, hidden_act="silu")))
    with pytest.raises(ValueError, match="is_decoder"):
        from_transformers(BertModel(BertConfig(**SIZES, is_decoder=True)))
