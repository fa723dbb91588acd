"""What a checkpoint holds: a run's state as named parts, each saving and restoring itself.

Each part is `Stateful` (torchtitan's pattern, and torch's own for optimizers, schedulers and
loss scalers): `state_dict()` gives its state, `load_state_dict(state)` takes it back. The
training loop asks its parts for one `CheckpointState` and hands it to `save_checkpoint`; on
resume it hands the same kind of `CheckpointState` to `load_checkpoint`, which gives each part its
state back. Where each part goes in the checkpoint folder:

    model       model.safetensors (or the shards/ of a sharded run) and config.json
    optimizer   optimizer.pt         (torch.save; loads with weights_only=True)
    scheduler   scheduler.pt
    scaler      scaler.pt            (the fp16 loss scale and growth tracker)
    rng         rng.pt, rng-1.pt...  (`RngStates`: every process's random streams)
    tensors     tensors.safetensors  (named tensors: an objective's carried state)
    data        state.json's "data_state" (the position in the data)
    extra       state.json's "extra": each part's JSON state, side by side

A part left None is neither saved nor loaded. The parts of `extra` share one JSON object (the
format of checkpoints written before the parts had names): each writes its own keys, and each is
given the whole object back to read its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import torch

from .rng import RngStates


@runtime_checkable
class Stateful(Protocol):
    """Anything that saves and restores its own state."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class Values(dict):
    """A plain mapping as a part (JSON values, or named tensors): saved as it is, loaded in place."""

    def state_dict(self) -> dict[str, Any]:
        return dict(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.clear()
        self.update(state_dict)


@dataclasses.dataclass
class CheckpointState:
    """A run's state, by part (see the module's docstring for where each is written).

    `model` is the module itself (its tied tensors are written once, and a sharded one is gathered
    from its processes); `rng` defaults to this process's random streams (None: not saved or not
    restored); `extra` maps names to the parts whose JSON states share state.json's "extra".
    """

    model: torch.nn.Module
    optimizer: Stateful | None = None
    scheduler: Stateful | None = None
    scaler: Stateful | None = None
    rng: RngStates | None = dataclasses.field(default_factory=RngStates)
    tensors: Stateful | None = None
    data: Stateful | None = None
    extra: dict[str, Stateful] = dataclasses.field(default_factory=dict)

    def data_state(self) -> dict | None:
        """The data part's state, as state.json records it (None without one)."""
        return None if self.data is None else self.data.state_dict()

    def extra_state(self) -> dict | None:
        """The extra parts' states in one JSON object, as state.json records it (None without any)."""
        if not self.extra:
            return None
        merged: dict[str, Any] = {}
        for part in self.extra.values():
            merged |= part.state_dict()
        return merged

    def load_json(self, data_state: dict | None, extra: dict | None) -> None:
        """Give the data part and the extra parts their states back, from state.json."""
        if self.data is not None:
            self.data.load_state_dict(data_state or {})
        for part in self.extra.values():
            part.load_state_dict(extra or {})
