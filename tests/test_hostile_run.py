"""What a hostile or careless user did to a run folder, and what must hold: nothing of another run's,
or of the user's, is lost or replaced, and every refusal names its cause and the way out.

- environment leftovers: `RANK`, `LOCAL_RANK`, `WORLD_SIZE` set in a shell with no launcher;
- links and `.tmp-*` files of the user's in and under the output folder;
- a run killed before its first checkpoint, then resumed or started again.

(Signals are in `test_faults.py`, with the kills.) Run `pytest tests/test_hostile_run.py -s` to see
the figures.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from safetensors.torch import load_file
from test_train import TINY

import training.train as T
from training.args import as_flags, parse_args
from training.run.folder import RunFolderBusyError, RunLock, claim_output_dir, remove_staging_leftovers
from training.run.processes import StopSignals
from training.state.atomic import is_staging_name, staging_path
from training.state.folders import list_checkpoints

SMALL = {**TINY, "max_documents": 60, "num_hidden_layers": 1, "per_device_batch_size": 4, "eval_batches": 1}


def _reset_accelerate() -> None:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture(autouse=True)
def _fresh_process_state():
    """Each test's environment makes its own process state."""
    _reset_accelerate()
    yield
    _reset_accelerate()


def _run(output_dir, **flags) -> dict:
    return T.train(*parse_args(as_flags({**SMALL, "output_dir": str(output_dir), **flags})))


def _another_runs_outputs(folder: Path) -> dict[Path, bytes]:
    """What a finished run leaves (the files the hostile user's RANK=1 run replaced); returns them."""
    (folder / "final").mkdir(parents=True)
    (folder / "final" / "model.safetensors").write_bytes(b"another run's weights")
    (folder / "metrics.csv").write_text("step,loss\n100,2.5\n")
    (folder / "final_metrics.json").write_text('{"step": 100}')
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _unchanged(files: dict[Path, bytes]) -> bool:
    return all(p.is_file() and p.read_bytes() == data for p, data in files.items())


# ----------------------------------------------------------------------------------------------
# environment leftovers
# ----------------------------------------------------------------------------------------------

