"""The `evaluate` ROUGE metric module (rouge-score); load it with `evaluate.load(<this folder>)`."""
