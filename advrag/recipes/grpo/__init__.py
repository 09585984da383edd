"""Recipe ``grpo``: GRPO (or REINFORCE++/Dr.GRPO) on one Search-R1-style agent.

``recipe``: the recipe class (the agent and its update are ``recipes.search_agent``'s);
``config``: its settings; ``verl``: its reward on verl.
"""

from advrag.recipes.grpo.config import GrpoConfig
from advrag.recipes.grpo.recipe import GrpoRecipe

__all__ = ["GrpoConfig", "GrpoRecipe"]
