"""Saving, loading, and the remote-code round trip in a fresh interpreter without hf_lm."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import VARIANTS, tiny_gpt_config
from safetensors import safe_open
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging as hf_logging

from hf_lm import HfLmGPTForCausalLM, HfLmGPTForSequenceClassification

SHIPPED_GPT_FILES = {
    "hflm_blocks.py",
    "hflm_common.py",
    "hflm_configuration_base.py",
    "hflm_configuration_gpt.py",
    "hflm_modeling_gpt.py",
}


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
    py_files = {p.name for p in tmp_path.glob("*.py")}
    assert py_files == SHIPPED_GPT_FILES
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "hflm_configuration_gpt.HfLmGPTConfig",
        "AutoModel": "hflm_modeling_gpt.HfLmGPTModel",
        "AutoModelForCausalLM": "hflm_modeling_gpt.HfLmGPTForCausalLM",
        "AutoModelForSequenceClassification": "hflm_modeling_gpt.HfLmGPTForSequenceClassification",
    }
    # shipped code imports only torch, transformers and its siblings
    for name in SHIPPED_GPT_FILES:
        for line in (tmp_path / name).read_text().splitlines():
            if line.startswith(("import ", "from ")):
                module = line.split()[1]
                assert module.split(".")[0] in {
                    "torch",
                    "transformers",
                    "__future__",
                    "math",
                    "os",
                    "sys",
                    "",
                }, line


REMOTE_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["hf_lm"] = None  # hf_lm must not be importable: everything comes from the folder
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

    folder, cls_folder = sys.argv[1], sys.argv[2]
    ref = load_file(folder + "/expected.safetensors")
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    logits = model(ref["input_ids"]).logits
    assert torch.equal(logits, ref["logits"]), (logits - ref["logits"]).abs().max()
    out = model.generate(ref["input_ids"], max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(out, ref["generated"])
    base = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    assert torch.equal(base(ref["input_ids"]).last_hidden_state, ref["hidden"])
    assert AutoConfig.from_pretrained(folder, trust_remote_code=True).model_type == "hflm_gpt"
    clf = AutoModelForSequenceClassification.from_pretrained(cls_folder, trust_remote_code=True).eval()
    assert torch.equal(clf(ref["input_ids"]).logits, ref["cls_logits"])
    print("REMOTE-OK", type(model).__name__)
    """
)


def run_remote(folder, cls_folder, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    script = tmp_path / "remote.py"
    script.write_text(REMOTE_SCRIPT)
    # run from tmp_path, not the repo, so nothing local shadows the shipped files
    result = subprocess.run(
        [sys.executable, str(script), str(folder), str(cls_folder)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REMOTE-OK" in result.stdout


def save_with_expectations(model, folder, cls_folder):
    from safetensors.torch import save_file

    model.eval().save_pretrained(folder)
    clf = HfLmGPTForSequenceClassification(model.config).eval()
    clf.model.load_state_dict(model.model.state_dict())
    clf.save_pretrained(cls_folder)
    x = torch.randint(3, model.config.vocab_size, (2, 7))
    with torch.no_grad():
        expected = {
            "input_ids": x,
            "logits": model(x).logits,
            "generated": model.generate(x, max_new_tokens=5, do_sample=False, pad_token_id=0),
            "hidden": model.model(x).last_hidden_state,
            "cls_logits": clf(x).logits,
        }
    save_file({k: v.contiguous() for k, v in expected.items()}, str(folder / "expected.safetensors"))


@pytest.mark.parametrize("variant", ["gpt2", "llama", "alibi_mqa"])
def test_remote_code_round_trip_in_fresh_interpreter(tmp_path, variant):
    model = HfLmGPTForCausalLM(tiny_gpt_config(**VARIANTS[variant]))
    folder, cls_folder = tmp_path / "lm", tmp_path / "cls"
    save_with_expectations(model, folder, cls_folder)
    run_remote(folder, cls_folder, tmp_path)


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
