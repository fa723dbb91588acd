"""The tools around the models under a hostile or careless user (issue 33): the perplexity CLI on a
long file or a broken model, the push check on broken folders, the classification script on bad
labels and cells, fill-mask and QA on bad arguments and text, and generation requests that cannot
fit (beams, lengths) in hf_lm's pipelines and scripts.

Every model is tiny and random, every file small; the memory bound of generation is a fixed
budget set by the tests (`budget`), so that what is refused does not depend on the machine.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import torch
from conftest import tiny_gpt_config
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import AutoTokenizer, GenerationConfig, HfArgumentParser, PreTrainedTokenizerFast, pipeline

import hf_lm.models.hflm_pipelines_seq2seq as seq2seq_pipelines
from hf_lm import HfLmGPTForCausalLM
from hf_lm.families import FAMILIES
from hf_lm.metrics.sliding_window import sliding_window_perplexity
from hf_lm.pipelines_seq2seq import TRANSLATION_TASK
from hf_lm.testing import FAMILY_CASES
from training import evaluate_cli, push
from training.data.tokenizer import train_tokenizer
from training.finetune_classification import (
    ClassificationDataArguments,
    label_mapping,
    load_classification_dataset,
)

GIB = 2**30


@pytest.fixture
def budget(monkeypatch):
    """Every device has 16 GiB: a request refused for memory is refused on any machine."""
    monkeypatch.setattr(seq2seq_pipelines, "device_memory_bytes", lambda device: 16 * GIB, raising=False)


def hostile_text(n_words: int, seed: int = 0) -> str:
    """Words and separators a tokenizer may treat differently at a cut: spaces before newlines,
    blank lines, tabs, CRLF, an ideographic space, accents, CJK and emoji (multi-byte UTF-8)."""
    rng = random.Random(seed)
    words = ["the", "queen", "sat", "naïve", "café", "日本語", "😀", "don't", "x1", "--", "a"]
    seps = [" ", "  ", "\n", "\n\n", " \n", "\t", "\r\n", " \n\n ", "\u3000", "\n   "]
    return "  " + "".join(rng.choice(words) + rng.choice(seps) for _ in range(n_words)) + "   "


# ---------------------------------------------------------------------------------------------
# evaluate_cli: streamed, exact, and refusing broken models
# ---------------------------------------------------------------------------------------------


def _save_lm(path: Path, tokenizer, **config) -> Path:
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(
        tiny_gpt_config(
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **config,
        )
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def byte_bpe():
    text = hostile_text(2000, seed=1)
    return train_tokenizer(
        [text[i : i + 300] for i in range(0, len(text), 300)], vocab_size=400, min_frequency=1
    )


@pytest.fixture(scope="module")
def lm_folder(tmp_path_factory, byte_bpe) -> Path:
    return _save_lm(tmp_path_factory.mktemp("lm"), byte_bpe)


def test_evaluate_cli_streams_the_file_with_the_whole_text_result(lm_folder, byte_bpe, tmp_path, monkeypatch):
    """No tokenizer call sees more than a chunk of the file (a whole 10 MB file cost 2.7 GB), and
    the result is exactly the one of the whole text tokenized in one call: the cuts change no token
    and the windows run across them."""
    monkeypatch.setattr(evaluate_cli, "READ_BYTES", 700)  # multi-byte characters cut between reads
    monkeypatch.setattr(evaluate_cli, "CHUNK_CHARS", 1500)
    monkeypatch.setattr(evaluate_cli, "TAIL_CHARS", 100)
    text = hostile_text(2500)
    text_file = tmp_path / "eval.txt"
    text_file.write_bytes(text.encode("utf-8"))  # CRLF kept as it is
    ids = byte_bpe(text, add_special_tokens=False)["input_ids"]
    model = HfLmGPTForCausalLM.from_pretrained(lm_folder)
    expected = sliding_window_perplexity(model, torch.tensor(ids), max_length=64, stride=24, batch_size=3)

    longest = []
    tokenizer_class = type(AutoTokenizer.from_pretrained(lm_folder))
    original = tokenizer_class.__call__

    def recording(self, text=None, *args, **kwargs):
        longest.append(len(text) if isinstance(text, str) else 0)
        return original(self, text, *args, **kwargs)

    monkeypatch.setattr(tokenizer_class, "__call__", recording)
    result = evaluate_cli.main(
        ["--model", str(lm_folder), "--text_file", str(text_file), "--max_length", "64", "--stride", "24"]
        + ["--batch_size", "3"]
    )
    assert len(text) > 8 * 1500 and max(longest) <= 1500
    for key in ("nll_sum", "n_tokens", "n_windows", "perplexity", "num_input_tokens"):
        assert result[key] == expected[key], key
    assert result["num_input_tokens"] == len(ids)
    assert (result["num_characters"], result["num_words"]) == (len(text), len(text.split()))


def test_sliding_window_reads_a_stream_as_the_windows_reach_it():
    """Pieces of a token stream are read as the windows need them: the first forward pass runs
    after one batch of windows' tokens, not the whole stream, with the whole stream's result."""
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(tiny_gpt_config(max_position_embeddings=32)).eval()
    ids = torch.randint(3, 97, (3000,))
    read, at_forward = [0], []

    def pieces():
        for start in range(0, len(ids), 50):
            read.append(read[-1] + 50)
            yield ids[start : start + 50].tolist()

    class Recording(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            at_forward.append(read[-1])
            return self.model(input_ids=input_ids)

    streamed = sliding_window_perplexity(Recording(), pieces(), max_length=32, stride=16, batch_size=4)
    whole = sliding_window_perplexity(model, ids, max_length=32, stride=16, batch_size=4)
    assert at_forward[0] <= 3 * 16 + 32 + 1 + 50  # (batch - 1) * stride + max_length, one look-ahead, a piece
    assert streamed["nll_sum"] == whole["nll_sum"] and streamed["n_tokens"] == whole["n_tokens"] == 2999


@pytest.mark.parametrize(
    "value, dtype, match",
    [
        (float("nan"), "float32", r"holds NaN or infinite values in float32"),
        (1e6, "float16", r"holds NaN or infinite values in float16 .*--dtype float32"),
        (1e37, "float32", r"non-finite log-likelihood"),  # finite weights whose logits overflow
    ],
)
def test_evaluate_cli_refuses_non_finite_weights_and_scores(byte_bpe, tmp_path, value, dtype, match):
    """A NaN model scored perplexity NaN with exit status 0: now an error, and nothing printed."""
    folder = _save_lm(tmp_path / "lm", byte_bpe)
    model = HfLmGPTForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        # one bad weight, or all of them so large that the logits overflow
        target = model.lm_head.weight if value == 1e37 else model.lm_head.weight[0, :1]
        target.fill_(value)
    model.save_pretrained(folder)
    text_file = tmp_path / "eval.txt"
    text_file.write_text("the queen sat on a café chair\n" * 3, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        evaluate_cli.main(["--model", str(folder), "--text_file", str(text_file), "--dtype", dtype])


def test_evaluate_cli_refuses_windows_beyond_memory(byte_bpe, tmp_path, monkeypatch):
    """Without a position table any `--max_length` is allowed; a batch whose logits cannot fit (here
    a 1 MiB device: one window of the whole file) is refused before it runs."""
    monkeypatch.setattr(evaluate_cli, "device_memory_bytes", lambda device: 2**20)
    folder = _save_lm(tmp_path / "lm", byte_bpe, position_embedding_type="rope")
    text_file = tmp_path / "eval.txt"
    text_file.write_text("the queen sat " * 200, encoding="utf-8")
    flags = ["--model", str(folder), "--text_file", str(text_file)]
    with pytest.raises(
        ValueError,
        match=r"A batch of 1 window\(s\) of \d+ tokens needs .*`max_length` \(got 1 and 1000000000\)",
    ):
        evaluate_cli.main(flags + ["--max_length", str(10**9)])
    assert evaluate_cli.main(flags + ["--max_length", "64", "--batch_size", "2"])["n_tokens"] > 0


@pytest.mark.parametrize("gpus, device", [(0, "cuda"), (0, "cuda:0"), (1, "cuda:1")])
def test_evaluate_cli_refuses_a_gpu_the_machine_lacks_by_name(monkeypatch, gpus, device):
    """`--device cuda` on a machine without one loaded the model, then failed with torch's "Torch not
    compiled with CUDA enabled" (or "invalid device ordinal" for `cuda:1` on one GPU), naming no flag."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(
        ValueError, match=rf"`device` '{device}' names a CUDA GPU, and this machine has {gpus}"
    ):
        evaluate_cli.EvalArguments(model="m", text_file="t", device=device)
    assert evaluate_cli.EvalArguments(model="m", text_file="t", device="cpu").device == "cpu"


