"""hf_lm's seq2seq pipelines (text-to-text, summarization, translation) on saved encoder-decoder folders.

The models are transformers' own `T5ForConditionalGeneration` and `BartForConditionalGeneration`
with tiny random configs, saved with a word-level tokenizer (`<pad>`, `</s>` appended, `<unk>`).
Every output is compared with what `model.generate(**tokenizer(prefix + text))` gives, and the
prefix with the input ids that `generate` actually received.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_gpt_config
from remote_code import run_fresh_interpreter
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    BartForConditionalGeneration,
    GenerationConfig,
    PreTrainedTokenizerFast,
    T5Config,
    T5ForConditionalGeneration,
    pipeline,
)
from transformers.pipelines import PIPELINE_REGISTRY

from hf_lm import HfLmGPTForCausalLM
from hf_lm.pipelines_seq2seq import (
    SUMMARIZATION_TASK,
    TEXT2TEXT_TASK,
    TRANSLATION_TASK,
    HfLmSummarizationPipeline,
    HfLmText2TextGenerationPipeline,
    HfLmTranslationPipeline,
    _lengths_up_to_eos,
    language_name,
    parse_translation_task,
    register_translation_task,
)

WORDS = (
    "the a cat dog bird sat ran sings on in with near mat park red ball house is small big old town "
    "river sea hello world good night summarize translate to English German French Romanian de fr "
    "en : . ,"
).split()

TEXTS = [
    "the cat sat on the mat .",
    "hello",
    "the dog ran in the park with a red ball near the old town .",
    "the house is small",
    "a big house",
]

# T5 checkpoints carry their task prefixes in the config; "translate to German: " differs from
# the template's "translate English to German: " so the test can tell which one was used
TASK_SPECIFIC_PARAMS = {
    "summarization": {"prefix": "summarize: "},
    "translation_en_to_de": {"prefix": "translate to German: "},
}


def word_tokenizer(padding_side: str = "left") -> PreTrainedTokenizerFast:
    """A word-level tokenizer with T5's special ids (<pad> 0, </s> 1, <unk> 2) that appends </s>.

    Saved with `padding_side="left"` on purpose: the pipelines must pad encoder inputs on the right.
    """
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side=padding_side,
        model_max_length=64,
    )


@torch.no_grad()
def randomize(model, eos_scale: float) -> None:
    """Spread the weights so that a random model says different things for different inputs.

    transformers' initialization makes a tiny T5 emit `<pad>` forever; N(0, 0.3) weights give
    varied tokens. A larger `</s>` output row makes some sequences stop early, so batches hold
    sequences of different lengths (padded by `generate`).
    """
    generator = torch.Generator().manual_seed(0)
    for param in model.parameters():
        if param.dim() >= 2:
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    model.get_output_embeddings().weight[1] *= eos_scale


# transformers' own T5 and BART at a tiny size: (model class, config class, config, EOS logit scale)
REFERENCES = {
    "t5": (
        T5ForConditionalGeneration,
        T5Config,
        dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, pad_token_id=0,
             eos_token_id=1, decoder_start_token_id=0, task_specific_params=TASK_SPECIFIC_PARAMS),
        3.0,
    ),
    "bart": (
        BartForConditionalGeneration,
        BartConfig,
        dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
             eos_token_id=1, decoder_start_token_id=1, forced_eos_token_id=1),  # BART starts decoding with </s>
        1.0,
    ),
}  # fmt: skip


def build(name: str, tok):
    model_class, config_class, settings, eos_scale = REFERENCES[name]
    model = model_class(config_class(vocab_size=len(tok), **settings))
    randomize(model, eos_scale=eos_scale)
    return model.eval()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{"t5": folder, "bart": folder}, each with weights, config, generation config and tokenizer."""
    out = {}
    for name in REFERENCES:
        tok = word_tokenizer()
        folder = tmp_path_factory.mktemp(name)
        build(name, tok).save_pretrained(folder)
        tok.save_pretrained(folder)
        out[name] = str(folder)
    return out


@pytest.fixture(scope="module")
def loaded(folders):
    """{"t5": (model, tokenizer), "bart": ...} loaded back from the folders, for the references."""
    return {
        name: (AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder))
        for name, folder in folders.items()
    }


