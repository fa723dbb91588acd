"""Masked-LM collators (token, whole-word, span masking) and NSP/SOP sentence pairs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from training.data.collators_mlm import (
    DataCollatorForMaskedLM,
    make_sentence_pairs,
    sample_span_mask,
    span_length_probs,
    split_sentences,
)
from training.data.tokenizer import BERT_SPECIAL_TOKENS, train_tokenizer

CORPUS = [
    "Hello world. This is a small corpus.",
    "Return the sine of x, measured in radians.",
    "A tokenizer splits text into tokens, and a model predicts the next one!",
    "Open the file and read it line by line. Then close it.",
    "Masked language models predict the hidden words from both sides.",
] * 20

TEXTS = [
    "A tokenizer splits text into tokens, and a model predicts the next one!",
    "Masked language models predict the hidden words from both sides.",
    "Return the sine of x, measured in radians. Then close the file.",
    "Open the corpus and read it line by line.",
]


@pytest.fixture(scope="module")
def tok():
    # a small vocabulary, so that many words are split into `##` pieces
    return train_tokenizer(
        CORPUS, kind="wordpiece", vocab_size=120, special_tokens=BERT_SPECIAL_TOKENS, padding_side="right"
    )


def random_examples(tok, n=256, min_len=20, max_len=120, seed=0):
    """[CLS] random non-special ids [SEP], of random lengths (so the batch is padded)."""
    g = torch.Generator().manual_seed(seed)
    special = set(tok.all_special_ids)
    pool = torch.tensor([i for i in range(len(tok)) if i not in special])
    examples = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        body = pool[torch.randint(len(pool), (length,), generator=g)].tolist()
        examples.append({"input_ids": [tok.cls_token_id, *body, tok.sep_token_id]})
    return examples


def padded(tok, examples):
    """(B, T) original ids right-padded with pad_token_id, and the (B, T) mask of maskable tokens."""
    T = max(len(e["input_ids"]) for e in examples)
    ids = torch.full((len(examples), T), tok.pad_token_id)
    for b, e in enumerate(examples):
        ids[b, : len(e["input_ids"])] = torch.tensor(e["input_ids"])
    special = torch.tensor([i in set(tok.all_special_ids) for i in range(len(tok))])
    return ids, ~special[ids]


# ----------------------------------------------------------------------------------------------
# The BERT tokenizer template
# ----------------------------------------------------------------------------------------------


def test_bert_tokenizer_template_and_reload(tok, tmp_path):
    assert tok.convert_tokens_to_ids(list(BERT_SPECIAL_TOKENS.values())) == [0, 1, 2, 3, 4]
    single = tok("Hello world")
    tokens = tok.convert_ids_to_tokens(single["input_ids"])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 1
    assert single["token_type_ids"] == [0] * len(tokens)

    pair = tok("Hello world", "the sine")
    tokens = tok.convert_ids_to_tokens(pair["input_ids"])
    first_sep = tokens.index("[SEP]")
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 2
    assert pair["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
    assert 1 in pair["token_type_ids"]

    tok.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded("Hello world", "the sine") == pair
    assert reloaded("Hello world") == single
    assert reloaded.mask_token == "[MASK]" and reloaded.padding_side == "right"
    batch = reloaded(["Hello", "Return the sine of x"], ["world", "x"], padding=True)
    assert batch["token_type_ids"][0][-1] == 0  # padding has segment 0


def test_without_cls_and_sep_no_template_is_added():
    special = {"unk_token": "[UNK]", "pad_token": "[PAD]", "mask_token": "[MASK]"}
    plain = train_tokenizer(CORPUS, kind="wordpiece", vocab_size=120, special_tokens=special)
    enc = plain("Hello world", "the sine")
    assert "token_type_ids" not in enc
    assert not set(enc["input_ids"]) & set(plain.all_special_ids)


# ----------------------------------------------------------------------------------------------
# Token masking: rate, 80/10/10, labels, specials and padding
# ----------------------------------------------------------------------------------------------


def test_token_masking_rate_split_and_labels(tok):
    examples = random_examples(tok)
    collator = DataCollatorForMaskedLM(tok, seed=0)
    batch = collator(examples)
    original, maskable = padded(tok, examples)
    inputs, labels = batch["input_ids"], batch["labels"]
    assert inputs.shape == labels.shape == batch["attention_mask"].shape == original.shape
    assert set(batch) == {"input_ids", "attention_mask", "labels"}

    selected = labels != -100
    # never a special token or padding; labels are the originals exactly where selected
    assert not (selected & ~maskable).any()
    assert torch.equal(labels[selected], original[selected])
    assert torch.equal(inputs[~selected], original[~selected])
    assert torch.equal(batch["attention_mask"], (original != tok.pad_token_id).long())

    rate = selected.sum() / maskable.sum()
    assert abs(rate.item() - 0.15) < 0.01  # ~32k maskable tokens: SE 0.002

    n = selected.sum().item()
    masked = (inputs == tok.mask_token_id) & selected
    kept = (inputs == original) & selected
    randomized = selected & ~masked & ~kept
    assert abs(masked.sum().item() / n - 0.8) < 0.03
    assert abs(randomized.sum().item() / n - 0.1) < 0.025
    assert abs(kept.sum().item() / n - 0.1) < 0.025
    # random replacements are never special tokens
    assert not torch.isin(inputs[randomized], torch.tensor(tok.all_special_ids)).any()
    assert not torch.isin(
        inputs[~maskable & (original != tok.pad_token_id)], torch.tensor([tok.mask_token_id])
    ).any()


@pytest.mark.parametrize(
    ("mask_p", "random_p"),
    [(1.0, 0.0), (0.0, 1.0), (0.0, 0.0)],
)
def test_replacement_extremes(tok, mask_p, random_p):
    examples = random_examples(tok, n=32)
    batch = DataCollatorForMaskedLM(
        tok, mlm_probability=0.5, mask_replace_prob=mask_p, random_replace_prob=random_p, seed=1
    )(examples)
    original, _ = padded(tok, examples)
    selected = batch["labels"] != -100
    inputs = batch["input_ids"][selected]
    if mask_p == 1.0:
        assert (inputs == tok.mask_token_id).all()
    elif random_p == 1.0:
        assert not (inputs == tok.mask_token_id).any()
        assert (inputs != original[selected]).float().mean() > 0.9  # a vocabulary of ~115 ids
    else:
        assert torch.equal(inputs, original[selected])


def test_special_tokens_mask_and_attention_mask_are_honoured(tok):
    ids = tok("A tokenizer splits text into tokens")["input_ids"]
    # protect the first two words, and pretend the last real token is padding
    example = {
        "input_ids": ids,
        "special_tokens_mask": [1, 1, 1] + [0] * (len(ids) - 3),
        "attention_mask": [1] * (len(ids) - 2) + [0, 0],
    }
    collator = DataCollatorForMaskedLM(tok, mlm_probability=1.0, seed=0)
    batch = collator([example])
    selected = (batch["labels"] != -100)[0]
    assert selected.tolist() == [False] * 3 + [True] * (len(ids) - 5) + [False, False]
    assert batch["attention_mask"][0].tolist() == example["attention_mask"]


def test_pad_to_multiple_of_and_padding(tok):
    examples = [{"input_ids": tok(t)["input_ids"]} for t in TEXTS]
    batch = DataCollatorForMaskedLM(tok, pad_to_multiple_of=8, mlm_probability=1.0, seed=0)(examples)
    longest = max(len(e["input_ids"]) for e in examples)
    T = batch["input_ids"].shape[1]
    assert T % 8 == 0 and longest <= T < longest + 8
    pads = batch["attention_mask"] == 0
    assert pads.any()
    assert (batch["input_ids"][pads] == tok.pad_token_id).all() and (batch["labels"][pads] == -100).all()


# ----------------------------------------------------------------------------------------------
# Whole-word masking
# ----------------------------------------------------------------------------------------------


def word_groups(encoding_word_ids):
    """Token positions of each word, from a fast tokenizer's word_ids() (None for specials)."""
    groups = {}
    for t, w in enumerate(encoding_word_ids):
        if w is not None:
            groups.setdefault(w, []).append(t)
    return list(groups.values())


