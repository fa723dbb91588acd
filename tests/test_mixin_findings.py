"""What transformers' own test mixins (`ModelTesterMixin`, `GenerationTesterMixin`, `ConfigTester`)
and a hostile user found in the model code, each as a check of hf_lm's own (tiny configs):

- `sliding_window` is a real config field of GPT (Mistral's name for the band of `attention_pattern`):
  a constructor argument, a `from_pretrained` override, an attribute to set, stored in config.json,
  refused where it contradicts the pattern and by the families whose cache does not slide; Mistral and
  Mixtral checkpoints with a window convert;
- the ids under an encoder-decoder's decoder mask do not change what `generate()` does;
- validators refuse what is invalid, not what is unusual (`norm_eps=1.0`);
- BART with untied embeddings converts its own matrices or is refused;
- a folder of another model type is refused by name, without advice to run its code;
- a config whose weights cannot fit in memory is refused before anything is allocated.

The all-family properties (each config holds only its family's kind of fields, generating heads list
`GenerationMixin` among their own bases) are in tests/test_model_properties.py.
"""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from conftest import tiny_gpt_config
from test_moe import mixtral_reference_config
from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    BartConfig,
    BartForConditionalGeneration,
    DynamicCache,
    MistralConfig,
    MistralForCausalLM,
    MixtralForCausalLM,
    StaticCache,
)
from transformers.cache_utils import DynamicSlidingWindowLayer

from hf_lm import (
    HfLmBartConfig,
    HfLmBartForConditionalGeneration,
    HfLmBertConfig,
    HfLmBertForMaskedLM,
    HfLmFFNNConfig,
    HfLmFFNNForCausalLM,
    HfLmGPTConfig,
    HfLmGPTForCausalLM,
    HfLmRNNConfig,
    HfLmRNNForCausalLM,
    HfLmRNNSeq2SeqConfig,
    HfLmRNNSeq2SeqForConditionalGeneration,
    HfLmT5Config,
    HfLmT5ForConditionalGeneration,
    kv_cache_bytes,
)
from hf_lm.convert import from_transformers
from hf_lm.models import hflm_common

V = 97
SIZES = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def gpt(seed: int = 0, **overrides) -> HfLmGPTForCausalLM:
    torch.manual_seed(seed)
    return HfLmGPTForCausalLM(tiny_gpt_config(**overrides)).eval()


