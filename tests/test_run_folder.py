"""A run owns its output folder: the lock, and refusing (or replacing) another run's outputs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from training.run_folder import RunFolderBusyError, RunLock, claim_output_dir, previous_run_outputs


def test_a_second_lock_on_a_folder_fails_with_the_holder_and_the_first_release_frees_it(tmp_path):
    with RunLock(tmp_path):
        with pytest.raises(RunFolderBusyError, match=f'"pid": {os.getpid()}'):
            RunLock(tmp_path).acquire()
    RunLock(tmp_path).acquire().release()  # free again


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from training.run_folder import RunLock; import time; lock = RunLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(60)"],
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