def test_evaluate_cli_names_a_run_folder_given_for_its_model(lm_folder, tmp_path):
    """`--model out/run` (the run, not its final/) failed in transformers with "You need to have
    sentencepiece or tiktoken installed to convert a slow tokenizer to a fast one"."""
    run = tmp_path / "run"
    shutil.copytree(lm_folder, run / "final")
    (run / "tokenizer").mkdir()
    with pytest.raises(
        ValueError,
        match=r"--model .* is a folder without a config.json, not a saved model; the run's model is .*final",
    ):
        evaluate_cli.EvalArguments(model=str(run), text_file="t")
    assert evaluate_cli.EvalArguments(model=str(run / "final"), text_file="t").model.endswith("final")


# ---------------------------------------------------------------------------------------------
# push: what is uploaded is read and checked
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hub_folder(tmp_path_factory, byte_bpe) -> Path:
    folder = _save_lm(tmp_path_factory.mktemp("hub") / "final", byte_bpe)
    (folder / "README.md").write_text("# tiny\n", encoding="utf-8")
    assert push.check_folder(folder)  # Hub-ready as saved
    return folder


@pytest.fixture
def folder(hub_folder, tmp_path) -> Path:
    return Path(shutil.copytree(hub_folder, tmp_path / "final"))


def _damage(folder: Path, how: str) -> None:
    config = folder / "config.json"
    if how == "empty weights":
        (folder / "model.safetensors").write_bytes(b"")
    elif how == "empty tokenizer":
        (folder / "tokenizer.json").write_bytes(b"")
    elif how == "truncated weights":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[:-100])
    elif how == "not a tokenizer":
        (folder / "tokenizer.json").write_text('{"version": "1.0"}', encoding="utf-8")
    elif how == "config not JSON":
        config.write_text('{"model_type": "hflm_gpt",', encoding="utf-8")
    elif how == "config a list":
        config.write_text("[1, 2]", encoding="utf-8")
    elif how == "config latin-1":
        config.write_bytes('{"model_type": "caf\u00e9"}'.encode("latin-1"))
    elif how == "config without model_type":
        value = json.loads(config.read_text(encoding="utf-8"))
        del value["model_type"]
        config.write_text(json.dumps(value), encoding="utf-8")
    elif how == "code not Python":
        (folder / "hflm_modeling_gpt.py").write_text("def broken(:\n", encoding="utf-8")


