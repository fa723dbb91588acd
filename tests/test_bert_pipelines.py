"""transformers pipelines on saved BERT-family folders, and hf_lm's extractive question answering.

Every pipeline loads a tiny model from a folder written by `save_pretrained` (weights, config with
`auto_map`, model code, tokenizer). Random models are checked for structure and for agreement with
a direct forward; where an exact answer is wanted, the model is made to point at chosen tokens
(see `point_at_tokens`), so the expected output is known without training.
"""

from __future__ import annotations

import copy
import json
import os

import pytest
import torch
from remote_code import run_fresh_interpreter
from transformers import AutoTokenizer, pipeline

from hf_lm import (
    HfLmBertConfig,
    HfLmBertForMaskedLM,
    HfLmBertForQuestionAnswering,
    HfLmBertForSequenceClassification,
    HfLmBertForTokenClassification,
)
from hf_lm.pipelines import QA_TASK, QA_TASK_ALIAS, HfLmQuestionAnsweringPipeline
from training.data.tokenizer import train_tokenizer

SHIPPED_BERT_FILES = {
    "hflm_attention.py",
    "hflm_layers.py",
    "hflm_masks.py",
    "hflm_positions.py",
    "hflm_stack.py",
    "hflm_common.py",
    "hflm_inputs.py",
    "hflm_losses.py",
    "hflm_pretrained.py",
    "hflm_configuration_base.py",
    "hflm_configuration_bert.py",
    "hflm_modeling_bert.py",
}

BERT_SPECIAL_TOKENS = {
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "mask_token": "[MASK]",
}

CORPUS = [
    "Alice lives in Paris and Bob lives in London.",
    "The cat sat on the mat near the door.",
    "A dog ran in the park with a red ball.",
    "Where is the cat? The cat is on the mat.",
    "Who lives in Paris? Alice lives in Paris.",
    "What is the capital of France? Paris is the capital of France.",
    "The river flows through the old town to the sea.",
    "Ships wait in the golden harbor at night.",
    "The treasure is hidden in the golden harbor.",
    "Bob met Alice at the station in the morning.",
    "The old town has a small market and a quiet park.",
    "Children play near the river when the sun is warm.",
    "The train to London leaves the station at noon.",
    "A bird sings on the roof of the old house.",
    "The market sells bread, fish and fresh fruit.",
    "Where is the treasure hidden?",
] * 3

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
# a story with the answer only at its end: the context needs several windows
FILLER = (
    "The cat sat on the mat near the door. A dog ran in the park with a red ball. "
    "The river flows through the old town to the sea. The market sells bread, fish and fresh fruit. "
    "Children play near the river when the sun is warm. A bird sings on the roof of the old house. "
)
STORY = FILLER + "The treasure is hidden in the golden harbor."


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(
        CORPUS,
        kind="wordpiece",
        vocab_size=400,
        special_tokens=BERT_SPECIAL_TOKENS,
        padding_side="right",
        model_max_length=64,
    )


def tiny_bert_config(tok, **overrides) -> HfLmBertConfig:
    kwargs = dict(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
    )
    kwargs.update(overrides)
    return HfLmBertConfig(**kwargs)


