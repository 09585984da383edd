"""Recipe ``arr``: ARR's Reasoner and Verifier trained jointly (ARR §4.2).

``recipe``: the recipe class (how it departs from its paper is in its docstring); ``step``:
one update (rollout → score → update; imports torch, so loaded on first use); ``config``:
its settings.
"""

from advrag.recipes.arr.config import ArrConfig
from advrag.recipes.arr.recipe import ArrRecipe

__all__ = ["ArrConfig", "ArrRecipe"]
