"""Built-in corpora, dataset loading, exact packing and splitting (all offline, a few seconds)."""

import math
import os
import random
import subprocess
import sys
from collections import Counter

import datasets
import numpy as np
import pytest
from conftest import REPO_ROOT
from datasets import Dataset

import training.data.packing
from training.data.corpora import MarkovSource, SyntheticCorpus, load_builtin_corpus
from training.data.loading import DatasetLoadError, load_text_dataset
from training.data.local_files import DataFileError
from training.data.packing import tokenize_and_pack
from training.data.splits import train_eval_split
from training.data.streaming import buffered_shuffle
from training.data.tokenizer import split_long_text, train_tokenizer

DOCS = ["hello world", "", "a b", "the quick brown fox", "x", "jumps over the lazy dog", "end of text"]


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path, monkeypatch):
    """Every test writes its `datasets` cache files into its own tmp folder."""
    cache = tmp_path / "hf_datasets_cache"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)


@pytest.fixture(scope="module")
def corpus():
    return SyntheticCorpus(seed=0)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(DOCS * 3, kind="char", vocab_size=64)


def tokenized_stream(tokenizer, docs):
    ids = tokenizer([d for d in docs if d], add_special_tokens=False)["input_ids"]
    return [t for doc in ids for t in (*doc, tokenizer.eos_token_id)]


# ----------------------------------------------------------------------------------------------
# Synthetic corpus
# ----------------------------------------------------------------------------------------------


def test_synthetic_is_deterministic(corpus):
    a = corpus.generate(2000, seed=3)
    assert a == SyntheticCorpus(seed=0).generate(2000, seed=3)
    assert a != corpus.generate(2000, seed=4)
    assert SyntheticCorpus(seed=1).generate(2000, seed=3) != a
    assert all(doc.endswith(".") and doc.count(".") <= corpus.sentences_per_document for doc in a)
    assert sum(doc.count(".") for doc in a[:-1]) == corpus.sentences_per_document * (len(a) - 1)
    assert 2000 <= sum(len(doc.split()) + doc.count(".") for doc in a) < 2100  # "." is a word too


def test_synthetic_chain_is_irreducible_and_aperiodic(corpus):
    assert corpus.is_irreducible and corpus.period == 1
    assert 300 <= corpus.vocab_size <= 400
    pi = corpus.stationary_distribution
    assert np.all(pi > 0) and math.isclose(pi.sum(), 1.0)
    np.testing.assert_allclose(pi @ corpus.transition_matrix, pi, atol=1e-12)


def test_entropy_rate_matches_empirical_estimate(corpus):
    states = corpus.sample(200_000, seed=1)
    pairs = Counter(zip(states[:-1], states[1:]))
    firsts = Counter(states[:-1])
    n = len(states) - 1
    empirical = -sum(c / n * math.log2(c / firsts[a]) for (a, _), c in pairs.items())
    assert 2.0 < corpus.entropy_rate_bits_per_word < 6.0
    assert empirical == pytest.approx(corpus.entropy_rate_bits_per_word, rel=0.02)


def test_entropy_rate_of_a_two_state_chain():
    # P = [[1-a, a], [b, 1-b]]: pi = (b, a) / (a + b), H = pi_0 h(a) + pi_1 h(b)
    a, b = 0.25, 0.5
    source = MarkovSource(["x", "y"], [[1 - a, a], [b, 1 - b]])

    def h(p):
        return -p * math.log2(p) - (1 - p) * math.log2(1 - p)

    np.testing.assert_allclose(source.stationary_distribution, [2 / 3, 1 / 3], atol=1e-12)
    assert source.entropy_rate_bits_per_word == pytest.approx(2 / 3 * h(0.25) + 1 / 3 * 1.0, abs=1e-12)
    # a periodic chain still has one stationary distribution, and zero entropy
    flip = MarkovSource(["x", "y"], [[0, 1], [1, 0]])
    assert flip.period == 2 and flip.entropy_rate_bits_per_word == 0.0
    np.testing.assert_allclose(flip.stationary_distribution, [0.5, 0.5], atol=1e-12)


