"""The BERT-style encoder family: bidirectionality, heads, losses, sharing, saving and bad input."""

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import parameters_after_one_trainer_step
from remote_code import shipped_files
from test_shipped_files import SHIPPED

from hf_lm import (
    HfLmBertConfig,
    HfLmBertForMaskedLM,
    HfLmBertForMultipleChoice,
    HfLmBertForPreTraining,
    HfLmBertForQuestionAnswering,
    HfLmBertForSequenceClassification,
    HfLmBertForTokenClassification,
    HfLmBertModel,
)
from hf_lm.testing import BERT_VARIANTS

V = 101


def tiny_bert_config(**overrides) -> HfLmBertConfig:
    kwargs = dict(
        vocab_size=V,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    kwargs.update(overrides)
    return HfLmBertConfig(**kwargs)


@pytest.fixture(params=sorted(BERT_VARIANTS))
def bert_config(request):
    return tiny_bert_config(**BERT_VARIANTS[request.param])


def ids(b=2, t=10, low=3):
    return torch.randint(low, V, (b, t))


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("padded", [False, True])
def test_attention_is_bidirectional(bert_config, impl, padded):
    """A later token changes an earlier position's output (SDPA would be causal if told so)."""
    bert_config._attn_implementation = impl
    model = HfLmBertModel(bert_config).eval()
    x = ids()
    mask = torch.ones_like(x)
    if padded:
        mask[:, -2:] = 0
    y = x.clone()
    y[:, 5] = (y[:, 5] + 1 - 3) % (V - 3) + 3  # change the token at position 5
    with torch.no_grad():
        a = model(x, attention_mask=mask).last_hidden_state
        b = model(y, attention_mask=mask).last_hidden_state
    assert (a[:, 0] - b[:, 0]).abs().max() > 1e-4  # position 0 saw position 5
    # and padding is invisible: changing a padded token changes no real position
    if padded:
        z = x.clone()
        z[:, -1] = 3
        with torch.no_grad():
            c = model(z, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(a[:, :-2], c[:, :-2], rtol=0, atol=1e-6)


def test_sdpa_and_eager_agree(bert_config):
    x = ids(3, 9)
    mask = torch.ones_like(x)
    mask[1, 6:] = 0
    mask[2, :3] = 0  # left padding too
    out = {}
    for impl in ("sdpa", "eager"):
        bert_config._attn_implementation = impl
        torch.manual_seed(0)
        model = HfLmBertForMaskedLM(bert_config).eval()
        with torch.no_grad():
            out[impl] = model(x, attention_mask=mask).logits
    torch.testing.assert_close(out["sdpa"], out["eager"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("side", ["right", "left"])
def test_padded_batch_equals_each_sequence_alone(bert_config, side):
    model = HfLmBertModel(bert_config).eval()
    lengths = [9, 5, 7]
    T = max(lengths)
    x = torch.full((3, T), bert_config.pad_token_id or 0)
    mask = torch.zeros(3, T, dtype=torch.long)
    seqs = [ids(1, n)[0] for n in lengths]
    for i, s in enumerate(seqs):
        sl = slice(T - len(s), T) if side == "left" else slice(0, len(s))
        x[i, sl], mask[i, sl] = s, 1
    with torch.no_grad():
        batch = model(x, attention_mask=mask)
        for i, s in enumerate(seqs):
            alone = model(s[None])
            sl = slice(T - len(s), T) if side == "left" else slice(0, len(s))
            torch.testing.assert_close(
                batch.last_hidden_state[i, sl], alone.last_hidden_state[0], atol=1e-5, rtol=1e-4
            )
            if side == "right":  # the pooler reads position 0, the [CLS]
                torch.testing.assert_close(
                    batch.pooler_output[i], alone.pooler_output[0], atol=1e-5, rtol=1e-4
                )


def test_albert_factorized_embeddings_and_cross_layer_sharing():
    shared = tiny_bert_config(embedding_size=8, num_hidden_groups=1, num_hidden_layers=4)
    model = HfLmBertModel(shared)
    assert len(model.layers) == 1 and model.layer_to_block == [0, 0, 0, 0]
    assert model.embed_tokens.weight.shape == (V, 8) and model.embed_proj.weight.shape == (32, 8)
    unshared = HfLmBertModel(tiny_bert_config(num_hidden_layers=4))
    per_block = sum(p.numel() for p in unshared.layers[0].parameters())
    assert (
        unshared.num_parameters() - model.num_parameters()
        == 3 * per_block + V * 24 - 8 * 32 - 32 + 2 * 24 + 24 * 64 + 24 * 2
    )
    # two groups over four layers: layers 0-1 run block 0, layers 2-3 block 1 (ALBERT's grouping)
    assert HfLmBertModel(tiny_bert_config(num_hidden_layers=4, num_hidden_groups=2)).layer_to_block == [
        0,
        0,
        1,
        1,
    ]
    # the MLM head maps back to E and stays tied to the E-sized embedding
    mlm = HfLmBertForMaskedLM(shared)
    assert mlm.lm_head.decoder.weight is mlm.model.embed_tokens.weight
    assert mlm(ids()).logits.shape == (2, 10, V)


def test_presets():
    roberta = HfLmBertConfig.from_preset("roberta", vocab_size=V, hidden_size=32, num_attention_heads=4)
    assert roberta.type_vocab_size == 0 and HfLmBertModel(roberta).token_type_embeddings is None
    albert = HfLmBertConfig.from_preset("albert", vocab_size=V, hidden_size=64, num_attention_heads=4)
    assert albert.embedding_size == 128 and albert.num_hidden_groups == 1
    bert = HfLmBertConfig.from_preset("bert")
    assert (bert.hidden_size, bert.num_hidden_layers, bert.type_vocab_size, bert.norm_position) == (
        768,
        12,
        2,
        "post",
    )
    with pytest.raises(ValueError, match="Unknown preset 'electra'"):
        HfLmBertConfig.from_preset("electra")


def test_masked_lm_loss_is_unshifted_cross_entropy_on_labelled_positions():
    model = HfLmBertForMaskedLM(tiny_bert_config()).eval()
    x = ids()
    labels = torch.full_like(x, -100)
    labels[0, 3], labels[1, 0], labels[1, 7] = 5, 9, 11
    out = model(x, labels=labels)
    logits = out.logits
    expected = F.cross_entropy(logits[[0, 1, 1], [3, 0, 7]], torch.tensor([5, 9, 11]))
    torch.testing.assert_close(out.loss, expected)
    # num_items_in_batch: a sum over the masked tokens divided by the count given
    summed = model(x, labels=labels, num_items_in_batch=torch.tensor(6)).loss
    torch.testing.assert_close(summed, expected * 3 / 6)


def test_sparse_prediction_gives_the_same_loss_and_gradients():
    config = tiny_bert_config()
    torch.manual_seed(0)
    dense = HfLmBertForMaskedLM(config).train()
    sparse = HfLmBertForMaskedLM(tiny_bert_config(sparse_prediction=True)).train()
    sparse.load_state_dict(dense.state_dict())
    x = ids(3, 12)
    labels = torch.where(torch.rand(x.shape) < 0.2, x, -100)
    labels[0, 0] = x[0, 0]
    a, b = dense(x, labels=labels), sparse(x, labels=labels)
    n = int((labels != -100).sum())
    assert a.logits.shape == (3, 12, V) and b.logits.shape == (n, V)
    torch.testing.assert_close(a.loss, b.loss)
    a.loss.backward()
    b.loss.backward()
    for (name, p), q in zip(dense.named_parameters(), sparse.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5, msg=name)
    # in eval mode the logits are full again (fill-mask needs every position)
    assert sparse.eval()(x, labels=labels).logits.shape == (3, 12, V)


def test_pretraining_loss_is_mlm_plus_sentence_pair_loss():
    model = HfLmBertForPreTraining(tiny_bert_config()).eval()
    x, tt = ids(), torch.zeros(2, 10, dtype=torch.long)
    tt[:, 6:] = 1
    labels = torch.full_like(x, -100)
    labels[:, 2] = 7
    nsp = torch.tensor([0, 1])
    out = model(x, token_type_ids=tt, labels=labels, next_sentence_label=nsp)
    mlm = F.cross_entropy(out.prediction_logits[:, 2], torch.tensor([7, 7]))
    sop = F.cross_entropy(out.seq_relationship_logits, nsp)
    torch.testing.assert_close(out.loss, mlm + sop)
    assert model(x, token_type_ids=tt, next_sentence_label=nsp).loss.item() == pytest.approx(
        sop.item(), rel=1e-6
    )
    with pytest.raises(ValueError, match="next_sentence_label"):
        model(x, next_sentence_label=torch.tensor([0, 2]))


def test_sequence_classification_problem_types():
    x = ids()
    single = HfLmBertForSequenceClassification(tiny_bert_config(num_labels=3)).eval()
    out = single(x, labels=torch.tensor([0, 2]))
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, torch.tensor([0, 2])))
    reg = HfLmBertForSequenceClassification(tiny_bert_config(num_labels=1)).eval()
    out = reg(x, labels=torch.tensor([0.5, -1.0]))
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.squeeze(-1), torch.tensor([0.5, -1.0])))
    multi = HfLmBertForSequenceClassification(
        tiny_bert_config(num_labels=3, problem_type="multi_label_classification")
    ).eval()
    target = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    out = multi(x, labels=target)
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, target))
    with pytest.raises(ValueError, match="class ids"):
        single(x, labels=torch.tensor([0, 3]))


