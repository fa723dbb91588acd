"""The family table (hf_lm.families): one home for every family's config, heads, tags, tokens and presets."""

import inspect
import json
import re

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.pipelines import PIPELINE_REGISTRY

import hf_lm
import hf_lm.convert
from hf_lm.cards import write_model_card
from hf_lm.families import FAMILIES, all_heads, family_of, head_info
from hf_lm.testing import FAMILY_CASES

CASES = {case.model_class: case for case in FAMILY_CASES}

# what the Hub and transformers call each head: the card must say this, whatever the class name
EXPECTED_HEADS = {
    "HfLmGPTModel": ("feature-extraction", "AutoModel"),
    "HfLmGPTForCausalLM": ("text-generation", "AutoModelForCausalLM"),
    "HfLmGPTForSequenceClassification": ("text-classification", "AutoModelForSequenceClassification"),
    "HfLmBertModel": ("feature-extraction", "AutoModel"),
    "HfLmBertForMaskedLM": ("fill-mask", "AutoModelForMaskedLM"),
    "HfLmBertForPreTraining": ("fill-mask", "AutoModelForPreTraining"),
    "HfLmBertForSequenceClassification": ("text-classification", "AutoModelForSequenceClassification"),
    "HfLmBertForTokenClassification": ("token-classification", "AutoModelForTokenClassification"),
    "HfLmBertForQuestionAnswering": ("question-answering", "AutoModelForQuestionAnswering"),
    "HfLmBertForMultipleChoice": ("multiple-choice", "AutoModelForMultipleChoice"),
    "HfLmElectraModel": ("feature-extraction", "AutoModel"),
    "HfLmElectraForMaskedLM": ("fill-mask", "AutoModelForMaskedLM"),
    "HfLmElectraForPreTraining": ("fill-mask", "AutoModelForPreTraining"),
    "HfLmElectraForSequenceClassification": ("text-classification", "AutoModelForSequenceClassification"),
    "HfLmElectraForTokenClassification": ("token-classification", "AutoModelForTokenClassification"),
    "HfLmT5Model": ("feature-extraction", "AutoModel"),
    "HfLmT5ForConditionalGeneration": ("text2text-generation", "AutoModelForSeq2SeqLM"),
    "HfLmT5ForSequenceClassification": ("text-classification", "AutoModelForSequenceClassification"),
    "HfLmT5ForMaskPredict": ("text2text-generation", "AutoModelForMaskedLM"),
    "HfLmBartModel": ("feature-extraction", "AutoModel"),
    "HfLmBartForConditionalGeneration": ("text2text-generation", "AutoModelForSeq2SeqLM"),
    "HfLmBartForSequenceClassification": ("text-classification", "AutoModelForSequenceClassification"),
    "HfLmBartForMaskPredict": ("text2text-generation", "AutoModelForMaskedLM"),
    "HfLmRNNModel": ("feature-extraction", "AutoModel"),
    "HfLmRNNForCausalLM": ("text-generation", "AutoModelForCausalLM"),
    "HfLmRNNSeq2SeqModel": ("feature-extraction", "AutoModel"),
    "HfLmRNNSeq2SeqForConditionalGeneration": ("text2text-generation", "AutoModelForSeq2SeqLM"),
    "HfLmFFNNModel": ("feature-extraction", "AutoModel"),
    "HfLmFFNNForCausalLM": ("text-generation", "AutoModelForCausalLM"),
    "HfLmNGramForCausalLM": ("text-generation", "AutoModelForCausalLM"),
}


def test_every_model_class_is_registered_exactly_once():
    heads = [model for _, _, model in all_heads()]
    assert len(heads) == len(set(heads)), "a model class is in the table twice"
    # every concrete model class hf_lm exports is a head of the table (PreTrainedModel bases are not)
    exported = {
        obj
        for name in hf_lm.__all__
        if inspect.isclass(obj := getattr(hf_lm, name))
        and issubclass(obj, PreTrainedModel)
        and not name.endswith("PreTrainedModel")
    }
    assert exported == set(heads)
    assert set(CASES) == set(heads), "hf_lm.testing.FAMILY_CASES must cover every head"
    assert {cls.__name__ for cls in heads} == set(EXPECTED_HEADS)


def test_families_are_consistent():
    assert list(FAMILIES) == ["gpt", "bert", "electra", "t5", "bart", "rnn", "rnn_seq2seq", "ffnn", "ngram"]
    model_types = [family.model_type for family in FAMILIES.values()]
    assert len(set(model_types)) == len(model_types)
    converted = [model_type for family in FAMILIES.values() for model_type in family.convert_from]
    assert len(set(converted)) == len(converted), "a transformers model type converts into two families"
    for name, family in FAMILIES.items():
        assert family.name == name and family.model_type == f"hflm_{name}"
        for model_class in family.heads.values():
            assert model_class.config_class is family.config_class, model_class
        assert family.is_encoder_decoder == family.config_class().is_encoder_decoder
        for preset in family.presets:  # every preset builds a valid config of the family
            assert isinstance(family.config_from_preset(preset), family.config_class)
    assert tuple(FAMILIES["t5"].presets) == ("t5", "t5_v1_1") and tuple(FAMILIES["bart"].presets) == (
        "bart",
        "transformer",
    )
    assert FAMILIES["bert"].convert_from == ("bert", "roberta")
    assert set(converted) == set(hf_lm.convert._CONVERTERS), "a model type without a converter, or vice versa"


