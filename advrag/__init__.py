"""advrag: retrieval-augmented LLM agents trained with adversarial RL.

Layers (imports point down only): cli → flows → tasks → recipes → {engines,
retrieval, curation, models, evaluation, registry, ops} → {agents, config} →
datasets → {core, common}; siblings in braces import none of each other, and
core and common nothing from the project. pyproject.toml's import-linter
contract enforces it (`make test`). Nothing runs at import time.
docs/architecture.md has the whole picture.
"""

__version__ = "0.1.0"
