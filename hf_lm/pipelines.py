"""hf_lm's extractive question-answering pipeline, registered with `pipeline()` by `import hf_lm`,
and the checks it adds to transformers' `fill-mask` pipeline.

The QA pipeline itself is shipped code (`hf_lm/models/hflm_pipelines.py`), so folders saved from a
question-answering head carry it; this module is the entry point that registers and re-exports it.
"""

from __future__ import annotations

from transformers.pipelines import PIPELINE_REGISTRY, FillMaskPipeline

from .models.hflm_inputs import (
    check_unicode_text,
)
from .models.hflm_pipelines import (
    QA_TASK,
    QA_TASK_ALIAS,
    HfLmQuestionAnsweringPipeline,
    register_pipelines,
)

FILL_MASK_TASK = "fill-mask"


class HfLmFillMaskPipeline(FillMaskPipeline):
    """transformers' `fill-mask` pipeline, with `top_k` checked and capped at the vocabulary.

    transformers caps `top_k` at the number of `targets`, but passes a `top_k` above the
    vocabulary to `torch.topk`, whose "selected index k out of range" names neither. Here such a
    `top_k` gives every token of the vocabulary, best first (as a `top_k` above the targets gives
    every target); one that is not a positive integer, and an input that is not valid Unicode (a
    lone surrogate), are refused by name. Results are otherwise transformers' own.
    """

    def _sanitize_parameters(self, top_k=None, targets=None, tokenizer_kwargs=None):
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"`top_k` must be a positive integer, got {top_k!r}.")
        return super()._sanitize_parameters(top_k=top_k, targets=targets, tokenizer_kwargs=tokenizer_kwargs)

    def preprocess(self, inputs, *args, **kwargs):
        if isinstance(inputs, str):
            check_unicode_text(inputs, "The input")
        return super().preprocess(inputs, *args, **kwargs)

    def postprocess(self, model_outputs, top_k=5, target_ids=None):
        vocabulary = model_outputs["logits"].shape[-1]  # (1, T, V)
        return super().postprocess(model_outputs, top_k=min(top_k, vocabulary), target_ids=target_ids)


def register_fill_mask() -> None:
    """Make `HfLmFillMaskPipeline` the `fill-mask` task's class (idempotent; `import hf_lm` calls it).

    Only transformers' own class is replaced: a `fill-mask` pipeline someone else registered stays.
    """
    task = PIPELINE_REGISTRY.supported_tasks.get(FILL_MASK_TASK)
    impl = task.get("impl") if task is not None else None
    # transformers names its classes by dotted path, imported when a pipeline is made
    if impl is FillMaskPipeline or impl == f"{FillMaskPipeline.__module__}.{FillMaskPipeline.__qualname__}":
        task["impl"] = HfLmFillMaskPipeline


register_pipelines()
register_fill_mask()

__all__ = [
    "HfLmFillMaskPipeline",
    "HfLmQuestionAnsweringPipeline",
    "QA_TASK",
    "QA_TASK_ALIAS",
    "register_fill_mask",
    "register_pipelines",
]
