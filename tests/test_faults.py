"""Fault injection: runs killed at any moment, a full disk, damaged checkpoints and bad batches.

Each kill runs the training loop in a forked child (no second interpreter to start: the parent's
imports are shared) that SIGKILLs itself at a chosen point: in the middle of writing a file (the
file is written, cut to half its length, then the process dies, as a kill mid-write leaves it),
between two steps, inside an evaluation. The run is then resumed in this process, and must end
with the weights of an uninterrupted run, bit for bit, and a `metrics.csv` without duplicated or
torn rows. The points are a fixed, seeded list covering every file the loop writes.

The suite's figures (the kills survived out of those tried, the damaged checkpoints recovered) are
printed; run `pytest tests/test_faults.py -s -m slow` to see them.
"""

import contextlib
import csv
import json
import logging
import math
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from conftest import TORCHRUN_2, tiny_gpt_config
from safetensors.torch import load_file
from test_train import REPO_ROOT, RESUME, TINY, _env
from transformers import AutoTokenizer

import training.export as export
import training.objectives.evaluation as evaluation
import training.run.log as run_log
import training.run.setup as run_module
import training.state.atomic as atomic
import training.state.checkpoint as ckpt
import training.state.folders as folders
import training.train as T
from hf_lm import HfLmGPTForCausalLM
from training.args import as_flags, parse_args
from training.run.folder import LOCK_FILE, RunFolderBusyError
from training.state.folders import (
    CorruptCheckpointError,
    checkpoint_record,
    list_checkpoints,
    list_checkpoints_with_run_ids,
    verify_checkpoint,
)
from training.state.stateful import CheckpointState

# A tiny run with everything the loop can write: dropout (RNG streams), accumulation (a kill
# between micro-steps), a checkpoint every 2 steps with keep_last 2 (pruning), the best model
# (best/), metrics.csv, loss.png, final/ and final_metrics.json.
BASE = {
    **TINY,
    "per_device_batch_size": 4,
    "gradient_accumulation_steps": 2,
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
    "max_steps": 12,
    "save_every": 2,
    "keep_last": 2,
    "eval_every": 4,
    "eval_batches": 2,
    "load_best_model_at_end": True,
    "report_to": "csv",
}


def _argv(output_dir, **overrides) -> list[str]:
    return as_flags({**BASE, "output_dir": str(output_dir), **overrides})


def _reset_accelerate() -> None:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def _run(output_dir, **overrides) -> dict:
    _reset_accelerate()
    try:
        return T.train(*parse_args(_argv(output_dir, **overrides)))
    finally:
        _reset_accelerate()


def _weights(output_dir) -> dict[str, torch.Tensor]:
    return load_file(Path(output_dir) / "final" / "model.safetensors")


def _same_weights(a, b) -> bool:
    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted run every interrupted one must reproduce."""
    out = tmp_path_factory.mktemp("reference") / "run"
    _run(out)
    return out


# ---------------------------------------------------------------------------------------------
# the child process and its kill points
# ---------------------------------------------------------------------------------------------


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _cut(path: Path) -> None:
    """Leave `path` as a kill in the middle of writing it does: its first half."""
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])


class Countdown:
    """True at the `n`-th call that matches."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self) -> bool:
        self.n -= 1
        return self.n == 0


def kill_writing(file_name: str, n: int):
    """Die in the middle of the `n`-th write of a checkpoint file named `file_name`."""

    def install():
        hit = Countdown(n)
        writers = {"_torch_save": ckpt._torch_save, "write_text_synced": ckpt.write_text_synced}

        def patched(real):
            def write(*args):
                path = Path(args[-1] if real is writers["_torch_save"] else args[0])
                real(*args)
                if path.name == file_name and hit():
                    _cut(path)
                    _die()

            return write

        for name, real in writers.items():
            setattr(ckpt, name, patched(real))
        save_model = ckpt.save_model

        def save_model_then_die(model, filename, *args, **kwargs):
            save_model(model, filename, *args, **kwargs)
            if Path(filename).name == file_name and hit():
                _cut(Path(filename))
                _die()

        ckpt.save_model = save_model_then_die

    return install


def kill_around_rename(n: int, after: bool):
    """Die just before (or after) the `n`-th checkpoint folder is renamed to its final name."""

    def install():
        hit, swap_in = Countdown(n), ckpt.swap_in

        def swap(tmp, final):
            counted = final.name.startswith("checkpoint-") and hit()
            if counted and not after:
                _die()
            swap_in(tmp, final)
            if counted:
                _die()

        ckpt.swap_in = swap

    return install


def kill_pruning(n: int):
    """Die in the middle of the `n`-th deletion of a pruned checkpoint (half its files gone)."""

    def install():
        hit, remove = Countdown(n), folders._remove

        def half_remove(path):
            if not hit():
                return remove(path)
            trash = atomic.staging_path(path, "trash")  # as `_remove` names it
            os.replace(path, trash)
            for file in sorted(trash.iterdir())[::2]:
                file.unlink()
            _die()

        folders._remove = half_remove

    return install