def left_padded(T: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(3, V, (2, T))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    return ids.masked_fill(mask == 0, 0), mask


# ----------------------------------------------------------------------------------------------
# sliding_window
# ----------------------------------------------------------------------------------------------


def test_sliding_window_at_construction_is_the_band_of_reach_window_minus_one():
    config = tiny_gpt_config(sliding_window=4)
    assert (config.attention_pattern, config.attention_window, config.sliding_window) == ("band", 3, 4)
    ids, mask = left_padded()
    with torch.no_grad():
        windowed = gpt(sliding_window=4)(ids, attention_mask=mask).logits
        band = gpt(attention_pattern="band", attention_window=3)(ids, attention_mask=mask).logits
        dense = gpt()(ids, attention_mask=mask).logits
    assert torch.equal(windowed, band)
    assert not torch.allclose(windowed, dense)  # 10 tokens: the window of 4 changes the later ones


def test_sliding_window_set_later_or_by_from_pretrained_is_honoured(tmp_path):
    ids, mask = left_padded()
    with torch.no_grad():
        band = gpt(attention_pattern="band", attention_window=3)(ids, attention_mask=mask).logits
        dense = gpt()(ids, attention_mask=mask).logits
    gpt().save_pretrained(tmp_path)  # a dense model
    assert AutoConfig.from_pretrained(tmp_path, sliding_window=4).attention_window == 3
    loaded = HfLmGPTForCausalLM.from_pretrained(tmp_path, sliding_window=4).eval()
    assert loaded.config.attention_pattern == "band"
    config = tiny_gpt_config()
    config.sliding_window = 4  # after construction: the model built from it honours it
    torch.manual_seed(0)
    assigned = HfLmGPTForCausalLM(config).eval()
    with torch.no_grad():
        assert torch.equal(loaded(ids, attention_mask=mask).logits, band)
        assert torch.equal(assigned(ids, attention_mask=mask).logits, band)
        # what generic tools do to turn the window off, on a built model: attention and cache follow
        assigned.config.sliding_window = None
        assert assigned.config.attention_pattern == "dense"
        assert torch.equal(assigned(ids, attention_mask=mask).logits, dense)
    config.attention_pattern = "band"  # and the other way round: the pattern sets the window
    assert config.sliding_window == 4
    config.attention_window = 5
    assert config.sliding_window == 6


def test_sliding_window_round_trips_through_config_json(tmp_path):
    tiny_gpt_config(sliding_window=5).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["sliding_window"] == 5
    reloaded = HfLmGPTConfig.from_pretrained(tmp_path)
    assert (reloaded.sliding_window, reloaded.attention_pattern, reloaded.attention_window) == (5, "band", 4)
    tiny_gpt_config().save_pretrained(tmp_path)
    assert HfLmGPTConfig.from_pretrained(tmp_path).sliding_window is None  # None: no window


@pytest.mark.parametrize(
    "kwargs, names",
    [
        (
            dict(sliding_window=4, attention_pattern="band", attention_window=5),
            ("sliding_window", "attention_window"),
        ),
        (dict(sliding_window=4, attention_pattern="band+global"), ("sliding_window", "attention_pattern")),
        (dict(sliding_window=4, attention_pattern="dilated"), ("sliding_window", "attention_pattern")),
        (dict(sliding_window=1), ("sliding_window",)),
        (dict(sliding_window=True), ("sliding_window",)),
    ],
)
def test_a_contradictory_or_invalid_window_is_refused_naming_the_fields(kwargs, names):
    with pytest.raises(ValueError) as error:
        tiny_gpt_config(**kwargs)
    assert all(f"`{name}`" in str(error.value) or f"{name}=" in str(error.value) for name in names)


def test_a_window_set_after_construction_that_contradicts_the_pattern_is_refused_at_build():
    config = tiny_gpt_config(attention_pattern="band+global")
    config.sliding_window = 4
    with pytest.raises(ValueError, match="`sliding_window`.*`attention_pattern`"):
        HfLmGPTForCausalLM(config)


def test_the_window_makes_every_cache_slide():
    config = tiny_gpt_config(sliding_window=4)
    assert all(isinstance(layer, DynamicSlidingWindowLayer) for layer in DynamicCache(config=config).layers)
    assert StaticCache(config=config, max_cache_len=32).layers[0].max_cache_len == 4
    assert kv_cache_bytes(config, 1, 100, torch.float32) == kv_cache_bytes(
        tiny_gpt_config(), 1, 3, torch.float32
    )
    model = gpt(sliding_window=4)
    ids, mask = left_padded(6)
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=mask, max_new_tokens=8, do_sample=False, return_dict_in_generate=True
        )
        # the cached decoding equals the window applied to the whole text at once
        full = model(out.sequences, attention_mask=torch.nn.functional.pad(mask, (0, 8), value=1)).logits
    assert out.past_key_values.layers[0].keys.shape[-2] == 3
    assert torch.equal(full[:, 5:-1].argmax(-1), out.sequences[:, 6:])


@pytest.mark.parametrize("config_class", [HfLmBertConfig, HfLmT5Config, HfLmBartConfig])
def test_the_families_whose_cache_does_not_slide_refuse_a_window(config_class):
    """transformers' mixins set `sliding_window` on every config that has the attribute: these have not."""
    assert not hasattr(config_class(**SIZES), "sliding_window")
    with pytest.raises(ValueError, match="`sliding_window` is not supported by hflm_"):
        config_class(**SIZES, sliding_window=4)
    config_class(**SIZES, sliding_window=None)  # None is what they do: accepted
    config = config_class(**SIZES)
    config.sliding_window = 4
    model_class = HfLmBertForMaskedLM if config_class is HfLmBertConfig else HfLmT5ForConditionalGeneration
    if config_class is HfLmBartConfig:
        model_class = HfLmBartForConditionalGeneration
    with pytest.raises(ValueError, match="`sliding_window` is not supported"):
        model_class(config)