@pytest.fixture(scope="module")
def t5_pipes(loaded):
    """The three pipelines on the in-memory T5 (cheaper than reloading the folder in every test)."""
    model, _ = loaded["t5"]
    return {
        task: pipeline(task, model=model, tokenizer=word_tokenizer())
        for task in (TEXT2TEXT_TASK, SUMMARIZATION_TASK, TRANSLATION_TASK)
    }


def reference(model, tok, text: str, **generate_kwargs) -> tuple[list[int], str]:
    """What `generate` gives on `text` alone: (token ids, decoded text)."""
    encoded = tok(text, return_tensors="pt")
    ids = model.generate(**encoded, **generate_kwargs)[0].tolist()
    return ids, tok.decode(ids, skip_special_tokens=True)


class GenerateSpy:
    """Wraps `model.generate` to record the encoder input ids of every call."""

    def __init__(self, model, monkeypatch):
        self.calls: list[torch.Tensor] = []
        original = model.generate

        def generate(*args, **kwargs):
            self.calls.append(kwargs["input_ids"].clone())
            return original(*args, **kwargs)

        monkeypatch.setattr(model, "generate", generate)

    def input_ids(self) -> list[list[int]]:
        """The non-pad input ids of every row of every call."""
        return [row[row != 0].tolist() for call in self.calls for row in call]


# -------------------------------------------------------------------------------------------------
# registration
# -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "removed", ["text2text-generation", "summarization", "translation", "translation_en_to_de"]
)
def test_transformers_refuses_the_plain_task_names(folders, removed):
    with pytest.raises(KeyError, match="removed"):
        pipeline(removed, model=folders["t5"])


def test_tasks_are_registered_with_the_seq2seq_auto_class():
    supported = PIPELINE_REGISTRY.get_supported_tasks()
    for task, cls in (
        (TEXT2TEXT_TASK, HfLmText2TextGenerationPipeline),
        (SUMMARIZATION_TASK, HfLmSummarizationPipeline),
        (TRANSLATION_TASK, HfLmTranslationPipeline),
    ):
        assert task in supported
        assert PIPELINE_REGISTRY.supported_tasks[task]["impl"] is cls
        assert PIPELINE_REGISTRY.supported_tasks[task]["pt"] == (AutoModelForSeq2SeqLM,)
    for pair in ("en_to_de", "en_to_fr", "en_to_ro"):
        assert PIPELINE_REGISTRY.task_aliases[f"{TRANSLATION_TASK}_{pair}"] == TRANSLATION_TASK


def test_translation_task_names_parse_back():
    assert parse_translation_task("hflm-translation_en_to_de") == ("en", "de")
    assert parse_translation_task("hflm-translation_en_XX_to_ro_RO") == ("en_XX", "ro_RO")
    assert parse_translation_task("hflm-translation") is None
    assert parse_translation_task("translation_en_to_de") is None
    assert language_name("de") == language_name("DE") == "German"
    assert language_name("Klingon") == "Klingon"
    with pytest.raises(ValueError, match="whitespace"):
        register_translation_task("en", "d e")


# -------------------------------------------------------------------------------------------------
# outputs equal generate(), from a saved folder
# -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_beams", [1, 3], ids=["greedy", "beam"])
@pytest.mark.parametrize("arch", ["t5", "bart"])
def test_outputs_equal_generate_from_a_saved_folder(folders, loaded, arch, num_beams):
    model, tok = loaded[arch]
    pipe = pipeline(TEXT2TEXT_TASK, model=folders[arch], trust_remote_code=True)
    assert isinstance(pipe, HfLmText2TextGenerationPipeline)
    for text in TEXTS[:3]:
        ids, decoded = reference(model, tok, text, max_new_tokens=10, num_beams=num_beams)
        out = pipe(text, max_new_tokens=10, num_beams=num_beams, return_text=True, return_tensors=True)
        assert out == [{"generated_text": decoded, "generated_token_ids": ids}]
    assert any(reference(model, tok, t, max_new_tokens=10)[1] for t in TEXTS), "the model only says nothing"