def kill_saving_tokenizer():
    """Die in the middle of writing the run's tokenizer.json."""

    def install():
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        save = TokenizersBackend.save_pretrained

        def save_then_die(self, folder, *args, **kwargs):
            out = save(self, folder, *args, **kwargs)
            if "tokenizer" in Path(folder).name and "final" not in Path(folder).name:
                _cut(Path(folder) / "tokenizer.json")
                _die()
            return out

        TokenizersBackend.save_pretrained = save_then_die

    return install


def kill_appending_row(n: int):
    """Die after the first byte of the `n`-th row of metrics.csv: at step 10 or 12, "1", a row of
    step 1 to a reader that does not know the row was cut short."""

    def install():
        hit, write = Countdown(n), run_log.CsvLog.write

        def torn_write(self, row):
            if not hit():
                return write(self, row)
            with open(self.path, "a", newline="") as f:
                f.write(str(row["step"])[0])
            _die()

        run_log.CsvLog.write = torn_write

    return install


def kill_replacing(file_name: str, n: int = 1):
    """Die in the middle of the `n`-th whole-file rewrite of `file_name` (metrics.csv, final_metrics.json)."""

    def install():
        # metrics.csv is rewritten by the run log, final_metrics.json by the export
        module = export if file_name == "final_metrics.json" else run_log
        hit, atomic_write_text = Countdown(n), module.atomic_write_text

        def torn(path, text):
            path = Path(path)
            if path.name == file_name and hit():
                # as atomic_write_text would be killed: half the temporary sibling written
                atomic.staging_path(path).write_text(text[: len(text) // 2])
                _die()
            atomic_write_text(path, text)

        module.atomic_write_text = torn

    return install


def kill_at_call(module, name: str, n: int):
    """Die at the `n`-th call of `module.name` (a forward of a micro-batch, an evaluation...)."""

    def install():
        hit, real = Countdown(n), getattr(module, name)

        def call(*args, **kwargs):
            if hit():
                _die()
            return real(*args, **kwargs)

        setattr(module, name, call)

    return install


def kill_writing_final(file_name: str):
    """Die with final/'s `file_name` half written (into whatever folder final/ is staged in)."""

    def install():
        write_final_folder = export.write_final_folder

        def torn(model, tokenizer, folder, loss_png):
            write_final_folder(model, tokenizer, folder, loss_png)
            _cut(Path(folder) / file_name)
            _die()

        export.write_final_folder = torn

    return install


def kill_drawing_loss():
    """Die with loss.png half drawn."""

    def install():
        plot = export.plot_loss_curves

        def torn(curves, path, **kwargs):
            plot(curves, path, **kwargs)
            _cut(Path(path))
            _die()

        export.plot_loss_curves = torn

    return install


def run_in_child(
    output_dir, hooks=(), log: Path | None = None, fsize_limit: int | None = None, cli: bool = False, **flags
) -> int:
    """Train in a forked child with `hooks` installed; returns its wait status (killed, or exit code).

    `cli`: through the command line's `main` (its exit status, its log in `log`), not `train()`."""
    log = log or Path(output_dir).parent / "child.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = sys.stderr = open(log, "a", buffering=1)  # not into pytest's capture
            sys.unraisablehook = sys.__unraisablehook__  # "Exception ignored in ..." into the log
            for hook in hooks:
                hook()
            if fsize_limit is not None:
                # a full disk: writes past the limit fail with EFBIG instead of killing the process
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, resource.RLIM_INFINITY))
            _reset_accelerate()
            if cli:
                root = logging.getLogger()  # pytest's capture handlers would keep the log in the child
                root.addHandler(logging.StreamHandler(sys.stderr))
                root.setLevel(logging.INFO)
                try:
                    T.main(_argv(output_dir, **flags))
                    code = 0
                except SystemExit as exit_:
                    code = exit_.code
            else:
                T.train(*parse_args(_argv(output_dir, **flags)))
                code = 0
        except BaseException:
            with contextlib.suppress(Exception):
                traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


def _killed(status: int) -> bool:
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def _check_csv(output_dir) -> None:
    with open(Path(output_dir) / "metrics.csv", newline="") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f)]
    assert steps == sorted(set(steps)) and steps[-1] == BASE["max_steps"], steps


# The kill points: one per way a write (or a step) can be cut short, at an occurrence drawn from a
# seeded generator. A list of several means: killed at the first, resumed and killed at the next.
_rng = random.Random(14)
KILL_POINTS = {
    "tokenizer.json": [kill_saving_tokenizer()],
    "model.safetensors": [kill_writing("model.safetensors", _rng.randint(1, 6))],
    "optimizer.pt": [kill_writing("optimizer.pt", _rng.randint(1, 6))],
    "scheduler.pt": [kill_writing("scheduler.pt", _rng.randint(1, 6))],
    "rng.pt": [kill_writing("rng.pt", _rng.randint(1, 6))],
    "config.json": [kill_writing("config.json", _rng.randint(1, 6))],
    "state.json": [kill_writing("state.json", _rng.randint(1, 6))],
    "manifest.json": [kill_writing("manifest.json", _rng.randint(1, 6))],
    "COMPLETE": [kill_writing("COMPLETE", _rng.randint(1, 6))],
    "before rename": [kill_around_rename(_rng.randint(1, 6), after=False)],
    "after rename": [kill_around_rename(_rng.randint(1, 5), after=True)],
    "pruning": [kill_pruning(_rng.randint(1, 3))],
    "metrics.csv row": [kill_appending_row(_rng.randint(5, 6))],  # the rows of steps 10, 12
    "mid-step, then metrics.csv rewrite": [
        kill_at_call(T, "forward_loss", _rng.randint(2, 23)),
        kill_replacing("metrics.csv"),
    ],
    "evaluation": [kill_at_call(evaluation, "evaluate", _rng.randint(1, 3))],
    "final/": [kill_writing_final("model.safetensors")],
    "loss.png": [kill_drawing_loss()],
    "final_metrics.json": [kill_replacing("final_metrics.json")],
    "mid-step, twice": [
        kill_at_call(T, "forward_loss", _rng.randint(1, 11)),
        kill_at_call(T, "forward_loss", _rng.randint(1, 11)),
    ],
}


