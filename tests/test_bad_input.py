"""Bad input gets a clear `ValueError` naming the argument, in every model class and every config.

One sweep, not per-family copies: `hf_lm.testing.FAMILY_CASES` has a tiny model and a valid batch for
every registered model class, and each entry of `BAD_INPUTS` turns a valid batch into one kind of bad
input, or says that the kind does not apply to the class (no such argument, or one the model ignores).
Every (class, kind) pair must raise a `ValueError` whose message names the argument in backticks: not
a raw torch error from deep inside `forward`, not an error that blames another argument (a bad label
reported as a bad `input_ids`), and not silence (a mask holding 2, a non-finite loss).

The configs: every finite-number field of every config class refuses nan and +-inf, naming the field
(`FINITE_FIELDS` must cover every float field the config classes declare).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from functools import cache

import pytest
import torch
from transformers.modeling_outputs import BaseModelOutput

import hf_lm
from hf_lm.testing import FAMILY_CASES, VOCAB

BIG = 10**6  # an id or a class index outside every tiny model's range

# ----------------------------------------------------------------------------------------------
# The kinds of bad input: (case, model, batch) -> (model kwargs, argument name), or None when the
# kind does not apply to the class.
# ----------------------------------------------------------------------------------------------

BAD_INPUTS: dict[str, Callable] = {}


def bad_input(fn: Callable) -> Callable:
    BAD_INPUTS[fn.__name__] = fn
    return fn


def _params(model) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _with(batch: dict, **changes) -> dict:
    return {**batch, **changes}


def _set_first(x: torch.Tensor, value, index=None) -> torch.Tensor:
    """A copy of `x` with one entry set (the first of row 0 by default, a real token in every batch)."""
    x = x.clone()
    x[(0,) * x.dim() if index is None else index] = value
    return x


def _token_labels(batch) -> bool:
    return "labels" in batch and batch["labels"].dim() >= 2


def _is_seq2seq(model) -> bool:
    return bool(getattr(model.config, "is_encoder_decoder", False))


def _uses_positions(model) -> bool:
    """Transformer families read `position_ids`; the recurrent LM accepts them for generate() and ignores them."""
    return hasattr(model.config, "position_embedding_type")


def _position_arg(model, batch) -> tuple[str, int] | None:
    """The position argument of the class and the length it covers."""
    params = _params(model)
    if _is_seq2seq(model):
        if "decoder_position_ids" not in params:
            return None
        target = batch["labels"] if "labels" in batch else batch["decoder_input_ids"]
        return "decoder_position_ids", target.shape[-1]
    if "position_ids" not in params or not _uses_positions(model):
        return None
    return "position_ids", batch["input_ids"].shape[-1]


# -- input_ids ---------------------------------------------------------------------------------


@bad_input
def input_ids_bool(case, model, batch):
    return _with(batch, input_ids=batch["input_ids"].bool()), "input_ids"


@bad_input
def input_ids_float(case, model, batch):
    return _with(batch, input_ids=batch["input_ids"].float()), "input_ids"


@bad_input
def input_ids_list(case, model, batch):
    return _with(batch, input_ids=batch["input_ids"].tolist()), "input_ids"


@bad_input
def input_ids_out_of_vocab(case, model, batch):
    return _with(batch, input_ids=_set_first(batch["input_ids"], VOCAB)), "input_ids"


@bad_input
def input_ids_negative(case, model, batch):
    return _with(batch, input_ids=_set_first(batch["input_ids"], -1)), "input_ids"


@bad_input
def input_ids_extra_dim(case, model, batch):
    return _with(batch, input_ids=batch["input_ids"][..., None]), "input_ids"


@bad_input
def empty_batch(case, model, batch):
    return {key: value[:0] for key, value in batch.items()}, "input_ids"


@bad_input
def inputs_embeds_wrong_width(case, model, batch):
    if "inputs_embeds" not in _params(model):
        return None
    width = model.get_input_embeddings().embedding_dim
    ids = batch["input_ids"]
    kwargs = {k: v for k, v in batch.items() if k != "input_ids"}
    return _with(kwargs, inputs_embeds=torch.randn(*ids.shape, width + 1)), "inputs_embeds"


# -- masks -------------------------------------------------------------------------------------


@bad_input
def attention_mask_wrong_shape(case, model, batch):
    return _with(batch, attention_mask=batch["attention_mask"][..., :-1]), "attention_mask"


@bad_input
def attention_mask_holds_2(case, model, batch):
    return _with(batch, attention_mask=_set_first(batch["attention_mask"], 2)), "attention_mask"


@bad_input
def attention_mask_holds_half(case, model, batch):
    return _with(batch, attention_mask=_set_first(batch["attention_mask"].float(), 0.5)), "attention_mask"


@bad_input
def decoder_attention_mask_wrong_shape(case, model, batch):
    if "decoder_attention_mask" not in batch:
        return None
    mask = batch["decoder_attention_mask"][:, :-1]
    return _with(batch, decoder_attention_mask=mask), "decoder_attention_mask"


@bad_input
def decoder_attention_mask_holds_2(case, model, batch):
    if "decoder_attention_mask" not in batch:
        return None
    mask = _set_first(batch["decoder_attention_mask"], 2)
    return _with(batch, decoder_attention_mask=mask), "decoder_attention_mask"


# -- decoder inputs and encoder outputs (encoder-decoders) ---------------------------------------


@bad_input
def decoder_input_ids_out_of_vocab(case, model, batch):
    if "decoder_input_ids" not in batch:
        return None
    return _with(batch, decoder_input_ids=_set_first(batch["decoder_input_ids"], VOCAB)), "decoder_input_ids"


@bad_input
def decoder_input_ids_float(case, model, batch):
    if "decoder_input_ids" not in batch:
        return None
    return _with(batch, decoder_input_ids=batch["decoder_input_ids"].float()), "decoder_input_ids"


@bad_input
def decoder_batch_differs_from_encoder_batch(case, model, batch):
    """One target row for two sources: from `labels` (LM heads) or `decoder_input_ids` (bare models)."""
    if not _is_seq2seq(model):
        return None
    if _token_labels(batch):
        return _with(batch, labels=batch["labels"][:1]), "labels"
    if "decoder_input_ids" in batch:
        decoder = {k: batch[k][:1] for k in ("decoder_input_ids", "decoder_attention_mask")}
        return _with(batch, **decoder), "decoder_input_ids"
    return None


def _encoder_outputs(model, batch):
    with torch.no_grad():
        return model.get_encoder()(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], return_dict=True
        )


@bad_input
def encoder_outputs_wrong_width(case, model, batch):
    if "encoder_outputs" not in _params(model):
        return None
    out = _encoder_outputs(model, batch)
    states = out.last_hidden_state
    wider = torch.cat([states, states[..., :1]], dim=-1)  # (B, S, C + 1)
    if type(out) is BaseModelOutput:
        bad = BaseModelOutput(last_hidden_state=wider)
    else:
        bad = type(out)(**{**out, "last_hidden_state": wider})
    return _with(batch, encoder_outputs=bad), "encoder_outputs"


@bad_input
def encoder_outputs_tuple_of_other_batch(case, model, batch):
    if "encoder_outputs" not in _params(model):
        return None
    out = _encoder_outputs(model, batch)
    return _with(batch, encoder_outputs=tuple(x[:1] for x in out.to_tuple())), "encoder_outputs"


# -- labels ------------------------------------------------------------------------------------


@bad_input
def labels_wrong_shape(case, model, batch):
    if "labels" not in batch:
        return None
    labels = batch["labels"]
    if _is_seq2seq(model) and _token_labels(batch):
        return _with(batch, labels=labels[:, None]), "labels"  # a target length is free: a third dim is not
    return _with(batch, labels=labels[..., :-1] if _token_labels(batch) else labels[:-1]), "labels"


@bad_input
def labels_float(case, model, batch):
    if "labels" not in batch:
        return None
    return _with(batch, labels=batch["labels"].float()), "labels"


@bad_input
def labels_out_of_range(case, model, batch):
    if "labels" not in batch:
        return None
    index = (0, 1) if _token_labels(batch) else (0,)  # MLM labels are set at column 1 in every row
    return _with(batch, labels=_set_first(batch["labels"], BIG, index)), "labels"


@bad_input
def labels_negative(case, model, batch):
    if "labels" not in batch:
        return None
    index = (0, 1) if _token_labels(batch) else (0,)
    return _with(batch, labels=_set_first(batch["labels"], -5, index)), "labels"


@bad_input
def next_sentence_label_float(case, model, batch):
    if "next_sentence_label" not in batch:
        return None
    return _with(batch, next_sentence_label=batch["next_sentence_label"].float()), "next_sentence_label"


@bad_input
def start_positions_float(case, model, batch):
    if "start_positions" not in batch:
        return None
    return _with(batch, start_positions=batch["start_positions"].float()), "start_positions"


# -- the loss normalizer -----------------------------------------------------------------------


@bad_input
def num_items_in_batch_zero(case, model, batch):
    if "labels" not in batch:
        return None
    return _with(batch, num_items_in_batch=0), "num_items_in_batch"


@bad_input
def num_items_in_batch_zero_tensor(case, model, batch):
    if "labels" not in batch:
        return None
    return _with(batch, num_items_in_batch=torch.tensor(0)), "num_items_in_batch"


@bad_input
def num_items_in_batch_nan(case, model, batch):
    if "labels" not in batch:
        return None
    return _with(batch, num_items_in_batch=math.nan), "num_items_in_batch"


# -- positions ---------------------------------------------------------------------------------


@bad_input
def position_ids_negative(case, model, batch):
    arg = _position_arg(model, batch)
    if arg is None:
        return None
    name, T = arg
    return _with(batch, **{name: torch.arange(T)[None] - 1}), name


@bad_input
def position_ids_beyond_the_learned_table(case, model, batch):
    arg = _position_arg(model, batch)
    if arg is None or model.config.position_embedding_type != "learned":
        return None
    name, T = arg
    return _with(batch, **{name: torch.arange(T)[None] + model.config.max_position_embeddings - 2}), name


@bad_input
def position_ids_float(case, model, batch):
    arg = _position_arg(model, batch)
    if arg is None:
        return None
    name, T = arg
    return _with(batch, **{name: torch.arange(T, dtype=torch.float32)[None]}), name


@bad_input
def position_ids_wrong_shape(case, model, batch):
    arg = _position_arg(model, batch)
    if arg is None:
        return None
    name, T = arg
    return _with(batch, **{name: torch.arange(T + 1)[None]}), name


@bad_input
def position_ids_packed_rows_for_a_model_without_positions(case, model, batch):
    """Padding-free packed rows (positions restarting, no mask): a Transformer keeps the sequences apart
    (tests/test_gpt_model.py); a model that reads no positions would run one into the next."""
    if _is_seq2seq(model) or _uses_positions(model) or not case.name.endswith("causal-lm"):
        return None
    T = batch["input_ids"].shape[-1]
    restarting = torch.cat([torch.arange(3), torch.arange(T - 3)])[None]  # two sequences per row
    unmasked = {k: v for k, v in batch.items() if k != "attention_mask"}
    return _with(unmasked, position_ids=restarting), "position_ids"


@bad_input
def prefix_lengths_wrong_batch(case, model, batch):
    if "prefix_lengths" not in _params(model):
        return None
    return _with(batch, prefix_lengths=torch.tensor([3])), "prefix_lengths"


@bad_input
def prefix_lengths_negative(case, model, batch):
    if "prefix_lengths" not in _params(model):
        return None
    return _with(batch, prefix_lengths=torch.tensor([-1, 2])), "prefix_lengths"


@bad_input
def prefix_lengths_float(case, model, batch):
    if "prefix_lengths" not in _params(model):
        return None
    return _with(batch, prefix_lengths=torch.tensor([1.5, 2.0])), "prefix_lengths"


@bad_input
def token_type_ids_out_of_range(case, model, batch):
    if "token_type_ids" not in batch:
        return None
    return _with(batch, token_type_ids=_set_first(batch["token_type_ids"], 5)), "token_type_ids"


# -- cache and output selection ----------------------------------------------------------------


@bad_input
def past_key_values_string(case, model, batch):
    if "past_key_values" not in _params(model):
        return None
    return _with(batch, past_key_values="hello"), "past_key_values"


@bad_input
def past_key_values_legacy_tuple(case, model, batch):
    if "past_key_values" not in _params(model):
        return None
    legacy = tuple((torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8)) for _ in range(2))
    return _with(batch, past_key_values=legacy), "past_key_values"


def _keep(model, batch, value):
    if "logits_to_keep" not in _params(model):
        return None
    if _is_seq2seq(model):
        return _with(batch, logits_to_keep=value), "logits_to_keep"  # labels make the decoder inputs
    return _with({k: v for k, v in batch.items() if k != "labels"}, logits_to_keep=value), "logits_to_keep"


@bad_input
def logits_to_keep_negative(case, model, batch):
    return _keep(model, batch, -3)


@bad_input
def logits_to_keep_float(case, model, batch):
    return _keep(model, batch, 1.5)


@bad_input
def logits_to_keep_index_out_of_range(case, model, batch):
    return _keep(model, batch, torch.tensor([0, 100]))


# ----------------------------------------------------------------------------------------------
# The sweep
# ----------------------------------------------------------------------------------------------


@cache
def _reference(name: str):
    """A model and a batch of each case, to decide which kinds apply (tests build fresh ones)."""
    case = next(c for c in FAMILY_CASES if c.name == name)
    return case.make_model(seed=0), case.make_batch()


def _sweep() -> list[tuple]:
    pairs = []
    for case in FAMILY_CASES:
        model, batch = _reference(case.name)
        pairs += [(case, kind) for kind, make in BAD_INPUTS.items() if make(case, model, batch) is not None]
    return pairs


SWEEP = _sweep()


@pytest.mark.parametrize("case,kind", SWEEP, ids=[f"{case.name}-{kind}" for case, kind in SWEEP])
def test_bad_input_gets_a_value_error_naming_the_argument(case, kind):
    model = case.make_model(seed=0)
    kwargs, name = BAD_INPUTS[kind](case, model, case.make_batch())
    with pytest.raises(ValueError, match=f"`{re.escape(name)}`"):
        with torch.no_grad():
            model(**kwargs)


def test_every_kind_of_bad_input_applies_to_some_class():
    """A kind whose applicability test is wrong would silently drop out of the sweep."""
    swept = {kind for _, kind in SWEEP}
    assert swept == set(BAD_INPUTS), sorted(set(BAD_INPUTS) - swept)
    assert len({case.name for case, _ in SWEEP}) == len(FAMILY_CASES)


@pytest.mark.parametrize("case", FAMILY_CASES, ids=str)
def test_valid_variants_of_the_inputs_are_accepted_and_equal(case):
    """The checks refuse only what is wrong: a bool or float 0/1 mask gives what the integer one gives,
    and a positive `num_items_in_batch` (an int, a 0-dim or a one-element tensor) gives the summed loss
    divided by it, as a 0-dim loss."""
    model = case.make_model(seed=0)
    batch = case.make_batch()

    def tensors(out):  # the loss (when labels are given) and the first output tensor after it
        return [value for value in out.values() if torch.is_tensor(value)][:2]

    with torch.no_grad():
        reference = model(**batch)
        for dtype in (torch.bool, torch.float32):
            masks = {k: v.to(dtype) for k, v in batch.items() if k.endswith("attention_mask")}
            for got, expected in zip(tensors(model(**{**batch, **masks})), tensors(reference)):
                torch.testing.assert_close(got, expected)
        if "labels" in batch and case.name != "bert-pretraining":  # its sentence-pair loss is a mean
            counts = (4, torch.tensor(4), torch.tensor(2.0), torch.tensor([8]))  # Trainer passes tensors
            losses = [model(**batch, num_items_in_batch=n).loss for n in counts]
            assert all(loss.dim() == 0 for loss in losses)
            summed = [loss * float(n) for loss, n in zip(losses, counts)]
            for other in summed[1:]:
                torch.testing.assert_close(other, summed[0])


# ----------------------------------------------------------------------------------------------
# Configs: finite-number fields refuse nan and inf, naming the field
# ----------------------------------------------------------------------------------------------

CONFIG_CLASSES = sorted({type(case.make_config()) for case in FAMILY_CASES}, key=lambda c: c.__name__)

# every float field of each config class (the test below keeps this complete)
FINITE_FIELDS = {
    hf_lm.HfLmGPTConfig: (
        "rope_theta",
        "attention_scale",
        "norm_eps",
        "hidden_dropout",
        "attention_dropout",
        "initializer_range",
        "capacity_factor",
        "router_jitter_noise",
        "router_aux_loss_coef",
        "router_z_loss_coef",
    ),
    hf_lm.HfLmBertConfig: (  # no mixture-of-experts fields: BERT has none
        "rope_theta",
        "attention_scale",
        "norm_eps",
        "hidden_dropout",
        "attention_dropout",
        "initializer_range",
        "classifier_dropout",
    ),
    hf_lm.HfLmT5Config: (
        "rope_theta",
        "attention_scale",
        "norm_eps",
        "hidden_dropout",
        "attention_dropout",
        "initializer_range",
        "classifier_dropout",
        "capacity_factor",
        "router_jitter_noise",
        "router_aux_loss_coef",
        "router_z_loss_coef",
    ),
    hf_lm.HfLmBartConfig: (
        "rope_theta",
        "attention_scale",
        "norm_eps",
        "hidden_dropout",
        "attention_dropout",
        "initializer_range",
        "classifier_dropout",
        "capacity_factor",
        "router_jitter_noise",
        "router_aux_loss_coef",
        "router_z_loss_coef",
    ),
    hf_lm.HfLmRNNConfig: ("hidden_dropout", "initializer_range", "forget_bias"),
    hf_lm.HfLmRNNSeq2SeqConfig: ("hidden_dropout", "initializer_range"),
    hf_lm.HfLmNGramConfig: ("add_k",),
    hf_lm.HfLmFFNNConfig: ("hidden_dropout", "initializer_range"),
}
FINITE_FIELDS[hf_lm.HfLmElectraConfig] = FINITE_FIELDS[hf_lm.HfLmBertConfig]  # BERT's encoder config
CONFIG_FIELDS = [(cls, field) for cls, fields in FINITE_FIELDS.items() for field in fields]


def _float_fields(cls) -> set[str]:
    """The fields annotated `float` (or `float | None`) by hf_lm's own config classes."""
    fields = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith("hf_lm"):
            fields |= {
                name for name, kind in vars(klass).get("__annotations__", {}).items() if "float" in str(kind)
            }
    return fields