def test_eager_matches_sdpa_with_a_sliding_window():
    """The mixin's check: the config's `sliding_window = 2`, then eager and SDPA agree (padding too)."""
    config = tiny_gpt_config()
    config.sliding_window = 2
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(config).eval()
    ids, mask = left_padded()
    with torch.no_grad():
        sdpa = model(ids, attention_mask=mask).logits
        model.set_attn_implementation("eager")
        eager = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(eager[mask.bool()], sdpa[mask.bool()], atol=1e-6, rtol=1e-4)


def test_mistral_with_a_sliding_window_converts_with_parity():
    torch.manual_seed(0)
    ref = MistralForCausalLM(
        MistralConfig(
            vocab_size=V,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            sliding_window=3,
            max_position_embeddings=64,
        )  # fmt: skip
    ).eval()
    ours = from_transformers(ref)
    assert (ours.config.sliding_window, ours.config.attention_window) == (3, 2)
    x = torch.randint(3, V, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(ours(x).logits, ref(x).logits, atol=1e-5, rtol=1e-4)
        common = dict(
            attention_mask=torch.ones_like(x[:, :4]), max_new_tokens=10, do_sample=False, pad_token_id=0
        )
        assert torch.equal(ours.generate(x[:, :4], **common), ref.generate(x[:, :4], **common))


def test_mixtral_with_a_sliding_window_converts_with_parity():
    torch.manual_seed(0)
    ref = MixtralForCausalLM(mixtral_reference_config(sliding_window=4, output_router_logits=False)).eval()
    ours = from_transformers(ref)
    assert ours.config.sliding_window == 4 and ours.config.num_local_experts == 4
    x = torch.randint(3, V, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(ours(x).logits, ref(x).logits, atol=1e-5, rtol=1e-4)


# ----------------------------------------------------------------------------------------------
# The ids under an encoder-decoder's decoder mask
# ----------------------------------------------------------------------------------------------

SEQ2SEQ = {
    "t5": (HfLmT5Config, HfLmT5ForConditionalGeneration),
    "bart": (HfLmBartConfig, HfLmBartForConditionalGeneration),
}


def seq2seq(kind: str):
    config_class, model_class = SEQ2SEQ[kind]
    torch.manual_seed(0)
    return model_class(config_class(**SIZES, hidden_dropout=0.0)).eval()


def decoder_prompts(config, hidden: str = "start") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A left-padded decoder prompt without the start token: real ids under its mask, and the same
    prompt with pad ids there. Column 0, where transformers looks for the start token, holds under
    the mask the start token's id (`hidden="start"`) or another real id (`"other"`): the one flips
    transformers' decision for BART, the other for T5 (whose pad is its start token)."""
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    real = torch.randint(3, V, (2, 5))
    if hidden == "start":
        real[0, 0] = config.decoder_start_token_id
    return real, real.masked_fill(mask == 0, config.pad_token_id), mask


GENERATE = dict(do_sample=False, return_dict_in_generate=True, output_scores=True)


def generate_after(model, src, decoder_ids, decoder_mask, new_tokens: int):
    """Greedy generation (sequences and scores) continuing a decoder prompt."""
    with torch.no_grad():
        return model.generate(
            src,
            decoder_input_ids=decoder_ids,
            decoder_attention_mask=decoder_mask,
            max_new_tokens=new_tokens,
            **GENERATE,
        )


@pytest.mark.parametrize("kind", sorted(SEQ2SEQ))
@pytest.mark.parametrize("hidden", ["start", "other"])
def test_the_ids_under_the_decoder_mask_do_not_change_generation(kind, hidden):
    model = seq2seq(kind)
    src = torch.randint(3, V, (2, 7))
    real, pad, mask = decoder_prompts(model.config, hidden)
    a, b = generate_after(model, src, real, mask, 4), generate_after(model, src, pad, mask, 4)
    assert a.sequences.shape == b.sequences.shape
    new = a.sequences.shape[1] - 4
    assert torch.equal(a.sequences[:, new:], b.sequences[:, new:])
    for x, y in zip(a.scores, b.scores):
        assert torch.equal(x, y)


@pytest.mark.parametrize("kind", sorted(SEQ2SEQ))
@pytest.mark.parametrize("hidden", ["start", "other"])
def test_a_well_formed_prompt_gets_transformers_start_token_decision(kind, hidden):
    """With pad ids under the mask, the start token is prepended exactly when transformers' own rule
    prepends it (T5: its pad is its start token, so a left-padded prompt gets none; BART: one)."""
    from transformers import GenerationMixin

    model = seq2seq(kind)
    real, pad, mask = decoder_prompts(model.config, hidden)
    start = torch.tensor(model.config.decoder_start_token_id)
    theirs, _ = GenerationMixin._prepare_decoder_input_ids_for_generation(
        model, 2, "input_ids", {"decoder_input_ids": pad, "decoder_attention_mask": mask}, start
    )
    for ids in (pad, real):
        ours, kwargs = model._prepare_decoder_input_ids_for_generation(
            2, "input_ids", {"decoder_input_ids": ids, "decoder_attention_mask": mask}, start
        )
        assert ours.shape == theirs.shape and kwargs["decoder_attention_mask"].shape == theirs.shape
        assert torch.equal(ours[:, -5:], ids)  # the caller's ids are kept
    assert theirs.shape[1] == {"t5": 5, "bart": 6}[kind]


@pytest.mark.parametrize("kind", sorted(SEQ2SEQ))
@pytest.mark.parametrize("hidden", ["start", "other"])
@pytest.mark.parametrize("under_the_mask", ["real", "pad"])
def test_generation_continued_from_its_cache_equals_one_call(kind, hidden, under_the_mask):
    """transformers' continuation check: generate 3 tokens, then 1 more from the returned cache with
    the prompt's mask padded on the right by 1s (after the start token, where one was prepended)."""
    model = seq2seq(kind)
    src = torch.randint(3, V, (2, 7))
    real, pad, mask = decoder_prompts(model.config, hidden)
    prompt = real if under_the_mask == "real" else pad
    one, part = generate_after(model, src, prompt, mask, 4), generate_after(model, src, prompt, mask, 3)
    prepended = part.sequences.shape[1] - 3 - mask.shape[1]
    used = torch.cat([torch.ones_like(mask[:, :prepended]), mask], 1)
    with torch.no_grad():
        more = model.generate(
            src,
            decoder_input_ids=part.sequences,
            decoder_attention_mask=torch.nn.functional.pad(used, (0, 3), value=1),
            past_key_values=part.past_key_values,
            max_new_tokens=1,
            **GENERATE,
        )
    assert torch.equal(more.sequences, one.sequences)
    torch.testing.assert_close(more.scores[-1], one.scores[-1])


# ----------------------------------------------------------------------------------------------
# Validation: what is invalid, not what is unusual
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config_class", [HfLmGPTConfig, HfLmBertConfig, HfLmT5Config])
def test_unusual_but_valid_values_are_accepted(config_class):
    config_class(**SIZES, norm_eps=1.0)
    config_class(**SIZES, norm_eps=2.0)
    config_class(**SIZES, hidden_dropout=1.0, attention_dropout=1.0)


@pytest.mark.parametrize("value", [0.0, -1e-6, float("nan"), float("inf"), "1e-5", None])
def test_an_invalid_norm_eps_is_refused(value):
    with pytest.raises(ValueError, match="`norm_eps`"):
        tiny_gpt_config(norm_eps=value)


def test_relative_buckets_are_checked_against_what_their_formula_needs():
    # a causal stack spends all its buckets on one direction: 2 are enough there
    tiny_gpt_config(position_embedding_type="relative_buckets", relative_attention_num_buckets=2)
    with pytest.raises(ValueError, match="`relative_attention_num_buckets` must be at least 4"):
        HfLmT5Config(**SIZES, relative_attention_num_buckets=3)
    # 8 bidirectional buckets: 2 exact distances a side, so the log-spaced ones must reach beyond 2
    with pytest.raises(ValueError, match="`relative_attention_max_distance`"):
        HfLmT5Config(**SIZES, relative_attention_num_buckets=8, relative_attention_max_distance=2)
    HfLmT5Config(**SIZES, relative_attention_num_buckets=8, relative_attention_max_distance=3)
    HfLmBertConfig(**SIZES, relative_attention_max_distance=1)  # learned positions: the field is unused


# ----------------------------------------------------------------------------------------------
# Config hygiene: old config.json files with fields that moved to other families
# ----------------------------------------------------------------------------------------------


def test_a_config_json_with_fields_its_family_no_longer_has_still_loads(tmp_path, caplog):
    tiny_gpt_config().save_pretrained(tmp_path / "gpt")
    HfLmBertConfig(**SIZES).save_pretrained(tmp_path / "bert")
    old = {
        "gpt": {"encoder_sparse_step": 1},
        "bert": {
            "num_local_experts": 0,
            "router_aux_loss_coef": 0.0,
            "decoder_sparse_step": 1,
            "xpos_scale_base": 512,
        },
    }
    for name, fields in old.items():
        path = tmp_path / name / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    with caplog.at_level(logging.WARNING):
        gpt_config = AutoConfig.from_pretrained(tmp_path / "gpt")
        bert_config = AutoConfig.from_pretrained(tmp_path / "bert")
    assert not caplog.records  # neutral values: dropped silently
    assert "encoder_sparse_step" not in gpt_config.to_dict()
    assert not set(old["bert"]) & set(bert_config.to_dict())
    # a value that never had an effect there is dropped with one warning; one that would be ignored
    # against the user's wish is refused
    path = tmp_path / "bert" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "norm_topk_prob": False}))
    with caplog.at_level(logging.WARNING):
        AutoConfig.from_pretrained(tmp_path / "bert")
    assert len(caplog.records) == 1 and "norm_topk_prob=False" in caplog.records[0].getMessage()
    path.write_text(json.dumps({**json.loads(path.read_text()), "num_local_experts": 4}))
    with pytest.raises(ValueError, match="`num_local_experts` is not supported by hflm_bert"):
        AutoConfig.from_pretrained(tmp_path / "bert")