def test_token_classification_ignores_minus_100():
    model = HfLmBertForTokenClassification(tiny_bert_config(num_labels=5)).eval()
    x = ids()
    labels = torch.full_like(x, -100)
    labels[0, 1:4] = torch.tensor([1, 2, 3])
    out = model(x, labels=labels)
    assert out.logits.shape == (2, 10, 5)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits[0, 1:4], torch.tensor([1, 2, 3])))
    with pytest.raises(ValueError, match="labels"):
        model(x, labels=torch.full_like(x, 5))


def test_question_answering_loss_and_truncated_answers():
    model = HfLmBertForQuestionAnswering(tiny_bert_config()).eval()
    x = ids()
    out = model(x, start_positions=torch.tensor([2, 4]), end_positions=torch.tensor([3, 6]))
    assert out.start_logits.shape == out.end_logits.shape == (2, 10)
    expected = (
        F.cross_entropy(out.start_logits, torch.tensor([2, 4]))
        + F.cross_entropy(out.end_logits, torch.tensor([3, 6]))
    ) / 2
    torch.testing.assert_close(out.loss, expected)
    # an answer truncated away (position beyond the sequence) does not count
    cut = model(x, start_positions=torch.tensor([2, 50]), end_positions=torch.tensor([3, 50]))
    expected = (
        F.cross_entropy(out.start_logits[:1], torch.tensor([2]))
        + F.cross_entropy(out.end_logits[:1], torch.tensor([3]))
    ) / 2
    torch.testing.assert_close(cut.loss, expected)
    with pytest.raises(ValueError, match="both"):
        model(x, start_positions=torch.tensor([1, 2]))


