"""The `evaluate` BLEU metric module (sacrebleu); load it with `evaluate.load(<this folder>)`."""
