"""The `evaluate` perplexity metric module; load it with `evaluate.load(<this folder>)`."""