def save(model, tok, folder):
    """A Hub-style folder: weights, config with auto_map, model code and tokenizer."""
    model.eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def token_id(tok, word: str) -> int:
    ids = tok(word, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, f"{word!r} is not one token of the test vocabulary: {tok.tokenize(word)}"
    return ids[0]


def directions(width: int, count: int) -> torch.Tensor:
    """`count` orthogonal (width,) vectors with zero mean and unit variance: LayerNorm leaves them as they are."""
    g = torch.Generator().manual_seed(0)
    basis = torch.cat([torch.ones(width, 1), torch.randn(width, count, generator=g)], dim=1)
    q, _ = torch.linalg.qr(basis)  # (width, count + 1); column 0 is the all-ones direction
    return q[:, 1:].T * width**0.5  # (count, width), each orthogonal to ones, so zero mean


@torch.no_grad()
def point_at_tokens(encoder, rows: dict[int, torch.Tensor]) -> None:
    """Make `encoder`'s last hidden state at a token equal to a chosen direction, and 0 against the others.

    Every residual branch of the post-norm blocks outputs 0 and positions and segments vanish, so
    each block is LayerNorm(x + 0) and the output at a token is LayerNorm(its embedding). Token
    `i` in `rows` gets the embedding rows[i]; every other embedding loses its components along the
    directions, so a head whose weight rows are those directions reads exactly which token it sees.
    """
    encoder.positions.embeddings.weight.zero_()
    encoder.token_type_embeddings.weight.zero_()
    for layer in encoder.layers:
        for proj in (layer.self_attn.o_proj, layer.mlp.down_proj):
            proj.weight.zero_()
            proj.bias.zero_()
    embeddings = encoder.embed_tokens.weight  # (V, C)
    basis = torch.stack(list(rows.values()))  # (k, C)
    basis = torch.linalg.qr(basis.T)[0].T  # (k, C) orthonormal rows spanning the directions
    embeddings -= (embeddings @ basis.T) @ basis
    for index, vector in rows.items():
        embeddings[index] = vector


# ----------------------------------------------------------------------------------------------
# transformers' own pipelines on BERT-family folders
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlm(tok, tmp_path_factory):
    torch.manual_seed(0)
    model = HfLmBertForMaskedLM(tiny_bert_config(tok)).eval()
    return save(model, tok, tmp_path_factory.mktemp("mlm")), model


@pytest.fixture(scope="module")
def classifier(tok, tmp_path_factory):
    torch.manual_seed(1)
    id2label = {0: "negative", 1: "neutral", 2: "positive"}
    config = tiny_bert_config(tok, id2label=id2label, label2id={v: k for k, v in id2label.items()})
    model = HfLmBertForSequenceClassification(config).eval()
    return save(model, tok, tmp_path_factory.mktemp("clf")), model


@pytest.fixture(scope="module")
def tagger(tok, tmp_path_factory):
    """A token classifier that tags exactly "Alice" as B-PER and "Paris" as B-LOC, everything else O."""
    torch.manual_seed(2)
    config = tiny_bert_config(
        tok, id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)}
    )
    model = HfLmBertForTokenClassification(config).eval()
    alice, paris = directions(config.hidden_size, 2)
    point_at_tokens(model.model, {token_id(tok, "Alice"): alice, token_id(tok, "Paris"): paris})
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        model.classifier.weight[LABELS.index("B-PER")] = alice * 10 / config.hidden_size  # logit 10 on Alice
        model.classifier.weight[LABELS.index("B-LOC")] = paris * 10 / config.hidden_size
        model.classifier.bias[LABELS.index("O")] = 5.0  # O wins wherever no name is seen
    return save(model, tok, tmp_path_factory.mktemp("ner")), model


def test_saved_bert_folders_ship_only_the_bert_code(mlm, classifier, tagger):
    for folder in (mlm[0], classifier[0], tagger[0]):
        assert {name for name in os.listdir(folder) if name.endswith(".py")} == SHIPPED_BERT_FILES


def test_fill_mask_agrees_with_the_model(mlm, tok):
    folder, model = mlm
    fill = pipeline("fill-mask", model=folder, trust_remote_code=True)
    text = f"The cat sat on the {tok.mask_token}."
    results = fill(text, top_k=5)

    assert len(results) == 5
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True) and sum(scores) <= 1.0 + 1e-6
    for r in results:
        assert set(r) == {"score", "token", "token_str", "sequence"}
        assert tok.mask_token not in r["sequence"] and r["sequence"].startswith("The cat sat on the")
    enc = tok(text, return_tensors="pt")
    mask_position = int((enc["input_ids"][0] == tok.mask_token_id).nonzero())
    with torch.no_grad():
        probs = model(**enc).logits[0, mask_position].softmax(-1)  # (V,)
    top = probs.topk(5)
    assert [r["token"] for r in results] == top.indices.tolist()  # the top token is the model's argmax
    torch.testing.assert_close(torch.tensor(scores), top.values, rtol=1e-4, atol=1e-6)


def test_text_classification_uses_the_config_labels(classifier, tok):
    folder, model = classifier
    clf = pipeline("text-classification", model=folder, trust_remote_code=True)
    texts = ["The cat sat on the mat.", "Bob met Alice at the station in the morning."]
    outputs = clf(texts)
    with torch.no_grad():
        probs = model(**tok(texts, padding=True, return_tensors="pt")).logits.softmax(-1)  # (2, 3)
    for out, p in zip(outputs, probs):
        assert out["label"] == model.config.id2label[int(p.argmax())]
        assert out["score"] == pytest.approx(float(p.max()), abs=1e-5)
    every_label = clf(texts[0], top_k=None)
    assert {o["label"] for o in every_label} == {"negative", "neutral", "positive"}
    assert sum(o["score"] for o in every_label) == pytest.approx(1.0, abs=1e-5)


