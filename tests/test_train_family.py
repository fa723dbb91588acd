"""`--family` names the model family; `--objective` chooses what it is trained on; the older
`--arch` spelling keeps meaning what it meant. The loop asks its objective (`training.objectives`)."""

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch
from test_train import TINY, _fresh_accelerate_state, _run  # noqa: F401  (fixture)

from hf_lm import (
    HfLmBartForConditionalGeneration,
    HfLmBertForMaskedLM,
    HfLmGPTForCausalLM,
    HfLmT5ForConditionalGeneration,
)
from hf_lm.families import FAMILIES
from hf_lm.models.hflm_configuration_rnn import HfLmRNNConfig
from hf_lm.models.hflm_modeling_ffnn import HfLmFFNNForCausalLM
from hf_lm.models.hflm_modeling_rnn import HfLmRNNForCausalLM
from hf_lm.models.hflm_modeling_rnn_seq2seq import HfLmRNNSeq2SeqForConditionalGeneration
from training.args import DataArguments, ModelArguments, TrainArguments, as_flags, parse_args
from training.data.batches import BatchPlan
from training.data.tokenizer import train_tokenizer
from training.models import (
    FLAG_FIELDS,
    config_fields,
    family_config,
    flag_fields,
    parse_overrides,
    resolve_family,
)
from training.objectives import CausalLM, MaskedLM, SpanCorruption, TruncatedBPTT, build_model, objective_for
from training.objectives.electra import ElectraPretrainingModel

TEXTS = ["the cat sat on the mat.", "a dog ran in the park."] * 20


@pytest.mark.parametrize(
    ("objective", "family"),
    [
        ("clm", "gpt"),
        ("mlm", "bert"),
        ("electra", "electra"),
        ("span_corruption", "t5"),
        ("bart_denoising", "bart"),
    ],
)
def test_arch_transformer_means_the_objectives_family(objective, family):
    assert resolve_family("transformer", None, objective) == family
    assert resolve_family("transformer", family, objective) == family  # --family alone decides


@pytest.mark.parametrize(
    ("arch", "family", "objective", "message"),
    [
        ("transformer", "bert", "clm", "family 'bert' is not trained with objective 'clm'"),
        ("transformer", "gpt", "mlm", "objective 'mlm' trains the families bert"),
        ("transformer", "rnn_seq2seq", "clm", "it trains 'span_corruption' or 'bart_denoising'"),
        ("transformer", "t5", "bart_denoising", "trains the families bart, rnn_seq2seq"),
        ("rnn", "gpt", "clm", "`arch`='rnn' and `family`='gpt' name different families"),
    ],
)
def test_a_family_that_does_not_fit_the_objective_is_refused(arch, family, objective, message):
    with pytest.raises(ValueError, match=message):
        resolve_family(arch, family, objective)


def test_an_unknown_family_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="`family` must be one of"):
        parse_args(as_flags({**TINY, "output_dir": str(tmp_path), "family": "llama"}))


def test_the_run_refuses_a_misfit_before_reading_data(tmp_path):
    with pytest.raises(ValueError, match="family 'bert' is not trained with objective 'clm'"):
        _run(tmp_path / "run", max_steps=1, family="bert")
    assert not (tmp_path / "run" / "tokenizer").exists()


