"""A run owns its output folder: the lock, and refusing (or replacing) another run's outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from training.run.folder import (
    RunFolderBusyError,
    RunLock,
    claim_output_dir,
    previous_run_outputs,
    remove_staging_leftovers,
)


def test_a_second_lock_on_a_folder_fails_with_the_holder_and_the_first_release_frees_it(tmp_path):
    with RunLock(tmp_path):
        with pytest.raises(RunFolderBusyError, match=f'"pid": {os.getpid()}'):
            RunLock(tmp_path).acquire()
    RunLock(tmp_path).acquire().release()  # free again


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from training.run.folder import RunLock; import time; lock = RunLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(RunFolderBusyError, match=str(holder.pid)):
        RunLock(tmp_path).acquire()
    holder.kill()
    holder.wait()
    RunLock(tmp_path).acquire().release()


def test_claiming_a_folder_with_another_runs_outputs(tmp_path):
    (tmp_path / "checkpoints" / "checkpoint-00000020").mkdir(parents=True)
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "model.safetensors").write_text("x")
    (tmp_path / "metrics.csv").write_text("step\n")
    (tmp_path / "notes.txt").write_text("the user's own file")
    (tmp_path / "best").mkdir()  # empty: nothing of a run
    with pytest.raises(ValueError, match=r"checkpoints/, final/, metrics.csv.*--overwrite_output_dir"):
        claim_output_dir(tmp_path, resuming=False, overwrite=False)
    claim_output_dir(tmp_path, resuming=True, overwrite=False)  # its own run: nothing to refuse
    assert len(previous_run_outputs(tmp_path)) == 3
    claim_output_dir(tmp_path, resuming=False, overwrite=True)
    assert previous_run_outputs(tmp_path) == []
    assert (tmp_path / "notes.txt").read_text() == "the user's own file"  # only run outputs go


def _leave_staging(folder):
    """What a run killed mid-write leaves: staging folders and files next to its outputs, named as
    `training.state.atomic.staging_path` names them."""
    checkpoint = folder / "checkpoints" / ".tmp-hflm-checkpoint-00000008-123-abcd0123"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_text("half")
    (folder / "best").mkdir(exist_ok=True)
    (folder / "best" / ".tmp-hflm-trash-checkpoint-00000004-123-0123abcd").mkdir()
    (folder / ".tmp-hflm-final-123-abcd0123").mkdir()
    (folder / ".tmp-hflm-metrics.csv-123-abcd0123").write_text("step\n")
    (folder / ".tmp-hflm-loss.png-123-abcd0123.png").write_text("half")
    return [
        ".tmp-hflm-final-123-abcd0123",
        ".tmp-hflm-loss.png-123-abcd0123.png",
        ".tmp-hflm-metrics.csv-123-abcd0123",
        "best/.tmp-hflm-trash-checkpoint-00000004-123-0123abcd",
        "checkpoints/.tmp-hflm-checkpoint-00000008-123-abcd0123",
    ]


def test_staging_leftovers_of_killed_runs_are_removed_and_nothing_else(tmp_path):
    staged = _leave_staging(tmp_path)
    (tmp_path / "checkpoints" / "checkpoint-00000004").mkdir()
    (tmp_path / "notes.tmp").write_text("the user's own file")
    removed = remove_staging_leftovers(tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in removed) == sorted(staged)
    assert not list(tmp_path.rglob(".tmp-hflm-*"))
    assert (tmp_path / "checkpoints" / "checkpoint-00000004").is_dir() and (tmp_path / "notes.tmp").is_file()
    assert remove_staging_leftovers(tmp_path / "missing") == []


# ----------------------------------------------------------------------------------------------
# In the training loop
# ----------------------------------------------------------------------------------------------

LOOP = (
    "--dataset synthetic --max_documents 120 --vocab_size 300 --block_size 32 --hidden_size 32 "
    "--num_hidden_layers 1 --num_attention_heads 2 --per_device_batch_size 4 --warmup_steps 2 "
    "--eval_every 4 --eval_batches 2 --save_every 4 --keep_last 2 --report_to csv"
).split()


def _train(output_dir, *flags):
    from training.args import parse_args
    from training.train import train

    return train(*parse_args([*LOOP, "--output_dir", str(output_dir), *flags]))


def _weights(path):
    from safetensors.torch import load_file

    return load_file(path / "final" / "model.safetensors")


def test_a_new_run_in_another_runs_folder_is_refused_or_replaced(tmp_path):
    """The issue's sequence: run A saves checkpoints; run B (no --resume) used to save checkpoint 4 and
    prune it at once, and resuming B returned A's model. Now B is refused, or replaces A when told."""
    out = tmp_path / "run"
    _train(out, "--max_steps", "12", "--seed", "0")
    a_weights = _weights(out)
    with pytest.raises(ValueError, match=r"another run's outputs \(checkpoints/.*--overwrite_output_dir"):
        _train(out, "--max_steps", "8", "--seed", "1")
    assert all(torch.equal(a_weights[k], v) for k, v in _weights(out).items())  # A untouched

    metrics = _train(out, "--max_steps", "8", "--seed", "1", "--overwrite_output_dir")
    assert metrics["step"] == 8
    from training.state.folders import list_checkpoints

    assert [step for step, _ in list_checkpoints(out / "checkpoints")] == [
        4,
        8,
    ]  # only B's, none pruned early
    resumed = _train(out, "--max_steps", "8", "--seed", "1", "--resume")
    assert resumed["step"] == 8 and json.loads((out / "final_metrics.json").read_text())["step"] == 8
    assert not all(torch.equal(a_weights[k], v) for k, v in _weights(out).items())  # B's model, not A's