def test_multiple_choice_scores_each_pair():
    model = HfLmBertForMultipleChoice(tiny_bert_config()).eval()
    x = torch.randint(3, V, (2, 4, 7))
    mask = torch.ones_like(x)
    mask[:, :, 5:] = 0
    out = model(x, attention_mask=mask, labels=torch.tensor([1, 3]))
    assert out.logits.shape == (2, 4)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, torch.tensor([1, 3])))
    # each choice is scored alone: the same pair in another batch slot gets the same score
    single = model(x[1:, 2:3], attention_mask=mask[1:, 2:3]).logits
    torch.testing.assert_close(single[0, 0], out.logits[1, 2], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="num_choices"):
        model(torch.randint(3, V, (2, 7)))


def test_dropout_only_in_training():
    model = HfLmBertForMaskedLM(tiny_bert_config(hidden_dropout=0.5, attention_dropout=0.5))
    x = ids()
    model.eval()
    torch.testing.assert_close(model(x).logits, model(x).logits, rtol=0, atol=0)
    model.train()
    assert not torch.equal(model(x).logits, model(x).logits)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(type_vocab_size=-1), "type_vocab_size"),
        (dict(embedding_size=0), "embedding_size"),
        (dict(num_hidden_groups=3), "num_hidden_groups"),
        (dict(classifier_dropout=1.5), "classifier_dropout"),
        (dict(sparse_prediction="yes"), "sparse_prediction"),
        (dict(position_embedding_type="sinusoidal", embedding_size=15), "embedding_size"),
        (dict(hidden_act="tanh"), "hidden_act"),
        (dict(norm_position="sandwich"), "norm_position"),
        (dict(pad_token_id=500), "pad_token_id"),
    ],
)
def test_invalid_config_raises_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        tiny_bert_config(**overrides)


