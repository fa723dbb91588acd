"""hf_lm's own pipelines on folders written by `save_pretrained` and `Trainer.save_model`, where hf_lm
is not installed.

A saved encoder-decoder generation head (T5, BART, RNN seq2seq) or BERT question-answering head
carries its pipeline file and names it in `config.custom_pipelines`, so
`pipeline("hflm-translation", model=folder, trust_remote_code=True)` works in a fresh interpreter
where `import hf_lm` fails, and gives what the pipeline gives in process with hf_lm imported.
"""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest
from remote_code import run_fresh_interpreter
from test_seq2seq_pipelines import TEXTS, word_tokenizer
from transformers import Trainer, TrainingArguments, pipeline

from hf_lm.pipelines import QA_TASK, QA_TASK_ALIAS
from hf_lm.pipelines_seq2seq import SUMMARIZATION_TASK, TEXT2TEXT_TASK, TRANSLATION_TASK
from hf_lm.testing import FAMILY_CASES

QA_INPUTS = [
    {"question": "where is the cat ?", "context": "the cat sat on the mat near the old house ."},
    {"question": "who ran ?", "context": "the dog ran in the park with a red ball ."},
]

# (model case, task, call arguments)
CHECKS = [
    ("t5-seq2seq-lm", TEXT2TEXT_TASK, {}),
    ("t5-seq2seq-lm", SUMMARIZATION_TASK, {}),
    ("t5-seq2seq-lm", TRANSLATION_TASK, {"src_lang": "en", "tgt_lang": "fr"}),
    ("t5-seq2seq-lm", f"{TRANSLATION_TASK}_en_to_de", {}),  # a pair named by the task
    ("bart-seq2seq-lm", TRANSLATION_TASK, {}),
    ("rnn-seq2seq-lm", SUMMARIZATION_TASK, {"num_beams": 2}),
    ("bert-qa", QA_TASK, {"top_k": 2}),
    ("bert-qa", QA_TASK_ALIAS, {}),
]


def model_of(name: str):
    return next(case for case in FAMILY_CASES if case.name == name).make_model(seed=0)


def run_pipeline(pipe, task: str, kwargs: dict):
    if task in (QA_TASK, QA_TASK_ALIAS):
        return pipe(QA_INPUTS, **kwargs)
    return pipe(TEXTS[:3], max_new_tokens=6, **kwargs)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{case name: folder} written by `model.save_pretrained`, with the tokenizer."""
    root = tmp_path_factory.mktemp("pipelines")
    out = {}
    for name in sorted({name for name, _, _ in CHECKS}):
        model_of(name).save_pretrained(root / name)
        word_tokenizer().save_pretrained(root / name)
        out[name] = root / name
    return out


def expected(folder, name: str, task: str, kwargs: dict) -> dict:
    """The check for the fresh interpreter: what hf_lm's registered pipeline gives in process."""
    pipe = pipeline(task, model=model_of(name), tokenizer=word_tokenizer())
    assert type(pipe).__module__.startswith("hf_lm.models.")  # hf_lm's own class, not a folder's copy
    return {
        "folder": str(folder),
        "task": task,
        "kwargs": kwargs,
        "results": run_pipeline(pipe, task, kwargs),
    }


REMOTE_SCRIPT = """
    import json
    import math
    import sys

    sys.modules["hf_lm"] = None  # hf_lm must not be importable: the pipelines come from the folders
    from transformers import AutoModelForSeq2SeqLM, pipeline

    QA = ("hflm-question-answering", "extractive-question-answering")


    def same(got, want):
        if isinstance(want, float):
            return math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6)
        if isinstance(want, dict):
            return isinstance(got, dict) and got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
        if isinstance(want, list):
            return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
        return got == want


    for check in json.load(open(sys.argv[1])):
        pipe = pipeline(check["task"], model=check["folder"], trust_remote_code=True)
        for obj in (pipe, pipe.model):
            assert type(obj).__module__.startswith("transformers_modules"), (check["task"], type(obj).__module__)
        if check["task"] in QA:
            got = pipe(QA_INPUTS, **check["kwargs"])
        else:
            got = pipe(TEXTS, max_new_tokens=6, **check["kwargs"])
        assert same(got, check["results"]), (check["task"], check["folder"], got, check["results"])

    # a model loaded from a folder without hf_lm and saved again still carries the pipelines
    model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[2], trust_remote_code=True)
    model.save_pretrained("resaved")
    config = json.load(open("resaved/config.json"))
    assert "hflm-translation" in config["custom_pipelines"], config.get("custom_pipelines")
    open("resaved/hflm_pipelines_seq2seq.py").close()
    print("REMOTE-OK")
"""