def test_markov_source_rejects_bad_chains():
    with pytest.raises(ValueError, match="irreducible"):
        MarkovSource(["x", "y"], [[1, 0], [0.5, 0.5]])
    with pytest.raises(ValueError, match="probability"):
        MarkovSource(["x", "y"], [[0.5, 0.4], [0.5, 0.5]])
    with pytest.raises(ValueError, match="shape"):
        MarkovSource(["x", "y", "z"], [[0.5, 0.5], [0.5, 0.5]])


def test_builtin_corpora():
    with pytest.raises(ValueError, match="synthetic.*stdlib_docstrings"):
        load_builtin_corpus("shakespeare")


# ----------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------


def test_load_local_txt_by_paragraph(tmp_path):
    (tmp_path / "a.txt").write_text("first doc\nsecond line\n\nsecond doc\n\n\nthird doc\n")
    ds = load_text_dataset(str(tmp_path / "a.txt"))
    assert ds.column_names == ["text"]
    assert [t.strip() for t in ds["text"] if t.strip()] == [
        "first doc\nsecond line",
        "second doc",
        "third doc",
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_load_local_formats(tmp_path, fmt):
    tmp_path = tmp_path / "data"  # apart from the datasets cache
    tmp_path.mkdir()
    rows = {"id": [1, 2, 3], "body": ["one doc", "two, with a comma", "three"]}
    path = tmp_path / f"data.{fmt}"
    source = Dataset.from_dict(rows)
    {"jsonl": source.to_json, "csv": source.to_csv, "parquet": source.to_parquet}[fmt](str(path))
    ds = load_text_dataset(str(path), text_column="body")
    assert ds.column_names == ["text"] and ds["text"] == rows["body"]
    # a folder and a glob find the same file
    assert load_text_dataset(str(tmp_path), text_column="body")["text"] == rows["body"]
    assert load_text_dataset(str(tmp_path / "*"), text_column="body")["text"] == rows["body"]
    streamed = load_text_dataset(str(path), text_column="body", streaming=True)
    assert [row["text"] for row in streamed] == rows["body"]
    with pytest.raises(ValueError, match=r"'text'.*columns: \['id', 'body'\]"):
        load_text_dataset(str(path))


def test_load_errors(tmp_path):
    tmp_path = tmp_path / "data"
    tmp_path.mkdir()
    with pytest.raises(FileNotFoundError):
        load_text_dataset(str(tmp_path / "missing.jsonl"))
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.csv").write_text("text\nb\n")
    with pytest.raises(ValueError, match="mixes file types"):
        load_text_dataset(str(tmp_path))


BAD_FILES = {  # name -> (content, the error's message)
    "empty.txt": (b"", r"empty\.txt is empty"),
    "latin1.txt": (b"line one\n\nline two \xe9t\xe9\n", r"latin1\.txt, line 3 \(byte 19\): not UTF-8"),
    "missing.jsonl": (b'{"text": "a"}\n{"body": "b"}\n', r"missing\.jsonl, line 2: no `text` field"),
    "number.jsonl": (b'{"text": "a"}\n\n{"text": 3}\n', r"number\.jsonl, line 3: `text` is a number \(3\)"),
    "null.jsonl": (b'{"text": "a"}\n{"text": null}\n', r"null\.jsonl, line 2: `text` is null"),
    "broken.jsonl": (b'{"text": "a"}\n{"text": "b"\n', r"broken\.jsonl, line 2: not valid JSON"),
    # pandas would merge lines 3-5 into one field ("stray quote\nsecond\nend")
    "stray.csv": (
        b'text\nfirst\n"stray quote\nsecond\n"end\nlast\n',
        r"stray\.csv, line 5: malformed CSV .* record starting on line 3: a stray quote\?",
    ),
    "fields.csv": (b"id,text\n1,a\n2,b,c\n", r"fields\.csv, line 3: 3 field\(s\) where the header has 2"),
    "unclosed.tsv": (b'text\n"never closed\nrow\n', r"unclosed\.tsv, line 3: malformed CSV"),
}


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_local_files_name_the_file_the_line_and_the_cause(tmp_path, name, streaming):
    """Not `DatasetGenerationError` naming nothing, not a row silently dropped or merged."""
    content, message = BAD_FILES[name]
    path = tmp_path / "data" / name
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(DataFileError, match=message):
        list(load_text_dataset(str(path), streaming=streaming))  # a stream fails when read


def test_bad_parquet_rows_are_named(tmp_path):
    path = tmp_path / "data" / "null.parquet"
    path.parent.mkdir()
    Dataset.from_dict({"text": ["a", "b", None]}).to_parquet(str(path))
    for streaming in (False, True):
        with pytest.raises(DataFileError, match=r"null\.parquet, row 2: `text` is null"):
            list(load_text_dataset(str(path), streaming=streaming))


def test_csv_text_is_kept_verbatim(tmp_path):
    """pandas alone reads "NA", "null" and empty cells as missing and "42" as the number 42.0."""
    path = tmp_path / "data" / "texts.csv"
    path.parent.mkdir()
    long = "word " * 40_000  # longer than Python csv's default field size limit
    path.write_text(f'id,text\n1,NA\n2,\n3,42\n4,null\n5,"two\nlines"\n6,"say ""hi"""\n7,{long}\n')
    expected = ["NA", "", "42", "null", "two\nlines", 'say "hi"', long]
    assert load_text_dataset(str(path))["text"] == expected
    assert [row["text"] for row in load_text_dataset(str(path), streaming=True)] == expected


def test_load_builtin_dataset():
    ds = load_text_dataset("synthetic")
    assert ds.column_names == ["text"] and len(ds) > 1000
    with pytest.raises(ValueError, match="only a 'train' split"):
        load_text_dataset("synthetic", split="test")


def test_offline_hub_name_fails_fast_and_clearly(monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(
        DatasetLoadError, match="Could not load dataset 'no-such-user/no-such-dataset'"
    ) as info:
        load_text_dataset("no-such-user/no-such-dataset", config_name="default")
    assert "HF_HUB_OFFLINE" in str(info.value) and info.value.__cause__ is not None


# ----------------------------------------------------------------------------------------------
# Tokenize and pack
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 4, 7])
def test_pack_is_exact(tokenizer, block_size):
    stream = tokenized_stream(tokenizer, DOCS)
    packed = tokenize_and_pack(Dataset.from_dict({"text": DOCS}), tokenizer, block_size)
    assert packed.column_names == ["input_ids", "labels"]
    assert len(packed) == len(stream) // block_size  # the tail is dropped
    assert all(len(row) == block_size for row in packed["input_ids"])
    flat = [t for row in packed["input_ids"] for t in row]
    assert flat == stream[: len(flat)]
    assert packed["labels"] == packed["input_ids"]
    assert stream.count(tokenizer.eos_token_id) == 6  # one per non-empty document


