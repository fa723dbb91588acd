"""How a process of a run learns its place in a launch, is stopped by a signal, and ends: for the
training loop (`training.train`); the `Trainer` scripts (`trainer_common.script_main`) share the end.

- `process_state`: this process's index and count as accelerate's `PartialState` sees them, after
  the launch variables are checked. Never `os.environ["RANK"]`: a `RANK=1` left in a shell, with no
  launcher, made a run skip its folder's lock and ownership check and replace another run's files.
- `StopSignals`: SIGINT (Ctrl-C) and SIGTERM during a run. The first one asks the training loop to
  stop at the next step boundary and save (`training.train`); before and after the loop, and at a
  second signal, the run stops at once (`RunInterrupted`). The handler raises nothing while the
  loop runs, so no signal is lost in a `__del__` that swallows the exception.
- `end_process_group`: the last call of a launch that ends well.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

import torch
from accelerate import PartialState

logger = logging.getLogger(__name__)

# what a distributed launcher (torchrun, accelerate launch) sets for each process
LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
# an MPI launch's own variables (accelerate reads them; its backend needs no MASTER_ADDR)
MPI_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def cpu_only() -> bool:
    """Whether processes run on the CPU: then accelerate must be told (`cpu=True`), or it ignores
    torchrun's WORLD_SIZE on a machine without a GPU and every process trains alone."""
    return not torch.cuda.is_available()


def _integer(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def check_launch_environment() -> None:
    """Refuse launch variables that no launcher set, before accelerate fails on them with a message
    that names neither the variable nor the cause.

    A malformed `LOCAL_RANK`, `WORLD_SIZE` or `LOCAL_WORLD_SIZE` (accelerate converts them with
    `int`), and one saying "distributed" (`LOCAL_RANK` set, `WORLD_SIZE` > 1) without the
    `MASTER_ADDR` every launcher sets, are leftovers of another shell or job. `RANK` alone is read
    only within a distributed launch: outside one it is ignored, as accelerate ignores it (a warning
    names it, `process_state`).

    Raises:
        ValueError: naming the variable, its value and the way out.
    """
    way_out = (
        "Unset it (a leftover of another shell or job: `unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE`), "
        "or start the run with a launcher: `torchrun --nproc_per_node N -m training.train ...`."
    )
    launched = _integer("LOCAL_RANK") not in (None, -1) or (_integer("WORLD_SIZE") or 1) > 1
    for name in LAUNCH_VARIABLES:
        if name in os.environ and _integer(name) is None and (name != "RANK" or launched):
            raise ValueError(
                f"The environment variable {name}={os.environ[name]!r} is not an integer; a distributed launcher "
                f"sets it to a process number. {way_out}"
            )
    if launched and "MASTER_ADDR" not in os.environ and not any(v in os.environ for v in MPI_VARIABLES):
        found = ", ".join(f"{n}={os.environ[n]}" for n in LAUNCH_VARIABLES if n in os.environ)
        raise ValueError(
            f"The environment says this process is part of a distributed launch ({found}), but MASTER_ADDR, "
            f"which every launcher sets, is not set: no launcher started it. {way_out}"
        )


def process_state() -> PartialState:
    """This process's index and count in its launch (process 0 of 1 outside one), as accelerate
    sees them; the same state the run's `Accelerator` then uses.

    Raises:
        ValueError: launch variables that no launcher set (`check_launch_environment`).
    """
    check_launch_environment()
    new = not PartialState._shared_state  # the leftovers are named once per process state
    state = PartialState(cpu=cpu_only())
    # what a process 0 of 1 may carry harmlessly
    harmless = {"RANK": "0", "WORLD_SIZE": "1"}
    leftovers = [n for n, value in harmless.items() if os.environ.get(n, value).strip() != value]
    if new and state.num_processes == 1 and leftovers:
        logger.warning(
            "%s is set, but no distributed launch started this process (it is process 0 of 1): ignored.",
            " and ".join(f"{n}={os.environ[n]!r}" for n in leftovers),
        )
    return state


class RunInterrupted(KeyboardInterrupt):  # noqa: N818  (a KeyboardInterrupt, named for what happened)
    """A run stopped by SIGINT (Ctrl-C) or SIGTERM.

    A `KeyboardInterrupt`, so that `except Exception` does not swallow it. `signum` is the signal,
    `exit_code` the conventional status of a process it stopped (130 for SIGINT, 143 for SIGTERM),
    `checkpoint` the checkpoint the run can resume from (None: unknown), `at_boundary` whether every
    process of the run stopped at the same step boundary (after saving), not at once.
    """

    def __init__(self, message: str, signum: int, checkpoint=None, at_boundary: bool = False) -> None:
        super().__init__(message)
        self.signum, self.checkpoint, self.at_boundary = signum, checkpoint, at_boundary

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopSignals:
    """SIGINT and SIGTERM during a run (a context manager): the handlers are installed on entry, in
    the main thread only, and the previous ones restored on exit.

    While `graceful` (the training loop sets it), the first signal only records itself (`received`)
    and the loop stops at its next step boundary, after saving. Otherwise, and at a second signal,
    the handler raises `RunInterrupted` at once (and puts the previous handlers back, so a third
    signal does what it did before the run). A signal that was ignored when the run started (a
    background job's SIGINT) stays ignored.
    """

    def __init__(self) -> None:
        self.received: int | None = None  # the first signal's number
        self.graceful = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread may set handlers (and receives the signals)
        for signum in STOP_SIGNALS:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN or previous is None:  # ignored, or a handler set outside Python
                continue
            self._previous[signum] = previous
            signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        self.restore()

    def restore(self) -> None:
        """Put back the handlers found on entry."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.received is None and self.graceful:
            self.received = signum
            # Python runs this between two bytecodes of the main thread: nothing is interrupted
            logger.warning(
                "%s received: the run stops after the current step and saves a checkpoint (%s again stops at "
                "once, without saving).",
                name,
                "Ctrl-C" if signum == signal.SIGINT else name,
            )
            return
        second = self.received is not None
        self.received = self.received or signum
        self.restore()
        raise RunInterrupted(
            f"Stopped at once by {'a second ' if second else ''}{name}: nothing was saved after the run's last "
            "checkpoint (if any). Run the same command with --resume auto to continue from it (or start afresh "
            "where there is none).",
            signum,
        )


def end_process_group() -> None:
    """Destroy the default process group, if this process is in one; else do nothing.

    The entry points call it last, and only after the run succeeded (or all its processes stopped
    together at a signal). A process that exits with its group alive can abort after its work is
    done: gloo's worker threads outlive the interpreter ("terminate called without an active
    exception", SIGABRT, in about one 2-process CPU launch in seven here), and torchrun then reports
    the finished run as failed; NCCL warns that the group was never destroyed. After an exception the
    group is left alone: destroying it while another process waits in a collective can hang, and the
    launcher stops the other processes anyway.

    `train()` and `finetune()` leave the group to their caller, so that a Python caller can run
    several runs in one launch (the group lives as long as the process).
    """
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