@pytest.mark.parametrize(
    ("family", "objective", "model_class"),
    [
        ("gpt", "clm", HfLmGPTForCausalLM),
        ("bert", "mlm", HfLmBertForMaskedLM),
        ("electra", "electra", ElectraPretrainingModel),  # the discriminator with its generator
        ("t5", "span_corruption", HfLmT5ForConditionalGeneration),
        ("bart", "bart_denoising", HfLmBartForConditionalGeneration),
        ("rnn", "clm", HfLmRNNForCausalLM),
        ("ffnn", "clm", HfLmFFNNForCausalLM),
        ("rnn_seq2seq", "span_corruption", HfLmRNNSeq2SeqForConditionalGeneration),
    ],
)
def test_family_and_arch_spellings_build_the_same_model(family, objective, model_class):
    train_args = TrainArguments(objective=objective)
    tokenizer = train_tokenizer(
        TEXTS, kind="byte_bpe", vocab_size=300, special_tokens=objective_for(train_args).special_tokens
    )
    data_args = DataArguments(block_size=16)
    sizes = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2)
    arch = family if family in ("rnn", "ffnn", "rnn_seq2seq") else "transformer"
    torch.manual_seed(0)
    new = build_model(ModelArguments(family=family, **sizes), data_args, tokenizer, objective)
    torch.manual_seed(0)
    old = build_model(ModelArguments(arch=arch, **sizes), data_args, tokenizer, objective)
    assert type(new) is type(old) is model_class
    assert new.config.to_dict() == old.config.to_dict()
    for (name, a), (_, b) in zip(new.state_dict().items(), old.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_objectives_take_their_tokens_and_decoder_start_from_the_family_table():
    assert objective_for(TrainArguments(objective="mlm")).special_tokens == FAMILIES["bert"].special_tokens
    assert objective_for(TrainArguments(objective="clm")).special_tokens is None  # GPT's defaults
    span = objective_for(TrainArguments(objective="span_corruption"))
    assert isinstance(span, SpanCorruption) and span.special_tokens == FAMILIES["t5"].special_tokens
    tokenizer = train_tokenizer(TEXTS, kind="unigram", vocab_size=100, special_tokens=span.special_tokens)
    assert span.model_config(tokenizer) == {"decoder_start_token_id": tokenizer.pad_token_id}  # T5's
    bart = objective_for(TrainArguments(objective="bart_denoising"))
    assert bart.model_config(tokenizer) == {"decoder_start_token_id": tokenizer.eos_token_id}  # BART's
    assert isinstance(objective_for(TrainArguments(objective="mlm")), MaskedLM)


def test_tbptt_is_the_causal_objective_that_carries_lanes_of_state():
    plain, tbptt = (
        objective_for(TrainArguments()),
        objective_for(TrainArguments(tbptt=True, gradient_accumulation_steps=2)),
    )
    assert type(plain) is CausalLM and plain.state_tensors(0) is None
    assert isinstance(tbptt, TruncatedBPTT)
    # the lanes are the data's choice, made from the same flag
    plans = [
        BatchPlan.from_args(DataArguments(), args, world=1, rank=0).source
        for args in (plain.args, tbptt.args)
    ]
    assert plans == ["blocks", "lanes"]
    assert tbptt.state_tensors(0) == {}  # no lane has a state yet
    batch = {"input_ids": torch.arange(8).view(2, 4)}
    inputs, extra = tbptt.inputs(batch, SimpleNamespace(step=0, update=0), 1)
    assert torch.equal(inputs["labels"], batch["input_ids"])
    assert extra == {"past_key_values": None, "use_cache": True}


def test_tbptt_forward_carries_each_lanes_state_to_its_next_block_until_the_epoch_ends():
    """The loop's one call per micro-batch (`Objective.forward`): micro-batch m of an update gets the
    state micro-batch m of the update before left, detached; an epoch's first update starts afresh."""
    tbptt = objective_for(TrainArguments(tbptt=True, gradient_accumulation_steps=2))
    model = HfLmRNNForCausalLM(HfLmRNNConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1))
    seen = []

    def forward_loss(model, inputs, extra):
        cache = extra["past_key_values"]  # (the model then updates it in place)
        seen.append(None if cache is None else (cache.seen_tokens, [t.requires_grad for t in cache.state]))
        return model(**inputs, **extra)

    batch = {"input_ids": torch.arange(8).view(2, 4)}
    for update in (0, 1, 0):
        for micro in (0, 1):
            outputs = tbptt.forward(
                forward_loss, model, batch, SimpleNamespace(step=update, update=update), micro
            )
            assert outputs.loss.requires_grad
    assert seen[0] is None and seen[1] is None  # a fresh epoch: no state yet
    # each lane's own previous block, detached: gradients stop at the block edge
    assert seen[2] == seen[3] == (4, [False, False])
    assert seen[4] is None and seen[5] is None  # the next epoch starts every lane afresh