def test_document_ids_and_position_ids(tokenizer):
    docs = ["ab", "c", "defg"]  # + EOS each: [a b E] [c E] [d e f g E] = 10 tokens
    packed = tokenize_and_pack(Dataset.from_dict({"text": docs}), tokenizer, 4, document_mask=True)
    eos = tokenizer.eos_token_id
    assert packed["input_ids"][0][2] == eos and packed["input_ids"][1][0] == eos
    assert packed["document_ids"] == [[0, 0, 0, 1], [0, 1, 1, 1]]
    assert packed["position_ids"] == [[0, 1, 2, 0], [0, 0, 1, 2]]
    assert len(packed) == 2  # "g" and its EOS are the dropped tail


def test_streaming_and_num_proc_give_the_same_blocks(tokenizer, monkeypatch):
    docs = SyntheticCorpus(seed=0, sentences_per_document=1).generate(400, seed=0)
    dataset = Dataset.from_dict({"text": docs})
    reference = tokenize_and_pack(dataset, tokenizer, 16, document_mask=True).to_list()
    assert tokenize_and_pack(dataset, tokenizer, 16, document_mask=True, num_proc=2).to_list() == reference
    streamed = tokenize_and_pack(dataset.to_iterable_dataset(), tokenizer, 16, document_mask=True)
    assert list(streamed) == reference
    assert list(streamed) == reference  # a second pass starts afresh
    monkeypatch.setattr(training.data.packing, "_MAP_BATCH_SIZE", 3)  # blocks straddle many batches
    assert tokenize_and_pack(dataset, tokenizer, 16, document_mask=True).to_list() == reference


def test_split_long_text_cuts_before_a_word():
    text = "one two  three\n four. five, six" * 3
    pieces = split_long_text(text, 10)
    assert "".join(pieces) == text and all(len(piece) <= 10 for piece in pieces)
    # every cut but hard ones is just before a space followed by a non-space
    assert all(piece[0] == " " and not piece[1].isspace() for piece in pieces[1:])
    assert split_long_text("x" * 25, 10) == ["x" * 10] * 2 + ["x" * 5]  # no space: hard cuts
    assert split_long_text("short", 10) == ["short"]
    with pytest.raises(ValueError, match="max_characters"):
        split_long_text(text, 1)