@pytest.mark.parametrize("with_word_ids", [False, True])
def test_whole_word_masking_selects_all_pieces_together(tok, with_word_ids):
    encodings = [tok(t) for t in TEXTS * 64]
    groups = [word_groups(e.word_ids()) for e in encodings]
    assert any(len(g) > 1 for gs in groups for g in gs), "the test needs words split into pieces"
    examples = [
        {"input_ids": e["input_ids"], **({"word_ids": e.word_ids()} if with_word_ids else {})}
        for e in encodings
    ]
    batch = DataCollatorForMaskedLM(tok, masking="whole_word", seed=0)(examples)
    assert "word_ids" not in batch
    selected = batch["labels"] != -100
    n_split_words_selected = 0
    for b, gs in enumerate(groups):
        for g in gs:
            flags = selected[b, g]
            assert flags.all() or not flags.any(), (b, g, flags)
            n_split_words_selected += int(len(g) > 1 and flags.all())
    assert n_split_words_selected > 10
    _, maskable = padded(tok, examples)
    assert not (selected & ~maskable).any()
    rate = selected.sum() / maskable.sum()
    assert abs(rate.item() - 0.15) < 0.03


def test_whole_word_without_word_boundaries_raises():
    byte_tok = train_tokenizer(
        CORPUS, kind="byte_bpe", vocab_size=300, special_tokens={**BERT_SPECIAL_TOKENS, "unk_token": "[UNK]"}
    )
    collator = DataCollatorForMaskedLM(byte_tok, masking="whole_word")
    enc = byte_tok("Hello world")
    with pytest.raises(ValueError, match="word_ids"):
        collator([{"input_ids": enc["input_ids"]}])
    batch = collator([{"input_ids": enc["input_ids"], "word_ids": enc.word_ids()}])  # fine with them
    assert batch["labels"].shape == (1, len(enc["input_ids"]))


