"""REX-RAG (probes, trajectory filter, policy correction) as an ``exploration:`` of the
``grpo`` and ``ur2`` recipes, also composed into ``gar``'s and ``arr``'s reasoners: its
settings, its update step and the state a recipe carries to explore."""

from advrag.recipes.rex_rag.config import RexExploration

__all__ = ["RexExploration"]