# ----------------------------------------------------------------------------------------------
# Conversion of a BART with untied embeddings
# ----------------------------------------------------------------------------------------------

BART_REF = dict(
    vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=40,
    dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, tie_word_embeddings=False,
)  # fmt: skip


def test_an_untied_bart_converts_its_own_embedding_and_head():
    torch.manual_seed(0)
    ref = BartForConditionalGeneration(BartConfig(**BART_REF)).eval()
    with torch.no_grad():  # transformers keeps four matrices; hf_lm's stacks share one, the head is its own
        ref.model.decoder.embed_tokens.weight.copy_(ref.model.encoder.embed_tokens.weight)
    assert not torch.equal(ref.model.shared.weight, ref.model.encoder.embed_tokens.weight)
    ours = from_transformers(ref)
    assert not ours.config.tie_word_embeddings
    src, tgt = torch.randint(3, V, (2, 7)), torch.randint(3, V, (2, 5))
    with torch.no_grad():
        expected = ref(input_ids=src, decoder_input_ids=tgt).logits
        torch.testing.assert_close(
            ours(input_ids=src, decoder_input_ids=tgt).logits, expected, atol=1e-5, rtol=1e-4
        )


def test_an_untied_bart_whose_stacks_have_different_embeddings_is_refused():
    torch.manual_seed(0)
    ref = BartForConditionalGeneration(BartConfig(**BART_REF)).eval()
    with pytest.raises(ValueError, match="encoder and decoder token embeddings differ"):
        from_transformers(ref)


