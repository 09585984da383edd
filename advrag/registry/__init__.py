"""The model registry's promotion gate (pure decisions; the MLflow calls live in tasks/)."""