def test_bad_inputs_get_clear_errors():
    model = HfLmBertForMaskedLM(tiny_bert_config()).eval()
    x = ids()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.full((1, 4), V))
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        model(torch.randint(3, V, (1, 65)))
    with pytest.raises(ValueError, match="token_type_ids"):
        model(x, token_type_ids=torch.full_like(x, 2))
    with pytest.raises(ValueError, match="token_type_ids"):
        model(x, token_type_ids=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_mask"):
        model(x, attention_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="empty"):
        model(torch.zeros(0, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="labels"):
        model(x, labels=x[:, :3])
    with pytest.raises(ValueError, match="embedding_size=32"):
        model(inputs_embeds=torch.randn(2, 5, 7))
    roberta = HfLmBertForMaskedLM(tiny_bert_config(type_vocab_size=0)).eval()
    # no segment embeddings: the segment ids a BERT-style tokenizer sends for pairs are ignored
    torch.testing.assert_close(roberta(x, token_type_ids=torch.ones_like(x)).logits, roberta(x).logits)


HEADS = [
    HfLmBertModel,
    HfLmBertForMaskedLM,
    HfLmBertForPreTraining,
    HfLmBertForSequenceClassification,
    HfLmBertForTokenClassification,
    HfLmBertForQuestionAnswering,
    HfLmBertForMultipleChoice,
]


@pytest.mark.parametrize("cls", HEADS, ids=lambda c: c.__name__)
def test_save_load_round_trip_every_head(tmp_path, cls):
    model = cls(tiny_bert_config(**BERT_VARIANTS["albert"])).eval()
    x = torch.randint(3, V, (2, 3, 6)) if cls is HfLmBertForMultipleChoice else ids()
    model.save_pretrained(tmp_path)
    loaded, info = cls.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    a, b = model(x), loaded.eval()(x)
    for key, value in a.items():
        if torch.is_tensor(value):
            torch.testing.assert_close(b[key], value, rtol=0, atol=1e-6)
    # the question-answering head also carries hf_lm's QA pipeline (tests/test_pipelines_remote.py)
    qa_pipeline = {"hflm_pipelines.py"} if cls is HfLmBertForQuestionAnswering else set()
    assert shipped_files(tmp_path) == SHIPPED["bert"] | qa_pipeline


def test_auto_map_lists_every_head(tmp_path):
    HfLmBertForMaskedLM(tiny_bert_config()).save_pretrained(tmp_path)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "hflm_configuration_bert.HfLmBertConfig",
        "AutoModel": "hflm_modeling_bert.HfLmBertModel",
        "AutoModelForMaskedLM": "hflm_modeling_bert.HfLmBertForMaskedLM",
        "AutoModelForPreTraining": "hflm_modeling_bert.HfLmBertForPreTraining",
        "AutoModelForSequenceClassification": "hflm_modeling_bert.HfLmBertForSequenceClassification",
        "AutoModelForTokenClassification": "hflm_modeling_bert.HfLmBertForTokenClassification",
        "AutoModelForQuestionAnswering": "hflm_modeling_bert.HfLmBertForQuestionAnswering",
        "AutoModelForMultipleChoice": "hflm_modeling_bert.HfLmBertForMultipleChoice",
    }
    card = (tmp_path / "README.md").read_text()
    assert "pipeline_tag: fill-mask" in card and "- hflm_bert" in card


@pytest.mark.parametrize(
    "cls, problem",
    [
        (HfLmBertForSequenceClassification, "single_label_classification"),
        (HfLmBertForSequenceClassification, "regression"),
        (HfLmBertForSequenceClassification, "multi_label_classification"),
        (HfLmBertForMultipleChoice, None),
        (HfLmBertForPreTraining, None),
    ],
)
def test_trainer_gradient_accumulation_matches_full_batch(tmp_path, cls, problem):
    """Trainer passes `num_items_in_batch` and then no longer divides by the accumulation steps:
    every head must normalize by it (or opt out), or accumulated gradients are k times too large."""
    from datasets import Dataset

    n = 8
    g = torch.Generator().manual_seed(1)
    if cls is HfLmBertForMultipleChoice:
        data = {
            "input_ids": torch.randint(3, V, (n, 3, 6), generator=g),
            "labels": torch.randint(0, 3, (n,), generator=g),
        }
    else:
        data = {"input_ids": torch.randint(3, V, (n, 8), generator=g)}
        if cls is HfLmBertForPreTraining:
            # the same number of masked tokens in every micro-batch: this head opts out of
            # `num_items_in_batch` (two losses), so Trainer averages per-micro-batch means, which equal
            # the full-batch mean only then (as for transformers' own BertForPreTraining)
            mlm = torch.zeros(n, 8, dtype=torch.bool)
            mlm[:, [1, 5]] = True
            data["labels"] = torch.where(mlm, data["input_ids"], -100)
            data["next_sentence_label"] = torch.randint(0, 2, (n,), generator=g)
        elif problem == "regression":
            data["labels"] = torch.randn(n, generator=g)
        elif problem == "multi_label_classification":
            data["labels"] = (torch.rand(n, 3, generator=g) < 0.5).float()
        else:
            data["labels"] = torch.randint(0, 3, (n,), generator=g)
    dataset = Dataset.from_dict({k: v.tolist() for k, v in data.items()})
    num_labels = 1 if problem == "regression" else 3
    full, accumulated = parameters_after_one_trainer_step(
        lambda: cls(tiny_bert_config(num_labels=num_labels, problem_type=problem)),
        dataset,
        tmp_path,
        learning_rate=0.5,
        max_grad_norm=0.0,
    )
    torch.testing.assert_close(full, accumulated, rtol=1e-4, atol=1e-5)


def test_masked_lm_loss_gradients_equal_those_of_the_full_logits():
    """The loss runs the head on the labelled rows alone (a much cheaper backward); its gradients
    must equal those of cross-entropy on the returned (B, T, V) logits."""
    torch.manual_seed(0)
    model = HfLmBertForMaskedLM(tiny_bert_config()).train()
    x = ids(3, 12)
    labels = torch.where(torch.rand(x.shape) < 0.2, x, -100)
    labels[0, 0] = x[0, 0]
    out = model(x, labels=labels)
    selected = labels != -100
    reference = F.cross_entropy(out.logits[selected], labels[selected])
    torch.testing.assert_close(out.loss, reference, atol=1e-6, rtol=1e-6)
    params = [p for p in model.parameters() if p.requires_grad]
    fast = torch.autograd.grad(out.loss, params, retain_graph=True)
    slow = torch.autograd.grad(reference, params)
    for a, b in zip(fast, slow):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_albert_options_come_from_the_shared_base_with_the_same_checkpoint_names():
    from hf_lm.models.hflm_configuration_base import HfLmTransformerConfig

    assert {"embedding_size", "num_hidden_groups"} <= set(HfLmTransformerConfig.__dataclass_fields__)
    config = tiny_bert_config(embedding_size=16, num_hidden_groups=1, num_hidden_layers=3)
    keys = set(HfLmBertForMaskedLM(config).state_dict())
    assert {"model.embed_tokens.weight", "model.embed_proj.weight", "model.embed_proj.bias"} <= keys
    assert {k.split(".")[2] for k in keys if k.startswith("model.layers.")} == {"0"}
    assert config.to_dict()["embedding_size"] == 16 and config.to_dict()["num_hidden_groups"] == 1
