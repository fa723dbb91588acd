"""The wall-clock budget's one cross-process rule, shared by the training loop (`training.train`)
and the `Trainer` scripts (`trainer_common.WallClockBudgetCallback`)."""

from __future__ import annotations

import torch


def agreed_seconds(elapsed: float, device: torch.device | str | None) -> float:
    """The largest of every process's `elapsed` under torch.distributed (DDP), else `elapsed`.

    Each process reads its own clock; if each decided alone, one could stop a step before the others
    and leave them waiting in the gradients' all-reduce, or follow another learning rate. The
    agreement costs one tiny all-reduce (`device`: where the backend reduces, the GPU for NCCL), and
    only with several processes: a single process never touches the device.
    """
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return elapsed
    value = torch.tensor([elapsed], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value.item())