def test_bert_tokens_are_the_masked_lm_tokens():
    """The MLM tokenizer needs BERT's roles plus [SEP] as eos, which separates packed documents."""
    tokens = FAMILIES["bert"].special_tokens
    assert (
        tokens["mask_token"] == "[MASK]" and tokens["cls_token"] == "[CLS]" and tokens["eos_token"] == "[SEP]"
    )
    assert FAMILIES["gpt"].special_tokens is None  # GPT-style defaults
    assert (
        FAMILIES["t5"].special_tokens["eos_token"] == "</s>"
        and "bos_token" not in FAMILIES["t5"].special_tokens
    )


@pytest.mark.parametrize(
    "given",
    ["bert", "hflm_bert", hf_lm.HfLmBertConfig, hf_lm.HfLmBertForQuestionAnswering],
    ids=["name", "model_type", "config_class", "model_class"],
)
def test_family_of_accepts_names_types_configs_and_models(given):
    assert family_of(given) is FAMILIES["bert"]


def test_family_of_instances():
    case = CASES[hf_lm.HfLmT5ForConditionalGeneration]
    model = case.make_model()
    assert family_of(model) is FAMILIES["t5"] and family_of(model.config) is FAMILIES["t5"]


@pytest.mark.parametrize("bad", ["gpt2", "hflm_nope", None, 3, PretrainedConfig()], ids=repr)
def test_family_of_unknown_input_names_the_families(bad):
    with pytest.raises(ValueError, match=r"not an hf_lm family; known families: gpt \(hflm_gpt\), bert"):
        family_of(bad)


def test_head_and_preset_errors_are_clear():
    with pytest.raises(ValueError, match="has no AutoModelForMaskedLM head"):
        FAMILIES["gpt"].head(AutoModelForMaskedLM)
    assert FAMILIES["bart"].head(AutoModelForSeq2SeqLM) is hf_lm.HfLmBartForConditionalGeneration
    with pytest.raises(ValueError, match=r"no preset 'gpt3'; choose one of \['t5', 't5_v1_1'\]"):
        FAMILIES["t5"].config_from_preset("gpt3")
    with pytest.raises(ValueError, match="not a head of any hf_lm family"):
        head_info(torch.nn.Linear)


def test_head_info_of_a_subclass_is_its_registered_base():
    class MyLM(hf_lm.HfLmGPTForCausalLM):
        pass

    assert head_info(MyLM) == ("text-generation", "AutoModelForCausalLM")


@pytest.mark.parametrize("case", FAMILY_CASES, ids=str)
def test_every_head_round_trips_through_the_auto_classes(case, tmp_path):
    """The Auto class the table names for a head builds and reloads that head, from config and folder."""
    family = family_of(case.model_class)
    auto_class = next(auto for auto, model in family.heads.items() if model is case.model_class)
    config = case.make_config()
    assert type(AutoConfig.for_model(family.model_type)) is family.config_class
    model = case.make_model(seed=0)
    if case.build is None:  # the n-gram model is fitted, not built from a config alone
        assert type(auto_class.from_config(config)) is case.model_class
    model.save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is family.config_class
    loaded = auto_class.from_pretrained(tmp_path).eval()
    assert type(loaded) is case.model_class
    batch = case.make_batch()
    with torch.no_grad():  # the first output: the loss where the head takes labels, else the features
        torch.testing.assert_close(loaded(**batch).to_tuple()[0], model(**batch).to_tuple()[0])


@pytest.mark.parametrize("case", FAMILY_CASES, ids=str)
def test_cards_name_each_heads_pipeline_tag_and_auto_class(case, tmp_path):
    pipeline_tag, auto_class = EXPECTED_HEADS[case.model_class.__name__]
    assert head_info(case.model_class) == (pipeline_tag, auto_class)
    card = ModelCard.load(write_model_card(case.make_model(), tmp_path))
    assert card.data.pipeline_tag == pipeline_tag
    assert pipeline_tag in card.data.tags
    assert f"{auto_class}.from_pretrained(" in card.text
    if auto_class != "AutoModel":
        assert "AutoModel.from_pretrained(" not in card.text


def test_auto_model_is_the_base_of_every_family_that_has_one():
    for family in FAMILIES.values():
        if AutoModel in family.heads:
            assert family.heads[AutoModel].__name__.endswith("Model")


@pytest.mark.parametrize("case", FAMILY_CASES, ids=str)
def test_card_snippets_name_pipelines_that_exist_and_fit_the_context(case, tmp_path):
    """Every `pipeline("task", ...)` in a head's card is a task `pipeline()` runs: transformers' own, or
    hf_lm's, which the saved folder then names in `custom_pipelines` (so it runs without hf_lm); and
    the snippet generates no more tokens than learned positions allow after its prompt."""
    model = case.make_model()
    model.save_pretrained(tmp_path)
    card = write_model_card(model, tmp_path).read_text()
    custom = json.loads((tmp_path / "config.json").read_text()).get("custom_pipelines", {})
    for task in re.findall(r'pipeline\("([^"]+)"', card):
        assert task in PIPELINE_REGISTRY.get_supported_tasks(), (task, case.name)
        if task.startswith("hflm-"):
            assert task in custom, (task, custom)
    config = model.config
    if getattr(config, "position_embedding_type", None) == "learned":
        for n in re.findall(r"max_new_tokens=(\d+)", card):
            assert int(n) <= config.max_position_embeddings - 8, (n, config.max_position_embeddings)
