"""`hflm-serve` (hf_lm/serve.py): transformers' own OpenAI-compatible server on an hf_lm folder.

The server runs in a subprocess on 127.0.0.1 (a free port; always killed). Concurrent chat and
completion requests, streamed and not, go through the `openai` client, and every answer must be
`model.generate()`'s greedy tokens. The tiny GPT has a character tokenizer (one token per character)
and no special token can win its greedy argmax (their output rows are zero, the best other logit is
positive), so re-encoding a served text gives back the served token ids exactly.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from benchmarks.speed_workloads import health, start_server, stop_server
from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM
from hf_lm.serve import expose_hf_lm_classes
from training.data.tokenizer import train_tokenizer

pytest.importorskip("fastapi", reason="serving needs `pip install -e .[serve]`")
pytest.importorskip("uvicorn", reason="serving needs `pip install -e .[serve]`")
openai = pytest.importorskip("openai", reason="serving needs `pip install -e .[serve]`")

CORPUS = ["the quick brown fox jumps over the lazy dog. ", "Hello world! How are you today? 0123456789"]
PROMPTS = ["the quick brown", "Hello", "lazy dog jumps over"]
CHATS = [[{"role": "user", "content": "hello there"}], [{"role": "user", "content": "how are you?"}]]


def make_folder(path: Path) -> Path:
    """A random tiny hf_lm GPT and a character tokenizer with a chat template, saved together."""
    tokenizer = train_tokenizer(CORPUS * 4, kind="char", vocab_size=64, chat_template=True)
    config = HfLmGPTConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        initializer_range=0.5,  # peaked logits: greedy ties between tokens are out of reach
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(config).eval()
    with torch.no_grad():  # a special token's logit is then 0, below the best character's
        head = model.get_output_embeddings()
        head.weight[tokenizer.all_special_ids] = 0.0
        if getattr(head, "bias", None) is not None:
            head.bias[tokenizer.all_special_ids] = 0.0
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_folder(tmp_path_factory.mktemp("serve") / "gpt")


@pytest.fixture(scope="module")
def reference(folder):
    """The folder's model and tokenizer as a user loads them, and greedy `generate()` ids."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()

    def greedy(input_ids: list[int], n: int) -> list[int]:
        ids = torch.tensor([input_ids])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
        new = out[0, ids.shape[1] :].tolist()
        assert not set(new) & set(tokenizer.all_special_ids), "the test needs special-free generations"
        return new

    return tokenizer, greedy


def request(client, model: str, kind: str, payload, n: int, stream: bool) -> str:
    """One request through the openai client; the generated text."""
    if kind == "completion":
        response = client.completions.create(
            model=model, prompt=payload, max_tokens=n, temperature=0, stream=stream
        )
        if not stream:
            assert response.usage.completion_tokens == n
            return response.choices[0].text
        return "".join(chunk.choices[0].text or "" for chunk in response if chunk.choices)
    response = client.chat.completions.create(
        model=model, messages=payload, max_tokens=n, temperature=0, stream=stream
    )
    if not stream:
        assert response.usage.completion_tokens == n
        return response.choices[0].message.content
    return "".join(chunk.choices[0].delta.content or "" for chunk in response if chunk.choices)


def check_concurrent_requests(url: str, folder: Path, reference) -> None:
    """Chat and completions, streamed and not, all in flight at once: each equals `generate()`."""
    tokenizer, greedy = reference
    cases = []
    for i, prompt in enumerate(PROMPTS):
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        cases += [("completion", prompt, ids, 5 + 3 * i, stream) for stream in (False, True)]
    for i, messages in enumerate(CHATS):
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True
        )
        cases += [("chat", messages, ids["input_ids"], 7 + 4 * i, stream) for stream in (False, True)]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
    with ThreadPoolExecutor(len(cases)) as pool:
        futures = [pool.submit(request, client, str(folder), kind, p, n, s) for kind, p, _, n, s in cases]
        texts = [future.result() for future in futures]
    for (kind, _, ids, n, stream), text in zip(cases, texts):
        served = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert served == greedy(ids, n), f"{kind} stream={stream}: {text!r}"


def test_served_tokens_equal_generate(folder, reference, tmp_path):
    process, url = start_server(folder, tmp_path / "server.log")
    try:
        check_concurrent_requests(url, folder, reference)
    finally:
        stop_server(process)


def test_served_tokens_equal_generate_with_continuous_batching(folder, reference, tmp_path):
    # a few small blocks: requests of the batch share the paged cache, and the CPU allocates little
    flags = ["--continuous-batching", "--cb-block-size", "16", "--cb-num-blocks", "64"]
    process, url = start_server(folder, tmp_path / "server.log", *flags)
    try:
        check_concurrent_requests(url, folder, reference)
        assert health(url) == 200  # the CB worker is alive
    finally:
        stop_server(process)


def poison(folder: Path, target: Path, model_type: str | None = None) -> Path:
    """A copy of `folder` whose shipped model code raises when it is imported (and another library's
    `model_type`, one no installed package registers, when given)."""
    shutil.copytree(folder, target)
    for code in target.glob("*.py"):
        code.write_text(code.read_text() + '\nraise RuntimeError("the folder\'s code ran")\n')
    if model_type is not None:
        config = json.loads((target / "config.json").read_text())
        (target / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    return target


def test_remote_code_stays_opt_in(folder, tmp_path):
    """The server loads an hf_lm folder with the installed classes, never with the code saved next to
    the weights (transformers prefers a registered model type's classes, even with
    `--trust-remote-code`). Another library's remote code runs only with `--trust-remote-code`."""
    from transformers.cli.serving.model_manager import ModelManager

    poisoned = poison(folder, tmp_path / "poisoned")
    with pytest.raises(AttributeError, match="HfLmGPTForCausalLM"):  # what `transformers serve` meets
        ModelManager(device="cpu")._load_model(str(poisoned))
    attached = expose_hf_lm_classes()
    try:
        assert "HfLmGPTForCausalLM" in attached
        for trust_remote_code in (False, True):  # hflm-serve's default, and `--trust-remote-code`
            model = ModelManager(device="cpu", trust_remote_code=trust_remote_code)._load_model(str(poisoned))
            assert type(model) is HfLmGPTForCausalLM
        foreign = poison(folder, tmp_path / "foreign", model_type="not_hf_lm_gpt")
        with pytest.raises(ValueError, match="trust_remote_code"):
            ModelManager(device="cpu")._load_model(str(foreign))
        with pytest.raises(RuntimeError, match="the folder's code ran"):
            ModelManager(device="cpu", trust_remote_code=True)._load_model(str(foreign))
    finally:
        for name in attached:
            delattr(transformers, name)


def test_the_serve_entry_runs_both_sides():
    """The speed runner's serve entry end to end on a tiny pair, one request at a time: both servers
    answer, with the same texts (one function), and the ratio is measured."""
    from types import SimpleNamespace

    from benchmarks import speed, speed_workloads

    changes = {"requests": 3, "hidden": 32, "heads": 2, "kv_heads": 1, "intermediate": 64, "layers": 1}
    options = (
        speed.entry_options("serve", True, {"threads": 1}, {}) | changes | {"continuous_batching": False}
    )
    result = speed_workloads.run_serve(SimpleNamespace(**options))
    assert result["errors"] == {} and result["ratio"] is not None
    assert result["same_text_share"] == 1.0
