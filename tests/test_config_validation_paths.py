"""An invalid config value raises `ValueError` naming the field on every path to a model, for every
family: not only `Config(field=bad)`, but also values set after the config was built
(`AutoConfig.from_pretrained(folder, field=bad)`, `from_pretrained(folder, field=bad)`,
`config.update`, attribute assignment), which `HfLmPreTrainedModel.__init__` validates again, and a
saved `config.json` edited by hand. Without that, those surfaced as a bare `KeyError: 'tanhh'` or a
size mismatch deep inside the layers.
"""

from __future__ import annotations

import json
import re

import pytest
from remote_code import run_fresh_interpreter
from transformers import AutoConfig

from hf_lm import FAMILIES
from hf_lm.testing import FAMILY_CASES

# per model_type: (field, invalid value) pairs; each must raise a ValueError naming the field
INVALID = {
    "hflm_gpt": [("hidden_act", "tanhh"), ("num_attention_heads", 3), ("hidden_size", 0)],
    "hflm_bert": [("hidden_act", "tanhh"), ("num_attention_heads", 3)],
    "hflm_electra": [("embedding_size", 0), ("num_attention_heads", 3)],
    "hflm_t5": [("hidden_act", "tanhh"), ("num_attention_heads", 3)],
    "hflm_bart": [("position_embedding_type", "rotary"), ("num_attention_heads", 3)],
    "hflm_rnn": [("cell_type", "lstmm")],
    "hflm_rnn_seq2seq": [("attention", "dot"), ("cell_type", "lstmm")],
    "hflm_ngram": [("smoothing", "laplace"), ("order", 0)],
    "hflm_ffnn": [("context_size", 0), ("use_cache", True)],
}

CASES = [
    pytest.param(case, field, value, id=f"{case.name}-{field}")
    for case in FAMILY_CASES
    for field, value in INVALID[case.make_config().model_type]
]


def test_every_family_has_invalid_values():
    assert set(INVALID) == {family.model_type for family in FAMILIES.values()}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The folder of each case's tiny model, saved once per module."""
    root, folders = tmp_path_factory.mktemp("saved"), {}

    def folder(case):
        if case.name not in folders:
            folders[case.name] = root / case.name
            case.make_model().save_pretrained(folders[case.name])
        return folders[case.name]

    return folder


def raises_naming(field: str):
    return pytest.raises(ValueError, match=re.escape(f"`{field}`"))


@pytest.mark.parametrize("case, field, value", CASES)
def test_constructor(case, field, value):
    config = case.make_config().to_dict()
    config.pop("model_type", None)
    with raises_naming(field):
        type(case.make_config())(**{**config, field: value})


@pytest.mark.parametrize("case, field, value", CASES)
def test_attribute_assignment(case, field, value):
    config = case.make_config()
    setattr(config, field, value)
    with raises_naming(field):
        case.model_class(config)


@pytest.mark.parametrize("case, field, value", CASES)
def test_config_update(case, field, value):
    config = case.make_config()
    config.update({field: value})
    with raises_naming(field):
        case.model_class(config)


@pytest.mark.parametrize("case, field, value", CASES)
def test_auto_config_from_pretrained_kwarg(case, field, value, saved):
    folder = saved(case)
    config = AutoConfig.from_pretrained(folder, **{field: value})
    assert getattr(config, field) == value  # the value got past the config: the model must refuse it
    with raises_naming(field):
        case.model_class.from_pretrained(folder, config=config)
    with raises_naming(field):
        case.model_class._from_config(config)


@pytest.mark.parametrize("case, field, value", CASES)
def test_from_pretrained_kwarg(case, field, value, saved):
    with raises_naming(field):
        case.model_class.from_pretrained(saved(case), **{field: value})


@pytest.mark.parametrize("case, field, value", CASES)
def test_edited_config_json(case, field, value, saved, tmp_path):
    folder = tmp_path / "edited"
    case.make_model().save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config[field] = value
    (folder / "config.json").write_text(json.dumps(config))
    with raises_naming(field):
        case.model_class.from_pretrained(folder)


def test_valid_values_set_after_construction_still_build(saved):
    """Re-validation refuses only invalid values: a valid change builds, and loading is unaffected."""
    for case in FAMILY_CASES:
        config = case.make_config()
        config.update({"initializer_range": 0.01})
        case.model_class(config)
        case.model_class.from_pretrained(saved(case))


REMOTE_VALIDATION_SCRIPT = """
    import json
    import sys

    sys.modules["hf_lm"] = None  # hf_lm must not be importable: the code comes from the folders
    import transformers

    failures = []
    for folder, auto_class, field, value in json.loads(sys.argv[1]):
        auto = getattr(transformers, auto_class)
        try:
            auto.from_pretrained(folder, trust_remote_code=True, **{field: value})
        except ValueError as error:
            if f"`{field}`" not in str(error):
                failures.append(f"{folder} {field}: {error}")
        else:
            failures.append(f"{folder} {field}={value!r}: no error")
    print("\\n".join(failures) or "VALIDATION-OK")
"""


def test_remote_code_validates_from_pretrained_kwargs(tmp_path):
    """A folder loaded with trust_remote_code where hf_lm is not importable validates too."""
    checks, seen = [], set()
    for case in FAMILY_CASES:
        model_type = case.make_config().model_type
        if model_type in seen:
            continue  # one head per family: the shipped base class is what validates
        seen.add(model_type)
        folder = tmp_path / case.name
        case.make_model().save_pretrained(folder)
        for field, value in INVALID[model_type]:
            checks.append((str(folder), case.model_class._auto_class, field, value))
    stdout = run_fresh_interpreter(REMOTE_VALIDATION_SCRIPT, json.dumps(checks), cwd=tmp_path)
    assert "VALIDATION-OK" in stdout, stdout
