"""No code from a model folder runs unless the user asks (`--trust_remote_code`, off by default).

A folder whose config (or tokenizer config) maps the Auto classes to a module of its own gets that
module imported by transformers when `trust_remote_code=True`. The CLIs used to pass True always, so
`python -m training.evaluate_cli --model DIR` executed whatever DIR shipped. The module here writes a
marker file when imported: it must not exist after a run without the flag.
"""

from __future__ import annotations

import json

import pytest

from training import evaluate_cli, finetune_classification, finetune_translation

EVIL = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
from transformers import PretrainedConfig
class EvilConfig(PretrainedConfig):
    model_type = "evil_model"
"""


def _hostile_folder(path, marker, where="config"):
    path.mkdir()
    (path / "evil.py").write_text(EVIL.format(marker=str(marker)))
    config = {"model_type": "evil_model", "vocab_size": 10}
    if where == "config":
        config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (path / "config.json").write_text(json.dumps(config))
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if where == "tokenizer":
        tokenizer_config["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", None]}
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return path


@pytest.mark.parametrize("where", ["config", "tokenizer"])
def test_evaluate_cli_runs_no_folder_code_without_the_flag(tmp_path, where):
    marker = tmp_path / "marker"
    folder = _hostile_folder(tmp_path / "model", marker, where=where)
    text = tmp_path / "text.txt"
    text.write_text("hello world")
    with pytest.raises((ValueError, OSError)):
        evaluate_cli.main(["--model", str(folder), "--text_file", str(text), "--device", "cpu"])
    assert not marker.exists()
    # asked for, it runs: the flag is what decides
    with pytest.raises(Exception):  # noqa: B017  (the module is not a real model)
        evaluate_cli.main(["--model", str(folder), "--text_file", str(text), "--trust_remote_code", "true"])
    assert marker.exists()


def test_finetuning_scripts_default_to_no_remote_code():
    for model_args in (
        finetune_classification.ClassificationModelArguments,
        finetune_translation.TranslationModelArguments,
    ):
        assert model_args(from_scratch=True).trust_remote_code is False, model_args.__name__


def test_classification_script_runs_no_folder_code_without_the_flag(tmp_path):
    marker = tmp_path / "marker"
    folder = _hostile_folder(tmp_path / "model", marker)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").write_text("sentence\tlabel\na good film\t1\na bad film\t0\n")
    argv = [
        "--data_dir",
        str(data),
        "--model_name_or_path",
        str(folder),
        "--output_dir",
        str(tmp_path / "out"),
    ]
    with pytest.raises((ValueError, OSError)):
        finetune_classification.finetune(*finetune_classification.parse_args(argv))
    assert not marker.exists()


def test_hf_lm_folders_load_with_the_installed_code(tmp_path):
    """A folder of hf_lm's own model type needs no flag; the code shipped in it is not run."""
    from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM
    from training.data.tokenizer import train_tokenizer

    tok = train_tokenizer(["hello world, hello there"] * 20, kind="byte_bpe", vocab_size=270)
    folder = tmp_path / "gpt"
    config = HfLmGPTConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
    HfLmGPTForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    marker = tmp_path / "marker"
    (folder / "hflm_modeling_gpt.py").write_text(EVIL.format(marker=str(marker)))  # a tampered copy
    text = tmp_path / "text.txt"
    text.write_text("hello world " * 20)
    result = evaluate_cli.main(["--model", str(folder), "--text_file", str(text), "--device", "cpu"])
    assert result["n_tokens"] > 0 and not marker.exists()