def test_a_run_deletes_what_a_killed_run_left_half_written(tmp_path):
    out = tmp_path / "run"
    _train(out, "--max_steps", "4")
    _leave_staging(out)  # as if a later run was killed while saving
    _train(out, "--max_steps", "8", "--resume")
    assert not list(out.rglob(".tmp-hflm-*"))


def test_a_second_live_run_in_the_same_folder_is_refused(tmp_path):
    out = tmp_path / "run"
    with RunLock(out):  # a live run holds the folder (another process, or this one)
        with pytest.raises(RunFolderBusyError, match="in use by another run"):
            _train(out, "--max_steps", "2")
    assert not (out / "tokenizer").exists()  # refused before writing anything


def test_resume_applies_changed_optimizer_settings_and_the_card_says_so(tmp_path):
    out = tmp_path / "run"
    _train(out, "--max_steps", "8", "--learning_rate", "3e-3", "--weight_decay", "0.1")
    metrics = _train(
        out, "--max_steps", "12", "--learning_rate", "1e-5", "--weight_decay", "0.5", "--resume", "true"
    )
    changes = metrics["settings_changes"]
    assert changes[0]["step"] == 8
    assert changes[0]["changed"] == {
        "learning_rate": [3e-3, 1e-5],
        "weight_decay": [0.1, 0.5],
        "max_steps": [8, 12],
    }
    # what the optimizer really used after the resume: the new decay, a rate on the new schedule
    state = torch.load(out / "checkpoints" / "checkpoint-00000012" / "optimizer.pt", weights_only=True)
    assert state["param_groups"][0]["weight_decay"] == 0.5
    assert all(g["initial_lr"] == 1e-5 and g["lr"] <= 1e-5 for g in state["param_groups"])
    card = (out / "final" / "README.md").read_text()
    assert "settings changed on resume" in card and "learning_rate 0.003 until step 8, then 1e-05" in card


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (("--max_steps", "4"), "past max_steps=4"),
        (("--max_steps", "12", "--max_documents", "100"), r"max_documents: 120 -> 100"),
        (("--max_steps", "12", "--eval_fraction", "0.2"), r"eval_fraction: 0.05 -> 0.2"),
    ],
)
def test_resume_refuses_changes_that_would_make_it_another_run(tmp_path, flags, match):
    out = tmp_path / "run"
    _train(out, "--max_steps", "8")
    with pytest.raises(ValueError, match=match):
        _train(out, *flags, "--resume", "true")
