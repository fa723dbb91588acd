"""How a process of a distributed launch (torchrun, `accelerate launch`) ends, shared by the training
loop's entry point (`training.train.main`) and the `Trainer` scripts' (`trainer_common.script_main`)."""

from __future__ import annotations

import torch


def end_process_group() -> None:
    """Destroy the default process group, if this process is in one; else do nothing.

    The entry points call it last, and only after the run succeeded. A process that exits with its
    group alive can abort after its work is done: gloo's worker threads outlive the interpreter
    ("terminate called without an active exception", SIGABRT, in about one 2-process CPU launch in
    seven here), and torchrun then reports the finished run as failed; NCCL warns that the group was
    never destroyed. After an exception the group is left alone: destroying it while another process
    waits in a collective can hang, and the launcher stops the other processes anyway.

    `train()` and `finetune()` leave the group to their caller, so that a Python caller can run
    several runs in one launch (the group lives as long as the process).
    """
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
