"""Saving and loading GPT checkpoints (the variants' remote-code round trip is in the property suite,
tests/test_model_properties.py)."""

import json

import pytest
import torch
from conftest import VARIANTS, tiny_gpt_config
from remote_code import shipped_files
from safetensors import safe_open
from test_shipped_files import SHIPPED
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging as hf_logging

from hf_lm import HfLmGPTForCausalLM


@pytest.mark.parametrize("variant", ["gpt2", "llama"])
def test_save_and_load_round_trip(tmp_path, variant):
    model = HfLmGPTForCausalLM(tiny_gpt_config(**VARIANTS[variant])).eval()
    x = torch.randint(3, 97, (2, 9))
    # transformers logs through its own handler (no propagation): capture it at the library root
    with CaptureLogger(hf_logging.get_logger("transformers")) as captured:
        model.save_pretrained(tmp_path)
        loaded, info = HfLmGPTForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    assert "tied" not in captured.out.lower() and "MISSING" not in captured.out, captured.out
    torch.testing.assert_close(loaded.eval()(x).logits, model(x).logits, rtol=0, atol=0)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    tied = model.config.tie_word_embeddings
    assert ("lm_head.weight" in keys) != tied  # a tied head is not stored twice
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight if tied else True
    assert not list(tmp_path.glob("*.bin")) and not list(tmp_path.glob("*.pt"))


def test_dtype_survives_save_and_load(tmp_path):
    model = HfLmGPTForCausalLM(tiny_gpt_config()).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    assert HfLmGPTForCausalLM.from_pretrained(tmp_path).dtype == torch.bfloat16  # dtype="auto" by default
    assert HfLmGPTForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).dtype == torch.float32


def test_shipped_files_and_auto_map(tmp_path):
    HfLmGPTForCausalLM(tiny_gpt_config()).save_pretrained(tmp_path)
    # the code it ships (imports and loading as remote code: tests/test_model_properties.py)
    assert shipped_files(tmp_path) == SHIPPED["gpt"]
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "hflm_configuration_gpt.HfLmGPTConfig",
        "AutoModel": "hflm_modeling_gpt.HfLmGPTModel",
        "AutoModelForCausalLM": "hflm_modeling_gpt.HfLmGPTForCausalLM",
        "AutoModelForSequenceClassification": "hflm_modeling_gpt.HfLmGPTForSequenceClassification",
    }


def test_every_saved_model_gets_a_model_card(tmp_path):
    model = HfLmGPTForCausalLM(tiny_gpt_config())
    model.save_pretrained(tmp_path)
    card = (tmp_path / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n")
    assert "pipeline_tag: text-generation" in card and "- hflm_gpt" in card
    assert "AutoModelForCausalLM.from_pretrained" in card and "trust_remote_code=True" in card
    assert f"{model.num_parameters():,}" in card
    # an existing card (e.g. the fuller one from hf_lm.cards) is never overwritten
    (tmp_path / "README.md").write_text("my card")
    model.save_pretrained(tmp_path)
    assert (tmp_path / "README.md").read_text() == "my card"