def test_the_finite_field_table_covers_every_config_class_and_float_field():
    assert set(FINITE_FIELDS) == set(CONFIG_CLASSES)
    for cls, fields in FINITE_FIELDS.items():
        assert _float_fields(cls) == set(fields), cls.__name__


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("cls,field", CONFIG_FIELDS, ids=[f"{c.__name__}.{f}" for c, f in CONFIG_FIELDS])
def test_config_refuses_a_non_finite_number_naming_the_field(cls, field, value):
    with pytest.raises(ValueError, match=f"`{field}`"):
        cls(**{field: value})


@pytest.mark.parametrize(
    "smoothing,entry", [("interpolated_kn", math.nan), ("modified_kn", [0.5, math.inf, 1.0])]
)
def test_ngram_discounts_refuse_non_finite_numbers(smoothing, entry):
    with pytest.raises(ValueError, match=r"`discounts\[0\]`"):
        hf_lm.HfLmNGramConfig(order=2, smoothing=smoothing, discounts=[entry, entry])


@pytest.mark.parametrize("cls,field", CONFIG_FIELDS, ids=[f"{c.__name__}.{f}" for c, f in CONFIG_FIELDS])
def test_config_refuses_a_string_for_a_number_naming_the_field(cls, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        cls(**{field: "0.1"})
