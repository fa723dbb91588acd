"""What a resumed run may change, and how the change is applied and reported.

A checkpoint records the data and training arguments of the run that wrote it. A resume compares
them with its own:

- **Optimizer and schedule settings** (`SCHEDULE_SETTINGS`, `OPTIMIZER_SETTINGS`) may change, the
  way "lower the learning rate, then resume" asks them to: the optimizer's groups take the new
  values, the schedule is rebuilt from the new settings and moved to the checkpoint's step, and the
  change is logged and recorded (`history`), so the model card and `final_metrics.json` report
  what actually trained.
- **What fixes the data and the objective** (`FIXED_SETTINGS`: the corpus, its split and
  tokenization, the block size, the objective and its masking, the best-model metric) may not: the
  resume is refused with every difference listed. (The model config, the global batch size, the
  seed and the data order are checked where the checkpoint is loaded.)
- Everything else (evaluation, logging and saving cadence, precision, compile, trackers, the
  rollback guard) is the new run's choice.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings

logger = logging.getLogger(__name__)

SCHEDULE_SETTINGS = ("learning_rate", "lr_scheduler", "warmup_steps", "min_lr_rate", "max_steps")
OPTIMIZER_SETTINGS = ("weight_decay", "adam_beta1", "adam_beta2", "max_grad_norm")
FIXED_SETTINGS = (
    # data: what the blocks are and in which order they come
    "dataset", "config_name", "split", "text_column", "sample_by", "eval_dataset", "eval_fraction",
    "eval_split", "max_documents", "max_chars", "block_size", "tokenizer_name_or_path", "tokenizer_kind",
    "vocab_size", "tokenizer_train_documents", "tokenizer_min_frequency", "document_mask", "max_eval_blocks",
    # what is trained on them
    "objective", "mlm_probability", "masking", "tbptt", "scheduled_sampling", "scheduled_sampling_k",
    "scheduled_sampling_c", "scheduled_sampling_min", "metric_for_best_model", "greater_is_better",
)  # fmt: skip


def run_settings(*args_objects) -> dict:
    """The settings a checkpoint records: every field of the argument dataclasses, JSON-ready."""
    settings = {}
    for obj in args_objects:
        for key, value in dataclasses.asdict(obj).items():
            settings[key] = (
                value if isinstance(value, (int, float, str, bool, type(None), list)) else str(value)
            )
    return settings


def settings_changes(saved: dict | None, current: dict) -> tuple[dict, dict]:
    """`(applied, refused)`: each `{name: (saved, current)}` for the settings that differ."""
    if not saved:
        return {}, {}
    differing = {k: (saved[k], v) for k, v in current.items() if k in saved and saved[k] != v}
    applied = {k: d for k, d in differing.items() if k in SCHEDULE_SETTINGS + OPTIMIZER_SETTINGS}
    refused = {k: d for k, d in differing.items() if k in FIXED_SETTINGS}
    return applied, refused


def apply_resume_settings(
    saved: dict | None, train_args, data_args, optimizer, scheduler, step: int, checkpoint
):
    """Check a resume's settings against the checkpoint's and apply the optimizer and schedule changes.

    Args:
        saved: the checkpoint's `run_settings` (None for checkpoints written before they were kept).
        optimizer, scheduler: restored from the checkpoint.
        step: the checkpoint's step.

    Returns:
        `(scheduler, applied)`: the scheduler to use (rebuilt when the schedule changed) and
        `{name: (old, new)}` of the changes applied.

    Raises:
        ValueError: a setting that fixes the data or the objective changed (all of them listed), or
            `max_steps` is below the checkpoint's step.
    """
    from training.train import build_scheduler  # the loop's own schedule (no import cycle at load)

    if train_args.max_steps < step:
        raise ValueError(
            f"Cannot resume {checkpoint}: it is at step {step}, past max_steps={train_args.max_steps}. "
            f"Raise max_steps above {step} to train further."
        )
    if saved is None:
        logger.warning(
            "%s records no run settings (an older checkpoint): changes cannot be checked.", checkpoint
        )
        return scheduler, {}
    applied, refused = settings_changes(saved, run_settings(data_args, train_args))
    if refused:
        listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in refused.items())
        raise ValueError(
            f"Cannot resume {checkpoint}: these settings fix the data or the objective and differ from the "
            f"checkpoint's ({listed}; checkpoint -> this run). Resume with the checkpoint's values, or start a "
            "new run in a fresh output_dir."
        )
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
