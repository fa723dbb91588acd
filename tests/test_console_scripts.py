"""The console scripts `pip install -e .` puts next to the interpreter (`hflm-train`, ...): declared in
pyproject.toml, installed, and answering `--help`; a script's result dict is not its exit status."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest

from training import console

SCRIPTS = {
    "hflm-train": ("training.console:train", "--max_steps"),
    "hflm-finetune-classification": ("training.console:finetune_classification", "--label_column"),
    "hflm-finetune-translation": ("training.console:finetune_translation", "--source_lang"),
    "hflm-evaluate": ("training.console:evaluate", "--text_file"),
    "hflm-push": ("training.console:push", "--repo_id"),
}


def test_the_installed_distribution_declares_the_scripts():
    """pyproject.toml's [project.scripts], as the installed hf_lm distribution lists them."""
    entry_points = distribution("hf_lm").entry_points
    declared = {ep.name: ep.value for ep in entry_points if ep.group == "console_scripts"}
    assert declared == {name: target for name, (target, _) in SCRIPTS.items()}
    for target, _ in SCRIPTS.values():
        assert callable(getattr(console, target.split(":")[1]))


def test_installed_scripts_answer_help():
    """Installed by `pip install -e .` (`make test` reinstalls when pyproject.toml changes)."""
    bin_dir = Path(sys.executable).parent
    missing = [name for name in SCRIPTS if not (bin_dir / name).is_file()]
    assert not missing, f"not installed in {bin_dir}: {missing}; run `pip install -e .`"
    # all at once: each start-up imports torch and transformers
    runs = {
        name: subprocess.Popen(
            [str(bin_dir / name), "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name in SCRIPTS
    }
    for name, process in runs.items():
        stdout, stderr = process.communicate(timeout=180)
        assert process.returncode == 0, f"{name}: {stderr[-2000:]}"
        assert "usage:" in stdout and SCRIPTS[name][1] in stdout, f"{name}: {stdout[:1000]}"


@pytest.mark.parametrize(("returned", "status"), [({"loss": 1.0}, 0), (None, 0), (1, 1), (0, 0)])
def test_a_scripts_result_is_not_its_exit_status(monkeypatch, returned, status):
    """`sys.exit(main())` would print a metrics dict and exit 1; a script's own status (push) stays."""
    import training.evaluate_cli

    seen = []
    monkeypatch.setattr(training.evaluate_cli, "main", lambda argv: seen.append(argv) or returned)
    monkeypatch.setattr(sys, "argv", ["hflm-evaluate", "--model", "m"])
    assert console.evaluate() == status
    assert seen == [["--model", "m"]]
