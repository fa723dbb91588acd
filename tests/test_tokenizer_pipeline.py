"""Tokenizers trained from scratch, the stdlib corpus, text-generation pipelines, model cards, the demo."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoTokenizer, pipeline

import hf_lm.cards
from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM, HfLmGPTForSequenceClassification
from hf_lm.cards import write_model_card
from training.data.tokenizer import TOKENIZER_KINDS, stdlib_docstrings, train_tokenizer

REPO = Path(__file__).resolve().parents[1]

CORPUS = [
    "Hello world. This is a small corpus.",
    "Return the sine of x, measured in radians.",
    "A tokenizer splits text into tokens, and a model predicts the next one!",
    "Open the file and read it line by line.\nThen close it.",
    "Numbers like 42 and 3.14 appear too; so do (brackets) and 'quotes'.",
] * 20

SAMPLES = [
    "Hello world. This is a small corpus.",
    "Return the sine of x, measured in radians.",
    "unseen: Zebra quartz jumps — über ✓ 😀\n\n  indented",
]


@pytest.fixture(scope="module")
def tokenizers_by_kind():
    return {
        kind: train_tokenizer(CORPUS, kind, vocab_size=300, model_max_length=64) for kind in TOKENIZER_KINDS
    }


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_special_tokens_and_padding_side(tokenizers_by_kind, kind):
    tok = tokenizers_by_kind[kind]
    assert tok.eos_token == tok.bos_token == "<|endoftext|>"
    # GPT-2's unk is its end-of-text token: right for byte-level BPE, which never emits unk; the
    # kinds that meet unseen text give it an id of its own, after the other special tokens
    assert tok.unk_token == ("<|endoftext|>" if kind == "byte_bpe" else "<|unk|>")
    assert tok.unk_token_id == (
        0 if kind == "byte_bpe" else 2 if kind == "char" else 4
    )  # after ChatML's 2, 3
    assert tok.pad_token == "<|pad|>"
    assert tok.eos_token_id == 0 and tok.pad_token_id == 1 and tok.pad_token_id != tok.eos_token_id
    assert tok.padding_side == "left" and tok.model_max_length == 64
    # no bos/eos added around an encoding: the data pipeline decides where EOS goes
    ids = tok("Hello world.")["input_ids"]
    assert tok.eos_token_id not in ids and tok.pad_token_id not in ids


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_save_and_reload_with_auto_tokenizer(tokenizers_by_kind, kind, tmp_path):
    tok = tokenizers_by_kind[kind]
    tok.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in SAMPLES:
        assert reloaded(text)["input_ids"] == tok(text)["input_ids"]
    assert reloaded.get_vocab() == tok.get_vocab()
    assert (reloaded.eos_token, reloaded.pad_token, reloaded.padding_side) == (
        "<|endoftext|>",
        "<|pad|>",
        "left",
    )
    assert reloaded.model_max_length == 64


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_decode_round_trip_on_training_text(tokenizers_by_kind, kind):
    tok = tokenizers_by_kind[kind]
    for text in SAMPLES[:2]:
        assert tok.decode(tok(text)["input_ids"]) == text


def test_byte_bpe_round_trips_any_text(tokenizers_by_kind):
    """Every byte is in the vocabulary: no unknown token, exact decoding, whitespace included."""
    tok = tokenizers_by_kind["byte_bpe"]
    for text in [*SAMPLES, "\t tabs\r\nand CRLF  ", "日本語のテキスト", "x" * 500]:
        ids = tok(text)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text


def test_char_tokenizer_is_one_token_per_character(tokenizers_by_kind):
    tok = tokenizers_by_kind["char"]
    text = "Open the file."
    assert tok.convert_ids_to_tokens(tok(text)["input_ids"]) == list(text)
    assert tok("Zebra 😀")["input_ids"].count(tok.unk_token_id) >= 2  # unseen characters


def test_left_padding_of_a_batch(tokenizers_by_kind):
    tok = tokenizers_by_kind["byte_bpe"]
    batch = tok(["Hello", "Return the sine of x"], padding=True, return_tensors="pt")
    short, long = batch["attention_mask"]
    assert long.all() and not short[0] and short[-1]
    n_pad = int((short == 0).sum())
    assert (batch["input_ids"][0, :n_pad] == tok.pad_token_id).all()


def test_custom_special_tokens_get_the_first_ids():
    special = {"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]"}
    tok = train_tokenizer(CORPUS, "wordpiece", vocab_size=200, special_tokens=special, padding_side="right")
    assert tok.convert_tokens_to_ids(list(special.values())) == [0, 1, 2, 3]
    assert tok.cls_token == "[CLS]" and tok.padding_side == "right"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "sentencepiece"}, "`kind`"),
        ({"vocab_size": 100}, "`vocab_size`"),  # byte_bpe needs 256 bytes + specials
        ({"kind": "char", "vocab_size": 2}, "`vocab_size`"),
        ({"vocab_size": 300.0}, "`vocab_size`"),
        ({"special_tokens": {"eos_token": "<e>", "pad_token": "<e>"}}, "pad_token must differ"),
        ({"special_tokens": {"eos": "<e>"}}, "unknown role"),
        ({"special_tokens": {"eos_token": "<e>"}, "kind": "wordpiece"}, "unk_token"),
        ({"model_max_length": 0}, "`model_max_length`"),
        ({"padding_side": "middle"}, "`padding_side`"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        train_tokenizer(CORPUS, **kwargs)


@pytest.mark.parametrize("texts", [[], ["", ""], iter([]), "one string"])
def test_empty_or_invalid_corpus(texts):
    with pytest.raises(ValueError, match="`texts`"):
        train_tokenizer(texts, "char", vocab_size=50)


def test_non_string_items_are_rejected():
    with pytest.raises(ValueError, match="only strings"):
        train_tokenizer(["fine", 3], "char", vocab_size=50)


def _digest(docs: list[str]) -> str:
    return hashlib.sha256("\x00".join(docs).encode()).hexdigest()


def test_stdlib_docstrings_are_deterministic_and_substantial():
    docs = stdlib_docstrings()
    assert docs == stdlib_docstrings()
    assert len(docs) > 1000 and sum(map(len, docs)) > 300_000
    assert len(set(docs)) == len(docs)
    assert all(isinstance(d, str) and len(d.split()) >= 6 for d in docs)
    assert not any(line.lstrip().startswith(">>>") for d in docs for line in d.splitlines())
    # a fresh interpreter (no torch, no transformers imported: nothing monkeypatched) agrees
    code = (
        "import hashlib; from training.data.tokenizer import stdlib_docstrings; "
        "print(hashlib.sha256('\\x00'.join(stdlib_docstrings()).encode()).hexdigest())"
    )
    fresh = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=120
    )
    assert fresh.stdout.strip() == _digest(docs)


def test_stdlib_docstrings_max_chars_is_a_prefix():
    docs = stdlib_docstrings()
    capped = stdlib_docstrings(max_chars=50_000)
    assert sum(map(len, capped)) <= 50_000 and capped == docs[: len(capped)] and len(capped) > 10
    with pytest.raises(ValueError, match="`max_chars`"):
        stdlib_docstrings(max_chars=0)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, tokenizers_by_kind):
    """A 2-layer GPT and its byte-level BPE tokenizer saved together, as a Hub folder would be."""
    folder = tmp_path_factory.mktemp("tiny_gpt")
    tok = tokenizers_by_kind["byte_bpe"]
    torch.manual_seed(0)
    config = HfLmGPTConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=64,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = HfLmGPTForCausalLM(config).eval()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, model, tok


def test_text_generation_pipeline_from_a_folder(tiny_checkpoint):
    folder, _, _ = tiny_checkpoint
    generator = pipeline("text-generation", model=str(folder), tokenizer=str(folder), trust_remote_code=True)
    assert generator.tokenizer.padding_side == "left"
    assert generator.tokenizer.pad_token_id != generator.tokenizer.eos_token_id

    prompts = ["Hello", "Return the sine of x, measured"]  # different lengths: the first is left-padded
    single = [generator(p, max_new_tokens=6, do_sample=False)[0]["generated_text"] for p in prompts]
    for prompt, text in zip(prompts, single):
        assert isinstance(text, str) and text.startswith(prompt) and len(text) > len(prompt)

    batched = generator(prompts, max_new_tokens=6, do_sample=False, batch_size=2)
    assert [out[0]["generated_text"] for out in batched] == single


def test_feature_extraction_and_text_classification_pipelines(tiny_checkpoint, tmp_path):
    """auto_map names AutoModel too, so a folder saved from the LM head serves feature extraction."""
    folder, model, tok = tiny_checkpoint
    extractor = pipeline(
        "feature-extraction", model=str(folder), tokenizer=str(folder), trust_remote_code=True
    )
    features = extractor("Return the sine of x")
    n_tokens = len(tok("Return the sine of x")["input_ids"])
    assert len(features[0]) == n_tokens and len(features[0][0]) == model.config.hidden_size

    clf_folder = tmp_path / "clf"
    clf = HfLmGPTForSequenceClassification.from_pretrained(
        folder, num_labels=2, id2label={0: "NEG", 1: "POS"}, label2id={"NEG": 0, "POS": 1}
    )
    clf.save_pretrained(clf_folder)
    tok.save_pretrained(clf_folder)
    classifier = pipeline(
        "text-classification", model=str(clf_folder), tokenizer=str(clf_folder), trust_remote_code=True
    )
    outs = classifier(["a short one", "a somewhat longer second sentence"])
    assert [o["label"] in {"NEG", "POS"} for o in outs] == [True, True]
    assert all(0.0 <= o["score"] <= 1.0 for o in outs)


def test_model_card_front_matter_and_body(tiny_checkpoint):
    folder, model, tok = tiny_checkpoint
    path = write_model_card(
        model,
        folder,
        dataset="A toy corpus.",
        metrics={"held-out loss": 1.23456, "steps": 1000},
        tokenizer=tok,
        extra={"prompt": "Hello"},
    )
    assert path == folder / "README.md"
    card = ModelCard.load(path)
    assert card.data.library_name == "transformers"
    assert card.data.license == "apache-2.0"
    assert card.data.pipeline_tag == "text-generation"
    assert card.data.tags == ["hf_lm", "hflm_gpt", "text-generation"]
    text = card.text
    assert "| Layers | 2 |" in text and "| Hidden size | 32 |" in text
    assert "| held-out loss | 1.235 |" in text and "| steps | 1,000 |" in text
    assert "A toy corpus." in text and "<|pad|>" in text
    assert f"AutoModelForCausalLM.from_pretrained({str(folder)!r}, trust_remote_code=True)" in text
    assert 'pipeline("text-generation"' in text and "generator('Hello'" in text
    assert "$" not in text  # every placeholder was filled


def test_model_card_templates_fall_back(tiny_checkpoint, tmp_path, monkeypatch):
    _, model, _ = tiny_checkpoint
    assert (REPO / "model_cards" / "default.md").is_file() and (
        REPO / "model_cards" / "hflm_gpt.md"
    ).is_file()

    monkeypatch.setattr(hf_lm.cards, "TEMPLATE_DIR", tmp_path / "missing")  # an installed package
    card = ModelCard.load(write_model_card(model, tmp_path / "out"))
    assert card.data.tags == ["hf_lm", "hflm_gpt", "text-generation"]
    assert "AutoModelForCausalLM.from_pretrained" in card.text and "$" not in card.text

    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "default.md").write_text("# $model_name\n\nCosts $$0 and has $num_hidden_layers layers.\n")
    monkeypatch.setattr(hf_lm.cards, "TEMPLATE_DIR", templates)  # no hflm_gpt.md: default.md
    card = ModelCard.load(write_model_card(model, tmp_path / "out2"))
    assert "Costs $0 and has 2 layers." in card.text

    (templates / "default.md").write_text("# $model_name uses $no_such_field\n")
    with pytest.raises(ValueError, match="no_such_field"):
        write_model_card(model, tmp_path / "out3")


@pytest.mark.slow
def test_demo_end_to_end(tmp_path):
    import math

    from training import demo

    out = tmp_path / "demo"
    tiny = ["--output_dir", str(out), "--max_steps", "5", "--warmup_steps", "2", "--log_every", "1"]
    tiny += ["--eval_every", "5", "--max_documents", "300", "--model_size", "tiny", "--vocab_size", "600"]
    tiny += ["--eval_words", "500", "--num_samples", "2", "--max_new_tokens", "8"]
    result = demo.run_demo(tiny)
    samples, metrics = result["samples"], result["metrics"]
    assert len(samples) == 2 and all(isinstance(s, str) and s.startswith("The") for s in samples)
    assert samples[0].strip()
    assert math.isfinite(metrics["bits_per_word"]) and metrics["bits_per_word"] > 0
    assert math.isfinite(metrics["floor_bits_per_word"]) and abs(metrics["floor_bits_per_word"] - 3.10) < 0.01
    assert metrics["excess_bits_per_word"] == pytest.approx(
        metrics["bits_per_word"] - metrics["floor_bits_per_word"]
    )
    assert metrics["step"] == 5
    final = out / "final"
    for name in (
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
        "loss.png",
        "hflm_modeling_gpt.py",
    ):
        assert (final / name).is_file(), name
    assert (final / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    card = ModelCard.load(final / "README.md")
    assert card.data.pipeline_tag == "text-generation" and "held-out perplexity" in card.text
    # `main` is the in-process entry point: it returns the first sample
    assert demo.main(tiny[:1] + [str(tmp_path / "again")] + tiny[2:]) == samples[0]


def test_demo_counts_words_like_the_corpus():
    from training.data.corpora import SyntheticCorpus
    from training.demo import count_words

    assert count_words("The old dog ran. Anna slept.") == 8  # The old dog ran . Anna slept .
    corpus = SyntheticCorpus(seed=0)
    # `generate(n)` draws n chain steps, then finishes the sentence: a few more words, never fewer
    text = " ".join(corpus.generate(300, seed=1))
    assert 300 <= count_words(text) < 340
