"""Training utilities for hf_lm (tokenizers, data, the `make demo` job); never imported by model code."""