# ----------------------------------------------------------------------------------------------
# Span masking (SpanBERT)
# ----------------------------------------------------------------------------------------------


def test_span_length_distribution_is_spanberts():
    probs = span_length_probs(0.2, 10)
    assert probs.shape == (10,) and probs.sum() == pytest.approx(1.0)
    assert (np.diff(probs) < 0).all()
    assert (probs * np.arange(1, 11)).sum() == pytest.approx(3.797, abs=1e-3)  # SpanBERT's "3.8"


def test_span_sampler_lengths_budget_and_contiguity():
    rng = np.random.default_rng(0)
    probs = span_length_probs(0.2, 10)
    expected = (probs * np.arange(1, 11)).sum()
    T = 1000
    word_index = np.arange(T)  # one token per word
    word_index[0] = word_index[500] = word_index[-1] = -1  # [CLS], a [SEP] in the middle, [SEP]
    lengths, rates = [], []
    for _ in range(40):
        selected, span_id, spans = sample_span_mask(word_index, 0.15, probs, rng)
        assert not selected[word_index < 0].any()
        rates.append(selected.sum() / (word_index >= 0).sum())
        for k, (start, end, n_words) in enumerate(spans):
            # contiguous, within one segment, of at most max_span_length words
            assert 1 <= n_words <= 10 and end - start == n_words
            assert (word_index[start:end] >= 0).all() and selected[start:end].all()
            assert (span_id[start:end] >= 0).all()
            assert set(np.flatnonzero(span_id == k)) <= set(range(start, end))
        lengths += [n for _, _, n in spans[:-1]]  # the last span may be cut by the budget
    assert abs(np.mean(rates) - 0.15) < 0.002  # the budget is met exactly, up to rounding
    assert abs(np.mean(lengths) - expected) < 0.25  # ~1500 spans, SD ~2.4: SE ~0.06