# each leftover: what the run must do (None: run as process 0 of 1, refused here by the folder's
# owner; else the message naming the variable)
LEFTOVERS = {
    "RANK=1": ({"RANK": "1"}, None),
    "RANK=abc": ({"RANK": "abc"}, None),
    "RANK=1 WORLD_SIZE=1": ({"RANK": "1", "WORLD_SIZE": "1"}, None),
    "LOCAL_RANK=0": ({"LOCAL_RANK": "0"}, r"\(LOCAL_RANK=0\).*MASTER_ADDR.*torchrun"),
    "LOCAL_RANK=abc": ({"LOCAL_RANK": "abc"}, r"LOCAL_RANK='abc' is not an integer.*unset"),
    "WORLD_SIZE=2": ({"WORLD_SIZE": "2"}, r"\(WORLD_SIZE=2\).*MASTER_ADDR.*no launcher started it"),
    "WORLD_SIZE=abc": ({"WORLD_SIZE": "abc"}, r"WORLD_SIZE='abc' is not an integer"),
    "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2": (
        {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"},
        r"RANK=1, LOCAL_RANK=1, WORLD_SIZE=2.*MASTER_ADDR",
    ),
}


@pytest.mark.parametrize("leftover", LEFTOVERS)
def test_environment_leftovers_never_unlock_another_runs_folder(tmp_path, monkeypatch, caplog, leftover):
    """A `RANK=1` left in the shell made `train()` skip the lock and the ownership check and replace
    another run's final/, metrics.csv and final_metrics.json, with rc 0. The process is what
    accelerate says it is (0 of 1), so the folder stays refused; what no launcher could have set is
    refused by name before anything is touched."""
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(name, raising=False)
    variables, refusal = LEFTOVERS[leftover]
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    files = _another_runs_outputs(out)
    with caplog.at_level(logging.WARNING):
        if refusal is None:
            with pytest.raises(ValueError, match=r"another run's outputs \(final/.*--overwrite_output_dir"):
                _run(out, max_steps=2)
            if variables["RANK"] != "0":
                assert f"RANK={variables['RANK']!r} is set, but no distributed launch" in caplog.text
            # and the lock holds: a live run in the folder refuses it
            with RunLock(out), pytest.raises(RunFolderBusyError):
                _run(out, max_steps=2, overwrite_output_dir=True)
        else:
            with pytest.raises(ValueError, match=refusal):
                _run(out, max_steps=2)
            assert not (out / ".run.lock").exists()  # refused before the folder was touched
    assert _unchanged(files)
    assert not (out / "tokenizer").exists() and not (out / "checkpoints").exists()


def test_the_command_line_logs_as_the_main_process_with_a_leftover_rank(tmp_path):
    """`main()` chose its log level from RANK too: with RANK=1 the only process logged warnings only."""
    log = tmp_path / "main.log"
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            sys.stderr = open(log, "a", buffering=1)  # noqa: SIM115  (not into pytest's capture)
            root = logging.getLogger()
            for handler in list(root.handlers):  # as in a fresh interpreter: main's basicConfig decides
                root.removeHandler(handler)
            os.environ["RANK"] = "1"
            T.main(as_flags({**SMALL, "output_dir": str(tmp_path / "run"), "max_steps": 1}))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    text = log.read_text()
    assert "RANK='1' is set, but no distributed launch" in text
    assert "INFO training.run.setup: Process 0 of 1" in text, text[-2000:]


# ----------------------------------------------------------------------------------------------
# links and the user's .tmp-* files
# ----------------------------------------------------------------------------------------------


def _user_folder(tmp_path: Path) -> tuple[Path, dict[Path, bytes], list[str]]:
    """A run folder holding the user's things, links into another folder, and what killed runs of
    this project left; returns it, the user's files, and the leftovers (relative names)."""
    out, elsewhere, linked = tmp_path / "run", tmp_path / "elsewhere", tmp_path / "linked-checkpoints"
    (elsewhere / ".tmp-cache").mkdir(parents=True)
    (elsewhere / ".tmp-upload.part").write_text("half an upload")
    (elsewhere / ".tmp-cache" / "blob").write_text("cached")
    # named exactly as this project stages, but outside the folder: reached only through links
    (elsewhere / staging_path(elsewhere / "final").name).mkdir()
    (elsewhere / staging_path(elsewhere / "metrics.csv").name).write_text("not this run's")
    linked.mkdir()
    (linked / staging_path(linked / "checkpoint-00000002").name).mkdir()
    (out / "notes").mkdir(parents=True)
    (out / "notes" / ".tmp-draft.txt").write_text("a draft")
    (out / ".tmp-notes").write_text("the user's")
    (out / ".tmp-final-123-abcd0123").mkdir()  # an earlier version's name (or a user's): left alone
    (out / "data").symlink_to(elsewhere, target_is_directory=True)
    (out / "best").symlink_to(linked, target_is_directory=True)  # a linked subfolder is not looked into
    # a link named as a staging entry: the project writes none, so it is not the project's
    (out / staging_path(out / "tokenizer").name).symlink_to(
        elsewhere / ".tmp-cache", target_is_directory=True
    )
    (out / staging_path(out / "loss.png").name).symlink_to(elsewhere / ".tmp-upload.part")
    # what killed runs of this project left
    leftovers = [staging_path(out / "final"), staging_path(out / "checkpoints" / "checkpoint-00000004")]
    leftovers += [staging_path(out / "metrics.csv"), staging_path(out / "loss.png", keep_suffix=True)]
    leftovers += [staging_path(out / "checkpoints" / "checkpoint-00000002", "trash")]
    for path in leftovers:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name.startswith(".tmp-hflm-final") or "checkpoint-" in path.name:
            path.mkdir()
            (path / "model.safetensors").write_text("half")
        else:
            path.write_text("half")
    files = {
        p: p.read_bytes()
        for root in (out, elsewhere, linked)
        for p in root.rglob("*")
        if p.is_file() and not any(p == q or q in p.parents for q in leftovers)
    }
    return out, files, sorted(str(p.relative_to(out)) for p in leftovers)


def test_staging_names_are_recognisably_the_projects():
    final = Path("/x/checkpoints/checkpoint-00000008")
    assert is_staging_name(staging_path(final).name)
    assert is_staging_name(staging_path(final, "trash").name)
    assert is_staging_name(staging_path(Path("/x/loss.png"), keep_suffix=True).name)
    for name in (
        ".tmp-draft.txt",
        ".tmp-upload.part",
        ".tmp-cache",
        ".tmp-hflm-notes",
        ".tmp-final-123-abcd0123",
    ):
        assert not is_staging_name(name), name


def test_only_the_projects_own_leftovers_are_deleted_and_no_link_is_followed(tmp_path, caplog):
    """Starting a run deleted every `.tmp-*` entry in the folder and its subfolders, through links:
    a user's notes/.tmp-draft.txt, and .tmp-upload.part and .tmp-cache/ in a folder `data` links to."""
    out, files, leftovers = _user_folder(tmp_path)
    with caplog.at_level(logging.WARNING):
        removed = remove_staging_leftovers(out)
    assert sorted(str(p.relative_to(out)) for p in removed) == leftovers
    assert _unchanged(files)
    assert all(p.is_symlink() for p in out.iterdir() if p.name.startswith(".tmp-hflm-"))  # the links stay
    assert "Deleting what killed runs left half-written" in caplog.text


def test_a_run_in_a_folder_of_the_users_keeps_everything_of_theirs(tmp_path):
    out, files, leftovers = _user_folder(tmp_path)
    (out / "best").unlink()  # the run keeps its best models here
    files = {p: data for p, data in files.items() if p.exists()}
    metrics = _run(out, max_steps=2, save_every=2, load_best_model_at_end=True)
    assert metrics["step"] == 2 and (out / "final" / "model.safetensors").is_file()
    assert _unchanged(files)
    assert not any((out / name).exists() for name in leftovers)


def test_overwrite_deletes_a_linked_output_not_what_it_points_to(tmp_path):
    out, elsewhere = tmp_path / "run", tmp_path / "keep"
    (elsewhere / "final").mkdir(parents=True)
    (elsewhere / "final" / "model.safetensors").write_text("the user's model")
    out.mkdir()
    (out / "final").symlink_to(elsewhere / "final", target_is_directory=True)
    claim_output_dir(out, resuming=False, overwrite=True)
    assert not (out / "final").exists() and (elsewhere / "final" / "model.safetensors").is_file()


# ----------------------------------------------------------------------------------------------
# killed before the first checkpoint
# ----------------------------------------------------------------------------------------------


def _killed_before_first_checkpoint(out: Path) -> None:
    """What a run killed at its first step leaves: its tokenizer and metrics.csv, no checkpoint."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            forward = T.forward_loss

            def die(*args, **kwargs):
                os.kill(os.getpid(), signal.SIGKILL)
                return forward(*args, **kwargs)

            T.forward_loss = die
            _reset_accelerate()
            _run(out, max_steps=4, save_every=2)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    assert (out / "tokenizer").is_dir() and (out / "metrics.csv").is_file()
    assert not list_checkpoints(out / "checkpoints")


@pytest.mark.parametrize("resume", ["true", "auto"])
def test_a_run_killed_before_its_first_checkpoint_is_started_afresh_by_resume(tmp_path, caplog, resume):
    """`--resume` redid the data work and failed with "holds no complete checkpoint", and the plain
    rerun was refused because of the tokenizer: each sent the user to the other. Now the rerun
    names `--resume auto`, and a resume starts afresh (logging it) to the uninterrupted run's weights."""
    reference = tmp_path / "reference"
    _run(reference, max_steps=4, save_every=2)
    out = tmp_path / "run"
    _killed_before_first_checkpoint(out)
    with pytest.raises(
        ValueError, match=r"stopped before its first checkpoint.*--resume auto.*--overwrite_output_dir"
    ):
        _run(out, max_steps=4, save_every=2)
    with caplog.at_level(logging.WARNING):
        metrics = _run(out, max_steps=4, save_every=2, resume=resume)
    assert f"--resume {resume}: nothing to resume" in caplog.text and "Starting the run afresh" in caplog.text
    assert metrics["step"] == 4
    a, b = (
        load_file(reference / "final" / "model.safetensors"),
        load_file(out / "final" / "model.safetensors"),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_with_nothing_to_resume_says_what_to_do_before_any_work(tmp_path):
    empty = tmp_path / "empty"
    with pytest.raises(FileNotFoundError, match=r"--resume true: nothing to resume.*--resume auto"):
        _run(empty, max_steps=2, resume="true")
    assert not (empty / "tokenizer").exists()  # refused before any data was read
    # a finished run's outputs without checkpoints are not a stopped run's: deleting them is the user's call
    out = tmp_path / "run"
    files = _another_runs_outputs(out)
    with pytest.raises(ValueError, match=r"--resume auto: nothing to resume.*--overwrite_output_dir"):
        _run(out, max_steps=2, resume="auto")
    assert _unchanged(files)
    assert _run(out, max_steps=2, resume="auto", overwrite_output_dir=True)["step"] == 2


# ----------------------------------------------------------------------------------------------
# signal handlers
# ----------------------------------------------------------------------------------------------


def test_signal_handlers_are_set_only_in_the_main_thread():
    """A run started from another thread (a notebook's worker, a server) leaves the handlers alone;
    `signal.signal` would raise there."""
    before, errors = signal.getsignal(signal.SIGINT), []

    def in_thread():
        try:
            with StopSignals():
                assert signal.getsignal(signal.SIGINT) is before
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert errors == []
    with StopSignals() as signals:
        assert signal.getsignal(signal.SIGINT) == signals._handle
    assert signal.getsignal(signal.SIGINT) is before


# ----------------------------------------------------------------------------------------------
# command lines and argument files
# ----------------------------------------------------------------------------------------------


def test_a_field_that_may_be_none_takes_none_on_the_command_line_and_in_a_file(tmp_path):
    """`--keep_last` ("checkpoints kept, all if unset", default 3) took an int only: `--keep_last none`
    was "invalid int value", and no command line could keep every checkpoint."""
    assert parse_args(["--keep_last", "none"])[2].keep_last is None
    _, model, train = parse_args(
        ["--keep_last", "None", "--hidden_size", "NONE", "--greater_is_better", "none"]
    )
    assert train.keep_last is None and model.hidden_size is None and train.greater_is_better is False
    assert parse_args(["--keep_last", "2"])[2].keep_last == 2
    with pytest.raises(SystemExit):  # a number that cannot be None still refuses it
        parse_args(["--learning_rate", "none"])
    path = tmp_path / "run.yaml"
    path.write_text("keep_last: none\neval_batches: null\n")
    assert parse_args([str(path)])[2].keep_last is None
    # the Trainer scripts' parser too: transformers' `save_total_limit` (default 1 there)
    from training.finetune_classification import parse_args as parse_classification

    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\t0\nb\t1\n")
    argv = ["--from_scratch", "--train_file", str(tmp_path / "train.tsv"), "--save_total_limit", "none"]
    assert parse_classification(argv)[2].save_total_limit is None


def test_flags_after_an_argument_file_keep_its_nulls_and_empty_lists(tmp_path):
    """A file's values travelled as flags before the given ones, and a null or an empty list has no
    flag: `run.yaml --max_steps 5` trained with `keep_last` 3 and `report_to` csv where the file said
    null (every checkpoint) and [] (no tracker), and as the file alone said."""
    path = tmp_path / "run.yaml"
    path.write_text("keep_last: null\nreport_to: []\nmax_steps: 20\nlearning_rate: 1.0e-3\n")
    alone, flagged = parse_args([str(path)])[2], parse_args([str(path), "--max_steps", "5"])[2]
    assert alone.keep_last is flagged.keep_last is None and alone.report_to == flagged.report_to == []
    assert (alone.max_steps, flagged.max_steps, flagged.learning_rate) == (20, 5, 1e-3)
    assert parse_args([str(path), "--keep_last", "2", "--report_to", "tensorboard"])[2].keep_last == 2


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_a_seed_numpy_cannot_take_is_refused_by_name(seed, tmp_path):
    """`--seed -1` passed the checks, then the run crashed in accelerate's `set_seed` with numpy's
    "Seed must be between 0 and 2**32 - 1", naming no flag (the Trainer scripts after the data)."""
    with pytest.raises(ValueError, match=r"`seed` must be in \[0, 2\*\*32 - 1\], got"):
        parse_args(["--seed", seed])
    assert parse_args(["--seed", str(2**32 - 1)])[2].seed == 2**32 - 1
    from training.finetune_classification import parse_args as parse_classification

    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\t0\nb\t1\n")
    with pytest.raises(ValueError, match=r"`seed` must be in \[0, 2\*\*32 - 1\], got"):
        parse_classification(["--from_scratch", "--train_file", str(tmp_path / "train.tsv"), "--seed", seed])


def test_the_best_model_by_a_metric_never_computed_is_refused():
    """`--load_best_model_at_end --metric_for_best_model pseudo_perplexity --pseudo_perplexity_blocks 0`
    trained and kept the last weights, silently: the metric was None at every evaluation."""
    flags = [
        "--objective",
        "mlm",
        "--metric_for_best_model",
        "pseudo_perplexity",
        "--pseudo_perplexity_blocks",
    ]
    with pytest.raises(
        ValueError, match=r"'eval_pseudo_perplexity' is never computed with `pseudo_perplexity_blocks`=0"
    ):
        parse_args([*flags, "0", "--load_best_model_at_end"])
    assert parse_args([*flags, "2", "--load_best_model_at_end"])[2].load_best_model_at_end
    assert parse_args([*flags, "0"])[2].pseudo_perplexity_blocks == 0  # no best model asked for


@pytest.mark.parametrize("flag, inside", [("init_from", "final"), ("tokenizer_name_or_path", "tokenizer")])
def test_overwrite_never_deletes_what_the_run_starts_from(tmp_path, flag, inside):
    """`--init_from out/run/final --output_dir out/run --overwrite_output_dir` deleted final/ (the
    model to start from) with the run's other outputs, then failed to read it."""
    out = tmp_path / "run"
    files = _another_runs_outputs(out)
    (out / "final" / "config.json").write_text("{}")
    (out / "tokenizer").mkdir()
    (out / "tokenizer" / "tokenizer.json").write_text("{}")
    argv = as_flags({**SMALL, "output_dir": str(out), flag: str(out / inside), "overwrite_output_dir": True})
    with pytest.raises(
        ValueError, match=rf"--{flag} .* is one of .*'s outputs, which --overwrite_output_dir deletes"
    ):
        T.train(*parse_args(argv))
    assert _unchanged(files)