def test_token_classification_groups_entities_with_word_offsets(tagger, tok):
    folder, model = tagger
    ner = pipeline(
        "token-classification", model=folder, trust_remote_code=True, aggregation_strategy="simple"
    )
    text = "Bob met Alice at the station, then Alice went to Paris."
    entities = ner(text)
    assert [(e["entity_group"], e["word"], e["start"], e["end"]) for e in entities] == [
        ("PER", "Alice", 8, 13),
        ("PER", "Alice", 35, 40),
        ("LOC", "Paris", 49, 54),
    ]
    assert all(text[e["start"] : e["end"]] == e["word"] for e in entities)
    with torch.no_grad():
        probs = model(**tok(text, return_tensors="pt")).logits[0].softmax(-1)  # (T, labels)
    alice = tok(text)["input_ids"].index(token_id(tok, "Alice"))
    assert float(entities[0]["score"]) == pytest.approx(float(probs[alice, LABELS.index("B-PER")]), abs=1e-5)


def test_token_classification_on_a_random_model_returns_valid_spans(tok, tmp_path):
    config = tiny_bert_config(
        tok, id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)}
    )
    folder = save(HfLmBertForTokenClassification(config), tok, tmp_path)
    ner = pipeline(
        "token-classification", model=folder, trust_remote_code=True, aggregation_strategy="simple"
    )
    text = "Alice lives in Paris and Bob lives in London."
    for entity in ner(text):
        assert entity["entity_group"] in {"PER", "LOC"}
        assert 0 <= entity["start"] < entity["end"] <= len(text) and 0.0 <= entity["score"] <= 1.0
        # the word is decoded from WordPiece tokens: equal to the text span up to spacing
        assert entity["word"].replace(" ", "") == text[entity["start"] : entity["end"]].replace(" ", "")


def test_feature_extraction_returns_the_last_hidden_state(mlm, tok):
    """A folder saved from the masked-LM head serves `AutoModel` too (auto_map lists it)."""
    folder, model = mlm
    extractor = pipeline("feature-extraction", model=folder, trust_remote_code=True)
    text = "Where is the cat?"
    features = extractor(text, return_tensors=True)  # (1, T, C)
    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        hidden = model.model(**enc).last_hidden_state
    assert features.shape == hidden.shape == (1, enc["input_ids"].shape[1], model.config.hidden_size)
    torch.testing.assert_close(features, hidden, rtol=1e-5, atol=1e-5)
    as_lists = extractor(text)
    assert (len(as_lists), len(as_lists[0]), len(as_lists[0][0])) == tuple(hidden.shape)


REMOTE_SCRIPT = """
    import json
    import sys

    sys.modules["hf_lm"] = None  # hf_lm must not be importable: everything comes from the folders
    import torch
    from transformers import pipeline

    mlm, ner_folder, clf_folder, expected_file = sys.argv[1:5]
    expected = json.load(open(expected_file))

    fill = pipeline("fill-mask", model=mlm, trust_remote_code=True)
    assert type(fill.model).__module__.startswith("transformers_modules"), type(fill.model).__module__
    assert [r["token"] for r in fill(expected["masked"], top_k=3)] == expected["fill_tokens"]

    extractor = pipeline("feature-extraction", model=mlm, trust_remote_code=True)
    features = extractor(expected["text"], return_tensors=True)
    assert type(extractor.model).__name__ == "HfLmBertModel", type(extractor.model)
    torch.testing.assert_close(features, torch.tensor(expected["features"]), rtol=1e-5, atol=1e-5)

    ner = pipeline("token-classification", model=ner_folder, trust_remote_code=True, aggregation_strategy="simple")
    entities = [[e["entity_group"], e["start"], e["end"]] for e in ner(expected["ner_text"])]
    assert entities == expected["entities"], entities

    clf = pipeline("text-classification", model=clf_folder, trust_remote_code=True)
    assert clf(expected["text"])[0]["label"] == expected["label"]
    print("REMOTE-OK")
"""