def test_span_sampler_keeps_words_whole():
    rng = np.random.default_rng(1)
    # 300 words of 3 pieces each
    word_index = np.repeat(np.arange(300), 3)
    for _ in range(20):
        selected, _, spans = sample_span_mask(word_index, 0.15, span_length_probs(), rng)
        per_word = selected.reshape(300, 3).sum(axis=1)
        # every word is all-or-none, except at most one: where the last span met the budget
        assert ((per_word != 0) & (per_word != 3)).sum() <= 1
        assert all(start % 3 == 0 for start, _, _ in spans)  # spans start at word starts


def test_span_masking_collator_budget_and_span_level_replacement(tok):
    examples = random_examples(tok, n=128, min_len=100, max_len=120)
    batch = DataCollatorForMaskedLM(
        tok, masking="span", mask_replace_prob=0.5, random_replace_prob=0.0, seed=0
    )(examples)
    original, maskable = padded(tok, examples)
    selected = batch["labels"] != -100
    assert not (selected & ~maskable).any()
    assert torch.equal(batch["labels"][selected], original[selected])
    assert abs((selected.sum() / maskable.sum()).item() - 0.15) < 0.005

    # runs of selected tokens: with the decision per span, a run is all [MASK] or all kept unless
    # two spans touch; per-token decisions would make ~90% of runs of >= 3 tokens mixed
    uniform, runs, lengths = 0, 0, []
    for b in range(selected.shape[0]):
        row, is_mask = selected[b].tolist(), (batch["input_ids"][b] == tok.mask_token_id).tolist()
        t = 0
        while t < len(row):
            if not row[t]:
                t += 1
                continue
            end = t
            while end < len(row) and row[end]:
                end += 1
            lengths.append(end - t)
            if end - t >= 3:
                runs += 1
                uniform += len(set(is_mask[t:end])) == 1
            t = end
    assert runs > 100 and uniform / runs > 0.7
    assert np.mean(lengths) > 3.0  # spans, not isolated tokens (token masking gives ~1.2)


# ----------------------------------------------------------------------------------------------
# Dynamic masking and reproducibility
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("masking", ["token", "whole_word", "span"])
def test_dynamic_masking_and_seeds(tok, masking):
    examples = [{"input_ids": tok(t)["input_ids"]} for t in TEXTS * 8]
    collator = DataCollatorForMaskedLM(tok, masking=masking, seed=3)
    first, second = collator(examples), collator(examples)
    # RoBERTa's dynamic masking: a new mask at every call (every epoch)
    assert not torch.equal(first["labels"], second["labels"])
    # the same seed replays the same sequence of masks
    again = DataCollatorForMaskedLM(tok, masking=masking, seed=3)
    for expected in (first, second):
        got = again(examples)
        assert all(torch.equal(got[k], expected[k]) for k in expected)
    other = DataCollatorForMaskedLM(tok, masking=masking, seed=4)(examples)
    assert not torch.equal(other["labels"], first["labels"])


def test_global_rng_and_explicit_generator(tok):
    examples = [{"input_ids": tok(t)["input_ids"]} for t in TEXTS * 8]
    collator = DataCollatorForMaskedLM(tok)  # no seed: torch's global RNG
    torch.manual_seed(11)
    a = collator(examples)
    torch.manual_seed(11)
    b = collator(examples)
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])
    c = DataCollatorForMaskedLM(tok, generator=torch.Generator().manual_seed(5))(examples)
    d = DataCollatorForMaskedLM(tok, generator=torch.Generator().manual_seed(5))(examples)
    assert torch.equal(c["labels"], d["labels"])


# ----------------------------------------------------------------------------------------------
# NSP and SOP pairs
# ----------------------------------------------------------------------------------------------


def id_documents(n_docs=60, n_sentences=(1, 9), sentence_len=(3, 14), seed=0):
    """Documents of sentences of token ids, every id unique: an id tells its document and position."""
    rng = np.random.default_rng(seed)
    docs, where, next_id = [], {}, 1000
    for d in range(n_docs):
        doc, pos = [], 0
        for _ in range(rng.integers(*n_sentences, endpoint=True)):
            sentence = list(range(next_id, next_id + int(rng.integers(*sentence_len, endpoint=True))))
            for i in sentence:
                where[i] = (d, pos)
                pos += 1
            next_id += len(sentence)
            doc.append(sentence)
        docs.append(doc)
    return docs, where