def _check_after_kill(out: Path) -> None:
    """What a killed run leaves must be whole: every file and folder is the old one or the new one."""
    for folder in (out / "checkpoints", out / "best"):
        for _, path in list_checkpoints(folder):
            assert verify_checkpoint(path) == [], path
    if (out / "tokenizer").exists():
        AutoTokenizer.from_pretrained(out / "tokenizer")
    if (out / "final").exists():
        load_file(out / "final" / "model.safetensors")
        assert (out / "final" / "README.md").is_file()  # the card goes in last
    if (out / "final_metrics.json").exists():
        json.loads((out / "final_metrics.json").read_text())
    if (out / "loss.png").exists():
        assert (out / "loss.png").read_bytes().endswith(b"IEND\xaeB`\x82"), "a torn loss.png"


def _kill_and_resume(reference: Path, out: Path, hooks: list) -> tuple[int, int]:
    """Kill a run at each hook in turn (resuming in between), then resume it to its end.

    Returns:
        (kills tried, kills survived: the final weights equal the uninterrupted run's).
    """
    tried = 0
    for hook in hooks:
        status = run_in_child(out, [hook], resume="auto")
        assert _killed(status), (
            f"the kill point was never reached (status {status}): {out.parent / 'child.log'}"
        )
        tried += 1
        _check_after_kill(out)
    metrics = _run(out, resume="auto")
    assert metrics["step"] == BASE["max_steps"]
    assert _same_weights(reference, out)
    assert json.loads((out / "final_metrics.json").read_text())["step"] == BASE["max_steps"]
    _check_csv(out)
    AutoTokenizer.from_pretrained(out / "tokenizer")  # loads: never left torn
    for _, path in list_checkpoints(out / "checkpoints"):
        assert verify_checkpoint(path) == [], path
    return tried, tried


FAST_POINTS = ("tokenizer.json", "model.safetensors", "pruning")


@pytest.mark.parametrize("point", FAST_POINTS)
def test_sigkill_while_writing_resumes_exactly(reference, tmp_path, point):
    _kill_and_resume(reference, tmp_path / "run", KILL_POINTS[point])


@pytest.mark.slow
def test_sigkill_at_every_point_resumes_exactly(reference, tmp_path, capsys):
    """Every kill point of the seeded list (those of the fast test too), each in a fresh run folder."""
    tried = survived = 0
    failures = {}
    for i, (point, hooks) in enumerate(KILL_POINTS.items()):
        try:
            t, s = _kill_and_resume(reference, tmp_path / f"p{i}" / "run", hooks)
        except Exception as err:
            failures[point] = f"{type(err).__name__}: {str(err)[:500]}"
            t, s = len(hooks), 0
        tried, survived = tried + t, survived + s
    with capsys.disabled():
        print(
            f"\nfault injection: {survived}/{tried} SIGKILLs resumed to bit-identical weights "
            f"({len(KILL_POINTS)} kill points)"
        )
    assert not failures, failures


# ---------------------------------------------------------------------------------------------
# SIGINT (Ctrl-C) and SIGTERM
# ---------------------------------------------------------------------------------------------


class _SignalInDel:
    """An object whose finalizer sends signals: a KeyboardInterrupt raised there is printed
    ("Exception ignored in") and swallowed, as one landing in regex's `Group.__del__` was."""

    def __init__(self, signums) -> None:
        self.signums = signums

    def __del__(self) -> None:
        for signum in self.signums:
            os.kill(os.getpid(), signum)


def signal_at_call(module, name: str, n: int, signums=(signal.SIGINT,), in_del: bool = False, after=False):
    """Send `signums` to this process at the `n`-th call of `module.name` (before it runs, or
    `after` it returned), from a finalizer with `in_del`."""

    def install():
        hit, real = Countdown(n), getattr(module, name)

        def send():
            if in_del:
                _SignalInDel(signums)  # finalized at once: the signal is handled inside __del__
            else:
                for signum in signums:
                    os.kill(os.getpid(), signum)

        def call(*args, **kwargs):
            now = hit()
            if now and not after:
                send()
            out = real(*args, **kwargs)
            if now and after:
                send()
            return out

        setattr(module, name, call)

    return install


