"""hf_lm's extractive question-answering pipeline, registered with `pipeline()` by `import hf_lm`.

The pipeline itself is shipped code (`hf_lm/models/hflm_pipelines.py`), so folders saved from a
question-answering head carry it; this module is the entry point that registers and re-exports it.
"""

from .models.hflm_pipelines import (
    QA_TASK,
    QA_TASK_ALIAS,
    HfLmQuestionAnsweringPipeline,
    register_pipelines,
)

register_pipelines()

__all__ = ["HfLmQuestionAnsweringPipeline", "QA_TASK", "QA_TASK_ALIAS", "register_pipelines"]