@pytest.mark.parametrize(
    "how, match",
    [
        ("empty weights", r"model\.safetensors is empty \(0 bytes\)"),
        ("empty tokenizer", r"tokenizer\.json is empty \(0 bytes\)"),
        ("truncated weights", r"model\.safetensors is not a valid safetensors file"),
        ("not a tokenizer", r"tokenizer\.json does not load with the tokenizers library"),
        ("config not JSON", r"config\.json, line 1 column \d+: not valid JSON"),
        ("config a list", r"config\.json must hold a JSON object"),
        ("config latin-1", r"config\.json, line 1 \(byte \d+\): not UTF-8"),
        ("config without model_type", r"config\.json has no model_type"),
        ("code not Python", r"hflm_modeling_gpt\.py, line 1: not valid Python"),
    ],
)
def test_push_dry_run_refuses_broken_files_by_name(folder, capsys, how, match):
    """The dry run called a 0-byte model.safetensors Hub-ready, and a malformed config.json gave a
    raw JSONDecodeError/AttributeError/UnicodeDecodeError: now exit status 1 and the file named."""
    _damage(folder, how)
    with pytest.raises(push.NotHubReadyError, match=match):
        push.check_folder(folder)
    assert push.main(["--folder", str(folder), "--repo_id", "someone/tiny", "--dry-run"]) == 1
    captured = capsys.readouterr()
    assert "not Hub-ready" in captured.err and "Would upload" not in captured.out


