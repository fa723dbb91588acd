"""lm-evaluation-harness on saved hf_lm folders, on the local tasks of tests/data/lm_eval.

`--model hf --model_args pretrained=DIR,trust_remote_code=True` evaluates a causal LM; the
encoder-decoders need `backend=seq2seq` too (lm-eval picks the backend from transformers' own
registries, which know no custom model type, and falls back to causal). Every log-likelihood lm-eval
reports must equal the one computed here directly with the model: multiple-choice `loglikelihood`
requests (context, continuation) and `loglikelihood_rolling` (the whole text after the end-of-text
token, as lm-eval's perplexity tasks score it).
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

from hf_lm.families import FAMILIES, GPT_SPECIAL_TOKENS
from training.data.tokenizer import train_tokenizer

lm_eval = pytest.importorskip("lm_eval")

REPO_ROOT = Path(__file__).resolve().parents[1]
TASKS = REPO_ROOT / "tests" / "data" / "lm_eval"
MC, ROLLING = "hflm_tiny_mc", "hflm_tiny_rolling"
CAUSAL_FAMILIES = ("gpt", "rnn", "ffnn")
SEQ2SEQ_FAMILIES = ("t5", "bart", "rnn_seq2seq")


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (TASKS / name).read_text().splitlines() if line.strip()]


def _corpus() -> list[str]:
    """Every text the tasks hold, so the character tokenizer knows every character."""
    mc = [f"Question: {d['question']}\nAnswer: {' '.join(d['choices'])}" for d in _jsonl("tiny_mc.jsonl")]
    return mc + [d["text"] for d in _jsonl("tiny_text.jsonl")]


def _config(family, tokenizer):
    ids = dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if family.decoder_start:
        ids["decoder_start_token_id"] = getattr(tokenizer, f"{family.decoder_start}_id")
    small = {
        "rnn_seq2seq": dict(embedding_size=16, hidden_size=16, cell_type="lstm", attention="bahdanau"),
        "rnn": dict(cell_type="lstm", hidden_size=16, num_hidden_layers=2, initializer_range=1.0),
        "ffnn": dict(context_size=3, hidden_size=16, intermediate_size=32, initializer_range=0.3),
    }
    if family.name in small:
        return family.config_class(**small[family.name], **ids)
    transformer = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    return family.config_class(max_position_embeddings=256, initializer_range=0.2, **transformer, **ids)


def save_folder(path: Path, family_name: str) -> Path:
    """A random tiny model of the family and a character tokenizer, saved together in `path`."""
    family = FAMILIES[family_name]
    tokenizer = train_tokenizer(
        _corpus(), kind="char", vocab_size=64, special_tokens=family.special_tokens or GPT_SPECIAL_TOKENS
    )
    auto = AutoModelForSeq2SeqLM if family.is_encoder_decoder else AutoModelForCausalLM
    torch.manual_seed(0)
    model = family.head(auto)(_config(family, tokenizer)).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lm_eval_models")
    return {name: save_folder(root / name, name) for name in (*CAUSAL_FAMILIES, *SEQ2SEQ_FAMILIES)}


# ---------------------------------------------------------------------------------------------
# log-likelihoods computed directly with the model
# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def causal_loglikelihood(model, context: list[int], continuation: list[int]) -> float:
    """log p(continuation | context), summed over the continuation's tokens."""
    ids = torch.tensor([context + continuation])
    logprobs = model(ids).logits[0, :-1].float().log_softmax(-1)  # position t predicts token t + 1
    targets = ids[0, 1:, None]
    return logprobs.gather(-1, targets)[len(context) - 1 :].sum().item()


@torch.no_grad()
def seq2seq_loglikelihood(model, source: list[int], target: list[int]) -> float:
    """log p(target | source): the decoder reads the start token then the target shifted right."""
    decoder_input_ids = torch.tensor([[model.config.decoder_start_token_id, *target[:-1]]])
    logits = model(input_ids=torch.tensor([source]), decoder_input_ids=decoder_input_ids).logits
    return logits[0].float().log_softmax(-1).gather(-1, torch.tensor(target)[:, None]).sum().item()


def expected_choice_loglikelihoods(folder: Path, seq2seq: bool) -> list[list[float]]:
    """Per document, the log-likelihood of each choice after `Question: ...\\nAnswer:`."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    auto = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
    model = auto.from_pretrained(folder, trust_remote_code=True).eval()
    encode = lambda text: tokenizer(text)["input_ids"]  # noqa: E731
    result = []
    for doc in _jsonl("tiny_mc.jsonl"):
        context = f"Question: {doc['question']}\nAnswer:"
        row = []
        for choice in doc["choices"]:
            continuation = " " + choice  # lm-eval's default target delimiter
            if seq2seq:
                target = tokenizer(continuation, add_special_tokens=False)["input_ids"]
                row.append(seq2seq_loglikelihood(model, encode(context), target))
            else:
                whole, head = encode(context + continuation), encode(context)
                row.append(causal_loglikelihood(model, head, whole[len(head) :]))
        result.append(row)
    return result


def expected_rolling_loglikelihoods(folder: Path) -> list[float]:
    """Per text, log p(text) after the end-of-text token (one window: the texts are short)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    return [
        causal_loglikelihood(model, [tokenizer.eos_token_id], tokenizer(doc["text"])["input_ids"])
        for doc in _jsonl("tiny_text.jsonl")
    ]


