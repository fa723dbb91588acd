"""The global random streams (python `random`, numpy, torch CPU and CUDA) as a checkpoint part.

Each process of a run has its own streams (its dropout masks are its own), so a checkpoint keeps
the states of every process, one file each (`rng.pt`, `rng-1.pt`, ...), and each process restores
its own (`RngStates`). The states are tensors and Python primitives only, so they load with
`torch.load(..., weights_only=True)`: numpy's state is stored as a list of ints, not an `ndarray`.
"""

from __future__ import annotations

import logging
import random

import numpy as np
import torch

logger = logging.getLogger(__name__)


def get_rng_state() -> dict:
    """Every global RNG state, as tensors and Python primitives (loadable with weights_only=True)."""
    np_state = np.random.get_state(legacy=False)  # {"bit_generator", "state": {"key", "pos"}, ...}
    state = {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": [int(x) for x in np_state["state"]["key"]],
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore the global RNG states saved by `get_rng_state`."""
    python = state["python"]
    # weights_only unpickling may give lists where `random.setstate` wants tuples
    random.setstate((python[0], tuple(python[1]), python[2]))
    np_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": np_state["bit_generator"],
            "state": {"key": np.asarray(np_state["key"], dtype=np.uint32), "pos": np_state["pos"]},
            "has_gauss": np_state["has_gauss"],
            "gauss": np_state["gauss"],
        }
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda_states)
        else:
            logger.warning(
                "saved %d CUDA RNG states but %d devices are visible: CUDA RNG not restored",
                len(cuda_states),
                torch.cuda.device_count(),
            )


class RngStates:
    """The random streams of every process of a run, as a checkpoint part (`CheckpointState.rng`).

    `state_dict()`: `{rank: state}` of every process, in rank order: the states given (gathered
    from every process by `gathered`), else this process's current ones as process 0's.
    `load_state_dict(states)` restores `states[rank]`, this process's own; the checkpoint reads
    only that one file.
    """

    def __init__(self, rank: int = 0, states: list[dict] | None = None) -> None:
        self.rank, self.states = rank, states

    @classmethod
    def gathered(cls, rank: int, world: int) -> RngStates:
        """The streams of every process now (a collective when `world` > 1: every process must call)."""
        if world == 1:
            return cls(rank)
        from accelerate.utils import gather_object

        return cls(rank, gather_object([get_rng_state()]))

    def state_dict(self) -> dict[int, dict]:
        return dict(enumerate(self.states if self.states is not None else [get_rng_state()]))

    def load_state_dict(self, states: dict[int, dict]) -> None:
        set_rng_state(states[self.rank])
