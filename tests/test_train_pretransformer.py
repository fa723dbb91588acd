"""The pre-Transformer architectures through the one training loop: `--arch ngram|ffnn|rnn|rnn_seq2seq`,
truncated BPTT with exact resume, and scheduled sampling."""

import functools
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from safetensors.torch import load_file
from test_train import TINY as TRAIN_TINY
from test_train import _argv as train_argv
from test_train import _run as train_run
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

from training.args import parse_args
from training.data.batches import GlobalBatchSampler
from training.objectives import build_model
from training.state.checkpoint import load_checkpoint
from training.state.folders import latest_checkpoint
from training.state.stateful import CheckpointState

# test_train's tiny run with one layer and a CSV log (no attention heads: most of these models have none)
TINY = {**{k: v for k, v in TRAIN_TINY.items() if k != "num_attention_heads"}, "num_hidden_layers": 1}
TINY["report_to"] = ["csv"]
_argv = functools.partial(train_argv, settings=TINY)
_run = functools.partial(train_run, settings=TINY)


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def test_ngram_is_fitted_not_trained_and_beats_unigram(tmp_path):
    """arch=ngram counts the training blocks (no steps) and is evaluated like any causal LM."""
    trigram = _run(tmp_path / "tri", arch="ngram", ngram_order=3)
    unigram = _run(tmp_path / "uni", arch="ngram", ngram_order=1)
    assert trigram["step"] == 0
    assert (
        not (tmp_path / "tri" / "checkpoints").exists()
        or latest_checkpoint(tmp_path / "tri" / "checkpoints") is None
    )
    # the synthetic corpus is a word-level Markov chain: context helps a lot
    assert trigram["eval_loss"] < unigram["eval_loss"] - 0.5
    final = tmp_path / "tri" / "final"
    model = AutoModelForCausalLM.from_pretrained(final, trust_remote_code=True)
    assert model.config.model_type == "hflm_ngram" and model.config.order == 3
    card = (final / "README.md").read_text()  # it listed AdamW, a learning rate and optimizer updates
    assert "no optimizer, no gradient steps" in card and "peak learning rate" not in card
    assert (final / "README.md").is_file()
    rows = (tmp_path / "tri" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 2 and "eval_loss" in rows[0]

    # the same perplexity tool as for every causal LM (a model without learned positions gets the
    # default window); the text is from the training split, so it scores better than held-out text
    from training import evaluate_cli
    from training.data.corpora import load_builtin_corpus

    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(load_builtin_corpus("synthetic")[:10]))
    result = evaluate_cli.main(["--model", str(final), "--text_file", str(text)])
    assert result["max_length"] == 1024 and result["loss"] < trigram["eval_loss"]


@pytest.mark.parametrize(
    "arch,extra",
    [("ffnn", {"ngram_order": 4}), ("rnn", {"cell_type": "gru"}), ("rnn", {"cell_type": "lstm"})],
)
def test_neural_archs_train_and_reload(tmp_path, arch, extra):
    out = tmp_path / arch
    metrics = _run(out, arch=arch, max_steps=20, **extra)
    assert metrics["step"] == 20 and metrics["eval_loss"] < torch.log(torch.tensor(300.0)).item()
    model = AutoModelForCausalLM.from_pretrained(out / "final", trust_remote_code=True)
    assert model.config.model_type == f"hflm_{arch}"
    saved = load_file(out / "final" / "model.safetensors")
    for name, tensor in model.state_dict().items():
        if name in saved:
            assert torch.equal(saved[name], tensor), name


def test_rnn_seq2seq_denoising_run(tmp_path):
    out = tmp_path / "s2s"
    metrics = _run(
        out,
        arch="rnn_seq2seq",
        objective="span_corruption",
        rnn_attention="bahdanau",
        scheduled_sampling="linear",
        scheduled_sampling_c=0.05,
        max_steps=10,
    )
    assert metrics["step"] == 10 and metrics["eval_token_accuracy"] is not None
    model = AutoModelForSeq2SeqLM.from_pretrained(out / "final", trust_remote_code=True)
    assert model.config.model_type == "hflm_rnn_seq2seq" and model.config.attention == "bahdanau"


