"""hf_lm's seq2seq pipelines (text-to-text, summarization, translation), registered by `import hf_lm`.

The pipelines themselves are shipped code (`hf_lm/models/hflm_pipelines_seq2seq.py`), so folders
saved from an encoder-decoder generation head carry them; this module is the entry point that
registers and re-exports them.
"""

from .models.hflm_pipelines_seq2seq import (  # noqa: F401  (_lengths_up_to_eos: for the tests)
    DEFAULT_TRANSLATION_TEMPLATE,
    SEQ2SEQ_PIPELINES,
    SUMMARIZATION_TASK,
    TEXT2TEXT_TASK,
    TRANSLATION_TASK,
    HfLmSummarizationPipeline,
    HfLmText2TextGenerationPipeline,
    HfLmTranslationPipeline,
    _lengths_up_to_eos,
    check_generation_fits,
    device_memory_bytes,
    generation_memory_bytes,
    language_name,
    parse_translation_task,
    position_limit,
    register_pipelines,
    register_translation_task,
)

register_pipelines()