def test_pipelines_on_bert_folders_in_a_fresh_interpreter_without_hf_lm(
    mlm, tagger, classifier, tok, tmp_path
):
    """trust_remote_code alone: the shipped BERT files must be enough for four pipelines."""
    text, masked, ner_text = (
        "Where is the cat?",
        f"The cat sat on the {tok.mask_token}.",
        "Alice went to Paris.",
    )
    in_process = {
        "fill": pipeline("fill-mask", model=mlm[0], trust_remote_code=True),
        "features": pipeline("feature-extraction", model=mlm[0], trust_remote_code=True),
        "ner": pipeline(
            "token-classification", model=tagger[0], trust_remote_code=True, aggregation_strategy="simple"
        ),
        "clf": pipeline("text-classification", model=classifier[0], trust_remote_code=True),
    }
    expected = {
        "text": text,
        "masked": masked,
        "ner_text": ner_text,
        "fill_tokens": [r["token"] for r in in_process["fill"](masked, top_k=3)],
        "features": in_process["features"](text, return_tensors=True).tolist(),
        "entities": [[e["entity_group"], e["start"], e["end"]] for e in in_process["ner"](ner_text)],
        "label": in_process["clf"](text)[0]["label"],
    }
    assert expected["entities"] == [["PER", 0, 5], ["LOC", 14, 19]]
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    folders = (mlm[0], tagger[0], classifier[0], tmp_path / "expected.json")
    assert "REMOTE-OK" in run_fresh_interpreter(REMOTE_SCRIPT, *folders, cwd=tmp_path)


# ----------------------------------------------------------------------------------------------
# hf_lm's extractive question-answering pipeline
# ----------------------------------------------------------------------------------------------

QUESTIONS = [
    ("Where is the cat?", "The cat sat on the mat near the door."),
    ("Who lives in Paris?", "Alice lives in Paris and Bob lives in London."),
    ("What is the capital of France?", "Paris is the capital of France."),
    ("Where is the treasure hidden?", STORY),
]


@pytest.fixture(scope="module")
def random_qa(tok, tmp_path_factory):
    torch.manual_seed(3)
    return save(HfLmBertForQuestionAnswering(tiny_bert_config(tok)), tok, tmp_path_factory.mktemp("qa"))


@pytest.fixture(scope="module")
def pointer_qa(tok, tmp_path_factory):
    """A QA model whose best answer is "golden harbor" wherever those two words are in the context.

    Start logit 10 on "golden", end logit 8 on "harbor", 0 on every other token; [CLS] (the
    "no answer" position) gets 10/sqrt(2) and 8/sqrt(2), so it wins when the words are absent.
    """
    torch.manual_seed(4)
    config = tiny_bert_config(tok)
    model = HfLmBertForQuestionAnswering(config).eval()
    start, end = directions(config.hidden_size, 2)
    point_at_tokens(
        model.model,
        {token_id(tok, "golden"): start, token_id(tok, "harbor"): end, tok.cls_token_id: start + end},
    )
    with torch.no_grad():
        model.qa_outputs.weight.copy_(torch.stack([start * 10, end * 8]) / config.hidden_size)
        model.qa_outputs.bias.zero_()
    return save(model, tok, tmp_path_factory.mktemp("pointer_qa"))


