"""Divergence: a non-finite loss or a loss spike stops the run, or rolls it back to its last good
checkpoint (PaLM's remedy for loss spikes).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

from .checkpoint import load_latest_checkpoint
from .stateful import CheckpointState

logger = logging.getLogger(__name__)


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or infinite; the last checkpoint is the last good state."""


class DivergenceGuard:
    """Whether an update's loss may be applied, and the record of the run's rollbacks.

    `problem(loss)` names what is wrong with a loss: non-finite, or (with `spike_threshold`) above
    `spike_threshold` times the mean of the last `spike_window` applied losses (a spike is judged
    only once that many have been seen). The losses of applied updates go to `record`. With
    `rollback_on_divergence` the loop rolls back on a problem (`rollback_to_last_good`), at most
    `max_rollbacks` times in the run.

    The loss window and the rollbacks ride in every checkpoint (`state_dict`, restored by
    `load_state_dict`: the guard is a part of the run's `CheckpointState`), so a resumed run judges its losses and counts its rollbacks as the uninterrupted run does. A
    rollback restores the window of the checkpoint it goes back to, but keeps the rollbacks: they
    happened, and are counted in `final_metrics.json`.
    """

    def __init__(self, train_args) -> None:
        self.rollback = train_args.rollback_on_divergence
        self.threshold, self.window = train_args.spike_threshold, train_args.spike_window
        self.skip, self.max_rollbacks = train_args.rollback_skip_batches, train_args.max_rollbacks
        self.losses: list[float] = []  # the last `window` applied losses, oldest first
        self.events: list[dict] = []  # one per rollback: step, problem, restored step, skipped batches

    def problem(self, loss: float) -> str | None:
        """Why the update of this (process-averaged) loss must not be applied; None if it may."""
        if not math.isfinite(loss):
            return f"Non-finite training loss ({loss})"
        if self.threshold is not None and len(self.losses) == self.window:
            mean = sum(self.losses) / self.window
            if loss > self.threshold * mean:
                return f"Loss spike ({loss:.4f} > {self.threshold:g} x {mean:.4f}, the mean of the last {self.window})"
        return None

    def record(self, loss: float) -> None:
        """The loss of an applied update."""
        if self.threshold is not None:
            self.losses = [*self.losses, loss][-self.window :]

    @property
    def skipped_batches(self) -> int:
        """Global batches read but not trained on, over every rollback."""
        return sum(event["skipped_batches"] for event in self.events)

    def state_dict(self) -> dict:
        """What a checkpoint keeps (in its `extra`; nothing when rollbacks are off)."""
        return {"rollbacks": self.events, "loss_window": self.losses} if self.rollback else {}

    def load_state_dict(self, extra: dict) -> None:
        """Continue from a checkpoint's `extra`."""
        self.events = list(extra.get("rollbacks", []))
        self.losses = list(extra.get("loss_window", []))


def rollback_to_last_good(
    guard: DivergenceGuard,
    problem: str,
    offending_step: int,
    *,
    checkpoint_dir: Path,
    run_id: str | None,
    state: CheckpointState,
    data,
    accum: int,
) -> dict:
    """Reload this run's last good checkpoint and read `guard.skip` global batches past the offending one.

    PaLM (Chowdhery et al., 2022, section 5.1) restarted ~100 steps before a loss spike and skipped
    the 200-500 batches around it. Here the run goes back to its newest intact checkpoint (weights,
    optimizer, scheduler, loss scale, RNG streams, loss window) but not its data: the data goes on
    from the batch after the offending one, `guard.skip` batches further. So every batch read since
    the checkpoint, the offending one included, is skipped, and which ones is a pure function of
    the data position: a resumed run skips the same ones. `state` is the run's (`CheckpointState`):
    every part but the data position is given the checkpoint's state back, and the guard (one of
    its parts) its loss window, not its rollbacks: they happened. `data` is this process's
    micro-batch iterator, just past the offending update.

    Returns:
        `load_checkpoint`'s dict plus "skipped": the global batches read since the checkpoint that
        were not trained on (the rollback's share of `data_state["skipped_batches"]`).

    Raises:
        TrainingDivergedError: rollbacks are used up, or this run has no checkpoint to go back to.
    """
    if len(guard.events) >= guard.max_rollbacks:
        raise TrainingDivergedError(
            f"{problem} at step {offending_step}, after {len(guard.events)} rollbacks (max_rollbacks): stopped. "
            "Lower the learning rate, raise warmup_steps or clip gradients."
        )
    state.optimizer.zero_grad(set_to_none=True)  # the offending update's gradients
    events = guard.events  # `state.extra["guard"]` takes the checkpoint's loss window back, not these
    back = load_latest_checkpoint(checkpoint_dir, dataclasses.replace(state, data=None), run_id=run_id)
    guard.events = events
    if back is None:
        raise TrainingDivergedError(
            f"{problem} at step {offending_step}, before this run's first checkpoint: nothing to roll back to. "
            "Lower the learning rate or raise warmup_steps (or save_every sooner)."
        )
    for _ in range(guard.skip * accum):
        next(data)
    skipped = offending_step - back["step"] + guard.skip
    guard.events.append(
        {
            "step": offending_step,
            "problem": problem,
            "restored_step": back["step"],
            "skipped_batches": skipped,
        }
    )
    logger.warning(
        "%s at step %d: rolled back to %s (step %d), skipping %d global batches (rollback %d of at most %d).",
        problem,
        offending_step,
        back["path"],
        back["step"],
        skipped,
        len(guard.events),
        guard.max_rollbacks,
    )
    return back | {"skipped": skipped}
