"""Evaluation: the method registry, per-question scoring, result tables and training plots."""
