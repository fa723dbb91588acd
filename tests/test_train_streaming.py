"""Streaming training: bounded memory, the same global batches as the sampler, exact resume."""

import csv
import itertools
import json
import math

import datasets
import numpy as np
import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from datasets import Dataset, IterableDataset
from test_train import _argv, _run, _weights, assert_document_inputs, spy_on_model_inputs

import training.data.prepare as prepare
import training.train as train_module
from training.args import parse_args
from training.data.corpora import SyntheticCorpus
from training.data.loading import load_text_dataset
from training.data.packing import tokenize_and_pack
from training.data.prepare import prepare_data
from training.data.splits import train_eval_split
from training.data.streaming import BlockStream, StreamingGlobalBatches
from training.train import train

# 24 synthetic documents (~9k characters) of a JSON-lines file, streamed: with test_train's tiny
# settings (300-token BPE, blocks of 32) and 16 blocks per update, an epoch is a few updates, so
# short runs cross epoch boundaries
STREAM = {
    "streaming": True,
    "max_documents": 24,
    "eval_fraction": 0.1,
    "per_device_batch_size": 16,
    "shuffle_buffer_size": 32,
    "max_eval_blocks": 24,
}


def _reset_accelerate() -> None:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture(autouse=True)
def _fresh_state(tmp_path, monkeypatch):
    """A private `datasets` cache per test, and clean accelerate singletons after each."""
    cache = tmp_path / "hf_datasets_cache"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    yield
    _reset_accelerate()


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "corpus" / "docs.jsonl"
    path.parent.mkdir()
    docs = SyntheticCorpus(seed=0).generate(3000, seed=7)[:40]
    path.write_text("".join(json.dumps({"text": doc}) + "\n" for doc in docs))
    return str(path)


# ----------------------------------------------------------------------------------------------
# StreamingGlobalBatches, on a stand-in stream of numbered blocks
# ----------------------------------------------------------------------------------------------


class NumberedStream:
    """`num_blocks` blocks whose tokens are their number, in a seeded order per epoch (a BlockStream stand-in)."""

    def __init__(self, num_blocks: int, seed: int = 3) -> None:
        self.num_blocks, self.seed = num_blocks, seed

    def epoch(self, epoch: int):
        order = np.random.default_rng([self.seed, epoch]).permutation(self.num_blocks)
        return ({"input_ids": np.full(4, i, dtype=np.int64)} for i in order)


def _updates(stream, per_device, world, accum, n_updates, position=(0, 0)):
    """Per update, the sorted block numbers of all ranks' micro-batches, and the position after it."""
    iterators = []
    for rank in range(world):
        batches = StreamingGlobalBatches(stream, per_device, world, rank, accum)
        batches.set_position(*position)
        iterators.append((batches, iter(batches)))
    out = []
    for _ in range(n_updates):
        ids = []
        for _ in range(accum):
            for _, it in iterators:
                micro = next(it)["input_ids"]  # (b, T)
                assert micro.shape == (per_device, 4) and micro.dtype == torch.long
                ids += micro[:, 0].tolist()
        out.append((sorted(ids), iterators[0][0].position))
    return out


def test_stream_batches_same_global_batch_for_any_split():
    stream = NumberedStream(50)  # 6 updates of 8 per epoch, 2 blocks of tail
    reference = _updates(stream, 8, 1, 1, 14)
    assert (
        _updates(stream, 4, 2, 1, 14)
        == reference
        == _updates(stream, 2, 2, 2, 14)
        == _updates(stream, 1, 1, 8, 14)
    )
    positions = [position for _, position in reference]
    assert positions[:7] == [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 6), (1, 1)]
    epoch0 = [i for ids, _ in reference[:6] for i in ids]
    assert len(set(epoch0)) == 48  # each block at most once per epoch, the incomplete tail dropped
    assert reference[0][0] != reference[6][0]  # epoch 1 reads another order
    # resuming anywhere (even at an epoch's very end) continues the same sequence
    assert _updates(stream, 8, 1, 1, 3, position=(1, 2)) == reference[8:11]
    assert _updates(stream, 4, 2, 1, 3, position=(0, 6)) == reference[6:9]


