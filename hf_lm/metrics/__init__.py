"""Evaluation metrics for hf_lm language models (not shipped model code).

`sliding_window_perplexity` is the core; `hf_lm/metrics/perplexity/` is the same computation as an
`evaluate` metric module (`evaluate.load("path/to/hf_lm/metrics/perplexity")`).
"""

from .sliding_window import sliding_window_perplexity, sliding_windows

__all__ = ["sliding_window_perplexity", "sliding_windows"]