def _user_files(out: Path) -> dict[Path, bytes]:
    """Plant what a user keeps in and next to a run folder (`.tmp-*` names, a linked data folder);
    returns every file, to check nothing was lost."""
    elsewhere = out.parent / "elsewhere"
    (elsewhere / ".tmp-cache").mkdir(parents=True)
    (elsewhere / ".tmp-upload.part").write_text("half an upload")
    (elsewhere / ".tmp-cache" / "blob").write_text("cached")
    (out / "notes").mkdir(parents=True)
    (out / "notes" / ".tmp-draft.txt").write_text("a draft")
    (out / ".tmp-mine.txt").write_text("mine")
    (out / "data").symlink_to(elsewhere, target_is_directory=True)
    return {p: p.read_bytes() for root in (out, elsewhere) for p in root.rglob("*") if p.is_file()}


def _nothing_lost(files: dict[Path, bytes]) -> None:
    for path, data in files.items():
        assert path.is_file() and path.read_bytes() == data, f"{path} was lost or changed"


def _exit_code(status: int) -> int | None:
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else None


# The signal points: where in a run a signal arrives, what it is, and whether the run stops at the
# step boundary after saving ("boundary") or at once ("at once": before or after the training steps,
# or a second signal). The occurrences are drawn from a seeded generator.
_srng = random.Random(33)
SIGNAL_POINTS = {
    "SIGINT in set-up, after the tokenizer": (
        signal_at_call(run_module, "prepare_data", 1, after=True), signal.SIGINT, "at once"),
    "SIGINT mid-step": (signal_at_call(T, "forward_loss", _srng.randint(1, 23)), signal.SIGINT, "boundary"),
    "SIGINT in a __del__, mid-step": (
        signal_at_call(T, "forward_loss", _srng.randint(1, 23), in_del=True), signal.SIGINT, "boundary"),
    "SIGINT in an evaluation": (
        signal_at_call(evaluation, "evaluate", _srng.randint(1, 3)), signal.SIGINT, "boundary"),
    "SIGINT while saving a checkpoint": (
        signal_at_call(ckpt, "_torch_save", _srng.randint(1, 30)), signal.SIGINT, "boundary"),
    "SIGTERM mid-step": (
        signal_at_call(T, "forward_loss", _srng.randint(1, 23), (signal.SIGTERM,)), signal.SIGTERM, "boundary"),
    "SIGINT twice, mid-step": (
        signal_at_call(T, "forward_loss", _srng.randint(1, 23), (signal.SIGINT, signal.SIGINT)),
        signal.SIGINT, "at once"),
    "SIGINT while writing final/": (
        signal_at_call(export, "write_final_folder", 1, after=True), signal.SIGINT, "at once"),
}  # fmt: skip


def _signal_and_resume(reference: Path, out: Path, point: str) -> None:
    """Stop a run (through the command line) with a signal at `point`, check how it stopped, then
    resume it to its end: the uninterrupted run's weights, bit for bit, and the user's files kept."""
    hook, signum, how = SIGNAL_POINTS[point]
    files = _user_files(out)
    log = out.parent / "child.log"
    status = run_in_child(out, [hook], log=log, cli=True, resume="auto")
    text = log.read_text()
    assert _exit_code(status) == 128 + signum, f"{point}: status {status}; {text[-3000:]}"
    name = signal.Signals(signum).name
    if how == "boundary":  # stopped at a step boundary: that step's checkpoint is the newest
        assert f"Stopped by {name} after step" in text, text[-3000:]
        step = int(text.split(f"Stopped by {name} after step ")[1].split()[0])
        assert list_checkpoints(out / "checkpoints")[-1][0] == step
        assert "Exception ignored" not in text, "a signal was swallowed"
    else:
        assert f"Stopped at once by {'a second ' if 'twice' in point else ''}{name}" in text, text[-3000:]
    _check_after_kill(out)
    _nothing_lost(files)
    metrics = _run(out, resume="auto")
    assert metrics["step"] == BASE["max_steps"]
    assert _same_weights(reference, out), point
    _check_csv(out)
    _nothing_lost(files)


FAST_SIGNAL_POINTS = ("SIGINT in a __del__, mid-step", "SIGINT twice, mid-step", "SIGTERM mid-step")


@pytest.mark.parametrize("point", FAST_SIGNAL_POINTS)
def test_a_signal_stops_the_run_cleanly_and_it_resumes_exactly(reference, tmp_path, point):
    _signal_and_resume(reference, tmp_path / "run", point)


@pytest.mark.slow
def test_signals_at_every_point_stop_cleanly_and_resume_exactly(reference, tmp_path, capsys):
    """Every signal point of the seeded list, each in a fresh run folder."""
    failures = {}
    for i, point in enumerate(SIGNAL_POINTS):
        try:
            _signal_and_resume(reference, tmp_path / f"s{i}" / "run", point)
        except Exception as err:
            failures[point] = f"{type(err).__name__}: {str(err)[:500]}"
    with capsys.disabled():
        print(
            f"\nfault injection: {len(SIGNAL_POINTS) - len(failures)}/{len(SIGNAL_POINTS)} SIGINT/SIGTERM points "
            "stopped cleanly (exit 130/143) and resumed to bit-identical weights, the user's files kept"
        )
    assert not failures, failures