@pytest.mark.parametrize("repo_id", ["my model", "someone/tiny/v2", "someone/tiny.git", "someone/-tiny"])
def test_push_dry_run_refuses_a_repo_id_the_hub_would(hub_folder, capsys, repo_id):
    """The dry run said "Would upload 8 files to my model" and exited 0; the upload was then refused."""
    with pytest.raises(SystemExit) as stop:
        push.main(["--folder", str(hub_folder), "--repo_id", repo_id, "--dry-run"])
    captured = capsys.readouterr()
    assert stop.value.code == 2 and f"error: --repo_id {repo_id!r}" in captured.err
    assert "Would upload" not in captured.out
    assert push.main(["--folder", str(hub_folder), "--repo_id", "tiny_model.v1", "--dry-run"]) == 0


def test_push_checks_every_shard_of_an_index(folder):
    """An index whose second shard is missing passed; so would shards that disagree with it."""
    model = HfLmGPTForCausalLM.from_pretrained(folder)
    (folder / "model.safetensors").unlink()
    model.save_pretrained(folder, max_shard_size="40KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3
    assert push.check_folder(folder)  # a sharded folder as saved is Hub-ready

    saved = {name: (folder / name).read_bytes() for name in shards}
    (folder / shards[1]).unlink()
    with pytest.raises(push.NotHubReadyError, match=rf"{shards[1]} \(a shard named by .*\) is missing"):
        push.check_folder(folder)
    (folder / shards[1]).write_bytes(saved[shards[2]])  # the wrong shard under that name
    with pytest.raises(push.NotHubReadyError) as info:
        push.check_folder(folder)
    assert f"{shards[1]} lacks" in str(info.value) and f"{shards[1]} holds" in str(info.value)
    (folder / shards[1]).write_bytes(saved[shards[1]])
    (folder / "model-00009-of-00009.safetensors").write_bytes(saved[shards[0]])
    with pytest.raises(
        push.NotHubReadyError, match=r"model-00009-of-00009\.safetensors is a shard .* does not name"
    ):
        push.check_folder(folder)


# ---------------------------------------------------------------------------------------------
# finetune_classification: labels and cells
# ---------------------------------------------------------------------------------------------


def _tsv(path: Path, rows) -> str:
    path.write_text(
        "sentence\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in rows), encoding="utf-8"
    )
    return str(path)


def _splits(tmp_path, train, dev=None, test=None) -> tuple[datasets.DatasetDict, dict[str, str]]:
    files = {"train": _tsv(tmp_path / "train.tsv", train)}
    if dev is not None:
        files["validation"] = _tsv(tmp_path / "dev.tsv", dev)
    if test is not None:
        files["test"] = _tsv(tmp_path / "test.tsv", test)
    args = ClassificationDataArguments(data_dir=str(tmp_path))
    return load_classification_dataset(args), files


def test_validation_labels_of_another_kind_are_refused_by_name(tmp_path):
    """String training labels against integer validation labels gave a raw TypeError."""
    raw, files = _splits(tmp_path, [("good", "pos"), ("bad", "neg")], dev=[("fine", 1), ("awful", 0)])
    with pytest.raises(
        ValueError, match=r"dev\.tsv \(validation split\): label\(s\) \[0, 1\] \(integers\) never occur"
    ):
        label_mapping(raw, "label", sources=files)


def test_labels_from_one_are_numbered_and_unseen_validation_labels_refused(tmp_path):
    """Ratings 1-5 against 0/1 validation labels silently trained 6 classes."""
    train = [(f"review {i}", 1 + i % 5) for i in range(10)]
    raw, files = _splits(tmp_path, train, dev=[("ok", 1), ("meh", 0)])
    with pytest.raises(
        ValueError,
        match=r"label\(s\) \[0\] \(integers\) never occur in the training labels \[1, 2, 3, 4, 5\]",
    ):
        label_mapping(raw, "label", sources=files)
    raw, files = _splits(tmp_path, train, dev=[("ok", 1), ("great", 5)])
    value_to_id, id2label = label_mapping(raw, "label", sources=files)
    assert value_to_id == {1: 0, 2: 1, 3: 2, 4: 3, 5: 4}  # five classes, named by their labels
    assert id2label == {0: "1", 1: "2", 2: "3", 3: "4", 4: "5"}


def test_unlabelled_examples_are_refused_in_training_and_a_test_split_of_them_is_unlabelled(tmp_path):
    """Label -1 silently became a class; -1/-100 mark unlabelled examples (GLUE's test sets)."""
    from training.finetune_classification import is_unlabelled

    raw, files = _splits(tmp_path, [("good", 1), ("bad", 0), ("what", -1)])
    with pytest.raises(
        ValueError, match=r"train\.tsv \(train split\): 1 label\(s\) below 0, the first at .*line 4 \(-1\)"
    ):
        label_mapping(raw, "label", sources=files)
    raw, files = _splits(tmp_path, [("good", 1), ("bad", 0)], test=[("a", -1), ("b", -1)])
    assert is_unlabelled(raw["test"], "label") and not is_unlabelled(raw["train"], "label")
    assert label_mapping(raw, "label", sources=files)[0] == {0: 0, 1: 1}
    raw, files = _splits(tmp_path, [("good", 1), ("bad", 0)], test=[("a", -1), ("b", 1)])
    with pytest.raises(ValueError, match=r"test\.tsv \(test split\): 1 label\(s\) below 0"):
        label_mapping(raw, "label", sources=files)


def test_a_run_records_its_label_list_and_does_not_score_an_unlabelled_test_split(tmp_path):
    """Ratings 1-5 train five classes, recorded in the saved config; a test split labelled -1
    throughout (GLUE's) is not scored (its -1 targets would be a class, or a loss error)."""
    from transformers import AutoConfig

    from training.finetune_classification import finetune, parse_args

    words = ["good", "bad", "fine", "awful", "great"]
    _tsv(tmp_path / "train.tsv", [(f"{words[i % 5]} film {i}", 1 + i % 5) for i in range(20)])
    _tsv(tmp_path / "dev.tsv", [(f"{words[i % 5]} one", 1 + i % 5) for i in range(5)])
    _tsv(tmp_path / "test.tsv", [("a film", -1), ("another", -1)])
    metrics = finetune(
        *parse_args(
            ["--data_dir", str(tmp_path), "--from_scratch", "--vocab_size", "60", "--hidden_size", "16"]
            + ["--num_hidden_layers", "1", "--num_attention_heads", "2", "--max_seq_length", "16"]
            + ["--max_steps", "1", "--eval_strategy", "no", "--save_strategy", "no", "--disable_tqdm", "true"]
            + ["--output_dir", str(tmp_path / "out")]
        )
    )
    assert "eval_accuracy" in metrics and not any(key.startswith("test_") for key in metrics)
    config = AutoConfig.from_pretrained(tmp_path / "out" / "final")
    assert config.id2label == {0: "1", 1: "2", 2: "3", 3: "4", 4: "5"}
    assert config.label2id == {"1": 0, "2": 1, "3": 2, "4": 3, "5": 4}


def test_empty_text_and_label_cells_are_refused_with_file_line_and_column(tmp_path):
    """An empty text cell gave the tokenizer's error, naming no file or line."""
    _tsv(tmp_path / "train.tsv", [("good", 1), ("", 0), ("bad", 0), ("ok", "")])
    with pytest.raises(ValueError) as info:
        load_classification_dataset(ClassificationDataArguments(data_dir=str(tmp_path)))
    message = str(info.value)
    assert "train.tsv, line 3, column 'sentence': empty text" in message
    assert "train.tsv, line 5, column 'label': no label" in message


# ---------------------------------------------------------------------------------------------
# fill-mask and question answering
# ---------------------------------------------------------------------------------------------


def _tiny(name: str):
    """The tiny random model of hf_lm.testing's case `name` (vocabulary 64, pad 0, bos 1, eos 2)."""
    (case,) = [case for case in FAMILY_CASES if case.name == name]
    return case.make_model(seed=0)


@pytest.fixture(scope="module")
def bert_tokenizer():
    texts = ["the cat sat on the mat", "where is the cat", "a dog ran in the park"] * 5
    return train_tokenizer(
        texts,
        kind="wordpiece",
        vocab_size=60,
        special_tokens=FAMILIES["bert"].special_tokens,
        padding_side="right",
        min_frequency=1,
    )


def test_fill_mask_top_k_beyond_the_vocabulary_gives_the_vocabulary(bert_tokenizer):
    """`top_k` above the vocabulary raised torch's "selected index k out of range"."""
    fill = pipeline("fill-mask", model=_tiny("bert-mlm"), tokenizer=bert_tokenizer)
    text = f"the cat {bert_tokenizer.mask_token} on the mat"
    everything = fill(text, top_k=10**6)
    assert len(everything) == 64 and len({r["token"] for r in everything}) == 64  # the model's vocabulary
    assert [r["token"] for r in everything[:3]] == [r["token"] for r in fill(text, top_k=3)]
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match=rf"`top_k` must be a positive integer, got {bad}"):
            fill(text, top_k=bad)
    with pytest.raises(ValueError, match=r"'\\ud800' at character 4, a lone surrogate"):
        fill(f"the \ud800 {bert_tokenizer.mask_token}")