# ----------------------------------------------------------------------------------------------
# A folder of another model type
# ----------------------------------------------------------------------------------------------


def test_a_folder_of_another_model_type_is_refused_by_name(tmp_path):
    bert = HfLmBertForMaskedLM(HfLmBertConfig(**SIZES))
    bert.save_pretrained(tmp_path / "bert")
    for load in (HfLmGPTForCausalLM.from_pretrained, HfLmGPTConfig.from_pretrained):
        with pytest.raises(ValueError, match="holds a `hflm_bert` model .*HfLmBertForMaskedLM"):
            load(tmp_path / "bert")
    # model_type edited to another family's: transformers would advise trust_remote_code=True
    shutil.copytree(tmp_path / "bert", tmp_path / "edited")
    path = tmp_path / "edited" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "model_type": "hflm_gpt"}))
    with pytest.raises(ValueError) as error:
        AutoModelForMaskedLM.from_pretrained(tmp_path / "edited")
    message = str(error.value)
    assert "model_type is `hflm_gpt`" in message and "HfLmBertConfig" in message
    assert "pass the argument" not in message.lower()
    # a transformers model's folder: convert it
    with pytest.raises(ValueError, match="holds a `bert` model.*from_transformers"):
        HfLmBertConfig.from_dict({"model_type": "bert", "hidden_size": 32})