# Runs in one 2-process launch: A to its end; then B, in which only rank 1 receives SIGINT (at its
# 5th training forward, in update 5), so both ranks must stop after the same step with one checkpoint
# holding both ranks' random streams; then B resumed to its end.
SIGNAL_ONE_RANK = """
import os, signal, sys
from accelerate import PartialState
from accelerate.state import AcceleratorState, GradientState
import training.train as T
from training.run.processes import RunInterrupted, end_process_group

def train(argv):
    try:
        T.train(*T.parse_args(argv))
    finally:
        AcceleratorState._reset_state(True)  # the process group stays; the next run joins it again
        GradientState._reset_state()

at = sys.argv.index("--then")
a, b = sys.argv[1:at], sys.argv[at + 1 :]
train(a)
rank = PartialState(cpu=True).process_index
forward, calls = T.forward_loss, []
def forward_then_signal(*args, **kwargs):
    calls.append(None)
    if len(calls) == 5 and rank == 1:
        os.kill(os.getpid(), signal.SIGINT)
    return forward(*args, **kwargs)
T.forward_loss = forward_then_signal
try:
    train(b)
except RunInterrupted as stop:
    # one write of the whole line: the two processes share the pipe, and print() may write in parts
    os.write(1, f"rank {rank} stopped: at_boundary={stop.at_boundary} {stop.checkpoint.name} {stop.exit_code}\\n".encode())
T.forward_loss = forward
train(b + ["--resume", "true"])
end_process_group()
"""