@pytest.mark.parametrize(
    "task, key, prefix",
    [
        (TEXT2TEXT_TASK, "generated", ""),
        (SUMMARIZATION_TASK, "summary", "summarize: "),
        ("hflm-translation_en_to_de", "translation", "translate to German: "),
    ],
)
def test_each_task_from_a_saved_folder(folders, loaded, task, key, prefix):
    model, tok = loaded["t5"]
    pipe = pipeline(task, model=folders["t5"], trust_remote_code=True)
    _, decoded = reference(model, tok, prefix + TEXTS[0], max_new_tokens=8)
    assert pipe(TEXTS[0], max_new_tokens=8) == [{f"{key}_text": decoded}]


@pytest.mark.parametrize("num_beams", [1, 2], ids=["greedy", "beam"])
@pytest.mark.parametrize("arch", ["t5", "bart"])
def test_batch_equals_one_by_one(folders, loaded, arch, num_beams):
    model, tok = loaded[arch]
    pipe = pipeline(TEXT2TEXT_TASK, model=folders[arch])
    assert pipe.tokenizer.padding_side == "right"  # saved as "left"; BART's positions need right padding
    kwargs = dict(max_new_tokens=12, num_beams=num_beams, return_text=True, return_tensors=True)
    one_by_one = [pipe(text, **kwargs)[0] for text in TEXTS]
    batched = pipe(TEXTS, batch_size=3, **kwargs)
    assert batched == one_by_one
    assert one_by_one == [
        {"generated_text": text, "generated_token_ids": ids}
        for ids, text in (reference(model, tok, t, max_new_tokens=12, num_beams=num_beams) for t in TEXTS)
    ]
    if arch == "t5":  # some sequences end early, so generate padded the batch
        assert len({len(record["generated_token_ids"]) for record in batched}) > 1
    else:  # the padding side matters: left padding shifts BART's learned positions
        left = word_tokenizer("left")(TEXTS, return_tensors="pt", padding=True)
        left_ids = model.generate(**left, max_new_tokens=12, num_beams=num_beams).tolist()
        assert [ids[: len(r["generated_token_ids"])] for ids, r in zip(left_ids, one_by_one)] != [
            r["generated_token_ids"] for r in one_by_one
        ]


def test_padding_is_cut_after_the_first_eos():
    sequences = torch.tensor([[0, 5, 1, 0, 0], [0, 5, 6, 7, 8], [1, 4, 2, 1, 0]])
    assert _lengths_up_to_eos(sequences, 1).tolist() == [3, 5, 4]  # position 0 is the start token
    assert _lengths_up_to_eos(sequences, [2, 1]).tolist() == [3, 5, 3]
    assert _lengths_up_to_eos(sequences, None).tolist() == [5, 5, 5]


def test_several_sequences_per_input(t5_pipes, loaded):
    model, tok = loaded["t5"]
    pipe = t5_pipes[TEXT2TEXT_TASK]
    kwargs = dict(max_new_tokens=6, num_beams=3, num_return_sequences=2)
    single = pipe(TEXTS[0], **kwargs)
    assert len(single) == 2
    expected = tok.batch_decode(
        model.generate(**tok(TEXTS[0], return_tensors="pt"), **kwargs), skip_special_tokens=True
    )
    assert [r["generated_text"] for r in single] == expected
    many = pipe(TEXTS[:3], batch_size=2, **kwargs)
    assert len(many) == 3 and all(len(records) == 2 for records in many)
    assert many[0] == single


def test_streams_generators(t5_pipes):
    pipe = t5_pipes[TEXT2TEXT_TASK]
    streamed = list(pipe((text for text in TEXTS[:3]), max_new_tokens=5, batch_size=2))
    assert streamed == [pipe(text, max_new_tokens=5) for text in TEXTS[:3]]


# -------------------------------------------------------------------------------------------------
# prefixes
# -------------------------------------------------------------------------------------------------


def check_prefix(pipe, tok, monkeypatch, expected: str, text: str = TEXTS[0], **call_kwargs):
    """The pipeline sent exactly tokenizer(expected + text) to generate, and output its result."""
    spy = GenerateSpy(pipe.model, monkeypatch)
    out = pipe(text, max_new_tokens=6, **call_kwargs)
    assert spy.input_ids() == [tok(expected + text)["input_ids"]]
    monkeypatch.undo()
    _, decoded = reference(pipe.model, tok, expected + text, max_new_tokens=6)
    assert list(out[0].values()) == [decoded]