def split_pair(tok, example):
    ids, types = example["input_ids"], example["token_type_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    sep = ids.index(tok.sep_token_id)
    a, b = ids[1:sep], ids[sep + 1 : -1]
    assert a and b and tok.sep_token_id not in b and tok.cls_token_id not in a + b
    # BERT's segments: 0 for [CLS] A [SEP], 1 for B [SEP]
    assert types == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    return a, b


def contiguous(positions):
    return positions == list(range(positions[0], positions[0] + len(positions)))


@pytest.mark.parametrize("objective", ["nsp", "sop"])
def test_sentence_pairs(tok, objective):
    docs, where = id_documents()
    max_length = 24
    pairs = make_sentence_pairs(docs, tok, objective=objective, max_length=max_length, seed=0)
    assert len(pairs) > 100
    labels = [p["next_sentence_label"] for p in pairs]
    assert set(labels) == {0, 1} and abs(np.mean(labels) - 0.5) < 0.1
    untruncated = 0
    for p in pairs:
        assert len(p["input_ids"]) <= max_length
        a, b = split_pair(tok, p)
        (doc_a, *_), (doc_b, *_) = where[a[0]], where[b[0]]
        pos_a, pos_b = [where[i][1] for i in a], [where[i][1] for i in b]
        assert {where[i][0] for i in a} == {doc_a} and {where[i][0] for i in b} == {doc_b}
        assert contiguous(pos_a) and contiguous(pos_b)  # truncation only trims the ends
        label = p["next_sentence_label"]
        if objective == "nsp" and label == 1:
            assert doc_b != doc_a  # a random segment from another document
            continue
        assert doc_a == doc_b  # NSP positives and all SOP pairs: one document
        first, second = (a, b) if label == 0 else (b, a)  # SOP negatives are swapped
        first_pos, second_pos = [where[i][1] for i in first], [where[i][1] for i in second]
        assert first_pos[-1] < second_pos[0]
        if len(a) + len(b) < max_length - 3:  # not truncated: exactly consecutive text
            untruncated += 1
            assert second_pos[0] == first_pos[-1] + 1
    assert untruncated > 20


def test_sentence_pairs_from_text(tok):
    documents = [" ".join(CORPUS[i : i + 4]) for i in range(0, 40, 2)]
    assert split_sentences(documents[0])[:2] == ["Hello world.", "This is a small corpus."]
    pairs = make_sentence_pairs(documents, tok, objective="nsp", max_length=40, seed=1)
    assert pairs == make_sentence_pairs(documents, tok, objective="nsp", max_length=40, seed=1)
    assert pairs != make_sentence_pairs(documents, tok, objective="nsp", max_length=40, seed=2)
    # each document's sentences tokenized without special tokens, as one string of ids
    streams = [
        " ".join(str(i) for s in split_sentences(d) for i in tok(s, add_special_tokens=False)["input_ids"])
        for d in documents
    ]
    for p in pairs:
        a, b = split_pair(tok, p)
        for segment in (a, b):
            assert any(f" {' '.join(map(str, segment))} " in f" {stream} " for stream in streams)
        if p["next_sentence_label"] == 0 and len(p["input_ids"]) < 40:  # not truncated: A then B
            assert any(f" {' '.join(map(str, a + b))} " in f" {stream} " for stream in streams)


def test_pairs_through_the_collator(tok):
    docs, _ = id_documents(n_docs=10, seed=1)
    # ids >= 1000 are outside this tokenizer's vocabulary: map them into it
    docs = [[[5 + i % (len(tok) - 5) for i in s] for s in doc] for doc in docs]
    pairs = make_sentence_pairs(docs, tok, objective="sop", max_length=32, seed=0)
    batch = DataCollatorForMaskedLM(tok, pad_to_multiple_of=8, seed=0)(pairs[:16])
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels", "next_sentence_label"}
    assert batch["next_sentence_label"].tolist() == [p["next_sentence_label"] for p in pairs[:16]]
    assert batch["token_type_ids"].shape == batch["input_ids"].shape
    for b, p in enumerate(pairs[:16]):
        n = len(p["input_ids"])
        assert batch["token_type_ids"][b, :n].tolist() == p["token_type_ids"]
        assert (batch["token_type_ids"][b, n:] == 0).all()
        # [CLS] and both [SEP] are never masked
        specials = [t for t, i in enumerate(p["input_ids"]) if i in (tok.cls_token_id, tok.sep_token_id)]
        assert (batch["labels"][b, specials] == -100).all()
        assert batch["input_ids"][b, specials].tolist() == [p["input_ids"][t] for t in specials]


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mlm_probability": 1.5}, "`mlm_probability`"),
        ({"mlm_probability": True}, "`mlm_probability`"),
        ({"mask_replace_prob": -0.1}, "`mask_replace_prob`"),
        ({"random_replace_prob": 2}, "`random_replace_prob`"),
        (
            {"mask_replace_prob": 0.9, "random_replace_prob": 0.2},
            "`mask_replace_prob` \\+ `random_replace_prob`",
        ),
        ({"masking": "sentence"}, "`masking`"),
        ({"masking": "span", "span_geometric_p": 0.0}, "`span_geometric_p`"),
        ({"max_span_length": 0}, "`max_span_length`"),
        ({"pad_to_multiple_of": 0}, "`pad_to_multiple_of`"),
        ({"seed": -1}, "`seed`"),
        ({"seed": 1, "generator": torch.Generator()}, "mutually exclusive"),
        ({"continuation_prefix": ""}, "`continuation_prefix`"),
    ],
)
def test_collator_bad_arguments(tok, kwargs, match):
    with pytest.raises(ValueError, match=match):
        DataCollatorForMaskedLM(tok, **kwargs)


