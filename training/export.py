"""What a finished run leaves: `loss.png`, `final/` (weights, tokenizer, model card) and
`final_metrics.json`, each written aside and renamed into place, so a kill at any moment leaves the
previous complete file or folder, or the new one.

`final/` holds the last weights, or with `load_best_model_at_end` those of the best evaluation:
`final_metrics.json` then has their metrics at the top level and under "best", the last evaluation
under "last", and the card names the step.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from hf_lm.cards import write_model_card
from hf_lm.plots import plot_loss_curves

from .state.atomic import atomic_folder, atomic_write_text, staging_path
from .state.checkpoint import load_checkpoint
from .state.resume import run_settings
from .state.stateful import CheckpointState

logger = logging.getLogger(__name__)


def write_final_folder(model, tokenizer, folder: Path, loss_png: Path | None) -> None:
    """The weights, config, model code, tokenizer files and loss curve of `final/` into `folder`
    (a staging folder: the caller renames it to `final/`; the model card goes in last)."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    for nested in sorted(p.parent for p in folder.glob("*/config.json")):  # ELECTRA's generator/
        tokenizer.save_pretrained(nested)  # so that it loads on its own (AutoTokenizer, pipelines) too
    if loss_png is not None:
        shutil.copy2(loss_png, folder / "loss.png")  # the card shows it on the Hub


def final_metrics(
    run, step: int, last_loss: float, evaluation: dict, best, guard, history: list[dict]
) -> dict:
    """`final_metrics.json`: the last (or, with a best model, the kept) evaluation and the run's totals."""
    metrics = {
        "step": step,
        "train_loss": last_loss,
        **evaluation,
        "world_size": run.world,
        "global_batch_size": run.global_batch,
        "tokens_seen": step * run.tokens_per_update,
        "seconds": run.elapsed(),
    }
    if history:
        metrics["settings_changes"] = history
    if guard.rollback:  # every rollback of the run's history, a resumed run's included
        metrics.update(
            rollbacks=len(guard.events), skipped_batches=guard.skipped_batches, rollback_log=guard.events
        )
    if best is not None and best.record is not None:
        metrics.update(best.record["metrics"])  # the top-level metrics describe final/
        metrics["best"] = {"step": best.record["step"], "metric": best.metric, **best.record["metrics"]}
        metrics["last"] = {"step": step, **evaluation}
    return metrics


def draw_loss_curve(run, csv_log, model_type: str) -> Path | None:
    """`loss.png` from `metrics.csv`'s curves (None when there is none), drawn aside then renamed."""
    curves = csv_log.curves()
    if not curves:
        return None
    final = run.output_dir / "loss.png"
    drawn = staging_path(final, keep_suffix=True)  # `.png`: the format the plot is saved in
    try:
        plot_loss_curves(curves, drawn, title=f"{model_type}: {run.data_args.dataset}")
        os.replace(drawn, final)
    except BaseException:
        drawn.unlink(missing_ok=True)
        raise
    return final


def export_run(
    run, model, csv_log, metrics: dict, evaluation: dict, best, history: list[dict], runtime: dict[str, bool]
) -> None:
    """Write `loss.png`, `final/` and `final_metrics.json` (main process only).

    Args:
        model: the plain model holding the last weights; with a best model they are replaced by
            the best's (verified against its manifest: a damaged best model fails naming its file).
        metrics: `final_metrics`' dict; evaluation: the last evaluation.
        runtime: the device-dependent settings the run chose, for the card (`card_hyperparameters`).
    """
    step = metrics["step"]
    final_eval, final_step = evaluation, step
    if best is not None and best.record is not None:
        final_eval, final_step = best.record["metrics"], best.record["step"]
    if final_step != step:
        load_checkpoint(best.path, CheckpointState(model, rng=None))
        logger.info("final/ holds the best model, of step %d (%s).", final_step, best.path)
    loss_png = draw_loss_curve(run, csv_log, model.config.model_type)
    final = run.output_dir / "final"
    with atomic_folder(final) as staging:  # an exception (or a stop) leaves final/ as it was
        write_final_folder(model, run.tokenizer, staging, loss_png)
        data_args = run.data_args
        rows, eval_results = run.objective.card_metrics(final_eval)
        write_model_card(
            run.objective.card_model(model),
            staging,
            dataset=run.description,
            tokenizer=run.tokenizer,
            metrics=rows
            | {"training steps": final_step, "training tokens seen": final_step * run.tokens_per_update}
            | best_card_rows(best, step, evaluation),
            hyperparameters=card_hyperparameters(
                run_settings(run.data_args, run.train_args),
                run.batch_plan,
                run.objective.describe(),
                runtime=runtime,
                history=history,
                fitted=run.fits_by_counting,
            ),
            training_time_s=metrics["seconds"],
            eval_results=eval_results,
            dataset_name=data_args.dataset + (f" ({data_args.config_name})" if data_args.config_name else ""),
            # the run's name, not "final"; the usage snippet's path is final/, not the staging folder
            extra={"model_name": run.output_dir.resolve().name, "model_id": final.as_posix()},
        )
    atomic_write_text(run.output_dir / "final_metrics.json", json.dumps(metrics, indent=2))


