"""Encoder-decoder pretraining collators: T5's objectives and BART's noising, exact invariants."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from training.data.collators_seq2seq import (
    T5_OBJECTIVES,
    DataCollatorForBartDenoising,
    DataCollatorForT5Pretraining,
)
from training.data.seq2seq_noise import (
    iid_noise_mask,
    noise_spans_to_sentinels,
    permute_sentences,
    random_spans_noise_mask,
    rotate_document,
    span_corruption_lengths,
    split_sentences_ids,
    text_infilling,
)
from training.data.tokenizer import (
    BART_SPECIAL_TOKENS,
    T5_SPECIAL_TOKENS,
    add_sentinel_tokens,
    sentinel_token_ids,
    sentinel_tokens,
    train_tokenizer,
)

CORPUS = [
    "Thank you for inviting me to your party last week. It was fun!",
    "Return the sine of x, measured in radians. Then close the file?",
    "Open the corpus and read it line by line.",
] * 10

NUM_SENTINELS = 100


@pytest.fixture(scope="module")
def t5_tok():
    tok = train_tokenizer(
        CORPUS, kind="char", vocab_size=64, special_tokens=T5_SPECIAL_TOKENS, padding_side="right"
    )
    add_sentinel_tokens(tok, NUM_SENTINELS)
    return tok


@pytest.fixture(scope="module")
def bart_tok():
    return train_tokenizer(
        CORPUS, kind="char", vocab_size=64, special_tokens=BART_SPECIAL_TOKENS, padding_side="right"
    )


def pool(tok):
    """The non-special ids, to draw random texts from."""
    special = set(tok.all_special_ids)
    return np.array([i for i in range(len(tok)) if i not in special])


def random_texts(tok, n=64, min_len=20, max_len=200, seed=0):
    rng = np.random.default_rng(seed)
    ids = pool(tok)
    return [rng.choice(ids, size=int(rng.integers(min_len, max_len + 1))).tolist() for _ in range(n)]


def rows(batch):
    """The unpadded (input, target) lists of each example of a batch."""
    out = []
    for x, m, y in zip(batch["input_ids"], batch["attention_mask"], batch["labels"]):
        out.append((x[m.bool()].tolist(), y[y != -100].tolist()))
    return out


def is_subsequence(small, big):
    it = iter(big)
    return all(any(t == u for u in it) for t in small)


# ----------------------------------------------------------------------------------------------
# Tokenizer: special tokens and sentinels
# ----------------------------------------------------------------------------------------------


def test_t5_and_bart_special_tokens(t5_tok, bart_tok):
    # T5's ids: <pad> 0, </s> 1, <unk> 2; BART's: <s> 0, <pad> 1, </s> 2, <unk> 3, <mask> 4
    assert t5_tok.convert_tokens_to_ids(["<pad>", "</s>", "<unk>"]) == [0, 1, 2]
    assert bart_tok.convert_tokens_to_ids(list(BART_SPECIAL_TOKENS.values())) == [0, 1, 2, 3, 4]
    # no template: encodings carry no special tokens, the collators add EOS themselves
    assert t5_tok("Thank you")["input_ids"] == t5_tok.convert_tokens_to_ids(list("Thank you"))
    assert "token_type_ids" not in bart_tok("Thank you")


def test_sentinels_take_the_last_ids_descending_and_survive_a_reload(t5_tok, tmp_path):
    ids = sentinel_token_ids(t5_tok)
    V = len(t5_tok)
    assert ids == list(range(V - 1, V - 1 - NUM_SENTINELS, -1))  # <extra_id_0> is the last id, as in T5
    assert t5_tok.convert_tokens_to_ids(sentinel_tokens(3)) == ids[:3]
    assert set(ids) <= set(t5_tok.all_special_ids)
    encoded = t5_tok("Thank<extra_id_0>you<extra_id_12>")["input_ids"]
    assert ids[0] in encoded and ids[12] in encoded  # never split
    assert t5_tok.decode(encoded, skip_special_tokens=True) == "Thankyou"
    assert add_sentinel_tokens(t5_tok, NUM_SENTINELS) == ids and len(t5_tok) == V  # idempotent

    t5_tok.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert sentinel_token_ids(reloaded) == ids and reloaded("a<extra_id_5>")["input_ids"][-1] == ids[5]


def test_sentinel_arguments(t5_tok):
    with pytest.raises(ValueError, match="num_sentinels"):
        sentinel_tokens(0)
    with pytest.raises(ValueError, match="already has 100 sentinel"):
        add_sentinel_tokens(t5_tok, 5)
    plain = train_tokenizer(CORPUS, kind="char", vocab_size=64, special_tokens=T5_SPECIAL_TOKENS)
    assert sentinel_token_ids(plain) == []


# ----------------------------------------------------------------------------------------------
# T5: span corruption
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [2, 10, 37, 100, 568])
def test_random_spans_noise_mask_counts_are_t5s(length):
    rng = np.random.default_rng(length)
    noise_count = min(max(round(length * 0.15), 1), length - 1)
    span_count = max(round(noise_count / 3.0), 1)
    for _ in range(20):
        mask = random_spans_noise_mask(length, 0.15, 3.0, rng)
        assert mask.shape == (length,) and mask.dtype == bool
        starts = mask & ~np.concatenate([[False], mask[:-1]])
        assert int(mask.sum()) == noise_count and int(starts.sum()) == span_count
        assert not mask[0] and mask[-1]  # T5's layout: kept first, noise last


def test_random_spans_noise_mask_edge_cases():
    rng = np.random.default_rng(0)
    assert random_spans_noise_mask(0, 0.15, 3.0, rng).shape == (0,)
    assert not random_spans_noise_mask(1, 0.15, 3.0, rng).any()  # noised as length 2, then cut
    assert not random_spans_noise_mask(50, 0.0, 3.0, rng).any()
    dense = random_spans_noise_mask(10, 0.9, 1.0, rng)  # more spans than kept tokens: clamped
    assert dense.sum() == 9 and not dense[0]


def test_span_corruption_rate_and_mean_span_length_over_many_samples(t5_tok):
    collator = DataCollatorForT5Pretraining(t5_tok, seed=0)
    sentinels = set(sentinel_token_ids(t5_tok))
    texts = random_texts(t5_tok, n=256, min_len=20, max_len=300)
    noise, spans = 0, 0
    for _, y in rows(collator(texts)):
        body = y[:-1]  # without EOS
        noise += sum(t not in sentinels for t in body)
        spans += sum(t in sentinels for t in body) - 1  # the final sentinel closes no span
    total = sum(len(t) for t in texts)
    assert abs(noise / total - 0.15) < 0.005
    assert abs(noise / spans - 3.0) < 0.1


def reconstruct(inputs, targets, sentinel_ids):
    """Put each target span back in place of its sentinel in the input."""
    index = {s: i for i, s in enumerate(sentinel_ids)}
    spans, current = {}, None
    for t in targets:
        if t in index:
            current = index[t]
            spans[current] = []
        else:
            spans[current].append(t)
    out = []
    for t in inputs:
        out.extend(spans[index[t]] if t in index else [t])
    return out


@pytest.mark.parametrize("objective", ["span_corruption", "iid_replace_spans"])
@pytest.mark.parametrize("final_sentinel", [True, False])
def test_span_objectives_sentinels_in_order_and_exact_reconstruction(t5_tok, objective, final_sentinel):
    collator = DataCollatorForT5Pretraining(
        t5_tok, objective=objective, final_sentinel=final_sentinel, seed=1
    )
    ids = sentinel_token_ids(t5_tok)
    index = {s: i for i, s in enumerate(ids)}
    eos = t5_tok.eos_token_id
    texts = random_texts(t5_tok, n=64, min_len=1, max_len=150)
    for text, (x, y) in zip(texts, rows(collator(texts))):
        assert x[-1] == eos and y[-1] == eos and eos not in x[:-1] + y[:-1]
        x, y = x[:-1], y[:-1]
        in_sentinels = [index[t] for t in x if t in index]
        out_sentinels = [index[t] for t in y if t in index]
        k = len(in_sentinels)
        assert in_sentinels == list(range(k))  # increasing, consecutive, from <extra_id_0>
        if final_sentinel:
            assert out_sentinels == list(range(k + 1)) and y[-1] == ids[k]
        else:
            assert out_sentinels[:k] == list(range(k)) and len(out_sentinels) in (k, k + 1)
        if y:
            assert y[0] == ids[0]  # the target starts with <extra_id_0>
        assert reconstruct(x, y, ids) == text


def test_span_corruption_without_final_sentinel_matches_t5s_targets(t5_tok):
    # T5's span-corruption texts end with noise, so its targets have no final sentinel
    collator = DataCollatorForT5Pretraining(t5_tok, final_sentinel=False, seed=0)
    ids = sentinel_token_ids(t5_tok)
    for x, y in rows(collator(random_texts(t5_tok, n=32))):
        k = sum(t in ids for t in x)
        assert sum(t in ids for t in y) == k and y[-2] not in ids


def test_noise_spans_to_sentinels_paper_example():
    # "Thank you for inviting me to your party last week ." (Raffel et al., 2020, Figure 2)
    words = "Thank you for inviting me to your party last week .".split()
    ids = np.arange(len(words)) + 10
    noise = np.array([w in ("for", "inviting", "last") for w in words])
    inputs, targets = noise_spans_to_sentinels(ids, noise, [100, 99, 98, 97])
    assert inputs.tolist() == [10, 11, 100, 14, 15, 16, 17, 99, 19, 20]  # Thank you <X> me ... <Y> week .
    assert targets.tolist() == [100, 12, 13, 99, 18, 98]  # <X> for inviting <Y> last <Z>
    inputs, targets = noise_spans_to_sentinels(ids, noise, [100, 99, 98], final_sentinel=False)
    assert targets.tolist() == [100, 12, 13, 99, 18, 98]  # ends with kept text: T5's code adds <Z> too
    with pytest.raises(ValueError, match="sentinel_ids"):
        noise_spans_to_sentinels(ids, noise, [100, 99])


def test_span_corruption_lengths_are_t5s_and_exact(t5_tok):
    # T5's random_spans_helper: 512 inputs <- 568 raw tokens, 114 targets (+1 for the final sentinel)
    assert span_corruption_lengths(512, final_sentinel=False) == (568, 114)
    assert span_corruption_lengths(512) == (568, 115)
    raw, target_length = span_corruption_lengths(64)
    collator = DataCollatorForT5Pretraining(t5_tok, seed=0)
    batch = collator(random_texts(t5_tok, n=8, min_len=raw, max_len=raw))
    assert batch["input_ids"].shape == (8, 64) and batch["labels"].shape == (8, target_length)
    assert bool(batch["attention_mask"].all()) and not bool((batch["labels"] == -100).any())  # no padding


def test_too_few_sentinels_is_an_error():
    tok = train_tokenizer(CORPUS, kind="char", vocab_size=64, special_tokens=T5_SPECIAL_TOKENS)
    add_sentinel_tokens(tok, 3)
    collator = DataCollatorForT5Pretraining(tok, seed=0)
    collator([list(range(3, 13))])  # 10 tokens: 1 span + the final sentinel
    with pytest.raises(
        ValueError, match=r"`tokenizer` has 3 sentinel tokens, but examples\[1\] \(100 tokens\) needs 6"
    ):
        collator([list(range(3, 13)), [3] * 100])  # 15 noise tokens in 5 spans


# ----------------------------------------------------------------------------------------------
# T5: the other objectives
# ----------------------------------------------------------------------------------------------


def test_bert_style_rates_and_full_targets(t5_tok):
    collator = DataCollatorForT5Pretraining(t5_tok, objective="bert_style", seed=0)
    mask_id = sentinel_token_ids(t5_tok)[0]  # no mask_token: <extra_id_0>, as in T5's code
    special = set(t5_tok.all_special_ids)
    texts = random_texts(t5_tok, n=256)
    masked = changed = total = 0
    for text, (x, y) in zip(texts, rows(collator(texts))):
        assert y == text + [t5_tok.eos_token_id] and len(x) == len(y) and x[-1] == t5_tok.eos_token_id
        x = x[:-1]
        masked += sum(t == mask_id for t in x)
        changed += sum(a != b and a != mask_id for a, b in zip(x, text))
        assert all(t not in special or t == mask_id for t in x)  # random tokens are never special
        total += len(text)
    assert abs(masked / total - 0.15 * 0.9) < 0.01
    # 10% random, minus the draws that hit the original token (1 in ~25)
    assert 0.01 < changed / total < 0.02


def test_mass_style_masks_only(t5_tok):
    collator = DataCollatorForT5Pretraining(
        t5_tok, objective="bert_style", mask_replace_prob=1.0, random_replace_prob=0.0, seed=0
    )
    mask_id = sentinel_token_ids(t5_tok)[0]
    for x, y in rows(collator(random_texts(t5_tok, n=32))):
        assert all(a == b or a == mask_id for a, b in zip(x, y))


def test_drop_tokens_is_a_split_of_the_text(t5_tok):
    collator = DataCollatorForT5Pretraining(t5_tok, objective="drop_tokens", seed=0)
    texts = random_texts(t5_tok, n=256)
    dropped = total = 0
    for text, (x, y) in zip(texts, rows(collator(texts))):
        x, y = x[:-1], y[:-1]  # without EOS
        assert Counter(x) + Counter(y) == Counter(text)
        assert is_subsequence(x, text) and is_subsequence(y, text)
        dropped += len(y)
        total += len(text)
    assert abs(dropped / total - 0.15) < 0.01


def test_drop_tokens_exact_split_with_distinct_ids(t5_tok):
    # with distinct ids, input and target are exactly the kept and the dropped tokens, in order
    collator = DataCollatorForT5Pretraining(t5_tok, objective="drop_tokens", seed=0)
    text = pool(t5_tok).tolist()
    assert len(set(text)) == len(text) > 20
    for x, y in rows(collator([text] * 16)):
        kept = set(x[:-1])
        assert x[:-1] == [t for t in text if t in kept] and y[:-1] == [t for t in text if t not in kept]


def test_deshuffle_is_a_permutation(t5_tok):
    collator = DataCollatorForT5Pretraining(t5_tok, objective="deshuffle", seed=0)
    texts = random_texts(t5_tok, n=32)
    moved = 0
    for text, (x, y) in zip(texts, rows(collator(texts))):
        assert y == text + [t5_tok.eos_token_id] and x[-1] == t5_tok.eos_token_id
        assert sorted(x[:-1]) == sorted(text)
        moved += x[:-1] != text
    assert moved == len(texts)


def test_prefix_lm_splits_the_text(t5_tok):
    collator = DataCollatorForT5Pretraining(t5_tok, objective="prefix_lm", seed=0)
    texts = [list(range(3, 13))] * 400  # 10 tokens: split points 1..9
    splits = Counter()
    for text, (x, y) in zip(texts, rows(collator(texts))):
        assert x[:-1] + y[:-1] == text and x[-1] == y[-1] == t5_tok.eos_token_id
        splits[len(x) - 1] += 1
    assert set(splits) == set(range(1, 10))  # both parts non-empty, every split point drawn
    assert max(splits.values()) < 2.2 * min(splits.values())


@pytest.mark.parametrize("objective", T5_OBJECTIVES)
def test_empty_and_one_token_texts(t5_tok, objective):
    collator = DataCollatorForT5Pretraining(t5_tok, objective=objective, seed=0)
    eos, x0 = t5_tok.eos_token_id, sentinel_token_ids(t5_tok)[0]
    (empty_x, empty_y), (one_x, one_y) = rows(collator([[], [7]]))
    assert empty_x[-1] == empty_y[-1] == one_x[-1] == one_y[-1] == eos
    if objective == "span_corruption":  # nothing to corrupt: only the final sentinel in the target
        assert (empty_x, empty_y, one_x, one_y) == ([eos], [x0, eos], [7, eos], [x0, eos])


def test_without_eos(t5_tok):
    collator = DataCollatorForT5Pretraining(t5_tok, objective="prefix_lm", add_eos_token=False, seed=0)
    ((x, y),) = rows(collator([[5, 6, 7]]))
    assert x + y == [5, 6, 7]


# ----------------------------------------------------------------------------------------------
# BART
# ----------------------------------------------------------------------------------------------


def test_text_infilling_reconstruction_rate_and_poisson_mean():
    rng = np.random.default_rng(0)
    ids = np.arange(10, 210)
    MASK = 1
    lengths, non_last, masked, zero = [], [], 0, 0
    for _ in range(400):
        noised, spans = text_infilling(ids, MASK, 0.3, 3.0, rng)
        assert int((noised == MASK).sum()) == len(spans)
        # each mask, left to right, stands for its recorded span
        rebuilt, j = [], 0
        for t in noised.tolist():
            if t == MASK:
                start, length = spans[j]
                rebuilt.extend(ids[start : start + length].tolist())
                j += 1
            else:
                rebuilt.append(t)
        assert rebuilt == ids.tolist()
        starts = [s for s, _ in spans]
        assert starts == sorted(starts)
        assert all(s1 >= s0 + l0 for (s0, l0), (s1, _) in zip(spans, spans[1:]))  # no overlap
        lengths += [length for _, length in spans]
        non_last += [length for _, length in spans[:-1]]  # the last one is cut to fit the budget
        masked += sum(length for _, length in spans)
        zero += sum(length == 0 for _, length in spans)
    assert abs(masked / (400 * ids.size) - 0.3) < 0.002
    assert abs(np.mean(non_last) - 3.0) < 0.15
    assert abs(zero / len(lengths) - np.exp(-3.0)) < 0.02  # 0-length spans insert a mask


def test_text_infilling_expected_rate_on_short_texts():
    rng = np.random.default_rng(0)
    masked = sum(
        sum(length for _, length in text_infilling(np.arange(7), 99, 0.3, 3.0, rng)[1]) for _ in range(4000)
    )
    assert abs(masked / (4000 * 7) - 0.3) < 0.01  # stochastic rounding of 2.1 tokens
    assert text_infilling(np.arange(5), 99, 0.0, 3.0, rng)[1] == []


def test_sentence_permutation_keeps_the_sentences():
    rng = np.random.default_rng(0)
    END = 0
    ids = np.array([5, 6, END, 7, END, 8, 9, 9, END, 10, END, 11, 12])  # the last sentence has no end
    sentences = [s.tolist() for s in split_sentences_ids(ids, [END])]
    assert sentences == [[5, 6, END], [7, END], [8, 9, 9, END], [10, END], [11, 12]]
    orders = set()
    for _ in range(200):
        permuted, order = permute_sentences(ids, [END], 1.0, rng)
        again = [s.tolist() for s in split_sentences_ids(permuted, [END])]
        assert permuted.tolist() == sum((sentences[i] for i in order), [])
        assert sorted(map(tuple, sentences)) == sorted(map(tuple, [sentences[i] for i in order]))
        assert len(again) >= len(sentences) - 1  # the unterminated sentence may merge with the next
        orders.add(tuple(order))
    assert len(orders) > 50  # 5! = 120 orders
    assert permute_sentences(ids, [END], 0.0, rng)[0].tolist() == ids.tolist()
    # ratio 0.4 of 5 sentences: 2 chosen, so at most 2 move
    for _ in range(50):
        order = permute_sentences(ids, [END], 0.4, rng)[1]
        assert (order != np.arange(5)).sum() in (0, 2)


def test_document_rotation():
    rng = np.random.default_rng(0)
    ids = np.arange(20, 30)
    offsets = set()
    for _ in range(300):
        rotated, offset = rotate_document(ids, rng)
        assert rotated.tolist() == ids[offset:].tolist() + ids[:offset].tolist()
        offsets.add(offset)
    assert offsets == set(range(1, 10))
    assert rotate_document(np.array([4]), rng)[0].tolist() == [4]


def bart(tok, **kwargs):
    """A BART collator with every noise off unless asked."""
    off = dict(text_infilling_ratio=0.0, sentence_permutation_ratio=0.0, seed=0)
    return DataCollatorForBartDenoising(tok, **{**off, **kwargs})


def test_bart_defaults_are_bart_large(bart_tok):
    collator = DataCollatorForBartDenoising(bart_tok, seed=0)
    assert (collator.text_infilling_ratio, collator.poisson_lambda, collator.sentence_permutation_ratio) == (
        0.3,
        3.0,
        1.0,
    )
    texts = [bart_tok(t, add_special_tokens=False)["input_ids"] for t in CORPUS[:3]] + random_texts(
        bart_tok, 8
    )
    for text, (x, y) in zip(texts, rows(collator(texts))):
        assert y == text + [bart_tok.eos_token_id] and x[-1] == bart_tok.eos_token_id
        assert bart_tok.mask_token_id in x


def test_bart_text_infilling_collator_rate(bart_tok):
    collator = bart(bart_tok, text_infilling_ratio=0.3)
    texts = random_texts(bart_tok, n=256)
    kept = total = 0
    for text, (x, y) in zip(texts, rows(collator(texts))):
        assert y[:-1] == text
        unmasked = [t for t in x[:-1] if t != bart_tok.mask_token_id]
        assert is_subsequence(unmasked, text)
        kept += len(unmasked)
        total += len(text)
    assert abs(1 - kept / total - 0.3) < 0.005


def test_bart_sentence_permutation_collator(bart_tok):
    collator = bart(bart_tok, sentence_permutation_ratio=1.0)
    ends = sorted({bart_tok.convert_tokens_to_ids(t) for t in ".!?"} | {bart_tok.eos_token_id})
    texts = [bart_tok(" ".join(CORPUS[i : i + 3]), add_special_tokens=False)["input_ids"] for i in range(3)]
    texts = [t[:-1] + [bart_tok.eos_token_id] + t for t in texts]  # two documents packed with EOS
    changed = 0
    for text, (x, y) in zip(texts, rows(collator(texts))):
        assert y == text + [bart_tok.eos_token_id]
        x = x[:-1]
        # every sentence of these texts ends with an end token, so the sentences are the same
        assert sorted(map(tuple, split_sentences_ids(np.array(x), ends))) == sorted(
            map(tuple, split_sentences_ids(np.array(text), ends))
        )
        changed += x != text
    assert changed > 0


def test_bart_rotation_collator(bart_tok):
    collator = bart(bart_tok, document_rotation_prob=1.0)
    texts = random_texts(bart_tok, n=32)
    for text, (x, _) in zip(texts, rows(collator(texts))):
        x = x[:-1]
        assert x != text and any(x == text[k:] + text[:k] for k in range(1, len(text)))
    half = bart(bart_tok, document_rotation_prob=0.5)
    rotated = sum(x[:-1] != y[:-1] for x, y in rows(half(random_texts(bart_tok, n=400))))
    assert 150 < rotated < 250


def test_bart_token_masking_and_deletion_rates(bart_tok):
    texts = random_texts(bart_tok, n=256)
    total = sum(map(len, texts))
    masking = bart(bart_tok, token_masking_ratio=0.2)
    masked = 0
    for x, y in rows(masking(texts)):
        assert len(x) == len(y) and all(a == b or a == bart_tok.mask_token_id for a, b in zip(x, y))
        masked += sum(t == bart_tok.mask_token_id for t in x)
    assert abs(masked / total - 0.2) < 0.01
    deletion = bart(bart_tok, token_deletion_ratio=0.1)
    kept = 0
    for text, (x, _) in zip(texts, rows(deletion(texts))):
        assert is_subsequence(x[:-1], text)
        kept += len(x) - 1
    assert abs(1 - kept / total - 0.1) < 0.01


def test_bart_all_noises_together_and_bos(bart_tok):
    collator = DataCollatorForBartDenoising(
        bart_tok,
        token_masking_ratio=0.1,
        token_deletion_ratio=0.1,
        document_rotation_prob=0.5,
        add_bos_token=True,
        pad_to_multiple_of=8,
        seed=0,
    )
    texts = random_texts(bart_tok, n=16)
    batch = collator(texts)
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["labels"].shape[1] % 8 == 0
    for text, (x, y) in zip(texts, rows(batch)):
        assert y == [bart_tok.bos_token_id, *text, bart_tok.eos_token_id]
        assert x[0] == bart_tok.bos_token_id and x[-1] == bart_tok.eos_token_id


# ----------------------------------------------------------------------------------------------
# Shared behaviour: inputs, padding, randomness, errors
# ----------------------------------------------------------------------------------------------


def test_example_formats_and_padding(t5_tok):
    collator = DataCollatorForT5Pretraining(t5_tok, objective="prefix_lm", seed=0)
    text = "Thank you for inviting me"
    ids = t5_tok(text, add_special_tokens=False)["input_ids"]
    formats = [
        text,
        ids,
        torch.tensor(ids),
        np.array(ids),
        {"input_ids": ids},
        {"input_ids": ids + [0, 0], "attention_mask": [1] * len(ids) + [0, 0]},  # padding dropped
    ]
    for example in formats:
        collator.generator = torch.Generator().manual_seed(0)
        ((x, y),) = rows(collator([example]))
        assert x[:-1] + y[:-1] == ids
    batch = DataCollatorForT5Pretraining(t5_tok, objective="deshuffle", seed=0)([[5, 6, 7], [8]])
    assert batch["input_ids"][1].tolist() == [8, t5_tok.eos_token_id, 0, 0]  # right-padded with <pad>
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["labels"][1].tolist() == [8, t5_tok.eos_token_id, -100, -100]
    assert all(v.dtype == torch.long for v in batch.values())


@pytest.mark.parametrize("objective", T5_OBJECTIVES)
def test_seeds_make_draws_reproducible_and_calls_differ(t5_tok, objective):
    texts = random_texts(t5_tok, n=8)
    a = DataCollatorForT5Pretraining(t5_tok, objective=objective, seed=3)
    b = DataCollatorForT5Pretraining(t5_tok, objective=objective, seed=3)
    first, second, again = a(texts), a(texts), b(texts)
    assert first.keys() == again.keys() == {"input_ids", "attention_mask", "labels"}
    assert all(torch.equal(first[key], again[key]) for key in first)
    assert not torch.equal(first["input_ids"], second["input_ids"])  # a new draw at every call
    other = DataCollatorForT5Pretraining(t5_tok, objective=objective, seed=4)(texts)
    assert not torch.equal(first["input_ids"], other["input_ids"])


def test_bart_seed_generator_and_worker_streams(bart_tok, monkeypatch):
    texts = random_texts(bart_tok, n=8)
    one = DataCollatorForBartDenoising(bart_tok, seed=7)(texts)
    assert torch.equal(one["input_ids"], DataCollatorForBartDenoising(bart_tok, seed=7)(texts)["input_ids"])
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    from_g1 = DataCollatorForBartDenoising(bart_tok, generator=g1)(texts)["input_ids"]
    assert torch.equal(from_g1, DataCollatorForBartDenoising(bart_tok, generator=g2)(texts)["input_ids"])

    # each DataLoader worker draws its own stream from (seed, worker id)
    class Info:
        def __init__(self, id):
            self.id = id

    draws = {}
    for worker in (0, 1):
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda w=worker: Info(w))
        draws[worker] = DataCollatorForBartDenoising(bart_tok, seed=7)(texts)["input_ids"]
    assert torch.equal(draws[0], one["input_ids"]) and not torch.equal(draws[0], draws[1])


def test_global_rng_without_seed(t5_tok):
    collator = DataCollatorForT5Pretraining(t5_tok)
    texts = random_texts(t5_tok, n=8)
    torch.manual_seed(0)
    a = collator(texts)["input_ids"]
    torch.manual_seed(0)
    assert torch.equal(a, collator(texts)["input_ids"])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(objective="mlm"), "objective"),
        (dict(noise_density=1.0), "noise_density"),
        (dict(noise_density=-0.1), "noise_density"),
        (dict(mean_noise_span_length=0), "mean_noise_span_length"),
        (dict(mask_replace_prob=1.5), "mask_replace_prob"),
        (dict(mask_replace_prob=0.9, random_replace_prob=0.2), "random_replace_prob"),
        (dict(final_sentinel=1), "final_sentinel"),
        (dict(add_eos_token="yes"), "add_eos_token"),
        (dict(pad_to_multiple_of=0), "pad_to_multiple_of"),
        (dict(seed=-1), "seed"),
        (dict(seed=0, generator=torch.Generator()), "mutually exclusive"),
        (dict(generator=0), "generator"),
    ],
)
def test_t5_bad_arguments(t5_tok, kwargs, match):
    with pytest.raises(ValueError, match=match):
        DataCollatorForT5Pretraining(t5_tok, **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(text_infilling_ratio=1.2), "text_infilling_ratio"),
        (dict(poisson_lambda=0.0), "poisson_lambda"),
        (dict(poisson_lambda=float("inf")), "poisson_lambda"),
        (dict(sentence_permutation_ratio=-1), "sentence_permutation_ratio"),
        (dict(token_masking_ratio="0.1"), "token_masking_ratio"),
        (dict(token_deletion_ratio=2), "token_deletion_ratio"),
        (dict(document_rotation_prob=True), "document_rotation_prob"),
        (dict(sentence_end_ids=[10**6]), "sentence_end_ids"),
        (dict(sentence_end_ids="."), "sentence_end_ids"),
        (dict(add_bos_token=None), "add_bos_token"),
    ],
)
def test_bart_bad_arguments(bart_tok, kwargs, match):
    with pytest.raises(ValueError, match=match):
        DataCollatorForBartDenoising(bart_tok, **kwargs)


def test_tokenizers_missing_what_the_objective_needs(t5_tok):
    plain = train_tokenizer(CORPUS, kind="char", vocab_size=64, special_tokens=T5_SPECIAL_TOKENS)
    with pytest.raises(ValueError, match="`tokenizer` has no sentinel"):
        DataCollatorForT5Pretraining(plain)
    DataCollatorForT5Pretraining(plain, objective="prefix_lm")  # needs none
    with pytest.raises(ValueError, match="neither a mask_token nor a sentinel"):
        DataCollatorForT5Pretraining(plain, objective="bert_style")
    random_only = DataCollatorForT5Pretraining(plain, objective="bert_style", mask_replace_prob=0.0, seed=0)
    assert random_only([[5] * 50])["labels"][0, :-1].tolist() == [5] * 50
    with pytest.raises(ValueError, match="`tokenizer` has no mask_token"):
        DataCollatorForBartDenoising(t5_tok)  # T5's tokens: no <mask>
    no_pad = train_tokenizer(CORPUS, kind="char", vocab_size=64, special_tokens={"unk_token": "<unk>"})
    with pytest.raises(ValueError, match="`tokenizer` has no pad_token"):
        DataCollatorForT5Pretraining(no_pad, objective="deshuffle")
    no_eos = train_tokenizer(
        CORPUS, kind="char", vocab_size=64, special_tokens={"unk_token": "<unk>", "pad_token": "<pad>"}
    )
    with pytest.raises(ValueError, match="`tokenizer` has no eos_token"):
        DataCollatorForT5Pretraining(no_eos, objective="deshuffle")
    DataCollatorForT5Pretraining(no_eos, objective="deshuffle", add_eos_token=False)
    with pytest.raises(ValueError, match="bos_token"):
        DataCollatorForBartDenoising(t5_tok, text_infilling_ratio=0, add_bos_token=True)
    no_ends = train_tokenizer(
        ["abc"] * 5,
        kind="char",
        vocab_size=16,
        special_tokens={"unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"},
    )
    with pytest.raises(ValueError, match="`sentence_end_ids`"):
        DataCollatorForBartDenoising(no_ends, add_eos_token=False)


@pytest.mark.parametrize(
    "examples, match",
    [
        ([], "non-empty"),
        ({"input_ids": [5]}, "non-empty"),
        ([{"text": "hi"}], "no 'input_ids'"),
        ([{"input_ids": [5], "labels": [5]}], "unknown keys"),
        ([[5, 10**6]], "outside"),
        ([[-1]], "outside"),
        ([[[5, 6]]], "1-D"),
        ([[0.5]], "1-D"),
        ([{"input_ids": [5, 6], "attention_mask": [1]}], "attention_mask"),
    ],
)
def test_bad_examples(t5_tok, examples, match):
    with pytest.raises(ValueError, match=match):
        DataCollatorForT5Pretraining(t5_tok, seed=0)(examples)


def test_noise_function_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="noise_density"):
        random_spans_noise_mask(10, 1.0, 3.0, rng)
    with pytest.raises(ValueError, match="length"):
        iid_noise_mask(-1, 0.1, rng)
    with pytest.raises(ValueError, match="mask_ratio"):
        text_infilling(np.arange(5), 0, 1.5, 3.0, rng)
    with pytest.raises(ValueError, match="inputs_length"):
        span_corruption_lengths(0)
    with pytest.raises(ValueError, match="noise_mask"):
        noise_spans_to_sentinels(np.arange(5), np.zeros(4, dtype=bool), [99])
