"""What `save_pretrained` ships for each family: exactly the files the family needs.

Every model class of the registry is saved (one tiny model per class, from `hf_lm.testing`), and the
folder's `.py` files are compared with the family's exact list. The non-Transformer families (RNN,
RNN seq2seq, feed-forward, n-gram) ship no attention code, and a config-only remote load imports no
modeling file. Only the heads hf_lm's own pipelines serve carry a pipeline file: BERT's
question-answering head and the encoder-decoder generation heads.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from hf_lm.testing import FAMILY_CASES

COMMON = {"hflm_common.py", "hflm_inputs.py", "hflm_losses.py", "hflm_pretrained.py"}
TRANSFORMER = COMMON | {
    "hflm_attention.py",
    "hflm_configuration_base.py",
    "hflm_layers.py",
    "hflm_masks.py",
    "hflm_positions.py",
    "hflm_stack.py",
}
# the T5 and BART families: the family classes, the encoder-decoder body and Mask-Predict
SEQ2SEQ = {
    "hflm_configuration_seq2seq.py",
    "hflm_modeling_seq2seq.py",
    "hflm_seq2seq_model.py",
    "hflm_seq2seq_mask_predict.py",
}
SHIPPED = {
    "gpt": TRANSFORMER | {"hflm_configuration_gpt.py", "hflm_modeling_gpt.py"},
    "bert": TRANSFORMER | {"hflm_configuration_bert.py", "hflm_modeling_bert.py"},
    # ELECTRA extends BERT: its files import BERT's
    "electra": TRANSFORMER
    | {
        "hflm_configuration_bert.py",
        "hflm_modeling_bert.py",
        "hflm_configuration_electra.py",
        "hflm_modeling_electra.py",
    },
    "t5": TRANSFORMER | SEQ2SEQ,
    "bart": TRANSFORMER | SEQ2SEQ,
    "rnn": COMMON | {"hflm_rnn_blocks.py", "hflm_configuration_rnn.py", "hflm_modeling_rnn.py"},
    "rnn-seq2seq": COMMON
    | {"hflm_rnn_blocks.py", "hflm_configuration_rnn_seq2seq.py", "hflm_modeling_rnn_seq2seq.py"},
    "ffnn": COMMON | {"hflm_configuration_ffnn.py", "hflm_modeling_ffnn.py"},
    "ngram": COMMON | {"hflm_configuration_ngram.py", "hflm_modeling_ngram.py"},
}
NOT_TRANSFORMERS = ("rnn", "rnn-seq2seq", "ffnn", "ngram")
# the heads whose folders carry one of hf_lm's pipelines (and name it in `config.custom_pipelines`)
PIPELINE_FILES = {
    "bert-qa": "hflm_pipelines.py",
    "t5-seq2seq-lm": "hflm_pipelines_seq2seq.py",
    "t5-moe-seq2seq-lm": "hflm_pipelines_seq2seq.py",
    "bart-seq2seq-lm": "hflm_pipelines_seq2seq.py",
    "rnn-seq2seq-lm": "hflm_pipelines_seq2seq.py",
}


def family(case) -> str:
    """The family of a case: its name up to the head ("rnn-seq2seq-lm" -> "rnn-seq2seq")."""
    return max((f for f in SHIPPED if case.name == f or case.name.startswith(f + "-")), key=len)


@pytest.mark.parametrize("case", FAMILY_CASES, ids=str)
def test_each_class_ships_exactly_its_family_files(tmp_path, case):
    case.make_model(seed=0).save_pretrained(tmp_path)
    shipped = {p.name for p in tmp_path.glob("*.py")}
    pipeline_file = PIPELINE_FILES.get(case.name)
    assert shipped == SHIPPED[family(case)] | ({pipeline_file} if pipeline_file else set())
    custom = json.loads((tmp_path / "config.json").read_text()).get("custom_pipelines") or {}
    assert {info["impl"].split(".")[0] + ".py" for info in custom.values()} == (
        {pipeline_file} if pipeline_file else set()
    )
    if family(case) in NOT_TRANSFORMERS:
        for path in tmp_path.glob("*.py"):
            assert "scaled_dot_product_attention" not in path.read_text(), path.name


CONFIG_ONLY = textwrap.dedent(
    """
    import sys
    sys.modules["hf_lm"] = None  # the shipped files alone
    from transformers import AutoConfig
    for folder in sys.argv[1:]:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
        modeling = sorted(name for name in sys.modules if "hflm_modeling" in name or "hflm_stack" in name
                          or "hflm_rnn_blocks" in name)
        print("LOADED", config.model_type, "MODELING", modeling)
    """
)


def test_config_only_remote_load_imports_no_modeling_code(tmp_path):
    """One fresh interpreter loads each family's config in turn: none imports modeling code, so the
    modules seen after each load are none at all."""
    names = ["gpt-causal-lm", "rnn-causal-lm", "t5-seq2seq-lm", "ngram-causal-lm"]
    types = []
    for name in names:
        model = next(c for c in FAMILY_CASES if c.name == name).make_model(seed=0)
        model.save_pretrained(tmp_path / name)
        types.append(model.config.model_type)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-c", CONFIG_ONLY, *(str(tmp_path / name) for name in names)],
        cwd=tmp_path,  # not the repo: nothing local shadows the shipped files
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-len(names) :] == [f"LOADED {t} MODELING []" for t in types], (
        result.stdout
    )
