"""Masked-LM and denoising pretraining through the one training loop (`--objective mlm|span_corruption|bart_denoising`)."""

import json
import math

import pytest
import torch
from test_train import _argv, _fresh_accelerate_state, _run, _weights  # noqa: F401  (fixture)
from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

from training.args import parse_args
from training.train import train

MLM = {
    "objective": "mlm",
    "tokenizer_kind": "wordpiece",
    "hidden_dropout": 0.1,
    "pseudo_perplexity_blocks": 4,
}


def test_mlm_run_learns_and_saves_a_fill_mask_model(tmp_path):
    out = tmp_path / "mlm"
    metrics = _run(out, max_steps=50, **MLM)
    assert metrics["step"] == 50
    # Tiny masked LMs learn the unigram distribution first and stay on that plateau for hundreds
    # of steps before attention starts to help (transformers' BertForMaskedLM follows the very same
    # trajectory from the same weights); 50 steps prove the loop trains: below the uniform ln(V)
    # loss and well above chance accuracy (1/V). The plateau is ~0.6 below ln(V): 50 steps end
    # 0.39-0.53 below it over seeds 0-5 and other CPU kernels (conftest), 30 steps ended 0.32-0.40,
    # at the bar. Accuracy: 13-26 / V trained (the frequent tokens), 3.6 / V untrained
    vocab = json.loads((out / "final" / "config.json").read_text())["vocab_size"]
    assert metrics["eval_loss"] < math.log(vocab) - 0.3
    assert metrics["eval_mlm_accuracy"] > 8 / vocab
    assert 1 < metrics["eval_pseudo_perplexity"] < vocab
    assert math.isclose(metrics["eval_perplexity"], math.exp(metrics["eval_loss"]))
    final = out / "final"
    config = json.loads((final / "config.json").read_text())
    assert config["model_type"] == "hflm_bert" and config["auto_map"]["AutoModelForMaskedLM"]
    card = (final / "README.md").read_text()
    assert "pipeline_tag: fill-mask" in card and "pseudo-perplexity" in card and "masked LM" in card
    tokenizer = AutoTokenizer.from_pretrained(final, trust_remote_code=True)
    model = AutoModelForMaskedLM.from_pretrained(final, trust_remote_code=True).eval()
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer)
    results = fill(f"the {tokenizer.mask_token} sat on the mat", top_k=3)
    assert len(results) == 3 and all(r["token_str"] for r in results)


def test_mlm_resume_is_exact(tmp_path, monkeypatch):
    """The masks are a pure function of (seed, step, micro-step, rank): a run stopped after a
    checkpoint and resumed draws the same masks and ends with the same weights."""
    full, cut = run_full_and_resumed(tmp_path, monkeypatch, MLM, max_steps=12, save_every=6)
    a, b = _weights(full), _weights(cut)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def run_full_and_resumed(tmp_path, monkeypatch, settings: dict, max_steps: int, save_every: int, **flags):
    """`settings` run uninterrupted into `tmp_path/full`, and into `tmp_path/cut` stopped right after
    its first checkpoint (step `save_every`) then resumed; returns the two run folders."""
    import training.train as train_module

    full, cut = tmp_path / "full", tmp_path / "cut"
    _run(full, max_steps=max_steps, save_every=save_every, **settings, **flags)
    _fresh_reset()
    # the same tokenizer for both runs: tokenizers' WordPiece trainer breaks frequency ties in hash
    # order, so two trainings on the same text may differ (huggingface/tokenizers#1794)
    same = {**settings, **flags, "tokenizer_name_or_path": str(full / "tokenizer")}
    save = train_module.save_checkpoint

    def save_then_stop(*args, **kwargs):
        path = save(*args, **kwargs)
        if kwargs["step"] == save_every:
            raise KeyboardInterrupt  # as if killed right after the checkpoint
        return path

    monkeypatch.setattr(train_module, "save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        _run(cut, max_steps=max_steps, save_every=save_every, **same)
    monkeypatch.undo()
    _fresh_reset()
    _run(cut, max_steps=max_steps, save_every=save_every, resume="true", **same)
    return full, cut


def _fresh_reset():
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def test_mlm_refuses_document_mask(tmp_path):
    with pytest.raises(ValueError, match="document_mask"):
        train(*parse_args(_argv(tmp_path, max_steps=2, document_mask="true", **MLM)))


def test_bad_objective_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="`objective`"):
        parse_args(_argv(tmp_path, objective="gan"))
    with pytest.raises(ValueError, match="`masking`"):
        parse_args(_argv(tmp_path, objective="mlm", masking="sentence"))


@pytest.mark.parametrize("objective", ["span_corruption", "bart_denoising"])
def test_denoising_pretraining_runs_and_saves_a_seq2seq_model(tmp_path, objective):
    out = tmp_path / objective
    metrics = _run(out, max_steps=60, objective=objective, vocab_size=300)
    assert metrics["step"] == 60 and 0 <= metrics["eval_token_accuracy"] <= 1
    vocab = json.loads((out / "final" / "config.json").read_text())["vocab_size"]
    assert metrics["eval_loss"] < math.log(vocab) - 0.3  # learned beyond uniform
    config = json.loads((out / "final" / "config.json").read_text())
    assert config["model_type"] == ("hflm_t5" if objective == "span_corruption" else "hflm_bart")
    assert config["auto_map"]["AutoModelForSeq2SeqLM"]
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(out / "final", trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(out / "final", trust_remote_code=True)
    inputs = tokenizer(["the cat sat on the mat"], return_tensors="pt")
    generated = model.generate(**inputs, max_new_tokens=5, num_beams=2)
    assert generated.shape[0] == 1
    if objective == "span_corruption":
        assert "<extra_id_0>" in tokenizer.get_vocab()


def test_model_flags_the_family_does_not_read_are_named_in_a_warning(tmp_path, caplog):
    """An LSTM run given Transformer variants trains an LSTM: the run says which flags it ignored."""
    from training.args.checks import check_arguments

    argv = _argv(tmp_path, arch="rnn", position_embedding_type="rope", hidden_act="swiglu")
    with caplog.at_level("WARNING", logger="training.args.checks"):
        assert check_arguments(*parse_args(argv)) == "rnn"
    assert "--position_embedding_type rope, --hidden_act swiglu (not read by family 'rnn')" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="training.args.checks"):
        check_arguments(*parse_args(_argv(tmp_path, position_embedding_type="rope")))  # GPT reads it
    assert "Ignored" not in caplog.text
