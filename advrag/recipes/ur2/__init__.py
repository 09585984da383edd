"""Recipe ``ur2``: UR²'s curated two-stage RL of a Search-R1-style agent (UR² §3).

``recipe``: the recipe class (how it departs from its paper is in its docstring); ``step``:
one update (rollout → score → update; imports torch, so loaded on first use); ``config``:
its settings.
"""

from advrag.recipes.ur2.config import UR2Config
from advrag.recipes.ur2.recipe import UR2Recipe

__all__ = ["UR2Config", "UR2Recipe"]