def remote_script() -> str:
    return REMOTE_SCRIPT.replace(
        'QA = ("hflm', f'QA_INPUTS = {QA_INPUTS!r}\n    TEXTS = {TEXTS[:3]!r}\n    QA = ("hflm', 1
    )


def test_saved_folders_carry_the_pipelines_where_hf_lm_is_not_installed(folders, tmp_path):
    checks = [expected(folders[name], name, task, kwargs) for name, task, kwargs in CHECKS]
    (tmp_path / "checks.json").write_text(json.dumps(checks))
    stdout = run_fresh_interpreter(
        remote_script(), tmp_path / "checks.json", folders["t5-seq2seq-lm"], cwd=tmp_path
    )
    assert "REMOTE-OK" in stdout


def test_trainer_save_model_carries_the_pipelines(tmp_path):
    model = model_of("t5-seq2seq-lm")
    args = TrainingArguments(output_dir=str(tmp_path / "run"), report_to=[], use_cpu=True)
    Trainer(model=model, args=args, processing_class=word_tokenizer()).save_model(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "hflm_pipelines_seq2seq.py").is_file()
    custom = json.loads((tmp_path / "saved" / "config.json").read_text())["custom_pipelines"]
    assert custom[TRANSLATION_TASK]["impl"] == "hflm_pipelines_seq2seq.HfLmTranslationPipeline"
    checks = [expected(tmp_path / "saved", "t5-seq2seq-lm", TEXT2TEXT_TASK, {})]
    (tmp_path / "checks.json").write_text(json.dumps(checks))
    stdout = run_fresh_interpreter(
        remote_script(), tmp_path / "checks.json", tmp_path / "saved", cwd=tmp_path
    )
    assert "REMOTE-OK" in stdout


def test_with_hf_lm_imported_a_saved_folder_gives_the_same_outputs(folders):
    """With hf_lm imported, a folder needs no `trust_remote_code` for its pipeline, as before folders
    carried them: `import hf_lm` registered the same pipelines, so the folder's copy is set aside
    (`installed_pipelines_dropped`) and hf_lm's own classes answer, the same."""
    for name, task, kwargs in CHECKS[:1] + CHECKS[-2:-1]:
        for trust in (False, True):
            pipe = pipeline(task, model=str(folders[name]), trust_remote_code=trust)
            assert type(pipe).__module__.startswith("hf_lm.models.hflm_pipelines"), type(pipe).__module__
            assert run_pipeline(pipe, task, kwargs) == expected(folders[name], name, task, kwargs)["results"]


HUB_RESAVE_SCRIPT = """
    import json
    import sys

    sys.modules["hf_lm"] = None  # hf_lm cannot be imported
    from transformers import AutoModelForSeq2SeqLM, pipeline

    # offline, from the Hub cache only: the repository's files were never in a folder of ours
    model = AutoModelForSeq2SeqLM.from_pretrained("someone/hflm-t5", trust_remote_code=True)
    assert model.name_or_path == "someone/hflm-t5"
    model.save_pretrained("resaved")
    config = json.load(open("resaved/config.json"))
    assert "hflm-translation" in config.get("custom_pipelines", {}), config.get("custom_pipelines")
    pipe = pipeline("hflm-translation", model="resaved", tokenizer="someone/hflm-t5", trust_remote_code=True)
    assert type(pipe).__module__.startswith("transformers_modules"), type(pipe).__module__
    print("HUB-RESAVE-OK", pipe(["a b c"], max_new_tokens=3))
"""


def test_a_hub_model_resaved_without_hf_lm_carries_the_pipelines(folders, tmp_path):
    """A model loaded by repository id (here from a Hub cache, offline) where hf_lm is not installed, then
    saved again, still ships its pipeline file: it comes from the repository's files, not a folder."""
    repo = tmp_path / "hub" / "models--someone--hflm-t5"
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(folders["t5-seq2seq-lm"], repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    script = f"import os\nos.environ['HF_HUB_CACHE'] = {str(tmp_path / 'hub')!r}\n" + textwrap.dedent(
        HUB_RESAVE_SCRIPT
    )
    stdout = run_fresh_interpreter(script, cwd=tmp_path)
    assert "HUB-RESAVE-OK" in stdout