def test_text2text_prefix(t5_pipes, loaded, monkeypatch):
    tok = loaded["t5"][1]
    pipe = t5_pipes[TEXT2TEXT_TASK]
    check_prefix(pipe, tok, monkeypatch, "")  # the config has no `prefix`: none by default
    check_prefix(pipe, tok, monkeypatch, "summarize: ", prefix="summarize: ")
    assert tok("summarize: " + TEXTS[0])["input_ids"][:2] == [
        tok.convert_tokens_to_ids(w) for w in ("summarize", ":")
    ]


def test_summarization_prefix(t5_pipes, loaded, monkeypatch):
    tok = loaded["t5"][1]
    pipe = t5_pipes[SUMMARIZATION_TASK]
    check_prefix(pipe, tok, monkeypatch, "summarize: ")  # config.task_specific_params["summarization"]
    check_prefix(pipe, tok, monkeypatch, "", prefix="")
    check_prefix(pipe, tok, monkeypatch, "translate : ", prefix="translate : ")


def test_summarization_without_task_specific_params(folders, monkeypatch):
    model = AutoModelForSeq2SeqLM.from_pretrained(folders["bart"])
    tok = word_tokenizer()
    pipe = pipeline(SUMMARIZATION_TASK, model=model, tokenizer=tok)
    check_prefix(pipe, tok, monkeypatch, "")
    assert pipe(TEXTS[0], max_new_tokens=4)[0].keys() == {"summary_text"}


@pytest.mark.parametrize(
    "task, kwargs, prefix",
    [
        (TRANSLATION_TASK, dict(src_lang="en", tgt_lang="fr"), "translate English to French: "),
        (TRANSLATION_TASK, dict(src_lang="English", tgt_lang="Romanian"), "translate English to Romanian: "),
        (
            TRANSLATION_TASK,
            dict(src_lang="en", tgt_lang="de"),
            "translate to German: ",
        ),  # task_specific_params
        ("hflm-translation_en_to_de", {}, "translate to German: "),
        ("hflm-translation_en_to_fr", {}, "translate English to French: "),
        ("hflm-translation_en_to_fr", dict(tgt_lang="de"), "translate to German: "),  # the call wins
        (
            TRANSLATION_TASK,
            dict(src_lang="en", tgt_lang="fr", prefix_template="{src_lang} to {tgt_lang} : "),
            "en to fr : ",
        ),
        (TRANSLATION_TASK, dict(src_lang="en", tgt_lang="fr", prefix_template=""), ""),
        (TRANSLATION_TASK, dict(src_lang="en", tgt_lang="fr", prefix="hello "), "hello "),
        (TRANSLATION_TASK, {}, ""),  # no pair: a model that translates one fixed pair
    ],
)
def test_translation_prefix(loaded, monkeypatch, task, kwargs, prefix):
    model, tok = loaded["t5"]
    pipe = pipeline(task, model=model, tokenizer=word_tokenizer())
    assert isinstance(pipe, HfLmTranslationPipeline)
    check_prefix(pipe, tok, monkeypatch, prefix, **kwargs)


def test_translation_pairs_at_construction_and_registered_names(loaded, monkeypatch):
    model, tok = loaded["t5"]
    pipe = pipeline(TRANSLATION_TASK, model=model, tokenizer=word_tokenizer(), src_lang="de", tgt_lang="en")
    check_prefix(pipe, tok, monkeypatch, "translate German to English: ")
    check_prefix(pipe, tok, monkeypatch, "translate German to French: ", tgt_lang="fr")
    task = register_translation_task("fr", "de")
    assert task == "hflm-translation_fr_to_de"
    pipe = pipeline(task, model=model, tokenizer=word_tokenizer())
    assert (pipe.default_src_lang, pipe.default_tgt_lang) == ("fr", "de")
    check_prefix(pipe, tok, monkeypatch, "translate French to German: ")
    assert pipe(TEXTS[1], max_new_tokens=3)[0].keys() == {"translation_text"}


# -------------------------------------------------------------------------------------------------
# generation and decoding arguments
# -------------------------------------------------------------------------------------------------


