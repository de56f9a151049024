"""Drafter training: the target's own replies as data, the training step, the training run."""