@pytest.mark.parametrize("kind", ["byte_bpe", "wordpiece", "unigram", "char"])
def test_long_documents_are_tokenized_in_pieces_exactly(kind, monkeypatch):
    """Documents longer than PIECE_CHARACTERS are tokenized piece by piece (bounded memory),
    with the same blocks, document ids and positions as whole-document tokenization."""
    corpus = SyntheticCorpus(seed=0, sentences_per_document=40).generate(6000, seed=1)
    docs = [doc.replace(". ", ".\n", 3).replace(" the ", "  the ", 2) for doc in corpus]  # runs of spaces
    tokenizer = train_tokenizer(docs, kind=kind, vocab_size=400, min_frequency=1)
    dataset = Dataset.from_dict({"text": docs})
    whole = tokenize_and_pack(dataset, tokenizer, 16, document_mask=True).to_list()
    assert max(map(len, docs)) > 1000
    monkeypatch.setattr(training.data.packing, "PIECE_CHARACTERS", 64)
    monkeypatch.setattr(training.data.packing, "TOKENIZE_CHARACTERS", 500)
    assert tokenize_and_pack(dataset, tokenizer, 16, document_mask=True).to_list() == whole
    streamed = tokenize_and_pack(dataset.to_iterable_dataset(), tokenizer, 16, document_mask=True)
    assert list(streamed) == whole


_HUGE_LINE_SCRIPT = """
import random, resource, sys
from training.data.loading import load_text_dataset
from training.data.packing import tokenize_and_pack
from training.data.tokenizer import train_tokenizer

path, characters = sys.argv[1], int(sys.argv[2])
rng = random.Random(0)
words = "the of and to in a is that for it as was with be by on not he this are or his from at".split()
line = " ".join(rng.choice(words) for _ in range(characters // 3))[:characters]
with open(path, "w") as f:
    f.write(line + "\\n")
tokenizer = train_tokenizer([line[:20000]], kind="byte_bpe", vocab_size=300)
dataset = load_text_dataset(path, streaming=True)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
blocks = sum(1 for _ in tokenize_and_pack(dataset, tokenizer, 64))
print(blocks, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


_TRAIN_TOKENIZER_SCRIPT = """
import sys
from training.data.tokenizer import train_tokenizer

def status(field):  # KiB
    return int(next(l for l in open("/proc/self/status") if l.startswith(field)).split()[1])

