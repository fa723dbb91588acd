"""The offline `evaluate` modules `hf_lm/metrics/bleu` (sacrebleu) and `hf_lm/metrics/rouge` (rouge-score).

Each is checked against hand computations on small examples and against direct calls of the
library it wraps.
"""

from __future__ import annotations

import math
import os

import pytest
import sacrebleu
from conftest import REPO_ROOT
from rouge_score import rouge_scorer

BLEU_DIR = os.path.join(REPO_ROOT, "hf_lm", "metrics", "bleu")
ROUGE_DIR = os.path.join(REPO_ROOT, "hf_lm", "metrics", "rouge")


def load_offline(location: str):
    import evaluate

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_EVALUATE_OFFLINE", "1")
        return evaluate.load(location, keep_in_memory=True)


@pytest.fixture(scope="module", params=["folder", "file"])
def bleu(request):
    return load_offline(BLEU_DIR if request.param == "folder" else os.path.join(BLEU_DIR, "bleu.py"))


@pytest.fixture(scope="module", params=["folder", "file"])
def rouge(request):
    return load_offline(ROUGE_DIR if request.param == "folder" else os.path.join(ROUGE_DIR, "rouge.py"))


# -------------------------------------------------------------------------------------------------
# BLEU
# -------------------------------------------------------------------------------------------------

BLEU_KEYS = {"score", "counts", "totals", "precisions", "bp", "sys_len", "ref_len", "signature"}


def test_bleu_perfect_match_is_100(bleu):
    texts = ["the cat sat on the mat", "a dog ran in the park"]
    result = bleu.compute(predictions=texts, references=texts)
    assert result.keys() == BLEU_KEYS
    assert result["score"] == pytest.approx(100.0)
    assert result["precisions"] == pytest.approx([100.0] * 4)
    assert result["bp"] == 1.0 and result["sys_len"] == result["ref_len"] == 12
    assert result["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")


def test_bleu_partial_match_by_hand(bleu):
    result = bleu.compute(predictions=["the cat is on the mat"], references=[["the cat sat on the mat"]])
    # matched 1..4-grams: the cat / cat / on / the / mat; the cat, on the, the mat; on the mat; none
    assert result["counts"] == [5, 3, 1, 0] and result["totals"] == [6, 5, 4, 3]
    # sacrebleu's "exp" smoothing replaces the zero 4-gram precision by 1 / (2 * 3)
    by_hand = 100 * math.exp((math.log(5 / 6) + math.log(3 / 5) + math.log(1 / 4) + math.log(1 / 6)) / 4)
    assert result["score"] == pytest.approx(by_hand) == pytest.approx(37.9918, abs=1e-4)
    assert result["precisions"] == pytest.approx([500 / 6, 60.0, 25.0, 100 / 6])
    direct = sacrebleu.corpus_bleu(["the cat is on the mat"], [["the cat sat on the mat"]])
    assert result["score"] == pytest.approx(direct.score)


def test_bleu_brevity_penalty_by_hand(bleu):
    # every n-gram of the 4-word hypothesis matches; only its length is short of the reference's 6
    result = bleu.compute(predictions=["the cat sat on"], references=["the cat sat on the mat"])
    assert result["precisions"] == pytest.approx([100.0] * 4)
    assert result["bp"] == pytest.approx(math.exp(1 - 6 / 4))
    assert result["score"] == pytest.approx(100 * math.exp(-0.5))
    assert (result["sys_len"], result["ref_len"]) == (4, 6)


def test_bleu_is_corpus_level_and_matches_sacrebleu(bleu):
    predictions = ["the cat is on the mat", "hello there", "a big red ball , near the old town ."]
    references = [
        ["the cat sat on the mat", "a cat is on a mat"],
        ["hello there general"],  # fewer references than the others
        ["a big red ball near the old town.", "the red ball is near the town.", "red ball."],
    ]
    result = bleu.compute(predictions=predictions, references=references)
    # sacrebleu's transposed reference streams, None where a prediction has fewer references
    streams = [[refs[k] if k < len(refs) else None for refs in references] for k in range(3)]
    direct = sacrebleu.corpus_bleu(predictions, streams)
    assert result["score"] == pytest.approx(direct.score)
    assert result["counts"] == direct.counts and result["totals"] == direct.totals
    assert (result["sys_len"], result["ref_len"]) == (direct.sys_len, direct.ref_len)
    assert result["bp"] == pytest.approx(direct.bp)
    assert "nrefs:var" in result["signature"]
    sentence_mean = sum(
        sacrebleu.sentence_bleu(p, [r for r in refs]).score for p, refs in zip(predictions, references)
    ) / len(predictions)
    assert result["score"] != pytest.approx(sentence_mean)


def test_bleu_references_as_strings_or_lists(bleu):
    predictions = ["the cat is on the mat", "hello there"]
    as_strings = bleu.compute(
        predictions=predictions, references=["the cat sat on the mat", "hello there general"]
    )
    as_lists = bleu.compute(
        predictions=predictions, references=[["the cat sat on the mat"], ["hello there general"]]
    )
    assert as_strings == as_lists


