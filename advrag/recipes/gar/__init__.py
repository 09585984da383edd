"""Recipe ``gar``: GAR's reasoner and slice discriminator trained jointly (GAR §3).

``recipe``: the recipe class (how it departs from its paper is in its docstring); ``step``:
one update (rollout → score → update; imports torch, so loaded on first use); ``config``:
its settings and its discriminator's SFT config (``DiscriminatorSFTConfig``).
"""

from advrag.recipes.gar.config import DiscriminatorSFTConfig, GarConfig
from advrag.recipes.gar.recipe import GarRecipe

__all__ = ["DiscriminatorSFTConfig", "GarConfig", "GarRecipe"]
