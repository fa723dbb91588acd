"""C4-style cleaning (training/data/cleaning.py): each rule on a synthetic web-like corpus, the exact
report, streaming == in memory, determinism, MinHash against exact Jaccard, and a training run."""

import json
import logging

import numpy as np
import pytest
from datasets import Dataset
from test_train import TINY

from training.args import DataArguments, TrainArguments, as_flags, parse_args
from training.data.cleaning import (
    RULES,
    C4Options,
    MinHasher,
    clean_corpus,
    english_score,
    jaccard_estimate,
    split_sentences,
)
from training.state.resume import DATA_ORDER, fixed_differences, run_settings
from training.train import train

# ---- the corpus: one page per kind of junk -----------------------------------------------------

MENU = ["Home", "About us | Contact | Blog"]  # no terminal punctuation
CITED = "The river runs past the old mill near the village. It has done so for three hundred years.[1]"
JS = "Please enable JavaScript to see the map of the village."
COOKIE = "This site uses cookies to improve your experience."
RIVER = [
    CITED.replace("[1]", ""),
    "Farmers still bring their grain to the mill every autumn. The miller weighs each sack by hand.",
    "Children swim in the river on warm summer days. Their parents watch them from the bank.",
]
# a page: menu, a blank line and trailing spaces, a citation, the javascript and cookie notices,
# a two-word line, an ellipsis line
RIVER_PAGE = "\n".join(
    [*MENU, "", CITED + "  ", RIVER[1], JS, COOKIE, RIVER[2], "Read more.", "Continue reading..."]
)
# the same page with another menu, whitespace and citation: an exact duplicate once cleaned
RIVER_COPY = "\n".join(
    ["Home | Shop", CITED.replace("[1]", "[2]"), "  " + RIVER[1], JS, RIVER[2], "Share this"]
)
BOILERPLATE = (
    "Subscribe to our newsletter for more stories. We send one letter every week. "
    "You can leave the list at any time."
)
BAKER = [
    "The baker wakes up long before the sun rises over the quiet town. She lights the old oven and "
    "mixes flour, water and salt in a wide wooden bowl.",
    "By five in the morning the first loaves are ready, and the smell of fresh bread fills the "
    "narrow street. Her neighbours often stop at the window to buy a warm roll on their way to work.",
    "On market days she bakes twice as much, because farmers come from the villages in the valley. "
    "They pay with coins, with eggs or with a basket of apples from their orchards.",
    "In the afternoon she sleeps for a few hours and then she writes the orders for the next day. "
    "The town would not be the same without her small shop on the corner of the square.",
]
BAKER_PAGE = "\n".join([*BAKER, BOILERPLATE])
# a near duplicate
BAKER_NEAR = BAKER_PAGE.replace("five in the morning", "six in the morning")  # one word changed
LOREM = "\n".join([RIVER[1], "Lorem ipsum dolor sit amet, consectetur adipiscing elit.", RIVER[2], BAKER[0]])
CODE = "\n".join([BAKER[1], "function show() { return document.title; }", BAKER[2], BAKER[3]])
GERMAN = (
    "Der Fluss fließt langsam durch das alte Dorf am Rande des Waldes. Jeden Morgen bringen die Bauern "
    "ihr Getreide zur Mühle. Der Müller wiegt jeden Sack mit der Hand.\nIm Sommer schwimmen die Kinder "
    "im kühlen Wasser. Ihre Eltern sitzen am Ufer und sehen ihnen zu. Am Abend gehen alle zusammen nach Hause."
)
CAT = "\n".join(["Menu", "The cat sat on the warm wall. It watched the birds. Then it slept in the sun."])
TEACHER = [
    "The teacher opened the door of the small school at eight. Twenty children came in from the cold.",
    "They read a story about a fox and a clever crow. Then they wrote their own stories in their books.",
    "At noon they ate bread and soup together in the hall. The afternoon was for music and painting.",
]
TEACHER_PAGE = "\n".join([TEACHER[0], TEACHER[1], BOILERPLATE, TEACHER[2]])
SHORT = "\n".join(["The fox ran across the field at dawn. Nobody saw it.", BOILERPLATE])
BAD_WORD = (
    "The farmer wanted to frobnicate the old cart before winter. His son helped him with the wheels.\n"
    "They worked until dark in the barn. Their dog slept by the door. The cart was ready in the morning."
)
PAGES = [
    RIVER_PAGE,
    BAKER_PAGE,
    LOREM,
    CODE,
    RIVER_COPY,
    BAKER_NEAR,
    GERMAN,
    CAT,
    TEACHER_PAGE,
    SHORT,
    "  \n\n  ",
    BAD_WORD,
]
KEPT = [
    "\n".join(RIVER),
    BAKER_PAGE,
    GERMAN,
    "\n".join(TEACHER),  # without the boilerplate the baker's page holds first
    BAD_WORD,
]
# (pages, lines) each rule removes from PAGES with the default options
REMOVED = {
    "whitespace": (0, 4),  # the river page's empty line, the blank page's three lines
    "lorem_ipsum": (1, 4),
    "curly_bracket": (1, 4),
    "bad_words": (0, 0),  # off without a list
    "citations": (0, 0),  # characters only: "[1]", "[2]"
    "terminal_punctuation": (0, 6),  # two menus, an ellipsis, "Home | Shop", "Share this", "Menu"
    "too_few_words": (0, 1),  # "Read more."
    "javascript": (0, 2),
    "policy": (0, 1),
    "too_few_sentences": (2, 1),  # the cat's three sentences, the blank page
    "language": (0, 0),  # off by default
    "exact_duplicates": (1, 3),  # the river page's copy, once cleaned
    "near_duplicates": (1, 5),  # the baker's page with a word changed
    "span_duplicates": (1, 3),  # the short page (2 lines), the boilerplate line of the teacher's page
}


