"""Recipe ``grpo``: GRPO (or REINFORCE++/Dr.GRPO) on one Search-R1-style agent.

``recipe``: the recipe class (how it departs from its paper is in its docstring); ``step``:
one update (rollout → score → update; imports torch, so loaded on first use); ``config``:
its settings.
"""

from advrag.recipes.grpo.config import GrpoConfig
from advrag.recipes.grpo.recipe import GrpoRecipe

__all__ = ["GrpoConfig", "GrpoRecipe"]