@pytest.mark.parametrize("key", ["question", "context"])
def test_question_answering_names_a_lone_surrogate(bert_tokenizer, key):
    qa = pipeline(
        "hflm-question-answering",
        model=_tiny("bert-qa"),
        tokenizer=bert_tokenizer,
    )
    inputs = {"question": "where is the cat", "context": "the cat sat on the mat"}
    assert qa(**inputs)["answer"]
    inputs[key] = inputs[key][:4] + "\ud800" + inputs[key][4:]
    with pytest.raises(ValueError, match=rf"`{key}` holds '\\ud800' at character 4, a lone surrogate"):
        qa(**inputs)


# ---------------------------------------------------------------------------------------------
# generation requests that cannot fit
# ---------------------------------------------------------------------------------------------

WORDS = "the a cat dog sat ran on in mat park red ball house is small big hello world good night".split()


def word_tokenizer() -> PreTrainedTokenizerFast:
    """Words with hf_lm.testing's special ids (pad 0, bos 1, eos 2), appending </s>."""
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{word: i + 4 for i, word in enumerate(WORDS)}}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.mark.parametrize(
    "family, kwargs, match",
    [
        (
            "t5-seq2seq-lm",
            dict(num_beams=10**6),
            r"num_beams=1000000.* need at least [\d,.]+ GiB .*more than the 16\.0 GiB",
        ),
        ("t5-seq2seq-lm", dict(max_new_tokens=10**9), r"max_new_tokens=1000000000\) need at least"),
        ("t5-seq2seq-lm", dict(do_sample=True, num_return_sequences=10**6), r"num_return_sequences=1000000"),
        ("bart-seq2seq-lm", dict(max_new_tokens=10**9), r"learned positions allow 32 .*max_new_tokens=31"),
        ("bart-seq2seq-lm", dict(max_length=33), r"max_length=33 makes sequences of 33 tokens"),
    ],
)
def test_translation_pipeline_refuses_what_cannot_fit(budget, family, kwargs, match):
    """`num_beams=10**6` took 9.3 GB in 60 s; `max_new_tokens=10**9` ran into the positions."""
    translator = pipeline(TRANSLATION_TASK, model=_tiny(family), tokenizer=word_tokenizer())
    with pytest.raises(ValueError, match=rf"The {TRANSLATION_TASK} pipeline: .*{match}"):
        translator("the cat sat on the mat", **kwargs)