def windows(tok, question, context, max_seq_len, doc_stride):
    """The (start, end) character span of the context each window covers, as the pipeline cuts them."""
    enc = tok(
        question,
        context,
        truncation="only_second",
        max_length=max_seq_len,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    spans = []
    for i, offsets in enumerate(enc["offset_mapping"]):
        context_offsets = [o for o, seq in zip(offsets, enc.sequence_ids(i)) if seq == 1]
        spans.append((context_offsets[0][0], context_offsets[-1][1]))
    return spans


def test_qa_task_is_registered_under_its_name_and_alias(random_qa, tok):
    model = HfLmBertForQuestionAnswering.from_pretrained(random_qa)
    for task in (QA_TASK, QA_TASK_ALIAS):
        qa = pipeline(task, model=model, tokenizer=tok)
        assert isinstance(qa, HfLmQuestionAnsweringPipeline)
        # a saved QA folder names the pipeline in config.custom_pipelines: transformers then uses the
        # folder's copy of the same class (tests/test_pipelines_remote.py)
        qa = pipeline(task, model=random_qa, trust_remote_code=True)
        assert type(qa).__qualname__ == HfLmQuestionAnsweringPipeline.__qualname__
        assert isinstance(qa.model, HfLmBertForQuestionAnswering)
    assert QA_TASK == "hflm-question-answering"


def test_qa_answers_are_spans_of_the_context(random_qa):
    qa = pipeline(QA_TASK, model=random_qa, trust_remote_code=True)
    for question, context in QUESTIONS:
        for align_to_words in (True, False):
            out = qa(question=question, context=context, align_to_words=align_to_words)
            assert set(out) == {"score", "start", "end", "answer"}
            assert 0 <= out["start"] < out["end"] <= len(context)
            assert out["answer"] == context[out["start"] : out["end"]]
            assert out["answer"].strip() and 0.0 < out["score"] <= 1.0
            if align_to_words:  # whole words: never starts or ends inside one
                assert out["start"] == 0 or not context[out["start"] - 1].isalnum()
                assert out["end"] == len(context) or not context[out["end"]].isalnum()


def test_qa_top_k_answers_are_distinct_and_sorted(random_qa):
    qa = pipeline(QA_TASK, model=random_qa, trust_remote_code=True)
    answers = qa(
        question="Where is the treasure hidden?", context=STORY, top_k=4, max_seq_len=32, doc_stride=8
    )
    assert isinstance(answers, list) and len(answers) == 4
    scores = [a["score"] for a in answers]
    assert scores == sorted(scores, reverse=True)
    assert len({(a["start"], a["end"]) for a in answers}) == 4  # a span seen in two windows counts once
    assert all(a["answer"] == STORY[a["start"] : a["end"]] for a in answers)
    assert qa(question="Where is the cat?", context=STORY, top_k=1, max_seq_len=32)[
        "answer"
    ]  # top_k=1: a dict


def test_qa_span_lengths_respect_max_answer_len(random_qa, tok):
    qa = pipeline(QA_TASK, model=random_qa, trust_remote_code=True)
    for answer in qa(
        question="Where is the cat?", context=STORY, top_k=5, max_answer_len=2, align_to_words=False
    ):
        assert 1 <= len(tok(answer["answer"], add_special_tokens=False)["input_ids"]) <= 2


def test_qa_finds_the_answer_in_a_later_window(pointer_qa, tok):
    qa = pipeline(QA_TASK, model=pointer_qa, trust_remote_code=True)
    question, max_seq_len, doc_stride = "Where is the treasure hidden?", 32, 8
    spans = windows(tok, question, STORY, max_seq_len, doc_stride)
    start = STORY.index("golden harbor")
    first_window_with_answer = min(i for i, (s, e) in enumerate(spans) if s <= start < e)
    assert len(spans) >= 4 and first_window_with_answer >= 2  # at least the 3rd window

    out = qa(question=question, context=STORY, max_seq_len=max_seq_len, doc_stride=doc_stride)
    assert out["answer"] == "golden harbor"
    assert (out["start"], out["end"]) == (start, start + len("golden harbor"))
    assert out["score"] > 0.5  # p_start(golden) * p_end(harbor) in that window
    # the answer beats the "no answer" score too, and a shorter limit keeps the likelier start word
    windowed = dict(question=question, context=STORY, max_seq_len=max_seq_len, doc_stride=doc_stride)
    assert qa(**windowed, handle_impossible_answer=True)["answer"] == "golden harbor"
    assert qa(**windowed, max_answer_len=1)["answer"] == "golden"


def test_qa_handle_impossible_answer(pointer_qa):
    qa = pipeline(QA_TASK, model=pointer_qa, trust_remote_code=True)
    question, context = "Where is the cat?", "The cat sat on the mat near the door."
    empty = qa(question=question, context=context, handle_impossible_answer=True)
    assert (empty["answer"], empty["start"], empty["end"]) == ("", 0, 0) and empty["score"] > 0.5
    guess = qa(question=question, context=context)
    assert guess["answer"] and guess["score"] < empty["score"]


def test_qa_batches_and_input_forms_agree(random_qa):
    qa = pipeline(QA_TASK, model=random_qa, trust_remote_code=True)
    (q1, c1), (q2, c2) = QUESTIONS[0], QUESTIONS[3]
    singles = [qa(question=q1, context=c1), qa(question=q2, context=c2)]
    as_dicts = qa([{"question": q1, "context": c1}, {"question": q2, "context": c2}])
    as_lists = qa(question=[q1, q2], context=[c1, c2])
    # batch_size=3 pads windows of different lengths together
    batched = qa([{"question": q1, "context": c1}, {"question": q2, "context": c2}], batch_size=3)
    assert len(as_dicts) == len(as_lists) == len(batched) == 2
    for results in (as_dicts, as_lists, batched):
        for got, want in zip(results, singles):
            assert (got["answer"], got["start"], got["end"]) == (want["answer"], want["start"], want["end"])
            assert got["score"] == pytest.approx(want["score"], rel=1e-4)
    assert qa({"question": q1, "context": c1}) == singles[0] == qa(q1, c1)


BAD_CALLS = {
    "no-context": (lambda qa: qa(question="Where is the cat?"), "Missing `context`"),
    "no-question": (lambda qa: qa(context="The cat sat on the mat."), "Missing `question`"),
    "blank-context": (lambda qa: qa(question="Where is the cat?", context="   "), "`context` is empty"),
    "empty-context-in-dict": (lambda qa: qa({"question": "Where?", "context": ""}), "`context` is empty"),
    "dict-without-context": (lambda qa: qa([{"question": "Where?"}]), "Missing `context`"),
    "unequal-lists": (lambda qa: qa(question=["a", "b"], context=["c"]), "same"),
    "top_k-0": (lambda qa: qa("Where is the cat?", "The cat.", top_k=0), "`top_k`"),
    "max_answer_len-0": (
        lambda qa: qa("Where is the cat?", "The cat.", max_answer_len=0),
        "`max_answer_len`",
    ),
    "stride-too-large": (lambda qa: qa("Where?", "The cat.", max_seq_len=16, doc_stride=12), "`doc_stride`"),
    "question-too-long": (lambda qa: qa("Where is the cat? " * 10, "The cat.", max_seq_len=16), "no room"),
    "unknown-argument": (lambda qa: qa("Where is the cat?", "The cat.", foo=1), "Unknown argument"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_qa_bad_inputs_raise_clear_errors(random_qa, case):
    call, match = BAD_CALLS[case]
    qa = pipeline(QA_TASK, model=random_qa, trust_remote_code=True)
    with pytest.raises(ValueError, match=match):
        call(qa)


def test_qa_rejects_a_model_without_start_and_end_logits(mlm, tok):
    _, model = mlm
    qa = pipeline(QA_TASK, model=model, tokenizer=tok)
    with pytest.raises(ValueError, match="start_logits"):
        qa(question="Where is the cat?", context="The cat sat on the mat.")


def test_qa_needs_a_fast_tokenizer(random_qa):
    tokenizer = AutoTokenizer.from_pretrained(random_qa)

    class SlowLooking(type(tokenizer)):  # hf_lm ships no slow WordPiece tokenizer: pretend to be one
        is_fast = False

    tokenizer.__class__ = SlowLooking
    with pytest.raises(ValueError, match="fast tokenizer"):
        pipeline(QA_TASK, model=random_qa, tokenizer=tokenizer, trust_remote_code=True)


def test_qa_batches_agree_with_a_left_padding_tokenizer_and_transformers_bert(tok):
    """The windows are padded on the right whatever the tokenizer's side: transformers'
    BertForQuestionAnswering numbers positions from index 0, so left padding would move its tokens
    and a batch would answer otherwise than each question alone."""
    from transformers import BertConfig, BertForQuestionAnswering

    torch.manual_seed(0)
    model = BertForQuestionAnswering(
        BertConfig(
            vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=128, pad_token_id=tok.pad_token_id,
        )
    ).eval()  # fmt: skip
    left = copy.deepcopy(tok)
    left.padding_side = "left"
    qa = pipeline(QA_TASK, model=model, tokenizer=left)
    assert left.padding_side == "right"
    questions = [{"question": q, "context": c} for q, c in QUESTIONS]
    singles = [qa(**q) for q in questions]
    for got, want in zip(qa(questions, batch_size=len(questions)), singles):
        assert (got["answer"], got["start"], got["end"]) == (want["answer"], want["start"], want["end"])
        assert got["score"] == pytest.approx(want["score"], rel=1e-4)
