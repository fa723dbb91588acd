"""The best model of a run (`load_best_model_at_end`), kept through checkpoint pruning and resume."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch

from .checkpoint import save_checkpoint
from .folders import (
    CorruptCheckpointError,
    checkpoint_name,
    checkpoint_record,
    list_checkpoints,
    remove_checkpoints_except,
)
from .stateful import CheckpointState, Values

logger = logging.getLogger(__name__)


class BestModel:
    """The best evaluation so far by `metric_for_best_model`, its weights kept under `root`.

    `root` is `output_dir/best`. Every better evaluation (strictly: a tie keeps the earlier one,
    as nanoGPT's `<`) writes the plain model's weights and config atomically to
    `root/checkpoint-{step}` with `save_checkpoint` (no optimizer, no RNG; its `state.json` extra is
    the record). The record `{"step", "metric", "value", "greater_is_better", "metrics"}` rides in
    every training checkpoint (`extra["best"]`: the tracker is a part of the run's `CheckpointState`), so a resumed run starts from the best of its own
    past, not from a best the interrupted run wrote after the checkpoint it resumes from (that
    future is replayed, and its evaluations decide again).

    `prune` keeps the best folders still needed: the current best, and the best recorded by each
    kept training checkpoint (any of them may be resumed). It runs after every new best, after
    every checkpoint save (whose `keep_last` may drop a checkpoint and with it the need of an old
    best) and after a resume or a rollback restored the record. So pruning checkpoints never loses the weights of a best that a run, the
    current one or a resumed one, may still hand to `final/`. Only the main process writes.
    """

    def __init__(
        self,
        root: Path,
        checkpoint_dir: Path,
        metric: str,
        greater_is_better: bool,
        is_main_process: bool,
        run_id: str | None = None,
    ) -> None:
        self.root, self.checkpoint_dir = root, checkpoint_dir
        self.metric, self.greater_is_better, self.is_main_process = metric, greater_is_better, is_main_process
        self.run_id = run_id  # its best folders are tagged with it; another run's are never pruned
        self.record: dict | None = None

    def improves(self, value: float | None) -> bool:
        """Whether `value` of the metric beats the best so far (a non-finite or missing value never does)."""
        if value is None or not math.isfinite(value):
            return False
        if self.record is None:
            return True
        best = self.record["value"]
        return value > best if self.greater_is_better else value < best

    def update(self, step: int, evaluation: dict, model) -> bool:
        """Record `evaluation` of the weights of `model` at `step` if it is the best so far; returns whether.

        `model`: the module, or a function giving it (None on the processes that do not write), called
        on every process only when the evaluation improves (a sharded model's consolidation).
        """
        value = evaluation.get(self.metric)
        if not self.improves(value):
            return False
        if not isinstance(model, torch.nn.Module):
            model = model()
        self.record = {
            "step": step,
            "metric": self.metric,
            "value": value,
            "greater_is_better": self.greater_is_better,
            "metrics": dict(evaluation),
        }
        if self.is_main_process:
            weights = CheckpointState(model, rng=None, extra={"best": Values(self.record)})
            save_checkpoint(self.root, weights, step=step, run_id=self.run_id)
            self.prune()
        logger.info("New best model at step %d: %s %.4f (saved to %s).", step, self.metric, value, self.path)
        return True

    def state_dict(self) -> dict:
        """What a training checkpoint keeps of it (its `extra["best"]`)."""
        return {"best": self.record}

    def load_state_dict(self, extra: dict) -> None:
        """Continue from the best a checkpoint's `extra` records (None: none yet); `prune` then
        drops the best folders written after that checkpoint."""
        record = extra.get("best")
        if record is not None and (record["metric"], record["greater_is_better"]) != (
            self.metric,
            self.greater_is_better,
        ):
            logger.warning(
                "The checkpoint's best model was picked by %s (greater_is_better=%s), this run picks by %s "
                "(greater_is_better=%s): the best is chosen afresh from the resumed step on.",
                record["metric"],
                record["greater_is_better"],
                self.metric,
                self.greater_is_better,
            )
            record = None
        self.record = record

    def prune(self) -> None:
        """Delete the best folders that neither the current best nor any kept checkpoint records
        (on the main process; the others write nothing)."""
        if not self.is_main_process:
            return
        keep = {self.record["step"]} if self.record is not None else set()
        for _, path in list_checkpoints(self.checkpoint_dir):
            try:
                recorded = (checkpoint_record(path).get("extra") or {}).get("best")
            except CorruptCheckpointError:
                continue  # a damaged checkpoint is never resumed: its best is not needed
            if recorded is not None:
                keep.add(recorded["step"])
        for step in remove_checkpoints_except(self.root, keep, run_id=self.run_id):
            logger.info("Removed the best model of step %d: no checkpoint records it any more.", step)

    @property
    def path(self) -> Path | None:
        """The folder of the best weights (None before the first evaluation)."""
        return None if self.record is None else self.root / checkpoint_name(self.record["step"])
