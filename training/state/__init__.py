"""The state of a training run, saved and restored: checkpoints (`checkpoint`, their folders and
manifests in `folders`), the parts a checkpoint holds (`stateful`, `rng`), resuming (`resume`),
the best model (`best`), divergence and rollbacks (`divergence`), and all-or-nothing writes
(`atomic`)."""