# ---------------------------------------------------------------------------------------------
# what lm-eval reports
# ---------------------------------------------------------------------------------------------


def reported(samples: list[dict]) -> list[list[float]]:
    """Per document (in document order), its requests' log-likelihoods (rolling: one request).

    A request's response is `(loglikelihood, is_greedy)`, or the bare log-likelihood for rolling
    ones; the command line's samples file writes them as strings."""
    by_doc = {}
    for sample in samples:
        first = [resp[0] for resp in sample["resps"]]  # one response per request (no repeats)
        by_doc[sample["doc_id"]] = [float(r[0] if isinstance(r, list | tuple) else r) for r in first]
    return [by_doc[i] for i in sorted(by_doc)]


@functools.cache
def task_manager():
    """Our two tasks only: indexing lm-eval's thousands of bundled tasks takes 9 s per manager."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(TASKS), include_defaults=False)


def simple_evaluate(folder: Path, tasks: list[str], **model_args) -> dict:
    """`lm_eval.simple_evaluate` with `--model hf`, run from the repository root (the tasks' data)."""
    args = ",".join(
        f"{k}={v}" for k, v in {"pretrained": folder, "trust_remote_code": True, **model_args}.items()
    )
    cwd = os.getcwd()
    os.chdir(REPO_ROOT)
    try:
        return lm_eval.simple_evaluate(
            model="hf",
            model_args=args,
            tasks=tasks,
            task_manager=task_manager(),
            device="cpu",
            batch_size=2,
            log_samples=True,
        )
    finally:
        os.chdir(cwd)


def assert_multiple_choice_matches(results: dict, expected: list[list[float]]) -> None:
    got = reported(results["samples"][MC])
    assert len(got) == len(expected) and all(len(g) == len(e) for g, e in zip(got, expected))
    for g, e in zip(got, expected):
        assert g == pytest.approx(e, abs=1e-4)
    labels = [doc["label"] for doc in _jsonl("tiny_mc.jsonl")]
    accuracy = sum(max(range(len(e)), key=e.__getitem__) == label for e, label in zip(expected, labels))
    assert results["results"][MC]["acc,none"] == pytest.approx(accuracy / len(labels))


def assert_rolling_matches(results: dict, expected: list[float]) -> None:
    got = [values[0] for values in reported(results["samples"][ROLLING])]
    assert got == pytest.approx(expected, abs=1e-4)
    texts = [doc["text"] for doc in _jsonl("tiny_text.jsonl")]
    num_bytes = sum(len(text.encode()) for text in texts)
    bits_per_byte = -sum(expected) / num_bytes / math.log(2)
    assert results["results"][ROLLING]["bits_per_byte,none"] == pytest.approx(bits_per_byte, rel=1e-5)


@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
def test_causal_lm_multiple_choice_and_rolling_match_the_direct_computation(folders, family):
    results = simple_evaluate(folders[family], [MC, ROLLING])
    assert_multiple_choice_matches(results, expected_choice_loglikelihoods(folders[family], seq2seq=False))
    assert_rolling_matches(results, expected_rolling_loglikelihoods(folders[family]))


@pytest.mark.parametrize("family", SEQ2SEQ_FAMILIES)
def test_encoder_decoders_need_backend_seq2seq(folders, family):
    results = simple_evaluate(folders[family], [MC], backend="seq2seq")
    assert_multiple_choice_matches(results, expected_choice_loglikelihoods(folders[family], seq2seq=True))


def test_without_backend_an_encoder_decoder_is_taken_for_a_causal_lm(folders):
    """Why the docs say `backend=seq2seq`: lm-eval cannot tell from a custom model type, takes the
    folder for a causal LM and fails to load it as one."""
    from lm_eval.models.huggingface import HFLM

    with pytest.raises(ValueError, match="AutoModelForCausalLM"):
        HFLM(pretrained=str(folders["t5"]), trust_remote_code=True, device="cpu")
    lm = HFLM(pretrained=str(folders["t5"]), trust_remote_code=True, device="cpu", backend="seq2seq")
    assert lm.backend == "seq2seq"


@pytest.mark.slow
def test_cli_on_a_folder_without_hf_lm(folders, tmp_path):
    """The documented command line, in a fresh interpreter where hf_lm cannot be imported."""
    script = tmp_path / "run_lm_eval.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            sys.modules["hf_lm"] = None  # only the folder's shipped code may define the model
            from lm_eval.__main__ import cli_evaluate
            sys.argv[0] = "lm_eval"
            cli_evaluate()
            """
        )
    )
    out = tmp_path / "results"
    command = [
        *("--model", "hf", "--model_args", f"pretrained={folders['gpt']},trust_remote_code=True"),
        *("--include_path", str(TASKS), "--tasks", f"{MC},{ROLLING}", "--device", "cpu"),
        *("--batch_size", "2", "--output_path", str(out), "--log_samples"),
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, str(script), *command],
        cwd=REPO_ROOT,  # the tasks' data_files are relative to it
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (results_file,) = out.rglob("results_*.json")
    results = json.loads(results_file.read_text())
    results["samples"] = {
        task: [
            json.loads(line) for line in next(out.rglob(f"samples_{task}_*.jsonl")).read_text().splitlines()
        ]
        for task in (MC, ROLLING)
    }
    assert_multiple_choice_matches(results, expected_choice_loglikelihoods(folders["gpt"], seq2seq=False))
    assert_rolling_matches(results, expected_rolling_loglikelihoods(folders["gpt"]))