def test_lane_sampler_continues_each_row():
    """Truncated BPTT order: row j of update u+1 is the block after row j of update u, for every split."""
    num_blocks, per_device, world, accum = 50, 2, 2, 2  # global batch 8, 6 updates per epoch
    rows = {}
    for rank in range(world):
        sampler = iter(GlobalBatchSampler(num_blocks, per_device, world, rank, accum, seed=0, lanes=True))
        for u in range(6):
            for m in range(accum):
                rows[(u, m, rank)] = next(sampler)
    for u in range(5):
        for m in range(accum):
            for rank in range(world):
                assert [i + 1 for i in rows[(u, m, rank)]] == rows[(u + 1, m, rank)]
    first = sorted(i for m in range(accum) for r in range(world) for i in rows[(0, m, r)])
    assert first == [0, 6, 12, 18, 24, 30, 36, 42]  # 8 lanes of 6 consecutive blocks


def test_tbptt_carries_state_and_resumes_exactly(tmp_path):
    """A run interrupted at a checkpoint mid-epoch continues with the saved lane states, bit for bit."""
    common = dict(
        arch="rnn",
        tbptt=True,
        lr_scheduler="constant",
        save_every=4,
        hidden_dropout=0.1,
        gradient_accumulation_steps=2,
        per_device_batch_size=4,
    )
    _run(tmp_path / "a", max_steps=10, **common)
    _run(tmp_path / "b", max_steps=6, **common)
    ckpt = latest_checkpoint(tmp_path / "b" / "checkpoints")
    data_args, model_args, _ = parse_args(_argv(tmp_path / "b", **common))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "b" / "tokenizer")
    state = load_checkpoint(ckpt, CheckpointState(build_model(model_args, data_args, tokenizer), rng=None))
    saved = state["tensors"]
    assert {k.split(".state")[0] for k in saved if ".state" in k} == {
        "tbptt.rank0.micro0",
        "tbptt.rank0.micro1",
    }
    assert all(v.abs().sum() > 0 for k, v in saved.items() if ".state" in k)  # real states, not zeros
    metrics = _run(tmp_path / "b", max_steps=10, resume="true", **common)
    assert metrics["step"] == 10
    a = load_file(Path(tmp_path / "a" / "final" / "model.safetensors"))
    b = load_file(Path(tmp_path / "b" / "final" / "model.safetensors"))
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_tbptt_feeds_each_block_the_previous_state(tmp_path, monkeypatch):
    """Each training forward gets its lane's cache, one block further each update, reset per epoch."""
    from hf_lm.models.hflm_modeling_rnn import HfLmRNNForCausalLM

    seen = []
    forward = HfLmRNNForCausalLM.forward

    def spy(self, *args, **kwargs):
        if self.training:
            cache = kwargs.get("past_key_values")
            seen.append(None if cache is None else cache.get_seq_length())
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(HfLmRNNForCausalLM, "forward", spy)
    metrics = _run(tmp_path / "carry", arch="rnn", tbptt=True, max_steps=6, eval_every=100)
    assert metrics["step"] == 6
    assert seen == [None] + [32 * u for u in range(1, 6)]  # (block 32; an epoch is longer than 6 updates)


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"arch": "rnn_seq2seq"}, "family 'rnn_seq2seq' is not trained with objective 'clm'"),
        ({"arch": "rnn", "objective": "mlm"}, "objective 'mlm' trains the families bert"),
        ({"arch": "ffnn", "objective": "span_corruption"}, "trains the families t5, rnn_seq2seq"),
        ({"arch": "ffnn", "tbptt": True}, "tbptt"),
        ({"arch": "transformer", "scheduled_sampling": "linear"}, "scheduled_sampling"),
        ({"arch": "rnn", "document_mask": True}, "document_mask"),
    ],
)
def test_incompatible_options_fail_early(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        _run(tmp_path / "bad", max_steps=2, **overrides)


def test_ngram_order_is_bounded_for_the_ngram_family_only():
    """The n-gram tables' bound (MAX_ORDER, 5) refused the documented `--arch ffnn --ngram_order 6`."""
    for flags in (["--arch", "ffnn"], ["--family", "ffnn"]):
        assert parse_args([*flags, "--ngram_order", "6"])[1].ngram_order == 6
    for flags in (["--arch", "ngram"], ["--family", "ngram"]):
        with pytest.raises(ValueError, match=r"`ngram_order` must be in 1\.\.5, got 6"):
            parse_args([*flags, "--ngram_order", "6"])