def test_collator_needs_a_mask_token():
    no_mask = train_tokenizer(
        CORPUS, kind="wordpiece", vocab_size=120, special_tokens={"unk_token": "[UNK]", "pad_token": "[PAD]"}
    )
    with pytest.raises(ValueError, match="`tokenizer`.*mask_token"):
        DataCollatorForMaskedLM(no_mask)


@pytest.mark.parametrize(
    ("examples", "match"),
    [
        ([], "`examples`"),
        ([{"text": "hi"}], "`examples`"),
        ([{"input_ids": [1, 5], "labels": [1, 5]}], "unknown keys"),
        ([{"input_ids": [1, 5]}, {"input_ids": [1, 5], "token_type_ids": [0, 0]}], "same keys"),
        ([{"input_ids": [1, 10_000]}], "`input_ids`"),
        ([{"input_ids": [1, 5], "token_type_ids": [0]}], "`token_type_ids`"),
    ],
)
def test_collator_bad_examples(tok, examples, match):
    with pytest.raises(ValueError, match=match):
        DataCollatorForMaskedLM(tok)(examples)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"objective": "mlm"}, "`objective`"),
        ({"max_length": 4}, "`max_length`"),
        ({"negative_prob": 1.2}, "`negative_prob`"),
        ({"short_seq_prob": -0.5}, "`short_seq_prob`"),
        ({"seed": "0"}, "`seed`"),
        ({"documents": [[[1, 2, 3], [4, 5]]]}, "`documents`"),  # NSP with a single document
        ({"documents": "one text"}, "`documents`"),
        ({"documents": [[[1, 2], "mixed"]]}, "`documents\\[0\\]`"),
    ],
)
def test_sentence_pairs_bad_arguments(tok, kwargs, match):
    kwargs = {"documents": [[[1, 2, 3], [4, 5]], [[6, 7, 8]]], **kwargs}
    with pytest.raises(ValueError, match=match):
        make_sentence_pairs(tokenizer=tok, **kwargs)


def test_sentence_pairs_need_cls_and_sep():
    no_cls = train_tokenizer(CORPUS, kind="wordpiece", vocab_size=120, special_tokens={"unk_token": "[UNK]"})
    with pytest.raises(ValueError, match="`tokenizer`"):
        make_sentence_pairs([["a b c", "d e"], ["f g"]], no_cls)
