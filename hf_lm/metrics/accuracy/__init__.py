"""The `evaluate` accuracy/F1 metric module; load it with `evaluate.load(<this folder>)`."""
