"""Presets: one `from_preset` for every family, each family's table in its own config file and listed by
the family table, GPT's recipes equal to what `hf_lm.convert` makes of transformers' GPT-2, Llama and
Mistral, and `--preset` in the training loop."""

import dataclasses

import pytest
import torch
from test_train import TINY, _argv
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedConfig,
)

import hf_lm
from hf_lm import (
    HfLmBartConfig,
    HfLmBertConfig,
    HfLmElectraConfig,
    HfLmGPTConfig,
    HfLmGPTForCausalLM,
    HfLmT5Config,
)
from hf_lm.convert import from_transformers
from hf_lm.families import FAMILIES
from hf_lm.models.hflm_common import HfLmConfigMixin
from training.args import parse_args
from training.args.checks import check_arguments
from training.data.tokenizer import train_tokenizer
from training.models import config_flags
from training.objectives import build_model

PRESET_NAMES = {
    "gpt": ("gpt2", "llama", "mistral"),
    "bert": ("bert", "roberta", "albert"),
    "electra": ("electra-small", "electra-base"),
    "t5": ("t5", "t5_v1_1"),
    "bart": ("bart", "transformer"),
}
# small sizes for building the presets' models
SIZES = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
# the fields that size a model (ALBERT's two default to sizes) or name its tokens: the caller's, not a recipe's
NOT_RECIPE = {
    "embedding_size",
    "num_hidden_groups",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "max_position_embeddings",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
}
# GPT's own fields (not PreTrainedConfig's), less the sizes: what a recipe decides
GPT_RECIPE_FIELDS = sorted(
    {f.name for f in dataclasses.fields(HfLmGPTConfig)}
    - {f.name for f in dataclasses.fields(PreTrainedConfig)}
    - NOT_RECIPE
)


def test_the_family_table_lists_every_familys_presets_from_its_config_class():
    assert {name: tuple(f.presets) for name, f in FAMILIES.items() if f.presets} == PRESET_NAMES
    for family in FAMILIES.values():
        assert dict(family.presets) == family.config_class.PRESETS
        with pytest.raises(TypeError):  # read-only: the table is edited in the config file
            family.presets["mine"] = {}


@pytest.mark.parametrize(
    ("family", "preset"), [(family, preset) for family, names in PRESET_NAMES.items() for preset in names]
)
def test_every_preset_builds_its_recipe_through_the_one_from_preset(family, preset):
    config_class = FAMILIES[family].config_class
    # one implementation: no family writes its own
    assert config_class.from_preset.__func__ is HfLmConfigMixin.from_preset.__func__
    config = config_class.from_preset(preset)
    assert type(config) is config_class
    for name, value in config_class.PRESETS[preset].items():
        assert getattr(config, name) == value, name
    # the overrides go on top of the recipe
    sized = config_class.from_preset(preset, **SIZES, hidden_dropout=0.0)
    assert (sized.hidden_size, sized.hidden_dropout) == (32, 0.0)


def test_the_old_names_are_the_tables():
    assert hf_lm.BERT_PRESETS is HfLmBertConfig.PRESETS and hf_lm.ELECTRA_PRESETS is HfLmElectraConfig.PRESETS
    assert list(HfLmT5Config.PRESETS) == ["t5", "t5_v1_1"] and list(HfLmBartConfig.PRESETS) == [
        "bart",
        "transformer",
    ]
    assert HfLmBertConfig.from_preset("roberta", **SIZES).type_vocab_size == 0


@pytest.mark.parametrize(
    ("config_class", "message"),
    [
        (HfLmGPTConfig, r"Unknown preset 'gpt3' for hflm_gpt: choose one of \['gpt2', 'llama', 'mistral'\]"),
        (
            HfLmBertConfig,
            r"Unknown preset 'gpt3' for hflm_bert: choose one of \['bert', 'roberta', 'albert'\]",
        ),
        (HfLmElectraConfig, r"for hflm_electra: choose one of \['electra-small', 'electra-base'\]"),
        (HfLmT5Config, r"for hflm_t5: choose one of \['t5', 't5_v1_1'\]"),
        (FAMILIES["rnn"].config_class, "Unknown preset 'gpt3' for hflm_rnn: it has none"),
    ],
)
def test_an_unknown_preset_is_refused_naming_the_choices(config_class, message):
    with pytest.raises(ValueError, match=message):
        config_class.from_preset("gpt3")