@pytest.mark.parametrize("family", ["t5-seq2seq-lm", "bart-seq2seq-lm", "rnn-seq2seq-lm"])
def test_realistic_requests_pass(budget, family):
    """A few beams, lengths within the positions, the pipeline's default length (256, beyond a
    32-position BART: capped to its positions rather than refused)."""
    translator = pipeline(TRANSLATION_TASK, model=_tiny(family), tokenizer=word_tokenizer())
    texts = ["the cat sat on the mat", "hello world"]
    assert len(translator(texts, num_beams=8, num_return_sequences=8, max_new_tokens=31, batch_size=2)) == 2
    assert len(translator(texts, num_beams=4, batch_size=2)) == 2
    with pytest.raises(ValueError, match=r"The input holds '\\ud800' at character 3"):
        translator("the\ud800 cat")


def test_a_folders_generation_config_is_bounded_too(budget, tmp_path):
    model = _tiny("t5-seq2seq-lm")
    model.generation_config = GenerationConfig(
        num_beams=10**6, max_new_tokens=64, pad_token_id=0, eos_token_id=2, decoder_start_token_id=0
    )
    model.save_pretrained(tmp_path)
    word_tokenizer().save_pretrained(tmp_path)
    translator = pipeline(TRANSLATION_TASK, model=str(tmp_path))
    with pytest.raises(ValueError, match=r"num_beams=1000000"):
        translator("the cat sat")
    assert translator("the cat sat", num_beams=2)[0]["translation_text"] is not None


