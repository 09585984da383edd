"""advrag: retrieval-augmented LLM agents trained with adversarial RL.

Layers (imports point inward only): flows → tasks → {recipes, evaluation,
registry, ops} → {engines, retrieval, curation, datasets, models} → agents →
core; config and common are leaves anyone may import. Nothing runs at import
time. docs/architecture.md has the whole picture.
"""

__version__ = "0.1.0"