def test_family_spelling_of_a_run_matches_the_arch_spelling(tmp_path):
    """The same run by --family and by --arch: the same metrics (the loop only sees the family)."""
    run = dict(max_steps=4, eval_every=4, save_every=4, report_to=["none"])
    a = _run(tmp_path / "family", family="rnn", **run)
    b = _run(tmp_path / "arch", arch="rnn", **run)
    drop = {"seconds"}
    assert {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}


class _Tokenizer:
    pad_token_id, eos_token_id, bos_token_id = 0, 1, 2

    def __len__(self) -> int:
        return 300


def test_config_overrides_take_run_clm_pairs_or_json_and_refuse_unknown_fields_by_name():
    pairs = (
        "hidden_size=64, num_hidden_layers=2,hidden_act=swiglu,tie_word_embeddings=false,sliding_window=null"
    )
    expected = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "hidden_act": "swiglu",
        "tie_word_embeddings": False,
        "sliding_window": None,
    }
    assert parse_overrides(pairs) == expected == parse_overrides(json.dumps(expected))
    # Python's spellings, as run_clm.py reads them: "False" was a string, refused after the data was read
    python = pairs.replace("false", "False").replace("null", "None")
    assert parse_overrides(python) == expected
    model_args = ModelArguments(family="gpt", config_overrides=pairs)
    config = family_config("gpt", model_args, DataArguments(block_size=16), _Tokenizer(), {})
    assert (config.hidden_size, config.num_hidden_layers, config.hidden_act) == (64, 2, "swiglu")
    assert config.tie_word_embeddings is False and config.sliding_window is None
    with pytest.raises(ValueError, match="'hiden_size' \\(did you mean 'hidden_size'"):
        ModelArguments(config_overrides="hiden_size=64").overrides(FAMILIES["gpt"].config_class)
    # a table smaller than the tokenizer crashed in the first forward; a larger one pads it
    small = ModelArguments(family="gpt", config_overrides="vocab_size=100")
    with pytest.raises(ValueError, match=r"vocab_size=100 is smaller than the tokenizer's 300 tokens"):
        family_config("gpt", small, DataArguments(block_size=16), _Tokenizer(), {})
    large = ModelArguments(family="gpt", config_overrides="vocab_size=320")
    assert family_config("gpt", large, DataArguments(block_size=16), _Tokenizer(), {}).vocab_size == 320
    for bad in ("hidden_size", "[1]", "=3"):
        with pytest.raises(ValueError, match="config_overrides"):
            ModelArguments(config_overrides=bad)


def test_every_config_flag_sets_fields_its_families_configs_have():
    """The flags map onto configs by one table (`FLAG_FIELDS`): each field it names exists."""
    for flag, families in FLAG_FIELDS.items():
        assert flag in {f.name for f in dataclasses.fields(ModelArguments)}
        for family, target in families.items():
            names = target(2) if callable(target) else [name.format(flag=flag) for name in target]
            assert set(names) <= config_fields(FAMILIES[family].config_class), (flag, family)


def test_config_flags_set_the_fields_of_their_name_or_the_familys_own_names():
    model_args = ModelArguments(hidden_size=48, num_hidden_layers=3, rnn_attention="bahdanau", ngram_order=5)
    fields = flag_fields("rnn_seq2seq", model_args, block_size=16)
    assert fields["embedding_size"] == fields["hidden_size"] == 48 and fields["attention"] == "bahdanau"
    assert fields["encoder_layers"] == fields["decoder_layers"] == 3 and "num_attention_heads" not in fields
    assert flag_fields("ffnn", model_args, 16)["context_size"] == 4  # sees n - 1 tokens
    assert flag_fields("ffnn", model_args, 16)["intermediate_size"] == 4 * 48  # the run's default
    assert flag_fields("gpt", model_args, 16)["max_position_embeddings"] == 16
    assert flag_fields("bart", model_args, 16)["max_position_embeddings"] == 32  # the noised source
    assert flag_fields("ngram", model_args, 16) == {"order": 5}
    llama = ModelArguments(preset="llama")  # the preset's variants hold; the run's sizes apply
    assert "position_embedding_type" not in flag_fields("gpt", llama, 16)
    assert flag_fields("gpt", llama, 16)["hidden_size"] == 128