def test_stream_batches_errors():
    with pytest.raises(ValueError, match="fewer than one global batch"):
        next(iter(StreamingGlobalBatches(NumberedStream(7), 8, 1, 0, 1)))
    batches = StreamingGlobalBatches(NumberedStream(50), 8, 1, 0, 1)
    batches.set_position(0, 9)  # a checkpoint of a longer stream
    with pytest.raises(ValueError, match="the data or the shuffle buffer changed"):
        next(iter(batches))


# ----------------------------------------------------------------------------------------------
# prepare_data when streaming
# ----------------------------------------------------------------------------------------------


def test_streamed_blocks_are_the_packed_training_split(jsonl, tmp_path):
    """The stream yields the training split's packed blocks: in stream order without a buffer, and as
    the same multiset in a seeded, per-epoch order with one. (The in-memory path holds out other
    documents, an exact share chosen by `train_test_split`, so its blocks differ; packing the same
    documents gives the same blocks, as test_data checks.)"""
    data_args, _, train_args = parse_args(
        _argv(tmp_path / "run", dataset=jsonl, **{**STREAM, "shuffle_buffer_size": 0, "max_eval_blocks": 5})
    )
    tokenizer, stream, eval_blocks, description = prepare_data(data_args, train_args, Accelerator(cpu=True))
    assert isinstance(stream, BlockStream) and "streamed" in description
    assert eval_blocks["input_ids"].shape == (5, 32)  # the first max_eval_blocks held-out blocks

    splits = train_eval_split(load_text_dataset(jsonl, streaming=True).take(24), 0.1, seed=0)
    train_docs = [row["text"] for row in splits["train"]]
    in_memory = tokenize_and_pack(Dataset.from_dict({"text": train_docs}), tokenizer, 32)["input_ids"]
    assert [b["input_ids"].tolist() for b in stream.epoch(0)] == in_memory
    eval_docs = [row["text"] for row in splits["eval"]]
    eval_in_memory = tokenize_and_pack(Dataset.from_dict({"text": eval_docs}), tokenizer, 32)["input_ids"]
    assert eval_blocks["input_ids"].tolist() == eval_in_memory[:5]

    stream.shuffle_buffer_size = 16
    epoch0, epoch1 = ([b["input_ids"].tolist() for b in stream.epoch(e)] for e in (0, 1))
    assert epoch0 != in_memory and epoch1 != epoch0
    assert sorted(epoch0) == sorted(epoch1) == sorted(in_memory)
    assert [b["input_ids"].tolist() for b in stream.epoch(1)] == epoch1  # re-opened: the same order


def test_streaming_reads_a_bounded_prefix_of_an_endless_corpus(tmp_path, monkeypatch):
    """An infinite stream trains: the tokenizer sees `tokenizer_train_documents` documents, the eval
    split is cut at `max_eval_blocks`, and training reads only the blocks it uses."""
    docs = SyntheticCorpus(seed=0).generate(5000, seed=1)
    read = {"documents": 0}

    def endless():
        for i in itertools.count():
            read["documents"] += 1
            yield {"text": docs[i % len(docs)]}

    monkeypatch.setattr(prepare, "load_text_dataset", lambda *a, **k: IterableDataset.from_generator(endless))
    trained_on = []
    real_train_tokenizer = prepare.train_tokenizer

    def counting_train_tokenizer(texts, **kwargs):
        texts = list(texts)
        trained_on.append(len(texts))
        return real_train_tokenizer(texts, **kwargs)

    monkeypatch.setattr(prepare, "train_tokenizer", counting_train_tokenizer)
    data_args, model_args, train_args = parse_args(
        _argv(
            tmp_path / "endless",
            dataset="endless",
            streaming=True,
            tokenizer_train_documents=30,
            eval_fraction=0.5,
            max_eval_blocks=8,
            shuffle_buffer_size=16,
            max_steps=3,
            eval_every=3,
            save_every=3,
            report_to=["none"],
        )
    )
    data_args.max_documents = None  # the whole (endless) stream
    metrics = train(data_args, model_args, train_args)
    assert trained_on == [30]
    assert metrics["step"] == 3 and math.isfinite(metrics["eval_loss"])
    # the tokenizing map reads documents in batches of 1000 (per split: half of them held out
    # here), so each of the three passes (tokenizer, eval, train) reads a few thousand documents
    assert 0 < read["documents"] < 10_000, read


# ----------------------------------------------------------------------------------------------
# Streaming runs
# ----------------------------------------------------------------------------------------------