def test_finetune_translation_refuses_evaluation_decoding_that_cannot_fit(budget):
    from training.finetune_translation import TranslationTrainingArguments, _check_generation

    model = _tiny("t5-seq2seq-lm")
    data_args = SimpleNamespace(max_source_length=128)

    def args(**kwargs):
        return TranslationTrainingArguments(output_dir="unused", generation_max_length=128, **kwargs)

    _check_generation(data_args, args(generation_num_beams=5), model, "autoregressive")  # the defaults pass
    with pytest.raises(
        ValueError,
        match=r"--generation_num_beams, --generation_max_length, --per_device_eval_batch_size\): .*num_beams=1000000",
    ):
        _check_generation(data_args, args(generation_num_beams=10**6), model, "autoregressive")
    with pytest.raises(ValueError, match=r"--mask_predict_length_beam"):
        _check_generation(data_args, args(mask_predict_length_beam=10**6), model, "mask_predict")
    with pytest.raises(ValueError, match=r"max_length=1000000000"):
        big = args()
        big.generation_max_length = 10**9  # a T5 has no position table: resolve_max_length lets it through
        _check_generation(data_args, big, model, "autoregressive")


def test_demo_refuses_samples_that_cannot_fit_before_training(tmp_path, budget):
    from training import demo

    out = tmp_path / "demo"
    with pytest.raises(ValueError, match=r"--max_new_tokens.*learned positions allow 64 .*max_new_tokens=63"):
        demo.run_demo(["--output_dir", str(out), "--max_new_tokens", str(10**9)])
    with pytest.raises(ValueError, match=r"num_return_sequences=1000000\) .*GiB"):
        demo.run_demo(["--output_dir", str(out), "--num_samples", str(10**6)])
    # the evaluation's stride, used after two minutes of training: 0 became the default silently, and
    # one past the block failed in the evaluation
    for stride in ("0", "65"):
        with pytest.raises(ValueError, match=r"`stride` must be in \[1, block_size=64\], got " + stride):
            demo.run_demo(["--output_dir", str(out), "--stride", stride])
    assert not out.exists()  # refused before any training


def test_demo_and_evaluate_cli_take_none_for_their_unset_numbers(monkeypatch, budget, tmp_path):
    """`--stride none` (the default, written out) was "invalid int value: 'none'" in both."""
    from dataclasses import asdict

    from training import demo

    monkeypatch.setattr(evaluate_cli, "evaluate_file", asdict)  # the parsed arguments, not a run
    result = evaluate_cli.main(
        ["--model", "m", "--text_file", "t", "--max_length", "none", "--stride", "None"]
    )
    assert result["max_length"] is None and result["stride"] is None
    flags = ["--output_dir", str(tmp_path / "demo"), "--stride", "none", "--max_documents", "none"]
    with pytest.raises(ValueError, match=r"--max_new_tokens"):  # parsed: refused after it, before training
        demo.run_demo([*flags, "--max_new_tokens", str(10**9)])


def test_demo_takes_the_flag_its_second_run_is_told_to_pass():
    """A second `make demo` is refused ("holds another run's outputs ... pass --overwrite_output_dir"),
    and the demo refused --overwrite_output_dir as an unknown argument: it could not run twice."""
    from training import demo

    (args,) = HfArgumentParser(demo.DemoArguments).parse_args_into_dataclasses(["--overwrite_output_dir"])
    assert demo.build_arguments(args)[2].overwrite_output_dir is True
    (args,) = HfArgumentParser(demo.DemoArguments).parse_args_into_dataclasses([])
    assert demo.build_arguments(args)[2].overwrite_output_dir is False
