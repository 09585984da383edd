"""REX-RAG (probes, trajectory filter, policy correction) as an ``exploration:`` of the
``grpo`` and ``ur2`` recipes: its settings and its update step."""

from advrag.recipes.rex_rag.config import RexExploration

__all__ = ["RexExploration"]