@pytest.mark.slow
def test_a_signal_to_one_process_stops_every_process_at_the_same_step(tmp_path):
    """The processes agree on a stop through the loss reduction every update already does: a signal
    that reached rank 1 only stops both after the same step, with a checkpoint of both ranks' random
    streams, and the 2-process run resumes to the uninterrupted run's weights."""
    script = tmp_path / "signal_one_rank.py"
    script.write_text(SIGNAL_ONE_RANK)
    run = {
        **TINY,
        **RESUME,
        "max_steps": 6,
        "max_documents": 80,
        "per_device_batch_size": 4,
        "report_to": "none",
    }
    a, b = (as_flags(run | {"output_dir": str(tmp_path / name)}) for name in "ab")
    cmd = [*TORCHRUN_2, str(script)]
    result = subprocess.run(
        [*cmd, *a, "--then", *b], cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stopped = sorted(line for line in result.stdout.splitlines() if " stopped: " in line)
    assert stopped == [f"rank {r} stopped: at_boundary=True checkpoint-00000005 130" for r in (0, 1)], (
        result.stdout
    )
    checkpoint = tmp_path / "b" / "checkpoints" / "checkpoint-00000005"
    assert verify_checkpoint(checkpoint) == [] and (checkpoint / "rng-1.pt").is_file()
    assert _same_weights(tmp_path / "a", tmp_path / "b")


def test_a_library_run_raises_run_interrupted_and_puts_the_handlers_back(tmp_path):
    """`train()` as a library call: a signal in the steps raises `RunInterrupted` (a KeyboardInterrupt)
    after saving; the caller's handlers are in place again after the run, stopped or not."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with installed(signal_at_call(T, "forward_loss", 5)), pytest.raises(T.RunInterrupted) as info:
        _run(tmp_path / "run", max_steps=4)
    assert isinstance(info.value, KeyboardInterrupt) and info.value.exit_code == 130
    assert info.value.checkpoint == tmp_path / "run" / "checkpoints" / "checkpoint-00000003"
    assert "--resume" in str(info.value)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


# ---------------------------------------------------------------------------------------------
# a full disk
# ---------------------------------------------------------------------------------------------


def test_full_disk_fails_cleanly_and_keeps_earlier_checkpoints(reference, tmp_path):
    out = tmp_path / "run"
    save_checkpoint = T.save_checkpoint

    def fill_disk_after_step_4():
        def save_then_fill(*args, **kwargs):
            path = save_checkpoint(*args, **kwargs)
            if kwargs["step"] == 4 and Path(args[0]).name == "checkpoints":
                # from now on no file may grow past 100 KB: the next model.safetensors (147 KB) fails
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
            return path

        T.save_checkpoint = save_then_fill

    log = tmp_path / "full.log"
    status = run_in_child(out, [fill_disk_after_step_4], log=log)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1, status  # an exception, not a crash
    assert "File too large" in log.read_text() or "Errno 27" in log.read_text(), log.read_text()[-2000:]
    assert "earlier checkpoints are kept" in log.read_text()
    checkpoints = out / "checkpoints"
    assert [s for s, _ in list_checkpoints(checkpoints)] == [2, 4]
    assert not list(checkpoints.glob(".tmp-hflm-*")), "a partial checkpoint was left behind"
    for _, path in list_checkpoints(checkpoints):
        assert verify_checkpoint(path) == []
    _run(out, resume="true")
    assert _same_weights(reference, out)


# ---------------------------------------------------------------------------------------------
# damaged checkpoints
# ---------------------------------------------------------------------------------------------


def _damage(path: Path, kind: str) -> None:
    data = bytearray(path.read_bytes())
    if kind == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(np.random.default_rng(0).integers(0, 256, len(data), dtype=np.uint8).tobytes())
    else:  # one bit flipped in the middle: same size, different contents
        data[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(data))


DAMAGES = ("truncate", "empty", "garbage", "bitflip")
FILES = (
    "model.safetensors",
    "optimizer.pt",
    "scheduler.pt",
    "rng.pt",
    "state.json",
    "config.json",
    "manifest.json",
)


def _tiny_state(seed: int):
    torch.manual_seed(seed)
    model = HfLmGPTForCausalLM(tiny_gpt_config())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    ids = torch.randint(3, 97, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def test_every_damage_to_every_file_is_detected_and_the_previous_checkpoint_used(tmp_path, caplog, capsys):
    """4 kinds of damage x 7 files, each in the newest of two checkpoints: the damage is reported
    by file name and the older checkpoint is loaded; with both damaged, one error lists both."""
    recovered = tried = 0
    for kind in DAMAGES:
        for name in FILES:
            root = tmp_path / kind / name
            model, optimizer, scheduler = _tiny_state(0)
            ckpt.save_checkpoint(
                root, CheckpointState(model, optimizer=optimizer, scheduler=scheduler), step=1, run_id="r"
            )
            good = {k: v.clone() for k, v in model.state_dict().items()}
            model2, optimizer2, scheduler2 = _tiny_state(1)
            newest = ckpt.save_checkpoint(
                root, CheckpointState(model2, optimizer=optimizer2, scheduler=scheduler2), step=2, run_id="r"
            )
            _damage(newest / name, kind)
            tried += 1
            fresh, fresh_opt, fresh_sched = _tiny_state(2)
            caplog.clear()
            state = ckpt.load_latest_checkpoint(
                root, CheckpointState(fresh, optimizer=fresh_opt, scheduler=fresh_sched, rng=None)
            )
            assert state["step"] == 1, (kind, name)
            assert list(state["damaged"]) == [newest] and name in state["damaged"][newest][0], state[
                "damaged"
            ]
            assert name in caplog.text and "trying the previous one" in caplog.text
            assert all(torch.equal(good[k], v) for k, v in fresh.state_dict().items())
            recovered += 1
    with capsys.disabled():
        print(f"\nfault injection: {recovered}/{tried} damaged checkpoints detected and passed over")

    # both damaged: one error naming each checkpoint and its file
    _damage(tmp_path / "empty" / "rng.pt" / "checkpoint-00000001" / "model.safetensors", "bitflip")
    with pytest.raises(CorruptCheckpointError) as info:
        ckpt.load_latest_checkpoint(tmp_path / "empty" / "rng.pt", CheckpointState(_tiny_state(2)[0]))
    message = str(info.value)
    assert "checkpoint-00000001: model.safetensors: sha256 mismatch" in message
    assert "checkpoint-00000002: rng.pt: 0 bytes" in message


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.pt", "rng.pt", "state.json"])
def test_unreadable_file_of_a_checkpoint_without_manifest_is_named(tmp_path, name):
    """Checkpoints written before manifests cannot be verified, but a file that does not parse is
    still reported by name (not a bare EOFError / OSError), and the previous checkpoint used."""
    model, optimizer, scheduler = _tiny_state(0)
    for step in (1, 2):
        path = ckpt.save_checkpoint(
            tmp_path, CheckpointState(model, optimizer=optimizer, scheduler=scheduler), step=step
        )
        (path / "manifest.json").unlink()
        (path / "COMPLETE").write_text(f"{step}\n")  # as COMPLETE was before manifests
    newest = tmp_path / "checkpoint-00000002"
    _damage(newest / name, "truncate")
    with pytest.raises(CorruptCheckpointError, match=name):
        ckpt.load_checkpoint(newest, CheckpointState(model, optimizer=optimizer, scheduler=scheduler))
    state = ckpt.load_latest_checkpoint(
        tmp_path, CheckpointState(model, optimizer=optimizer, scheduler=scheduler)
    )
    assert state["step"] == 1 and name in state["damaged"][newest][0]


@pytest.mark.parametrize("kind", DAMAGES)
def test_resume_past_a_damaged_checkpoint_is_exact(reference, tmp_path, kind):
    """The newest checkpoint of a finished run damaged (and final/ gone): the resumed run warns,
    goes back to the previous checkpoint and ends with the uninterrupted run's weights."""
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    shutil.rmtree(out / "final")
    newest = out / "checkpoints" / "checkpoint-00000012"
    _damage(newest / {"truncate": "optimizer.pt", "empty": "rng.pt"}.get(kind, "model.safetensors"), kind)
    _run(out, resume="true")
    assert _same_weights(reference, out)
    # the damaged one was re-saved at step 12: every checkpoint is intact again
    assert [verify_checkpoint(p) for _, p in list_checkpoints(out / "checkpoints")] == [[], []]


# ---------------------------------------------------------------------------------------------
# runs sharing an output folder
# ---------------------------------------------------------------------------------------------


def test_a_second_run_prunes_only_its_own_checkpoints(reference, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    first = {(s, rid) for s, _, rid in list_checkpoints_with_run_ids(out / "checkpoints")}
    assert {s for s, _ in first} == {10, 12} and len({rid for _, rid in first}) == 1

    # a new run (not a resume) in the same folder is refused, and the folder left as it was
    with pytest.raises(ValueError, match="another run's outputs.*--overwrite_output_dir"):
        _run(out, max_steps=4, resume="false")
    assert {(s, rid) for s, _, rid in list_checkpoints_with_run_ids(out / "checkpoints")} == first
    # were two runs' checkpoints mixed anyway (the ownership check bypassed), pruning would still
    # touch only the current run's: its step-2 checkpoint is not pruned at once by the first run's
    # higher steps, and the first run's checkpoints stay
    T._train(*parse_args(_argv(out, max_steps=4, resume="false")))
    listed = list_checkpoints_with_run_ids(out / "checkpoints")
    second = {(s, rid) for s, _, rid in listed} - first
    assert {s for s, _ in second} == {2, 4} and len({rid for _, rid in second}) == 1
    assert first <= {(s, rid) for s, _, rid in listed}
    (new_id,) = {rid for _, rid in second}
    assert checkpoint_record(out / "checkpoints" / "checkpoint-00000004")["run_id"] == new_id
    # the best models of the first run stay too
    assert {p.name for p in (out / "best").iterdir() if p.name.startswith("checkpoint-")} >= {
        "checkpoint-00000012"
    }

    # resuming continues the run that saved last (step 4), not the first run's step 12
    metrics = _run(out, max_steps=6, resume="true")
    assert metrics["step"] == 6
    assert checkpoint_record(out / "checkpoints" / "checkpoint-00000006")["run_id"] == new_id


# ---------------------------------------------------------------------------------------------
# divergence: non-finite weights, bad batches and rollbacks
# ---------------------------------------------------------------------------------------------

MARK = 7  # a poisoned block is made of this token only: no natural block is


def poison_update(update: int, factor: float):
    """Poison the first block that update `update` (0-based, epoch 0) reads: its loss is
    multiplied by `factor` (NaN: a non-finite loss; 10: a spike) whenever it is trained on."""

    def install():
        prepare_data, forward = run_module.prepare_data, HfLmGPTForCausalLM.forward

        def poisoned_data(data_args, train_args, accelerator, **kwargs):
            tokenizer, train_blocks, eval_blocks, description = prepare_data(
                data_args, train_args, accelerator, **kwargs
            )
            n = len(train_blocks["input_ids"])
            order = np.random.default_rng([train_args.seed, 0]).permutation(n)
            global_batch = train_args.per_device_batch_size * train_args.gradient_accumulation_steps
            train_blocks["input_ids"] = train_blocks["input_ids"].clone()
            train_blocks["input_ids"][order[update * global_batch]] = MARK
            return tokenizer, train_blocks, eval_blocks, description

        def poisoned_forward(self, input_ids=None, **kwargs):
            out = forward(self, input_ids=input_ids, **kwargs)
            if self.training and bool((input_ids == MARK).all(dim=1).any()):
                out.loss = out.loss * factor
            return out

        run_module.prepare_data = poisoned_data
        HfLmGPTForCausalLM.forward = poisoned_forward

    return install


@contextlib.contextmanager
def installed(*hooks):
    """Install child hooks in this process for the block (the patched names are put back)."""
    saved = [
        (run_module, "prepare_data", run_module.prepare_data),
        (HfLmGPTForCausalLM, "forward", HfLmGPTForCausalLM.forward),
    ]
    saved += [(T, "forward_loss", T.forward_loss)]
    try:
        for hook in hooks:
            hook()
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


ROLLBACK = {"rollback_on_divergence": True, "save_every": 3, "keep_last": 3, "load_best_model_at_end": False}


def test_rollback_on_a_poisoned_batch_skips_it_and_is_exact_after_kills(tmp_path):
    """A batch with a NaN loss at step 7: the run goes back to checkpoint 6 and skips it. Killed
    before the next checkpoint, the resumed run meets the batch again and rolls back the same way;
    killed after it, it continues from the skipped position: the same weights either way."""
    poison = poison_update(6, float("nan"))  # the 7th update's first block
    with installed(poison):
        metrics = _run(tmp_path / "a", **ROLLBACK)
    assert metrics["step"] == 12 and metrics["rollbacks"] == 1 and metrics["skipped_batches"] == 1
    assert metrics["rollback_log"][0] | {"problem": None} == {
        "step": 7,
        "problem": None,
        "restored_step": 6,
        "skipped_batches": 1,
    }
    assert "Non-finite training loss" in metrics["rollback_log"][0]["problem"]
    _check_csv(tmp_path / "a")

    # forward calls: 2 per update; the 7th update's are calls 13-14, its rollback replays step 7
    # from call 15; call 17 is inside step 8 (before checkpoint 9), call 23 inside step 11 (after it)
    for kill_at in (17, 23):
        out = tmp_path / f"killed-{kill_at}"
        status = run_in_child(out, [poison, kill_at_call(T, "forward_loss", kill_at)], **ROLLBACK)
        assert _killed(status)
        with installed(poison):
            resumed = _run(out, resume="true", **ROLLBACK)
        assert _same_weights(tmp_path / "a", out), kill_at
        assert (resumed["rollbacks"], resumed["skipped_batches"]) == (1, 1)
        _check_csv(out)


def test_rollback_on_a_loss_spike_skips_further_batches(tmp_path):
    """A finite spike (10x the loss) over spike_threshold rolls back too; rollback_skip_batches
    skips that many more batches, and an unrecoverable run stops after max_rollbacks."""
    flags = ROLLBACK | {"spike_threshold": 3, "spike_window": 3, "rollback_skip_batches": 2}
    with installed(poison_update(7, 10.0)):  # step 8
        metrics = _run(tmp_path / "spike", **flags)
    event = metrics["rollback_log"][0]
    assert event["problem"].startswith("Loss spike") and (event["step"], event["restored_step"]) == (8, 6)
    assert metrics["skipped_batches"] == 8 - 6 + 2
    # without the spike threshold, a 10x loss is trained on
    with installed(poison_update(7, 10.0)):
        assert _run(tmp_path / "plain", **ROLLBACK)["rollbacks"] == 0

    # every batch poisoned from update `start` on: before the first checkpoint there is nothing to
    # roll back to; after it, the rollbacks run out
    for start, error in ((2, "before this run's first checkpoint"), (5, "after 3 rollbacks")):
        with installed(nan_from_call(2 * start - 1)), pytest.raises(T.TrainingDivergedError, match=error):
            _run(tmp_path / f"hopeless-{start}", **ROLLBACK)


def nan_from_call(n: int):
    """A NaN loss at every training forward from the `n`-th on."""

    def install():
        hit, forward_loss = Countdown(n), T.forward_loss
        poisoned = []

        def nan_loss(*args, **kwargs):
            out = forward_loss(*args, **kwargs)
            if poisoned or hit():
                poisoned.append(True)
                out.loss = out.loss * float("nan")
            return out

        T.forward_loss = nan_loss

    return install


DATA_MODES = {
    # the data position is the number of batches read (window offsets are drawn per batch)
    "random_windows": {"sampling": "random_windows"},
    # (epoch, batch in epoch), with epochs of ~9 updates: the skip and the resume cross their ends
    "short_epochs": {"max_documents": 12},
    "streaming": {"streaming": True, "shuffle_buffer_size": 32, "max_documents": 12, "max_eval_blocks": 8},
}


@pytest.mark.parametrize("mode", DATA_MODES)
def test_rollback_resumes_at_the_skipped_position(tmp_path, mode):
    """After a rollback the data runs ahead of the step (by the batches skipped); a run killed after
    the next checkpoint resumes at the skipped position, whatever the data order. (The poison is
    a call count here, so the resumed run, which does not replay it, is compared after it.)"""

    def nan_at_call_13():  # the 7th update's first micro-batch
        hit, forward_loss = Countdown(13), T.forward_loss

        def poisoned(*args, **kwargs):
            out = forward_loss(*args, **kwargs)
            if hit():
                out.loss = out.loss * float("nan")
            return out

        T.forward_loss = poisoned

    flags = ROLLBACK | DATA_MODES[mode]
    with installed(nan_at_call_13):
        metrics = _run(tmp_path / "a", **flags)
    assert (metrics["rollbacks"], metrics["skipped_batches"]) == (1, 1)
    out = tmp_path / "b"
    status = run_in_child(out, [nan_at_call_13, kill_at_call(T, "forward_loss", 23)], **flags)
    assert _killed(status)
    assert (
        checkpoint_record(out / "checkpoints" / "checkpoint-00000009")["data_state"]["skipped_batches"] == 1
    )
    _run(out, resume="true", **flags)
    assert _same_weights(tmp_path / "a", out)


def test_without_rollback_a_finite_run_is_unchanged(reference, tmp_path):
    """The guard costs nothing when nothing diverges: a run with rollback_on_divergence (and no
    bad batch) ends with the plain run's weights."""
    metrics = _run(tmp_path / "run", rollback_on_divergence=True, spike_threshold=5)
    assert metrics["rollbacks"] == 0 and math.isfinite(metrics["eval_loss"])
    assert _same_weights(reference, tmp_path / "run")


def test_two_concurrent_runs_in_one_folder_the_second_is_refused(tmp_path):
    """Two live runs in one folder used to race in pruning (FileNotFoundError) and interleave
    metrics.csv; now the second fails at once, naming the first, and leaves its files alone."""
    out = tmp_path / "run"
    pid = os.fork()
    if pid == 0:  # the first run: long enough to be alive while the second starts
        try:
            sys.stdout = sys.stderr = open(tmp_path / "first.log", "a", buffering=1)
            _reset_accelerate()
            T.train(*parse_args(_argv(out, max_steps=100_000, max_train_seconds=60)))
        finally:
            os._exit(0)
    try:
        lock = out / LOCK_FILE
        deadline = time.monotonic() + 60
        while not (lock.is_file() and f'"pid": {pid}' in lock.read_text()):
            assert time.monotonic() < deadline, "the first run never took its folder"
            time.sleep(0.05)
        with pytest.raises(RunFolderBusyError, match=f'"pid": {pid}'):
            _run(out, max_steps=4)
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)  # the first run goes on
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
