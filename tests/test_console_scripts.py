"""The installed entry points: the console scripts `pip install -e .` puts next to the interpreter
(`hflm-train`, ...) are declared, installed and answer `--help` from any folder; a script's result dict
is not its exit status; `training/` installs as `hf_lm_training` with every hf_lm package."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import sysconfig
from importlib.metadata import distributions
from pathlib import Path

import pytest
from setuptools import find_packages

from training import console

REPO_ROOT = Path(__file__).resolve().parents[1]

SCRIPTS = {
    "hflm-train": ("hf_lm_training.console:train", "--max_steps"),
    "hflm-finetune-classification": ("hf_lm_training.console:finetune_classification", "--label_column"),
    "hflm-finetune-translation": ("hf_lm_training.console:finetune_translation", "--source_lang"),
    "hflm-evaluate": ("hf_lm_training.console:evaluate", "--text_file"),
    "hflm-push": ("hf_lm_training.console:push", "--repo_id"),
    # transformers' own `serve` command with hf_lm's classes resolvable (hf_lm/serve.py); typer's help
    "hflm-serve": ("hf_lm.serve:main", "--port"),
}


def test_the_installed_distribution_declares_the_scripts():
    """pyproject.toml's [project.scripts], as the installed hf_lm distribution lists them."""
    # the installed one (an `hf_lm.egg-info` left in the repository root would come first on sys.path)
    (installed,) = distributions(name="hf_lm", path=[sysconfig.get_path("purelib")])
    entry_points = installed.entry_points
    declared = {ep.name: ep.value for ep in entry_points if ep.group == "console_scripts"}
    assert declared == {name: target for name, (target, _) in SCRIPTS.items()}
    for target, _ in SCRIPTS.values():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function))


def test_installed_scripts_answer_help(tmp_path):
    """Installed by `pip install -e .` (`make test` reinstalls when pyproject.toml changes)."""
    bin_dir = Path(sys.executable).parent
    missing = [name for name in SCRIPTS if not (bin_dir / name).is_file()]
    assert not missing, f"not installed in {bin_dir}: {missing}; run `pip install -e .`"
    # all at once: each start-up imports torch and transformers
    runs = {  # from a folder where no `training` or `hf_lm` folder is at hand: the installed ones run
        name: subprocess.Popen(
            [str(bin_dir / name), "--help"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in SCRIPTS
    }
    for name, process in runs.items():
        stdout, stderr = process.communicate(timeout=180)
        assert process.returncode == 0, f"{name}: {stderr[-2000:]}"
        assert "usage:" in stdout.lower() and SCRIPTS[name][1] in stdout, f"{name}: {stdout[:1000]}"


@pytest.mark.parametrize(("returned", "status"), [({"loss": 1.0}, 0), (None, 0), (1, 1), (0, 0)])
def test_a_scripts_result_is_not_its_exit_status(monkeypatch, returned, status):
    """`sys.exit(main())` would print a metrics dict and exit 1; a script's own status (push) stays."""
    import training.evaluate_cli

    seen = []
    monkeypatch.setattr(training.evaluate_cli, "main", lambda argv: seen.append(argv) or returned)
    monkeypatch.setattr(sys, "argv", ["hflm-evaluate", "--model", "m"])
    assert console.evaluate() == status
    assert seen == [["--model", "m"]]


def test_every_package_is_installed_and_training_under_its_own_name(tmp_path):
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    hf_lm_packages = find_packages(where=str(REPO_ROOT), include=["hf_lm", "hf_lm.*"])
    training_packages = [
        f"hf_lm_training.{name}" for name in find_packages(where=str(REPO_ROOT / "training"))
    ]
    assert sorted(setuptools["packages"]) == sorted([*hf_lm_packages, "hf_lm_training", *training_packages])
    assert setuptools["package-dir"] == {"hf_lm_training": "training"}

    # installed, from a folder without the repository: `hf_lm_training` imports, no `training` of ours
    check = (
        "import importlib.util, hf_lm_training.train; "
        "spec = importlib.util.find_spec('training'); print(spec.origin if spec else None)"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert str(REPO_ROOT) not in result.stdout, result.stdout
