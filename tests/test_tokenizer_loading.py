"""The tokenizer of a saved hf_lm folder loads at once, where hf_lm is not installed, as every usage
snippet and model card says: `AutoTokenizer.from_pretrained(folder, trust_remote_code=True)`.

The flag is needed for the tokenizer too, although its files hold no code: `AutoTokenizer` first
loads the folder's config with `AutoConfig`, and the config's `auto_map` (which the model needs) makes
transformers ask "[y/N]" for 15 s on a terminal, then fall back to a bare config with the warning
"You are using a model of type `hflm_gpt` to instantiate a model of type ``". Nothing in the folder
can avoid that question (transformers' `tokenization_auto.py` asks `AutoConfig` before it reads
`tokenizer_config.json`), so the snippets pass the flag. `test_without_the_flag_transformers_asks`
keeps the reason checked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_train import _fresh_accelerate_state, _run  # noqa: F401  (fixture)

from hf_lm.cards import FALLBACK_TEMPLATE, write_model_card
from hf_lm.families import FAMILIES, GPT_SPECIAL_TOKENS
from hf_lm.testing import FAMILY_CASES
from training.data.tokenizer import train_tokenizer

PROMPT = "[y/N]"
BARE_CONFIG_WARNING = "to instantiate a model of type"
# one case per family (the first model class of each config class)
CASES = list({type(case.make_config()): case for case in reversed(FAMILY_CASES)}.values())[::-1]

LOAD = """
import sys, time
sys.modules["hf_lm"] = None  # only the folder's files may be used
from transformers import AutoTokenizer
flag = sys.argv[1] == "flag"
for folder in sys.argv[2:]:
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(folder, **({"trust_remote_code": True} if flag else {}))
    print(f"{folder} {type(tokenizer).__name__} {tokenizer('the cat')['input_ids']} {time.perf_counter() - start:.2f}s")
"""


def without_pythonpath() -> dict[str, str]:
    """This environment without PYTHONPATH: nothing but the saved folders may provide hf_lm's code."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def load_tokenizers(folders: list[Path], tmp_path: Path, flag: bool = True) -> subprocess.CompletedProcess:
    """Load each folder's tokenizer in a fresh interpreter without hf_lm; standard input closed, so a
    prompt cannot wait for an answer (and the timeout fails the test if anything does)."""
    script = tmp_path / "load_tokenizers.py"
    script.write_text(textwrap.dedent(LOAD))
    env = {
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_MODULES_CACHE": str(tmp_path / "mod"),
    }
    result = subprocess.run(
        [sys.executable, str(script), "flag" if flag else "none", *map(str, folders)],
        cwd=tmp_path,
        env={**without_pythonpath(), **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def assert_loaded_at_once(result: subprocess.CompletedProcess, folders: list[Path]) -> None:
    output = result.stdout + result.stderr
    assert PROMPT not in output and BARE_CONFIG_WARNING not in output, output[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == len(folders), result.stdout
    for line in lines:
        # below the 15 s a prompt waits on a terminal (the first load also imports the config code)
        assert float(line.split()[-1].removesuffix("s")) < 12.0, line


def save_family_folders(root: Path, cases=CASES) -> list[Path]:
    """One folder per case (default: per family), written by `save_pretrained` (model) +
    `save_pretrained` (tokenizer), with its model card."""
    folders = []
    for case in cases:
        model = case.make_model()
        family = next(f for f in FAMILIES.values() if isinstance(model.config, f.config_class))
        tokenizer = train_tokenizer(
            ["the cat sat on the mat."] * 4,
            kind="char",
            vocab_size=64,
            special_tokens=family.special_tokens or GPT_SPECIAL_TOKENS,
        )
        folder = root / case.name
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        write_model_card(model, folder, tokenizer=tokenizer)
        folders.append(folder)
    return folders


def from_pretrained_calls(card: str) -> list[str]:
    """The `...from_pretrained(...)` and `pipeline(...)` calls of a card's Python snippets."""
    code = "\n".join(re.findall(r"```python\n(.*?)```", card, flags=re.S))
    return re.findall(r"(?:\w+\.from_pretrained|pipeline)\([^)]*\)", code)


def test_every_family_folder_loads_its_tokenizer_with_the_flag_at_once(tmp_path):
    folders = save_family_folders(tmp_path)
    assert_loaded_at_once(load_tokenizers(folders, tmp_path), folders)
    for folder in folders:  # and every card says so, for the model, the tokenizer and the pipeline
        calls = from_pretrained_calls((folder / "README.md").read_text())
        assert any(call.startswith("AutoTokenizer.from_pretrained") for call in calls), folder.name
        assert calls and all("trust_remote_code=True" in call for call in calls), calls


def test_the_fallback_card_loads_the_tokenizer_with_the_flag():
    calls = from_pretrained_calls(FALLBACK_TEMPLATE)
    assert any(call.startswith("AutoTokenizer.from_pretrained") for call in calls)
    assert all("trust_remote_code=True" in call for call in calls), calls


@pytest.mark.slow
def test_a_training_run_folder_and_its_card_snippet_work_without_hf_lm(tmp_path):
    """The folder `python -m training.train` leaves, and the usage snippet of its model card run as
    written, where hf_lm cannot be imported: no prompt, no warning."""
    # a context of 64: the card's snippet generates 40 tokens after its prompt
    _run(tmp_path / "run", max_steps=2, eval_every=2, save_every=2, report_to=["none"], block_size=64)
    final = tmp_path / "run" / "final"
    assert_loaded_at_once(load_tokenizers([final], tmp_path), [final])
    card = (final / "README.md").read_text()
    (snippet,) = re.findall(r"```python\n(.*?)```", card, flags=re.S)
    script = tmp_path / "card_snippet.py"
    script.write_text('import sys\nsys.modules["hf_lm"] = None\n' + snippet)
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**without_pythonpath(), "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "mod")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert PROMPT not in result.stdout + result.stderr and BARE_CONFIG_WARNING not in result.stderr


def test_without_the_flag_transformers_asks(tmp_path):
    """Why the snippets pass `trust_remote_code=True` to AutoTokenizer: without it transformers asks
    (here it cannot wait, stdin being closed) and loads the tokenizer against a bare config. If a
    transformers release stops asking, this fails: then the flag may go from the snippets."""
    (folder,) = save_family_folders(tmp_path, [c for c in FAMILY_CASES if c.name == "gpt-causal-lm"])
    output = load_tokenizers([folder], tmp_path, flag=False)
    assert PROMPT in output.stdout + output.stderr
    assert BARE_CONFIG_WARNING in output.stderr