def _clean(pages=PAGES, **options):
    return clean_corpus(Dataset.from_dict({"text": pages}), C4Options(**options))


def test_each_rule_removes_exactly_its_junk():
    cleaned, report = _clean()
    assert cleaned["text"] == KEPT
    result = report.as_dict()
    assert list(result["removed"]) == [r.name for r in RULES]
    assert {k: (v["pages"], v["lines"]) for k, v in result["removed"].items()} == REMOVED
    removed = result["removed"]
    assert removed["citations"]["chars"] == len("[1]") + len("[2]")
    assert removed["javascript"]["chars"] == 2 * (len(JS) + 1)
    assert removed["policy"]["chars"] == len(COOKIE) + 1
    assert removed["too_few_words"]["chars"] == len("Read more.") + 1
    assert removed["lorem_ipsum"]["chars"] == len(LOREM)
    assert removed["near_duplicates"]["chars"] == len(BAKER_NEAR)
    # the river page's empty line and 2 trailing spaces, the copy's 2 leading ones, the blank page
    assert removed["whitespace"]["chars"] == 3 + 2 + 6
    assert result["input"] == {"pages": len(PAGES), "lines": 49, "chars": sum(map(len, PAGES))}
    assert result["output"] == {"pages": 5, "lines": 15, "chars": sum(map(len, KEPT))}
    for unit in ("pages", "lines", "chars"):  # every page, line and character is accounted for
        assert result["input"][unit] == result["output"][unit] + sum(v[unit] for v in removed.values())