def test_bleu_options(bleu):
    # 13a splits punctuation off words; "none" keeps "world!" as one token
    hypothesis, reference = "hello world! how are you today?", "hello world ! how are you today ?"
    assert bleu.compute(predictions=[hypothesis], references=[reference])["score"] == pytest.approx(100.0)
    none = bleu.compute(predictions=[hypothesis], references=[reference], tokenize="none")
    assert 0 < none["score"] < 100 and "tok:none" in none["signature"]
    assert none["score"] == pytest.approx(
        sacrebleu.corpus_bleu([hypothesis], [[reference]], tokenize="none").score
    )
    assert bleu.compute(predictions=["The Cat"], references=["the cat"])["counts"][0] == 0
    assert bleu.compute(predictions=["The Cat"], references=["the cat"], lowercase=True)["counts"][0] == 2
    floor = bleu.compute(
        predictions=["the cat is on the mat"],
        references=["the cat sat on the mat"],
        smooth_method="floor",
        smooth_value=0.1,
    )
    direct = sacrebleu.corpus_bleu(
        ["the cat is on the mat"], [["the cat sat on the mat"]], smooth_method="floor", smooth_value=0.1
    )
    assert floor["score"] == pytest.approx(direct.score)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(predictions=["a b"], references=["a b"], tokenize="moses"), "`tokenize` must be one of"),
        (
            dict(predictions=["a b"], references=["a b"], smooth_method="laplace"),
            "`smooth_method` must be one of",
        ),
        (dict(predictions=["a b"], references=[[]]), "no reference"),
    ],
)
def test_bleu_errors(bleu, kwargs, match):
    with pytest.raises(ValueError, match=match):
        bleu.compute(**kwargs)


def test_bleu_mismatched_lengths(bleu):
    with pytest.raises(ValueError):
        bleu.compute(predictions=["a b", "c d"], references=["a b"])


# -------------------------------------------------------------------------------------------------
# ROUGE
# -------------------------------------------------------------------------------------------------

ROUGE_TYPES = ["rouge1", "rouge2", "rougeL", "rougeLsum"]


def test_rouge_perfect_match_is_1(rouge):
    texts = ["the cat sat on the mat", "a dog ran in the park"]
    assert rouge.compute(predictions=texts, references=texts) == {key: 1.0 for key in ROUGE_TYPES}


def test_rouge_partial_match_by_hand(rouge):
    result = rouge.compute(predictions=["the cat is on the mat"], references=["the cat sat on the mat"])
    # unigrams: 5 of 6 match both ways; bigrams: "the cat", "on the", "the mat" = 3 of 5;
    # longest common subsequence "the cat on the mat" = 5 of 6
    assert result == pytest.approx({"rouge1": 5 / 6, "rouge2": 3 / 5, "rougeL": 5 / 6, "rougeLsum": 5 / 6})
    # unequal lengths: rouge1 P = 2/2, R = 2/4, F = 2PR / (P + R) = 2/3
    short = rouge.compute(predictions=["the cat"], references=["the cat sat down"], rouge_types=["rouge1"])
    assert short == pytest.approx({"rouge1": 2 / 3})


def test_rouge_matches_rouge_score_and_averages(rouge):
    predictions = ["the cat is on the mat", "hello there", "a b\nc d"]
    references = ["the cat sat on the mat", "general kenobi hello there", "c d\na b"]
    per_example = rouge.compute(predictions=predictions, references=references, use_aggregator=False)
    scorer = rouge_scorer.RougeScorer(ROUGE_TYPES)
    direct = [scorer.score(ref, pred) for pred, ref in zip(predictions, references)]
    for key in ROUGE_TYPES:
        assert per_example[key] == pytest.approx([scores[key].fmeasure for scores in direct])
    aggregated = rouge.compute(predictions=predictions, references=references)
    assert aggregated == pytest.approx({key: sum(values) / 3 for key, values in per_example.items()})
    # rougeL: the LCS of "a b c d" and "c d a b" is 2 tokens; rougeLsum matches each reference
    # sentence against the prediction's sentences (union LCS), so both sentences match fully
    assert (per_example["rougeL"][2], per_example["rougeLsum"][2]) == pytest.approx((0.5, 1.0))


def test_rouge_several_references_keep_the_best(rouge):
    result = rouge.compute(
        predictions=["a b c"],
        references=[["x y z", "a b d"]],
        rouge_types=["rouge1", "rouge2"],
        use_aggregator=False,
    )
    assert result["rouge1"] == pytest.approx([2 / 3]) and result["rouge2"] == pytest.approx([1 / 2])
    direct = rouge_scorer.RougeScorer(["rouge1"]).score_multi(["x y z", "a b d"], "a b c")
    assert result["rouge1"][0] == pytest.approx(direct["rouge1"].fmeasure)


def test_rouge_stemmer_and_tokenizer(rouge):
    kwargs = dict(predictions=["running dogs"], references=["the dog runs"], rouge_types=["rouge1"])
    assert rouge.compute(**kwargs) == {"rouge1": 0.0}
    # Porter stems: run, dog against the, dog, run: P = 2/2, R = 2/3
    assert rouge.compute(**kwargs, use_stemmer=True) == pytest.approx({"rouge1": 0.8})
    # the default tokenizer lowercases and drops punctuation; str.split keeps both
    kwargs = dict(predictions=["Hello, World"], references=["hello world"], rouge_types=["rouge1"])
    assert rouge.compute(**kwargs) == {"rouge1": 1.0}
    assert rouge.compute(**kwargs, tokenizer=str.split) == {"rouge1": 0.0}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rouge_types=["rouge0"]), "Unknown rouge type"),
        (dict(rouge_types="rouge1"), "non-empty list"),
        (dict(rouge_types=[]), "non-empty list"),
        (dict(tokenizer="split"), "`tokenizer` must be a function"),
    ],
)
def test_rouge_errors(rouge, kwargs, match):
    with pytest.raises(ValueError, match=match):
        rouge.compute(predictions=["a b"], references=["a b"], **kwargs)