def test_generation_kwargs_pass_through(t5_pipes, loaded):
    model, tok = loaded["t5"]
    pipe = t5_pipes[TEXT2TEXT_TASK]
    ids = pipe(TEXTS[2], max_new_tokens=3, return_tensors=True)[0]["generated_token_ids"]
    assert len(ids) <= 1 + 3  # the decoder start token and at most 3 new ones
    assert ids == reference(model, tok, TEXTS[2], max_new_tokens=3)[0]
    # a GenerationConfig object, as in generate()
    config = GenerationConfig(
        max_new_tokens=2, num_beams=2, decoder_start_token_id=0, eos_token_id=1, pad_token_id=0
    )
    out = pipe(TEXTS[2], generation_config=config, return_tensors=True)[0]["generated_token_ids"]
    assert out == reference(model, tok, TEXTS[2], generation_config=config)[0] and len(out) <= 3
    # seeded sampling draws the same tokens as generate
    torch.manual_seed(7)
    sampled = pipe(TEXTS[0], do_sample=True, top_k=5, max_new_tokens=8, return_tensors=True)[0][
        "generated_token_ids"
    ]
    torch.manual_seed(7)
    assert sampled == reference(model, tok, TEXTS[0], do_sample=True, top_k=5, max_new_tokens=8)[0]
    # no length given: the pipeline's max_new_tokens=256 default, not generate's max_length=20
    assert (
        pipe(TEXTS[2], return_tensors=True)[0]["generated_token_ids"]
        == reference(model, tok, TEXTS[2], max_new_tokens=256)[0]
    )
    with pytest.raises(ValueError, match="not used by the model"):
        pipe(TEXTS[0], max_new_tokns=3)


def test_generation_kwargs_at_construction(loaded):
    model, tok = loaded["t5"]
    pipe = pipeline(TEXT2TEXT_TASK, model=model, tokenizer=word_tokenizer(), max_new_tokens=2, num_beams=2)
    assert (
        pipe(TEXTS[2], return_tensors=True)[0]["generated_token_ids"]
        == reference(model, tok, TEXTS[2], max_new_tokens=2, num_beams=2)[0]
    )
    # a call's value overrides the construction's
    assert (
        pipe(TEXTS[2], max_new_tokens=5, return_tensors=True)[0]["generated_token_ids"]
        == reference(model, tok, TEXTS[2], max_new_tokens=5, num_beams=2)[0]
    )


def test_truncation(t5_pipes, loaded, monkeypatch):
    tok = loaded["t5"][1]
    pipe = t5_pipes[TEXT2TEXT_TASK]
    spy = GenerateSpy(pipe.model, monkeypatch)
    pipe(TEXTS[2], max_new_tokens=2, max_input_length=4)
    pipe(TEXTS[2], max_new_tokens=2, max_input_length=4, truncation=False)
    pipe(TEXTS[2], max_new_tokens=2)
    full = tok(TEXTS[2])["input_ids"]
    assert spy.input_ids() == [full[:3] + [tok.eos_token_id], full, full]


def test_decoding_options(t5_pipes, loaded):
    model, tok = loaded["t5"]
    pipe = t5_pipes[TEXT2TEXT_TASK]
    ids, _ = reference(model, tok, TEXTS[0], max_new_tokens=12)
    assert ids[-1] == tok.eos_token_id  # this one ends early: special tokens to show
    raw = pipe(TEXTS[0], max_new_tokens=12, skip_special_tokens=False)[0]["generated_text"]
    assert (
        raw == tok.decode(ids, skip_special_tokens=False) and raw.startswith("<pad>") and raw.endswith("</s>")
    )
    assert pipe(TEXTS[0], max_new_tokens=12, return_tensors=True) == [{"generated_token_ids": ids}]
    cleaned = pipe(TEXTS[0], max_new_tokens=12, clean_up_tokenization_spaces=True)[0]["generated_text"]
    assert cleaned == tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=True)