def best_card_rows(best, step: int, last: dict) -> dict[str, object]:
    """The card's rows on which weights final/ holds: the best evaluation's (and the last one's
    metric beside it), or none when the last weights are kept."""
    if best is None or best.record is None:
        return {}
    return {
        "weights kept": f"the best evaluation by {best.metric}, at step {best.record['step']} of {step}",
        f"last evaluation (step {step}): {best.metric}": last.get(best.metric),
    }


def card_hyperparameters(
    settings: dict,
    batch_plan,
    objective: str,
    runtime: dict[str, bool] | None = None,
    history: list[dict] | None = None,
    fitted: bool = False,
) -> dict[str, object]:
    """The training settings a reader needs to reproduce the run, for the model card's table.

    `settings`: the run's arguments as its checkpoints record them (`run_settings`), so the card
    shows what was recorded. `batch_plan`: the run's `BatchPlan` (the batch rows and the data
    sampling). `objective`: what the objective trains (`Objective.describe`).
    `runtime`: the device-dependent settings the run chose (fused AdamW, TF32), name -> on/off.
    `history`: settings changed when the run was resumed (`{"step", "changed": {name: [old, new]}}`);
    the table then shows the values the run ended with and, in one row, the earlier ones.
    `fitted`: an n-gram model counted in one pass (`ngram_fit`), which no optimizer setting touched.
    """
    if fitted:
        return {
            "fitting": "n-gram counts of the training blocks, in one pass (no optimizer, no gradient steps)",
            "block size (tokens)": batch_plan.block_size,
            "seed": settings["seed"],
            "objective": objective,
        }
    changes = "; ".join(
        f"{name} {old} until step {entry['step']}, then {new}"
        for entry in history or []
        for name, (old, new) in entry["changed"].items()
    )
    seconds = settings.get("max_train_seconds")  # a budget may end the run before max_steps
    return ({"settings changed on resume": changes} if changes else {}) | {
        "training steps (optimizer updates)": settings["max_steps"]
        if seconds is None
        else f"at most {settings['max_steps']:,}",
        **(
            {}
            if seconds is None
            else {"wall-clock budget": f"{seconds:g} s of training (the steps done: under Evaluation)"}
        ),
        "per-device batch size (blocks)": batch_plan.per_device,
        "gradient accumulation steps": batch_plan.accum,
        "world size (processes)": batch_plan.world,
        "global batch size (blocks)": batch_plan.global_batch,
        "block size (tokens)": batch_plan.block_size,
        "tokens per update": batch_plan.global_batch * batch_plan.block_size,
        "optimizer": f"AdamW (betas {settings['adam_beta1']}, {settings['adam_beta2']})",
        "peak learning rate": settings["learning_rate"],
        "learning-rate schedule": settings["lr_scheduler"]
        + (f" to {settings['min_lr_rate']:g} x peak" if settings["min_lr_rate"] else ""),
        "warmup steps": settings["warmup_steps"],
        "weight decay (matrices only)": settings["weight_decay"],
        "gradient clipping (max norm)": settings["max_grad_norm"] or "off",
        "precision": "fp32"
        if settings["mixed_precision"] == "no"
        else f"{settings['mixed_precision']} mixed",
        "seed": settings["seed"],
        "data sampling": batch_plan.describe(),
        "torch.compile": (
            f"{settings['torch_compile_backend']}, mode {settings['torch_compile_mode'] or 'default'}"
            if settings["torch_compile"]
            else "off"
        ),
        **{name: "on" if value else "off" for name, value in (runtime or {}).items()},
        "objective": objective,
    }