# ----------------------------------------------------------------------------------------------
# Configs whose weights cannot fit in memory
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, named",
    [
        (dict(num_hidden_layers=200_000), "num_hidden_layers=200,000"),
        (dict(num_local_experts=100_000, num_experts_per_tok=2), "num_local_experts=100,000"),
        (dict(vocab_size=10**9, hidden_size=4096, num_attention_heads=32), "vocab_size=1,000,000,000"),
    ],
)
def test_a_model_that_cannot_fit_in_memory_is_refused_before_allocating(overrides, named):
    config = HfLmGPTConfig(**{**SIZES, "hidden_size": 1024, "intermediate_size": 4096, **overrides})
    with pytest.raises(ValueError, match=f"parameters.*GiB.*{named}"):
        HfLmGPTForCausalLM(config)


def test_a_meta_device_build_and_a_model_that_fits_are_never_refused(monkeypatch):
    huge = HfLmGPTConfig(vocab_size=10**9, hidden_size=4096, num_hidden_layers=1, num_attention_heads=32)
    with torch.device("meta"):
        assert HfLmGPTForCausalLM(huge).num_parameters() > 4 * 10**12
    # a device exactly as large as the weights builds them (the estimate is a lower bound for every
    # family: tests/test_model_properties.py)
    config = tiny_gpt_config(num_local_experts=4)
    with torch.device("meta"):
        real = HfLmGPTForCausalLM(config).num_parameters()
    monkeypatch.setattr(hflm_common, "memory_capacity", lambda device: 4 * real)
    HfLmGPTForCausalLM(config)
    # and one byte short of the estimated fp32 weights is refused
    short = 4 * config.estimated_num_parameters() - 1
    monkeypatch.setattr(hflm_common, "memory_capacity", lambda device: short)
    with pytest.raises(ValueError, match="more than the"):
        HfLmGPTForCausalLM(config)


@pytest.mark.parametrize(
    "config, model_class",
    [
        (HfLmRNNConfig(hidden_size=10**6), HfLmRNNForCausalLM),
        (HfLmRNNSeq2SeqConfig(encoder_layers=10**9), HfLmRNNSeq2SeqForConditionalGeneration),
        (HfLmFFNNConfig(context_size=10**6, intermediate_size=10**6), HfLmFFNNForCausalLM),
        (HfLmT5Config(num_hidden_layers=200_000), HfLmT5ForConditionalGeneration),
        (HfLmBertConfig(num_hidden_layers=200_000), HfLmBertForMaskedLM),
    ],
    ids=["rnn", "rnn-seq2seq", "ffnn", "t5", "bert"],
)
def test_every_family_refuses_a_model_that_cannot_fit(config, model_class):
    with pytest.raises(ValueError, match="parameters.*GiB"):
        model_class(config)