# -------------------------------------------------------------------------------------------------
# errors
# -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "inputs, kwargs, error, match",
    [
        ("", {}, ValueError, "empty"),
        ("   ", {}, ValueError, "empty"),
        ([], {}, ValueError, "empty"),
        (["hello", ""], {}, ValueError, "Input 1 is empty"),
        (["hello", 3], {}, TypeError, "Input 1 must be a string"),
        (3, {}, TypeError, "must be a string, got int"),
        (None, {}, TypeError, "must be a string, got NoneType"),
        ({"text": "hello"}, {}, TypeError, "must be a string, got dict"),
        ("hello", dict(prefix=3), ValueError, "`prefix` must be a string"),
        ("hello", dict(truncation="yes"), ValueError, "`truncation`"),
        ("hello", dict(max_input_length=0), ValueError, "`max_input_length`"),
        ("hello", dict(return_text=False, return_tensors=False), ValueError, "nothing to return"),
        ("hello", dict(return_text="yes"), ValueError, "`return_text` must be True or False"),
    ],
)
def test_bad_inputs_raise_clear_errors(t5_pipes, inputs, kwargs, error, match):
    with pytest.raises(error, match=match):
        t5_pipes[TEXT2TEXT_TASK](inputs, max_new_tokens=2, **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(src_lang="en"), "both `src_lang` and `tgt_lang`"),
        (dict(tgt_lang="de"), "both `src_lang` and `tgt_lang`"),
        (dict(src_lang="", tgt_lang="de"), "`src_lang` must be a non-empty string"),
        (dict(src_lang="en", tgt_lang="de", prefix_template="{source} to {tgt}: "), "unknown field"),
        (dict(src_lang="en", tgt_lang="de", prefix_template=3), "`prefix_template` must be a string"),
    ],
)
def test_bad_translation_arguments(t5_pipes, kwargs, match):
    with pytest.raises(ValueError, match=match):
        t5_pipes[TRANSLATION_TASK]("hello", max_new_tokens=2, **kwargs)


def test_rejects_decoder_only_models_and_tokenizers_without_pad(loaded):
    gpt = HfLmGPTForCausalLM(tiny_gpt_config(vocab_size=len(word_tokenizer())))
    with pytest.raises(ValueError, match="encoder-decoder"):
        pipeline(TEXT2TEXT_TASK, model=gpt, tokenizer=word_tokenizer())
    tok = word_tokenizer()
    tok.pad_token = None
    with pytest.raises(ValueError, match="no pad token"):
        pipeline(SUMMARIZATION_TASK, model=loaded["t5"][0], tokenizer=tok)


# -------------------------------------------------------------------------------------------------
# a saved pipeline ships its code
# -------------------------------------------------------------------------------------------------

REMOTE_SCRIPT = """
    import json
    import sys

    sys.modules["hf_lm"] = None  # hf_lm must not be importable: the pipeline code comes from the folders
    from transformers import pipeline

    expected = json.load(open(sys.argv[1]))
    for task, (folder, kwargs, outputs) in expected.items():
        pipe = pipeline(task, model=folder, trust_remote_code=True)
        assert type(pipe).__module__.startswith("transformers_modules"), type(pipe).__module__
        assert pipe(outputs["texts"], max_new_tokens=6, **kwargs) == outputs["results"], task
    print("REMOTE-OK")
"""


def test_saved_pipelines_load_without_hf_lm(loaded, tmp_path):
    """`pipe.save_pretrained` copies hflm_pipelines_seq2seq.py; trust_remote_code then needs no hf_lm."""
    model, _ = loaded["t5"]
    expected = {}
    for task, kwargs in (
        (TEXT2TEXT_TASK, {}),
        (SUMMARIZATION_TASK, {}),
        (TRANSLATION_TASK, {"src_lang": "en", "tgt_lang": "fr"}),
    ):
        pipe = pipeline(task, model=model, tokenizer=word_tokenizer())
        folder = tmp_path / task
        pipe.save_pretrained(folder)
        assert (folder / "hflm_pipelines_seq2seq.py").is_file()
        assert list(json.loads((folder / "config.json").read_text())["custom_pipelines"]) == [task]
        results = pipe(TEXTS[:2], max_new_tokens=6, **kwargs)
        expected[task] = [str(folder), kwargs, {"texts": TEXTS[:2], "results": results}]
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    assert "REMOTE-OK" in run_fresh_interpreter(REMOTE_SCRIPT, tmp_path / "expected.json", cwd=tmp_path)