def _recipe(config) -> dict:
    return {name: getattr(config, name) for name in GPT_RECIPE_FIELDS}


# the sizes of the small Llama and Mistral references (the recipes are each library's defaults)
LLAMA_SIZES = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
REFERENCES = {
    "gpt2": lambda: GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    ),
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**LLAMA_SIZES)),
    # MistralConfig's defaults: a sliding window of 4096 keys
    "mistral": lambda: MistralForCausalLM(MistralConfig(**LLAMA_SIZES)),
}


@pytest.mark.parametrize("preset", sorted(REFERENCES))
def test_gpt_presets_are_what_convert_makes_of_transformers_default_config(preset):
    """The preset, sized like the imported model, is that model's config field for field: every field
    of GPT's config but the sizes and token ids (which no recipe fixes)."""
    assert {"position_embedding_type", "norm_type", "hidden_act", "attention_bias", "sliding_window"} <= set(
        GPT_RECIPE_FIELDS
    )
    torch.manual_seed(0)
    converted = from_transformers(REFERENCES[preset]()).config
    sized = HfLmGPTConfig.from_preset(preset, **{name: getattr(converted, name) for name in NOT_RECIPE})
    assert _recipe(sized) == _recipe(converted)


def test_the_gpt_presets_differ_where_the_models_do():
    gpt2, llama, mistral = (HfLmGPTConfig.from_preset(name) for name in ("gpt2", "llama", "mistral"))
    assert (gpt2.position_embedding_type, gpt2.norm_type, gpt2.hidden_act) == (
        "learned",
        "layernorm",
        "gelu_tanh",
    )
    assert gpt2.attention_bias and gpt2.mlp_bias and gpt2.tie_word_embeddings
    assert (llama.position_embedding_type, llama.norm_type, llama.hidden_act) == ("rope", "rmsnorm", "swiglu")
    assert not (llama.attention_bias or llama.mlp_bias or llama.tie_word_embeddings)
    assert llama.sliding_window is None and llama.attention_pattern == "dense"
    assert _recipe(mistral) == {
        **_recipe(llama),
        "sliding_window": 4096,
        "attention_pattern": "band",
        "attention_window": 4095,
    }
    # grouped queries are a size: the caller's
    gqa = HfLmGPTConfig.from_preset("llama", **SIZES, num_key_value_heads=2)
    assert (
        gqa.num_key_value_heads == 2 and HfLmGPTConfig.from_preset("llama", **SIZES).num_key_value_heads == 4
    )


# ----------------------------------------------------------------------------------------------
# --preset in the training loop
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(
        ["the cat sat on the mat.", "a dog ran in the park."] * 20, kind="byte_bpe", vocab_size=300
    )


def _model(tmp_path, tokenizer, **flags):
    data_args, model_args, train_args = parse_args(_argv(tmp_path, **flags))
    check_arguments(data_args, model_args, train_args)
    return build_model(model_args, data_args, tokenizer, train_args.objective)


def test_preset_llama_trains_a_llama(tmp_path, tokenizer):
    model = _model(tmp_path, tokenizer, family="gpt", preset="llama", num_key_value_heads=2)
    config = model.config
    assert isinstance(model, HfLmGPTForCausalLM)
    assert _recipe(config) == {
        **_recipe(HfLmGPTConfig.from_preset("llama")),
        "hidden_dropout": 0.0,  # the dropout flags always apply (their default: 0)
        "attention_dropout": 0.0,
    }
    # the sizes are the flags'
    assert (config.hidden_size, config.num_hidden_layers, config.num_key_value_heads) == (32, 2, 2)
    assert config.max_position_embeddings == TINY["block_size"] and config.vocab_size == len(tokenizer)
    assert not any(name.endswith(".bias") for name, _ in model.named_parameters())
    assert type(model.model.norm).__name__ == "RMSNorm"
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()  # untied


