"""One Search-R1-style agent trained alone, the part the ``grpo`` and ``ur2`` recipes share:
its settings (``config``), its recipe class without a name (``recipe``: warm-up, build, the
update, REX-RAG's exploration when the config asks) and the plain update (``step``)."""

from advrag.recipes.search_agent.config import SearchAgentConfig
from advrag.recipes.search_agent.recipe import SearchAgentRecipe

__all__ = ["SearchAgentConfig", "SearchAgentRecipe"]