with open(sys.argv[1]) as f:
    text = f.read()
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current RSS
before = status("VmRSS:")
tokenizer = train_tokenizer([text], kind="byte_bpe", vocab_size=300)
print(len(tokenizer), status("VmHWM:") - before)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's peak-RSS reset")
def test_tokenizer_training_memory_is_bounded_for_one_huge_line(tmp_path):
    """Training a tokenizer on one 4 MB line: held whole by the trainer its peak RSS grew by
    ~115 bytes a character (468 MB here; 5.2 GB for a 50 MB line); fed in pieces cut before a word
    (`split_long_text`, the same pre-tokens) by ~6 (24 MB). Growths are compared with a short line's."""
    script = tmp_path / "train_tokenizer.py"
    script.write_text(_TRAIN_TOKENIZER_SCRIPT)
    words = "the of and to in a is that for it as was with be by on not he this are or his from at".split()
    rng = random.Random(0)
    peaks = {}  # growth of the peak RSS during training, KiB
    for characters in (20_000, 4_000_000):
        path = tmp_path / f"line_{characters}.txt"
        path.write_text(" ".join(rng.choice(words) for _ in range(characters // 3))[:characters] + "\n")
        out = subprocess.run(
            [sys.executable, str(script), str(path)],
            env=dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")),
            cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=300,
        )  # fmt: skip
        vocabulary, peaks[characters] = map(int, out.stdout.split())
        assert vocabulary == 300
    growth = (peaks[4_000_000] - peaks[20_000]) * 1024
    assert growth < 30 * 4_000_000, f"peak RSS grew by {growth / 2**20:.0f} MiB more than for a short line"


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux only")
def test_streaming_memory_is_bounded_for_one_huge_line(tmp_path):
    """One 2 MB line, streamed: tokenizing it whole grew the peak RSS by ~370 MB (~180 bytes a
    character: a 50 MB line peaked at 9 GB); in pieces the growth is a fixed ~70 MB plus a few
    bytes a character."""
    script = tmp_path / "huge_line.py"
    script.write_text(_HUGE_LINE_SCRIPT)
    characters = 2_000_000
    env = dict(
        os.environ,
        PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        HF_DATASETS_CACHE=str(tmp_path / "cache"),
    )
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "line.txt"), str(characters)],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    blocks, growth_kib = map(int, out.stdout.split())
    assert blocks > 1000
    assert growth_kib * 1024 < 100e6 + 25 * characters, f"peak RSS grew by {growth_kib / 1024:.0f} MiB"


def test_pack_validation(tokenizer):
    dataset = Dataset.from_dict({"text": DOCS})
    with pytest.raises(ValueError, match="block_size"):
        tokenize_and_pack(dataset, tokenizer, 0)
    with pytest.raises(ValueError, match="fewer than one block"):
        tokenize_and_pack(dataset, tokenizer, 10_000)
    no_eos = train_tokenizer(DOCS, kind="char", vocab_size=64, special_tokens={"unk_token": "<unk>"})
    with pytest.raises(ValueError, match="eos_token"):
        tokenize_and_pack(dataset, no_eos, 4)


def test_train_eval_split_is_deterministic():
    dataset = Dataset.from_dict({"text": [f"doc {i}" for i in range(100)]})
    a, b = train_eval_split(dataset, 0.1, seed=0), train_eval_split(dataset, 0.1, seed=0)
    assert len(a["eval"]) == 10 and len(a["train"]) == 90
    assert a["eval"]["text"] == b["eval"]["text"]
    assert set(a["eval"]["text"]).isdisjoint(a["train"]["text"])
    assert a["eval"]["text"] != train_eval_split(dataset, 0.1, seed=1)["eval"]["text"]
    streamed = train_eval_split(dataset.to_iterable_dataset(), 0.2, seed=0)
    train, held = [r["text"] for r in streamed["train"]], [r["text"] for r in streamed["eval"]]
    assert sorted(train + held) == sorted(dataset["text"]) and 5 <= len(held) <= 40
    with pytest.raises(ValueError, match="eval_fraction"):
        train_eval_split(dataset, 1.0, seed=0)
    # a share that holds out every document (rounded up) was datasets' "test_size=0.9 ... train set
    # will be empty", naming no flag
    for fraction, n in ((0.9, 5), (0.5, 1)):
        few = Dataset.from_dict({"text": [f"doc {i}" for i in range(n)]})
        with pytest.raises(
            ValueError, match=rf"`eval_fraction` {fraction} of {n} document\(s\) leaves none to train on"
        ):
            train_eval_split(few, fraction, seed=0)
    assert len(train_eval_split(Dataset.from_dict({"text": list("abcde")}), 0.8, seed=0)["train"]) == 1


# ----------------------------------------------------------------------------------------------
# Shuffle buffer
# ----------------------------------------------------------------------------------------------


def test_buffered_shuffle_is_a_seeded_bounded_permutation():
    read = []

    def source(n):
        for i in range(n):
            read.append(i)
            yield i

    def shuffled(seed, buffer_size=16, n=200):
        return buffered_shuffle(source(n), buffer_size, np.random.default_rng(seed))

    out = []
    for item in shuffled([0, 0]):
        assert len(read) - len(out) <= 16 + 1  # the buffer and the item just read, no more
        out.append(item)
    assert sorted(out) == list(range(200)) and out != list(range(200))
    assert list(shuffled([0, 0])) == out  # a pure function of the input order and the seed
    assert list(shuffled([0, 1])) != out
    assert max(i - pos for pos, i in enumerate(out)) <= 16  # an item moves at most ~buffer earlier
    assert list(shuffled([0, 0], buffer_size=1)) == list(range(200))
    assert list(shuffled([0, 0], buffer_size=0)) == list(range(200))
    assert sorted(shuffled([0, 0], buffer_size=500)) == list(range(200))  # a buffer larger than the stream
    with pytest.raises(ValueError, match="buffer_size"):
        list(shuffled([0, 0], buffer_size=-1))