def test_given_variant_flags_win_over_the_preset_and_overrides_come_last(tmp_path, tokenizer):
    # learned is also the flag's value without a preset: given, it still wins over llama's rope
    model = _model(
        tmp_path,
        tokenizer,
        family="gpt",
        preset="llama",
        position_embedding_type="learned",
        tie_word_embeddings=True,
        config_overrides='{"norm_eps": 1e-5}',
    )
    config = model.config
    assert (config.position_embedding_type, config.tie_word_embeddings, config.norm_eps) == (
        "learned",
        True,
        1e-5,
    )
    assert (config.norm_type, config.hidden_act, config.attention_bias) == ("rmsnorm", "swiglu", False)
    mistral = _model(tmp_path, tokenizer, family="gpt", preset="mistral").config
    assert (mistral.sliding_window, mistral.attention_pattern) == (4096, "band")


def test_without_a_preset_the_variant_flags_keep_their_defaults(tmp_path, tokenizer):
    config = _model(tmp_path, tokenizer, family="gpt").config
    assert (config.position_embedding_type, config.norm_type, config.norm_position, config.hidden_act) == (
        "learned",
        "layernorm",
        "pre",
        "gelu_tanh",
    )
    assert config.tie_word_embeddings
    bert = _model(tmp_path, tokenizer, family="bert", objective="mlm").config
    assert (bert.norm_position, bert.hidden_act) == ("pre", "gelu_tanh")  # the loop's defaults, not BERT's
    with_preset = _model(tmp_path, tokenizer, family="bert", objective="mlm", preset="bert").config
    assert (with_preset.norm_position, with_preset.hidden_act) == ("post", "gelu")  # BERT's own


def test_tie_word_embeddings_keeps_its_flag_spellings(tmp_path):
    def tie(*flags):
        return parse_args([*_argv(tmp_path), *flags])[1].tie_word_embeddings

    assert tie() is None and tie("--tie_word_embeddings") is True
    assert tie("--no_tie_word_embeddings") is False and tie("--tie_word_embeddings", "false") is False
    assert (
        config_flags(parse_args([*_argv(tmp_path), "--no_tie_word_embeddings"])[1]).get("tie_word_embeddings")
        is False
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            dict(family="bert", preset="llama"),
            r"`preset` 'llama' is not a preset of family 'bert': choose one of \['bert'",
        ),
        (dict(family="rnn", preset="llama"), "`preset` 'llama' is not a preset of family 'rnn': it has none"),
        (dict(arch="ffnn", preset="gpt2"), "`preset` 'gpt2' is not a preset of family 'ffnn'"),
        (dict(family="gpt", preset="gpt3"), r"choose one of \['gpt2', 'llama', 'mistral'\]"),
    ],
)
def test_a_preset_the_family_lacks_is_refused_when_parsing(tmp_path, flags, message):
    with pytest.raises(ValueError, match=message):
        parse_args(_argv(tmp_path, **flags))


def test_a_preset_is_checked_against_the_objectives_family(tmp_path):
    # --arch transformer (the default): the family comes with the objective, checked with the run's arguments
    args = parse_args(_argv(tmp_path, preset="roberta"))  # clm: GPT
    with pytest.raises(ValueError, match="`preset` 'roberta' is not a preset of family 'gpt'"):
        check_arguments(*args)
    assert check_arguments(*parse_args(_argv(tmp_path, preset="roberta", objective="mlm"))) == "bert"


def test_a_preset_with_init_from_is_refused(tmp_path):
    with pytest.raises(ValueError, match="`preset` .* cannot be combined with `init_from`"):
        parse_args(_argv(tmp_path, family="gpt", preset="llama", init_from=str(tmp_path)))
