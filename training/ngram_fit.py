"""Fitting an n-gram model: counting, in one pass over the training blocks, not gradient descent.

No optimizer, steps or checkpoints: the counts are the model (`HfLmNGramForCausalLM.fit`). The fitted
model is evaluated as a causal LM and written to `final/` as the gradient loop writes its models.
"""

from __future__ import annotations

import logging
import time

from tqdm.auto import tqdm

from hf_lm.models.hflm_modeling_ngram import HfLmNGramForCausalLM

from .export import final_metrics
from .state.divergence import DivergenceGuard

logger = logging.getLogger(__name__)


def fit_ngram(model: HfLmNGramForCausalLM, train_blocks, streaming: bool) -> HfLmNGramForCausalLM:
    """Count the n-grams of the training blocks in one streaming pass (`HfLmNGramForCausalLM.fit`).

    The in-memory blocks are the packed corpus in order, so they are counted as one sequence and
    n-grams span block boundaries as they span the text; streamed blocks are counted block by block.
    """
    start = time.perf_counter()
    if streaming:
        sequences = (block["input_ids"] for block in train_blocks.epoch(0))
    else:
        sequences = [train_blocks["input_ids"].reshape(-1)]
    fitted = HfLmNGramForCausalLM.fit(tqdm(sequences, desc="counting n-grams", unit="seq"), model.config)
    logger.info(
        "Fitted the order-%d %s n-gram model in %.1f s: %s n-grams by order.",
        fitted.config.order,
        fitted.config.smoothing,
        time.perf_counter() - start,
        fitted.config.num_ngrams,
    )
    return fitted


def fit_ngram_run(run):
    """Fit the run's n-gram model and evaluate it (`metrics.csv` gets one row, at step 0).

    Returns:
        `(model, csv_log, metrics, evaluation)` for the final outputs (`training.run.setup.finish_run`).
    """
    model = fit_ngram(run.model, run.train_blocks, run.batch_plan.streaming).to(run.accelerator.device)
    run.init_trackers()
    csv_log = run.csv_log(resume_step=None)
    evaluation = run.objective.evaluate(model, run.eval_blocks, run.accelerator)
    if run.accelerator.is_main_process:
        csv_log.write({"step": 0, "epoch": 1, **evaluation, "seconds": run.elapsed()})
    metrics = final_metrics(run, 0, float("nan"), evaluation, None, DivergenceGuard(run.train_args), [])
    return model, csv_log, metrics, evaluation
