"""Resuming a run: what a resumed run may change, and the restore of its position and settings.

A checkpoint records the run's data position (`data_state`: epoch, updates within it, the batches
rollbacks skipped), the fingerprint of the text it read (`data_state["data_fingerprint"]`) and the
data and training arguments of the run that wrote it (`run_settings`). A resume compares them with
its own:

- **What fixes the data, its order and the objective** (`FIXED_SETTINGS`: the corpus, its split
  and tokenization, the block size, the objective and its masking, the best-model metric; and
  `DATA_ORDER`: the global batch size, the seed, streaming and its shuffle buffer, the sampling)
  may not change: the data position counts global batches of one size in one seeded order. The
  resume is refused with every difference listed (`check_resumable`). The split of a global batch
  between processes and accumulation may change. (The model config is checked where the
  checkpoint is loaded.)
- **The text itself** may not change either: a file at the same path with other contents would
  give other blocks, and the position would point into them. The fingerprint (a content hash of
  every data file, `training.data.fingerprint.data_fingerprint`) must match; the resume is refused naming
  the files that changed. Checkpoints written before fingerprints were kept resume with a warning.
- **Optimizer and schedule settings** (`SCHEDULE_SETTINGS`, `OPTIMIZER_SETTINGS`) may change, the
  way "lower the learning rate, then resume" asks them to: the optimizer's groups take the new
  values, the schedule is rebuilt from the new settings and moved to the checkpoint's step, and the
  change is logged and recorded (`history`), so the model card and `final_metrics.json` report
  what actually trained (`apply_changed_settings`).
- Everything else (evaluation, logging and saving cadence, precision, compile, trackers, the
  rollback guard) is the new run's choice.

The data position itself is a part of the run's checkpoint state (`DataState`, state.json's
`data_state`); `restore_run` does what a resume adds once every part has its state back.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings

from ..data.cleaning import CLEANING_SETTINGS
from ..data.fingerprint import describe_fingerprint_change
from ..run.optimizer import build_scheduler

logger = logging.getLogger(__name__)

SCHEDULE_SETTINGS = ("learning_rate", "lr_scheduler", "warmup_steps", "min_lr_rate", "max_steps")
OPTIMIZER_SETTINGS = ("weight_decay", "adam_beta1", "adam_beta2", "max_grad_norm")
FIXED_SETTINGS = (
    # data: what the blocks are
    "dataset", "config_name", "split", "text_column", "sample_by", "eval_dataset", "eval_fraction",
    "eval_split", "max_documents", "max_chars", "block_size", "tokenizer_name_or_path", "tokenizer_kind",
    "vocab_size", "tokenizer_train_documents", "tokenizer_min_frequency", "document_mask", "max_eval_blocks",
    # what is trained on them
    "objective", "mlm_probability", "masking", "tbptt", "scheduled_sampling", "scheduled_sampling_k",
    "scheduled_sampling_c", "scheduled_sampling_min", "metric_for_best_model", "greater_is_better",
    "electra_generator_size", "electra_disc_weight",
) + CLEANING_SETTINGS  # fmt: skip
# in which order the blocks come (kept in every checkpoint's data_state), and the values of
# checkpoints that predate a key
DATA_ORDER = {
    "global_batch_size": None,
    "seed": None,
    "streaming": False,
    "sampling": "blocks",
    "shuffle_buffer_size": None,
}


def run_settings(*args_objects) -> dict:
    """The settings a checkpoint records: every field of the argument dataclasses, JSON-ready."""
    settings = {}
    for obj in args_objects:
        for key, value in dataclasses.asdict(obj).items():
            settings[key] = (
                value if isinstance(value, (int, float, str, bool, type(None), list)) else str(value)
            )
    return settings


def data_order(batch_plan, train_blocks=None) -> dict:
    """The run's `DATA_ORDER` values (its `BatchPlan`'s), and the fingerprint of its text
    (`train_blocks.fingerprint`, None when unknown), for `data_state`."""
    return batch_plan.data_order() | {"data_fingerprint": getattr(train_blocks, "fingerprint", None)}


class DataState:
    """The run's place in its data as a checkpoint part (state.json's `data_state`): its
    `DataPosition` (epoch, global batches of the epoch consumed, step, batches skipped by
    rollbacks), with the data order and the fingerprint of the text that position counts in
    (`data_order`), which a resume checks (`check_resumable`)."""

    def __init__(self, position, run) -> None:
        self.position, self.run = position, run

    def state_dict(self) -> dict:
        pos, run = self.position, self.run
        return {
            "epoch": pos.epoch,
            "batch_in_epoch": pos.update,  # global batches of this epoch already consumed
            "blocks_in_epoch": pos.update * run.global_batch,
            "step": pos.step,
            **data_order(run.batch_plan, run.train_blocks),
            "skipped_batches": pos.offset,  # read but not trained on (rollbacks)
        }

    def load_state_dict(self, data_state: dict) -> None:
        pos = self.position
        pos.step, pos.epoch, pos.update = (
            data_state["step"],
            data_state["epoch"],
            data_state["batch_in_epoch"],
        )
        pos.offset = data_state.get("skipped_batches", 0)  # batches skipped by rollbacks


def data_changes(saved: dict | None, current: dict | None) -> str | None:
    """What differs between a checkpoint's data fingerprint and this run's (`data_fingerprint`),
    naming the files; None when they match or either is unknown."""
    if saved is None or current is None:
        return None
    changes = []
    for role in dict.fromkeys([*saved, *current]):
        if role not in saved or role not in current:
            changes.append(f"--{role} {'added' if role in current else 'removed'}")
        elif (change := describe_fingerprint_change(saved[role], current[role])) is not None:
            changes.append(f"--{role}: {change}")
    return "; ".join(changes) or None


def fixed_differences(saved: dict | None, data_state: dict, current: dict, order: dict) -> dict:
    """`{name: (checkpoint's, this run's)}` of the fixed settings and data order that differ.

    Args:
        saved: the checkpoint's `run_settings` (None for checkpoints written before they were
            kept: only their data order is compared).
        data_state: the checkpoint's data position, which records its data order.
        current: this run's `run_settings`; order: its `data_order`.
    """
    before = {k: saved[k] for k in FIXED_SETTINGS if saved and k in saved}
    before |= {k: data_state.get(k, default) for k, default in DATA_ORDER.items()}
    now = {k: current[k] for k in FIXED_SETTINGS} | order
    return {k: (old, now[k]) for k, old in before.items() if old != now[k]}


def check_resumable(state: dict, data_args, train_args, batch_plan, train_blocks=None) -> None:
    """Refuse to resume the checkpoint `state` (`load_checkpoint`'s dict) unless it continues exactly.

    Args:
        batch_plan: this run's `BatchPlan`, whose `data_order` must be the checkpoint's.
        train_blocks: this run's training blocks, whose `fingerprint` is compared with the
            checkpoint's (a checkpoint without one is resumed with a warning).

    Raises:
        ValueError: `max_steps` is below the checkpoint's step, a fixed setting or the data order
            differs (all of them listed), or the text differs from the one the checkpoint read
            (naming the files).
    """
    step, checkpoint = state["step"], state["path"]
    if train_args.max_steps < step:
        raise ValueError(
            f"Cannot resume {checkpoint}: it is at step {step}, past max_steps={train_args.max_steps}. "
            f"Raise max_steps above {step} to train further."
        )
    saved = (state["extra"] or {}).get("settings")
    current = run_settings(data_args, train_args)
    refused = fixed_differences(saved, state["data_state"], current, data_order(batch_plan))
    if refused:
        listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in refused.items())
        raise ValueError(
            f"Cannot resume {checkpoint} exactly: these settings fix the data, its order or the objective and "
            f"differ from the checkpoint's ({listed}; checkpoint -> this run). Resume with the checkpoint's "
            "values (keep per_device_batch_size * processes * gradient_accumulation_steps), or start a new run "
            "(a fresh output_dir, or resume=false)."
        )
    _check_same_data(state, getattr(train_blocks, "fingerprint", None))


def _check_same_data(state: dict, current: dict | None) -> None:
    """Refuse a checkpoint whose data fingerprint differs from this run's; warn when it has none."""
    checkpoint, data_state = state["path"], state["data_state"]
    if "data_fingerprint" not in data_state:
        logger.warning(
            "%s records no fingerprint of its data (an older checkpoint): a corpus changed since cannot be "
            "detected. Resuming on the data as it is now.",
            checkpoint,
        )
        return
    changed = data_changes(data_state["data_fingerprint"], current)
    if changed:
        raise ValueError(
            f"Cannot resume {checkpoint}: the training data changed since it was saved ({changed}). Its data "
            "position counts blocks of the text it read, which would now point elsewhere. Put the data back as it "
            "was to resume, or train on the new data in a new run: a fresh --output_dir, with --init_from "
            "pointing at a finished model (a run's final/) to continue from its weights."
        )


def apply_changed_settings(
    saved: dict | None, train_args, data_args, optimizer, scheduler, step: int, checkpoint
):
    """Apply the optimizer and schedule settings that differ from the checkpoint's.

    Args:
        saved: the checkpoint's `run_settings` (None for checkpoints written before they were kept).
        optimizer, scheduler: restored from the checkpoint.
        step: the checkpoint's step.

    Returns:
        `(scheduler, applied)`: the scheduler to use (rebuilt when the schedule changed) and
        `{name: (old, new)}` of the changes applied.
    """
    if saved is None:
        logger.warning(
            "%s records no run settings (an older checkpoint): changes cannot be checked.", checkpoint
        )
        return scheduler, {}
    current = run_settings(data_args, train_args)
    tunable = SCHEDULE_SETTINGS + OPTIMIZER_SETTINGS
    applied = {k: (saved[k], v) for k, v in current.items() if k in tunable and k in saved and saved[k] != v}
    if not applied:
        return scheduler, {}
    groups = optimizer.param_groups
    if any(k in applied for k in OPTIMIZER_SETTINGS):
        groups[0]["weight_decay"] = train_args.weight_decay  # group 0 holds the decayed matrices
        for group in groups:
            group["betas"] = (train_args.adam_beta1, train_args.adam_beta2)
    if any(k in applied for k in SCHEDULE_SETTINGS):
        for group in groups:
            group["initial_lr"] = group["lr"] = train_args.learning_rate
        scheduler = build_scheduler(optimizer, train_args)
        with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": a replay
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(step):
                scheduler.step()
    logger.warning(
        "Resuming %s with changed settings, applied from step %d: %s.",
        checkpoint,
        step,
        "; ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in applied.items()),
    )
    return scheduler, applied


def restore_run(record: dict, run, optimizer, scheduler, objective):
    """What a resume adds once the parts of the run's state have theirs back from the checkpoint
    `record` (`load_checkpoint`'s dict): check that the run continues exactly (`check_resumable`),
    restore the objective's carried state (truncated BPTT), and apply the changed optimizer and
    schedule settings.

    Returns:
        `(scheduler, history)`: the scheduler to use, and the settings changed on resume
        (`{"step", "changed": {name: [old, new]}}` per resume).
    """
    data_args, train_args = run.data_args, run.train_args
    check_resumable(record, data_args, train_args, run.batch_plan, run.train_blocks)
    kept, data_state, step = record["extra"] or {}, record["data_state"], record["step"]
    objective.restore_state(record["tensors"], run.rank, run.accelerator.device)
    scheduler, applied = apply_changed_settings(
        kept.get("settings"), train_args, data_args, optimizer, scheduler, step, record["path"]
    )
    history = list(kept.get("settings_history", []))
    if applied:
        history.append({"step": step, "changed": {k: list(v) for k, v in applied.items()}})
    logger.info(
        "Resumed from %s: step %d, epoch %d, update %d.",
        record["path"],
        step,
        data_state["epoch"],
        data_state["batch_in_epoch"],
    )
    return scheduler, history