def test_optional_rules(tmp_path, monkeypatch):
    words = tmp_path / "bad_words.txt"
    words.write_text("frobnicate\n")
    cleaned, report = _clean(bad_words_file=str(words), language="en")
    assert cleaned["text"] == KEPT[:2] + KEPT[3:4]  # without the German page and the bad word's
    assert report.as_dict()["removed"]["language"]["pages"] == 1
    assert report.as_dict()["removed"]["bad_words"]["pages"] == 1
    assert english_score(GERMAN) < 0.05 < 0.25 < min(english_score(p) for p in KEPT if p != GERMAN)
    # a pluggable scorer: any importable callable text -> [0, 1]
    (tmp_path / "my_scorer.py").write_text("def score(text):\n    return float('Fluss' in text)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cleaned, _ = _clean(language="my_scorer:score", language_threshold=1.0)
    assert cleaned["text"] == [GERMAN]
    # each dedup rule can be switched off: the duplicates come back
    cleaned, _ = _clean(exact_dedup=False, near_dedup=False, span_dedup=False)
    assert len(cleaned) == 8 and cleaned["text"].count("\n".join(RIVER)) == 2


def test_span_dedup_keeps_the_first_occurrence_within_a_page():
    a, b, c, d, e = (f"Sentence number {w} is here." for w in ("one", "two", "three", "four", "five"))
    page = " ".join([a, b, c, a, b, c, d, e]) + "\n" + " ".join([d, e, a])
    cleaned, report = _clean([page], min_sentences=1)
    assert cleaned["text"] == [" ".join([a, b, c, d, e]) + "\n" + " ".join([d, e, a])]
    assert split_sentences('He said "yes." Then he left! Why? Dr. No.') == [
        'He said "yes."',
        "Then he left!",
        "Why?",
        "Dr.",
        "No.",
    ]


def test_streaming_num_proc_and_reruns_give_the_same_pages_and_report(tmp_path):
    cleaned, report = _clean()
    stream, none = clean_corpus(
        Dataset.from_dict({"text": PAGES}).to_iterable_dataset(num_shards=3), report_path=tmp_path / "r.json"
    )
    assert none is None
    assert [row["text"] for row in stream] == KEPT
    assert json.loads((tmp_path / "r.json").read_text()) == report.as_dict()
    assert [row["text"] for row in stream] == KEPT  # a second read starts afresh: not all duplicates
    parallel, report2 = clean_corpus(Dataset.from_dict({"text": PAGES * 2}), num_proc=2)
    assert parallel["text"] == KEPT
    # the second copies of the six pages kept whole (the teacher's before its span rule); the
    # near duplicate and the short page were never kept, so their second copies fall to their own rules
    assert report2.as_dict()["removed"]["exact_duplicates"]["pages"] == 1 + 6


def test_minhash_estimates_jaccard():
    rng = np.random.default_rng(0)
    vocabulary = [f"w{i}" for i in range(500)]
    hasher = MinHasher(num_perm=256, ngram=3, seed=1)
    errors = []
    for changed in (0, 5, 20, 50, 100, 200):
        words = list(rng.choice(vocabulary, 300))
        other = list(words)
        for i in rng.choice(300, changed, replace=False):
            other[i] = "x" + str(i)
        a, b = " ".join(words), " ".join(other)
        sa, sb = hasher.shingles(a), hasher.shingles(b)
        exact = len(sa & sb) / len(sa | sb)
        estimate = jaccard_estimate(hasher.signature(a), hasher.signature(b))
        errors.append(abs(estimate - exact))
        assert abs(estimate - exact) < 0.1, (changed, exact, estimate)  # 3 standard deviations at 256
    assert np.mean(errors) < 0.04
    assert np.array_equal(hasher.signature(a), MinHasher(256, 3, 1).signature(a))  # seeded


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        ({"data_cleaning": "c5"}, "data_cleaning"),
        ({"clean_minhash_bands": 7}, "clean_minhash_num_perm"),
        ({"clean_min_sentences": 0}, "clean_min_sentences"),
        ({"clean_minhash_threshold": 1.5}, "clean_minhash_threshold"),
        ({"clean_language": "fr"}, "clean_language"),
        ({"clean_bad_words_file": "/no/such/file"}, "clean_bad_words_file"),
    ],
)
def test_bad_options_name_the_flag(flags, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        DataArguments(**flags)


@pytest.mark.parametrize("streaming", [False, True])
def test_training_run_with_c4_cleaning_writes_the_report(tmp_path, streaming, caplog):
    """With a stream the report is written when a read of it ends: here, the read of the held-out blocks."""
    corpus = tmp_path / "pages.jsonl"
    corpus.write_text("".join(json.dumps({"text": p}) + "\n" for p in PAGES))
    flags = {
        **TINY,
        "dataset": str(corpus),
        "max_documents": None,
        "block_size": 16,
        "per_device_batch_size": 2,
    }
    flags |= {
        "data_cleaning": "c4",
        "streaming": streaming,
        "eval_fraction": 0.4,
        "max_steps": 2,
        "eval_every": 2,
        "save_every": 2,
        "output_dir": str(tmp_path / "run"),
    }
    with caplog.at_level(logging.INFO, logger="training"):
        train(*parse_args(as_flags({k: v for k, v in flags.items() if v is not None})))
    report = json.loads((tmp_path / "run" / "data_cleaning.json").read_text())
    assert report == _clean()[1].as_dict()
    assert "span_duplicates" in caplog.text  # the table is in the log
    assert "data_cleaning.json" in (tmp_path / "run" / "final" / "README.md").read_text()  # the card says so


def test_a_resume_may_not_change_the_cleaning():
    args = DataArguments()
    train_args = TrainArguments(output_dir="unused")
    saved = run_settings(args, train_args)
    changed = DataArguments(data_cleaning="c4", clean_min_sentences=3)
    current = run_settings(changed, train_args)
    refused = fixed_differences(saved, {}, current, DATA_ORDER)
    assert refused == {"data_cleaning": ("none", "c4"), "clean_min_sentences": (5, 3)}
    del saved["data_cleaning"]  # a checkpoint from before the flag compares what it recorded
    assert "data_cleaning" not in fixed_differences(saved, {}, current, DATA_ORDER)