def test_streaming_document_mask_run_feeds_the_document_ids_to_the_model(jsonl, tmp_path, monkeypatch):
    calls = spy_on_model_inputs(monkeypatch)
    _run(
        tmp_path / "run", dataset=jsonl, max_steps=2, eval_every=2, save_every=2, document_mask=True, **STREAM
    )
    assert_document_inputs(calls)


def test_streaming_run_trains_and_reports_bits(jsonl, tmp_path):
    out = tmp_path / "run"
    metrics = _run(out, dataset=jsonl, max_steps=24, eval_every=12, save_every=12, **STREAM)
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    losses = [float(r["loss"]) for r in rows if r["loss"]]
    assert losses[-1] < losses[0] - 0.5
    assert [int(r["epoch"]) for r in rows][-1] >= 2  # crossed epochs (~10 updates each)
    assert metrics["eval_bits_per_token"] == pytest.approx(metrics["eval_loss"] / math.log(2))
    # byte-level BPE of 300 tokens: a few characters per token, several tokens per word
    assert metrics["eval_bits_per_character"] < metrics["eval_bits_per_token"] < metrics["eval_bits_per_word"]
    assert float(rows[-1]["eval_bits_per_character"]) == pytest.approx(metrics["eval_bits_per_character"])
    state = json.loads((out / "checkpoints" / "checkpoint-00000024" / "state.json").read_text())["data_state"]
    assert state["streaming"] is True and state["blocks_in_epoch"] == 16 * state["batch_in_epoch"]
    assert "streamed" in (out / "final" / "README.md").read_text()


def test_streaming_gradient_accumulation_matches_big_batch(jsonl, tmp_path):
    _run(tmp_path / "big", dataset=jsonl, max_steps=4, report_to=["none"], **STREAM)
    _reset_accelerate()
    small = {**STREAM, "per_device_batch_size": 8}
    _run(
        tmp_path / "acc",
        dataset=jsonl,
        max_steps=4,
        report_to=["none"],
        gradient_accumulation_steps=2,
        **small,
    )
    a, b = _weights(tmp_path / "big"), _weights(tmp_path / "acc")
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=0, msg=name)


class _Crash(RuntimeError):
    pass


def test_streaming_resume_is_exact(jsonl, tmp_path, monkeypatch):
    """A streaming run stopped after checkpoint 16 (in epoch 1) and resumed ends bit for bit where an
    uninterrupted one does: the stream is re-opened and skipped, dropout continues from its saved state."""
    run = {**STREAM, "max_steps": 24, "save_every": 4, "eval_every": 8, "hidden_dropout": 0.1}
    run["attention_dropout"] = 0.1
    _run(tmp_path / "a", dataset=jsonl, report_to=["none"], **run)
    _reset_accelerate()

    save = train_module.save_checkpoint

    def save_then_crash(*args, **kwargs):
        path = save(*args, **kwargs)
        if kwargs["step"] == 16:
            raise _Crash("stopped after checkpoint 16")
        return path

    monkeypatch.setattr(train_module, "save_checkpoint", save_then_crash)
    out = tmp_path / "b"
    with pytest.raises(_Crash):
        _run(out, dataset=jsonl, report_to=["csv"], **run)
    monkeypatch.undo()
    _reset_accelerate()
    state = json.loads((out / "checkpoints" / "checkpoint-00000016" / "state.json").read_text())["data_state"]
    assert state["epoch"] >= 1 and state["batch_in_epoch"] > 0  # stopped inside a later epoch

    metrics = _run(out, dataset=jsonl, report_to=["csv"], resume="true", **run)
    assert metrics["step"] == 24
    a, b = _weights(tmp_path / "a"), _weights(out)
    for name in a:
        assert torch.equal(a[name], b[name]), name

    # a streaming checkpoint cannot be resumed by the in-memory sampler, nor with another buffer
    _reset_accelerate()
    with pytest.raises(ValueError, match="streaming: True -> False"):
        _run(out, dataset=jsonl, report_to=["none"], resume="true", **{**run, "streaming": False})
    _reset_accelerate()
    with pytest.raises(ValueError, match="shuffle_buffer_size: 32 -> 8"):
        _run(out, dataset=jsonl, report_to=["none"], resume="true", **{**run, "shuffle_buffer_size": 8})
