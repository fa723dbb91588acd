"""A run's `final/` folder is Hub-ready as it is: files, model card, remote-code loading, push --dry-run."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from huggingface_hub import ModelCard
from remote_code import run_fresh_interpreter
from safetensors.torch import save_file
from test_shipped_files import SHIPPED as FAMILY_FILES
from test_train import TINY as TRAIN_TINY  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer

from training.args import parse_args
from training.push import check_folder
from training.train import train

REPO_ROOT = Path(__file__).resolve().parents[1]

# The tiny run of test_train.py, 10 steps.
TINY = {**TRAIN_TINY, "max_steps": 10, "report_to": "csv"}

# a finished run's folder: the GPT family's model files, the weights, tokenizer, card and loss plot
SHIPPED = FAMILY_FILES["gpt"] | {
    "README.md",
    "chat_template.jinja",  # the GPT-family tokenizer's chat template (training.data.tokenizer.CHAT_TEMPLATE)
    "config.json",
    "generation_config.json",
    "loss.png",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}

# Loads the folder where hf_lm cannot be imported and compares the logits with the saved ones.
REMOTE_LOAD = """
import sys
sys.modules["hf_lm"] = None  # any `import hf_lm` now fails: the folder must be self-contained
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

final, expected = sys.argv[1], load_file(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(final, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(final, trust_remote_code=True).eval()
assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
ids = tokenizer(sys.argv[3], return_tensors="pt").input_ids
assert torch.equal(ids, expected["input_ids"]), (ids, expected["input_ids"])
with torch.no_grad():
    logits = model(ids).logits
torch.testing.assert_close(logits, expected["logits"], rtol=0, atol=1e-5)
print("OK")
"""


def _env(tmp_path) -> dict:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_MODULES_CACHE": str(tmp_path / "modules"),  # no sharing between xdist workers
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One tiny training run shared by the tests: (output_dir, final_metrics)."""
    out = tmp_path_factory.mktemp("output") / "tiny-run"
    argv = []
    for key, value in {**TINY, "output_dir": str(out)}.items():
        argv += [f"--{key}", str(value)]
    try:
        metrics = train(*parse_args(argv))
    finally:  # accelerate keeps process-wide singletons
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    return out, metrics


def test_final_folder_has_every_hub_file(run):
    out, _ = run
    final = out / "final"
    assert {p.name for p in final.iterdir()} == SHIPPED
    config = json.loads((final / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "hflm_modeling_gpt.HfLmGPTForCausalLM"
    assert (final / "loss.png").read_bytes() == (out / "loss.png").read_bytes()
    assert [p.name for p in check_folder(final)] == sorted(SHIPPED)


def test_model_card_metadata_and_sections(run):
    out, metrics = run
    final_metrics = json.loads((out / "final_metrics.json").read_text())
    assert final_metrics == pytest.approx(metrics)
    card = ModelCard.load(out / "final" / "README.md")

    data = card.data
    assert data.library_name == "transformers" and data.pipeline_tag == "text-generation"
    assert data.model_name == "tiny-run"
    results = {r.metric_type: r for r in data.eval_results}
    assert set(results) == {"perplexity", "loss"}
    for metric, key in (("perplexity", "eval_perplexity"), ("loss", "eval_loss")):
        result = results[metric]
        assert result.task_type == "text-generation" and result.dataset_name == "synthetic"
        assert math.isclose(result.metric_value, final_metrics[key], rel_tol=1e-12)
    (entry,) = data.to_dict()["model-index"]
    assert entry["name"] == "tiny-run"
    assert {m["type"] for m in entry["results"][0]["metrics"]} == {"perplexity", "loss"}

    text = card.text
    for row in (
        "| Hyperparameter | Value |",
        "| training steps (optimizer updates) | 10 |",
        "| per-device batch size (blocks) | 8 |",
        "| global batch size (blocks) | 8 |",
        "| world size (processes) | 1 |",
        "| peak learning rate | 0.003 |",
        "| learning-rate schedule | cosine |",
        "| warmup steps | 2 |",
        "| weight decay (matrices only) | 0.1 |",
        "| precision | fp32 |",
        "| seed | 0 |",
        "| Layers | 2 |",
        "| Hidden size | 32 |",
    ):
        assert row in text, row
    assert "Parameters | 36.10K (36,096)" in text
    assert f"Training time: {final_metrics['seconds']:.1f} s." in text
    assert "![Training and held-out loss](loss.png)" in text
    assert "## Intended use and limitations" in text and "## Training data" in text
    assert "AutoModelForCausalLM.from_pretrained(" in text
    assert "$" not in text


def test_final_folder_loads_without_hf_lm(run, tmp_path):
    final = run[0] / "final"
    prompt = "the quick brown fox"
    tokenizer = AutoTokenizer.from_pretrained(final)
    model = AutoModelForCausalLM.from_pretrained(final).eval()
    assert type(model).__module__.startswith("hf_lm.")  # in this process: the installed package
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits  # (1, T, vocab)
    expected = tmp_path / "expected.safetensors"
    save_file({"input_ids": ids.contiguous(), "logits": logits.contiguous()}, expected)

    stdout = run_fresh_interpreter(REMOTE_LOAD, final, expected, prompt, cwd=tmp_path)
    assert stdout.strip().endswith("OK")


def _push(*args, cwd=REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training.push", *args],
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_push_dry_run(run, tmp_path):
    final = run[0] / "final"
    result = _push("--folder", str(final), "--repo_id", "someone/tiny-run", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "someone/tiny-run" in result.stdout
    listed = {line.split()[0] for line in result.stdout.splitlines()[1:]}
    assert listed == SHIPPED

    broken = tmp_path / "broken"
    shutil.copytree(final, broken)
    (broken / "model.safetensors").unlink()
    result = _push("--folder", str(broken), "--repo_id", "someone/tiny-run", "--dry-run")
    assert result.returncode != 0
    assert "not Hub-ready" in result.stderr and "model.safetensors" in result.stderr
    assert "Would upload" not in result.stdout


def test_push_uploads_an_allowlist_and_refuses_escaping_symlinks(run, tmp_path, monkeypatch):
    """Secrets, training state, logs and checkpoints in the folder stay behind, and say so."""
    folder = tmp_path / "final"
    shutil.copytree(run[0] / "final", folder)
    secrets = tmp_path / "secret_token"
    secrets.write_text("hf_xxx")
    for name in ("credentials.json", "id_rsa", "rng.pt", "train.log", "optimizer.pt", "pytorch_model.bin"):
        (folder / name).write_text("do not upload")
    (folder / "checkpoints" / "checkpoint-1").mkdir(parents=True)
    (folder / "checkpoints" / "checkpoint-1" / "optimizer.pt").write_text("do not upload")
    (folder / "notes.py").write_text("import os")  # not model code: not hflm_*.py, not in auto_map
    result = _push("--folder", str(folder), "--repo_id", "someone/tiny-run", "--dry-run")
    assert result.returncode == 0, result.stderr
    listed = {line.split()[0] for line in result.stdout.splitlines()[1:]}
    assert listed == SHIPPED
    left_out = result.stderr.split("allowlist):", 1)[1]
    for name in ("credentials.json", "id_rsa", "rng.pt", "train.log", "checkpoints/", "notes.py"):
        assert name in left_out

    # what push() sends: exactly the allowlisted files, through one commit
    from training import push as push_module

    sent = {}

    class FakeApi:
        def create_repo(self, *args, **kwargs):
            pass

        def create_commit(self, repo_id, operations, **kwargs):
            sent.update({op.path_in_repo: op for op in operations})
            return type("Commit", (), {"commit_url": "https://hub/commit"})()

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    assert push_module.push(folder, "someone/tiny-run") == "https://hub/commit"
    assert set(sent) == SHIPPED

    # a symlink named like an allowed file but pointing outside the folder is refused, by name
    (folder / "vocab.txt").symlink_to(secrets)
    (folder / "plot.png").symlink_to("/etc/passwd")
    result = _push("--folder", str(folder), "--repo_id", "someone/tiny-run", "--dry-run")
    assert result.returncode == 1 and "symbolic links" in result.stderr
    assert "vocab.txt" in result.stderr and "plot.png" in result.stderr
    assert "Would upload" not in result.stdout


def test_push_sends_the_model_subfolder_the_card_points_to(run, tmp_path):
    """ELECTRA's card loads `{repo}/generator` as a fill-mask model: that folder goes up through the
    same allowlist, under its own path; its other files stay behind."""
    from training.push import select_files

    folder = tmp_path / "final"
    shutil.copytree(run[0] / "final", folder)
    shutil.copytree(run[0] / "final", folder / "generator")  # a model folder of its own
    (folder / "generator" / "optimizer.pt").write_text("do not upload")
    (folder / "other").mkdir()
    (folder / "other" / "config.json").write_text("{}")
    uploaded, left_out = select_files(folder)
    names = {p.relative_to(folder).as_posix() for p in uploaded}
    assert names == SHIPPED | {f"generator/{name}" for name in SHIPPED}
    assert {p.relative_to(folder).as_posix() for p in left_out} == {"generator/optimizer.pt", "other"}
    result = _push("--folder", str(folder), "--repo_id", "someone/electra", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "generator/model.safetensors" in result.stdout and "generator/optimizer.pt" in result.stderr


def test_check_folder_names_every_problem(run, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(run[0] / "final", broken)
    for name in ("hflm_modeling_gpt.py", "tokenizer.json", "README.md"):
        (broken / name).unlink()
    with pytest.raises(ValueError) as info:
        check_folder(broken)
    for name in ("hflm_modeling_gpt.py", "tokenizer.json", "README.md"):
        assert name in str(info.value)

    config = json.loads((broken / "config.json").read_text())
    del config["auto_map"]
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="auto_map"):
        check_folder(broken)


def test_the_card_of_a_budgeted_run_says_its_steps_were_at_most_max_steps():
    """`--max_steps 100000000 --max_train_seconds 900` (the leaderboard's pretraining) gave a card
    saying "training steps (optimizer updates) | 100,000,000" for a run of a few hundred steps, and
    no word of the budget."""
    from types import SimpleNamespace

    from training.export import card_hyperparameters
    from training.state.resume import run_settings

    plan = SimpleNamespace(
        per_device=4, accum=1, world=1, global_batch=4, block_size=32, describe=lambda: "blocks"
    )
    budgeted = run_settings(*parse_args(["--max_steps", "100000000", "--max_train_seconds", "900"]))
    rows = card_hyperparameters(budgeted, plan, "causal LM")
    assert rows["training steps (optimizer updates)"] == "at most 100,000,000"
    assert rows["wall-clock budget"].startswith("900 s of training")
    rows = card_hyperparameters(run_settings(*parse_args(["--max_steps", "10"])), plan, "causal LM")
    assert rows["training steps (optimizer updates)"] == 10 and "wall-clock budget" not in rows
    # an n-gram model is counted: its card listed AdamW, a learning rate, a schedule and steps
    rows = card_hyperparameters(
        run_settings(*parse_args(["--family", "ngram"])), plan, "causal LM", fitted=True
    )
    assert "one pass (no optimizer, no gradient steps)" in rows["fitting"]
    assert not {"optimizer", "peak learning rate", "training steps (optimizer updates)"} & set(rows)
